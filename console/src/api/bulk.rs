//! `POST /tenants/{tenant}/tasks/bulk`: pause, resume, trigger or delete up to 500 tasks, one
//! result per task. `POST /tenants/{tenant}/runs/bulk`: cancel or re-run up to 500 runs, one
//! result per run.

use actix_web::{post, web};
use mthpt_engine::run::RunId;
use mthpt_engine::task::TaskId;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiResult, Problem};
use crate::service::Services;
use crate::service::bulk::{self, BulkAction, RunBulkAction};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(bulk_tasks).service(bulk_runs);
}

/// One action and the tasks it applies to.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    pub action: BulkAction,
    /// 1 to 500 task ids.
    pub task_ids: Vec<i64>,
}

/// What happened to one task.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BulkItem {
    pub task_id: i64,
    /// The HTTP status a single request would have answered.
    pub status: u16,
    /// The run a trigger created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<i64>,
    /// The error code (`not_found`, `version_conflict`, …) when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Results in request order.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BulkResponse {
    pub results: Vec<BulkItem>,
    pub succeeded: usize,
    pub failed: usize,
}

/// Applies one action to many tasks, each on its own: a task that fails does not stop the
/// others. Triggering and pausing need the operate right, deleting the administer right.
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path)), request_body = BulkRequest, responses(
    (status = 200, body = BulkResponse),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 422, description = "no task or more than 500", body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/tasks/bulk")]
async fn bulk_tasks(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    body: JsonBody<BulkRequest>,
) -> ApiResult<web::Json<BulkResponse>> {
    let ids: Vec<TaskId> = body.task_ids.iter().copied().map(TaskId).collect();
    let outcomes = bulk::bulk(&services, &caller, &tenant, body.action, &ids).await?;
    let results: Vec<BulkItem> = outcomes
        .into_iter()
        .map(|o| match o.error {
            None => BulkItem {
                task_id: o.task_id.0,
                status: 200,
                run_id: o.run_id.map(|r| r.0),
                code: None,
                detail: None,
            },
            Some((code, detail)) => BulkItem {
                task_id: o.task_id.0,
                status: code.status(),
                run_id: None,
                code: Some(code.to_string()),
                detail: Some(detail),
            },
        })
        .collect();
    let failed = results.iter().filter(|r| r.code.is_some()).count();
    Ok(web::Json(BulkResponse {
        succeeded: results.len() - failed,
        failed,
        results,
    }))
}

/// One action and the runs it applies to.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunBulkRequest {
    pub action: RunBulkAction,
    /// 1 to 500 run ids.
    pub run_ids: Vec<i64>,
}

/// What happened to one run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunBulkItem {
    pub run_id: i64,
    /// The HTTP status a single request would have answered.
    pub status: u16,
    /// The run a re-run created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_run_id: Option<i64>,
    /// The error code (`not_found`, `conflict`, …) when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Results in request order.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunBulkResponse {
    pub results: Vec<RunBulkItem>,
    pub succeeded: usize,
    pub failed: usize,
}

/// Cancels or re-runs many runs, each on its own (its own transaction and audit entry): a run
/// that fails (already finished: 409; unknown: 404) does not stop the others. Needs the
/// operate right.
#[utoipa::path(tag = "runs", params(("tenant" = String, Path)), request_body = RunBulkRequest, responses(
    (status = 200, body = RunBulkResponse),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 422, description = "no run or more than 500", body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/runs/bulk")]
async fn bulk_runs(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    body: JsonBody<RunBulkRequest>,
) -> ApiResult<web::Json<RunBulkResponse>> {
    let ids: Vec<RunId> = body.run_ids.iter().copied().map(RunId).collect();
    let outcomes = bulk::bulk_runs(&services, &caller, &tenant, body.action, &ids).await?;
    let results: Vec<RunBulkItem> = outcomes
        .into_iter()
        .map(|o| match o.error {
            None => RunBulkItem {
                run_id: o.id,
                status: 200,
                new_run_id: o.made,
                code: None,
                detail: None,
            },
            Some((code, detail)) => RunBulkItem {
                run_id: o.id,
                status: code.status(),
                new_run_id: None,
                code: Some(code.to_string()),
                detail: Some(detail),
            },
        })
        .collect();
    let failed = results.iter().filter(|r| r.code.is_some()).count();
    Ok(web::Json(RunBulkResponse {
        succeeded: results.len() - failed,
        failed,
        results,
    }))
}

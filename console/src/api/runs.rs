//! `/tenants/{tenant}/runs`: filtered listing with a cursor, detail, cancel and re-run.

use actix_web::{HttpRequest, HttpResponse, get, post, web};
use chrono::{DateTime, Utc};
use mthpt_engine::app::ExecutorId;
use mthpt_engine::run::{Run, RunFilter, RunId, RunState, TriggerKind};
use mthpt_engine::task::TaskId;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::body::RawBody;
use super::error::{ApiError, ApiResult, Problem};
use super::{LimitQuery, at};
use crate::service::Services;
use crate::service::runs::{self, RunDetail};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_runs)
        .service(get_run)
        .service(cancel_run)
        .service(rerun_run);
}

/// A run as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunBody {
    pub id: i64,
    pub task_id: i64,
    /// The occurrence this run belongs to (the same for every attempt).
    pub scheduled_at: DateTime<Utc>,
    /// When this attempt was due to fire.
    pub due_at: DateTime<Utc>,
    pub attempt: i32,
    pub shard_index: i32,
    pub shard_total: i32,
    /// schedule, manual, retry, chain or recovery.
    pub trigger: String,
    /// pending, claimed, running, succeeded, failed, timed_out, lost, skipped or cancelled.
    pub state: String,
    pub priority: i32,
    pub parent_run_id: Option<i64>,
    /// Parameters of this run only (manual triggers; any JSON value); absent: the task's.
    pub params: Option<serde_json::Value>,
    pub triggered_by: Option<String>,
    pub executor_id: Option<i64>,
    pub dispatch_attempts: i32,
    pub created_at: DateTime<Utc>,
    pub claimed_at: Option<DateTime<Utc>>,
    pub dispatched_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub deadline_at: Option<DateTime<Utc>>,
    /// 0.0 to 1.0, as last reported by the handler.
    pub progress: Option<f64>,
    pub progress_message: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub output: Option<serde_json::Value>,
    pub error: Option<String>,
}

impl From<Run> for RunBody {
    fn from(r: Run) -> Self {
        let opt = |t: Option<i64>| t.map(at);
        Self {
            id: r.id.0,
            task_id: r.task_id.0,
            scheduled_at: at(r.scheduled_at),
            due_at: at(r.due_at),
            attempt: r.attempt,
            shard_index: r.shard_index,
            shard_total: r.shard_total,
            trigger: r.trigger_kind.to_string(),
            state: r.state.to_string(),
            priority: r.priority,
            parent_run_id: r.parent_run_id.map(|p| p.0),
            params: r.params.map(|p| p.0),
            triggered_by: r.triggered_by,
            executor_id: r.executor_id.map(|e| e.0),
            dispatch_attempts: r.dispatch_attempts,
            created_at: at(r.created_at),
            claimed_at: opt(r.claimed_at),
            dispatched_at: opt(r.dispatched_at),
            started_at: opt(r.started_at),
            finished_at: opt(r.finished_at),
            deadline_at: opt(r.deadline_at),
            progress: r.progress,
            progress_message: r.progress_message,
            output: r.output.map(|o| o.0),
            error: r.error,
        }
    }
}

/// One step of a run's life.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TimelineStep {
    /// scheduled, created, due, claimed, dispatched, started or finished.
    pub event: String,
    pub at: DateTime<Utc>,
}

/// A run with its timeline, attempt chain and log tail.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunDetailBody {
    #[serde(flatten)]
    pub run: RunBody,
    pub task_name: String,
    pub timeline: Vec<TimelineStep>,
    /// Every attempt (and shard) of the same occurrence, this one included.
    pub attempts: Vec<RunBody>,
    /// The last lines the handler logged (at most 64 KiB).
    pub log_tail: String,
}

impl From<RunDetail> for RunDetailBody {
    fn from(d: RunDetail) -> Self {
        Self {
            log_tail: d.run.log_tail.clone(),
            timeline: d
                .timeline
                .into_iter()
                .map(|(event, t)| TimelineStep {
                    event: event.to_owned(),
                    at: at(t),
                })
                .collect(),
            attempts: d.attempts.into_iter().map(RunBody::from).collect(),
            task_name: d.task_name,
            run: d.run.into(),
        }
    }
}

/// A page of runs.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunPage {
    pub items: Vec<RunBody>,
    /// Pass as `cursor` for the next (older) page; absent on the last page. Pages stay
    /// consistent while new runs are created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Filters of the run list; all optional, combined with AND.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunQuery {
    /// Only this task's runs.
    pub task: Option<i64>,
    /// pending, claimed, running, succeeded, failed, timed_out, lost, skipped, cancelled.
    pub state: Option<String>,
    /// schedule, manual, retry, chain, recovery.
    pub trigger: Option<String>,
    /// Only runs sent to this executor instance.
    pub executor: Option<i64>,
    /// Scheduled at or after (RFC 3339).
    pub scheduled_from: Option<DateTime<Utc>>,
    /// Scheduled before (RFC 3339).
    pub scheduled_to: Option<DateTime<Utc>>,
    /// Finished at or after (RFC 3339).
    pub finished_from: Option<DateTime<Utc>>,
    /// Finished before (RFC 3339).
    pub finished_to: Option<DateTime<Utc>>,
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

impl RunQuery {
    fn filter(&self) -> ApiResult<RunFilter> {
        let ms = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_millis());
        Ok(RunFilter {
            task_id: self.task.map(TaskId),
            state: self
                .state
                .as_deref()
                .map(str::parse::<RunState>)
                .transpose()
                .map_err(|e| ApiError::field("state", e.to_string()))?,
            trigger_kind: self
                .trigger
                .as_deref()
                .map(str::parse::<TriggerKind>)
                .transpose()
                .map_err(|e| ApiError::field("trigger", e.to_string()))?,
            executor_id: self.executor.map(ExecutorId),
            scheduled_from: ms(self.scheduled_from),
            scheduled_before: ms(self.scheduled_to),
            finished_from: ms(self.finished_from),
            finished_before: ms(self.finished_to),
            ..Default::default()
        })
    }
}

type RunPath = web::Path<(String, i64)>;

/// A tenant's runs, newest first.
#[utoipa::path(tag = "runs", params(("tenant" = String, Path), RunQuery, LimitQuery), responses(
    (status = 200, body = RunPage),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/runs")]
async fn list_runs(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    query: web::Query<RunQuery>,
    limit: web::Query<LimitQuery>,
) -> ApiResult<web::Json<RunPage>> {
    let limit = limit.into_inner().get()?;
    let filter = query.filter()?;
    let page = runs::list(
        &services,
        &caller,
        &tenant,
        filter,
        query.cursor.as_deref(),
        limit,
    )
    .await?;
    Ok(web::Json(RunPage {
        items: page.items.into_iter().map(RunBody::from).collect(),
        next_cursor: page.next_cursor,
    }))
}

/// One run: timeline, attempt chain, progress, output, error and log tail.
#[utoipa::path(tag = "runs", params(("tenant" = String, Path), ("id" = i64, Path)), responses(
    (status = 200, body = RunDetailBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/runs/{id}")]
async fn get_run(
    services: web::Data<Services>,
    caller: Caller,
    path: RunPath,
) -> ApiResult<web::Json<RunDetailBody>> {
    let (tenant, id) = path.into_inner();
    Ok(web::Json(
        runs::get(&services, &caller, &tenant, RunId(id))
            .await?
            .into(),
    ))
}

/// Why a run is cancelled.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    pub reason: Option<String>,
}

/// Cancels a run that has not finished: it is `cancelled` at once. A pending or claimed run
/// not sent yet never starts; the executor instance of one already sent is told to cancel it
/// (its handler sees the cancellation) within about a watchdog interval, and the result it
/// reports afterwards is ignored.
#[utoipa::path(tag = "runs", params(("tenant" = String, Path), ("id" = i64, Path)),
    request_body(content = Option<CancelBody>), responses(
    (status = 200, body = RunBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "already finished", body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/runs/{id}/cancel")]
async fn cancel_run(
    req: HttpRequest,
    services: web::Data<Services>,
    caller: Caller,
    path: RunPath,
    body: RawBody,
) -> ApiResult<web::Json<RunBody>> {
    let (tenant, id) = path.into_inner();
    let reason = body
        .optional_json::<CancelBody>(&req)?
        .and_then(|b| b.reason);
    let run = runs::cancel(&services, &caller, &tenant, RunId(id), reason.as_deref()).await?;
    Ok(web::Json(run.into()))
}

/// Runs the run's task again now with the same parameters (a new manual run).
#[utoipa::path(tag = "runs", params(("tenant" = String, Path), ("id" = i64, Path)), responses(
    (status = 201, body = RunBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/runs/{id}/rerun")]
async fn rerun_run(
    services: web::Data<Services>,
    caller: Caller,
    path: RunPath,
) -> ApiResult<HttpResponse> {
    let (tenant, id) = path.into_inner();
    let run = runs::rerun(&services, &caller, &tenant, RunId(id)).await?;
    Ok(HttpResponse::Created().json(RunBody::from(run)))
}

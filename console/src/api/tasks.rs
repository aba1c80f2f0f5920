//! `/tenants/{tenant}/tasks`: create, read, update (`If-Match` → 412 on a stale version),
//! delete, pause, resume and trigger tasks.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, delete, get, post, put, web};
use chrono::{DateTime, Utc};
use mthpt_engine::task::{TaskFilter, TaskId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::body::{JsonBody, RawBody, from_value};
use super::error::{ApiError, ApiResult, Problem};
use super::runs::RunBody;
use super::{LimitQuery, at};
use crate::service::Services;
use crate::service::runs::{cursor_after, parse_cursor};
use crate::service::tasks::{self, TaskSpec, TaskView};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_tasks)
        .service(create_task)
        .service(get_task)
        .service(update_task)
        .service(delete_task)
        .service(pause_task)
        .service(resume_task)
        .service(trigger_task);
}

/// A task as the API shows it: its spec (every field spelled out) and what the server keeps.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskBody {
    pub id: i64,
    /// Changes with every edit; send it back in `If-Match` to update.
    pub version: i64,
    #[serde(flatten)]
    pub spec: TaskSpec,
    /// Scheduled occurrences materialised so far (counts toward `max_fires`).
    pub fires_scheduled: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl TryFrom<TaskView> for TaskBody {
    type Error = ApiError;

    fn try_from(v: TaskView) -> ApiResult<Self> {
        Ok(Self {
            spec: TaskSpec::of(&v.task, &v.app_name)?,
            id: v.task.id.0,
            version: v.task.version,
            fires_scheduled: v.task.fires_scheduled,
            created_at: at(v.task.created_at),
            updated_at: at(v.task.updated_at),
        })
    }
}

/// A task answer with its version as the `ETag`.
fn with_etag(mut res: actix_web::HttpResponseBuilder, view: TaskView) -> ApiResult<HttpResponse> {
    let body = TaskBody::try_from(view)?;
    res.insert_header((header::ETAG, format!("\"{}\"", body.version)));
    Ok(res.json(body))
}

/// The version an `If-Match` header names (`"3"`, `W/"3"` or `3`); `None` without one.
pub fn if_match(req: &HttpRequest) -> ApiResult<Option<i64>> {
    let Some(value) = req.headers().get(header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    let text = text.strip_prefix("W/").unwrap_or(text).trim_matches('"');
    text.parse().map(Some).map_err(|_| {
        ApiError::field(
            "If-Match",
            "must be the task's version as returned in its ETag, e.g. \"3\"",
        )
    })
}

/// The fields of a [`TaskBody`] the server keeps; a body sent back for an update may carry
/// them (they are ignored, except `version`).
const READ_ONLY: [&str; 5] = [
    "id",
    "version",
    "fires_scheduled",
    "created_at",
    "updated_at",
];

/// The spec in an update body, and the version it names (if any).
fn edited_spec(mut body: serde_json::Value) -> ApiResult<(TaskSpec, Option<i64>)> {
    let mut version = None;
    if let Some(fields) = body.as_object_mut() {
        if let Some(v) = fields.get("version") {
            version = Some(
                v.as_i64()
                    .ok_or_else(|| ApiError::field("version", "must be an integer"))?,
            );
        }
        for key in READ_ONLY {
            fields.remove(key);
        }
    }
    Ok((from_value(body)?, version))
}

/// A page of tasks and the cursor of the next one.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskPage {
    pub items: Vec<TaskBody>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Filters of the task list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TaskQuery {
    /// Only paused (`true`) or active (`false`) tasks.
    pub paused: Option<bool>,
    /// Tasks whose name contains this text.
    pub name: Option<String>,
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

type TaskPath = web::Path<(String, i64)>;

/// A tenant's tasks, in creation order.
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path), TaskQuery, LimitQuery), responses(
    (status = 200, body = TaskPage),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/tasks")]
async fn list_tasks(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    query: web::Query<TaskQuery>,
    limit: web::Query<LimitQuery>,
) -> ApiResult<web::Json<TaskPage>> {
    let limit = limit.into_inner().get()?;
    let query = query.into_inner();
    let filter = TaskFilter {
        paused: query.paused,
        name_contains: query.name,
        after_id: query
            .cursor
            .as_deref()
            .map(parse_cursor)
            .transpose()?
            .map(TaskId),
        limit: Some(limit),
        ..Default::default()
    };
    let views = tasks::list(&services, &caller, &tenant, &filter).await?;
    let full = views.len() as i64 >= limit;
    let next_cursor = full
        .then(|| views.last().map(|v| cursor_after(v.task.id.0)))
        .flatten();
    let items = views
        .into_iter()
        .map(TaskBody::try_from)
        .collect::<ApiResult<_>>()?;
    Ok(web::Json(TaskPage { items, next_cursor }))
}

/// Creates a task; its first occurrence is scheduled at once (unless it is created paused).
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path)), request_body = TaskSpec, responses(
    (status = 201, body = TaskBody, headers(("ETag" = String))),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "name taken", body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
    (status = 429, description = "a tenant quota is reached: `quota` and `limit` name it", body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/tasks")]
async fn create_task(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    body: JsonBody<TaskSpec>,
) -> ApiResult<HttpResponse> {
    let view = tasks::create(&services, &caller, &tenant, &body).await?;
    let mut res = HttpResponse::Created();
    res.insert_header((
        header::LOCATION,
        format!("/api/v1/tenants/{tenant}/tasks/{}", view.task.id),
    ));
    with_etag(res, view)
}

/// One task.
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path), ("id" = i64, Path)), responses(
    (status = 200, body = TaskBody, headers(("ETag" = String))),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/tasks/{id}")]
async fn get_task(
    services: web::Data<Services>,
    caller: Caller,
    path: TaskPath,
) -> ApiResult<HttpResponse> {
    let (tenant, id) = path.into_inner();
    let view = tasks::get(&services, &caller, &tenant, TaskId(id)).await?;
    with_etag(HttpResponse::Ok(), view)
}

/// Replaces a task's definition. The version being replaced is required, as `If-Match` (the
/// ETag) or as `version` in the body; a stale version is refused with 412 and nothing changes.
/// A task as read (`GET`) may be sent back edited: its read-only fields are ignored.
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path), ("id" = i64, Path),
    ("If-Match" = Option<String>, Header, description = "the version being replaced, e.g. \"3\"")),
    request_body = TaskSpec, responses(
    (status = 200, body = TaskBody, headers(("ETag" = String))),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 412, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
    (status = 428, body = Problem, content_type = "application/problem+json"),
))]
#[put("/tenants/{tenant}/tasks/{id}")]
async fn update_task(
    services: web::Data<Services>,
    caller: Caller,
    req: HttpRequest,
    path: TaskPath,
    body: JsonBody<serde_json::Value>,
) -> ApiResult<HttpResponse> {
    let (tenant, id) = path.into_inner();
    let (spec, body_version) = edited_spec(body.into_inner())?;
    let version = if_match(&req)?.or(body_version);
    let view = tasks::update(&services, &caller, &tenant, TaskId(id), version, &spec).await?;
    with_etag(HttpResponse::Ok(), view)
}

/// Deletes a task (at the `If-Match` version when given): pending runs go, history stays.
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path), ("id" = i64, Path)), responses(
    (status = 204),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 412, body = Problem, content_type = "application/problem+json"),
))]
#[delete("/tenants/{tenant}/tasks/{id}")]
async fn delete_task(
    services: web::Data<Services>,
    caller: Caller,
    req: HttpRequest,
    path: TaskPath,
) -> ApiResult<HttpResponse> {
    let (tenant, id) = path.into_inner();
    tasks::delete(&services, &caller, &tenant, TaskId(id), if_match(&req)?).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Pauses a task: no scheduled occurrence until it is resumed.
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path), ("id" = i64, Path)), responses(
    (status = 200, body = TaskBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 412, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/tasks/{id}/pause")]
async fn pause_task(
    services: web::Data<Services>,
    caller: Caller,
    req: HttpRequest,
    path: TaskPath,
) -> ApiResult<HttpResponse> {
    let (tenant, id) = path.into_inner();
    let view = tasks::set_paused(
        &services,
        &caller,
        &tenant,
        TaskId(id),
        if_match(&req)?,
        true,
    )
    .await?;
    with_etag(HttpResponse::Ok(), view)
}

/// Resumes a task from now on (missed occurrences are not fired).
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path), ("id" = i64, Path)), responses(
    (status = 200, body = TaskBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 412, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/tasks/{id}/resume")]
async fn resume_task(
    services: web::Data<Services>,
    caller: Caller,
    req: HttpRequest,
    path: TaskPath,
) -> ApiResult<HttpResponse> {
    let (tenant, id) = path.into_inner();
    let view = tasks::set_paused(
        &services,
        &caller,
        &tenant,
        TaskId(id),
        if_match(&req)?,
        false,
    )
    .await?;
    with_etag(HttpResponse::Ok(), view)
}

/// Optional parameters of a trigger.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerBody {
    /// Replace the task's parameters for this run only: any JSON value, as a task's `params`;
    /// left out or `null`: the task's own.
    pub params: Option<serde_json::Value>,
}

/// Runs a task now. With `Idempotency-Key`, a repeated request (within 24 h) returns the run
/// the first one created (200, header `Idempotent-Replayed: true`) instead of a new one.
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path), ("id" = i64, Path),
    ("Idempotency-Key" = Option<String>, Header, description = "makes retries of this request safe")),
    request_body(content = Option<TriggerBody>), responses(
    (status = 201, body = RunBody),
    (status = 200, description = "replayed: the run of an earlier request with this key", body = RunBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, body = Problem, content_type = "application/problem+json"),
    (status = 429, description = "a tenant quota is reached (`max_waiting_runs`, or `max_fires_per_second` with `Retry-After`)", headers(("Retry-After" = String, description = "seconds, for the rate quota")), body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/tasks/{id}/trigger")]
async fn trigger_task(
    services: web::Data<Services>,
    caller: Caller,
    req: HttpRequest,
    path: TaskPath,
    body: RawBody,
) -> ApiResult<HttpResponse> {
    let (tenant, id) = path.into_inner();
    let key = match req.headers().get("Idempotency-Key") {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::field("Idempotency-Key", "must be visible ASCII text"))?
                .to_owned(),
        ),
        None => None,
    };
    // The body is optional, so it is read by hand: a wrong one is an error, not ignored.
    let params = body
        .optional_json::<TriggerBody>(&req)?
        .and_then(|b| b.params);
    let done = tasks::trigger(
        &services,
        &caller,
        &tenant,
        TaskId(id),
        params,
        key.as_deref(),
    )
    .await?;
    let mut res = if done.replayed {
        let mut r = HttpResponse::Ok();
        r.insert_header(("Idempotent-Replayed", "true"));
        r
    } else {
        HttpResponse::Created()
    };
    res.insert_header((
        header::LOCATION,
        format!("/api/v1/tenants/{tenant}/runs/{}", done.run.id),
    ));
    Ok(res.json(RunBody::from(done.run)))
}

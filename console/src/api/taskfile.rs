//! A tenant's tasks as a file: `GET …/tasks/export` (TOML or JSON), `POST …/tasks/apply`
//! (plan, and apply unless `dry_run`; `prune` deletes what the file does not name) and
//! `POST …/tasks/import` (apply a TOML or JSON file as it is, without pruning).

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, get, post, web};
use serde::Deserialize;
use utoipa::IntoParams;

use super::auth::Caller;
use super::body::{JsonBody, RawBody, parse_json};
use super::error::{ApiError, ApiResult, Code, Problem};
use crate::service::Services;
use crate::service::taskfile::{self, Format, Plan, TaskFile};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(export_tasks)
        .service(apply_tasks)
        .service(import_tasks);
}

/// `?format=toml|json`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FormatQuery {
    /// `toml` (default) or `json`.
    pub format: Option<String>,
}

fn format_of(name: Option<&str>) -> ApiResult<Format> {
    match name {
        None | Some("toml") => Ok(Format::Toml),
        Some("json") => Ok(Format::Json),
        Some(other) => Err(ApiError::field(
            "format",
            format!("{other:?} is not toml or json"),
        )),
    }
}

/// The tenant's tasks and dependencies as a task file.
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path), FormatQuery), responses(
    (status = 200, description = "the file", content_type = "application/toml", body = String),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/tasks/export")]
async fn export_tasks(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    query: web::Query<FormatQuery>,
) -> ApiResult<HttpResponse> {
    let format = format_of(query.format.as_deref())?;
    let file = taskfile::export(&services, &caller, &tenant).await?;
    let text = file.render(format).map_err(ApiError::internal)?;
    let content_type = match format {
        Format::Toml => "application/toml",
        Format::Json => "application/json",
    };
    Ok(HttpResponse::Ok().content_type(content_type).body(text))
}

/// `?dry_run=&prune=`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApplyQuery {
    /// Only compute the plan.
    #[serde(default)]
    pub dry_run: bool,
    /// Delete tasks and dependencies the file does not name.
    #[serde(default)]
    pub prune: bool,
}

/// Makes the tenant's tasks match a task file (by task name), in one transaction; answers
/// the plan: what was (or, with `dry_run`, would be) created, updated, left unchanged and
/// deleted. Applying the same file again reports only `unchanged`.
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path), ApplyQuery), request_body = TaskFile, responses(
    (status = 200, body = Plan),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, body = Problem, content_type = "application/problem+json"),
    (status = 422, description = "errors name the entry, e.g. tasks[3].schedule.expr", body = Problem, content_type = "application/problem+json"),
    (status = 429, description = "a tenant quota is reached: `quota` and `limit` name it", body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/tasks/apply")]
async fn apply_tasks(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    query: web::Query<ApplyQuery>,
    body: JsonBody<TaskFile>,
) -> ApiResult<web::Json<Plan>> {
    let plan = taskfile::apply(
        &services,
        &caller,
        &tenant,
        &body,
        query.prune,
        query.dry_run,
    )
    .await?;
    Ok(web::Json(plan))
}

/// Applies a task file sent as TOML (`Content-Type: application/toml`) or JSON, without
/// deleting anything.
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path)),
    request_body(content = String, content_type = "application/toml"), responses(
    (status = 200, body = Plan),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
    (status = 429, description = "a tenant quota is reached: `quota` and `limit` name it", body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/tasks/import")]
async fn import_tasks(
    services: web::Data<Services>,
    caller: Caller,
    req: HttpRequest,
    tenant: web::Path<String>,
    body: RawBody,
) -> ApiResult<web::Json<Plan>> {
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/toml");
    let file = if content_type.starts_with("application/json") {
        parse_json(&body.0)?
    } else {
        let text = std::str::from_utf8(&body.0)
            .map_err(|_| ApiError::bad_request("the file is not UTF-8 text"))?;
        TaskFile::parse(text, Format::Toml)
            .map_err(|e| ApiError::new(Code::ValidationFailed, e.to_string()))?
    };
    let plan = taskfile::apply(&services, &caller, &tenant, &file, false, false).await?;
    Ok(web::Json(plan))
}

//! `/tenants/{tenant}/executors`: the live view of a tenant's wrapper instances, drain and
//! undrain.

use std::collections::BTreeMap;

use actix_web::{get, post, web};
use chrono::{DateTime, Utc};
use mthpt_engine::app::Executor;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::at;
use super::auth::Caller;
use super::error::{ApiResult, Problem};
use crate::service::{Services, apps};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_executors)
        .service(drain_executor)
        .service(undrain_executor);
}

/// One wrapper instance.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExecutorBody {
    pub id: i64,
    /// The app's name.
    pub app: String,
    pub instance_id: String,
    pub base_url: String,
    /// `up`, `draining`, `down` or `lost`.
    pub state: String,
    pub capacity: i32,
    /// Runs in flight at the last heartbeat.
    pub running: i32,
    pub handlers: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub registered_at: DateTime<Utc>,
    pub last_heartbeat_at: DateTime<Utc>,
    /// Draining with an undrain asked for: `up` again at its next heartbeat, unless the
    /// instance is shutting down itself.
    pub undrain_requested: bool,
}

impl ExecutorBody {
    fn of(e: Executor, app: String) -> Self {
        Self {
            id: e.id.0,
            app,
            instance_id: e.instance_id,
            base_url: e.base_url,
            state: e.state.to_string(),
            capacity: e.capacity,
            running: e.running,
            handlers: e.handlers.0,
            labels: e.labels.0,
            registered_at: at(e.registered_at),
            last_heartbeat_at: at(e.last_heartbeat_at),
            undrain_requested: e.undrain_requested,
        }
    }
}

/// Filters of the executor list.
#[derive(Debug, Clone, Deserialize, IntoParams)]
pub struct ExecutorQuery {
    /// Only this app's instances.
    pub app: Option<String>,
}

/// A tenant's wrapper instances: capacity, running, handlers, labels, last heartbeat.
#[utoipa::path(tag = "executors", params(("tenant" = String, Path, description = "tenant name"), ExecutorQuery),
    responses(
    (status = 200, body = Vec<ExecutorBody>),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/executors")]
async fn list_executors(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
    query: web::Query<ExecutorQuery>,
) -> ApiResult<web::Json<Vec<ExecutorBody>>> {
    let (executors, apps) =
        apps::executors(&services, &caller, &path, query.app.as_deref()).await?;
    let name = |e: &Executor| {
        apps.iter()
            .find(|a| a.id == e.app_id)
            .map_or_else(String::new, |a| a.name.clone())
    };
    Ok(web::Json(
        executors
            .into_iter()
            .map(|e| {
                let app = name(&e);
                ExecutorBody::of(e, app)
            })
            .collect(),
    ))
}

/// Drains an instance: it finishes its runs and is sent no new ones.
#[utoipa::path(tag = "executors", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "executor id"),
), responses(
    (status = 200, body = ExecutorBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "not live", body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/executors/{id}/drain")]
async fn drain_executor(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64)>,
) -> ApiResult<web::Json<ExecutorBody>> {
    let (tenant, id) = path.into_inner();
    let drained = apps::drain(&services, &caller, &tenant, id).await?;
    with_app(&services, &caller, &tenant, drained).await
}

/// Undoes a drain: the instance takes runs again from its next heartbeat (`undrain_requested`
/// until then), unless that heartbeat says it is shutting down itself. An instance already up
/// is answered as it is.
#[utoipa::path(tag = "executors", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "executor id"),
), responses(
    (status = 200, body = ExecutorBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "down or lost", body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/executors/{id}/undrain")]
async fn undrain_executor(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64)>,
) -> ApiResult<web::Json<ExecutorBody>> {
    let (tenant, id) = path.into_inner();
    let asked = apps::undrain(&services, &caller, &tenant, id).await?;
    with_app(&services, &caller, &tenant, asked).await
}

/// `executor` as the API shows it, with its app's name.
async fn with_app(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    executor: Executor,
) -> ApiResult<web::Json<ExecutorBody>> {
    let app = apps::executors(services, caller, tenant, None)
        .await?
        .1
        .into_iter()
        .find(|a| a.id == executor.app_id)
        .map_or_else(String::new, |a| a.name);
    Ok(web::Json(ExecutorBody::of(executor, app)))
}

//! `/tenants/{tenant}/dependencies`: parent → child task edges; a cycle is refused naming it.

use actix_web::{HttpResponse, delete, get, post, web};
use chrono::{DateTime, Utc};
use mthpt_engine::task::{Dependency, DependencyCondition, TaskId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::at;
use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiResult, Problem};
use crate::service::Services;
use crate::service::tasks;

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_dependencies)
        .service(add_dependency)
        .service(remove_dependency);
}

/// A dependency: the child runs after the parent's run finished as the condition says.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DependencyBody {
    pub parent_task_id: i64,
    pub child_task_id: i64,
    /// on_success, on_failure or always.
    #[schema(value_type = String)]
    pub condition: DependencyCondition,
    #[serde(default)]
    pub created_at: Option<DateTime<Utc>>,
}

impl From<Dependency> for DependencyBody {
    fn from(d: Dependency) -> Self {
        Self {
            parent_task_id: d.parent_task_id.0,
            child_task_id: d.child_task_id.0,
            condition: d.condition,
            created_at: Some(at(d.created_at)),
        }
    }
}

/// A new dependency (or a new condition for an existing one).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewDependency {
    pub parent_task_id: i64,
    pub child_task_id: i64,
    /// on_success (default), on_failure or always.
    #[schema(value_type = Option<String>)]
    pub condition: Option<DependencyCondition>,
}

/// A tenant's dependencies.
#[utoipa::path(tag = "dependencies", params(("tenant" = String, Path)), responses(
    (status = 200, body = Vec<DependencyBody>),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/dependencies")]
async fn list_dependencies(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
) -> ApiResult<web::Json<Vec<DependencyBody>>> {
    let deps = tasks::list_dependencies(&services, &caller, &tenant).await?;
    Ok(web::Json(deps.into_iter().map(Into::into).collect()))
}

/// Adds parent → child (or changes its condition). A dependency that would close a cycle is
/// refused with 409 `cycle`, naming the cycle.
#[utoipa::path(tag = "dependencies", params(("tenant" = String, Path)), request_body = NewDependency, responses(
    (status = 201, body = DependencyBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "would close a cycle", body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/dependencies")]
async fn add_dependency(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    body: JsonBody<NewDependency>,
) -> ApiResult<HttpResponse> {
    let dep = tasks::add_dependency(
        &services,
        &caller,
        &tenant,
        TaskId(body.parent_task_id),
        TaskId(body.child_task_id),
        body.condition.unwrap_or(DependencyCondition::OnSuccess),
    )
    .await?;
    Ok(HttpResponse::Created().json(DependencyBody::from(dep)))
}

/// Removes parent → child.
#[utoipa::path(tag = "dependencies", params(("tenant" = String, Path), ("parent" = i64, Path), ("child" = i64, Path)), responses(
    (status = 204),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[delete("/tenants/{tenant}/dependencies/{parent}/{child}")]
async fn remove_dependency(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64, i64)>,
) -> ApiResult<HttpResponse> {
    let (tenant, parent, child) = path.into_inner();
    tasks::remove_dependency(&services, &caller, &tenant, TaskId(parent), TaskId(child)).await?;
    Ok(HttpResponse::NoContent().finish())
}

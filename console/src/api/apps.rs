//! `/tenants/{tenant}/apps`: apps and their signing secrets (shown once, on create and rotate).

use actix_web::{HttpResponse, delete, get, post, web};
use chrono::{DateTime, Utc};
use mthpt_engine::app::App;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::at;
use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiResult, Problem};
use crate::service::Services;
use crate::service::apps::{self, AppWithSecret};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_apps)
        .service(create_app)
        .service(get_app)
        .service(rotate_secret)
        .service(delete_app);
}

/// An app as the API shows it (never its secret).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AppBody {
    pub id: i64,
    pub name: String,
    /// What its wrappers identify as: `<tenant>.<app>`.
    pub key: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl AppBody {
    fn of(tenant: &str, a: App) -> Self {
        Self {
            id: a.id.0,
            key: format!("{tenant}.{}", a.name),
            name: a.name,
            created_at: at(a.created_at),
            updated_at: at(a.updated_at),
        }
    }
}

/// An app with its signing secret: the only time the secret is shown.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AppSecretBody {
    #[serde(flatten)]
    pub app: AppBody,
    /// Give this to the app's wrappers (e.g. `mthpt wrapper --secret-file`); it is not shown again.
    pub secret: String,
}

impl AppSecretBody {
    fn of(tenant: &str, a: AppWithSecret) -> Self {
        Self {
            app: AppBody::of(tenant, a.app),
            secret: a.secret,
        }
    }
}

/// A new app.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateApp {
    /// Unique in the tenant (`[a-z0-9][a-z0-9_-]*`).
    pub name: String,
}

/// A tenant's apps.
#[utoipa::path(tag = "apps", params(("tenant" = String, Path, description = "tenant name")), responses(
    (status = 200, body = Vec<AppBody>),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/apps")]
async fn list_apps(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
) -> ApiResult<web::Json<Vec<AppBody>>> {
    let list = apps::list(&services, &caller, &path).await?;
    Ok(web::Json(
        list.into_iter().map(|a| AppBody::of(&path, a)).collect(),
    ))
}

/// Creates an app with a generated signing secret, shown in this answer only.
#[utoipa::path(tag = "apps", params(("tenant" = String, Path, description = "tenant name")),
    request_body = CreateApp, responses(
    (status = 201, body = AppSecretBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "name taken", body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/apps")]
async fn create_app(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
    body: JsonBody<CreateApp>,
) -> ApiResult<HttpResponse> {
    let created = apps::create(&services, &caller, &path, &body.name).await?;
    Ok(HttpResponse::Created().json(AppSecretBody::of(&path, created)))
}

/// One app.
#[utoipa::path(tag = "apps", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("app" = String, Path, description = "app name"),
), responses(
    (status = 200, body = AppBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/apps/{app}")]
async fn get_app(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> ApiResult<web::Json<AppBody>> {
    let (tenant, app) = path.into_inner();
    let found = apps::get(&services, &caller, &tenant, &app).await?;
    Ok(web::Json(AppBody::of(&tenant, found)))
}

/// Replaces the app's signing secret with a new one, shown in this answer only.
#[utoipa::path(tag = "apps", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("app" = String, Path, description = "app name"),
), responses(
    (status = 200, body = AppSecretBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/apps/{app}/rotate-secret")]
async fn rotate_secret(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> ApiResult<web::Json<AppSecretBody>> {
    let (tenant, app) = path.into_inner();
    let rotated = apps::rotate_secret(&services, &caller, &tenant, &app).await?;
    Ok(web::Json(AppSecretBody::of(&tenant, rotated)))
}

/// Deletes an app; refused with 409 while a task uses it.
#[utoipa::path(tag = "apps", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("app" = String, Path, description = "app name"),
), responses(
    (status = 204),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "tasks use it", body = Problem, content_type = "application/problem+json"),
))]
#[delete("/tenants/{tenant}/apps/{app}")]
async fn delete_app(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> ApiResult<HttpResponse> {
    let (tenant, app) = path.into_inner();
    apps::delete(&services, &caller, &tenant, &app).await?;
    Ok(HttpResponse::NoContent().finish())
}

//! `/tenants/{tenant}/users` (tenant admins and operators) and `/users` (operators): users and
//! their role grants.

use actix_web::{HttpResponse, delete, get, patch, post, web};
use chrono::{DateTime, Utc};
use mthpt_engine::tenant::{Role, User, UserId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::at;
use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiError, ApiResult, Problem};
use crate::service::Services;
use crate::service::users::{self, UserChange, Where};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_tenant_users)
        .service(create_tenant_user)
        .service(get_tenant_user)
        .service(update_tenant_user)
        .service(delete_tenant_user)
        .service(list_operators)
        .service(create_operator)
        .service(get_operator)
        .service(update_operator)
        .service(delete_operator);
}

/// A user as the API shows it (never its password hash).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UserBody {
    pub id: i64,
    pub username: String,
    /// `operator`, `tenant_admin`, `tenant_operator` or `tenant_viewer`.
    pub role: String,
    /// The user's tenant id (none for operators).
    pub tenant_id: Option<i64>,
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<User> for UserBody {
    fn from(u: User) -> Self {
        Self {
            id: u.id.0,
            username: u.username,
            role: u.role.to_string(),
            tenant_id: u.tenant_id.map(|t| t.0),
            disabled: u.disabled,
            created_at: at(u.created_at),
            updated_at: at(u.updated_at),
        }
    }
}

/// A new user.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUser {
    pub username: String,
    /// At least 10 characters.
    pub password: String,
    /// Under a tenant: `tenant_admin`, `tenant_operator` or `tenant_viewer`; under `/users`:
    /// `operator` (the default there).
    pub role: Option<String>,
}

/// A change to a user; only the given fields change.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateUser {
    /// A new role grant.
    pub role: Option<String>,
    /// A disabled user's tokens and sessions stop working.
    pub disabled: Option<bool>,
    /// A new password (at least 10 characters).
    pub password: Option<String>,
}

fn role(text: Option<&str>, default: Option<Role>) -> ApiResult<Role> {
    match text {
        Some(t) => t
            .parse()
            .map_err(|e| ApiError::field("role", format!("{e}"))),
        None => default.ok_or_else(|| ApiError::field("role", "is required")),
    }
}

fn change(body: UpdateUser) -> ApiResult<UserChange> {
    Ok(UserChange {
        role: match body.role.as_deref() {
            Some(r) => Some(role(Some(r), None)?),
            None => None,
        },
        disabled: body.disabled,
        password: body.password,
    })
}

/// A tenant's users.
#[utoipa::path(tag = "users", params(("tenant" = String, Path, description = "tenant name")), responses(
    (status = 200, body = Vec<UserBody>),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/users")]
async fn list_tenant_users(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
) -> ApiResult<web::Json<Vec<UserBody>>> {
    let list = users::list(&services, &caller, Where::Tenant(&path)).await?;
    Ok(web::Json(list.into_iter().map(Into::into).collect()))
}

/// Creates a user of the tenant with a role.
#[utoipa::path(tag = "users", params(("tenant" = String, Path, description = "tenant name")),
    request_body = CreateUser, responses(
    (status = 201, body = UserBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "user name taken", body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/users")]
async fn create_tenant_user(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
    body: JsonBody<CreateUser>,
) -> ApiResult<HttpResponse> {
    let role = role(body.role.as_deref(), None)?;
    let user = users::create(
        &services,
        &caller,
        Where::Tenant(&path),
        &body.username,
        &body.password,
        role,
    )
    .await?;
    Ok(HttpResponse::Created().json(UserBody::from(user)))
}

/// One user of the tenant.
#[utoipa::path(tag = "users", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "user id"),
), responses(
    (status = 200, body = UserBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/users/{id}")]
async fn get_tenant_user(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64)>,
) -> ApiResult<web::Json<UserBody>> {
    let (tenant, id) = path.into_inner();
    let user = users::get(&services, &caller, Where::Tenant(&tenant), UserId(id)).await?;
    Ok(web::Json(user.into()))
}

/// Changes a user's role, disabled flag or password.
#[utoipa::path(tag = "users", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "user id"),
), request_body = UpdateUser, responses(
    (status = 200, body = UserBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[patch("/tenants/{tenant}/users/{id}")]
async fn update_tenant_user(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64)>,
    body: JsonBody<UpdateUser>,
) -> ApiResult<web::Json<UserBody>> {
    let (tenant, id) = path.into_inner();
    let change = change(body.into_inner())?;
    let user = users::update(
        &services,
        &caller,
        Where::Tenant(&tenant),
        UserId(id),
        change,
    )
    .await?;
    Ok(web::Json(user.into()))
}

/// Deletes a user of the tenant (and its tokens and sessions).
#[utoipa::path(tag = "users", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "user id"),
), responses(
    (status = 204),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, body = Problem, content_type = "application/problem+json"),
))]
#[delete("/tenants/{tenant}/users/{id}")]
async fn delete_tenant_user(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64)>,
) -> ApiResult<HttpResponse> {
    let (tenant, id) = path.into_inner();
    users::delete(&services, &caller, Where::Tenant(&tenant), UserId(id)).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The operators (operators only).
#[utoipa::path(tag = "users", responses(
    (status = 200, body = Vec<UserBody>),
    (status = 403, body = Problem, content_type = "application/problem+json"),
))]
#[get("/users")]
async fn list_operators(
    services: web::Data<Services>,
    caller: Caller,
) -> ApiResult<web::Json<Vec<UserBody>>> {
    let list = users::list(&services, &caller, Where::Platform).await?;
    Ok(web::Json(list.into_iter().map(Into::into).collect()))
}

/// Creates an operator (operators only).
#[utoipa::path(tag = "users", request_body = CreateUser, responses(
    (status = 201, body = UserBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "user name taken", body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[post("/users")]
async fn create_operator(
    services: web::Data<Services>,
    caller: Caller,
    body: JsonBody<CreateUser>,
) -> ApiResult<HttpResponse> {
    let role = role(body.role.as_deref(), Some(Role::Operator))?;
    let user = users::create(
        &services,
        &caller,
        Where::Platform,
        &body.username,
        &body.password,
        role,
    )
    .await?;
    Ok(HttpResponse::Created().json(UserBody::from(user)))
}

/// One operator.
#[utoipa::path(tag = "users", params(("id" = i64, Path, description = "user id")), responses(
    (status = 200, body = UserBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/users/{id}")]
async fn get_operator(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<i64>,
) -> ApiResult<web::Json<UserBody>> {
    let user = users::get(&services, &caller, Where::Platform, UserId(*path)).await?;
    Ok(web::Json(user.into()))
}

/// Changes an operator's disabled flag or password.
#[utoipa::path(tag = "users", params(("id" = i64, Path, description = "user id")),
    request_body = UpdateUser, responses(
    (status = 200, body = UserBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[patch("/users/{id}")]
async fn update_operator(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<i64>,
    body: JsonBody<UpdateUser>,
) -> ApiResult<web::Json<UserBody>> {
    let change = change(body.into_inner())?;
    let user = users::update(&services, &caller, Where::Platform, UserId(*path), change).await?;
    Ok(web::Json(user.into()))
}

/// Deletes an operator (not yourself).
#[utoipa::path(tag = "users", params(("id" = i64, Path, description = "user id")), responses(
    (status = 204),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, body = Problem, content_type = "application/problem+json"),
))]
#[delete("/users/{id}")]
async fn delete_operator(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    users::delete(&services, &caller, Where::Platform, UserId(*path)).await?;
    Ok(HttpResponse::NoContent().finish())
}

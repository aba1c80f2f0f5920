//! API tokens: `/tokens` (the caller's own), `/tenants/{tenant}/users/{id}/tokens` (a tenant
//! admin's users) and `/users/{id}/tokens` (operators). A token's value is shown once, when it
//! is created; only its hash is stored.

use actix_web::{HttpResponse, delete, get, post, web};
use chrono::{DateTime, Utc};
use mthpt_engine::tenant::{ApiToken, ApiTokenId, Role, UserId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::at;
use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiError, ApiResult, Problem};
use crate::service::Services;
use crate::service::users::{self, TokenOwner, Where};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_my_tokens)
        .service(create_my_token)
        .service(revoke_my_token)
        .service(list_tenant_user_tokens)
        .service(create_tenant_user_token)
        .service(revoke_tenant_user_token)
        .service(list_operator_tokens)
        .service(create_operator_token)
        .service(revoke_operator_token);
}

/// A token as listed (never its value).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TokenBody {
    pub id: i64,
    pub user_id: i64,
    pub name: String,
    /// The role requests made with the token act with (never more than the user's role
    /// now); `null` for tokens issued before tokens had roles: the user's role.
    pub role: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<ApiToken> for TokenBody {
    fn from(t: ApiToken) -> Self {
        Self {
            id: t.id.0,
            user_id: t.user_id.0,
            name: t.name,
            role: t.role.map(|r| r.to_string()),
            created_at: at(t.created_at),
            expires_at: t.expires_at.map(at),
            last_used_at: t.last_used_at.map(at),
            revoked_at: t.revoked_at.map(at),
        }
    }
}

/// A new token with its value: the only time the value is shown.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IssuedTokenBody {
    #[serde(flatten)]
    pub token: TokenBody,
    /// `mthpt_…`: send as `Authorization: Bearer <token>`. Not shown again.
    #[serde(rename = "token")]
    pub value: String,
}

/// A new token.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// What it is for, e.g. `ci`.
    pub name: String,
    /// When it stops working (none: until revoked).
    pub expires_at: Option<DateTime<Utc>>,
    /// Limits the token to this role: at most the caller's own role and the user's role
    /// (`role_above_own`, 403, otherwise); a tenant user's token has a tenant role. Default:
    /// the highest allowed.
    pub role: Option<String>,
}

async fn list(
    s: &Services,
    c: &Caller,
    whose: TokenOwner<'_>,
) -> ApiResult<web::Json<Vec<TokenBody>>> {
    let list = users::list_tokens(s, c, whose).await?;
    Ok(web::Json(list.into_iter().map(Into::into).collect()))
}

async fn create(
    s: &Services,
    c: &Caller,
    whose: TokenOwner<'_>,
    body: CreateToken,
) -> ApiResult<HttpResponse> {
    let expires = body.expires_at.map(|t| t.timestamp_millis());
    let role = body
        .role
        .as_deref()
        .map(str::parse::<Role>)
        .transpose()
        .map_err(|e| ApiError::field("role", e.to_string()))?;
    let issued = users::create_token(s, c, whose, &body.name, expires, role).await?;
    Ok(HttpResponse::Created().json(IssuedTokenBody {
        token: issued.token.into(),
        value: issued.value,
    }))
}

async fn revoke(
    s: &Services,
    c: &Caller,
    whose: TokenOwner<'_>,
    id: i64,
) -> ApiResult<HttpResponse> {
    users::revoke_token(s, c, whose, ApiTokenId(id)).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// The caller's own tokens.
#[utoipa::path(tag = "tokens", responses(
    (status = 200, body = Vec<TokenBody>),
    (status = 401, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tokens")]
async fn list_my_tokens(s: web::Data<Services>, c: Caller) -> ApiResult<web::Json<Vec<TokenBody>>> {
    list(&s, &c, TokenOwner::Me).await
}

/// Issues a token for the caller, with the caller's role or a lower one.
#[utoipa::path(tag = "tokens", request_body = CreateToken, responses(
    (status = 201, body = IssuedTokenBody),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tokens")]
async fn create_my_token(
    s: web::Data<Services>,
    c: Caller,
    body: JsonBody<CreateToken>,
) -> ApiResult<HttpResponse> {
    create(&s, &c, TokenOwner::Me, body.into_inner()).await
}

/// Revokes one of the caller's tokens.
#[utoipa::path(tag = "tokens", params(("id" = i64, Path, description = "token id")), responses(
    (status = 204),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[delete("/tokens/{id}")]
async fn revoke_my_token(
    s: web::Data<Services>,
    c: Caller,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    revoke(&s, &c, TokenOwner::Me, *path).await
}

/// A tenant user's tokens (tenant admins, operators).
#[utoipa::path(tag = "tokens", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "user id"),
), responses(
    (status = 200, body = Vec<TokenBody>),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/users/{id}/tokens")]
async fn list_tenant_user_tokens(
    s: web::Data<Services>,
    c: Caller,
    path: web::Path<(String, i64)>,
) -> ApiResult<web::Json<Vec<TokenBody>>> {
    let (tenant, id) = path.into_inner();
    list(&s, &c, TokenOwner::User(Where::Tenant(&tenant), UserId(id))).await
}

/// Issues a token for a tenant user (tenant admins, operators).
#[utoipa::path(tag = "tokens", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "user id"),
), request_body = CreateToken, responses(
    (status = 201, body = IssuedTokenBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/users/{id}/tokens")]
async fn create_tenant_user_token(
    s: web::Data<Services>,
    c: Caller,
    path: web::Path<(String, i64)>,
    body: JsonBody<CreateToken>,
) -> ApiResult<HttpResponse> {
    let (tenant, id) = path.into_inner();
    let whose = TokenOwner::User(Where::Tenant(&tenant), UserId(id));
    create(&s, &c, whose, body.into_inner()).await
}

/// Revokes a tenant user's token (tenant admins, operators).
#[utoipa::path(tag = "tokens", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "user id"),
    ("token" = i64, Path, description = "token id"),
), responses(
    (status = 204),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[delete("/tenants/{tenant}/users/{id}/tokens/{token}")]
async fn revoke_tenant_user_token(
    s: web::Data<Services>,
    c: Caller,
    path: web::Path<(String, i64, i64)>,
) -> ApiResult<HttpResponse> {
    let (tenant, id, token) = path.into_inner();
    revoke(
        &s,
        &c,
        TokenOwner::User(Where::Tenant(&tenant), UserId(id)),
        token,
    )
    .await
}

/// An operator's tokens (operators).
#[utoipa::path(tag = "tokens", params(("id" = i64, Path, description = "user id")), responses(
    (status = 200, body = Vec<TokenBody>),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/users/{id}/tokens")]
async fn list_operator_tokens(
    s: web::Data<Services>,
    c: Caller,
    path: web::Path<i64>,
) -> ApiResult<web::Json<Vec<TokenBody>>> {
    list(&s, &c, TokenOwner::User(Where::Platform, UserId(*path))).await
}

/// Issues a token for an operator (operators).
#[utoipa::path(tag = "tokens", params(("id" = i64, Path, description = "user id")),
    request_body = CreateToken, responses(
    (status = 201, body = IssuedTokenBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[post("/users/{id}/tokens")]
async fn create_operator_token(
    s: web::Data<Services>,
    c: Caller,
    path: web::Path<i64>,
    body: JsonBody<CreateToken>,
) -> ApiResult<HttpResponse> {
    let whose = TokenOwner::User(Where::Platform, UserId(*path));
    create(&s, &c, whose, body.into_inner()).await
}

/// Revokes an operator's token (operators).
#[utoipa::path(tag = "tokens", params(
    ("id" = i64, Path, description = "user id"),
    ("token" = i64, Path, description = "token id"),
), responses(
    (status = 204),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[delete("/users/{id}/tokens/{token}")]
async fn revoke_operator_token(
    s: web::Data<Services>,
    c: Caller,
    path: web::Path<(i64, i64)>,
) -> ApiResult<HttpResponse> {
    let (id, token) = path.into_inner();
    revoke(&s, &c, TokenOwner::User(Where::Platform, UserId(id)), token).await
}

//! `/session`: console sign-in (a session cookie) and sign-out.

use actix_web::{HttpRequest, HttpResponse, delete, post, web};
use serde::Deserialize;
use utoipa::ToSchema;

use super::auth::{Caller, Credential, SESSION_COOKIE};
use super::body::JsonBody;
use super::error::{ApiError, ApiResult, Problem};
use super::me::MeBody;
use crate::http::session_cookie;
use crate::service::{Services, sessions};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(sign_in).service(sign_out);
}

/// Credentials for signing in.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    pub username: String,
    pub password: String,
}

/// Signs in: sets an `HttpOnly`, `SameSite=Lax` session cookie. Failed attempts are limited
/// per user name and per client address (429 with `Retry-After`).
#[utoipa::path(tag = "session", request_body = SignIn, security(()), responses(
    (status = 200, body = MeBody, headers(("set-cookie" = String, description = "the session cookie"))),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 429, body = Problem, content_type = "application/problem+json"),
))]
#[post("/session")]
async fn sign_in(
    req: HttpRequest,
    services: web::Data<Services>,
    body: JsonBody<SignIn>,
) -> ApiResult<HttpResponse> {
    let address = req
        .peer_addr()
        .map_or_else(|| "unknown".to_owned(), |a| a.ip().to_string());
    let signed = sessions::sign_in(&services, &body.username, &body.password, &address).await?;
    let max_age = (signed.expires_at - services.now()) / 1000;
    Ok(HttpResponse::Ok()
        .cookie(session_cookie(&req, signed.cookie_value, max_age))
        .json(MeBody {
            user_id: signed.user.id.0,
            username: signed.user.username.clone(),
            role: signed.user.role.to_string(),
            tenant: signed.tenant,
            authenticated_by: "session".to_owned(),
        }))
}

/// Signs out: revokes the session and clears the cookie.
#[utoipa::path(tag = "session", responses(
    (status = 204),
    (status = 400, description = "not signed in with a session", body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
))]
#[delete("/session")]
async fn sign_out(
    req: HttpRequest,
    services: web::Data<Services>,
    caller: Caller,
) -> ApiResult<HttpResponse> {
    let Credential::Session { .. } = caller.credential else {
        return Err(ApiError::bad_request(
            "this request is authenticated by an API token, not a session; revoke tokens at /api/v1/tokens",
        ));
    };
    if let Some(c) = req.cookie(SESSION_COOKIE) {
        sessions::sign_out(&services, c.value()).await?;
    }
    Ok(HttpResponse::NoContent()
        .cookie(session_cookie(&req, String::new(), 0))
        .finish())
}

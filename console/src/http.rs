//! What the REST API ([`crate::api`]) and the web pages ([`crate::web`]) both read from a
//! request: the caller (a bearer token or the session cookie), the CSRF rule for cookie
//! sessions, the session cookie itself, and the HTTP status of an error code. Both layers sit on
//! this module and on [`crate::service`]; neither imports the other.
//!
//! Authentication: `Authorization: Bearer mthpt_…` (an API token; a request that carries one
//! ignores cookies), or the session cookie [`SESSION_COOKIE`] set by `POST /api/v1/session`.
//!
//! CSRF: a cookie-authenticated request with an unsafe method (anything but GET, HEAD,
//! OPTIONS) must come from the console's own pages: `Sec-Fetch-Site: same-origin`, or, from a
//! browser that does not send that header, an `Origin` equal to the request's own origin.
//! Otherwise it is 403. Bearer tokens are not sent by browsers on their own, so they need no
//! such check.

use std::future::Future;
use std::pin::Pin;

use actix_web::cookie::{Cookie, SameSite, time};
use actix_web::dev::Payload;
use actix_web::http::{StatusCode, header};
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};

use crate::service::Services;
use crate::service::access::Caller;
use crate::service::credentials::TOKEN_PREFIX;
use crate::service::error::{ApiError, ApiResult, Code};

/// The name of the session cookie.
pub const SESSION_COOKIE: &str = "mthpt_session";

/// Answers `HEAD` as `GET` on every route (API, pages, assets): the `GET` route answers, and
/// the server sends its status and headers without the body (actix-http leaves the body out
/// for a request that came as `HEAD`). Wrapped around the whole app in `startup`.
pub async fn head_as_get(
    mut req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    if req.method() == actix_web::http::Method::HEAD {
        req.head_mut().method = actix_web::http::Method::GET;
    }
    next.call(req).await
}

/// The HTTP status an error code is answered with (from the code table).
pub fn status_of(code: Code) -> StatusCode {
    StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Authenticates a request: its bearer token, else its session cookie (after the CSRF rule).
pub async fn authenticate(services: &Services, req: &HttpRequest) -> ApiResult<Caller> {
    match req.headers().get(header::AUTHORIZATION) {
        Some(value) => {
            let value = value
                .to_str()
                .map_err(|_| ApiError::unauthenticated("the Authorization header is not text"))?;
            let token = value
                .strip_prefix("Bearer ")
                .map(str::trim)
                .filter(|t| t.starts_with(TOKEN_PREFIX))
                .ok_or_else(|| {
                    ApiError::unauthenticated(format!(
                        "the Authorization header must be `Bearer {TOKEN_PREFIX}…`"
                    ))
                })?;
            Caller::from_token(services, token).await
        }
        None => match req.cookie(SESSION_COOKIE) {
            Some(cookie) => {
                check_same_origin(req)?;
                Caller::from_session(services, cookie.value()).await
            }
            None => Err(ApiError::unauthenticated(format!(
                "sign in first: send `Authorization: Bearer {TOKEN_PREFIX}…` or sign in at POST /api/v1/session"
            ))),
        },
    }
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            if let Some(caller) = req.extensions().get::<Caller>() {
                return Ok(caller.clone());
            }
            let services = req
                .app_data::<web::Data<Services>>()
                .ok_or_else(|| ApiError::internal("the API is mounted without its services"))?
                .clone();
            let caller = authenticate(&services, &req).await?;
            req.extensions_mut().insert(caller.clone());
            Ok(caller)
        })
    }
}

/// The CSRF rule for cookie-authenticated requests (see the module docs).
pub fn check_same_origin(req: &HttpRequest) -> ApiResult<()> {
    use actix_web::http::Method;
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let refused = || {
        ApiError::forbidden(
            "a cookie-authenticated change must come from the console's own origin \
             (Sec-Fetch-Site: same-origin, or a matching Origin); API clients use a bearer token",
        )
    };
    if let Some(site) = header("sec-fetch-site") {
        return if site == "same-origin" {
            Ok(())
        } else {
            Err(refused())
        };
    }
    let info = req.connection_info();
    let own = format!("{}://{}", info.scheme(), info.host());
    match header("origin") {
        Some(origin) if origin == own => Ok(()),
        _ => Err(refused()),
    }
}

/// The session cookie carrying `value` for `max_age_s` seconds (`HttpOnly`, `SameSite=Lax`,
/// `Secure` over HTTPS); an empty value and 0 clear it.
pub fn session_cookie(req: &HttpRequest, value: String, max_age_s: i64) -> Cookie<'static> {
    Cookie::build(SESSION_COOKIE, value)
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(req.connection_info().scheme() == "https")
        .max_age(time::Duration::seconds(max_age_s))
        .finish()
}

/// An extractor's error as a person reads it: without the extractor's prefix, and numbers
/// called numbers ("can not parse \"abc\" to a i64" → "\"abc\" is not a number").
pub fn unwrapped(error: &str, prefix: &str) -> String {
    let error = error.strip_prefix(prefix).unwrap_or(error);
    for int in ["i64", "i32", "u64", "u32", "usize"] {
        if let Some(value) = error
            .strip_prefix("can not parse ")
            .and_then(|rest| rest.strip_suffix(&format!(" to a {int}")))
        {
            return format!("{value} is not a number");
        }
    }
    if error == "invalid digit found in string" || error == "cannot parse integer from empty string"
    {
        return "a value that must be a whole number is not one".to_owned();
    }
    error.to_owned()
}

//! The API's middleware: every request gets an id, logged with its outcome, returned as
//! `X-Request-Id`, and put into the `instance` of an error's problem body; every error answer
//! is problem+json, also those actix shapes itself.

use std::time::Instant;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{Error, HttpMessage};

use super::error::{ApiError, Code};

/// The request's id, in the request's extensions.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

pub(super) async fn request_id(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, Error> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    req.extensions_mut().insert(RequestId(id.clone()));
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.path().to_owned();
    // The route's pattern (`/api/v1/tenants/{tenant}/runs`), never the path itself: the
    // label's values are bounded by the routes.
    let route = req
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_owned());
    let res = next.call(req).await?;
    let status = res.status();
    record(&method, route, status, started.elapsed());
    let api_error = res
        .response()
        .error()
        .and_then(|e| e.as_error::<ApiError>())
        .cloned()
        .or_else(|| plain_error(res.response()));
    let ms = started.elapsed().as_millis() as u64;
    let mut res = match api_error {
        Some(err) => {
            if let Some(cause) = &err.internal {
                tracing::error!(request_id = %id, %method, %path, status = status.as_u16(), code = %err.code, cause = %cause, ms, "request failed");
            } else {
                tracing::info!(request_id = %id, %method, %path, status = status.as_u16(), code = %err.code, detail = %err.detail, ms, "request refused");
            }
            let (req, _) = res.into_parts();
            ServiceResponse::new(req, super::error::to_response(&err, Some(&id)))
                .map_into_right_body()
        }
        None => {
            tracing::debug!(request_id = %id, %method, %path, status = status.as_u16(), ms, "request");
            res.map_into_left_body()
        }
    };
    if let Ok(value) = HeaderValue::from_str(&id) {
        res.headers_mut()
            .insert(HeaderName::from_static("x-request-id"), value);
    }
    Ok(res)
}

/// An error answer that is not problem+json (made by actix, e.g. for a body or a query it
/// could not read), as the [`ApiError`] of its status, keeping its message as the detail.
fn plain_error<B>(res: &actix_web::HttpResponse<B>) -> Option<ApiError> {
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return None;
    }
    let is_problem = res
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(super::error::PROBLEM_JSON));
    if is_problem {
        return None;
    }
    let code = match status.as_u16() {
        401 => Code::Unauthenticated,
        403 => Code::Forbidden,
        404 | 405 => Code::NotFound,
        409 => Code::Conflict,
        412 => Code::VersionConflict,
        413 => Code::PayloadTooLarge,
        428 => Code::PreconditionRequired,
        429 => Code::RateLimited,
        503 => Code::Unavailable,
        500..=599 => Code::Internal,
        _ => Code::BadRequest,
    };
    let detail = match res.error() {
        Some(e) if code != Code::Internal => e.to_string(),
        _ => code.title().to_owned(),
    };
    Some(ApiError::new(code, detail))
}

/// Counts a request in `mthpt_console_requests_total{method,route,status}` and its time in
/// `mthpt_console_request_seconds` (see docs/metrics.md).
fn record(
    method: &actix_web::http::Method,
    route: String,
    status: actix_web::http::StatusCode,
    took: std::time::Duration,
) {
    use actix_web::http::Method;
    let method = match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    };
    let class = match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    metrics::counter!("mthpt_console_requests_total", "method" => method, "route" => route, "status" => class)
        .increment(1);
    metrics::histogram!("mthpt_console_request_seconds").record(took.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use actix_web::HttpResponse;
    use actix_web::http::StatusCode;

    use super::*;

    #[test]
    fn plain_error_answers_become_problems_of_their_status() {
        let cases = [
            (StatusCode::PAYLOAD_TOO_LARGE, Code::PayloadTooLarge),
            (StatusCode::METHOD_NOT_ALLOWED, Code::NotFound),
            (StatusCode::URI_TOO_LONG, Code::BadRequest),
            (StatusCode::BAD_REQUEST, Code::BadRequest),
            (StatusCode::INTERNAL_SERVER_ERROR, Code::Internal),
        ];
        for (status, code) in cases {
            let res = HttpResponse::build(status)
                .content_type("text/plain")
                .body("A payload reached size limit.");
            assert_eq!(plain_error(&res).map(|e| e.code), Some(code), "{status}");
        }
        let problem = HttpResponse::build(StatusCode::BAD_REQUEST)
            .content_type(crate::api::error::PROBLEM_JSON)
            .finish();
        assert!(plain_error(&problem).is_none());
        assert!(plain_error(&HttpResponse::Ok().body("fine")).is_none());
    }
}

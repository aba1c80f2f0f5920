//! The request-id middleware: every request gets an id, logged with its outcome, returned as
//! `X-Request-Id`, and put into the `instance` of an error's problem body.

use std::time::Instant;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{Error, HttpMessage};

use super::error::ApiError;

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
        .cloned();
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

//! Request bodies of the API: read within the body cap, then parsed in two steps so that each
//! failure has its own answer.
//!
//! - larger than the cap: `413 payload_too_large`;
//! - not all there within [`BODY_READ_TIMEOUT`]: `408 request_timeout`; more bodies being
//!   received at once than [`MAX_BODIES_IN_FLIGHT`] holds: `503 unavailable`;
//! - not sent as `application/json` (where a body is required): `400 bad_request`;
//! - not JSON at all (a syntax error, a truncated body): `400 bad_request`;
//! - JSON of the wrong shape (a wrong type, an unknown enum value, a missing or unknown field):
//!   `422 validation_failed` with the field named by its path in `errors[]`
//!   (`schedule.kind`, `tasks[3].timeout_ms`).
//!
//! [`JsonBody`] replaces `web::Json` for request bodies; [`RawBody`] reads a body whose format
//! the handler decides (optional JSON, TOML).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::dev::Payload;
use actix_web::error::PayloadError;
use actix_web::http::header;
use actix_web::{FromRequest, HttpMessage, HttpRequest, mime, web};
use serde::de::DeserializeOwned;

use super::ApiLimits;
use super::error::{ApiError, ApiResult, Code, FieldProblem};

/// A JSON request body of type `T` (`Content-Type: application/json` or `…+json`).
#[derive(Debug, Clone, PartialEq)]
pub struct JsonBody<T>(pub T);

impl<T> JsonBody<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for JsonBody<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for JsonBody<T> {
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let is_json = is_json(req);
        let body = RawBody::from_request(req, payload);
        Box::pin(async move {
            if !is_json {
                return Err(ApiError::bad_request("send the body as application/json").into());
            }
            let RawBody(bytes) = body.await?;
            Ok(JsonBody(parse_json(&bytes)?))
        })
    }
}

/// Whether `req` says its body is JSON (`application/json` or `…+json`).
fn is_json(req: &HttpRequest) -> bool {
    matches!(
        req.mime_type(),
        Ok(Some(mime)) if mime.subtype() == mime::JSON || mime.suffix() == Some(mime::JSON)
    )
}

/// A request body as bytes, within the body cap (a larger one is `413` problem+json).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawBody(pub web::Bytes);

impl RawBody {
    /// Whether nothing but whitespace was sent (an optional body left out).
    pub fn is_blank(&self) -> bool {
        self.0.iter().all(u8::is_ascii_whitespace)
    }

    /// The body of `req` as JSON of type `T`, or `None` when it is blank; a body that is not
    /// blank must be sent as JSON, as every other body.
    pub fn optional_json<T: DeserializeOwned>(&self, req: &HttpRequest) -> ApiResult<Option<T>> {
        if self.is_blank() {
            Ok(None)
        } else if !is_json(req) {
            Err(ApiError::bad_request("send the body as application/json"))
        } else {
            parse_json(&self.0).map(Some)
        }
    }
}

/// How long a request body may take to arrive, from when the handler starts reading it.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of request bodies a console process receives at once (64 MiB): bodies
/// trickled in slowly by many connections hold no more than this between them.
pub const MAX_BODIES_IN_FLIGHT: usize = 64 * 1024 * 1024;

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Bytes of [`MAX_BODIES_IN_FLIGHT`] held while a body is read; given back when dropped.
struct InFlight(usize);

impl InFlight {
    fn take(n: usize) -> Option<Self> {
        IN_FLIGHT
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&u| u <= MAX_BODIES_IN_FLIGHT)
            })
            .ok()
            .map(|_| Self(n))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(self.0, Ordering::AcqRel);
    }
}

impl FromRequest for RawBody {
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let limit = req
            .app_data::<ApiLimits>()
            .copied()
            .unwrap_or_default()
            .max_body_bytes;
        // What the body may hold: its declared length within the cap (the cap when it declares
        // none), taken before a byte is read.
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(limit, |n| n.min(limit))
            // A cap set above the budget must not make every body wait for room forever.
            .min(MAX_BODIES_IN_FLIGHT);
        let held = InFlight::take(declared);
        // `web::Bytes` reads within the `PayloadConfig` the API mounts (the same cap) and
        // decompresses; only its errors are reshaped.
        let bytes = web::Bytes::from_request(req, payload);
        Box::pin(async move {
            let Some(held) = held else {
                return Err(ApiError::new(
                    Code::Unavailable,
                    "too many request bodies are being received at once; retry in a moment",
                )
                .into());
            };
            let read = tokio::time::timeout(BODY_READ_TIMEOUT, bytes)
                .await
                .map_err(|_| {
                    ApiError::new(
                        Code::RequestTimeout,
                        format!(
                            "the request body did not arrive within {} s",
                            BODY_READ_TIMEOUT.as_secs()
                        ),
                    )
                })?;
            drop(held);
            read.map(RawBody).map_err(|e| {
                match e.as_error::<PayloadError>() {
                    Some(PayloadError::Overflow) => too_large(limit),
                    _ => ApiError::bad_request(format!("the body cannot be read: {e}")),
                }
                .into()
            })
        })
    }
}

/// The refusal of a body beyond the cap.
pub fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        Code::PayloadTooLarge,
        format!("request bodies are limited to {limit} bytes"),
    )
}

/// Parses a JSON body: text that is not JSON is `400 bad_request`; JSON that does not fit `T` is
/// `422 validation_failed` naming the field by its path.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?;
    from_value(value)
}

/// Reads `T` from JSON already parsed: a mismatch is `422 validation_failed` naming the field.
pub fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> ApiResult<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let message = e.inner().to_string();
        ApiError::fields(vec![FieldProblem {
            field: field_of(&e.path().to_string(), &message),
            message,
        }])
    })
}

/// The field a deserialisation error is about: its path, plus the field a "missing field" or
/// "unknown field" message names when the path stops at the object holding it. The whole body
/// is `body`.
fn field_of(path: &str, message: &str) -> String {
    let path = if path == "." { "" } else { path };
    let named = ["missing field `", "unknown field `"]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
        .and_then(|rest| rest.split('`').next())
        .filter(|name| !name.is_empty());
    match named {
        Some(name) if path.is_empty() => name.to_owned(),
        Some(name) if !path.ends_with(&format!(".{name}")) && path != name => {
            format!("{path}.{name}")
        }
        _ if path.is_empty() => "body".to_owned(),
        _ => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        timeout_ms: Option<i64>,
        kind: Kind,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Kind {
        Cron,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        tasks: Vec<Inner>,
    }

    fn field(body: &str) -> (Code, String) {
        let err = parse_json::<Outer>(body.as_bytes()).unwrap_err();
        let field = err
            .errors
            .first()
            .map(|p| p.field.clone())
            .unwrap_or_default();
        (err.code, field)
    }

    #[test]
    fn wrong_shapes_name_the_field_by_its_path() {
        let ok = r#"{"kind": "cron"}"#;
        for (body, want) in [
            (
                format!(
                    r#"{{"name": "a", "tasks": [{ok}, {{"kind": "cron", "timeout_ms": "x"}}]}}"#
                ),
                "tasks[1].timeout_ms",
            ),
            (
                r#"{"name": "a", "tasks": [{"kind": "hourly"}]}"#.to_owned(),
                "tasks[0].kind",
            ),
            (r#"{"name": 5, "tasks": []}"#.to_owned(), "name"),
            (r#"{"tasks": []}"#.to_owned(), "name"),
            (
                r#"{"name": "a", "tasks": [{}]}"#.to_owned(),
                "tasks[0].kind",
            ),
            (
                r#"{"name": "a", "tasks": [{"kind": "cron", "retries": 1}]}"#.to_owned(),
                "tasks[0].retries",
            ),
            (
                r#"{"name": "a", "tasks": [], "extra": 1}"#.to_owned(),
                "extra",
            ),
            (r#""a task""#.to_owned(), "body"),
        ] {
            assert_eq!(
                field(&body),
                (Code::ValidationFailed, want.to_owned()),
                "{body}"
            );
        }
    }

    #[test]
    fn text_that_is_not_json_is_a_bad_request() {
        for body in [
            r#"{"name": "a", "tasks": ["#,
            "{name: 1}",
            "",
            r#"{"name": "a"} x"#,
        ] {
            assert_eq!(field(body).0, Code::BadRequest, "{body}");
        }
    }
}

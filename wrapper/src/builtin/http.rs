//! The `http` built-in handler: performs the HTTP request described by the run's params.
//!
//! Params:
//! ```json
//! {
//!   "url": "https://billing.internal/close-day",
//!   "method": "POST",
//!   "headers": {"Authorization": "Bearer ..."},
//!   "body": {"day": "2026-11-21"},
//!   "expect_status": [200, 204],
//!   "timeout_ms": 30000
//! }
//! ```
//! Only `url` is required. `method` defaults to `GET`; a string `body` is sent as is, any other
//! JSON value as JSON; `expect_status` defaults to any 2xx; `timeout_ms` (whole request) defaults
//! to 30 s. The output is `{"status": N, "body": "..."}` with at most 64 KiB of the answer.
//! An unexpected 408, 429 or 5xx status, a timeout or a connection failure is a retryable
//! failure; any other unexpected status or invalid params is fatal.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::context::RunContext;
use crate::failure::{HandlerError, HandlerResult};

/// Most bytes of the answer kept in the output.
const MAX_BODY_KEPT: usize = 64 * 1024;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpParams {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    expect_status: Option<Vec<u16>>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

fn retryable_status(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
}

/// Runs the request of `ctx`'s params with `client` (which carries the connect timeout).
pub(crate) async fn run(ctx: RunContext, client: reqwest::Client) -> HandlerResult {
    let params: HttpParams = ctx.params_as().map_err(|e| {
        HandlerError::fatal(format!(
            "http params must be {{\"url\": ..., \"method\": ..., \"headers\": {{}}, \"body\": ..., \"expect_status\": [...], \"timeout_ms\": ...}}: {}",
            e.message()
        ))
    })?;
    let url = reqwest::Url::parse(&params.url)
        .map_err(|e| HandlerError::fatal(format!("invalid url {:?}: {e}", params.url)))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(HandlerError::fatal(format!(
            "url {:?} is not http or https",
            params.url
        )));
    }
    let method_name = params
        .method
        .as_deref()
        .unwrap_or("GET")
        .to_ascii_uppercase();
    let method = Method::from_bytes(method_name.as_bytes())
        .map_err(|_| HandlerError::fatal(format!("invalid method {method_name:?}")))?;
    let timeout = params
        .timeout_ms
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_TIMEOUT);
    let mut req = client.request(method.clone(), url.clone()).timeout(timeout);
    for (name, value) in &params.headers {
        req = req.header(name.as_str(), value.as_str());
    }
    let has_content_type = params
        .headers
        .keys()
        .any(|k| k.eq_ignore_ascii_case("content-type"));
    match &params.body {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => req = req.body(text.clone()),
        Some(other) => {
            if !has_content_type {
                req = req.header(reqwest::header::CONTENT_TYPE, "application/json");
            }
            req = req.body(other.to_string());
        }
    }
    ctx.log(format!("{method} {url}"));
    let call = async {
        let mut resp = req.send().await?;
        let status = resp.status();
        let mut kept = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            let room = MAX_BODY_KEPT.saturating_sub(kept.len());
            kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if room == 0 {
                break;
            }
        }
        Ok::<_, reqwest::Error>((status, kept))
    };
    let (status, body) = tokio::select! {
        answer = call => answer.map_err(|e| {
            let what = if e.is_timeout() { "timed out" } else if e.is_connect() { "could not connect" } else { "failed" };
            HandlerError::retryable(format!("{method} {url} {what}: {e}"))
        })?,
        _ = ctx.cancelled() => return Err(HandlerError::cancelled()),
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    ctx.log(format!("answered {status}"));
    let expected = match &params.expect_status {
        Some(list) => list.contains(&status.as_u16()),
        None => status.is_success(),
    };
    if expected {
        return Ok(json!({ "status": status.as_u16(), "body": text }));
    }
    let snippet: String = text.chars().take(300).collect();
    let message = format!("{method} {url} answered {status} (not expected): {snippet}");
    if retryable_status(status) {
        Err(HandlerError::retryable(message))
    } else {
        Err(HandlerError::fatal(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_and_throttling_are_retryable() {
        assert!(retryable_status(StatusCode::BAD_GATEWAY));
        assert!(retryable_status(StatusCode::TOO_MANY_REQUESTS));
        assert!(!retryable_status(StatusCode::NOT_FOUND));
    }
}

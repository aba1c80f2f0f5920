//! The actix-web endpoints the engine calls.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::Value;

use crate::Wrapper;
use crate::context::CancelReason;
use crate::protocol::{
    AckStatus, CancelRequest, CancelStatus, ErrorBody, ErrorCode, MAX_BATCH_ITEMS, RunAck,
    RunBatchResponse, RunId, RunRequest, SignatureError, SignatureHeaders, paths,
};

/// Largest request body accepted, in bytes (a full batch of runs with sizeable params).
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

pub(crate) fn scope(wrapper: Wrapper) -> actix_web::Scope {
    web::scope(paths::PREFIX)
        .app_data(web::Data::new(wrapper))
        .app_data(web::PayloadConfig::new(MAX_BODY_BYTES))
        .route("/runs", web::post().to(start_run))
        .route("/runs/batch", web::post().to(start_batch))
        .route("/runs/{run_id}/cancel", web::post().to(cancel_run))
        .route("/health", web::get().to(health))
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn error(code: ErrorCode, message: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status(code.http_status())).json(ErrorBody::new(code, message))
}

/// Checks the request's signature; on failure, the 401 answer to send.
fn refusal(wrapper: &Wrapper, req: &HttpRequest, body: &[u8]) -> Option<HttpResponse> {
    let inner = &wrapper.inner;
    let path = req
        .uri()
        .path_and_query()
        .map_or(req.uri().path(), |p| p.as_str());
    let checked =
        SignatureHeaders::from_lookup(|name| req.headers().get(name).and_then(|v| v.to_str().ok()))
            .and_then(|headers| {
                if headers.app != inner.settings.app {
                    return Err(SignatureError::UnknownApp(headers.app));
                }
                inner.replay.verify(
                    inner.client.signer().secret(),
                    req.method().as_str(),
                    path,
                    &headers,
                    body,
                    crate::protocol::unix_now(),
                )
            });
    checked.err().map(|e| {
        let peer = req
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|| "unknown".to_owned());
        tracing::warn!(%peer, method = %req.method(), %path, reason = %e, "refused unsigned or badly signed request");
        error(ErrorCode::Unauthorized, e.to_string())
    })
}

fn run_id_of(value: &Value) -> Option<RunId> {
    value.get("run_id").and_then(Value::as_i64)
}

fn malformed(run_id: Option<RunId>, problem: impl std::fmt::Display) -> RunAck {
    RunAck {
        run_id,
        status: AckStatus::Malformed,
        run: None,
        message: Some(format!("invalid run request: {problem}")),
    }
}

fn accept_value(wrapper: &Wrapper, value: Value) -> RunAck {
    let run_id = run_id_of(&value);
    match serde_json::from_value::<RunRequest>(value) {
        Ok(request) => wrapper.inner.accept(request),
        Err(e) => malformed(run_id, e),
    }
}

async fn start_run(
    req: HttpRequest,
    body: web::Bytes,
    wrapper: web::Data<Wrapper>,
) -> HttpResponse {
    if let Some(refused) = refusal(&wrapper, &req, &body) {
        return refused;
    }
    let ack = match serde_json::from_slice::<Value>(&body) {
        Ok(value) => accept_value(&wrapper, value),
        Err(e) => malformed(None, e),
    };
    HttpResponse::build(status(ack.status.http_status())).json(ack)
}

#[derive(Deserialize)]
struct BatchEnvelope {
    runs: Vec<Value>,
}

async fn start_batch(
    req: HttpRequest,
    body: web::Bytes,
    wrapper: web::Data<Wrapper>,
) -> HttpResponse {
    if let Some(refused) = refusal(&wrapper, &req, &body) {
        return refused;
    }
    let envelope = match serde_json::from_slice::<BatchEnvelope>(&body) {
        Ok(envelope) => envelope,
        Err(e) => {
            return error(
                ErrorCode::Malformed,
                format!("invalid run batch (expected {{\"runs\": [...]}}): {e}"),
            );
        }
    };
    if envelope.runs.len() > MAX_BATCH_ITEMS {
        return error(
            ErrorCode::Malformed,
            format!(
                "batch of {} runs is larger than the limit of {MAX_BATCH_ITEMS}",
                envelope.runs.len()
            ),
        );
    }
    let acks = envelope
        .runs
        .into_iter()
        .map(|value| accept_value(&wrapper, value))
        .collect();
    HttpResponse::Ok().json(RunBatchResponse { acks })
}

async fn cancel_run(
    req: HttpRequest,
    body: web::Bytes,
    run_id: web::Path<String>,
    wrapper: web::Data<Wrapper>,
) -> HttpResponse {
    if let Some(refused) = refusal(&wrapper, &req, &body) {
        return refused;
    }
    let Ok(run_id) = run_id.parse::<RunId>() else {
        return error(
            ErrorCode::Malformed,
            format!("run id {:?} is not an integer", run_id.as_str()),
        );
    };
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        CancelRequest::default()
    } else {
        match serde_json::from_slice::<CancelRequest>(&body) {
            Ok(request) => request,
            Err(e) => return error(ErrorCode::Malformed, format!("invalid cancel request: {e}")),
        }
    };
    let answer = wrapper.inner.cancel(run_id, CancelReason::Requested);
    if answer.status == CancelStatus::Cancelling {
        tracing::info!(
            run_id,
            reason = request.reason.as_deref().unwrap_or(""),
            "cancel requested"
        );
    }
    let code = match answer.status {
        CancelStatus::Unknown => StatusCode::NOT_FOUND,
        CancelStatus::Cancelling | CancelStatus::AlreadyFinished => StatusCode::OK,
    };
    HttpResponse::build(code).json(answer)
}

async fn health(req: HttpRequest, body: web::Bytes, wrapper: web::Data<Wrapper>) -> HttpResponse {
    if let Some(refused) = refusal(&wrapper, &req, &body) {
        return refused;
    }
    HttpResponse::Ok().json(wrapper.inner.health())
}

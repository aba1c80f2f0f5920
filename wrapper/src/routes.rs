//! The actix-web endpoints the engine calls. Every request is refused from its headers alone
//! when its signature headers are missing, repeated, malformed, stale or name another app; only
//! then is its body read, within the limits of [`crate::intake`].

use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::Value;

use crate::Wrapper;
use crate::context::CancelReason;
use crate::intake::{self, IntakeError};
use crate::protocol::{
    AckStatus, CancelRequest, CancelStatus, ErrorBody, ErrorCode, MAX_BATCH_ITEMS, RunAck,
    RunBatchResponse, RunId, RunRequest, SignatureError, paths,
};

pub(crate) fn scope(wrapper: Wrapper) -> actix_web::Scope {
    web::scope(paths::PREFIX)
        .app_data(web::Data::new(wrapper))
        .route("/runs", web::post().to(start_run))
        .route("/runs/batch", web::post().to(start_batch))
        .route("/runs/{run_id}/cancel", web::post().to(cancel_run))
        .route("/health", web::get().to(health))
        .default_service(web::to(unknown_path))
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// An error answer to a request whose body was read (the connection stays usable).
fn error(code: ErrorCode, message: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status(code.http_status())).json(ErrorBody::new(code, message))
}

/// Checks the request's signature headers, then reads and verifies its body; on failure, the
/// answer to send (the protocol's error body).
async fn signed_body(
    wrapper: &Wrapper,
    req: &HttpRequest,
    mut payload: web::Payload,
) -> Result<Bytes, HttpResponse> {
    let read = async {
        let headers = intake::signature_headers(req)?;
        if headers.app != wrapper.inner.settings.app {
            return Err(SignatureError::UnknownApp(headers.app).into());
        }
        wrapper
            .intake
            .read_signed(
                req,
                &mut payload,
                &headers,
                wrapper.inner.client.signer().secret(),
                &wrapper.inner.replay,
            )
            .await
    };
    let read = read.await;
    if read.is_err() {
        intake::close_after_answer(req, payload);
    }
    read.map_err(|e: IntakeError| {
        let peer = req
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|| "unknown".to_owned());
        let path = intake::signed_path(req);
        match &e {
            IntakeError::Unauthorized(_) => {
                tracing::warn!(%peer, method = %req.method(), %path, reason = %e, "refused unsigned or badly signed request");
            }
            _ => tracing::warn!(%peer, method = %req.method(), %path, reason = %e, "refused request body"),
        }
        e.response()
    })
}

async fn unknown_path(req: HttpRequest) -> HttpResponse {
    intake::error_response(
        ErrorCode::NotFound,
        format!("no endpoint {} {}", req.method(), req.path()),
    )
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
    let ack = match serde_json::from_value::<RunRequest>(value) {
        Ok(request) => wrapper.inner.accept(request),
        Err(e) => malformed(run_id, e),
    };
    crate::metrics::run_request(ack.status);
    if ack.status == AckStatus::Accepted {
        crate::metrics::load(wrapper.inner.running(), wrapper.inner.pending_results());
    }
    ack
}

async fn start_run(
    req: HttpRequest,
    payload: web::Payload,
    wrapper: web::Data<Wrapper>,
) -> HttpResponse {
    let body = match signed_body(&wrapper, &req, payload).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let ack = match serde_json::from_slice::<Value>(&body) {
        Ok(value) => accept_value(&wrapper, value),
        Err(e) => malformed(None, e),
    };
    HttpResponse::build(status(ack.status.http_status())).json(ack)
}

#[derive(Deserialize)]
struct BatchEnvelope {
    runs: Vec<Value>,
    #[serde(default)]
    instance_id: Option<String>,
}

async fn start_batch(
    req: HttpRequest,
    payload: web::Payload,
    wrapper: web::Data<Wrapper>,
) -> HttpResponse {
    let body = match signed_body(&wrapper, &req, payload).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let envelope = match serde_json::from_slice::<BatchEnvelope>(&body) {
        Ok(envelope) => envelope,
        Err(e) => {
            return error(
                ErrorCode::Malformed,
                format!("invalid run batch (expected {{\"runs\": [...]}}): {e}"),
            );
        }
    };
    let me = wrapper.instance_id();
    if let Some(meant) = envelope.instance_id.as_deref()
        && meant != me
    {
        return error(
            ErrorCode::WrongInstance,
            format!("this batch is for executor instance {meant:?}; this is instance {me:?}"),
        );
    }
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
    payload: web::Payload,
    run_id: web::Path<String>,
    wrapper: web::Data<Wrapper>,
) -> HttpResponse {
    let body = match signed_body(&wrapper, &req, payload).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
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

async fn health(
    req: HttpRequest,
    payload: web::Payload,
    wrapper: web::Data<Wrapper>,
) -> HttpResponse {
    if let Err(refused) = signed_body(&wrapper, &req, payload).await {
        return refused;
    }
    HttpResponse::Ok().json(wrapper.inner.health())
}

//! The callback API every engine node serves to wrappers (any node accepts any callback; they
//! share the database): executor register / heartbeat / deregister, results and progress.
//! Every request is signed with the app's secret (`X-Mthpt-App: <tenant>.<app>`); unsigned,
//! forged, stale or replayed requests get 401 and are logged.
//!
//! Results are idempotent: a result for a run that is already final is acknowledged
//! (`duplicate`) and changes nothing; one for an unknown run (or another app's) is `rejected`.
//! A batch is written in one transaction; when the database is unavailable the whole batch is
//! answered 503 and the wrapper keeps it in its spool and tries again.

use std::collections::BTreeMap;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use mthpt_wrapper::protocol::{
    self, DeregisterRequest, DeregisterResponse, ErrorBody, ErrorCode, HeartbeatRequest,
    HeartbeatResponse, ItemAck, ItemStatus, LogStream, Outcome, ProgressBatch,
    ProgressBatchResponse, RegisterRequest, RegisterResponse, ReplayGuard, ResultBatch,
    ResultBatchResponse, SignatureHeaders, unix_now,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::app::{App, ExecutorHeartbeat, ExecutorRegistration, ExecutorState};
use crate::clock::Clock;
use crate::directory::Directory;
use crate::outcome::{Finish, Finished, finish_run};
use crate::run::{RunCompletion, RunId, RunProgress, RunState};
use crate::store::{Store, StoreError};

/// State shared by the callback handlers.
#[derive(Debug)]
pub struct CallbackApi {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    directory: Arc<Directory>,
    replay: ReplayGuard,
    heartbeat_interval_ms: u64,
}

impl CallbackApi {
    /// Handlers over `store`; wrappers are told to heartbeat every `heartbeat_interval_ms`.
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        directory: Arc<Directory>,
        heartbeat_interval_ms: u64,
    ) -> Self {
        Self {
            store,
            clock,
            directory,
            replay: ReplayGuard::new(),
            heartbeat_interval_ms,
        }
    }

    /// Registers the routes (paths under `/mthpt/v1`).
    pub fn configure(api: web::Data<CallbackApi>) -> impl FnOnce(&mut web::ServiceConfig) {
        move |cfg| {
            cfg.app_data(api)
                .app_data(web::PayloadConfig::new(16 * 1024 * 1024))
                .route(protocol::paths::REGISTER, web::post().to(register))
                .route(protocol::paths::HEARTBEAT, web::post().to(heartbeat))
                .route(protocol::paths::DEREGISTER, web::post().to(deregister))
                .route(protocol::paths::RESULTS, web::post().to(results))
                .route(protocol::paths::PROGRESS, web::post().to(progress));
        }
    }

    /// The app that signed `req`.
    async fn authenticate(&self, req: &HttpRequest, body: &[u8]) -> Result<App, ApiError> {
        let headers = SignatureHeaders::from_lookup(|name| {
            req.headers().get(name).and_then(|v| v.to_str().ok())
        })
        .map_err(|e| unauthorized(req, "?", &e.to_string()))?;
        let app = self
            .directory
            .app_by_key(&headers.app, self.clock.now_ms())
            .await?;
        let Some(app) = app else {
            return Err(unauthorized(req, &headers.app, "unknown app key"));
        };
        let path = req
            .uri()
            .path_and_query()
            .map_or_else(|| req.path().to_owned(), |p| p.as_str().to_owned());
        self.replay
            .verify(
                app.secret.as_bytes(),
                req.method().as_str(),
                &path,
                &headers,
                body,
                unix_now(),
            )
            .map_err(|e| unauthorized(req, &headers.app, &e.to_string()))?;
        Ok(app)
    }
}

/// Why a callback was refused; each maps to one protocol error code and HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Unsigned, badly signed, stale, replayed or from an unknown app: 401.
    #[error("request refused: {0}")]
    Unauthorized(String),
    /// Not a valid request body: 400.
    #[error("{0}")]
    Malformed(String),
    /// The database cannot take it now; the wrapper keeps it and retries: 503.
    #[error("the engine's database is unavailable; try again")]
    Unavailable(#[source] StoreError),
}

impl ApiError {
    fn code(&self) -> ErrorCode {
        match self {
            ApiError::Unauthorized(_) => ErrorCode::Unauthorized,
            ApiError::Malformed(_) => ErrorCode::Malformed,
            ApiError::Unavailable(_) => ErrorCode::Unavailable,
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code().http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status_code()).json(ErrorBody::new(self.code(), self.to_string()))
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(f) => ApiError::Malformed(f.to_string()),
            e => {
                tracing::error!(error = %e, "store unavailable while handling a callback");
                ApiError::Unavailable(e)
            }
        }
    }
}

fn ok<T: Serialize>(body: &T) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(body))
}

fn unauthorized(req: &HttpRequest, app: &str, why: &str) -> ApiError {
    tracing::warn!(path = %req.path(), app, peer = ?req.peer_addr(), reason = why, "refused unsigned or badly signed request");
    ApiError::Unauthorized(why.to_owned())
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::Malformed(format!("invalid JSON body: {e}")))
}

async fn register(
    req: HttpRequest,
    body: web::Bytes,
    api: web::Data<CallbackApi>,
) -> Result<HttpResponse, ApiError> {
    let app = api.authenticate(&req, &body).await?;
    let reg: RegisterRequest = parse(&body)?;
    let registration = ExecutorRegistration {
        app_id: app.id,
        instance_id: reg.instance_id.clone(),
        base_url: reg.base_url.clone(),
        capacity: i32::try_from(reg.capacity).unwrap_or(i32::MAX),
        handlers: reg.handlers.iter().map(|h| h.name.clone()).collect(),
        labels: reg.labels.clone(),
    };
    let now = api.clock.now_ms();
    let outcome = async {
        let mut tx = api.store.begin().await?;
        let e = tx.register_executor(&registration, now).await?;
        tx.commit().await?;
        Ok::<_, StoreError>(e)
    }
    .await;
    let e = outcome?;
    api.directory.invalidate(app.id);
    tracing::info!(app = %app.name, instance = %e.instance_id, url = %e.base_url, capacity = e.capacity, "executor registered");
    ok(&RegisterResponse {
        instance_id: e.instance_id,
        heartbeat_interval_ms: Some(api.heartbeat_interval_ms),
    })
}

async fn heartbeat(
    req: HttpRequest,
    body: web::Bytes,
    api: web::Data<CallbackApi>,
) -> Result<HttpResponse, ApiError> {
    let app = api.authenticate(&req, &body).await?;
    let beat: HeartbeatRequest = parse(&body)?;
    let now = api.clock.now_ms();
    // A run sent to this instance a while ago that it does not hold any more is lost (the
    // instance restarted and forgot it); the grace covers requests and acks in flight.
    let grace = i64::try_from(api.heartbeat_interval_ms.saturating_mul(3))
        .unwrap_or(i64::MAX)
        .max(2_000);
    let outcome = async {
        let mut tx = api.store.begin().await?;
        let known = tx
            .heartbeat_executor(
                app.id,
                &beat.instance_id,
                ExecutorHeartbeat {
                    capacity: i32::try_from(beat.capacity).unwrap_or(i32::MAX),
                    running: i32::try_from(beat.running).unwrap_or(i32::MAX),
                },
                now,
            )
            .await?;
        let mut changed = false;
        if let Some(e) = &known {
            if beat.draining && e.state == ExecutorState::Up {
                tx.set_executor_state(app.id, &beat.instance_id, ExecutorState::Draining, now)
                    .await?;
                changed = true;
            }
            let held: std::collections::HashSet<i64> = beat.running_runs.iter().copied().collect();
            for run in tx.running_runs_on_executors(&[e.id]).await? {
                let sent = run.dispatched_at.or(run.started_at).unwrap_or(now);
                if held.contains(&run.id.0) || now - sent < grace {
                    continue;
                }
                tracing::warn!(run = %run.id, instance = %e.instance_id, "an executor no longer holds a run it was sent; declaring it lost");
                let finish = Finish {
                    completion: RunCompletion {
                        state: RunState::Lost,
                        output: None,
                        error: Some(format!(
                            "executor {} no longer holds this run (it restarted or dropped it)",
                            e.instance_id
                        )),
                        log: None,
                        started_at: None,
                        finished_at: now,
                    },
                    retryable: true,
                };
                finish_run(tx.as_mut(), run.id, None, &finish, rand::random()).await?;
            }
        }
        tx.commit().await?;
        Ok::<_, StoreError>((known.is_some(), changed))
    }
    .await;
    let (known, changed) = outcome?;
    if changed {
        api.directory.invalidate(app.id);
    }
    ok(&HeartbeatResponse { known })
}

async fn deregister(
    req: HttpRequest,
    body: web::Bytes,
    api: web::Data<CallbackApi>,
) -> Result<HttpResponse, ApiError> {
    let app = api.authenticate(&req, &body).await?;
    let dereg: DeregisterRequest = parse(&body)?;
    let now = api.clock.now_ms();
    let outcome = async {
        let mut tx = api.store.begin().await?;
        let e = tx
            .set_executor_state(app.id, &dereg.instance_id, ExecutorState::Down, now)
            .await?;
        tx.commit().await?;
        Ok::<_, StoreError>(e)
    }
    .await;
    let e = outcome?;
    api.directory.invalidate(app.id);
    tracing::info!(app = %app.name, instance = %dereg.instance_id, reason = %dereg.reason, "executor deregistered");
    ok(&DeregisterResponse { known: e.is_some() })
}

/// How a reported outcome finishes a run.
fn finish_of(r: &protocol::RunResult) -> Finish {
    let (state, retryable) = match r.outcome {
        Outcome::Succeeded => (RunState::Succeeded, false),
        Outcome::FailedRetryable => (RunState::Failed, true),
        Outcome::FailedFatal => (RunState::Failed, false),
        Outcome::Cancelled => (RunState::Cancelled, false),
        Outcome::TimedOut => (RunState::TimedOut, true),
    };
    Finish {
        completion: RunCompletion {
            state,
            output: (!r.output.is_null()).then(|| r.output.clone()),
            error: r.error.clone(),
            log: (!r.log_tail.is_empty()).then(|| r.log_tail.join("\n")),
            started_at: Some(r.started_at.timestamp_millis()),
            finished_at: r.finished_at.timestamp_millis(),
        },
        retryable,
    }
}

async fn results(
    req: HttpRequest,
    body: web::Bytes,
    api: web::Data<CallbackApi>,
) -> Result<HttpResponse, ApiError> {
    let app = api.authenticate(&req, &body).await?;
    let batch: ResultBatch = parse(&body)?;
    if batch.results.len() > protocol::MAX_BATCH_ITEMS {
        return Err(ApiError::Malformed(format!(
            "at most {} results per batch",
            protocol::MAX_BATCH_ITEMS
        )));
    }
    let outcome = async {
        let mut tx = api.store.begin().await?;
        let mut items = Vec::with_capacity(batch.results.len());
        for r in &batch.results {
            let finish = finish_of(r);
            let (status, message) = match finish_run(
                tx.as_mut(),
                RunId(r.run_id),
                Some(app.id),
                &finish,
                rand::random(),
            )
            .await
            {
                Ok(Finished::Applied { .. }) => (ItemStatus::Accepted, None),
                Ok(Finished::AlreadyFinal(run)) => (
                    ItemStatus::Duplicate,
                    Some(format!("run {} is already {}", run.id, run.state)),
                ),
                Err(StoreError::NotFound(what)) => (
                    ItemStatus::Rejected,
                    Some(format!("{what} is unknown for app {}", app.name)),
                ),
                Err(StoreError::InvalidState(why)) => (ItemStatus::Rejected, Some(why)),
                Err(e) => return Err(e),
            };
            items.push(ItemAck {
                run_id: r.run_id,
                status,
                message,
            });
        }
        tx.commit().await?;
        Ok::<_, StoreError>(items)
    }
    .await;
    ok(&ResultBatchResponse { items: outcome? })
}

async fn progress(
    req: HttpRequest,
    body: web::Bytes,
    api: web::Data<CallbackApi>,
) -> Result<HttpResponse, ApiError> {
    let app = api.authenticate(&req, &body).await?;
    let batch: ProgressBatch = parse(&body)?;
    if batch.updates.len() + batch.logs.len() > 10 * protocol::MAX_BATCH_ITEMS {
        return Err(ApiError::Malformed(
            "too many progress items in one batch".to_owned(),
        ));
    }
    let mut per_run: BTreeMap<i64, RunProgress> = BTreeMap::new();
    for u in &batch.updates {
        let p = per_run
            .entry(u.run_id)
            .or_insert_with(|| empty_progress(u.run_id));
        p.fraction = Some(u.fraction);
        if u.message.is_some() {
            p.message = u.message.clone();
        }
    }
    for l in &batch.logs {
        let p = per_run
            .entry(l.run_id)
            .or_insert_with(|| empty_progress(l.run_id));
        p.log_lines.push(match l.stream {
            LogStream::Stderr => format!("[stderr] {}", l.line),
            LogStream::Handler | LogStream::Stdout => l.line.clone(),
        });
    }
    let now = api.clock.now_ms();
    let outcome = async {
        let mut tx = api.store.begin().await?;
        let mut items = Vec::with_capacity(per_run.len());
        for (run_id, p) in &per_run {
            let recorded = tx.record_progress(Some(app.id), p, now).await?;
            items.push(ItemAck {
                run_id: *run_id,
                status: if recorded {
                    ItemStatus::Accepted
                } else {
                    ItemStatus::Rejected
                },
                message: (!recorded)
                    .then(|| format!("run {run_id} is not running for app {}", app.name)),
            });
        }
        tx.commit().await?;
        Ok::<_, StoreError>(items)
    }
    .await;
    ok(&ProgressBatchResponse { items: outcome? })
}

fn empty_progress(run_id: i64) -> RunProgress {
    RunProgress {
        run_id: RunId(run_id),
        fraction: None,
        message: None,
        log_lines: Vec::new(),
    }
}

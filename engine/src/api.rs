//! The callback API every engine node serves to wrappers (any node accepts any callback; they
//! share the database): executor register / heartbeat / deregister, results, progress and
//! alarms raised by wrappers.
//! Every request is signed with the app's secret (`X-Mthpt-App: <tenant>.<app>`); unsigned,
//! forged, stale or replayed requests get 401 and are logged. The signature headers and the app
//! key are checked before the body is read, and bodies are read within the limits of
//! [`mthpt_wrapper::intake`] (size, read timeout, budget of unverified bytes).
//!
//! Results are idempotent: a result for a run that is already final is acknowledged
//! (`duplicate`) and changes nothing; one for an unknown run (or another app's) is `rejected`.
//! A batch is written in one transaction; when the database is unavailable the whole batch is
//! answered 503 and the wrapper keeps it in its spool and tries again.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use mthpt_wrapper::intake::{self, Intake, IntakeError};
use mthpt_wrapper::protocol::{
    self, AlarmAck, AlarmBatch, AlarmBatchResponse, AlarmState, DeregisterRequest,
    DeregisterResponse, ErrorBody, ErrorCode, HeartbeatRequest, HeartbeatResponse, ItemAck,
    ItemStatus, LogStream, Outcome, ProgressBatch, ProgressBatchResponse, RegisterRequest,
    RegisterResponse, ReplayGuard, ResultBatch, ResultBatchResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::alarm::NewAlarm;
use crate::app::{App, ExecutorHeartbeat, ExecutorId, ExecutorRegistration, ExecutorState};
use crate::clock::Clock;
use crate::directory::Directory;
use crate::outcome::{Finish, Finished, finish_runs, log_finished};
use crate::results::ResultWriter;
use crate::run::{ReportedBy, RunCompletion, RunId, RunProgress, RunState};
use crate::run_events::{RunEvent, RunEvents, What};
use crate::store::{Store, StoreError};

/// State shared by the callback handlers.
#[derive(Debug)]
pub struct CallbackApi {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    directory: Arc<Directory>,
    replay: ReplayGuard,
    /// Limits of request bodies, shared by every callback worker.
    intake: Intake,
    heartbeat_interval_ms: u64,
    /// The engine's runtime, which owns the database connections (`None`: built outside one).
    runtime: Option<tokio::runtime::Handle>,
    results: ResultWriter,
    /// One check of the runs an instance holds at a time (see the heartbeat).
    reconciling: Arc<tokio::sync::Semaphore>,
    /// Announced to wrappers at registration, so they stop their runs before that.
    executor_timeout_ms: Option<u64>,
    /// Where live run events go (after the commit).
    run_events: RunEvents,
}

impl CallbackApi {
    /// Handlers over `store`; wrappers are told to heartbeat every `heartbeat_interval_ms`.
    /// Built inside the engine's runtime, the handlers do their database work on it.
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
            intake: Intake::default(),
            heartbeat_interval_ms,
            runtime: tokio::runtime::Handle::try_current().ok(),
            results: ResultWriter::default(),
            reconciling: Arc::new(tokio::sync::Semaphore::new(1)),
            executor_timeout_ms: None,
            run_events: RunEvents::default(),
        }
    }

    /// Publishes live run events (results, progress, log lines) to `events`.
    pub fn with_run_events(mut self, events: RunEvents) -> Self {
        self.run_events = events;
        self
    }

    /// Notes the runs whose results it writes in `finished` (the dispatcher's), so their
    /// starts are not written after them (see [`FinishedHere`](crate::finished_here)).
    pub fn with_finished_here(mut self, finished: Arc<crate::finished_here::FinishedHere>) -> Self {
        self.results = self.results.with_finished_here(finished);
        self
    }

    /// Request bodies must arrive within `timeout` of their headers (else 408; default
    /// [`BODY_READ_TIMEOUT`](mthpt_wrapper::intake::BODY_READ_TIMEOUT)).
    pub fn with_body_read_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.intake = Intake::with_read_timeout(timeout);
        self
    }

    /// Tells registering wrappers that an instance silent for `ms` may be declared lost.
    pub fn with_executor_timeout(mut self, ms: i64) -> Self {
        self.executor_timeout_ms = u64::try_from(ms).ok();
        self
    }

    /// Registers the routes (paths under `/mthpt/v1`); any other path gets a 404 error body.
    pub fn configure(api: web::Data<CallbackApi>) -> impl FnOnce(&mut web::ServiceConfig) {
        move |cfg| {
            cfg.app_data(api)
                .route(protocol::paths::REGISTER, web::post().to(register))
                .route(protocol::paths::HEARTBEAT, web::post().to(heartbeat))
                .route(protocol::paths::DEREGISTER, web::post().to(deregister))
                .route(protocol::paths::RESULTS, web::post().to(results))
                .route(protocol::paths::PROGRESS, web::post().to(progress))
                .route(protocol::paths::ALARMS, web::post().to(alarms))
                .default_service(web::to(unknown_path));
        }
    }
}

async fn unknown_path(req: HttpRequest) -> HttpResponse {
    intake::error_response(
        ErrorCode::NotFound,
        format!("no endpoint {} {}", req.method(), req.path()),
    )
}

/// What authenticating a callback needs of its HTTP request, for logging refusals.
#[derive(Debug)]
struct Incoming {
    /// Path and query, as signed.
    path: String,
    peer: Option<std::net::SocketAddr>,
}

impl Incoming {
    fn of(req: &HttpRequest) -> Self {
        Self {
            path: intake::signed_path(req).to_owned(),
            peer: req.peer_addr(),
        }
    }
}

/// Runs a callback's work on the engine's runtime. The database connections belong to that
/// runtime: work polled on the HTTP worker's own runtime would have each database round trip
/// woken through another thread, and connections it opened would do the same to the engine's
/// claims and dispatches.
async fn on_engine<T, F, Fut>(api: web::Data<CallbackApi>, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(web::Data<CallbackApi>) -> Fut,
    Fut: Future<Output = Result<T, ApiError>> + Send + 'static,
{
    match api.runtime.clone() {
        Some(runtime) => runtime.spawn(work(api)).await.unwrap_or_else(|e| {
            Err(ApiError::Unavailable(StoreError::Unavailable(format!(
                "the callback's work stopped: {e}"
            ))))
        }),
        None => work(api).await,
    }
}

/// A signed callback: checks the signature headers and the app key from the headers alone, then
/// reads and verifies the body (see [`mthpt_wrapper::intake`]), parses it as `Req` and runs
/// `work` on the engine's runtime; its answer is the JSON response.
async fn signed<Req, Resp, F, Fut>(
    req: HttpRequest,
    mut body: web::Payload,
    api: web::Data<CallbackApi>,
    work: F,
) -> Result<HttpResponse, ApiError>
where
    Req: DeserializeOwned,
    Resp: Serialize + Send + 'static,
    F: FnOnce(web::Data<CallbackApi>, App, String, Req) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Resp, ApiError>> + Send,
{
    let incoming = Incoming::of(&req);
    let preamble = async {
        let headers = intake::signature_headers(&req)
            .map_err(|e| unauthorized(&incoming, "?", &e.to_string()))?;
        let key = headers.app.clone();
        let app = on_engine(api.clone(), move |api| async move {
            Ok(api.directory.app_by_key(&key, api.clock.now_ms()).await?)
        })
        .await?
        .ok_or_else(|| unauthorized(&incoming, &headers.app, "unknown app key"))?;
        let body = api
            .intake
            .read_signed(&req, &mut body, &headers, app.secret.as_bytes(), &api.replay)
            .await
            .map_err(|e| match e {
                IntakeError::Unauthorized(e) => {
                    unauthorized(&incoming, &headers.app, &e.to_string())
                }
                e => {
                    tracing::warn!(path = %incoming.path, app = %headers.app, peer = ?incoming.peer, reason = %e, "refused request body");
                    ApiError::Body(e)
                }
            })?;
        Ok::<_, ApiError>((headers, app, body))
    };
    let (headers, app, body) = match preamble.await {
        Ok(read) => read,
        Err(e) => {
            intake::close_after_answer(&req, body);
            return Err(e);
        }
    };
    // Every log line of the work names the app by its key, `<tenant>.<app>`.
    let span = tracing::info_span!("callback", app = %headers.app);
    let key = headers.app;
    let answer = on_engine(api, move |api| async move {
        let request: Req = parse(&body)?;
        work(api, app, key, request).instrument(span).await
    })
    .await?;
    ok(&answer)
}

/// Why an executor of app `key` at `host` is refused.
fn host_not_allowed(host: &str, tenant: &str, key: &str) -> String {
    format!(
        "executor host {host:?} is not in the allow-list of executor hosts of tenant {tenant:?} \
         (app {key})"
    )
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
    /// An executor whose host the tenant's allow-list does not allow: 403.
    #[error("{0}")]
    HostNotAllowed(String),
    /// The body could not be read within the limits: too large (413), too slow (408), too
    /// many bodies being received (503) or broken framing (400).
    #[error("{0}")]
    Body(IntakeError),
    /// The database cannot take it now; the wrapper keeps it and retries: 503.
    #[error("the engine's database is unavailable; try again")]
    Unavailable(#[source] StoreError),
}

impl ApiError {
    fn code(&self) -> ErrorCode {
        match self {
            ApiError::Unauthorized(_) => ErrorCode::Unauthorized,
            ApiError::Malformed(_) => ErrorCode::Malformed,
            ApiError::HostNotAllowed(_) => ErrorCode::HostNotAllowed,
            ApiError::Body(e) => e.code(),
            ApiError::Unavailable(_) => ErrorCode::Unavailable,
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code().http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            // The body may be unread: close the connection rather than read on.
            ApiError::Unauthorized(_) | ApiError::Body(_) => {
                intake::error_response(self.code(), self.to_string())
            }
            _ => HttpResponse::build(self.status_code())
                .json(ErrorBody::new(self.code(), self.to_string())),
        }
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

fn unauthorized(req: &Incoming, app: &str, why: &str) -> ApiError {
    crate::metrics::unauthorized();
    tracing::warn!(path = %req.path, app, peer = ?req.peer, reason = why, "refused unsigned or badly signed request");
    ApiError::Unauthorized(why.to_owned())
}

/// Parses a callback body. What a wrapper reports (outputs, errors, logs, progress, alarms)
/// is stored, and PostgreSQL stores no NUL character: a body that escapes one (`\u0000`) has
/// each NUL in its strings and keys replaced by U+FFFD first ([`crate::validate::replace_nul`]),
/// so a handler's stray NUL cannot make its result undeliverable.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let malformed = |e: serde_json::Error| ApiError::Malformed(format!("invalid JSON body: {e}"));
    if !body.windows(6).any(|w| w == b"\\u0000") {
        return serde_json::from_slice(body).map_err(malformed);
    }
    let mut value: serde_json::Value = serde_json::from_slice(body).map_err(malformed)?;
    crate::validate::replace_nul(&mut value);
    serde_json::from_value(value).map_err(malformed)
}

async fn register(
    req: HttpRequest,
    body: web::Payload,
    api: web::Data<CallbackApi>,
) -> Result<HttpResponse, ApiError> {
    signed(
        req,
        body,
        api,
        move |api, app, key, reg: RegisterRequest| async move {
            let registration = ExecutorRegistration {
                app_id: app.id,
                instance_id: reg.instance_id,
                base_url: reg.base_url,
                capacity: i32::try_from(reg.capacity).unwrap_or(i32::MAX),
                handlers: reg.handlers.into_iter().map(|h| h.name).collect(),
                labels: reg.labels,
            };
            registration
                .validate()
                .map_err(|f| ApiError::Malformed(f.to_string()))?;
            let now = api.clock.now_ms();
            let mut tx = api.store.begin().await?;
            let tenant = tx.get_tenant(app.tenant_id).await?;
            if let Some(host) = tenant.refused_executor_host(&registration.base_url) {
                drop(tx);
                tracing::warn!(
                    instance = %registration.instance_id, url = %registration.base_url, %host,
                    tenant = %tenant.name,
                    "executor registration refused: host not in the tenant's allow-list"
                );
                return Err(ApiError::HostNotAllowed(host_not_allowed(
                    &host,
                    &tenant.name,
                    &key,
                )));
            }
            let e = tx.register_executor(&registration, now).await?;
            tx.commit().await?;
            api.directory.invalidate(app.id);
            tracing::info!(
                instance = %e.instance_id, url = %e.base_url, capacity = e.capacity,
                "executor registered"
            );
            Ok(RegisterResponse {
                instance_id: e.instance_id,
                heartbeat_interval_ms: Some(api.heartbeat_interval_ms),
                executor_timeout_ms: api.executor_timeout_ms,
                tenant_id: Some(app.tenant_id.0),
            })
        },
    )
    .await
}

async fn heartbeat(
    req: HttpRequest,
    body: web::Payload,
    api: web::Data<CallbackApi>,
) -> Result<HttpResponse, ApiError> {
    signed(
        req,
        body,
        api,
        move |api, app, key, beat: HeartbeatRequest| async move {
            let now = api.clock.now_ms();
            // The heartbeat alone, in a transaction of its own that takes no run lock: it must
            // never wait behind result writes, or a busy node gets healthy instances declared
            // lost.
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
            // An instance whose host the tenant's allow-list no longer allows gets no new runs
            // (draining: the runs it holds may still report) and is told it is not known, so
            // it registers again — and is refused, naming the host, until the list allows it.
            let mut refused = None;
            if let Some(e) = &known {
                let tenant = tx.get_tenant(e.tenant_id).await?;
                refused = tenant
                    .refused_executor_host(&e.base_url)
                    .map(|host| (host, tenant.name));
            }
            let mut changed = false;
            if let Some(e) = &known
                && (beat.draining || refused.is_some())
                && e.state == ExecutorState::Up
            {
                tx.set_executor_state(app.id, &beat.instance_id, ExecutorState::Draining, now)
                    .await?;
                changed = true;
            }
            tx.commit().await?;
            if changed {
                api.directory.invalidate(app.id);
            }
            if let Some((host, tenant)) = refused {
                tracing::warn!(
                    instance = %beat.instance_id, %host, %tenant,
                    "{}; the instance gets no new runs",
                    host_not_allowed(&host, &tenant, &key)
                );
                return Ok(HeartbeatResponse { known: false });
            }
            let is_known = known.is_some();
            if let Some(e) = known {
                // Runs it no longer holds are settled after answering, one check at a time
                // per node (a check skipped now happens at a later heartbeat).
                if let Ok(permit) = api.reconciling.clone().try_acquire_owned() {
                    let api = api.clone();
                    tokio::spawn(async move {
                        let built_at = beat.sent_at.timestamp_millis();
                        if let Err(err) =
                            forgotten_runs_lost(&api, &e, &beat.running_runs, built_at).await
                        {
                            tracing::warn!(error = %err, instance = %e.instance_id, "could not check the runs an instance holds");
                        }
                        drop(permit);
                    });
                }
            }
            Ok(HeartbeatResponse { known: is_known })
        },
    )
    .await
}

/// Declares lost the runs `executor` was sent a while ago but no longer lists as held (it
/// restarted and forgot them); the grace covers requests and acks in flight. "A while ago"
/// counts up to when the heartbeat was built (`built_at`, by the wrapper's clock), not when it
/// arrived: a node resuming from a pause reads heartbeats that waited in its socket, and their
/// lists predate runs sent since.
async fn forgotten_runs_lost(
    api: &CallbackApi,
    executor: &crate::app::Executor,
    held: &[i64],
    built_at: i64,
) -> Result<(), StoreError> {
    let now = api.clock.now_ms();
    let judged_at = now.min(built_at);
    let grace = i64::try_from(api.heartbeat_interval_ms.saturating_mul(3))
        .unwrap_or(i64::MAX)
        .max(2_000);
    // Read without locks (result writes must never wait on a heartbeat); the finish below
    // locks the few runs found and leaves any that finished meanwhile as they are.
    let mut tx = api.store.begin().await?;
    let missing = tx
        .running_runs_missing_from(executor.id, held, judged_at.saturating_sub(grace))
        .await?;
    let mut items = Vec::with_capacity(missing.len());
    for run in missing {
        tracing::warn!(
            %run, instance = %executor.instance_id,
            "an executor no longer holds a run it was sent; declaring it lost"
        );
        let finish = Finish::decided(
            RunState::Lost,
            format!(
                "executor {} no longer holds this run (it restarted or dropped it)",
                executor.instance_id
            ),
            true,
            now,
        );
        items.push((run, finish));
    }
    let finished = if items.is_empty() {
        Vec::new()
    } else {
        finish_runs(tx.as_mut(), None, &items, &mut rand::random).await?
    };
    tx.commit().await?;
    log_finished(&finished, Some(&api.directory));
    api.run_events.finished(&finished);
    Ok(())
}

async fn deregister(
    req: HttpRequest,
    body: web::Payload,
    api: web::Data<CallbackApi>,
) -> Result<HttpResponse, ApiError> {
    signed(
        req,
        body,
        api,
        move |api, app, _key, dereg: DeregisterRequest| async move {
            let now = api.clock.now_ms();
            let mut tx = api.store.begin().await?;
            let e = tx
                .set_executor_state(app.id, &dereg.instance_id, ExecutorState::Down, now)
                .await?;
            tx.commit().await?;
            api.directory.invalidate(app.id);
            tracing::info!(
                instance = %dereg.instance_id, reason = %dereg.reason,
                "executor deregistered"
            );
            Ok(DeregisterResponse { known: e.is_some() })
        },
    )
    .await
}

/// The longest run error kept from a result (characters); a longer one is cut, marked with
/// how much more there was. The output and the log are bounded by the body's size and the log
/// tail's.
pub const MAX_RUN_ERROR_CHARS: usize = 8_192;

/// How a reported outcome finishes a run; `executor` is the reporting instance.
fn finish_of(r: protocol::RunResult, executor: ExecutorId) -> Finish {
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
            output: (!r.output.is_null()).then_some(r.output),
            error: r
                .error
                .map(|e| crate::validate::clip_chars(e, MAX_RUN_ERROR_CHARS)),
            log: (!r.log_tail.is_empty()).then(|| r.log_tail.join("\n")),
            started_at: Some(r.started_at.timestamp_millis()),
            finished_at: r.finished_at.timestamp_millis(),
            reported_by: Some(ReportedBy {
                executor_id: executor,
                attempt: i32::try_from(r.attempt).unwrap_or(i32::MAX),
                dispatched_at: r.sent_at.map(|t| t.timestamp_millis()),
            }),
        },
        retryable,
    }
}

async fn results(
    req: HttpRequest,
    body: web::Payload,
    api: web::Data<CallbackApi>,
) -> Result<HttpResponse, ApiError> {
    signed(
        req,
        body,
        api,
        move |api, app, key, batch: ResultBatch| async move {
            if batch.results.len() > protocol::MAX_BATCH_ITEMS {
                return Err(ApiError::Malformed(format!(
                    "at most {} results per batch",
                    protocol::MAX_BATCH_ITEMS
                )));
            }
            // Results count only from the instance each run was dispatched to: the one a
            // result names (a result replayed after a restart), or else the sender.
            let mut instances: BTreeMap<String, Option<ExecutorId>> = BTreeMap::new();
            for r in &batch.results {
                let name = r.instance_id.as_deref().unwrap_or(&batch.instance_id);
                if !instances.contains_key(name) {
                    let id = api.directory.registered_instance(app.id, name).await?;
                    instances.insert(name.to_owned(), id);
                }
            }
            let mut items: Vec<ItemAck> = Vec::with_capacity(batch.results.len());
            let mut finishes: Vec<(RunId, Finish)> = Vec::with_capacity(batch.results.len());
            for r in batch.results {
                let name = r.instance_id.clone().unwrap_or_else(|| batch.instance_id.clone());
                items.push(ItemAck {
                    run_id: r.run_id,
                    status: ItemStatus::Rejected,
                    message: None,
                });
                match instances.get(&name).copied().flatten() {
                    Some(executor) => finishes.push((RunId(r.run_id), finish_of(r, executor))),
                    None => {
                        tracing::warn!(app = %key, instance = %name, run = r.run_id, "result from an unregistered instance refused");
                        if let Some(item) = items.last_mut() {
                            item.message = Some(format!(
                                "executor instance {name:?} is not registered for app {key}"
                            ));
                        }
                    }
                }
            }
            let finished = if finishes.is_empty() {
                Vec::new()
            } else {
                api.results
                    .finish(
                        &api.store,
                        &api.directory,
                        &api.run_events,
                        app.id,
                        finishes,
                    )
                    .await
                    .map_err(ApiError::Unavailable)?
            };
            // The written items, in order, are those not refused above.
            let mut finished = finished.into_iter();
            for item in items.iter_mut().filter(|i| i.message.is_none()) {
                let Some(outcome) = finished.next() else { break };
                let (status, message) = match outcome {
                    Ok(Finished::Applied { .. }) => (ItemStatus::Accepted, None),
                    Ok(Finished::AlreadyFinal(run)) => (
                        ItemStatus::Duplicate,
                        Some(format!("run {} is already {}", run.id, run.state)),
                    ),
                    Err(StoreError::NotFound(what)) => (
                        ItemStatus::Rejected,
                        Some(format!("{what} is unknown for app {key}")),
                    ),
                    Err(StoreError::InvalidState(why)) => (ItemStatus::Rejected, Some(why)),
                    Err(e) => return Err(e.into()),
                };
                item.status = status;
                item.message = message;
            }
            crate::metrics::results(&items);
            Ok(ResultBatchResponse { items })
        },
    )
    .await
}

async fn progress(
    req: HttpRequest,
    body: web::Payload,
    api: web::Data<CallbackApi>,
) -> Result<HttpResponse, ApiError> {
    signed(
        req,
        body,
        api,
        move |api, app, key, batch: ProgressBatch| async move {
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
                // The protocol's range; a value outside it is taken as the nearest bound.
                p.fraction = Some(u.fraction.clamp(0.0, 1.0));
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
            let mut tx = api.store.begin().await?;
            let mut items = Vec::with_capacity(per_run.len());
            let mut live = Vec::new();
            for (run_id, p) in &per_run {
                let task = tx.record_progress(Some(app.id), p, now).await?;
                let recorded = task.is_some();
                if let Some(task) = task
                    && api.run_events.is_on()
                {
                    live.push((task, p));
                }
                items.push(ItemAck {
                    run_id: *run_id,
                    status: if recorded {
                        ItemStatus::Accepted
                    } else {
                        ItemStatus::Rejected
                    },
                    message: (!recorded)
                        .then(|| format!("run {run_id} is not running for app {key}")),
                });
            }
            tx.commit().await?;
            for (task_id, p) in live {
                progress_events(&api.run_events, app.tenant_id, task_id, p, now);
            }
            Ok(ProgressBatchResponse { items })
        },
    )
    .await
}

/// Stores a wrapper's alarms as alarms of the app's tenant (kind `app`, the wrapper's own kind
/// in `details.app_kind`, dedupe key `app:<app key>:<alarm id>`), through the same outbox as
/// the engine's own: a repeat of an open alarm of the same task and own kind is counted on it.
/// The run (and its task) is attached only when it is one of the tenant's runs.
async fn alarms(
    req: HttpRequest,
    body: web::Payload,
    api: web::Data<CallbackApi>,
) -> Result<HttpResponse, ApiError> {
    signed(
        req,
        body,
        api,
        move |api, app, key, batch: AlarmBatch| async move {
            if batch.alarms.len() > protocol::MAX_ALARMS_PER_BATCH {
                return Err(ApiError::Malformed(format!(
                    "{} alarms in one batch; at most {} are accepted",
                    batch.alarms.len(),
                    protocol::MAX_ALARMS_PER_BATCH
                )));
            }
            let now = api.clock.now_ms();
            let mut tx = api.store.begin().await?;
            let mut items = Vec::with_capacity(batch.alarms.len());
            for a in &batch.alarms {
                let ack = |status, message: Option<String>| AlarmAck {
                    id: a.id.clone(),
                    status,
                    message,
                };
                if let Err(e) = a.validate() {
                    items.push(ack(ItemStatus::Rejected, Some(e.to_string())));
                    continue;
                }
                let dedupe_key = protocol::dedupe_key(&key, &a.id);
                if a.state == AlarmState::Resolved {
                    let resolved = tx
                        .resolve_alarm_by_key(app.tenant_id, &dedupe_key, now)
                        .await?;
                    items.push(match resolved {
                        Some(_) => ack(ItemStatus::Accepted, None),
                        None => ack(
                            ItemStatus::Duplicate,
                            Some("no open alarm with this id".to_owned()),
                        ),
                    });
                    continue;
                }
                let mut alarm = NewAlarm::from_app(
                    app.tenant_id,
                    a.severity.into(),
                    a.message.clone(),
                    a.details(&key, &batch.instance_id),
                    dedupe_key,
                );
                if let Some(run_id) = a.run_id {
                    match tx.get_run(app.tenant_id, RunId(run_id)).await {
                        Ok(run) => alarm = alarm.about_run(&run),
                        Err(StoreError::NotFound(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                let raised = tx.insert_alarm(&alarm, now).await?;
                items.push(match raised {
                    Some(_) => ack(ItemStatus::Accepted, None),
                    None => ack(
                        ItemStatus::Duplicate,
                        Some("an alarm with this id was stored before".to_owned()),
                    ),
                });
            }
            tx.commit().await?;
            Ok(AlarmBatchResponse { items })
        },
    )
    .await
}

/// The live events of one run's recorded progress: the progress itself, and its log lines.
fn progress_events(
    events: &RunEvents,
    tenant_id: crate::tenant::TenantId,
    task_id: crate::task::TaskId,
    p: &RunProgress,
    at: i64,
) {
    let event = |what| RunEvent {
        tenant_id,
        task_id,
        run_id: p.run_id,
        at,
        what,
    };
    if p.fraction.is_some() || p.message.is_some() {
        events.emit(event(What::Progress {
            fraction: p.fraction.map(|f| f.clamp(0.0, 1.0)),
            message: p.message.clone(),
            coalesced: 0,
        }));
    }
    if !p.log_lines.is_empty() {
        events.emit(event(What::Log {
            lines: p.log_lines.clone(),
            dropped: 0,
        }));
    }
}

fn empty_progress(run_id: i64) -> RunProgress {
    RunProgress {
        run_id: RunId(run_id),
        fraction: None,
        message: None,
        log_lines: Vec::new(),
    }
}

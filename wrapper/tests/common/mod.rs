//! Test support: an engine stand-in built from the protocol types, a wrapper on port 0, and a
//! signed client playing the engine's dispatching side.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use chrono::Utc;
use mthpt_wrapper::client::{RawResponse, SignedClient};
use mthpt_wrapper::protocol::{
    AlarmAck, AlarmBatch, AlarmBatchResponse, DeregisterRequest, DeregisterResponse, ErrorBody,
    ErrorCode, HeartbeatRequest, HeartbeatResponse, ItemAck, ItemStatus, ProgressBatch,
    ProgressBatchResponse, RegisterRequest, RegisterResponse, ReplayGuard, ResultBatch,
    ResultBatchResponse, RunId, RunRequest, RunResult, SignatureHeaders, Signer, Trigger,
    WrapperAlarm, paths, unix_now,
};
use mthpt_wrapper::{Wrapper, WrapperBuilder};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub const APP: &str = "acme.billing";
pub const SECRET: &[u8] = b"test-secret-0123456789";

/// What the engine stand-in has seen.
#[derive(Debug, Default)]
pub struct EngineLog {
    pub registers: Vec<RegisterRequest>,
    pub heartbeats: Vec<HeartbeatRequest>,
    pub deregisters: Vec<DeregisterRequest>,
    /// Results it accepted (a run id may appear once per accepted delivery).
    pub results: Vec<RunResult>,
    /// The number of results in each accepted result request, in arrival order.
    pub result_batches: Vec<usize>,
    /// Result batches it refused with 503.
    pub refused_result_batches: usize,
    pub progress: Vec<ProgressBatch>,
    /// Alarms it accepted, in arrival order.
    pub alarms: Vec<WrapperAlarm>,
    pub unauthorized: usize,
}

#[derive(Debug, Default)]
struct Switches {
    refuse_results: bool,
    /// Heartbeats and results are answered only after 10 s (a paused engine).
    hang_heartbeats: bool,
    /// Announced at registration.
    executor_timeout_ms: Option<u64>,
    /// Heartbeats, registrations and alarms are answered 503 (an engine whose database is down).
    down: bool,
}

#[derive(Debug, Default)]
struct EngineState {
    log: Mutex<EngineLog>,
    switches: Mutex<Switches>,
    guard: ReplayGuard,
}

/// A minimal engine: verifies signatures and records what wrappers send.
pub struct EngineStandIn {
    pub url: String,
    state: Arc<EngineState>,
    handle: ServerHandle,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn signed_json<T: DeserializeOwned>(
    state: &EngineState,
    req: &HttpRequest,
    body: &[u8],
) -> Result<T, HttpResponse> {
    let verified =
        SignatureHeaders::from_lookup(|n| req.headers().get(n).and_then(|v| v.to_str().ok()))
            .and_then(|h| {
                state.guard.verify(
                    SECRET,
                    req.method().as_str(),
                    req.uri().path(),
                    &h,
                    body,
                    unix_now(),
                )
            });
    if let Err(e) = verified {
        lock(&state.log).unauthorized += 1;
        return Err(HttpResponse::Unauthorized()
            .json(ErrorBody::new(ErrorCode::Unauthorized, e.to_string())));
    }
    serde_json::from_slice(body).map_err(|e| {
        HttpResponse::BadRequest().json(ErrorBody::new(ErrorCode::Malformed, e.to_string()))
    })
}

async fn register(req: HttpRequest, body: web::Bytes, st: web::Data<EngineState>) -> HttpResponse {
    if lock(&st.switches).down {
        return unavailable();
    }
    match signed_json::<RegisterRequest>(&st, &req, &body).await {
        Ok(r) => {
            let id = r.instance_id.clone();
            lock(&st.log).registers.push(r);
            HttpResponse::Ok().json(RegisterResponse {
                instance_id: id,
                heartbeat_interval_ms: Some(200),
                executor_timeout_ms: lock(&st.switches).executor_timeout_ms,
                tenant_id: None,
            })
        }
        Err(resp) => resp,
    }
}

fn unavailable() -> HttpResponse {
    HttpResponse::ServiceUnavailable().json(ErrorBody::new(ErrorCode::Unavailable, "down"))
}

async fn alarms(req: HttpRequest, body: web::Bytes, st: web::Data<EngineState>) -> HttpResponse {
    if lock(&st.switches).down {
        return unavailable();
    }
    match signed_json::<AlarmBatch>(&st, &req, &body).await {
        Ok(batch) => {
            let items = batch
                .alarms
                .iter()
                .map(|a| AlarmAck {
                    id: a.id.clone(),
                    status: ItemStatus::Accepted,
                    message: None,
                })
                .collect();
            lock(&st.log).alarms.extend(batch.alarms);
            HttpResponse::Ok().json(AlarmBatchResponse { items })
        }
        Err(resp) => resp,
    }
}

async fn heartbeat(req: HttpRequest, body: web::Bytes, st: web::Data<EngineState>) -> HttpResponse {
    if lock(&st.switches).down {
        return unavailable();
    }
    let hang = lock(&st.switches).hang_heartbeats;
    if hang {
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    match signed_json::<HeartbeatRequest>(&st, &req, &body).await {
        Ok(h) => {
            lock(&st.log).heartbeats.push(h);
            HttpResponse::Ok().json(HeartbeatResponse { known: true })
        }
        Err(resp) => resp,
    }
}

async fn deregister(
    req: HttpRequest,
    body: web::Bytes,
    st: web::Data<EngineState>,
) -> HttpResponse {
    match signed_json::<DeregisterRequest>(&st, &req, &body).await {
        Ok(d) => {
            lock(&st.log).deregisters.push(d);
            HttpResponse::Ok().json(DeregisterResponse { known: true })
        }
        Err(resp) => resp,
    }
}

async fn results(req: HttpRequest, body: web::Bytes, st: web::Data<EngineState>) -> HttpResponse {
    let hang = lock(&st.switches).hang_heartbeats;
    if hang {
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    match signed_json::<ResultBatch>(&st, &req, &body).await {
        Ok(batch) => {
            if lock(&st.switches).refuse_results {
                lock(&st.log).refused_result_batches += 1;
                return HttpResponse::ServiceUnavailable()
                    .json(ErrorBody::new(ErrorCode::Unavailable, "database is down"));
            }
            let mut log = lock(&st.log);
            log.result_batches.push(batch.results.len());
            let items = batch
                .results
                .into_iter()
                .map(|r| {
                    let status = if log.results.iter().any(|x| x.run_id == r.run_id) {
                        ItemStatus::Duplicate
                    } else {
                        ItemStatus::Accepted
                    };
                    let run_id = r.run_id;
                    log.results.push(r);
                    ItemAck {
                        run_id,
                        status,
                        message: None,
                    }
                })
                .collect();
            HttpResponse::Ok().json(ResultBatchResponse { items })
        }
        Err(resp) => resp,
    }
}

async fn progress(req: HttpRequest, body: web::Bytes, st: web::Data<EngineState>) -> HttpResponse {
    match signed_json::<ProgressBatch>(&st, &req, &body).await {
        Ok(batch) => {
            let items = batch
                .run_ids()
                .into_iter()
                .map(|run_id| ItemAck {
                    run_id,
                    status: ItemStatus::Accepted,
                    message: None,
                })
                .collect();
            lock(&st.log).progress.push(batch);
            HttpResponse::Ok().json(ProgressBatchResponse { items })
        }
        Err(resp) => resp,
    }
}

impl EngineStandIn {
    pub fn start() -> anyhow::Result<Self> {
        let state = Arc::new(EngineState::default());
        let data = web::Data::from(state.clone());
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .route(paths::REGISTER, web::post().to(register))
                .route(paths::HEARTBEAT, web::post().to(heartbeat))
                .route(paths::DEREGISTER, web::post().to(deregister))
                .route(paths::RESULTS, web::post().to(results))
                .route(paths::PROGRESS, web::post().to(progress))
                .route(paths::ALARMS, web::post().to(alarms))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)?
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Ok(Self { url, state, handle })
    }

    pub fn refuse_results(&self, refuse: bool) {
        lock(&self.state.switches).refuse_results = refuse;
    }

    /// The executor timeout announced to wrappers that register from now on.
    pub fn announce_executor_timeout(&self, ms: u64) {
        lock(&self.state.switches).executor_timeout_ms = Some(ms);
    }

    /// Answers heartbeats, registrations and alarms with 503 (`true`) or serves them again.
    pub fn set_down(&self, down: bool) {
        lock(&self.state.switches).down = down;
    }

    pub fn hang_heartbeats(&self, hang: bool) {
        lock(&self.state.switches).hang_heartbeats = hang;
    }

    pub fn log(&self) -> MutexGuard<'_, EngineLog> {
        lock(&self.state.log)
    }

    pub fn results_for(&self, run_id: RunId) -> Vec<RunResult> {
        self.log()
            .results
            .iter()
            .filter(|r| r.run_id == run_id)
            .cloned()
            .collect()
    }

    pub async fn stop(&self) {
        self.handle.stop(false).await;
    }
}

/// A wrapper served on port 0.
pub struct TestWrapper {
    pub wrapper: Wrapper,
    pub url: String,
    handle: ServerHandle,
}

impl TestWrapper {
    /// Binds a port, builds the wrapper from `configure(builder)` and serves it.
    pub fn start(
        engine_urls: &[&str],
        spool: &Path,
        configure: impl FnOnce(WrapperBuilder) -> WrapperBuilder,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let builder = Wrapper::builder(APP, SECRET)
            .engine_urls(engine_urls.iter().copied())
            .advertise_url(url.clone())
            .spool_dir(spool)
            .retry_backoff(Duration::from_millis(20), Duration::from_millis(200))
            .engine_timeouts(Duration::from_secs(2), Duration::from_secs(5))
            .flush_timeout(Duration::from_secs(5))
            .progress_flush_interval(Duration::from_millis(50));
        let wrapper = configure(builder).build()?;
        let server = wrapper.http_server(listener)?;
        let handle = server.handle();
        tokio::spawn(server);
        Ok(Self {
            wrapper,
            url,
            handle,
        })
    }

    pub async fn stop_server(&self) {
        self.handle.stop(false).await;
    }
}

/// The engine's dispatching side: signed calls to a wrapper.
pub fn engine_client() -> anyhow::Result<SignedClient> {
    Ok(SignedClient::new(
        Signer::new(APP, SECRET),
        Duration::from_secs(5),
        Duration::from_secs(30),
    )?)
}

pub fn run_request(run_id: RunId, handler: &str) -> RunRequest {
    RunRequest {
        run_id,
        task_id: 7,
        task_name: "nightly-close".to_owned(),
        handler: handler.to_owned(),
        params: serde_json::Value::Null,
        attempt: 1,
        scheduled_at: Utc::now(),
        shard_index: 0,
        shard_total: 1,
        deadline: None,
        trigger: Trigger::Manual,
        not_after: None,
        sent_at: None,
    }
}

pub async fn post<B: Serialize>(
    client: &SignedClient,
    base: &str,
    path: &str,
    body: &B,
) -> anyhow::Result<RawResponse> {
    Ok(client.post_json_raw(base, path, body).await?)
}

/// Polls `check` until it holds or `timeout` passes; returns whether it held.
pub async fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    mthpt_testkit::wait_until(timeout, || {
        let held = check();
        async move { held }
    })
    .await
    .is_ok()
}

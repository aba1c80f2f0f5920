//! One engine node: the loops that make it schedule, wired together.
//!
//! - **Scheduler**: every poll (and at once when a due signal arrives) claim a batch of runs due
//!   within the look-ahead window; hold them in an in-memory timer; at each run's due time hand
//!   the runs due then to the dispatcher (a spawned task, bounded by its semaphore).
//! - **Watchdog**: deadlines, silent executors and nodes, runs not started in time.
//! - **Heartbeat**: the node's own row, so other nodes can report it lost.
//! - **Rollup and retention**: rolls finished runs up per task and minute and deletes those
//!   past their tenant's retention ([`crate::rollup`]).
//! - **Alarm relay** (when the node is given a [`Bus`]): publishes the outbox of alarm events
//!   ([`AlarmRelay`]).
//! - **Live run events** (with a bus too): state changes, progress and log lines of runs,
//!   best effort ([`RunEvents`]).
//! - **Callback API**: the HTTP server wrappers call back to.
//!
//! [`EngineNode::shutdown`] stops claiming, hands the runs it holds but has not fired back to
//! the others at once, lets in-flight dispatches finish, marks the node stopped and stops the
//! server.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::admission::{Admission, ClaimCap};
use crate::api::CallbackApi;
use crate::bus::Bus;
use crate::claimer::{Cancellation, ClaimConfig, Claimer, Fire};
use crate::clock::Clock;
use crate::directory::Directory;
use crate::dispatcher::{ACK_TIMEOUT, DispatchConfig, DispatchReport, Dispatcher, Ready};
use crate::node::{NodeHeartbeat, NodeState};
use crate::relay::AlarmRelay;
use crate::run::{Fence, RunId};
use crate::run_events::{RunEvents, RunEventsConfig};
use crate::store::{DueListener, Store, StoreError};
use crate::watchdog::{HealthProbe, WatchConfig, Watchdog};

/// How long after a failed delivery a person's cancel request is sent again.
pub const CANCEL_RETRY_MS: i64 = 2_000;

/// How long after a run was cancelled its cancel request is still retried.
pub const CANCEL_RETRY_FOR_MS: i64 = 60_000;

/// The longest wait between alarm relay passes that fail (the database unreachable).
const RELAY_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Everything a node needs to know. [`EngineConfig::default`] gives working values.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    /// Unique per node (default: host name, process id and a random suffix).
    pub node_id: String,
    /// The node groups this node schedules.
    pub groups: Vec<String>,
    /// Where the callback API listens (`127.0.0.1:7700`; port 0 picks a free one).
    pub listen: String,
    /// How others reach it (default: `http://<listen>`).
    pub advertise: Option<String>,
    /// Claim at least this often.
    pub poll_interval_ms: i64,
    /// Claim runs due up to this far ahead.
    pub horizon_ms: i64,
    /// How long a claim holds: a dead node's runs move to another node after at most this.
    pub lease_ms: i64,
    /// At most this many runs per claim.
    pub claim_batch: i64,
    /// How often the node heartbeats.
    pub heartbeat_interval_ms: i64,
    /// How often the watchdog looks.
    pub watchdog_interval_ms: i64,
    /// Wrappers are told to heartbeat this often.
    pub executor_heartbeat_ms: u64,
    /// A wrapper silent this long is lost.
    pub executor_timeout_ms: i64,
    /// A node silent this long is reported lost.
    pub node_timeout_ms: i64,
    /// How long app and executor facts are cached.
    pub directory_ttl_ms: i64,
    /// Threads of the callback API's HTTP server. They parse and verify requests only: the
    /// database work of a callback runs on the engine's own runtime.
    pub callback_workers: usize,
    /// How long a request body to the callback API may take to arrive once its headers are
    /// read (else 408); what a slow or hostile client can hold a connection for.
    pub body_read_timeout_ms: i64,
    pub dispatch: DispatchConfig,
    /// On shutdown, how long in-flight dispatches may take.
    pub shutdown_grace_ms: i64,
    /// How often the alarm relay looks for unpublished alarm events (at once again while a
    /// batch comes back full).
    pub relay_interval_ms: i64,
    /// At most this many alarm events per relay pass.
    pub relay_batch: i64,
    /// Live run events (published when the node has a bus).
    pub run_events: RunEventsConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            node_id: default_node_id(),
            groups: vec![crate::tenant::DEFAULT_NODE_GROUP.to_owned()],
            listen: "127.0.0.1:7700".to_owned(),
            advertise: None,
            poll_interval_ms: 250,
            horizon_ms: 500,
            lease_ms: 2_000,
            claim_batch: 1_000,
            heartbeat_interval_ms: 1_000,
            watchdog_interval_ms: 500,
            executor_heartbeat_ms: 1_000,
            executor_timeout_ms: 4_000,
            node_timeout_ms: 5_000,
            directory_ttl_ms: 1_000,
            callback_workers: 1,
            body_read_timeout_ms: i64::try_from(
                mthpt_wrapper::intake::BODY_READ_TIMEOUT.as_millis(),
            )
            .unwrap_or(i64::MAX),
            dispatch: DispatchConfig::default(),
            shutdown_grace_ms: 10_000,
            relay_interval_ms: 50,
            relay_batch: 500,
            run_events: RunEventsConfig::default(),
        }
    }
}

/// `<host>-<pid>-<random>`.
pub fn default_node_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "engine".to_owned());
    format!(
        "{host}-{}-{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}

impl EngineConfig {
    /// Checks that the timings fit together, naming what does not.
    pub fn validate(&self) -> Result<(), String> {
        if self.groups.is_empty() {
            return Err("groups: a node must serve at least one node group".to_owned());
        }
        if self.node_id.trim().is_empty() {
            return Err("node_id must not be empty".to_owned());
        }
        let positive = [
            ("poll_interval_ms", self.poll_interval_ms),
            ("lease_ms", self.lease_ms),
            ("claim_batch", self.claim_batch),
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("watchdog_interval_ms", self.watchdog_interval_ms),
            ("executor_timeout_ms", self.executor_timeout_ms),
            ("node_timeout_ms", self.node_timeout_ms),
            ("relay_interval_ms", self.relay_interval_ms),
            ("relay_batch", self.relay_batch),
        ];
        for (name, v) in positive {
            if v <= 0 {
                return Err(format!("{name} must be positive (is {v})"));
            }
        }
        if self.callback_workers == 0 {
            return Err("callback_workers must be at least 1".to_owned());
        }
        if !(1..=3_600_000).contains(&self.body_read_timeout_ms) {
            return Err(format!(
                "body_read_timeout_ms must be from 1 to 3600000 (is {})",
                self.body_read_timeout_ms
            ));
        }
        if self.horizon_ms < 0 {
            return Err(format!(
                "horizon_ms must not be negative (is {})",
                self.horizon_ms
            ));
        }
        if !(0..=1_000).contains(&self.dispatch.start_write_delay_ms)
            || self.dispatch.start_write_delay_ms >= self.dispatch.min_lease_left_ms
        {
            return Err(format!(
                "start_write_delay_ms must be from 0 to 1000 and below the lease kept for dispatch ({}) (is {})",
                self.dispatch.min_lease_left_ms, self.dispatch.start_write_delay_ms
            ));
        }
        if self.lease_ms < self.horizon_ms + self.dispatch.min_lease_left_ms {
            return Err(format!(
                "lease_ms ({}) must be at least horizon_ms ({}) plus the lease kept for dispatch ({}): \
                 otherwise claimed runs could never be sent",
                self.lease_ms, self.horizon_ms, self.dispatch.min_lease_left_ms
            ));
        }
        if self.executor_timeout_ms <= i64::try_from(self.executor_heartbeat_ms).unwrap_or(i64::MAX)
        {
            return Err(format!(
                "executor_timeout_ms ({}) must be longer than executor_heartbeat_ms ({})",
                self.executor_timeout_ms, self.executor_heartbeat_ms
            ));
        }
        Ok(())
    }
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid engine configuration: {0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot build the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What shutting down did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Claimed runs handed back to the other nodes.
    pub released: usize,
    /// Dispatches still running when the grace period ended.
    pub abandoned_dispatches: usize,
}

struct Shared {
    config: EngineConfig,
    address: String,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    claimer: Claimer,
    /// How many claimed runs the node may hold unsettled (see [`crate::admission`]).
    admission: Arc<Admission>,
    dispatcher: Arc<Dispatcher>,
    watchdog: Watchdog,
    draining: AtomicBool,
}

/// A running engine node.
pub struct EngineNode {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    scheduler: tokio::task::JoinHandle<ShutdownReport>,
    background: JoinSet<()>,
    server: actix_web::dev::ServerHandle,
}

impl std::fmt::Debug for EngineNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineNode")
            .field("node_id", &self.shared.config.node_id)
            .field("local_addr", &self.local_addr)
            .finish()
    }
}

impl EngineNode {
    /// Starts a node: its callback server, scheduler, watchdog and heartbeat. It publishes no
    /// alarms: see [`EngineNode::start_with_bus`].
    pub async fn start(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> Result<EngineNode, StartError> {
        Self::start_with_bus(store, clock, config, None).await
    }

    /// [`EngineNode::start`], and with a bus, the alarm relay that publishes alarm events to it.
    pub async fn start_with_bus(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
        bus: Option<Arc<dyn Bus>>,
    ) -> Result<EngineNode, StartError> {
        config.validate().map_err(StartError::Config)?;
        let listener = TcpListener::bind(&config.listen).map_err(|source| StartError::Listen {
            addr: config.listen.clone(),
            source,
        })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.listen.clone(),
            source,
        })?;
        let address = config
            .advertise
            .clone()
            .unwrap_or_else(|| format!("http://{local_addr}"));
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(500))
            .timeout(ACK_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .build()?;
        let directory = Arc::new(Directory::new(
            store.clone(),
            http,
            config.directory_ttl_ms,
            config.executor_timeout_ms,
        ));
        let (stop, stop_rx) = watch::channel(false);
        let (run_events, run_publisher) = match &bus {
            Some(bus) => {
                let (events, publisher) = RunEvents::start(
                    bus.clone(),
                    clock.clone(),
                    config.run_events.clone(),
                    stop_rx.clone(),
                );
                (events, Some(publisher))
            }
            None => (RunEvents::default(), None),
        };
        let dispatcher = Arc::new(
            Dispatcher::new(
                store.clone(),
                clock.clone(),
                directory.clone(),
                config.dispatch.clone(),
            )
            .with_run_events(run_events.clone()),
        );
        let claimer = Claimer::new(
            store.clone(),
            ClaimConfig {
                node: config.node_id.clone(),
                groups: config.groups.clone(),
                horizon_ms: config.horizon_ms,
                lease_ms: config.lease_ms,
                batch: config.claim_batch,
            },
        )
        .with_router(dispatcher.clone());
        let watchdog = Watchdog::new(
            store.clone(),
            WatchConfig {
                executor_timeout_ms: config.executor_timeout_ms,
                node_timeout_ms: config.node_timeout_ms,
                ..WatchConfig::default()
            },
        )
        .with_probe(Arc::new(HealthProbe::new(directory.clone(), clock.clone())))
        .with_directory(directory.clone())
        .with_run_events(run_events.clone());
        let shared = Arc::new(Shared {
            address: address.clone(),
            store: store.clone(),
            clock: clock.clone(),
            claimer,
            admission: Arc::new(Admission::new(
                config.claim_batch.saturating_mul(2),
                config.lease_ms,
                config.dispatch.start_write_delay_ms,
            )),
            dispatcher,
            watchdog,
            draining: AtomicBool::new(false),
            config,
        });
        shared.heartbeat(NodeState::Up).await?;

        let api = web::Data::new(
            CallbackApi::new(store, clock, directory, shared.config.executor_heartbeat_ms)
                .with_executor_timeout(shared.config.executor_timeout_ms)
                .with_body_read_timeout(Duration::from_millis(
                    shared.config.body_read_timeout_ms.unsigned_abs(),
                ))
                .with_run_events(run_events)
                .with_finished_here(shared.dispatcher.finished_here().clone()),
        );
        let node_id = shared.config.node_id.clone();
        let server = HttpServer::new(move || {
            let node_id = node_id.clone();
            App::new()
                .configure(crate::metrics::route)
                .configure(CallbackApi::configure(api.clone()))
                .route(
                    "/health",
                    web::get().to(move || {
                        let node_id = node_id.clone();
                        async move {
                            HttpResponse::Ok()
                                .json(serde_json::json!({ "node": node_id, "status": "up" }))
                        }
                    }),
                )
        })
        .workers(shared.config.callback_workers)
        // Headers must arrive quickly and idle connections do not linger; bodies have their own
        // read timeout and size limits (`mthpt_wrapper::intake`).
        .keep_alive(std::time::Duration::from_secs(5))
        .client_request_timeout(std::time::Duration::from_secs(5))
        .client_disconnect_timeout(std::time::Duration::from_secs(1))
        .disable_signals()
        .shutdown_timeout(5)
        .listen(listener)
        .map_err(|source| StartError::Listen {
            addr: local_addr.to_string(),
            source,
        })?
        .run();
        let server_handle = server.handle();
        let mut background = JoinSet::new();
        background.spawn(async move {
            if let Err(e) = server.await {
                tracing::error!(error = %e, "callback server stopped");
            }
        });

        if let Some(publisher) = run_publisher {
            background.spawn(publisher);
        }
        background.spawn(shared.clone().watchdog_loop(stop_rx.clone()));
        background.spawn(shared.clone().heartbeat_loop(stop_rx.clone()));
        background.spawn(crate::metrics::gauge_loop(
            shared.store.clone(),
            shared.clock.clone(),
            stop_rx.clone(),
        ));
        background.spawn(crate::notify::run_loop(
            shared.store.clone(),
            shared.clock.clone(),
            stop_rx.clone(),
        ));
        background.spawn(crate::rollup::run_loop(
            shared.store.clone(),
            shared.clock.clone(),
            stop_rx.clone(),
        ));
        background.spawn(crate::vacuum::run_loop(
            shared.store.clone(),
            stop_rx.clone(),
        ));
        if let Some(bus) = bus {
            let relay = AlarmRelay::new(
                shared.store.clone(),
                bus,
                shared.clock.clone(),
                shared.config.relay_batch,
            );
            background.spawn(shared.clone().relay_loop(relay, stop_rx.clone()));
        }
        let scheduler = tokio::spawn(shared.clone().scheduler_loop(stop_rx));
        tracing::info!(
            node = %shared.config.node_id,
            groups = ?shared.config.groups,
            %address,
            backend = %shared.store.backend(),
            "engine node started"
        );
        Ok(EngineNode {
            shared,
            local_addr,
            stop,
            scheduler,
            background,
            server: server_handle,
        })
    }

    /// Where the callback API listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The base URL wrappers call (`http://<listen address>` unless advertised otherwise).
    pub fn url(&self) -> String {
        self.shared.address.clone()
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.shared.config.node_id
    }

    /// Stops gracefully (see the module docs).
    pub async fn shutdown(mut self) -> ShutdownReport {
        tracing::info!(node = %self.shared.config.node_id, "engine node draining");
        self.shared.draining.store(true, Ordering::SeqCst);
        if let Err(e) = self.shared.heartbeat(NodeState::Draining).await {
            tracing::warn!(error = %e, "could not record draining");
        }
        let _ = self.stop.send(true);
        let report = match self.scheduler.await {
            Ok(report) => report,
            Err(e) => {
                tracing::error!(error = %e, "scheduler task failed");
                ShutdownReport::default()
            }
        };
        if let Err(e) = self.shared.heartbeat(NodeState::Stopped).await {
            tracing::warn!(error = %e, "could not record the stop");
        }
        self.server.stop(true).await;
        while self.background.join_next().await.is_some() {}
        tracing::info!(
            node = %self.shared.config.node_id,
            released = report.released,
            abandoned = report.abandoned_dispatches,
            "engine node stopped"
        );
        report
    }
}

impl Shared {
    async fn heartbeat(&self, state: NodeState) -> Result<(), StoreError> {
        let mut tx = self.store.begin().await?;
        tx.heartbeat_node(
            &NodeHeartbeat {
                id: self.config.node_id.clone(),
                node_groups: self.config.groups.clone(),
                address: self.address.clone(),
                state,
            },
            self.clock.now_ms(),
        )
        .await?;
        tx.commit().await
    }

    /// How long one pass of a loop may wait on the database: a lease and half a second, at
    /// least 2.5 s (every statement is bounded at 1.9 s by the server's `statement_timeout`; a
    /// claim or a readying pass that takes longer than a lease has lost its claims anyway). A
    /// statement sent to a primary that then died — no answer and no error, as from a
    /// powered-off host or a cut network — would otherwise hold the loop until TCP gives up,
    /// minutes after the store moved to the new primary ([`crate::store`]'s host list); the pass
    /// fails instead, its connection is dropped, and the next pass runs on the new primary. A
    /// pass cut off this way is one whose transaction may or may not have committed: its claims
    /// and intents are fenced and end with their lease, as a dead node's do.
    fn pass_limit(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.config.lease_ms.saturating_add(500)).unwrap_or(0))
            .max(Duration::from_millis(2_500))
    }

    /// `work` bounded by `limit` (see [`Self::pass_limit`]); `what` names it in the error.
    async fn bounded<T>(
        limit: Duration,
        what: &str,
        work: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(format!(
                "{what}: no answer from the database within {} ms",
                limit.as_millis()
            )))
        })
    }

    async fn heartbeat_loop(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let every = Duration::from_millis(
            u64::try_from(self.config.heartbeat_interval_ms).unwrap_or(1_000),
        );
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(every) => {}
            }
            let state = if self.draining.load(Ordering::SeqCst) {
                NodeState::Draining
            } else {
                NodeState::Up
            };
            let limit = self.pass_limit();
            if let Err(e) = Self::bounded(limit, "node heartbeat", self.heartbeat(state)).await {
                tracing::warn!(error = %e, "node heartbeat failed");
            }
        }
    }

    async fn relay_loop(self: Arc<Self>, relay: AlarmRelay, mut stop: watch::Receiver<bool>) {
        let every =
            Duration::from_millis(u64::try_from(self.config.relay_interval_ms).unwrap_or(50));
        // Passes failing in a row (the database unreachable): each waits about twice as long as
        // the one before (the wrapper's backoff, with jitter), up to RELAY_BACKOFF_MAX, so an
        // outage logs a few lines, not 20 a second.
        let mut failures: u32 = 0;
        loop {
            let full = match Self::bounded(self.pass_limit(), "alarm relay", relay.run_once()).await
            {
                Ok(report) => {
                    if failures > 0 {
                        tracing::info!(failed_passes = failures, "alarm relay passes again");
                        failures = 0;
                    }
                    i64::try_from(report.published + report.failed).unwrap_or(0) >= relay.batch()
                        && report.failed == 0
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(error = %e, failed_passes = failures, "alarm relay pass failed");
                    false
                }
            };
            if full && !*stop.borrow() {
                continue;
            }
            let wait = if failures == 0 {
                every
            } else {
                mthpt_wrapper::backoff(every * 2, RELAY_BACKOFF_MAX, failures - 1)
            };
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn watchdog_loop(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let every =
            Duration::from_millis(u64::try_from(self.config.watchdog_interval_ms).unwrap_or(500));
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(every) => {}
            }
            // The watchdog also asks silent executors whether they live: room for their probes.
            let limit = self.pass_limit() * 4;
            let pass = self.watchdog.run_once(self.clock.now_ms(), rand::random());
            match Self::bounded(limit, "watchdog", pass).await {
                Ok(report) => {
                    for c in &report.cancel {
                        tracing::warn!(run = %c.run.id, task = %c.task.name, "run timed out");
                    }
                    if !report.lost.is_empty() || !report.executors_lost.is_empty() {
                        tracing::warn!(executors = ?report.executors_lost, runs = report.lost.len(), "executors lost");
                    }
                    for node in &report.nodes_lost {
                        tracing::warn!(%node, "engine node lost");
                    }
                    if !report.cancel.is_empty() {
                        self.dispatcher
                            .cancel(&report.cancel, "deadline passed")
                            .await;
                    }
                    if !report.cancel_requested.is_empty() {
                        self.deliver_cancel_requests(&report.cancel_requested).await;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "watchdog pass failed"),
            }
        }
    }

    /// Tells executors of the runs people cancelled to cancel them; a request that did not
    /// get through is tried again [`CANCEL_RETRY_MS`] later, for up to [`CANCEL_RETRY_FOR_MS`]
    /// after the run was cancelled (then the wrapper's own deadline, or the instance being
    /// declared lost, ends it).
    async fn deliver_cancel_requests(&self, runs: &[Cancellation]) {
        let items: Vec<(&Cancellation, &str)> = runs
            .iter()
            .map(|c| {
                tracing::info!(run = %c.run.id, task = %c.task.name, "run cancelled by a person; telling its executor");
                (c, c.run.error.as_deref().unwrap_or("cancelled"))
            })
            .collect();
        let failed = self.dispatcher.cancel_each(&items).await;
        if failed.is_empty() {
            return;
        }
        let now = self.clock.now_ms();
        let again: Vec<RunId> = runs
            .iter()
            .filter(|c| failed.contains(&c.run.id))
            .filter(|c| c.run.finished_at.unwrap_or(now) + CANCEL_RETRY_FOR_MS > now)
            .map(|c| c.run.id)
            .collect();
        let outcome = async {
            let mut tx = self.store.begin().await?;
            for id in &again {
                tx.defer_cancel_request(*id, now + CANCEL_RETRY_MS).await?;
            }
            tx.commit().await
        }
        .await;
        if let Err(e) = outcome {
            tracing::warn!(error = %e, runs = again.len(), "could not keep undelivered cancel requests");
        }
    }

    /// Claims batches and hands them to the scheduler; never waits on dispatch.
    async fn claim_loop(
        self: Arc<Self>,
        mut stop: watch::Receiver<bool>,
        fires: mpsc::Sender<Vec<Fire>>,
    ) {
        let mut listener: Option<Box<dyn DueListener>> = None;
        let mut listener_retry = Instant::now();
        let poll =
            Duration::from_millis(u64::try_from(self.config.poll_interval_ms).unwrap_or(250));
        let mut next_claim = Instant::now();
        let mut claim_cap = ClaimCap::new(self.config.claim_batch);
        // Whether the last pass failed on a moved run and was tried again at once.
        let mut retried_move = false;
        loop {
            if listener.is_none() && Instant::now() >= listener_retry {
                match self.store.listen_due().await {
                    Ok(l) => listener = Some(l),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot listen for due signals; polling only");
                        listener_retry = Instant::now() + Duration::from_secs(5);
                    }
                }
            }
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                () = tokio::time::sleep_until(next_claim) => {
                    let now = self.clock.now_ms();
                    let limit = self.admission.room(now).min(claim_cap.limit());
                    if limit == 0 {
                        // The node holds all the unsettled runs it may: claim again when some
                        // settle (see crate::admission).
                        self.admission.wait_for_room(poll).await;
                        next_claim = Instant::now();
                        continue;
                    }
                    let pass = self.claimer.run_once_up_to(now, limit);
                    let started = Instant::now();
                    match Self::bounded(self.pass_limit(), "claim", pass).await {
                        Ok(mut report) => {
                            claim_cap.finished();
                            retried_move = false;
                            self.admission.claimed(
                                report.fires.iter().map(|f| (f.run.id, f.run.due_at)),
                                self.clock.now_ms(),
                            );
                            crate::metrics::admission_window(self.admission.window());
                            let full = i64::try_from(report.claimed()).unwrap_or(0) >= limit;
                            if !report.replaced.is_empty() {
                                let d = self.dispatcher.clone();
                                let replaced = std::mem::take(&mut report.replaced);
                                tokio::spawn(async move { d.cancel(&replaced, "replaced by a newer run").await });
                            }
                            if !report.fires.is_empty() {
                                self.warm_directory(&report.fires).await;
                                if fires.send(report.fires).await.is_err() {
                                    return;
                                }
                            }
                            next_claim = if full { Instant::now() } else { Instant::now() + poll };
                        }
                        Err(e) if e.is_moved_run() && !retried_move => {
                            // A waiting run was cancelled (moved to the history) between the
                            // claim's read and its lock: the pass is tried again at once (once),
                            // not a poll later, so the other runs it held are not late for it.
                            tracing::debug!(error = %e, "claim met a run that moved; claiming again");
                            retried_move = true;
                            next_claim = Instant::now();
                        }
                        Err(e) => {
                            if started.elapsed() >= self.pass_limit() {
                                // Cut off: the next claim takes fewer runs, so that it fits.
                                claim_cap.cut_off();
                            }
                            tracing::warn!(error = %e, next_limit = claim_cap.limit(), "claim failed");
                            retried_move = false;
                            next_claim = Instant::now() + poll;
                        }
                    }
                }
                signal = next_signal(&mut listener) => {
                    match signal {
                        Ok(group) if group.is_empty() || self.config.groups.contains(&group) => {
                            next_claim = Instant::now();
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "due signal listener lost; reconnecting");
                            listener = None;
                            listener_retry = Instant::now() + Duration::from_secs(1);
                        }
                    }
                }
            }
        }
    }

    /// Makes sure the apps of just claimed runs are in the directory, fresh when the last of
    /// them falls due: firing never waits for the database to look up executors.
    async fn warm_directory(&self, fires: &[Fire]) {
        let mut apps: Vec<_> = fires.iter().map(|f| f.task.app_id).collect();
        apps.sort_unstable();
        apps.dedup();
        let last_due = fires.iter().map(|f| f.run.due_at).max().unwrap_or(0);
        let directory = self.dispatcher.directory();
        if let Err(e) = directory.warm(&apps, self.clock.now_ms(), last_due).await {
            tracing::debug!(error = %e, "could not warm the directory; dispatch looks up executors itself");
        }
    }

    /// Readies claimed batches one at a time, in claim order (see [`Self::scheduler_loop`]).
    /// Returns the claims of batches left unreadied when the node stops.
    async fn prepare_loop(
        self: Arc<Self>,
        mut stop: watch::Receiver<bool>,
        mut fires: mpsc::Receiver<Vec<Fire>>,
        ready: mpsc::UnboundedSender<Vec<Ready>>,
    ) -> Vec<Fence> {
        loop {
            tokio::select! {
                biased;
                _ = stop.changed() => break,
                batch = fires.recv() => {
                    let Some(batch) = batch else { break };
                    let pass = self.dispatcher.prepare(batch);
                    match Self::bounded(self.pass_limit(), "readying claimed runs", pass).await {
                        Ok((runs, report)) => {
                            self.settle(&report);
                            log_dispatch(&report);
                            if ready.send(runs).is_err() {
                                break;
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "could not ready claimed runs; they are retried when their leases end"),
                    }
                }
            }
        }
        // Until the claim loop has stopped too: what it claimed last is handed back unreadied.
        let mut left = Vec::new();
        while let Some(batch) = fires.recv().await {
            left.extend(batch.iter().filter_map(|f| f.run.fence()));
        }
        left
    }

    /// Claimed runs go through three stages: the claim loop claims batches; the prepare loop
    /// readies them one batch at a time (routing, dispatch intents written ahead of their due
    /// time); this loop holds them until they are due and has the dispatcher send them. The
    /// claim loop waits while a batch is being readied, so claims never outrun the intent
    /// writes (a backlog would let leases end before the runs are readied).
    async fn scheduler_loop(self: Arc<Self>, mut stop: watch::Receiver<bool>) -> ShutdownReport {
        let (fires_tx, fires_rx) = mpsc::channel::<Vec<Fire>>(1);
        let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<Vec<Ready>>();
        let claimer = tokio::spawn(self.clone().claim_loop(stop.clone(), fires_tx));
        let preparer = tokio::spawn(self.clone().prepare_loop(stop.clone(), fires_rx, ready_tx));
        let mut queue: BTreeMap<(i64, RunId), Ready> = BTreeMap::new();
        let mut dispatches: JoinSet<()> = JoinSet::new();
        let coalesce_ms = self.config.dispatch.coalesce_ms.max(0);
        let mut last_round = i64::MIN;
        loop {
            let next_round = queue
                .keys()
                .next()
                .map(|(due, _)| (*due).max(last_round.saturating_add(coalesce_ms)));
            // After a quiet spell, a round is readied early and sent on its millisecond.
            let precise = next_round.filter(|at| at.saturating_sub(last_round) >= QUIET_SPELL_MS);
            let next_fire = next_round.map(|at| {
                let wake = instant_at(&*self.clock, at);
                match precise {
                    Some(_) => wake.checked_sub(TIMER_LEAD).unwrap_or(wake),
                    None => wake,
                }
            });
            tokio::select! {
                biased;
                _ = stop.changed() => break,
                () = sleep_until_opt(next_fire) => {
                    let now = self.clock.now_ms();
                    let round = precise.map_or(now, |at| at.max(now));
                    last_round = round;
                    let later = queue.split_off(&(round + 1, RunId(i64::MIN)));
                    let due: Vec<Ready> = std::mem::replace(&mut queue, later).into_values().collect();
                    let dispatcher = self.dispatcher.clone();
                    let node = self.clone();
                    dispatches.spawn(async move {
                        match dispatcher.send_at(due, round).await {
                            Ok(r) => {
                                node.settle(&r);
                                log_dispatch(&r);
                            }
                            Err(e) => tracing::warn!(error = %e, "dispatch failed; the runs are retried when their leases end"),
                        }
                    });
                }
                Some(batch) = ready_rx.recv() => {
                    for ready in batch {
                        queue.insert((ready.due_at(), ready.run_id()), ready);
                    }
                }
                Some(_) = dispatches.join_next(), if !dispatches.is_empty() => {}
            }
        }

        // Stop claiming and readying, then hand back what this node holds but has not fired.
        let _ = claimer.await;
        let mut fences: Vec<Fence> = preparer.await.unwrap_or_default();
        let mut report = ShutdownReport::default();
        while let Ok(batch) = ready_rx.try_recv() {
            fences.extend(batch.iter().filter_map(Ready::fence));
        }
        fences.extend(std::mem::take(&mut queue).values().filter_map(Ready::fence));
        if !fences.is_empty() {
            match self.release(&fences).await {
                Ok(n) => report.released = n,
                Err(e) => {
                    tracing::warn!(error = %e, "could not hand claimed runs back; they move when their leases end")
                }
            }
        }
        let grace =
            Duration::from_millis(u64::try_from(self.config.shutdown_grace_ms).unwrap_or(10_000));
        let deadline = Instant::now() + grace;
        while !dispatches.is_empty() {
            match tokio::time::timeout_at(deadline, dispatches.join_next()).await {
                Ok(_) => {}
                Err(_) => {
                    report.abandoned_dispatches = dispatches.len();
                    dispatches.abort_all();
                    break;
                }
            }
        }
        report
    }

    /// The runs a dispatch step settled leave the admission window.
    fn settle(&self, r: &DispatchReport) {
        let ids = r
            .started
            .iter()
            .chain(&r.released)
            .chain(&r.fenced)
            .chain(&r.failed)
            .chain(&r.expiring)
            .chain(&r.held)
            .chain(&r.lost)
            .copied();
        let settled = self.admission.settle(ids, self.clock.now_ms());
        if settled.late > 0 {
            tracing::debug!(
                runs = settled.runs,
                late = settled.late,
                window = settled.window,
                "runs settled late: claiming less"
            );
        }
    }

    async fn release(&self, fences: &[Fence]) -> Result<usize, StoreError> {
        let mut tx = self.store.begin().await?;
        let released = tx.release_claimed_runs(fences, self.clock.now_ms()).await?;
        tx.commit().await?;
        Ok(released.len())
    }
}

/// Logs what a dispatch step did when something did not go the plain way.
fn log_dispatch(r: &DispatchReport) {
    if !r.released.is_empty() || !r.fenced.is_empty() || !r.expiring.is_empty() {
        tracing::debug!(
            started = r.started.len(),
            released = r.released.len(),
            fenced = r.fenced.len(),
            expiring = r.expiring.len(),
            "dispatch"
        );
    }
}

/// The tokio instant at which the engine clock reads `at_ms`.
fn instant_at(clock: &dyn Clock, at_ms: i64) -> Instant {
    // In microseconds: from whole milliseconds the wait came out up to 1 ms long.
    let wait = at_ms.saturating_mul(1_000).saturating_sub(clock.now_us());
    Instant::now() + Duration::from_micros(u64::try_from(wait).unwrap_or(0))
}

/// A round due after this long without one is readied [`TIMER_LEAD`] early and sent on its
/// millisecond ([`Dispatcher::send_at`]); rounds of a steady stream, one every few milliseconds,
/// wake on the timer alone and are sent at once.
const QUIET_SPELL_MS: i64 = 50;

/// How early a precise round wakes: tokio's timer wakes on its next millisecond tick at or after
/// the deadline, and readying 1,000 runs (routing, batching) takes about a millisecond.
const TIMER_LEAD: Duration = Duration::from_millis(3);

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn next_signal(listener: &mut Option<Box<dyn DueListener>>) -> Result<String, StoreError> {
    match listener {
        Some(l) => l.recv().await,
        None => std::future::pending().await,
    }
}

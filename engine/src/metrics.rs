//! Prometheus metrics of an engine node (and the exporter every `mthpt` process serves).
//!
//! Counters and histograms are recorded through the [`metrics`] facade; [`install`] puts the
//! Prometheus recorder in place once per process (tests run several nodes, a console and
//! wrappers in one process: they share it), and [`route`] serves its text at `GET /metrics`.
//! Every metric and label is listed in `docs/metrics.md`; labels only take values from
//! bounded sets (states, triggers, outcomes, configured app keys and tenant names), never run
//! or tenant ids.
//!
//! The functions here are what the hot paths call: one line each, no allocation for labels
//! (they are `&'static str`), nothing that waits. Gauges that need the database (outbox
//! backlog, live executors per app, notification backlog) are refreshed on a timer by
//! [`refresh_gauges`], with one cheap query, never per request.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use actix_web::{HttpResponse, web};
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::run::{RunState, TriggerKind};
pub use crate::store::MetricsSnapshot;
use crate::store::{Result, Store};

/// The content type of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Buckets of the `_seconds` histograms: from a millisecond to a minute.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets of the claim batch size histogram (runs per claim).
const BATCH_BUCKETS: &[f64] = &[
    0.0, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process's Prometheus recorder (once; later calls return the same handle).
/// `None` when the host process installed another recorder of its own first.
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let built = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), SECONDS_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("mthpt_claim_batch_size".to_owned()),
                        BATCH_BUCKETS,
                    )
                })
                .and_then(|b| b.install_recorder());
            match built {
                Ok(handle) => {
                    describe();
                    let upkeep = handle.clone();
                    // Histograms keep their samples until drained: drain them even when
                    // nobody scrapes.
                    let spawned = std::thread::Builder::new()
                        .name("mthpt-metrics-upkeep".to_owned())
                        .spawn(move || {
                            loop {
                                std::thread::sleep(Duration::from_secs(5));
                                upkeep.run_upkeep();
                            }
                        });
                    if let Err(e) = spawned {
                        tracing::warn!(error = %e, "no metrics upkeep thread");
                    }
                    Some(handle)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot install the Prometheus recorder; /metrics stays empty");
                    None
                }
            }
        })
        .as_ref()
}

/// The Prometheus text of every metric of this process.
pub fn render() -> String {
    install().map(PrometheusHandle::render).unwrap_or_default()
}

/// `GET /metrics` for an actix app: `App::new().configure(metrics::route)`.
pub fn route(cfg: &mut web::ServiceConfig) {
    install();
    cfg.route("/metrics", web::get().to(serve));
}

async fn serve() -> HttpResponse {
    HttpResponse::Ok().content_type(CONTENT_TYPE).body(render())
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "mthpt_runs_finished_total",
        "Runs this node ended, by final state and trigger"
    );
    describe_histogram!(
        "mthpt_fire_lateness_seconds",
        Unit::Seconds,
        "How late runs were handed to the dispatcher after their due time"
    );
    describe_histogram!(
        "mthpt_dispatch_ack_seconds",
        Unit::Seconds,
        "Time from sending a run batch to a wrapper to its answer (acks)"
    );
    describe_counter!(
        "mthpt_dispatch_requests_total",
        "Run batch requests sent to wrappers, by result"
    );
    describe_counter!(
        "mthpt_dispatch_acks_total",
        "Per-run answers of wrappers to run starts, by ack status"
    );
    describe_counter!(
        "mthpt_run_starts_total",
        "Runs accepted by wrappers whose start was due to be written, by write: database (looked up, written where still needed) or skipped (this node had written the run's result already)"
    );
    describe_gauge!(
        "mthpt_dispatch_in_flight",
        "Run batch requests to wrappers in flight now"
    );
    describe_histogram!(
        "mthpt_claim_batch_size",
        "Runs taken by one claim transaction"
    );
    describe_counter!(
        "mthpt_callback_results_total",
        "Run results wrappers reported, by outcome of recording them"
    );
    describe_counter!(
        "mthpt_callback_unauthorized_total",
        "Callback requests refused for a missing or bad signature"
    );
    describe_gauge!(
        "mthpt_outbox_backlog",
        "Alarms not published yet (cluster-wide)"
    );
    describe_gauge!(
        "mthpt_outbox_oldest_age_seconds",
        Unit::Seconds,
        "Age of the oldest unpublished alarm (0 when none; cluster-wide)"
    );
    describe_gauge!(
        "mthpt_executors_live",
        "Executor instances up, per app key (cluster-wide)"
    );
    describe_gauge!(
        "mthpt_notification_backlog",
        "Notification deliveries waiting to be sent or retried (cluster-wide)"
    );
    describe_counter!(
        "mthpt_notification_attempts_total",
        "Notification delivery attempts, by channel kind and result"
    );
    describe_counter!(
        "mthpt_run_events_published_total",
        "Live run events (state, progress, log lines) the message bus took"
    );
    describe_counter!(
        "mthpt_run_events_dropped_total",
        "Live run events dropped, by reason (queue_full, bus)"
    );
    describe_counter!(
        "mthpt_runs_deleted_total",
        "Finished runs deleted by retention (their statistics stay in the rollups)"
    );
    describe_gauge!(
        "mthpt_tenant_waiting_runs",
        "Runs due and not yet claimed, per tenant (cluster-wide; counted up to 10,000)"
    );
    describe_counter!(
        "mthpt_tenant_quota_hits_total",
        "Changes refused for a tenant's quota, per tenant and quota"
    );
    describe_gauge!(
        "mthpt_admission_window",
        "How many claimed runs this node may hold before their dispatch is written (it follows how quickly they are)"
    );
    describe_gauge!(
        "mthpt_rollup_lag_seconds",
        Unit::Seconds,
        "How far behind now the most lagging tenant's rollup watermark is, as of this node's last rollup pass"
    );
}

/// What a rollup and retention pass did: runs deleted, and the largest watermark lag.
pub fn rollup_pass(deleted: u64, max_lag_ms: i64) {
    if deleted > 0 {
        counter!("mthpt_runs_deleted_total").increment(deleted);
    }
    gauge!("mthpt_rollup_lag_seconds").set(max_lag_ms.max(0) as f64 / 1000.0);
}

/// The node's admission window (see [`crate::admission`]).
pub fn admission_window(window: f64) {
    gauge!("mthpt_admission_window").set(window);
}

/// A change of `tenant` refused for `quota` (the quota's name, see [`crate::quota::Quota`]).
pub fn quota_hit(tenant: &str, quota: &'static str) {
    counter!("mthpt_tenant_quota_hits_total", "tenant" => tenant.to_owned(), "quota" => quota)
        .increment(1);
}

/// `n` live run events taken by the bus.
pub fn run_events_published(n: usize) {
    counter!("mthpt_run_events_published_total").increment(n as u64);
}

/// `n` live run events dropped for `reason` (`queue_full`, `bus`).
pub fn run_events_dropped(reason: &'static str, n: usize) {
    counter!("mthpt_run_events_dropped_total", "reason" => reason).increment(n as u64);
}

/// Starts due to be written: `skipped` of runs whose results this node had written already,
/// `looked_up` going to the database.
pub fn run_starts(skipped: usize, looked_up: usize) {
    if skipped > 0 {
        counter!("mthpt_run_starts_total", "write" => "skipped").increment(skipped as u64);
    }
    if looked_up > 0 {
        counter!("mthpt_run_starts_total", "write" => "database").increment(looked_up as u64);
    }
}

/// One run ended in `state`.
pub fn run_finished(state: RunState, trigger: TriggerKind) {
    counter!("mthpt_runs_finished_total", "state" => state.as_str(), "trigger" => trigger.as_str())
        .increment(1);
}

/// A claim transaction took `claimed` runs, of which `skipped` were skipped by a misfire or
/// overlap policy (scheduled occurrences only).
pub fn claimed(claimed: usize, skipped: usize) {
    histogram!("mthpt_claim_batch_size").record(claimed as f64);
    if skipped > 0 {
        counter!("mthpt_runs_finished_total", "state" => "skipped", "trigger" => "schedule")
            .increment(skipped as u64);
    }
}

/// Runs due at `due` (epoch ms) handed to the dispatcher at `now`.
pub fn fired(now: i64, due: impl Iterator<Item = i64>) {
    let h = histogram!("mthpt_fire_lateness_seconds");
    for due in due {
        h.record((now - due).max(0) as f64 / 1000.0);
    }
}

/// A batch request to a wrapper in flight: counts in `mthpt_dispatch_in_flight` while alive
/// and records the request's time when dropped.
#[derive(Debug)]
pub struct InFlight {
    started: Instant,
}

impl InFlight {
    pub fn start() -> Self {
        gauge!("mthpt_dispatch_in_flight").increment(1.0);
        Self {
            started: Instant::now(),
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        gauge!("mthpt_dispatch_in_flight").decrement(1.0);
        histogram!("mthpt_dispatch_ack_seconds").record(self.started.elapsed().as_secs_f64());
    }
}

/// A batch request's result: `answered` (acks came back) or not.
pub fn dispatch_request(answered: bool) {
    let result = if answered { "answered" } else { "refused" };
    counter!("mthpt_dispatch_requests_total", "result" => result).increment(1);
}

/// The acks of one answered batch.
pub fn acks(acks: &[mthpt_wrapper::protocol::RunAck]) {
    for ack in acks {
        counter!("mthpt_dispatch_acks_total", "status" => ack_status(ack.status)).increment(1);
    }
}

/// The spelling of an ack status (as on the wire).
pub fn ack_status(status: mthpt_wrapper::protocol::AckStatus) -> &'static str {
    use mthpt_wrapper::protocol::AckStatus as A;
    match status {
        A::Accepted => "accepted",
        A::AlreadyKnown => "already_known",
        A::AtCapacity => "at_capacity",
        A::Draining => "draining",
        A::UnknownHandler => "unknown_handler",
        A::Malformed => "malformed",
        A::Expired => "expired",
    }
}

/// The items of one result batch, as answered.
pub fn results(items: &[mthpt_wrapper::protocol::ItemAck]) {
    use mthpt_wrapper::protocol::ItemStatus;
    for item in items {
        let outcome = match item.status {
            ItemStatus::Accepted => "accepted",
            ItemStatus::Duplicate => "duplicate",
            ItemStatus::Rejected => "rejected",
            ItemStatus::Retry => "retry",
        };
        counter!("mthpt_callback_results_total", "outcome" => outcome).increment(1);
    }
}

/// A callback refused for its signature.
pub fn unauthorized() {
    counter!("mthpt_callback_unauthorized_total").increment(1);
}

/// A notification delivery attempt on a channel of `kind` (`webhook`, `email`).
pub fn notification_attempt(kind: &'static str, delivered: bool) {
    let result = if delivered { "delivered" } else { "failed" };
    counter!("mthpt_notification_attempts_total", "kind" => kind, "result" => result).increment(1);
}

/// The app keys given a `mthpt_executors_live` value last time, so apps that went away are
/// set to 0 rather than left at their last value.
static LIVE_APPS: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Refreshes the gauges that need the database: outbox backlog and the age of its oldest
/// alarm, live executor instances per app, notification backlog. One read transaction of a
/// few aggregate queries; called on a timer ([`GAUGE_REFRESH`]).
pub async fn refresh_gauges(store: &dyn Store, now: i64) -> Result<()> {
    let mut tx = store.begin_read().await?;
    let snapshot = tx.metrics_snapshot().await?;
    let waiting =
        crate::store::Tenants::waiting_runs_by_tenant(&mut *tx, now, WAITING_GAUGE_LIMIT).await?;
    drop(tx);
    for (tenant, n) in waiting {
        gauge!("mthpt_tenant_waiting_runs", "tenant" => tenant).set(n as f64);
    }
    gauge!("mthpt_outbox_backlog").set(snapshot.outbox_backlog as f64);
    let age = snapshot
        .outbox_oldest_at
        .map_or(0.0, |at| (now - at).max(0) as f64 / 1000.0);
    gauge!("mthpt_outbox_oldest_age_seconds").set(age);
    gauge!("mthpt_notification_backlog").set(snapshot.notification_backlog as f64);
    let mut previous = crate::directory::lock(&LIVE_APPS);
    let now_apps: BTreeSet<String> = snapshot
        .live_executors
        .iter()
        .map(|(k, _)| k.clone())
        .collect();
    for gone in previous.difference(&now_apps) {
        gauge!("mthpt_executors_live", "app" => gone.clone()).set(0.0);
    }
    for (app, n) in snapshot.live_executors {
        gauge!("mthpt_executors_live", "app" => app).set(n as f64);
    }
    *previous = now_apps;
    Ok(())
}

/// `mthpt_tenant_waiting_runs` counts each tenant's waiting runs up to this many: a backlog of
/// 100,000 runs took up to 1.8 s to count, every [`GAUGE_REFRESH`] on every node.
pub const WAITING_GAUGE_LIMIT: i64 = 10_000;

/// How often an engine node refreshes the database-backed gauges.
pub const GAUGE_REFRESH: Duration = Duration::from_secs(5);

/// Refreshes the database-backed gauges every [`GAUGE_REFRESH`] until `stop`.
pub async fn gauge_loop(
    store: std::sync::Arc<dyn Store>,
    clock: std::sync::Arc<dyn crate::clock::Clock>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if let Err(e) = refresh_gauges(&*store, clock.now_ms()).await {
            tracing::debug!(error = %e, "could not refresh the metrics gauges");
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(GAUGE_REFRESH) => {}
        }
    }
}

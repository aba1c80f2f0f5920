//! The console's operations, beneath the HTTP handlers: each takes the [`Services`], the
//! [`Caller`](access::Caller) and validated input, checks the caller's access through
//! [`access`], works in one store transaction and records an audit event for every change.
//! Failures are [`error::ApiError`]s with a stable code. The REST handlers ([`crate::api`]) and
//! the web pages ([`crate::web`]) are thin wrappers over these; this module knows neither.

pub mod access;
pub mod alarms;
pub mod apps;
pub mod audit_log;
pub mod bulk;
pub mod channels;
pub mod credentials;
pub mod error;
pub mod nodes;
pub mod quotas;
pub mod runs;
pub mod sessions;
pub mod stats;
pub mod taskfile;
pub mod tasks;
pub mod tenants;
pub mod users;
pub mod weights;

use std::future::Future;
use std::sync::{Arc, OnceLock};

use mthpt_engine::audit::NewAuditEvent;
use mthpt_engine::bus::Bus;
use mthpt_engine::clock::Clock;
use mthpt_engine::run::Run;
use mthpt_engine::run_events::{RunEvent, RunEvents, RunEventsConfig};
use mthpt_engine::store::{Store, Tx};
use mthpt_engine::tenant::TenantId;
use tokio::sync::watch;

use self::access::Caller;
use self::error::ApiResult;
use crate::events::EventHub;

/// What every operation needs: the store and the clock; the node's hub of live events
/// (fed from the message bus, see [`crate::events`]); and where the run changes made here
/// (a cancel) are announced on the bus, once [`Services::announce_runs`] was called.
#[derive(Debug, Clone)]
pub struct Services {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub events: EventHub,
    run_events: Arc<OnceLock<RunEvents>>,
    /// The engine URL wrappers are told to use (shown in the console's wrapper command).
    engine_url: Arc<OnceLock<String>>,
}

impl Services {
    /// Services with a hub of their own (fed by nothing until a feeder is started on it).
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        let check = crate::wrapper_alarms::WrapperCheck::new(store.clone(), clock.clone());
        Self {
            store,
            clock,
            events: EventHub::with_wrapper_check(check),
            run_events: Arc::default(),
            engine_url: Arc::default(),
        }
    }

    /// Sets the engine URL(s) (comma-separated) that wrappers should be started with, for the
    /// command the console shows a new app; every clone of these services sees it. Only the
    /// first call counts.
    pub fn set_engine_url(&self, url: impl Into<String>) {
        let _ = self.engine_url.set(url.into());
    }

    /// The engine URL(s) wrappers should be started with, when known.
    pub fn engine_url(&self) -> Option<&str> {
        self.engine_url.get().map(String::as_str)
    }

    /// Announces the run changes made through these services (and every clone of them) on
    /// `bus`, like engine nodes do; returns the publisher to spawn, which ends once `stop` turns
    /// true. Only the first call counts.
    pub fn announce_runs(
        &self,
        bus: Arc<dyn Bus>,
        stop: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let (events, publisher) =
            RunEvents::start(bus, self.clock.clone(), RunEventsConfig::default(), stop);
        let _ = self.run_events.set(events);
        publisher
    }

    /// Announces (best effort, after its transaction committed) that `run` changed state.
    pub fn run_changed(&self, run: &Run, at: i64) {
        if let Some(events) = self.run_events.get() {
            events.emit(RunEvent::state_of(run, at));
        }
    }

    /// Milliseconds since the epoch, from the injected clock.
    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A transaction that may write.
    pub async fn write(&self) -> ApiResult<Box<dyn Tx>> {
        Ok(self.store.begin().await?)
    }

    /// A transaction that only reads.
    pub async fn read(&self) -> ApiResult<Box<dyn Tx>> {
        Ok(self.store.begin_read().await?)
    }
}

/// What an audit event says about a change: in which tenant (none: cluster level), what was
/// done (`tenant.create`, `app.rotate_secret`, …), to what, and details worth keeping.
#[derive(Debug, Clone)]
pub struct Change<'a> {
    pub tenant: Option<TenantId>,
    pub action: &'a str,
    pub target_kind: &'a str,
    pub target_id: String,
    pub details: serde_json::Value,
}

/// Appends the audit event of a change made by `caller`, inside the change's transaction (the
/// event commits with the change or not at all).
pub async fn audit(
    tx: &mut dyn Tx,
    caller: &Caller,
    change: Change<'_>,
    now: i64,
) -> ApiResult<()> {
    audit_as(tx, &caller.actor(), change, now).await
}

/// [`audit`] for an actor that is not (yet) a caller, e.g. a user signing in.
pub async fn audit_as(tx: &mut dyn Tx, actor: &str, change: Change<'_>, now: i64) -> ApiResult<()> {
    let mut event = NewAuditEvent::new(
        change.tenant,
        actor,
        change.action,
        change.target_kind,
        Some(change.target_id),
    );
    event.details = change.details;
    tx.append_audit(&event, now).await?;
    Ok(())
}

/// An instant stored as epoch milliseconds, as the API shows it (RFC 3339, UTC).
pub fn at(ms: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

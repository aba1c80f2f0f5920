//! MTHPT executor wrapper.
//!
//! Business applications embed this crate to run work for MTHPT engine nodes. An engine sends a
//! signed run request; the wrapper starts the handler on its own OS thread (blocking handlers) or
//! as a tokio task (async handlers) and answers `202` at once, so no engine thread ever waits for
//! business code. When the handler returns, its result is written to a local spool and delivered
//! to any engine until one confirms it, so results survive engine outages and wrapper restarts.
//!
//! The crate also holds the wire protocol shared with the engine ([`protocol`]) and depends on
//! no database crate.
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use actix_web::{App, HttpServer};
//! use mthpt_wrapper::{HandlerError, Wrapper};
//! use serde_json::json;
//!
//! #[actix_web::main]
//! async fn main() -> anyhow::Result<()> {
//!     let wrapper = Wrapper::builder("acme.billing", std::fs::read("/etc/billing/mthpt.secret")?)
//!         .engine_urls(["http://engine-1:8080", "http://engine-2:8080"])
//!         .advertise_url("http://10.0.0.5:9010")
//!         .capacity(32)
//!         // Blocking code: each run gets its own thread.
//!         .blocking_handler("close-day", |ctx| {
//!             let day: String = ctx.params_as()?;
//!             ctx.log(format!("closing {day}"));
//!             ctx.sleep(Duration::from_secs(2))?; // wakes early on cancel or deadline
//!             ctx.progress(1.0, "done");
//!             Ok(json!({ "closed": day }))
//!         })
//!         // Async code: each run is a tokio task.
//!         .async_handler("ping", |ctx| async move {
//!             if ctx.attempt() > 3 {
//!                 return Err(HandlerError::fatal("giving up"));
//!             }
//!             Ok(json!("pong"))
//!         })
//!         .build()?;
//!
//!     // Mount the protocol endpoints (`/mthpt/v1/...`) next to the app's own routes.
//!     let w = wrapper.clone();
//!     let server = HttpServer::new(move || App::new().service(w.scope()))
//!         .bind("0.0.0.0:9010")?
//!         .disable_signals()
//!         .run();
//!     let handle = server.handle();
//!     tokio::spawn(server);
//!
//!     tokio::signal::ctrl_c().await?;
//!     // Refuse new runs, let running ones finish (up to 30 s), deliver results, deregister.
//!     let report = wrapper.shutdown(Duration::from_secs(30)).await;
//!     println!("{report:?}");
//!     handle.stop(true).await;
//!     Ok(())
//! }
//! ```
//!
//! A wrapper that serves nothing else can use [`Wrapper::http_server`] instead of mounting
//! [`Wrapper::scope`] in its own `App`.
//!
//! # Cargo features
//!
//! - `amqp-alarms` (off by default): the builder's `amqp_url`/`amqp_exchange`, which also
//!   publish the wrapper's alarms straight to RabbitMQ, signed with the app's secret, for when
//!   no engine can relay them. It compiles lapin; an app that does not use direct alarms leaves
//!   it off. See docs/wrapper.md, "Direct AMQP alarms".
//!
//! # Guarantees
//!
//! - **Immediate ack.** The answer to a run request is sent right after the thread or task is
//!   started; it does not depend on how long the handler runs.
//! - **Once per run id.** A run id is accepted once per instance; a re-sent dispatch gets `409`
//!   with the run's state. Finished run ids are remembered (100,000 by default) and undelivered
//!   results are read back from the spool at start-up.
//! - **Results are not lost.** Every outcome is fsync'd to the spool's journal (results finishing
//!   together share one fsync) before its first delivery attempt, and kept until an engine
//!   confirms it.
//! - **Bounded.** At most `capacity` runs execute at once; beyond that, `503`.
//! - **Signed.** Every request in both directions carries an HMAC-SHA256 signature; unsigned,
//!   forged, stale (more than 5 minutes) or replayed requests get `401` and run nothing.

#![warn(missing_docs)]

mod alarm_delivery;
mod alarms;
mod background;
mod builder;
pub mod builtin;
pub mod client;
mod context;
mod failure;
mod handler;
pub mod intake;
mod metrics;
pub mod protocol;
mod routes;
mod runtime;
mod spool;
mod threads;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

pub use background::backoff;
pub use builder::{BuildError, WrapperBuilder};
pub use builtin::ShellOptions;
pub use context::{CancelReason, MAX_LOG_LINE_BYTES, RunContext};
pub use failure::{FailureKind, HandlerError, HandlerResult};
pub use protocol::{AlarmError, AlarmSeverity};
pub use runtime::DrainReport;
pub use spool::SpoolError;

use protocol::{CancelResponse, HealthResponse, RunId, RunStatus};
use runtime::Inner;

/// The version of this crate, reported at registration and in health answers.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How long an idle connection from an engine is kept open.
const KEEP_ALIVE: Duration = Duration::from_secs(5);
/// How long a client may take to send a request's headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a closing connection may take to shut down.
const DISCONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A running wrapper. Cheap to clone; every clone is the same instance.
#[derive(Debug, Clone)]
pub struct Wrapper {
    inner: Arc<Inner>,
    /// Limits of the run API's request bodies, shared by every server worker.
    intake: Arc<intake::Intake>,
}

impl Wrapper {
    /// Starts configuring a wrapper for `app`, signing with `secret`.
    pub fn builder(app: impl Into<String>, secret: impl Into<Vec<u8>>) -> WrapperBuilder {
        WrapperBuilder::new(app, secret)
    }

    /// The protocol endpoints as an actix-web scope (`/mthpt/v1`), to mount in an existing app:
    /// `App::new().service(wrapper.scope())`.
    pub fn scope(&self) -> actix_web::Scope {
        routes::scope(self.clone())
    }

    /// An HTTP server with only the protocol endpoints, on an already bound listener (bind to
    /// port 0 and read `local_addr()` first to get a free port). Headers must arrive within 5 s
    /// and idle connections are closed after 5 s; bodies are bounded by the
    /// [`body_limits`](WrapperBuilder::body_limits). OS signals are not handled: call
    /// [`shutdown`](Self::shutdown), then stop the server through its handle.
    pub fn http_server(&self, listener: TcpListener) -> std::io::Result<actix_web::dev::Server> {
        self.http_server_with(listener, |_| {})
    }

    /// [`http_server`](Self::http_server) with routes of the host's own beside the protocol's
    /// (e.g. `GET /metrics`), added by `extra` to every worker's app.
    pub fn http_server_with<F>(
        &self,
        listener: TcpListener,
        extra: F,
    ) -> std::io::Result<actix_web::dev::Server>
    where
        F: Fn(&mut actix_web::web::ServiceConfig) + Send + Clone + 'static,
    {
        let wrapper = self.clone();
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new()
                .configure(extra.clone())
                .service(wrapper.scope())
        })
        .backlog(4096)
        .max_connections(25_000)
        .keep_alive(KEEP_ALIVE)
        .client_request_timeout(HEADER_READ_TIMEOUT)
        .client_disconnect_timeout(DISCONNECT_TIMEOUT)
        .disable_signals()
        .shutdown_timeout(5)
        .listen(listener)?
        .run();
        Ok(server)
    }

    /// Drains the instance: new runs get `503`, running ones may finish during `grace`, then the
    /// remaining ones are cancelled; results are delivered (up to the flush timeout), the
    /// instance deregisters and the background work stops. Results not delivered stay in the
    /// spool for the next start.
    pub async fn shutdown(&self, grace: Duration) -> DrainReport {
        crate::background::drain(&self.inner, grace).await
    }

    /// The app name.
    pub fn app(&self) -> &str {
        &self.inner.settings.app
    }

    /// This instance's id.
    pub fn instance_id(&self) -> &str {
        &self.inner.settings.instance_id
    }

    /// Runs executing now.
    pub fn running(&self) -> u32 {
        self.inner.running()
    }

    /// Results spooled and not yet confirmed by an engine.
    pub fn pending_results(&self) -> usize {
        self.inner.pending_results()
    }

    /// Whether an engine accepted this instance's registration (and has not forgotten it).
    pub fn is_registered(&self) -> bool {
        self.inner
            .registered
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// What the health endpoint answers.
    pub fn health(&self) -> HealthResponse {
        self.inner.health()
    }

    /// A run's state on this instance, if known.
    pub fn run_status(&self, run_id: RunId) -> Option<RunStatus> {
        self.inner.run_status(run_id)
    }

    /// Signals cancellation to a running run, as the cancel endpoint does.
    pub fn cancel(&self, run_id: RunId) -> CancelResponse {
        self.inner.cancel(run_id, CancelReason::Requested)
    }
}

//! The console's HTTP server, built in one place: the same actix app (the API under `/api/v1`,
//! its docs, `/metrics` and the web pages) for `mthpt console`, `mthpt standalone` and the
//! integration tests ([`crate::testing::spawn_app`]), so tests run the production app. The
//! services it serves are wired here too ([`Console`]: the store, the clock, the live-event
//! hub fed from the message bus and the announcer of run changes), and stopped in one order.
//!
//! ```no_run
//! # async fn demo(services: mthpt_console::service::Services) -> std::io::Result<()> {
//! use mthpt_console::startup::{Application, HttpSettings};
//!
//! let app = Application::build(services, &HttpSettings::default())?;
//! println!("listening on port {}", app.port());
//! app.run_until_stopped().await
//! # }
//! ```

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{App, HttpServer, web};
use mthpt_engine::bus::Bus;
use mthpt_engine::clock::Clock;
use mthpt_engine::store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::{self, ApiLimits};
use crate::events;
use crate::service::Services;

/// A console node's services and the background work that ties them to the message bus: its
/// live-event hub fed from a subscription queue, and the run changes made here (a cancel)
/// announced like an engine node's. `mthpt console`, `mthpt standalone` and the tests build
/// their services here.
#[derive(Debug)]
pub struct Console {
    services: Services,
    feeders: Vec<JoinHandle<()>>,
    announcer: Option<(watch::Sender<bool>, JoinHandle<()>)>,
}

impl Console {
    /// Services over `store` reading the time from `clock`, on no bus yet: their hub carries no
    /// live events and run changes are not announced.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Console {
        Console {
            services: Services::new(store, clock),
            feeders: Vec::new(),
            announcer: None,
        }
    }

    /// How a console node runs on a bus: fed from `bus` through its own subscription `queue`,
    /// and announcing its run changes on it.
    pub fn on_bus(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        bus: Arc<dyn Bus>,
        queue: &str,
    ) -> Console {
        let mut console = Console::new(store, clock);
        console.listen_to(bus.clone(), queue);
        console.announce_on(bus);
        console
    }

    /// The services (clones share everything: store, clock, hub, announcer).
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Feeds the live-event hub from `bus` through the subscription `queue`.
    pub fn listen_to(&mut self, bus: Arc<dyn Bus>, queue: &str) {
        self.feeders.push(events::spawn_feeder(
            bus,
            queue.to_owned(),
            self.services.events.clone(),
        ));
    }

    /// Announces the run changes made through these services on `bus`; only the first bus
    /// counts.
    pub fn announce_on(&mut self, bus: Arc<dyn Bus>) {
        if self.announcer.is_some() {
            return;
        }
        let (stop, stopped) = watch::channel(false);
        let publisher = tokio::spawn(self.services.announce_runs(bus, stopped));
        self.announcer = Some((stop, publisher));
    }

    /// Stops in the order that loses nothing: the live sockets are closed (the server need not
    /// wait for them), `server` lets its open requests finish, then feeding ends and the
    /// announcer publishes what those last requests changed before it stops.
    pub async fn shutdown(self, server: &ServerHandle) {
        self.services.events.close_sessions();
        server.stop(true).await;
        for feeder in &self.feeders {
            feeder.abort();
        }
        if let Some((stop, publisher)) = self.announcer {
            let _ = stop.send(true);
            let _ = publisher.await;
        }
    }
}

/// How the console's HTTP server listens and serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// `HOST:PORT` to listen on (port 0: any free port, see [`Application::port`]).
    pub bind: String,
    /// HTTP worker threads.
    pub workers: usize,
    /// Limits of the API (the largest request body).
    pub limits: ApiLimits,
    /// A client must send its request headers within this time.
    pub client_request_timeout: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:7800".to_owned(),
            workers: 2,
            limits: ApiLimits::default(),
            client_request_timeout: Duration::from_millis(5_000),
        }
    }
}

/// How long a client may take to close its connection after the answer.
const CLIENT_DISCONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long open requests may run on after a stop is asked for (seconds).
const SHUTDOWN_TIMEOUT_S: u64 = 10;

/// Mounts everything the console serves over `services`:
/// `App::new().configure(startup::configure(services, limits))`.
pub fn configure(
    services: Services,
    limits: ApiLimits,
) -> impl FnOnce(&mut web::ServiceConfig) + Clone {
    move |cfg: &mut web::ServiceConfig| {
        cfg.configure(api::configure(services.clone(), limits))
            .configure(crate::web::configure(services));
    }
}

/// A console HTTP server, bound and ready to serve. It does not handle signals: the owner stops
/// it through [`Application::handle`].
pub struct Application {
    addr: SocketAddr,
    server: Server,
}

impl std::fmt::Debug for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Application")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Application {
    /// Binds `settings.bind` and builds the server over `services` (serving starts with
    /// [`Application::run_until_stopped`]).
    pub fn build(services: Services, settings: &HttpSettings) -> std::io::Result<Application> {
        Self::start(services, settings, Listen::Bind(&settings.bind))
    }

    /// [`Application::build`] on a listener the caller bound (`settings.bind` is ignored).
    pub fn with_listener(
        services: Services,
        settings: &HttpSettings,
        listener: TcpListener,
    ) -> std::io::Result<Application> {
        Self::start(services, settings, Listen::On(listener))
    }

    fn start(
        services: Services,
        settings: &HttpSettings,
        listen: Listen<'_>,
    ) -> std::io::Result<Application> {
        let limits = settings.limits;
        let server = HttpServer::new(move || {
            App::new()
                .wrap(actix_web::middleware::from_fn(crate::http::head_as_get))
                .configure(configure(services.clone(), limits))
        })
        .workers(settings.workers)
        .client_request_timeout(settings.client_request_timeout)
        .client_disconnect_timeout(CLIENT_DISCONNECT_TIMEOUT)
        .disable_signals()
        .shutdown_timeout(SHUTDOWN_TIMEOUT_S);
        let server = match listen {
            Listen::Bind(addr) => server.bind(addr)?,
            Listen::On(listener) => server.listen(listener)?,
        };
        let addr = server.addrs().first().copied().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::AddrNotAvailable,
                "no address to listen on",
            )
        })?;
        Ok(Application {
            addr,
            server: server.run(),
        })
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the server (`handle().stop(true)` lets open requests finish).
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until stopped through [`Application::handle`].
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await
    }
}

/// Where [`Application::start`] listens.
enum Listen<'a> {
    Bind(&'a str),
    On(TcpListener),
}

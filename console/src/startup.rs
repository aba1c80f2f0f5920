//! The console's HTTP server, built in one place: the same actix app (the API under `/api/v1`,
//! its docs, `/metrics` and the web pages) for `mthpt console`, `mthpt standalone` and the
//! integration tests ([`crate::testing::spawn_app`]), so tests run the production app.
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
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{App, HttpServer, web};

use crate::api::{self, ApiLimits};
use crate::service::Services;

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
        let server =
            HttpServer::new(move || App::new().configure(configure(services.clone(), limits)))
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

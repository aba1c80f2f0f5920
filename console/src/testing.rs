//! `spawn_app` for integration tests (feature `test-support`): the production app
//! ([`crate::startup::Application`]: the API and the web pages) on a random local port over a
//! fresh database (a PostgreSQL schema or a SQLite file), with an operator token and helpers that
//! make tenants, users and tokens directly in the store. Time comes from a clock the test may
//! pass ([`spawn_app_with_clock`], e.g. a `ManualClock` it steps); the helpers date what they
//! make by the same clock.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    missing_debug_implementations
)]

use std::sync::Arc;

use actix_web::dev::ServerHandle;
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::store::{Backend, Store};
use mthpt_engine::tenant::{NewApiToken, NewTenant, NewUser, Role, Tenant, User};
use mthpt_engine::testing::{self, TestDb};

use crate::api::ApiLimits;
use crate::service::Services;
use crate::service::credentials::{hash_password, new_token, token_hash};
use crate::startup::{Application, Console, HttpSettings};
use mthpt_engine::bus::Bus;

/// A running API over its own database.
pub struct TestApp {
    /// `http://127.0.0.1:<port>`.
    pub base_url: String,
    /// A token of the operator `root`.
    pub operator_token: String,
    pub services: Services,
    pub client: reqwest::Client,
    db: TestDb,
    server: ServerHandle,
    console: Console,
}

/// Serves the production app over `services` on a free local port (one worker); returns its
/// base URL.
pub fn serve(services: Services, limits: ApiLimits) -> (String, ServerHandle) {
    let settings = HttpSettings {
        bind: "127.0.0.1:0".to_owned(),
        workers: 1,
        limits,
        ..HttpSettings::default()
    };
    let app = Application::build(services, &settings).expect("listen on a free port");
    let base_url = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    tokio::spawn(app.run_until_stopped());
    (base_url, handle)
}

/// Another console node on the same database, with its own event hub fed from `bus` through
/// its own queue.
pub struct ConsoleNode {
    pub base_url: String,
    pub services: Services,
    server: ServerHandle,
    console: Console,
}

impl ConsoleNode {
    pub fn start(store: Arc<dyn Store>, bus: Arc<dyn Bus>, queue: &str) -> ConsoleNode {
        let mut console = Console::new(store, Arc::new(SystemClock));
        console.listen_to(bus, queue);
        let services = console.services().clone();
        let (base_url, server) = serve(services.clone(), ApiLimits::default());
        ConsoleNode {
            base_url,
            services,
            server,
            console,
        }
    }

    /// The WebSocket URL of live events.
    pub fn events_url(&self) -> String {
        format!("{}/api/v1/events", self.base_url.replacen("http", "ws", 1))
    }

    pub async fn stop(self) {
        self.console.shutdown(&self.server).await;
    }
}

/// What a test app is started with.
#[derive(Debug, Clone)]
pub struct TestSettings {
    /// Limits of the API.
    pub limits: ApiLimits,
    /// Where the app (and the helpers of [`TestApp`]) read the time.
    pub clock: Arc<dyn Clock>,
}

impl Default for TestSettings {
    fn default() -> Self {
        Self {
            limits: ApiLimits::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

/// Starts the app with default limits and the system clock.
pub async fn spawn_app(backend: Backend) -> TestApp {
    spawn_app_on(backend, TestSettings::default()).await
}

/// Starts the app with the given limits.
pub async fn spawn_app_with(backend: Backend, limits: ApiLimits) -> TestApp {
    spawn_app_on(
        backend,
        TestSettings {
            limits,
            ..TestSettings::default()
        },
    )
    .await
}

/// Starts the app reading the time from `clock` (e.g. an `mthpt_engine::clock::ManualClock`
/// the test steps).
pub async fn spawn_app_with_clock(backend: Backend, clock: Arc<dyn Clock>) -> TestApp {
    spawn_app_on(
        backend,
        TestSettings {
            clock,
            ..TestSettings::default()
        },
    )
    .await
}

/// Starts the app with `settings`.
pub async fn spawn_app_on(backend: Backend, settings: TestSettings) -> TestApp {
    let db = match backend {
        Backend::Postgres => testing::postgres().await,
        Backend::Sqlite => testing::sqlite().await,
    };
    let console = Console::new(db.shared(), settings.clock);
    let services = console.services().clone();
    let (base_url, handle) = serve(services.clone(), settings.limits);
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap();
    answering(&client, &base_url).await;
    let mut app = TestApp {
        base_url,
        operator_token: String::new(),
        services,
        client,
        db,
        server: handle,
        console,
    };
    let (_, token) = app.user(None, "root", Role::Operator).await;
    app.operator_token = token;
    app
}

/// Waits until the server at `base_url` answers (any status). Its worker builds the app first,
/// which takes seconds in a debug build on a loaded machine: waited for here, before a test
/// opens a transaction, that build cannot hold one idle past the server's
/// idle-in-transaction timeout.
async fn answering(client: &reqwest::Client, base_url: &str) {
    let url = format!("{base_url}/api/v1/not-a-path");
    mthpt_testkit::wait_until(std::time::Duration::from_secs(60), || async {
        client.get(&url).send().await.is_ok()
    })
    .await
    .unwrap_or_else(|e| panic!("the console at {base_url} did not answer: {e}"));
}

impl TestApp {
    pub fn store(&self) -> &dyn Store {
        self.db.store()
    }

    /// Now, by the app's clock (epoch ms).
    pub fn now(&self) -> i64 {
        self.services.now()
    }

    /// The store, shared (to start an engine node on the same database).
    pub fn shared_store(&self) -> Arc<dyn Store> {
        self.db.shared()
    }

    /// The full URL of an API path (`/api/v1/…`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// A request with a bearer token.
    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
    ) -> reqwest::RequestBuilder {
        self.client
            .request(method, self.url(path))
            .bearer_auth(token)
    }

    /// A request as the operator.
    pub fn op(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.request(method, path, &self.operator_token)
    }

    /// Creates a tenant in the default node group.
    pub async fn tenant(&self, name: &str) -> Tenant {
        let mut tx = self.store().begin().await.unwrap();
        let t = tx
            .create_tenant(&NewTenant::named(name), self.now())
            .await
            .unwrap();
        tx.commit().await.unwrap();
        t
    }

    /// Creates a user (password `password-<username>`) and an API token for it.
    pub async fn user(
        &self,
        tenant: Option<&Tenant>,
        username: &str,
        role: Role,
    ) -> (User, String) {
        let now = self.now();
        // Hashed before the transaction begins: a slow hash on a loaded machine must not keep
        // a transaction idle past the server's idle-in-transaction timeout.
        let password_hash = hash_password(&format!("password-{username}")).unwrap();
        let mut tx = self.store().begin().await.unwrap();
        let user = tx
            .create_user(
                &NewUser {
                    tenant_id: tenant.map(|t| t.id),
                    username: username.to_owned(),
                    password_hash,
                    role,
                },
                now,
            )
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let token = self.token(&user, None).await;
        (user, token)
    }

    /// A new API token for `user`, expiring at `expires_at` (epoch ms) if given.
    pub async fn token(&self, user: &User, expires_at: Option<i64>) -> String {
        let token = new_token();
        let mut tx = self.store().begin().await.unwrap();
        tx.create_api_token(
            &NewApiToken {
                user_id: user.id,
                name: format!("test-{}", user.username),
                token_hash: token_hash(&token),
                expires_at,
                role: None,
            },
            self.now(),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        token
    }

    /// Feeds this node's event hub from `bus` through the queue `queue`.
    pub fn listen_to(&mut self, bus: Arc<dyn Bus>, queue: &str) {
        self.console.listen_to(bus, queue);
    }

    /// Joins `bus` as a console node does ([`Console::on_bus`]): fed through the queue `queue`,
    /// and announcing the run changes made through this app.
    pub fn join_bus(&mut self, bus: Arc<dyn Bus>, queue: &str) {
        self.console.listen_to(bus.clone(), queue);
        self.console.announce_on(bus);
    }

    /// The WebSocket URL of live events.
    pub fn events_url(&self) -> String {
        format!("{}/api/v1/events", self.base_url.replacen("http", "ws", 1))
    }

    /// The URL other processes (`mthpt console`, `mthpt engine`) open this app's database with.
    pub fn database_url(&self) -> String {
        self.db.url()
    }

    /// Stops the server and drops the database.
    pub async fn stop(self) {
        self.console.shutdown(&self.server).await;
        self.db.cleanup().await;
    }
}

/// A WebSocket client of `GET /api/v1/events`.
pub type EventSocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long [`next_event_where`] waits for a matching frame.
pub const EVENT_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Opens the events socket at `url` with a bearer token.
pub async fn connect_events(url: &str, token: &str) -> EventSocket {
    try_connect_events(url, token)
        .await
        .unwrap_or_else(|e| panic!("cannot open {url}: {e}"))
}

/// [`connect_events`], or why not.
pub async fn try_connect_events(url: &str, token: &str) -> Result<EventSocket, String> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    request.headers_mut().insert(
        "Authorization",
        format!("Bearer {token}").parse().map_err(|_| "bad token")?,
    );
    let (socket, response) = tokio_tungstenite::connect_async(request)
        .await
        .map_err(|e| e.to_string())?;
    if response.status().as_u16() != 101 {
        return Err(format!("status {}", response.status()));
    }
    Ok(socket)
}

/// The next JSON text frame for which `wanted` holds, within [`EVENT_WAIT`] (others are
/// collected in `skipped`).
pub async fn next_event_where(
    socket: &mut EventSocket,
    skipped: &mut Vec<serde_json::Value>,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    next_event_within(socket, EVENT_WAIT, skipped, wanted).await
}

/// The next JSON text frame for which `wanted` holds, within `wait` (others are collected in
/// `skipped`).
pub async fn next_event_within(
    socket: &mut EventSocket,
    wait: std::time::Duration,
    skipped: &mut Vec<serde_json::Value>,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    use futures::StreamExt;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let frame = tokio::time::timeout_at(deadline, socket.next())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for an event; got {skipped:?}"))
            .expect("socket closed")
            .unwrap();
        if let tokio_tungstenite::tungstenite::Message::Text(text) = frame {
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            if wanted(&value) {
                return value;
            }
            skipped.push(value);
        }
    }
}

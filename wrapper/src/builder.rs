//! Building a [`Wrapper`]: engines, identity, capacity, handlers, spool.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::Wrapper;
use crate::builtin::{self, ShellOptions};
use crate::client::{ClientError, SignedClient, join_url};
use crate::context::RunContext;
use crate::failure::HandlerResult;
use crate::handler::Handler;
use crate::intake::Intake;
use crate::protocol::Signer;
use crate::runtime::{Inner, InnerParts, Settings};
use crate::spool::{Spool, SpoolError};

/// Why a wrapper could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// `build` was called outside a tokio runtime.
    #[error(
        "the wrapper must be built inside a tokio runtime (e.g. in #[tokio::main] or #[actix_web::main])"
    )]
    NoRuntime,
    /// The app is not named by its key `<tenant>.<app>`, or has characters other than
    /// `A-Z a-z 0-9 . _ -`.
    #[error(
        "app {0:?} must be the app's key, <tenant>.<app> (e.g. acme.billing): 1 to 128 characters of A-Z a-z 0-9 . _ -, one dot"
    )]
    InvalidApp(String),
    /// The secret is empty.
    #[error("the app secret is empty")]
    EmptySecret,
    /// No engine URL was given.
    #[error("no engine URL given (at least one is needed to register and deliver results)")]
    NoEngine,
    /// An engine URL is not an http(s) URL.
    #[error("engine URL {url:?} is invalid: {reason}")]
    InvalidEngineUrl {
        /// What was given.
        url: String,
        /// Why.
        reason: String,
    },
    /// No advertised URL was given.
    #[error(
        "no advertised URL given (the URL engines use to reach this instance, e.g. http://10.0.0.5:9010)"
    )]
    NoAdvertiseUrl,
    /// The advertised URL is not an http(s) URL.
    #[error("advertised URL {url:?} is invalid: {reason}")]
    InvalidAdvertiseUrl {
        /// What was given.
        url: String,
        /// Why.
        reason: String,
    },
    /// Capacity 0.
    #[error("capacity must be 1 or more")]
    ZeroCapacity,
    /// No handler registered and no built-in enabled.
    #[error("no handler registered (register one, or enable a built-in handler)")]
    NoHandlers,
    /// Two handlers with one name.
    #[error("handler name {0:?} is registered twice")]
    DuplicateHandler(String),
    /// An invalid handler name.
    #[error("handler name {0:?} must be 1 to 128 characters of A-Z a-z 0-9 . _ - : /")]
    InvalidHandlerName(String),
    /// The spool directory could not be opened.
    #[error(transparent)]
    Spool(#[from] SpoolError),
    /// The HTTP client could not be built.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The AMQP URL is not `amqp://` or `amqps://`.
    #[error(
        "AMQP URL must start with amqp:// or amqps:// (e.g. amqp://user:password@host:5672/vhost)"
    )]
    InvalidAmqpUrl,
    /// The tenant id is not positive.
    #[error("tenant id {0} must be 1 or more")]
    InvalidTenantId(i64),
}

/// Why a URL was refused, without repeating the URL the build error already names.
fn url_reason(e: ClientError) -> String {
    match e {
        ClientError::Url { reason, .. } => reason,
        other => other.to_string(),
    }
}

fn valid_name(name: &str, extra: &[u8]) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b) || extra.contains(&b))
}

/// The exchange alarms go to, as on the engines.
const DEFAULT_EXCHANGE: &str = "mthpt.alarms";

/// Configures and builds a [`Wrapper`]. Start with [`Wrapper::builder`].
pub struct WrapperBuilder {
    app: String,
    secret: Vec<u8>,
    engine_urls: Vec<String>,
    advertise_url: Option<String>,
    capacity: u32,
    labels: BTreeMap<String, String>,
    instance_id: Option<String>,
    spool_dir: Option<PathBuf>,
    heartbeat_interval: Duration,
    retry_initial: Duration,
    retry_max: Duration,
    connect_timeout: Duration,
    request_timeout: Duration,
    flush_timeout: Duration,
    cancel_wait: Duration,
    progress_flush_interval: Duration,
    result_linger: Duration,
    log_tail_lines: usize,
    remember_finished: usize,
    handlers: BTreeMap<String, Handler>,
    duplicate: Option<String>,
    shell: Option<ShellOptions>,
    http: bool,
    intake: Intake,
    amqp_url: Option<String>,
    amqp_exchange: String,
    tenant_id: Option<i64>,
    engine_unreachable_after: Option<Duration>,
}

/// Shows the settings but never the app secret or the AMQP URL (it may carry a password).
impl std::fmt::Debug for WrapperBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrapperBuilder")
            .field("app", &self.app)
            .field("secret", &"<redacted>")
            .field("engine_urls", &self.engine_urls)
            .field("advertise_url", &self.advertise_url)
            .field("capacity", &self.capacity)
            .field("labels", &self.labels)
            .field("instance_id", &self.instance_id)
            .field("handlers", &self.handlers.keys().collect::<Vec<_>>())
            .field("amqp_url", &self.amqp_url.as_ref().map(|_| "<redacted>"))
            .field("amqp_exchange", &self.amqp_exchange)
            .field("tenant_id", &self.tenant_id)
            .finish_non_exhaustive()
    }
}

impl WrapperBuilder {
    pub(crate) fn new(app: impl Into<String>, secret: impl Into<Vec<u8>>) -> Self {
        Self {
            app: app.into(),
            secret: secret.into(),
            engine_urls: Vec::new(),
            advertise_url: None,
            capacity: 64,
            labels: BTreeMap::new(),
            instance_id: None,
            spool_dir: None,
            heartbeat_interval: Duration::from_secs(5),
            retry_initial: Duration::from_millis(200),
            retry_max: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(10),
            flush_timeout: Duration::from_secs(10),
            cancel_wait: Duration::from_secs(5),
            progress_flush_interval: Duration::from_millis(250),
            result_linger: Duration::from_millis(5),
            log_tail_lines: 100,
            remember_finished: 100_000,
            handlers: BTreeMap::new(),
            duplicate: None,
            shell: None,
            http: false,
            intake: Intake::default(),
            amqp_url: None,
            amqp_exchange: DEFAULT_EXCHANGE.to_owned(),
            tenant_id: None,
            engine_unreachable_after: None,
        }
    }

    /// Also publishes the wrapper's alarms straight to the alarm exchange of this RabbitMQ
    /// (`amqp://user:password@host:5672/vhost`), signed with the app's secret, so operators hear
    /// of them when no engine can relay them (docs/alarms.md). The routing key needs the app's
    /// tenant id: an engine tells it at registration, or give it with [`tenant_id`](Self::tenant_id).
    ///
    /// Only with the crate feature `amqp-alarms` (off by default: it compiles lapin).
    #[cfg(feature = "amqp-alarms")]
    pub fn amqp_url(mut self, url: impl Into<String>) -> Self {
        self.amqp_url = Some(url.into());
        self
    }

    /// The exchange direct alarms go to (default `mthpt.alarms`). Only with the crate feature
    /// `amqp-alarms`.
    #[cfg(feature = "amqp-alarms")]
    pub fn amqp_exchange(mut self, exchange: impl Into<String>) -> Self {
        self.amqp_exchange = exchange.into();
        self
    }

    /// The id of the app's tenant, for the routing key of direct alarms before any engine
    /// has answered (engines tell it at registration otherwise).
    pub fn tenant_id(mut self, id: i64) -> Self {
        self.tenant_id = Some(id);
        self
    }

    /// After how long without an answer from any engine the wrapper raises its
    /// `engine_unreachable` alarm (default: three heartbeat intervals, at least 1 s). It is
    /// resolved when an engine answers again.
    pub fn engine_unreachable_after(mut self, after: Duration) -> Self {
        self.engine_unreachable_after = Some(after);
        self
    }

    /// Limits on the request bodies the run API reads: at most `max_body` bytes per request,
    /// at most `max_unverified` bytes of bodies whose signature is not yet checked held at once
    /// (more gets 503), and each body within `read_timeout` of its headers (else 408). Defaults:
    /// [`MAX_BODY_BYTES`](crate::intake::MAX_BODY_BYTES),
    /// [`MAX_UNVERIFIED_BYTES`](crate::intake::MAX_UNVERIFIED_BYTES),
    /// [`BODY_READ_TIMEOUT`](crate::intake::BODY_READ_TIMEOUT).
    pub fn body_limits(
        mut self,
        max_body: usize,
        max_unverified: usize,
        read_timeout: Duration,
    ) -> Self {
        self.intake = Intake::new(max_body, max_unverified, read_timeout);
        self
    }

    /// [`Self::body_limits`] with the default size limits: each body must arrive within
    /// `read_timeout` of its headers (else 408).
    pub fn body_read_timeout(mut self, read_timeout: Duration) -> Self {
        self.intake = Intake::with_read_timeout(read_timeout);
        self
    }

    /// Adds an engine base URL (e.g. `http://engine-1:8080`). Calls go to one engine at a time
    /// and move to the next URL when it fails.
    pub fn engine_url(mut self, url: impl Into<String>) -> Self {
        self.engine_urls.push(url.into());
        self
    }

    /// Adds several engine base URLs.
    pub fn engine_urls<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.engine_urls.extend(urls.into_iter().map(Into::into));
        self
    }

    /// The base URL engines use to reach this instance (required). When the wrapper scope is
    /// mounted under a prefix, include it: `http://10.0.0.5:8080/jobs`.
    pub fn advertise_url(mut self, url: impl Into<String>) -> Self {
        self.advertise_url = Some(url.into());
        self
    }

    /// Most runs executed at once (default 64). Beyond it run requests get 503.
    pub fn capacity(mut self, capacity: u32) -> Self {
        self.capacity = capacity;
        self
    }

    /// Adds a label, sent with registration (e.g. `zone=eu-1`), for routing.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// The instance id (default: app name and a random suffix).
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// The result spool directory (default `.mthpt/spool/<app>`). Each running instance needs
    /// its own; reusing it after a restart delivers the results the previous process had not.
    pub fn spool_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spool_dir = Some(dir.into());
        self
    }

    /// Heartbeat interval (default 5 s; an engine may ask for another at registration).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// Result delivery backoff: first wait and longest wait (default 200 ms and 30 s). The wait
    /// doubles after each round of failures over all engine URLs, with jitter.
    pub fn retry_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.retry_initial = initial;
        self.retry_max = max.max(initial);
        self
    }

    /// Timeouts of calls to engines: connecting and the whole request (default 3 s and 10 s).
    pub fn engine_timeouts(mut self, connect: Duration, request: Duration) -> Self {
        self.connect_timeout = connect;
        self.request_timeout = request;
        self
    }

    /// How long a shutdown waits for spooled results to be delivered (default 10 s).
    pub fn flush_timeout(mut self, timeout: Duration) -> Self {
        self.flush_timeout = timeout;
        self
    }

    /// How long a shutdown waits for runs to stop after cancelling them (default 5 s).
    pub fn cancel_wait(mut self, wait: Duration) -> Self {
        self.cancel_wait = wait;
        self
    }

    /// How long progress updates and log lines are gathered before a batch is sent (default 250 ms).
    pub fn progress_flush_interval(mut self, interval: Duration) -> Self {
        self.progress_flush_interval = interval;
        self
    }

    /// How long results that finish close together are gathered before they are delivered in
    /// one request (default 5 ms; zero sends each as soon as it is spooled). The result is on
    /// disk before this wait starts, so lingering never risks losing it.
    pub fn result_linger(mut self, linger: Duration) -> Self {
        self.result_linger = linger;
        self
    }

    /// How many last log lines a result carries (default 100).
    pub fn log_tail_lines(mut self, lines: usize) -> Self {
        self.log_tail_lines = lines;
        self
    }

    /// How many finished run ids are remembered to recognise re-sent dispatches (default 100,000).
    pub fn remember_finished(mut self, runs: usize) -> Self {
        self.remember_finished = runs;
        self
    }

    fn add(mut self, name: String, handler: Handler) -> Self {
        if self.handlers.insert(name.clone(), handler).is_some() && self.duplicate.is_none() {
            self.duplicate = Some(name);
        }
        self
    }

    /// Registers a blocking handler: each run gets an OS thread of its own (threads are reused
    /// once their run is over).
    pub fn blocking_handler<F>(self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(RunContext) -> HandlerResult + Send + Sync + 'static,
    {
        self.add(name.into(), Handler::blocking(f))
    }

    /// Registers an async handler: each run is a tokio task.
    pub fn async_handler<F, Fut>(self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(RunContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.add(name.into(), Handler::asynchronous(f, false))
    }

    /// Enables the `shell` built-in handler (runs bash scripts; see [`crate::builtin`]).
    pub fn enable_shell(mut self, options: ShellOptions) -> Self {
        self.shell = Some(options);
        self
    }

    /// Enables the `http` built-in handler (performs HTTP requests described in params).
    pub fn enable_http(mut self) -> Self {
        self.http = true;
        self
    }

    /// Validates the settings, opens the spool (reading back undelivered results), and starts
    /// the background work: registration and heartbeat, result delivery, progress batching.
    /// Must be called inside a tokio runtime.
    pub fn build(mut self) -> Result<Wrapper, BuildError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| BuildError::NoRuntime)?;
        // The app's key: its tenant's name and its own, neither of which holds a dot.
        let is_key = matches!(
            self.app.split_once('.'),
            Some((tenant, app)) if !tenant.is_empty() && !app.is_empty() && !app.contains('.')
        );
        if !valid_name(&self.app, b"") || !is_key {
            return Err(BuildError::InvalidApp(self.app));
        }
        if self.secret.is_empty() {
            return Err(BuildError::EmptySecret);
        }
        if self.engine_urls.is_empty() {
            return Err(BuildError::NoEngine);
        }
        for url in &self.engine_urls {
            join_url(url, "/").map_err(|e| BuildError::InvalidEngineUrl {
                url: url.clone(),
                reason: url_reason(e),
            })?;
        }
        let advertise_url = self
            .advertise_url
            .take()
            .ok_or(BuildError::NoAdvertiseUrl)?;
        join_url(&advertise_url, "/").map_err(|e| BuildError::InvalidAdvertiseUrl {
            url: advertise_url.clone(),
            reason: url_reason(e),
        })?;
        if self.capacity == 0 {
            return Err(BuildError::ZeroCapacity);
        }
        if let Some(url) = &self.amqp_url
            && !(url.starts_with("amqp://") || url.starts_with("amqps://"))
        {
            return Err(BuildError::InvalidAmqpUrl);
        }
        if let Some(t) = self.tenant_id.filter(|t| *t < 1) {
            return Err(BuildError::InvalidTenantId(t));
        }
        if let Some(shell) = self.shell.take() {
            let shell = std::sync::Arc::new(builtin::shell::Shell::new(shell));
            // Its bash processes wait from the start (`build` runs inside the runtime).
            shell.refill_later();
            self = self.add(
                builtin::SHELL.to_owned(),
                Handler::asynchronous(
                    move |ctx| {
                        let shell = shell.clone();
                        async move { shell.run(ctx).await }
                    },
                    true,
                ),
            );
        }
        if self.http {
            let client = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(5))
                .timeout(Duration::from_secs(600))
                .build()
                .map_err(|e| BuildError::Client(ClientError::Build(e)))?;
            self = self.add(
                builtin::HTTP.to_owned(),
                Handler::asynchronous(move |ctx| builtin::http::run(ctx, client.clone()), true),
            );
        }
        if let Some(name) = self.duplicate {
            return Err(BuildError::DuplicateHandler(name));
        }
        if self.handlers.is_empty() {
            return Err(BuildError::NoHandlers);
        }
        if let Some(bad) = self.handlers.keys().find(|n| !valid_name(n, b":/")) {
            return Err(BuildError::InvalidHandlerName(bad.clone()));
        }
        let instance_id = self
            .instance_id
            .unwrap_or_else(|| format!("{}-{:08x}", self.app, rand::random::<u32>()));
        let spool_dir = self
            .spool_dir
            .unwrap_or_else(|| PathBuf::from(".mthpt").join("spool").join(&self.app));
        let (spool, replayed) = Spool::open(&spool_dir)?;
        if !replayed.is_empty() {
            tracing::info!(
                count = replayed.len(),
                dir = %spool_dir.display(),
                "found undelivered results in the spool; delivering them"
            );
        }
        for result in &replayed {
            tracing::debug!(run_id = result.run_id, "result found in the spool");
        }
        let client = SignedClient::new(
            Signer::new(self.app.clone(), self.secret),
            self.connect_timeout,
            self.request_timeout,
        )?;
        let (events_tx, events_rx) = mpsc::channel(10_000);
        let settings = Settings {
            app: self.app,
            instance_id,
            engine_urls: self.engine_urls,
            advertise_url,
            capacity: self.capacity,
            labels: self.labels,
            heartbeat_interval: self.heartbeat_interval,
            retry_initial: self.retry_initial,
            retry_max: self.retry_max,
            flush_timeout: self.flush_timeout,
            cancel_wait: self.cancel_wait,
            progress_flush_interval: self.progress_flush_interval,
            result_linger: self.result_linger,
            log_tail_lines: self.log_tail_lines,
            remember_finished: self.remember_finished,
            engine_unreachable_after: self
                .engine_unreachable_after
                .unwrap_or(self.heartbeat_interval * 3)
                .max(Duration::from_secs(1)),
        };
        let alarms = Arc::new(crate::alarms::Alarms::new(
            self.amqp_url.is_some(),
            self.tenant_id,
        ));
        let inner = Arc::new(Inner::new(
            InnerParts {
                settings,
                handlers: self.handlers,
                client,
                runtime: runtime.clone(),
                spool,
                events: events_tx,
                alarms,
            },
            replayed,
        ));
        let spooled = Arc::downgrade(&inner);
        inner.spool.start(Box::new(move |results| {
            if let Some(inner) = spooled.upgrade() {
                inner.spooled(results);
            }
        }))?;
        inner.add_task(runtime.spawn(crate::background::keep_membership(inner.clone())));
        inner.add_task(runtime.spawn(crate::background::deliver_results(inner.clone())));
        inner.add_task(runtime.spawn(crate::background::fence_when_cut_off(inner.clone())));
        inner.add_task(runtime.spawn(crate::alarm_delivery::deliver_alarms(inner.clone())));
        inner.add_task(runtime.spawn(crate::alarm_delivery::watch_engines(
            inner.clone(),
            inner.settings.engine_unreachable_after,
        )));
        #[cfg(feature = "amqp-alarms")]
        if let Some(url) = self.amqp_url {
            inner.add_task(runtime.spawn(crate::alarm_delivery::direct::publish_direct(
                inner.clone(),
                crate::alarm_delivery::direct::DirectConfig {
                    url,
                    exchange: self.amqp_exchange,
                },
            )));
        }
        inner.add_task(runtime.spawn(crate::background::forward_progress(
            inner.clone(),
            events_rx,
        )));
        tracing::info!(
            app = %inner.settings.app,
            instance = %inner.settings.instance_id,
            handlers = ?inner.handlers.keys().collect::<Vec<_>>(),
            spool = %inner.spool.dir().display(),
            "wrapper started"
        );
        Ok(Wrapper {
            inner,
            intake: Arc::new(self.intake),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::BuildError;
    use crate::Wrapper;

    #[tokio::test]
    async fn an_app_not_named_by_its_key_is_refused_before_anything_starts() {
        for app in ["demoshop", ".shop", "acme.", "acme.shop.eu", "acme/shop"] {
            let built = Wrapper::builder(app, "s3cret")
                .engine_url("http://127.0.0.1:1")
                .advertise_url("http://127.0.0.1:2")
                .build();
            match built {
                Err(BuildError::InvalidApp(named)) => assert_eq!(named, app),
                other => panic!("{app}: {:?}", other.err()),
            }
        }
        let err = BuildError::InvalidApp("demoshop".into()).to_string();
        assert!(err.contains("<tenant>.<app>"), "{err}");
    }

    #[test]
    fn debug_output_hides_the_secret_and_the_amqp_password() {
        let mut b = Wrapper::builder("acme.billing", "s3cret-value");
        // Set directly: the setter exists only with the `amqp-alarms` feature.
        b.amqp_url = Some("amqp://user:hunter2@broker:5672/%2f".to_owned());
        let shown = format!("{b:?}");
        assert!(shown.contains("acme.billing"), "{shown}");
        assert!(!shown.contains("s3cret-value"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}

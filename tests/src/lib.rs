//! Shared helpers for MTHPT's cross-crate tests and the benchmark harness: a tenant with an app,
//! engine nodes and wrappers started in this process with quick timings, and polling; the
//! benchmark harness and the fault-injection suite.

pub mod bench;
pub mod chaos;

use std::future::Future;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mthpt_engine::app::{App, NewApp};
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::run::{Run, RunFilter};
use mthpt_engine::runtime::{EngineConfig, EngineNode};
use mthpt_engine::store::Store;
use mthpt_engine::task::{Task, TaskDefinition};
use mthpt_engine::tenant::{NewTenant, Tenant};
use mthpt_wrapper::{Wrapper, WrapperBuilder};

/// A tenant with one app, and the key and secret its wrappers sign with.
/// Resolves on SIGINT or SIGTERM, naming it: a harness selects on it so that its processes
/// and databases are cleaned up by their guards' `Drop` instead of outliving it.
pub async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // Without signal handling the run simply cannot be interrupted cleanly.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

#[derive(Debug, Clone)]
pub struct Tenancy {
    pub tenant: Tenant,
    pub app: App,
    pub key: String,
    pub secret: String,
}

/// Creates tenant `tenant` with app `app`.
pub async fn tenancy(store: &dyn Store, tenant: &str, app: &str) -> anyhow::Result<Tenancy> {
    let now = SystemClock.now_ms();
    let secret = format!("{tenant}-{app}-secret-0123456789");
    let mut tx = store.begin().await?;
    let t = tx.create_tenant(&NewTenant::named(tenant), now).await?;
    let a = tx
        .create_app(
            t.id,
            &NewApp {
                name: app.to_owned(),
                secret: secret.clone(),
            },
            now,
        )
        .await?;
    tx.commit().await?;
    Ok(Tenancy {
        key: format!("{tenant}.{app}"),
        tenant: t,
        app: a,
        secret,
    })
}

/// Creates the task `def` in `t`'s tenant, stamped with the current time.
pub async fn create(store: &dyn Store, t: &Tenancy, def: &TaskDefinition) -> anyhow::Result<Task> {
    let mut tx = store.begin().await?;
    let created = tx
        .create_task(t.tenant.id, def, SystemClock.now_ms())
        .await?;
    tx.commit().await?;
    Ok(created.task)
}

/// Triggers `task` by hand (requested by `"test"`) now, and returns the run it made.
pub async fn trigger(store: &dyn Store, t: &Tenancy, task: &Task) -> anyhow::Result<Run> {
    let mut tx = store.begin().await?;
    let run = tx
        .trigger_task(t.tenant.id, task.id, None, "test", SystemClock.now_ms())
        .await?;
    tx.commit().await?;
    Ok(run)
}

/// The runs of `task` (at most 1000), oldest first by id.
pub async fn runs(store: &dyn Store, t: &Tenancy, task: &Task) -> anyhow::Result<Vec<Run>> {
    let mut tx = store.begin_read().await?;
    let mut runs = tx
        .list_runs(
            t.tenant.id,
            &RunFilter {
                task_id: Some(task.id),
                limit: Some(1000),
                ..Default::default()
            },
        )
        .await?;
    runs.sort_by_key(|r| r.id);
    Ok(runs)
}

/// Engine settings for tests: a free port and short intervals, so failures show in seconds.
pub fn quick_engine_config(node_id: &str) -> EngineConfig {
    EngineConfig {
        node_id: node_id.to_owned(),
        listen: "127.0.0.1:0".to_owned(),
        poll_interval_ms: 50,
        horizon_ms: 300,
        lease_ms: 1_500,
        heartbeat_interval_ms: 200,
        watchdog_interval_ms: 100,
        executor_heartbeat_ms: 200,
        executor_timeout_ms: 1_200,
        node_timeout_ms: 1_500,
        directory_ttl_ms: 200,
        shutdown_grace_ms: 3_000,
        ..EngineConfig::default()
    }
}

/// Starts an engine node on `store` with `config` (and the test's logs, see [`init_logs`]).
pub async fn start_engine(
    store: Arc<dyn Store>,
    config: EngineConfig,
) -> anyhow::Result<EngineNode> {
    init_logs();
    Ok(EngineNode::start(store, Arc::new(SystemClock), config).await?)
}

/// A wrapper serving on a free local port.
pub struct TestWrapper {
    pub wrapper: Wrapper,
    pub url: String,
    handle: actix_web::dev::ServerHandle,
    _spool: tempfile::TempDir,
}

impl std::fmt::Debug for TestWrapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestWrapper")
            .field("url", &self.url)
            .finish()
    }
}

impl TestWrapper {
    /// Builds a wrapper for `tenancy` talking to `engines`, configured by `configure`, and
    /// serves it.
    pub fn start(
        tenancy: &Tenancy,
        engines: &[String],
        configure: impl FnOnce(WrapperBuilder) -> WrapperBuilder,
    ) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let spool = tempfile::tempdir()?;
        let builder = Wrapper::builder(tenancy.key.clone(), tenancy.secret.clone().into_bytes())
            .engine_urls(engines.iter().cloned())
            .advertise_url(url.clone())
            .spool_dir(spool.path())
            .retry_backoff(Duration::from_millis(20), Duration::from_millis(300))
            .progress_flush_interval(Duration::from_millis(50));
        let wrapper = configure(builder).build().context("build wrapper")?;
        let server = wrapper.http_server(listener)?;
        let handle = server.handle();
        tokio::spawn(server);
        Ok(Self {
            wrapper,
            url,
            handle,
            _spool: spool,
        })
    }

    /// Waits until an engine has accepted the registration.
    pub async fn registered(&self) -> anyhow::Result<()> {
        wait_until(Duration::from_secs(10), "wrapper registered", || async {
            Ok(self.wrapper.is_registered())
        })
        .await
    }

    /// Drains and stops.
    pub async fn stop(self) {
        self.wrapper.shutdown(Duration::from_secs(2)).await;
        self.handle.stop(true).await;
    }
}

/// Polls `check` until it returns true ([`mthpt_testkit::wait_until`]), failing at its first
/// error or after `timeout` with `what`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let outcome = mthpt_testkit::wait_for(timeout, || {
        let checked = check();
        async move {
            match checked.await {
                Ok(true) => Some(Ok(())),
                Ok(false) => None,
                Err(e) => Some(Err(e)),
            }
        }
    })
    .await;
    match outcome {
        Ok(checked) => checked,
        Err(_) => anyhow::bail!("timed out after {timeout:?} waiting for: {what}"),
    }
}

/// Logs to stderr for `RUST_LOG` (once per process).
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

//! `mthpt standalone`: the quick start. One process runs an engine node, an executor wrapper
//! with demo handlers and a SQLite database in a data directory, and loads a demo tenant whose
//! tasks show scheduling, a parent → child chain, and a task that fails, retries and raises an
//! alarm. The engine and the console share an in-process bus in place of RabbitMQ: alarm events
//! reach the console's WebSocket (`/api/v1/events`) and are written to the log.
//!
//! It also serves the web console (`/`) and its API (`/api/v1`, docs at `/api/docs/`) on
//! `--console-listen`. On
//! first start it creates the operator `admin` with a generated password, kept in
//! `<data>/operator-password` (readable by the owner only) and printed with the URL on every
//! start; there is no fixed default password.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use mthpt_engine::app::NewApp;
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::runtime::{EngineConfig, EngineNode};
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::{SqliteStore, Store, StoreError};
use mthpt_engine::task::{DependencyCondition, TaskDefinition};
use mthpt_engine::tenant::{NewTenant, NewUser, Role};
use mthpt_wrapper::{HandlerError, Wrapper};
use serde_json::json;

use super::process::{LogFormat, init_logging, shutdown_signal};
use crate::service::credentials;
use crate::startup::{Application, Console, HttpSettings};
use mthpt_engine::alarm::AlarmMessage;
use mthpt_engine::bus::{Bus, Delivery, InProcessBus};

/// Arguments of `mthpt standalone`.
#[derive(Debug, Args)]
pub struct StandaloneArgs {
    /// Directory for the SQLite database and the wrapper's result spool (created if missing).
    #[arg(long, env = "MTHPT_DATA", default_value = "mthpt-data")]
    pub data: PathBuf,
    /// Address of the engine's callback API.
    #[arg(long, env = "MTHPT_LISTEN", default_value = "127.0.0.1:7700")]
    pub listen: String,
    /// Address of the console API (`/api/v1`) and its docs (`/api/docs/`).
    #[arg(long, env = "MTHPT_CONSOLE_LISTEN", default_value = "127.0.0.1:7800")]
    pub console_listen: String,
    /// Address of the built-in demo wrapper.
    #[arg(long, env = "MTHPT_WRAPPER_LISTEN", default_value = "127.0.0.1:7701")]
    pub wrapper_listen: String,
    /// Do not create the demo tenant and tasks.
    #[arg(long)]
    pub no_demo: bool,
    /// Log format.
    #[arg(long, value_enum, env = "MTHPT_LOG_FORMAT", default_value = "human")]
    pub log_format: LogFormat,
}

/// The demo tenant's name.
pub(crate) const DEMO_TENANT: &str = "demo";
/// The demo app's name, within the demo tenant.
pub(crate) const DEMO_APP: &str = "demo";

/// Runs until SIGINT or SIGTERM.
pub async fn run(args: StandaloneArgs) -> ExitCode {
    init_logging(args.log_format);
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mthpt standalone: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: StandaloneArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("cannot create the data directory {}", args.data.display()))?;
    let db = args.data.join("mthpt.db");
    let url = format!("sqlite://{}", db.display());
    let store: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await?);
    store.migrate().await?;
    let login = ensure_operator(&*store, &args.data).await?;
    let console_listener = TcpListener::bind(&args.console_listen)
        .with_context(|| format!("cannot listen on {}", args.console_listen))?;
    let console_url = format!("http://{}", console_listener.local_addr()?);
    let bus = Arc::new(InProcessBus::new());
    let console = Console::on_bus(
        store.clone(),
        Arc::new(SystemClock),
        bus.clone(),
        "standalone-console",
    );
    let alarm_log = tokio::spawn(log_alarms(bus.clone()));
    let console_app = Application::with_listener(
        console.services().clone(),
        &HttpSettings {
            workers: 1,
            ..HttpSettings::default()
        },
        console_listener,
    )?;
    let console_handle = console_app.handle();
    tokio::spawn(console_app.run_until_stopped());
    let console_banner = format!(
        "  console   {console_url} (web console; API {console_url}/api/v1, docs {console_url}/api/docs/)\n  login     {OPERATOR} / {}",
        match &login {
            Some(password) => format!(
                "{password} (kept in {})",
                args.data.join(PASSWORD_FILE).display()
            ),
            None => format!(
                "password not found in {}; set one with the API or remove the user",
                args.data.join(PASSWORD_FILE).display()
            ),
        }
    );
    let secret = if args.no_demo {
        None
    } else {
        Some(load_demo(&*store).await?)
    };

    let stop = shutdown_signal();
    let engine = EngineNode::start_with_bus(
        store.clone(),
        Arc::new(SystemClock),
        EngineConfig {
            node_id: "standalone".to_owned(),
            listen: args.listen.clone(),
            ..EngineConfig::default()
        },
        Some(bus),
    )
    .await?;

    console.services().set_engine_url(engine.url());
    let mut wrapper = None;
    if let Some(secret) = secret {
        let listener = TcpListener::bind(&args.wrapper_listen)
            .with_context(|| format!("cannot listen on {}", args.wrapper_listen))?;
        let wrapper_url = format!("http://{}", listener.local_addr()?);
        let w = demo_wrapper(&engine.url(), &wrapper_url, secret, &args.data)?;
        let server = w.http_server_with(listener, mthpt_engine::metrics::route)?;
        let handle = server.handle();
        tokio::spawn(server);
        println!(
            "MTHPT standalone\n  engine    {}\n  wrapper   {wrapper_url} (app {DEMO_TENANT}.{DEMO_APP})\n  database  {}\n  demo tenant {DEMO_TENANT:?}: heartbeat every 5 s; extract every 20 s, then its child report;\n  flaky every 60 s (fails, retries twice, raises an alarm); nightly (cron 0 0 2 * * ?, Europe/London)\n{console_banner}\n  Ctrl-C stops.",
            engine.url(),
            db.display()
        );
        wrapper = Some((w, handle));
    } else {
        println!(
            "MTHPT standalone: engine {} on {}\n{console_banner}\n  Ctrl-C stops.",
            engine.url(),
            db.display()
        );
    }

    stop.await;
    alarm_log.abort();
    if let Some((w, handle)) = wrapper {
        w.shutdown(Duration::from_secs(5)).await;
        handle.stop(true).await;
    }
    console.shutdown(&console_handle).await;
    engine.shutdown().await;
    store.close().await;
    Ok(())
}

/// The operator standalone creates on first start.
pub(crate) const OPERATOR: &str = "admin";
/// Where its generated password is kept, in the data directory.
pub(crate) const PASSWORD_FILE: &str = "operator-password";

/// Creates the operator `admin` with a generated password on first start (the password file
/// is written first, so a password is never lost); returns the password when it is known.
async fn ensure_operator(store: &dyn Store, data: &Path) -> anyhow::Result<Option<String>> {
    use anyhow::Context;
    let file = data.join(PASSWORD_FILE);
    let mut tx = store.begin().await?;
    if tx.find_user_by_username(OPERATOR).await?.is_some() {
        return Ok(std::fs::read_to_string(&file)
            .ok()
            .map(|p| p.trim().to_owned()));
    }
    let password = credentials::new_password();
    write_private(&file, &password).with_context(|| format!("cannot write {}", file.display()))?;
    let hash = credentials::hash_password(&password)?;
    tx.create_user(
        &NewUser {
            tenant_id: None,
            username: OPERATOR.to_owned(),
            password_hash: hash,
            role: Role::Operator,
        },
        SystemClock.now_ms(),
    )
    .await?;
    tx.commit().await?;
    Ok(Some(password))
}

/// Writes `text` to a file only its owner can read.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = super::process::open_private(path)?;
    f.set_len(0)?;
    writeln!(f, "{text}")
}

/// Creates the demo tenant, app and tasks unless they exist; returns the app's secret.
async fn load_demo(store: &dyn Store) -> Result<String, StoreError> {
    let now = SystemClock.now_ms();
    let mut tx = store.begin().await?;
    let tenant = match tx.find_tenant_by_name(DEMO_TENANT).await? {
        Some(t) => t,
        None => {
            let mut t = NewTenant::named(DEMO_TENANT);
            t.display_name = "Demo tenant".to_owned();
            tx.create_tenant(&t, now).await?
        }
    };
    let app = match tx.find_app_by_name(tenant.id, DEMO_APP).await? {
        Some(a) => a,
        None => {
            let secret: String = (0..32)
                .map(|_| format!("{:02x}", rand::random::<u8>()))
                .collect();
            tx.create_app(
                tenant.id,
                &NewApp {
                    name: DEMO_APP.to_owned(),
                    secret,
                },
                now,
            )
            .await?
        }
    };
    let every = |ms: i64| ScheduleSpec::FixedRate {
        every_ms: ms,
        anchor_at: None,
    };
    let mut flaky = TaskDefinition::new(app.id, "flaky", "flaky", every(60_000));
    flaky.description = "Always fails: retried twice, then a retries-exhausted alarm".to_owned();
    flaky.max_retries = 2;
    flaky.retry_backoff_ms = 1_000;
    let mut extract = TaskDefinition::new(app.id, "extract", "extract", every(20_000));
    extract.params = json!({ "rows": 1000 });
    let mut report = TaskDefinition::new(app.id, "report", "report", ScheduleSpec::Manual);
    report.description = "Runs after each successful extract".to_owned();
    let mut nightly = TaskDefinition::new(
        app.id,
        "nightly",
        "hello",
        ScheduleSpec::Cron {
            expr: "0 0 2 * * ?".to_owned(),
            timezone: "Europe/London".to_owned(),
        },
    );
    nightly.description = "A Quartz cron schedule in a time zone with DST".to_owned();
    let defs = [
        TaskDefinition::new(app.id, "heartbeat", "hello", every(5_000)),
        extract,
        report,
        flaky,
        nightly,
    ];
    for def in &defs {
        if tx.find_task_by_name(tenant.id, &def.name).await?.is_none() {
            tx.create_task(tenant.id, def, now).await?;
        }
    }
    let extract = tx.find_task_by_name(tenant.id, "extract").await?;
    let report = tx.find_task_by_name(tenant.id, "report").await?;
    if let (Some(extract), Some(report)) = (extract, report) {
        tx.add_dependency(
            tenant.id,
            extract.id,
            report.id,
            DependencyCondition::OnSuccess,
            now,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(app.secret)
}

fn demo_wrapper(
    engine_url: &str,
    wrapper_url: &str,
    secret: String,
    data: &std::path::Path,
) -> anyhow::Result<Wrapper> {
    Ok(Wrapper::builder(format!("{DEMO_TENANT}.{DEMO_APP}"), secret.into_bytes())
        .engine_urls([engine_url.to_owned()])
        .advertise_url(wrapper_url)
        .spool_dir(data.join("spool"))
        .capacity(8)
        .blocking_handler("hello", |ctx| {
            tracing::info!(run = ctx.run_id(), task = %ctx.task_name(), attempt = ctx.attempt(), "hello from a blocking handler on its own thread");
            Ok(json!({ "greeting": "hello" }))
        })
        .async_handler("extract", |ctx| async move {
            let rows = ctx.params().get("rows").and_then(serde_json::Value::as_u64).unwrap_or(0);
            ctx.progress(0.5, "halfway");
            tokio::time::sleep(Duration::from_millis(500)).await;
            tracing::info!(run = ctx.run_id(), rows, "extract done");
            Ok(json!({ "rows": rows }))
        })
        .async_handler("report", |ctx| async move {
            tracing::info!(run = ctx.run_id(), "report built after its parent extract");
            Ok(json!({ "report": "ok" }))
        })
        .async_handler("flaky", |ctx| async move {
            tracing::info!(run = ctx.run_id(), attempt = ctx.attempt(), "flaky fails on purpose");
            Err(HandlerError::retryable(format!(
                "the demo upstream is down (attempt {})",
                ctx.attempt()
            )))
        })
        .build()?)
}

/// Writes every alarm event on the bus to the log.
async fn log_alarms(bus: Arc<InProcessBus>) {
    let mut rx = match bus
        .subscribe("standalone-log", &["alarm.#".to_owned()])
        .await
    {
        Ok(rx) => rx,
        Err(e) => {
            tracing::warn!(error = %e, "cannot log alarms");
            return;
        }
    };
    while let Some(delivery) = rx.recv().await {
        if let Delivery::Message(m) = delivery {
            match serde_json::from_slice::<AlarmMessage>(&m.body) {
                Ok(a) => tracing::warn!(
                    alarm = a.alarm.id.0,
                    event = %a.kind,
                    kind = %a.alarm.kind,
                    severity = %a.alarm.severity,
                    count = a.alarm.count,
                    "ALARM {}",
                    a.alarm.message
                ),
                Err(e) => tracing::debug!(error = %e, "unreadable alarm event"),
            }
        }
    }
}

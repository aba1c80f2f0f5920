//! `mthpt console`: one console node serving the REST API (`/api/v1`) over the cluster database.
//! It keeps no state of its own, so any number can run behind a load balancer.
//!
//! Settings come from, lowest precedence first: built-in defaults, a TOML file (`--config`),
//! environment variables `MTHPT_<SETTING>` (e.g. `MTHPT_DATABASE_URL`, `MTHPT_BIND`), then
//! command-line flags. Secrets (the database password) are never printed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use mthpt_engine::clock::SystemClock;
use mthpt_engine::store::{self, Store, redact_url};
use serde::{Deserialize, Serialize};

use super::process::{LogFormat, init_logging, shutdown_signal};
use crate::api::{self, ApiLimits};
use crate::startup::{Application, Console, HttpSettings};
use mthpt_engine::bus::{AmqpBus, AmqpConfig};
use mthpt_engine::runtime::default_node_id;

/// Arguments of `mthpt console` (each also settable in the TOML file or as `MTHPT_<NAME>`).
#[derive(Debug, Clone, Default, Args, Serialize)]
pub struct ConsoleArgs {
    /// TOML file with any of the settings below (snake_case keys, e.g. `bind = "0.0.0.0:7800"`).
    #[arg(long, env = "MTHPT_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// The cluster database: postgres://user:password@host:port/db (or sqlite://file.db).
    #[arg(long, env = "MTHPT_DATABASE_URL", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    /// Address the API listens on (HOST:PORT) [default: 127.0.0.1:7800]
    #[arg(long, env = "MTHPT_BIND")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<String>,
    /// Largest request body accepted, in bytes [default: 1048576]
    #[arg(long, env = "MTHPT_MAX_BODY_BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<usize>,
    /// A client must send its request headers within this many ms [default: 5000]
    #[arg(long, env = "MTHPT_CLIENT_REQUEST_TIMEOUT_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_request_timeout_ms: Option<u64>,
    /// HTTP worker threads [default: 2]
    #[arg(long, env = "MTHPT_WORKERS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// RabbitMQ to receive live events from, for the WebSocket at /api/v1/events:
    /// amqp://user:password@host:5672/vhost (without one, the WebSocket carries no events)
    #[arg(long, env = "MTHPT_AMQP_URL", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amqp_url: Option<String>,
    /// The topic exchange events are published to [default: mthpt.alarms]
    #[arg(long, env = "MTHPT_AMQP_EXCHANGE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amqp_exchange: Option<String>,
    /// Unique id of this console node, naming its queue (default: host name, process id and a
    /// random suffix)
    #[arg(long, env = "MTHPT_NODE_ID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Log format [default: human]
    #[arg(long, value_enum, env = "MTHPT_LOG_FORMAT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
    /// Engine URL(s), comma-separated, that wrappers should call: shown in the `mthpt wrapper`
    /// command the console gives a new app (without it, a placeholder)
    #[arg(long, env = "MTHPT_ENGINE_URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_url: Option<String>,
}

/// The merged settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
struct Settings {
    database_url: Option<String>,
    bind: String,
    max_body_bytes: usize,
    client_request_timeout_ms: u64,
    workers: usize,
    amqp_url: Option<String>,
    amqp_exchange: String,
    node_id: Option<String>,
    log_format: LogFormat,
    engine_url: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            database_url: None,
            bind: "127.0.0.1:7800".to_owned(),
            max_body_bytes: api::DEFAULT_MAX_BODY_BYTES,
            client_request_timeout_ms: 5_000,
            workers: 2,
            amqp_url: None,
            amqp_exchange: mthpt_engine::alarm::EXCHANGE.to_owned(),
            node_id: None,
            log_format: LogFormat::Human,
            engine_url: None,
        }
    }
}

fn settings(args: &ConsoleArgs) -> Result<Settings, String> {
    let s: Settings =
        super::process::layered_settings(Settings::default(), args.config.as_deref(), args)?;
    if s.workers == 0 {
        return Err("workers must be at least 1".to_owned());
    }
    if s.max_body_bytes < 1024 {
        return Err("max_body_bytes must be at least 1024".to_owned());
    }
    Ok(s)
}

/// Serves the API until SIGINT or SIGTERM.
pub async fn run(args: ConsoleArgs) -> ExitCode {
    let settings = match settings(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mthpt console: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(settings.log_format);
    let Some(url) = settings.database_url.clone() else {
        eprintln!(
            "mthpt console: no database: give --database-url, MTHPT_DATABASE_URL or database_url in the config file"
        );
        return ExitCode::from(2);
    };
    let store: Arc<dyn Store> = match store::connect(&url).await {
        Ok(s) => Arc::from(s),
        Err(e) => {
            eprintln!("mthpt console: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = store.migrate().await {
        eprintln!("mthpt console: {}: {e}", redact_url(&url));
        return ExitCode::FAILURE;
    }
    let node = settings.node_id.clone().unwrap_or_else(default_node_id);
    let console = match &settings.amqp_url {
        Some(amqp) => match AmqpBus::new(AmqpConfig {
            url: amqp.clone(),
            exchange: settings.amqp_exchange.clone(),
            connection_name: format!("mthpt-console {node}"),
        }) {
            Ok(bus) => {
                let queue = format!("mthpt.console.{node}");
                tracing::info!(amqp = %redact_url(amqp), %queue, "live events from RabbitMQ");
                // Run changes made here (cancels) are announced on the bus like an engine's.
                Console::on_bus(store.clone(), Arc::new(SystemClock), Arc::new(bus), &queue)
            }
            Err(e) => {
                eprintln!("mthpt console: {e}");
                return ExitCode::from(2);
            }
        },
        None => {
            tracing::warn!("no AMQP URL: the WebSocket at /api/v1/events carries no live events");
            Console::new(store.clone(), Arc::new(SystemClock))
        }
    };
    if let Some(engine) = &settings.engine_url {
        console.services().set_engine_url(engine.clone());
    }
    let http = HttpSettings {
        bind: settings.bind.clone(),
        workers: settings.workers,
        limits: ApiLimits {
            max_body_bytes: settings.max_body_bytes,
        },
        client_request_timeout: Duration::from_millis(settings.client_request_timeout_ms),
    };
    let app = match Application::build(console.services().clone(), &http) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("mthpt console: cannot listen on {}: {e}", settings.bind);
            return ExitCode::FAILURE;
        }
    };
    let stop = shutdown_signal();
    tracing::info!(bind = %settings.bind, database = %redact_url(&url), "console API at http://{}/api/v1 (docs at /api/docs/)", settings.bind);
    let handle = app.handle();
    let serving = tokio::spawn(app.run_until_stopped());
    stop.await;
    console.shutdown(&handle).await;
    let _ = serving.await;
    store.close().await;
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_names_every_variable_and_default() {
        crate::cli::process::assert_help_shows_settings("console", &Settings::default());
    }

    #[test]
    fn flags_beat_the_file_and_zero_workers_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("console.toml");
        std::fs::write(&file, "bind = \"0.0.0.0:9000\"\nworkers = 4\n").unwrap();
        let args = ConsoleArgs {
            config: Some(file.clone()),
            workers: Some(3),
            ..Default::default()
        };
        let s = settings(&args).unwrap();
        assert_eq!((s.bind.as_str(), s.workers), ("0.0.0.0:9000", 3));
        let zero = ConsoleArgs {
            config: Some(file),
            workers: Some(0),
            ..Default::default()
        };
        assert!(settings(&zero).unwrap_err().contains("workers"));
    }
}

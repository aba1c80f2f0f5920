//! `mthpt engine`: one engine node against PostgreSQL (or SQLite).
//!
//! Settings come from, lowest precedence first: built-in defaults, a TOML file (`--config`),
//! environment variables `MTHPT_<SETTING>` (e.g. `MTHPT_DATABASE_URL`, `MTHPT_GROUPS`,
//! `MTHPT_LEASE_MS`), then command-line flags. Secrets (the database password) are never
//! printed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use mthpt_engine::bus::{AmqpBus, AmqpConfig, Bus};
use mthpt_engine::clock::SystemClock;
use mthpt_engine::dispatcher::DispatchConfig;
use mthpt_engine::runtime::{EngineConfig, EngineNode, default_node_id};
use mthpt_engine::store::{self, redact_url};
use serde::{Deserialize, Serialize};

use super::process::{LogFormat, init_logging, shutdown_signal};

/// Arguments of `mthpt engine` (each also settable in the TOML file or as `MTHPT_<NAME>`).
#[derive(Debug, Clone, Default, Args, Serialize)]
pub struct EngineArgs {
    /// TOML file with any of the settings below (snake_case keys, e.g. `lease_ms = 2000`).
    #[arg(long, env = "MTHPT_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// The cluster database: postgres://user:password@host:port/db (or sqlite://file.db).
    #[arg(long, env = "MTHPT_DATABASE_URL", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    /// The node groups this node schedules, comma-separated [default: default]
    #[arg(long, env = "MTHPT_GROUPS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<String>,
    /// Address of the callback API wrappers call (HOST:PORT) [default: 127.0.0.1:7700]
    #[arg(long, env = "MTHPT_LISTEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// URL others reach this node at (default http://<listen>).
    #[arg(long, env = "MTHPT_ADVERTISE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise: Option<String>,
    /// Unique id of this node (default: host name, process id and a random suffix).
    #[arg(long, env = "MTHPT_NODE_ID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Claim at least this often (ms) [default: 250]
    #[arg(long, env = "MTHPT_POLL_INTERVAL_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<i64>,
    /// Claim runs due up to this far ahead (ms) [default: 500]
    #[arg(long, env = "MTHPT_HORIZON_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub horizon_ms: Option<i64>,
    /// How long a claim holds (ms): a dead node's runs move after at most this [default: 2000]
    #[arg(long, env = "MTHPT_LEASE_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<i64>,
    /// At most this many runs per claim [default: 1000]
    #[arg(long, env = "MTHPT_CLAIM_BATCH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_batch: Option<i64>,
    /// Wrappers are told to heartbeat this often (ms) [default: 1000]
    #[arg(long, env = "MTHPT_EXECUTOR_HEARTBEAT_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_heartbeat_ms: Option<u64>,
    /// A wrapper silent this long is lost (ms) [default: 4000]
    #[arg(long, env = "MTHPT_EXECUTOR_TIMEOUT_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_timeout_ms: Option<i64>,
    /// A node silent this long is reported lost (ms) [default: 5000]
    #[arg(long, env = "MTHPT_NODE_TIMEOUT_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_timeout_ms: Option<i64>,
    /// At most this many requests to wrappers in flight [default: 256]
    #[arg(long, env = "MTHPT_MAX_IN_FLIGHT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<usize>,
    /// At most one dispatch round per this many ms (0: fire every due instant on its own) [default: 0]
    #[arg(long, env = "MTHPT_DISPATCH_COALESCE_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_coalesce_ms: Option<i64>,
    /// Accepted runs are written as started this many ms later, so a quick run's result
    /// usually comes first and its start costs no write (0 to 1000) [default: 300]
    #[arg(long, env = "MTHPT_START_WRITE_DELAY_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_write_delay_ms: Option<i64>,
    /// Threads of the callback API's HTTP server (they parse and verify requests; database work
    /// runs on the engine's runtime) [default: 1]
    #[arg(long, env = "MTHPT_CALLBACK_WORKERS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_workers: Option<usize>,
    /// A request body to the callback API must arrive within this many ms of its headers, else
    /// 408 and the connection is closed [default: 10000]
    #[arg(long, env = "MTHPT_BODY_READ_TIMEOUT_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_read_timeout_ms: Option<i64>,
    /// RabbitMQ to publish alarm events to: amqp://user:password@host:5672/vhost (without one,
    /// they stay in the database outbox until a node with one publishes them)
    #[arg(long, env = "MTHPT_AMQP_URL", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amqp_url: Option<String>,
    /// The topic exchange alarm events are published to [default: mthpt.alarms]
    #[arg(long, env = "MTHPT_AMQP_EXCHANGE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amqp_exchange: Option<String>,
    /// Log format [default: human]
    #[arg(long, value_enum, env = "MTHPT_LOG_FORMAT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
}

/// The merged settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
struct Settings {
    database_url: Option<String>,
    groups: String,
    listen: String,
    advertise: Option<String>,
    node_id: Option<String>,
    poll_interval_ms: i64,
    horizon_ms: i64,
    lease_ms: i64,
    claim_batch: i64,
    executor_heartbeat_ms: u64,
    executor_timeout_ms: i64,
    node_timeout_ms: i64,
    max_in_flight: usize,
    dispatch_coalesce_ms: i64,
    start_write_delay_ms: i64,
    callback_workers: usize,
    body_read_timeout_ms: i64,
    amqp_url: Option<String>,
    amqp_exchange: String,
    log_format: LogFormat,
}

impl Default for Settings {
    fn default() -> Self {
        let d = EngineConfig::default();
        Self {
            database_url: None,
            groups: d.groups.join(","),
            listen: d.listen,
            advertise: None,
            node_id: None,
            poll_interval_ms: d.poll_interval_ms,
            horizon_ms: d.horizon_ms,
            lease_ms: d.lease_ms,
            claim_batch: d.claim_batch,
            executor_heartbeat_ms: d.executor_heartbeat_ms,
            executor_timeout_ms: d.executor_timeout_ms,
            node_timeout_ms: d.node_timeout_ms,
            max_in_flight: d.dispatch.max_in_flight,
            dispatch_coalesce_ms: d.dispatch.coalesce_ms,
            start_write_delay_ms: d.dispatch.start_write_delay_ms,
            callback_workers: d.callback_workers,
            body_read_timeout_ms: d.body_read_timeout_ms,
            amqp_url: None,
            amqp_exchange: mthpt_engine::alarm::EXCHANGE.to_owned(),
            log_format: LogFormat::Human,
        }
    }
}

fn settings(args: &EngineArgs) -> Result<Settings, String> {
    super::process::layered_settings(Settings::default(), args.config.as_deref(), args)
}

impl Settings {
    fn engine_config(&self) -> EngineConfig {
        let d = EngineConfig::default();
        EngineConfig {
            node_id: self.node_id.clone().unwrap_or_else(default_node_id),
            groups: self
                .groups
                .split(',')
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .map(str::to_owned)
                .collect(),
            listen: self.listen.clone(),
            advertise: self.advertise.clone(),
            poll_interval_ms: self.poll_interval_ms,
            horizon_ms: self.horizon_ms,
            lease_ms: self.lease_ms,
            claim_batch: self.claim_batch,
            executor_heartbeat_ms: self.executor_heartbeat_ms,
            executor_timeout_ms: self.executor_timeout_ms,
            node_timeout_ms: self.node_timeout_ms,
            callback_workers: self.callback_workers,
            body_read_timeout_ms: self.body_read_timeout_ms,
            dispatch: DispatchConfig {
                max_in_flight: self.max_in_flight,
                coalesce_ms: self.dispatch_coalesce_ms,
                start_write_delay_ms: self.start_write_delay_ms,
                ..d.dispatch.clone()
            },
            ..d
        }
    }
}

/// Runs a node until SIGINT or SIGTERM, then shuts it down gracefully.
pub async fn run(args: EngineArgs) -> ExitCode {
    let settings = match settings(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mthpt engine: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(settings.log_format);
    let Some(url) = settings.database_url.clone() else {
        eprintln!(
            "mthpt engine: no database: give --database-url, MTHPT_DATABASE_URL or database_url in the config file"
        );
        return ExitCode::from(2);
    };
    let config = settings.engine_config();
    if let Err(e) = config.validate() {
        eprintln!("mthpt engine: invalid configuration: {e}");
        return ExitCode::from(2);
    }
    let store = match store::connect(&url).await {
        Ok(s) => Arc::from(s),
        Err(e) => {
            eprintln!("mthpt engine: {e}");
            return ExitCode::FAILURE;
        }
    };
    let store: Arc<dyn mthpt_engine::store::Store> = store;
    match store.migrate().await {
        Ok(report) => {
            tracing::info!(database = %redact_url(&url), version = report.version, applied = report.applied.len(), "schema ready");
            match store.server_warnings().await {
                Ok(warnings) => {
                    for warning in warnings {
                        tracing::warn!("{warning}");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the database server's settings")
                }
            }
        }
        Err(e) => {
            eprintln!("mthpt engine: {}: {e}", redact_url(&url));
            return ExitCode::FAILURE;
        }
    }
    let bus: Option<Arc<dyn Bus>> = match &settings.amqp_url {
        Some(amqp) => match AmqpBus::new(AmqpConfig {
            url: amqp.clone(),
            exchange: settings.amqp_exchange.clone(),
            connection_name: format!("mthpt-engine {}", config.node_id),
        }) {
            Ok(bus) => {
                tracing::info!(amqp = %redact_url(amqp), exchange = %settings.amqp_exchange, "alarm events are published to RabbitMQ");
                Some(Arc::new(bus))
            }
            Err(e) => {
                eprintln!("mthpt engine: {e}");
                return ExitCode::from(2);
            }
        },
        None => {
            tracing::warn!(
                "no AMQP URL: alarm events stay in the database outbox until a node with one publishes them"
            );
            None
        }
    };
    let stop = shutdown_signal();
    let node =
        match EngineNode::start_with_bus(store.clone(), Arc::new(SystemClock), config, bus).await {
            Ok(node) => node,
            Err(e) => {
                eprintln!("mthpt engine: {e}");
                return ExitCode::FAILURE;
            }
        };
    stop.await;
    node.shutdown().await;
    store.close().await;
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("engine.toml");
        std::fs::write(
            &file,
            "lease_ms = 4000\nhorizon_ms = 800\ngroups = \"eu, asia\"\n",
        )
        .unwrap();
        let args = EngineArgs {
            config: Some(file),
            horizon_ms: Some(900),
            ..Default::default()
        };
        let s = settings(&args).unwrap();
        assert_eq!((s.lease_ms, s.horizon_ms), (4000, 900));
        let c = s.engine_config();
        assert_eq!(c.groups, vec!["eu".to_string(), "asia".to_string()]);
        assert_eq!(c.poll_interval_ms, EngineConfig::default().poll_interval_ms);
    }

    #[test]
    fn help_names_every_variable_and_default() {
        crate::cli::process::assert_help_shows_settings("engine", &Settings::default());
    }

    #[test]
    fn a_missing_config_file_is_named() {
        let args = EngineArgs {
            config: Some("/nonexistent/engine.toml".into()),
            ..Default::default()
        };
        assert!(
            settings(&args)
                .unwrap_err()
                .contains("/nonexistent/engine.toml")
        );
    }

    #[test]
    fn a_mistyped_setting_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("engine.toml");
        std::fs::write(&file, "lease_ms = \"soon\"\n").unwrap();
        let err = settings(&EngineArgs {
            config: Some(file),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("lease_ms"), "{err}");
    }

    /// Why the engine configuration `args` give is refused.
    fn refusal(args: &EngineArgs) -> String {
        settings(args)
            .unwrap()
            .engine_config()
            .validate()
            .unwrap_err()
    }

    #[test]
    fn tuning_flags_reach_the_engine_and_zero_workers_is_refused() {
        let args = EngineArgs {
            callback_workers: Some(3),
            dispatch_coalesce_ms: Some(5),
            start_write_delay_ms: Some(0),
            ..Default::default()
        };
        let c = settings(&args).unwrap().engine_config();
        assert_eq!((c.callback_workers, c.dispatch.coalesce_ms), (3, 5));
        assert_eq!(c.dispatch.start_write_delay_ms, 0);
        assert_eq!(EngineConfig::default().callback_workers, 1);

        let zero = EngineArgs {
            callback_workers: Some(0),
            ..Default::default()
        };
        let err = refusal(&zero);
        assert!(err.contains("callback_workers"), "{err}");
    }

    #[test]
    fn the_body_read_timeout_is_set_and_checked() {
        let set = EngineArgs {
            body_read_timeout_ms: Some(2_000),
            ..Default::default()
        };
        let c = settings(&set).unwrap().engine_config();
        assert_eq!(c.body_read_timeout_ms, 2_000);
        // The engine's default is the protocol's, the wrapper's too.
        assert_eq!(
            u128::try_from(EngineConfig::default().body_read_timeout_ms).ok(),
            Some(mthpt_wrapper::intake::BODY_READ_TIMEOUT.as_millis())
        );
        for bad in [0, -5, 3_600_001] {
            let args = EngineArgs {
                body_read_timeout_ms: Some(bad),
                ..Default::default()
            };
            let err = refusal(&args);
            assert!(err.contains("body_read_timeout_ms"), "{bad}: {err}");
        }
    }
}

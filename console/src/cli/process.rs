//! What every long-running subcommand shares: layered settings, logging and the shutdown
//! signal.

/// Settings layered in rising precedence: `defaults`, the TOML file `config` (which must exist
/// when named), `MTHPT_*` environment variables, then the flags given in `args`.
pub fn layered_settings<S, A>(
    defaults: S,
    config: Option<&std::path::Path>,
    args: &A,
) -> Result<S, String>
where
    S: serde::Serialize + serde::de::DeserializeOwned,
    A: serde::Serialize,
{
    use figment::Figment;
    use figment::providers::{Env, Format, Serialized, Toml};
    let mut figment = Figment::from(Serialized::defaults(defaults));
    if let Some(path) = config {
        if !path.is_file() {
            return Err(format!("config file {} does not exist", path.display()));
        }
        figment = figment.merge(Toml::file(path));
    }
    figment
        .merge(Env::prefixed("MTHPT_").ignore(&["config"]))
        .merge(Serialized::defaults(args))
        .extract()
        .map_err(|e| format!("invalid settings: {e}"))
}

/// How log lines look.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    clap::ValueEnum,
    serde::Deserialize,
    serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Readable lines.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// Logs to stderr, filtered by `RUST_LOG` (default: `info`, libraries at `warn`).
pub fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,sqlx=warn,actix_server=warn,actix_web=warn")
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    // Another subcommand or a test may have installed one already; that one stays.
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

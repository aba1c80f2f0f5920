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

/// Opens `path` for writing a secret, readable and writable by its owner only: created if
/// missing; an existing file keeps its content until the caller empties it.
pub(crate) fn open_private(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let file = options.open(path)?;
    // A file that existed keeps its mode on open; a secret's may not be readable by others.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM. The handlers are installed by the call itself, not
/// when the future is first polled: a signal that arrives after the call (say, right after the
/// banner is printed, before the process waits for it) stops the process cleanly instead of
/// killing it.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async move {
            let next = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = next(term) => {}
                () = next(int) => {}
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// For the settings tests of `mthpt engine` and `mthpt console`: every setting of `defaults`
/// (a serialised settings struct) has a flag of subcommand `sub` that names its `MTHPT_*`
/// variable and, where the setting has a default, shows that default in its help.
#[cfg(test)]
pub(crate) fn assert_help_shows_settings<S: serde::Serialize>(sub: &str, defaults: &S) {
    use clap::CommandFactory;
    let mut cli = super::Cli::command();
    let cmd = cli
        .find_subcommand_mut(sub)
        .unwrap_or_else(|| panic!("no subcommand {sub}"));
    let help = cmd.render_help().to_string();
    let serde_json::Value::Object(settings) = serde_json::to_value(defaults).unwrap_or_default()
    else {
        panic!("settings serialise as an object");
    };
    for (key, value) in settings {
        let long = key.replace('_', "-");
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()))
            .unwrap_or_else(|| panic!("setting {key} has no flag --{long}"));
        let env = format!("MTHPT_{}", key.to_uppercase());
        assert_eq!(
            arg.get_env().and_then(|e| e.to_str()),
            Some(env.as_str()),
            "--{long} names its variable"
        );
        assert!(help.contains(&format!("[env: {env}")), "{help}");
        let shown = match value {
            serde_json::Value::Null => continue,
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        let text = arg.get_help().map(ToString::to_string).unwrap_or_default();
        assert!(
            text.contains(&format!("[default: {shown}]")),
            "--{long} shows its default {shown}: {text:?}"
        );
    }
}

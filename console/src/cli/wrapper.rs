//! `mthpt wrapper`: a standalone executor running the built-in handlers (`shell`, `http`), for
//! hosts whose business code is not written in Rust.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use mthpt_wrapper::intake::BODY_READ_TIMEOUT;
use mthpt_wrapper::{BuildError, ShellOptions, Wrapper};

/// Options of `mthpt wrapper`.
#[derive(Debug, clap::Args)]
pub struct WrapperArgs {
    /// App key `<tenant>.<app>` (e.g. `acme.ops`: app `ops` of tenant `acme`); the engines
    /// know this app's secret.
    #[arg(long, env = "MTHPT_APP", value_name = "TENANT.APP")]
    pub app: String,

    /// File holding the app's signing secret (leading and trailing whitespace is ignored).
    #[arg(long, env = "MTHPT_SECRET_FILE", value_name = "FILE")]
    pub secret_file: PathBuf,

    /// Engine base URL(s), comma-separated; calls move to the next one when one fails.
    #[arg(
        long = "engine",
        env = "MTHPT_ENGINE",
        value_name = "URL[,URL]",
        value_delimiter = ',',
        required = true
    )]
    pub engines: Vec<String>,

    /// Address to listen on for engine requests, e.g. 0.0.0.0:9010.
    #[arg(long, env = "MTHPT_LISTEN", value_name = "ADDR")]
    pub listen: String,

    /// URL engines use to reach this executor (default: http://<listen address>; required when
    /// listening on all interfaces).
    #[arg(long, env = "MTHPT_ADVERTISE", value_name = "URL")]
    pub advertise: Option<String>,

    /// Enable the `shell` handler (runs bash scripts given in task params).
    #[arg(long, env = "MTHPT_ENABLE_SHELL")]
    pub enable_shell: bool,

    /// How many `bash` processes the `shell` handler keeps started and waiting for a script, so
    /// that scripts due together do not queue behind bash's own start (0: a new bash per run).
    #[arg(
        long,
        env = "MTHPT_SHELL_PRESTARTED",
        default_value_t = 4,
        value_name = "N"
    )]
    pub shell_prestarted: usize,

    /// Enable the `http` handler (performs HTTP requests described in task params).
    #[arg(long, env = "MTHPT_ENABLE_HTTP")]
    pub enable_http: bool,

    /// Directory of the result spool (default .mthpt/spool/<app>); reuse it across restarts.
    #[arg(long, env = "MTHPT_SPOOL", value_name = "DIR")]
    pub spool: Option<PathBuf>,

    /// Most runs executed at once.
    #[arg(long, env = "MTHPT_CAPACITY", default_value_t = 16)]
    pub capacity: u32,

    /// Label sent to the engines for routing, repeatable (in the variable: comma-separated).
    #[arg(
        long = "label",
        env = "MTHPT_LABELS",
        value_name = "KEY=VALUE",
        value_delimiter = ','
    )]
    pub labels: Vec<String>,

    /// Seconds running runs may take to finish on shutdown before they are cancelled.
    #[arg(
        long,
        env = "MTHPT_DRAIN_GRACE",
        default_value_t = 30,
        value_name = "SECONDS"
    )]
    pub drain_grace: u64,

    /// Also publish this wrapper's alarms (handlers' and its own "engine unreachable") straight
    /// to RabbitMQ, signed with the app's secret: amqp://user:password@host:5672/vhost.
    #[arg(long, env = "MTHPT_AMQP_URL", value_name = "URL")]
    pub amqp_url: Option<String>,

    /// The exchange alarms are published to.
    #[arg(
        long,
        env = "MTHPT_AMQP_EXCHANGE",
        default_value = "mthpt.alarms",
        value_name = "NAME"
    )]
    pub amqp_exchange: String,

    /// The id of the app's tenant, for the routing key of alarms published before any engine
    /// answered (engines tell it at registration).
    #[arg(long, env = "MTHPT_TENANT_ID", value_name = "ID")]
    pub tenant_id: Option<i64>,

    /// Seconds without an answer from any engine before the "engine unreachable" alarm is
    /// raised (default: three heartbeat intervals, 15 s).
    #[arg(long, env = "MTHPT_ENGINE_UNREACHABLE_AFTER", value_name = "SECONDS")]
    pub engine_unreachable_after: Option<u64>,

    /// Seconds a request body may take to arrive once its headers are read (else 408 and the
    /// connection is closed): what a slow or hostile client can hold a connection for.
    #[arg(
        long,
        env = "MTHPT_BODY_READ_TIMEOUT",
        default_value_t = BODY_READ_TIMEOUT.as_secs(),
        value_name = "SECONDS",
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub body_read_timeout: u64,
}

/// Why `mthpt wrapper` could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum WrapperCliError {
    /// The secret file could not be read.
    #[error("cannot read the secret file {path}: {source}")]
    SecretFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The secret file is empty.
    #[error("the secret file {0} is empty")]
    EmptySecret(PathBuf),
    /// `--listen` is not an address.
    #[error(
        "--listen {value:?} is not a socket address (expected HOST:PORT, e.g. 0.0.0.0:9010): {reason}"
    )]
    BadListen {
        /// What was given.
        value: String,
        /// Why.
        reason: String,
    },
    /// Listening on all interfaces without an advertised URL.
    #[error(
        "--advertise is required when listening on {0} (engines need a reachable address, e.g. --advertise http://10.0.0.5:9010)"
    )]
    NeedAdvertise(SocketAddr),
    /// No built-in handler enabled.
    #[error("nothing to run: enable at least one built-in handler (--enable-shell, --enable-http)")]
    NoHandler,
    /// A `--label` without `=`.
    #[error("--label {0:?} must be KEY=VALUE")]
    BadLabel(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The wrapper settings are invalid.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// Serving failed.
    #[error("the HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// Checked settings.
#[derive(Debug)]
struct Prepared {
    secret: Vec<u8>,
    listen: SocketAddr,
    advertise: Option<String>,
    labels: BTreeMap<String, String>,
}

fn prepare(args: &WrapperArgs) -> Result<Prepared, WrapperCliError> {
    if !args.enable_shell && !args.enable_http {
        return Err(WrapperCliError::NoHandler);
    }
    let raw = std::fs::read(&args.secret_file).map_err(|source| WrapperCliError::SecretFile {
        path: args.secret_file.clone(),
        source,
    })?;
    let secret = raw.trim_ascii().to_vec();
    if secret.is_empty() {
        return Err(WrapperCliError::EmptySecret(args.secret_file.clone()));
    }
    let bad_listen = |reason: String| WrapperCliError::BadListen {
        value: args.listen.clone(),
        reason,
    };
    let listen = args
        .listen
        .to_socket_addrs()
        .map_err(|e| bad_listen(e.to_string()))?
        .next()
        .ok_or_else(|| bad_listen("it resolves to no address".to_owned()))?;
    if args.advertise.is_none() && listen.ip().is_unspecified() {
        return Err(WrapperCliError::NeedAdvertise(listen));
    }
    let mut labels = BTreeMap::new();
    for label in &args.labels {
        let Some((key, value)) = label.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(WrapperCliError::BadLabel(label.clone()));
        };
        labels.insert(key.to_owned(), value.to_owned());
    }
    Ok(Prepared {
        secret,
        listen,
        advertise: args.advertise.clone(),
        labels,
    })
}

async fn serve(args: WrapperArgs) -> Result<(), WrapperCliError> {
    let prepared = prepare(&args)?;
    let listener = TcpListener::bind(prepared.listen).map_err(|source| WrapperCliError::Bind {
        addr: prepared.listen,
        source,
    })?;
    let local = listener.local_addr().map_err(WrapperCliError::Serve)?;
    let advertise = prepared
        .advertise
        .unwrap_or_else(|| format!("http://{local}"));
    let mut builder = Wrapper::builder(args.app.clone(), prepared.secret)
        .engine_urls(args.engines.iter().map(|e| e.trim().to_owned()))
        .advertise_url(advertise.clone())
        .capacity(args.capacity)
        .body_read_timeout(Duration::from_secs(args.body_read_timeout));
    for (key, value) in prepared.labels {
        builder = builder.label(key, value);
    }
    if let Some(dir) = &args.spool {
        builder = builder.spool_dir(dir);
    }
    if args.enable_shell {
        builder = builder.enable_shell(ShellOptions {
            prestarted: args.shell_prestarted,
            ..ShellOptions::default()
        });
    }
    if args.enable_http {
        builder = builder.enable_http();
    }
    if let Some(url) = &args.amqp_url {
        builder = builder
            .amqp_url(url.clone())
            .amqp_exchange(args.amqp_exchange.clone());
    }
    if let Some(tenant) = args.tenant_id {
        builder = builder.tenant_id(tenant);
    }
    if let Some(secs) = args.engine_unreachable_after {
        builder = builder.engine_unreachable_after(std::time::Duration::from_secs(secs));
    }
    let wrapper = builder.build()?;
    let server = wrapper
        .http_server_with(listener, mthpt_engine::metrics::route)
        .map_err(WrapperCliError::Serve)?;
    let handle = server.handle();
    let mut server = tokio::spawn(server);
    let stop = super::process::shutdown_signal();
    tracing::info!(
        app = %args.app,
        instance = %wrapper.instance_id(),
        %local,
        %advertise,
        engines = ?args.engines,
        "mthpt wrapper listening"
    );
    let served = tokio::select! {
        () = stop => None,
        ended = &mut server => Some(ended),
    };
    let report = wrapper
        .shutdown(Duration::from_secs(args.drain_grace))
        .await;
    tracing::info!(?report, "mthpt wrapper stopped");
    handle.stop(true).await;
    match served {
        Some(Ok(Err(e))) => Err(WrapperCliError::Serve(e)),
        Some(Err(e)) => Err(WrapperCliError::Serve(std::io::Error::other(e))),
        _ => Ok(()),
    }
}

/// Runs `mthpt wrapper` until SIGINT or SIGTERM, then drains.
pub async fn run(args: WrapperArgs) -> ExitCode {
    super::process::init_logging(super::process::LogFormat::Human);
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mthpt wrapper: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn args(extra: &[&str]) -> Result<WrapperArgs, clap::Error> {
        let mut argv = vec!["mthpt", "wrapper"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv)?.command {
            Command::Wrapper(args) => Ok(args),
            #[allow(unreachable_patterns)]
            _ => Err(clap::Error::new(clap::error::ErrorKind::InvalidSubcommand)),
        }
    }

    fn secret_file(name: &str, content: &str) -> std::io::Result<PathBuf> {
        let path =
            std::env::temp_dir().join(format!("mthpt-wrapper-cli-{}-{name}", std::process::id()));
        std::fs::write(&path, content)?;
        Ok(path)
    }

    #[test]
    fn engines_split_on_commas() -> Result<(), clap::Error> {
        let a = args(&[
            "--app",
            "ops",
            "--secret-file",
            "/s",
            "--engine",
            "http://e1:8080,http://e2:8080",
            "--listen",
            "127.0.0.1:9010",
            "--enable-shell",
        ])?;
        assert_eq!(a.engines, vec!["http://e1:8080", "http://e2:8080"]);
        assert!(a.enable_shell && !a.enable_http);
        Ok(())
    }

    #[test]
    fn missing_secret_file_is_named() -> Result<(), Box<dyn std::error::Error>> {
        let a = args(&[
            "--app",
            "ops",
            "--secret-file",
            "/nonexistent/mthpt.secret",
            "--engine",
            "http://e1",
            "--listen",
            "127.0.0.1:9010",
            "--enable-shell",
        ])?;
        let err = prepare(&a).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            err.contains("cannot read the secret file /nonexistent/mthpt.secret"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn bad_inputs_get_clear_errors() -> Result<(), Box<dyn std::error::Error>> {
        let secret = secret_file("ok", "  s3cret\n")?;
        let empty = secret_file("empty", " \n")?;
        let secret_s = secret.display().to_string();
        let empty_s = empty.display().to_string();
        let cases: [(&[&str], &str); 5] = [
            (
                &[
                    "--secret-file",
                    &secret_s,
                    "--listen",
                    "nowhere",
                    "--enable-shell",
                ],
                "is not a socket address",
            ),
            (
                &[
                    "--secret-file",
                    &secret_s,
                    "--listen",
                    "0.0.0.0:9010",
                    "--enable-http",
                ],
                "--advertise is required",
            ),
            (
                &["--secret-file", &secret_s, "--listen", "127.0.0.1:9010"],
                "enable at least one built-in handler",
            ),
            (
                &[
                    "--secret-file",
                    &empty_s,
                    "--listen",
                    "127.0.0.1:9010",
                    "--enable-shell",
                ],
                "is empty",
            ),
            (
                &[
                    "--secret-file",
                    &secret_s,
                    "--listen",
                    "127.0.0.1:9010",
                    "--enable-shell",
                    "--label",
                    "zone",
                ],
                "KEY=VALUE",
            ),
        ];
        for (extra, expected) in cases {
            let mut argv = vec!["--app", "ops", "--engine", "http://e1"];
            argv.extend_from_slice(extra);
            let err = prepare(&args(&argv)?)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains(expected),
                "{argv:?}: {err:?} lacks {expected:?}"
            );
        }
        let ok = prepare(&args(&[
            "--app",
            "ops",
            "--engine",
            "http://e1",
            "--secret-file",
            &secret_s,
            "--listen",
            "127.0.0.1:0",
            "--enable-shell",
            "--label",
            "zone=eu-1",
        ])?)?;
        assert_eq!(ok.secret, b"s3cret");
        assert_eq!(ok.labels.get("zone").map(String::as_str), Some("eu-1"));
        let _ = std::fs::remove_file(secret);
        let _ = std::fs::remove_file(empty);
        Ok(())
    }

    #[test]
    fn the_body_read_timeout_is_given_in_seconds_within_an_hour() -> Result<(), clap::Error> {
        let base = [
            "--app",
            "ops",
            "--secret-file",
            "/s",
            "--engine",
            "http://e",
            "--listen",
            "127.0.0.1:1",
        ];
        assert_eq!(args(&base)?.body_read_timeout, BODY_READ_TIMEOUT.as_secs());
        let set = [&base[..], &["--body-read-timeout", "2"]].concat();
        assert_eq!(args(&set)?.body_read_timeout, 2);
        for bad in ["0", "3601", "soon"] {
            let argv = [&base[..], &["--body-read-timeout", bad]].concat();
            let err = args(&argv).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains("--body-read-timeout"), "{bad}: {err}");
        }
        Ok(())
    }

    #[test]
    fn engine_and_listen_are_required() {
        assert!(
            args(&[
                "--app",
                "ops",
                "--secret-file",
                "/s",
                "--listen",
                "127.0.0.1:1"
            ])
            .is_err()
        );
        assert!(
            args(&[
                "--app",
                "ops",
                "--secret-file",
                "/s",
                "--engine",
                "http://e"
            ])
            .is_err()
        );
    }
}

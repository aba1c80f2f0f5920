//! The suite's own PostgreSQL cluster: `initdb` in a temporary directory, a free port on
//! loopback, run as user `postgres` (PostgreSQL refuses to run as root), so a scenario can stop
//! and restart it freely. The shared server of the machine is never touched. The cluster is
//! stopped when this value is dropped; its directory belongs to the caller (the chaos harness
//! gives it a temporary directory, the soak removes its own).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use anyhow::{Context, bail};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

/// The database the suite creates in its cluster.
pub const DATABASE: &str = "mthpt";

/// Where Debian puts the server binaries when `--pg-bin` is not given: the newest
/// `/usr/lib/postgresql/<version>/bin` holding `pg_ctl`.
pub fn default_bin_dir() -> anyhow::Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .context("look for PostgreSQL in /usr/lib/postgresql (install Debian's postgresql or pass --pg-bin)")?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).context(
        "no /usr/lib/postgresql/<version>/bin/pg_ctl: install Debian's postgresql or pass --pg-bin",
    )
}

/// A running (or deliberately stopped) PostgreSQL cluster of the suite.
#[derive(Debug)]
pub struct OwnPostgres {
    bin: PathBuf,
    data: PathBuf,
    sockets: PathBuf,
    log: PathBuf,
    port: u16,
    /// Root cannot run the server: commands go through `runuser -u postgres`.
    as_postgres: bool,
    running: bool,
}

impl OwnPostgres {
    /// Creates a cluster under `dir` (which this function hands to user `postgres` when running
    /// as root), starts it on a free port and creates the suite's database.
    pub async fn create(bin: &Path, dir: &Path) -> anyhow::Result<Self> {
        let as_postgres = running_as_root();
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        if as_postgres {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir))
            .context("hand the cluster directory to user postgres")?;
        }
        let mut pg = Self {
            bin: bin.to_path_buf(),
            data: dir.join("data"),
            sockets: dir.to_path_buf(),
            log: dir.join("postgres.log"),
            port: crate::bench::nodes::restartable_port()?,
            as_postgres,
            running: false,
        };
        let mut initdb = pg.command("initdb");
        initdb.arg("-D").arg(&pg.data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        run(&mut initdb).context("initdb the suite's cluster")?;
        pg.start().await?;
        let mut admin = PgConnection::connect_with(&pg.options().database("postgres"))
            .await
            .context("connect to the suite's cluster")?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {DATABASE}")))
            .execute(&mut admin)
            .await?;
        admin.close().await?;
        Ok(pg)
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server log, for a failed run.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The URL of the suite's database reached at `port` (the server's own, or a proxy's).
    pub fn url_via(&self, port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/{DATABASE}?sslmode=disable")
    }

    /// Connection options for the server's own port.
    pub fn options(&self) -> PgConnectOptions {
        // The URL is built from numbers and constants above; it always parses.
        PgConnectOptions::from_str(&self.url_via(self.port))
            .unwrap_or_else(|_| PgConnectOptions::new())
    }

    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    fn pg_ctl(&self, action: &str, extra: &[&str]) -> Command {
        let mut c = self.command("pg_ctl");
        c.arg("-D").arg(&self.data).args(["-w", "-t", "60"]);
        c.args(extra).arg(action);
        c
    }

    /// Starts the server and waits until it accepts connections.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c max_connections=300",
            self.port,
            self.sockets.display()
        );
        let log = self.log.display().to_string();
        let mut c = self.pg_ctl("start", &["-l", &log, "-o", &options]);
        tokio::task::spawn_blocking(move || run(&mut c))
            .await?
            .with_context(|| format!("start the suite's PostgreSQL (log: {log})"))?;
        self.running = true;
        Ok(())
    }

    /// Stops the server the way an operator's restart does (`-m fast`: sessions are ended,
    /// a checkpoint is written).
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        let mut c = self.pg_ctl("stop", &["-m", "fast"]);
        tokio::task::spawn_blocking(move || run(&mut c))
            .await?
            .context("stop the suite's PostgreSQL")?;
        self.running = false;
        Ok(())
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        if self.running {
            // Immediate: nothing of this cluster is kept.
            let _ = self
                .pg_ctl("stop", &["-m", "immediate"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Whether this process runs as root (the owner of its `/proc` entry is uid 0).
pub(crate) fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Runs `c`, failing with its output when it does not succeed.
pub(crate) fn run(c: &mut Command) -> anyhow::Result<()> {
    let out = c
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("run {c:?}"))?;
    if !out.status.success() {
        bail!(
            "{c:?} failed with {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

//! The cluster under test: N `mthpt engine` and M `mthpt wrapper --enable-shell` processes,
//! every link between them through a [`Proxy`] so it can be cut: engine i → PostgreSQL,
//! wrapper j → engine i, and engines → wrapper j. Ports stay fixed across restarts, so a
//! restarted process is reached through the same proxies.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::proxy::Proxy;
use crate::bench::nodes::restartable_port;

/// One child process that can be killed, paused and started again with the same arguments.
#[derive(Debug)]
pub struct Proc {
    pub name: String,
    mthpt: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    /// Starts so far (restarts get a new engine node id).
    pub generation: u32,
    /// `RUST_LOG` directives appended to the suite's own for this process.
    log_directives: Option<&'static str>,
}

/// The wrapper's `result spooled` debug line (its spool's writer thread, after each journal
/// write) and its `result found in the spool` one (each result a restarted wrapper replays),
/// which tell results that reached the spool (and so, in time, an engine) from those that died
/// with a killed wrapper. Only those modules log at debug; the rest keeps the suite's level.
pub const WRAPPER_LOG_DIRECTIVES: &str =
    "mthpt_wrapper::spool=debug,mthpt_wrapper::runtime=debug,mthpt_wrapper::builder=debug";

impl Proc {
    /// A process of `mthpt` with `args`, logging to `log`; not started yet.
    pub fn new(name: String, mthpt: &Path, args: Vec<String>, log: PathBuf) -> Self {
        Self {
            name,
            mthpt: mthpt.to_path_buf(),
            args,
            log,
            child: None,
            generation: 0,
            log_directives: None,
        }
    }

    /// Where its output is appended, over every start.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Starts the process with `extra` arguments after its fixed ones, its output appended to
    /// its log.
    pub fn spawn(&mut self, extra: &[String]) -> anyhow::Result<()> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("open {}", self.log.display()))?;
        let err = out.try_clone()?;
        let mut rust_log = std::env::var("MTHPT_CHAOS_LOG").unwrap_or_else(|_| "warn".to_owned());
        if let Some(directives) = self.log_directives {
            rust_log = format!("{rust_log},{directives}");
        }
        let child = Command::new(&self.mthpt)
            .args(&self.args)
            .args(extra)
            .env("RUST_LOG", rust_log)
            .env_remove("MTHPT_DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .with_context(|| format!("start {} ({})", self.name, self.mthpt.display()))?;
        self.child = Some(child);
        self.generation += 1;
        Ok(())
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        let pid = self.pid().context("the process is not running")?;
        let pid = Pid::from_raw(i32::try_from(pid).context("pid out of range")?);
        kill(pid, signal).with_context(|| format!("{signal} to {}", self.name))
    }

    /// SIGKILL, and reaps it.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            // A paused process dies of SIGKILL too.
            child
                .kill()
                .with_context(|| format!("SIGKILL {}", self.name))?;
            child.wait()?;
        }
        Ok(())
    }

    /// SIGSTOP: the process freezes, sockets open, as in a VM freeze or a long pause.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.signal(Signal::SIGSTOP)
    }

    /// SIGCONT.
    pub fn resume(&self) -> anyhow::Result<()> {
        self.signal(Signal::SIGCONT)
    }

    /// Whether it has exited (and why).
    pub fn exited(&mut self) -> anyhow::Result<Option<std::process::ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => Ok(c.try_wait()?),
            None => Ok(None),
        }
    }

    /// SIGTERM (after SIGCONT, in case it is paused), then SIGKILL after `grace`.
    pub async fn stop(&mut self, grace: Duration) {
        if self.pid().is_none() {
            return;
        }
        let _ = self.resume();
        let _ = self.signal(Signal::SIGTERM);
        let until = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < until {
            if matches!(self.exited(), Ok(Some(_)) | Err(_)) {
                self.child = None;
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = self.kill9();
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Never leave a process behind a failed or interrupted run.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// An engine node: its real port and the proxy it reaches PostgreSQL through (none when it is
/// given a URL of its own, [`Database::Url`]).
#[derive(Debug)]
pub struct Engine {
    pub proc: Proc,
    pub port: u16,
    pub db_proxy: Option<Proxy>,
}

impl Engine {
    /// The node id of the current generation: a restarted node is a new node, as a restarted
    /// host with the default id would be.
    pub fn node_id(&self) -> String {
        format!("{}-g{}", self.proc.name, self.proc.generation)
    }

    /// Starts (again) and waits until `/health` answers.
    pub async fn start(&mut self, http: &reqwest::Client, timeout: Duration) -> anyhow::Result<()> {
        let id = format!("{}-g{}", self.proc.name, self.proc.generation + 1);
        self.proc.spawn(&["--node-id".to_owned(), id])?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.proc.exited()? {
                bail!(
                    "{} exited with {status} while starting:\n{}",
                    self.proc.name,
                    self.proc.log_tail(20)
                );
            }
            let url = format!("http://127.0.0.1:{}/health", self.port);
            if let Ok(resp) = http.get(url).send().await
                && resp.status().is_success()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "{} did not answer within {timeout:?}:\n{}",
                    self.proc.name,
                    self.proc.log_tail(20)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A wrapper: its real port, the proxy engines reach it through, and its proxies to each
/// engine.
#[derive(Debug)]
pub struct WrapperNode {
    pub proc: Proc,
    pub inbound: Proxy,
    pub outbound: Vec<Proxy>,
}

/// Everything the cluster needs to start.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub mthpt: PathBuf,
    pub engines: usize,
    pub wrappers: usize,
    /// Where the engines' database is.
    pub database: Database,
    pub app_key: String,
    pub secret_file: PathBuf,
    pub work_dir: PathBuf,
    pub capacity: u32,
    pub shell_prestarted: usize,
}

/// Where the engines find their database.
#[derive(Debug, Clone)]
pub enum Database {
    /// The suite's PostgreSQL on this port, each engine through a proxy of its own (so one
    /// engine can be cut from it).
    Proxied(u16),
    /// This URL, as given (a multi-host URL of the Patroni cluster, whose nodes have
    /// proxies of their own).
    Url(String),
}

/// The running cluster.
#[derive(Debug)]
pub struct Cluster {
    pub engines: Vec<Engine>,
    pub wrappers: Vec<WrapperNode>,
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

impl Cluster {
    /// Starts the engines (each waits for `/health`), then the wrappers.
    pub async fn start(spec: &ClusterSpec, http: &reqwest::Client) -> anyhow::Result<Self> {
        let mut engines = Vec::with_capacity(spec.engines);
        for i in 0..spec.engines {
            let port = restartable_port()?;
            let (db_proxy, url) = match &spec.database {
                Database::Proxied(pg_port) => {
                    let proxy = Proxy::start(loopback(*pg_port)).await?;
                    let url = format!(
                        "postgres://postgres@127.0.0.1:{}/{}?sslmode=disable",
                        proxy.port,
                        super::postgres::DATABASE
                    );
                    (Some(proxy), url)
                }
                Database::Url(url) => (None, url.clone()),
            };
            let listen = format!("127.0.0.1:{port}");
            let args = strings(&[
                "engine",
                "--database-url",
                &url,
                "--groups",
                "default",
                "--listen",
                &listen,
                "--advertise",
                &format!("http://{listen}"),
            ]);
            let name = format!("engine-{i}");
            let log = spec.work_dir.join(format!("{name}.log"));
            let mut engine = Engine {
                proc: Proc::new(name, &spec.mthpt, args, log),
                port,
                db_proxy,
            };
            engine.start(http, Duration::from_secs(60)).await?;
            engines.push(engine);
        }
        let mut wrappers = Vec::with_capacity(spec.wrappers);
        for j in 0..spec.wrappers {
            let port = restartable_port()?;
            let inbound = Proxy::start(loopback(port)).await?;
            let mut outbound = Vec::with_capacity(engines.len());
            for engine in &engines {
                outbound.push(Proxy::start(loopback(engine.port)).await?);
            }
            // Wrapper j calls the engines starting with engine j, so callbacks spread.
            let mut urls: Vec<String> = outbound
                .iter()
                .map(|p| format!("http://127.0.0.1:{}", p.port))
                .collect();
            if !urls.is_empty() {
                let first = j % urls.len();
                urls.rotate_left(first);
            }
            let name = format!("wrapper-{j}");
            let args = strings(&[
                "wrapper",
                "--app",
                &spec.app_key,
                "--secret-file",
                &spec.secret_file.display().to_string(),
                "--engine",
                &urls.join(","),
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--advertise",
                &format!("http://127.0.0.1:{}", inbound.port),
                "--enable-shell",
                "--shell-prestarted",
                &spec.shell_prestarted.to_string(),
                "--capacity",
                &spec.capacity.to_string(),
                "--label",
                &format!("name={name}"),
                "--spool",
                &spec
                    .work_dir
                    .join(format!("{name}.spool"))
                    .display()
                    .to_string(),
                "--drain-grace",
                "5",
            ]);
            let log = spec.work_dir.join(format!("{name}.log"));
            let mut proc = Proc::new(name, &spec.mthpt, args, log);
            proc.log_directives = Some(WRAPPER_LOG_DIRECTIVES);
            proc.spawn(&[])?;
            wrappers.push(WrapperNode {
                proc,
                inbound,
                outbound,
            });
        }
        Ok(Self { engines, wrappers })
    }

    /// The processes that exited although the suite did not stop them, with their status.
    pub fn exited_on_their_own(&mut self) -> Vec<String> {
        let procs = self
            .engines
            .iter_mut()
            .map(|e| &mut e.proc)
            .chain(self.wrappers.iter_mut().map(|w| &mut w.proc));
        procs
            .filter_map(|p| match p.exited() {
                Ok(Some(status)) => Some(format!("{}: {status}", p.name)),
                Ok(None) => None,
                Err(e) => Some(format!("{}: {e}", p.name)),
            })
            .collect()
    }

    /// Stops everything gracefully: the wrappers together first (so their results reach an
    /// engine), then the engines together.
    pub async fn stop(&mut self) {
        let wrappers = self
            .wrappers
            .iter_mut()
            .map(|w| w.proc.stop(Duration::from_secs(8)));
        futures::future::join_all(wrappers).await;
        let engines = self
            .engines
            .iter_mut()
            .map(|e| e.proc.stop(Duration::from_secs(10)));
        futures::future::join_all(engines).await;
    }
}

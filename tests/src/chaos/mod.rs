//! The fault-injection suite behind `mthpt-chaos` (see `docs/faults.md`).
//!
//! One run: the suite's own PostgreSQL cluster, N `mthpt engine` and M `mthpt wrapper
//! --enable-shell` processes wired through cuttable proxies, a mix of tasks whose shell handler
//! logs every start and end to a file of the suite, faults injected through a measured window,
//! a drain, then the counts: from the handler log, cross-checked with the runs table.
//!
//! Every violation counted comes with a [`analysis::ViolationDetail`] in the report (at most
//! [`analysis::MAX_DETAILS`]): the occurrence's starts and ends, its runs' final rows, the faults
//! around it, and for a lost result its wrapper's fate. Wrappers log each result they spool and
//! each one a restart finds in the spool (see [`cluster::WRAPPER_LOG_DIRECTIVES`]); a
//! successful result never spooled whose wrapper the suite SIGKILLed after the script's end
//! never reached an engine, and is counted in `results_died_with_wrapper`, not as a lost result.
//!
//! The `pg-failover` and `pg-partition` scenarios run on a Patroni cluster of three PostgreSQL
//! nodes instead ([`patroni`]), lose its primary, and report each failover's timings
//! ([`failover`]), with a console node polled throughout ([`console`]).

pub mod analysis;
pub mod cluster;
pub mod console;
pub mod failover;
pub mod faults;
pub mod handler_log;
pub mod patroni;
pub mod postgres;
pub mod proxy;
pub mod tasks;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::store::{PgStore, Store};
use serde::Serialize;

use self::analysis::{Counts, Facts, RunRow};
use self::cluster::{Cluster, ClusterSpec, Database};
use self::console::ConsoleNode;
use self::failover::FailoverFigures;
use self::faults::{FaultKind, Injector};
use self::handler_log::HandlerLog;
use self::patroni::PatroniCluster;
use self::postgres::OwnPostgres;
use self::proxy::Cut;
use crate::Tenancy;

/// What a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// SIGKILL the engines in rotation, each restarted shortly after.
    EngineKill,
    /// SIGSTOP each engine in turn for the pause length, then SIGCONT.
    EnginePause,
    /// SIGKILL a wrapper while its scripts run, restarted shortly after.
    WrapperKill,
    /// Stop the suite's PostgreSQL mid-load and start it again.
    PgRestart,
    /// Cut one engine from PostgreSQL at a time for the partition length.
    PartitionDb,
    /// Cut one wrapper from every engine (both directions) at a time.
    PartitionWrapper,
    /// Every fault above in rotation (10 minutes by default).
    All,
    /// On a Patroni cluster: the primary's machine dies (Patroni and PostgreSQL SIGKILLed,
    /// its links silent), and comes back as a replica after the down time.
    PgFailover,
    /// On a Patroni cluster: the primary is cut off from clients, replicas and etcd for the
    /// fault length, its processes alive.
    PgPartition,
}

impl Scenario {
    /// The name printed in the report (as on the command line).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::All => "all",
            other => other.kinds()[0].name(),
        }
    }

    /// The kinds of fault it injects, in rotation.
    pub fn kinds(self) -> Vec<FaultKind> {
        match self {
            Scenario::EngineKill => vec![FaultKind::EngineKill],
            Scenario::EnginePause => vec![FaultKind::EnginePause],
            Scenario::WrapperKill => vec![FaultKind::WrapperKill],
            Scenario::PgRestart => vec![FaultKind::PgRestart],
            Scenario::PartitionDb => vec![FaultKind::PartitionDb],
            Scenario::PartitionWrapper => vec![FaultKind::PartitionWrapper],
            Scenario::PgFailover => vec![FaultKind::PgFailover],
            Scenario::PgPartition => vec![FaultKind::PgPartition],
            Scenario::All => vec![
                FaultKind::EngineKill,
                FaultKind::EnginePause,
                FaultKind::WrapperKill,
                FaultKind::PgRestart,
                FaultKind::PartitionDb,
                FaultKind::PartitionWrapper,
            ],
        }
    }

    /// The default measured window.
    pub fn default_duration(self) -> Duration {
        match self {
            Scenario::All => Duration::from_secs(600),
            Scenario::PgFailover | Scenario::PgPartition => Duration::from_secs(180),
            _ => Duration::from_secs(120),
        }
    }

    /// Whether it runs on a Patroni cluster instead of a single PostgreSQL.
    pub fn on_patroni(self) -> bool {
        matches!(self, Scenario::PgFailover | Scenario::PgPartition)
    }
}

/// Everything one run needs.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    pub scenario: Scenario,
    pub engines: usize,
    pub wrappers: usize,
    /// Scheduled tasks (chain children come on top).
    pub tasks: usize,
    /// The measured window: faults happen in it, its occurrences are counted.
    pub duration: Duration,
    pub warmup: Duration,
    /// After the window, time for its runs to finish before the counts are taken.
    pub drain: Duration,
    /// A new fault starts at most this often.
    pub fault_every: Duration,
    /// How long a SIGSTOP or a partition lasts.
    pub fault_length: Duration,
    /// How long a killed process or PostgreSQL stays down.
    pub down_for: Duration,
    pub cut: Cut,
    /// Lateness is watched this long after each fault.
    pub after_fault: Duration,
    /// Occurrences this close to the window's end are not counted.
    pub end_margin: Duration,
    /// Non-final runs due this long before the end are stuck.
    pub stuck_after: Duration,
    /// How long short and long handlers run.
    pub short_run_ms: u64,
    pub long_run_ms: u64,
    pub capacity: u32,
    /// `bash` processes each wrapper's shell handler keeps started ahead.
    pub shell_prestarted: usize,
    /// The `mthpt` binary.
    pub mthpt: PathBuf,
    /// PostgreSQL's server binaries (`initdb`, `pg_ctl`).
    pub pg_bin: PathBuf,
    /// Keep the work directory (logs, handler log) instead of removing it.
    pub keep_work_dir: bool,
    /// On a Patroni cluster, give the engines and the console the primary's address alone
    /// instead of the multi-host URL of every node (to see what a host list buys).
    pub pg_single_host: bool,
}

impl ChaosConfig {
    /// The defaults for `scenario`.
    pub fn defaults(scenario: Scenario, mthpt: PathBuf, pg_bin: PathBuf) -> Self {
        let secs = Duration::from_secs;
        // A failover takes Patroni's ttl (10 s) and a rejoin about 15 s: one a minute.
        let (fault_every, fault_length, down_for) = match scenario {
            Scenario::PgFailover => (secs(60), secs(10), secs(20)),
            Scenario::PgPartition => (secs(60), secs(20), secs(2)),
            _ => (secs(15), secs(10), secs(2)),
        };
        Self {
            scenario,
            engines: 3,
            wrappers: 2,
            tasks: 100,
            duration: scenario.default_duration(),
            warmup: Duration::from_secs(5),
            drain: Duration::from_secs(15),
            fault_every,
            fault_length,
            down_for,
            cut: Cut::Blackhole,
            after_fault: Duration::from_secs(10),
            end_margin: Duration::from_secs(2),
            stuck_after: Duration::from_secs(30),
            short_run_ms: 200,
            long_run_ms: 4_000,
            capacity: 64,
            shell_prestarted: 12,
            mthpt,
            pg_bin,
            keep_work_dir: false,
            pg_single_host: false,
        }
    }
}

/// The one JSON object a run prints.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub engines: usize,
    pub wrappers: usize,
    pub tasks: usize,
    pub duration_s: f64,
    pub cut: Cut,
    pub window_from_ms: i64,
    pub window_until_ms: i64,
    #[serde(flatten)]
    pub counts: Counts,
    /// Each PostgreSQL failover (`pg-failover`, `pg-partition`): when the primary was lost,
    /// promoted, scheduling resumed, the console answered again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failovers: Vec<FailoverFigures>,
    /// On a Patroni cluster: what the engines and the console were given (`multi-host` or
    /// `single-host`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_hosts: Option<&'static str>,
    /// Sum of the violation counts; the run fails unless it is 0.
    pub violations: usize,
    /// Engines or wrappers that exited although no fault stopped them, with their status.
    pub exited: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_dir: Option<String>,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn now_ms() -> i64 {
    SystemClock.now_ms()
}

async fn sleep_until_ms(at: i64) {
    let wait = at - now_ms();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
    }
}

fn progress(msg: impl std::fmt::Display) {
    eprintln!("[mthpt-chaos] {msg}");
}

/// Runs one scenario and returns its report.
pub async fn run(config: &ChaosConfig) -> anyhow::Result<Report> {
    crate::bench::nodes::check_mthpt(&config.mthpt)?;
    let work = tempfile::Builder::new()
        .prefix("mthpt-chaos-")
        .tempdir()
        .context("create the work directory")?;
    progress(format_args!(
        "{}: work directory {}",
        config.scenario.name(),
        work.path().display()
    ));
    // An interrupted run is dropped here, before its work directory: its processes are killed
    // and its PostgreSQL stopped while the cluster's files still exist.
    let result = tokio::select! {
        result = run_in(config, work.path()) => result,
        signal = crate::interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
    };
    // What went wrong is in the logs: kept whenever the run failed or found a violation; the
    // PostgreSQL cluster itself goes unless asked for.
    let failed = result.as_ref().map_or(true, |r| r.violations > 0);
    if config.keep_work_dir || failed {
        if !config.keep_work_dir {
            remove_database_files(&work.path().join("pg"));
        }
        let kept = work.keep();
        progress(format_args!("kept {}", kept.display()));
        return result.map(|mut r| {
            r.work_dir = Some(kept.display().to_string());
            r
        });
    }
    result
}

/// Removes the database files under `dir` (the own cluster's `data`, each Patroni node's
/// `node<i>/data`, etcd's `etcd`), keeping the logs.
fn remove_database_files(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir.join("data"));
    let _ = std::fs::remove_dir_all(dir.join("etcd"));
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with("node") {
            let _ = std::fs::remove_dir_all(entry.path().join("data"));
        }
    }
}

/// The database under test: the suite's own PostgreSQL, or a Patroni cluster of three.
#[derive(Debug)]
pub enum ChaosDb {
    Own(OwnPostgres),
    Patroni(PatroniCluster),
}

impl ChaosDb {
    /// Creates the scenario's database under `dir`.
    async fn create(config: &ChaosConfig, dir: &Path) -> anyhow::Result<Self> {
        if config.scenario.on_patroni() {
            let programs = patroni::programs(&config.pg_bin)?;
            let cluster =
                PatroniCluster::create(programs, &config.pg_bin, dir, Duration::from_secs(120))
                    .await?;
            Ok(Self::Patroni(cluster))
        } else {
            let pg = OwnPostgres::create(&config.pg_bin, dir).await?;
            progress(format_args!("own PostgreSQL on port {}", pg.port()));
            Ok(Self::Own(pg))
        }
    }

    /// A store of the suite's own (setting up, reading the runs back): on Patroni, through
    /// the multi-host URL of the three nodes, as the engines' own.
    async fn store(&self) -> anyhow::Result<PgStore> {
        Ok(match self {
            Self::Own(pg) => PgStore::connect_with(pg.options(), 4).await?,
            Self::Patroni(cluster) => PgStore::connect(&cluster.url()).await?,
        })
    }

    /// Where the engines (and the console) find the database, and how it was given.
    async fn for_processes(
        &self,
        config: &ChaosConfig,
    ) -> anyhow::Result<(Database, Option<&'static str>)> {
        match self {
            Self::Own(pg) => Ok((Database::Proxied(pg.port()), None)),
            Self::Patroni(cluster) if config.pg_single_host => {
                let leader = cluster
                    .leader_seen_by(&cluster.all())
                    .await
                    .context("Patroni names no running primary")?;
                Ok((Database::Url(cluster.url_of(leader)), Some("single-host")))
            }
            Self::Patroni(cluster) => Ok((Database::Url(cluster.url()), Some("multi-host"))),
        }
    }
}

async fn run_in(config: &ChaosConfig, work: &Path) -> anyhow::Result<Report> {
    let mut db = ChaosDb::create(config, &work.join("pg")).await?;
    let store = db.store().await?;
    store.migrate().await?;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let tenancy = crate::tenancy(&*shared, "chaos", "shell").await?;
    let secret_file = work.join("app.secret");
    std::fs::write(&secret_file, &tenancy.secret)?;
    let handler_log = work.join("handler.log");
    handler_log::make_sleep_fifo(&handler_log)?;

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    let (database, database_hosts) = db.for_processes(config).await?;
    let spec = ClusterSpec {
        mthpt: config.mthpt.clone(),
        engines: config.engines,
        wrappers: config.wrappers,
        database: database.clone(),
        app_key: tenancy.key.clone(),
        secret_file,
        work_dir: work.to_path_buf(),
        capacity: config.capacity,
        shell_prestarted: config.shell_prestarted,
    };
    let mut cluster = Cluster::start(&spec, &http).await?;
    wrappers_registered(&*shared, &tenancy, config.wrappers).await?;
    progress(format_args!(
        "{} engine(s) and {} wrapper(s) up",
        config.engines, config.wrappers
    ));
    // On Patroni, a console node on the same URL as the engines, polled through the window.
    let console = match (&db, &database) {
        (ChaosDb::Patroni(_), Database::Url(url)) => {
            let node =
                ConsoleNode::start(&config.mthpt, url, &*shared, &tenancy, work, &http).await?;
            progress(format_args!("console up on port {}", node.port));
            Some(Arc::new(node))
        }
        _ => None,
    };

    let from = (now_ms() + ms(config.warmup) + 999) / 1_000 * 1_000;
    let until = from + ms(config.duration);
    let chain_parents = tasks::load_tasks(&*shared, &tenancy, config, &handler_log, from).await?;
    // The suite's pool may hold connections to a primary about to be lost.
    store.close().await;
    sleep_until_ms(from).await;
    progress(format_args!(
        "measuring {} s from {from}",
        config.duration.as_secs()
    ));
    let poller = console.as_ref().map(|c| c.poll(http.clone()));

    let mut injector = Injector::new(config, &mut cluster, &mut db, &http, &handler_log);
    let faults = injector.inject_until(from, until).await;
    let killed_wrappers = injector.killed_wrappers.clone();
    let cut_off_wrappers = injector.cut_off_wrappers.clone();
    let failover_times = std::mem::take(&mut injector.failovers);
    let faults = faults?;
    sleep_until_ms(until).await;
    progress(format_args!(
        "window over after {} fault(s); draining {} s",
        faults.len(),
        config.drain.as_secs()
    ));
    tokio::time::sleep(config.drain).await;
    let samples = poller.map(console::Poller::stop).unwrap_or_default();

    let store = db.store().await?;
    let read_at = now_ms();
    let runs: Vec<RunRow> = sqlx::query_as(
        "SELECT id, task_id, scheduled_at, due_at, state, parent_run_id, finished_at,
           CASE WHEN trigger_kind = 'schedule' AND attempt = 1 THEN dispatched_at END
             AS first_dispatched_at
         FROM runs",
    )
    .fetch_all(store.pool())
    .await
    .context("read the runs back")?;
    let log = HandlerLog::read(&handler_log)?;
    let alive: HashSet<(i64, i64)> = log
        .starts
        .iter()
        .filter(|s| log.end(s).is_none() && script_alive(s.pid, s.run_id))
        .map(|s| (s.run_id, s.pid))
        .collect();
    let tasks = crate::bench::database::tasks(&store).await?;
    let expected =
        crate::bench::database::expected_occurrences(&tasks, from, until - ms(config.end_margin));
    let mut exited = cluster.exited_on_their_own();
    if let Some(node) = console {
        let mut node = Arc::try_unwrap(node).map_err(|_| anyhow::anyhow!("console in use"))?;
        if let Ok(Some(status)) = node.proc.exited() {
            exited.push(format!("console: {status}"));
        }
        node.proc.stop(Duration::from_secs(5)).await;
    }
    cluster.stop().await;
    store.close().await;
    let mut spooled_runs = HashSet::new();
    for w in &cluster.wrappers {
        let path = w.proc.log_path();
        let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
        spooled_runs.extend(spooled_run_ids(&String::from_utf8_lossy(&bytes)));
    }
    // Every result a wrapper delivers goes through its spool: logs that name none mean the
    // wrappers did not log at the level the suite asked for, and a result lost on its way to
    // an engine would pass for one that died with a killed wrapper.
    let handlers_ended = log.starts.iter().any(|s| log.end(s).is_some());
    anyhow::ensure!(
        !handlers_ended || !spooled_runs.is_empty(),
        "the wrappers' logs name no result as spooled although handlers ended: the suite \
         cannot tell lost results from results that died with a wrapper (its `result spooled` \
         lines are not logged: see WRAPPER_LOG_DIRECTIVES)"
    );

    let failovers = failover::figures(&failover_times, &log, &expected, &samples, until);
    let counts = analysis::analyse(&Facts {
        log,
        runs,
        expected,
        chain_parents,
        killed_wrappers,
        spooled_runs,
        cut_off_wrappers,
        alive,
        faults,
        read_at,
        settle_ms: ms(config.drain) / 2,
        stuck_after_ms: ms(config.stuck_after),
        after_fault_ms: ms(config.after_fault),
    });
    Ok(Report {
        scenario: config.scenario.name().to_owned(),
        engines: config.engines,
        wrappers: config.wrappers,
        tasks: config.tasks,
        duration_s: config.duration.as_secs_f64(),
        cut: config.cut,
        window_from_ms: from,
        window_until_ms: until,
        violations: counts.violations(),
        counts,
        failovers,
        database_hosts,
        exited,
        work_dir: None,
    })
}

/// The run ids a wrapper's log names in a `result spooled` line (written to the spool) or a
/// `result found in the spool` one (replayed after a restart: spooled although its wrapper died
/// before logging it), as `tracing`'s default format writes them (`<time> DEBUG
/// mthpt_wrapper::runtime: result spooled run_id=42`, colours or not) or its JSON one
/// (`"fields":{"message":"result spooled","run_id":42}`).
pub fn spooled_run_ids(log: &str) -> HashSet<i64> {
    const MESSAGES: [&str; 2] = ["result spooled", "result found in the spool"];
    let mut ids = HashSet::new();
    for line in log.lines() {
        let Some(message) = MESSAGES.into_iter().find(|m| line.contains(m)) else {
            continue;
        };
        let id = if line.trim_start().starts_with('{') {
            serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| {
                    let fields = v.get("fields")?;
                    (fields.get("message")?.as_str()? == message)
                        .then(|| fields.get("run_id")?.as_i64())
                        .flatten()
                })
        } else {
            let plain = strip_ansi(line);
            plain.split_once(message).and_then(|(_, fields)| {
                fields.split_whitespace().find_map(|field| {
                    field
                        .strip_prefix("run_id=")
                        .and_then(|v| v.parse::<i64>().ok())
                })
            })
        };
        ids.extend(id);
    }
    ids
}

/// `text` without ANSI escape sequences (`ESC [ … letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether process `pid` exists and is not a zombie.
/// Whether the script of run `run_id` still lives as `pid`: the process exists, is not a
/// zombie, and its environment names the run (pids are reused within minutes when `pid_max`
/// is 32,768, and a reused pid belongs to another process).
fn script_alive(pid: i64, run_id: i64) -> bool {
    let running = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    });
    let ours = std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
        let want = format!("MTHPT_RUN_ID={run_id}");
        env.split(|b| *b == 0).any(|var| var == want.as_bytes())
    });
    running && ours
}

async fn wrappers_registered(store: &dyn Store, t: &Tenancy, count: usize) -> anyhow::Result<()> {
    crate::wait_until(
        Duration::from_secs(60),
        "every wrapper registered",
        || async {
            let mut tx = store.begin_read().await?;
            let up = tx
                .list_executors(t.tenant.id, None)
                .await?
                .iter()
                .filter(|e| e.state == mthpt_engine::app::ExecutorState::Up)
                .count();
            Ok(up >= count)
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spooled_run_ids_are_read_from_plain_coloured_and_json_lines() {
        let log = "\
2026-11-25T15:30:00.123456Z DEBUG mthpt_wrapper::runtime: result spooled run_id=42
2026-11-25T15:30:00.223456Z DEBUG mthpt_wrapper::runtime: run finished run_id=42 outcome=Succeeded
2026-11-25T15:30:01.000000Z  WARN mthpt_wrapper::delivery: result spooled elsewhere
\u{1b}[2m2026-11-25T15:30:02Z\u{1b}[0m \u{1b}[34mDEBUG\u{1b}[0m \u{1b}[2mmthpt_wrapper::runtime\u{1b}[0m\u{1b}[2m:\u{1b}[0m result spooled \u{1b}[3mrun_id\u{1b}[0m\u{1b}[2m=\u{1b}[0m43
{\"timestamp\":\"x\",\"level\":\"DEBUG\",\"fields\":{\"message\":\"result spooled\",\"run_id\":44},\"target\":\"mthpt_wrapper::runtime\"}
{\"fields\":{\"message\":\"could not spool the result\",\"run_id\":45}}
2026-11-25T15:30:04.000000Z DEBUG mthpt_wrapper::builder: result found in the spool run_id=46
a line cut short: result spooled run_id=42026-11-25T15:30:03Z DEBUG mthpt_wrapper::runtime: x
";
        let mut ids: Vec<i64> = spooled_run_ids(log).into_iter().collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![42, 43, 44, 46]);
    }
}

//! The benchmark harness behind `mthpt-bench` (see `docs/benchmarks.md`).
//!
//! One run: a fresh PostgreSQL database, tasks loaded through the store API, N engine nodes as
//! separate `mthpt engine` processes, M wrapper instances in this process, a warm-up, a measured
//! window of D seconds, a drain (the runs scheduled in the window may finish), then the figures:
//! from the runs table (lateness, missed, completed), from the executors (duplicates) and from
//! `/proc` (engine CPU time and peak RSS), and what the window cost PostgreSQL and the wrappers
//! (WAL bytes from `pg_current_wal_lsn()`, CPU time from `/proc`). `max-sustainable` runs the
//! same cluster through steps of rising offered rate instead of one window (`steps.rs`).
//! `noisy-neighbour` (`neighbour.rs`) also runs on a SQLite file (`--backend sqlite`).

pub mod cost;
pub mod database;
pub mod figures;
pub mod neighbour;
pub mod nodes;
pub mod soak;
pub mod steps;
pub mod wrappers;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::Store;
use serde::Serialize;

use self::cost::{CostPerRun, CostProbe, CostSample};
use self::database::TaskPlan;
use self::figures::Lateness;
use self::nodes::{EngineTuning, NodeProcess, ProcSample};
use self::steps::{StepPolicy, StepReport, Verdict};
use self::wrappers::{BenchWrappers, NOOP, SLEEP};

/// What a benchmark exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Many fixed-rate tasks offering more fires per second than the target; completed runs/s.
    Throughput,
    /// 10,000 cron tasks, each every 10 s at spread second offsets (~1,000 fires/s); lateness.
    Precision,
    /// 3 nodes, one SIGKILLed mid-run; how soon its claimed runs fire elsewhere.
    Failover,
    /// Long runs occupying the executors plus periodic short tasks; delayed and timed-out runs.
    LongTasks,
    /// 100,000 active tasks loaded (each every 100 s, ~1,000 fires/s); engine memory.
    #[value(name = "rss-100k")]
    Rss100k,
    /// Fixed-rate tasks whose offered rate rises step by step until lateness p99 passes 1 s;
    /// the highest rate held.
    MaxSustainable,
    /// One tenant with a backlog and 20x overload on a small instance beside four quiet tenants
    /// on their own instances; the quiet tenants' lateness and the claim's time.
    NoisyNeighbour,
    /// One steady rate for 30 minutes with retention and autovacuum on, in intervals; whether
    /// the claim's time and the runs table's size stay flat.
    Soak,
}

impl Scenario {
    /// The name printed in the report (as on the command line).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Throughput => "throughput",
            Scenario::Precision => "precision",
            Scenario::Failover => "failover",
            Scenario::LongTasks => "long-tasks",
            Scenario::Rss100k => "rss-100k",
            Scenario::MaxSustainable => "max-sustainable",
            Scenario::NoisyNeighbour => "noisy-neighbour",
            Scenario::Soak => "soak",
        }
    }
}

/// The database a benchmark runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// A PostgreSQL database, dropped and created again (every scenario).
    Postgres,
    /// A SQLite file, deleted and created again: the store of `mthpt standalone`, one engine
    /// node (`noisy-neighbour` only).
    Sqlite,
}

impl Backend {
    /// The name printed in the report (as on the command line).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        }
    }
}

/// The SQLite database of a benchmark by default: `bench.db` in its work directory.
pub fn default_sqlite_url(work_dir: &Path) -> String {
    format!("sqlite://{}", work_dir.join("bench.db").display())
}

/// Everything one benchmark run needs. [`BenchConfig::defaults`] gives each scenario's.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    pub scenario: Scenario,
    /// Engine node processes.
    pub nodes: usize,
    /// Wrapper instances (in this process).
    pub wrappers: usize,
    /// Runs each wrapper instance takes at once.
    pub capacity: u32,
    /// How long each wrapper gathers results before delivering them (`None`: its default).
    pub result_linger: Option<Duration>,
    /// Tasks with the no-op handler.
    pub tasks: usize,
    /// Their period (fixed-rate scenarios).
    pub every_ms: i64,
    /// The measured window.
    pub duration: Duration,
    /// Time between everything being up and the window's start.
    pub warmup: Duration,
    /// After the window, how long runs scheduled in it may take to finish.
    pub drain_timeout: Duration,
    /// The database to drop, create and use, on `backend`.
    pub backend: Backend,
    pub database_url: String,
    /// Drop the database at the end.
    pub drop_database: bool,
    /// The `mthpt` binary started for each node.
    pub mthpt: PathBuf,
    /// Node logs and wrapper spools go here.
    pub work_dir: PathBuf,
    pub engine: EngineTuning,
    /// `long-tasks`: tasks whose runs sleep, their period, how long each sleeps and its timeout.
    pub long_tasks: usize,
    pub long_every_ms: i64,
    pub long_run_ms: i64,
    pub long_timeout_ms: i64,
    /// `failover`: when in the window the node is killed, and which.
    pub kill_after: Duration,
    pub kill_node: usize,
    /// A run dispatched later than this after its time is "delayed".
    pub delay_limit_ms: i64,
    /// `max-sustainable`: the first step's rate (runs/s), the factor by which each next step
    /// raises it, and how long each step lasts (`duration` caps all steps together).
    pub start_rate: u64,
    pub rate_growth: f64,
    pub step: Duration,
    /// `noisy-neighbour`: runs of the noisy tenant already due when the nodes start.
    pub backlog: u64,
    /// `noisy-neighbour`: how many times its instance's capacity the noisy tenant's tasks offer
    /// (at least 1).
    pub noisy_overload: u64,
    /// `soak`: how long the bench tenant keeps its finished runs.
    pub retention: Duration,
}

/// The default database of a scenario on the local server.
pub fn default_database_url(scenario: Scenario) -> String {
    // Loopback: no TLS, as a node next to its database would be set up.
    format!(
        "postgres://postgres@127.0.0.1:5432/mthpt_bench_{}?sslmode=disable",
        scenario.name().replace('-', "_")
    )
}

impl BenchConfig {
    /// The defaults of `scenario` (see `docs/benchmarks.md`).
    pub fn defaults(scenario: Scenario, mthpt: PathBuf) -> Self {
        let work_dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm/mthpt-bench")
        } else {
            std::env::temp_dir().join("mthpt-bench")
        };
        let mut c = Self {
            scenario,
            nodes: 1,
            wrappers: 4,
            capacity: 10_000,
            result_linger: None,
            tasks: 6_000,
            every_ms: 1_000,
            duration: Duration::from_secs(30),
            warmup: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(15),
            backend: Backend::Postgres,
            database_url: default_database_url(scenario),
            drop_database: false,
            mthpt,
            work_dir: work_dir.join(scenario.name()),
            engine: EngineTuning::default(),
            long_tasks: 0,
            long_every_ms: 2_000,
            long_run_ms: 10_000,
            long_timeout_ms: 30_000,
            kill_after: Duration::from_secs(15),
            kill_node: 1,
            delay_limit_ms: 1_000,
            start_rate: 1_000,
            rate_growth: 1.25,
            step: Duration::from_secs(30),
            backlog: 100_000,
            noisy_overload: neighbour::NOISY_OVERLOAD,
            retention: Duration::from_secs(300),
        };
        match scenario {
            Scenario::Throughput => {
                c.engine.claim_batch = 2_000;
            }
            Scenario::Precision => {
                c.tasks = 10_000;
                c.every_ms = 10_000;
                c.duration = Duration::from_secs(60);
            }
            Scenario::Failover => {
                c.nodes = 3;
                c.tasks = 1_000;
            }
            Scenario::LongTasks => {
                c.tasks = 1_000;
                c.long_tasks = 200;
                c.duration = Duration::from_secs(60);
                c.drain_timeout = Duration::from_secs(30);
            }
            Scenario::Rss100k => {
                c.tasks = 100_000;
                c.every_ms = 100_000;
                c.duration = Duration::from_secs(60);
            }
            Scenario::MaxSustainable => {
                c.engine.claim_batch = 2_000;
                c.duration = Duration::from_secs(600);
                c.drain_timeout = Duration::from_secs(60);
            }
            Scenario::NoisyNeighbour => {
                // Each quiet tenant's runs per second.
                c.tasks = 200;
            }
            Scenario::Soak => {
                // Measure max-sustainable first and pass 70 % of it as --tasks.
                c.tasks = 4_000;
                c.engine.claim_batch = 2_000;
                c.duration = Duration::from_secs(1_800);
                c.step = Duration::from_secs(60);
                c.drain_timeout = Duration::from_secs(60);
                // Empty: the soak starts its own cluster, with autovacuum on.
                c.database_url = String::new();
            }
        }
        c
    }

    /// Refuses what the backend cannot run: SQLite runs `noisy-neighbour` on one node, on a
    /// `sqlite:` URL; PostgreSQL needs a PostgreSQL URL.
    pub fn check_backend(&self) -> anyhow::Result<()> {
        let sqlite_url = self.database_url.starts_with("sqlite:");
        match self.backend {
            Backend::Postgres if sqlite_url => {
                bail!("--database-url names a SQLite file: add --backend sqlite")
            }
            Backend::Postgres => Ok(()),
            Backend::Sqlite if self.scenario != Scenario::NoisyNeighbour => bail!(
                "--backend sqlite: only --scenario noisy-neighbour runs on SQLite; {} needs \
                 --backend postgres",
                self.scenario.name()
            ),
            Backend::Sqlite if self.nodes > 1 => bail!(
                "--backend sqlite runs one engine node (SQLite has one writer, in one file on this \
                 machine): drop --nodes {} or use --backend postgres",
                self.nodes
            ),
            Backend::Sqlite if !sqlite_url => bail!(
                "--backend sqlite needs a sqlite:// --database-url (default \
                 sqlite://<work dir>/bench.db)"
            ),
            Backend::Sqlite => Ok(()),
        }
    }

    /// `max-sustainable`: how the rate rises and when a step holds.
    pub fn step_policy(&self) -> StepPolicy {
        StepPolicy {
            start_rate: self.start_rate,
            growth: self.rate_growth,
            step_ms: i64::try_from(self.step.as_millis()).unwrap_or(i64::MAX),
            p99_limit_ms: self.delay_limit_ms,
            min_completed_share: 0.9,
        }
    }

    /// The no-op tasks loaded before the nodes start (`max-sustainable`: its first step's).
    fn initial_tasks(&self) -> usize {
        match self.scenario {
            Scenario::MaxSustainable => steps::tasks_for_rate(self.start_rate, self.every_ms),
            _ => self.tasks,
        }
    }

    /// Fixed-rate no-op tasks `first..first + count`, spread evenly over the period from `now`.
    fn fixed_rate_plans(&self, first: usize, count: usize, now: i64) -> Vec<TaskPlan> {
        let n = i64::try_from(count.max(1)).unwrap_or(i64::MAX);
        (0..count)
            .map(|k| {
                let k64 = i64::try_from(k).unwrap_or(0);
                TaskPlan {
                    name: format!("t{:06}", first + k),
                    handler: NOOP.to_owned(),
                    params: serde_json::json!({}),
                    schedule: ScheduleSpec::FixedRate {
                        every_ms: self.every_ms,
                        anchor_at: Some(now + k64 * self.every_ms / n),
                    },
                    timeout_ms: None,
                }
            })
            .collect()
    }

    /// The tasks the scenario loads, anchored at `now`.
    fn plans(&self, now: i64) -> Vec<TaskPlan> {
        let mut plans = match self.scenario {
            // Second offset i mod 10: each second a tenth of the tasks fire.
            Scenario::Precision => (0..self.tasks)
                .map(|i| TaskPlan {
                    name: format!("t{i:06}"),
                    handler: NOOP.to_owned(),
                    params: serde_json::json!({}),
                    schedule: ScheduleSpec::Cron {
                        expr: format!("{}/10 * * * * ?", i % 10),
                        timezone: "UTC".to_owned(),
                    },
                    timeout_ms: None,
                })
                .collect(),
            // Spread evenly over the period, to the millisecond.
            _ => self.fixed_rate_plans(0, self.initial_tasks(), now),
        };
        plans.reserve(self.long_tasks);
        let long_n = i64::try_from(self.long_tasks.max(1)).unwrap_or(i64::MAX);
        for i in 0..self.long_tasks {
            let i64i = i64::try_from(i).unwrap_or(0);
            plans.push(TaskPlan {
                name: format!("long{i:05}"),
                handler: SLEEP.to_owned(),
                params: serde_json::json!({ "ms": self.long_run_ms }),
                schedule: ScheduleSpec::FixedRate {
                    every_ms: self.long_every_ms,
                    anchor_at: Some(now + i64i * self.long_every_ms / long_n),
                },
                timeout_ms: Some(self.long_timeout_ms),
            });
        }
        plans
    }
}

/// The one JSON object a benchmark prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub nodes: usize,
    /// Runs that succeeded with their result recorded inside the window.
    pub runs_completed: u64,
    pub runs_per_sec: f64,
    /// Dispatch time minus scheduled time of the first attempts scheduled in the window.
    pub lateness_ms: Lateness,
    pub duplicates: u64,
    pub missed: u64,
    /// Occurrences of the window with a run still pending, claimed or running after the drain.
    pub unfinished: u64,
    /// Engine CPU time (all nodes) during the window per run completed in it.
    pub engine_cpu_us_per_run: f64,
    /// Peak RSS of the largest node.
    pub engine_rss_mb: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refire_after_kill_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delayed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timed_out: Option<u64>,
    /// The setting: tasks loaded, wrapper instances, window length.
    pub tasks: usize,
    pub wrappers: usize,
    pub duration_s: f64,
    /// Occurrences the schedules call for in the window, per second.
    pub offered_per_sec: f64,
    /// WAL PostgreSQL wrote during the window (`pg_current_wal_lsn()`) per run completed in it.
    pub wal_bytes_per_run: f64,
    /// CPU time of the PostgreSQL server's processes during the window per run completed in it
    /// (`null` when the server's processes are not visible in this machine's `/proc`).
    pub pg_cpu_us_per_run: Option<f64>,
    /// CPU time of the bench process (the wrappers) during the window per run completed in it.
    pub wrapper_cpu_us_per_run: f64,
    /// `max-sustainable`: the highest offered rate whose step held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sustainable_runs_per_s: Option<f64>,
    /// `max-sustainable`: why the steps stopped (`late`, `behind` or `duration`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    /// `max-sustainable`: every step's figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepReport>>,
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
    eprintln!("[mthpt-bench] {msg}");
}

/// Runs one benchmark and returns its figures.
pub async fn run(config: &BenchConfig) -> anyhow::Result<Report> {
    config.check_backend()?;
    nodes::check_mthpt(&config.mthpt)?;
    std::fs::create_dir_all(&config.work_dir)
        .with_context(|| format!("create {}", config.work_dir.display()))?;
    let spools = config.work_dir.join("spool");
    if spools.exists() {
        std::fs::remove_dir_all(&spools).with_context(|| format!("clear {}", spools.display()))?;
    }
    progress(format_args!(
        "{}: fresh database {}",
        config.scenario.name(),
        mthpt_engine::store::redact_url(&config.database_url)
    ));
    let pg = database::fresh(&config.database_url).await?;
    let store: Arc<dyn Store> = Arc::new(pg.clone());
    let tenancy = crate::tenancy(&*store, "bench", "noop").await?;
    let plans = config.plans(now_ms());
    let loading = std::time::Instant::now();
    database::load(store.clone(), &tenancy, plans).await?;
    progress(format_args!(
        "loaded {} tasks in {:.1} s",
        config.initial_tasks() + config.long_tasks,
        loading.elapsed().as_secs_f64()
    ));

    let result = match Cluster::start(config, &tenancy).await {
        Ok(mut cluster) => {
            let measured = match config.scenario {
                Scenario::MaxSustainable => {
                    measure_steps(config, &pg, &store, &tenancy, &mut cluster).await
                }
                _ => measure(config, &pg, &mut cluster).await,
            };
            let stopped = cluster.stop().await;
            measured.and_then(|report| stopped.map(|()| report))
        }
        Err(e) => Err(e),
    };
    store.close().await;
    if config.drop_database {
        database::drop_database(&config.database_url).await?;
    }
    result
}

/// The engine nodes and the wrappers of a benchmark, up and registered.
struct Cluster {
    nodes: Vec<NodeProcess>,
    wrappers: BenchWrappers,
}

impl Cluster {
    async fn start(config: &BenchConfig, tenancy: &crate::Tenancy) -> anyhow::Result<Self> {
        let http = reqwest::Client::new();
        let mut nodes = Vec::with_capacity(config.nodes);
        for i in 0..config.nodes {
            let mut node = NodeProcess::spawn(
                &config.mthpt,
                &format!("bench-node-{i}"),
                &config.database_url,
                &config.engine,
                &config.work_dir,
            )?;
            node.ready(&http, Duration::from_secs(30)).await?;
            nodes.push(node);
        }
        let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
        progress(format_args!("{} engine node(s) up: {urls:?}", nodes.len()));
        let wrappers = BenchWrappers::start(
            tenancy,
            &urls,
            config.wrappers,
            config.capacity,
            config.result_linger,
            &config.work_dir.join("spool"),
        )?;
        wrappers.registered(Duration::from_secs(30)).await?;
        progress(format_args!("{} wrapper(s) registered", config.wrappers));
        Ok(Self { nodes, wrappers })
    }

    /// CPU time and peak RSS of every node.
    fn sample(&self) -> anyhow::Result<Vec<ProcSample>> {
        self.nodes.iter().map(NodeProcess::sample).collect()
    }

    /// The largest peak RSS of the nodes still running and of `earlier` samples, MiB.
    fn peak_rss_mb<'a>(&self, earlier: impl IntoIterator<Item = &'a ProcSample>) -> f64 {
        let mut peak_kib = earlier
            .into_iter()
            .map(|s| s.peak_rss_kib)
            .max()
            .unwrap_or(0);
        for node in &self.nodes {
            if let Ok(s) = node.sample() {
                peak_kib = peak_kib.max(s.peak_rss_kib);
            }
        }
        round1(peak_kib as f64 / 1024.0)
    }

    /// Stops the wrappers, then the nodes: a wrapper drains while the engines still answer,
    /// so its last results are delivered and it deregisters at once. (The other way round,
    /// each wrapper waited for its flush timeout and its deregistration timed out: 20 s for
    /// the long-tasks scenario.)
    async fn stop(self) -> anyhow::Result<()> {
        self.wrappers.stop().await;
        let mut stopped = Ok(());
        for node in self.nodes {
            if let Err(e) = node.stop(Duration::from_secs(15)).await {
                stopped = Err(e);
            }
        }
        stopped
    }
}

/// Waits until the runs scheduled in `[from, until)` are final, at most the drain timeout.
async fn drain(
    config: &BenchConfig,
    pg: &mthpt_engine::store::PgStore,
    from: i64,
    until: i64,
) -> anyhow::Result<()> {
    drain_until(config, async || database::unfinished(pg, from, until).await).await
}

/// Waits until `unfinished` counts none, at most the drain timeout.
async fn drain_until(
    config: &BenchConfig,
    mut unfinished: impl AsyncFnMut() -> anyhow::Result<u64>,
) -> anyhow::Result<()> {
    progress("window over; draining");
    let drain_until = now_ms() + i64::try_from(config.drain_timeout.as_millis()).unwrap_or(0);
    loop {
        let left = unfinished().await?;
        if left == 0 {
            return Ok(());
        }
        if now_ms() >= drain_until {
            progress(format_args!(
                "{left} run(s) of the window still unfinished after the drain"
            ));
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Engine CPU time between two samples of the nodes (0 for a node without an end sample).
fn engine_cpu_us(start: &[ProcSample], end: &[Option<ProcSample>]) -> Vec<u64> {
    start
        .iter()
        .zip(end)
        .map(|(s, e)| e.map_or(0, |e| e.cpu_us.saturating_sub(s.cpu_us)))
        .collect()
}

async fn measure(
    config: &BenchConfig,
    pg: &mthpt_engine::store::PgStore,
    cluster: &mut Cluster,
) -> anyhow::Result<Report> {
    let mut probe = CostProbe::connect(&config.database_url).await?;
    let warmup_ms = i64::try_from(config.warmup.as_millis()).unwrap_or(i64::MAX);
    let window_ms = i64::try_from(config.duration.as_millis()).unwrap_or(i64::MAX);
    // The window starts on a whole second, so cron occurrences are not cut in half.
    let from = (now_ms() + warmup_ms + 999) / 1_000 * 1_000;
    let until = from + window_ms;
    sleep_until_ms(from).await;
    let start = cluster.sample()?;
    let cost_start = probe.sample().await?;
    progress(format_args!(
        "measuring {} s from {}",
        config.duration.as_secs_f64(),
        from
    ));

    let nodes = &mut cluster.nodes;
    let mut end: Vec<Option<ProcSample>> = vec![None; nodes.len()];
    let mut kill: Option<(i64, Vec<(i64, i64)>)> = None;
    if config.scenario == Scenario::Failover && config.kill_node < nodes.len() {
        let kill_ms = from + i64::try_from(config.kill_after.as_millis()).unwrap_or(0);
        sleep_until_ms(kill_ms).await;
        let victim = &mut nodes[config.kill_node];
        end[config.kill_node] = Some(victim.sample()?);
        victim.kill_hard()?;
        let killed_at = now_ms();
        let held = database::claimed_by(pg, &victim.id).await?;
        progress(format_args!(
            "SIGKILLed {} at {killed_at}; it held {} claimed run(s)",
            victim.id,
            held.len()
        ));
        kill = Some((killed_at, held));
    }
    sleep_until_ms(until).await;
    for (i, node) in nodes.iter().enumerate() {
        if end[i].is_none() {
            end[i] = Some(node.sample()?);
        }
    }
    let cost_end = probe.sample().await?;
    probe.close().await;
    let completed = database::succeeded_between(&pg.into(), from, until).await?;

    drain(config, pg, from, until).await?;
    let engine_rss_mb = cluster.peak_rss_mb(end.iter().flatten());
    let executions = cluster.wrappers.executions.snapshot();

    let per_node = engine_cpu_us(&start, &end);
    progress(format_args!(
        "engine CPU in the window per node (ms): {:?}; {completed} runs completed",
        per_node.iter().map(|us| us / 1_000).collect::<Vec<_>>()
    ));
    let cpu_us: u64 = per_node.iter().sum();
    let costs = CostPerRun::between(&cost_start, &cost_end, completed);
    let tasks = database::tasks(pg).await?;
    let expected = database::expected_occurrences(&tasks, from, until);
    let runs = database::runs_scheduled(pg, from, until).await?;
    let c = figures::correctness(&runs, &expected, &executions, config.delay_limit_ms);
    let refire_after_kill_ms = match &kill {
        Some((kill_ms, held)) => {
            let ids: Vec<i64> = held.iter().map(|(id, _)| *id).collect();
            let dispatched = database::dispatch_times(pg, &ids).await?;
            Some(figures::refire_after_kill(*kill_ms, held, &dispatched).unwrap_or(-1))
        }
        None => None,
    };
    let secs = config.duration.as_secs_f64();
    Ok(Report {
        scenario: config.scenario.name().to_owned(),
        nodes: config.nodes,
        runs_completed: completed,
        runs_per_sec: round1(completed as f64 / secs),
        lateness_ms: c.lateness,
        duplicates: c.duplicates,
        missed: c.missed,
        unfinished: c.unfinished,
        engine_cpu_us_per_run: cost::per_run(cpu_us, completed),
        engine_rss_mb,
        refire_after_kill_ms,
        delayed: (config.scenario == Scenario::LongTasks).then_some(c.delayed),
        timed_out: (config.scenario == Scenario::LongTasks).then_some(c.timed_out),
        tasks: config.tasks + config.long_tasks,
        wrappers: config.wrappers,
        duration_s: secs,
        offered_per_sec: round1(expected.len() as f64 / secs),
        wal_bytes_per_run: costs.wal_bytes_per_run,
        pg_cpu_us_per_run: costs.pg_cpu_us_per_run,
        wrapper_cpu_us_per_run: costs.wrapper_cpu_us_per_run,
        max_sustainable_runs_per_s: None,
        stopped_by: None,
        steps: None,
    })
}

/// The counters at the start or end of a step's measured part (or a soak's interval).
#[derive(Clone)]
struct StepSample {
    nodes: Vec<ProcSample>,
    cost: CostSample,
}

impl StepSample {
    async fn take(cluster: &Cluster, probe: &mut CostProbe) -> anyhow::Result<Self> {
        let nodes = cluster.sample()?;
        let cost = probe.sample().await?;
        Ok(Self { nodes, cost })
    }

    /// Engine CPU time from `self` to `end`, all nodes.
    fn engine_cpu_us(&self, end: &Self) -> u64 {
        let end: Vec<Option<ProcSample>> = end.nodes.iter().copied().map(Some).collect();
        engine_cpu_us(&self.nodes, &end).iter().sum()
    }
}

/// Sums of the steps' measured parts, for the whole run's cost per run.
#[derive(Default)]
struct Totals {
    runs: u64,
    engine_cpu_us: u64,
    start: Vec<CostSample>,
    end: Vec<CostSample>,
}

impl Totals {
    fn add(&mut self, start: &StepSample, end: &StepSample, runs: u64) {
        self.runs += runs;
        self.engine_cpu_us += start.engine_cpu_us(end);
        self.start.push(start.cost);
        self.end.push(end.cost);
    }

    /// The costs of every measured part together per run completed in them.
    fn per_run(&self) -> CostPerRun {
        let sum = |samples: &[CostSample]| CostSample {
            wal_bytes: samples.iter().map(|s| s.wal_bytes).sum(),
            pg_cpu_us: samples.iter().map(|s| s.pg_cpu_us).sum(),
            bench_cpu_us: samples.iter().map(|s| s.bench_cpu_us).sum(),
        };
        CostPerRun::between(&sum(&self.start), &sum(&self.end), self.runs)
    }
}

/// `max-sustainable`: steps of rising offered rate (new tasks are loaded at each step's start),
/// each judged on its measured part, until one does not hold or the next would end after the
/// `duration` cap; then the drain and the whole run's figures.
async fn measure_steps(
    config: &BenchConfig,
    pg: &mthpt_engine::store::PgStore,
    store: &Arc<dyn Store>,
    tenancy: &crate::Tenancy,
    cluster: &mut Cluster,
) -> anyhow::Result<Report> {
    let policy = config.step_policy();
    let mut probe = CostProbe::connect(&config.database_url).await?;
    let warmup_ms = i64::try_from(config.warmup.as_millis()).unwrap_or(i64::MAX);
    let cap_ms = i64::try_from(config.duration.as_millis()).unwrap_or(i64::MAX);
    let from = (now_ms() + warmup_ms + 999) / 1_000 * 1_000;
    let deadline = from.saturating_add(cap_ms);
    let mut rate = policy.start_rate;
    let mut loaded = config.initial_tasks();
    let mut start = from;
    let mut until = from;
    let mut steps: Vec<StepReport> = Vec::new();
    let mut totals = Totals::default();
    let mut stopped_by = "duration";
    sleep_until_ms(from).await;
    while policy.fits(start, deadline) {
        let (m_from, m_until) = policy.measured(start);
        progress(format_args!(
            "step {}: {rate} runs/s offered by {loaded} tasks, {} s from {start}",
            steps.len() + 1,
            config.step.as_secs_f64()
        ));
        sleep_until_ms(m_from).await;
        let s0 = StepSample::take(cluster, &mut probe).await?;
        sleep_until_ms(m_until).await;
        let s1 = StepSample::take(cluster, &mut probe).await?;
        let completed = database::succeeded_between(&pg.into(), m_from, m_until).await?;
        until = start + policy.step_ms;
        sleep_until_ms(until).await;

        let runs = database::runs_scheduled(pg, m_from, m_until).await?;
        let lateness = steps::step_lateness(&runs, now_ms());
        let tasks = database::tasks(pg).await?;
        let offered = database::expected_occurrences(&tasks, m_from, m_until).len();
        let secs = (m_until - m_from) as f64 / 1_000.0;
        let offered_per_sec = round1(offered as f64 / secs);
        let completed_per_sec = round1(completed as f64 / secs);
        let verdict = policy.verdict(offered_per_sec, completed_per_sec, lateness.p99);
        let costs = CostPerRun::between(&s0.cost, &s1.cost, completed);
        totals.add(&s0, &s1, completed);
        let step = StepReport {
            target_per_sec: rate,
            offered_per_sec,
            completed_per_sec,
            lateness_ms: lateness,
            wal_bytes_per_run: costs.wal_bytes_per_run,
            pg_cpu_us_per_run: costs.pg_cpu_us_per_run,
            engine_cpu_us_per_run: cost::per_run(s0.engine_cpu_us(&s1), completed),
            wrapper_cpu_us_per_run: costs.wrapper_cpu_us_per_run,
            measured_s: secs,
            verdict,
        };
        progress(format_args!(
            "step {}: {}",
            steps.len() + 1,
            serde_json::to_string(&step)?
        ));
        steps.push(step);
        match verdict {
            Verdict::Held => {}
            Verdict::Late => {
                stopped_by = "late";
                break;
            }
            Verdict::Behind => {
                stopped_by = "behind";
                break;
            }
        }
        rate = policy.next_rate(rate);
        let wanted = steps::tasks_for_rate(rate, config.every_ms);
        if wanted > loaded {
            let plans = config.fixed_rate_plans(loaded, wanted - loaded, now_ms());
            database::load(store.clone(), tenancy, plans).await?;
            loaded = wanted;
        }
        start = now_ms();
    }
    probe.close().await;
    if steps.is_empty() {
        anyhow::bail!(
            "--duration {} s leaves no room for one step of {} s",
            config.duration.as_secs_f64(),
            config.step.as_secs_f64()
        );
    }
    let completed = database::succeeded_between(&pg.into(), from, until).await?;
    drain(config, pg, from, until).await?;
    let engine_rss_mb = cluster.peak_rss_mb([]);
    let executions = cluster.wrappers.executions.snapshot();
    let tasks = database::tasks(pg).await?;
    let expected = database::expected_occurrences(&tasks, from, until);
    let runs = database::runs_scheduled(pg, from, until).await?;
    let c = figures::correctness(&runs, &expected, &executions, config.delay_limit_ms);
    let costs = totals.per_run();
    let secs = (until - from) as f64 / 1_000.0;
    Ok(Report {
        scenario: config.scenario.name().to_owned(),
        nodes: config.nodes,
        runs_completed: completed,
        runs_per_sec: round1(completed as f64 / secs),
        lateness_ms: c.lateness,
        duplicates: c.duplicates,
        missed: c.missed,
        unfinished: c.unfinished,
        engine_cpu_us_per_run: cost::per_run(totals.engine_cpu_us, totals.runs),
        engine_rss_mb,
        refire_after_kill_ms: None,
        delayed: None,
        timed_out: None,
        tasks: loaded + config.long_tasks,
        wrappers: config.wrappers,
        duration_s: secs,
        offered_per_sec: round1(expected.len() as f64 / secs),
        wal_bytes_per_run: costs.wal_bytes_per_run,
        pg_cpu_us_per_run: costs.pg_cpu_us_per_run,
        wrapper_cpu_us_per_run: costs.wrapper_cpu_us_per_run,
        max_sustainable_runs_per_s: Some(steps::max_sustainable(&steps)),
        stopped_by: Some(stopped_by.to_owned()),
        steps: Some(steps),
    })
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_sqlite(scenario: Scenario) -> BenchConfig {
        let mut c = BenchConfig::defaults(scenario, PathBuf::from("mthpt"));
        c.backend = Backend::Sqlite;
        c.database_url = default_sqlite_url(&c.work_dir);
        c
    }

    #[test]
    fn sqlite_runs_noisy_neighbour_on_one_node_only() {
        let mut c = on_sqlite(Scenario::NoisyNeighbour);
        assert!(c.database_url.ends_with("/noisy-neighbour/bench.db"));
        c.check_backend().unwrap();
        c.nodes = 2;
        let e = c.check_backend().unwrap_err().to_string();
        assert!(e.contains("--nodes 2"), "{e}");
        let e = on_sqlite(Scenario::Throughput)
            .check_backend()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--backend postgres"), "{e}");
    }

    #[test]
    fn each_backend_needs_its_own_kind_of_url() {
        let mut c = on_sqlite(Scenario::NoisyNeighbour);
        c.database_url = default_database_url(Scenario::NoisyNeighbour);
        assert!(c.check_backend().is_err());
        c.backend = Backend::Postgres;
        c.check_backend().unwrap();
        c.database_url = "sqlite://bench.db".to_owned();
        let e = c.check_backend().unwrap_err().to_string();
        assert!(e.contains("--backend sqlite"), "{e}");
    }
}

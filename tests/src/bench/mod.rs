//! The benchmark harness behind `mthpt-bench` (see `docs/benchmarks.md`).
//!
//! One run: a fresh PostgreSQL database, tasks loaded through the store API, N engine nodes as
//! separate `mthpt engine` processes, M wrapper instances in this process, a warm-up, a measured
//! window of D seconds, a drain (the runs scheduled in the window may finish), then the figures:
//! from the runs table (lateness, missed, completed), from the executors (duplicates) and from
//! `/proc` (engine CPU time and peak RSS).

pub mod database;
pub mod figures;
pub mod nodes;
pub mod wrappers;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::Store;
use serde::Serialize;

use self::database::TaskPlan;
use self::figures::Lateness;
use self::nodes::{EngineTuning, NodeProcess, ProcSample};
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
        }
    }
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
    /// The database to drop, create and use.
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
        }
        c
    }

    /// The tasks the scenario loads, anchored at `now`.
    fn plans(&self, now: i64) -> Vec<TaskPlan> {
        let mut plans = Vec::with_capacity(self.tasks + self.long_tasks);
        let n = i64::try_from(self.tasks.max(1)).unwrap_or(i64::MAX);
        for i in 0..self.tasks {
            let i64i = i64::try_from(i).unwrap_or(0);
            let schedule = match self.scenario {
                // Second offset i mod 10: each second a tenth of the tasks fire.
                Scenario::Precision => ScheduleSpec::Cron {
                    expr: format!("{}/10 * * * * ?", i % 10),
                    timezone: "UTC".to_owned(),
                },
                // Spread evenly over the period, to the millisecond.
                _ => ScheduleSpec::FixedRate {
                    every_ms: self.every_ms,
                    anchor_at: Some(now + i64i * self.every_ms / n),
                },
            };
            plans.push(TaskPlan {
                name: format!("t{i:06}"),
                handler: NOOP.to_owned(),
                params: serde_json::json!({}),
                schedule,
                timeout_ms: None,
            });
        }
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
        config.tasks + config.long_tasks,
        loading.elapsed().as_secs_f64()
    ));

    let result = measure(config, &pg, &tenancy).await;
    store.close().await;
    if config.drop_database {
        database::drop_database(&config.database_url).await?;
    }
    result
}

async fn measure(
    config: &BenchConfig,
    pg: &mthpt_engine::store::PgStore,
    tenancy: &crate::Tenancy,
) -> anyhow::Result<Report> {
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

    let warmup_ms = i64::try_from(config.warmup.as_millis()).unwrap_or(i64::MAX);
    let window_ms = i64::try_from(config.duration.as_millis()).unwrap_or(i64::MAX);
    // The window starts on a whole second, so cron occurrences are not cut in half.
    let from = (now_ms() + warmup_ms + 999) / 1_000 * 1_000;
    let until = from + window_ms;
    sleep_until_ms(from).await;
    let start: Vec<ProcSample> = nodes
        .iter()
        .map(NodeProcess::sample)
        .collect::<anyhow::Result<_>>()?;
    progress(format_args!(
        "measuring {} s from {}",
        config.duration.as_secs_f64(),
        from
    ));

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
    let completed = database::succeeded_between(pg, from, until).await?;

    progress("window over; draining");
    let drain_until = now_ms() + i64::try_from(config.drain_timeout.as_millis()).unwrap_or(0);
    loop {
        let left = database::unfinished(pg, from, until).await?;
        if left == 0 {
            break;
        }
        if now_ms() >= drain_until {
            progress(format_args!(
                "{left} run(s) of the window still unfinished after the drain"
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut peak_kib = end
        .iter()
        .flatten()
        .map(|s| s.peak_rss_kib)
        .max()
        .unwrap_or(0);
    for node in &nodes {
        if let Ok(s) = node.sample() {
            peak_kib = peak_kib.max(s.peak_rss_kib);
        }
    }
    let executions = wrappers.executions.snapshot();
    for node in nodes {
        node.stop(Duration::from_secs(15)).await?;
    }
    wrappers.stop().await;

    let per_node: Vec<u64> = start
        .iter()
        .zip(&end)
        .map(|(s, e)| e.map_or(0, |e| e.cpu_us.saturating_sub(s.cpu_us)))
        .collect();
    progress(format_args!(
        "engine CPU in the window per node (ms): {:?}; {completed} runs completed",
        per_node.iter().map(|us| us / 1_000).collect::<Vec<_>>()
    ));
    let cpu_us: u64 = per_node.iter().sum();
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
        engine_cpu_us_per_run: round1(cpu_us as f64 / completed.max(1) as f64),
        engine_rss_mb: round1(peak_kib as f64 / 1024.0),
        refire_after_kill_ms,
        delayed: (config.scenario == Scenario::LongTasks).then_some(c.delayed),
        timed_out: (config.scenario == Scenario::LongTasks).then_some(c.timed_out),
        tasks: config.tasks + config.long_tasks,
        wrappers: config.wrappers,
        duration_s: secs,
        offered_per_sec: round1(expected.len() as f64 / secs),
    })
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

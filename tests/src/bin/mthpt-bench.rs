//! `mthpt-bench`: starts engine node processes against PostgreSQL (or, for `noisy-neighbour`, one
//! on a SQLite file) and wrapper instances with a no-op handler, loads tasks, runs a scenario for
//! a while and prints one JSON object with the figures on stdout (progress goes to stderr). See
//! `docs/benchmarks.md`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use mthpt_tests::bench::{self, Backend, BenchConfig, Scenario, nodes};

/// Benchmarks an MTHPT cluster on this machine.
#[derive(Debug, Parser)]
#[command(name = "mthpt-bench", version, about)]
struct Args {
    /// What to measure.
    #[arg(long, value_enum)]
    scenario: Scenario,
    /// Engine node processes (default: 3 for failover, else 1).
    #[arg(long)]
    nodes: Option<usize>,
    /// Wrapper instances, in this process (default 4).
    #[arg(long)]
    wrappers: Option<usize>,
    /// Runs each wrapper instance takes at once (default 10000).
    #[arg(long)]
    capacity: Option<u32>,
    /// Tasks with the no-op handler (scenario defaults: see docs/benchmarks.md).
    #[arg(long)]
    tasks: Option<usize>,
    /// Period of the fixed-rate tasks, ms.
    #[arg(long)]
    every_ms: Option<i64>,
    /// Length of the measured window, seconds (max-sustainable: the cap on all steps together,
    /// default 600).
    #[arg(long)]
    duration: Option<f64>,
    /// Time from everything being up to the window's start, seconds (default 5).
    #[arg(long)]
    warmup: Option<f64>,
    /// How long runs scheduled in the window may still take to finish after it, seconds.
    #[arg(long)]
    drain_timeout: Option<f64>,
    /// The database: PostgreSQL, or a SQLite file with the engine node on it (noisy-neighbour
    /// only, one node).
    #[arg(long, value_enum, default_value_t = Backend::Postgres)]
    backend: Backend,
    /// Database to use; it is DROPPED (SQLite: the file deleted) and created again (default
    /// postgres://postgres@127.0.0.1:5432/mthpt_bench_<scenario>, or
    /// sqlite://<work dir>/bench.db).
    #[arg(long)]
    database_url: Option<String>,
    /// Drop the database (SQLite: delete the file) when done (default: keep it for inspection).
    #[arg(long)]
    drop_database: bool,
    /// The `mthpt` binary (default: next to mthpt-bench).
    #[arg(long)]
    mthpt: Option<PathBuf>,
    /// Node logs and wrapper spools (default /dev/shm/mthpt-bench/<scenario>).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// `mthpt engine --poll-interval-ms`.
    #[arg(long)]
    poll_interval_ms: Option<i64>,
    /// `mthpt engine --horizon-ms`.
    #[arg(long)]
    horizon_ms: Option<i64>,
    /// `mthpt engine --lease-ms`.
    #[arg(long)]
    lease_ms: Option<i64>,
    /// `mthpt engine --claim-batch`.
    #[arg(long)]
    claim_batch: Option<i64>,
    /// `mthpt engine --max-in-flight`.
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// `mthpt engine --dispatch-coalesce-ms`.
    #[arg(long)]
    dispatch_coalesce_ms: Option<i64>,
    /// `mthpt engine --start-write-delay-ms` (default: the engine's own, 300).
    #[arg(long)]
    start_write_delay_ms: Option<i64>,
    /// How long each wrapper gathers results before delivering them together, ms (default: the
    /// wrapper's own default, 5).
    #[arg(long)]
    result_linger_ms: Option<u64>,
    /// long-tasks: tasks whose runs sleep (default 200).
    #[arg(long)]
    long_tasks: Option<usize>,
    /// long-tasks: their period, ms (default 2000).
    #[arg(long)]
    long_every_ms: Option<i64>,
    /// long-tasks: how long each of their runs sleeps, ms (default 10000).
    #[arg(long)]
    long_run_ms: Option<i64>,
    /// long-tasks: their timeout, ms (default 30000).
    #[arg(long)]
    long_timeout_ms: Option<i64>,
    /// failover: seconds into the window when a node is SIGKILLed (default 15).
    #[arg(long)]
    kill_after: Option<f64>,
    /// max-sustainable: runs per second offered by the first step (default 1000).
    #[arg(long)]
    start_rate: Option<u64>,
    /// max-sustainable: each step offers this many times the previous step's rate (default 1.25).
    #[arg(long)]
    rate_growth: Option<f64>,
    /// max-sustainable: how long each step lasts, seconds (default 30; at least 3). soak: how
    /// long each interval lasts (default 60; at least 5).
    #[arg(long)]
    step_seconds: Option<f64>,
    /// noisy-neighbour: the noisy tenant's runs already due (default 100000).
    #[arg(long)]
    backlog: Option<u64>,
    /// noisy-neighbour: the noisy tenant's tasks offer this many times what its instance takes
    /// (default 20; at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    noisy_overload: Option<u64>,
    /// soak: how long the bench tenant keeps its finished runs, seconds (default 300).
    #[arg(long)]
    retention_seconds: Option<f64>,
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

fn config(args: Args) -> anyhow::Result<BenchConfig> {
    let mthpt = match args.mthpt {
        Some(p) => p,
        None => nodes::default_mthpt()?,
    };
    let mut c = BenchConfig::defaults(args.scenario, mthpt);
    c.backend = args.backend;
    let default_database = args.database_url.is_none();
    macro_rules! set {
        ($($field:ident => $target:expr),* $(,)?) => {
            $(if let Some(v) = args.$field { $target = v; })*
        };
    }
    set!(
        nodes => c.nodes,
        wrappers => c.wrappers,
        capacity => c.capacity,
        tasks => c.tasks,
        every_ms => c.every_ms,
        database_url => c.database_url,
        work_dir => c.work_dir,
        poll_interval_ms => c.engine.poll_interval_ms,
        horizon_ms => c.engine.horizon_ms,
        lease_ms => c.engine.lease_ms,
        claim_batch => c.engine.claim_batch,
        max_in_flight => c.engine.max_in_flight,
        dispatch_coalesce_ms => c.engine.dispatch_coalesce_ms,
        start_write_delay_ms => c.engine.start_write_delay_ms,
        long_tasks => c.long_tasks,
        long_every_ms => c.long_every_ms,
        long_run_ms => c.long_run_ms,
        long_timeout_ms => c.long_timeout_ms,
        start_rate => c.start_rate,
        rate_growth => c.rate_growth,
        backlog => c.backlog,
        noisy_overload => c.noisy_overload,
    );
    if let Some(s) = args.duration {
        c.duration = secs(s);
    }
    if let Some(s) = args.warmup {
        c.warmup = secs(s);
    }
    if let Some(s) = args.drain_timeout {
        c.drain_timeout = secs(s);
    }
    if let Some(ms) = args.result_linger_ms {
        c.result_linger = Some(Duration::from_millis(ms));
    }
    if let Some(s) = args.kill_after {
        c.kill_after = secs(s);
    }
    if let Some(s) = args.step_seconds {
        c.step = secs(s);
    }
    if let Some(s) = args.retention_seconds {
        c.retention = secs(s);
    }
    if c.backend == Backend::Sqlite && default_database {
        c.database_url = bench::default_sqlite_url(&c.work_dir);
    }
    c.drop_database = args.drop_database;
    if c.nodes == 0 || c.wrappers == 0 {
        anyhow::bail!("--nodes and --wrappers must be at least 1");
    }
    if c.every_ms <= 0 {
        anyhow::bail!("--every-ms must be positive");
    }
    if c.scenario == Scenario::Soak && (c.step < Duration::from_secs(5) || c.duration < c.step) {
        anyhow::bail!(
            "soak needs --step-seconds of at least 5 and a --duration of at least one step"
        );
    }
    if c.scenario == Scenario::MaxSustainable && !c.step_policy().is_valid() {
        anyhow::bail!(
            "max-sustainable needs --start-rate of at least 1, --rate-growth of at least 1 and \
             --step-seconds of at least 3 (each step is measured from a third in to 1 s before \
             its end)"
        );
    }
    Ok(c)
}

#[tokio::main]
async fn main() -> ExitCode {
    let outcome = async {
        let config = config(Args::parse())?;
        if config.scenario == Scenario::NoisyNeighbour {
            let report = bench::neighbour::run(&config, config.backlog).await?;
            return anyhow::Ok(serde_json::to_string(&report)?);
        }
        if config.scenario == Scenario::Soak {
            let report = bench::soak::run(&config).await?;
            return anyhow::Ok(serde_json::to_string(&report)?);
        }
        let report = bench::run(&config).await?;
        anyhow::Ok(serde_json::to_string(&report)?)
    };
    // An interrupted bench drops its scenario: the engine nodes and wrappers it started are
    // killed by their guards rather than left running.
    let outcome = tokio::select! {
        outcome = outcome => outcome,
        signal = mthpt_tests::interrupted() => Err(anyhow::anyhow!("interrupted by {signal}")),
    };
    match outcome {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mthpt-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

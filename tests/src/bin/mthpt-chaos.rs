//! `mthpt-chaos`: injects one scenario of faults into a real cluster (its own PostgreSQL,
//! `mthpt engine` and `mthpt wrapper` processes) and prints one JSON object with the counts.
//! Exit status: 0 when every guarantee held, 1 when one was violated, 2 when the run itself
//! failed. See `docs/faults.md`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use mthpt_tests::chaos::{self, ChaosConfig, Scenario, proxy::Cut};

/// Fault-injection suite: faults, then duplicates, lost results and misses counted from the
/// handlers' own log.
#[derive(Debug, Parser)]
#[command(name = "mthpt-chaos")]
struct Args {
    #[arg(long, value_enum)]
    scenario: Scenario,
    /// Measured window in seconds (default: 120, or 600 for `all`).
    #[arg(long, value_name = "SECS")]
    duration: Option<u64>,
    /// Engine node processes.
    #[arg(long)]
    engines: Option<usize>,
    /// Wrapper processes.
    #[arg(long)]
    wrappers: Option<usize>,
    /// Scheduled tasks (chain children come on top).
    #[arg(long)]
    tasks: Option<usize>,
    /// A new fault at most every SECS (default 15; `pg-failover`, `pg-partition`: 60).
    #[arg(long, value_name = "SECS")]
    fault_every: Option<u64>,
    /// Length of a pause or partition in seconds (`pg-partition`: 20).
    #[arg(long, value_name = "SECS")]
    fault_length: Option<u64>,
    /// How long a killed process stays down before it is started again (default 2;
    /// `pg-failover`: 20, the dead primary's machine).
    #[arg(long, value_name = "SECS")]
    down_for: Option<u64>,
    /// `bash` processes each wrapper's shell handler keeps started ahead (default 12: ten
    /// scripts of the task mix are due at the same instant, often on one wrapper).
    #[arg(long, value_name = "N")]
    shell_prestarted: Option<usize>,
    /// How partitions cut links.
    #[arg(long, value_enum)]
    cut: Option<Cut>,
    /// Seconds after the window for its runs to finish.
    #[arg(long, value_name = "SECS")]
    drain: Option<u64>,
    /// The `mthpt` binary (default: next to this one).
    #[arg(long)]
    mthpt: Option<PathBuf>,
    /// Directory of PostgreSQL's `initdb` and `pg_ctl` (default: newest /usr/lib/postgresql/*/bin).
    #[arg(long)]
    pg_bin: Option<PathBuf>,
    /// Keep the work directory (process logs, handler log) after a successful run.
    #[arg(long)]
    keep: bool,
    /// `pg-failover`, `pg-partition`: give the engines and the console the primary's address
    /// alone instead of the multi-host URL of the three nodes.
    #[arg(long)]
    pg_single_host: bool,
}

fn config(args: Args) -> anyhow::Result<ChaosConfig> {
    let mthpt = match args.mthpt {
        Some(path) => path,
        None => mthpt_tests::bench::nodes::default_mthpt()?,
    };
    let pg_bin = match args.pg_bin {
        Some(path) => path,
        None => chaos::postgres::default_bin_dir()?,
    };
    let mut c = ChaosConfig::defaults(args.scenario, mthpt, pg_bin);
    let secs = Duration::from_secs;
    if let Some(v) = args.duration {
        c.duration = secs(v);
    }
    if let Some(v) = args.engines {
        c.engines = v;
    }
    if let Some(v) = args.wrappers {
        c.wrappers = v;
    }
    if let Some(v) = args.tasks {
        c.tasks = v;
    }
    if let Some(v) = args.fault_every {
        c.fault_every = secs(v);
    }
    if let Some(v) = args.fault_length {
        c.fault_length = secs(v);
    }
    if let Some(v) = args.down_for {
        c.down_for = secs(v);
    }
    if let Some(v) = args.shell_prestarted {
        c.shell_prestarted = v;
    }
    if let Some(v) = args.cut {
        c.cut = v;
    }
    if let Some(v) = args.drain {
        c.drain = secs(v);
    }
    c.keep_work_dir = args.keep;
    c.pg_single_host = args.pg_single_host;
    if c.engines == 0 || c.wrappers == 0 || c.tasks == 0 {
        anyhow::bail!("--engines, --wrappers and --tasks must be at least 1");
    }
    Ok(c)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let config = match config(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mthpt-chaos: {e:#}");
            return ExitCode::from(2);
        }
    };
    // SIGINT/SIGTERM end the run inside: processes killed, PostgreSQL stopped and removed.
    match chaos::run(&config).await {
        Ok(report) => match serde_json::to_string(&report) {
            Ok(json) => {
                println!("{json}");
                if report.violations == 0 {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
            Err(e) => {
                eprintln!("mthpt-chaos: cannot print the report: {e}");
                ExitCode::from(2)
            }
        },
        Err(e) => {
            eprintln!("mthpt-chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

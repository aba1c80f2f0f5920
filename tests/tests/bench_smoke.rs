//! The benchmark harness, each scenario for a few seconds with small numbers: it runs end to end
//! (engine node processes, wrappers, PostgreSQL), prints every figure, and finds no duplicate and
//! no missed occurrence. The figures themselves are measured by hand in release builds
//! (`docs/benchmarks.md`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use mthpt_tests::bench::{self, BenchConfig, Scenario};

const FIELDS: &[&str] = &[
    "scenario",
    "nodes",
    "runs_completed",
    "runs_per_sec",
    "lateness_ms",
    "duplicates",
    "missed",
    "engine_cpu_us_per_run",
    "engine_rss_mb",
];

fn small(scenario: Scenario, work: &tempfile::TempDir) -> BenchConfig {
    let node = PathBuf::from(env!("CARGO_BIN_EXE_mthpt-bench-node"));
    let mut c = BenchConfig::defaults(scenario, node);
    let base = mthpt_engine::testing::postgres_url();
    let server = base.rsplit_once('/').map_or(base.as_str(), |(s, _)| s);
    c.database_url = format!(
        "{server}/mthpt_bench_smoke_{}_{}",
        scenario.name().replace('-', "_"),
        std::process::id()
    );
    c.drop_database = true;
    c.work_dir = work.path().to_path_buf();
    c.wrappers = 2;
    c.tasks = 40;
    c.every_ms = 500;
    c.warmup = Duration::from_secs(2);
    c.duration = Duration::from_secs(3);
    c.drain_timeout = Duration::from_secs(10);
    match scenario {
        Scenario::Precision => c.tasks = 100,
        Scenario::Failover => {
            c.duration = Duration::from_secs(5);
            c.kill_after = Duration::from_millis(1_500);
        }
        Scenario::LongTasks => {
            c.long_tasks = 10;
            c.long_every_ms = 1_000;
            c.long_run_ms = 1_500;
            c.long_timeout_ms = 10_000;
        }
        Scenario::Rss100k => {
            c.tasks = 400;
            c.every_ms = 2_000;
        }
        Scenario::Throughput => {}
    }
    c
}

async fn smoke(scenario: Scenario) -> serde_json::Value {
    mthpt_tests::init_logs();
    let work = tempfile::tempdir().unwrap();
    let report = bench::run(&small(scenario, &work)).await.unwrap();
    let json = serde_json::to_value(&report).unwrap();
    for field in FIELDS {
        assert!(json.get(field).is_some(), "{field} missing from {json}");
    }
    for p in ["p50", "p99", "p999", "max"] {
        assert!(json["lateness_ms"].get(p).is_some(), "lateness {p} missing");
    }
    assert_eq!(json["scenario"], scenario.name());
    assert_eq!(report.duplicates, 0, "{json}");
    assert_eq!(report.missed, 0, "{json}");
    assert!(report.runs_completed > 0, "{json}");
    assert!(report.engine_rss_mb > 0.0, "{json}");
    json
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_scenario_reports_every_figure_without_duplicates_or_misses() {
    smoke(Scenario::Throughput).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precision_scenario_reports_every_figure_without_duplicates_or_misses() {
    smoke(Scenario::Precision).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_scenario_refires_the_killed_nodes_runs_elsewhere() {
    let json = smoke(Scenario::Failover).await;
    let refire = json["refire_after_kill_ms"]
        .as_i64()
        .expect("refire figure");
    assert!(
        refire >= 0,
        "a run the killed node held never fired: {json}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_tasks_scenario_counts_delayed_and_timed_out_runs() {
    let json = smoke(Scenario::LongTasks).await;
    assert_eq!(json["timed_out"], 0, "{json}");
    assert!(json["delayed"].is_u64(), "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_scenario_reports_the_engine_memory() {
    smoke(Scenario::Rss100k).await;
}

//! `GET /metrics` of the three process kinds, as processes on PostgreSQL (`mthpt engine`,
//! `mthpt wrapper`, `mthpt console`): each serves the Prometheus text format, a parser reads
//! it, and the counters move when runs happen and the API is used.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use mthpt_engine::run::RunState;
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::Store;
use mthpt_engine::task::TaskDefinition;
use mthpt_testkit::{ChildGuard, free_port};
use mthpt_tests::{create, runs, tenancy, trigger, wait_until};
use prometheus_parse::{Sample, Scrape, Value};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

/// Starts `mthpt` with `args` as `name`, logging to `<dir>/<name>.log`; stopped (TERM, then
/// KILL) when dropped, its log printed if the test failed.
fn spawn(name: &str, dir: &Path, args: &[&str]) -> ChildGuard {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mthpt"));
    command
        .args(args)
        .env("RUST_LOG", "info")
        .env_remove("MTHPT_DATABASE_URL")
        .env_remove("MTHPT_CONFIG");
    ChildGuard::spawn_logged(name, &mut command, &dir.join(format!("{name}.log"))).unwrap()
}

/// Scrapes `base/metrics` and parses it.
async fn scrape(http: &reqwest::Client, base: &str) -> Result<Scrape> {
    let res = http.get(format!("{base}/metrics")).send().await?;
    anyhow::ensure!(
        res.status() == 200,
        "{base}/metrics answered {}",
        res.status()
    );
    let content_type = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "content type {content_type:?}"
    );
    let text = res.text().await?;
    Ok(Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))?)
}

/// The value of the sample `name` whose labels include `labels` (counter, gauge or
/// untyped; for a histogram, its count), 0 when there is none.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s: &&Sample| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            Value::Summary(_) => 0.0,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_kind_serves_metrics_that_move_with_runs() -> Result<()> {
    let db = mthpt_engine::testing::postgres().await;
    let dir = tempfile::tempdir()?;
    let store = db.shared();
    let t = tenancy(&*store, "acme", "ops").await?;
    let url = db.url();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;

    let _engine = spawn(
        "engine",
        dir.path(),
        &[
            "engine",
            "--database-url",
            &url,
            "--node-id",
            "node-m",
            "--listen",
            "127.0.0.1:0",
            "--poll-interval-ms",
            "50",
        ],
    );
    wait_until(WAIT, "engine up", || async {
        Ok(node_url(&*store).await?.is_some())
    })
    .await?;
    let engine_url = node_url(&*store).await?.unwrap_or_default();

    let secret = dir.path().join("ops.secret");
    std::fs::write(&secret, &t.secret)?;
    let wrapper_url = format!("http://127.0.0.1:{}", free_port());
    let _wrapper = spawn(
        "wrapper",
        dir.path(),
        &[
            "wrapper",
            "--app",
            &t.key,
            "--secret-file",
            &secret.display().to_string(),
            "--engine",
            &engine_url,
            "--listen",
            wrapper_url.trim_start_matches("http://"),
            "--enable-shell",
            "--spool",
            &dir.path().join("spool").display().to_string(),
        ],
    );
    let console_url = format!("http://127.0.0.1:{}", free_port());
    let _console = spawn(
        "console",
        dir.path(),
        &[
            "console",
            "--database-url",
            &url,
            "--bind",
            console_url.trim_start_matches("http://"),
        ],
    );
    wait_until(WAIT, "wrapper registered", || async {
        let mut tx = store.begin_read().await?;
        Ok(tx
            .list_executors(t.tenant.id, None)
            .await?
            .iter()
            .any(|e| e.state == mthpt_engine::app::ExecutorState::Up))
    })
    .await?;
    wait_until(WAIT, "console up", || async {
        Ok(scrape(&http, &console_url).await.is_ok())
    })
    .await?;

    let before = (
        scrape(&http, &engine_url).await?,
        scrape(&http, &wrapper_url).await?,
        scrape(&http, &console_url).await?,
    );
    let finished = |s: &Scrape| {
        value(
            s,
            "mthpt_runs_finished_total",
            &[("state", "succeeded"), ("trigger", "manual")],
        )
    };
    assert_eq!(finished(&before.0), 0.0);

    let mut def = TaskDefinition::new(t.app.id, "hello", "shell", ScheduleSpec::Manual);
    def.params = json!({ "script": "echo hello" });
    let task = create(&*store, &t, &def).await?;
    for _ in 0..3 {
        trigger(&*store, &t, &task).await?;
    }
    wait_until(WAIT, "three runs succeeded", || async {
        let rs = runs(&*store, &t, &task).await?;
        Ok(rs.len() == 3 && rs.iter().all(|r| r.state == RunState::Succeeded))
    })
    .await?;
    for path in ["/api/v1/me", "/api/v1/me", "/api/v1/tenants"] {
        let status = http
            .get(format!("{console_url}{path}"))
            .send()
            .await?
            .status();
        assert_eq!(status, 401, "{path} without credentials");
    }

    // Engine: runs by state and trigger, results, dispatch; the live executor per app once the
    // gauges were refreshed (every 5 s).
    wait_until(WAIT, "engine counts the runs", || async {
        let s = scrape(&http, &engine_url).await?;
        Ok(finished(&s) >= 3.0 && value(&s, "mthpt_executors_live", &[("app", "acme.ops")]) == 1.0)
    })
    .await?;
    let engine = scrape(&http, &engine_url).await?;
    assert_eq!(finished(&engine), 3.0);
    assert_eq!(
        value(
            &engine,
            "mthpt_callback_results_total",
            &[("outcome", "accepted")]
        ),
        3.0
    );
    assert!(
        value(
            &engine,
            "mthpt_dispatch_acks_total",
            &[("status", "accepted")]
        ) >= 3.0
    );
    assert!(value(&engine, "mthpt_dispatch_ack_seconds", &[]) >= 1.0);
    assert!(value(&engine, "mthpt_fire_lateness_seconds", &[]) >= 3.0);
    assert!(value(&engine, "mthpt_claim_batch_size", &[]) >= 1.0);
    assert_eq!(value(&engine, "mthpt_dispatch_in_flight", &[]), 0.0);
    assert!(
        engine
            .samples
            .iter()
            .any(|s| s.metric == "mthpt_outbox_backlog"),
        "the outbox gauge is there"
    );

    // Wrapper: run requests accepted and handlers finished.
    let wrapper = scrape(&http, &wrapper_url).await?;
    let accepted = |s: &Scrape| {
        value(
            s,
            "mthpt_wrapper_run_requests_total",
            &[("status", "accepted")],
        )
    };
    assert_eq!(accepted(&before.1), 0.0);
    assert_eq!(accepted(&wrapper), 3.0);
    assert_eq!(
        value(
            &wrapper,
            "mthpt_wrapper_runs_finished_total",
            &[("outcome", "succeeded")]
        ),
        3.0
    );
    assert!(value(&wrapper, "mthpt_wrapper_handler_seconds", &[]) >= 3.0);
    // The wrapper runs no engine: none of the engine's series.
    assert_eq!(finished(&wrapper), 0.0);

    // Console: requests by route pattern and status class.
    let console = scrape(&http, &console_url).await?;
    let refused = |s: &Scrape| {
        value(
            s,
            "mthpt_console_requests_total",
            &[
                ("route", "/api/v1/me"),
                ("status", "4xx"),
                ("method", "GET"),
            ],
        )
    };
    assert_eq!(refused(&console) - refused(&before.2), 2.0);
    assert!(
        console
            .samples
            .iter()
            .filter(|s| s.metric == "mthpt_console_requests_total")
            .all(|s| s.labels.get("route").is_some_and(|r| !r.contains("acme"))),
        "routes are patterns, never paths"
    );
    db.cleanup().await;
    Ok(())
}

async fn node_url(store: &dyn Store) -> Result<Option<String>> {
    let mut tx = store.begin_read().await?;
    Ok(tx
        .list_nodes()
        .await?
        .into_iter()
        .find(|n| n.id == "node-m" && n.state == mthpt_engine::node::NodeState::Up)
        .map(|n| n.address))
}

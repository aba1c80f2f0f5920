//! Ack latency under load: 1,000 concurrent signed run requests against one wrapper whose
//! handlers do nothing, measured per request from just before sending to the 202.
//!
//! Run: `cargo bench -p mthpt-wrapper --bench ack_latency`
//! Environment: `MTHPT_BENCH_REQUESTS` (default 1000), `MTHPT_BENCH_ROUNDS` (default 3).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{EngineStandIn, TestWrapper, engine_client, eventually, run_request};
use mthpt_wrapper::protocol::paths;
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench())
}

async fn bench() -> anyhow::Result<()> {
    let requests = env_usize("MTHPT_BENCH_REQUESTS", 1000);
    let rounds = env_usize("MTHPT_BENCH_ROUNDS", 3);
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let capacity = u32::try_from(requests * 2)?;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.capacity(capacity)
            .blocking_handler("noop-blocking", |_| Ok(json!(null)))
            .async_handler("noop-async", |_| async { Ok(json!(null)) })
    })?;
    let client = Arc::new(engine_client()?);
    println!(
        "ack latency: {requests} concurrent signed POST {} per round, {} cores",
        paths::RUNS,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut next_id: i64 = 1;
    for handler in ["noop-blocking", "noop-async"] {
        for round in 0..=rounds {
            let mut tasks = Vec::with_capacity(requests);
            let wall = Instant::now();
            for _ in 0..requests {
                let run = run_request(next_id, handler);
                next_id += 1;
                let client = client.clone();
                let url = w.url.clone();
                tasks.push(tokio::spawn(async move {
                    let body = serde_json::to_vec(&run)?;
                    let t0 = Instant::now();
                    let resp = client
                        .send_raw(reqwest::Method::POST, &url, paths::RUNS, body)
                        .await?;
                    let elapsed = t0.elapsed();
                    anyhow::ensure!(
                        resp.status.as_u16() == 202,
                        "answer {}: {}",
                        resp.status,
                        String::from_utf8_lossy(&resp.body)
                    );
                    Ok::<_, anyhow::Error>(elapsed)
                }));
            }
            let mut latencies = Vec::with_capacity(requests);
            for task in tasks {
                latencies.push(task.await??);
            }
            let wall = wall.elapsed();
            latencies.sort();
            let label = if round == 0 {
                "warm-up".to_owned()
            } else {
                format!("round {round}")
            };
            println!(
                "{handler:>14} {label:>8}: p50 {:>8.2} ms  p99 {:>8.2} ms  max {:>8.2} ms  ({} acks in {:.0} ms, {:.0} acks/s)",
                percentile(&latencies, 50.0).as_secs_f64() * 1e3,
                percentile(&latencies, 99.0).as_secs_f64() * 1e3,
                percentile(&latencies, 100.0).as_secs_f64() * 1e3,
                latencies.len(),
                wall.as_secs_f64() * 1e3,
                latencies.len() as f64 / wall.as_secs_f64(),
            );
            // Let the round's runs finish and their results be delivered before the next one.
            let delivered = eventually(Duration::from_secs(60), || {
                w.wrapper.running() == 0 && w.wrapper.pending_results() == 0
            })
            .await;
            anyhow::ensure!(delivered, "results of the round were not delivered");
        }
    }
    let total = engine.log().results.len();
    println!("results delivered to the engine stand-in: {total}");
    let report = w.wrapper.shutdown(Duration::from_secs(5)).await;
    anyhow::ensure!(report.undelivered == 0, "undelivered results: {report:?}");
    Ok(())
}

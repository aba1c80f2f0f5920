//! Results never lost: spool, retries, restart replay, engine failover; graceful drain.

use crate::common;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{EngineStandIn, TestWrapper, engine_client, eventually, post, run_request};
use mthpt_wrapper::CancelReason;
use mthpt_wrapper::protocol::{AckStatus, InstanceState, Outcome, RunAck, paths};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

/// How many results the spool in `dir` holds: its journals' result lines not named by a later
/// `settled` line (docs/wrapper.md, "Results are not lost").
fn spooled_results(dir: &std::path::Path) -> usize {
    let mut journals: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("journal-") && n.ends_with(".log"))
                })
                .collect()
        })
        .unwrap_or_default();
    journals.sort();
    let mut live = std::collections::HashSet::new();
    for path in journals {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines() {
            let Ok(record) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if let Some(id) = record["result"]["run_id"].as_i64() {
                live.insert(id);
            }
            for id in record["settled"].as_array().into_iter().flatten() {
                if let Some(id) = id.as_i64() {
                    live.remove(&id);
                }
            }
        }
    }
    live.len()
}

/// A URL nothing listens on (a port bound and released).
fn dead_url() -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", listener.local_addr()?);
    drop(listener);
    Ok(url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_retried_until_the_engine_accepts_them() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    engine.refuse_results(true);
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.blocking_handler("echo", |ctx| Ok(json!({"run": ctx.run_id()})))
    })?;
    let client = engine_client()?;
    // Run 1's request says when the engine sent it; the others' do not.
    let sent_at = chrono::DateTime::from_timestamp_millis(1_795_000_000_002);
    for run_id in 1..=3 {
        let mut req = run_request(run_id, "echo");
        if run_id == 1 {
            req.sent_at = sent_at;
        }
        let resp = post(&client, &w.url, paths::RUNS, &req).await?;
        assert_eq!(resp.status.as_u16(), 202);
    }
    // The engine keeps refusing: results are retried and stay spooled.
    assert!(eventually(WAIT, || engine.log().refused_result_batches >= 3).await);
    assert!(engine.log().results.is_empty());
    assert_eq!(w.wrapper.pending_results(), 3);
    assert_eq!(spooled_results(spool.path()), 3);

    engine.refuse_results(false);
    assert!(eventually(WAIT, || engine.log().results.len() == 3).await);
    assert!(eventually(WAIT, || w.wrapper.pending_results() == 0).await);
    assert!(eventually(WAIT, || spooled_results(spool.path()) == 0).await);
    for run_id in 1..=3 {
        let delivered = engine.results_for(run_id);
        assert_eq!(delivered.len(), 1, "run {run_id} delivered once");
        assert_eq!(delivered[0].outcome, Outcome::Succeeded);
        assert_eq!(delivered[0].output, json!({"run": run_id}));
        // The send time comes back as it went out, through the spool too.
        let echoed = if run_id == 1 { sent_at } else { None };
        assert_eq!(delivered[0].sent_at, echoed, "run {run_id}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_finishing_together_travel_in_one_request() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.result_linger(Duration::from_millis(500))
            .blocking_handler("echo", |ctx| Ok(json!({"run": ctx.run_id()})))
    })?;
    let client = engine_client()?;
    for run_id in 31..=35 {
        let resp = post(&client, &w.url, paths::RUNS, &run_request(run_id, "echo")).await?;
        assert_eq!(resp.status.as_u16(), 202);
    }
    assert!(eventually(WAIT, || engine.log().results.len() == 5).await);
    // All five finished within the linger of the first: one request carried them.
    assert_eq!(engine.log().result_batches, vec![5]);
    assert!(eventually(WAIT, || spooled_results(spool.path()) == 0).await);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_wrapper_delivers_what_the_previous_process_had_not() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    engine.refuse_results(true);
    let spool = tempfile::tempdir()?;
    let calls = Arc::new(AtomicU32::new(0));
    let c1 = calls.clone();
    let first = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.flush_timeout(Duration::from_millis(300))
            .blocking_handler("work", move |_| {
                c1.fetch_add(1, Ordering::SeqCst);
                Ok(json!("done"))
            })
    })?;
    let client = engine_client()?;
    for run_id in [21, 22] {
        let resp = post(
            &client,
            &first.url,
            paths::RUNS,
            &run_request(run_id, "work"),
        )
        .await?;
        assert_eq!(resp.status.as_u16(), 202);
    }
    assert!(eventually(WAIT, || spooled_results(spool.path()) == 2).await);
    let report = first.wrapper.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.undelivered, 2);
    first.stop_server().await;
    assert!(engine.log().results.is_empty());

    // A new process on the same spool directory delivers them.
    engine.refuse_results(false);
    let c2 = calls.clone();
    let second = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.blocking_handler("work", move |_| {
            c2.fetch_add(1, Ordering::SeqCst);
            Ok(json!("done"))
        })
    })?;
    assert!(eventually(WAIT, || engine.log().results.len() == 2).await);
    assert_eq!(engine.results_for(21).len(), 1);
    assert_eq!(engine.results_for(22).len(), 1);
    assert!(eventually(WAIT, || spooled_results(spool.path()) == 0).await);
    // The restarted instance still recognises those run ids.
    let again = post(&client, &second.url, paths::RUNS, &run_request(21, "work")).await?;
    assert_eq!(again.status.as_u16(), 409);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_spooled_before_a_crash_are_delivered_by_the_next_process() -> anyhow::Result<()> {
    // The first process never reaches an engine that takes results, and never shuts down:
    // what a hard kill leaves behind is its spool directory as it is on disk.
    let unreachable_db = EngineStandIn::start()?;
    unreachable_db.refuse_results(true);
    let spool = tempfile::tempdir()?;
    let first = TestWrapper::start(&[&unreachable_db.url], spool.path(), |b| {
        b.blocking_handler("work", |ctx| Ok(json!({"run": ctx.run_id()})))
    })?;
    let client = engine_client()?;
    for run_id in [31, 32, 33] {
        let resp = post(
            &client,
            &first.url,
            paths::RUNS,
            &run_request(run_id, "work"),
        )
        .await?;
        assert_eq!(resp.status.as_u16(), 202);
    }
    assert!(eventually(WAIT, || spooled_results(spool.path()) == 3).await);
    let after_crash = tempfile::tempdir()?;
    for entry in std::fs::read_dir(spool.path())? {
        let path = entry?.path();
        if let Some(name) = path.file_name() {
            std::fs::copy(&path, after_crash.path().join(name))?;
        }
    }

    let engine = EngineStandIn::start()?;
    let _second = TestWrapper::start(&[&engine.url], after_crash.path(), |b| {
        b.blocking_handler("work", |_| Ok(json!(null)))
    })?;
    assert!(eventually(WAIT, || engine.log().results.len() == 3).await);
    for run_id in [31, 32, 33] {
        let delivered = engine.results_for(run_id);
        assert_eq!(delivered.len(), 1);
        assert_eq!(delivered[0].output, json!({"run": run_id}));
    }
    assert!(eventually(WAIT, || spooled_results(after_crash.path()) == 0).await);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_fail_over_to_the_next_engine_url() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let dead = dead_url()?;
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&dead, &engine.url], spool.path(), |b| {
        b.label("zone", "test")
            .blocking_handler("echo", |_| Ok(json!(1)))
    })?;
    assert!(eventually(WAIT, || w.wrapper.is_registered()).await);
    {
        let log = engine.log();
        let reg = &log.registers[0];
        assert_eq!(reg.base_url, w.url);
        assert_eq!(reg.labels.get("zone").map(String::as_str), Some("test"));
        assert_eq!(reg.handlers.len(), 1);
    }
    // The stand-in asks for a heartbeat every 200 ms.
    assert!(eventually(WAIT, || engine.log().heartbeats.len() >= 2).await);
    let client = engine_client()?;
    let resp = post(&client, &w.url, paths::RUNS, &run_request(5, "echo")).await?;
    assert_eq!(resp.status.as_u16(), 202);
    assert!(eventually(WAIT, || engine.results_for(5).len() == 1).await);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_move_to_the_next_engine_at_once_when_one_stops_answering() -> anyhow::Result<()>
{
    let paused = EngineStandIn::start()?;
    let other = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let _w = TestWrapper::start(&[&paused.url, &other.url], spool.path(), |b| {
        b.blocking_handler("echo", |_| Ok(json!(1)))
    })?;
    assert!(eventually(WAIT, || paused.log().heartbeats.len() >= 2).await);
    paused.hang_heartbeats(true);
    // The stand-ins ask for a heartbeat every 200 ms: the engine that stopped answering costs
    // one short timeout, not the client's 5 s request timeout, so heartbeats keep their pace.
    assert!(
        eventually(Duration::from_millis(1_500), || other
            .log()
            .heartbeats
            .len()
            >= 3)
        .await,
        "heartbeats reached the next engine within 1.5 s: {}",
        other.log().heartbeats.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_refuses_new_runs_and_lets_running_ones_finish() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.blocking_handler("steady", |ctx| {
            ctx.sleep(Duration::from_millis(800))?;
            Ok(json!("finished"))
        })
    })?;
    let client = engine_client()?;
    for run_id in [1, 2] {
        let resp = post(&client, &w.url, paths::RUNS, &run_request(run_id, "steady")).await?;
        assert_eq!(resp.status.as_u16(), 202);
    }
    let wrapper = w.wrapper.clone();
    let drain = tokio::spawn(async move { wrapper.shutdown(Duration::from_secs(20)).await });
    assert!(eventually(WAIT, || w.wrapper.health().state == InstanceState::Draining).await);

    let refused = post(&client, &w.url, paths::RUNS, &run_request(3, "steady")).await?;
    assert_eq!(refused.status.as_u16(), 503);
    let ack: RunAck = refused.json()?;
    assert_eq!(ack.status, AckStatus::Draining);

    let report = drain.await?;
    assert_eq!(report.running_at_start, 2);
    assert_eq!(report.cancelled, 0);
    assert_eq!(report.abandoned, 0);
    assert_eq!(report.undelivered, 0);
    assert!(report.deregistered);
    for run_id in [1, 2] {
        let results = engine.results_for(run_id);
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].outcome, Outcome::Succeeded);
    }
    assert!(engine.results_for(3).is_empty());
    assert_eq!(engine.log().deregisters.len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_still_going_after_the_grace_period_are_cancelled_and_reported() -> anyhow::Result<()>
{
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.blocking_handler("endless", |ctx| {
            ctx.sleep(Duration::from_secs(60))?;
            Ok(json!(null))
        })
    })?;
    let client = engine_client()?;
    let resp = post(&client, &w.url, paths::RUNS, &run_request(9, "endless")).await?;
    assert_eq!(resp.status.as_u16(), 202);
    let report = w.wrapper.shutdown(Duration::from_millis(200)).await;
    assert_eq!((report.cancelled, report.abandoned), (1, 0));
    assert_eq!(report.undelivered, 0);
    let results = engine.results_for(9);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].outcome, Outcome::Cancelled);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_cut_off_from_every_engine_stops_its_runs_before_it_can_be_declared_lost()
-> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    // Engines may declare the instance lost after 1 s of silence (heartbeats every 200 ms).
    engine.announce_executor_timeout(1_000);
    let spool = tempfile::tempdir()?;
    let stopped: Arc<std::sync::Mutex<Option<(CancelReason, std::time::Instant)>>> = Arc::default();
    let seen = stopped.clone();
    let w = TestWrapper::start(&[&engine.url], spool.path(), move |b| {
        b.blocking_handler("endless", move |ctx| {
            let outcome = ctx.sleep(Duration::from_secs(60));
            if let Some(reason) = ctx.cancel_reason() {
                *seen.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((reason, std::time::Instant::now()));
            }
            outcome.map(|()| json!(null))
        })
    })?;
    assert!(eventually(WAIT, || w.wrapper.is_registered()).await);
    let client = engine_client()?;
    let resp = post(&client, &w.url, paths::RUNS, &run_request(11, "endless")).await?;
    assert_eq!(resp.status.as_u16(), 202);
    // Still in touch: the run goes on.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(stopped.lock().unwrap_or_else(|e| e.into_inner()).is_none());
    // Every engine gone (a partition): the run stops before the engines' 1 s timeout ends.
    let cut = std::time::Instant::now();
    engine.stop().await;
    assert!(
        eventually(Duration::from_secs(3), || stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some())
        .await
    );
    let (reason, at) = stopped
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .expect("stopped");
    assert_eq!(reason, CancelReason::CutOff);
    assert!(
        at.duration_since(cut) < Duration::from_millis(1_000),
        "stopped {:?} after the cut",
        at.duration_since(cut)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_move_to_the_next_engine_when_one_stops_answering() -> anyhow::Result<()> {
    let paused = EngineStandIn::start()?;
    let other = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&paused.url, &other.url], spool.path(), |b| {
        b.blocking_handler("echo", |_| Ok(json!(1)))
    })?;
    assert!(eventually(WAIT, || w.wrapper.is_registered()).await);
    paused.hang_heartbeats(true);
    let client = engine_client()?;
    let resp = post(&client, &w.url, paths::RUNS, &run_request(12, "echo")).await?;
    assert_eq!(resp.status.as_u16(), 202);
    // The client's request timeout is 5 s; a delivery gives an engine 3 s before the next.
    assert!(
        eventually(Duration::from_millis(4_500), || other.results_for(12).len()
            == 1)
        .await,
        "the result reached the other engine within 4.5 s"
    );
    Ok(())
}

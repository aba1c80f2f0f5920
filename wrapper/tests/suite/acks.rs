//! Run acks: immediate 202, 409 for a known run id, 503 at capacity, 404, 400, batches,
//! cancellation and deadlines.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{EngineStandIn, TestWrapper, engine_client, eventually, post, run_request};
use mthpt_wrapper::HandlerError;
use mthpt_wrapper::protocol::{
    AckStatus, CancelRequest, CancelResponse, CancelStatus, HealthResponse, LocalRunState, Outcome,
    RunAck, RunBatchRequest, RunBatchResponse, paths,
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_second_handler_is_acked_within_50ms() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let started = Arc::new(AtomicU32::new(0));
    let (s1, s2) = (started.clone(), started.clone());
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.blocking_handler("slow-blocking", move |ctx| {
            s1.fetch_add(1, Ordering::SeqCst);
            ctx.sleep(Duration::from_secs(10))?;
            Ok(json!(null))
        })
        .async_handler("slow-async", move |ctx| {
            let s2 = s2.clone();
            async move {
                s2.fetch_add(1, Ordering::SeqCst);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(10)) => Ok(json!(null)),
                    _ = ctx.cancelled() => Err(HandlerError::cancelled()),
                }
            }
        })
    })?;
    let client = engine_client()?;
    // Warm the connection so that the measurement covers the request only.
    let _: HealthResponse = client.get_json(&w.url, paths::HEALTH).await?;

    for (run_id, handler) in [(1, "slow-blocking"), (2, "slow-async")] {
        let t0 = Instant::now();
        let resp = post(&client, &w.url, paths::RUNS, &run_request(run_id, handler)).await?;
        let elapsed = t0.elapsed();
        assert_eq!(resp.status.as_u16(), 202, "{handler}");
        let ack: RunAck = resp.json()?;
        assert_eq!(ack.status, AckStatus::Accepted);
        println!("{handler}: ack after {elapsed:?}");
        assert!(
            elapsed < Duration::from_millis(50),
            "{handler}: ack took {elapsed:?}"
        );
    }
    assert!(eventually(WAIT, || started.load(Ordering::SeqCst) == 2).await);
    assert_eq!(w.wrapper.running(), 2);
    // Finish quickly: cancel both and see them reported as cancelled.
    for run_id in [1, 2] {
        let resp = post(
            &client,
            &w.url,
            &paths::run_cancel(run_id),
            &CancelRequest {
                reason: Some("test over".into()),
            },
        )
        .await?;
        assert_eq!(resp.status.as_u16(), 200);
    }
    assert!(eventually(WAIT, || engine.log().results.len() == 2).await);
    assert!(
        engine
            .log()
            .results
            .iter()
            .all(|r| r.outcome == Outcome::Cancelled)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_run_id_twice_starts_handler_once() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.blocking_handler("count", move |ctx| {
            c.fetch_add(1, Ordering::SeqCst);
            ctx.sleep(Duration::from_millis(300))?;
            Ok(json!({"run": ctx.run_id()}))
        })
    })?;
    let client = engine_client()?;
    let first = post(&client, &w.url, paths::RUNS, &run_request(10, "count")).await?;
    assert_eq!(first.status.as_u16(), 202);
    let second = post(&client, &w.url, paths::RUNS, &run_request(10, "count")).await?;
    assert_eq!(second.status.as_u16(), 409);
    let ack: RunAck = second.json()?;
    assert_eq!(ack.status, AckStatus::AlreadyKnown);
    let state = ack.run.map(|r| r.state);
    assert_eq!(state, Some(LocalRunState::Running));

    // After it finished and was reported, the run id is still known.
    assert!(eventually(WAIT, || engine.results_for(10).len() == 1).await);
    assert!(
        eventually(WAIT, || w
            .wrapper
            .run_status(10)
            .is_some_and(|s| s.state == LocalRunState::Reported))
        .await
    );
    let third = post(&client, &w.url, paths::RUNS, &run_request(10, "count")).await?;
    assert_eq!(third.status.as_u16(), 409);
    let ack: RunAck = third.json()?;
    assert_eq!(ack.run.and_then(|r| r.outcome), Some(Outcome::Succeeded));

    // Twice in one batch: the second item is refused too.
    let batch = RunBatchRequest {
        runs: vec![run_request(11, "count"), run_request(11, "count")],
        instance_id: None,
    };
    let resp = post(&client, &w.url, paths::RUNS_BATCH, &batch).await?;
    assert_eq!(resp.status.as_u16(), 200);
    let acks: RunBatchResponse = resp.json()?;
    let statuses: Vec<_> = acks.acks.iter().map(|a| a.status).collect();
    assert_eq!(statuses, vec![AckStatus::Accepted, AckStatus::AlreadyKnown]);

    assert!(eventually(WAIT, || engine.results_for(11).len() == 1).await);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "one call per run id");
    Ok(())
}

/// A request held up in the network past its sender's hold on the run (a partition that
/// heals and delivers what it buffered) starts nothing: another node may have the run by then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_request_past_its_not_after_starts_nothing() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.blocking_handler("count", move |ctx| {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"run": ctx.run_id()}))
        })
    })?;
    let client = engine_client()?;
    let mut stale = run_request(20, "count");
    stale.not_after = Some(chrono::Utc::now() - chrono::Duration::milliseconds(1));
    let resp = post(&client, &w.url, paths::RUNS, &stale).await?;
    assert_eq!(resp.status.as_u16(), 410);
    let ack: RunAck = resp.json()?;
    assert_eq!(ack.status, AckStatus::Expired);
    assert!(
        ack.message
            .as_deref()
            .is_some_and(|m| m.contains("expired")),
        "{ack:?}"
    );
    assert!(w.wrapper.run_status(20).is_none(), "nothing recorded");

    // Within its hold it starts; a stale repeat of a known run is still `already_known`.
    let mut fresh = run_request(21, "count");
    fresh.not_after = Some(chrono::Utc::now() + chrono::Duration::seconds(5));
    let resp = post(&client, &w.url, paths::RUNS, &fresh).await?;
    assert_eq!(resp.status.as_u16(), 202);
    let mut repeat = fresh.clone();
    repeat.not_after = Some(chrono::Utc::now() - chrono::Duration::seconds(5));
    let resp = post(&client, &w.url, paths::RUNS, &repeat).await?;
    assert_eq!(resp.status.as_u16(), 409);
    assert!(eventually(WAIT, || engine.results_for(21).len() == 1).await);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the fresh request ran"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_capacity_answers_503_until_a_slot_frees() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.capacity(2).blocking_handler("hold", move |ctx| {
            c.fetch_add(1, Ordering::SeqCst);
            ctx.sleep(Duration::from_secs(30))?;
            Ok(json!(null))
        })
    })?;
    let client = engine_client()?;
    for run_id in [1, 2] {
        let resp = post(&client, &w.url, paths::RUNS, &run_request(run_id, "hold")).await?;
        assert_eq!(resp.status.as_u16(), 202);
    }
    let full = post(&client, &w.url, paths::RUNS, &run_request(3, "hold")).await?;
    assert_eq!(full.status.as_u16(), 503);
    let ack: RunAck = full.json()?;
    assert_eq!(ack.status, AckStatus::AtCapacity);
    assert!(
        w.wrapper.run_status(3).is_none(),
        "a refused run is not remembered"
    );

    let cancelled: CancelResponse = client
        .post_json(&w.url, &paths::run_cancel(1), &CancelRequest::default())
        .await?;
    assert_eq!(cancelled.status, CancelStatus::Cancelling);
    assert!(eventually(WAIT, || w.wrapper.running() == 1).await);
    let retried = post(&client, &w.url, paths::RUNS, &run_request(3, "hold")).await?;
    assert_eq!(retried.status.as_u16(), 202, "a freed slot takes the run");
    assert!(eventually(WAIT, || calls.load(Ordering::SeqCst) == 3).await);
    for run_id in [2, 3] {
        w.wrapper.cancel(run_id);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_handler_and_malformed_requests_are_refused() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.blocking_handler("known", |_| Ok(json!(null)))
    })?;
    let client = engine_client()?;

    let unknown = post(&client, &w.url, paths::RUNS, &run_request(1, "nope")).await?;
    assert_eq!(unknown.status.as_u16(), 404);
    let ack: RunAck = unknown.json()?;
    assert_eq!(ack.status, AckStatus::UnknownHandler);
    assert!(ack.message.is_some_and(|m| m.contains("nope")));

    let missing_fields = post(&client, &w.url, paths::RUNS, &json!({"run_id": 2})).await?;
    assert_eq!(missing_fields.status.as_u16(), 400);
    let ack: RunAck = missing_fields.json()?;
    assert_eq!((ack.run_id, ack.status), (Some(2), AckStatus::Malformed));

    let mut bad_shard = run_request(3, "known");
    bad_shard.shard_index = 4;
    bad_shard.shard_total = 4;
    let resp = post(&client, &w.url, paths::RUNS, &bad_shard).await?;
    assert_eq!(resp.status.as_u16(), 400);
    let ack: RunAck = resp.json()?;
    assert!(ack.message.is_some_and(|m| m.contains("shard_index")));

    let not_json = client
        .send_raw(
            reqwest::Method::POST,
            &w.url,
            paths::RUNS,
            b"run please".to_vec(),
        )
        .await?;
    assert_eq!(not_json.status.as_u16(), 400);
    assert!(w.wrapper.run_status(2).is_none() && w.wrapper.run_status(3).is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_start_gives_each_item_its_own_status() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.capacity(100)
            .blocking_handler("work", |ctx| Ok(json!(ctx.shard_index())))
    })?;
    let client = engine_client()?;
    let mut runs: Vec<serde_json::Value> = Vec::new();
    for i in 0..50 {
        let mut r = run_request(100 + i, "work");
        r.shard_index = u32::try_from(i)?;
        r.shard_total = 50;
        runs.push(serde_json::to_value(r)?);
    }
    runs.push(serde_json::to_value(run_request(200, "missing"))?);
    runs.push(json!({"run_id": 201, "handler": "work"}));
    runs.push(serde_json::to_value(run_request(100, "work"))?);
    let resp = post(&client, &w.url, paths::RUNS_BATCH, &json!({ "runs": runs })).await?;
    assert_eq!(resp.status.as_u16(), 200);
    let acks: RunBatchResponse = resp.json()?;
    assert_eq!(acks.acks.len(), 53);
    assert!(
        acks.acks[..50]
            .iter()
            .all(|a| a.status == AckStatus::Accepted)
    );
    let tail: Vec<_> = acks.acks[50..]
        .iter()
        .map(|a| (a.run_id, a.status))
        .collect();
    assert_eq!(
        tail,
        vec![
            (Some(200), AckStatus::UnknownHandler),
            (Some(201), AckStatus::Malformed),
            (Some(100), AckStatus::AlreadyKnown),
        ]
    );
    assert!(eventually(WAIT, || engine.log().results.len() == 50).await);

    let oversized = json!({ "runs": vec![json!({}); 1001] });
    let resp = post(&client, &w.url, paths::RUNS_BATCH, &oversized).await?;
    assert_eq!(resp.status.as_u16(), 400);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_deadline_reach_the_handler_context() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.async_handler("wait", |ctx| async move {
            ctx.log("waiting for cancellation");
            ctx.progress(0.25, "waiting");
            ctx.cancelled().await;
            Err(HandlerError::cancelled())
        })
        .blocking_handler("sleepy", |ctx| {
            ctx.sleep(Duration::from_secs(30))?;
            Ok(json!(null))
        })
        .blocking_handler("boom", |_| panic!("bad input"))
    })?;
    let client = engine_client()?;

    let resp = post(&client, &w.url, paths::RUNS, &run_request(1, "wait")).await?;
    assert_eq!(resp.status.as_u16(), 202);
    let cancel: CancelResponse = client
        .post_json(&w.url, &paths::run_cancel(1), &json!({}))
        .await?;
    assert_eq!(cancel.status, CancelStatus::Cancelling);
    assert!(eventually(WAIT, || engine.results_for(1).len() == 1).await);
    let result = engine.results_for(1).remove(0);
    assert_eq!(result.outcome, Outcome::Cancelled);
    assert_eq!(result.log_tail, vec!["waiting for cancellation"]);
    assert!(
        eventually(WAIT, || engine.log().progress.iter().any(|b| b
            .updates
            .iter()
            .any(|u| u.run_id == 1 && u.fraction == 0.25)))
        .await,
        "progress reaches the engine"
    );

    let mut timed = run_request(2, "sleepy");
    timed.deadline = Some(chrono::Utc::now() + chrono::Duration::milliseconds(300));
    let resp = post(&client, &w.url, paths::RUNS, &timed).await?;
    assert_eq!(resp.status.as_u16(), 202);
    assert!(eventually(WAIT, || engine.results_for(2).len() == 1).await);
    assert_eq!(engine.results_for(2)[0].outcome, Outcome::TimedOut);

    let resp = post(&client, &w.url, paths::RUNS, &run_request(3, "boom")).await?;
    assert_eq!(resp.status.as_u16(), 202);
    assert!(eventually(WAIT, || engine.results_for(3).len() == 1).await);
    let boom = engine.results_for(3).remove(0);
    assert_eq!(boom.outcome, Outcome::FailedFatal);
    assert!(boom.error.is_some_and(|e| e.contains("bad input")));

    let unknown = post(&client, &w.url, &paths::run_cancel(99), &json!({})).await?;
    assert_eq!(unknown.status.as_u16(), 404);
    let finished: CancelResponse = client
        .post_json(&w.url, &paths::run_cancel(1), &json!({}))
        .await?;
    assert_eq!(finished.status, CancelStatus::AlreadyFinished);
    Ok(())
}

/// A batch meant for another instance (one that ran on this address before a restart) is refused
/// whole with 409 `wrong_instance`, and nothing in it starts; the same batch for this instance
/// starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_meant_for_another_instance_starts_nothing() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let started = Arc::new(AtomicU32::new(0));
    let counter = started.clone();
    let w = TestWrapper::start(&[&engine.url], spool.path(), move |b| {
        b.async_handler("count", move |_ctx| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok(json!(null)) }
        })
    })?;
    let client = engine_client()?;
    let mut batch = RunBatchRequest {
        runs: vec![run_request(21, "count")],
        instance_id: Some("someone-else".to_owned()),
    };
    let resp = post(&client, &w.url, paths::RUNS_BATCH, &batch).await?;
    assert_eq!(resp.status.as_u16(), 409);
    let body: mthpt_wrapper::protocol::ErrorBody = resp.json()?;
    assert_eq!(
        body.error,
        mthpt_wrapper::protocol::ErrorCode::WrongInstance
    );
    assert!(body.message.contains("someone-else"), "{}", body.message);
    assert!(w.wrapper.run_status(21).is_none(), "nothing was accepted");
    assert_eq!(started.load(Ordering::SeqCst), 0);

    batch.instance_id = Some(w.wrapper.instance_id().to_owned());
    let resp = post(&client, &w.url, paths::RUNS_BATCH, &batch).await?;
    assert_eq!(resp.status.as_u16(), 200);
    let acks: RunBatchResponse = resp.json()?;
    assert_eq!(acks.acks[0].status, AckStatus::Accepted);
    assert!(eventually(WAIT, || started.load(Ordering::SeqCst) == 1).await);
    Ok(())
}

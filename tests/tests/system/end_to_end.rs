//! An engine node and real wrappers in one process, on PostgreSQL and on SQLite: runs travel
//! the whole way — claimed, fired, acknowledged, run, reported — and every policy that needs a
//! live executor shows its effect.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;
use mthpt_engine::alarm::{AlarmFilter, AlarmKind};
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::run::{NewRun, Run, RunFilter, RunState, TriggerKind};
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::{Scope, Store};
use mthpt_engine::task::{DependencyCondition, Routing, Task, TaskDefinition};
use mthpt_tests::{
    Tenancy, TestWrapper, create, quick_engine_config, runs, start_engine, tenancy, trigger,
    wait_until,
};
use mthpt_wrapper::HandlerError;
use serde_json::json;

mthpt_engine::on_both_backends!(
    scheduled_runs_reach_the_wrapper_and_their_results_come_back,
    chain_child_runs_after_its_parent_succeeds,
    failing_task_retries_then_raises_retries_exhausted,
    run_past_its_deadline_is_cancelled_on_the_wrapper,
    run_nobody_can_take_waits_in_line_and_raises_not_started,
    busy_instance_passes_the_run_to_the_next,
    broadcast_task_runs_once_on_every_instance,
    shutdown_hands_claimed_runs_back,
    run_an_executor_no_longer_holds_is_lost_and_recovered,
    more_runs_due_at_once_than_one_request_carries_all_reach_the_wrapper,
    results_count_only_from_the_instance_and_attempt_a_run_was_sent_to,
    run_sent_to_an_instance_that_went_silent_is_held_for_it_and_lost_with_it,
    results_holding_nul_characters_are_stored_with_replacement_characters,
    starts_of_runs_whose_results_this_node_wrote_are_not_looked_up,
);

const WAIT: Duration = Duration::from_secs(15);
/// How long 1,500 runs due at once may take to be claimed, sent and finished: a bound on a
/// failure, not a speed target (a debug build beside the other tests, SQLite one writer). On a
/// slow 2-core machine under the whole suite SQLite took 56 s and more than 60: three minutes.
const BULK_WAIT: Duration = Duration::from_secs(180);

fn now() -> i64 {
    SystemClock.now_ms()
}

async fn count(store: &dyn Store, t: &Tenancy, task: &Task, state: RunState) -> Result<usize> {
    Ok(runs(store, t, task)
        .await?
        .iter()
        .filter(|r| r.state == state)
        .count())
}

async fn alarms(store: &dyn Store, t: &Tenancy, kind: AlarmKind) -> Result<usize> {
    let mut tx = store.begin_read().await?;
    Ok(tx
        .list_alarms(
            Scope::Tenant(t.tenant.id),
            &AlarmFilter {
                kind: Some(kind),
                ..Default::default()
            },
        )
        .await?
        .len())
}

fn echo(b: mthpt_wrapper::WrapperBuilder) -> mthpt_wrapper::WrapperBuilder {
    b.async_handler(
        "echo",
        |ctx| async move { Ok(json!({ "run": ctx.run_id() })) },
    )
}

async fn scheduled_runs_reach_the_wrapper_and_their_results_come_back(
    store: Arc<dyn Store>,
) -> Result<()> {
    let t = tenancy(&*store, "acme", "billing").await?;
    let engine = start_engine(store.clone(), quick_engine_config("node-1")).await?;
    let w = TestWrapper::start(&t, &[engine.url()], echo)?;
    w.registered().await?;
    let def = TaskDefinition::new(
        t.app.id,
        "tick",
        "echo",
        ScheduleSpec::FixedRate {
            every_ms: 200,
            anchor_at: None,
        },
    );
    let task = create(&*store, &t, &def).await?;
    // A result can be recorded before its dispatch (a handler faster than that write): wait
    // for both, and look at the runs seen then.
    let seen = std::sync::Mutex::new(Vec::<Run>::new());
    wait_until(
        WAIT,
        "3 scheduled runs succeeded, dispatches recorded",
        || async {
            let done: Vec<Run> = runs(&*store, &t, &task)
                .await?
                .into_iter()
                .filter(|r| r.state == RunState::Succeeded)
                .collect();
            let ok = done.len() >= 3 && done.iter().all(|r| r.dispatched_at.is_some());
            *seen.lock().unwrap() = done;
            Ok(ok)
        },
    )
    .await?;
    for run in seen.into_inner().unwrap().iter() {
        assert!(run.executor_id.is_some(), "run {} has its executor", run.id);
        let dispatched = run.dispatched_at.expect("dispatch time recorded");
        assert!(dispatched >= run.scheduled_at, "never early");
        assert!(
            dispatched - run.scheduled_at < 1_000,
            "late by {} ms",
            dispatched - run.scheduled_at
        );
        assert!(run.finished_at.is_some());
        assert_eq!(run.output.as_ref().unwrap().0["run"], run.id.0);
    }
    // The schedule keeps its next occurrence materialised.
    assert!(
        count(&*store, &t, &task, RunState::Pending).await?
            + count(&*store, &t, &task, RunState::Claimed).await?
            >= 1
    );
    w.stop().await;
    engine.shutdown().await;
    Ok(())
}

/// The value of `mthpt_run_starts_total{write="<write>"}` in a node's metrics text (0 when
/// not there yet).
fn run_starts(metrics: &str, write: &str) -> f64 {
    let prefix = format!("mthpt_run_starts_total{{write=\"{write}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn starts_of_runs_whose_results_this_node_wrote_are_not_looked_up(
    store: Arc<dyn Store>,
) -> Result<()> {
    let t = tenancy(&*store, "acme", "billing").await?;
    let mut config = quick_engine_config("node-1");
    // The starts wait long enough for an instant handler's result to come first.
    config.lease_ms = 5_000;
    config.dispatch.start_write_delay_ms = 800;
    let engine = start_engine(store.clone(), config).await?;
    let w = TestWrapper::start(&t, &[engine.url()], echo)?;
    w.registered().await?;
    let every = ScheduleSpec::FixedRate {
        every_ms: 200,
        anchor_at: None,
    };
    let task = create(
        &*store,
        &t,
        &TaskDefinition::new(t.app.id, "tick", "echo", every),
    )
    .await?;
    let http = reqwest::Client::new();
    let metrics = format!("{}/metrics", engine.url());
    wait_until(
        WAIT,
        "a start answered by the result this node wrote",
        || async {
            let text = http.get(&metrics).send().await?.text().await?;
            Ok(run_starts(&text, "skipped") >= 2.0)
        },
    )
    .await?;
    w.stop().await;
    engine.shutdown().await;
    // Nothing was written for them, and nothing was missing: every run that succeeded has
    // the instance and the send time its result recorded.
    let done: Vec<Run> = runs(&*store, &t, &task)
        .await?
        .into_iter()
        .filter(|r| r.state == RunState::Succeeded)
        .collect();
    assert!(done.len() >= 2, "{done:?}");
    for run in &done {
        assert!(run.executor_id.is_some(), "run {} has its executor", run.id);
        assert!(
            run.dispatched_at.is_some(),
            "run {} has its send time",
            run.id
        );
        assert!(run.started_at.is_some(), "run {} has its start", run.id);
    }
    Ok(())
}

async fn chain_child_runs_after_its_parent_succeeds(store: Arc<dyn Store>) -> Result<()> {
    let t = tenancy(&*store, "acme", "billing").await?;
    let engine = start_engine(store.clone(), quick_engine_config("node-1")).await?;
    let w = TestWrapper::start(&t, &[engine.url()], echo)?;
    w.registered().await?;
    let parent = create(
        &*store,
        &t,
        &TaskDefinition::new(t.app.id, "extract", "echo", ScheduleSpec::Manual),
    )
    .await?;
    let child = create(
        &*store,
        &t,
        &TaskDefinition::new(t.app.id, "report", "echo", ScheduleSpec::Manual),
    )
    .await?;
    {
        let mut tx = store.begin().await?;
        tx.add_dependency(
            t.tenant.id,
            parent.id,
            child.id,
            DependencyCondition::OnSuccess,
            now(),
        )
        .await?;
        tx.commit().await?;
    }
    let root = trigger(&*store, &t, &parent).await?;
    wait_until(WAIT, "the child succeeded", || async {
        Ok(count(&*store, &t, &child, RunState::Succeeded).await? == 1)
    })
    .await?;
    let p = runs(&*store, &t, &parent).await?.remove(0);
    let c = runs(&*store, &t, &child).await?.remove(0);
    assert_eq!(c.parent_run_id, Some(root.id));
    assert!(
        c.scheduled_at >= p.finished_at.unwrap(),
        "the child starts after its parent finished"
    );
    w.stop().await;
    engine.shutdown().await;
    Ok(())
}

/// PostgreSQL stores no NUL character: a handler's output, log and error holding one are
/// stored with U+FFFD in its place instead of making the result undeliverable.
async fn results_holding_nul_characters_are_stored_with_replacement_characters(
    store: Arc<dyn Store>,
) -> Result<()> {
    let t = tenancy(&*store, "acme", "billing").await?;
    let engine = start_engine(store.clone(), quick_engine_config("node-1")).await?;
    let w = TestWrapper::start(&t, &[engine.url()], |b| {
        b.async_handler("nul-out", |ctx| async move {
            ctx.log("line\u{0}one");
            Ok(json!({ "text": "a\u{0}b", "k\u{0}": 1 }))
        })
        .async_handler("nul-err", |_| async {
            Err(HandlerError::fatal("bad\u{0}thing"))
        })
    })?;
    w.registered().await?;
    let ok = create(
        &*store,
        &t,
        &TaskDefinition::new(t.app.id, "out", "nul-out", ScheduleSpec::Manual),
    )
    .await?;
    let failing = create(
        &*store,
        &t,
        &TaskDefinition::new(t.app.id, "err", "nul-err", ScheduleSpec::Manual),
    )
    .await?;
    trigger(&*store, &t, &ok).await?;
    trigger(&*store, &t, &failing).await?;
    wait_until(WAIT, "both results recorded", || async {
        Ok(count(&*store, &t, &ok, RunState::Succeeded).await? == 1
            && count(&*store, &t, &failing, RunState::Failed).await? == 1)
    })
    .await?;
    let done = runs(&*store, &t, &ok).await?.remove(0);
    let output = &done.output.as_ref().expect("output stored").0;
    assert_eq!(output["text"], "a\u{FFFD}b");
    assert_eq!(output["k\u{FFFD}"], 1);
    assert!(
        done.log_tail.contains("line\u{FFFD}one"),
        "{:?}",
        done.log_tail
    );
    let failed = runs(&*store, &t, &failing).await?.remove(0);
    let error = failed.error.as_deref().unwrap_or_default();
    assert!(error.contains("bad\u{FFFD}thing"), "{error:?}");
    w.stop().await;
    engine.shutdown().await;
    Ok(())
}

async fn failing_task_retries_then_raises_retries_exhausted(store: Arc<dyn Store>) -> Result<()> {
    let t = tenancy(&*store, "acme", "billing").await?;
    let engine = start_engine(store.clone(), quick_engine_config("node-1")).await?;
    let w = TestWrapper::start(&t, &[engine.url()], |b| {
        b.async_handler("flaky", |_| async {
            Err(HandlerError::retryable("the upstream said no"))
        })
    })?;
    w.registered().await?;
    let mut def = TaskDefinition::new(t.app.id, "flaky", "flaky", ScheduleSpec::Manual);
    def.max_retries = 2;
    def.retry_backoff_ms = 50;
    def.retry_backoff_max_ms = 200;
    let task = create(&*store, &t, &def).await?;
    trigger(&*store, &t, &task).await?;
    wait_until(WAIT, "retries exhausted", || async {
        Ok(alarms(&*store, &t, AlarmKind::RetriesExhausted).await? == 1)
    })
    .await?;
    let all = runs(&*store, &t, &task).await?;
    assert_eq!(
        all.iter().map(|r| (r.attempt, r.state)).collect::<Vec<_>>(),
        vec![
            (1, RunState::Failed),
            (2, RunState::Failed),
            (3, RunState::Failed)
        ]
    );
    assert!(
        all[2]
            .error
            .as_deref()
            .unwrap()
            .contains("the upstream said no")
    );
    w.stop().await;
    engine.shutdown().await;
    Ok(())
}

async fn run_past_its_deadline_is_cancelled_on_the_wrapper(store: Arc<dyn Store>) -> Result<()> {
    let t = tenancy(&*store, "acme", "billing").await?;
    let engine = start_engine(store.clone(), quick_engine_config("node-1")).await?;
    let cancelled = Arc::new(AtomicUsize::new(0));
    let seen = cancelled.clone();
    let w = TestWrapper::start(&t, &[engine.url()], move |b| {
        b.async_handler("slow", move |ctx| {
            let seen = seen.clone();
            async move {
                tokio::select! {
                    _ = ctx.cancelled() => {
                        seen.fetch_add(1, Ordering::SeqCst);
                        Err(HandlerError::cancelled())
                    }
                    () = tokio::time::sleep(Duration::from_secs(30)) => Ok(json!("finished")),
                }
            }
        })
    })?;
    w.registered().await?;
    let mut def = TaskDefinition::new(t.app.id, "slow", "slow", ScheduleSpec::Manual);
    def.timeout_ms = Some(400);
    let task = create(&*store, &t, &def).await?;
    trigger(&*store, &t, &task).await?;
    wait_until(WAIT, "timed out and cancelled on the wrapper", || async {
        Ok(count(&*store, &t, &task, RunState::TimedOut).await? == 1
            && cancelled.load(Ordering::SeqCst) == 1)
    })
    .await?;
    assert_eq!(alarms(&*store, &t, AlarmKind::TimedOut).await?, 1);
    w.stop().await;
    engine.shutdown().await;
    Ok(())
}

async fn run_nobody_can_take_waits_in_line_and_raises_not_started(
    store: Arc<dyn Store>,
) -> Result<()> {
    let t = tenancy(&*store, "acme", "billing").await?;
    let engine = start_engine(store.clone(), quick_engine_config("node-1")).await?;
    let w = TestWrapper::start(&t, &[engine.url()], echo)?;
    w.registered().await?;
    let mut def = TaskDefinition::new(t.app.id, "orphan", "no-such-handler", ScheduleSpec::Manual);
    def.start_timeout_ms = Some(300);
    let task = create(&*store, &t, &def).await?;
    let run = trigger(&*store, &t, &task).await?;
    wait_until(WAIT, "not started alarm", || async {
        Ok(alarms(&*store, &t, AlarmKind::NotStarted).await? == 1)
    })
    .await?;
    let now_run = runs(&*store, &t, &task).await?.remove(0);
    assert_eq!(now_run.id, run.id);
    assert!(
        matches!(now_run.state, RunState::Pending | RunState::Claimed),
        "still waiting: {:?}",
        now_run.state
    );
    assert!(now_run.dispatch_attempts >= 1);
    assert_eq!(now_run.due_at, run.due_at, "it keeps its place in line");
    w.stop().await;
    engine.shutdown().await;
    Ok(())
}

async fn busy_instance_passes_the_run_to_the_next(store: Arc<dyn Store>) -> Result<()> {
    let t = tenancy(&*store, "acme", "billing").await?;
    let engine = start_engine(store.clone(), quick_engine_config("node-1")).await?;
    let hold = |b: mthpt_wrapper::WrapperBuilder| {
        b.capacity(1).async_handler("hold", |ctx| async move {
            let _ = tokio::time::timeout(Duration::from_secs(3), ctx.cancelled()).await;
            Ok(json!(null))
        })
    };
    let a = TestWrapper::start(&t, &[engine.url()], hold)?;
    a.registered().await?;
    let b = TestWrapper::start(&t, &[engine.url()], hold)?;
    b.registered().await?;
    let mut def = TaskDefinition::new(t.app.id, "hold", "hold", ScheduleSpec::Manual);
    def.routing = Routing::Failover;
    let task = create(&*store, &t, &def).await?;
    trigger(&*store, &t, &task).await?;
    wait_until(WAIT, "first run running", || async {
        Ok(count(&*store, &t, &task, RunState::Running).await? == 1)
    })
    .await?;
    trigger(&*store, &t, &task).await?;
    wait_until(WAIT, "second run running", || async {
        Ok(count(&*store, &t, &task, RunState::Running).await? == 2)
    })
    .await?;
    let all = runs(&*store, &t, &task).await?;
    assert_ne!(
        all[0].executor_id, all[1].executor_id,
        "the second run went to the free instance"
    );
    a.stop().await;
    b.stop().await;
    engine.shutdown().await;
    Ok(())
}

async fn broadcast_task_runs_once_on_every_instance(store: Arc<dyn Store>) -> Result<()> {
    let t = tenancy(&*store, "acme", "billing").await?;
    let engine = start_engine(store.clone(), quick_engine_config("node-1")).await?;
    let shards = |b: mthpt_wrapper::WrapperBuilder| {
        b.async_handler("fan", |ctx| async move {
            Ok(json!({ "shard": ctx.shard_index(), "of": ctx.shard_total() }))
        })
    };
    let ws = [
        TestWrapper::start(&t, &[engine.url()], shards)?,
        TestWrapper::start(&t, &[engine.url()], shards)?,
        TestWrapper::start(&t, &[engine.url()], shards)?,
    ];
    for w in &ws {
        w.registered().await?;
    }
    let mut def = TaskDefinition::new(t.app.id, "fan", "fan", ScheduleSpec::Manual);
    def.routing = Routing::Broadcast;
    let task = create(&*store, &t, &def).await?;
    trigger(&*store, &t, &task).await?;
    // A shard's result can be recorded before its dispatch (a handler faster than that write):
    // wait for both.
    wait_until(
        WAIT,
        "three shards succeeded on recorded executors",
        || async {
            let all = runs(&*store, &t, &task).await?;
            Ok(all
                .iter()
                .filter(|r| r.state == RunState::Succeeded && r.executor_id.is_some())
                .count()
                == 3)
        },
    )
    .await?;
    let all = runs(&*store, &t, &task).await?;
    let mut shard_ids: Vec<i32> = all.iter().map(|r| r.shard_index).collect();
    shard_ids.sort();
    assert_eq!(shard_ids, vec![0, 1, 2]);
    assert!(all.iter().all(|r| r.shard_total == 3));
    let mut executors: Vec<_> = all.iter().map(|r| r.executor_id).collect();
    executors.sort();
    executors.dedup();
    assert_eq!(
        executors.len(),
        3,
        "one shard per instance: {:?}",
        all.iter()
            .map(|r| (r.shard_index, r.executor_id, r.dispatch_attempts, r.fence))
            .collect::<Vec<_>>()
    );
    for w in ws {
        w.stop().await;
    }
    engine.shutdown().await;
    Ok(())
}

async fn shutdown_hands_claimed_runs_back(store: Arc<dyn Store>) -> Result<()> {
    let t = tenancy(&*store, "acme", "billing").await?;
    let mut config = quick_engine_config("node-1");
    config.horizon_ms = 5_000;
    config.lease_ms = 10_000;
    let engine = start_engine(store.clone(), config).await?;
    let def = TaskDefinition::new(
        t.app.id,
        "later",
        "echo",
        ScheduleSpec::Once { at: now() + 3_000 },
    );
    let task = create(&*store, &t, &def).await?;
    wait_until(WAIT, "claimed ahead of time", || async {
        Ok(count(&*store, &t, &task, RunState::Claimed).await? == 1)
    })
    .await?;
    let report = engine.shutdown().await;
    assert_eq!(report.released, 1);
    let run = runs(&*store, &t, &task).await?.remove(0);
    assert_eq!(
        (run.state, run.claim_owner.as_deref()),
        (RunState::Pending, None),
        "free for another node at once"
    );
    Ok(())
}

/// The executor heartbeats without runs the engine sent it a while ago (it restarted and forgot
/// them): those become `lost` and are recovered; runs it holds, and runs sent too recently to
/// judge, stay running.
async fn run_an_executor_no_longer_holds_is_lost_and_recovered(
    store: Arc<dyn Store>,
) -> Result<()> {
    use mthpt_engine::claimer::{ClaimConfig, Claimer};
    use mthpt_engine::run::ClaimedTransition;
    use mthpt_wrapper::client::SignedClient;
    use mthpt_wrapper::protocol::{HeartbeatRequest, HeartbeatResponse, Signer, paths};

    let t = tenancy(&*store, "acme", "billing").await?;
    // This node only answers the heartbeat: it schedules another group, so the test's own
    // claims below are not raced.
    let mut config = quick_engine_config("node-1");
    config.groups = vec!["elsewhere".into()];
    // The instance beats only when the test says: the node must not judge it silent while
    // the runs are set up (on a loaded machine that takes longer than the quick timeout).
    config.executor_timeout_ms = 60_000;
    let engine = start_engine(store.clone(), config).await?;
    let e = {
        let mut tx = store.begin().await?;
        let e = tx
            .register_executor(
                &mthpt_engine::app::ExecutorRegistration {
                    app_id: t.app.id,
                    instance_id: "fixed".into(),
                    base_url: "http://127.0.0.1:9".into(),
                    capacity: 4,
                    handlers: vec!["work".into()],
                    labels: Default::default(),
                },
                now(),
            )
            .await?;
        tx.commit().await?;
        e
    };
    let task = create(
        &*store,
        &t,
        &TaskDefinition::new(t.app.id, "work", "work", ScheduleSpec::Manual),
    )
    .await?;
    // Three runs running on the instance: two sent 10 s ago, one just now.
    let mut ids = Vec::new();
    for (i, sent_ago) in [10_000, 10_000, 0].into_iter().enumerate() {
        let run = trigger(&*store, &t, &task).await?;
        let claimer = Claimer::new(
            store.clone(),
            ClaimConfig {
                node: format!("test-{i}"),
                groups: vec!["default".into()],
                horizon_ms: 0,
                lease_ms: 60_000,
                batch: 1,
            },
        );
        let fire = claimer
            .run_once(now())
            .await?
            .fires
            .into_iter()
            .find(|f| f.run.id == run.id)
            .expect("claimed");
        let mut tx = store.begin().await?;
        tx.transition_claimed(
            &fire.run.fence().expect("fence"),
            &ClaimedTransition::Started {
                executor_id: e.id,
                dispatched_at: now() - sent_ago,
                deadline_at: None,
            },
            now(),
        )
        .await?;
        tx.commit().await?;
        ids.push(run.id);
    }
    let client = SignedClient::new(
        Signer::new(t.key.clone(), t.secret.clone().into_bytes()),
        Duration::from_secs(2),
        Duration::from_secs(5),
    )?;
    // A heartbeat built 20 s ago (it waited in a paused node's socket) judges nothing: its
    // list predates the runs sent since.
    let stale = HeartbeatRequest {
        instance_id: "fixed".into(),
        capacity: 4,
        running: 0,
        draining: false,
        running_runs: Vec::new(),
        sent_at: chrono::Utc::now() - chrono::Duration::seconds(20),
    };
    let answer: HeartbeatResponse = client
        .post_json(&engine.url(), paths::HEARTBEAT, &stale)
        .await?;
    assert!(answer.known);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        runs(&*store, &t, &task)
            .await?
            .iter()
            .all(|r| r.state == RunState::Running),
        "a stale heartbeat declared runs lost"
    );
    let beat = HeartbeatRequest {
        instance_id: "fixed".into(),
        capacity: 4,
        running: 1,
        draining: false,
        running_runs: vec![ids[0].0],
        sent_at: chrono::Utc::now(),
    };
    let answer: HeartbeatResponse = client
        .post_json(&engine.url(), paths::HEARTBEAT, &beat)
        .await?;
    assert!(answer.known);
    // The heartbeat is answered first; the runs it no longer lists are settled just after.
    wait_until(WAIT, "the forgotten run is lost", || async {
        let all = runs(&*store, &t, &task).await?;
        Ok(all
            .iter()
            .any(|r| r.id == ids[1] && r.state == RunState::Lost))
    })
    .await?;
    let all = runs(&*store, &t, &task).await?;
    let state = |id| all.iter().find(|r| r.id == id).map(|r| r.state);
    assert_eq!(
        state(ids[0]),
        Some(RunState::Running),
        "held by the instance"
    );
    assert_eq!(
        state(ids[1]),
        Some(RunState::Lost),
        "forgotten by the instance"
    );
    assert_eq!(
        state(ids[2]),
        Some(RunState::Running),
        "sent too recently to judge"
    );
    let recovery = all
        .iter()
        .find(|r| r.trigger_kind == mthpt_engine::run::TriggerKind::Recovery)
        .expect("a recovery run");
    assert_eq!(
        (recovery.attempt, recovery.scheduled_at),
        (2, all.iter().find(|r| r.id == ids[1]).unwrap().scheduled_at)
    );
    engine.shutdown().await;
    Ok(())
}

async fn more_runs_due_at_once_than_one_request_carries_all_reach_the_wrapper(
    store: Arc<dyn Store>,
) -> Result<()> {
    let t = tenancy(&*store, "acme", "billing").await?;
    let mut config = quick_engine_config("node-1");
    config.claim_batch = 2_000;
    let engine = start_engine(store.clone(), config).await?;
    let w = TestWrapper::start(&t, &[engine.url()], |b| echo(b).capacity(5_000))?;
    w.registered().await?;
    let task = create(
        &*store,
        &t,
        &TaskDefinition::new(t.app.id, "bulk", "echo", ScheduleSpec::Manual),
    )
    .await?;
    let at = now();
    let due: Vec<NewRun> = (0..1_500)
        .map(|i| {
            let mut r =
                NewRun::occurrence(&task, &t.tenant.node_group, at + i, TriggerKind::Manual);
            r.due_at = at;
            r
        })
        .collect();
    let mut tx = store.begin().await?;
    tx.insert_runs(&due, at).await?;
    tx.commit().await?;
    let left = |state| {
        let store = store.clone();
        let tenant = t.tenant.id;
        async move {
            let mut tx = store.begin_read().await?;
            let filter = RunFilter {
                task_id: Some(task.id),
                state: Some(state),
                limit: Some(1_000),
                ..Default::default()
            };
            anyhow::Ok(tx.list_runs(tenant, &filter).await?.len())
        }
    };
    wait_until(BULK_WAIT, "all 1,500 runs finished", || async {
        Ok(left(RunState::Pending).await?
            + left(RunState::Claimed).await?
            + left(RunState::Running).await?
            == 0)
    })
    .await?;
    assert_eq!(left(RunState::Failed).await?, 0);
    assert_eq!(
        left(RunState::Succeeded).await?,
        1_000,
        "a full page of successes"
    );
    w.stop().await;
    engine.shutdown().await;
    Ok(())
}

/// A signed result is recorded only for a run dispatched to the reporting instance in the
/// attempt it names; anything else is refused per item with the reason, so the wrapper drops
/// it; a repeat of a recorded result stays a harmless duplicate.
async fn results_count_only_from_the_instance_and_attempt_a_run_was_sent_to(
    store: Arc<dyn Store>,
) -> Result<()> {
    use mthpt_engine::app::ExecutorRegistration;
    use mthpt_engine::claimer::{ClaimConfig, Claimer};
    use mthpt_wrapper::client::SignedClient;
    use mthpt_wrapper::protocol::{
        ItemStatus, Outcome, ResultBatch, ResultBatchResponse, RunResult, Signer, paths,
    };

    let t = tenancy(&*store, "acme", "billing").await?;
    let mut config = quick_engine_config("node-1");
    config.groups = vec!["elsewhere".into()];
    // The instances never beat: the node must not judge them silent before they report.
    config.executor_timeout_ms = 60_000;
    let engine = start_engine(store.clone(), config).await?;
    let mut instances = Vec::new();
    for name in ["right", "other"] {
        let mut tx = store.begin().await?;
        let reg = ExecutorRegistration {
            app_id: t.app.id,
            instance_id: name.into(),
            base_url: "http://127.0.0.1:9".into(),
            capacity: 4,
            handlers: vec!["work".into()],
            labels: Default::default(),
        };
        instances.push(tx.register_executor(&reg, now()).await?);
        tx.commit().await?;
    }
    let task = create(
        &*store,
        &t,
        &TaskDefinition::new(t.app.id, "work", "work", ScheduleSpec::Manual),
    )
    .await?;
    // One run sent to "right"; one never dispatched (due in an hour).
    let sent = trigger(&*store, &t, &task).await?;
    let claimer = Claimer::new(
        store.clone(),
        ClaimConfig {
            node: "test".into(),
            groups: vec!["default".into()],
            horizon_ms: 0,
            lease_ms: 60_000,
            batch: 10,
        },
    );
    let fire = claimer
        .run_once(now())
        .await?
        .fires
        .into_iter()
        .find(|f| f.run.id == sent.id)
        .expect("claimed");
    {
        let mut tx = store.begin().await?;
        let recorded = tx
            .record_dispatch_intent(
                &[(fire.run.fence().expect("fence"), instances[0].id)],
                now(),
            )
            .await?;
        assert_eq!(recorded, vec![sent.id]);
        tx.commit().await?;
    }
    let never = {
        let mut tx = store.begin().await?;
        let mut new = NewRun::occurrence(&task, "default", now() + 3_600_000, TriggerKind::Manual);
        new.triggered_by = Some("test".into());
        let run = tx.insert_run(&new, now()).await?.expect("inserted");
        tx.commit().await?;
        run
    };
    let client = SignedClient::new(
        Signer::new(t.key.clone(), t.secret.clone().into_bytes()),
        Duration::from_secs(2),
        Duration::from_secs(5),
    )?;
    let result = |run_id: i64, attempt: u32| RunResult {
        run_id,
        attempt,
        handler: "work".into(),
        outcome: Outcome::Succeeded,
        output: json!({"forged": run_id == never.id.0}),
        error: None,
        started_at: chrono::Utc::now(),
        finished_at: chrono::Utc::now(),
        log_tail: Vec::new(),
        instance_id: None,
        sent_at: None,
    };
    let send = |instance: &str, results: Vec<RunResult>| {
        let body = ResultBatch {
            instance_id: instance.into(),
            results,
        };
        let client = client.clone();
        let url = engine.url();
        async move {
            client
                .post_json::<_, ResultBatchResponse>(&url, paths::RESULTS, &body)
                .await
        }
    };
    let verdict = |r: &ResultBatchResponse| {
        r.items
            .iter()
            .map(|i| (i.status, i.message.clone().unwrap_or_default()))
            .collect::<Vec<_>>()
    };

    let refused = send("right", vec![result(never.id.0, 1), result(sent.id.0, 2)]).await?;
    let v = verdict(&refused);
    assert_eq!(v[0].0, ItemStatus::Rejected);
    assert!(v[0].1.contains("never dispatched"), "{v:?}");
    assert_eq!(v[1].0, ItemStatus::Rejected);
    assert!(
        v[1].1.contains("attempt 1; the result is for attempt 2"),
        "{v:?}"
    );
    let v = verdict(&send("other", vec![result(sent.id.0, 1)]).await?);
    assert_eq!(v[0].0, ItemStatus::Rejected);
    assert!(v[0].1.contains("another executor instance"), "{v:?}");
    let v = verdict(&send("ghost", vec![result(sent.id.0, 1)]).await?);
    assert_eq!(v[0].0, ItemStatus::Rejected);
    assert!(v[0].1.contains("not registered"), "{v:?}");
    let all = runs(&*store, &t, &task).await?;
    let state = |id| all.iter().find(|r| r.id == id).map(|r| r.state);
    assert_eq!(state(never.id), Some(RunState::Pending), "nothing forged");
    assert_eq!(state(sent.id), Some(RunState::Claimed));

    let v = verdict(&send("right", vec![result(sent.id.0, 1)]).await?);
    assert_eq!(v[0].0, ItemStatus::Accepted, "{v:?}");
    let v = verdict(&send("right", vec![result(sent.id.0, 1)]).await?);
    assert_eq!(v[0].0, ItemStatus::Duplicate, "{v:?}");
    // A result replayed after a restart names the instance it ran on.
    let mut replayed = result(sent.id.0, 1);
    replayed.instance_id = Some("right".into());
    let v = verdict(&send("right-after-restart", vec![replayed]).await?);
    assert_eq!(v[0].0, ItemStatus::Duplicate, "{v:?}");
    let all = runs(&*store, &t, &task).await?;
    assert_eq!(
        all.iter().find(|r| r.id == sent.id).map(|r| r.state),
        Some(RunState::Succeeded)
    );
    engine.shutdown().await;
    Ok(())
}

/// A run last sent to an instance that is no longer live is never sent elsewhere under the same
/// id (that instance may hold it, and its result must still find the run): while the instance
/// may come back (up but silent) the run is held for it; once the instance is lost the run ends
/// `lost` and one recovery run, under a new id, takes its place.
async fn run_sent_to_an_instance_that_went_silent_is_held_for_it_and_lost_with_it(
    store: Arc<dyn Store>,
) -> Result<()> {
    use mthpt_engine::app::{ExecutorRegistration, ExecutorState};
    use mthpt_engine::claimer::{ClaimConfig, Claimer};
    use mthpt_engine::directory::Directory;
    use mthpt_engine::dispatcher::{DispatchConfig, Dispatcher};

    let t = tenancy(&*store, "acme", "billing").await?;
    let start = now();
    let mut tx = store.begin().await?;
    let reg = ExecutorRegistration {
        app_id: t.app.id,
        instance_id: "cut-off".into(),
        base_url: "http://127.0.0.1:9".into(),
        capacity: 4,
        handlers: vec!["work".into()],
        labels: Default::default(),
    };
    // Registered, then silent for longer than the executor timeout (not live any more).
    let silent = tx.register_executor(&reg, start - 60_000).await?;
    tx.commit().await?;
    let task = create(
        &*store,
        &t,
        &TaskDefinition::new(t.app.id, "work", "work", ScheduleSpec::Manual),
    )
    .await?;
    let run = trigger(&*store, &t, &task).await?;
    let claimer = Claimer::new(
        store.clone(),
        ClaimConfig {
            node: "node-a".into(),
            groups: vec!["default".into()],
            horizon_ms: 0,
            lease_ms: 60_000,
            batch: 10,
        },
    );
    let claim = || async {
        let fires = claimer.run_once(now()).await?.fires;
        anyhow::Ok(fires)
    };
    let fire = claim().await?.remove(0);
    let mut tx = store.begin().await?;
    tx.record_dispatch_intent(&[(fire.run.fence().expect("fence"), silent.id)], now())
        .await?;
    tx.commit().await?;
    // Taken over (here: the same claim, read again) with its intent on it.
    let fire = mthpt_engine::claimer::Fire::new(
        {
            let mut tx = store.begin_read().await?;
            tx.get_run(t.tenant.id, run.id).await?
        },
        fire.task,
    );
    assert_eq!(fire.run.executor_id, Some(silent.id));
    let directory = Arc::new(Directory::new(
        store.clone(),
        reqwest::Client::new(),
        0,
        4_000,
    ));
    let dispatcher = Dispatcher::new(
        store.clone(),
        Arc::new(SystemClock),
        directory,
        DispatchConfig::default(),
    );

    let report = dispatcher.dispatch(vec![fire]).await?;
    assert_eq!(
        report.held,
        vec![run.id],
        "held for the silent instance: {report:?}"
    );
    assert_eq!(report.requests, 0, "sent nowhere");
    let all = runs(&*store, &t, &task).await?;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].state, RunState::Pending);
    assert_eq!(all[0].executor_id, Some(silent.id), "still held for it");

    let mut tx = store.begin().await?;
    tx.set_executor_state(t.app.id, "cut-off", ExecutorState::Lost, now())
        .await?;
    tx.commit().await?;
    let fire = claim().await?.remove(0);
    let report = dispatcher.dispatch(vec![fire]).await?;
    assert_eq!(report.lost, vec![run.id], "{report:?}");
    assert_eq!(report.requests, 0, "sent nowhere under its id");
    let all = runs(&*store, &t, &task).await?;
    let lost = all.iter().find(|r| r.id == run.id).expect("the run");
    assert_eq!(lost.state, RunState::Lost);
    let recovery: Vec<&Run> = all.iter().filter(|r| r.id != run.id).collect();
    assert_eq!(recovery.len(), 1, "one recovery run: {all:?}");
    assert_eq!(recovery[0].trigger_kind, TriggerKind::Recovery);
    assert_eq!(recovery[0].attempt, 2);
    Ok(())
}

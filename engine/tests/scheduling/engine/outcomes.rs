use std::sync::Arc;

use mthpt_engine::alarm::{Alarm, AlarmFilter, AlarmKind};
use mthpt_engine::outcome::{Finish, Finished, finish_run};
use mthpt_engine::run::{Run, RunCompletion, RunFilter, RunState, TriggerKind};
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::{Scope, Store};
use mthpt_engine::task::{DependencyCondition, Task, TaskDefinition};

use crate::in_tx;
use crate::support::fixtures::*;

fn ending(state: RunState, retryable: bool, at: i64) -> Finish {
    Finish {
        completion: RunCompletion {
            state,
            output: None,
            error: (state != RunState::Succeeded).then(|| format!("it {state}")),
            log: None,
            started_at: None,
            finished_at: at,
            reported_by: None,
        },
        retryable,
    }
}

async fn end(store: &dyn Store, run: &Run, finish: &Finish) -> Finished {
    in_tx!(store, |tx| finish_run(
        tx.as_mut(),
        run.id,
        None,
        finish,
        0.0
    )
    .await
    .unwrap())
}

fn applied(f: Finished) -> (Run, mthpt_engine::outcome::Effects) {
    match f {
        Finished::Applied { run, effects, .. } => (run, *effects),
        Finished::AlreadyFinal(run) => panic!("run {} was already final", run.id),
    }
}

async fn alarms(store: &dyn Store, w: &World) -> Vec<Alarm> {
    read(store)
        .await
        .list_alarms(Scope::Tenant(w.tenant.id), &AlarmFilter::default())
        .await
        .unwrap()
}

async fn runs_of(store: &dyn Store, w: &World, task: &Task) -> Vec<Run> {
    let mut runs = read(store)
        .await
        .list_runs(
            w.tenant.id,
            &RunFilter {
                task_id: Some(task.id),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    runs.sort_by_key(|r| r.id);
    runs
}

async fn chain(
    store: &dyn Store,
    w: &World,
    parent: &Task,
    child: &str,
    condition: DependencyCondition,
) -> Task {
    let (child, _) = create_task(store, w, &manual(w.app.id, child)).await;
    in_tx!(store, |tx| tx
        .add_dependency(w.tenant.id, parent.id, child.id, condition, T0)
        .await
        .unwrap());
    child
}

pub async fn success_starts_the_children_its_condition_admits(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (parent, _) = create_task(store, &w, &manual(w.app.id, "parent")).await;
    let on_ok = chain(store, &w, &parent, "on-ok", DependencyCondition::OnSuccess).await;
    let on_fail = chain(
        store,
        &w,
        &parent,
        "on-fail",
        DependencyCondition::OnFailure,
    )
    .await;
    let always = chain(store, &w, &parent, "always", DependencyCondition::Always).await;
    let run = insert(store, &occurrence(&w, &parent, T0)).await;
    let (done, effects) =
        applied(end(store, &run, &ending(RunState::Succeeded, true, T0 + SECOND)).await);
    assert_eq!(done.state, RunState::Succeeded);
    let mut started: Vec<_> = effects.children.iter().map(|r| r.task_id).collect();
    started.sort();
    assert_eq!(started, vec![on_ok.id, always.id]);
    for child in &effects.children {
        assert_eq!(child.trigger_kind, TriggerKind::Chain);
        assert_eq!(
            (child.parent_run_id, child.chain_root_id),
            (Some(run.id), Some(run.id))
        );
        assert_eq!(child.due_at, T0 + SECOND);
        assert_eq!(child.state, RunState::Pending);
    }
    assert!(runs_of(store, &w, &on_fail).await.is_empty());
    assert!(effects.alarms.is_empty());
}

pub async fn retryable_failure_retries_with_backoff_then_raises_retries_exhausted(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let w = world(store, "acme").await;
    let mut def = manual(w.app.id, "flaky");
    def.max_retries = 2;
    def.retry_backoff_ms = 1_000;
    def.retry_backoff_max_ms = 10_000;
    let (task, _) = create_task(store, &w, &def).await;
    let on_fail = chain(store, &w, &task, "cleanup", DependencyCondition::OnFailure).await;
    let mut run = insert(store, &occurrence(&w, &task, T0)).await;
    let mut now = T0;
    // Attempts 1 and 2 fail and are retried after 0.5 s and 1 s (jitter 0: half the delay).
    for (attempt, delay) in [(1, 500), (2, 1_000)] {
        now += SECOND;
        let (failed, effects) =
            applied(end(store, &run, &ending(RunState::Failed, true, now)).await);
        assert_eq!((failed.attempt, failed.state), (attempt, RunState::Failed));
        let retry = effects.next_attempt.expect("a retry");
        assert_eq!(
            (retry.attempt, retry.trigger_kind),
            (attempt + 1, TriggerKind::Retry)
        );
        assert_eq!((retry.scheduled_at, retry.due_at), (T0, now + delay));
        assert!(
            effects.children.is_empty(),
            "children wait for the last attempt"
        );
        assert!(effects.alarms.is_empty());
        run = retry;
    }
    now += SECOND;
    let (last, effects) = applied(end(store, &run, &ending(RunState::Failed, true, now)).await);
    assert_eq!(last.attempt, 3);
    assert!(effects.next_attempt.is_none());
    assert_eq!(effects.alarms.len(), 1);
    assert_eq!(effects.alarms[0].kind, AlarmKind::RetriesExhausted);
    assert!(
        effects.alarms[0].message.contains("3 attempt"),
        "{}",
        effects.alarms[0].message
    );
    assert_eq!(
        effects
            .children
            .iter()
            .map(|r| r.task_id)
            .collect::<Vec<_>>(),
        vec![on_fail.id]
    );
}

pub async fn fatal_failure_does_not_retry_and_raises_run_failed(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let mut def = manual(w.app.id, "strict");
    def.max_retries = 5;
    let (task, _) = create_task(store, &w, &def).await;
    let run = insert(store, &occurrence(&w, &task, T0)).await;
    let (_, effects) =
        applied(end(store, &run, &ending(RunState::Failed, false, T0 + SECOND)).await);
    assert!(effects.next_attempt.is_none());
    assert_eq!(
        effects.alarms.iter().map(|a| a.kind).collect::<Vec<_>>(),
        vec![AlarmKind::RunFailed]
    );
    assert_eq!(runs_of(store, &w, &task).await.len(), 1);
}

pub async fn timeout_retries_and_raises_timed_out(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let mut def = manual(w.app.id, "slow");
    def.max_retries = 1;
    let (task, _) = create_task(store, &w, &def).await;
    let run = insert(store, &occurrence(&w, &task, T0)).await;
    let (_, effects) =
        applied(end(store, &run, &ending(RunState::TimedOut, true, T0 + SECOND)).await);
    let retry = effects.next_attempt.expect("timeouts retry");
    assert_eq!(
        effects.alarms.iter().map(|a| a.kind).collect::<Vec<_>>(),
        vec![AlarmKind::TimedOut]
    );
    let (_, effects) = applied(
        end(
            store,
            &retry,
            &ending(RunState::TimedOut, true, T0 + 9 * SECOND),
        )
        .await,
    );
    assert!(effects.next_attempt.is_none());
    let mut kinds: Vec<_> = effects.alarms.iter().map(|a| a.kind.as_str()).collect();
    kinds.sort();
    assert_eq!(kinds, vec!["retries_exhausted", "timed_out"]);
    // The second timeout repeats the first (still open): counted, not a new alarm.
    let mut listed: Vec<_> = alarms(store, &w)
        .await
        .iter()
        .map(|a| (a.kind.as_str(), a.count))
        .collect();
    listed.sort();
    assert_eq!(listed, vec![("retries_exhausted", 1), ("timed_out", 2)]);
}

pub async fn success_resolves_the_open_failure_alarms_of_its_task(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "flaky")).await;
    let (other, _) = create_task(store, &w, &manual(w.app.id, "steady")).await;
    let failing = insert(store, &occurrence(&w, &task, T0)).await;
    let (_, effects) = applied(
        end(
            store,
            &failing,
            &ending(RunState::Failed, false, T0 + SECOND),
        )
        .await,
    );
    let raised = effects.alarms[0].clone();
    let elsewhere = insert(store, &occurrence(&w, &other, T0)).await;
    applied(
        end(
            store,
            &elsewhere,
            &ending(RunState::Failed, false, T0 + SECOND),
        )
        .await,
    );

    // Another failure of the same task while the alarm is open: counted on it.
    let again = insert(store, &occurrence(&w, &task, T0 + MINUTE)).await;
    let (_, effects) = applied(
        end(
            store,
            &again,
            &ending(RunState::Failed, false, T0 + MINUTE + SECOND),
        )
        .await,
    );
    assert_eq!(
        (effects.alarms[0].id, effects.alarms[0].count),
        (raised.id, 2)
    );

    // The next success resolves it, in the same transaction; the other task's stays open.
    let ok = insert(store, &occurrence(&w, &task, T0 + 2 * MINUTE)).await;
    let (_, effects) = applied(
        end(
            store,
            &ok,
            &ending(RunState::Succeeded, false, T0 + 2 * MINUTE + SECOND),
        )
        .await,
    );
    assert_eq!(
        effects.resolved.iter().map(|a| a.id).collect::<Vec<_>>(),
        vec![raised.id]
    );
    let listed = alarms(store, &w).await;
    let mine = listed.iter().find(|a| a.id == raised.id).unwrap();
    assert_eq!(mine.resolved_at, Some(T0 + 2 * MINUTE + SECOND));
    assert!(!mine.is_open());
    let theirs = listed.iter().find(|a| a.task_id == Some(other.id)).unwrap();
    assert!(theirs.is_open());

    // Its events: raised, repeated, resolved — in that order.
    let events: Vec<_> = read(store)
        .await
        .list_unpublished_alarm_events(100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.alarm_id == raised.id)
        .map(|e| e.event.as_str())
        .collect();
    assert_eq!(events, vec!["raised", "repeated", "resolved"]);
}

pub async fn lost_run_is_recovered_while_attempts_remain(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "fragile")).await;
    let run = insert(store, &occurrence(&w, &task, T0)).await;
    let (_, effects) = applied(end(store, &run, &ending(RunState::Lost, true, T0 + SECOND)).await);
    let recovery = effects.next_attempt.expect("recovered");
    assert_eq!(
        (recovery.trigger_kind, recovery.attempt, recovery.due_at),
        (TriggerKind::Recovery, 2, T0 + SECOND)
    );
    // Lost again: no attempts left (max_retries 0 allows one recovery).
    let (_, effects) = applied(
        end(
            store,
            &recovery,
            &ending(RunState::Lost, true, T0 + 2 * SECOND),
        )
        .await,
    );
    assert!(effects.next_attempt.is_none());
    assert_eq!(effects.alarms[0].kind, AlarmKind::RetriesExhausted);

    let mut def = manual(w.app.id, "no-recovery");
    def.recover_lost = false;
    let (task, _) = create_task(store, &w, &def).await;
    let run = insert(store, &occurrence(&w, &task, T0)).await;
    let (_, effects) = applied(end(store, &run, &ending(RunState::Lost, true, T0 + SECOND)).await);
    assert!(effects.next_attempt.is_none());
    assert_eq!(effects.alarms[0].kind, AlarmKind::RunFailed);
}

pub async fn repeated_result_changes_nothing(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "parent")).await;
    let child = chain(store, &w, &task, "child", DependencyCondition::Always).await;
    let run = insert(store, &occurrence(&w, &task, T0)).await;
    applied(end(store, &run, &ending(RunState::Succeeded, true, T0 + SECOND)).await);
    for state in [RunState::Succeeded, RunState::Failed] {
        match end(store, &run, &ending(state, true, T0 + 2 * SECOND)).await {
            Finished::AlreadyFinal(r) => assert_eq!(r.state, RunState::Succeeded),
            other => panic!("expected already final, got {other:?}"),
        }
    }
    assert_eq!(
        runs_of(store, &w, &child).await.len(),
        1,
        "one child, not three"
    );
    assert_eq!(runs_of(store, &w, &task).await.len(), 1, "no retry");
}

/// extract → (left, right) → load: load runs once, after both branches finished in the chain.
pub async fn join_child_runs_once_after_all_parents_in_the_chain(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (extract, _) = create_task(store, &w, &manual(w.app.id, "extract")).await;
    let left = chain(store, &w, &extract, "left", DependencyCondition::OnSuccess).await;
    let right = chain(store, &w, &extract, "right", DependencyCondition::OnSuccess).await;
    let (load, _) = create_task(store, &w, &manual(w.app.id, "load")).await;
    // A parent outside the chain (never reached from extract) does not block the join.
    let (outsider, _) = create_task(store, &w, &manual(w.app.id, "outsider")).await;
    in_tx!(store, |tx| {
        tx.add_dependency(
            w.tenant.id,
            left.id,
            load.id,
            DependencyCondition::OnSuccess,
            T0,
        )
        .await
        .unwrap();
        tx.add_dependency(
            w.tenant.id,
            right.id,
            load.id,
            DependencyCondition::Always,
            T0,
        )
        .await
        .unwrap();
        tx.add_dependency(
            w.tenant.id,
            outsider.id,
            load.id,
            DependencyCondition::OnSuccess,
            T0,
        )
        .await
        .unwrap();
    });
    let root = insert(store, &occurrence(&w, &extract, T0)).await;
    let (_, effects) = applied(
        end(
            store,
            &root,
            &ending(RunState::Succeeded, true, T0 + SECOND),
        )
        .await,
    );
    assert_eq!(effects.children.len(), 2);
    let l = effects
        .children
        .iter()
        .find(|r| r.task_id == left.id)
        .unwrap()
        .clone();
    let r = effects
        .children
        .iter()
        .find(|r| r.task_id == right.id)
        .unwrap()
        .clone();
    assert_eq!(
        (l.chain_root_id, r.chain_root_id),
        (Some(root.id), Some(root.id))
    );

    // Right fails (its edge to load is "always"), left is still running: load waits.
    let (_, effects) =
        applied(end(store, &r, &ending(RunState::Failed, false, T0 + 2 * SECOND)).await);
    assert!(effects.children.is_empty(), "left has not finished");
    // Left succeeds: now every parent in the chain has finished and admits load.
    let (_, effects) = applied(
        end(
            store,
            &l,
            &ending(RunState::Succeeded, true, T0 + 3 * SECOND),
        )
        .await,
    );
    assert_eq!(
        effects
            .children
            .iter()
            .map(|c| c.task_id)
            .collect::<Vec<_>>(),
        vec![load.id]
    );
    assert_eq!(effects.children[0].chain_root_id, Some(root.id));
    assert_eq!(runs_of(store, &w, &load).await.len(), 1);
}

pub async fn fixed_delay_occurrence_follows_the_finish(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let def = TaskDefinition::new(
        w.app.id,
        "poller",
        "noop",
        ScheduleSpec::FixedDelay {
            delay_ms: 30 * SECOND,
        },
    );
    let (task, first) = create_task(store, &w, &def).await;
    let first = first.unwrap();
    assert_eq!(first.scheduled_at, T0 + 30 * SECOND);
    let (_, effects) = applied(
        end(
            store,
            &first,
            &ending(RunState::Succeeded, true, T0 + 47 * SECOND),
        )
        .await,
    );
    let next = effects.next_occurrence.expect("next occurrence");
    assert_eq!(next.scheduled_at, T0 + 77 * SECOND, "30 s after the finish");
    assert_eq!(next.trigger_kind, TriggerKind::Schedule);
    // A manual run of the same task does not start a second cycle.
    let manual_run = in_tx!(store, |tx| tx
        .trigger_task(w.tenant.id, task.id, None, "alice", T0)
        .await
        .unwrap());
    let (_, effects) = applied(
        end(
            store,
            &manual_run,
            &ending(RunState::Succeeded, true, T0 + 50 * SECOND),
        )
        .await,
    );
    assert!(effects.next_occurrence.is_none());
}

/// A broadcast occurrence (3 shards): its children start once, after the last shard, and only
/// "on success" when every shard succeeded.
pub async fn broadcast_children_start_once_after_every_shard(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (fan, _) = create_task(store, &w, &manual(w.app.id, "fanout")).await;
    let ok = chain(store, &w, &fan, "merge", DependencyCondition::OnSuccess).await;
    let any = chain(store, &w, &fan, "report", DependencyCondition::Always).await;
    let shard = |i: i32, at: i64| {
        let mut r = occurrence(&w, &fan, at);
        r.shard_index = i;
        r.shard_total = 3;
        r
    };
    // All three succeed: both children start, once.
    let mut shards = Vec::new();
    for i in 0..3 {
        shards.push(insert(store, &shard(i, T0)).await);
    }
    for (i, s) in shards.iter().enumerate() {
        let (_, effects) =
            applied(end(store, s, &ending(RunState::Succeeded, true, T0 + SECOND)).await);
        if i < 2 {
            assert!(effects.children.is_empty(), "shard {i} is not the last");
        } else {
            let mut started: Vec<_> = effects.children.iter().map(|r| r.task_id).collect();
            started.sort();
            assert_eq!(started, vec![ok.id, any.id]);
        }
    }
    // One shard fails: only the "always" child starts.
    let mut shards = Vec::new();
    for i in 0..3 {
        shards.push(insert(store, &shard(i, T0 + MINUTE)).await);
    }
    end(
        store,
        &shards[0],
        &ending(RunState::Succeeded, true, T0 + MINUTE),
    )
    .await;
    end(
        store,
        &shards[1],
        &ending(RunState::Failed, false, T0 + MINUTE),
    )
    .await;
    let (_, effects) = applied(
        end(
            store,
            &shards[2],
            &ending(RunState::Succeeded, true, T0 + MINUTE),
        )
        .await,
    );
    assert_eq!(
        effects
            .children
            .iter()
            .map(|r| r.task_id)
            .collect::<Vec<_>>(),
        vec![any.id]
    );
    assert_eq!(runs_of(store, &w, &ok).await.len(), 1);
    assert_eq!(runs_of(store, &w, &any).await.len(), 2);
}

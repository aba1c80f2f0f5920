use std::collections::HashSet;
use std::sync::Arc;

use mthpt_engine::alarm::{AlarmFilter, AlarmKind};
use mthpt_engine::app::{Executor, ExecutorHeartbeat, ExecutorId, ExecutorState};
use mthpt_engine::claimer::{ClaimConfig, Claimer, Fire};
use mthpt_engine::node::{NodeHeartbeat, NodeState};
use mthpt_engine::outcome::{Finish, Finished, finish_run};
use mthpt_engine::quota::{Quota, TenantQuotas};
use mthpt_engine::run::{
    ClaimedTransition, NewRun, ReportedBy, Run, RunCompletion, RunState, TriggerKind,
};
use mthpt_engine::store::{Scope, Store};
use mthpt_engine::task::{DependencyCondition, Task, TaskId};
use mthpt_engine::watchdog::{Probe, WatchConfig, Watchdog};

use crate::in_tx;
use crate::support::fixtures::*;

fn watchdog(store: &Arc<dyn Store>) -> Watchdog {
    Watchdog::new(
        store.clone(),
        WatchConfig {
            executor_timeout_ms: 5 * SECOND,
            node_timeout_ms: 10 * SECOND,
            batch: 100,
        },
    )
}

/// A claimer of the group `default` as node `node`: no look-ahead, 5 s leases, 10 a claim.
fn claimer(store: &Arc<dyn Store>, node: &str) -> Claimer {
    Claimer::new(
        store.clone(),
        ClaimConfig {
            node: node.into(),
            groups: vec!["default".into()],
            horizon_ms: 0,
            lease_ms: 5 * SECOND,
            batch: 10,
        },
    )
}

/// Records that `executor` started the claimed runs of `fires` at `at`.
async fn start(store: &Arc<dyn Store>, fires: &[Fire], executor: ExecutorId, at: i64) {
    for f in fires {
        in_tx!(&**store, |tx| tx
            .transition_claimed(
                &f.run.fence().unwrap(),
                &ClaimedTransition::Started {
                    executor_id: executor,
                    dispatched_at: at,
                    deadline_at: None
                },
                at
            )
            .await
            .unwrap());
    }
}

/// Finishes the runs of `fires` as succeeded at `at` (started at T0).
async fn succeed(store: &Arc<dyn Store>, fires: &[Fire], at: i64) {
    for f in fires {
        in_tx!(&**store, |tx| tx
            .complete_run(
                f.run.id,
                None,
                &RunCompletion {
                    state: RunState::Succeeded,
                    output: None,
                    error: None,
                    log: None,
                    started_at: Some(T0),
                    finished_at: at,
                    reported_by: None,
                }
            )
            .await
            .unwrap());
    }
}

/// A run of a fresh manual task, claimed and started on `instance` at T0.
async fn running(
    store: &Arc<dyn Store>,
    w: &World,
    name: &str,
    instance: &str,
    deadline: Option<i64>,
) -> Run {
    let mut def = manual(w.app.id, name);
    def.max_retries = 1;
    let (task, _) = create_task(&**store, w, &def).await;
    in_tx!(&**store, |tx| tx
        .trigger_task(w.tenant.id, task.id, None, "alice", T0)
        .await
        .unwrap());
    let claimer = claimer(store, "node-a");
    let fire = claimer.run_once(T0).await.unwrap().fires.remove(0);
    let e = executor(&**store, w.app.id, instance, T0).await;
    in_tx!(&**store, |tx| tx
        .transition_claimed(
            &fire.run.fence().unwrap(),
            &ClaimedTransition::Started {
                executor_id: e.id,
                dispatched_at: T0,
                deadline_at: deadline
            },
            T0
        )
        .await
        .unwrap())
}

async fn alarm_kinds(store: &dyn Store, scope: Scope) -> Vec<AlarmKind> {
    let mut kinds: Vec<_> = read(store)
        .await
        .list_alarms(scope, &AlarmFilter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.kind)
        .collect();
    kinds.sort_by_key(|k| k.as_str());
    kinds
}

pub async fn run_past_its_deadline_is_timed_out_retried_and_cancelled(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    let run = running(&store, &w, "slow", "host-1", Some(T0 + 10 * SECOND)).await;
    let wd = watchdog(&store);
    // Keep the executor alive so only the deadline matters.
    let beat = ExecutorHeartbeat {
        capacity: 4,
        running: 1,
    };
    in_tx!(&*store, |tx| tx
        .heartbeat_executor(w.app.id, "host-1", beat, T0 + 10 * SECOND)
        .await
        .unwrap());
    assert!(
        wd.run_once(T0 + 10 * SECOND, 0.0)
            .await
            .unwrap()
            .cancel
            .is_empty(),
        "at the deadline, not past it"
    );
    let report = wd.run_once(T0 + 11 * SECOND, 0.0).await.unwrap();
    assert_eq!(
        report.cancel.iter().map(|c| c.run.id).collect::<Vec<_>>(),
        vec![run.id]
    );
    assert_eq!(report.cancel[0].run.state, RunState::TimedOut);
    assert_eq!(report.retried, 1);
    assert_eq!(
        alarm_kinds(&*store, Scope::Tenant(w.tenant.id)).await,
        vec![AlarmKind::TimedOut]
    );
    assert!(
        wd.run_once(T0 + 12 * SECOND, 0.0)
            .await
            .unwrap()
            .cancel
            .is_empty(),
        "handled once"
    );
}

pub async fn silent_executor_is_lost_and_its_runs_recovered(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    let on_dead = running(&store, &w, "a", "host-dead", None).await;
    let on_alive = running(&store, &w, "b", "host-alive", None).await;
    let beat = ExecutorHeartbeat {
        capacity: 4,
        running: 1,
    };
    in_tx!(&*store, |tx| tx
        .heartbeat_executor(w.app.id, "host-alive", beat, T0 + 4 * SECOND)
        .await
        .unwrap());
    let wd = watchdog(&store);
    let report = wd.run_once(T0 + 6 * SECOND, 0.0).await.unwrap();
    assert_eq!(
        report.lost.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![on_dead.id]
    );
    assert_eq!(report.lost[0].state, RunState::Lost);
    assert_eq!(report.executors_lost.len(), 1);
    assert_eq!(report.retried, 1);
    let runs = read(&*store)
        .await
        .unfinished_runs_of_task(on_dead.task_id)
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0].trigger_kind, runs[0].attempt),
        (TriggerKind::Recovery, 2)
    );
    assert_eq!(
        alarm_kinds(&*store, Scope::Tenant(w.tenant.id)).await,
        vec![AlarmKind::ExecutorLost]
    );
    let still = read(&*store)
        .await
        .find_run(on_alive.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(still.state, RunState::Running);
    assert!(
        wd.run_once(T0 + 7 * SECOND, 0.0)
            .await
            .unwrap()
            .lost
            .is_empty(),
        "handled once"
    );
}

pub async fn silent_node_is_reported_once(store: Arc<dyn Store>) {
    let beat = |id: &str| NodeHeartbeat {
        id: id.into(),
        node_groups: vec!["default".into()],
        address: String::new(),
        state: NodeState::Up,
    };
    in_tx!(&*store, |tx| {
        tx.heartbeat_node(&beat("node-a"), T0).await.unwrap();
        tx.heartbeat_node(&beat("node-b"), T0 + 8 * SECOND)
            .await
            .unwrap();
    });
    let wd = watchdog(&store);
    let report = wd.run_once(T0 + 11 * SECOND, 0.0).await.unwrap();
    assert_eq!(report.nodes_lost, vec!["node-a".to_string()]);
    assert!(
        wd.run_once(T0 + 12 * SECOND, 0.0)
            .await
            .unwrap()
            .nodes_lost
            .is_empty()
    );
    assert_eq!(
        alarm_kinds(&*store, Scope::Cluster).await,
        vec![AlarmKind::NodeLost]
    );
}

pub async fn run_not_started_in_time_raises_one_alarm(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    let mut def = manual(w.app.id, "urgent");
    def.start_timeout_ms = Some(3 * SECOND);
    let (task, _) = create_task(&*store, &w, &def).await;
    let run = in_tx!(&*store, |tx| tx
        .trigger_task(w.tenant.id, task.id, None, "alice", T0)
        .await
        .unwrap());
    let wd = watchdog(&store);
    assert!(
        wd.run_once(T0 + 3 * SECOND, 0.0)
            .await
            .unwrap()
            .not_started
            .is_empty()
    );
    let report = wd.run_once(T0 + 4 * SECOND, 0.0).await.unwrap();
    assert_eq!(
        report.not_started.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![run.id]
    );
    assert!(
        wd.run_once(T0 + 5 * SECOND, 0.0)
            .await
            .unwrap()
            .not_started
            .is_empty()
    );
    assert_eq!(
        alarm_kinds(&*store, Scope::Tenant(w.tenant.id)).await,
        vec![AlarmKind::NotStarted]
    );
}

/// A probe that reaches exactly the named instances.
#[derive(Debug)]
struct Reaches(Vec<&'static str>);

#[async_trait::async_trait]
impl Probe for Reaches {
    async fn answering(&self, executors: &[Executor]) -> HashSet<ExecutorId> {
        executors
            .iter()
            .filter(|e| self.0.contains(&e.instance_id.as_str()))
            .map(|e| e.id)
            .collect()
    }
}

pub async fn silent_executor_that_answers_its_probe_is_not_lost(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    // Both stopped reaching the nodes (say their heartbeats went to a paused node); only one
    // still answers a node that asks it directly.
    let on_reachable = running(&store, &w, "a", "host-reachable", None).await;
    let on_gone = running(&store, &w, "b", "host-gone", None).await;
    let wd = watchdog(&store).with_probe(Arc::new(Reaches(vec!["host-reachable"])));
    let report = wd.run_once(T0 + 6 * SECOND, 0.0).await.unwrap();
    assert_eq!(
        report.lost.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![on_gone.id],
        "only the instance that does not answer is lost"
    );
    assert_eq!(report.executors_answered.len(), 1);
    let kept = read(&*store)
        .await
        .find_run(on_reachable.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.state, RunState::Running);
    // The answer counts as a heartbeat: the instance is not asked again until it is silent
    // for a whole timeout once more.
    let calm = wd.run_once(T0 + 8 * SECOND, 0.0).await.unwrap();
    assert!(calm.executors_answered.is_empty() && calm.lost.is_empty());
    // Once it stops answering too, it is lost like any other.
    let wd = watchdog(&store);
    let report = wd.run_once(T0 + 12 * SECOND, 0.0).await.unwrap();
    assert_eq!(
        report.lost.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![on_reachable.id]
    );
}

fn late_success(executor: ExecutorId, at: i64) -> Finish {
    Finish {
        completion: RunCompletion {
            state: RunState::Succeeded,
            output: Some(serde_json::json!({"late": true})),
            error: None,
            log: None,
            started_at: Some(T0),
            finished_at: at,
            reported_by: Some(ReportedBy {
                executor_id: executor,
                attempt: 1,
                dispatched_at: None,
            }),
        },
        retryable: false,
    }
}

pub async fn late_success_for_a_lost_run_wins_over_its_unstarted_recovery(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    let run = running(&store, &w, "parent", "host-slow", None).await;
    let (child, _) = create_task(&*store, &w, &manual(w.app.id, "child")).await;
    in_tx!(&*store, |tx| tx
        .add_dependency(
            w.tenant.id,
            run.task_id,
            child.id,
            DependencyCondition::OnSuccess,
            T0
        )
        .await
        .unwrap());
    let report = watchdog(&store)
        .run_once(T0 + 6 * SECOND, 0.0)
        .await
        .unwrap();
    assert_eq!(
        report.lost.len(),
        1,
        "declared lost with its silent instance"
    );
    // Its handler did succeed; the result arrives before the recovery run was sent anywhere.
    let executor = run.executor_id.unwrap();
    let finished = in_tx!(&*store, |tx| finish_run(
        tx.as_mut(),
        run.id,
        Some(w.app.id),
        &late_success(executor, T0 + 7 * SECOND),
        0.0
    )
    .await
    .unwrap());
    let Finished::Applied {
        run: done, effects, ..
    } = finished
    else {
        panic!("the late success was not recorded: {finished:?}");
    };
    assert_eq!(done.state, RunState::Succeeded);
    assert_eq!(
        effects
            .children
            .iter()
            .map(|r| r.task_id)
            .collect::<Vec<_>>(),
        vec![child.id],
        "the chain follows the success"
    );
    let left = read(&*store)
        .await
        .unfinished_runs_of_task(run.task_id)
        .await
        .unwrap();
    assert!(left.is_empty(), "the recovery run is withdrawn: {left:?}");
}

/// A run declared lost whose task has an on-success child, with its recovery claimed and on its
/// way to another instance: (the lost run, the recovery, the instance it goes to, the child task).
async fn recovery_under_way(store: &Arc<dyn Store>, w: &World) -> (Run, Run, Executor, Task) {
    let run = running(store, w, "parent", "host-slow", None).await;
    let (child, _) = create_task(&**store, w, &manual(w.app.id, "child")).await;
    in_tx!(&**store, |tx| tx
        .add_dependency(
            w.tenant.id,
            run.task_id,
            child.id,
            DependencyCondition::OnSuccess,
            T0
        )
        .await
        .unwrap());
    watchdog(store)
        .run_once(T0 + 6 * SECOND, 0.0)
        .await
        .unwrap();
    let other = executor(&**store, w.app.id, "host-other", T0 + 6 * SECOND).await;
    let claimer = claimer(store, "node-b");
    let recovery = claimer
        .run_once(T0 + 6 * SECOND)
        .await
        .unwrap()
        .fires
        .remove(0)
        .run;
    assert_eq!(recovery.trigger_kind, TriggerKind::Recovery);
    in_tx!(&**store, |tx| tx
        .record_dispatch_intent(&[(recovery.fence().unwrap(), other.id)], T0 + 6 * SECOND)
        .await
        .unwrap());
    (run, recovery, other, child)
}

/// The recovery's own result: failed.
fn recovery_failed(executor: ExecutorId, at: i64) -> Finish {
    Finish {
        completion: RunCompletion {
            state: RunState::Failed,
            output: None,
            error: Some("boom".into()),
            log: None,
            started_at: Some(T0 + 6 * SECOND),
            finished_at: at,
            reported_by: Some(ReportedBy {
                executor_id: executor,
                attempt: 2,
                dispatched_at: None,
            }),
        },
        retryable: true,
    }
}

fn child_tasks(runs: &[Run]) -> Vec<TaskId> {
    runs.iter().map(|r| r.task_id).collect()
}

pub async fn late_success_after_the_recovery_started_is_recorded_alone(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    let (run, recovery, _, _) = recovery_under_way(&store, &w).await;
    let finished = in_tx!(&*store, |tx| finish_run(
        tx.as_mut(),
        run.id,
        Some(w.app.id),
        &late_success(run.executor_id.unwrap(), T0 + 7 * SECOND),
        0.0
    )
    .await
    .unwrap());
    // Never dropped: recorded on the run, and nothing else follows (the recovery goes on).
    let Finished::AlreadyFinal(recorded) = &finished else {
        panic!("the late success changed more than its run: {finished:?}");
    };
    assert_eq!(recorded.state, RunState::Succeeded);
    assert_eq!(
        recorded.output.as_ref().map(|o| o.0.clone()),
        Some(serde_json::json!({"late": true}))
    );
    let left = read(&*store)
        .await
        .unfinished_runs_of_task(run.task_id)
        .await
        .unwrap();
    assert_eq!(
        left.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![recovery.id]
    );
}

/// The occurrence succeeded (a late success recorded next to its recovery), so when the
/// recovery then fails, the chain follows that success and the failure raises no alarm.
pub async fn recovery_failing_after_a_recorded_late_success_starts_the_chain(
    store: Arc<dyn Store>,
) {
    let w = world(&*store, "acme").await;
    let (run, recovery, other, child) = recovery_under_way(&store, &w).await;
    let recorded = in_tx!(&*store, |tx| finish_run(
        tx.as_mut(),
        run.id,
        Some(w.app.id),
        &late_success(run.executor_id.unwrap(), T0 + 7 * SECOND),
        0.0
    )
    .await
    .unwrap());
    assert!(
        matches!(recorded, Finished::AlreadyFinal(_)),
        "{recorded:?}"
    );
    let finished = in_tx!(&*store, |tx| finish_run(
        tx.as_mut(),
        recovery.id,
        Some(w.app.id),
        &recovery_failed(other.id, T0 + 8 * SECOND),
        0.0
    )
    .await
    .unwrap());
    let Finished::Applied {
        run: failed,
        effects,
        ..
    } = finished
    else {
        panic!("the recovery's result was not applied: {finished:?}");
    };
    assert_eq!(failed.state, RunState::Failed);
    assert_eq!(
        child_tasks(&effects.children),
        vec![child.id],
        "the chain follows"
    );
    assert_eq!(
        effects.children[0].parent_run_id,
        Some(run.id),
        "from the success"
    );
    assert!(
        effects.next_attempt.is_none() && effects.alarms.is_empty(),
        "{effects:?}"
    );
}

/// The recovery failed first and the occurrence looked failed; the late success that arrives
/// after it is recorded, and the chain the occurrence's success calls for starts from it.
pub async fn late_success_after_its_recovery_failed_starts_the_chain(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    let (run, recovery, other, child) = recovery_under_way(&store, &w).await;
    let failed = in_tx!(&*store, |tx| finish_run(
        tx.as_mut(),
        recovery.id,
        Some(w.app.id),
        &recovery_failed(other.id, T0 + 7 * SECOND),
        0.0
    )
    .await
    .unwrap());
    let Finished::Applied { effects, .. } = failed else {
        panic!("the recovery's result was not applied: {failed:?}");
    };
    assert!(effects.children.is_empty() && effects.next_attempt.is_none());
    let finished = in_tx!(&*store, |tx| finish_run(
        tx.as_mut(),
        run.id,
        Some(w.app.id),
        &late_success(run.executor_id.unwrap(), T0 + 8 * SECOND),
        0.0
    )
    .await
    .unwrap());
    let Finished::Applied {
        run: done, effects, ..
    } = finished
    else {
        panic!("the late success did not start the chain: {finished:?}");
    };
    assert_eq!(done.state, RunState::Succeeded);
    assert_eq!(child_tasks(&effects.children), vec![child.id]);
    // A second copy of the same result changes nothing more.
    let again = in_tx!(&*store, |tx| finish_run(
        tx.as_mut(),
        run.id,
        Some(w.app.id),
        &late_success(run.executor_id.unwrap(), T0 + 8 * SECOND),
        0.0
    )
    .await
    .unwrap());
    assert!(matches!(again, Finished::AlreadyFinal(_)), "{again:?}");
}

/// A run timed out while its result was held up (a partition): the handler had finished before
/// the deadline, so its late success counts and takes the place of the unstarted retry; a
/// success that finished after the deadline does not.
pub async fn late_success_finished_before_the_deadline_wins_over_the_timeout(
    store: Arc<dyn Store>,
) {
    let w = world(&*store, "acme").await;
    let deadline = T0 + 10 * SECOND;
    let in_time = running(&store, &w, "in-time", "host-1", Some(deadline)).await;
    let too_late = running(&store, &w, "too-late", "host-1", Some(deadline)).await;
    let beat = ExecutorHeartbeat {
        capacity: 4,
        running: 2,
    };
    in_tx!(&*store, |tx| tx
        .heartbeat_executor(w.app.id, "host-1", beat, T0 + 11 * SECOND)
        .await
        .unwrap());
    let report = watchdog(&store)
        .run_once(T0 + 11 * SECOND, 0.0)
        .await
        .unwrap();
    assert_eq!(report.retried, 2, "both timed out and retried");
    let executor = in_time.executor_id.unwrap();

    let finished = in_tx!(&*store, |tx| finish_run(
        tx.as_mut(),
        in_time.id,
        Some(w.app.id),
        &late_success(executor, deadline - SECOND),
        0.0
    )
    .await
    .unwrap());
    let Finished::Applied { run: done, .. } = &finished else {
        panic!("the success that finished in time was not applied: {finished:?}");
    };
    assert_eq!(done.state, RunState::Succeeded);
    let left = read(&*store)
        .await
        .unfinished_runs_of_task(in_time.task_id)
        .await
        .unwrap();
    assert!(left.is_empty(), "its retry is withdrawn: {left:?}");

    let finished = in_tx!(&*store, |tx| finish_run(
        tx.as_mut(),
        too_late.id,
        Some(w.app.id),
        &late_success(executor, deadline + SECOND),
        0.0
    )
    .await
    .unwrap());
    assert!(
        matches!(&finished, Finished::AlreadyFinal(r) if r.state == RunState::TimedOut),
        "a success after the deadline leaves the run timed out: {finished:?}"
    );
    let left = read(&*store)
        .await
        .unfinished_runs_of_task(too_late.task_id)
        .await
        .unwrap();
    assert_eq!(left.len(), 1, "its retry stays");
}

/// Due runs of an app whose executors are full wait unclaimed: one `backlog` alarm per episode,
/// resolved when none waits any more; draining the app's last instance opens a new episode even
/// with nothing running, and undraining it lets the runs flow and closes that episode.
pub async fn backlog_waiting_for_capacity_raises_one_alarm_per_episode(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    let (task, _) = create_task(&*store, &w, &manual(w.app.id, "job")).await;
    let waiting = |n: i64, due: i64| -> Vec<NewRun> {
        (0..n)
            .map(|i| NewRun::occurrence(&task, "default", due + i, TriggerKind::Manual))
            .collect()
    };
    in_tx!(&*store, |tx| tx
        .insert_runs(&waiting(6, T0 - MINUTE), T0)
        .await
        .unwrap());
    let e = executor(&*store, w.app.id, "host-1", T0).await;
    let claimer = claimer(&store, "node-a");
    let fires = claimer.run_once(T0).await.unwrap().fires;
    assert_eq!(fires.len(), 4, "the instance's capacity");
    start(&store, &fires, e.id, T0).await;
    let wd = watchdog(&store);
    let report = wd.run_once(T0 + SECOND, 0.0).await.unwrap();
    assert_eq!(report.backlogs_raised, vec![w.app.id]);
    assert!(
        wd.run_once(T0 + 2 * SECOND, 0.0)
            .await
            .unwrap()
            .backlogs_raised
            .is_empty(),
        "one alarm per episode"
    );
    assert_eq!(
        alarm_kinds(&*store, Scope::Tenant(w.tenant.id)).await,
        vec![AlarmKind::Backlog]
    );

    // Two finish: their capacity takes the two waiting runs, and the episode is over.
    succeed(&store, &fires[..2], T0 + 2 * SECOND).await;
    let more = claimer.run_once(T0 + 2 * SECOND).await.unwrap().fires;
    assert_eq!(more.len(), 2);
    start(&store, &more, e.id, T0 + 2 * SECOND).await;
    let report = wd.run_once(T0 + 3 * SECOND, 0.0).await.unwrap();
    assert_eq!(report.backlogs_resolved, vec![w.app.id]);
    let alarms = read(&*store)
        .await
        .list_alarms(Scope::Tenant(w.tenant.id), &AlarmFilter::default())
        .await
        .unwrap();
    assert!(alarms.iter().all(|a| a.resolved_at.is_some()));

    // The last instance drains with nothing running: new due runs wait, a new episode opens.
    succeed(&store, &fires[2..], T0 + 3 * SECOND).await;
    succeed(&store, &more, T0 + 3 * SECOND).await;
    in_tx!(&*store, |tx| tx
        .set_executor_state(w.app.id, "host-1", ExecutorState::Draining, T0 + 3 * SECOND)
        .await
        .unwrap());
    in_tx!(&*store, |tx| tx
        .insert_runs(&waiting(3, T0 - 30 * SECOND), T0 + 3 * SECOND)
        .await
        .unwrap());
    assert!(
        claimer
            .run_once(T0 + 3 * SECOND)
            .await
            .unwrap()
            .fires
            .is_empty()
    );
    let report = wd.run_once(T0 + 4 * SECOND, 0.0).await.unwrap();
    assert_eq!(report.backlogs_raised, vec![w.app.id]);
    assert_eq!(
        alarm_kinds(&*store, Scope::Tenant(w.tenant.id)).await,
        vec![AlarmKind::Backlog, AlarmKind::Backlog]
    );

    // Undrained, the instance is up from its next heartbeat: the runs are claimed and the
    // episode is over.
    let asked = in_tx!(&*store, |tx| tx
        .request_executor_undrain(w.tenant.id, e.id)
        .await
        .unwrap());
    assert!(asked.is_some_and(|x| x.undrain_requested && x.state == ExecutorState::Draining));
    assert!(
        claimer
            .run_once(T0 + 4 * SECOND)
            .await
            .unwrap()
            .fires
            .is_empty(),
        "still draining until its heartbeat"
    );
    let beat = ExecutorHeartbeat {
        capacity: 4,
        running: 0,
    };
    let up = in_tx!(&*store, |tx| tx
        .heartbeat_executor(w.app.id, "host-1", beat, T0 + 5 * SECOND)
        .await
        .unwrap());
    assert!(up.is_some_and(|x| x.state == ExecutorState::Up && !x.undrain_requested));
    assert_eq!(
        claimer.run_once(T0 + 5 * SECOND).await.unwrap().fires.len(),
        3
    );
    let report = wd.run_once(T0 + 6 * SECOND, 0.0).await.unwrap();
    assert_eq!(report.backlogs_resolved, vec![w.app.id]);
}

/// Due runs waiting behind their tenant's concurrency quota (its app has room): one `quota`
/// alarm per episode, counted against the quota, resolved when none waits that long any more.
/// A rate quota's empty bucket opens its own episode.
pub async fn runs_held_back_by_a_tenant_quota_raise_one_quota_alarm_per_episode(
    store: Arc<dyn Store>,
) {
    let w = world(&*store, "acme").await;
    let (task, _) = create_task(&*store, &w, &manual(w.app.id, "job")).await;
    let waiting = |n: i64, due: i64| -> Vec<NewRun> {
        (0..n)
            .map(|i| NewRun::occurrence(&task, "default", due + i, TriggerKind::Manual))
            .collect()
    };
    in_tx!(&*store, |tx| tx
        .set_tenant_quotas(
            w.tenant.id,
            &TenantQuotas {
                max_concurrent_runs: Some(2),
                ..TenantQuotas::default()
            },
            T0
        )
        .await
        .unwrap());
    in_tx!(&*store, |tx| tx
        .insert_runs(&waiting(4, T0 - MINUTE), T0)
        .await
        .unwrap());
    let e = executor(&*store, w.app.id, "host-1", T0).await;
    assert_eq!(e.capacity, 4, "the app has room for all four");
    let claimer = claimer(&store, "node-a");
    let fires = claimer.run_once(T0).await.unwrap().fires;
    assert_eq!(fires.len(), 2, "the tenant's quota");
    start(&store, &fires, e.id, T0).await;
    let wd = watchdog(&store);
    let report = wd.run_once(T0 + SECOND, 0.0).await.unwrap();
    assert_eq!(
        report.quotas_raised,
        vec![(w.tenant.id, Quota::MaxConcurrentRuns)]
    );
    assert!(report.backlogs_raised.is_empty(), "not a capacity backlog");
    assert!(
        wd.run_once(T0 + 2 * SECOND, 0.0)
            .await
            .unwrap()
            .quotas_raised
            .is_empty(),
        "one alarm per episode"
    );
    let alarms = read(&*store)
        .await
        .list_alarms(Scope::Tenant(w.tenant.id), &AlarmFilter::default())
        .await
        .unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(alarms[0].kind, AlarmKind::Quota);
    assert_eq!(alarms[0].details.0["quota"], "max_concurrent_runs");

    // Both finish: the two waiting are claimed, and the episode is over.
    succeed(&store, &fires, T0 + 2 * SECOND).await;
    assert_eq!(
        claimer.run_once(T0 + 2 * SECOND).await.unwrap().fires.len(),
        2
    );
    let report = wd.run_once(T0 + 3 * SECOND, 0.0).await.unwrap();
    assert_eq!(
        report.quotas_resolved,
        vec![(w.tenant.id, Quota::MaxConcurrentRuns)]
    );

    // A rate of 1 a second with 3 more waiting, due long ago: the bucket is the limit now.
    in_tx!(&*store, |tx| tx
        .set_tenant_quotas(
            w.tenant.id,
            &TenantQuotas {
                max_fires_per_second: Some(1),
                ..TenantQuotas::default()
            },
            T0 + 3 * SECOND
        )
        .await
        .unwrap());
    in_tx!(&*store, |tx| tx
        .insert_runs(&waiting(3, T0 - 30 * SECOND), T0 + 3 * SECOND)
        .await
        .unwrap());
    assert_eq!(
        claimer.run_once(T0 + 3 * SECOND).await.unwrap().fires.len(),
        1,
        "one token"
    );
    let report = wd.run_once(T0 + 3 * SECOND + 100, 0.0).await.unwrap();
    assert_eq!(
        report.quotas_raised,
        vec![(w.tenant.id, Quota::MaxFiresPerSecond)]
    );
    let quota_alarms = read(&*store)
        .await
        .list_alarms(
            Scope::Tenant(w.tenant.id),
            &AlarmFilter {
                kind: Some(AlarmKind::Quota),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(quota_alarms.len(), 2);
}

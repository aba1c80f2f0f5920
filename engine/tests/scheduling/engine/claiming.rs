use std::collections::HashMap;
use std::sync::Arc;

use mthpt_engine::alarm::{AlarmFilter, AlarmKind};
use mthpt_engine::claimer::{ClaimConfig, Claimer, Router};
use mthpt_engine::run::{ClaimedTransition, Run, RunCompletion, RunFilter, RunState};
use mthpt_engine::store::{Scope, Store, StoreError};
use mthpt_engine::task::{MisfirePolicy, OverlapPolicy, Task, TaskDefinition};
use mthpt_engine::tenant::TenantUpdate;

use crate::in_tx;
use crate::support::fixtures::*;

pub(crate) fn claimer(store: &Arc<dyn Store>, node: &str) -> Claimer {
    Claimer::new(
        store.clone(),
        ClaimConfig {
            node: node.into(),
            groups: vec!["default".into()],
            horizon_ms: 500,
            lease_ms: 5 * SECOND,
            batch: 100,
        },
    )
}

pub(crate) async fn runs_of(store: &dyn Store, w: &World) -> Vec<Run> {
    let mut runs = read(store)
        .await
        .list_runs(w.tenant.id, &RunFilter::default())
        .await
        .unwrap();
    runs.sort_by_key(|r| (r.scheduled_at, r.id));
    runs
}

pub(crate) fn times(runs: &[Run], state: RunState) -> Vec<i64> {
    runs.iter()
        .filter(|r| r.state == state)
        .map(|r| (r.scheduled_at - T0) / SECOND)
        .collect()
}

/// Marks a claimed run as accepted by an executor.
pub(crate) async fn start(store: &dyn Store, w: &World, run: &Run, now: i64) {
    let e = executor(store, w.app.id, "host-1", now).await;
    started(store, run, e.id, now).await;
}

pub(crate) async fn finish(store: &dyn Store, run: &Run, now: i64) {
    let completion = RunCompletion {
        state: RunState::Succeeded,
        output: None,
        error: None,
        log: None,
        started_at: None,
        finished_at: now,
        reported_by: None,
    };
    in_tx!(store, |tx| tx
        .complete_run(run.id, None, &completion)
        .await
        .unwrap());
}

pub(crate) fn every_10s(
    w: &World,
    misfire: MisfirePolicy,
    overlap: OverlapPolicy,
) -> TaskDefinition {
    let mut def = every(w.app.id, "tick", 10 * SECOND);
    def.misfire_policy = misfire;
    def.misfire_threshold_ms = 5 * SECOND;
    def.overlap_policy = overlap;
    def
}

pub async fn claiming_fires_due_runs_and_materialises_their_successors(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    let (task, first) = create_task(&*store, &w, &every(w.app.id, "tick", 10 * SECOND)).await;
    let c = claimer(&store, "node-a");
    assert_eq!(
        c.run_once(T0 - SECOND).await.unwrap().claimed(),
        0,
        "not within the horizon yet"
    );
    let mut report = c.run_once(T0 - 400).await.unwrap();
    assert_eq!(report.fires.len(), 1);
    assert_eq!(report.fires[0].run.id, first.unwrap().id);
    assert_eq!(report.fires[0].task.id, task.id);
    assert_eq!(report.materialised, 1);
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Claimed), vec![0]);
    assert_eq!(times(&runs, RunState::Pending), vec![10]);
    assert_eq!(
        read(&*store)
            .await
            .get_task(w.tenant.id, task.id)
            .await
            .unwrap()
            .fires_scheduled,
        2
    );
    assert_eq!(c.run_once(T0).await.unwrap().claimed(), 0);
    start(&*store, &w, &report.fires.remove(0).run, T0).await;
    // Claiming the successor materialises the one after it: the task always has its next.
    let report = c.run_once(T0 + 10 * SECOND).await.unwrap();
    assert_eq!(report.fires.len(), 1);
    assert_eq!(
        times(&runs_of(&*store, &w).await, RunState::Pending),
        vec![20]
    );
}

pub(crate) async fn misfire_alarms(store: &dyn Store, w: &World) -> usize {
    read(store)
        .await
        .list_alarms(
            Scope::Tenant(w.tenant.id),
            &AlarmFilter {
                kind: Some(AlarmKind::Misfire),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .len()
}

pub async fn misfire_fire_once_now_fires_late_occurrence_and_continues_from_now(
    store: Arc<dyn Store>,
) {
    let w = world(&*store, "acme").await;
    create_task(
        &*store,
        &w,
        &every_10s(&w, MisfirePolicy::FireOnceNow, OverlapPolicy::Parallel),
    )
    .await;
    // The engine was down from T0 to T0 + 95 s.
    let report = claimer(&store, "node-a")
        .run_once(T0 + 95 * SECOND)
        .await
        .unwrap();
    assert_eq!(report.misfires, 1);
    assert_eq!(report.fires.len(), 1);
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Claimed), vec![0]);
    assert_eq!(
        times(&runs, RunState::Pending),
        vec![100],
        "missed occurrences are dropped"
    );
    assert_eq!(misfire_alarms(&*store, &w).await, 1);
}

pub async fn misfire_skip_skips_late_occurrence_and_continues_from_now(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    create_task(
        &*store,
        &w,
        &every_10s(&w, MisfirePolicy::Skip, OverlapPolicy::Parallel),
    )
    .await;
    let report = claimer(&store, "node-a")
        .run_once(T0 + 95 * SECOND)
        .await
        .unwrap();
    assert_eq!(
        (report.misfires, report.skipped, report.fires.len()),
        (1, 1, 0)
    );
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Skipped), vec![0]);
    assert!(runs[0].error.as_deref().unwrap().contains("misfire"));
    assert_eq!(times(&runs, RunState::Pending), vec![100]);
    assert_eq!(misfire_alarms(&*store, &w).await, 1);
}

pub async fn misfire_fire_all_catches_up_every_missed_occurrence_within_its_bound(
    store: Arc<dyn Store>,
) {
    let w = world(&*store, "acme").await;
    let mut def = every_10s(&w, MisfirePolicy::FireAll, OverlapPolicy::Parallel);
    def.misfire_max_catch_up = 20;
    create_task(&*store, &w, &def).await;
    let c = claimer(&store, "node-a");
    let now = T0 + 95 * SECOND;
    let report = c.run_once(now).await.unwrap();
    assert_eq!((report.misfires, report.fires.len()), (1, 1));
    let runs = runs_of(&*store, &w).await;
    assert_eq!(
        times(&runs, RunState::Pending),
        vec![10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    );
    // The missed ones are due now: the next claim fires them, without new misfires.
    let report = c.run_once(now + 10).await.unwrap();
    assert_eq!((report.misfires, report.fires.len()), (0, 9));
    let runs = runs_of(&*store, &w).await;
    assert_eq!(
        times(&runs, RunState::Claimed),
        vec![0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
    );
    assert_eq!(times(&runs, RunState::Pending), vec![100]);
}

pub async fn misfire_fire_all_beyond_its_bound_fires_only_the_most_recent(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    let mut def = every_10s(&w, MisfirePolicy::FireAll, OverlapPolicy::Parallel);
    def.misfire_max_catch_up = 3;
    create_task(&*store, &w, &def).await;
    let c = claimer(&store, "node-a");
    let now = T0 + 95 * SECOND;
    let report = c.run_once(now).await.unwrap();
    assert_eq!(
        (report.misfires, report.skipped, report.fires.len()),
        (1, 1, 0)
    );
    let report = c.run_once(now + 10).await.unwrap();
    assert_eq!(report.fires.len(), 3);
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Skipped), vec![0]);
    assert_eq!(times(&runs, RunState::Claimed), vec![70, 80, 90]);
    assert_eq!(times(&runs, RunState::Pending), vec![100]);
}

pub async fn overlap_skip_skips_while_the_previous_run_runs(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    create_task(
        &*store,
        &w,
        &every_10s(&w, MisfirePolicy::FireOnceNow, OverlapPolicy::Skip),
    )
    .await;
    let c = claimer(&store, "node-a");
    let first = c.run_once(T0).await.unwrap().fires.remove(0).run;
    start(&*store, &w, &first, T0).await;
    // Claimed ahead of its time, the next one is not judged yet: the first may still end.
    let report = c.run_once(T0 + 10 * SECOND - 400).await.unwrap();
    assert_eq!(
        (report.put_back, report.skipped, report.claimed()),
        (1, 0, 0)
    );
    assert_eq!(
        times(&runs_of(&*store, &w).await, RunState::Pending),
        vec![10, 20]
    );
    // At its due time the first still runs: it is skipped.
    let report = c.run_once(T0 + 10 * SECOND).await.unwrap();
    assert_eq!((report.skipped, report.fires.len()), (1, 0));
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Skipped), vec![10]);
    assert!(runs[1].error.as_deref().unwrap().contains("overlap"));
    // Once the previous run finished, the next occurrence fires.
    finish(&*store, &first, T0 + 15 * SECOND).await;
    assert_eq!(c.run_once(T0 + 20 * SECOND).await.unwrap().fires.len(), 1);
}

pub async fn overlap_serial_waits_for_the_previous_run_in_order(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    create_task(
        &*store,
        &w,
        &every_10s(&w, MisfirePolicy::FireOnceNow, OverlapPolicy::Serial),
    )
    .await;
    let c = claimer(&store, "node-a");
    let first = c.run_once(T0).await.unwrap().fires.remove(0).run;
    start(&*store, &w, &first, T0).await;
    let report = c.run_once(T0 + 10 * SECOND).await.unwrap();
    assert_eq!((report.deferred, report.fires.len()), (1, 0));
    // Rechecked while it waits (every SERIAL_RECHECK_MS in a running engine), so it is never
    // found late enough to be a misfire.
    let report = c.run_once(T0 + 15 * SECOND).await.unwrap();
    assert_eq!((report.deferred, report.misfires), (1, 0));
    // The next one queues behind the waiting one.
    let report = c.run_once(T0 + 20 * SECOND).await.unwrap();
    assert_eq!(
        (report.deferred, report.fires.len()),
        (2, 0),
        "10 s rechecked, 20 s behind it"
    );
    finish(&*store, &first, T0 + 21 * SECOND).await;
    // The waiting runs fire one after the other, oldest first.
    let report = c.run_once(T0 + 21 * SECOND).await.unwrap();
    assert_eq!(
        report
            .fires
            .iter()
            .map(|f| (f.run.scheduled_at - T0) / SECOND)
            .collect::<Vec<_>>(),
        vec![10]
    );
    assert_eq!(report.deferred, 1);
    start(&*store, &w, &report.fires[0].run, T0 + 21 * SECOND).await;
    finish(&*store, &report.fires[0].run, T0 + 22 * SECOND).await;
    let report = c.run_once(T0 + 22 * SECOND).await.unwrap();
    assert_eq!(
        report
            .fires
            .iter()
            .map(|f| (f.run.scheduled_at - T0) / SECOND)
            .collect::<Vec<_>>(),
        vec![20]
    );
}

pub async fn overlap_replace_cancels_the_previous_run(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    create_task(
        &*store,
        &w,
        &every_10s(&w, MisfirePolicy::FireOnceNow, OverlapPolicy::Replace),
    )
    .await;
    let c = claimer(&store, "node-a");
    let first = c.run_once(T0).await.unwrap().fires.remove(0).run;
    start(&*store, &w, &first, T0).await;
    let report = c.run_once(T0 + 10 * SECOND).await.unwrap();
    assert_eq!(report.fires.len(), 1);
    assert_eq!(report.replaced.len(), 1);
    assert_eq!(report.replaced[0].run.id, first.id);
    assert_eq!(report.replaced[0].run.state, RunState::Cancelled);
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Cancelled), vec![0]);
    assert!(
        runs[0]
            .error
            .as_deref()
            .unwrap()
            .contains("replaced by run")
    );
}

pub async fn runs_of_a_deleted_task_are_cancelled_when_claimed(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    let (task, _) = create_task(&*store, &w, &manual(w.app.id, "adhoc")).await;
    in_tx!(&*store, |tx| tx
        .trigger_task(w.tenant.id, task.id, None, "alice", T0)
        .await
        .unwrap());
    let a = claimer(&store, "node-a");
    assert_eq!(a.run_once(T0).await.unwrap().fires.len(), 1);
    // Node A dies holding the claim; the task is deleted meanwhile.
    in_tx!(&*store, |tx| tx
        .delete_task(w.tenant.id, task.id, 1, T0 + SECOND)
        .await
        .unwrap());
    let report = claimer(&store, "node-b")
        .run_once(T0 + 6 * SECOND)
        .await
        .unwrap();
    assert_eq!((report.cancelled, report.fires.len()), (1, 0));
    assert_eq!(runs_of(&*store, &w).await[0].state, RunState::Cancelled);
}

pub async fn a_disabled_tenants_runs_wait_unclaimed_until_it_is_enabled(store: Arc<dyn Store>) {
    let off = world(&*store, "acme").await;
    let on = world(&*store, "other").await;
    for w in [&off, &on] {
        let (task, _) = create_task(&*store, w, &manual(w.app.id, "adhoc")).await;
        in_tx!(&*store, |tx| tx
            .trigger_task(w.tenant.id, task.id, None, "alice", T0)
            .await
            .unwrap());
    }
    let disable = |disabled| TenantUpdate {
        disabled: Some(disabled),
        ..TenantUpdate::default()
    };
    in_tx!(&*store, |tx| tx
        .update_tenant(off.tenant.id, &disable(true), T0)
        .await
        .unwrap());
    let c = claimer(&store, "node-a");
    let report = c.run_once(T0).await.unwrap();
    assert_eq!(report.fires.len(), 1, "only the enabled tenant's run");
    assert_eq!(report.fires[0].run.tenant_id, on.tenant.id);
    assert_eq!(runs_of(&*store, &off).await[0].state, RunState::Pending);
    // Its wrappers are still known: results of runs sent before it was disabled are kept.
    let key = in_tx!(&*store, |tx| tx
        .find_app_by_key(&off.tenant.name, &off.app.name)
        .await
        .unwrap());
    assert_eq!(key.map(|a| a.id), Some(off.app.id));

    in_tx!(&*store, |tx| tx
        .update_tenant(off.tenant.id, &disable(false), T0 + SECOND)
        .await
        .unwrap());
    let report = c.run_once(T0 + SECOND).await.unwrap();
    assert_eq!(report.fires.len(), 1, "enabled again, its run is claimed");
    assert_eq!(report.fires[0].run.tenant_id, off.tenant.id);
}

pub async fn node_that_lost_its_lease_is_fenced_and_another_node_fires(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    create_task(&*store, &w, &every(w.app.id, "tick", MINUTE)).await;
    let a = claimer(&store, "node-a")
        .run_once(T0)
        .await
        .unwrap()
        .fires
        .remove(0)
        .run;
    // Node A stalls for longer than its lease; node B takes the run over.
    let b = claimer(&store, "node-b")
        .run_once(T0 + 6 * SECOND)
        .await
        .unwrap()
        .fires
        .remove(0)
        .run;
    assert_eq!(b.id, a.id);
    assert_eq!(b.fence, a.fence + 1);
    let e = executor(&*store, w.app.id, "host-1", T0).await;
    let started = |at| ClaimedTransition::Started {
        executor_id: e.id,
        dispatched_at: at,
        deadline_at: None,
    };
    let mut tx = store.begin().await.unwrap();
    let err = tx
        .transition_claimed(
            &a.fence().unwrap(),
            &started(T0 + 6 * SECOND),
            T0 + 6 * SECOND,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err}");
    tx.transition_claimed(
        &b.fence().unwrap(),
        &started(T0 + 6 * SECOND),
        T0 + 6 * SECOND,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    // The successor was materialised once, by node A's claim.
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Running), vec![0]);
    assert_eq!(times(&runs, RunState::Pending), vec![60]);
}

/// Routes every run it is offered to one instance, and remembers what it was offered.
#[derive(Debug)]
struct OneInstance {
    to: mthpt_engine::app::ExecutorId,
    offered: std::sync::Mutex<Vec<mthpt_engine::run::RunId>>,
}

impl Router for OneInstance {
    fn route(
        &self,
        runs: &[(&Run, &Arc<Task>)],
        _now: i64,
    ) -> HashMap<mthpt_engine::run::RunId, Vec<mthpt_engine::app::ExecutorId>> {
        let mut offered = self.offered.lock().unwrap();
        runs.iter()
            .map(|(run, _)| {
                offered.push(run.id);
                (run.id, vec![self.to])
            })
            .collect()
    }
}

pub async fn a_claim_records_where_runs_that_certainly_fire_go(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    let mut parallel = every_10s(&w, MisfirePolicy::FireOnceNow, OverlapPolicy::Parallel);
    parallel.name = "parallel".into();
    let (_, on_time) = create_task(&*store, &w, &parallel).await;
    let mut serial = every_10s(&w, MisfirePolicy::FireOnceNow, OverlapPolicy::Serial);
    serial.name = "serial".into();
    let (_, waits_its_turn) = create_task(&*store, &w, &serial).await;
    let host = executor(&*store, w.app.id, "host-1", T0).await;
    let router = Arc::new(OneInstance {
        to: host.id,
        offered: std::sync::Mutex::default(),
    });
    let c = claimer(&store, "node-a").with_router(router.clone());

    let report = c.run_once(T0).await.unwrap();
    let (on_time, waits_its_turn) = (on_time.unwrap().id, waits_its_turn.unwrap().id);
    assert_eq!(
        *router.offered.lock().unwrap(),
        vec![on_time],
        "a run an overlap policy may hold back is not routed by the claim"
    );
    assert_eq!(report.fires.len(), 2);
    for fire in &report.fires {
        let routed = fire.run.id == on_time;
        assert_eq!(fire.routed, if routed { vec![host.id] } else { vec![] });
        assert_eq!(fire.run.executor_id, routed.then_some(host.id));
    }
    let runs = runs_of(&*store, &w).await;
    let stored = |id| runs.iter().find(|r| r.id == id).unwrap();
    assert_eq!(
        stored(on_time).executor_id,
        Some(host.id),
        "recorded by the claim"
    );
    assert_eq!(stored(on_time).state, RunState::Claimed);
    assert_eq!(stored(waits_its_turn).executor_id, None);

    // Found late past the misfire threshold: the policy decides, so the claim routes nothing.
    for fire in &report.fires {
        start(&*store, &w, &fire.run, T0 + 1).await;
        finish(&*store, &fire.run, T0 + 2).await;
    }
    router.offered.lock().unwrap().clear();
    let report = c.run_once(T0 + 16 * SECOND).await.unwrap();
    assert_eq!(report.misfires, 2, "{report:?}");
    assert!(router.offered.lock().unwrap().is_empty());
    assert!(report.fires.iter().all(|f| f.routed.is_empty()));
}

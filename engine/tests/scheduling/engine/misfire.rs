//! Misfire policies after an outage: whatever the order, batch, node or dispatch history in
//! which the late occurrences are claimed, `fire_once_now` fires exactly one and continues from
//! now, `skip` fires none, `fire_all` fires at most `misfire_max_catch_up`, and each outage raises
//! one misfire alarm.

use std::sync::Arc;

use mthpt_engine::alarm::{AlarmFilter, AlarmKind};
use mthpt_engine::claimer::{ClaimConfig, Claimer};
use mthpt_engine::run::{ClaimedTransition, Run, RunState};
use mthpt_engine::store::{Scope, Store};
use mthpt_engine::task::{MisfirePolicy, OverlapPolicy};

use crate::engine::claiming::{every_10s, finish, misfire_alarms, runs_of, start, times};
use crate::in_tx;
use crate::support::fixtures::*;

fn claimer_with(store: &Arc<dyn Store>, node: &str, lease_ms: i64, batch: i64) -> Claimer {
    Claimer::new(
        store.clone(),
        ClaimConfig {
            node: node.into(),
            groups: vec!["default".into()],
            horizon_ms: 500,
            lease_ms,
            batch,
        },
    )
}

/// A task every 10 s from T0 (misfire threshold `threshold_ms`) whose occurrence at 0 ran normally, and
/// whose occurrence at 10 was claimed by a node that then stopped (its successor at 20 is
/// pending): the state an engine outage starting at T0 + 10 s leaves behind.
async fn outage_at_10s(
    store: &Arc<dyn Store>,
    w: &World,
    policy: MisfirePolicy,
    catch_up: i32,
    lease_ms: i64,
    threshold_ms: i64,
) {
    let mut def = every_10s(w, policy, OverlapPolicy::Parallel);
    def.misfire_max_catch_up = catch_up;
    def.misfire_threshold_ms = threshold_ms;
    create_task(&**store, w, &def).await;
    let a = claimer_with(store, "node-a", lease_ms, 100);
    let first = a.run_once(T0).await.unwrap().fires.remove(0).run;
    start(&**store, w, &first, T0).await;
    finish(&**store, &first, T0 + SECOND).await;
    let report = a.run_once(T0 + 10 * SECOND).await.unwrap();
    assert_eq!(report.fires.len(), 1, "the occurrence at 10 is claimed");
    let runs = runs_of(&**store, w).await;
    assert_eq!(times(&runs, RunState::Claimed), vec![10]);
    assert_eq!(times(&runs, RunState::Pending), vec![20]);
}

/// Claims with `c` every second from `from` to `to` (inclusive), starting and finishing every
/// run it fires at once; returns the fired runs' scheduled times in seconds from T0.
async fn drive(store: &Arc<dyn Store>, w: &World, c: &Claimer, from: i64, to: i64) -> Vec<i64> {
    let mut fired = Vec::new();
    let mut now = from;
    while now <= to {
        loop {
            let report = c.run_once(now).await.unwrap();
            if report.claimed() == 0 {
                break;
            }
            for f in report.fires {
                start(&**store, w, &f.run, now).await;
                finish(&**store, &f.run, now).await;
                fired.push((f.run.scheduled_at - T0) / SECOND);
            }
        }
        now += SECOND;
    }
    fired.sort_unstable();
    fired
}

/// The misfire alarms' messages, newest first.
async fn misfire_messages(store: &dyn Store, w: &World) -> Vec<String> {
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
        .into_iter()
        .map(|a| a.message)
        .collect()
}

/// Gives a claimed run back to the line, as when no executor accepts its dispatch.
async fn refuse(store: &dyn Store, run: &Run, now: i64) {
    in_tx!(store, |tx| tx
        .transition_claimed(&run.fence().unwrap(), &ClaimedTransition::Released, now)
        .await
        .unwrap());
}

/// Restarted at T0 + 105 s (9 missed periods), a fresh claimer taking `batch` runs per claim.
async fn fire_once_after_nine_periods(store: Arc<dyn Store>, batch: i64) {
    let w = world(&*store, "acme").await;
    outage_at_10s(
        &store,
        &w,
        MisfirePolicy::FireOnceNow,
        10,
        5 * SECOND,
        5 * SECOND,
    )
    .await;
    let b = claimer_with(&store, "node-b", 5 * SECOND, batch);
    let fired = drive(&store, &w, &b, T0 + 105 * SECOND, T0 + 135 * SECOND).await;
    assert_eq!(
        fired,
        vec![20, 110, 120, 130],
        "one occurrence of the outage fires; the schedule continues from the restart"
    );
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Skipped), vec![10]);
    assert!(
        runs[1].error.as_deref().unwrap().contains("superseded"),
        "{:?}",
        runs[1].error
    );
    let messages = misfire_messages(&*store, &w).await;
    assert_eq!(messages.len(), 1, "one alarm per outage: {messages:?}");
    assert!(messages[0].contains("fired once now"), "{}", messages[0]);
}

pub async fn fire_once_now_after_an_outage_fires_one_and_continues_from_now(store: Arc<dyn Store>) {
    fire_once_after_nine_periods(store, 100).await;
}

pub async fn fire_once_now_holds_when_late_runs_come_in_separate_batches(store: Arc<dyn Store>) {
    fire_once_after_nine_periods(store, 1).await;
}

pub async fn fire_once_now_holds_when_the_earlier_late_run_is_claimed_last(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    // Node A's claim of the occurrence at 10 holds until T0 + 130 s: node B meets the
    // occurrence at 20 first, and only then the one at 10.
    outage_at_10s(
        &store,
        &w,
        MisfirePolicy::FireOnceNow,
        10,
        120 * SECOND,
        5 * SECOND,
    )
    .await;
    let b = claimer_with(&store, "node-b", 5 * SECOND, 100);
    let fired = drive(&store, &w, &b, T0 + 105 * SECOND, T0 + 135 * SECOND).await;
    assert_eq!(fired, vec![20, 110, 120, 130]);
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Skipped), vec![10]);
    assert_eq!(misfire_alarms(&*store, &w).await, 1);
}

pub async fn fire_once_now_holds_when_the_outage_is_just_over_the_threshold(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    // Threshold 25 s; back at T0 + 42 s: the occurrence at 10 is a misfire (32 s late), the one
    // at 20 (22 s late) is not by itself, but belongs to the same outage.
    outage_at_10s(
        &store,
        &w,
        MisfirePolicy::FireOnceNow,
        10,
        5 * SECOND,
        25 * SECOND,
    )
    .await;
    let b = claimer_with(&store, "node-b", 5 * SECOND, 100);
    let fired = drive(&store, &w, &b, T0 + 42 * SECOND, T0 + 65 * SECOND).await;
    assert_eq!(fired, vec![20, 50, 60]);
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Skipped), vec![10]);
    assert_eq!(misfire_alarms(&*store, &w).await, 1);
}

pub async fn an_outage_under_the_threshold_is_caught_up_without_misfire(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    // Threshold 25 s; back at T0 + 32 s: the occurrence at 10 is 22 s late, within tolerance.
    outage_at_10s(
        &store,
        &w,
        MisfirePolicy::FireOnceNow,
        10,
        5 * SECOND,
        25 * SECOND,
    )
    .await;
    let b = claimer_with(&store, "node-b", 5 * SECOND, 100);
    let fired = drive(&store, &w, &b, T0 + 32 * SECOND, T0 + 45 * SECOND).await;
    assert_eq!(fired, vec![10, 20, 30, 40]);
    assert_eq!(misfire_alarms(&*store, &w).await, 0);
}

pub async fn skip_after_an_outage_fires_none_and_continues_from_now(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    outage_at_10s(&store, &w, MisfirePolicy::Skip, 10, 5 * SECOND, 5 * SECOND).await;
    let b = claimer_with(&store, "node-b", 5 * SECOND, 100);
    let fired = drive(&store, &w, &b, T0 + 105 * SECOND, T0 + 125 * SECOND).await;
    assert_eq!(fired, vec![110, 120]);
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Skipped), vec![10, 20]);
    let messages = misfire_messages(&*store, &w).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(messages[0].contains("skipped"), "{}", messages[0]);
}

pub async fn fire_all_after_an_outage_fires_at_most_its_bound(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    outage_at_10s(
        &store,
        &w,
        MisfirePolicy::FireAll,
        3,
        5 * SECOND,
        5 * SECOND,
    )
    .await;
    let b = claimer_with(&store, "node-b", 5 * SECOND, 1);
    let fired = drive(&store, &w, &b, T0 + 105 * SECOND, T0 + 125 * SECOND).await;
    assert_eq!(
        fired,
        vec![80, 90, 100, 110, 120],
        "the 3 most recent missed occurrences, then the schedule"
    );
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Skipped), vec![10, 20]);
    let messages = misfire_messages(&*store, &w).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].contains("3 occurrence(s) fire"),
        "{}",
        messages[0]
    );
}

pub async fn fire_all_holds_when_the_earlier_late_run_is_claimed_last(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    // Node A's claim of the occurrence at 10 holds until T0 + 130 s.
    outage_at_10s(
        &store,
        &w,
        MisfirePolicy::FireAll,
        3,
        120 * SECOND,
        5 * SECOND,
    )
    .await;
    let b = claimer_with(&store, "node-b", 5 * SECOND, 100);
    let fired = drive(&store, &w, &b, T0 + 105 * SECOND, T0 + 135 * SECOND).await;
    assert_eq!(fired, vec![80, 90, 100, 110, 120, 130]);
    let runs = runs_of(&*store, &w).await;
    assert_eq!(times(&runs, RunState::Skipped), vec![10, 20]);
    assert_eq!(misfire_alarms(&*store, &w).await, 1);
}

pub async fn fire_all_within_its_bound_fires_every_missed_occurrence_once(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    outage_at_10s(
        &store,
        &w,
        MisfirePolicy::FireAll,
        20,
        5 * SECOND,
        5 * SECOND,
    )
    .await;
    let b = claimer_with(&store, "node-b", 5 * SECOND, 100);
    let fired = drive(&store, &w, &b, T0 + 105 * SECOND, T0 + 115 * SECOND).await;
    assert_eq!(fired, vec![10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110]);
    assert_eq!(misfire_alarms(&*store, &w).await, 1);
}

pub async fn refused_dispatch_found_late_follows_the_policy(store: Arc<dyn Store>) {
    for (policy, fires) in [(MisfirePolicy::FireOnceNow, 1), (MisfirePolicy::Skip, 0)] {
        let w = world(&*store, &format!("t-{policy}").replace('_', "-")).await;
        create_task(&*store, &w, &every_10s(&w, policy, OverlapPolicy::Parallel)).await;
        let c = claimer_with(&store, "node-a", 5 * SECOND, 100);
        let report = c.run_once(T0).await.unwrap();
        refuse(&*store, &report.fires[0].run, T0).await;
        // Found 8 s late (threshold 5 s) after its first dispatch was refused.
        let report = c.run_once(T0 + 8 * SECOND).await.unwrap();
        assert_eq!(
            (report.misfires, report.fires.len()),
            (1, fires),
            "policy {policy}"
        );
        assert_eq!(misfire_alarms(&*store, &w).await, 1, "policy {policy}");
        let runs = runs_of(&*store, &w).await;
        assert_eq!(times(&runs, RunState::Pending), vec![10], "policy {policy}");
    }
}

pub async fn refused_dispatches_through_an_outage_fire_one_occurrence(store: Arc<dyn Store>) {
    let w = world(&*store, "acme").await;
    create_task(
        &*store,
        &w,
        &every_10s(&w, MisfirePolicy::FireOnceNow, OverlapPolicy::Parallel),
    )
    .await;
    let c = claimer_with(&store, "node-a", 5 * SECOND, 100);
    // No executor for 95 s: every dispatch is refused and every run goes back in line.
    let mut now = T0;
    while now <= T0 + 95 * SECOND {
        for f in c.run_once(now).await.unwrap().fires {
            refuse(&*store, &f.run, now).await;
        }
        now += SECOND;
    }
    let alarms_during = misfire_alarms(&*store, &w).await;
    // An executor is back: one occurrence fires, then the schedule from now.
    let fired = drive(&store, &w, &c, now, T0 + 115 * SECOND).await;
    assert_eq!(fired, vec![90, 100, 110]);
    let runs = runs_of(&*store, &w).await;
    assert!(
        runs.iter()
            .filter(|r| r.scheduled_at < T0 + 90 * SECOND)
            .all(|r| r.state == RunState::Skipped),
        "nothing from inside the outage is left to fire"
    );
    assert_eq!(misfire_alarms(&*store, &w).await, alarms_during);
}

//! Deterministic tests of the engine's decisions — claiming (misfire and overlap policies,
//! successors, fencing), outcomes (retries, recovery, chains, joins, fixed delay, alarms) and
//! the watchdog — stepping `run_once` with explicit times on both backends; the alarm relay,
//! notifications, and cron against Quartz and the fuzz corpus. One binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod alarm_relay;
mod engine;
mod fuzz_corpus;
mod notify;
mod quartz_differential;
#[path = "../support/mod.rs"]
mod support;

use mthpt_engine::on_both_backends;

use engine::{claiming, misfire, outcomes, watching};

on_both_backends!(
    claiming::claiming_fires_due_runs_and_materialises_their_successors,
    claiming::misfire_fire_once_now_fires_late_occurrence_and_continues_from_now,
    claiming::misfire_skip_skips_late_occurrence_and_continues_from_now,
    claiming::misfire_fire_all_catches_up_every_missed_occurrence_within_its_bound,
    claiming::misfire_fire_all_beyond_its_bound_fires_only_the_most_recent,
    claiming::overlap_skip_skips_while_the_previous_run_runs,
    claiming::overlap_serial_waits_for_the_previous_run_in_order,
    claiming::overlap_replace_cancels_the_previous_run,
    claiming::runs_of_a_deleted_task_are_cancelled_when_claimed,
    claiming::a_disabled_tenants_runs_wait_unclaimed_until_it_is_enabled,
    claiming::node_that_lost_its_lease_is_fenced_and_another_node_fires,
    claiming::a_claim_records_where_runs_that_certainly_fire_go,
    misfire::fire_once_now_after_an_outage_fires_one_and_continues_from_now,
    misfire::fire_once_now_holds_when_late_runs_come_in_separate_batches,
    misfire::fire_once_now_holds_when_the_earlier_late_run_is_claimed_last,
    misfire::fire_once_now_holds_when_the_outage_is_just_over_the_threshold,
    misfire::an_outage_under_the_threshold_is_caught_up_without_misfire,
    misfire::skip_after_an_outage_fires_none_and_continues_from_now,
    misfire::fire_all_after_an_outage_fires_at_most_its_bound,
    misfire::fire_all_within_its_bound_fires_every_missed_occurrence_once,
    misfire::fire_all_holds_when_the_earlier_late_run_is_claimed_last,
    misfire::refused_dispatch_found_late_follows_the_policy,
    misfire::refused_dispatches_through_an_outage_fire_one_occurrence,
    outcomes::success_starts_the_children_its_condition_admits,
    outcomes::retryable_failure_retries_with_backoff_then_raises_retries_exhausted,
    outcomes::fatal_failure_does_not_retry_and_raises_run_failed,
    outcomes::timeout_retries_and_raises_timed_out,
    outcomes::success_resolves_the_open_failure_alarms_of_its_task,
    outcomes::lost_run_is_recovered_while_attempts_remain,
    outcomes::repeated_result_changes_nothing,
    outcomes::join_child_runs_once_after_all_parents_in_the_chain,
    outcomes::fixed_delay_occurrence_follows_the_finish,
    outcomes::broadcast_children_start_once_after_every_shard,
    watching::run_past_its_deadline_is_timed_out_retried_and_cancelled,
    watching::silent_executor_is_lost_and_its_runs_recovered,
    watching::silent_executor_that_answers_its_probe_is_not_lost,
    watching::late_success_for_a_lost_run_wins_over_its_unstarted_recovery,
    watching::late_success_after_the_recovery_started_is_recorded_alone,
    watching::recovery_failing_after_a_recorded_late_success_starts_the_chain,
    watching::late_success_after_its_recovery_failed_starts_the_chain,
    watching::late_success_finished_before_the_deadline_wins_over_the_timeout,
    watching::silent_node_is_reported_once,
    watching::run_not_started_in_time_raises_one_alarm,
    watching::backlog_waiting_for_capacity_raises_one_alarm_per_episode,
    watching::runs_held_back_by_a_tenant_quota_raise_one_quota_alarm_per_episode,
);

/// A node frozen in the middle of a transaction (a paused process, a partition) holds its row
/// locks for at most about one lease: the database ends its idle session, and a node waiting
/// for the same run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn frozen_transaction_stalls_others_for_at_most_about_a_lease() {
    use mthpt_engine::run::{RunCompletion, RunState};
    use mthpt_engine::store::ClaimRequest;
    use support::fixtures::*;

    let db = mthpt_engine::testing::postgres().await;
    let store = db.shared();
    let w = world(&*store, "acme").await;
    let (task, _) = create_task(&*store, &w, &manual(w.app.id, "held")).await;
    let run = in_tx!(&*store, |tx| tx
        .trigger_task(w.tenant.id, task.id, None, "alice", T0)
        .await
        .unwrap());
    let mut frozen = store.begin().await.unwrap();
    let claimed = frozen
        .claim_due_runs(&ClaimRequest {
            node: "frozen".into(),
            groups: vec!["default".into()],
            now: T0,
            horizon_ms: 0,
            lease_ms: 2 * SECOND,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let started = std::time::Instant::now();
    let mut tx = store.begin().await.unwrap();
    let cancelled = RunCompletion {
        state: RunState::Cancelled,
        output: None,
        error: Some("cancelled by bob".into()),
        log: None,
        started_at: None,
        finished_at: T0 + SECOND,
        reported_by: None,
    };
    tx.complete_run(run.id, None, &cancelled).await.unwrap();
    tx.commit().await.unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(1_000)
            && waited < std::time::Duration::from_millis(3_000),
        "waited {waited:?} for the frozen transaction"
    );
    assert!(
        frozen.commit().await.is_err(),
        "the frozen node's transaction was ended"
    );
    db.cleanup().await;
}

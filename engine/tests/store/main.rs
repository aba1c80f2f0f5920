//! The store's tests, in one binary: the conformance suite — every case written once (in
//! `conformance/`) and run against both backends, PostgreSQL in a fresh schema per test, SQLite
//! in a fresh file per test — plus migrations, retention, server settings, executor hosts, and
//! database URLs with several PostgreSQL hosts (a failover among servers of the test's own).
//!
//! PostgreSQL is found at `MTHPT_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). When it cannot be reached the PostgreSQL cases
//! fail; they never skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod conformance;
mod executor_hosts;
mod executor_undrain;
mod failover;
mod migrations;
mod pg_hosts;
mod retention;
mod server_settings;
#[path = "../support/mod.rs"]
mod support;

use mthpt_engine::on_both_backends;

use conformance::{alarms, apps, channels, claims, isolation, runs, tasks, tenants, views};

on_both_backends!(
    tenants::migrating_twice_changes_nothing,
    tenants::tenants_are_created_read_updated_and_deleted,
    tenants::executor_hosts_are_stored_normalised_and_replaced_whole,
    tenants::moving_a_tenant_to_another_node_group_moves_its_pending_runs,
    tenants::users_are_scoped_to_their_tenant_and_operators_to_none,
    tenants::api_tokens_authenticate_until_revoked_or_expired,
    tenants::sessions_hold_until_signed_out_expired_or_their_user_disabled,
    tenants::audit_events_are_appended_and_listed_newest_first,
    tenants::tenant_quotas_are_unlimited_until_set_and_validated,
    tenants::a_tenants_weight_is_one_until_set_and_stays_its_own,
    tenants::tenant_usage_counts_tasks_waiting_and_running_runs_of_that_tenant,
    apps::apps_are_created_read_and_deleted_unless_in_use,
    apps::executors_register_heartbeat_drain_and_get_lost,
    apps::engine_nodes_heartbeat_and_are_reported_lost_once,
    tasks::creating_a_task_materialises_its_first_occurrence,
    tasks::invalid_definitions_are_refused_naming_the_field,
    tasks::stale_version_is_a_conflict_and_writes_nothing,
    tasks::editing_a_task_replaces_its_pending_occurrence,
    tasks::pausing_drops_the_occurrence_and_resuming_restores_it,
    tasks::deleting_a_task_removes_pending_runs_and_frees_its_name,
    tasks::tasks_are_listed_with_filters_and_pages,
    tasks::materialising_follows_window_and_max_fires,
    tasks::dependencies_are_kept_and_a_cycle_is_refused_naming_it,
    tasks::manual_triggers_in_the_same_millisecond_are_distinct_runs,
    tasks::scheduled_fire_counts_add_up_per_task_in_one_write,
    tasks::tasks_and_their_children_are_read_for_many_at_once,
    tasks::the_claims_task_lock_counts_only_schedules_that_follow_on_claim,
    runs::same_occurrence_inserted_by_two_nodes_exists_once,
    runs::a_finished_occurrence_is_not_inserted_again,
    runs::a_run_of_a_task_that_does_not_exist_is_refused,
    runs::a_run_naming_another_tenants_task_is_refused,
    runs::claims_take_due_runs_of_served_groups_in_order,
    runs::expired_lease_fences_the_old_claimer_and_another_node_reclaims,
    runs::every_claimed_transition_needs_the_current_fence,
    runs::batch_start_and_release_move_only_runs_still_held,
    runs::a_result_carrying_its_send_time_records_the_dispatch_before_the_start,
    runs::cancel_requests_reach_runs_an_executor_may_hold_once,
    runs::due_signals_arrive_only_after_commit,
    runs::released_run_keeps_its_place_in_line,
    runs::results_are_recorded_once_and_repeats_are_ignored,
    runs::a_started_runs_result_belongs_to_the_app_that_runs_it,
    runs::results_completed_in_one_batch_follow_the_single_result_rules,
    runs::progress_and_logs_are_recorded_for_runs_sent_to_an_executor_only,
    runs::watchdog_queries_find_overdue_lost_and_active_runs,
    runs::runs_past_their_start_timeout_are_found_until_alarmed,
    runs::runs_of_an_occurrence_are_found_across_shards_and_attempts,
    runs::chain_runs_are_found_by_root,
    runs::runs_are_listed_with_filters_and_pages,
    runs::every_transition_keeps_a_runs_times_in_step_with_its_state,
    claims::concurrent_claimers_claim_every_run_exactly_once,
    claims::a_claim_records_the_dispatch_intent_it_is_given_in_the_same_write,
    claims::another_tenants_backlog_does_not_hold_back_a_due_run,
    claims::runs_of_an_app_at_capacity_wait_and_freed_capacity_is_claimed_in_due_order,
    claims::tenant_weights_give_proportional_shares_of_a_claim,
    claims::a_tenant_at_its_concurrency_quota_gets_no_share_until_a_run_finishes,
    claims::the_fire_rate_quota_limits_claims_to_the_tokens_in_the_tenants_bucket,
    alarms::alarms_are_raised_once_published_once_and_acknowledged,
    channels::channels_are_kept_per_tenant_and_deleted_with_their_log,
    channels::deliveries_follow_severity_mutes_and_tenants_and_are_claimed_once,
    channels::metrics_snapshot_counts_outbox_and_live_executors,
    alarms::repeats_count_on_the_open_alarm_and_every_transition_is_an_event,
    alarms::concurrent_relays_take_disjoint_batches_of_events,
    alarms::wrapper_alarms_repeat_per_own_kind_and_are_resolved_by_their_key,
    isolation::tenant_b_sees_and_changes_nothing_of_tenant_a,
    views::runs_are_filtered_by_trigger_executor_and_finish_time,
    views::alarms_are_filtered_by_severity_task_and_acknowledgement,
    views::samples_cover_final_runs_scheduled_in_the_range,
    views::occurrence_runs_list_every_attempt_of_the_tenant_only,
    views::trigger_keys_remember_the_first_run_until_they_expire,
    views::alarm_mutes_are_set_listed_cleared_and_scoped,
);

//! Rollups of finished runs and retention, on both backends, with time as an argument (the
//! injectable clock's `now`): old finished runs go once their minute is rolled up, their
//! statistics remain, runs that are not final are never removed, a tenant's own retention
//! holds, and rolling up is idempotent and counts a late-finishing run once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_engine::testing::{self, TestDb};
use sqlx::{Connection, Executor};

mthpt_engine::on_both_backends!(
    cases::old_finished_runs_go_and_their_statistics_remain,
    cases::runs_that_are_not_final_are_never_removed,
    cases::a_tenant_with_a_longer_retention_keeps_its_runs,
    cases::rolling_up_twice_writes_the_same_rows,
    cases::pages_over_runs_of_one_instant_read_each_run_once,
    cases::batches_that_start_where_the_last_stopped_delete_every_expired_run,
    cases::a_tenant_another_node_is_rolling_up_is_skipped_until_its_lease_runs_out,
    cases::a_rollup_overtaken_by_another_node_writes_nothing,
    cases::a_late_finishing_run_is_counted_once,
    cases::runs_of_a_chain_still_running_stay,
    cases::a_removed_runs_references_go_with_it,
    cases::retention_is_validated,
    cases::published_alarm_events_go_after_a_week,
    cases::tenant_rows_merge_every_task_of_a_minute,
);

/// Migration 0012 fills the tenant-wide rows of minutes rolled up before it from their
/// per-task rows: the migration's SQL, run again on a database whose tenant rows are gone,
/// writes what the rollup pass writes.
async fn tenant_rollups_migration_merges_earlier_rows<C>(db: TestDb, migration: &'static str)
where
    C: Connection,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    let expected = cases::rolled_up_three_tasks(db.shared()).await;
    let mut conn = C::connect(&db.url()).await.unwrap();
    sqlx::raw_sql("DELETE FROM tenant_rollups")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::raw_sql(migration).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    cases::assert_tenant_rows(db.shared(), &expected).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_tenant_rollups_migration_merges_earlier_rows_on_postgres() {
    tenant_rollups_migration_merges_earlier_rows::<sqlx::PgConnection>(
        testing::postgres().await,
        include_str!("../../../migrations/postgres/0012_tenant_rollups.sql"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_tenant_rollups_migration_merges_earlier_rows_on_sqlite() {
    tenant_rollups_migration_merges_earlier_rows::<sqlx::SqliteConnection>(
        testing::sqlite().await,
        include_str!("../../../migrations/sqlite/0012_tenant_rollups.sql"),
    )
    .await;
}

mod cases {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use mthpt_engine::rollup::{MINUTE_MS, Rollup, RollupConfig, floor_minute};
    use mthpt_engine::run::{Run, RunState, TriggerKind};
    use mthpt_engine::store::{RunRollup, RunSampleQuery, Store, StoreError};
    use mthpt_engine::task::TaskId;
    use mthpt_engine::tenant::{DEFAULT_RETENTION_MS, TenantId, TenantUpdate};

    use crate::in_tx;
    use crate::support::fixtures::*;

    const DAY: i64 = 24 * 3600 * 1000;

    fn rollup(store: &Arc<dyn Store>) -> Rollup {
        Rollup::new(store.clone(), RollupConfig::default())
    }

    /// A run of `task` scheduled at `at`, finished with `state` after `took` ms.
    async fn finished(
        store: &dyn Store,
        w: &World,
        task: &mthpt_engine::task::Task,
        at: i64,
        state: RunState,
        took: i64,
    ) -> Run {
        let run = insert(store, &occurrence(w, task, at)).await;
        in_tx!(store, |tx| tx
            .complete_run(run.id, None, &done(state, at + 10, at + 10 + took))
            .await
            .unwrap());
        run
    }

    /// Final runs of the tenant scheduled in `from..to`.
    async fn final_runs(store: &dyn Store, tenant: TenantId, from: i64, to: i64) -> usize {
        let mut tx = read(store).await;
        tx.run_samples(
            tenant,
            &RunSampleQuery {
                task_id: None,
                scheduled_from: from,
                scheduled_before: to,
                limit: 100_000,
            },
        )
        .await
        .unwrap()
        .len()
    }

    async fn rollups(store: &dyn Store, tenant: TenantId) -> Vec<RunRollup> {
        let mut tx = read(store).await;
        tx.run_rollups(tenant, None, i64::MIN / 2, i64::MAX / 2)
            .await
            .unwrap()
    }

    /// Runs by (minute, task, state) in the rollups.
    fn counts(rows: &[RunRollup]) -> BTreeMap<(i64, TaskId, &'static str), i64> {
        let mut out = BTreeMap::new();
        for r in rows {
            for (state, n) in r.by_state() {
                *out.entry((r.minute, r.task_id, state.as_str()))
                    .or_insert(0) += n;
            }
        }
        out
    }

    /// The same, of the final runs themselves.
    async fn raw_counts(
        store: &dyn Store,
        tenant: TenantId,
    ) -> BTreeMap<(i64, TaskId, &'static str), i64> {
        let mut tx = read(store).await;
        let samples = tx
            .run_samples(
                tenant,
                &RunSampleQuery {
                    task_id: None,
                    scheduled_from: i64::MIN / 2,
                    scheduled_before: i64::MAX / 2,
                    limit: 100_000,
                },
            )
            .await
            .unwrap();
        let mut out = BTreeMap::new();
        for s in samples {
            *out.entry((floor_minute(s.scheduled_at), s.task_id, s.state.as_str()))
                .or_insert(0) += 1;
        }
        out
    }

    pub async fn old_finished_runs_go_and_their_statistics_remain(store: Arc<dyn Store>) {
        let s = &*store;
        let w = world(s, "acme").await;
        assert_eq!(w.tenant.retention_ms, DEFAULT_RETENTION_MS);
        let (task, _) = create_task(s, &w, &manual(w.app.id, "job")).await;
        let states = [
            RunState::Succeeded,
            RunState::Failed,
            RunState::Succeeded,
            RunState::TimedOut,
            RunState::Lost,
            RunState::Succeeded,
        ];
        for (i, state) in states.into_iter().enumerate() {
            let at = T0 + (i as i64 / 2) * MINUTE + (i as i64 % 2) * SECOND;
            finished(s, &w, &task, at, state, 100 * (i as i64 + 1)).await;
        }
        let before = raw_counts(s, w.tenant.id).await;
        assert_eq!(before.values().sum::<i64>(), 6);

        // Six days on: rolled up, nothing past the retention yet.
        let report = rollup(&store).run_once(T0 + 6 * DAY).await.unwrap();
        assert_eq!(report.deleted, 0);
        assert!(
            report.behind,
            "a pass rolls at most a day of minutes: six days are a backlog"
        );
        assert_eq!(final_runs(s, w.tenant.id, T0, T0 + DAY).await, 6);
        assert_eq!(counts(&rollups(s, w.tenant.id).await), before);

        // Eight days on: the runs go, their figures stay.
        let report = rollup(&store).run_once(T0 + 8 * DAY).await.unwrap();
        assert_eq!(report.deleted, 6);
        assert_eq!(final_runs(s, w.tenant.id, T0, T0 + DAY).await, 0);
        let rows = rollups(s, w.tenant.id).await;
        assert_eq!(
            counts(&rows),
            before,
            "same counts by state as before deletion"
        );
        assert_eq!(rows.len(), 3, "one row per task and minute");
        assert_eq!(rows[0].minute, T0);
        assert_eq!(rows[0].duration_hist.0.iter().map(|p| p[1]).sum::<i64>(), 2);
        // From the tenant's oldest run on, at most a day of minutes per pass.
        let mut tx = read(s).await;
        assert_eq!(
            tx.rollup_watermark(w.tenant.id).await.unwrap(),
            Some(T0 + 2 * RollupConfig::default().max_minutes * MINUTE_MS)
        );
    }

    pub async fn runs_that_are_not_final_are_never_removed(store: Arc<dyn Store>) {
        let s = &*store;
        let w = world(s, "acme").await;
        let (task, _) = create_task(s, &w, &manual(w.app.id, "job")).await;
        for i in 0..3 {
            finished(s, &w, &task, T0 + i * MINUTE, RunState::Succeeded, 50).await;
        }
        let pending = insert(s, &occurrence(&w, &task, T0 + 10 * MINUTE)).await;

        let report = rollup(&store).run_once(T0 + 365 * DAY).await.unwrap();
        assert_eq!(report.deleted, 3);
        let mut tx = read(s).await;
        let still = tx.get_run(w.tenant.id, pending.id).await.unwrap();
        assert_eq!(still.state, RunState::Pending);
        // The watermark waits at the minute of the run that is not final.
        assert_eq!(
            tx.rollup_watermark(w.tenant.id).await.unwrap(),
            Some(T0 + 10 * MINUTE)
        );
        drop(tx);
        let again = rollup(&store).run_once(T0 + 366 * DAY).await.unwrap();
        assert_eq!(again.deleted, 0);
        let mut tx = read(s).await;
        assert_eq!(
            tx.get_run(w.tenant.id, pending.id).await.unwrap().state,
            RunState::Pending
        );
    }

    pub async fn a_tenant_with_a_longer_retention_keeps_its_runs(store: Arc<dyn Store>) {
        let s = &*store;
        let short = world(s, "acme").await;
        let long = world(s, "globex").await;
        let updated = in_tx!(s, |tx| tx
            .update_tenant(
                long.tenant.id,
                &TenantUpdate {
                    retention_ms: Some(30 * DAY),
                    ..Default::default()
                },
                T0,
            )
            .await
            .unwrap());
        assert_eq!(updated.retention_ms, 30 * DAY);
        for w in [&short, &long] {
            let (task, _) = create_task(s, w, &manual(w.app.id, "job")).await;
            for i in 0..4 {
                finished(s, w, &task, T0 + i * MINUTE, RunState::Failed, 10).await;
            }
        }
        let report = rollup(&store).run_once(T0 + 10 * DAY).await.unwrap();
        assert_eq!(report.deleted, 4, "only the 7-day tenant's runs");
        assert_eq!(final_runs(s, short.tenant.id, T0, T0 + DAY).await, 0);
        assert_eq!(final_runs(s, long.tenant.id, T0, T0 + DAY).await, 4);
        assert_eq!(
            rollups(s, long.tenant.id).await.len(),
            4,
            "rolled up all the same"
        );

        let report = rollup(&store).run_once(T0 + 31 * DAY).await.unwrap();
        assert_eq!(report.deleted, 4);
        assert_eq!(final_runs(s, long.tenant.id, T0, T0 + DAY).await, 0);
    }

    /// Five tasks run by hand, `a` to `e`.
    async fn five_tasks(store: &dyn Store, w: &World) -> Vec<mthpt_engine::task::Task> {
        let mut tasks = Vec::new();
        for name in ["a", "b", "c", "d", "e"] {
            tasks.push(create_task(store, w, &manual(w.app.id, name)).await.0);
        }
        tasks
    }

    /// Pages of two runs over runs that share their scheduled instant: the keyset (scheduled
    /// time, id) reads each run once, and the rollups count them all.
    pub async fn pages_over_runs_of_one_instant_read_each_run_once(store: Arc<dyn Store>) {
        let s = &*store;
        let w = world(s, "acme").await;
        let tasks = five_tasks(s, &w).await;
        for task in &tasks {
            finished(s, &w, task, T0, RunState::Succeeded, 10).await;
            finished(s, &w, task, T0 + 30 * SECOND, RunState::Failed, 10).await;
            finished(s, &w, task, T0 + MINUTE, RunState::Succeeded, 10).await;
        }
        let paged = Rollup::new(
            store.clone(),
            RollupConfig {
                page: 2,
                ..RollupConfig::default()
            },
        );
        paged.run_once(T0 + DAY).await.unwrap();
        let rows = rollups(s, w.tenant.id).await;
        assert_eq!(rows.iter().map(RunRollup::runs).sum::<i64>(), 15);
        assert_eq!(counts(&rows), raw_counts(s, w.tenant.id).await);
    }

    pub async fn batches_that_start_where_the_last_stopped_delete_every_expired_run(
        store: Arc<dyn Store>,
    ) {
        let s = &*store;
        // A chain's finished root at T0 stays while its next run waits (20 minutes on).
        let (w, _, root, next) = chain_of_two(s, T0 + 20 * MINUTE).await;
        let tasks = five_tasks(s, &w).await;
        // Five runs at each of three instants: batches of two end in the middle of an instant.
        for task in &tasks {
            for k in 0..3 {
                finished(s, &w, task, T0 + k * SECOND, RunState::Succeeded, 10).await;
            }
        }

        let batched = Rollup::new(
            store.clone(),
            RollupConfig {
                delete_batch: 2,
                max_delete_batches: 100,
                ..RollupConfig::default()
            },
        );
        let report = batched.run_once(T0 + 365 * DAY).await.unwrap();
        assert_eq!(report.deleted, 15, "every expired run, in batches of two");
        let mut tx = read(s).await;
        assert_eq!(tx.get_run(w.tenant.id, root.id).await.unwrap().id, root.id);
        assert_eq!(
            tx.get_run(w.tenant.id, next.id).await.unwrap().state,
            RunState::Pending
        );
        drop(tx);
        assert_eq!(final_runs(s, w.tenant.id, T0, T0 + MINUTE).await, 1);
    }

    pub async fn rolling_up_twice_writes_the_same_rows(store: Arc<dyn Store>) {
        let s = &*store;
        let w = world(s, "acme").await;
        let (a, _) = create_task(s, &w, &manual(w.app.id, "a")).await;
        let (b, _) = create_task(s, &w, &manual(w.app.id, "b")).await;
        for i in 0..5 {
            finished(
                s,
                &w,
                &a,
                T0 + i * 20 * SECOND,
                RunState::Succeeded,
                100 + i,
            )
            .await;
            finished(s, &w, &b, T0 + i * 20 * SECOND, RunState::Skipped, 0).await;
        }
        let now = T0 + DAY;
        let first = rollup(&store).run_once(now).await.unwrap();
        assert!(first.rows > 0);
        let rows = rollups(s, w.tenant.id).await;
        let second = rollup(&store).run_once(now).await.unwrap();
        assert_eq!(
            (second.minutes, second.rows),
            (0, 0),
            "nothing left to roll"
        );
        assert!(!second.behind, "caught up: the loop waits for its interval");
        assert_eq!(rollups(s, w.tenant.id).await, rows);
        // Writing the same minutes again (as a node racing another would) replaces the rows
        // with equal ones rather than adding to them.
        in_tx!(s, |tx| tx.upsert_run_rollups(&rows).await.unwrap());
        assert_eq!(rollups(s, w.tenant.id).await, rows);
        assert_eq!(counts(&rows), raw_counts(s, w.tenant.id).await);
    }

    /// Another node took the tenant (its lease, not a transaction held open): this node
    /// neither rolls it up nor deletes its runs until the lease has run out.
    pub async fn a_tenant_another_node_is_rolling_up_is_skipped_until_its_lease_runs_out(
        store: Arc<dyn Store>,
    ) {
        let s = &*store;
        let w = world(s, "acme").await;
        let (task, _) = create_task(s, &w, &manual(w.app.id, "job")).await;
        for i in 0..3 {
            finished(s, &w, &task, T0 + i * MINUTE, RunState::Succeeded, 50).await;
        }
        let now = T0 + 8 * DAY;
        let lease_ms = RollupConfig::default().lease_ms;
        let taken = in_tx!(s, |tx| {
            let watermark = tx
                .init_rollup_watermark(w.tenant.id, T0, now)
                .await
                .unwrap();
            assert_eq!(watermark, T0, "created at the oldest run's minute");
            tx.lease_rollup(w.tenant.id, watermark, now, now + lease_ms)
                .await
                .unwrap()
        });
        assert!(taken);
        let second = in_tx!(s, |tx| tx
            .lease_rollup(w.tenant.id, T0, now + 1, now + 1 + lease_ms)
            .await
            .unwrap());
        assert!(!second, "one lease at a time");
        // A node whose own lease ran out gives back only its own: this one stays.
        in_tx!(s, |tx| tx
            .release_rollup_lease(w.tenant.id, now - 1)
            .await
            .unwrap());

        let report = rollup(&store).run_once(now + 1).await.unwrap();
        assert_eq!(
            (report.skipped, report.minutes, report.deleted),
            (1, 0, 0),
            "skipped while the other node's lease runs"
        );
        assert_eq!(final_runs(s, w.tenant.id, T0, T0 + DAY).await, 3);

        let report = rollup(&store).run_once(now + lease_ms).await.unwrap();
        assert_eq!(report.skipped, 0, "the lease ran out: taken over");
        assert_eq!(report.deleted, 3);
        assert_eq!(
            counts(&rollups(s, w.tenant.id).await).values().sum::<i64>(),
            3
        );
        // The pass gave its own lease back: the next one need not wait for it.
        let again = in_tx!(s, |tx| {
            let watermark = tx
                .init_rollup_watermark(w.tenant.id, T0, now)
                .await
                .unwrap();
            tx.lease_rollup(w.tenant.id, watermark, now + lease_ms, now + 2 * lease_ms)
                .await
                .unwrap()
        });
        assert!(again, "no lease left behind by a finished pass");
    }

    /// Two nodes read the same minutes (a lease ran out while the first still read): the
    /// second to finish finds the watermark moved and writes nothing, since retention may
    /// already have deleted runs it read.
    pub async fn a_rollup_overtaken_by_another_node_writes_nothing(store: Arc<dyn Store>) {
        let s = &*store;
        let w = world(s, "acme").await;
        let (task, _) = create_task(s, &w, &manual(w.app.id, "job")).await;
        finished(s, &w, &task, T0, RunState::Succeeded, 50).await;
        let now = T0 + DAY;
        in_tx!(s, |tx| tx
            .init_rollup_watermark(w.tenant.id, T0, now)
            .await
            .unwrap());
        let first = in_tx!(s, |tx| tx
            .advance_rollup_watermark(w.tenant.id, T0, T0 + MINUTE, now)
            .await
            .unwrap());
        assert!(first);
        let late = in_tx!(s, |tx| tx
            .advance_rollup_watermark(w.tenant.id, T0, T0 + 2 * MINUTE, now)
            .await
            .unwrap());
        assert!(!late, "the watermark had moved");
        let backwards = in_tx!(s, |tx| tx
            .advance_rollup_watermark(w.tenant.id, T0 + MINUTE, T0, now)
            .await
            .unwrap());
        assert!(!backwards, "never backwards");
        let mut tx = read(s).await;
        assert_eq!(
            tx.rollup_watermark(w.tenant.id).await.unwrap(),
            Some(T0 + MINUTE)
        );
    }

    pub async fn a_late_finishing_run_is_counted_once(store: Arc<dyn Store>) {
        let s = &*store;
        let w = world(s, "acme").await;
        let (task, _) = create_task(s, &w, &manual(w.app.id, "job")).await;
        finished(s, &w, &task, T0, RunState::Succeeded, 10).await;
        let late = insert(s, &occurrence(&w, &task, T0 + MINUTE)).await;
        finished(s, &w, &task, T0 + 2 * MINUTE, RunState::Succeeded, 10).await;

        let now = T0 + 30 * MINUTE;
        rollup(&store).run_once(now).await.unwrap();
        let rows = rollups(s, w.tenant.id).await;
        assert_eq!(rows.iter().map(|r| r.minute).collect::<Vec<_>>(), vec![T0]);

        in_tx!(s, |tx| tx
            .complete_run(late.id, None, &done(RunState::Failed, now, now + 1))
            .await
            .unwrap());
        rollup(&store).run_once(now + MINUTE).await.unwrap();
        rollup(&store).run_once(now + 2 * MINUTE).await.unwrap();
        let rows = rollups(s, w.tenant.id).await;
        assert_eq!(
            rows.iter()
                .map(|r| (r.minute, r.runs()))
                .collect::<Vec<_>>(),
            vec![(T0, 1), (T0 + MINUTE, 1), (T0 + 2 * MINUTE, 1)]
        );
        assert_eq!(rows[1].failed, 1);
        assert_eq!(counts(&rows), raw_counts(s, w.tenant.id).await);
    }

    /// A chain in a new tenant: its root, a run of task "parent" scheduled at `T0` and
    /// succeeded, and the chain's next run, of task "child", scheduled at `next_at` and not
    /// final. Returns the world, the parent task, the root and the next run.
    async fn chain_of_two(
        s: &dyn Store,
        next_at: i64,
    ) -> (World, mthpt_engine::task::Task, Run, Run) {
        let w = world(s, "acme").await;
        let (parent, _) = create_task(s, &w, &manual(w.app.id, "parent")).await;
        let (child, _) = create_task(s, &w, &manual(w.app.id, "child")).await;
        let root = finished(s, &w, &parent, T0, RunState::Succeeded, 10).await;
        let mut next = occurrence(&w, &child, next_at);
        next.trigger_kind = TriggerKind::Chain;
        next.parent_run_id = Some(root.id);
        next.chain_root_id = Some(root.id);
        let next = insert(s, &next).await;
        (w, parent, root, next)
    }

    pub async fn runs_of_a_chain_still_running_stay(store: Arc<dyn Store>) {
        let s = &*store;
        // The chain's next run, not final, started from the root later on.
        let (w, _, root, next) = chain_of_two(s, T0 + 20 * MINUTE).await;
        let report = rollup(&store).run_once(T0 + 30 * DAY).await.unwrap();
        assert_eq!(
            report.deleted, 0,
            "the chain still has a run that is not final"
        );
        let mut tx = read(s).await;
        assert_eq!(tx.get_run(w.tenant.id, root.id).await.unwrap().id, root.id);
        drop(tx);

        in_tx!(s, |tx| tx
            .complete_run(
                next.id,
                None,
                &done(RunState::Succeeded, T0 + 20 * MINUTE, T0 + 21 * MINUTE)
            )
            .await
            .unwrap());
        let report = rollup(&store).run_once(T0 + 31 * DAY).await.unwrap();
        assert_eq!(report.deleted, 2);
        let rows = rollups(s, w.tenant.id).await;
        assert_eq!(rows.iter().map(RunRollup::runs).sum::<i64>(), 2);
    }

    /// What names a run removed by retention forgets it, as the foreign keys did on SQLite and
    /// the statement trigger of migration 0022 does on PostgreSQL: a later run of its chain loses
    /// its parent and root, an alarm its run, and a trigger key naming it goes.
    pub async fn a_removed_runs_references_go_with_it(store: Arc<dyn Store>) {
        use mthpt_engine::alarm::{AlarmKind, NewAlarm, Severity};
        use mthpt_engine::store::{Scope, TriggerKey};
        let s = &*store;
        // The chain's next run, final, two days later: within the retention when the root goes.
        let (w, parent, root, next) = chain_of_two(s, T0 + 2 * DAY).await;
        in_tx!(s, |tx| tx
            .complete_run(
                next.id,
                None,
                &done(RunState::Failed, T0 + 2 * DAY, T0 + 2 * DAY + 5)
            )
            .await
            .unwrap());
        let mut alarm = NewAlarm::new(
            Some(w.tenant.id),
            AlarmKind::RunFailed,
            Severity::Critical,
            "parent failed".to_owned(),
        );
        alarm.run_id = Some(root.id);
        in_tx!(s, |tx| tx.insert_alarm(&alarm, T0).await.unwrap());
        let key = TriggerKey {
            tenant_id: w.tenant.id,
            key: "req-1".into(),
            task_id: parent.id,
            run_id: root.id,
            created_at: T0,
        };
        in_tx!(s, |tx| assert!(
            tx.insert_trigger_key(&key, T0 - DAY).await.unwrap()
        ));

        let report = rollup(&store).run_once(T0 + 8 * DAY).await.unwrap();
        assert_eq!(report.deleted, 1, "the root only: its chain is final");

        let mut tx = read(s).await;
        assert!(matches!(
            tx.get_run(w.tenant.id, root.id).await,
            Err(StoreError::NotFound(_))
        ));
        let kept = tx.get_run(w.tenant.id, next.id).await.unwrap();
        assert_eq!(
            (kept.parent_run_id, kept.chain_root_id),
            (None, None),
            "the later run no longer names the removed one"
        );
        let alarms = tx
            .list_alarms(Scope::Tenant(w.tenant.id), &Default::default())
            .await
            .unwrap();
        assert_eq!(alarms.len(), 1, "the alarm stays");
        assert_eq!(alarms[0].run_id, None, "without its removed run");
        assert!(
            tx.find_trigger_key(w.tenant.id, "req-1", T0 - DAY)
                .await
                .unwrap()
                .is_none(),
            "the key that named the removed run is gone"
        );
    }

    pub async fn published_alarm_events_go_after_a_week(store: Arc<dyn Store>) {
        use mthpt_engine::alarm::{AlarmKind, NewAlarm, Severity};
        let s = &*store;
        let w = world(s, "acme").await;
        let raise = |key: &str| {
            let mut a = NewAlarm::new(
                Some(w.tenant.id),
                AlarmKind::RunFailed,
                Severity::Critical,
                format!("job failed ({key})"),
            );
            a.dedupe_key = Some(key.to_owned());
            a
        };
        in_tx!(s, |tx| tx.insert_alarm(&raise("a"), T0).await.unwrap());
        in_tx!(s, |tx| tx.insert_alarm(&raise("b"), T0).await.unwrap());
        // One event published, one not.
        let events = in_tx!(s, |tx| tx.list_unpublished_alarm_events(10).await.unwrap());
        assert_eq!(events.len(), 2);
        in_tx!(s, |tx| tx
            .mark_alarm_events_published(&[events[0].id], T0)
            .await
            .unwrap());

        let report = rollup(&store).run_once(T0 + 6 * DAY).await.unwrap();
        assert_eq!(report.events_deleted, 0, "within the week");
        let report = rollup(&store).run_once(T0 + 8 * DAY).await.unwrap();
        assert_eq!(report.events_deleted, 1);
        let left = in_tx!(s, |tx| tx.list_unpublished_alarm_events(10).await.unwrap());
        assert_eq!(left.len(), 1, "what is still to publish stays");
        assert_eq!(left[0].id, events[1].id);
        let mut tx = read(s).await;
        let alarms = tx
            .list_alarms(
                mthpt_engine::store::Scope::Tenant(w.tenant.id),
                &Default::default(),
            )
            .await
            .unwrap();
        assert_eq!(alarms.len(), 2, "the alarms themselves stay");
    }

    /// Three tasks with runs in the same minutes (one minute with a single task), rolled up;
    /// returns the tenant-wide rows the per-task rows merge to.
    pub async fn rolled_up_three_tasks(store: Arc<dyn Store>) -> Vec<RunRollup> {
        let s = &*store;
        let w = world(s, "acme").await;
        let states = [RunState::Succeeded, RunState::Failed, RunState::TimedOut];
        for (t, state) in states.into_iter().enumerate() {
            let (task, _) = create_task(s, &w, &manual(w.app.id, &format!("job-{t}"))).await;
            for i in 0..3_i64 {
                let took = 100 * (t as i64 + 1) + i;
                finished(s, &w, &task, T0 + i * 20 * SECOND, state, took).await;
                finished(
                    s,
                    &w,
                    &task,
                    T0 + MINUTE + i * SECOND,
                    RunState::Succeeded,
                    7,
                )
                .await;
            }
            if t == 0 {
                finished(s, &w, &task, T0 + 5 * MINUTE, RunState::Skipped, 0).await;
            }
        }
        rollup(&store).run_once(T0 + DAY).await.unwrap();
        let per_task = rollups(s, w.tenant.id).await;
        assert_eq!(
            per_task.len(),
            7,
            "three tasks in two minutes, one in a third"
        );
        mthpt_engine::rollup::merge_tasks(&per_task)
    }

    /// The tenant's tenant-wide rows are `expected`.
    pub async fn assert_tenant_rows(store: Arc<dyn Store>, expected: &[RunRollup]) {
        let tenant = expected[0].tenant_id;
        let mut tx = read(&*store).await;
        let rows = tx
            .tenant_rollups(tenant, i64::MIN / 2, i64::MAX / 2)
            .await
            .unwrap();
        assert_eq!(rows, expected);
    }

    pub async fn tenant_rows_merge_every_task_of_a_minute(store: Arc<dyn Store>) {
        let expected = rolled_up_three_tasks(store.clone()).await;
        assert_eq!(
            expected
                .iter()
                .map(|r| (r.minute, r.succeeded, r.failed, r.timed_out, r.skipped))
                .collect::<Vec<_>>(),
            vec![
                (T0, 3, 3, 3, 0),
                (T0 + MINUTE, 9, 0, 0, 0),
                (T0 + 5 * MINUTE, 0, 0, 0, 1)
            ]
        );
        // Nine durations in the first minute (100-102, 200-202, 300-302 ms), nine of 7 ms
        // in the second.
        let hist_total = |h: &[[i64; 2]]| h.iter().map(|p| p[1]).sum::<i64>();
        assert_eq!(hist_total(&expected[0].duration_hist), 9);
        assert_eq!(expected[1].duration_hist.0.len(), 1);
        assert_eq!(hist_total(&expected[1].duration_hist), 9);
        assert!(expected.iter().all(|r| r.task_id == TaskId(0)));
        assert_tenant_rows(store, &expected).await;
    }

    pub async fn retention_is_validated(store: Arc<dyn Store>) {
        let s = &*store;
        let w = world(s, "acme").await;
        for bad in [0, 3_599_999, 3651 * DAY] {
            let mut tx = s.begin().await.unwrap();
            let err = tx
                .update_tenant(
                    w.tenant.id,
                    &TenantUpdate {
                        retention_ms: Some(bad),
                        ..Default::default()
                    },
                    T0,
                )
                .await
                .unwrap_err();
            match err {
                StoreError::Invalid(f) => assert_eq!(f.field, "retention_ms"),
                other => panic!("{other:?}"),
            }
        }
    }
}

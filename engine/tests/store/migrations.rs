//! Migrating a database that holds runs: a database built by the migration set released before
//! the hot-path layout (up to [`PREVIOUS_SET`]), with runs in every state written the way that
//! release wrote them, is migrated to the newest schema; every run keeps its data, and the engine
//! treats each as its state says — waiting runs are claimed (an expired lease included), a
//! running run past its deadline is found, running runs are found by executor, final runs are
//! left alone, and a run started before the migration can still be completed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use mthpt_engine::app::ExecutorId;
use mthpt_engine::run::{RunCompletion, RunFilter, RunId, RunState};
use mthpt_engine::store::{ClaimRequest, Completion, Store};
use mthpt_engine::tenant::TenantId;
use mthpt_engine::testing::{self, TestDb};
use sqlx::migrate::{Migrate, Migrator};
use sqlx::{Acquire, Connection, Database, Executor, FromRow, IntoArguments};

/// The last migration of the set released before the hot-path layout (0013 and 0014 changed
/// the indexes of `runs` and what their predicates say).
const PREVIOUS_SET: i64 = 12;

/// The instant the test treats as now.
const NOW: i64 = 1_790_000_000_000;

/// The previous release's rows: a tenant, an app with one executor (room for the runs due
/// after the migration: claims are capacity-aware since 0015), a task and its chain child,
/// and fourteen runs — pending (due and not yet due), claimed (lease over; lease held with the
/// executor chosen), running (past and within its deadline), each final state, a chain child
/// and a retry waiting.
const SEED: &str = "
INSERT INTO tenants (name, display_name, node_group, created_at, updated_at)
    VALUES ('acme', 'Acme', 'default', 1789990000000, 1789990000000);
INSERT INTO apps (tenant_id, name, secret, created_at, updated_at)
    VALUES (1, 'billing', 'secret-of-billing', 1789990000000, 1789990000000);
INSERT INTO executors (tenant_id, app_id, instance_id, base_url, capacity, running, handlers,
        labels, state, registered_at, last_heartbeat_at)
    VALUES (1, 1, 'host-1', 'http://127.0.0.1:9', 8, 2, '[\"nightly\"]', '{}', 'up',
        1789990000000, 1789999999000);
INSERT INTO tasks (tenant_id, app_id, name, handler, params, schedule_kind, misfire_policy,
        misfire_threshold_ms, misfire_max_catch_up, overlap_policy, routing, max_retries,
        retry_backoff_ms, retry_backoff_max_ms, recover_lost, priority, created_at, updated_at)
    VALUES (1, 1, 'nightly', 'nightly', '{}', 'manual', 'fire_once_now', 5000, 10, 'parallel',
        'round_robin', 1, 1000, 60000, TRUE, 0, 1789990000000, 1789990000000),
           (1, 1, 'report', 'nightly', '{}', 'manual', 'fire_once_now', 5000, 10, 'parallel',
        'round_robin', 0, 1000, 60000, TRUE, 0, 1789990000000, 1789990000000);
INSERT INTO task_dependencies (tenant_id, parent_task_id, child_task_id, condition, created_at)
    VALUES (1, 1, 2, 'on_success', 1789990000000);
INSERT INTO runs (tenant_id, task_id, node_group, scheduled_at, due_at, attempt, trigger_kind,
        state, parent_run_id, chain_root_id, claim_owner, lease_until, fence, executor_id,
        dispatch_attempts, created_at, claimed_at, dispatched_at, started_at, finished_at,
        deadline_at, output, error)
    VALUES
    (1, 1, 'default', 1789999999000, 1789999999000, 1, 'schedule', 'pending', NULL, NULL,
        NULL, NULL, 0, NULL, 0, 1789999990000, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    (1, 1, 'default', 1790003600000, 1790003600000, 1, 'schedule', 'pending', NULL, NULL,
        NULL, NULL, 0, NULL, 0, 1789999990000, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    (1, 1, 'default', 1789999998000, 1789999998000, 1, 'schedule', 'claimed', NULL, NULL,
        'node-old', 1789999999999, 3, NULL, 0, 1789999990000, 1789999969999, NULL, NULL, NULL,
        NULL, NULL, NULL),
    (1, 1, 'default', 1789999997000, 1789999997000, 1, 'schedule', 'claimed', NULL, NULL,
        'node-a', 1790000060000, 1, 1, 0, 1789999990000, 1789999999900, NULL, NULL, NULL,
        NULL, NULL, NULL),
    (1, 1, 'default', 1789999996000, 1789999996000, 1, 'schedule', 'running', NULL, NULL,
        'node-a', 1789999997000, 1, 1, 1, 1789999990000, 1789999996000, 1789999996010,
        1789999996010, NULL, 1789999999999, NULL, NULL),
    (1, 1, 'default', 1789999995000, 1789999995000, 1, 'schedule', 'running', NULL, NULL,
        'node-a', 1789999996000, 1, 1, 1, 1789999990000, 1789999995000, 1789999995010,
        1789999995010, NULL, 1790000060000, NULL, NULL),
    (1, 1, 'default', 1789999994000, 1789999994000, 1, 'schedule', 'succeeded', NULL, NULL,
        'node-a', 1789999995000, 1, 1, 1, 1789999990000, 1789999994000, 1789999994010,
        1789999994010, 1789999994100, 1790000054010, '{\"rows\": 3}', NULL),
    (1, 1, 'default', 1789999993000, 1789999993000, 1, 'schedule', 'failed', NULL, NULL,
        'node-a', 1789999994000, 1, 1, 1, 1789999990000, 1789999993000, 1789999993010,
        1789999993010, 1789999993100, 1790000053010, NULL, 'exit status 1'),
    (1, 1, 'default', 1789999992000, 1789999992000, 1, 'schedule', 'timed_out', NULL, NULL,
        'node-a', 1789999993000, 1, 1, 1, 1789999990000, 1789999992000, 1789999992010,
        1789999992010, 1789999992500, 1789999992500, NULL, 'timed out after 490 ms'),
    (1, 1, 'default', 1789999991000, 1789999991000, 1, 'schedule', 'lost', NULL, NULL,
        'node-a', 1789999992000, 1, 1, 1, 1789999990000, 1789999991000, 1789999991010,
        1789999991010, 1789999991900, 1790000051010, NULL, 'executor lost'),
    (1, 1, 'default', 1789999990000, 1789999990000, 1, 'schedule', 'skipped', NULL, NULL,
        'node-a', 1789999991000, 1, NULL, 0, 1789999980000, 1789999990000, NULL, NULL,
        1789999990000, NULL, NULL, 'overlap: previous run still running'),
    (1, 1, 'default', 1789999989000, 1789999989000, 1, 'schedule', 'cancelled', NULL, NULL,
        'node-a', 1789999990000, 1, NULL, 0, 1789999980000, 1789999989000, NULL, NULL,
        1789999989000, NULL, NULL, 'cancelled by alice'),
    (1, 2, 'default', 1789999994100, 1789999994100, 1, 'chain', 'pending', 7, 7,
        NULL, NULL, 0, NULL, 0, 1789999994100, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    (1, 1, 'default', 1789999993000, 1789999999500, 2, 'retry', 'pending', NULL, NULL,
        NULL, NULL, 0, NULL, 0, 1789999993100, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
";

/// Per seeded run, in id order: its state, `started_at` and `finished_at` as seeded.
const SEEDED: [(RunState, Option<i64>, Option<i64>); 14] = [
    (RunState::Pending, None, None),
    (RunState::Pending, None, None),
    (RunState::Claimed, None, None),
    (RunState::Claimed, None, None),
    (RunState::Running, Some(1_789_999_996_010), None),
    (RunState::Running, Some(1_789_999_995_010), None),
    (
        RunState::Succeeded,
        Some(1_789_999_994_010),
        Some(1_789_999_994_100),
    ),
    (
        RunState::Failed,
        Some(1_789_999_993_010),
        Some(1_789_999_993_100),
    ),
    (
        RunState::TimedOut,
        Some(1_789_999_992_010),
        Some(1_789_999_992_500),
    ),
    (
        RunState::Lost,
        Some(1_789_999_991_010),
        Some(1_789_999_991_900),
    ),
    (RunState::Skipped, None, Some(1_789_999_990_000)),
    (RunState::Cancelled, None, Some(1_789_999_989_000)),
    (RunState::Pending, None, None),
    (RunState::Pending, None, None),
];

fn migrations_dir(backend: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(backend)
}

/// Builds the previous schema with the previous set's migrations read from the repository and
/// writes [`SEED`] into it, through a plain connection `C` of the backend.
async fn previous_schema_with_runs<C>(db: &TestDb, backend: &str)
where
    C: Connection + Migrate,
    for<'c> &'c mut C: Executor<'c, Database = C::Database> + Acquire<'c, Connection = &'c mut C>,
    for<'r> (i64,): FromRow<'r, <C::Database as Database>::Row>,
    <C::Database as Database>::Arguments: IntoArguments<C::Database>,
{
    let mut conn = C::connect(&db.url()).await.unwrap();
    let previous = Migrator::new(migrations_dir(backend)).await.unwrap();
    previous.run_to(PREVIOUS_SET, &mut conn).await.unwrap();
    sqlx::raw_sql(SEED).execute(&mut conn).await.unwrap();
    let ids: Vec<(i64,)> = sqlx::query_as("SELECT id FROM runs ORDER BY id")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        ids.into_iter().map(|(id,)| id).collect::<Vec<_>>(),
        (1..=14).collect::<Vec<i64>>(),
        "the seeded runs have ids 1 to 14"
    );
    conn.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_of_the_previous_schema_on_postgres_keep_their_data_and_meaning() {
    let db = testing::postgres_unmigrated().await;
    previous_schema_with_runs::<sqlx::PgConnection>(&db, "postgres").await;
    migrated_runs_keep_their_data_and_meaning(&db).await;
    migrated_runs_are_live_until_they_finish(&db).await;
    db.cleanup().await;
}

/// On PostgreSQL `runs` is split into the live runs and the history (0024): each migrated run
/// is in the partition its state says, and the run the test above completed moved to the
/// history with its result.
async fn migrated_runs_are_live_until_they_finish(db: &TestDb) {
    let mut conn = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    let partitioned: Vec<(String, i64)> = sqlx::query_as(
        "SELECT tableoid::regclass::text, id FROM runs ORDER BY tableoid::regclass::text, id",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let of = |table: &str| -> BTreeSet<i64> {
        partitioned
            .iter()
            .filter(|(t, _)| t == table)
            .map(|(_, id)| *id)
            .collect()
    };
    // Waiting and running (1-4, 6, 13, 14, claimed ones included); finished, with run 5 timed
    // out by the test above.
    assert_eq!(of("live_runs"), BTreeSet::from([1, 2, 3, 4, 6, 13, 14]));
    assert_eq!(of("run_history"), BTreeSet::from([5, 7, 8, 9, 10, 11, 12]));
    let next: (i64,) = sqlx::query_as("SELECT nextval('runs_id_seq')")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(next.0 > 14, "ids go on after the migrated runs: {}", next.0);
    conn.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_of_the_previous_schema_on_sqlite_keep_their_data_and_meaning() {
    let db = testing::sqlite_unmigrated().await;
    previous_schema_with_runs::<sqlx::SqliteConnection>(&db, "sqlite").await;
    migrated_runs_keep_their_data_and_meaning(&db).await;
    db.cleanup().await;
}

async fn migrated_runs_keep_their_data_and_meaning(db: &TestDb) {
    let store: &dyn Store = db.store();
    let report = store.migrate().await.unwrap();
    let applied: Vec<i64> = report.applied.iter().map(|(v, _)| *v).collect();
    assert!(
        report.version > PREVIOUS_SET && applied.first() == Some(&(PREVIOUS_SET + 1)),
        "the migrations after the previous set are applied: {applied:?}"
    );
    assert_eq!(applied.last(), Some(&report.version));

    // Every run is still there, as it was.
    let mut tx = store.begin().await.unwrap();
    for (i, (state, started_at, finished_at)) in SEEDED.iter().enumerate() {
        let id = RunId(i as i64 + 1);
        let run = tx.find_run(id).await.unwrap().expect("run kept");
        assert_eq!(
            (run.state, run.started_at, run.finished_at),
            (*state, *started_at, *finished_at),
            "run {id}"
        );
    }
    let succeeded = tx.find_run(RunId(7)).await.unwrap().unwrap();
    assert_eq!(
        succeeded.output.map(|o| o.0),
        Some(serde_json::json!({"rows": 3}))
    );
    assert_eq!(succeeded.executor_id, Some(ExecutorId(1)));
    let failed = tx.find_run(RunId(8)).await.unwrap().unwrap();
    assert_eq!(failed.error.as_deref(), Some("exit status 1"));
    let child = tx.find_run(RunId(13)).await.unwrap().unwrap();
    assert_eq!(
        (child.parent_run_id, child.chain_root_id),
        (Some(RunId(7)), Some(RunId(7)))
    );
    let listed = tx
        .list_runs(TenantId(1), &RunFilter::default())
        .await
        .unwrap();
    assert_eq!(listed.len(), 14, "the console lists every run");

    // The watchdog finds the running run past its deadline, and both running runs by executor.
    let overdue = tx.running_runs_past_deadline(NOW, 100).await.unwrap();
    assert_eq!(ids(&overdue), BTreeSet::from([5]));
    let on_executor = tx
        .running_runs_on_executors(&[ExecutorId(1)])
        .await
        .unwrap();
    assert_eq!(ids(&on_executor), BTreeSet::from([5, 6]));

    // The waiting runs that are due are claimed — the one whose lease ran out included, with a
    // new fence — and nothing else is.
    let claimed = tx
        .claim_due_runs(&ClaimRequest {
            node: "node-b".to_owned(),
            groups: vec!["default".to_owned()],
            now: NOW,
            horizon_ms: 0,
            lease_ms: 30_000,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(ids(&claimed), BTreeSet::from([1, 3, 13, 14]));
    let reclaimed = claimed.iter().find(|r| r.id == RunId(3)).unwrap();
    assert_eq!(
        (reclaimed.claim_owner.as_deref(), reclaimed.fence),
        (Some("node-b"), 4)
    );

    // A run started before the migration takes its result and leaves the running set.
    let done = tx
        .complete_run(
            RunId(5),
            None,
            &RunCompletion {
                state: RunState::TimedOut,
                output: None,
                error: Some("timed out".to_owned()),
                log: None,
                started_at: None,
                finished_at: NOW,
                reported_by: None,
            },
        )
        .await
        .unwrap();
    assert!(matches!(done, Completion::Applied(ref r) if r.state == RunState::TimedOut));
    assert!(
        tx.running_runs_past_deadline(NOW, 100)
            .await
            .unwrap()
            .is_empty()
    );
    tx.commit().await.unwrap();
}

fn ids(runs: &[mthpt_engine::run::Run]) -> BTreeSet<i64> {
    runs.iter().map(|r| r.id.0).collect()
}

/// Runs and tasks are read by position when a row's columns begin with the struct's
/// (`run_columns`: [`RUN_COLUMNS`] or, on PostgreSQL, [`RUN_COLUMNS_ON_POSTGRES`];
/// [`TASK_COLUMNS`]); by name, more slowly, otherwise. A migrated database must keep `SELECT *`
/// in that order, or every read on the hot path takes the slow way.
async fn tables_keep_the_column_order_rows_are_read_in<C>(db: &TestDb, run_columns: &[&str])
where
    C: Connection,
    for<'c> &'c mut C: Executor<'c, Database = C::Database>,
{
    use mthpt_engine::task::TASK_COLUMNS;
    use sqlx::{Column, SqlSafeStr};
    db.store().migrate().await.unwrap();
    let mut conn = C::connect(&db.url()).await.unwrap();
    for (table, expected) in [("runs", run_columns), ("tasks", TASK_COLUMNS)] {
        let described = (&mut conn)
            .describe(sqlx::AssertSqlSafe(format!("SELECT * FROM {table}")).into_sql_str())
            .await
            .unwrap();
        let names: Vec<&str> = described.columns().iter().map(|c| c.name()).collect();
        assert!(
            names.len() >= expected.len() && names[..expected.len()] == *expected,
            "{table} begins with {expected:?}, has {names:?}"
        );
    }
    conn.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_tables_keep_the_column_order_rows_are_read_in() {
    let db = testing::postgres_unmigrated().await;
    tables_keep_the_column_order_rows_are_read_in::<sqlx::PgConnection>(
        &db,
        mthpt_engine::run::RUN_COLUMNS_ON_POSTGRES,
    )
    .await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_tables_keep_the_column_order_rows_are_read_in() {
    let db = testing::sqlite_unmigrated().await;
    tables_keep_the_column_order_rows_are_read_in::<sqlx::SqliteConnection>(
        &db,
        mthpt_engine::run::RUN_COLUMNS,
    )
    .await;
    db.cleanup().await;
}

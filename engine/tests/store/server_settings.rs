//! The engine tells at start-up what about the database server works against it: a PostgreSQL
//! server whose autovacuum does not run is named; SQLite has nothing to say. And what the
//! engine sets on each of its PostgreSQL sessions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_engine::testing;
use sqlx::Connection;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_server_without_autovacuum_is_named() {
    let db = testing::postgres().await;
    let mut conn = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    let (autovacuum, track_counts): (String, String) =
        sqlx::query_as("SELECT current_setting('autovacuum'), current_setting('track_counts')")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    let warnings = db.store().server_warnings().await.unwrap();
    if autovacuum == "on" && track_counts == "on" {
        assert!(warnings.is_empty(), "{warnings:?}");
    } else {
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains(&format!("autovacuum = {autovacuum}")),
            "{}",
            warnings[0]
        );
    }
    conn.close().await.unwrap();
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_has_no_server_warnings() {
    let db = testing::sqlite().await;
    assert!(db.store().server_warnings().await.unwrap().is_empty());
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pooled_postgres_session_has_the_lock_limits_and_no_jit() {
    let db = testing::postgres().await;
    use mthpt_engine::store::Store as _;
    let store = mthpt_engine::store::PgStore::connect(&db.url())
        .await
        .unwrap();
    let (idle, lock, statement, jit): (String, String, String, String) = sqlx::query_as(
        "SELECT current_setting('idle_in_transaction_session_timeout'),
                current_setting('lock_timeout'), current_setting('statement_timeout'),
                current_setting('jit')",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(
        (idle.as_str(), lock.as_str(), statement.as_str()),
        ("1500ms", "1700ms", "1900ms")
    );
    assert_eq!(
        jit, "off",
        "a statement compiled at every execution costs seconds"
    );
    store.close().await;
    db.cleanup().await;
}

/// The engine's vacuum of the live runs leaves their empty pages in place: truncating them
/// takes the table's exclusive lock, which every claim, start and result would wait on, and the
/// next seconds' runs need the pages again (migration 0025; the vacuum runs without parallel
/// workers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vacuuming_the_live_runs_keeps_their_empty_pages() {
    let db = testing::postgres().await;
    let store = db.store();
    // Pages of waiting runs after the first, then those runs gone: the table ends in empty pages.
    let runs = waiting_runs(store, 5_001).await;
    let mut conn = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    sqlx::query("DELETE FROM runs WHERE id <> $1")
        .bind(runs[0])
        .execute(&mut conn)
        .await
        .unwrap();
    let size = "SELECT pg_relation_size('live_runs')";
    let (before,): (i64,) = sqlx::query_as(size).fetch_one(&mut conn).await.unwrap();
    assert!(before > 100 * 8192, "the runs filled pages: {before} bytes");

    store.vacuum_live_runs().await.unwrap();

    let (after,): (i64,) = sqlx::query_as(size).fetch_one(&mut conn).await.unwrap();
    assert_eq!(after, before, "the vacuum kept the table's pages");
    let (options,): (Vec<String>,) = sqlx::query_as(
        "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'live_runs'::regclass",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert!(
        options.contains(&"vacuum_truncate=false".to_owned()),
        "autovacuum keeps them too: {options:?}"
    );
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// A claim rewrites each waiting run on the page that holds it — a heap-only update, which
/// writes no index entry — even when it takes every run of every page at once: the live runs'
/// pages keep room for their runs' claimed versions (migration 0026). A run moved to another
/// page cost a lock, an entry in each of the live runs' indexes and more for the vacuum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claiming_every_waiting_run_rewrites_each_on_its_own_page() {
    use crate::support::fixtures::{MINUTE, T0};
    use mthpt_engine::store::ClaimRequest;

    const RUNS: i64 = 2_000;
    let db = testing::postgres().await;
    let store = db.store();
    let runs = waiting_runs(store, RUNS).await;
    let mut conn = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    let pages = "SELECT id, (ctid::text::point)[0]::bigint FROM live_runs ORDER BY id";
    let before: Vec<(i64, i64)> = sqlx::query_as(pages).fetch_all(&mut conn).await.unwrap();
    let (filled,): (i64,) =
        sqlx::query_as("SELECT count(DISTINCT (ctid::text::point)[0]) FROM live_runs")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert!(filled > 10, "the runs fill pages: {filled}");

    let req = ClaimRequest {
        node: "node-a".into(),
        groups: vec!["default".into()],
        now: T0,
        horizon_ms: 0,
        lease_ms: 10 * MINUTE,
        limit: RUNS,
    };
    let mut tx = store.begin().await.unwrap();
    let claimed = tx.claim_due_runs(&req).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(claimed.len(), runs.len(), "one claim takes them all");

    let after: Vec<(i64, i64)> = sqlx::query_as(pages).fetch_all(&mut conn).await.unwrap();
    let moved: Vec<_> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .map(|(b, a)| format!("run {} page {} -> {}", b.0, b.1, a.1))
        .collect();
    assert_eq!(after.len(), before.len());
    assert!(
        moved.is_empty(),
        "{} of {RUNS} moved: {moved:?}",
        moved.len()
    );
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// No row trigger runs before an update of the tables the hot path updates (tasks, runs):
/// PostgreSQL locks each row before such a trigger, whatever its column list and `WHEN` clause
/// decide, so every claim wrote a lock on each of its tasks ahead of their fire counts
/// (migration 0027 checks a task's new name after the update that renames it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_row_trigger_runs_before_updates_of_tasks_or_runs() {
    let db = testing::postgres().await;
    let mut conn = sqlx::PgConnection::connect(&db.url()).await.unwrap();
    // tgtype bits: 1 row, 2 before, 16 update.
    let before_updates: Vec<(String, String)> = sqlx::query_as(
        "SELECT tgrelid::regclass::text, tgname::text FROM pg_trigger
         WHERE tgrelid IN ('tasks'::regclass, 'runs'::regclass, 'live_runs'::regclass,
                           'run_history'::regclass)
           AND tgtype & 1 <> 0 AND tgtype & 2 <> 0 AND tgtype & 16 <> 0",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(before_updates.is_empty(), "{before_updates:?}");
    conn.close().await.unwrap();
    db.cleanup().await;
}

/// `n` waiting runs of one manual task of a new tenant, due a millisecond apart up to `T0`,
/// inserted in one statement; their ids, in order.
async fn waiting_runs(store: &dyn mthpt_engine::store::Store, n: i64) -> Vec<i64> {
    use crate::support::fixtures::{T0, create_task, manual, occurrence, world};

    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "bulk")).await;
    let runs: Vec<_> = (0..n).map(|i| occurrence(&w, &task, T0 - n + i)).collect();
    let mut tx = store.begin().await.unwrap();
    let inserted = tx.insert_runs(&runs, T0).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(inserted.len(), runs.len());
    inserted.iter().map(|r| r.id.0).collect()
}

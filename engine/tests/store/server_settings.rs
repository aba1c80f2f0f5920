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

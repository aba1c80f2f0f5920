//! The engine tells at start-up what about the database server works against it: a PostgreSQL
//! server whose autovacuum does not run is named; SQLite has nothing to say.

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

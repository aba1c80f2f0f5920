//! The app and executor operations SQLite writes its own way (see
//! [`apps`](crate::store::apps)): lists of ids as JSON arrays.

use sqlx::sqlite::SqliteConnection;

use super::json_ids;
use crate::app::{App, AppId, Executor, ExecutorId};
use crate::store::Result;

/// [`Apps::mark_silent_executors_lost`](crate::store::Apps::mark_silent_executors_lost) on SQLite.
pub(crate) async fn mark_silent_executors_lost(
    c: &mut SqliteConnection,
    ids: &[ExecutorId],
    heartbeat_before: i64,
) -> Result<Vec<Executor>> {
    Ok(sqlx::query_as(
        "UPDATE executors SET state = 'lost'
         WHERE id IN (SELECT value FROM json_each($1)) AND state IN ('up', 'draining')
           AND last_heartbeat_at < $2
         RETURNING *",
    )
    .bind(json_ids(ids, |i| i.0))
    .bind(heartbeat_before)
    .fetch_all(&mut *c)
    .await?)
}

/// [`Apps::record_executor_probes`](crate::store::Apps::record_executor_probes) on SQLite.
pub(crate) async fn record_executor_probes(
    c: &mut SqliteConnection,
    ids: &[ExecutorId],
    now: i64,
) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE executors SET last_heartbeat_at = $2
         WHERE id IN (SELECT value FROM json_each($1)) AND state IN ('up', 'draining')
           AND last_heartbeat_at < $2",
    )
    .bind(json_ids(ids, |i| i.0))
    .bind(now)
    .execute(&mut *c)
    .await?;
    Ok(done.rows_affected())
}

/// [`Apps::get_apps_by_ids`](crate::store::Apps::get_apps_by_ids) on SQLite.
pub(crate) async fn get_apps_by_ids(c: &mut SqliteConnection, ids: &[AppId]) -> Result<Vec<App>> {
    Ok(sqlx::query_as(
        "SELECT * FROM apps WHERE id IN (SELECT value FROM json_each($1)) ORDER BY id",
    )
    .bind(json_ids(ids, |i| i.0))
    .fetch_all(&mut *c)
    .await?)
}

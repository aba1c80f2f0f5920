//! The app and executor operations PostgreSQL writes its own way (see
//! [`apps`](crate::store::apps)): lists of ids as arrays.

use sqlx::postgres::PgConnection;

use super::raw_ids;
use crate::app::{App, AppId, Executor, ExecutorId};
use crate::store::Result;

/// [`Apps::mark_silent_executors_lost`](crate::store::Apps::mark_silent_executors_lost) on PostgreSQL.
pub(crate) async fn mark_silent_executors_lost(
    c: &mut PgConnection,
    ids: &[ExecutorId],
    heartbeat_before: i64,
) -> Result<Vec<Executor>> {
    Ok(sqlx::query_as(
        "UPDATE executors SET state = 'lost'
         WHERE id = ANY($1) AND state IN ('up', 'draining') AND last_heartbeat_at < $2
         RETURNING *",
    )
    .bind(raw_ids(ids, |i| i.0))
    .bind(heartbeat_before)
    .fetch_all(&mut *c)
    .await?)
}

/// [`Apps::record_executor_probes`](crate::store::Apps::record_executor_probes) on PostgreSQL.
pub(crate) async fn record_executor_probes(
    c: &mut PgConnection,
    ids: &[ExecutorId],
    now: i64,
) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE executors SET last_heartbeat_at = $2
         WHERE id = ANY($1) AND state IN ('up', 'draining') AND last_heartbeat_at < $2",
    )
    .bind(raw_ids(ids, |i| i.0))
    .bind(now)
    .execute(&mut *c)
    .await?;
    Ok(done.rows_affected())
}

/// [`Apps::get_apps_by_ids`](crate::store::Apps::get_apps_by_ids) on PostgreSQL.
pub(crate) async fn get_apps_by_ids(c: &mut PgConnection, ids: &[AppId]) -> Result<Vec<App>> {
    Ok(
        sqlx::query_as("SELECT * FROM apps WHERE id = ANY($1) ORDER BY id")
            .bind(raw_ids(ids, |i| i.0))
            .fetch_all(&mut *c)
            .await?,
    )
}

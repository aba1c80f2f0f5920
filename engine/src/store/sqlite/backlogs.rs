//! The backlog operations SQLite writes its own way (see
//! [`backlogs`](crate::store::backlogs)): correlated subqueries where PostgreSQL joins
//! laterally.

use sqlx::sqlite::SqliteConnection;

use crate::store::{CapacityBacklog, Result};

/// [`Backlogs::capacity_backlogs`](crate::store::Backlogs::capacity_backlogs) on SQLite.
pub(crate) async fn capacity_backlogs(
    c: &mut SqliteConnection,
    due_before: i64,
    count_limit: i64,
) -> Result<Vec<CapacityBacklog>> {
    Ok(sqlx::query_as(
        "WITH s AS (
             SELECT a.id AS app_id, a.name AS app_name, a.tenant_id, b.alarm_key,
                 (SELECT count(*) FROM executors x
                  WHERE x.app_id = a.id AND x.state IN ('up', 'draining')) AS live,
                 (SELECT COALESCE(sum(x.capacity), 0) FROM executors x
                  WHERE x.app_id = a.id AND x.state = 'up') AS capacity,
                 (SELECT count(*) FROM runs x
                  WHERE x.app_id = a.id AND x.started_at IS NOT NULL AND x.finished_at IS NULL) AS running,
                 (SELECT count(*) FROM (
                     SELECT 1 FROM runs x
                     WHERE x.node_group = t.node_group AND x.app_id = a.id AND x.due_at < $1 AND x.state = 'pending'
                       AND x.started_at IS NULL AND x.finished_at IS NULL
                     LIMIT $2)) AS waiting,
                 (SELECT min(x.due_at) FROM runs x
                  WHERE x.node_group = t.node_group AND x.app_id = a.id AND x.due_at < $1 AND x.state = 'pending'
                    AND x.started_at IS NULL AND x.finished_at IS NULL) AS oldest_due_at
             FROM apps a JOIN tenants t ON t.id = a.tenant_id LEFT JOIN app_backlogs b ON b.app_id = a.id
         )
         SELECT app_id, app_name, tenant_id, waiting, oldest_due_at,
             (live > 0 AND capacity <= running) AS full, alarm_key
         FROM s
         WHERE (live > 0 AND capacity <= running AND waiting > 0) OR alarm_key IS NOT NULL
         ORDER BY app_id",
    )
    .bind(due_before)
    .bind(count_limit)
    .fetch_all(&mut *c)
    .await?)
}

//! The backlog operations PostgreSQL writes its own way (see
//! [`backlogs`](crate::store::backlogs)): each app's executors, running runs and waiting runs
//! read through lateral joins.

use sqlx::postgres::PgConnection;

use crate::store::{CapacityBacklog, Result};

/// [`Backlogs::capacity_backlogs`](crate::store::Backlogs::capacity_backlogs) on PostgreSQL.
pub(crate) async fn capacity_backlogs(
    c: &mut PgConnection,
    due_before: i64,
    count_limit: i64,
) -> Result<Vec<CapacityBacklog>> {
    Ok(sqlx::query_as(
        "SELECT a.id AS app_id, a.name AS app_name, a.tenant_id, w.waiting, w.oldest_due_at,
             (e.live > 0 AND e.capacity <= r.running) AS full, b.alarm_key
         FROM apps a JOIN tenants t ON t.id = a.tenant_id
         LEFT JOIN app_backlogs b ON b.app_id = a.id
         CROSS JOIN LATERAL (
             SELECT count(*) AS live, COALESCE(sum(x.capacity) FILTER (WHERE x.state = 'up'), 0) AS capacity
             FROM executors x WHERE x.app_id = a.id AND x.state IN ('up', 'draining')) e
         CROSS JOIN LATERAL (
             SELECT count(*) AS running FROM runs x
             WHERE x.app_id = a.id AND x.started_at IS NOT NULL AND x.finished_at IS NULL) r
         CROSS JOIN LATERAL (
             SELECT count(*) AS waiting, min(q.due_at) AS oldest_due_at FROM (
                 SELECT x.due_at FROM runs x
                 WHERE x.node_group = t.node_group AND x.app_id = a.id AND x.due_at < $1 AND x.state = 'pending'
                   AND x.started_at IS NULL AND x.finished_at IS NULL
                   -- Read only for apps that are full or have an episode open.
                   AND ((e.live > 0 AND e.capacity <= r.running) OR b.app_id IS NOT NULL)
                 ORDER BY x.due_at LIMIT $2) q) w
         WHERE (e.live > 0 AND e.capacity <= r.running AND w.waiting > 0) OR b.app_id IS NOT NULL
         ORDER BY a.id",
    )
    .bind(due_before)
    .bind(count_limit)
    .fetch_all(&mut *c)
    .await?)
}

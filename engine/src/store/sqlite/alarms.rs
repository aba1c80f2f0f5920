//! The alarm operations SQLite writes its own way (see [`alarms`](crate::store::alarms)):
//! lists of ids as JSON arrays.

use sqlx::sqlite::SqliteConnection;

use super::json_ids;
use crate::alarm::{AlarmEventId, AlarmId};
use crate::store::Result;
use crate::task::TaskId;

/// [`Alarms::mark_alarms_published`](crate::store::Alarms::mark_alarms_published) on SQLite.
pub(crate) async fn mark_alarms_published(
    c: &mut SqliteConnection,
    ids: &[AlarmId],
    now: i64,
) -> Result<u64> {
    let done = sqlx::query(
        "UPDATE alarms SET published_at = $2
             WHERE id IN (SELECT value FROM json_each($1)) AND published_at IS NULL",
    )
    .bind(json_ids(ids, |i| i.0))
    .bind(now)
    .execute(&mut *c)
    .await?;
    Ok(done.rows_affected())
}

/// [`Alarms::tasks_with_unresolved_alarms`](crate::store::Alarms::tasks_with_unresolved_alarms) on SQLite.
pub(crate) async fn tasks_with_unresolved_alarms(
    c: &mut SqliteConnection,
    tasks: &[TaskId],
) -> Result<Vec<TaskId>> {
    let rows: Vec<(TaskId,)> = sqlx::query_as("SELECT DISTINCT task_id FROM alarms WHERE task_id IN (SELECT value FROM json_each($1))
           AND resolved_at IS NULL AND repeat_of IS NULL AND kind IN ('run_failed', 'retries_exhausted', 'timed_out', 'not_started')")
    .bind(json_ids(tasks, |t| t.0))
    .fetch_all(&mut *c)
    .await?;
    Ok(rows.into_iter().map(|(t,)| t).collect())
}

/// [`Alarms::mark_alarm_events_published`](crate::store::Alarms::mark_alarm_events_published) on SQLite.
pub(crate) async fn mark_alarm_events_published(
    c: &mut SqliteConnection,
    ids: &[AlarmEventId],
    now: i64,
) -> Result<u64> {
    let ids = json_ids(ids, |i| i.0);
    let done = sqlx::query(
        "UPDATE alarm_events SET published_at = $2
             WHERE id IN (SELECT value FROM json_each($1)) AND published_at IS NULL",
    )
    .bind(&ids)
    .bind(now)
    .execute(&mut *c)
    .await?;
    sqlx::query(
        "UPDATE alarms SET published_at = $2 WHERE published_at IS NULL AND id IN
             (SELECT alarm_id FROM alarm_events
              WHERE id IN (SELECT value FROM json_each($1)) AND event = 'raised')",
    )
    .bind(&ids)
    .bind(now)
    .execute(&mut *c)
    .await?;
    Ok(done.rows_affected())
}

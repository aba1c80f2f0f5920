//! The task operations PostgreSQL writes its own way (see [`tasks`](crate::store::tasks)): row
//! locks (`FOR SHARE`, `FOR NO KEY UPDATE`) and lists of ids as arrays.

use sqlx::postgres::PgConnection;
use sqlx::{FromRow, Row};

use super::raw_ids;
use crate::schedule::ScheduleKind;
use crate::store::{Result, sum_per_task};
use crate::task::{Task, TaskId};

/// [`Tasks::lock_tasks`](crate::store::Tasks::lock_tasks) on PostgreSQL.
pub(crate) async fn lock_tasks(c: &mut PgConnection, ids: &[TaskId]) -> Result<Vec<Task>> {
    Ok(
        sqlx::query_as("SELECT * FROM tasks WHERE id = ANY($1) ORDER BY id FOR SHARE")
            .bind(raw_ids(ids, |i| i.0))
            .fetch_all(&mut *c)
            .await?,
    )
}

/// [`Tasks::add_fires_scheduled_many`](crate::store::Tasks::add_fires_scheduled_many) on PostgreSQL.
pub(crate) async fn add_fires_scheduled_many(
    c: &mut PgConnection,
    counts: &[(TaskId, i64)],
) -> Result<()> {
    let sums = sum_per_task(counts);
    if sums.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "UPDATE tasks t SET fires_scheduled = t.fires_scheduled + u.n
         FROM UNNEST($1::bigint[], $2::bigint[]) AS u(id, n)
         WHERE t.id = u.id",
    )
    .bind(sums.iter().map(|(t, _)| t.0).collect::<Vec<_>>())
    .bind(sums.iter().map(|(_, n)| *n).collect::<Vec<_>>())
    .execute(&mut *c)
    .await?;
    Ok(())
}

/// [`Tasks::lock_tasks_counting`](crate::store::Tasks::lock_tasks_counting) on PostgreSQL: one
/// update, whose row lock is the claim's lock on the task (no `FOR NO KEY UPDATE` before it).
/// The ids go in sorted, and the planner walks an array in its order (a nested loop, one index
/// probe per id), so the rows are locked in id order. Were a plan ever to take them otherwise,
/// two claims meeting on the same tasks could deadlock; PostgreSQL then fails one of them, whose
/// runs stay pending for the next claim.
pub(crate) async fn lock_tasks_counting(
    c: &mut PgConnection,
    counts: &[(TaskId, i64)],
) -> Result<Vec<(Task, i64)>> {
    let sums = sum_per_task(counts);
    if sums.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(
        "UPDATE tasks t SET fires_scheduled = t.fires_scheduled
             + CASE WHEN t.schedule_kind = ANY($3) THEN u.n ELSE 0 END
         FROM UNNEST($1::bigint[], $2::bigint[]) AS u(id, n)
         WHERE t.id = u.id
         RETURNING t.*, CASE WHEN t.schedule_kind = ANY($3) THEN u.n ELSE 0 END AS counted",
    )
    .bind(sums.iter().map(|(t, _)| t.0).collect::<Vec<_>>())
    .bind(sums.iter().map(|(_, n)| *n).collect::<Vec<_>>())
    .bind(counted_kinds())
    .fetch_all(&mut *c)
    .await?;
    rows.iter()
        .map(|row| {
            let mut task = Task::from_row(row)?;
            let counted: i64 = row.try_get("counted")?;
            task.fires_scheduled -= counted;
            Ok((task, counted))
        })
        .collect()
}

/// The stored schedule kinds whose occurrences the claim counts.
fn counted_kinds() -> Vec<&'static str> {
    ScheduleKind::ALL
        .iter()
        .filter(|k| k.follows_on_claim())
        .map(|k| k.as_str())
        .collect()
}

/// [`Tasks::tasks_with_children`](crate::store::Tasks::tasks_with_children) on PostgreSQL.
pub(crate) async fn tasks_with_children(
    c: &mut PgConnection,
    ids: &[TaskId],
    lock: bool,
) -> Result<(Vec<Task>, Vec<TaskId>)> {
    const READ: &str =
        "SELECT t.*, EXISTS (SELECT 1 FROM task_dependencies d WHERE d.parent_task_id = t.id)
             AS has_children
         FROM tasks t WHERE t.id = ANY($1) ORDER BY t.id";
    static LOCK: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| format!("{READ} FOR SHARE OF t"));
    let rows = sqlx::query(if lock { LOCK.as_str() } else { READ })
        .bind(raw_ids(ids, |i| i.0))
        .fetch_all(&mut *c)
        .await?;
    let mut tasks = Vec::with_capacity(rows.len());
    let mut parents = Vec::new();
    for row in rows {
        let task = Task::from_row(&row)?;
        if row.try_get::<bool, _>("has_children")? {
            parents.push(task.id);
        }
        tasks.push(task);
    }
    Ok((tasks, parents))
}

/// [`Tasks::child_task_ids`](crate::store::Tasks::child_task_ids) on PostgreSQL.
pub(crate) async fn child_task_ids(
    c: &mut PgConnection,
    parents: &[TaskId],
) -> Result<Vec<TaskId>> {
    let rows: Vec<(TaskId,)> = sqlx::query_as(
        "SELECT DISTINCT child_task_id FROM task_dependencies
         WHERE parent_task_id = ANY($1) ORDER BY child_task_id",
    )
    .bind(raw_ids(parents, |i| i.0))
    .fetch_all(&mut *c)
    .await?;
    Ok(rows.into_iter().map(|(t,)| t).collect())
}

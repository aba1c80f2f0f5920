//! The task operations SQLite writes its own way (see [`tasks`](crate::store::tasks)): its
//! transactions already hold the only write lock, and lists of ids travel as JSON arrays.

use sqlx::sqlite::SqliteConnection;

use super::json_ids;
use crate::store::Tasks;
use crate::store::tx::StoreTx;
use crate::store::{Result, sum_per_task};
use crate::task::{Task, TaskId};

/// [`Tasks::lock_tasks`](crate::store::Tasks::lock_tasks) on SQLite.
pub(crate) async fn lock_tasks(c: &mut SqliteConnection, ids: &[TaskId]) -> Result<Vec<Task>> {
    Ok(sqlx::query_as(
        "SELECT * FROM tasks WHERE id IN (SELECT value FROM json_each($1)) ORDER BY id",
    )
    .bind(json_ids(ids, |i| i.0))
    .fetch_all(&mut *c)
    .await?)
}

/// [`Tasks::add_fires_scheduled_many`](crate::store::Tasks::add_fires_scheduled_many) on SQLite.
pub(crate) async fn add_fires_scheduled_many(
    tx: &mut StoreTx,
    counts: &[(TaskId, i64)],
) -> Result<()> {
    for (task, n) in sum_per_task(counts) {
        tx.add_fires_scheduled(task, n).await?;
    }
    Ok(())
}

/// [`Tasks::lock_tasks_counting`](crate::store::Tasks::lock_tasks_counting) on SQLite: one
/// writer at a time, so the tasks are read, then counted.
pub(crate) async fn lock_tasks_counting(
    tx: &mut StoreTx,
    counts: &[(TaskId, i64)],
) -> Result<Vec<(Task, i64)>> {
    let sums: std::collections::HashMap<TaskId, i64> = sum_per_task(counts).into_iter().collect();
    let ids: Vec<TaskId> = sums.keys().copied().collect();
    let tasks = tx.lock_tasks(&ids).await?;
    let mut counted = Vec::with_capacity(tasks.len());
    for task in tasks {
        let n = match sums.get(&task.id) {
            Some(&n) if task.schedule_kind.follows_on_claim() => n,
            _ => 0,
        };
        if n != 0 {
            tx.add_fires_scheduled(task.id, n).await?;
        }
        counted.push((task, n));
    }
    Ok(counted)
}

/// [`Tasks::tasks_with_children`](crate::store::Tasks::tasks_with_children) on SQLite.
pub(crate) async fn tasks_with_children(
    c: &mut SqliteConnection,
    ids: &[TaskId],
) -> Result<(Vec<Task>, Vec<TaskId>)> {
    let tasks = lock_tasks(&mut *c, ids).await?;
    let parents: Vec<(TaskId,)> = sqlx::query_as(
        "SELECT DISTINCT parent_task_id FROM task_dependencies
         WHERE parent_task_id IN (SELECT value FROM json_each($1)) ORDER BY parent_task_id",
    )
    .bind(json_ids(ids, |i| i.0))
    .fetch_all(&mut *c)
    .await?;
    Ok((tasks, parents.into_iter().map(|(t,)| t).collect()))
}

/// [`Tasks::child_task_ids`](crate::store::Tasks::child_task_ids) on SQLite.
pub(crate) async fn child_task_ids(
    c: &mut SqliteConnection,
    parents: &[TaskId],
) -> Result<Vec<TaskId>> {
    let rows: Vec<(TaskId,)> = sqlx::query_as(
        "SELECT DISTINCT child_task_id FROM task_dependencies
         WHERE parent_task_id IN (SELECT value FROM json_each($1)) ORDER BY child_task_id",
    )
    .bind(json_ids(parents, |i| i.0))
    .fetch_all(&mut *c)
    .await?;
    Ok(rows.into_iter().map(|(t,)| t).collect())
}

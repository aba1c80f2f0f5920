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

/// [`Tasks::lock_tasks_for_update`](crate::store::Tasks::lock_tasks_for_update) on SQLite.
pub(crate) async fn lock_tasks_for_update(
    c: &mut SqliteConnection,
    ids: &[TaskId],
) -> Result<Vec<Task>> {
    // One writer at a time: the shared read is already exclusive.
    lock_tasks(c, ids).await
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

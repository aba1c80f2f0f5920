//! Tasks and dependencies: the versioned task rows (optimistic locking with `version`), their
//! soft deletion, the scheduled-fire count, and the edges of task chains. Operations composed of
//! several of these (create a task with its first occurrence, add an edge without a cycle) are
//! in `store/ops.rs` and work on both backends.
//!
//! Written per dialect, in `pg/tasks.rs` and `sqlite/tasks.rs`: `lock_tasks`, `lock_tasks_counting`,
//! `tasks_with_children`, `add_fires_scheduled_many` and `child_task_ids` (row locks and
//! lists of ids).

use async_trait::async_trait;
use sqlx::query::QueryAs;
use sqlx::types::Json;
use sqlx::{Database, Encode, Type};

use super::tx::{Conn, StoreTx, check_or, found, on_conn, unique_or};
use super::{Result, StoreError, like_escape, page_limit, pg, sqlite};
use crate::app::AppId;
use crate::task::{
    Dependency, DependencyCondition, ScheduleColumns, Task, TaskDefinition, TaskFilter, TaskId,
};
use crate::tenant::TenantId;

/// Tasks (versioned, soft-deleted) and the dependencies that chain them.
#[async_trait]
pub trait Tasks: Send {
    /// Inserts a task row (see `ops.rs` `create_task` for the full operation).
    async fn insert_task(
        &mut self,
        tenant: TenantId,
        def: &TaskDefinition,
        schedule: &ScheduleColumns,
        now: i64,
    ) -> Result<Task>;
    /// A task that is not deleted.
    async fn get_task(&mut self, tenant: TenantId, id: TaskId) -> Result<Task>;
    async fn find_task_by_name(&mut self, tenant: TenantId, name: &str) -> Result<Option<Task>>;
    async fn list_tasks(&mut self, tenant: TenantId, filter: &TaskFilter) -> Result<Vec<Task>>;
    /// Replaces a task's definition if it is still at `expected_version`; `reset_fires`
    /// restarts the `max_fires` count (the schedule changed).
    #[allow(clippy::too_many_arguments)]
    async fn update_task_row(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        def: &TaskDefinition,
        schedule: &ScheduleColumns,
        reset_fires: bool,
        now: i64,
    ) -> Result<Task>;
    /// Pauses or resumes a task if it is still at `expected_version`.
    async fn set_task_paused(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        paused: bool,
        now: i64,
    ) -> Result<Task>;
    /// Marks a task deleted if it is still at `expected_version`, and drops its dependencies.
    async fn mark_task_deleted(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        now: i64,
    ) -> Result<Task>;
    /// Engine internal: tasks by id (deleted ones included), locked against concurrent edits
    /// until the transaction ends.
    async fn lock_tasks(&mut self, ids: &[TaskId]) -> Result<Vec<Task>>;
    /// Engine internal: the claim's lock on its runs' tasks, taken by writing the count of the
    /// scheduled occurrences it expects to materialise on them, so the lock and the count are
    /// one row version instead of a lock and then an update. `counts` names every task to
    /// lock (a task may appear several times; its counts add up; 0 locks it all the same);
    /// a count is written only on a task whose schedule follows on claim
    /// ([`ScheduleKind::follows_on_claim`](crate::schedule::ScheduleKind::follows_on_claim)).
    /// Locked exclusively from the start, in id order, so two claims queue one behind the other
    /// instead of deadlocking on upgrading shared locks. Each task comes back as it was before
    /// the count, with the count written on it; a claim that materialises another number
    /// corrects it with [`Tasks::add_fires_scheduled_many`].
    async fn lock_tasks_counting(&mut self, counts: &[(TaskId, i64)]) -> Result<Vec<(Task, i64)>>;
    /// Engine internal: tasks by id (deleted ones included), and which of them are the parent
    /// of a dependency (have children), in one statement; locked as by [`Tasks::lock_tasks`]
    /// when `lock` says so, else read as they are.
    async fn tasks_with_children(
        &mut self,
        ids: &[TaskId],
        lock: bool,
    ) -> Result<(Vec<Task>, Vec<TaskId>)>;
    /// Engine internal: counts `n` more materialised scheduled occurrences.
    async fn add_fires_scheduled(&mut self, task: TaskId, n: i64) -> Result<()>;
    /// Engine internal: [`Tasks::add_fires_scheduled`] for many tasks in one statement (a task
    /// may appear several times; its counts add up). Rows are updated in id order.
    async fn add_fires_scheduled_many(&mut self, counts: &[(TaskId, i64)]) -> Result<()>;
    async fn insert_dependency(
        &mut self,
        tenant: TenantId,
        parent: TaskId,
        child: TaskId,
        condition: DependencyCondition,
        now: i64,
    ) -> Result<Dependency>;
    async fn delete_dependency(
        &mut self,
        tenant: TenantId,
        parent: TaskId,
        child: TaskId,
    ) -> Result<()>;
    async fn list_dependencies(&mut self, tenant: TenantId) -> Result<Vec<Dependency>>;
    /// Engine internal: the edges leaving `parent`.
    async fn children_of(&mut self, parent: TaskId) -> Result<Vec<Dependency>>;
    /// Engine internal: the edges entering `child`.
    async fn parents_of(&mut self, child: TaskId) -> Result<Vec<Dependency>>;
    /// Engine internal: the tasks that depend on any of `parents` (their chain children), read
    /// without locking, so a finishing run can lock them with its own task in one pass.
    async fn child_task_ids(&mut self, parents: &[TaskId]) -> Result<Vec<TaskId>>;
}

#[async_trait]
impl Tasks for StoreTx {
    async fn insert_task(
        &mut self,
        tenant: TenantId,
        def: &TaskDefinition,
        schedule: &ScheduleColumns,
        now: i64,
    ) -> Result<Task> {
        let row = on_conn!(self, |c| bind_task_definition(sqlx::query_as(
            "INSERT INTO tasks (tenant_id, app_id, name, description, handler, params, schedule_kind,
                 cron_expr, interval_ms, anchor_at, timezone, window_start_at, window_end_at, max_fires,
                 fires_scheduled, misfire_policy, misfire_threshold_ms, misfire_max_catch_up,
                 overlap_policy, routing, timeout_ms, start_timeout_ms, max_retries, retry_backoff_ms,
                 retry_backoff_max_ms, recover_lost, priority, paused, version, created_at, updated_at)
             SELECT $1, a.id, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 0, $15, $16, $17,
                 $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, 1, $28, $28
             FROM apps a WHERE a.id = $2 AND a.tenant_id = $1
             RETURNING *",
        )
        .bind(tenant), def, schedule)
            .bind(now)
            .fetch_optional(&mut **c)
            .await)
            .map_err(|e| unique_or(e, || format!("a task named {:?} already exists", def.name)))?;
        found(row, || format!("app {}", def.app_id))
    }

    async fn get_task(&mut self, tenant: TenantId, id: TaskId) -> Result<Task> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM tasks WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut **c)
        .await)?;
        found(row, || format!("task {id}"))
    }

    async fn find_task_by_name(&mut self, tenant: TenantId, name: &str) -> Result<Option<Task>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM tasks WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL",
        )
        .bind(tenant)
        .bind(name)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn list_tasks(&mut self, tenant: TenantId, filter: &TaskFilter) -> Result<Vec<Task>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM tasks WHERE tenant_id = $1 AND deleted_at IS NULL
               AND ($2 IS NULL OR app_id = $2) AND ($3 IS NULL OR paused = $3)
               AND ($4 IS NULL OR name LIKE '%' || $4 || '%' ESCAPE '\\')
               AND ($5 IS NULL OR id > $5)
             ORDER BY id LIMIT $6",
        )
        .bind(tenant)
        .bind(filter.app_id)
        .bind(filter.paused)
        .bind(filter.name_contains.as_deref().map(like_escape))
        .bind(filter.after_id)
        .bind(page_limit(filter.limit))
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn update_task_row(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        def: &TaskDefinition,
        schedule: &ScheduleColumns,
        reset_fires: bool,
        now: i64,
    ) -> Result<Task> {
        let row = on_conn!(self, |c| bind_task_definition(sqlx::query_as(
            "UPDATE tasks SET fires_scheduled = CASE WHEN $31 THEN 0 ELSE fires_scheduled END, app_id = $4, name = $5, description = $6, handler = $7, params = $8,
                 schedule_kind = $9, cron_expr = $10, interval_ms = $11, anchor_at = $12, timezone = $13,
                 window_start_at = $14, window_end_at = $15, max_fires = $16, misfire_policy = $17,
                 misfire_threshold_ms = $18, misfire_max_catch_up = $19, overlap_policy = $20,
                 routing = $21, timeout_ms = $22, start_timeout_ms = $23, max_retries = $24,
                 retry_backoff_ms = $25, retry_backoff_max_ms = $26, recover_lost = $27, priority = $28,
                 paused = $29, version = version + 1, updated_at = $30
             WHERE tenant_id = $1 AND id = $2 AND version = $3 AND deleted_at IS NULL
               AND EXISTS (SELECT 1 FROM apps WHERE id = $4 AND tenant_id = $1)
             RETURNING *",
        )
        .bind(tenant)
        .bind(id)
        .bind(expected_version), def, schedule)
            .bind(now)
            .bind(reset_fires)
            .fetch_optional(&mut **c)
            .await)
            .map_err(|e| unique_or(e, || format!("a task named {:?} already exists", def.name)))?;
        match row {
            Some(task) => {
                let task: Task = task;
                // Runs not started yet go with the task to its (new) app: claims count
                // them against that app's capacity.
                on_conn!(self, |c| sqlx::query(
                    "UPDATE runs SET app_id = $2 WHERE task_id = $1 AND app_id <> $2
                       AND started_at IS NULL AND finished_at IS NULL",
                )
                .bind(task.id)
                .bind(task.app_id)
                .execute(&mut **c)
                .await
                .map(|done| done.rows_affected()))?;
                Ok(task)
            }
            None => Err(self
                .task_write_refused(tenant, id, expected_version)
                .await?
                .unwrap_or_else(|| StoreError::NotFound(format!("app {}", def.app_id)))),
        }
    }

    async fn set_task_paused(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        paused: bool,
        now: i64,
    ) -> Result<Task> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "UPDATE tasks SET paused = $4, version = version + 1, updated_at = $5
             WHERE tenant_id = $1 AND id = $2 AND version = $3 AND deleted_at IS NULL RETURNING *",
        )
        .bind(tenant)
        .bind(id)
        .bind(expected_version)
        .bind(paused)
        .bind(now)
        .fetch_optional(&mut **c)
        .await)?;
        match row {
            Some(task) => Ok(task),
            None => Err(self
                .task_write_refused(tenant, id, expected_version)
                .await?
                .unwrap_or_else(|| StoreError::NotFound(format!("task {id}")))),
        }
    }

    async fn mark_task_deleted(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        now: i64,
    ) -> Result<Task> {
        let row: Option<Task> = on_conn!(self, |c| sqlx::query_as(
            "UPDATE tasks SET deleted_at = $4, version = version + 1, updated_at = $4
             WHERE tenant_id = $1 AND id = $2 AND version = $3 AND deleted_at IS NULL RETURNING *",
        )
        .bind(tenant)
        .bind(id)
        .bind(expected_version)
        .bind(now)
        .fetch_optional(&mut **c)
        .await)?;
        let Some(task) = row else {
            return Err(self
                .task_write_refused(tenant, id, expected_version)
                .await?
                .unwrap_or_else(|| StoreError::NotFound(format!("task {id}"))));
        };
        on_conn!(self, |c| sqlx::query(
            "DELETE FROM task_dependencies WHERE parent_task_id = $1 OR child_task_id = $1"
        )
        .bind(id)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(task)
    }

    async fn lock_tasks(&mut self, ids: &[TaskId]) -> Result<Vec<Task>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::tasks::lock_tasks(c, ids).await,
            Conn::Sqlite(c) => sqlite::tasks::lock_tasks(c, ids).await,
        }
    }

    async fn lock_tasks_counting(&mut self, counts: &[(TaskId, i64)]) -> Result<Vec<(Task, i64)>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::tasks::lock_tasks_counting(c, counts).await,
            Conn::Sqlite(_) => sqlite::tasks::lock_tasks_counting(self, counts).await,
        }
    }

    async fn tasks_with_children(
        &mut self,
        ids: &[TaskId],
        lock: bool,
    ) -> Result<(Vec<Task>, Vec<TaskId>)> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::tasks::tasks_with_children(c, ids, lock).await,
            // One writer at a time: nothing to lock.
            Conn::Sqlite(c) => sqlite::tasks::tasks_with_children(c, ids).await,
        }
    }

    async fn add_fires_scheduled(&mut self, task: TaskId, n: i64) -> Result<()> {
        on_conn!(self, |c| sqlx::query(
            "UPDATE tasks SET fires_scheduled = fires_scheduled + $2 WHERE id = $1"
        )
        .bind(task)
        .bind(n)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(())
    }

    async fn add_fires_scheduled_many(&mut self, counts: &[(TaskId, i64)]) -> Result<()> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::tasks::add_fires_scheduled_many(c, counts).await,
            Conn::Sqlite(_) => sqlite::tasks::add_fires_scheduled_many(self, counts).await,
        }
    }

    async fn insert_dependency(
        &mut self,
        tenant: TenantId,
        parent: TaskId,
        child: TaskId,
        condition: DependencyCondition,
        now: i64,
    ) -> Result<Dependency> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "INSERT INTO task_dependencies (tenant_id, parent_task_id, child_task_id, condition, created_at)
             SELECT $1, $2, $3, $4, $5
             WHERE EXISTS (SELECT 1 FROM tasks WHERE id = $2 AND tenant_id = $1 AND deleted_at IS NULL)
               AND EXISTS (SELECT 1 FROM tasks WHERE id = $3 AND tenant_id = $1 AND deleted_at IS NULL)
             ON CONFLICT (parent_task_id, child_task_id) DO UPDATE SET condition = excluded.condition
             RETURNING *",
        )
        .bind(tenant)
        .bind(parent)
        .bind(child)
        .bind(condition.as_str())
        .bind(now)
        .fetch_optional(&mut **c)
        .await)
        .map_err(|e| check_or(e, || "a task cannot depend on itself".to_owned()))?;
        found(row, || format!("task {parent} or {child}"))
    }

    async fn delete_dependency(
        &mut self,
        tenant: TenantId,
        parent: TaskId,
        child: TaskId,
    ) -> Result<()> {
        let done = on_conn!(self, |c| {
            sqlx::query(
            "DELETE FROM task_dependencies WHERE tenant_id = $1 AND parent_task_id = $2 AND child_task_id = $3",
        )
        .bind(tenant)
        .bind(parent)
        .bind(child)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected())
        })?;
        if done == 0 {
            return Err(StoreError::NotFound(format!(
                "dependency {parent} → {child}"
            )));
        }
        Ok(())
    }

    async fn list_dependencies(&mut self, tenant: TenantId) -> Result<Vec<Dependency>> {
        Ok(on_conn!(self, |c| {
            sqlx::query_as(
            "SELECT * FROM task_dependencies WHERE tenant_id = $1 ORDER BY parent_task_id, child_task_id",
        )
        .bind(tenant)
        .fetch_all(&mut **c)
        .await
        })?)
    }

    async fn children_of(&mut self, parent: TaskId) -> Result<Vec<Dependency>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM task_dependencies WHERE parent_task_id = $1 ORDER BY child_task_id",
        )
        .bind(parent)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn parents_of(&mut self, child: TaskId) -> Result<Vec<Dependency>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM task_dependencies WHERE child_task_id = $1 ORDER BY parent_task_id",
        )
        .bind(child)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn child_task_ids(&mut self, parents: &[TaskId]) -> Result<Vec<TaskId>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::tasks::child_task_ids(c, parents).await,
            Conn::Sqlite(c) => sqlite::tasks::child_task_ids(c, parents).await,
        }
    }
}

impl StoreTx {
    /// Why a versioned task write matched no row: not found, or a version conflict; `None`
    /// when the task is there at that version (something else refused the write).
    async fn task_write_refused(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
    ) -> Result<Option<StoreError>> {
        let row: Option<(i64,)> = on_conn!(self, |c| sqlx::query_as(
            "SELECT version FROM tasks WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut **c)
        .await)?;
        Ok(match row {
            None => Some(StoreError::NotFound(format!("task {id}"))),
            Some((actual,)) if actual != expected_version => Some(StoreError::Conflict {
                what: format!("task {id}"),
                expected: expected_version,
                actual,
            }),
            Some(_) => None,
        })
    }
}

/// Binds a task definition's columns, in the order `insert_task` and `update_task_row` list
/// them (from the app id to `paused`), after the statement's own leading parameters.
fn bind_task_definition<'q, DB, O>(
    q: QueryAs<'q, DB, O, <DB as Database>::Arguments>,
    def: &'q TaskDefinition,
    schedule: &'q ScheduleColumns,
) -> QueryAs<'q, DB, O, <DB as Database>::Arguments>
where
    DB: Database,
    AppId: Encode<'q, DB> + Type<DB>,
    &'q str: Encode<'q, DB> + Type<DB>,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    Json<&'q serde_json::Value>: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
    Option<i32>: Encode<'q, DB> + Type<DB>,
    bool: Encode<'q, DB> + Type<DB>,
    i32: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
{
    q.bind(def.app_id)
        .bind(def.name.as_str())
        .bind(def.description.as_str())
        .bind(def.handler.as_str())
        .bind(Json(&def.params))
        .bind(schedule.kind.as_str())
        .bind(schedule.cron_expr.as_deref())
        .bind(schedule.interval_ms)
        .bind(schedule.anchor_at)
        .bind(schedule.timezone.as_str())
        .bind(def.window_start_at)
        .bind(def.window_end_at)
        .bind(def.max_fires)
        .bind(def.misfire_policy.as_str())
        .bind(def.misfire_threshold_ms)
        .bind(def.misfire_max_catch_up)
        .bind(def.overlap_policy.as_str())
        .bind(def.routing.as_str())
        .bind(def.timeout_ms)
        .bind(def.start_timeout_ms)
        .bind(def.max_retries)
        .bind(def.retry_backoff_ms)
        .bind(def.retry_backoff_max_ms)
        .bind(def.recover_lost)
        .bind(def.priority)
        .bind(def.paused)
}

//! Tasks and dependencies: the versioned task rows (optimistic locking with `version`), their
//! soft deletion, the scheduled-fire count, and the edges of task chains. Operations composed of
//! several of these (create a task with its first occurrence, add an edge without a cycle) are
//! in `store/ops.rs` and work on both backends.
//!
//! Dialect-specific (in `postgres.rs`/`sqlite.rs`): `lock_tasks`, `lock_tasks_for_update`,
//! `lock_tasks_with_children`, `add_fires_scheduled_many` and `child_task_ids` (row locks and
//! lists of ids).

/// Adds the task and dependency operations to the `impl Tx` that [`tx_impl!`](super::tx_impl)
/// writes (see [`tx_ops!`](super::tx_ops) for how the domains join).
macro_rules! task_ops {
    ($tx:ty, $for_update:literal, $skip_locked:literal, $rest:tt, { $($done:tt)* }) => {
        $crate::store::shared::tx_ops!($tx, $for_update, $skip_locked, $rest, {
            $($done)*

            async fn insert_task(
                &mut self,
                tenant: TenantId,
                def: &TaskDefinition,
                schedule: &ScheduleColumns,
                now: i64,
            ) -> Result<Task> {
                let q = sqlx::query_as(
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
                .bind(tenant);
                let row = $crate::store::shared::bind_task_definition!(q, def, schedule)
                    .bind(now)
                    .fetch_optional(&mut *self.tx)
                    .await
                    .map_err(|e| unique_or(e, || format!("a task named {:?} already exists", def.name)))?;
                found(row, || format!("app {}", def.app_id))
            }

            async fn get_task(&mut self, tenant: TenantId, id: TaskId) -> Result<Task> {
                let row = sqlx::query_as(
                    "SELECT * FROM tasks WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
                )
                .bind(tenant)
                .bind(id)
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("task {id}"))
            }

            async fn find_task_by_name(&mut self, tenant: TenantId, name: &str) -> Result<Option<Task>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM tasks WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL",
                )
                .bind(tenant)
                .bind(name)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn list_tasks(&mut self, tenant: TenantId, filter: &TaskFilter) -> Result<Vec<Task>> {
                Ok(sqlx::query_as(
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
                .fetch_all(&mut *self.tx)
                .await?)
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
                let q = sqlx::query_as(
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
                .bind(expected_version);
                let row = $crate::store::shared::bind_task_definition!(q, def, schedule)
                    .bind(now)
                    .bind(reset_fires)
                    .fetch_optional(&mut *self.tx)
                    .await
                    .map_err(|e| unique_or(e, || format!("a task named {:?} already exists", def.name)))?;
                match row {
                    Some(task) => {
                        let task: Task = task;
                        // Runs not started yet go with the task to its (new) app: claims count
                        // them against that app's capacity.
                        sqlx::query(
                            "UPDATE runs SET app_id = $2 WHERE task_id = $1 AND app_id <> $2
                               AND started_at IS NULL AND finished_at IS NULL",
                        )
                        .bind(task.id)
                        .bind(task.app_id)
                        .execute(&mut *self.tx)
                        .await?;
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
                let row = sqlx::query_as(
                    "UPDATE tasks SET paused = $4, version = version + 1, updated_at = $5
                     WHERE tenant_id = $1 AND id = $2 AND version = $3 AND deleted_at IS NULL RETURNING *",
                )
                .bind(tenant)
                .bind(id)
                .bind(expected_version)
                .bind(paused)
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?;
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
                let row: Option<Task> = sqlx::query_as(
                    "UPDATE tasks SET deleted_at = $4, version = version + 1, updated_at = $4
                     WHERE tenant_id = $1 AND id = $2 AND version = $3 AND deleted_at IS NULL RETURNING *",
                )
                .bind(tenant)
                .bind(id)
                .bind(expected_version)
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?;
                let Some(task) = row else {
                    return Err(self
                        .task_write_refused(tenant, id, expected_version)
                        .await?
                        .unwrap_or_else(|| StoreError::NotFound(format!("task {id}"))));
                };
                sqlx::query("DELETE FROM task_dependencies WHERE parent_task_id = $1 OR child_task_id = $1")
                    .bind(id)
                    .execute(&mut *self.tx)
                    .await?;
                Ok(task)
            }

            async fn add_fires_scheduled(&mut self, task: TaskId, n: i64) -> Result<()> {
                sqlx::query("UPDATE tasks SET fires_scheduled = fires_scheduled + $2 WHERE id = $1")
                    .bind(task)
                    .bind(n)
                    .execute(&mut *self.tx)
                    .await?;
                Ok(())
            }

            async fn insert_dependency(
                &mut self,
                tenant: TenantId,
                parent: TaskId,
                child: TaskId,
                condition: DependencyCondition,
                now: i64,
            ) -> Result<Dependency> {
                let row = sqlx::query_as(
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
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(|e| check_or(e, || "a task cannot depend on itself".to_owned()))?;
                found(row, || format!("task {parent} or {child}"))
            }

            async fn delete_dependency(&mut self, tenant: TenantId, parent: TaskId, child: TaskId) -> Result<()> {
                let done = sqlx::query(
                    "DELETE FROM task_dependencies WHERE tenant_id = $1 AND parent_task_id = $2 AND child_task_id = $3",
                )
                .bind(tenant)
                .bind(parent)
                .bind(child)
                .execute(&mut *self.tx)
                .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("dependency {parent} → {child}")));
                }
                Ok(())
            }

            async fn list_dependencies(&mut self, tenant: TenantId) -> Result<Vec<Dependency>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM task_dependencies WHERE tenant_id = $1 ORDER BY parent_task_id, child_task_id",
                )
                .bind(tenant)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn children_of(&mut self, parent: TaskId) -> Result<Vec<Dependency>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM task_dependencies WHERE parent_task_id = $1 ORDER BY child_task_id",
                )
                .bind(parent)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn parents_of(&mut self, child: TaskId) -> Result<Vec<Dependency>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM task_dependencies WHERE child_task_id = $1 ORDER BY parent_task_id",
                )
                .bind(child)
                .fetch_all(&mut *self.tx)
                .await?)
            }
        });

        impl $tx {
            /// Why a versioned task write matched no row: not found, or a version conflict;
            /// `None` when the task is there at that version (something else refused the write).
            async fn task_write_refused(
                &mut self,
                tenant: TenantId,
                id: TaskId,
                expected_version: i64,
            ) -> Result<Option<StoreError>> {
                let row: Option<(i64,)> = sqlx::query_as(
                    "SELECT version FROM tasks WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
                )
                .bind(tenant)
                .bind(id)
                .fetch_optional(&mut *self.tx)
                .await?;
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
    };
}
pub(crate) use task_ops;

/// Binds a task definition's columns, in the order `insert_task` and `update_task_row` list
/// them (from the app id to `paused`), after the statement's own leading parameters.
macro_rules! bind_task_definition {
    ($q:expr, $def:expr, $schedule:expr) => {
        $q.bind($def.app_id)
            .bind(&$def.name)
            .bind(&$def.description)
            .bind(&$def.handler)
            .bind(Json(&$def.params))
            .bind($schedule.kind.as_str())
            .bind($schedule.cron_expr.as_deref())
            .bind($schedule.interval_ms)
            .bind($schedule.anchor_at)
            .bind(&$schedule.timezone)
            .bind($def.window_start_at)
            .bind($def.window_end_at)
            .bind($def.max_fires)
            .bind($def.misfire_policy.as_str())
            .bind($def.misfire_threshold_ms)
            .bind($def.misfire_max_catch_up)
            .bind($def.overlap_policy.as_str())
            .bind($def.routing.as_str())
            .bind($def.timeout_ms)
            .bind($def.start_timeout_ms)
            .bind($def.max_retries)
            .bind($def.retry_backoff_ms)
            .bind($def.retry_backoff_max_ms)
            .bind($def.recover_lost)
            .bind($def.priority)
            .bind($def.paused)
    };
}
pub(crate) use bind_task_definition;

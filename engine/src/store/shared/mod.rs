//! The SQL both backends share, written once, one file per domain (the map is in the
//! [`store`](crate::store) docs).
//!
//! [`tx_impl!`] writes a backend's `impl Tx`: the backend's own operations (where the SQL
//! differs: arrays, batch inserts, claiming) and then every domain's shared ones. `$N`
//! placeholders work on both backends; a shared statement that locks rows appends the
//! backend's `for_update`/`skip_locked` clause (empty on SQLite, which has one writer at a
//! time).
//!
//! A new shared operation goes into its domain's macro (`tenant_ops!` in `tenants.rs`, …); a
//! new domain file into the list in [`tx_impl!`]. How the domains join is told at [`tx_ops!`].

pub(super) mod apps;
mod completion;
pub(super) mod runs;
pub(super) mod sessions;
pub(super) mod tasks;
pub(super) mod tenants;
pub(super) mod users;

use sqlx::error::ErrorKind;

use super::StoreError;

pub(super) use self::completion::{completed_tail, not_final, plan_completions, report_refused};
pub(crate) use self::runs::fenced_update;
pub(crate) use self::tasks::bind_task_definition;

/// Maps a unique-constraint violation to [`StoreError::Duplicate`] with `msg`.
pub(super) fn unique_or(e: sqlx::Error, msg: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::UniqueViolation) => {
            StoreError::Duplicate(msg())
        }
        _ => StoreError::from(e),
    }
}

/// Maps a foreign-key violation to [`StoreError::NotFound`] with `what`.
pub(super) fn fk_or(e: sqlx::Error, what: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::ForeignKeyViolation) => {
            StoreError::NotFound(what())
        }
        _ => StoreError::from(e),
    }
}

/// Maps a check-constraint violation to [`StoreError::InvalidState`] with `msg`.
pub(super) fn check_or(e: sqlx::Error, msg: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::CheckViolation) => {
            StoreError::InvalidState(msg())
        }
        _ => StoreError::from(e),
    }
}

/// `Some(x)` or [`StoreError::NotFound`] naming `what`.
pub(super) fn found<T>(row: Option<T>, what: impl FnOnce() -> String) -> Result<T, StoreError> {
    row.ok_or_else(|| StoreError::NotFound(what()))
}

/// Writes `impl Tx for $tx`: the backend's own operations (the braces) and every domain's
/// shared ones. `$for_update` and `$skip_locked` are the backend's row-locking clauses (empty
/// where the backend serialises writers instead).
macro_rules! tx_impl {
    (
        $tx:ty,
        for_update = $for_update:literal,
        skip_locked = $skip_locked:literal,
        { $($dialect:tt)* }
    ) => {
        $crate::store::shared::tx_ops!($tx, $for_update, $skip_locked, [
            tenants::tenant_ops,
            users::user_ops,
            apps::app_ops,
            tasks::task_ops,
            runs::run_ops,
            sessions::session_ops,
        ], {
            $($dialect)*

            async fn insert_alarm(&mut self, alarm: &NewAlarm, now: i64) -> Result<Option<Alarm>> {
                Ok(sqlx::query_as(
                    "INSERT INTO alarms (tenant_id, kind, severity, task_id, run_id, executor_id, node_id,
                         message, details, dedupe_key, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                     ON CONFLICT DO NOTHING RETURNING *",
                )
                .bind(alarm.tenant_id)
                .bind(alarm.kind.as_str())
                .bind(alarm.severity.as_str())
                .bind(alarm.task_id)
                .bind(alarm.run_id)
                .bind(alarm.executor_id)
                .bind(alarm.node_id.as_deref())
                .bind(&alarm.message)
                .bind(Json(&alarm.details))
                .bind(alarm.dedupe_key.as_deref())
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn list_unpublished_alarms(&mut self, limit: i64) -> Result<Vec<Alarm>> {
                Ok(sqlx::query_as(concat!(
                    "SELECT * FROM alarms WHERE published_at IS NULL ORDER BY id LIMIT $1",
                    $skip_locked
                ))
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn get_alarm(&mut self, scope: Scope, id: AlarmId) -> Result<Alarm> {
                let row = sqlx::query_as(
                    "SELECT * FROM alarms WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)",
                )
                .bind(id)
                .bind(scope.tenant())
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("alarm {id}"))
            }

            async fn list_alarms(&mut self, scope: Scope, filter: &AlarmFilter) -> Result<Vec<Alarm>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM alarms WHERE ($1 IS NULL OR tenant_id = $1)
                       AND ($2 IS NULL OR kind = $2) AND ($3 = FALSE OR acknowledged_at IS NULL)
                       AND ($4 IS NULL OR id < $4)
                       AND ($6 IS NULL OR severity = $6) AND ($7 IS NULL OR task_id = $7)
                       AND ($8 = FALSE OR acknowledged_at IS NOT NULL)
                     ORDER BY id DESC LIMIT $5",
                )
                .bind(scope.tenant())
                .bind(filter.kind.map(|k| k.as_str()))
                .bind(filter.unacknowledged)
                .bind(filter.before_id)
                .bind(page_limit(filter.limit))
                .bind(filter.severity.map(|s| s.as_str()))
                .bind(filter.task_id)
                .bind(filter.acknowledged)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn acknowledge_alarm(&mut self, scope: Scope, id: AlarmId, by: &str, now: i64) -> Result<Alarm> {
                let row = sqlx::query_as(
                    "UPDATE alarms SET acknowledged_at = COALESCE(acknowledged_at, $3),
                         acknowledged_by = COALESCE(acknowledged_by, $4)
                     WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2) RETURNING *",
                )
                .bind(id)
                .bind(scope.tenant())
                .bind(now)
                .bind(by)
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("alarm {id}"))
            }

            async fn heartbeat_node(&mut self, beat: &NodeHeartbeat, now: i64) -> Result<EngineNode> {
                Ok(sqlx::query_as(
                    "INSERT INTO engine_nodes (id, node_groups, address, started_at, last_heartbeat_at, state)
                     VALUES ($1, $2, $3, $4, $4, $5)
                     ON CONFLICT (id) DO UPDATE SET node_groups = excluded.node_groups,
                         address = excluded.address, last_heartbeat_at = excluded.last_heartbeat_at,
                         state = excluded.state,
                         started_at = CASE WHEN engine_nodes.state IN ('stopped', 'lost')
                                           THEN excluded.started_at ELSE engine_nodes.started_at END
                     RETURNING *",
                )
                .bind(&beat.id)
                .bind(Json(&beat.node_groups))
                .bind(&beat.address)
                .bind(now)
                .bind(beat.state.as_str())
                .fetch_one(&mut *self.tx)
                .await?)
            }

            async fn list_nodes(&mut self) -> Result<Vec<EngineNode>> {
                Ok(sqlx::query_as("SELECT * FROM engine_nodes ORDER BY id")
                    .fetch_all(&mut *self.tx)
                    .await?)
            }

            async fn mark_nodes_lost(&mut self, heartbeat_before: i64) -> Result<Vec<EngineNode>> {
                Ok(sqlx::query_as(
                    "UPDATE engine_nodes SET state = 'lost'
                     WHERE state IN ('up', 'draining') AND last_heartbeat_at < $1 RETURNING *",
                )
                .bind(heartbeat_before)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn append_audit(&mut self, event: &NewAuditEvent, now: i64) -> Result<AuditEvent> {
                Ok(sqlx::query_as(
                    "INSERT INTO audit_events (tenant_id, actor, action, target_kind, target_id, details, at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING *",
                )
                .bind(event.tenant_id)
                .bind(&event.actor)
                .bind(&event.action)
                .bind(&event.target_kind)
                .bind(event.target_id.as_deref())
                .bind(Json(&event.details))
                .bind(now)
                .fetch_one(&mut *self.tx)
                .await?)
            }

            async fn list_audit(&mut self, scope: Scope, before_id: Option<i64>, limit: i64) -> Result<Vec<AuditEvent>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM audit_events WHERE ($1 IS NULL OR tenant_id = $1) AND ($2 IS NULL OR id < $2)
                     ORDER BY id DESC LIMIT $3",
                )
                .bind(scope.tenant())
                .bind(before_id)
                .bind(page_limit(Some(limit)))
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn run_samples(
                &mut self,
                tenant: TenantId,
                query: &$crate::store::RunSampleQuery,
            ) -> Result<Vec<$crate::store::RunSample>> {
                Ok(sqlx::query_as(
                    "SELECT task_id, state, scheduled_at, due_at, started_at, finished_at FROM runs
                     WHERE tenant_id = $1 AND ($2 IS NULL OR task_id = $2)
                       AND scheduled_at >= $3 AND scheduled_at < $4
                       AND state IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
                     ORDER BY scheduled_at, id LIMIT $5",
                )
                .bind(tenant)
                .bind(query.task_id)
                .bind(query.scheduled_from)
                .bind(query.scheduled_before)
                .bind(query.limit.clamp(1, $crate::store::MAX_RUN_SAMPLES))
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn occurrence_runs(&mut self, tenant: TenantId, task: TaskId, scheduled_at: i64) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM runs WHERE tenant_id = $1 AND task_id = $2 AND scheduled_at = $3
                     ORDER BY shard_index, attempt",
                )
                .bind(tenant)
                .bind(task)
                .bind(scheduled_at)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn find_trigger_key(
                &mut self,
                tenant: TenantId,
                key: &str,
                created_since: i64,
            ) -> Result<Option<$crate::store::TriggerKey>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM trigger_keys WHERE tenant_id = $1 AND key = $2 AND created_at >= $3",
                )
                .bind(tenant)
                .bind(key)
                .bind(created_since)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn insert_trigger_key(&mut self, key: &$crate::store::TriggerKey, created_since: i64) -> Result<bool> {
                sqlx::query("DELETE FROM trigger_keys WHERE tenant_id = $1 AND key = $2 AND created_at < $3")
                    .bind(key.tenant_id)
                    .bind(&key.key)
                    .bind(created_since)
                    .execute(&mut *self.tx)
                    .await?;
                let inserted = sqlx::query(
                    "INSERT INTO trigger_keys (tenant_id, key, task_id, run_id, created_at)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, key) DO NOTHING",
                )
                .bind(key.tenant_id)
                .bind(&key.key)
                .bind(key.task_id)
                .bind(key.run_id)
                .bind(key.created_at)
                .execute(&mut *self.tx)
                .await
                .map_err(|e| fk_or(e, || format!("run {} of tenant {}", key.run_id, key.tenant_id)))?;
                Ok(inserted.rows_affected() == 1)
            }

            async fn set_alarm_mute(
                &mut self,
                tenant: TenantId,
                task: TaskId,
                until: Option<i64>,
                by: &str,
                now: i64,
            ) -> Result<Option<$crate::store::AlarmMute>> {
                // The task must be the tenant's: a foreign id is "not found", never muted.
                self.get_task(tenant, task).await?;
                let Some(until) = until else {
                    sqlx::query("DELETE FROM alarm_mutes WHERE tenant_id = $1 AND task_id = $2")
                        .bind(tenant)
                        .bind(task)
                        .execute(&mut *self.tx)
                        .await?;
                    return Ok(None);
                };
                Ok(Some(
                    sqlx::query_as(
                        "INSERT INTO alarm_mutes (task_id, tenant_id, muted_until, muted_by, updated_at)
                         VALUES ($1, $2, $3, $4, $5)
                         ON CONFLICT (task_id) DO UPDATE SET muted_until = excluded.muted_until,
                             muted_by = excluded.muted_by, updated_at = excluded.updated_at
                         RETURNING *",
                    )
                    .bind(task)
                    .bind(tenant)
                    .bind(until)
                    .bind(by)
                    .bind(now)
                    .fetch_one(&mut *self.tx)
                    .await?,
                ))
            }

            async fn list_alarm_mutes(&mut self, tenant: TenantId, now: i64) -> Result<Vec<$crate::store::AlarmMute>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM alarm_mutes WHERE tenant_id = $1 AND muted_until > $2 ORDER BY task_id",
                )
                .bind(tenant)
                .bind(now)
                .fetch_all(&mut *self.tx)
                .await?)
            }
        });
    };
}
pub(crate) use tx_impl;

/// Joins the domains into one `impl Tx`. `async_trait` must see every method of the impl at
/// once, so a domain cannot add its methods by a macro call inside the impl block (that call
/// would expand after `async_trait` ran). Instead each domain's macro appends its methods to
/// the ones gathered so far (`{ … }`) and calls this one again with the rest of the list;
/// after the last domain, this writes the impl block.
macro_rules! tx_ops {
    ($tx:ty, $for_update:literal, $skip_locked:literal, [], { $($done:tt)* }) => {
        #[async_trait::async_trait]
        impl $crate::store::Tx for $tx {
            $($done)*
        }
    };
    (
        $tx:ty, $for_update:literal, $skip_locked:literal,
        [$module:ident :: $domain:ident $(, $rest_module:ident :: $rest:ident)* $(,)?],
        $done:tt
    ) => {
        $crate::store::shared::$module::$domain!(
            $tx, $for_update, $skip_locked, [$($rest_module::$rest),*], $done
        );
    };
}
pub(crate) use tx_ops;

/// Whether `e` is a foreign-key violation.
pub(super) fn is_fk(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::ForeignKeyViolation))
}

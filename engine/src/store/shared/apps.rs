//! Apps and executor instances: a tenant's apps (name and signing secret), the wrapper
//! instances that register for them, their heartbeats, draining and loss.
//!
//! Dialect-specific (in `postgres.rs`/`sqlite.rs`): `get_apps_by_ids`,
//! `mark_silent_executors_lost` and `record_executor_probes` (they take lists of ids).

/// Adds the app and executor operations to the `impl Tx` that [`tx_impl!`](super::tx_impl)
/// writes (see [`tx_ops!`](super::tx_ops) for how the domains join).
macro_rules! app_ops {
    ($tx:ty, $for_update:literal, $skip_locked:literal, $rest:tt, { $($done:tt)* }) => {
        $crate::store::shared::tx_ops!($tx, $for_update, $skip_locked, $rest, {
            $($done)*

            async fn create_app(&mut self, tenant: TenantId, new: &NewApp, now: i64) -> Result<App> {
                new.validate()?;
                sqlx::query_as(
                    "INSERT INTO apps (tenant_id, name, secret, created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $4) RETURNING *",
                )
                .bind(tenant)
                .bind(&new.name)
                .bind(&new.secret)
                .bind(now)
                .fetch_one(&mut *self.tx)
                .await
                .map_err(|e| match e {
                    e @ sqlx::Error::Database(_) if is_fk(&e) => {
                        StoreError::NotFound(format!("tenant {tenant}"))
                    }
                    e => unique_or(e, || format!("an app named {:?} already exists", new.name)),
                })
            }

            async fn get_app(&mut self, tenant: TenantId, id: AppId) -> Result<App> {
                let row = sqlx::query_as("SELECT * FROM apps WHERE tenant_id = $1 AND id = $2")
                    .bind(tenant)
                    .bind(id)
                    .fetch_optional(&mut *self.tx)
                    .await?;
                found(row, || format!("app {id}"))
            }

            async fn find_app_by_name(&mut self, tenant: TenantId, name: &str) -> Result<Option<App>> {
                Ok(sqlx::query_as("SELECT * FROM apps WHERE tenant_id = $1 AND name = $2")
                    .bind(tenant)
                    .bind(name)
                    .fetch_optional(&mut *self.tx)
                    .await?)
            }

            async fn list_apps(&mut self, tenant: TenantId) -> Result<Vec<App>> {
                Ok(sqlx::query_as("SELECT * FROM apps WHERE tenant_id = $1 ORDER BY id")
                    .bind(tenant)
                    .fetch_all(&mut *self.tx)
                    .await?)
            }

            async fn set_app_secret(
                &mut self,
                tenant: TenantId,
                id: AppId,
                secret: &str,
                now: i64,
            ) -> Result<App> {
                $crate::app::check_secret(secret)?;
                let row = sqlx::query_as(
                    "UPDATE apps SET secret = $3, updated_at = $4 WHERE tenant_id = $1 AND id = $2 RETURNING *",
                )
                .bind(tenant)
                .bind(id)
                .bind(secret)
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("app {id}"))
            }

            async fn delete_app(&mut self, tenant: TenantId, id: AppId) -> Result<()> {
                let (in_use,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM tasks WHERE tenant_id = $1 AND app_id = $2 AND deleted_at IS NULL",
                )
                .bind(tenant)
                .bind(id)
                .fetch_one(&mut *self.tx)
                .await?;
                if in_use > 0 {
                    return Err(StoreError::InvalidState(format!(
                        "app {id} is used by {in_use} task(s); delete them or move them to another app first"
                    )));
                }
                let done = sqlx::query("DELETE FROM apps WHERE tenant_id = $1 AND id = $2")
                    .bind(tenant)
                    .bind(id)
                    .execute(&mut *self.tx)
                    .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("app {id}")));
                }
                Ok(())
            }

            async fn find_app_by_key(&mut self, tenant_name: &str, app_name: &str) -> Result<Option<App>> {
                Ok(sqlx::query_as(
                    "SELECT a.* FROM apps a JOIN tenants t ON t.id = a.tenant_id
                     WHERE t.name = $1 AND a.name = $2 AND t.disabled = FALSE",
                )
                .bind(tenant_name)
                .bind(app_name)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn register_executor(&mut self, reg: &ExecutorRegistration, now: i64) -> Result<Executor> {
                reg.validate()?;
                let row = sqlx::query_as(
                    "INSERT INTO executors (tenant_id, app_id, instance_id, base_url, capacity, running,
                         handlers, labels, state, registered_at, last_heartbeat_at)
                     SELECT a.tenant_id, a.id, $2, $3, $4, 0, $5, $6, 'up', $7, $7 FROM apps a WHERE a.id = $1
                     ON CONFLICT (app_id, instance_id) DO UPDATE SET base_url = excluded.base_url,
                         capacity = excluded.capacity, running = 0, handlers = excluded.handlers,
                         labels = excluded.labels, state = 'up', registered_at = excluded.registered_at,
                         last_heartbeat_at = excluded.last_heartbeat_at
                     RETURNING *",
                )
                .bind(reg.app_id)
                .bind(&reg.instance_id)
                .bind(&reg.base_url)
                .bind(reg.capacity)
                .bind(Json(&reg.handlers))
                .bind(Json(&reg.labels))
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?;
                found(row, || format!("app {}", reg.app_id))
            }

            async fn heartbeat_executor(
                &mut self,
                app: AppId,
                instance_id: &str,
                beat: ExecutorHeartbeat,
                now: i64,
            ) -> Result<Option<Executor>> {
                Ok(sqlx::query_as(
                    "UPDATE executors SET capacity = $3, running = $4, last_heartbeat_at = $5
                     WHERE app_id = $1 AND instance_id = $2 AND state IN ('up', 'draining') RETURNING *",
                )
                .bind(app)
                .bind(instance_id)
                .bind(beat.capacity)
                .bind(beat.running)
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn set_executor_state(
                &mut self,
                app: AppId,
                instance_id: &str,
                state: ExecutorState,
                now: i64,
            ) -> Result<Option<Executor>> {
                Ok(sqlx::query_as(
                    "UPDATE executors SET state = $3, last_heartbeat_at = $4
                     WHERE app_id = $1 AND instance_id = $2 RETURNING *",
                )
                .bind(app)
                .bind(instance_id)
                .bind(state.as_str())
                .bind(now)
                .fetch_optional(&mut *self.tx)
                .await?)
            }

            async fn find_executor(&mut self, app: AppId, instance_id: &str) -> Result<Option<Executor>> {
                Ok(sqlx::query_as("SELECT * FROM executors WHERE app_id = $1 AND instance_id = $2")
                    .bind(app)
                    .bind(instance_id)
                    .fetch_optional(&mut *self.tx)
                    .await?)
            }

            async fn list_live_executors(&mut self, app: AppId, heartbeat_since: i64) -> Result<Vec<Executor>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM executors WHERE app_id = $1 AND state = 'up' AND last_heartbeat_at >= $2
                     ORDER BY id",
                )
                .bind(app)
                .bind(heartbeat_since)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn list_executors(&mut self, tenant: TenantId, app: Option<AppId>) -> Result<Vec<Executor>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM executors WHERE tenant_id = $1 AND ($2 IS NULL OR app_id = $2) ORDER BY id",
                )
                .bind(tenant)
                .bind(app)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn mark_executors_lost(&mut self, heartbeat_before: i64, limit: i64) -> Result<Vec<Executor>> {
                Ok(sqlx::query_as(concat!(
                    "UPDATE executors SET state = 'lost' WHERE id IN (
                         SELECT id FROM executors WHERE state IN ('up', 'draining') AND last_heartbeat_at < $1
                         ORDER BY id LIMIT $2", $skip_locked, ")
                     RETURNING *"
                ))
                .bind(heartbeat_before)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn silent_executors(&mut self, heartbeat_before: i64, limit: i64) -> Result<Vec<Executor>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM executors WHERE state IN ('up', 'draining') AND last_heartbeat_at < $1
                     ORDER BY last_heartbeat_at, id LIMIT $2",
                )
                .bind(heartbeat_before)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }
        });
    };
}
pub(crate) use app_ops;

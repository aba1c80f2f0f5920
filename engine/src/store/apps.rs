//! Apps and executor instances: a tenant's apps (name and signing secret), the wrapper
//! instances that register for them, their heartbeats, draining and loss.
//!
//! Written per dialect, in `pg/apps.rs` and `sqlite/apps.rs`: `get_apps_by_ids`,
//! `mark_silent_executors_lost` and `record_executor_probes` (they take lists of ids).

use async_trait::async_trait;
use sqlx::types::Json;

use super::tx::{Conn, Dialect, Locking, StoreTx, found, is_fk, on_conn, unique_or};
use super::{Result, StoreError, pg, sqlite};
use crate::app::{
    App, AppId, Executor, ExecutorHeartbeat, ExecutorId, ExecutorRegistration, ExecutorState,
    NewApp,
};
use crate::tenant::TenantId;

/// A tenant's apps and the executor instances (wrappers) that register for them.
#[async_trait]
pub trait Apps: Send {
    async fn create_app(&mut self, tenant: TenantId, new: &NewApp, now: i64) -> Result<App>;
    async fn get_app(&mut self, tenant: TenantId, id: AppId) -> Result<App>;
    async fn find_app_by_name(&mut self, tenant: TenantId, name: &str) -> Result<Option<App>>;
    async fn list_apps(&mut self, tenant: TenantId) -> Result<Vec<App>>;
    async fn set_app_secret(
        &mut self,
        tenant: TenantId,
        id: AppId,
        secret: &str,
        now: i64,
    ) -> Result<App>;
    /// Deletes an app; refused while a task uses it.
    async fn delete_app(&mut self, tenant: TenantId, id: AppId) -> Result<()>;
    /// Engine internal: the app a wrapper request names (its key `<tenant>.<app>`), for its secret.
    /// A disabled tenant's apps are found too: the engine claims none of their runs, but
    /// results of runs already sent are recorded, not refused and lost.
    async fn find_app_by_key(&mut self, tenant_name: &str, app_name: &str) -> Result<Option<App>>;
    /// Engine internal: apps by id.
    async fn get_apps_by_ids(&mut self, ids: &[AppId]) -> Result<Vec<App>>;
    /// Registers (or re-registers) an executor instance as `up`.
    async fn register_executor(&mut self, reg: &ExecutorRegistration, now: i64)
    -> Result<Executor>;
    /// Records a heartbeat; `None` when the instance is unknown, lost or down (it must register).
    /// A draining instance with an undrain asked for ([`Apps::request_executor_undrain`]) is
    /// `up` again from this heartbeat on; the caller, in the same transaction, drains it again
    /// when the heartbeat says the instance is shutting down itself.
    async fn heartbeat_executor(
        &mut self,
        app: AppId,
        instance_id: &str,
        beat: ExecutorHeartbeat,
        now: i64,
    ) -> Result<Option<Executor>>;
    /// Marks an instance draining or down (deregistration); an undrain asked for is dropped.
    async fn set_executor_state(
        &mut self,
        app: AppId,
        instance_id: &str,
        state: ExecutorState,
        now: i64,
    ) -> Result<Option<Executor>>;
    /// Asks for a draining instance of `tenant` to come back `up`: its next heartbeat brings it
    /// back unless the instance says it is shutting down itself
    /// ([`Apps::heartbeat_executor`]). `None` when the tenant has no draining instance `id`.
    async fn request_executor_undrain(
        &mut self,
        tenant: TenantId,
        id: ExecutorId,
    ) -> Result<Option<Executor>>;
    /// An app's instance by the id it registered with (in any state); `None` when it never
    /// registered.
    async fn find_executor(&mut self, app: AppId, instance_id: &str) -> Result<Option<Executor>>;
    /// Instances of an app that are up and heartbeated at or after `heartbeat_since`.
    async fn list_live_executors(
        &mut self,
        app: AppId,
        heartbeat_since: i64,
    ) -> Result<Vec<Executor>>;
    /// A tenant's instances (every state), optionally of one app.
    async fn list_executors(
        &mut self,
        tenant: TenantId,
        app: Option<AppId>,
    ) -> Result<Vec<Executor>>;
    /// Marks up to `limit` instances whose last heartbeat is before `heartbeat_before` as lost
    /// and returns them; concurrent callers get disjoint sets.
    async fn mark_executors_lost(
        &mut self,
        heartbeat_before: i64,
        limit: i64,
    ) -> Result<Vec<Executor>>;
    /// Up to `limit` instances (up or draining) whose last heartbeat is before
    /// `heartbeat_before`, oldest first, without locking them: candidates to probe before any
    /// is declared lost.
    async fn silent_executors(
        &mut self,
        heartbeat_before: i64,
        limit: i64,
    ) -> Result<Vec<Executor>>;
    /// Marks those of `ids` that are still up or draining and still silent (last heartbeat
    /// before `heartbeat_before`) as lost and returns them: a heartbeat that arrived meanwhile
    /// saves an instance, and concurrent callers get disjoint sets.
    async fn mark_silent_executors_lost(
        &mut self,
        ids: &[ExecutorId],
        heartbeat_before: i64,
    ) -> Result<Vec<Executor>>;
    /// Counts an answered probe of instances that are up or draining as a heartbeat at `now`.
    async fn record_executor_probes(&mut self, ids: &[ExecutorId], now: i64) -> Result<u64>;
}

#[async_trait]
impl Apps for StoreTx {
    async fn create_app(&mut self, tenant: TenantId, new: &NewApp, now: i64) -> Result<App> {
        new.validate()?;
        on_conn!(self, |c| sqlx::query_as(
            "INSERT INTO apps (tenant_id, name, secret, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $4) RETURNING *",
        )
        .bind(tenant)
        .bind(&new.name)
        .bind(&new.secret)
        .bind(now)
        .fetch_one(&mut **c)
        .await)
        .map_err(|e| match e {
            e @ sqlx::Error::Database(_) if is_fk(&e) => {
                StoreError::NotFound(format!("tenant {tenant}"))
            }
            e => unique_or(e, || format!("an app named {:?} already exists", new.name)),
        })
    }

    async fn get_app(&mut self, tenant: TenantId, id: AppId) -> Result<App> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM apps WHERE tenant_id = $1 AND id = $2"
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut **c)
        .await)?;
        found(row, || format!("app {id}"))
    }

    async fn find_app_by_name(&mut self, tenant: TenantId, name: &str) -> Result<Option<App>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM apps WHERE tenant_id = $1 AND name = $2"
        )
        .bind(tenant)
        .bind(name)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn list_apps(&mut self, tenant: TenantId) -> Result<Vec<App>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM apps WHERE tenant_id = $1 ORDER BY id"
        )
        .bind(tenant)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn set_app_secret(
        &mut self,
        tenant: TenantId,
        id: AppId,
        secret: &str,
        now: i64,
    ) -> Result<App> {
        crate::app::check_secret(secret)?;
        let row = on_conn!(self, |c| {
            sqlx::query_as(
            "UPDATE apps SET secret = $3, updated_at = $4 WHERE tenant_id = $1 AND id = $2 RETURNING *",
        )
        .bind(tenant)
        .bind(id)
        .bind(secret)
        .bind(now)
        .fetch_optional(&mut **c)
        .await
        })?;
        found(row, || format!("app {id}"))
    }

    async fn delete_app(&mut self, tenant: TenantId, id: AppId) -> Result<()> {
        let (in_use,): (i64,) = on_conn!(self, |c| {
            sqlx::query_as(
            "SELECT COUNT(*) FROM tasks WHERE tenant_id = $1 AND app_id = $2 AND deleted_at IS NULL",
        )
        .bind(tenant)
        .bind(id)
        .fetch_one(&mut **c)
        .await
        })?;
        if in_use > 0 {
            return Err(StoreError::InvalidState(format!(
                "app {id} is used by {in_use} task(s); delete them or move them to another app first"
            )));
        }
        // Runs have no foreign key to their task (PostgreSQL): the runs of the app's deleted
        // tasks go first.
        on_conn!(self, |c| {
            sqlx::query(
            "DELETE FROM runs WHERE task_id IN (SELECT id FROM tasks WHERE tenant_id = $1 AND app_id = $2)"
        )
        .bind(tenant)
        .bind(id)
        .execute(&mut **c)
        .await
        .map(|_| ())
        })?;
        let done = on_conn!(self, |c| sqlx::query(
            "DELETE FROM apps WHERE tenant_id = $1 AND id = $2"
        )
        .bind(tenant)
        .bind(id)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        if done == 0 {
            return Err(StoreError::NotFound(format!("app {id}")));
        }
        Ok(())
    }

    async fn find_app_by_key(&mut self, tenant_name: &str, app_name: &str) -> Result<Option<App>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT a.* FROM apps a JOIN tenants t ON t.id = a.tenant_id
             WHERE t.name = $1 AND a.name = $2",
        )
        .bind(tenant_name)
        .bind(app_name)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn get_apps_by_ids(&mut self, ids: &[AppId]) -> Result<Vec<App>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::apps::get_apps_by_ids(c, ids).await,
            Conn::Sqlite(c) => sqlite::apps::get_apps_by_ids(c, ids).await,
        }
    }

    async fn register_executor(
        &mut self,
        reg: &ExecutorRegistration,
        now: i64,
    ) -> Result<Executor> {
        reg.validate()?;
        let row = on_conn!(self, |c| {
            sqlx::query_as(
            "INSERT INTO executors (tenant_id, app_id, instance_id, base_url, capacity, running,
                 handlers, labels, state, registered_at, last_heartbeat_at)
             SELECT a.tenant_id, a.id, $2, $3, $4, 0, $5, $6, 'up', $7, $7 FROM apps a WHERE a.id = $1
             ON CONFLICT (app_id, instance_id) DO UPDATE SET base_url = excluded.base_url,
                 capacity = excluded.capacity, running = 0, handlers = excluded.handlers,
                 labels = excluded.labels, state = 'up', undrain_requested = FALSE,
                 registered_at = excluded.registered_at,
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
        .fetch_optional(&mut **c)
        .await
        })?;
        found(row, || format!("app {}", reg.app_id))
    }

    async fn heartbeat_executor(
        &mut self,
        app: AppId,
        instance_id: &str,
        beat: ExecutorHeartbeat,
        now: i64,
    ) -> Result<Option<Executor>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "UPDATE executors SET capacity = $3, running = $4, last_heartbeat_at = $5,
                 state = CASE WHEN undrain_requested THEN 'up' ELSE state END,
                 undrain_requested = FALSE
             WHERE app_id = $1 AND instance_id = $2 AND state IN ('up', 'draining') RETURNING *",
        )
        .bind(app)
        .bind(instance_id)
        .bind(beat.capacity)
        .bind(beat.running)
        .bind(now)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn set_executor_state(
        &mut self,
        app: AppId,
        instance_id: &str,
        state: ExecutorState,
        now: i64,
    ) -> Result<Option<Executor>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "UPDATE executors SET state = $3, last_heartbeat_at = $4, undrain_requested = FALSE
             WHERE app_id = $1 AND instance_id = $2 RETURNING *",
        )
        .bind(app)
        .bind(instance_id)
        .bind(state.as_str())
        .bind(now)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn request_executor_undrain(
        &mut self,
        tenant: TenantId,
        id: ExecutorId,
    ) -> Result<Option<Executor>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "UPDATE executors SET undrain_requested = TRUE
             WHERE tenant_id = $1 AND id = $2 AND state = 'draining' RETURNING *",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn find_executor(&mut self, app: AppId, instance_id: &str) -> Result<Option<Executor>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM executors WHERE app_id = $1 AND instance_id = $2"
        )
        .bind(app)
        .bind(instance_id)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn list_live_executors(
        &mut self,
        app: AppId,
        heartbeat_since: i64,
    ) -> Result<Vec<Executor>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM executors WHERE app_id = $1 AND state = 'up' AND last_heartbeat_at >= $2
             ORDER BY id",
        )
        .bind(app)
        .bind(heartbeat_since)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn list_executors(
        &mut self,
        tenant: TenantId,
        app: Option<AppId>,
    ) -> Result<Vec<Executor>> {
        Ok(on_conn!(self, |c| {
            sqlx::query_as(
            "SELECT * FROM executors WHERE tenant_id = $1 AND ($2 IS NULL OR app_id = $2) ORDER BY id",
        )
        .bind(tenant)
        .bind(app)
        .fetch_all(&mut **c)
        .await
        })?)
    }

    async fn mark_executors_lost(
        &mut self,
        heartbeat_before: i64,
        limit: i64,
    ) -> Result<Vec<Executor>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            c.sql(&MARK_EXECUTORS_LOST)
        )
        .bind(heartbeat_before)
        .bind(limit)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn silent_executors(
        &mut self,
        heartbeat_before: i64,
        limit: i64,
    ) -> Result<Vec<Executor>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM executors WHERE state IN ('up', 'draining') AND last_heartbeat_at < $1
             ORDER BY last_heartbeat_at, id LIMIT $2",
        )
        .bind(heartbeat_before)
        .bind(limit)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn mark_silent_executors_lost(
        &mut self,
        ids: &[ExecutorId],
        heartbeat_before: i64,
    ) -> Result<Vec<Executor>> {
        match &mut self.conn {
            Conn::Postgres(c) => {
                pg::apps::mark_silent_executors_lost(c, ids, heartbeat_before).await
            }
            Conn::Sqlite(c) => {
                sqlite::apps::mark_silent_executors_lost(c, ids, heartbeat_before).await
            }
        }
    }

    async fn record_executor_probes(&mut self, ids: &[ExecutorId], now: i64) -> Result<u64> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::apps::record_executor_probes(c, ids, now).await,
            Conn::Sqlite(c) => sqlite::apps::record_executor_probes(c, ids, now).await,
        }
    }
}

/// The statement of `mark_executors_lost` that locks rows (on PostgreSQL; SQLite has one writer).
const MARK_EXECUTORS_LOST: Locking = Locking {
    postgres: "UPDATE executors SET state = 'lost' WHERE id IN (
                 SELECT id FROM executors WHERE state IN ('up', 'draining') AND last_heartbeat_at < $1
                 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
             RETURNING *",
    sqlite: "UPDATE executors SET state = 'lost' WHERE id IN (
                 SELECT id FROM executors WHERE state IN ('up', 'draining') AND last_heartbeat_at < $1
                 ORDER BY id LIMIT $2)
             RETURNING *",
};

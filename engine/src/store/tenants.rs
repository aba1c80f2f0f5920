//! Tenants (operator operations): create, read, list, change, delete, their claim weight, their
//! quotas and what they use against them, and the lock that
//! serialises changes needing a tenant's whole state (dependency edits).
//!
//! Every operation here is written once for both backends; neither has its own.

use async_trait::async_trait;
use sqlx::types::Json;

use super::tx::{Dialect, Locking, StoreTx, check_or, found, on_conn, unique_or};
use super::{Result, StoreError};
use crate::quota::{TenantQuotas, TenantUsage};
use crate::tenant::{NewTenant, Tenant, TenantId, TenantUpdate};

/// Tenants, for operators: one row per customer of the cluster.
#[async_trait]
pub trait Tenants: Send {
    async fn create_tenant(&mut self, new: &NewTenant, now: i64) -> Result<Tenant>;
    async fn get_tenant(&mut self, id: TenantId) -> Result<Tenant>;
    async fn find_tenant_by_name(&mut self, name: &str) -> Result<Option<Tenant>>;
    async fn list_tenants(&mut self) -> Result<Vec<Tenant>>;
    /// Changes a tenant; a new node group also moves its not-yet-claimed runs to that group.
    async fn update_tenant(
        &mut self,
        id: TenantId,
        update: &TenantUpdate,
        now: i64,
    ) -> Result<Tenant>;
    /// Deletes a tenant and everything it owns.
    async fn delete_tenant(&mut self, id: TenantId) -> Result<()>;
    /// Serialises changes that must see a tenant's whole state (dependency edits).
    async fn lock_tenant(&mut self, id: TenantId) -> Result<()>;
    /// A tenant's claim weight (see [`crate::tenant::Weight`]).
    async fn get_tenant_weight(&mut self, tenant: TenantId) -> Result<i32>;
    /// Sets a tenant's claim weight (at least 1): its share of each claim relative to the other
    /// tenants with due runs in its group.
    async fn set_tenant_weight(&mut self, tenant: TenantId, weight: i32) -> Result<()>;
    /// A tenant's quotas (`None`: unlimited).
    async fn get_tenant_quotas(&mut self, id: TenantId) -> Result<TenantQuotas>;
    /// Replaces a tenant's quotas (validated) and returns them.
    async fn set_tenant_quotas(
        &mut self,
        id: TenantId,
        quotas: &TenantQuotas,
        now: i64,
    ) -> Result<TenantQuotas>;
    /// What a tenant uses at `now`: its tasks, its runs due and not yet claimed, its runs
    /// claimed or running.
    async fn tenant_usage(&mut self, id: TenantId, now: i64) -> Result<TenantUsage>;
    /// A tenant's bucket of fires as stored: the tokens it held and when (both `None`: full).
    async fn fire_bucket(&mut self, id: TenantId) -> Result<(Option<f64>, Option<i64>)>;
    /// A tenant's pending runs due by `now`, counted up to `limit` (of its apps, in its node
    /// group: probes of `runs_claimable`, however long its history).
    async fn waiting_runs_up_to(&mut self, id: TenantId, now: i64, limit: i64) -> Result<i64>;
    /// Runs due and not yet claimed at `now`, per tenant name (every tenant, zeros included),
    /// each counted up to `limit`, for the `mthpt_tenant_waiting_runs` gauge.
    async fn waiting_runs_by_tenant(&mut self, now: i64, limit: i64) -> Result<Vec<(String, i64)>>;
}

#[async_trait]
impl Tenants for StoreTx {
    async fn create_tenant(&mut self, new: &NewTenant, now: i64) -> Result<Tenant> {
        new.validate()?;
        let hosts = crate::hosts::normalize_hosts("executor_hosts", &new.executor_hosts)?;
        on_conn!(self, |c| sqlx::query_as(
            "INSERT INTO tenants (name, display_name, node_group, disabled, created_at, updated_at,
                 executor_hosts)
             VALUES ($1, $2, $3, FALSE, $4, $4, $5) RETURNING *",
        )
        .bind(&new.name)
        .bind(&new.display_name)
        .bind(&new.node_group)
        .bind(now)
        .bind(Json(hosts))
        .fetch_one(&mut **c)
        .await)
        .map_err(|e| {
            unique_or(e, || {
                format!("a tenant named {:?} already exists", new.name)
            })
        })
    }

    async fn get_tenant(&mut self, id: TenantId) -> Result<Tenant> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM tenants WHERE id = $1"
        )
        .bind(id)
        .fetch_optional(&mut **c)
        .await)?;
        found(row, || format!("tenant {id}"))
    }

    async fn find_tenant_by_name(&mut self, name: &str) -> Result<Option<Tenant>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM tenants WHERE name = $1"
        )
        .bind(name)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn list_tenants(&mut self) -> Result<Vec<Tenant>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM tenants ORDER BY id"
        )
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn update_tenant(
        &mut self,
        id: TenantId,
        update: &TenantUpdate,
        now: i64,
    ) -> Result<Tenant> {
        update.validate()?;
        let hosts = match &update.executor_hosts {
            Some(h) => Some(Json(crate::hosts::normalize_hosts("executor_hosts", h)?)),
            None => None,
        };
        let row: Option<Tenant> = on_conn!(self, |c| sqlx::query_as(
            "UPDATE tenants SET display_name = COALESCE($2, display_name),
                 node_group = COALESCE($3, node_group), disabled = COALESCE($4, disabled),
                 updated_at = $5, executor_hosts = COALESCE($6, executor_hosts),
                 retention_ms = COALESCE($7, retention_ms)
             WHERE id = $1 RETURNING *",
        )
        .bind(id)
        .bind(update.display_name.as_deref())
        .bind(update.node_group.as_deref())
        .bind(update.disabled)
        .bind(now)
        .bind(hosts)
        .bind(update.retention_ms)
        .fetch_optional(&mut **c)
        .await)?;
        let tenant = found(row, || format!("tenant {id}"))?;
        if update.node_group.is_some() {
            on_conn!(self, |c| sqlx::query(
                "UPDATE runs SET node_group = $2 WHERE tenant_id = $1 AND state = 'pending'"
            )
            .bind(id)
            .bind(&tenant.node_group)
            .execute(&mut **c)
            .await
            .map(|done| done.rows_affected()))?;
        }
        Ok(tenant)
    }

    async fn delete_tenant(&mut self, id: TenantId) -> Result<()> {
        // Runs have no foreign key to their tenant (PostgreSQL): they go first.
        on_conn!(self, |c| sqlx::query(
            "DELETE FROM runs WHERE tenant_id = $1"
        )
        .bind(id)
        .execute(&mut **c)
        .await
        .map(|_| ()))?;
        let done = on_conn!(self, |c| sqlx::query("DELETE FROM tenants WHERE id = $1")
            .bind(id)
            .execute(&mut **c)
            .await
            .map(|done| done.rows_affected()))?;
        if done == 0 {
            return Err(StoreError::NotFound(format!("tenant {id}")));
        }
        Ok(())
    }

    async fn lock_tenant(&mut self, id: TenantId) -> Result<()> {
        let row: Option<(TenantId,)> = on_conn!(self, |c| sqlx::query_as(c.sql(&LOCK_TENANT))
            .bind(id)
            .fetch_optional(&mut **c)
            .await)?;
        found(row, || format!("tenant {id}")).map(|_| ())
    }

    async fn get_tenant_weight(&mut self, tenant: TenantId) -> Result<i32> {
        let row: Option<(i32,)> = on_conn!(self, |c| sqlx::query_as(
            "SELECT weight FROM tenants WHERE id = $1"
        )
        .bind(tenant)
        .fetch_optional(&mut **c)
        .await)?;
        found(row, || format!("tenant {tenant}")).map(|(weight,)| weight)
    }

    async fn set_tenant_weight(&mut self, tenant: TenantId, weight: i32) -> Result<()> {
        let done = on_conn!(self, |c| sqlx::query(
            "UPDATE tenants SET weight = $2 WHERE id = $1"
        )
        .bind(tenant)
        .bind(weight)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))
        .map_err(|e| check_or(e, || format!("weight {weight} (at least 1)")))?;
        found((done == 1).then_some(()), || format!("tenant {tenant}"))
    }

    async fn get_tenant_quotas(&mut self, id: TenantId) -> Result<TenantQuotas> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "SELECT max_concurrent_runs, max_fires_per_second, fire_burst, max_tasks,
                 max_waiting_runs
             FROM tenants WHERE id = $1"
        )
        .bind(id)
        .fetch_optional(&mut **c)
        .await)?;
        found(row, || format!("tenant {id}"))
    }

    async fn set_tenant_quotas(
        &mut self,
        id: TenantId,
        quotas: &TenantQuotas,
        now: i64,
    ) -> Result<TenantQuotas> {
        quotas.validate()?;
        let row = on_conn!(self, |c| sqlx::query_as(
            "UPDATE tenants SET max_concurrent_runs = $2, max_fires_per_second = $3,
                 fire_burst = $4, max_tasks = $5, max_waiting_runs = $6, updated_at = $7,
                 fire_tokens = NULL, fire_tokens_at = NULL
             WHERE id = $1
             RETURNING max_concurrent_runs, max_fires_per_second, fire_burst, max_tasks,
                 max_waiting_runs"
        )
        .bind(id)
        .bind(quotas.max_concurrent_runs)
        .bind(quotas.max_fires_per_second)
        .bind(quotas.fire_burst)
        .bind(quotas.max_tasks)
        .bind(quotas.max_waiting_runs)
        .bind(now)
        .fetch_optional(&mut **c)
        .await)?;
        found(row, || format!("tenant {id}"))
    }

    async fn tenant_usage(&mut self, id: TenantId, now: i64) -> Result<TenantUsage> {
        let (tasks, waiting_runs, running_runs): (i64, i64, i64) =
            on_conn!(self, |c| sqlx::query_as(
                "SELECT
                 (SELECT COUNT(*) FROM tasks WHERE tenant_id = $1 AND deleted_at IS NULL),
                 (SELECT COUNT(*) FROM runs
                  WHERE tenant_id = $1 AND state = 'pending' AND due_at <= $2),
                 (SELECT COUNT(*) FROM runs
                  WHERE tenant_id = $1 AND state IN ('claimed', 'running'))"
            )
            .bind(id)
            .bind(now)
            .fetch_one(&mut **c)
            .await)?;
        Ok(TenantUsage {
            tasks,
            waiting_runs,
            running_runs,
        })
    }

    async fn fire_bucket(&mut self, id: TenantId) -> Result<(Option<f64>, Option<i64>)> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "SELECT fire_tokens, fire_tokens_at FROM tenants WHERE id = $1"
        )
        .bind(id)
        .fetch_optional(&mut **c)
        .await)?;
        found(row, || format!("tenant {id}"))
    }

    async fn waiting_runs_up_to(&mut self, id: TenantId, now: i64, limit: i64) -> Result<i64> {
        let (n,): (i64,) = on_conn!(self, |c| sqlx::query_as(
            "SELECT count(*) FROM (
                 SELECT 1 FROM runs r
                 WHERE r.app_id IN (SELECT a.id FROM apps a WHERE a.tenant_id = $1)
                   AND r.node_group = (SELECT t.node_group FROM tenants t WHERE t.id = $1)
                   AND r.started_at IS NULL AND r.finished_at IS NULL
                   AND r.state = 'pending' AND r.due_at <= $2
                 LIMIT $3) x"
        )
        .bind(id)
        .bind(now)
        .bind(limit.max(0))
        .fetch_one(&mut **c)
        .await)?;
        Ok(n)
    }

    async fn waiting_runs_by_tenant(&mut self, now: i64, limit: i64) -> Result<Vec<(String, i64)>> {
        Ok(on_conn!(self, |c| {
            sqlx::query_as(
            // Through the claim index (group, app, due time), as `waiting_runs_up_to`: the
            // tenant's finished runs are never read, and a backlog is read up to the limit.
            "SELECT t.name, (SELECT COUNT(*) FROM (
                                 SELECT 1 FROM runs r
                                 WHERE r.node_group = t.node_group
                                   AND r.app_id IN (SELECT a.id FROM apps a WHERE a.tenant_id = t.id)
                                   AND r.started_at IS NULL AND r.finished_at IS NULL
                                   AND r.state = 'pending' AND r.due_at <= $1
                                 LIMIT $2) x)
             FROM tenants t ORDER BY t.name"
        )
        .bind(now)
        .bind(limit.max(0))
        .fetch_all(&mut **c)
        .await
        })?)
    }
}

/// The statement of `lock_tenant` that locks rows (on PostgreSQL; SQLite has one writer).
const LOCK_TENANT: Locking = Locking {
    postgres: "SELECT id FROM tenants WHERE id = $1 FOR UPDATE",
    sqlite: "SELECT id FROM tenants WHERE id = $1",
};

//! Tenants (operator operations): create, read, list, change, delete, and the lock that
//! serialises changes needing a tenant's whole state (dependency edits).
//!
//! Every operation here is written once for both backends; neither has its own.

use async_trait::async_trait;
use sqlx::types::Json;

use super::tx::{Dialect, Locking, StoreTx, check_or, found, on_conn, unique_or};
use super::{Result, StoreError};
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
    /// Sets a tenant's claim weight (at least 1): its share of each claim relative to the other
    /// tenants with due runs in its group.
    async fn set_tenant_weight(&mut self, tenant: TenantId, weight: i32) -> Result<()>;
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
}

/// The statement of `lock_tenant` that locks rows (on PostgreSQL; SQLite has one writer).
const LOCK_TENANT: Locking = Locking {
    postgres: "SELECT id FROM tenants WHERE id = $1 FOR UPDATE",
    sqlite: "SELECT id FROM tenants WHERE id = $1",
};

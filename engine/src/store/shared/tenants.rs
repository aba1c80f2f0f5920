//! Tenants (operator operations): create, read, list, change, delete, and the lock that
//! serialises changes needing a tenant's whole state (dependency edits).
//!
//! Every tenant operation is shared; neither backend has its own.

/// Adds the tenant operations to the `impl Tx` that [`tx_impl!`](super::tx_impl)
/// writes (see [`tx_ops!`](super::tx_ops) for how the domains join).
macro_rules! tenant_ops {
    ($tx:ty, $for_update:literal, $skip_locked:literal, $rest:tt, { $($done:tt)* }) => {
        $crate::store::shared::tx_ops!($tx, $for_update, $skip_locked, $rest, {
            $($done)*

            async fn create_tenant(&mut self, new: &NewTenant, now: i64) -> Result<Tenant> {
                new.validate()?;
                let hosts = crate::hosts::normalize_hosts("executor_hosts", &new.executor_hosts)?;
                sqlx::query_as(
                    "INSERT INTO tenants (name, display_name, node_group, disabled, created_at, updated_at,
                         executor_hosts)
                     VALUES ($1, $2, $3, FALSE, $4, $4, $5) RETURNING *",
                )
                .bind(&new.name)
                .bind(&new.display_name)
                .bind(&new.node_group)
                .bind(now)
                .bind(Json(hosts))
                .fetch_one(&mut *self.tx)
                .await
                .map_err(|e| unique_or(e, || format!("a tenant named {:?} already exists", new.name)))
            }

            async fn get_tenant(&mut self, id: TenantId) -> Result<Tenant> {
                let row = sqlx::query_as("SELECT * FROM tenants WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *self.tx)
                    .await?;
                found(row, || format!("tenant {id}"))
            }

            async fn find_tenant_by_name(&mut self, name: &str) -> Result<Option<Tenant>> {
                Ok(sqlx::query_as("SELECT * FROM tenants WHERE name = $1")
                    .bind(name)
                    .fetch_optional(&mut *self.tx)
                    .await?)
            }

            async fn list_tenants(&mut self) -> Result<Vec<Tenant>> {
                Ok(sqlx::query_as("SELECT * FROM tenants ORDER BY id")
                    .fetch_all(&mut *self.tx)
                    .await?)
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
                let row: Option<Tenant> = sqlx::query_as(
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
                .fetch_optional(&mut *self.tx)
                .await?;
                let tenant = found(row, || format!("tenant {id}"))?;
                if update.node_group.is_some() {
                    sqlx::query("UPDATE runs SET node_group = $2 WHERE tenant_id = $1 AND state = 'pending'")
                        .bind(id)
                        .bind(&tenant.node_group)
                        .execute(&mut *self.tx)
                        .await?;
                }
                Ok(tenant)
            }

            async fn delete_tenant(&mut self, id: TenantId) -> Result<()> {
                let done = sqlx::query("DELETE FROM tenants WHERE id = $1")
                    .bind(id)
                    .execute(&mut *self.tx)
                    .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("tenant {id}")));
                }
                Ok(())
            }

            async fn lock_tenant(&mut self, id: TenantId) -> Result<()> {
                let row: Option<(TenantId,)> =
                    sqlx::query_as(concat!("SELECT id FROM tenants WHERE id = $1", $for_update))
                        .bind(id)
                        .fetch_optional(&mut *self.tx)
                        .await?;
                found(row, || format!("tenant {id}")).map(|_| ())
            }
        });
    };
}
pub(crate) use tenant_ops;

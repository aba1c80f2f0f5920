//! Tenants and their node group (operators), and a tenant's view of itself.

use mthpt_engine::tenant::{NewTenant, Tenant, TenantUpdate};
use serde_json::json;

use super::{Change, Services, audit};
use crate::service::access::{Action, Caller, Target, authorize, tenant_access};
use crate::service::error::ApiResult;

/// Every tenant for an operator; a tenant user sees only its own.
pub async fn list(services: &Services, caller: &Caller) -> ApiResult<Vec<Tenant>> {
    if let Some(own) = &caller.tenant {
        authorize(caller, Action::Read, Target::Tenant(own.id))?;
        return Ok(vec![own.clone()]);
    }
    authorize(caller, Action::Read, Target::Platform)?;
    let mut tx = services.read().await?;
    Ok(tx.list_tenants().await?)
}

pub async fn get(services: &Services, caller: &Caller, name: &str) -> ApiResult<Tenant> {
    tenant_access(services, caller, name, Action::Read).await
}

pub async fn create(services: &Services, caller: &Caller, new: &NewTenant) -> ApiResult<Tenant> {
    authorize(caller, Action::Platform, Target::Platform)?;
    new.validate()?;
    let now = services.now();
    let mut tx = services.write().await?;
    let tenant = tx.create_tenant(new, now).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "tenant.create",
            target_kind: "tenant",
            target_id: tenant.id.to_string(),
            details: json!({
                "name": tenant.name,
                "node_group": tenant.node_group,
                "executor_hosts": tenant.executor_hosts.0,
            }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(tenant)
}

pub async fn update(
    services: &Services,
    caller: &Caller,
    name: &str,
    update: &TenantUpdate,
) -> ApiResult<Tenant> {
    let tenant = tenant_access(services, caller, name, Action::Read).await?;
    authorize(caller, Action::Platform, Target::Platform)?;
    update.validate()?;
    let now = services.now();
    let mut tx = services.write().await?;
    let tenant = tx.update_tenant(tenant.id, update, now).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "tenant.update",
            target_kind: "tenant",
            target_id: tenant.id.to_string(),
            details: json!({
                "display_name": update.display_name,
                "node_group": update.node_group,
                "disabled": update.disabled,
                "executor_hosts": update.executor_hosts.as_ref().map(|_| &tenant.executor_hosts.0),
                "retention_ms": update.retention_ms,
            }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(tenant)
}

/// Deletes a tenant and everything it owns; the audit event is kept at cluster level.
pub async fn delete(services: &Services, caller: &Caller, name: &str) -> ApiResult<()> {
    let tenant = tenant_access(services, caller, name, Action::Read).await?;
    authorize(caller, Action::Platform, Target::Platform)?;
    let now = services.now();
    let mut tx = services.write().await?;
    tx.delete_tenant(tenant.id).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: None,
            action: "tenant.delete",
            target_kind: "tenant",
            target_id: tenant.id.to_string(),
            details: json!({ "name": tenant.name }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

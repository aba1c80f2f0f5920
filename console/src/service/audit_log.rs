//! A tenant's audit log: who changed what, when.

use mthpt_engine::audit::AuditEvent;
use mthpt_engine::store::Scope;

use super::Services;
use super::runs::{Page, page, parse_cursor};
use crate::service::access::{Action, Caller, tenant_access};
use crate::service::error::ApiResult;

/// A page of a tenant's audit events, newest first.
pub async fn list(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    cursor: Option<&str>,
    limit: i64,
) -> ApiResult<Page<AuditEvent>> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let before = cursor.map(parse_cursor).transpose()?;
    let mut tx = services.read().await?;
    let events = tx
        .list_audit(Scope::Tenant(tenant.id), before, limit)
        .await?;
    Ok(page(events, limit, |e| e.id))
}

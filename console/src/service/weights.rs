//! Tenant claim weights: operators set them; everyone in the tenant reads their own. A tenant's
//! weight is its share of each claim of its node group relative to the other tenants with due
//! runs there (docs/engine.md, "Claim order and capacity"); every tenant starts at 1.

use mthpt_engine::tenant::{Tenant, Weight};
use serde_json::json;

use super::access::{Action, Caller, Target, authorize, tenant_access};
use super::error::ApiResult;
use super::{Change, Services, audit};

/// A tenant and its claim weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightReport {
    pub tenant: Tenant,
    pub weight: i32,
}

/// A tenant's weight (anyone who may read the tenant).
pub async fn get(services: &Services, caller: &Caller, tenant: &str) -> ApiResult<WeightReport> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    let weight = tx.get_tenant_weight(tenant.id).await?;
    Ok(WeightReport { tenant, weight })
}

/// The weight of every tenant (operators), for the tenants page.
pub async fn list(services: &Services, caller: &Caller) -> ApiResult<Vec<WeightReport>> {
    authorize(caller, Action::Platform, Target::Platform)?;
    let mut tx = services.read().await?;
    let mut out = Vec::new();
    for tenant in tx.list_tenants().await? {
        let weight = tx.get_tenant_weight(tenant.id).await?;
        out.push(WeightReport { tenant, weight });
    }
    Ok(out)
}

/// Sets a tenant's weight (operators), with an audit event. Access is checked before the
/// value: another tenant's users learn nothing (404) and the tenant's own users are refused
/// (403) whatever they send; a weight outside 1 to
/// [`MAX_WEIGHT`](mthpt_engine::tenant::MAX_WEIGHT) is refused naming the field `weight`.
pub async fn set(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    weight: i64,
) -> ApiResult<WeightReport> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    authorize(caller, Action::Platform, Target::Platform)?;
    let weight = Weight::new(weight)?;
    let now = services.now();
    let mut tx = services.write().await?;
    let before = tx.get_tenant_weight(tenant.id).await?;
    tx.set_tenant_weight(tenant.id, weight.get()).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "tenant.weight",
            target_kind: "tenant",
            target_id: tenant.id.to_string(),
            details: json!({ "before": before, "after": weight.get() }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(WeightReport {
        tenant,
        weight: weight.get(),
    })
}

//! Tenant quotas: operators set them; everyone in the tenant reads them with the usage against
//! each; task creation and manual triggers are checked against them.
//!
//! A refusal is `429 quota_exceeded` naming the quota and its value. Each refusal counts in
//! `mthpt_tenant_quota_hits_total{tenant,quota}`; the first refusal of an episode raises a
//! `quota` alarm (episodes are kept in the database, one open per tenant and quota, whichever
//! console process refused), and the engine's watchdog resolves it once the tenant is back
//! under that quota. The bucket of fires is the tenant's row's, shared with the claims.

use mthpt_engine::alarm::NewAlarm;
use mthpt_engine::quota::{self, FireBucket, QuotaExceeded, TenantQuotas, TenantUsage};
use mthpt_engine::store::Tx;
use mthpt_engine::tenant::Tenant;
use serde_json::json;

use super::access::{Action, Caller, Target, authorize, tenant_access};
use super::error::{ApiError, ApiResult};
use super::{Change, Services, audit};

/// The quotas of a tenant, with what it uses now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaReport {
    pub tenant: Tenant,
    pub quotas: TenantQuotas,
    pub usage: TenantUsage,
}

/// The quotas of a tenant and its usage (anyone who may read the tenant).
pub async fn get(services: &Services, caller: &Caller, tenant: &str) -> ApiResult<QuotaReport> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let now = services.now();
    let mut tx = services.read().await?;
    let quotas = tx.get_tenant_quotas(tenant.id).await?;
    let usage = tx.tenant_usage(tenant.id, now).await?;
    Ok(QuotaReport {
        tenant,
        quotas,
        usage,
    })
}

/// The quotas and usage of every tenant (operators), for the tenants page.
pub async fn list(services: &Services, caller: &Caller) -> ApiResult<Vec<QuotaReport>> {
    authorize(caller, Action::Platform, Target::Platform)?;
    let now = services.now();
    let mut tx = services.read().await?;
    let mut out = Vec::new();
    for tenant in tx.list_tenants().await? {
        let quotas = tx.get_tenant_quotas(tenant.id).await?;
        let usage = tx.tenant_usage(tenant.id, now).await?;
        out.push(QuotaReport {
            tenant,
            quotas,
            usage,
        });
    }
    Ok(out)
}

/// Replaces a tenant's quotas (operators), with an audit event.
pub async fn set(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    quotas: &TenantQuotas,
) -> ApiResult<QuotaReport> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    authorize(caller, Action::Platform, Target::Platform)?;
    quotas.validate()?;
    let now = services.now();
    let mut tx = services.write().await?;
    let before = tx.get_tenant_quotas(tenant.id).await?;
    let quotas = tx.set_tenant_quotas(tenant.id, quotas, now).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "tenant.quotas",
            target_kind: "tenant",
            target_id: tenant.id.to_string(),
            details: json!({ "before": before, "after": quotas }),
        },
        now,
    )
    .await?;
    let usage = tx.tenant_usage(tenant.id, now).await?;
    tx.commit().await?;
    Ok(QuotaReport {
        tenant,
        quotas,
        usage,
    })
}

/// Whether one more task fits the tenant's `max_tasks`, counted inside `tx` (so the tasks the
/// same transaction deleted or created count).
pub async fn check_new_task(tx: &mut dyn Tx, tenant: &Tenant, now: i64) -> ApiResult<()> {
    let quotas = tx.get_tenant_quotas(tenant.id).await?;
    if quotas.max_tasks.is_none() {
        return Ok(());
    }
    let usage = tx.tenant_usage(tenant.id, now).await?;
    quota::check_new_task(&quotas, usage.tasks)?;
    Ok(())
}

/// Whether one more waiting run fits the tenant's `max_waiting_runs`, inside `tx`.
pub async fn check_new_waiting_run(tx: &mut dyn Tx, tenant: &Tenant, now: i64) -> ApiResult<()> {
    let quotas = tx.get_tenant_quotas(tenant.id).await?;
    if quotas.max_waiting_runs.is_none() {
        return Ok(());
    }
    let usage = tx.tenant_usage(tenant.id, now).await?;
    quota::check_new_waiting_run(&quotas, usage.waiting_runs)?;
    Ok(())
}

/// Whether the tenant's bucket of fires (`max_fires_per_second`) has a fire left for one more
/// run: the token is taken when the run is claimed (every fire takes one there, whatever made
/// the run), so a trigger counts the tenant's runs already waiting against the bucket, and is
/// refused, with the time until a token is left (`Retry-After`), when they would empty it.
pub async fn check_fire(services: &Services, tenant: &Tenant, now: i64) -> ApiResult<()> {
    let mut tx = services.read().await?;
    let quotas = tx.get_tenant_quotas(tenant.id).await?;
    let Some(burst) = quotas.burst() else {
        return Ok(());
    };
    let (tokens, at) = tx.fire_bucket(tenant.id).await?;
    let waiting = tx.waiting_runs_up_to(tenant.id, now, burst).await?;
    FireBucket::stored(&quotas, tokens, at, now).has_one_after(&quotas, now, waiting)?;
    Ok(())
}

/// What follows a checked change of `tenant`: a refusal for a quota counts as a hit and opens
/// the quota's episode (raising its one alarm) unless one is open; the engine's watchdog
/// closes the episode (resolving the alarm) once the tenant is back under the quota. Failing
/// to record is logged, never the caller's error.
pub async fn after_check<T>(
    services: &Services,
    tenant: &Tenant,
    result: ApiResult<T>,
) -> ApiResult<T> {
    if let Err(ApiError {
        quota: Some(exceeded),
        ..
    }) = &result
    {
        refused(services, tenant, exceeded).await;
    }
    result
}

async fn refused(services: &Services, tenant: &Tenant, exceeded: &QuotaExceeded) {
    mthpt_engine::metrics::quota_hit(&tenant.name, exceeded.quota.as_str());
    let now = services.now();
    let alarm = NewAlarm::quota(tenant.id, &tenant.name, exceeded, now);
    let raised = async {
        let Some(key) = alarm.dedupe_key.as_deref() else {
            return Ok(());
        };
        let mut tx = services.write().await?;
        if tx
            .open_quota_episode(tenant.id, exceeded.quota, key, now)
            .await?
        {
            tx.insert_alarm(&alarm, now).await?;
            tx.commit().await?;
        }
        Ok::<(), ApiError>(())
    }
    .await;
    if let Err(e) = raised {
        tracing::warn!(tenant = %tenant.name, error = %e, "could not raise the quota alarm");
    }
}

//! Tenant quotas: operators set them; everyone in the tenant reads them with the usage against
//! each; task creation and manual triggers are checked against them.
//!
//! A refusal is `429 quota_exceeded` naming the quota and its value. Each refusal counts in
//! `mthpt_tenant_quota_hits_total{tenant,quota}`; the first refusal of an episode raises a
//! `quota` alarm, and the next check that finds the tenant back under that quota resolves it.
//!
//! The bucket of fires per second and the episodes are kept in this process's memory
//! ([`QuotaState`], shared by every clone of the [`Services`]): each console process limits a
//! tenant's manual triggers to the rate on its own.

use std::collections::HashMap;
use std::sync::Mutex;

use mthpt_engine::alarm::NewAlarm;
use mthpt_engine::quota::{self, FireBucket, Quota, QuotaExceeded, TenantQuotas, TenantUsage};
use mthpt_engine::store::Tx;
use mthpt_engine::tenant::{Tenant, TenantId};
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

/// What this process remembers about quotas: each tenant's bucket of fires and the open
/// episodes (tenant and quota → the dedupe key of the episode's alarm).
#[derive(Debug, Default)]
pub struct QuotaState {
    buckets: Mutex<HashMap<TenantId, FireBucket>>,
    episodes: Mutex<HashMap<(TenantId, Quota), String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
    // A changed rate starts from a full bucket.
    lock(&services.quota_state().buckets).remove(&tenant.id);
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

/// Takes one fire of the tenant's bucket (`max_fires_per_second`), or refuses with the time
/// until the next token (`Retry-After`).
pub async fn take_fire(services: &Services, tenant: &Tenant, now: i64) -> ApiResult<()> {
    let quotas = {
        let mut tx = services.read().await?;
        tx.get_tenant_quotas(tenant.id).await?
    };
    if quotas.max_fires_per_second.is_none() {
        return Ok(());
    }
    let mut buckets = lock(&services.quota_state().buckets);
    let bucket = buckets
        .entry(tenant.id)
        .or_insert_with(|| FireBucket::full(&quotas, now));
    bucket.take_one(&quotas, now)?;
    Ok(())
}

/// What follows a checked change of `tenant`: a refusal for a quota counts as a hit and opens
/// an episode (raising its alarm); success closes the episodes of `checked` (resolving their
/// alarms). Failing to record is logged, never the caller's error.
pub async fn after_check<T>(
    services: &Services,
    tenant: &Tenant,
    checked: &[Quota],
    result: ApiResult<T>,
) -> ApiResult<T> {
    match &result {
        Err(ApiError {
            quota: Some(exceeded),
            ..
        }) => refused(services, tenant, exceeded).await,
        Ok(_) => {
            for q in checked {
                back_under(services, tenant, *q).await;
            }
        }
        Err(_) => {}
    }
    result
}

async fn refused(services: &Services, tenant: &Tenant, exceeded: &QuotaExceeded) {
    mthpt_engine::metrics::quota_hit(&tenant.name, exceeded.quota.as_str());
    let now = services.now();
    let key = {
        let mut episodes = lock(&services.quota_state().episodes);
        if episodes.contains_key(&(tenant.id, exceeded.quota)) {
            return;
        }
        let key = NewAlarm::quota_key(tenant.id, exceeded.quota, now);
        episodes.insert((tenant.id, exceeded.quota), key.clone());
        key
    };
    let alarm = NewAlarm::quota(tenant.id, &tenant.name, exceeded, now);
    debug_assert_eq!(alarm.dedupe_key.as_deref(), Some(key.as_str()));
    let raised = async {
        let mut tx = services.write().await?;
        tx.insert_alarm(&alarm, now).await?;
        tx.commit().await?;
        Ok::<(), ApiError>(())
    }
    .await;
    if let Err(e) = raised {
        tracing::warn!(tenant = %tenant.name, error = %e, "could not raise the quota alarm");
    }
}

async fn back_under(services: &Services, tenant: &Tenant, quota: Quota) {
    let Some(key) = lock(&services.quota_state().episodes).remove(&(tenant.id, quota)) else {
        return;
    };
    let now = services.now();
    let resolved = async {
        let mut tx = services.write().await?;
        tx.resolve_alarm_by_key(tenant.id, &key, now).await?;
        tx.commit().await?;
        Ok::<(), ApiError>(())
    }
    .await;
    if let Err(e) = resolved {
        tracing::warn!(tenant = %tenant.name, error = %e, "could not resolve the quota alarm");
    }
}

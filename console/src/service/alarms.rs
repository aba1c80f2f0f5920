//! A tenant's alarms: list, acknowledge (idempotent, records who), mute a task's alarms until
//! a time; and for operators every alarm of the cluster, those of no tenant (an engine node
//! lost) included.

use mthpt_engine::alarm::{Alarm, AlarmFilter, AlarmId};
use mthpt_engine::store::{AlarmMute, Scope};
use mthpt_engine::task::TaskId;
use serde_json::json;

use super::runs::{Page, page, parse_cursor};
use super::{Change, Services, audit};
use crate::service::access::{Action, Caller, Target, authorize, tenant_access};
use crate::service::error::{ApiError, ApiResult};

/// The longest mute: 90 days.
pub const MAX_MUTE_MS: i64 = 90 * 24 * 3600 * 1000;

/// An alarm and, when its task's alarms are muted, until when (so views that pop alarms up
/// can leave it out).
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmView {
    pub alarm: Alarm,
    pub muted_until: Option<i64>,
}

/// A page of a tenant's alarms, newest first.
pub async fn list(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    mut filter: AlarmFilter,
    cursor: Option<&str>,
    limit: i64,
) -> ApiResult<Page<AlarmView>> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    if let Some(c) = cursor {
        filter.before_id = Some(AlarmId(parse_cursor(c)?));
    }
    filter.limit = Some(limit);
    let mut tx = services.read().await?;
    let alarms = tx.list_alarms(Scope::Tenant(tenant.id), &filter).await?;
    let mutes = tx.list_alarm_mutes(tenant.id, services.now()).await?;
    let views = alarms
        .into_iter()
        .map(|alarm| {
            let muted_until = alarm
                .task_id
                .and_then(|t| mutes.iter().find(|m| m.task_id == t).map(|m| m.muted_until));
            AlarmView { alarm, muted_until }
        })
        .collect();
    Ok(page(views, limit, |v| v.alarm.id.0))
}

/// Acknowledges an alarm. Acknowledging it again changes nothing: the first person and time
/// are kept, and only the first acknowledgement is audited.
pub async fn acknowledge(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: AlarmId,
) -> ApiResult<Alarm> {
    let tenant = tenant_access(services, caller, tenant, Action::Operate).await?;
    acknowledge_in(services, caller, Scope::Tenant(tenant.id), id).await
}

/// Acknowledges alarm `id` of `scope`, auditing the first acknowledgement only.
async fn acknowledge_in(
    services: &Services,
    caller: &Caller,
    scope: Scope,
    id: AlarmId,
) -> ApiResult<Alarm> {
    let now = services.now();
    let mut tx = services.write().await?;
    let alarm = tx
        .acknowledge_alarm(scope, id, &caller.actor(), now)
        .await?;
    if alarm.acknowledged_at == Some(now)
        && alarm.acknowledged_by.as_deref() == Some(&caller.actor())
    {
        audit(
            tx.as_mut(),
            caller,
            Change {
                tenant: alarm.tenant_id,
                action: "alarm.ack",
                target_kind: "alarm",
                target_id: id.to_string(),
                details: json!({ "kind": alarm.kind, "task_id": alarm.task_id }),
            },
            now,
        )
        .await?;
    }
    tx.commit().await?;
    Ok(alarm)
}

/// A page of every alarm of the cluster, newest first (operators): every tenant's, and those
/// of no tenant (`node_lost`).
pub async fn list_all(
    services: &Services,
    caller: &Caller,
    mut filter: AlarmFilter,
    cursor: Option<&str>,
    limit: i64,
) -> ApiResult<Page<Alarm>> {
    authorize(caller, Action::Platform, Target::Platform)?;
    if let Some(c) = cursor {
        filter.before_id = Some(AlarmId(parse_cursor(c)?));
    }
    filter.limit = Some(limit);
    let mut tx = services.read().await?;
    let alarms = tx.list_alarms(Scope::Cluster, &filter).await?;
    Ok(page(alarms, limit, |a| a.id.0))
}

/// Acknowledges any alarm of the cluster (operators), one of no tenant included; as
/// [`acknowledge`] otherwise.
pub async fn acknowledge_any(
    services: &Services,
    caller: &Caller,
    id: AlarmId,
) -> ApiResult<Alarm> {
    authorize(caller, Action::Platform, Target::Platform)?;
    acknowledge_in(services, caller, Scope::Cluster, id).await
}

/// Mutes a task's alarms until `until` (epoch ms), or unmutes them (`None`).
pub async fn mute(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    task: TaskId,
    until: Option<i64>,
) -> ApiResult<Option<AlarmMute>> {
    let tenant = tenant_access(services, caller, tenant, Action::Operate).await?;
    let now = services.now();
    if let Some(until) = until
        && !(now < until && until <= now + MAX_MUTE_MS)
    {
        return Err(ApiError::field(
            "until",
            "must be in the future and at most 90 days from now",
        ));
    }
    let mut tx = services.write().await?;
    let mute = tx
        .set_alarm_mute(tenant.id, task, until, &caller.actor(), now)
        .await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: if until.is_some() {
                "alarm.mute"
            } else {
                "alarm.unmute"
            },
            target_kind: "task",
            target_id: task.to_string(),
            details: json!({ "until": until.map(crate::service::at) }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(mute)
}

/// The tasks whose alarms are muted now.
pub async fn mutes(
    services: &Services,
    caller: &Caller,
    tenant: &str,
) -> ApiResult<Vec<AlarmMute>> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    Ok(tx.list_alarm_mutes(tenant.id, services.now()).await?)
}

//! One action on many items: pause, resume, trigger or delete up to [`MAX_BULK`] tasks, cancel
//! or re-run as many runs, acknowledge as many alarms; each item in its own transaction, with
//! one result per item (one item's failure does not undo or stop the others).

use mthpt_engine::alarm::AlarmId;
use mthpt_engine::run::RunId;
use mthpt_engine::task::TaskId;
use mthpt_engine::tenant::Tenant;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::tasks::{delete_in, set_paused_in, trigger_in};
use super::{Services, alarms, runs};
use crate::service::access::{Action, Caller, tenant_access};
use crate::service::error::{ApiError, ApiResult, Code};

/// The most items one bulk request names.
pub const MAX_BULK: usize = 500;

/// What to do to every task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    Pause,
    Resume,
    Trigger,
    Delete,
}

/// The outcome for one task.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkOutcome {
    pub task_id: TaskId,
    /// The run a trigger created.
    pub run_id: Option<RunId>,
    /// Why this item failed (the code and message a single request would have answered).
    pub error: Option<(Code, String)>,
}

pub async fn bulk(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    action: BulkAction,
    ids: &[TaskId],
) -> ApiResult<Vec<BulkOutcome>> {
    let needed = match action {
        BulkAction::Delete => Action::Administer,
        _ => Action::Operate,
    };
    let tenant = check_many(
        services,
        caller,
        tenant,
        needed,
        "task_ids",
        "tasks",
        ids.len(),
    )
    .await?;
    let mut outcomes = Vec::with_capacity(ids.len());
    for &id in ids {
        let now = services.now();
        let result: ApiResult<Option<RunId>> = async {
            let mut tx = services.write().await?;
            let run = match action {
                BulkAction::Pause | BulkAction::Resume => {
                    let paused = action == BulkAction::Pause;
                    set_paused_in(tx.as_mut(), caller, &tenant, id, None, paused, now).await?;
                    None
                }
                BulkAction::Trigger => Some(
                    trigger_in(tx.as_mut(), caller, &tenant, id, None, now)
                        .await?
                        .id,
                ),
                BulkAction::Delete => {
                    delete_in(tx.as_mut(), caller, &tenant, id, None, now).await?;
                    None
                }
            };
            tx.commit().await?;
            Ok(run)
        }
        .await;
        outcomes.push(match result {
            Ok(run_id) => BulkOutcome {
                task_id: id,
                run_id,
                error: None,
            },
            Err(e) => BulkOutcome {
                task_id: id,
                run_id: None,
                error: Some((e.code, e.detail)),
            },
        });
    }
    Ok(outcomes)
}

/// What to do to every run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunBulkAction {
    /// Cancel each run that has not finished ([`runs::cancel`]).
    Cancel,
    /// Run each run's task again with the same parameters ([`runs::rerun`]).
    Rerun,
}

/// The outcome for one run, alarm or other item named by id.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemOutcome {
    pub id: i64,
    /// What the action made (the new run of a re-run).
    pub made: Option<i64>,
    /// Why this item failed (the code and message a single request would have answered).
    pub error: Option<(Code, String)>,
}

impl ItemOutcome {
    fn of<T>(id: i64, result: ApiResult<T>, made: impl FnOnce(T) -> Option<i64>) -> ItemOutcome {
        match result {
            Ok(v) => ItemOutcome {
                id,
                made: made(v),
                error: None,
            },
            Err(e) => ItemOutcome {
                id,
                made: None,
                error: Some((e.code, e.detail)),
            },
        }
    }
}

/// Refuses a caller without `action`'s right on `tenant`, then a list of ids that is empty or
/// longer than [`MAX_BULK`] (`field` names it).
async fn check_many(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    action: Action,
    field: &str,
    noun: &str,
    count: usize,
) -> ApiResult<Tenant> {
    let tenant = tenant_access(services, caller, tenant, action).await?;
    if count == 0 || count > MAX_BULK {
        return Err(ApiError::field(
            field,
            format!("name between 1 and {MAX_BULK} {noun} (named {count})"),
        ));
    }
    Ok(tenant)
}

/// Cancels or re-runs up to [`MAX_BULK`] runs, each on its own (its own transaction, audited
/// like a single request): one outcome per run, in the order given.
pub async fn bulk_runs(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    action: RunBulkAction,
    ids: &[RunId],
) -> ApiResult<Vec<ItemOutcome>> {
    check_many(
        services,
        caller,
        tenant,
        Action::Operate,
        "run_ids",
        "runs",
        ids.len(),
    )
    .await?;
    let mut outcomes = Vec::with_capacity(ids.len());
    for &id in ids {
        outcomes.push(match action {
            RunBulkAction::Cancel => ItemOutcome::of(
                id.0,
                runs::cancel(services, caller, tenant, id, Some("cancelled in bulk")).await,
                |_| None,
            ),
            RunBulkAction::Rerun => ItemOutcome::of(
                id.0,
                runs::rerun(services, caller, tenant, id).await,
                |run| Some(run.id.0),
            ),
        });
    }
    Ok(outcomes)
}

/// Acknowledges up to [`MAX_BULK`] alarms, each on its own ([`alarms::acknowledge`]): one
/// outcome per alarm, in the order given.
pub async fn acknowledge_alarms(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    ids: &[AlarmId],
) -> ApiResult<Vec<ItemOutcome>> {
    check_many(
        services,
        caller,
        tenant,
        Action::Operate,
        "alarm_ids",
        "alarms",
        ids.len(),
    )
    .await?;
    let mut outcomes = Vec::with_capacity(ids.len());
    for &id in ids {
        let result = alarms::acknowledge(services, caller, tenant, id).await;
        outcomes.push(ItemOutcome::of(id.0, result, |_| None));
    }
    Ok(outcomes)
}

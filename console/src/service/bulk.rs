//! One action on many tasks: pause, resume, trigger or delete up to [`MAX_BULK`] tasks, each
//! in its own transaction, with one result per item (one item's failure does not undo or stop
//! the others).

use mthpt_engine::run::RunId;
use mthpt_engine::task::TaskId;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Services;
use super::tasks::{delete_in, set_paused_in, trigger_in};
use crate::service::access::{Action, Caller, tenant_access};
use crate::service::error::{ApiError, ApiResult, Code};

/// The most tasks one bulk request names.
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
    let tenant = tenant_access(services, caller, tenant, needed).await?;
    if ids.is_empty() || ids.len() > MAX_BULK {
        return Err(ApiError::field(
            "task_ids",
            format!("name between 1 and {MAX_BULK} tasks (named {})", ids.len()),
        ));
    }
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

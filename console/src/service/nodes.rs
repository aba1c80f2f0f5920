//! Engine nodes (operators).

use mthpt_engine::node::EngineNode;

use super::Services;
use crate::service::access::{Action, Caller, Target, authorize};
use crate::service::error::ApiResult;

pub async fn list(services: &Services, caller: &Caller) -> ApiResult<Vec<EngineNode>> {
    authorize(caller, Action::Platform, Target::Platform)?;
    let mut tx = services.read().await?;
    Ok(tx.list_nodes().await?)
}

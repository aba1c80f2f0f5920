//! Engine nodes (operators).

use mthpt_engine::node::EngineNode;

use super::Services;
use crate::api::auth::{Action, Caller, Target, authorize};
use crate::api::error::ApiResult;

pub async fn list(services: &Services, caller: &Caller) -> ApiResult<Vec<EngineNode>> {
    authorize(caller, Action::Platform, Target::Platform)?;
    let mut tx = services.read().await?;
    Ok(tx.list_nodes().await?)
}

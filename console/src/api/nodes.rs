//! `/nodes`: engine nodes (operators).

use actix_web::{get, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::at;
use super::auth::Caller;
use super::error::{ApiResult, Problem};
use crate::service::{Services, nodes};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_nodes);
}

/// An engine node.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NodeBody {
    pub id: String,
    /// The node groups it schedules.
    pub node_groups: Vec<String>,
    /// Where its callback API listens.
    pub address: String,
    /// `up`, `draining`, `stopped` or `lost`.
    pub state: String,
    pub started_at: DateTime<Utc>,
    pub last_heartbeat_at: DateTime<Utc>,
}

/// The cluster's engine nodes (operators).
#[utoipa::path(tag = "nodes", responses(
    (status = 200, body = Vec<NodeBody>),
    (status = 403, body = Problem, content_type = "application/problem+json"),
))]
#[get("/nodes")]
async fn list_nodes(
    services: web::Data<Services>,
    caller: Caller,
) -> ApiResult<web::Json<Vec<NodeBody>>> {
    let list = nodes::list(&services, &caller).await?;
    Ok(web::Json(
        list.into_iter()
            .map(|n| NodeBody {
                id: n.id,
                node_groups: n.node_groups.0,
                address: n.address,
                state: n.state.to_string(),
                started_at: at(n.started_at),
                last_heartbeat_at: at(n.last_heartbeat_at),
            })
            .collect(),
    ))
}

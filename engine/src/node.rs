//! Engine nodes: one scheduler process each, all equal, heartbeating into the store.

use serde::{Deserialize, Serialize};
use sqlx::types::Json;

use crate::macros::text_enum;

text_enum!(
    /// Whether a node schedules.
    NodeState {
        Up = "up",
        /// Shutting down: no new claims.
        Draining = "draining",
        /// Stopped cleanly.
        Stopped = "stopped",
        /// Stopped heartbeating; reported by another node.
        Lost = "lost",
    }
);

/// An engine node as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct EngineNode {
    pub id: String,
    /// The node groups it schedules.
    pub node_groups: Json<Vec<String>>,
    /// Where its callback API listens.
    pub address: String,
    pub started_at: i64,
    pub last_heartbeat_at: i64,
    #[sqlx(try_from = "String")]
    pub state: NodeState,
}

/// What a node reports with each heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeHeartbeat {
    pub id: String,
    pub node_groups: Vec<String>,
    pub address: String,
    pub state: NodeState,
}

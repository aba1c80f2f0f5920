//! Engine nodes: heartbeats, the node list, and nodes declared lost when they fall silent.
//!
//! Every operation here is written once for both backends; neither has its own.

use async_trait::async_trait;
use sqlx::types::Json;

use super::Result;
use super::tx::{StoreTx, on_conn};
use crate::node::{EngineNode, NodeHeartbeat};

/// Engine nodes and their heartbeats.
#[async_trait]
pub trait Nodes: Send {
    async fn heartbeat_node(&mut self, beat: &NodeHeartbeat, now: i64) -> Result<EngineNode>;
    async fn list_nodes(&mut self) -> Result<Vec<EngineNode>>;
    /// Marks nodes that are up or draining with a heartbeat before `heartbeat_before` as lost
    /// and returns them (each reported once).
    async fn mark_nodes_lost(&mut self, heartbeat_before: i64) -> Result<Vec<EngineNode>>;
}

#[async_trait]
impl Nodes for StoreTx {
    async fn heartbeat_node(&mut self, beat: &NodeHeartbeat, now: i64) -> Result<EngineNode> {
        Ok(on_conn!(self, |c| {
            sqlx::query_as(
            "INSERT INTO engine_nodes (id, node_groups, address, started_at, last_heartbeat_at, state)
             VALUES ($1, $2, $3, $4, $4, $5)
             ON CONFLICT (id) DO UPDATE SET node_groups = excluded.node_groups,
                 address = excluded.address, last_heartbeat_at = excluded.last_heartbeat_at,
                 state = excluded.state,
                 started_at = CASE WHEN engine_nodes.state IN ('stopped', 'lost')
                                   THEN excluded.started_at ELSE engine_nodes.started_at END
             RETURNING *",
        )
        .bind(&beat.id)
        .bind(Json(&beat.node_groups))
        .bind(&beat.address)
        .bind(now)
        .bind(beat.state.as_str())
        .fetch_one(&mut **c)
        .await
        })?)
    }

    async fn list_nodes(&mut self) -> Result<Vec<EngineNode>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM engine_nodes ORDER BY id"
        )
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn mark_nodes_lost(&mut self, heartbeat_before: i64) -> Result<Vec<EngineNode>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "UPDATE engine_nodes SET state = 'lost'
             WHERE state IN ('up', 'draining') AND last_heartbeat_at < $1 RETURNING *",
        )
        .bind(heartbeat_before)
        .fetch_all(&mut **c)
        .await)?)
    }
}

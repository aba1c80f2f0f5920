//! Engine nodes: heartbeats, the node list, and nodes declared lost when they fall silent.
//!
//! Every node operation is shared; neither backend has its own.

/// Adds the engine node operations to the `impl Tx` that [`tx_impl!`](super::tx_impl)
/// writes (see [`tx_ops!`](super::tx_ops) for how the domains join).
macro_rules! node_ops {
    ($tx:ty, $for_update:literal, $skip_locked:literal, $rest:tt, { $($done:tt)* }) => {
        $crate::store::shared::tx_ops!($tx, $for_update, $skip_locked, $rest, {
            $($done)*

            async fn heartbeat_node(&mut self, beat: &NodeHeartbeat, now: i64) -> Result<EngineNode> {
                Ok(sqlx::query_as(
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
                .fetch_one(&mut *self.tx)
                .await?)
            }

            async fn list_nodes(&mut self) -> Result<Vec<EngineNode>> {
                Ok(sqlx::query_as("SELECT * FROM engine_nodes ORDER BY id")
                    .fetch_all(&mut *self.tx)
                    .await?)
            }

            async fn mark_nodes_lost(&mut self, heartbeat_before: i64) -> Result<Vec<EngineNode>> {
                Ok(sqlx::query_as(
                    "UPDATE engine_nodes SET state = 'lost'
                     WHERE state IN ('up', 'draining') AND last_heartbeat_at < $1 RETURNING *",
                )
                .bind(heartbeat_before)
                .fetch_all(&mut *self.tx)
                .await?)
            }
        });
    };
}
pub(crate) use node_ops;

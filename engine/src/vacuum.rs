//! The live runs' vacuum: every few seconds each node asks the store to reclaim the dead row
//! versions of the waiting and running runs and renew their statistics
//! ([`Store::vacuum_live_runs`]).
//!
//! On PostgreSQL the live runs are a partition of their own (`live_runs`, see
//! migrations/postgres/0024_live_runs.sql) that every claim, start and result rewrites: at
//! thousands of runs a second it is all dead versions within seconds. Autovacuum would come
//! when a fifth of the table is dead, and then scan it whole; a vacuum every few seconds finds a
//! table of a few pages and takes milliseconds. Nodes that meet skip (one vacuums at a time).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::store::Store;

/// How often a node vacuums the live runs.
pub const INTERVAL: Duration = Duration::from_secs(5);

/// Vacuums the live runs at once (a node starting on a table whose statistics are stale
/// plans with today's) and then every [`INTERVAL`] until `stop` changes.
pub async fn run_loop(store: Arc<dyn Store>, mut stop: watch::Receiver<bool>) {
    loop {
        if let Err(e) = store.vacuum_live_runs().await {
            tracing::warn!(error = %e, "vacuum of the live runs failed");
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(INTERVAL) => {}
        }
    }
}

//! Backlogs: episodes of an app's due runs waiting for capacity (its live executors full or
//! draining), one open episode per app (`app_backlogs`). The watchdog opens an episode and
//! raises its one `backlog` alarm, and closes it (resolving the alarm) once no run waits.
//!
//! Written per dialect, in `pg/backlogs.rs` and `sqlite/backlogs.rs`: `capacity_backlogs`
//! (lateral joins against correlated subqueries).

use async_trait::async_trait;

use super::tx::{Conn, StoreTx, on_conn};
use super::{Result, pg, sqlite};
use crate::app::AppId;
use crate::tenant::TenantId;

/// An app with due runs waiting for capacity, or with a backlog episode still open
/// ([`Backlogs::capacity_backlogs`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CapacityBacklog {
    pub app_id: AppId,
    pub tenant_id: TenantId,
    /// Pending runs due before the threshold (counted up to the limit given); 0 when there
    /// are none (any more).
    pub waiting: i64,
    /// The due time of the oldest of them.
    pub oldest_due_at: Option<i64>,
    /// Whether the app has live executors (up or draining) and no free capacity.
    pub full: bool,
    /// The dedupe key of the open episode's alarm, when one is open.
    pub alarm_key: Option<String>,
}

/// Backlog episodes of apps whose due runs wait for capacity (engine internal: the watchdog).
#[async_trait]
pub trait Backlogs: Send {
    /// Apps with live executors and no free capacity whose pending runs due before
    /// `due_before` wait (counted up to `count_limit`), and apps with an open backlog episode
    /// (whether or not they still wait or are full).
    async fn capacity_backlogs(
        &mut self,
        due_before: i64,
        count_limit: i64,
    ) -> Result<Vec<CapacityBacklog>>;
    /// Opens a backlog episode of `app` under the alarm dedupe key `alarm_key`; `false` when
    /// one is open already (another node opened it).
    async fn open_backlog(&mut self, app: AppId, alarm_key: &str, now: i64) -> Result<bool>;
    /// Closes the open backlog episode of `app`; returns its alarm's dedupe key.
    async fn close_backlog(&mut self, app: AppId) -> Result<Option<String>>;
}

#[async_trait]
impl Backlogs for StoreTx {
    async fn capacity_backlogs(
        &mut self,
        due_before: i64,
        count_limit: i64,
    ) -> Result<Vec<CapacityBacklog>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::backlogs::capacity_backlogs(c, due_before, count_limit).await,
            Conn::Sqlite(c) => {
                sqlite::backlogs::capacity_backlogs(c, due_before, count_limit).await
            }
        }
    }

    async fn open_backlog(&mut self, app: AppId, alarm_key: &str, now: i64) -> Result<bool> {
        let opened = on_conn!(self, |c| sqlx::query(
            "INSERT INTO app_backlogs (app_id, alarm_key, opened_at) VALUES ($1, $2, $3)
             ON CONFLICT (app_id) DO NOTHING",
        )
        .bind(app)
        .bind(alarm_key)
        .bind(now)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(opened == 1)
    }

    async fn close_backlog(&mut self, app: AppId) -> Result<Option<String>> {
        let row: Option<(String,)> = on_conn!(self, |c| sqlx::query_as(
            "DELETE FROM app_backlogs WHERE app_id = $1 RETURNING alarm_key"
        )
        .bind(app)
        .fetch_optional(&mut **c)
        .await)?;
        Ok(row.map(|(k,)| k))
    }
}

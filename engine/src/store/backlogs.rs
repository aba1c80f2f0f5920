//! Backlogs: episodes of an app's due runs waiting for capacity (its live executors full or
//! draining), one open episode per app (`app_backlogs`). The watchdog opens an episode and
//! raises its one `backlog` alarm, and closes it (resolving the alarm) once no run waits.
//!
//! Quota episodes (`quota_episodes`), one open per tenant and quota: opened by the first
//! refusal of a change (console) or by the watchdog when a tenant's runs wait behind its
//! concurrency or rate quota ([`Backlogs::quota_holds`]); each raises one `quota` alarm.
//!
//! Written per dialect, in `pg/backlogs.rs` and `sqlite/backlogs.rs`: `capacity_backlogs`
//! (lateral joins against correlated subqueries).

use async_trait::async_trait;

use super::tx::{Conn, StoreTx, on_conn};
use super::{Result, pg, sqlite};
use crate::app::AppId;
use crate::quota::{Quota, TenantQuotas};
use crate::tenant::TenantId;

/// An app with due runs waiting for capacity, or with a backlog episode still open
/// ([`Backlogs::capacity_backlogs`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CapacityBacklog {
    pub app_id: AppId,
    /// The app's name (the alarm names it).
    pub app_name: String,
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

/// A tenant with a concurrency or rate quota, or with a quota episode open, as the watchdog
/// sees it ([`Backlogs::quota_holds`]).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct QuotaHold {
    pub tenant_id: TenantId,
    pub tenant_name: String,
    #[sqlx(flatten)]
    pub quotas: TenantQuotas,
    /// Its bucket of fires as stored (see [`crate::quota::FireBucket::stored`]).
    pub fire_tokens: Option<f64>,
    pub fire_tokens_at: Option<i64>,
    /// Its runs started and not finished.
    pub running: i64,
    /// The due time of its oldest pending run, if any.
    pub oldest_waiting_due_at: Option<i64>,
}

/// Backlog and quota episodes (engine internal: the watchdog; the console opens and closes
/// quota episodes of refused changes).
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
    /// Tenants with a concurrency or rate quota, or with a quota episode open: their quotas,
    /// bucket, runs running and oldest pending run.
    async fn quota_holds(&mut self) -> Result<Vec<QuotaHold>>;
    /// The quota episodes open now: tenant, quota (its name) and alarm key.
    async fn open_quota_episodes(&mut self) -> Result<Vec<(TenantId, String, String)>>;
    /// Opens an episode of `tenant` reaching `quota` under the alarm dedupe key `alarm_key`;
    /// `false` when one is open already (another process opened it).
    async fn open_quota_episode(
        &mut self,
        tenant: TenantId,
        quota: Quota,
        alarm_key: &str,
        now: i64,
    ) -> Result<bool>;
    /// Closes the open episode of `tenant` and `quota`; returns its alarm's dedupe key.
    async fn close_quota_episode(
        &mut self,
        tenant: TenantId,
        quota: Quota,
    ) -> Result<Option<String>>;
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

    async fn quota_holds(&mut self) -> Result<Vec<QuotaHold>> {
        // The oldest pending run of each of the tenant's apps is one probe of
        // `runs_claimable` (claimed runs ahead of it are skipped).
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT t.id AS tenant_id, t.name AS tenant_name, t.max_concurrent_runs,
                 t.max_fires_per_second, t.fire_burst, t.max_tasks, t.max_waiting_runs,
                 t.fire_tokens, t.fire_tokens_at,
                 (SELECT count(*) FROM apps a JOIN runs r ON r.app_id = a.id
                  WHERE a.tenant_id = t.id AND r.started_at IS NOT NULL AND r.finished_at IS NULL)
                     AS running,
                 (SELECT min((SELECT r.due_at FROM runs r
                              WHERE r.node_group = t.node_group AND r.app_id = a.id
                                AND r.started_at IS NULL AND r.finished_at IS NULL
                                AND r.state = 'pending'
                              ORDER BY r.due_at LIMIT 1))
                  FROM apps a WHERE a.tenant_id = t.id) AS oldest_waiting_due_at
             FROM tenants t
             WHERE t.max_concurrent_runs IS NOT NULL OR t.max_fires_per_second IS NOT NULL
                OR EXISTS (SELECT 1 FROM quota_episodes q WHERE q.tenant_id = t.id)
             ORDER BY t.id"
        )
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn open_quota_episodes(&mut self) -> Result<Vec<(TenantId, String, String)>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT tenant_id, quota, alarm_key FROM quota_episodes ORDER BY tenant_id, quota"
        )
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn open_quota_episode(
        &mut self,
        tenant: TenantId,
        quota: Quota,
        alarm_key: &str,
        now: i64,
    ) -> Result<bool> {
        let opened = on_conn!(self, |c| sqlx::query(
            "INSERT INTO quota_episodes (tenant_id, quota, alarm_key, opened_at)
             VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, quota) DO NOTHING",
        )
        .bind(tenant)
        .bind(quota.as_str())
        .bind(alarm_key)
        .bind(now)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(opened == 1)
    }

    async fn close_quota_episode(
        &mut self,
        tenant: TenantId,
        quota: Quota,
    ) -> Result<Option<String>> {
        let row: Option<(String,)> = on_conn!(self, |c| sqlx::query_as(
            "DELETE FROM quota_episodes WHERE tenant_id = $1 AND quota = $2 RETURNING alarm_key"
        )
        .bind(tenant)
        .bind(quota.as_str())
        .fetch_optional(&mut **c)
        .await)?;
        Ok(row.map(|(k,)| k))
    }
}

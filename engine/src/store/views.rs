//! What the console's views read and keep besides the core rows: statistics samples, the runs
//! of one occurrence, idempotency keys of manual triggers and alarm mutes (their types are in
//! `store/reports.rs`).
//!
//! Every operation here is written once for both backends; neither has its own.

use async_trait::async_trait;

use super::Tasks;
use super::tx::{StoreTx, fk_or, on_conn};
use super::{AlarmMute, Result, RunSample, RunSampleQuery, TriggerKey};
use crate::run::Run;
use crate::task::TaskId;
use crate::tenant::TenantId;

/// What the console's views read and keep besides the core rows.
#[async_trait]
pub trait Views: Send {
    /// A tenant's runs in a final state scheduled in a time range, oldest first, for
    /// statistics.
    async fn run_samples(
        &mut self,
        tenant: TenantId,
        query: &RunSampleQuery,
    ) -> Result<Vec<RunSample>>;
    /// Every run (attempts and shards) of one occurrence of a tenant's task, ordered by shard
    /// and attempt, without locking anything.
    async fn occurrence_runs(
        &mut self,
        tenant: TenantId,
        task: TaskId,
        scheduled_at: i64,
    ) -> Result<Vec<Run>>;
    /// The run an idempotency key created, unless the key was first used before
    /// `created_since`.
    async fn find_trigger_key(
        &mut self,
        tenant: TenantId,
        key: &str,
        created_since: i64,
    ) -> Result<Option<TriggerKey>>;
    /// Remembers the run an idempotency key created (replacing a use of the key from before
    /// `created_since`); false when the key is taken already (a concurrent request won).
    async fn insert_trigger_key(&mut self, key: &TriggerKey, created_since: i64) -> Result<bool>;
    /// Mutes a tenant's task's alarms until `until`, or unmutes them (`None`).
    async fn set_alarm_mute(
        &mut self,
        tenant: TenantId,
        task: TaskId,
        until: Option<i64>,
        by: &str,
        now: i64,
    ) -> Result<Option<AlarmMute>>;
    /// A tenant's mutes that last beyond `now`.
    async fn list_alarm_mutes(&mut self, tenant: TenantId, now: i64) -> Result<Vec<AlarmMute>>;
}

#[async_trait]
impl Views for StoreTx {
    async fn run_samples(
        &mut self,
        tenant: TenantId,
        query: &crate::store::RunSampleQuery,
    ) -> Result<Vec<crate::store::RunSample>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT id, task_id, state, scheduled_at, due_at, started_at, finished_at FROM runs
             WHERE tenant_id = $1 AND ($2 IS NULL OR task_id = $2)
               AND scheduled_at >= $3 AND scheduled_at < $4
               AND state IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
             ORDER BY scheduled_at, id LIMIT $5",
        )
        .bind(tenant)
        .bind(query.task_id)
        .bind(query.scheduled_from)
        .bind(query.scheduled_before)
        .bind(query.limit.clamp(1, crate::store::MAX_RUN_SAMPLES))
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn occurrence_runs(
        &mut self,
        tenant: TenantId,
        task: TaskId,
        scheduled_at: i64,
    ) -> Result<Vec<Run>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM runs WHERE tenant_id = $1 AND task_id = $2 AND scheduled_at = $3
             ORDER BY shard_index, attempt",
        )
        .bind(tenant)
        .bind(task)
        .bind(scheduled_at)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn find_trigger_key(
        &mut self,
        tenant: TenantId,
        key: &str,
        created_since: i64,
    ) -> Result<Option<crate::store::TriggerKey>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM trigger_keys WHERE tenant_id = $1 AND key = $2 AND created_at >= $3",
        )
        .bind(tenant)
        .bind(key)
        .bind(created_since)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn insert_trigger_key(
        &mut self,
        key: &crate::store::TriggerKey,
        created_since: i64,
    ) -> Result<bool> {
        on_conn!(self, |c| sqlx::query(
            "DELETE FROM trigger_keys WHERE tenant_id = $1 AND key = $2 AND created_at < $3"
        )
        .bind(key.tenant_id)
        .bind(&key.key)
        .bind(created_since)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        let inserted = on_conn!(self, |c| sqlx::query(
            "INSERT INTO trigger_keys (tenant_id, key, task_id, run_id, created_at)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, key) DO NOTHING",
        )
        .bind(key.tenant_id)
        .bind(&key.key)
        .bind(key.task_id)
        .bind(key.run_id)
        .bind(key.created_at)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))
        .map_err(|e| {
            fk_or(e, || {
                format!("run {} of tenant {}", key.run_id, key.tenant_id)
            })
        })?;
        Ok(inserted == 1)
    }

    async fn set_alarm_mute(
        &mut self,
        tenant: TenantId,
        task: TaskId,
        until: Option<i64>,
        by: &str,
        now: i64,
    ) -> Result<Option<crate::store::AlarmMute>> {
        // The task must be the tenant's: a foreign id is "not found", never muted.
        self.get_task(tenant, task).await?;
        let Some(until) = until else {
            on_conn!(self, |c| sqlx::query(
                "DELETE FROM alarm_mutes WHERE tenant_id = $1 AND task_id = $2"
            )
            .bind(tenant)
            .bind(task)
            .execute(&mut **c)
            .await
            .map(|done| done.rows_affected()))?;
            return Ok(None);
        };
        Ok(Some(on_conn!(self, |c| sqlx::query_as(
            "INSERT INTO alarm_mutes (task_id, tenant_id, muted_until, muted_by, updated_at)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (task_id) DO UPDATE SET muted_until = excluded.muted_until,
                     muted_by = excluded.muted_by, updated_at = excluded.updated_at
                 RETURNING *",
        )
        .bind(task)
        .bind(tenant)
        .bind(until)
        .bind(by)
        .bind(now)
        .fetch_one(&mut **c)
        .await)?))
    }

    async fn list_alarm_mutes(
        &mut self,
        tenant: TenantId,
        now: i64,
    ) -> Result<Vec<crate::store::AlarmMute>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM alarm_mutes WHERE tenant_id = $1 AND muted_until > $2 ORDER BY task_id",
        )
        .bind(tenant)
        .bind(now)
        .fetch_all(&mut **c)
        .await)?)
    }
}

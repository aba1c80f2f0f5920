//! Rollups and retention: the per-minute aggregates of finished runs, the watermark saying how
//! far a tenant is rolled up, and deleting finished runs past their tenant's retention.
//!
//! Every operation here is written once for both backends; neither has its own. None of them is on the claim,
//! dispatch or result path: the [`Rollup`](crate::rollup::Rollup) loop and the statistics
//! service call them.

use async_trait::async_trait;

use super::tx::{Dialect, Locking, StoreTx, fk_or, on_conn};
use super::{Result, RunRollup, RunSample, SampleCursor, StoreError};
use crate::task::TaskId;
use crate::tenant::TenantId;

/// What one [`Rollups::delete_expired_runs`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExpiredRuns {
    pub deleted: u64,
    /// The latest scheduled time among the deleted runs (none deleted: `None`).
    pub latest_scheduled_at: Option<i64>,
}

/// Per-minute rollups of finished runs, their watermarks, and retention deletes.
#[async_trait]
pub trait Rollups: Send {
    /// Engine internal: a page of a tenant's runs in a final state scheduled in a time range,
    /// ordered by scheduled time then id, starting after `after` (keyset paging).
    async fn rollup_samples(
        &mut self,
        tenant: TenantId,
        scheduled_from: i64,
        scheduled_before: i64,
        after: Option<SampleCursor>,
        limit: i64,
    ) -> Result<Vec<RunSample>>;
    /// The earliest scheduled time of a tenant's runs in the range that are not final yet.
    async fn oldest_unfinished_scheduled(
        &mut self,
        tenant: TenantId,
        scheduled_from: i64,
        scheduled_before: i64,
    ) -> Result<Option<i64>>;
    /// The earliest scheduled time of any of a tenant's runs.
    async fn oldest_run_scheduled(&mut self, tenant: TenantId) -> Result<Option<i64>>;
    /// Engine internal: a tenant's rollup watermark (every minute before it is rolled up),
    /// creating it at `initial` when it has none. Nothing stays locked.
    async fn init_rollup_watermark(
        &mut self,
        tenant: TenantId,
        initial: i64,
        now: i64,
    ) -> Result<i64>;
    /// Engine internal: takes the tenant's rollup until `until` (a lease: one node rolls a
    /// tenant up at a time, and no transaction stays open while it reads). `false` when the
    /// watermark is no longer `watermark` or another node's lease has not run out at `now`.
    async fn lease_rollup(
        &mut self,
        tenant: TenantId,
        watermark: i64,
        now: i64,
        until: i64,
    ) -> Result<bool>;
    /// Engine internal: gives back early (the pass stopped) the lease that `lease_rollup`
    /// took until `until`; a lease another node has taken since stays.
    async fn release_rollup_lease(&mut self, tenant: TenantId, until: i64) -> Result<()>;
    /// A tenant's rollup watermark, read without locking; `None` before its first rollup.
    async fn rollup_watermark(&mut self, tenant: TenantId) -> Result<Option<i64>>;
    /// Every tenant's rollup watermark.
    async fn rollup_watermarks(&mut self) -> Result<Vec<(TenantId, i64)>>;
    /// Engine internal: moves a tenant's watermark from `from` to `to` and ends its lease;
    /// `false` (nothing written) when the watermark is no longer `from`: another node rolled
    /// those minutes meanwhile, and retention may have deleted runs this pass read.
    async fn advance_rollup_watermark(
        &mut self,
        tenant: TenantId,
        from: i64,
        to: i64,
        now: i64,
    ) -> Result<bool>;
    /// Engine internal: writes rollup rows, replacing rows of the same tenant, task and minute.
    async fn upsert_run_rollups(&mut self, rows: &[RunRollup]) -> Result<()>;
    /// A tenant's (or one task's) rollup rows of minutes in `minute_from..minute_before`,
    /// ordered by minute then task.
    async fn run_rollups(
        &mut self,
        tenant: TenantId,
        task: Option<TaskId>,
        minute_from: i64,
        minute_before: i64,
    ) -> Result<Vec<RunRollup>>;
    /// Engine internal: writes tenant-wide rollup rows (every task of the tenant merged; the
    /// rows' `task_id` is ignored), replacing rows of the same tenant and minute.
    async fn upsert_tenant_rollups(&mut self, rows: &[RunRollup]) -> Result<()>;
    /// A tenant's tenant-wide rollup rows of minutes in `minute_from..minute_before`, one per
    /// minute in order, each with `task_id` 0 (every task).
    async fn tenant_rollups(
        &mut self,
        tenant: TenantId,
        minute_from: i64,
        minute_before: i64,
    ) -> Result<Vec<RunRollup>>;
    /// Engine internal: deletes up to `limit` (at most 10,000) of a tenant's final runs that
    /// finished before `finished_before` and were scheduled before `scheduled_before` (the
    /// rollup watermark), oldest first, skipping rows other transactions hold. A run whose
    /// occurrence or chain still has a run that is not final stays. Rows referring to a
    /// deleted run keep their row with the reference set to null (alarms, chain children);
    /// idempotency keys of manual triggers go with their run. Only runs scheduled at or after
    /// `scheduled_from` are looked at: a pass deleting batch after batch starts each where the
    /// one before stopped, instead of walking again over the entries of the runs it deleted
    /// (which stay in the index until a vacuum). Returns how many were deleted and the latest
    /// scheduled time among them.
    async fn delete_expired_runs(
        &mut self,
        tenant: TenantId,
        finished_before: i64,
        scheduled_before: i64,
        scheduled_from: i64,
        limit: i64,
    ) -> Result<ExpiredRuns>;
    /// Engine internal: deletes up to `limit` (at most 10,000) alarm events published before
    /// `published_before`, oldest first (the outbox keeps only what is still to publish and
    /// recent history); returns how many. Alarms themselves stay.
    async fn purge_alarm_events(&mut self, published_before: i64, limit: i64) -> Result<u64>;
}

#[async_trait]
impl Rollups for StoreTx {
    async fn rollup_samples(
        &mut self,
        tenant: TenantId,
        scheduled_from: i64,
        scheduled_before: i64,
        after: Option<crate::store::SampleCursor>,
        limit: i64,
    ) -> Result<Vec<crate::store::RunSample>> {
        // `scheduled_at >= $4` beside the keyset's `OR`: the index scan starts at the cursor.
        // With the `OR` alone it started at `scheduled_at >= $2` and filtered out every page
        // read before: a minute of 700,000 runs, read in 70 pages, was 24 million rows read.
        let (after_at, after_id) = match after {
            Some(c) => (c.scheduled_at, c.id.0),
            None => (i64::MIN, i64::MIN),
        };
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT id, task_id, state, scheduled_at, due_at, started_at, finished_at FROM runs
             WHERE tenant_id = $1 AND scheduled_at >= $2 AND scheduled_at < $3
               AND scheduled_at >= $4 AND (scheduled_at > $4 OR id > $5)
               AND state IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
               AND finished_at IS NOT NULL
             ORDER BY scheduled_at, id LIMIT $6"
        )
        .bind(tenant)
        .bind(scheduled_from)
        .bind(scheduled_before)
        .bind(after_at)
        .bind(after_id)
        .bind(limit.clamp(1, crate::store::MAX_RUN_SAMPLES))
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn oldest_unfinished_scheduled(
        &mut self,
        tenant: TenantId,
        scheduled_from: i64,
        scheduled_before: i64,
    ) -> Result<Option<i64>> {
        let row: (Option<i64>,) = on_conn!(self, |c| {
            sqlx::query_as(
                "SELECT MIN(scheduled_at) FROM runs
             WHERE tenant_id = $1 AND scheduled_at >= $2 AND scheduled_at < $3
               AND state NOT IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
               AND finished_at IS NULL",
            )
            .bind(tenant)
            .bind(scheduled_from)
            .bind(scheduled_before)
            .fetch_one(&mut **c)
            .await
        })?;
        Ok(row.0)
    }

    async fn oldest_run_scheduled(&mut self, tenant: TenantId) -> Result<Option<i64>> {
        let row: (Option<i64>,) = on_conn!(self, |c| sqlx::query_as(
            "SELECT MIN(scheduled_at) FROM runs WHERE tenant_id = $1"
        )
        .bind(tenant)
        .fetch_one(&mut **c)
        .await)?;
        Ok(row.0)
    }

    async fn init_rollup_watermark(
        &mut self,
        tenant: TenantId,
        initial: i64,
        now: i64,
    ) -> Result<i64> {
        on_conn!(self, |c| sqlx::query(
            "INSERT INTO rollup_watermarks (tenant_id, rolled_before, updated_at)
             VALUES ($1, $2, $3) ON CONFLICT (tenant_id) DO NOTHING",
        )
        .bind(tenant)
        .bind(initial)
        .bind(now)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))
        .map_err(|e| fk_or(e, || format!("tenant {tenant}")))?;
        self.rollup_watermark(tenant)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("tenant {tenant}")))
    }

    async fn lease_rollup(
        &mut self,
        tenant: TenantId,
        watermark: i64,
        now: i64,
        until: i64,
    ) -> Result<bool> {
        let done = on_conn!(self, |c| sqlx::query(
            "UPDATE rollup_watermarks SET lease_until = $4
             WHERE tenant_id = $1 AND rolled_before = $2 AND lease_until <= $3",
        )
        .bind(tenant)
        .bind(watermark)
        .bind(now)
        .bind(until)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(done == 1)
    }

    async fn release_rollup_lease(&mut self, tenant: TenantId, until: i64) -> Result<()> {
        on_conn!(self, |c| sqlx::query(
            "UPDATE rollup_watermarks SET lease_until = 0 WHERE tenant_id = $1 AND lease_until = $2"
        )
        .bind(tenant)
        .bind(until)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(())
    }

    async fn rollup_watermark(&mut self, tenant: TenantId) -> Result<Option<i64>> {
        let row: Option<(i64,)> = on_conn!(self, |c| sqlx::query_as(
            "SELECT rolled_before FROM rollup_watermarks WHERE tenant_id = $1"
        )
        .bind(tenant)
        .fetch_optional(&mut **c)
        .await)?;
        Ok(row.map(|r| r.0))
    }

    async fn rollup_watermarks(&mut self) -> Result<Vec<(TenantId, i64)>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT tenant_id, rolled_before FROM rollup_watermarks ORDER BY tenant_id"
        )
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn advance_rollup_watermark(
        &mut self,
        tenant: TenantId,
        from: i64,
        to: i64,
        now: i64,
    ) -> Result<bool> {
        // Never backwards: a minute once rolled may have lost its runs to retention.
        let done = on_conn!(self, |c| sqlx::query(
            "UPDATE rollup_watermarks SET rolled_before = $3, updated_at = $4, lease_until = 0
             WHERE tenant_id = $1 AND rolled_before = $2 AND $2 < $3",
        )
        .bind(tenant)
        .bind(from)
        .bind(to)
        .bind(now)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(done == 1)
    }

    async fn upsert_run_rollups(&mut self, rows: &[crate::store::RunRollup]) -> Result<()> {
        // A busy minute is one row per task (thousands): many rows per statement.
        for chunk in rows.chunks(ROLLUP_ROWS_PER_STATEMENT) {
            on_conn!(self, |c| {
                let mut q = sqlx::QueryBuilder::new(
                    "INSERT INTO run_rollups (tenant_id, task_id, minute, succeeded, failed,
                         timed_out, lost, skipped, cancelled, duration_hist, lateness_hist) ",
                );
                q.push_values(chunk, |mut b, r| {
                    b.push_bind(r.tenant_id)
                        .push_bind(r.task_id)
                        .push_bind(r.minute)
                        .push_bind(r.succeeded)
                        .push_bind(r.failed)
                        .push_bind(r.timed_out)
                        .push_bind(r.lost)
                        .push_bind(r.skipped)
                        .push_bind(r.cancelled)
                        .push_bind(&r.duration_hist)
                        .push_bind(&r.lateness_hist);
                });
                q.push(
                    " ON CONFLICT (tenant_id, minute, task_id) DO UPDATE SET
                     succeeded = excluded.succeeded, failed = excluded.failed,
                     timed_out = excluded.timed_out, lost = excluded.lost,
                     skipped = excluded.skipped, cancelled = excluded.cancelled,
                     duration_hist = excluded.duration_hist,
                     lateness_hist = excluded.lateness_hist",
                );
                q.build()
                    .execute(&mut **c)
                    .await
                    .map(|done| done.rows_affected())
            })
            .map_err(|e| {
                fk_or(e, || match chunk.first() {
                    Some(r) => format!("a task of tenant {}", r.tenant_id),
                    None => "a task".to_owned(),
                })
            })?;
        }
        Ok(())
    }

    async fn run_rollups(
        &mut self,
        tenant: TenantId,
        task: Option<TaskId>,
        minute_from: i64,
        minute_before: i64,
    ) -> Result<Vec<crate::store::RunRollup>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM run_rollups
             WHERE tenant_id = $1 AND ($2 IS NULL OR task_id = $2)
               AND minute >= $3 AND minute < $4
             ORDER BY minute, task_id",
        )
        .bind(tenant)
        .bind(task)
        .bind(minute_from)
        .bind(minute_before)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn upsert_tenant_rollups(&mut self, rows: &[crate::store::RunRollup]) -> Result<()> {
        for r in rows {
            on_conn!(self, |c| sqlx::query(
                "INSERT INTO tenant_rollups (tenant_id, minute, succeeded, failed,
                     timed_out, lost, skipped, cancelled, duration_hist, lateness_hist)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (tenant_id, minute) DO UPDATE SET
                     succeeded = excluded.succeeded, failed = excluded.failed,
                     timed_out = excluded.timed_out, lost = excluded.lost,
                     skipped = excluded.skipped, cancelled = excluded.cancelled,
                     duration_hist = excluded.duration_hist,
                     lateness_hist = excluded.lateness_hist",
            )
            .bind(r.tenant_id)
            .bind(r.minute)
            .bind(r.succeeded)
            .bind(r.failed)
            .bind(r.timed_out)
            .bind(r.lost)
            .bind(r.skipped)
            .bind(r.cancelled)
            .bind(&r.duration_hist)
            .bind(&r.lateness_hist)
            .execute(&mut **c)
            .await
            .map(|done| done.rows_affected()))
            .map_err(|e| fk_or(e, || format!("tenant {}", r.tenant_id)))?;
        }
        Ok(())
    }

    async fn tenant_rollups(
        &mut self,
        tenant: TenantId,
        minute_from: i64,
        minute_before: i64,
    ) -> Result<Vec<crate::store::RunRollup>> {
        Ok(on_conn!(self, |c| {
            sqlx::query_as(
            "SELECT tenant_id, CAST(0 AS BIGINT) AS task_id, minute, succeeded, failed, timed_out, lost,
                    skipped, cancelled, duration_hist, lateness_hist
             FROM tenant_rollups
             WHERE tenant_id = $1 AND minute >= $2 AND minute < $3
             ORDER BY minute",
        )
        .bind(tenant)
        .bind(minute_from)
        .bind(minute_before)
        .fetch_all(&mut **c)
        .await
        })?)
    }

    async fn delete_expired_runs(
        &mut self,
        tenant: TenantId,
        finished_before: i64,
        scheduled_before: i64,
        scheduled_from: i64,
        limit: i64,
    ) -> Result<ExpiredRuns> {
        // A run stays while its occurrence or its chain has a run that is not final:
        // retries, recoveries and chain joins read the runs before them. `LIMIT 1
        // OFFSET 0` keeps each check an index look-up per candidate on PostgreSQL
        // (an anti-join would scan the table for the few runs that are not final).
        let scheduled: Vec<(i64,)> =
            on_conn!(self, |c| sqlx::query_as(c.sql(&DELETE_EXPIRED_RUNS))
                .bind(tenant)
                .bind(scheduled_before)
                .bind(finished_before)
                .bind(limit.clamp(1, 10_000))
                .bind(scheduled_from)
                .fetch_all(&mut **c)
                .await)?;
        Ok(ExpiredRuns {
            deleted: scheduled.len() as u64,
            latest_scheduled_at: scheduled.iter().map(|(at,)| *at).max(),
        })
    }

    async fn purge_alarm_events(&mut self, published_before: i64, limit: i64) -> Result<u64> {
        let done = on_conn!(self, |c| sqlx::query(c.sql(&PURGE_ALARM_EVENTS))
            .bind(published_before)
            .bind(limit.clamp(1, 10_000))
            .execute(&mut **c)
            .await
            .map(|done| done.rows_affected()))?;
        Ok(done)
    }
}

/// Rollup rows per upsert statement (eleven parameters each: within both backends' limits).
const ROLLUP_ROWS_PER_STATEMENT: usize = 1_000;

/// The statement of `delete_expired_runs` that locks rows (on PostgreSQL; SQLite has one writer).
/// Its `finished_at IS [NOT] NULL` conditions, implied by the states and the `<` beside them,
/// name the partition of `runs` each part reads on PostgreSQL (the history, the live runs): a
/// comparison or a state alone does not let the planner leave the other one out.
const DELETE_EXPIRED_RUNS: Locking = Locking {
    postgres: "DELETE FROM runs WHERE finished_at IS NOT NULL AND id IN (
                 SELECT r.id FROM runs r
                 WHERE r.tenant_id = $1 AND r.scheduled_at < $2 AND r.scheduled_at >= $5
                   AND r.finished_at < $3 AND r.finished_at IS NOT NULL
                   AND r.state IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
                   AND NOT EXISTS (
                       SELECT 1 FROM runs o WHERE o.task_id = r.task_id
                         AND o.scheduled_at = r.scheduled_at
                         AND o.state NOT IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
                         AND o.finished_at IS NULL LIMIT 1 OFFSET 0)
                   AND NOT EXISTS (
                       SELECT 1 FROM runs c WHERE c.chain_root_id = COALESCE(r.chain_root_id, r.id)
                         AND c.state NOT IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
                         AND c.finished_at IS NULL LIMIT 1 OFFSET 0)
                   AND NOT EXISTS (
                       SELECT 1 FROM runs c WHERE c.id = r.chain_root_id
                         AND c.state NOT IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
                         AND c.finished_at IS NULL LIMIT 1 OFFSET 0)
                 ORDER BY r.scheduled_at LIMIT $4 FOR UPDATE SKIP LOCKED)
             RETURNING scheduled_at",
    sqlite: "DELETE FROM runs WHERE id IN (
                 SELECT r.id FROM runs r
                 WHERE r.tenant_id = $1 AND r.scheduled_at < $2 AND r.scheduled_at >= $5
                   AND r.finished_at < $3 AND r.finished_at IS NOT NULL
                   AND r.state IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
                   AND NOT EXISTS (
                       SELECT 1 FROM runs o WHERE o.task_id = r.task_id
                         AND o.scheduled_at = r.scheduled_at
                         AND o.state NOT IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
                         AND o.finished_at IS NULL LIMIT 1 OFFSET 0)
                   AND NOT EXISTS (
                       SELECT 1 FROM runs c WHERE c.chain_root_id = COALESCE(r.chain_root_id, r.id)
                         AND c.state NOT IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
                         AND c.finished_at IS NULL LIMIT 1 OFFSET 0)
                   AND NOT EXISTS (
                       SELECT 1 FROM runs c WHERE c.id = r.chain_root_id
                         AND c.state NOT IN ('succeeded', 'failed', 'timed_out', 'lost', 'skipped', 'cancelled')
                         AND c.finished_at IS NULL LIMIT 1 OFFSET 0)
                 ORDER BY r.scheduled_at LIMIT $4)
             RETURNING scheduled_at",
};

/// The statement of `purge_alarm_events` that locks rows (on PostgreSQL; SQLite has one writer).
const PURGE_ALARM_EVENTS: Locking = Locking {
    postgres: "DELETE FROM alarm_events WHERE id IN (
                 SELECT id FROM alarm_events WHERE published_at < $1
                 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)",
    sqlite: "DELETE FROM alarm_events WHERE id IN (
                 SELECT id FROM alarm_events WHERE published_at < $1
                 ORDER BY id LIMIT $2)",
};

//! Rollups of finished runs and retention.
//!
//! A background pass of every engine node ([`run_loop`], [`Rollup::run_once`]) does two things
//! per tenant, each in short transactions of its own, never on the claim, dispatch or result
//! path:
//!
//! 1. **Rollup.** The tenant's *watermark* (`rollup_watermarks.rolled_before`) says that every
//!    minute scheduled before it is rolled up: `run_rollups` holds, per task and scheduled
//!    minute, the finished runs by final state and log-spaced histograms ([`Histogram`]) of
//!    their durations (start to finish) and lateness (due to start). A pass moves the
//!    watermark forward over minutes that can no longer change: older than
//!    [`RollupConfig::margin_ms`] and before the earliest scheduled minute still holding a run
//!    that is not final (so a run finishing late is counted when it finishes, once: its minute
//!    is rolled only then). Rows are written whole (upserts that replace), so rolling a minute
//!    again writes the same row. A node takes the tenant by a lease
//!    (`rollup_watermarks.lease_until`, [`RollupConfig::lease_ms`]): one node works on a
//!    tenant at a time, the others skip it. No transaction stays open while the runs are read
//!    (see [`Rollup::roll_tenant`]).
//! 2. **Retention.** Final runs that finished more than the tenant's `retention_ms` ago and
//!    whose minute is rolled up are deleted, [`RollupConfig::delete_batch`] per statement,
//!    each in its own transaction ([`Rollups::delete_expired_runs`](crate::store::Rollups::delete_expired_runs)).
//!    Runs that are not final are never deleted, nor final runs whose occurrence or chain
//!    still has a run that is not final.
//!
//! The statistics service reads rolled minutes from `run_rollups` and the rest from the runs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::types::Json;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::run::RunState;
use crate::store::{Result, RunRollup, RunSample, SampleCursor, Store};
use crate::task::TaskId;
use crate::tenant::{Tenant, TenantId};

/// A minute in milliseconds.
pub const MINUTE_MS: i64 = 60_000;

/// Histogram buckets per power of ten: bucket `i ≥ 1` holds values in
/// `[10^((i-1)/20), 10^(i/20))` ms, and reads back as the bucket's geometric middle, within
/// 6 % of any value in it (plus rounding to whole milliseconds).
pub const BUCKETS_PER_DECADE: f64 = 20.0;

/// The last bucket (values from about 10^10 ms, 115 days, on land in it).
pub const MAX_BUCKET: i64 = 200;

/// The start of the minute holding `ms`.
pub fn floor_minute(ms: i64) -> i64 {
    ms.div_euclid(MINUTE_MS) * MINUTE_MS
}

/// A log-spaced histogram of milliseconds: bucket 0 holds 0 (and negative values), bucket
/// `i ≥ 1` values in `[10^((i-1)/20), 10^(i/20))`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: BTreeMap<i64, i64>,
}

impl Histogram {
    /// The bucket of `ms`.
    pub fn bucket_of(ms: i64) -> i64 {
        if ms <= 0 {
            return 0;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
        let i = ((ms as f64).log10() * BUCKETS_PER_DECADE).floor() as i64 + 1;
        i.clamp(1, MAX_BUCKET)
    }

    /// What bucket `i` reads back as: its geometric middle, rounded to whole milliseconds.
    pub fn value_of(i: i64) -> i64 {
        if i <= 0 {
            return 0;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
        let v = 10f64.powf((i as f64 - 0.5) / BUCKETS_PER_DECADE).round() as i64;
        v
    }

    /// Counts one value.
    pub fn add(&mut self, ms: i64) {
        *self.counts.entry(Self::bucket_of(ms)).or_insert(0) += 1;
    }

    /// Adds a stored (sparse) histogram.
    pub fn merge_sparse(&mut self, sparse: &[[i64; 2]]) {
        for &[i, n] in sparse {
            if n > 0 {
                *self.counts.entry(i.clamp(0, MAX_BUCKET)).or_insert(0) += n;
            }
        }
    }

    /// The stored form: `[bucket, count]` pairs of the non-empty buckets, in bucket order.
    pub fn to_sparse(&self) -> Vec<[i64; 2]> {
        self.counts
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| [*i, *n])
            .collect()
    }

    /// How many values it counts.
    pub fn len(&self) -> i64 {
        self.counts.values().sum()
    }

    /// Whether it counts nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `p`th percentile (nearest rank), as the value of the bucket holding that rank;
    /// `None` when empty.
    pub fn percentile(&self, p: i64) -> Option<i64> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        let rank = (p * n + 99).div_euclid(100).clamp(1, n);
        let mut seen = 0;
        for (i, c) in &self.counts {
            seen += c;
            if seen >= rank {
                return Some(Self::value_of(*i));
            }
        }
        self.counts.keys().next_back().map(|i| Self::value_of(*i))
    }
}

/// How the rollup and retention pass works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupConfig {
    /// How often a pass runs.
    pub interval_ms: i64,
    /// Minutes are rolled up only once they are this far in the past (runs are inserted
    /// ahead of or at their scheduled time; this covers clocks of nodes a little apart).
    pub margin_ms: i64,
    /// At most this many minutes per tenant per pass.
    pub max_minutes: i64,
    /// Runs read per statement while rolling up.
    pub page: i64,
    /// A pass stops at the first whole minute after this many runs (a busier minute is
    /// read whole anyway).
    pub batch_runs: usize,
    /// Runs deleted per statement (each its own transaction).
    pub delete_batch: i64,
    /// At most this many delete statements per tenant per pass.
    pub max_delete_batches: usize,
    /// Published alarm events (the outbox) are deleted this long after they were published.
    pub alarm_event_keep_ms: i64,
    /// How long a node has a tenant's rollup to itself (it gives it back when the pass ends;
    /// after a crash another node takes the tenant once this has run out).
    pub lease_ms: i64,
}

impl Default for RollupConfig {
    fn default() -> Self {
        Self {
            interval_ms: 10_000,
            margin_ms: 5 * MINUTE_MS,
            max_minutes: 24 * 60,
            page: 10_000,
            batch_runs: 100_000,
            delete_batch: 1_000,
            max_delete_batches: 50,
            alarm_event_keep_ms: crate::tenant::DEFAULT_RETENTION_MS,
            lease_ms: MINUTE_MS,
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollupReport {
    /// Minutes rolled up (over all tenants).
    pub minutes: i64,
    /// Rollup rows written.
    pub rows: usize,
    /// Runs deleted by retention.
    pub deleted: u64,
    /// Published alarm events deleted.
    pub events_deleted: u64,
    /// Tenants another node was working on (skipped).
    pub skipped: usize,
    /// The largest distance from `now` to a tenant's watermark, in milliseconds.
    pub max_lag_ms: i64,
    /// Some tenant has more to roll up or delete than one pass does: the loop runs the next
    /// pass at once instead of after [`RollupConfig::interval_ms`].
    pub behind: bool,
}

/// The rollup and retention pass; see the module docs.
#[derive(Debug, Clone)]
pub struct Rollup {
    store: Arc<dyn Store>,
    config: RollupConfig,
}

impl Rollup {
    pub fn new(store: Arc<dyn Store>, config: RollupConfig) -> Self {
        Self { store, config }
    }

    /// One pass over every tenant: roll up what can no longer change, then delete what is
    /// past retention.
    pub async fn run_once(&self, now: i64) -> Result<RollupReport> {
        let tenants = {
            let mut tx = self.store.begin_read().await?;
            tx.list_tenants().await?
        };
        let mut report = RollupReport::default();
        for tenant in &tenants {
            let Some((watermark, minutes, rows)) = self.roll_tenant(tenant.id, now).await? else {
                report.skipped += 1;
                continue;
            };
            report.minutes += minutes;
            report.rows += rows;
            report.max_lag_ms = report.max_lag_ms.max(now - watermark);
            // A pass that stopped at its cap of minutes or runs leaves whole minutes that
            // could be rolled now (a minute held back by a run that is not final does not
            // count: rolling again would not move it).
            report.behind |= minutes > 0 && watermark < floor_minute(now - self.config.margin_ms);
            let (deleted, more) = self.delete_expired(tenant, watermark, now).await?;
            report.deleted += deleted;
            report.behind |= more;
        }
        report.events_deleted = self.purge_alarm_events(now).await?;
        crate::metrics::rollup_pass(report.deleted, report.max_lag_ms);
        Ok(report)
    }

    /// Deletes alarm events published more than [`RollupConfig::alarm_event_keep_ms`] ago,
    /// in batches; returns how many.
    pub async fn purge_alarm_events(&self, now: i64) -> Result<u64> {
        let before = now.saturating_sub(self.config.alarm_event_keep_ms);
        let mut deleted = 0;
        for _ in 0..self.config.max_delete_batches.max(1) {
            let mut tx = self.store.begin().await?;
            let n = tx
                .purge_alarm_events(before, self.config.delete_batch)
                .await?;
            tx.commit().await?;
            deleted += n;
            if i64::try_from(n).unwrap_or(i64::MAX) < self.config.delete_batch {
                break;
            }
        }
        Ok(deleted)
    }

    /// Rolls up a tenant's minutes that can no longer change, up to
    /// [`RollupConfig::max_minutes`] of them; returns the watermark after, the minutes rolled
    /// and the rows written, or `None` when another node is rolling the tenant up.
    ///
    /// No transaction stays open while the runs are read (a busy minute is hundreds of
    /// thousands of them): an open transaction that has written holds back the cleanup of
    /// every dead row the hot path leaves. A short transaction takes the tenant for
    /// [`RollupConfig::lease_ms`], each page is read in a read-only transaction of its own,
    /// and a last short one writes the rows and moves the watermark only if it has not
    /// moved meanwhile (rows that replace: a minute rolled twice writes the same rows).
    pub async fn roll_tenant(
        &self,
        tenant: TenantId,
        now: i64,
    ) -> Result<Option<(i64, i64, usize)>> {
        let target = floor_minute(now - self.config.margin_ms);
        let until = now.saturating_add(self.config.lease_ms);
        let (watermark, mut end) = {
            let mut tx = self.store.begin().await?;
            let initial = match tx.oldest_run_scheduled(tenant).await? {
                Some(s) => floor_minute(s).min(target),
                None => target,
            };
            let watermark = tx.init_rollup_watermark(tenant, initial, now).await?;
            let mut end = target.min(
                watermark.saturating_add(self.config.max_minutes.max(1).saturating_mul(MINUTE_MS)),
            );
            if end > watermark
                && let Some(s) = tx
                    .oldest_unfinished_scheduled(tenant, watermark, end)
                    .await?
            {
                end = end.min(floor_minute(s));
            }
            if end > watermark && !tx.lease_rollup(tenant, watermark, now, until).await? {
                tx.commit().await?;
                return Ok(None);
            }
            tx.commit().await?;
            (watermark, end)
        };
        if end <= watermark {
            return Ok(Some((watermark, 0, 0)));
        }
        let rolled = self.read_and_write(tenant, watermark, &mut end, now).await;
        if !matches!(rolled, Ok(Some(_))) {
            // Stopped or overtaken: the lease goes back now rather than when it runs out.
            // Best effort; the lease runs out by itself.
            if let Ok(mut tx) = self.store.begin().await
                && tx.release_rollup_lease(tenant, until).await.is_ok()
            {
                let _ = tx.commit().await;
            }
        }
        Ok(rolled?.map(|rows| (end, (end - watermark) / MINUTE_MS, rows)))
    }

    /// Reads the tenant's final runs of `watermark..end` page by page (and moves `end` back to
    /// a whole minute once [`RollupConfig::batch_runs`] are read), then writes their rollup
    /// rows and moves the watermark to `end`; the rows written, or `None` when the watermark
    /// had moved.
    async fn read_and_write(
        &self,
        tenant: TenantId,
        watermark: i64,
        end: &mut i64,
        now: i64,
    ) -> Result<Option<usize>> {
        let mut samples: Vec<RunSample> = Vec::new();
        let mut after = None;
        let page = self.config.page.max(1);
        loop {
            let got = {
                let mut tx = self.store.begin_read().await?;
                tx.rollup_samples(tenant, watermark, *end, after, page)
                    .await?
            };
            let full = i64::try_from(got.len()).unwrap_or(i64::MAX) >= page;
            if let Some(last) = got.last() {
                after = Some(SampleCursor {
                    scheduled_at: last.scheduled_at,
                    id: last.id,
                });
            }
            samples.extend(got);
            if !full {
                break;
            }
            if samples.len() >= self.config.batch_runs
                && let Some(last) = samples.last()
            {
                let cut = floor_minute(last.scheduled_at);
                if cut > watermark {
                    *end = cut;
                    samples.retain(|s| s.scheduled_at < cut);
                    break;
                }
            }
        }
        let rows = aggregate(tenant, &samples);
        let mut tx = self.store.begin().await?;
        if !tx
            .advance_rollup_watermark(tenant, watermark, *end, now)
            .await?
        {
            return Ok(None);
        }
        tx.upsert_run_rollups(&rows).await?;
        tx.upsert_tenant_rollups(&merge_tasks(&rows)).await?;
        tx.commit().await?;
        Ok(Some(rows.len()))
    }

    /// Deletes the tenant's final runs past its retention whose minute is rolled up (before
    /// `watermark`), in batches; returns how many, and whether it stopped at its cap of
    /// batches with more to delete.
    pub async fn delete_expired(
        &self,
        tenant: &Tenant,
        watermark: i64,
        now: i64,
    ) -> Result<(u64, bool)> {
        let finished_before = now.saturating_sub(tenant.retention_ms);
        // Runs scheduled after their finish (cancelled ahead of time) wait until their
        // scheduled time is past the retention too: the scan stays on old rows.
        let scheduled_before = watermark.min(finished_before);
        let mut deleted = 0;
        let mut more = false;
        // Each batch starts where the one before stopped (at its latest scheduled time: runs of
        // that instant it left are read again). A run kept or skipped before that is looked at
        // again by the next pass.
        let mut from = i64::MIN;
        for _ in 0..self.config.max_delete_batches.max(1) {
            let mut tx = self.store.begin().await?;
            let batch = tx
                .delete_expired_runs(
                    tenant.id,
                    finished_before,
                    scheduled_before,
                    from,
                    self.config.delete_batch,
                )
                .await?;
            tx.commit().await?;
            deleted += batch.deleted;
            from = batch.latest_scheduled_at.unwrap_or(from);
            more = i64::try_from(batch.deleted).unwrap_or(i64::MAX) >= self.config.delete_batch;
            if !more {
                break;
            }
        }
        if deleted > 0 {
            tracing::debug!(
                tenant = tenant.id.0,
                deleted,
                "finished runs past retention deleted"
            );
        }
        Ok((deleted, more))
    }
}

/// One rollup row being summed: finished runs by final state (in [`RunRollup::by_state`]'s
/// order) and the two histograms.
#[derive(Default)]
struct Acc {
    states: [i64; 6],
    duration: Histogram,
    lateness: Histogram,
}

impl Acc {
    fn into_row(self, tenant_id: TenantId, task_id: TaskId, minute: i64) -> RunRollup {
        let [succeeded, failed, timed_out, lost, skipped, cancelled] = self.states;
        RunRollup {
            tenant_id,
            task_id,
            minute,
            succeeded,
            failed,
            timed_out,
            lost,
            skipped,
            cancelled,
            duration_hist: Json(self.duration.to_sparse()),
            lateness_hist: Json(self.lateness.to_sparse()),
        }
    }
}

/// The rollup rows of `samples` (all of one tenant), one per task and scheduled minute.
pub fn aggregate(tenant: TenantId, samples: &[RunSample]) -> Vec<RunRollup> {
    let mut per: BTreeMap<(i64, TaskId), Acc> = BTreeMap::new();
    for s in samples {
        let acc = per
            .entry((floor_minute(s.scheduled_at), s.task_id))
            .or_default();
        let slot = match s.state {
            RunState::Succeeded => 0,
            RunState::Failed => 1,
            RunState::TimedOut => 2,
            RunState::Lost => 3,
            RunState::Skipped => 4,
            RunState::Cancelled => 5,
            _ => continue,
        };
        acc.states[slot] += 1;
        if let Some(started) = s.started_at {
            acc.lateness.add((started - s.due_at).max(0));
            if let Some(finished) = s.finished_at {
                acc.duration.add((finished - started).max(0));
            }
        }
    }
    per.into_iter()
        .map(|((minute, task_id), a)| a.into_row(tenant, task_id, minute))
        .collect()
}

/// The tenant-wide rows of per-task `rows` (all of one tenant): one per minute, counts added
/// and histograms merged, `task_id` 0.
pub fn merge_tasks(rows: &[RunRollup]) -> Vec<RunRollup> {
    let mut per: BTreeMap<(TenantId, i64), Acc> = BTreeMap::new();
    for r in rows {
        let acc = per.entry((r.tenant_id, r.minute)).or_default();
        let counts = [
            r.succeeded,
            r.failed,
            r.timed_out,
            r.lost,
            r.skipped,
            r.cancelled,
        ];
        for (slot, n) in acc.states.iter_mut().zip(counts) {
            *slot += n;
        }
        acc.duration.merge_sparse(&r.duration_hist);
        acc.lateness.merge_sparse(&r.lateness_hist);
    }
    per.into_iter()
        .map(|((tenant_id, minute), a)| a.into_row(tenant_id, TaskId(0), minute))
        .collect()
}

/// Runs a rollup and retention pass every [`RollupConfig::interval_ms`] until `stop`.
pub async fn run_loop(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    mut stop: watch::Receiver<bool>,
) {
    let rollup = Rollup::new(store, RollupConfig::default());
    let every = Duration::from_millis(u64::try_from(rollup.config.interval_ms).unwrap_or(10_000));
    // Catching up (a backlog after an outage or an upgrade) runs passes back to back, each
    // still in short transactions; a pass with nothing left waits for the interval.
    let mut behind = false;
    loop {
        let pause = if behind { Duration::ZERO } else { every };
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(pause) => {}
        }
        behind = match rollup.run_once(clock.now_ms()).await {
            Ok(r) => {
                if r.minutes > 0 || r.deleted > 0 {
                    tracing::debug!(?r, "rollup and retention");
                }
                r.behind
            }
            Err(e) => {
                tracing::warn!(error = %e, "rollup and retention pass failed");
                false
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_values_read_back_within_six_percent() {
        for v in [1_i64, 2, 5, 17, 99, 100, 250, 1_000, 12_345, 3_600_000] {
            let back = Histogram::value_of(Histogram::bucket_of(v));
            let err = (back - v).abs() as f64 / v as f64;
            assert!(
                err <= 0.061 || (back - v).abs() <= 1,
                "{v} read back as {back}"
            );
        }
        assert_eq!(Histogram::bucket_of(0), 0);
        assert_eq!(Histogram::value_of(0), 0);
        assert_eq!(Histogram::bucket_of(-5), 0);
    }

    #[test]
    fn histogram_percentiles_use_the_nearest_rank_and_merge() {
        let mut h = Histogram::default();
        for v in 1..=100 {
            h.add(v * 10);
        }
        let p50 = h.percentile(50).unwrap();
        assert!((470..=530).contains(&p50), "p50 {p50}");
        let p99 = h.percentile(99).unwrap();
        assert!((930..=1_050).contains(&p99), "p99 {p99}");
        let mut merged = Histogram::default();
        merged.merge_sparse(&h.to_sparse());
        merged.merge_sparse(&h.to_sparse());
        assert_eq!(merged.len(), 200);
        assert_eq!(merged.percentile(50), h.percentile(50));
        assert_eq!(Histogram::default().percentile(50), None);
    }

    #[test]
    fn minutes_floor_towards_the_past() {
        assert_eq!(floor_minute(59_999), 0);
        assert_eq!(floor_minute(60_000), 60_000);
        assert_eq!(floor_minute(-1), -60_000);
    }
}

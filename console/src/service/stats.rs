//! Statistics of a tenant's (or one task's) finished runs over time buckets: runs by final
//! state, success rate, duration and lateness percentiles.
//!
//! Runs are bucketed by their scheduled time. Whole minutes before the tenant's rollup
//! watermark (see [`mthpt_engine::rollup`]) are read from the per-minute rollups (a task's
//! own rows, or for the whole tenant the rows of all its tasks merged, one per minute): counts by
//! state and success rates stay exact, duration and lateness percentiles come from log-spaced
//! histograms (within 6 % or 1 ms, the bucket is marked `approximate`), and a rolled minute
//! counts in the bucket holding its start. The other minutes (recent ones, and the partial
//! minutes at the range's edges) are read from the runs themselves: percentiles there are
//! computed from at most [`MAX_RUN_SAMPLES`] runs, so the work per request is bounded; a range
//! whose unrolled part holds more is refused with a message saying so, never answered from part
//! of the data.

use std::collections::BTreeMap;

use mthpt_engine::rollup::{Histogram, MINUTE_MS, floor_minute};
use mthpt_engine::run::RunState;
use mthpt_engine::store::{MAX_RUN_SAMPLES, RunRollup, RunSample, RunSampleQuery};
use mthpt_engine::task::TaskId;

use super::Services;
use crate::service::access::{Action, Caller, tenant_access};
use crate::service::error::{ApiError, ApiResult};

/// The most buckets one answer has.
pub const MAX_BUCKETS: i64 = 1_000;
/// The shortest bucket: one minute.
pub const MIN_BUCKET_MS: i64 = 60_000;

/// p50, p95 and p99 of a set of milliseconds (nearest rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    pub p50: i64,
    pub p95: i64,
    pub p99: i64,
}

impl Percentiles {
    /// `None` for an empty set.
    pub fn of(mut values: Vec<i64>) -> Option<Percentiles> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let rank = |p: usize| {
            let n = values.len();
            let i = (p * n).div_ceil(100).clamp(1, n) - 1;
            values[i]
        };
        Some(Percentiles {
            p50: rank(50),
            p95: rank(95),
            p99: rank(99),
        })
    }
}

/// The figures of one bucket (or of the whole range).
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// Start of the bucket (epoch ms).
    pub start: i64,
    pub runs: u64,
    /// Final state → runs.
    pub by_state: BTreeMap<&'static str, u64>,
    /// Succeeded among the runs that ran to an outcome (succeeded, failed, timed out, lost);
    /// `None` when there were none. Skipped and cancelled runs do not count.
    pub success_rate: Option<f64>,
    /// From start to finish.
    pub duration_ms: Option<Percentiles>,
    /// From due to start.
    pub lateness_ms: Option<Percentiles>,
    /// The percentiles come (in part) from rolled-up minutes' histograms: within 6 % or 1 ms.
    pub approximate: bool,
}

/// The answer: totals over the whole range and one bucket per `bucket_ms`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub from: i64,
    pub to: i64,
    pub bucket_ms: i64,
    pub task_id: Option<TaskId>,
    pub total: Bucket,
    pub buckets: Vec<Bucket>,
}

impl Percentiles {
    /// p50, p95 and p99 of a histogram; `None` when it is empty.
    pub fn of_histogram(h: &Histogram) -> Option<Percentiles> {
        Some(Percentiles {
            p50: h.percentile(50)?,
            p95: h.percentile(95)?,
            p99: h.percentile(99)?,
        })
    }
}

/// Figures of the samples, all of which belong to the bucket starting at `start`.
pub fn bucket(start: i64, samples: &[&RunSample]) -> Bucket {
    bucket_with_rollups(start, samples, &[])
}

/// Figures of the samples and rolled-up minutes, all of which belong to the bucket starting
/// at `start`. Percentiles are exact when there are no rolled-up minutes.
pub fn bucket_with_rollups(start: i64, samples: &[&RunSample], rollups: &[&RunRollup]) -> Bucket {
    let mut by_state = BTreeMap::new();
    let (mut succeeded, mut outcomes) = (0_u64, 0_u64);
    let mut count = |state: RunState, n: u64| {
        *by_state.entry(state.as_str()).or_insert(0) += n;
        match state {
            RunState::Succeeded => {
                succeeded += n;
                outcomes += n;
            }
            RunState::Failed | RunState::TimedOut | RunState::Lost => outcomes += n,
            _ => {}
        }
    };
    let mut runs = 0_u64;
    let mut durations = Vec::new();
    let mut lateness = Vec::new();
    for s in samples {
        count(s.state, 1);
        runs += 1;
        if let Some(started) = s.started_at {
            lateness.push((started - s.due_at).max(0));
            if let Some(finished) = s.finished_at {
                durations.push((finished - started).max(0));
            }
        }
    }
    for r in rollups {
        for (state, n) in r.by_state() {
            let n = u64::try_from(n).unwrap_or(0);
            count(state, n);
            runs += n;
        }
    }
    let approximate = !rollups.is_empty();
    let (duration_ms, lateness_ms) = if approximate {
        let mut d = Histogram::default();
        let mut l = Histogram::default();
        for r in rollups {
            d.merge_sparse(&r.duration_hist.0);
            l.merge_sparse(&r.lateness_hist.0);
        }
        durations.iter().for_each(|v| d.add(*v));
        lateness.iter().for_each(|v| l.add(*v));
        (Percentiles::of_histogram(&d), Percentiles::of_histogram(&l))
    } else {
        (Percentiles::of(durations), Percentiles::of(lateness))
    };
    Bucket {
        start,
        runs,
        by_state,
        success_rate: (outcomes > 0).then(|| succeeded as f64 / outcomes as f64),
        duration_ms,
        lateness_ms,
        approximate,
    }
}

/// Buckets `samples` (scheduled in `from..to`) by `bucket_ms`; every bucket of the range is
/// listed, empty ones included.
pub fn summarise(
    samples: &[RunSample],
    from: i64,
    to: i64,
    bucket_ms: i64,
    task_id: Option<TaskId>,
) -> Stats {
    summarise_with_rollups(samples, &[], from, to, bucket_ms, task_id)
}

/// Like [`summarise`], with rolled-up minutes too (each counted in the bucket holding its
/// minute's start).
pub fn summarise_with_rollups(
    samples: &[RunSample],
    rollups: &[RunRollup],
    from: i64,
    to: i64,
    bucket_ms: i64,
    task_id: Option<TaskId>,
) -> Stats {
    let n = usize::try_from((to - from + bucket_ms - 1) / bucket_ms).unwrap_or(0);
    let mut per_bucket: Vec<Vec<&RunSample>> = vec![Vec::new(); n];
    let mut rolled_per_bucket: Vec<Vec<&RunRollup>> = vec![Vec::new(); n];
    for s in samples {
        if let Ok(i) = usize::try_from((s.scheduled_at - from) / bucket_ms)
            && let Some(b) = per_bucket.get_mut(i)
        {
            b.push(s);
        }
    }
    for r in rollups {
        if let Ok(i) = usize::try_from((r.minute - from) / bucket_ms)
            && let Some(b) = rolled_per_bucket.get_mut(i)
        {
            b.push(r);
        }
    }
    let all: Vec<&RunSample> = samples.iter().collect();
    let all_rolled: Vec<&RunRollup> = rollups.iter().collect();
    Stats {
        from,
        to,
        bucket_ms,
        task_id,
        total: bucket_with_rollups(from, &all, &all_rolled),
        buckets: per_bucket
            .iter()
            .zip(&rolled_per_bucket)
            .enumerate()
            .map(|(i, (b, r))| bucket_with_rollups(from + i as i64 * bucket_ms, b, r))
            .collect(),
    }
}

/// Statistics of a tenant's runs scheduled in `from..to`, optionally of one task.
pub async fn stats(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    task_id: Option<TaskId>,
    from: i64,
    to: i64,
    bucket_ms: i64,
) -> ApiResult<Stats> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    if to <= from {
        return Err(ApiError::field("to", "must be after from"));
    }
    if bucket_ms < MIN_BUCKET_MS {
        return Err(ApiError::field(
            "bucket_seconds",
            format!("must be at least {} seconds", MIN_BUCKET_MS / 1000),
        ));
    }
    if (to - from) / bucket_ms >= MAX_BUCKETS {
        return Err(ApiError::field(
            "bucket_seconds",
            format!(
                "the range would have more than {MAX_BUCKETS} buckets; choose longer buckets or a shorter range"
            ),
        ));
    }
    let mut tx = services.read().await?;
    if let Some(id) = task_id {
        tx.get_task(tenant.id, id).await?;
    }
    // Whole minutes of the range before the watermark come from the rollups; the rest
    // (partial minutes at the edges, minutes not rolled up yet) from the runs.
    let watermark = tx.rollup_watermark(tenant.id).await?.unwrap_or(i64::MIN);
    let rolled_from = floor_minute(from.saturating_add(MINUTE_MS - 1));
    let rolled_to = floor_minute(to).min(watermark);
    let (rollups, raw) = if rolled_to > rolled_from {
        // One task: its rows; the whole tenant: the merged rows, one per minute.
        let rows = match task_id {
            Some(_) => {
                tx.run_rollups(tenant.id, task_id, rolled_from, rolled_to)
                    .await?
            }
            None => tx.tenant_rollups(tenant.id, rolled_from, rolled_to).await?,
        };
        (rows, vec![(from, rolled_from), (rolled_to, to)])
    } else {
        (Vec::new(), vec![(from, to)])
    };
    let mut samples = Vec::new();
    for (scheduled_from, scheduled_before) in raw {
        if scheduled_before <= scheduled_from {
            continue;
        }
        let query = RunSampleQuery {
            task_id,
            scheduled_from,
            scheduled_before,
            limit: MAX_RUN_SAMPLES,
        };
        samples.extend(tx.run_samples(tenant.id, &query).await?);
        if samples.len() as i64 >= MAX_RUN_SAMPLES {
            return Err(ApiError::field(
                "from",
                format!(
                    "the range holds {MAX_RUN_SAMPLES} or more finished runs not rolled up yet; narrow it or choose one task"
                ),
            ));
        }
    }
    Ok(summarise_with_rollups(
        &samples, &rollups, from, to, bucket_ms, task_id,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(state: RunState, scheduled_at: i64, late: i64, took: i64) -> RunSample {
        RunSample {
            id: mthpt_engine::run::RunId(scheduled_at),
            task_id: TaskId(1),
            state,
            scheduled_at,
            due_at: scheduled_at,
            started_at: Some(scheduled_at + late),
            finished_at: Some(scheduled_at + late + took),
        }
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let p = Percentiles::of((1..=100).collect()).unwrap();
        assert_eq!((p.p50, p.p95, p.p99), (50, 95, 99));
        let one = Percentiles::of(vec![7]).unwrap();
        assert_eq!((one.p50, one.p99), (7, 7));
        assert_eq!(Percentiles::of(Vec::new()), None);
    }

    #[test]
    fn buckets_count_states_rates_and_timings() {
        let samples = vec![
            sample(RunState::Succeeded, 0, 10, 100),
            sample(RunState::Failed, 10, 30, 300),
            sample(RunState::Skipped, 20, 0, 0),
            sample(RunState::Succeeded, 60_000, 5, 50),
        ];
        let stats = summarise(&samples, 0, 180_000, 60_000, None);
        assert_eq!(stats.buckets.len(), 3);
        let first = &stats.buckets[0];
        assert_eq!(first.runs, 3);
        assert_eq!(first.by_state.get("failed"), Some(&1));
        assert_eq!(first.success_rate, Some(0.5), "skipped runs do not count");
        assert_eq!(first.duration_ms.unwrap().p99, 300);
        assert_eq!(first.lateness_ms.unwrap().p50, 10);
        assert_eq!(stats.buckets[1].start, 60_000);
        assert_eq!(stats.buckets[1].success_rate, Some(1.0));
        assert_eq!(stats.buckets[2].runs, 0);
        assert_eq!(stats.buckets[2].success_rate, None);
        assert_eq!(stats.total.runs, 4);
    }

    #[test]
    fn rolled_and_raw_minutes_add_up_in_one_range() {
        use mthpt_engine::store::RunRollup;
        use mthpt_engine::tenant::TenantId;
        use sqlx::types::Json;

        let mut d = Histogram::default();
        for v in [100, 200, 300] {
            d.add(v);
        }
        let rolled = RunRollup {
            tenant_id: TenantId(1),
            task_id: TaskId(1),
            minute: 0,
            succeeded: 2,
            failed: 1,
            timed_out: 0,
            lost: 0,
            skipped: 4,
            cancelled: 0,
            duration_hist: Json(d.to_sparse()),
            lateness_hist: Json(d.to_sparse()),
        };
        let raw = vec![
            sample(RunState::Succeeded, 60_000, 5, 400),
            sample(RunState::Failed, 180_000, 5, 50),
        ];
        let stats = summarise_with_rollups(&raw, &[rolled], 0, 240_000, 120_000, None);
        let first = &stats.buckets[0];
        assert_eq!(first.runs, 8, "7 rolled up and 1 raw");
        assert_eq!(first.by_state.get("succeeded"), Some(&3));
        assert_eq!(first.by_state.get("skipped"), Some(&4));
        assert_eq!(first.success_rate, Some(0.75));
        assert!(first.approximate);
        let p99 = first.duration_ms.unwrap().p99;
        assert!((376..=424).contains(&p99), "p99 {p99} within 6% of 400");
        let second = &stats.buckets[1];
        assert!(!second.approximate, "a bucket of raw runs only stays exact");
        assert_eq!(second.duration_ms.unwrap().p50, 50);
        assert_eq!(stats.total.runs, 9);
        assert!(stats.total.approximate);
    }
}

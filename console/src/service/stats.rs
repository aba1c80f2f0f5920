//! Statistics of a tenant's (or one task's) finished runs over time buckets: runs by final
//! state, success rate, duration and lateness percentiles.
//!
//! Runs are bucketed by their scheduled time. Percentiles are computed here from at most
//! [`MAX_RUN_SAMPLES`] runs read in one query, so the work per request is bounded; a range
//! holding more is refused with a message saying so, never answered from part of the data.

use std::collections::BTreeMap;

use mthpt_engine::run::RunState;
use mthpt_engine::store::{MAX_RUN_SAMPLES, RunSample, RunSampleQuery};
use mthpt_engine::task::TaskId;

use super::Services;
use crate::api::auth::{Action, Caller, tenant_access};
use crate::api::error::{ApiError, ApiResult};

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

/// Figures of the samples, all of which belong to the bucket starting at `start`.
pub fn bucket(start: i64, samples: &[&RunSample]) -> Bucket {
    let mut by_state = BTreeMap::new();
    let (mut succeeded, mut outcomes) = (0_u64, 0_u64);
    let mut durations = Vec::new();
    let mut lateness = Vec::new();
    for s in samples {
        *by_state.entry(s.state.as_str()).or_insert(0) += 1;
        match s.state {
            RunState::Succeeded => {
                succeeded += 1;
                outcomes += 1;
            }
            RunState::Failed | RunState::TimedOut | RunState::Lost => outcomes += 1,
            _ => {}
        }
        if let Some(started) = s.started_at {
            lateness.push((started - s.due_at).max(0));
            if let Some(finished) = s.finished_at {
                durations.push((finished - started).max(0));
            }
        }
    }
    Bucket {
        start,
        runs: samples.len() as u64,
        by_state,
        success_rate: (outcomes > 0).then(|| succeeded as f64 / outcomes as f64),
        duration_ms: Percentiles::of(durations),
        lateness_ms: Percentiles::of(lateness),
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
    let n = usize::try_from((to - from + bucket_ms - 1) / bucket_ms).unwrap_or(0);
    let mut per_bucket: Vec<Vec<&RunSample>> = vec![Vec::new(); n];
    for s in samples {
        if let Ok(i) = usize::try_from((s.scheduled_at - from) / bucket_ms)
            && let Some(b) = per_bucket.get_mut(i)
        {
            b.push(s);
        }
    }
    let all: Vec<&RunSample> = samples.iter().collect();
    Stats {
        from,
        to,
        bucket_ms,
        task_id,
        total: bucket(from, &all),
        buckets: per_bucket
            .iter()
            .enumerate()
            .map(|(i, b)| bucket(from + i as i64 * bucket_ms, b))
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
    let query = RunSampleQuery {
        task_id,
        scheduled_from: from,
        scheduled_before: to,
        limit: MAX_RUN_SAMPLES,
    };
    let samples = tx.run_samples(tenant.id, &query).await?;
    if samples.len() as i64 >= MAX_RUN_SAMPLES {
        return Err(ApiError::field(
            "from",
            format!(
                "the range holds {MAX_RUN_SAMPLES} or more finished runs; narrow it or choose one task"
            ),
        ));
    }
    Ok(summarise(&samples, from, to, bucket_ms, task_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(state: RunState, scheduled_at: i64, late: i64, took: i64) -> RunSample {
        RunSample {
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
}

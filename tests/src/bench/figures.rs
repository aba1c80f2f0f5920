//! The figures of a benchmark, computed from the runs table, the expected occurrences of each
//! task's schedule and what the executors saw. Pure functions over plain facts, so they are
//! tested without a database.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

/// One run of the measured window, as read back from the database.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RunFact {
    pub task_id: i64,
    pub scheduled_at: i64,
    pub attempt: i32,
    pub shard_index: i32,
    pub trigger_kind: String,
    pub state: String,
    pub dispatched_at: Option<i64>,
}

/// An occurrence: a task and the instant its schedule fires it.
pub type Occurrence = (i64, i64);

/// What one execution on an executor was for: task, scheduled instant, attempt, shard.
pub type ExecutionKey = (i64, i64, u32, u32);

/// Lateness percentiles in milliseconds (dispatch time minus scheduled time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Lateness {
    pub p50: i64,
    pub p99: i64,
    pub p999: i64,
    pub max: i64,
}

impl Lateness {
    /// Percentiles of `samples` (nearest rank); all zero when there are none.
    pub fn of(mut samples: Vec<i64>) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let rank = |q: f64| {
            let n = samples.len();
            let i = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
            samples[i]
        };
        Self {
            p50: rank(0.50),
            p99: rank(0.99),
            p999: rank(0.999),
            max: samples[samples.len() - 1],
        }
    }
}

/// The correctness figures of a window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Correctness {
    /// Occurrences that reached an executor more than once, plus stored runs sharing one
    /// occurrence key (task, scheduled time, attempt, shard).
    pub duplicates: u64,
    /// Expected occurrences with no succeeded run and none still to come: no run at all, or only
    /// runs that ended otherwise (failed, timed out, lost, …).
    pub missed: u64,
    /// Expected occurrences with no succeeded run yet but a run not final after the drain
    /// (pending, claimed or running): the backlog of an overloaded cluster, not a loss.
    pub unfinished: u64,
    /// Scheduled first attempts dispatched more than `delay_limit_ms` after their time.
    pub delayed: u64,
    /// Runs that ended timed out.
    pub timed_out: u64,
    pub lateness: Lateness,
}

/// Whether a run is the scheduled first attempt of its occurrence (not a retry, recovery,
/// manual trigger or chain child), the run whose lateness counts.
fn is_first_scheduled(r: &RunFact) -> bool {
    r.trigger_kind == "schedule" && r.attempt == 1 && r.shard_index == 0
}

/// Computes the correctness figures of the runs scheduled in the window. `expected` are the
/// occurrences the schedules call for in the window; `executions` how often each occurrence
/// key started on an executor.
pub fn correctness(
    runs: &[RunFact],
    expected: &HashSet<Occurrence>,
    executions: &HashMap<ExecutionKey, u32>,
    delay_limit_ms: i64,
) -> Correctness {
    let mut keys: HashMap<(i64, i64, i32, i32), u32> = HashMap::with_capacity(runs.len());
    let mut succeeded: HashSet<Occurrence> = HashSet::with_capacity(runs.len());
    let mut open: HashSet<Occurrence> = HashSet::new();
    let mut late = Vec::with_capacity(runs.len());
    let mut out = Correctness::default();
    for r in runs {
        *keys
            .entry((r.task_id, r.scheduled_at, r.attempt, r.shard_index))
            .or_default() += 1;
        if r.state == "succeeded" {
            succeeded.insert((r.task_id, r.scheduled_at));
        }
        if matches!(r.state.as_str(), "pending" | "claimed" | "running") {
            open.insert((r.task_id, r.scheduled_at));
        }
        if r.state == "timed_out" {
            out.timed_out += 1;
        }
        if is_first_scheduled(r)
            && let Some(at) = r.dispatched_at
        {
            let l = at - r.scheduled_at;
            if l > delay_limit_ms {
                out.delayed += 1;
            }
            late.push(l);
        }
    }
    let stored_twice: u64 = keys.values().map(|&n| u64::from(n.saturating_sub(1))).sum();
    let started_twice: u64 = executions
        .iter()
        .filter(|((task, at, _, _), _)| expected.contains(&(*task, *at)))
        .map(|(_, &n)| u64::from(n.saturating_sub(1)))
        .sum();
    out.duplicates = stored_twice + started_twice;
    for o in expected.iter().filter(|o| !succeeded.contains(o)) {
        if open.contains(o) {
            out.unfinished += 1;
        } else {
            out.missed += 1;
        }
    }
    out.lateness = Lateness::of(late);
    out
}

/// The longest wait, after a node was killed at `kill_ms`, of the runs it held claimed then
/// (`held`: run id → scheduled time) until another node dispatched them (`runs`: run id → last
/// dispatch time, if any, and whether the run is final). A run due after the kill counts from
/// its due time. A run that is final without a recorded dispatch had been sent by the killed
/// node just before it died (its result came back through another node): it needed no refire.
/// `None` when a held run never fired again.
pub fn refire_after_kill(
    kill_ms: i64,
    held: &[(i64, i64)],
    runs: &HashMap<i64, (Option<i64>, bool)>,
) -> Option<i64> {
    let mut worst = 0;
    for (id, scheduled_at) in held {
        match runs.get(id).copied() {
            Some((Some(at), _)) => worst = worst.max(at - (*scheduled_at).max(kill_ms)),
            Some((None, true)) => {}
            _ => return None,
        }
    }
    Some(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(task: i64, at: i64, state: &str, dispatched: Option<i64>) -> RunFact {
        RunFact {
            task_id: task,
            scheduled_at: at,
            attempt: 1,
            shard_index: 0,
            trigger_kind: "schedule".to_owned(),
            state: state.to_owned(),
            dispatched_at: dispatched,
        }
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let l = Lateness::of((1..=1000).collect());
        assert_eq!((l.p50, l.p99, l.p999, l.max), (500, 990, 999, 1000));
        assert_eq!(Lateness::of(vec![]), Lateness::default());
        assert_eq!(Lateness::of(vec![7]).p999, 7);
    }

    #[test]
    fn an_expected_occurrence_without_a_succeeded_run_is_missed_unless_a_run_is_still_open() {
        let expected: HashSet<Occurrence> = [(1, 100), (1, 200), (2, 100), (3, 100)].into();
        let runs = vec![
            run(1, 100, "succeeded", Some(101)),
            run(1, 200, "running", Some(203)),
            run(3, 100, "lost", Some(100)),
        ];
        let c = correctness(&runs, &expected, &HashMap::new(), 1_000);
        assert_eq!((c.missed, c.unfinished), (2, 1));
        assert_eq!(c.duplicates, 0);
        assert_eq!(c.lateness.max, 3);
    }

    #[test]
    fn an_occurrence_started_twice_on_executors_is_a_duplicate() {
        let expected: HashSet<Occurrence> = [(1, 100)].into();
        let runs = vec![run(1, 100, "succeeded", Some(100))];
        let executions = HashMap::from([((1, 100, 1, 0), 2), ((9, 5, 1, 0), 3)]);
        let c = correctness(&runs, &expected, &executions, 1_000);
        assert_eq!(
            c.duplicates, 1,
            "executions outside the window do not count"
        );
    }

    #[test]
    fn late_first_attempts_count_as_delayed_and_timeouts_are_counted() {
        let expected: HashSet<Occurrence> = [(1, 0), (2, 0)].into();
        let runs = vec![
            run(1, 0, "succeeded", Some(1_500)),
            run(2, 0, "timed_out", Some(10)),
        ];
        let c = correctness(&runs, &expected, &HashMap::new(), 1_000);
        assert_eq!((c.delayed, c.timed_out, c.missed), (1, 1, 1));
    }

    #[test]
    fn refire_counts_from_the_kill_or_the_due_time_whichever_is_later() {
        let held = [(1, 900), (2, 1_500)];
        let dispatched = HashMap::from([(1, (Some(3_000), true)), (2, (Some(3_100), true))]);
        assert_eq!(refire_after_kill(1_000, &held, &dispatched), Some(2_000));
        let never = HashMap::from([(1, (Some(3_000), true)), (2, (None, false))]);
        assert_eq!(refire_after_kill(1_000, &held, &never), None);
        assert_eq!(refire_after_kill(1_000, &[], &never), Some(0));
    }

    #[test]
    fn a_held_run_sent_just_before_the_kill_needs_no_refire() {
        let held = [(1, 900), (2, 1_500)];
        let runs = HashMap::from([(1, (None, true)), (2, (Some(1_900), true))]);
        assert_eq!(refire_after_kill(1_000, &held, &runs), Some(400));
    }
}

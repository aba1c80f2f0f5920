//! The `max-sustainable` scenario's step logic: which rate each step offers, which part of a step
//! is measured, whether a step held, and the highest rate held. Pure functions, tested without a
//! database; the harness in `mod.rs` runs the steps.

use serde::Serialize;

use super::figures::{Lateness, RunFact};

/// How the offered rate rises and when a step counts as held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPolicy {
    /// Runs per second offered by the first step.
    pub start_rate: u64,
    /// Each step offers this many times the previous step's rate (at least one run/s more).
    pub growth: f64,
    /// How long each step lasts, ms.
    pub step_ms: i64,
    /// A step holds while the p99 lateness of its measured part stays at or below this, ms.
    pub p99_limit_ms: i64,
    /// ... and its completed rate stays at or above this share of the offered rate.
    pub min_completed_share: f64,
}

impl StepPolicy {
    /// The rate of the step after one offering `rate`.
    pub fn next_rate(&self, rate: u64) -> u64 {
        let grown = (rate as f64 * self.growth).round();
        let grown = if grown.is_finite() && grown > 0.0 {
            grown as u64
        } else {
            0
        };
        grown.max(rate + 1)
    }

    /// The measured part of a step that starts at `start`: from a third into the step (the load
    /// settles after the rate rose) to `p99_limit_ms` before its end, so every run of the part
    /// that is not dispatched when the step ends is already later than the limit.
    pub fn measured(&self, start: i64) -> (i64, i64) {
        (
            start + self.step_ms / 3,
            start + self.step_ms - self.p99_limit_ms,
        )
    }

    /// Whether a step fits before `deadline` when it starts at `start`.
    pub fn fits(&self, start: i64, deadline: i64) -> bool {
        start + self.step_ms <= deadline
    }

    /// Whether the measured part is at least a second long.
    pub fn is_valid(&self) -> bool {
        let (from, until) = self.measured(0);
        until - from >= 1_000 && self.start_rate > 0 && self.growth >= 1.0
    }

    /// Judges a step from its figures.
    pub fn verdict(&self, offered_per_sec: f64, completed_per_sec: f64, p99_ms: i64) -> Verdict {
        if p99_ms > self.p99_limit_ms {
            Verdict::Late
        } else if completed_per_sec < offered_per_sec * self.min_completed_share {
            Verdict::Behind
        } else {
            Verdict::Held
        }
    }
}

/// The tasks (fixed rate, every `every_ms`) that offer `rate` runs per second.
pub fn tasks_for_rate(rate: u64, every_ms: i64) -> usize {
    let every = u64::try_from(every_ms.max(1)).unwrap_or(1);
    usize::try_from((rate.saturating_mul(every) + 500) / 1_000).unwrap_or(usize::MAX)
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// p99 lateness at or below the limit and the runs completed as fast as offered.
    Held,
    /// p99 lateness above the limit.
    Late,
    /// Fewer runs completed than offered (by more than the policy allows).
    Behind,
}

/// Lateness of the scheduled first attempts of a step's measured part, as known at `now_ms`: a
/// run not dispatched yet counts as late as it is now (a lower bound of its lateness).
pub fn step_lateness(runs: &[RunFact], now_ms: i64) -> Lateness {
    Lateness::of(
        runs.iter()
            .filter(|r| r.trigger_kind == "schedule" && r.attempt == 1 && r.shard_index == 0)
            .map(|r| r.dispatched_at.unwrap_or(now_ms) - r.scheduled_at)
            .collect(),
    )
}

/// The figures of one step, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    /// The rate the step was set up to offer (runs/s).
    pub target_per_sec: u64,
    /// Occurrences the schedules call for in the measured part, per second.
    pub offered_per_sec: f64,
    /// Runs that succeeded with their result recorded in the measured part, per second.
    pub completed_per_sec: f64,
    /// Of the scheduled first attempts of the measured part (runs not dispatched when the step
    /// ended count as late as they were then).
    pub lateness_ms: Lateness,
    pub wal_bytes_per_run: f64,
    pub pg_cpu_us_per_run: Option<f64>,
    pub engine_cpu_us_per_run: f64,
    pub wrapper_cpu_us_per_run: f64,
    /// The measured part's length, seconds.
    pub measured_s: f64,
    pub verdict: Verdict,
}

/// The highest offered rate of the steps that held before the first that did not (0 when the
/// first step did not hold).
pub fn max_sustainable(steps: &[StepReport]) -> f64 {
    steps
        .iter()
        .take_while(|s| s.verdict == Verdict::Held)
        .map(|s| s.offered_per_sec)
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> StepPolicy {
        StepPolicy {
            start_rate: 1_000,
            growth: 1.25,
            step_ms: 30_000,
            p99_limit_ms: 1_000,
            min_completed_share: 0.9,
        }
    }

    fn step(offered: f64, verdict: Verdict) -> StepReport {
        StepReport {
            target_per_sec: offered as u64,
            offered_per_sec: offered,
            completed_per_sec: offered,
            lateness_ms: Lateness::default(),
            wal_bytes_per_run: 0.0,
            pg_cpu_us_per_run: None,
            engine_cpu_us_per_run: 0.0,
            wrapper_cpu_us_per_run: 0.0,
            measured_s: 19.0,
            verdict,
        }
    }

    fn first_attempt(at: i64, dispatched: Option<i64>) -> RunFact {
        RunFact {
            task_id: 1,
            scheduled_at: at,
            attempt: 1,
            shard_index: 0,
            trigger_kind: "schedule".to_owned(),
            state: "succeeded".to_owned(),
            dispatched_at: dispatched,
        }
    }

    #[test]
    fn rates_grow_by_the_factor_and_by_at_least_one() {
        let p = policy();
        let rates: Vec<u64> = std::iter::successors(Some(1_000), |&r| Some(p.next_rate(r)))
            .take(4)
            .collect();
        assert_eq!(rates, [1_000, 1_250, 1_563, 1_954]);
        let flat = StepPolicy { growth: 1.0, ..p };
        assert_eq!(flat.next_rate(7), 8);
    }

    #[test]
    fn a_step_is_measured_from_a_third_in_to_the_limit_before_its_end() {
        let p = policy();
        assert_eq!(p.measured(100_000), (110_000, 129_000));
        assert!(p.is_valid());
        assert!(
            !StepPolicy {
                step_ms: 2_000,
                ..p
            }
            .is_valid()
        );
        assert!(p.fits(0, 30_000));
        assert!(!p.fits(1, 30_000));
    }

    #[test]
    fn a_step_holds_only_on_time_and_keeping_up() {
        let p = policy();
        assert_eq!(p.verdict(1_000.0, 995.0, 1_000), Verdict::Held);
        assert_eq!(p.verdict(1_000.0, 1_000.0, 1_001), Verdict::Late);
        assert_eq!(p.verdict(1_000.0, 850.0, 20), Verdict::Behind);
    }

    #[test]
    fn runs_not_yet_dispatched_count_as_late_as_they_are_now() {
        let mut runs: Vec<RunFact> = (0..99).map(|i| first_attempt(i, Some(i + 5))).collect();
        runs.push(first_attempt(50, None));
        let mut retry = first_attempt(0, Some(90_000));
        retry.attempt = 2;
        runs.push(retry);
        let l = step_lateness(&runs, 2_050);
        assert_eq!((l.p50, l.p99, l.max), (5, 5, 2_000));
        runs.push(first_attempt(60, None));
        assert_eq!(step_lateness(&runs, 2_050).p99, 1_990);
    }

    #[test]
    fn the_highest_rate_held_before_the_first_failure_is_the_max() {
        let steps = [
            step(1_000.0, Verdict::Held),
            step(1_250.0, Verdict::Held),
            step(1_563.0, Verdict::Late),
        ];
        assert_eq!(max_sustainable(&steps), 1_250.0);
        assert_eq!(max_sustainable(&steps[2..]), 0.0);
        assert_eq!(max_sustainable(&[]), 0.0);
    }

    #[test]
    fn the_rate_is_offered_by_tasks_of_the_period() {
        assert_eq!(tasks_for_rate(1_250, 1_000), 1_250);
        assert_eq!(tasks_for_rate(1_250, 2_000), 2_500);
        assert_eq!(tasks_for_rate(15, 100), 2);
    }
}

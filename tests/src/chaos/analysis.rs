//! The counts of a chaos run, from the handlers' own log cross-checked with the runs table.
//! Pure functions over plain facts, tested without processes or a database.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::handler_log::{HandlerLog, Start};
use crate::bench::figures::Lateness;

/// A run as the database has it at the end.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RunRow {
    pub id: i64,
    pub task_id: i64,
    pub scheduled_at: i64,
    pub due_at: i64,
    pub state: String,
    pub parent_run_id: Option<i64>,
    pub finished_at: Option<i64>,
}

/// Whether a run state is final.
pub fn is_final(state: &str) -> bool {
    !matches!(state, "pending" | "claimed" | "running")
}

/// A fault the suite injected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub kind: String,
    pub target: String,
    pub start_ms: i64,
    pub end_ms: i64,
    /// For a wrapper kill: its scripts still running when it died.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scripts_in_flight: Option<usize>,
}

/// A fault with the lateness of the occurrences scheduled just after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultFigures {
    #[serde(flatten)]
    pub fault: Fault,
    /// Occurrences scheduled while the fault lasted (`[start_ms, end_ms)`) and their largest
    /// lateness.
    pub occurrences_during: usize,
    pub max_lateness_during_ms: Option<i64>,
    /// Occurrences scheduled in `[end_ms, end_ms + after_ms)` and their largest lateness.
    pub after_ms: i64,
    pub occurrences_after: usize,
    pub max_lateness_after_ms: Option<i64>,
}

/// Everything the analysis needs.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub log: HandlerLog,
    pub runs: Vec<RunRow>,
    /// The occurrences (task, scheduled_at) the schedules call for in the counted window.
    pub expected: HashSet<(i64, i64)>,
    /// Chain parent tasks.
    pub chain_parents: HashSet<i64>,
    /// Wrapper processes the suite killed, and when.
    pub killed_wrappers: HashMap<i64, i64>,
    /// Wrapper processes the suite cut off from every engine (longer than the executor
    /// timeout, so engines declare them lost and they stop their scripts), from when until when.
    pub cut_off_wrappers: HashMap<i64, Vec<(i64, i64)>>,
    /// Script pids still alive when the facts were gathered.
    pub alive_pids: HashSet<i64>,
    pub faults: Vec<Fault>,
    /// When the database was read.
    pub read_at: i64,
    /// A result or child that should exist by `read_at` is counted missing only if its cause
    /// happened at least this long before.
    pub settle_ms: i64,
    /// Non-final runs due longer than this before `read_at` are stuck.
    pub stuck_after_ms: i64,
    /// How long after each fault its lateness is watched.
    pub after_fault_ms: i64,
}

/// The counts. Every field named as a violation must be 0 for the guarantees to hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counts {
    /// Occurrences the schedules call for in the counted window.
    pub expected: usize,
    /// Of those, started at least once.
    pub executed: usize,
    /// Handler starts in the log (every task, every time).
    pub starts: usize,
    pub ends_ok: usize,
    pub ends_failed: usize,
    /// Starts with no end line (killed with SIGKILL, or still running).
    pub starts_without_end: usize,
    /// Violation: starts of an occurrence beyond its first, except one recovery run per
    /// occurrence after its executor was killed and the first start's process was gone.
    pub duplicate_starts: usize,
    /// Recovery starts excused by that rule.
    pub recovery_starts: usize,
    /// Of the duplicate starts, those of a run id that had already started.
    pub same_run_id_restarts: usize,
    /// Violation: starts while another start of the same occurrence was still running.
    pub concurrent_duplicate_starts: usize,
    /// Violation: the handler ended with exit 0 but the run's final state is not succeeded.
    pub lost_results: usize,
    /// Violation: expected occurrences that never started.
    pub misses: usize,
    /// Violation: runs not final although due more than `stuck_after_ms` before the end.
    pub stuck: usize,
    /// Violation: chain parents that succeeded whose child never started.
    pub chain_children_missing: usize,
    /// First start minus scheduled time, of the expected occurrences.
    pub lateness_ms: Lateness,
    pub faults: Vec<FaultFigures>,
    /// Cross-check: runs the database has `succeeded` whose handler never logged a start
    /// (a result recorded for the wrong run; reported, not counted as a violation).
    pub succeeded_without_start: usize,
    /// Lateness of the expected occurrences scheduled from `after_ms` after the last fault's
    /// end to the window's end: whether the cluster is back to normal (none: no fault, or no
    /// occurrence there).
    pub settled_lateness_ms: Option<Lateness>,
    /// Final states of every run in the database.
    pub runs_by_state: BTreeMap<String, usize>,
    /// Log lines that could not be read.
    pub unreadable_log_lines: u64,
}

impl Counts {
    /// The sum of the violation counts.
    pub fn violations(&self) -> usize {
        self.duplicate_starts
            + self.concurrent_duplicate_starts
            + self.lost_results
            + self.misses
            + self.stuck
            + self.chain_children_missing
    }
}

/// When a start's process ended, as far as can be told: its end line; else, if it still lives,
/// never; else, if its wrapper was killed, the kill (the latest moment it is known to have
/// been under a live executor); else unknown (SIGKILLed: counted in `starts_without_end`, and
/// not taken as overlapping anything).
fn end_of(start: &Start, facts: &Facts) -> Option<i64> {
    if let Some(end) = facts.log.ends.get(&start.pid) {
        return Some(end.at);
    }
    if facts.alive_pids.contains(&start.pid) {
        return Some(i64::MAX);
    }
    facts.killed_wrappers.get(&start.wrapper_pid).copied()
}

/// Computes the counts.
pub fn analyse(facts: &Facts) -> Counts {
    let mut c = Counts {
        expected: facts.expected.len(),
        starts: facts.log.starts.len(),
        unreadable_log_lines: facts.log.unreadable_lines,
        ..Counts::default()
    };
    for s in &facts.log.starts {
        match facts.log.ends.get(&s.pid) {
            Some(e) if e.status == 0 => c.ends_ok += 1,
            Some(_) => c.ends_failed += 1,
            None => c.starts_without_end += 1,
        }
    }

    // Starts grouped by occurrence, in start order.
    let mut by_occurrence: HashMap<(i64, i64, i64), Vec<&Start>> = HashMap::new();
    for s in &facts.log.starts {
        by_occurrence
            .entry((s.task_id, s.scheduled_at, s.shard))
            .or_default()
            .push(s);
    }
    let mut first_start: HashMap<(i64, i64), i64> = HashMap::new();
    for starts in by_occurrence.values_mut() {
        starts.sort_by_key(|s| (s.at, s.run_id));
        let key = (starts[0].task_id, starts[0].scheduled_at);
        let first = first_start.entry(key).or_insert(starts[0].at);
        *first = (*first).min(starts[0].at);
        let mut excused = false;
        let mut run_ids = HashSet::new();
        for (i, s) in starts.iter().enumerate() {
            let earlier = &starts[..i];
            let restarted = !run_ids.insert(s.run_id);
            if earlier.is_empty() {
                continue;
            }
            let overlaps = earlier
                .iter()
                .any(|e| end_of(e, facts).is_some_and(|end| end > s.at));
            if overlaps {
                c.concurrent_duplicate_starts += 1;
            }
            // One recovery after an executor's death — killed, or cut off from every engine
            // and declared lost — once every earlier start's process is known to be gone.
            let after_death = earlier.iter().any(|e| {
                let killed = facts
                    .killed_wrappers
                    .get(&e.wrapper_pid)
                    .is_some_and(|&killed| killed <= s.at);
                let cut_off = facts.log.ends.contains_key(&e.pid)
                    && facts
                        .cut_off_wrappers
                        .get(&e.wrapper_pid)
                        .is_some_and(|cuts| {
                            cuts.iter().any(|&(from, to)| e.at <= to && from <= s.at)
                        });
                killed || cut_off
            });
            if !excused && after_death && !overlaps {
                excused = true;
                c.recovery_starts += 1;
            } else {
                c.duplicate_starts += 1;
                if restarted {
                    c.same_run_id_restarts += 1;
                }
            }
        }
    }

    let mut lateness = Vec::new();
    for occurrence in &facts.expected {
        if let Some(at) = first_start.get(occurrence) {
            c.executed += 1;
            lateness.push(at - occurrence.1);
        }
    }
    c.misses = c.expected - c.executed;
    c.lateness_ms = Lateness::of(lateness);

    let runs: HashMap<i64, &RunRow> = facts.runs.iter().map(|r| (r.id, r)).collect();
    for r in &facts.runs {
        *c.runs_by_state.entry(r.state.clone()).or_default() += 1;
        if !is_final(&r.state) && r.due_at < facts.read_at - facts.stuck_after_ms {
            c.stuck += 1;
        }
    }
    let settled = facts.read_at - facts.settle_ms;
    for s in &facts.log.starts {
        let Some(end) = facts.log.ends.get(&s.pid) else {
            continue;
        };
        if end.status != 0 || end.at > settled {
            continue;
        }
        if runs.get(&s.run_id).is_none_or(|r| r.state != "succeeded") {
            c.lost_results += 1;
        }
    }

    let started_runs: HashSet<i64> = facts.log.starts.iter().map(|s| s.run_id).collect();
    c.succeeded_without_start = facts
        .runs
        .iter()
        .filter(|r| r.state == "succeeded" && !started_runs.contains(&r.id))
        .count();
    let mut children: HashMap<i64, Vec<i64>> = HashMap::new();
    for r in &facts.runs {
        if let Some(parent) = r.parent_run_id {
            children.entry(parent).or_default().push(r.id);
        }
    }
    // Per occurrence of a chain parent: once one of its runs succeeded (a late success
    // recorded next to a recovery counts once), one of its runs has a child that started.
    let mut parent_occurrences: HashMap<(i64, i64), (bool, bool)> = HashMap::new();
    for r in facts
        .runs
        .iter()
        .filter(|r| facts.chain_parents.contains(&r.task_id))
    {
        let o = parent_occurrences
            .entry((r.task_id, r.scheduled_at))
            .or_default();
        o.0 |= r.state == "succeeded" && r.finished_at.is_some_and(|f| f <= settled);
        o.1 |= children
            .get(&r.id)
            .is_some_and(|kids| kids.iter().any(|k| started_runs.contains(k)));
    }
    c.chain_children_missing = parent_occurrences
        .values()
        .filter(|(done, has_child)| *done && !has_child)
        .count();

    let max_lateness_in = |from: i64, until: i64| {
        let within: Vec<&(i64, i64)> = facts
            .expected
            .iter()
            .filter(|(_, at)| *at >= from && *at < until)
            .collect();
        let max = within
            .iter()
            .filter_map(|o| first_start.get(o).map(|s| s - o.1))
            .max();
        (within.len(), max)
    };
    for fault in &facts.faults {
        let (occurrences_during, max_lateness_during_ms) =
            max_lateness_in(fault.start_ms, fault.end_ms);
        let (occurrences_after, max_lateness_after_ms) =
            max_lateness_in(fault.end_ms, fault.end_ms + facts.after_fault_ms);
        c.faults.push(FaultFigures {
            fault: fault.clone(),
            occurrences_during,
            max_lateness_during_ms,
            after_ms: facts.after_fault_ms,
            occurrences_after,
            max_lateness_after_ms,
        });
    }
    if let Some(last_end) = facts.faults.iter().map(|f| f.end_ms).max() {
        let settled: Vec<i64> = facts
            .expected
            .iter()
            .filter(|(_, at)| *at >= last_end + facts.after_fault_ms)
            .filter_map(|o| first_start.get(o).map(|s| s - o.1))
            .collect();
        if !settled.is_empty() {
            c.settled_lateness_ms = Some(Lateness::of(settled));
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::handler_log::End;

    fn start(run_id: i64, at: i64, pid: i64, wrapper_pid: i64) -> Start {
        Start {
            run_id,
            task_id: 1,
            scheduled_at: 1_000,
            attempt: 1,
            shard: 0,
            pid,
            wrapper_pid,
            at,
        }
    }

    fn run(id: i64, state: &str) -> RunRow {
        RunRow {
            id,
            task_id: 1,
            scheduled_at: 1_000,
            due_at: 1_000,
            state: state.to_owned(),
            parent_run_id: None,
            finished_at: Some(2_000),
        }
    }

    fn facts(starts: Vec<Start>, ends: &[(i64, i64, i64)], runs: Vec<RunRow>) -> Facts {
        Facts {
            log: HandlerLog {
                starts,
                ends: ends
                    .iter()
                    .map(|&(pid, at, status)| (pid, End { at, status }))
                    .collect(),
                unreadable_lines: 0,
            },
            runs,
            expected: [(1, 1_000)].into_iter().collect(),
            read_at: 100_000,
            settle_ms: 5_000,
            stuck_after_ms: 30_000,
            after_fault_ms: 10_000,
            ..Facts::default()
        }
    }

    #[test]
    fn a_clean_occurrence_has_no_violation() {
        let c = analyse(&facts(
            vec![start(5, 1_010, 100, 9)],
            &[(100, 1_300, 0)],
            vec![run(5, "succeeded")],
        ));
        assert_eq!((c.expected, c.executed, c.misses), (1, 1, 0));
        assert_eq!(c.violations(), 0, "{c:?}");
        assert_eq!(c.succeeded_without_start, 0);
        assert_eq!(c.lateness_ms.max, 10);
    }

    #[test]
    fn two_overlapping_starts_are_a_concurrent_duplicate_and_a_dropped_success_is_lost() {
        let c = analyse(&facts(
            vec![start(5, 1_010, 100, 9), start(5, 1_100, 101, 8)],
            &[(100, 1_300, 0), (101, 1_400, 0)],
            vec![run(5, "lost")],
        ));
        assert_eq!(c.duplicate_starts, 1);
        assert_eq!(c.same_run_id_restarts, 1);
        assert_eq!(c.concurrent_duplicate_starts, 1);
        assert_eq!(c.lost_results, 2);
    }

    #[test]
    fn one_recovery_after_a_killed_wrapper_whose_script_is_gone_is_excused() {
        let mut f = facts(
            vec![start(5, 1_010, 100, 9), start(6, 6_000, 101, 8)],
            &[(101, 6_300, 0)],
            vec![run(5, "lost"), run(6, "succeeded")],
        );
        f.killed_wrappers.insert(9, 2_000);
        let c = analyse(&f);
        assert_eq!(c.recovery_starts, 1);
        assert_eq!(c.violations(), 0, "{c:?}");
    }

    #[test]
    fn a_recovery_while_the_orphaned_script_still_runs_is_a_violation() {
        // The killed wrapper's script lived on and even succeeded, unreported.
        let mut f = facts(
            vec![start(5, 1_010, 100, 9), start(6, 6_000, 101, 8)],
            &[(100, 7_000, 0), (101, 6_300, 0)],
            vec![run(5, "lost"), run(6, "succeeded")],
        );
        f.killed_wrappers.insert(9, 2_000);
        let c = analyse(&f);
        assert_eq!(c.duplicate_starts, 1);
        assert_eq!(c.concurrent_duplicate_starts, 1);
        assert_eq!(c.lost_results, 1);
    }

    #[test]
    fn one_recovery_after_a_cut_off_wrapper_stopped_its_script_is_excused() {
        // Cut off from 1,500 to 11,500; its script was stopped (143) at 4,000; the recovery
        // started at 5,200 on the other wrapper, under the same run id.
        let mut f = facts(
            vec![start(5, 1_010, 100, 9), start(5, 5_200, 101, 8)],
            &[(100, 4_000, 143), (101, 5_500, 0)],
            vec![run(5, "succeeded")],
        );
        f.cut_off_wrappers.insert(9, vec![(1_500, 11_500)]);
        let c = analyse(&f);
        assert_eq!(c.recovery_starts, 1);
        assert_eq!(c.violations(), 0);
    }

    #[test]
    fn a_restart_next_to_a_cut_off_wrappers_live_script_is_a_violation() {
        // The cut-off wrapper did not stop its script before the other one started the run.
        let mut f = facts(
            vec![start(5, 1_010, 100, 9), start(5, 5_200, 101, 8)],
            &[(100, 6_000, 143), (101, 5_500, 0)],
            vec![run(5, "succeeded")],
        );
        f.cut_off_wrappers.insert(9, vec![(1_500, 11_500)]);
        let c = analyse(&f);
        assert_eq!(c.duplicate_starts, 1);
        assert_eq!(c.concurrent_duplicate_starts, 1);
    }

    #[test]
    fn a_second_start_without_any_fault_is_a_duplicate_even_after_a_cut_elsewhere() {
        let mut f = facts(
            vec![start(5, 1_010, 100, 9), start(5, 5_200, 101, 8)],
            &[(100, 2_000, 0), (101, 5_500, 0)],
            vec![run(5, "succeeded")],
        );
        // Wrapper 8 was cut off, not the one that ran the first start.
        f.cut_off_wrappers.insert(8, vec![(1_500, 11_500)]);
        assert_eq!(analyse(&f).duplicate_starts, 1);
    }

    #[test]
    fn a_parent_occurrence_needs_one_started_child_whichever_of_its_runs_succeeded() {
        // Attempt 1 was declared lost, its late success recorded; the recovery (attempt 2)
        // succeeded too and started the child.
        let mut first = run(7, "succeeded");
        first.task_id = 2;
        let mut recovery = run(8, "succeeded");
        recovery.task_id = 2;
        let mut child = run(9, "succeeded");
        child.task_id = 3;
        child.parent_run_id = Some(8);
        let mut f = facts(
            vec![start(9, 2_500, 100, 1)],
            &[(100, 2_600, 0)],
            vec![first, recovery, child],
        );
        f.chain_parents.insert(2);
        assert_eq!(analyse(&f).chain_children_missing, 0);
    }

    #[test]
    fn misses_stuck_runs_and_missing_chain_children_are_counted() {
        let mut f = facts(Vec::new(), &[], vec![run(5, "running")]);
        let mut parent = run(7, "succeeded");
        // Succeeded without its handler ever starting.
        assert_eq!(analyse(&f).succeeded_without_start, 0);
        parent.task_id = 2;
        f.runs.push(parent);
        f.chain_parents.insert(2);
        let c = analyse(&f);
        assert_eq!(c.misses, 1);
        assert_eq!(c.stuck, 1);
        assert_eq!(c.chain_children_missing, 1);
        assert_eq!(c.succeeded_without_start, 1);
        assert_eq!(c.runs_by_state.get("running"), Some(&1));
    }

    #[test]
    fn lateness_after_a_fault_covers_occurrences_scheduled_after_its_end() {
        let mut f = facts(
            vec![start(5, 3_500, 100, 9)],
            &[(100, 3_700, 0)],
            vec![run(5, "succeeded")],
        );
        f.faults.push(Fault {
            kind: "engine-pause".to_owned(),
            target: "engine-0".to_owned(),
            start_ms: 0,
            end_ms: 900,
            scripts_in_flight: None,
        });
        let c = analyse(&f);
        assert_eq!(c.faults[0].occurrences_during, 0);
        assert_eq!(c.faults[0].occurrences_after, 1);
        assert_eq!(c.faults[0].max_lateness_after_ms, Some(2_500));
        assert_eq!(
            c.settled_lateness_ms, None,
            "nothing scheduled 10 s after the fault"
        );
        f.after_fault_ms = 0;
        let c = analyse(&f);
        assert_eq!(c.settled_lateness_ms.map(|l| l.max), Some(2_500));
    }
}

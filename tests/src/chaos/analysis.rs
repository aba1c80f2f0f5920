//! The counts of a chaos run, from the handlers' own log cross-checked with the runs table,
//! and one [`ViolationDetail`] per violation counted: what the log, the runs table and the
//! faults say about that occurrence. Pure functions over plain facts, tested without processes
//! or a database.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::handler_log::{End, HandlerLog, Start};
use crate::bench::figures::Lateness;

/// A run as the database has it at the end.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, Serialize)]
pub struct RunRow {
    pub id: i64,
    pub task_id: i64,
    pub scheduled_at: i64,
    pub due_at: i64,
    pub state: String,
    pub parent_run_id: Option<i64>,
    pub finished_at: Option<i64>,
    /// When an engine sent it, for a scheduled first attempt (`None` for other runs, and for
    /// runs never sent).
    pub first_dispatched_at: Option<i64>,
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

/// How long before a fault an occurrence counts as scheduled during it.
pub const FAULT_LEAD_MS: i64 = 1_000;

/// A fault with the lateness of the occurrences scheduled just after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultFigures {
    #[serde(flatten)]
    pub fault: Fault,
    /// Occurrences scheduled while the fault lasted, or [`FAULT_LEAD_MS`] before it
    /// (`[start_ms - FAULT_LEAD_MS, end_ms)`: one due just before can be hit before its
    /// handler starts), and their largest lateness.
    pub occurrences_during: usize,
    pub max_lateness_during_ms: Option<i64>,
    /// Occurrences scheduled in `[end_ms, end_ms + after_ms)` and their largest lateness;
    /// `after_ms` is shortened to end [`FAULT_LEAD_MS`] before the next fault starts (what is
    /// late then is that fault's doing, counted in its `during`).
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
    /// Run ids whose result a wrapper logged as written to its spool (`result spooled`) or as
    /// found there after a restart: a restarted wrapper replays them, so they reach an engine.
    pub spooled_runs: HashSet<i64>,
    /// Wrapper processes the suite cut off from every engine (longer than the executor
    /// timeout, so engines declare them lost and they stop their scripts), from when until when.
    pub cut_off_wrappers: HashMap<i64, Vec<(i64, i64)>>,
    /// Scripts (run id, pid) still alive when the facts were gathered: the process with that
    /// pid runs that run (its environment names it; a reused pid does not count).
    pub alive: HashSet<(i64, i64)>,
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
    /// Not a violation: handlers that ended with exit 0 whose run is not succeeded, whose
    /// wrapper was SIGKILLed after that end and which no wrapper logged as spooled. The result
    /// never left the dead wrapper, so no engine could keep it.
    pub results_died_with_wrapper: usize,
    /// Run ids the wrappers logged as spooled.
    pub spooled_runs: usize,
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
    /// The same occurrences' lateness as the engines dispatched them (the database's
    /// `dispatched_at` of each scheduled first attempt): `settled_lateness_ms` without the
    /// HTTP hop and the wrapper starting the script's `bash`.
    pub settled_dispatch_lateness_ms: Option<Lateness>,
    /// Final states of every run in the database.
    pub runs_by_state: BTreeMap<String, usize>,
    /// Log lines that could not be read.
    pub unreadable_log_lines: u64,
    /// One entry per violation counted above, at most [`MAX_DETAILS`] shared out among the
    /// kinds.
    pub violation_details: Vec<ViolationDetail>,
    /// Violations beyond [`MAX_DETAILS`] without an entry.
    pub violation_details_left_out: usize,
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

/// At most this many violation details are reported.
pub const MAX_DETAILS: usize = 100;

/// Faults are listed with a violation when they overlap its span widened by this much on each
/// side.
pub const FAULT_MARGIN_MS: i64 = 5_000;

/// What a [`ViolationDetail`] is about: one per violation count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    DuplicateStart,
    ConcurrentDuplicateStart,
    LostResult,
    Miss,
    Stuck,
    ChainChildMissing,
}

/// One handler start, with its end line if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StartDetail {
    pub run_id: i64,
    pub attempt: i64,
    pub shard: i64,
    pub pid: i64,
    pub wrapper_pid: i64,
    pub at: i64,
    /// `null`: no end line (SIGKILLed, or still running).
    pub end: Option<End>,
    /// Still alive when the facts were gathered.
    pub running: bool,
}

/// The story of a lost result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LostResultDetail {
    pub run_id: i64,
    /// The run's final state (`null`: the runs table has no such run).
    pub state: Option<String>,
    /// When the handler ended with exit 0.
    pub end_at: i64,
    pub wrapper_pid: i64,
    /// When the suite killed that wrapper, if it did.
    pub wrapper_killed_at: Option<i64>,
    /// Whether the wrapper logged the result as spooled.
    pub spooled: bool,
}

/// One counted violation and the facts around it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ViolationDetail {
    pub kind: ViolationKind,
    pub task_id: i64,
    pub scheduled_at: i64,
    /// The run it is about: the extra start's, the lost result's, the stuck run, the chain
    /// parent run that succeeded (`null` for a miss).
    pub run_id: Option<i64>,
    /// The script it is about: the extra start's or the lost result's.
    pub pid: Option<i64>,
    /// Every handler start of the occurrence, in start order.
    pub starts: Vec<StartDetail>,
    /// The runs table's final rows of the occurrence and of every run id its starts name (for a
    /// chain parent, its children's too).
    pub runs: Vec<RunRow>,
    /// Run ids its starts name that the runs table does not have.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs_not_in_db: Vec<i64>,
    /// Faults overlapping its span (first start to last end, or the scheduled time and the
    /// runs' finish when nothing started) widened by [`FAULT_MARGIN_MS`] on each side.
    pub faults: Vec<Fault>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_result: Option<LostResultDetail>,
}

/// The starts of an occurrence, in start order, with their ends.
pub fn start_details(starts: &[&Start], facts: &Facts) -> Vec<StartDetail> {
    let mut out: Vec<StartDetail> = starts
        .iter()
        .map(|s| StartDetail {
            run_id: s.run_id,
            attempt: s.attempt,
            shard: s.shard,
            pid: s.pid,
            wrapper_pid: s.wrapper_pid,
            at: s.at,
            end: facts.log.end(s),
            running: facts.alive.contains(&(s.run_id, s.pid)),
        })
        .collect();
    out.sort_by_key(|s| (s.at, s.run_id, s.pid));
    out
}

/// The faults overlapping `[from - FAULT_MARGIN_MS, to + FAULT_MARGIN_MS]`.
pub fn faults_around(from: i64, to: i64, faults: &[Fault]) -> Vec<Fault> {
    let (from, to) = (from - FAULT_MARGIN_MS, to + FAULT_MARGIN_MS);
    faults
        .iter()
        .filter(|f| f.start_ms <= to && f.end_ms >= from)
        .cloned()
        .collect()
}

/// The detail of a violation of `kind` on occurrence (`task_id`, `scheduled_at`): `starts` are
/// its handler starts, `extra_runs` further run ids that belong to its story.
pub fn violation_detail(
    kind: ViolationKind,
    (task_id, scheduled_at): (i64, i64),
    starts: &[&Start],
    extra_runs: &[i64],
    facts: &Facts,
) -> ViolationDetail {
    let starts = start_details(starts, facts);
    let mut ids: Vec<i64> = facts
        .runs
        .iter()
        .filter(|r| r.task_id == task_id && r.scheduled_at == scheduled_at)
        .map(|r| r.id)
        .chain(starts.iter().map(|s| s.run_id))
        .chain(extra_runs.iter().copied())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let rows: HashMap<i64, &RunRow> = facts
        .runs
        .iter()
        .filter(|r| ids.binary_search(&r.id).is_ok())
        .map(|r| (r.id, r))
        .collect();
    let runs: Vec<RunRow> = ids
        .iter()
        .filter_map(|id| rows.get(id).map(|r| (*r).clone()))
        .collect();
    let runs_not_in_db: Vec<i64> = starts
        .iter()
        .map(|s| s.run_id)
        .filter(|id| !rows.contains_key(id))
        .collect::<std::collections::BTreeSet<i64>>()
        .into_iter()
        .collect();
    let (from, to) = match (starts.first(), starts.iter().map(end_or_start).max()) {
        (Some(first), Some(last)) => (first.at, last),
        _ => (
            scheduled_at,
            runs.iter()
                .filter_map(|r| r.finished_at)
                .fold(scheduled_at, i64::max),
        ),
    };
    ViolationDetail {
        kind,
        task_id,
        scheduled_at,
        run_id: None,
        pid: None,
        starts,
        runs,
        runs_not_in_db,
        faults: faults_around(from, to, &facts.faults),
        lost_result: None,
    }
}

/// A start's end if it has one, else its start.
fn end_or_start(s: &StartDetail) -> i64 {
    s.end.map_or(s.at, |e| e.at)
}

/// At most `max` details, shared out among the kinds in turn (each kind's earliest first), in
/// kind then scheduled order; and how many were left out.
pub fn cap_details(mut details: Vec<ViolationDetail>, max: usize) -> (Vec<ViolationDetail>, usize) {
    let total = details.len();
    details.sort_by_key(|d| (d.kind, d.scheduled_at, d.task_id, d.run_id, d.pid));
    let mut by_kind: BTreeMap<ViolationKind, std::collections::VecDeque<ViolationDetail>> =
        BTreeMap::new();
    for d in details {
        by_kind.entry(d.kind).or_default().push_back(d);
    }
    let mut kept = Vec::with_capacity(total.min(max));
    while kept.len() < max {
        let before = kept.len();
        for queue in by_kind.values_mut() {
            if kept.len() == max {
                break;
            }
            if let Some(d) = queue.pop_front() {
                kept.push(d);
            }
        }
        if kept.len() == before {
            break;
        }
    }
    kept.sort_by_key(|d| (d.kind, d.scheduled_at, d.task_id, d.run_id, d.pid));
    let left_out = total - kept.len();
    (kept, left_out)
}

/// When a start's process ended, as far as can be told: its end line; else, if it still lives,
/// never; else, if its wrapper was killed, the kill (the latest moment it is known to have
/// been under a live executor); else unknown (SIGKILLed: counted in `starts_without_end`, and
/// not taken as overlapping anything).
fn end_of(start: &Start, facts: &Facts) -> Option<i64> {
    if let Some(end) = facts.log.end(start) {
        return Some(end.at);
    }
    if facts.alive.contains(&(start.run_id, start.pid)) {
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
        spooled_runs: facts.spooled_runs.len(),
        ..Counts::default()
    };
    let mut details = Vec::new();
    for s in &facts.log.starts {
        match facts.log.end(s) {
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
        let all: &[&Start] = starts;
        for (i, s) in starts.iter().enumerate() {
            let earlier = &starts[..i];
            let restarted = !run_ids.insert(s.run_id);
            if earlier.is_empty() {
                continue;
            }
            let overlaps = earlier
                .iter()
                .any(|e| end_of(e, facts).is_some_and(|end| end > s.at));
            let detail = |kind| ViolationDetail {
                run_id: Some(s.run_id),
                pid: Some(s.pid),
                ..violation_detail(kind, (s.task_id, s.scheduled_at), all, &[], facts)
            };
            if overlaps {
                c.concurrent_duplicate_starts += 1;
                details.push(detail(ViolationKind::ConcurrentDuplicateStart));
            }
            // One recovery after an executor's death — killed, or cut off from every engine
            // and declared lost — once every earlier start's process is known to be gone.
            let after_death = earlier.iter().any(|e| {
                let killed = facts
                    .killed_wrappers
                    .get(&e.wrapper_pid)
                    .is_some_and(|&killed| killed <= s.at);
                let cut_off = facts.log.end(e).is_some()
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
                details.push(detail(ViolationKind::DuplicateStart));
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
    // Every start of an occurrence, whatever its shard.
    let mut occurrence_starts: HashMap<(i64, i64), Vec<&Start>> = HashMap::new();
    for s in &facts.log.starts {
        occurrence_starts
            .entry((s.task_id, s.scheduled_at))
            .or_default()
            .push(s);
    }
    let starts_of = |occurrence: (i64, i64)| {
        occurrence_starts
            .get(&occurrence)
            .map_or(&[][..], Vec::as_slice)
    };
    for &occurrence in &facts.expected {
        if !first_start.contains_key(&occurrence) {
            details.push(violation_detail(
                ViolationKind::Miss,
                occurrence,
                &[],
                &[],
                facts,
            ));
        }
    }
    c.lateness_ms = Lateness::of(lateness);

    let runs: HashMap<i64, &RunRow> = facts.runs.iter().map(|r| (r.id, r)).collect();
    for r in &facts.runs {
        *c.runs_by_state.entry(r.state.clone()).or_default() += 1;
        if !is_final(&r.state) && r.due_at < facts.read_at - facts.stuck_after_ms {
            c.stuck += 1;
            let occurrence = (r.task_id, r.scheduled_at);
            details.push(ViolationDetail {
                run_id: Some(r.id),
                ..violation_detail(
                    ViolationKind::Stuck,
                    occurrence,
                    starts_of(occurrence),
                    &[],
                    facts,
                )
            });
        }
    }
    let settled = facts.read_at - facts.settle_ms;
    for s in &facts.log.starts {
        let Some(end) = facts.log.end(s) else {
            continue;
        };
        if end.status != 0 || end.at > settled {
            continue;
        }
        let run = runs.get(&s.run_id);
        if run.is_some_and(|r| r.state == "succeeded") {
            continue;
        }
        let spooled = facts.spooled_runs.contains(&s.run_id);
        let wrapper_killed_at = facts.killed_wrappers.get(&s.wrapper_pid).copied();
        if !spooled && wrapper_killed_at.is_some_and(|killed| killed >= end.at) {
            c.results_died_with_wrapper += 1;
            continue;
        }
        c.lost_results += 1;
        let occurrence = (s.task_id, s.scheduled_at);
        details.push(ViolationDetail {
            run_id: Some(s.run_id),
            pid: Some(s.pid),
            lost_result: Some(LostResultDetail {
                run_id: s.run_id,
                state: run.map(|r| r.state.clone()),
                end_at: end.at,
                wrapper_pid: s.wrapper_pid,
                wrapper_killed_at,
                spooled,
            }),
            ..violation_detail(
                ViolationKind::LostResult,
                occurrence,
                starts_of(occurrence),
                &[],
                facts,
            )
        });
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
    #[derive(Default)]
    struct ParentOccurrence {
        /// Its first run that succeeded.
        succeeded: Option<i64>,
        has_started_child: bool,
        /// Its runs' children.
        children: Vec<i64>,
    }
    let mut parent_occurrences: HashMap<(i64, i64), ParentOccurrence> = HashMap::new();
    for r in facts
        .runs
        .iter()
        .filter(|r| facts.chain_parents.contains(&r.task_id))
    {
        let o = parent_occurrences
            .entry((r.task_id, r.scheduled_at))
            .or_default();
        if r.state == "succeeded" && r.finished_at.is_some_and(|f| f <= settled) {
            o.succeeded = Some(o.succeeded.map_or(r.id, |id| id.min(r.id)));
        }
        let kids = children.get(&r.id).map_or(&[][..], Vec::as_slice);
        o.has_started_child |= kids.iter().any(|k| started_runs.contains(k));
        o.children.extend(kids);
    }
    for (&occurrence, o) in &parent_occurrences {
        if let (Some(parent), false) = (o.succeeded, o.has_started_child) {
            c.chain_children_missing += 1;
            details.push(ViolationDetail {
                run_id: Some(parent),
                ..violation_detail(
                    ViolationKind::ChainChildMissing,
                    occurrence,
                    starts_of(occurrence),
                    &o.children,
                    facts,
                )
            });
        }
    }

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
            max_lateness_in(fault.start_ms - FAULT_LEAD_MS, fault.end_ms);
        let next_start = facts
            .faults
            .iter()
            .map(|f| f.start_ms)
            .filter(|&s| s >= fault.end_ms)
            .min()
            .unwrap_or(i64::MAX);
        let after_end = (fault.end_ms + facts.after_fault_ms)
            .min(next_start.saturating_sub(FAULT_LEAD_MS))
            .max(fault.end_ms);
        let (occurrences_after, max_lateness_after_ms) = max_lateness_in(fault.end_ms, after_end);
        c.faults.push(FaultFigures {
            fault: fault.clone(),
            occurrences_during,
            max_lateness_during_ms,
            after_ms: after_end - fault.end_ms,
            occurrences_after,
            max_lateness_after_ms,
        });
    }
    if let Some(last_end) = facts.faults.iter().map(|f| f.end_ms).max() {
        let dispatched: HashMap<(i64, i64), i64> = facts
            .runs
            .iter()
            .filter_map(|r| Some(((r.task_id, r.scheduled_at), r.first_dispatched_at?)))
            .collect();
        // Lateness of the settled window's occurrences, measured at `at` of each.
        let settled = |at: &dyn Fn(&(i64, i64)) -> Option<i64>| {
            let late: Vec<i64> = facts
                .expected
                .iter()
                .filter(|(_, scheduled)| *scheduled >= last_end + facts.after_fault_ms)
                .filter_map(|o| at(o).map(|t| t - o.1))
                .collect();
            (!late.is_empty()).then(|| Lateness::of(late))
        };
        c.settled_lateness_ms = settled(&|o| first_start.get(o).copied());
        c.settled_dispatch_lateness_ms = settled(&|o| dispatched.get(o).copied());
    }
    (c.violation_details, c.violation_details_left_out) = cap_details(details, MAX_DETAILS);
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
            first_dispatched_at: Some(1_001),
        }
    }

    fn facts(starts: Vec<Start>, ends: &[(i64, i64, i64)], runs: Vec<RunRow>) -> Facts {
        // Ends by script pid here; the log keys them by run id and pid.
        let ends = ends
            .iter()
            .map(|&(pid, at, status)| {
                let run_id = starts.iter().find(|s| s.pid == pid).map_or(0, |s| s.run_id);
                ((run_id, pid), End { at, status })
            })
            .collect();
        Facts {
            log: HandlerLog {
                starts,
                ends,
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
        assert_eq!(
            c.settled_dispatch_lateness_ms.map(|l| l.max),
            Some(1),
            "dispatched 1 ms after its scheduled time"
        );
    }

    #[test]
    fn lateness_after_a_fault_stops_where_the_next_fault_starts() {
        let mut f = facts(
            vec![start(5, 3_500, 100, 9)],
            &[(100, 3_700, 0)],
            vec![run(5, "succeeded")],
        );
        f.faults.push(fault("partition-wrapper", 0, 900));
        // The next fault starts 800 ms after the occurrence at 1,000, before its handler
        // could start: it is late because of that one.
        f.faults.push(fault("partition-wrapper", 1_800, 3_000));
        let c = analyse(&f);
        assert_eq!(c.faults[0].after_ms, 0);
        assert_eq!(c.faults[0].occurrences_after, 0);
        assert_eq!(c.faults[0].max_lateness_after_ms, None);
        assert_eq!(c.faults[1].occurrences_during, 1);
        assert_eq!(c.faults[1].max_lateness_during_ms, Some(2_500));
    }

    fn fault(kind: &str, start_ms: i64, end_ms: i64) -> Fault {
        Fault {
            kind: kind.to_owned(),
            target: "wrapper-0".to_owned(),
            start_ms,
            end_ms,
            scripts_in_flight: None,
        }
    }

    fn kinds(c: &Counts) -> Vec<ViolationKind> {
        c.violation_details.iter().map(|d| d.kind).collect()
    }

    #[test]
    fn each_violation_has_a_detail_with_the_starts_runs_and_faults_around_it() {
        let mut f = facts(
            vec![start(5, 1_010, 100, 9), start(5, 1_100, 101, 8)],
            &[(100, 1_300, 0), (101, 1_400, 0)],
            vec![run(5, "lost")],
        );
        f.faults = vec![
            fault("engine-pause", -10_000, -3_990),
            fault("engine-kill", 6_000, 7_000),
            fault("pg-restart", 6_401, 7_000),
        ];
        let c = analyse(&f);
        assert_eq!(c.violation_details.len(), c.violations());
        assert_eq!(c.violation_details_left_out, 0);
        assert_eq!(
            kinds(&c),
            vec![
                ViolationKind::DuplicateStart,
                ViolationKind::ConcurrentDuplicateStart,
                ViolationKind::LostResult,
                ViolationKind::LostResult,
            ]
        );
        let dup = &c.violation_details[0];
        assert_eq!((dup.task_id, dup.scheduled_at), (1, 1_000));
        assert_eq!((dup.run_id, dup.pid), (Some(5), Some(101)));
        assert_eq!(dup.starts.len(), 2);
        assert_eq!(dup.starts[0].pid, 100);
        assert_eq!(
            dup.starts[0].end,
            Some(End {
                at: 1_300,
                status: 0
            })
        );
        assert_eq!(dup.runs, vec![run(5, "lost")]);
        // From 1,010 - 5 s to 1,400 + 5 s, bounds included: the first two faults, not the third.
        let faults: Vec<&str> = dup.faults.iter().map(|f| f.kind.as_str()).collect();
        assert_eq!(faults, vec!["engine-pause", "engine-kill"]);
        assert!(dup.lost_result.is_none());
        let lost = &c.violation_details[2];
        assert_eq!(lost.pid, Some(100));
        assert_eq!(
            lost.lost_result,
            Some(LostResultDetail {
                run_id: 5,
                state: Some("lost".to_owned()),
                end_at: 1_300,
                wrapper_pid: 9,
                wrapper_killed_at: None,
                spooled: false,
            })
        );
        let json = serde_json::to_value(&c).expect("the counts serialise");
        assert_eq!(json["violation_details"][0]["kind"], "duplicate_start");
        assert_eq!(json["violation_details"][2]["lost_result"]["state"], "lost");
        assert_eq!(json["violation_details_left_out"], 0);
    }

    #[test]
    fn a_result_not_spooled_before_its_wrapper_was_killed_died_with_it() {
        let lost = |spooled: bool, killed_at: Option<i64>| {
            let mut f = facts(
                vec![start(5, 1_010, 100, 9)],
                &[(100, 1_300, 0)],
                vec![run(5, "lost")],
            );
            if spooled {
                f.spooled_runs.insert(5);
            }
            if let Some(at) = killed_at {
                f.killed_wrappers.insert(9, at);
            }
            let c = analyse(&f);
            (c.lost_results, c.results_died_with_wrapper)
        };
        // Spooled: a restarted wrapper replays it, so it must reach an engine.
        assert_eq!(lost(true, Some(1_350)), (1, 0));
        // Never spooled and its wrapper killed after the end: it never left the wrapper.
        assert_eq!(lost(false, Some(1_350)), (0, 1));
        // Never spooled, its wrapper never killed: the wrapper had it, and dropped it.
        assert_eq!(lost(false, None), (1, 0));
        // Ended after its wrapper was killed: an orphan nobody reports, still counted.
        assert_eq!(lost(false, Some(1_200)), (1, 0));
    }

    #[test]
    fn a_lost_result_details_its_wrappers_kill_and_spool() {
        let mut f = facts(
            vec![start(5, 1_010, 100, 9)],
            &[(100, 1_300, 0)],
            Vec::new(),
        );
        f.spooled_runs.insert(5);
        f.killed_wrappers.insert(9, 1_350);
        let c = analyse(&f);
        assert_eq!(c.spooled_runs, 1);
        let d = &c.violation_details[0];
        assert_eq!(d.runs_not_in_db, vec![5]);
        assert_eq!(
            d.lost_result,
            Some(LostResultDetail {
                run_id: 5,
                state: None,
                end_at: 1_300,
                wrapper_pid: 9,
                wrapper_killed_at: Some(1_350),
                spooled: true,
            })
        );
    }

    #[test]
    fn misses_stuck_runs_and_missing_children_are_detailed() {
        let mut stuck = run(5, "running");
        stuck.scheduled_at = 2_000;
        stuck.finished_at = None;
        let mut parent = run(7, "succeeded");
        parent.task_id = 2;
        let mut child = run(8, "pending");
        child.task_id = 3;
        child.parent_run_id = Some(7);
        child.due_at = 99_000;
        child.finished_at = None;
        let mut f = facts(
            vec![start(7, 1_010, 100, 9)],
            &[(100, 1_300, 0)],
            vec![stuck.clone(), parent.clone(), child.clone()],
        );
        // The start is the parent's (task 2): task 1's occurrence at 1,000 never started.
        f.log.starts[0].task_id = 2;
        f.chain_parents.insert(2);
        f.faults = vec![fault("wrapper-kill", 8_000, 8_100)];
        let c = analyse(&f);
        assert_eq!((c.misses, c.stuck, c.chain_children_missing), (1, 1, 1));
        assert_eq!(
            kinds(&c),
            vec![
                ViolationKind::Miss,
                ViolationKind::Stuck,
                ViolationKind::ChainChildMissing,
            ]
        );
        let miss = &c.violation_details[0];
        assert_eq!(
            (miss.task_id, miss.scheduled_at, miss.run_id),
            (1, 1_000, None)
        );
        assert!(miss.starts.is_empty() && miss.runs.is_empty());
        // Nothing started: from the scheduled time to the runs' finish, none here.
        assert!(miss.faults.is_empty());
        let stuck_detail = &c.violation_details[1];
        assert_eq!(stuck_detail.run_id, Some(5));
        assert_eq!(stuck_detail.runs, vec![stuck]);
        let chain = &c.violation_details[2];
        assert_eq!((chain.task_id, chain.run_id), (2, Some(7)));
        assert_eq!(chain.runs, vec![parent, child]);
        assert_eq!(chain.starts.len(), 1);
    }

    #[test]
    fn details_are_capped_sharing_out_among_the_kinds() {
        let detail = |kind, scheduled_at| ViolationDetail {
            kind,
            task_id: 1,
            scheduled_at,
            run_id: None,
            pid: None,
            starts: Vec::new(),
            runs: Vec::new(),
            runs_not_in_db: Vec::new(),
            faults: Vec::new(),
            lost_result: None,
        };
        let mut details: Vec<ViolationDetail> =
            (0..10).map(|i| detail(ViolationKind::Miss, i)).collect();
        details.push(detail(ViolationKind::LostResult, 50));
        details.push(detail(ViolationKind::Stuck, 60));
        details.push(detail(ViolationKind::Stuck, 61));
        let (kept, left_out) = cap_details(details.clone(), 5);
        assert_eq!(left_out, 8);
        let kept: Vec<(ViolationKind, i64)> =
            kept.iter().map(|d| (d.kind, d.scheduled_at)).collect();
        assert_eq!(
            kept,
            vec![
                (ViolationKind::LostResult, 50),
                (ViolationKind::Miss, 0),
                (ViolationKind::Miss, 1),
                (ViolationKind::Stuck, 60),
                (ViolationKind::Stuck, 61),
            ]
        );
        let (all, left_out) = cap_details(details, MAX_DETAILS);
        assert_eq!((all.len(), left_out), (13, 0));
    }
}

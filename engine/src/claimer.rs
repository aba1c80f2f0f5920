//! Claiming due runs: the first half of every engine node's loop.
//!
//! One [`Claimer::run_once`] is one transaction: claim a batch of runs of the node's groups
//! that are due within the look-ahead window (or whose claim expired), decide for each what
//! the task's policies say, and materialise each claimed scheduled occurrence's successor — so
//! every active task always has its next occurrence as a pending run, and a node that dies
//! after claiming leaves nothing behind that another node cannot pick up once the lease ends.
//!
//! Which runs a claim takes is the store's
//! [`Runs::claim_due_runs`](crate::store::Runs::claim_due_runs): fair between tenants (each
//! with due runs gets a share of every claim, by weight) and capacity-aware (no run of an app
//! whose live executors are full is taken); see docs/engine.md, "Claim order and capacity".
//!
//! Misfire (a scheduled occurrence found due more than the task's threshold ago — the engine
//! was down or paused, or no executor took it in time, whether or not a dispatch was tried — or
//! caught up behind such a predecessor that it was materialised before):
//! one decision per outage, made by the task's *latest* missed occurrence, so the outcome does
//! not depend on the order, batch or node in which the late runs are claimed:
//! - an earlier missed occurrence (a later occurrence of the task is already due, in whatever
//!   state) is superseded: skipped without an alarm and without a successor — except under
//!   `fire_all`, where it fires when fewer than `misfire_max_catch_up` schedule points follow it;
//! - the latest one applies the policy and raises the one misfire alarm:
//!   - `fire_once_now`: fire it now; the schedule continues from now (missed occurrences are
//!     dropped);
//!   - `skip`: skip it; the schedule continues from now;
//!   - `fire_all`: fire it and every occurrence missed since, oldest first; when more than
//!     `misfire_max_catch_up` are missed, only the most recent that many fire.
//!
//! A late occurrence never materialises a successor from its own scheduled time: that
//! successor would itself be from inside the outage.
//!
//! Overlap (a scheduled occurrence due while an earlier run of the task is still running):
//! `parallel` fires anyway; `skip` skips it; `serial` puts it back to wait (rechecked every
//! [`SERIAL_RECHECK_MS`]); `replace` cancels the earlier runs and fires.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::alarm::NewAlarm;
use crate::app::ExecutorId;
use crate::run::{
    ClaimedTransition, NewRun, Run, RunCompletion, RunFilter, RunId, RunState, TriggerKind,
};
use crate::schedule::Schedule;
use crate::store::{ClaimRequest, Completion, Result, Store, Tx};
use crate::task::{MisfirePolicy, OverlapPolicy, Routing, Task, TaskId};

/// How often a run waiting behind its predecessor (overlap policy `serial`) looks again.
pub const SERIAL_RECHECK_MS: i64 = 500;
/// A run that started this much later than it was due is taken to have waited for its app's
/// capacity: its result signals the nodes to claim (the capacity it frees may be taken at once).
pub const LATE_START_MS: i64 = 100;
/// The most missed occurrences `fire_all` looks through.
const MAX_MISSED_SCAN: usize = 100_000;
/// Runs read per page while looking for a later occurrence of a late one's task.
const LATER_PAGE: i64 = 200;
/// Pages of a task's earlier runs looked through to name an outage.
const OUTAGE_SCAN_PAGES: usize = 5;

/// What a node claims and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimConfig {
    pub node: String,
    pub groups: Vec<String>,
    /// Claim runs due up to this far ahead.
    pub horizon_ms: i64,
    /// How long a claim holds.
    pub lease_ms: i64,
    /// At most this many runs per claim.
    pub batch: i64,
}

/// A claimed run ready to be fired at its due time, with its task.
#[derive(Debug, Clone, PartialEq)]
pub struct Fire {
    pub run: Run,
    pub task: Arc<Task>,
    /// The instances the claim routed the run to, in the order to try them, the first
    /// recorded on the run as its dispatch intent by the claim itself; empty when the claim
    /// did not route it (the dispatcher routes it and records the intent).
    pub routed: Vec<ExecutorId>,
}

impl Fire {
    /// A claimed run the claim did not route.
    pub fn new(run: Run, task: Arc<Task>) -> Self {
        Self {
            run,
            task,
            routed: Vec::new(),
        }
    }
}

/// Chooses, while a claim is open, the executor instances claimed runs go to, so that the
/// claim records the first as each run's dispatch intent in the same write (one write per run
/// fewer than recording it afterwards). Only runs that certainly fire are offered. A run left
/// out is routed by the dispatcher when it is readied. The dispatcher is the node's router.
pub trait Router: Send + Sync + std::fmt::Debug {
    /// For each run it routes: the instances to try, in order (never empty).
    fn route(&self, runs: &[(&Run, &Arc<Task>)], now: i64) -> HashMap<RunId, Vec<ExecutorId>>;
}

/// A running run the overlap policy `replace` cancelled: its executor should be told.
#[derive(Debug, Clone, PartialEq)]
pub struct Cancellation {
    pub run: Run,
    pub task: Arc<Task>,
}

/// What one claim did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimReport {
    /// Runs to fire, in due order.
    pub fires: Vec<Fire>,
    /// Runs skipped by a misfire or overlap policy.
    pub skipped: usize,
    /// Runs put back to wait (overlap `serial`).
    pub deferred: usize,
    /// Runs claimed ahead of their due time and put back until then (overlap `skip`, judged
    /// at the due time). Not in [`ClaimReport::claimed`]: a claim that did only this is not a
    /// full one, and the node waits for its next poll instead of claiming again at once.
    pub put_back: usize,
    /// Runs of deleted tasks, cancelled.
    pub cancelled: usize,
    /// Scheduled occurrences found late.
    pub misfires: usize,
    /// New pending occurrences written.
    pub materialised: usize,
    /// Running runs cancelled by overlap `replace`.
    pub replaced: Vec<Cancellation>,
}

impl ClaimReport {
    /// How many runs the claim took in all.
    pub fn claimed(&self) -> usize {
        self.fires.len() + self.skipped + self.deferred + self.cancelled
    }
}

/// Claims due runs for one node.
#[derive(Debug, Clone)]
pub struct Claimer {
    store: Arc<dyn Store>,
    config: ClaimConfig,
    router: Option<Arc<dyn Router>>,
}

impl Claimer {
    pub fn new(store: Arc<dyn Store>, config: ClaimConfig) -> Self {
        Self {
            store,
            config,
            router: None,
        }
    }

    /// Routes the runs that certainly fire while claiming them ([`Router`]).
    pub fn with_router(mut self, router: Arc<dyn Router>) -> Self {
        self.router = Some(router);
        self
    }

    pub fn config(&self) -> &ClaimConfig {
        &self.config
    }

    /// Claims one batch at `now` and commits it.
    pub async fn run_once(&self, now: i64) -> Result<ClaimReport> {
        self.run_once_up_to(now, self.config.batch).await
    }

    /// [`Self::run_once`] taking at most `limit` runs (and never more than the batch): the
    /// room the node's admission window leaves (see [`crate::admission`]).
    pub async fn run_once_up_to(&self, now: i64, limit: i64) -> Result<ClaimReport> {
        let mut tx = self.store.begin().await?;
        let report = self
            .claim_in(tx.as_mut(), now, limit.clamp(1, self.config.batch.max(1)))
            .await?;
        tx.commit().await?;
        crate::metrics::claimed(report.claimed(), report.skipped);
        Ok(report)
    }

    async fn claim_in(&self, tx: &mut dyn Tx, now: i64, limit: i64) -> Result<ClaimReport> {
        let mut report = ClaimReport::default();
        let req = ClaimRequest {
            node: self.config.node.clone(),
            groups: self.config.groups.clone(),
            now,
            horizon_ms: self.config.horizon_ms,
            lease_ms: self.config.lease_ms,
            limit,
        };
        let runs = tx.lock_due_runs(&req).await?;
        if runs.is_empty() {
            return Ok(report);
        }
        // Locked by counting the successor each scheduled occurrence normally materialises
        // (one write per task, not a lock and then the count); corrected below when another
        // number is materialised.
        let expected: Vec<(TaskId, i64)> = runs
            .iter()
            .map(|r| (r.task_id, i64::from(is_scheduled_occurrence(r))))
            .collect();
        let mut counted: HashMap<TaskId, i64> = HashMap::new();
        let tasks: HashMap<TaskId, Arc<Task>> = tx
            .lock_tasks_counting(&expected)
            .await?
            .into_iter()
            .map(|(t, n)| {
                counted.insert(t.id, n);
                (t.id, Arc::new(t))
            })
            .collect();
        let mut schedules: HashMap<TaskId, Option<Schedule>> = HashMap::new();
        for task in tasks.values() {
            schedules.insert(task.id, task.schedule().ok());
        }
        let outage = continuing_outages(tx, &runs, &tasks, &schedules, now).await?;
        // The runs that certainly fire are routed now and claimed with their intent.
        let mut routes = match &self.router {
            Some(router) => {
                let certain: Vec<(&Run, &Arc<Task>)> = runs
                    .iter()
                    .filter_map(|run| {
                        let task = tasks.get(&run.task_id)?;
                        certainly_fires(run, task, &outage, now).then_some((run, task))
                    })
                    .collect();
                router.route(&certain, now)
            }
            None => HashMap::new(),
        };
        routes.retain(|_, to| !to.is_empty());
        let intents: HashMap<RunId, ExecutorId> =
            routes.iter().map(|(id, to)| (*id, to[0])).collect();
        let runs = tx.claim_locked_runs(&req, runs, &intents).await?;
        let mut successors: Vec<NewRun> = Vec::new();

        for run in runs {
            let Some(fence) = run.fence() else { continue };
            let task = match tasks.get(&run.task_id) {
                Some(t) if t.deleted_at.is_none() => t.clone(),
                _ => {
                    let reason = "task deleted".to_owned();
                    tx.transition_claimed(&fence, &ClaimedTransition::Cancelled { reason }, now)
                        .await?;
                    report.cancelled += 1;
                    continue;
                }
            };
            let schedule = schedules.get(&task.id).and_then(Option::as_ref);
            let scheduled = is_scheduled_occurrence(&run);
            let late_ms = now - run.due_at;
            let misfire =
                scheduled && (late_ms > task.misfire_threshold_ms || outage.contains(&run.id));

            // Where the schedule continues from (none: a later occurrence carries it on), and
            // whether this run fires.
            let mut continue_after = Some(run.scheduled_at);
            // Why the run does not fire, when it does not.
            let mut skip = None;
            if misfire {
                report.misfires += 1;
                let decision = self
                    .misfire(tx, &task, schedule, &run, now, &mut successors)
                    .await?;
                continue_after = decision.continue_after;
                skip = (!decision.fire).then_some(decision.reason);
            }
            if scheduled
                && let Some(s) = schedule
                && s.follows_on_claim()
                && let Some(after) = continue_after
                && let Some(at) = task.next_occurrence(s, after)
            {
                successors.push(NewRun::occurrence(
                    &task,
                    &run.node_group,
                    at,
                    TriggerKind::Schedule,
                ));
            }
            if let Some(reason) = skip {
                tx.transition_claimed(&fence, &ClaimedTransition::Skipped { reason }, now)
                    .await?;
                report.skipped += 1;
                continue;
            }
            if scheduled && task.overlap_policy != OverlapPolicy::Parallel {
                let earlier = earlier_unfinished(tx, &run, task.overlap_policy).await?;
                if !earlier.is_empty() {
                    match task.overlap_policy {
                        OverlapPolicy::Parallel => {}
                        // Claimed ahead of its time (within the horizon): the earlier run may
                        // still end before this one is due, so the decision waits for then.
                        OverlapPolicy::Skip if run.due_at > now => {
                            let due_at = run.due_at;
                            tx.transition_claimed(
                                &fence,
                                &ClaimedTransition::Deferred { due_at },
                                now,
                            )
                            .await?;
                            report.put_back += 1;
                            continue;
                        }
                        OverlapPolicy::Skip => {
                            let reason = format!(
                                "overlap: run {} of this task is still running; policy skip",
                                earlier[0].id
                            );
                            tx.transition_claimed(
                                &fence,
                                &ClaimedTransition::Skipped { reason },
                                now,
                            )
                            .await?;
                            report.skipped += 1;
                            continue;
                        }
                        OverlapPolicy::Serial => {
                            let due_at = now + SERIAL_RECHECK_MS;
                            tx.transition_claimed(
                                &fence,
                                &ClaimedTransition::Deferred { due_at },
                                now,
                            )
                            .await?;
                            report.deferred += 1;
                            continue;
                        }
                        OverlapPolicy::Replace => {
                            let targets: Vec<_> = earlier
                                .iter()
                                .filter(|r| r.state != RunState::Pending)
                                .map(|r| r.id)
                                .collect();
                            if tx.try_lock_runs(&targets).await?.len() < targets.len() {
                                // An earlier run is being changed right now (its result is
                                // being written): look again in a moment rather than wait on
                                // it while holding the task.
                                let due_at = now + SERIAL_RECHECK_MS;
                                tx.transition_claimed(
                                    &fence,
                                    &ClaimedTransition::Deferred { due_at },
                                    now,
                                )
                                .await?;
                                report.deferred += 1;
                                continue;
                            }
                            for prev in earlier.into_iter().filter(|r| r.state != RunState::Pending)
                            {
                                let completion = RunCompletion {
                                    state: RunState::Cancelled,
                                    output: None,
                                    error: Some(format!(
                                        "replaced by run {} (overlap policy replace)",
                                        run.id
                                    )),
                                    log: None,
                                    started_at: None,
                                    finished_at: now,
                                    reported_by: None,
                                };
                                if let Completion::Applied(prev) =
                                    tx.complete_run(prev.id, None, &completion).await?
                                {
                                    // An earlier run of this batch no longer fires.
                                    report.fires.retain(|f| f.run.id != prev.id);
                                    // Its instance was only just chosen by this claim: it
                                    // has not been sent the run.
                                    let unsent = intents.contains_key(&prev.id);
                                    if prev.executor_id.is_some() && !unsent {
                                        report.replaced.push(Cancellation {
                                            run: prev,
                                            task: task.clone(),
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
            let routed = routes.remove(&run.id).unwrap_or_default();
            report.fires.push(Fire { run, task, routed });
        }

        if !successors.is_empty() {
            let inserted = tx.insert_runs_of_tasks(&successors, now).await?;
            report.materialised = inserted.len();
            // Every successor is a scheduled occurrence: one more fire each.
            for task in inserted {
                *counted.entry(task).or_default() -= 1;
            }
        }
        // What was counted beyond (or short of) what was materialised: a misfire, the end of a
        // schedule, a deleted task, an occurrence that already existed.
        let corrections: Vec<(TaskId, i64)> = counted
            .into_iter()
            .filter(|&(_, surplus)| surplus != 0)
            .map(|(task, surplus)| (task, -surplus))
            .collect();
        tx.add_fires_scheduled_many(&corrections).await?;
        Ok(report)
    }

    /// Applies the misfire policy to a late scheduled occurrence: whether it fires, and where
    /// the schedule continues from. Only the task's latest missed occurrence decides for the
    /// outage (and raises the alarm); `fire_all` pushes the missed occurrences it fires.
    async fn misfire(
        &self,
        tx: &mut dyn Tx,
        task: &Task,
        schedule: Option<&Schedule>,
        run: &Run,
        now: i64,
        successors: &mut Vec<NewRun>,
    ) -> Result<MisfireDecision> {
        let late_ms = now - run.due_at;
        let bound = usize::try_from(task.misfire_max_catch_up)
            .unwrap_or(1)
            .max(1);
        if let Some(later) = later_occurrence(tx, task, run, now).await? {
            // The outage is (or will be) decided by a later occurrence; this one only follows.
            let fire = task.misfire_policy == MisfirePolicy::FireAll
                && schedule.is_some_and(|s| {
                    missed_after(task, s, run.scheduled_at, now, bound).len() < bound
                });
            return Ok(MisfireDecision {
                fire,
                continue_after: None,
                reason: format!(
                    "misfire: found {late_ms} ms late; superseded by the later occurrence due at \
                     {}; policy {}",
                    crate::clock::ms_to_datetime(later).to_rfc3339(),
                    task.misfire_policy
                ),
            });
        }
        let mut decision = MisfireDecision {
            fire: task.misfire_policy != MisfirePolicy::Skip,
            continue_after: Some(now),
            reason: format!(
                "misfire: found {late_ms} ms late; policy {}",
                task.misfire_policy
            ),
        };
        let mut fired_missed = 0usize;
        let mut skipped_missed = 0usize;
        if task.misfire_policy == MisfirePolicy::FireAll
            && let Some(s) = schedule
        {
            let missed = missed_after(task, s, run.scheduled_at, now, MAX_MISSED_SCAN);
            let total = missed.len() + 1;
            let keep_from = total.saturating_sub(bound);
            if keep_from > 0 {
                // Too many: the oldest are skipped, this one among them.
                decision.fire = false;
                skipped_missed = keep_from - 1;
            }
            for &at in missed.iter().skip(keep_from.saturating_sub(1)) {
                let mut r = NewRun::occurrence(task, &run.node_group, at, TriggerKind::Schedule);
                // Due now: they are being caught up, not late again.
                r.due_at = now;
                successors.push(r);
                fired_missed += 1;
            }
            decision.continue_after = Some(missed.last().copied().unwrap_or(run.scheduled_at));
        }
        // One alarm per outage: every decision of the same outage (a run judged again after a
        // refused dispatch, the next occurrence turning late while no executor takes any) has
        // the same key.
        let alarm = NewAlarm::misfire(
            task,
            run,
            late_ms,
            decision.fire,
            fired_missed,
            skipped_missed,
            outage_key(tx, task, run).await?,
        );
        tx.insert_alarm(&alarm, now).await?;
        Ok(decision)
    }
}

/// Whether a claimed run fires whatever the task's policies say: its task is not deleted, and
/// it is not a scheduled occurrence a misfire or overlap policy could skip, defer or replace
/// (late past the threshold, in an outage, or of a task that does not run in parallel), nor
/// a broadcast (split into shards first). Mirrors the decisions of [`Claimer::run_once`].
fn certainly_fires(run: &Run, task: &Task, outage: &HashSet<RunId>, now: i64) -> bool {
    let scheduled = is_scheduled_occurrence(run);
    let misfire =
        scheduled && (now - run.due_at > task.misfire_threshold_ms || outage.contains(&run.id));
    task.deleted_at.is_none()
        && task.routing != Routing::Broadcast
        && run.executor_id.is_none()
        && !misfire
        && (!scheduled || task.overlap_policy == OverlapPolicy::Parallel)
}

/// The runs of a claim batch that, each less than the misfire threshold late, belong to an
/// outage that began more than the threshold ago: the run is being caught up (its successor
/// would be due already), it was materialised before its predecessor turned into a misfire,
/// and that predecessor never started and is more than the threshold late. Without this, an
/// outage only slightly longer than the threshold would fire the occurrence after the missed
/// one and catch up from there. The predecessors of the whole batch come in one statement.
async fn continuing_outages(
    tx: &mut dyn Tx,
    runs: &[Run],
    tasks: &HashMap<TaskId, Arc<Task>>,
    schedules: &HashMap<TaskId, Option<Schedule>>,
    now: i64,
) -> Result<HashSet<RunId>> {
    let catching_up: Vec<&Run> = runs
        .iter()
        .filter(|run| {
            let Some(task) = tasks.get(&run.task_id) else {
                return false;
            };
            is_scheduled_occurrence(run)
                && run.due_at < now
                && now - run.due_at <= task.misfire_threshold_ms
                && schedules
                    .get(&task.id)
                    .and_then(Option::as_ref)
                    .and_then(|s| task.next_occurrence(s, run.scheduled_at))
                    .is_some_and(|next| next <= now)
        })
        .collect();
    if catching_up.is_empty() {
        return Ok(HashSet::new());
    }
    let items: Vec<(TaskId, i64)> = catching_up
        .iter()
        .map(|r| (r.task_id, r.scheduled_at))
        .collect();
    let mut earlier: HashMap<TaskId, Vec<Run>> = HashMap::new();
    for p in tx.latest_scheduled_runs_before(&items).await? {
        earlier.entry(p.task_id).or_default().push(p);
    }
    Ok(catching_up
        .into_iter()
        .filter(|run| {
            let Some(task) = tasks.get(&run.task_id) else {
                return false;
            };
            // The latest of those found before this run is its own predecessor: every one of
            // them is a first-attempt scheduled run of the task.
            let predecessor = earlier
                .get(&run.task_id)
                .into_iter()
                .flatten()
                .filter(|p| p.scheduled_at < run.scheduled_at)
                .max_by_key(|p| p.scheduled_at);
            predecessor.is_some_and(|p| {
                let missed_at = p.due_at.saturating_add(task.misfire_threshold_ms);
                p.started_at.is_none()
                    && matches!(
                        p.state,
                        RunState::Pending | RunState::Claimed | RunState::Skipped
                    )
                    && missed_at < now
                    && run.created_at <= missed_at
            })
        })
        .map(|run| run.id)
        .collect())
}

/// Whether `run` is its task's scheduled occurrence (not a retry, a shard after the first, or
/// a run started another way): the runs whose claim continues the schedule.
fn is_scheduled_occurrence(run: &Run) -> bool {
    run.trigger_kind == TriggerKind::Schedule && run.attempt == 1 && run.shard_index == 0
}

/// The schedule points of `task` after `after_ms` up to `now`, oldest first, at most `limit`
/// (and no more than `max_fires` leaves).
fn missed_after(task: &Task, s: &Schedule, after_ms: i64, now: i64, limit: usize) -> Vec<i64> {
    let mut missed = Vec::new();
    let mut at = after_ms;
    let mut left = task.max_fires.map(|m| m - task.fires_scheduled);
    while missed.len() < limit && left.is_none_or(|l| l > 0) {
        match task.next_occurrence(s, at) {
            Some(next) if next <= now => {
                missed.push(next);
                at = next;
                left = left.map(|l| l - 1);
            }
            _ => break,
        }
    }
    missed
}

/// The scheduled time of an occurrence of `run`'s task (in any state) that is later than `run`
/// and already due at `now`, if one exists. Runs of other triggers (by hand, chains) do not
/// count: they are not the schedule's.
async fn later_occurrence(
    tx: &mut dyn Tx,
    task: &Task,
    run: &Run,
    now: i64,
) -> Result<Option<i64>> {
    let mut filter = RunFilter {
        task_id: Some(task.id),
        scheduled_from: Some(run.scheduled_at.saturating_add(1)),
        scheduled_before: Some(now.saturating_add(1)),
        limit: Some(LATER_PAGE),
        ..RunFilter::default()
    };
    loop {
        let page = tx.list_runs(task.tenant_id, &filter).await?;
        if let Some(r) = page
            .iter()
            .find(|r| r.trigger_kind == TriggerKind::Schedule)
        {
            return Ok(Some(r.scheduled_at));
        }
        match page.last() {
            Some(last) if page.len() as i64 == LATER_PAGE => filter.before_id = Some(last.id),
            _ => return Ok(None),
        }
    }
}

/// Names the outage `run` was missed in: the gap after the task's last occurrence scheduled
/// before it that an executor started. Looks through at most [`OUTAGE_SCAN_PAGES`] pages of the
/// task's runs; an outage longer than that is named after `run` itself (it may then alarm again).
async fn outage_key(tx: &mut dyn Tx, task: &Task, run: &Run) -> Result<String> {
    let mut filter = RunFilter {
        task_id: Some(task.id),
        scheduled_before: Some(run.scheduled_at),
        limit: Some(LATER_PAGE),
        ..RunFilter::default()
    };
    for _ in 0..OUTAGE_SCAN_PAGES {
        let page = tx.list_runs(task.tenant_id, &filter).await?;
        if let Some(r) = page
            .iter()
            .find(|r| r.trigger_kind == TriggerKind::Schedule && r.started_at.is_some())
        {
            return Ok(format!("misfire:{}:after:{}", task.id, r.id));
        }
        match page.last() {
            Some(last) if page.len() as i64 == LATER_PAGE => filter.before_id = Some(last.id),
            // The task never started an occurrence before this one.
            _ => return Ok(format!("misfire:{}:after:none", task.id)),
        }
    }
    Ok(format!("misfire:{}:run:{}", task.id, run.id))
}

/// Earlier runs of the same task that `run` overlaps under `policy`: running ones, claimed
/// ones scheduled before it and — for `serial`, which keeps order — pending ones scheduled before
/// it (runs already waiting). This transaction's own decisions are visible: runs it skipped or
/// deferred are no longer claimed.
async fn earlier_unfinished(tx: &mut dyn Tx, run: &Run, policy: OverlapPolicy) -> Result<Vec<Run>> {
    Ok(tx
        .unfinished_runs_of_task(run.task_id)
        .await?
        .into_iter()
        .filter(|r| {
            let earlier = (r.scheduled_at, r.id) < (run.scheduled_at, run.id);
            r.id != run.id
                && match r.state {
                    RunState::Running => true,
                    RunState::Claimed => earlier,
                    RunState::Pending => earlier && policy == OverlapPolicy::Serial,
                    _ => false,
                }
        })
        .collect())
}

struct MisfireDecision {
    fire: bool,
    /// Where the schedule continues from; `None` when a later occurrence carries it on.
    continue_after: Option<i64>,
    /// Why the run is skipped, when it does not fire.
    reason: String,
}

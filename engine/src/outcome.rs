//! What a finished run causes: retries with exponential backoff and jitter, recovery of lost
//! runs, chain children (with joins), the next occurrence of a fixed-delay schedule, and alarms —
//! all written in the caller's transaction together with the run's final state.
//!
//! Rules:
//! - `failed` (retryable) and `timed_out` retry while the task has retries left
//!   (`attempt <= max_retries`), after `backoff_ms · 2^(attempt-1)` capped at `backoff_max_ms`,
//!   of which the second half is random (equal jitter). A fatal failure never retries.
//! - `lost` (the executor died) starts a recovery run at once when the task allows it
//!   (`recover_lost`) and it has attempts left (`attempt <= max_retries + 1`).
//! - When no further attempt follows, the occurrence is over: its children run according to
//!   their dependency condition (`succeeded` counts as success, `failed`, `timed_out` and `lost`
//!   as failure; `cancelled` and `skipped` run no child). A child with several parents runs once
//!   every parent that belongs to the chain has finished in that chain and all of their
//!   conditions admit it. Alarms: `run_failed` for a final failure without retries,
//!   `retries_exhausted` when retries ran out, `timed_out` for every timeout.
//! - A schedule goes on whatever its run ended as: a fixed delay's next occurrence follows
//!   the occurrence's end, and a cron or fixed-rate occurrence cancelled before any node
//!   claimed it materialises the one after it (the claim would have).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::alarm::{Alarm, NewAlarm};
use crate::app::AppId;
use crate::directory::Directory;
use crate::run::{NewRun, Run, RunCompletion, RunId, RunState, TriggerKind};
use crate::schedule::{Schedule, ScheduleKind};
use crate::store::{Completion, Result, Revival, StoreError, Tx};
use crate::task::{Dependency, Task, TaskId};

/// A run's end as reported (or decided by the watchdog).
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    pub completion: RunCompletion,
    /// For `failed`: whether another attempt may help (false for fatal failures).
    pub retryable: bool,
}

impl Finish {
    /// An end the engine decides itself (deadline passed, executor lost or refusing the run):
    /// no output, log or start time, only why.
    pub fn decided(state: RunState, error: String, retryable: bool, now: i64) -> Self {
        Self {
            completion: RunCompletion {
                state,
                output: None,
                error: Some(error),
                log: None,
                started_at: None,
                finished_at: now,
                reported_by: None,
            },
            retryable,
        }
    }
}

/// What finishing a run wrote.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Effects {
    /// The next attempt (retry or recovery), if any.
    pub next_attempt: Option<Run>,
    /// Chain children started.
    pub children: Vec<Run>,
    /// The next occurrence of a fixed-delay task.
    pub next_occurrence: Option<Run>,
    pub alarms: Vec<Alarm>,
    /// Alarms of the task this success resolved.
    pub resolved: Vec<Alarm>,
}

/// The result of [`finish_run`].
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    /// The run is final now, with these effects.
    Applied {
        run: Run,
        /// Its task's name and app, for the log line of the finished run.
        task_name: String,
        app_id: AppId,
        effects: Box<Effects>,
    },
    /// It already was; nothing changed (a repeated or late result).
    AlreadyFinal(Run),
}

/// The delay before retrying after attempt `attempt` (1-based) failed, for a random
/// `jitter` in `0.0..=1.0`: half of the capped exponential delay, plus up to the other half.
pub fn retry_delay_ms(task: &Task, attempt: i32, jitter: f64) -> i64 {
    let exp = u32::try_from(attempt.saturating_sub(1))
        .unwrap_or(0)
        .min(40);
    let full = task
        .retry_backoff_ms
        .saturating_mul(1_i64 << exp)
        .min(task.retry_backoff_max_ms)
        .max(0);
    let half = full / 2;
    half + ((full - half) as f64 * jitter.clamp(0.0, 1.0)).round() as i64
}

/// Finishes run `id` with `finish` and writes everything that follows from it, in `tx`.
/// `app` restricts the run to that app's tasks (for results reported by a wrapper).
pub async fn finish_run(
    tx: &mut dyn Tx,
    id: RunId,
    app: Option<AppId>,
    finish: &Finish,
    jitter: f64,
) -> Result<Finished> {
    let items = [(id, finish.clone())];
    finish_runs(tx, app, &items, &mut || jitter)
        .await?
        .pop()
        .unwrap_or_else(|| Err(StoreError::NotFound(format!("run {id}"))))
}

/// [`finish_run`] for many runs, with the database work batched: the runs are completed by
/// one locking read and one write, their tasks locked by one read (in id order, so concurrent
/// batches and claims queue instead of deadlocking), their chain edges read once; what follows
/// from each run is then written as by [`finish_run`]. Outcomes come back in item order; an
/// item's own error (unknown run, a completion that is not final, a task gone) does not stop
/// the others. `jitter` gives each retry's random part.
pub async fn finish_runs(
    tx: &mut dyn Tx,
    app: Option<AppId>,
    items: &[(RunId, Finish)],
    jitter: &mut (dyn FnMut() -> f64 + Send),
) -> Result<Vec<Result<Finished>>> {
    let completions: Vec<(RunId, RunCompletion)> = items
        .iter()
        .map(|(id, f)| (*id, f.completion.clone()))
        .collect();
    let mut completed = tx.complete_runs(app, &completions).await?;
    // Late successes recorded after every later attempt of their occurrence had ended without
    // succeeding: the occurrence succeeded after all, and only its chain follows from them.
    let mut chain_only: HashSet<RunId> = HashSet::new();
    // A late success from the executor a run was dispatched to, for a run the engine ended
    // without it (lost, or timed out though it finished in time), is never dropped: it takes the
    // place of the retry or recovery when that has not started, else it is recorded alone.
    for ((_, finish), completion) in items.iter().zip(completed.iter_mut()) {
        if let Ok(Completion::AlreadyFinal(run)) = completion
            && finish.completion.reported_by.is_some()
            && matches!(run.state, RunState::Lost | RunState::TimedOut)
        {
            match tx.revive_ended_run(run, &finish.completion).await? {
                Revival::Revived(revived) => {
                    tracing::info!(run = %revived.id, was = %run.state, "a late success withdrew the run's unstarted retry or recovery");
                    *completion = Ok(Completion::Applied(revived));
                }
                Revival::Recorded(recorded) => {
                    if later_attempts_failed(tx, &recorded).await? {
                        tracing::info!(run = %recorded.id, was = %run.state, "a late success recorded after its occurrence's later attempts failed; its chain follows");
                        chain_only.insert(recorded.id);
                        *completion = Ok(Completion::Applied(recorded));
                    } else {
                        tracing::info!(run = %recorded.id, was = %run.state, "a late success recorded; its retry or recovery had already started");
                        *completion = Ok(Completion::AlreadyFinal(recorded));
                    }
                }
                Revival::Refused => {}
            }
        }
    }
    let mut task_ids: Vec<TaskId> = completed
        .iter()
        .filter_map(|c| match c {
            Ok(Completion::Applied(run)) => Some(run.task_id),
            _ => None,
        })
        .collect();
    task_ids.sort_unstable();
    task_ids.dedup();
    let (tasks, parents) = if task_ids.is_empty() {
        Default::default()
    } else {
        tasks_of_finished(tx, &completed, &chain_only, task_ids).await?
    };
    // Successes resolve their tasks' open failure alarms; one look-up for the whole batch
    // finds the few tasks that have any, so a success of any other task costs nothing more.
    let mut succeeded: Vec<TaskId> = completed
        .iter()
        .filter_map(|c| match c {
            Ok(Completion::Applied(run)) if run.state == RunState::Succeeded => Some(run.task_id),
            _ => None,
        })
        .collect();
    succeeded.sort_unstable();
    succeeded.dedup();
    let alarmed: HashSet<TaskId> = if succeeded.is_empty() {
        HashSet::new()
    } else {
        tx.tasks_with_unresolved_alarms(&succeeded)
            .await?
            .into_iter()
            .collect()
    };
    let mut over = HashSet::new();
    let mut due_soon: Vec<String> = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    for ((_, finish), completion) in items.iter().zip(completed) {
        let run = match completion {
            Err(e) => {
                out.push(Err(e));
                continue;
            }
            Ok(Completion::AlreadyFinal(run)) => {
                out.push(Ok(Finished::AlreadyFinal(run)));
                continue;
            }
            Ok(Completion::Applied(run)) => run,
        };
        let Some(task) = tasks.get(&run.task_id) else {
            out.push(Err(StoreError::NotFound(format!("task {}", run.task_id))));
            continue;
        };
        let has_children = parents.contains(&task.id);
        let mut effects = if chain_only.contains(&run.id) {
            let mut effects = Effects::default();
            if has_children {
                let now = finish.completion.finished_at;
                effects.children = start_children(tx, task, &run, true, now).await?;
            }
            effects
        } else {
            effects_of(tx, task, &run, finish, jitter(), has_children, &mut over).await?
        };
        if run.state == RunState::Succeeded && alarmed.contains(&task.id) {
            effects.resolved = tx
                .resolve_task_alarms(task.id, finish.completion.finished_at)
                .await?;
        }
        let now = finish.completion.finished_at;
        let soon = effects
            .next_attempt
            .iter()
            .chain(&effects.children)
            .chain(&effects.next_occurrence)
            .any(|r| r.due_at <= now + crate::store::DUE_SOON_MS);
        // A run that started late most likely waited for its app's capacity, which it now
        // frees: the nodes claim at once instead of at their next poll, keeping the
        // executors of an app with a backlog busy.
        let freed = run
            .started_at
            .is_some_and(|s| s - run.due_at > crate::claimer::LATE_START_MS);
        if (soon || freed) && !due_soon.contains(&run.node_group) {
            due_soon.push(run.node_group.clone());
        }
        out.push(Ok(Finished::Applied {
            run,
            task_name: task.name.clone(),
            app_id: task.app_id,
            effects: Box::new(effects),
        }));
    }
    for group in &due_soon {
        tx.notify_due(group).await?;
    }
    Ok(out)
}

/// The tasks of the runs a batch finished (`task_ids`, sorted), and which of them have chain
/// children. A task is locked against concurrent edits only when what follows from its run
/// inserts runs derived from the task's settings: a retry or recovery (a run that did not
/// succeed), the next occurrence of a fixed delay, chain children (then the children's tasks
/// too), a broadcast occurrence's end. The common case, a success of a task with no children
/// and a schedule of its own, reads the task as it is and writes nothing to it. The tasks that
/// need it are locked in one pass, in id order, after the unlocked read: a claim locks the
/// tasks of its runs in id order too, so the two queue instead of deadlocking.
async fn tasks_of_finished(
    tx: &mut dyn Tx,
    completed: &[Result<Completion>],
    chain_only: &HashSet<RunId>,
    task_ids: Vec<TaskId>,
) -> Result<(HashMap<TaskId, Task>, HashSet<TaskId>)> {
    let (read, parents) = tx.tasks_with_children(&task_ids, false).await?;
    let mut tasks: HashMap<TaskId, Task> = read.into_iter().map(|t| (t.id, t)).collect();
    let mut parents: HashSet<TaskId> = parents.into_iter().collect();
    let mut lock: Vec<TaskId> = completed
        .iter()
        .filter_map(|c| match c {
            Ok(Completion::Applied(run)) => Some(run),
            _ => None,
        })
        .filter(|run| {
            run.state != RunState::Succeeded
                || run.shard_total > 1
                || chain_only.contains(&run.id)
                || parents.contains(&run.task_id)
                || tasks
                    .get(&run.task_id)
                    .is_none_or(|t| t.schedule_kind == ScheduleKind::FixedDelay)
        })
        .map(|run| run.task_id)
        .collect();
    if lock.is_empty() {
        return Ok((tasks, parents));
    }
    lock.sort_unstable();
    lock.dedup();
    // The chain children's tasks are locked in the same pass: locking them later, after the
    // parents', could close a cycle with a claim.
    let children = tx.child_task_ids(&lock).await?;
    lock.extend(children);
    lock.sort_unstable();
    lock.dedup();
    let (locked, locked_parents) = tx.tasks_with_children(&lock, true).await?;
    for id in &lock {
        parents.remove(id);
    }
    parents.extend(locked_parents);
    tasks.extend(locked.into_iter().map(|t| (t.id, t)));
    Ok((tasks, parents))
}

/// Writes one INFO line per run that `outcomes` finished: task, run, app key
/// (`<tenant>.<app>`, from the directory's cache, never the database; ids when it is not
/// cached), state, attempt and duration (start to finish, when it started). Call it once the
/// transaction that finished them committed.
pub fn log_finished(outcomes: &[Result<Finished>], directory: Option<&Directory>) {
    for outcome in outcomes {
        if let Ok(Finished::Applied { run, .. }) = outcome {
            crate::metrics::run_finished(run.state, run.trigger_kind);
        }
    }
    if !tracing::enabled!(tracing::Level::INFO) {
        return;
    }
    for outcome in outcomes {
        let Ok(Finished::Applied {
            run,
            task_name,
            app_id,
            ..
        }) = outcome
        else {
            continue;
        };
        let app = directory
            .and_then(|d| d.known_key(*app_id))
            .unwrap_or_else(|| format!("tenant-{}.app-{app_id}", run.tenant_id));
        // The start is the engine's record of the executor's ack, the finish the executor's own
        // time: a run shorter than the ack's round trip would come out below zero.
        let duration_ms = run
            .finished_at
            .zip(run.started_at)
            .map(|(finished, started)| (finished - started).max(0));
        tracing::info!(
            task = %task_name,
            run = %run.id,
            app = %app,
            state = %run.state,
            attempt = run.attempt,
            duration_ms,
            "run finished"
        );
    }
}

/// What follows from `run` having finished: the next attempt, alarms, chain children (only
/// looked up when the task `has_children`), the next occurrence of a fixed delay. `over` holds
/// the broadcast occurrences an earlier run of the same batch already ended, so their children
/// start once.
async fn effects_of(
    tx: &mut dyn Tx,
    task: &Task,
    run: &Run,
    finish: &Finish,
    jitter: f64,
    has_children: bool,
    over: &mut HashSet<(TaskId, i64)>,
) -> Result<Effects> {
    let now = finish.completion.finished_at;
    let mut effects = Effects::default();

    // An earlier attempt's late success, recorded while this attempt (its retry or recovery)
    // was already under way, decided the occurrence: it succeeded. This attempt's failure is
    // then neither retried nor alarmed, and the chain follows that success.
    let earlier_success = earlier_success(tx, run).await?;
    let next = match earlier_success {
        Some(_) => None,
        None => next_attempt(task, run, finish, now, jitter),
    };
    if let Some(next) = &next {
        effects.next_attempt = tx.insert_run(next, now).await?;
    }
    if earlier_success.is_none() {
        for alarm in alarms_for(task, run, finish, next.is_some()) {
            if let Some(a) = tx.insert_alarm(&alarm, now).await? {
                effects.alarms.push(a);
            }
        }
    }
    // A broadcast occurrence is over when every shard's last attempt is; the last shard to
    // finish decides (under the occurrence's lock) and succeeded only if all shards did.
    let mut occurrence_over = next.is_none();
    let mut succeeded = run.state == RunState::Succeeded || earlier_success.is_some();
    if occurrence_over && run.shard_total > 1 {
        let runs = tx.lock_occurrence(run.task_id, run.scheduled_at).await?;
        let mut latest: BTreeMap<i32, &Run> = BTreeMap::new();
        for r in &runs {
            let slot = latest.entry(r.shard_index).or_insert(r);
            if r.attempt > slot.attempt {
                *slot = r;
            }
        }
        occurrence_over = latest.len() >= usize::try_from(run.shard_total).unwrap_or(usize::MAX)
            && latest.values().all(|r| r.state.is_final())
            // Another shard of this batch, finished together with this one, ended it already.
            && over.insert((run.task_id, run.scheduled_at));
        // A shard succeeded when any of its attempts did (a late success recorded next to
        // its recovery counts).
        let ok: HashSet<i32> = runs
            .iter()
            .filter(|r| r.state == RunState::Succeeded)
            .map(|r| r.shard_index)
            .collect();
        succeeded = latest.keys().all(|shard| ok.contains(shard));
    }
    if occurrence_over
        && has_children
        && matches!(
            run.state,
            RunState::Succeeded | RunState::Failed | RunState::TimedOut | RunState::Lost
        )
    {
        let parent = earlier_success.as_ref().unwrap_or(run);
        effects.children = start_children(tx, task, parent, succeeded, now).await?;
    }
    if occurrence_over
        && is_scheduled_occurrence(run)
        && task.schedule_kind == ScheduleKind::FixedDelay
    {
        let schedule = task.schedule().map_err(StoreError::Invalid)?;
        if matches!(schedule, Schedule::FixedDelay { .. }) {
            effects.next_occurrence = tx
                .materialise_next(task, &schedule, &run.node_group, now, now)
                .await?;
        }
    }
    // A cron or fixed-rate occurrence ended before any node claimed it (cancelled while it
    // waited): the claim is what materialises such a schedule's next occurrence, so it is
    // materialised here, or cancelling one run would end the task's schedule. A claimed one
    // (fence above 0) carried its schedule on already.
    if run.fence == 0
        && run.trigger_kind == TriggerKind::Schedule
        && run.attempt == 1
        && run.shard_index == 0
        && task.schedule_kind.follows_on_claim()
    {
        let schedule = task.schedule().map_err(StoreError::Invalid)?;
        effects.next_occurrence = tx
            .materialise_next(task, &schedule, &run.node_group, run.scheduled_at, now)
            .await?;
    }
    Ok(effects)
}

/// For a failed, timed-out or lost attempt after the first of a one-shard occurrence: an
/// earlier attempt of it that succeeded (a late success recorded while this attempt was under
/// way). The occurrence is locked first, so a late success being recorded concurrently is seen.
async fn earlier_success(tx: &mut dyn Tx, run: &Run) -> Result<Option<Run>> {
    if run.attempt <= 1
        || run.shard_total > 1
        || !matches!(
            run.state,
            RunState::Failed | RunState::TimedOut | RunState::Lost
        )
    {
        return Ok(None);
    }
    Ok(tx
        .lock_occurrence(run.task_id, run.scheduled_at)
        .await?
        .into_iter()
        .find(|r| {
            r.shard_index == run.shard_index
                && r.attempt < run.attempt
                && r.state == RunState::Succeeded
        }))
}

/// For a late success just recorded on `recorded` next to its retry or recovery: whether every
/// later attempt of its occurrence has ended and none succeeded, so nothing else will start the
/// chain of the occurrence (one-shard occurrences; a broadcast's last shard decides).
async fn later_attempts_failed(tx: &mut dyn Tx, recorded: &Run) -> Result<bool> {
    if recorded.shard_total > 1 {
        return Ok(false);
    }
    let runs = tx
        .lock_occurrence(recorded.task_id, recorded.scheduled_at)
        .await?;
    let mut later = runs
        .iter()
        .filter(|r| r.shard_index == recorded.shard_index && r.attempt > recorded.attempt)
        .peekable();
    Ok(later.peek().is_some()
        && later.all(|r| r.state.is_final() && r.state != RunState::Succeeded))
}

/// Whether `run` is (an attempt of) an occurrence of the task's own schedule, rather than a
/// manual trigger or a chain child.
fn is_scheduled_occurrence(run: &Run) -> bool {
    matches!(
        run.trigger_kind,
        TriggerKind::Schedule | TriggerKind::Retry | TriggerKind::Recovery
    ) && run.triggered_by.is_none()
        && run.parent_run_id.is_none()
}

fn next_attempt(task: &Task, run: &Run, finish: &Finish, now: i64, jitter: f64) -> Option<NewRun> {
    if task.deleted_at.is_some() {
        return None;
    }
    match run.state {
        RunState::Failed if finish.retryable && run.attempt <= task.max_retries => {
            let due = now.saturating_add(retry_delay_ms(task, run.attempt, jitter));
            Some(NewRun::next_attempt(run, due, TriggerKind::Retry))
        }
        RunState::TimedOut if run.attempt <= task.max_retries => {
            let due = now.saturating_add(retry_delay_ms(task, run.attempt, jitter));
            Some(NewRun::next_attempt(run, due, TriggerKind::Retry))
        }
        RunState::Lost if task.recover_lost && run.attempt <= task.max_retries + 1 => {
            Some(NewRun::next_attempt(run, now, TriggerKind::Recovery))
        }
        _ => None,
    }
}

fn alarms_for(task: &Task, run: &Run, finish: &Finish, retrying: bool) -> Vec<NewAlarm> {
    let error = finish.completion.error.as_deref();
    let mut alarms = Vec::new();
    if run.state == RunState::TimedOut {
        alarms.push(NewAlarm::timed_out(task, run, error));
    }
    if retrying
        || !matches!(
            run.state,
            RunState::Failed | RunState::TimedOut | RunState::Lost
        )
    {
        return alarms;
    }
    if run.attempt > 1 || (task.max_retries > 0 && finish.retryable) {
        alarms.push(NewAlarm::retries_exhausted(task, run, error));
    } else {
        alarms.push(NewAlarm::run_failed(task, run, error));
    }
    alarms
}

/// Starts the children of `task` that the finished `run` (of an occurrence that `succeeded` or
/// not) lets run.
async fn start_children(
    tx: &mut dyn Tx,
    task: &Task,
    run: &Run,
    succeeded: bool,
    now: i64,
) -> Result<Vec<Run>> {
    let edges = tx.children_of(task.id).await?;
    if edges.is_empty() {
        return Ok(Vec::new());
    }
    let root = run.chain_root_id.unwrap_or(run.id);
    let mut started = Vec::new();
    // The tenant's dependency graph, read once, when a join needs it.
    let mut graph: Option<Vec<Dependency>> = None;
    for edge in edges {
        if !edge.condition.admits(succeeded) {
            continue;
        }
        let parents = tx.parents_of(edge.child_task_id).await?;
        if parents.len() > 1 {
            let graph = match &mut graph {
                Some(g) => g,
                None => graph.insert(tx.list_dependencies(run.tenant_id).await?),
            };
            if !join_complete(tx, run, root, &edge, &parents, graph).await? {
                continue;
            }
        }
        let Some(child) = tx
            .lock_tasks(&[edge.child_task_id])
            .await?
            .pop()
            .filter(|c| c.deleted_at.is_none() && !c.paused)
        else {
            continue;
        };
        let mut new = NewRun::occurrence(&child, &run.node_group, now, TriggerKind::Chain);
        new.parent_run_id = Some(run.id);
        new.chain_root_id = Some(root);
        // Two chain runs of one task finishing in the same millisecond: the next free one.
        if let Some(r) = tx.insert_run_at_free_ms(&mut new, now).await? {
            started.push(r);
        }
    }
    Ok(started)
}

/// For a child with several parents: whether every parent that belongs to the chain has
/// finished in it with an outcome the child's condition admits, and the child has not run in
/// the chain yet. The chain root is locked, so concurrent parents decide one after the other.
async fn join_complete(
    tx: &mut dyn Tx,
    run: &Run,
    root: RunId,
    edge: &Dependency,
    parents: &[Dependency],
    graph: &[Dependency],
) -> Result<bool> {
    let root_run = if root == run.id {
        run.clone()
    } else {
        match tx.find_run(root).await? {
            Some(r) => r,
            None => return Ok(false),
        }
    };
    let in_chain = reachable_from(graph, root_run.task_id);
    let mut tasks: Vec<TaskId> = parents
        .iter()
        .map(|p| p.parent_task_id)
        .filter(|t| in_chain.contains(t))
        .collect();
    tasks.push(edge.child_task_id);
    let chain_runs = tx.lock_chain_runs(root, &tasks).await?;
    if chain_runs.iter().any(|r| r.task_id == edge.child_task_id) {
        return Ok(false);
    }
    // The latest attempt of each parent (all shards of it).
    let mut latest: BTreeMap<TaskId, (i32, Vec<&Run>)> = BTreeMap::new();
    for r in &chain_runs {
        let entry = latest.entry(r.task_id).or_insert((r.attempt, Vec::new()));
        if r.attempt > entry.0 {
            *entry = (r.attempt, Vec::new());
        }
        if r.attempt == entry.0 {
            entry.1.push(r);
        }
    }
    for parent in parents
        .iter()
        .filter(|p| in_chain.contains(&p.parent_task_id))
    {
        let Some((_, runs)) = latest.get(&parent.parent_task_id) else {
            return Ok(false);
        };
        if runs.iter().any(|r| !r.state.is_final()) {
            return Ok(false);
        }
        let ok = runs.iter().all(|r| r.state == RunState::Succeeded);
        let ran = runs
            .iter()
            .all(|r| !matches!(r.state, RunState::Cancelled | RunState::Skipped));
        if !ran || !parent.condition.admits(ok) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `from` and every task reachable from it along dependency edges.
fn reachable_from(edges: &[Dependency], from: TaskId) -> BTreeSet<TaskId> {
    let mut seen = BTreeSet::from([from]);
    let mut stack = vec![from];
    while let Some(at) = stack.pop() {
        for e in edges.iter().filter(|e| e.parent_task_id == at) {
            if seen.insert(e.child_task_id) {
                stack.push(e.child_task_id);
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(backoff: i64, max: i64) -> Task {
        let mut t = crate::task::tests::sample_task();
        t.max_retries = 5;
        t.retry_backoff_ms = backoff;
        t.retry_backoff_max_ms = max;
        t
    }

    #[test]
    fn retry_delay_doubles_per_attempt_up_to_the_cap() {
        let t = task(1_000, 10_000);
        let no_jitter: Vec<i64> = (1..=6).map(|a| retry_delay_ms(&t, a, 1.0)).collect();
        assert_eq!(no_jitter, vec![1_000, 2_000, 4_000, 8_000, 10_000, 10_000]);
    }

    #[test]
    fn retry_jitter_keeps_at_least_half_the_delay() {
        let t = task(1_000, 60_000);
        assert_eq!(retry_delay_ms(&t, 3, 0.0), 2_000);
        assert_eq!(retry_delay_ms(&t, 3, 0.5), 3_000);
        assert_eq!(retry_delay_ms(&t, 3, 1.0), 4_000);
        assert_eq!(retry_delay_ms(&t, 3, 7.0), 4_000, "jitter is clamped");
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let t = task(300_000, 86_400_000);
        assert_eq!(retry_delay_ms(&t, i32::MAX, 1.0), 86_400_000);
    }

    #[test]
    fn reachability_follows_edges_downward_only() {
        let e = |p, c| Dependency {
            tenant_id: crate::tenant::TenantId(1),
            parent_task_id: TaskId(p),
            child_task_id: TaskId(c),
            condition: crate::task::DependencyCondition::Always,
            created_at: 0,
        };
        let edges = [e(1, 2), e(1, 3), e(2, 4), e(3, 4), e(5, 4)];
        let r = reachable_from(&edges, TaskId(1));
        assert_eq!(
            r,
            BTreeSet::from([TaskId(1), TaskId(2), TaskId(3), TaskId(4)])
        );
    }
}

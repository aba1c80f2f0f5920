//! How results complete runs: the checks every result passes (final state, reported by the
//! instance the run was sent to, for its attempt) and the plan of a batch of completions
//! applied by one read and one write (`complete_runs` on PostgreSQL).

use crate::store::StoreError;

/// What a batch of completions does to runs locked by one read: which rows to write (run,
/// completion, new log tail) and, per item, what happened.
pub(in crate::store) struct CompletionPlan {
    pub(in crate::store) writes: Vec<(crate::run::RunId, crate::run::RunCompletion, String)>,
    items: Vec<PlannedItem>,
    before: std::collections::HashMap<crate::run::RunId, crate::run::Run>,
}

enum PlannedItem {
    Refused(StoreError),
    /// Already final before the batch.
    Final(crate::run::RunId),
    /// Written by this item.
    Write(crate::run::RunId),
    /// Written by an earlier item of the batch.
    Repeat(crate::run::RunId),
}

/// Why a completion with a state that is not final is refused.
pub(in crate::store) fn not_final(state: crate::run::RunState) -> StoreError {
    StoreError::InvalidState(format!(
        "a run cannot be completed as {state}: use one of the final states"
    ))
}

/// The log tail of `run` once `completion`'s log is added: the lines already stored (streamed
/// while the run ran) are not stored again.
pub(in crate::store) fn completed_tail(
    run: &crate::run::Run,
    completion: &crate::run::RunCompletion,
) -> String {
    match &completion.log {
        Some(log) => crate::run::merge_log_tail(&run.log_tail, log),
        None => run.log_tail.clone(),
    }
}

/// Whether a wrapper's success may still be recorded on `ended`, a run the engine ended itself
/// without a result: declared `lost` with its executor, or `timed_out` although the handler
/// finished before the deadline (its result was held up, by a partition say). A success from
/// the executor in that attempt ([`report_refused`] checks which) is never dropped.
pub(in crate::store) fn late_success_counts(
    ended: &crate::run::Run,
    completion: &crate::run::RunCompletion,
) -> bool {
    use crate::run::RunState;
    completion.state == RunState::Succeeded
        && completion.reported_by.is_some()
        && match ended.state {
            RunState::Lost => true,
            RunState::TimedOut => ended
                .deadline_at
                .is_some_and(|deadline| completion.finished_at <= deadline),
            _ => false,
        }
}

/// Why a wrapper's result may not complete `run`: results are accepted only for runs that were
/// dispatched to the reporting executor instance, in the attempt the result names. `None`: it
/// may (or the engine decided the end itself).
pub(in crate::store) fn report_refused(
    run: &crate::run::Run,
    completion: &crate::run::RunCompletion,
) -> Option<StoreError> {
    let by = completion.reported_by?;
    let why = match run.executor_id {
        None => format!(
            "run {} was never dispatched to an executor instance",
            run.id
        ),
        Some(e) if e != by.executor_id => format!(
            "run {} was dispatched to another executor instance, not this one",
            run.id
        ),
        Some(_) if run.attempt != by.attempt => format!(
            "run {} is attempt {}; the result is for attempt {}",
            run.id, run.attempt, by.attempt
        ),
        Some(_) => return None,
    };
    Some(StoreError::InvalidState(why))
}

/// Plans `items` against the `locked` runs with the rules of `complete_run`.
pub(in crate::store) fn plan_completions(
    locked: Vec<crate::run::Run>,
    items: &[(crate::run::RunId, crate::run::RunCompletion)],
) -> CompletionPlan {
    let before: std::collections::HashMap<_, _> = locked.into_iter().map(|r| (r.id, r)).collect();
    let mut written = std::collections::HashSet::new();
    let mut plan = CompletionPlan {
        writes: Vec::new(),
        items: Vec::with_capacity(items.len()),
        before: std::collections::HashMap::new(),
    };
    for (id, completion) in items {
        let item = if !completion.state.is_final() {
            PlannedItem::Refused(not_final(completion.state))
        } else {
            match before.get(id) {
                None => PlannedItem::Refused(StoreError::NotFound(format!("run {id}"))),
                Some(run) => match report_refused(run, completion) {
                    Some(refused) => PlannedItem::Refused(refused),
                    None if written.contains(id) => PlannedItem::Repeat(*id),
                    None if run.state.is_final() => PlannedItem::Final(*id),
                    None => {
                        let tail = completed_tail(run, completion);
                        written.insert(*id);
                        plan.writes.push((*id, completion.clone(), tail));
                        PlannedItem::Write(*id)
                    }
                },
            }
        };
        plan.items.push(item);
    }
    plan.before = before;
    plan
}

/// `run` as the completion write leaves it: the write sets exactly these columns, from the
/// row as it was read (locked, or checked to be unchanged by its version) and the completion.
fn completed_run(
    run: crate::run::Run,
    completion: &crate::run::RunCompletion,
    tail: &str,
) -> crate::run::Run {
    let dispatched_now = run.dispatched_at.is_none() && completion.dispatched_at().is_some();
    crate::run::Run {
        state: completion.state,
        output: completion.output.clone().map(sqlx::types::Json),
        error: completion.error.clone(),
        log_tail: tail.to_owned(),
        started_at: run.started_at.or(completion.started_at),
        finished_at: Some(completion.finished_at),
        lease_until: None,
        dispatch_attempts: run.dispatch_attempts + i32::from(dispatched_now),
        dispatched_at: run.dispatched_at.or(completion.dispatched_at()),
        ..run
    }
}

impl CompletionPlan {
    /// Each item's outcome, given the planned writes that were `written` (the rest found their
    /// row changed since it was read): the written runs are built from the rows read and the
    /// completions ([`completed_run`]), not read back.
    pub(in crate::store) fn outcomes(
        self,
        written: &std::collections::HashSet<crate::run::RunId>,
    ) -> Vec<Result<crate::store::Completion, StoreError>> {
        use crate::store::Completion;
        let mut before = self.before;
        let changed: std::collections::HashMap<_, _> = self
            .writes
            .iter()
            .filter(|(id, _, _)| written.contains(id))
            .filter_map(|(id, c, tail)| {
                before
                    .remove(id)
                    .map(|run| (*id, completed_run(run, c, tail)))
            })
            .collect();
        let now_final = |id| changed.get(&id).or_else(|| before.get(&id)).cloned();
        self.items
            .into_iter()
            .map(|item| match item {
                PlannedItem::Refused(e) => Err(e),
                PlannedItem::Final(id) | PlannedItem::Repeat(id) => now_final(id)
                    .map(Completion::AlreadyFinal)
                    .ok_or_else(|| StoreError::NotFound(format!("run {id}"))),
                PlannedItem::Write(id) => match changed.get(&id) {
                    Some(run) => Ok(Completion::Applied(run.clone())),
                    None => before
                        .get(&id)
                        .cloned()
                        .map(Completion::AlreadyFinal)
                        .ok_or_else(|| StoreError::NotFound(format!("run {id}"))),
                },
            })
            .collect()
    }
}

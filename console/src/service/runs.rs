//! Runs of a tenant: listing with filters and a cursor, detail (timeline, attempt chain),
//! cancel and re-run.

use mthpt_engine::outcome::{Finish, Finished, finish_run};
use mthpt_engine::run::{Run, RunCompletion, RunFilter, RunId, RunState};
use mthpt_engine::tenant::Tenant;
use serde_json::json;

use super::{Change, Services, audit, quotas};
use crate::service::access::{Action, Caller, tenant_access};
use crate::service::error::{ApiError, ApiResult, Code};

/// One page of a listing, and the cursor of the next page (none on the last page).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// The cursor that continues a newest-first listing after the item with id `id`. Clients
/// treat it as opaque; it stays valid while new items are inserted (keyset paging).
pub fn cursor_after(id: i64) -> String {
    format!("c{id:x}")
}

/// The id a cursor continues after; a cursor this server did not make is a validation error.
pub fn parse_cursor(cursor: &str) -> ApiResult<i64> {
    cursor
        .strip_prefix('c')
        .and_then(|hex| i64::from_str_radix(hex, 16).ok())
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::field("cursor", "not a cursor returned by this API"))
}

/// The page of `items` (asked for with `limit`), with the cursor after its last item when the
/// page is full.
pub fn page<T>(items: Vec<T>, limit: i64, id: impl Fn(&T) -> i64) -> Page<T> {
    let full = i64::try_from(items.len()).is_ok_and(|n| n >= limit);
    let next_cursor = if full {
        items.last().map(|last| cursor_after(id(last)))
    } else {
        None
    };
    Page { items, next_cursor }
}

/// A page of a tenant's runs, newest first.
pub async fn list(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    mut filter: RunFilter,
    cursor: Option<&str>,
    limit: i64,
) -> ApiResult<Page<Run>> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    if let Some(c) = cursor {
        filter.before_id = Some(RunId(parse_cursor(c)?));
    }
    filter.limit = Some(limit);
    let mut tx = services.read().await?;
    let runs = tx.list_runs(tenant.id, &filter).await?;
    Ok(page(runs, limit, |r| r.id.0))
}

/// A run with what people ask about it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunDetail {
    pub run: Run,
    pub task_name: String,
    /// Every attempt (and shard) of the same occurrence, this run included, in order.
    pub attempts: Vec<Run>,
    /// (event, instant) for the steps the run went through: scheduled, due, claimed,
    /// dispatched, started, finished.
    pub timeline: Vec<(&'static str, i64)>,
}

/// The steps `run` has been through, in the order they happened (a run claimed ahead of its
/// due time shows `claimed` before `due`; steps at the same instant keep their natural order).
pub fn timeline(run: &Run) -> Vec<(&'static str, i64)> {
    let mut steps = vec![("scheduled", run.scheduled_at), ("created", run.created_at)];
    if run.due_at != run.scheduled_at {
        steps.push(("due", run.due_at));
    }
    let optional = [
        ("claimed", run.claimed_at),
        ("dispatched", run.dispatched_at),
        ("started", run.started_at),
        ("finished", run.finished_at),
    ];
    steps.extend(
        optional
            .into_iter()
            .filter_map(|(e, at)| at.map(|at| (e, at))),
    );
    steps.sort_by_key(|(_, at)| *at);
    steps
}

pub async fn get(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: RunId,
) -> ApiResult<RunDetail> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    let run = tx.get_run(tenant.id, id).await?;
    let attempts = tx
        .occurrence_runs(tenant.id, run.task_id, run.scheduled_at)
        .await?;
    // A deleted task keeps its history: its name is still shown.
    let task_name = match tx.get_task(tenant.id, run.task_id).await {
        Ok(task) => task.name,
        Err(mthpt_engine::store::StoreError::NotFound(_)) => {
            format!("deleted task {}", run.task_id)
        }
        Err(e) => return Err(e.into()),
    };
    let timeline = timeline(&run);
    Ok(RunDetail {
        run,
        task_name,
        attempts,
        timeline,
    })
}

/// Cancels a run that has not finished: it is `cancelled` at once (no retry, no chain
/// child). A pending or claimed run that was not sent yet is never sent (dispatch is fenced on
/// the claimed state). One an executor instance may hold (running, or on its way there) is
/// also marked for a cancel request: an engine's watchdog tells that instance, whose handler
/// sees its cancellation; the result it reports later is accepted and ignored (the run stays
/// cancelled), like any result for a finished run.
pub async fn cancel(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: RunId,
    reason: Option<&str>,
) -> ApiResult<Run> {
    let tenant = tenant_access(services, caller, tenant, Action::Operate).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    let run = tx.get_run(tenant.id, id).await?;
    if run.state.is_final() {
        return Err(ApiError::new(
            Code::Conflict,
            format!(
                "run {id} already finished as {}; nothing to cancel",
                run.state
            ),
        ));
    }
    let reason = reason.unwrap_or("cancelled by a person");
    // As any end of a run: the schedule goes on (its next occurrence), no retry, no child.
    let finish = Finish {
        completion: RunCompletion {
            state: RunState::Cancelled,
            output: None,
            error: Some(format!("{reason} ({})", caller.actor())),
            log: None,
            started_at: run.started_at,
            finished_at: now,
            reported_by: None,
        },
        retryable: false,
    };
    let (run, effects) = match finish_run(tx.as_mut(), id, None, &finish, 0.0).await? {
        Finished::Applied { run, effects, .. } => (run, effects),
        Finished::AlreadyFinal(run) => {
            return Err(ApiError::new(
                Code::Conflict,
                format!(
                    "run {id} already finished as {}; nothing to cancel",
                    run.state
                ),
            ));
        }
    };
    let told = tx.request_run_cancel(tenant.id, id, now).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "run.cancel",
            target_kind: "run",
            target_id: id.to_string(),
            details: json!({ "task_id": run.task_id, "reason": reason, "executor_told": told }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    mthpt_engine::metrics::run_finished(run.state, run.trigger_kind);
    services.run_changed(&run, now);
    if let Some(next) = &effects.next_occurrence {
        services.run_changed(next, now);
    }
    Ok(run)
}

/// Runs a run's task again now, with the same parameters: a new manual run, within the
/// tenant's quotas as a trigger is (`max_fires_per_second`, `max_waiting_runs`).
pub async fn rerun(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: RunId,
) -> ApiResult<Run> {
    let tenant = tenant_access(services, caller, tenant, Action::Operate).await?;
    let now = services.now();
    let rerun = rerun_within_quotas(services, caller, &tenant, id, now).await;
    quotas::after_check(services, &tenant, rerun).await
}

async fn rerun_within_quotas(
    services: &Services,
    caller: &Caller,
    tenant: &Tenant,
    id: RunId,
    now: i64,
) -> ApiResult<Run> {
    quotas::check_fire(services, tenant, now).await?;
    let mut tx = services.write().await?;
    let original = tx.get_run(tenant.id, id).await?;
    quotas::check_new_waiting_run(tx.as_mut(), tenant, now).await?;
    let params = original.params.as_ref().map(|p| p.0.clone());
    let run = tx
        .trigger_task(tenant.id, original.task_id, params, &caller.actor(), now)
        .await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "run.rerun",
            target_kind: "run",
            target_id: id.to_string(),
            details: json!({ "task_id": run.task_id, "new_run_id": run.id }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        assert_eq!(parse_cursor(&cursor_after(12_345)).unwrap(), 12_345);
        for bad in ["", "c", "12", "czz", "c-5", "c0"] {
            let err = parse_cursor(bad).unwrap_err();
            assert_eq!(err.errors[0].field, "cursor", "{bad}");
        }
    }

    #[test]
    fn only_a_full_page_has_a_next_cursor() {
        let full = page(vec![9_i64, 8, 7], 3, |x| *x);
        assert_eq!(full.next_cursor, Some(cursor_after(7)));
        let last = page(vec![2_i64, 1], 3, |x| *x);
        assert_eq!(last.next_cursor, None);
    }
}

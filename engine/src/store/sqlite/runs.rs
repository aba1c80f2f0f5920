//! The run operations SQLite writes its own way (see [`runs`](crate::store::runs)): one writer
//! at a time, so batches are loops of single-row statements (several of them the shared
//! operations themselves) and nothing is locked row by row; lists travel as JSON arrays.

use sqlx::sqlite::SqliteConnection;

use super::json_ids;
use crate::app::{AppId, ExecutorId};
use crate::run::{ClaimedTransition, Fence, NewRun, Run, RunCompletion, RunId, TriggerKind};
use crate::store::Runs;
use crate::store::claims::{
    ClaimApp, ClaimCandidate, StoredBucket, charge_buckets, claim_windows, fire_buckets,
    pick_claims, rated_tenants,
};
use crate::store::tx::{StoreTx, found};
use crate::store::{ClaimRequest, Completion, Result, StartClaimed, StartedRun, StoreError};
use crate::task::TaskId;

/// [`Runs::start_claimed_runs`](crate::store::Runs::start_claimed_runs) on SQLite.
pub(crate) async fn start_claimed_runs(
    c: &mut SqliteConnection,
    items: &[StartClaimed],
    now: i64,
) -> Result<Vec<StartedRun>> {
    let mut started = Vec::with_capacity(items.len());
    for item in items {
        let moved: Option<StartedRun> = sqlx::query_as(
            "UPDATE runs SET state = CASE WHEN state = 'claimed' THEN 'running' ELSE state END,
                 executor_id = $4, dispatched_at = $5, started_at = COALESCE(started_at, $7),
                 deadline_at = CASE WHEN state = 'claimed' THEN $6 ELSE deadline_at END,
                 cancel_pending_at = CASE WHEN state = 'cancelled' THEN $7 ELSE cancel_pending_at END,
                 dispatch_attempts = dispatch_attempts + 1
             WHERE id = $1 AND claim_owner = $2 AND fence = $3
               AND (state = 'claimed'
                    OR (state IN ('succeeded', 'failed', 'timed_out', 'cancelled') AND dispatched_at IS NULL))
             RETURNING id, state = 'running' AS running",
        )
        .bind(item.fence.run_id)
        .bind(&item.fence.node)
        .bind(item.fence.token)
        .bind(item.executor_id)
        .bind(item.dispatched_at)
        .bind(item.deadline_at)
        .bind(now)
        .fetch_optional(&mut *c)
        .await?;
        if moved.is_some() {
            started.extend(moved);
            continue;
        }
        // Its result came first and recorded the dispatch: not running, and still this
        // node's claim (not fenced).
        let done: Option<StartedRun> = sqlx::query_as(
            "SELECT id, FALSE AS running FROM runs
             WHERE id = $1 AND claim_owner = $2 AND fence = $3
               AND state IN ('succeeded', 'failed', 'timed_out', 'cancelled') AND dispatched_at IS NOT NULL",
        )
        .bind(item.fence.run_id)
        .bind(&item.fence.node)
        .bind(item.fence.token)
        .fetch_optional(&mut *c)
        .await?;
        started.extend(done);
    }
    Ok(started)
}

/// [`Runs::latest_scheduled_runs_before`](crate::store::Runs::latest_scheduled_runs_before) on SQLite.
pub(crate) async fn latest_scheduled_runs_before(
    c: &mut SqliteConnection,
    items: &[(TaskId, i64)],
) -> Result<Vec<Run>> {
    let mut found = Vec::with_capacity(items.len());
    for (task, before) in items {
        let row: Option<Run> = sqlx::query_as(
            "SELECT * FROM runs
             WHERE task_id = $1 AND scheduled_at < $2 AND trigger_kind = 'schedule' AND attempt = 1
             ORDER BY scheduled_at DESC LIMIT 1",
        )
        .bind(task)
        .bind(before)
        .fetch_optional(&mut *c)
        .await?;
        found.extend(row);
    }
    Ok(found)
}

/// [`Runs::record_dispatch_intent`](crate::store::Runs::record_dispatch_intent) on SQLite.
pub(crate) async fn record_dispatch_intent(
    c: &mut SqliteConnection,
    items: &[(Fence, ExecutorId)],
    now: i64,
) -> Result<Vec<RunId>> {
    let mut recorded = Vec::with_capacity(items.len());
    for (fence, executor) in items {
        let row: Option<(RunId,)> = sqlx::query_as(
            "UPDATE runs SET executor_id = $4
             WHERE id = $1 AND state = 'claimed' AND claim_owner = $2 AND fence = $3
               AND lease_until > $5
             RETURNING id",
        )
        .bind(fence.run_id)
        .bind(&fence.node)
        .bind(fence.token)
        .bind(executor)
        .bind(now)
        .fetch_optional(&mut *c)
        .await?;
        recorded.extend(row.map(|(id,)| id));
    }
    Ok(recorded)
}

/// [`Runs::release_claimed_runs`](crate::store::Runs::release_claimed_runs) on SQLite.
pub(crate) async fn release_claimed_runs(
    tx: &mut StoreTx,
    fences: &[Fence],
    now: i64,
) -> Result<Vec<RunId>> {
    let mut released = Vec::with_capacity(fences.len());
    for fence in fences {
        match tx
            .transition_claimed(fence, &ClaimedTransition::Released, now)
            .await
        {
            Ok(run) => released.push(run.id),
            Err(StoreError::Fenced { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(released)
}

/// [`Runs::complete_runs`](crate::store::Runs::complete_runs) on SQLite.
pub(crate) async fn complete_runs(
    tx: &mut StoreTx,
    app: Option<AppId>,
    items: &[(RunId, RunCompletion)],
) -> Result<Vec<Result<Completion>>> {
    // One writer at a time: item by item is as good as one statement here.
    let mut out = Vec::with_capacity(items.len());
    for (id, completion) in items {
        out.push(match tx.complete_run(*id, app, completion).await {
            Ok(c) => Ok(c),
            Err(e @ (StoreError::NotFound(_) | StoreError::InvalidState(_))) => Err(e),
            Err(e) => return Err(e),
        });
    }
    Ok(out)
}

/// [`Runs::insert_runs`](crate::store::Runs::insert_runs) on SQLite.
pub(crate) async fn insert_runs(tx: &mut StoreTx, runs: &[NewRun], now: i64) -> Result<Vec<Run>> {
    let mut inserted = Vec::with_capacity(runs.len());
    for run in runs {
        if let Some(r) = tx.insert_run(run, now).await? {
            inserted.push(r);
        }
    }
    Ok(inserted)
}

/// [`Runs::lock_due_runs`](crate::store::Runs::lock_due_runs) on SQLite. One writer at a
/// time (nothing is locked row by row): each app's window is read, the turns are taken here
/// ([`pick_claims`]), and the picked runs are read in one statement (checked again all the
/// same).
pub(crate) async fn lock_due_runs(
    c: &mut SqliteConnection,
    req: &ClaimRequest,
) -> Result<Vec<Run>> {
    let apps = claim_apps(c, &req.groups).await?;
    // The buckets of the rate-limited tenants (one writer: no other claim holds them).
    let rated = rated_tenants(&apps);
    let stored: Vec<StoredBucket> = if rated.is_empty() {
        Vec::new()
    } else {
        sqlx::query_as(
            "SELECT id AS tenant_id, fire_tokens, fire_tokens_at FROM tenants
             WHERE id IN (SELECT value FROM json_each($1))",
        )
        .bind(serde_json::Value::from(rated.iter().map(|t| t.0).collect::<Vec<_>>()).to_string())
        .fetch_all(&mut *c)
        .await?
    };
    let mut buckets = fire_buckets(&apps, &stored, req.now);
    let windows = claim_windows(&apps, req.limit, &buckets, req.now);
    let mut fronts = Vec::with_capacity(windows.len());
    for w in &windows {
        let candidates: Vec<ClaimCandidate> = sqlx::query_as(
            "SELECT id, due_at, priority, state, lease_until FROM runs
             WHERE node_group = $1 AND app_id = $2 AND due_at <= $3
               AND started_at IS NULL AND finished_at IS NULL
               AND ($5 OR state = 'pending' OR lease_until <= $6)
             ORDER BY due_at, priority DESC, id
             LIMIT $4",
        )
        .bind(&w.node_group)
        .bind(w.app_id)
        .bind(req.now.saturating_add(req.horizon_ms))
        .bind(w.window)
        .bind(w.in_flight_counts)
        .bind(req.now)
        .fetch_all(&mut *c)
        .await?;
        fronts.push((w, candidates));
    }
    let picked = pick_claims(&fronts, req.now, req.limit);
    if picked.is_empty() {
        return Ok(Vec::new());
    }
    let mut runs: Vec<Run> = sqlx::query_as(
        "SELECT * FROM runs
         WHERE id IN (SELECT value FROM json_each($2))
           AND state IN ('pending', 'claimed') AND (state = 'pending' OR lease_until <= $1)
           AND started_at IS NULL AND finished_at IS NULL",
    )
    .bind(req.now)
    .bind(serde_json::Value::from(picked).to_string())
    .fetch_all(&mut *c)
    .await?;
    for (tenant, tokens, at) in charge_buckets(&apps, &mut buckets, &runs, req.now) {
        sqlx::query("UPDATE tenants SET fire_tokens = $2, fire_tokens_at = $3 WHERE id = $1")
            .bind(tenant)
            .bind(tokens)
            .bind(at)
            .execute(&mut *c)
            .await?;
    }
    runs.sort_by_key(|r| (r.due_at, -r.priority, r.id));
    Ok(runs)
}

/// [`Runs::claim_locked_runs`](crate::store::Runs::claim_locked_runs) on SQLite: one
/// statement claims the runs, one more per instance records the intents. Returns each run's
/// new fencing token.
pub(crate) async fn claim_locked_runs(
    c: &mut SqliteConnection,
    req: &ClaimRequest,
    runs: &[Run],
    intents: &std::collections::HashMap<RunId, ExecutorId>,
) -> Result<Vec<(RunId, i64)>> {
    let claimed: Vec<(RunId, i64)> = sqlx::query_as(
        "UPDATE runs SET state = 'claimed', claim_owner = $1, lease_until = $2, fence = fence + 1,
             claimed_at = $3
         WHERE id IN (SELECT value FROM json_each($4))
         RETURNING id, fence",
    )
    .bind(&req.node)
    .bind(req.now.saturating_add(req.lease_ms))
    .bind(req.now)
    .bind(json_ids(
        &runs.iter().map(|r| r.id).collect::<Vec<_>>(),
        |i| i.0,
    ))
    .fetch_all(&mut *c)
    .await?;
    let mut by_instance: std::collections::BTreeMap<ExecutorId, Vec<RunId>> =
        std::collections::BTreeMap::new();
    for (id, x) in intents {
        by_instance.entry(*x).or_default().push(*id);
    }
    for (x, ids) in by_instance {
        sqlx::query(
            "UPDATE runs SET executor_id = $1 WHERE id IN (SELECT value FROM json_each($2))",
        )
        .bind(x)
        .bind(json_ids(&ids, |i| i.0))
        .execute(&mut *c)
        .await?;
    }
    Ok(claimed)
}

/// The apps with runs waiting in `groups`, with their executors' capacity and the runs they
/// hold (as on PostgreSQL, a skip scan of `runs_claimable`: one index probe per app, however
/// many runs wait).
async fn claim_apps(c: &mut SqliteConnection, groups: &[String]) -> Result<Vec<ClaimApp>> {
    let groups = serde_json::Value::from(groups.to_vec()).to_string();
    Ok(sqlx::query_as(
        "WITH RECURSIVE pairs (node_group, app_id) AS (
             SELECT g.value, (
                 SELECT r.app_id FROM runs r
                 WHERE r.node_group = g.value AND r.app_id IS NOT NULL
                   AND r.started_at IS NULL AND r.finished_at IS NULL
                 ORDER BY r.app_id LIMIT 1)
             FROM json_each($1) AS g
           UNION ALL
             SELECT p.node_group, (
                 SELECT r.app_id FROM runs r
                 WHERE r.node_group = p.node_group AND r.app_id > p.app_id
                   AND r.started_at IS NULL AND r.finished_at IS NULL
                 ORDER BY r.app_id LIMIT 1)
             FROM pairs p WHERE p.app_id IS NOT NULL
         )
         SELECT p.node_group, a.id AS app_id, a.tenant_id, t.weight,
             (SELECT count(*) FROM executors e
              WHERE e.app_id = a.id AND e.state IN ('up', 'draining')) AS live,
             (SELECT COALESCE(sum(e.capacity), 0) FROM executors e
              WHERE e.app_id = a.id AND e.state = 'up') AS capacity,
             (SELECT count(*) FROM runs r
              WHERE r.app_id = a.id AND r.started_at IS NOT NULL AND r.finished_at IS NULL) AS running,
             t.max_concurrent_runs, t.max_fires_per_second, t.fire_burst, t.max_tasks,
             t.max_waiting_runs,
             CASE WHEN t.max_concurrent_runs IS NOT NULL THEN
                 (SELECT count(*) FROM apps ta JOIN runs r ON r.app_id = ta.id
                  WHERE ta.tenant_id = t.id AND r.started_at IS NOT NULL AND r.finished_at IS NULL)
             END AS tenant_running
         FROM pairs p JOIN apps a ON a.id = p.app_id JOIN tenants t ON t.id = a.tenant_id
         -- A disabled tenant's runs wait, unclaimed, until it is enabled again.
         WHERE NOT t.disabled",
    )
    .bind(&groups)
    .fetch_all(&mut *c)
    .await?)
}

/// [`Runs::try_lock_runs`](crate::store::Runs::try_lock_runs) on SQLite.
pub(crate) async fn try_lock_runs(c: &mut SqliteConnection, ids: &[RunId]) -> Result<Vec<RunId>> {
    // One writer at a time: every row is free to this transaction.
    let rows: Vec<(RunId,)> = sqlx::query_as(
        "SELECT id FROM runs WHERE id IN (SELECT value FROM json_each($1)) ORDER BY id",
    )
    .bind(json_ids(ids, |i| i.0))
    .fetch_all(&mut *c)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// [`Runs::delete_pending_runs`](crate::store::Runs::delete_pending_runs) on SQLite.
pub(crate) async fn delete_pending_runs(
    c: &mut SqliteConnection,
    task: TaskId,
    triggers: &[TriggerKind],
) -> Result<u64> {
    let kinds = serde_json::Value::from(triggers.iter().map(|t| t.as_str()).collect::<Vec<_>>())
        .to_string();
    let done = sqlx::query(
        "DELETE FROM runs WHERE task_id = $1 AND state = 'pending'
               AND trigger_kind IN (SELECT value FROM json_each($2))",
    )
    .bind(task)
    .bind(kinds)
    .execute(&mut *c)
    .await?;
    Ok(done.rows_affected())
}

/// [`Runs::running_runs_on_executors`](crate::store::Runs::running_runs_on_executors) on SQLite.
pub(crate) async fn running_runs_on_executors(
    c: &mut SqliteConnection,
    executors: &[ExecutorId],
) -> Result<Vec<Run>> {
    Ok(sqlx::query_as(
        "SELECT * FROM runs WHERE state = 'running'
               AND started_at IS NOT NULL AND finished_at IS NULL
               AND executor_id IN (SELECT value FROM json_each($1)) ORDER BY id",
    )
    .bind(json_ids(executors, |i| i.0))
    .fetch_all(&mut *c)
    .await?)
}

/// [`Runs::running_runs_missing_from`](crate::store::Runs::running_runs_missing_from) on SQLite.
pub(crate) async fn running_runs_missing_from(
    c: &mut SqliteConnection,
    executor: ExecutorId,
    held: &[i64],
    sent_before: i64,
) -> Result<Vec<RunId>> {
    let rows: Vec<(RunId,)> = sqlx::query_as(
        "SELECT id FROM runs WHERE state = 'running' AND executor_id = $1
           AND started_at IS NOT NULL AND finished_at IS NULL
           AND id NOT IN (SELECT value FROM json_each($2))
           AND COALESCE(dispatched_at, started_at) <= $3
         ORDER BY id",
    )
    .bind(executor)
    .bind(serde_json::Value::from(held.to_vec()).to_string())
    .bind(sent_before)
    .fetch_all(&mut *c)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// [`Runs::lock_chain_runs`](crate::store::Runs::lock_chain_runs) on SQLite.
pub(crate) async fn lock_chain_runs(
    c: &mut SqliteConnection,
    chain_root: RunId,
    tasks: &[TaskId],
) -> Result<Vec<Run>> {
    let root: Option<(i64,)> = sqlx::query_as("SELECT id FROM runs WHERE id = $1")
        .bind(chain_root)
        .fetch_optional(&mut *c)
        .await?;
    found(root, || format!("run {chain_root}"))?;
    Ok(sqlx::query_as(
        "SELECT * FROM runs WHERE (id = $1 OR chain_root_id = $1)
               AND task_id IN (SELECT value FROM json_each($2)) ORDER BY id",
    )
    .bind(chain_root)
    .bind(json_ids(tasks, |i| i.0))
    .fetch_all(&mut *c)
    .await?)
}

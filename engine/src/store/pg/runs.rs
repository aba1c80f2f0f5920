//! The run operations PostgreSQL writes its own way (see [`runs`](crate::store::runs)): whole
//! batches in one statement over `UNNEST` arrays, claims with `FOR UPDATE SKIP LOCKED`.

use sqlx::postgres::PgConnection;
use sqlx::types::Json;

use super::raw_ids;
use crate::app::{AppId, ExecutorId};
use crate::run::{Fence, NewRun, Run, RunCompletion, RunId, TriggerKind};
use crate::store::claims::{
    ClaimApp, StoredBucket, charge_buckets, claim_windows, fire_buckets, rated_tenants,
};
use crate::store::completion::plan_completions;
use crate::store::tx::{found, reference_or};
use crate::store::{ClaimRequest, Completion, Result, StartClaimed, StartedRun};
use crate::task::TaskId;

/// [`Runs::start_claimed_runs`](crate::store::Runs::start_claimed_runs) on PostgreSQL.
pub(crate) async fn start_claimed_runs(
    c: &mut PgConnection,
    items: &[StartClaimed],
    now: i64,
) -> Result<Vec<StartedRun>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = items.iter().map(|i| i.fence.run_id.0).collect();
    // Locked in id order first, as result batches lock them: the two never deadlock. Only the
    // runs the write below changes: a run whose result came first and recorded its dispatch
    // (the wrapper echoes the request's send time) is neither locked nor written again.
    sqlx::query(
        "SELECT id FROM runs WHERE id = ANY($1)
           AND (state = 'claimed'
                OR (state IN ('succeeded', 'failed', 'timed_out', 'cancelled') AND dispatched_at IS NULL))
         ORDER BY id FOR UPDATE",
    )
    .bind(&ids)
    .execute(&mut *c)
    .await?;
    // A run whose result came first and recorded its dispatch is not written again, and is
    // answered as not running (not as fenced: this node's claim still stands).
    Ok(sqlx::query_as(
        "WITH moved AS (
         UPDATE runs r SET state = CASE WHEN r.state = 'claimed' THEN 'running' ELSE r.state END,
             executor_id = u.executor_id, dispatched_at = u.dispatched_at,
             started_at = COALESCE(r.started_at, $7),
             deadline_at = CASE WHEN r.state = 'claimed' THEN u.deadline_at ELSE r.deadline_at END,
             cancel_pending_at = CASE WHEN r.state = 'cancelled' THEN $7 ELSE r.cancel_pending_at END,
             dispatch_attempts = r.dispatch_attempts + 1
         FROM UNNEST($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[])
           AS u(id, owner, fence, executor_id, dispatched_at, deadline_at)
         WHERE r.id = u.id AND r.claim_owner = u.owner AND r.fence = u.fence
           AND (r.state = 'claimed'
                OR (r.state IN ('succeeded', 'failed', 'timed_out', 'cancelled') AND r.dispatched_at IS NULL))
         RETURNING r.id, r.state = 'running' AS running)
         SELECT id, running FROM moved
         UNION ALL
         SELECT r.id, FALSE FROM runs r
           JOIN UNNEST($1::bigint[], $2::text[], $3::bigint[]) AS u(id, owner, fence) ON r.id = u.id
         WHERE r.claim_owner = u.owner AND r.fence = u.fence
           AND r.state IN ('succeeded', 'failed', 'timed_out', 'cancelled') AND r.dispatched_at IS NOT NULL",
    )
    .bind(&ids)
    .bind(items.iter().map(|i| i.fence.node.clone()).collect::<Vec<_>>())
    .bind(items.iter().map(|i| i.fence.token).collect::<Vec<_>>())
    .bind(items.iter().map(|i| i.executor_id.0).collect::<Vec<_>>())
    .bind(items.iter().map(|i| i.dispatched_at).collect::<Vec<_>>())
    .bind(items.iter().map(|i| i.deadline_at).collect::<Vec<_>>())
    .bind(now)
    .fetch_all(&mut *c)
    .await?)
}

/// [`Runs::latest_scheduled_runs_before`](crate::store::Runs::latest_scheduled_runs_before) on PostgreSQL.
pub(crate) async fn latest_scheduled_runs_before(
    c: &mut PgConnection,
    items: &[(TaskId, i64)],
) -> Result<Vec<Run>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    // One index probe (the occurrence key, backwards) per item.
    Ok(sqlx::query_as(
        "SELECT p.* FROM UNNEST($1::bigint[], $2::bigint[]) AS u(task_id, before)
         CROSS JOIN LATERAL (
             SELECT * FROM runs r
             WHERE r.task_id = u.task_id AND r.scheduled_at < u.before
               AND r.trigger_kind = 'schedule' AND r.attempt = 1
             ORDER BY r.scheduled_at DESC LIMIT 1) p",
    )
    .bind(items.iter().map(|(t, _)| t.0).collect::<Vec<_>>())
    .bind(items.iter().map(|(_, at)| *at).collect::<Vec<_>>())
    .fetch_all(&mut *c)
    .await?)
}

/// [`Runs::record_dispatch_intent`](crate::store::Runs::record_dispatch_intent) on PostgreSQL.
pub(crate) async fn record_dispatch_intent(
    c: &mut PgConnection,
    items: &[(Fence, ExecutorId)],
    now: i64,
) -> Result<Vec<RunId>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(RunId,)> = sqlx::query_as(
        "UPDATE runs r SET executor_id = u.executor_id
         FROM UNNEST($1::bigint[], $2::text[], $3::bigint[], $4::bigint[])
           AS u(id, owner, fence, executor_id)
         WHERE r.id = u.id AND r.state = 'claimed' AND r.claim_owner = u.owner
           AND r.fence = u.fence AND r.lease_until > $5
         RETURNING r.id",
    )
    .bind(items.iter().map(|(f, _)| f.run_id.0).collect::<Vec<_>>())
    .bind(
        items
            .iter()
            .map(|(f, _)| f.node.clone())
            .collect::<Vec<_>>(),
    )
    .bind(items.iter().map(|(f, _)| f.token).collect::<Vec<_>>())
    .bind(items.iter().map(|(_, e)| e.0).collect::<Vec<_>>())
    .bind(now)
    .fetch_all(&mut *c)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// [`Runs::release_claimed_runs`](crate::store::Runs::release_claimed_runs) on PostgreSQL.
pub(crate) async fn release_claimed_runs(
    c: &mut PgConnection,
    fences: &[Fence],
    now: i64,
) -> Result<Vec<RunId>> {
    if fences.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(RunId,)> = sqlx::query_as(
        "UPDATE runs r SET state = 'pending', claim_owner = NULL, lease_until = NULL,
             dispatch_attempts = r.dispatch_attempts + 1
         FROM UNNEST($1::bigint[], $2::text[], $3::bigint[]) AS u(id, owner, fence)
         WHERE r.id = u.id AND r.state = 'claimed' AND r.claim_owner = u.owner
           AND r.fence = u.fence AND r.lease_until > $4
         RETURNING r.id",
    )
    .bind(fences.iter().map(|f| f.run_id.0).collect::<Vec<_>>())
    .bind(fences.iter().map(|f| f.node.clone()).collect::<Vec<_>>())
    .bind(fences.iter().map(|f| f.token).collect::<Vec<_>>())
    .bind(now)
    .fetch_all(&mut *c)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// A run as a completion read it, with its row version (`xmin`).
#[derive(sqlx::FromRow)]
struct Versioned {
    #[sqlx(flatten)]
    run: Run,
    version: String,
}

/// [`Runs::complete_runs`](crate::store::Runs::complete_runs) on PostgreSQL.
///
/// The runs are read without a lock and written only where the row is still the version read
/// (its `xmin`): in the common case nothing else changes them in between, and the write takes
/// each row's lock itself, in id order (the statement drives an index scan of the primary key
/// with the sorted ids), so no separate lock is written for each row first. A run another
/// transaction changed in between (its start, a timeout) is not written: the items naming it
/// are done again after locking it, as [`complete_runs_locked`] does.
pub(crate) async fn complete_runs(
    c: &mut PgConnection,
    app: Option<AppId>,
    items: &[(RunId, RunCompletion)],
) -> Result<Vec<Result<Completion>>> {
    let ids = final_ids(items);
    let read: Vec<Versioned> = if ids.is_empty() {
        Vec::new()
    } else {
        sqlx::query_as(
            "SELECT runs.*, xmin::text AS version FROM runs WHERE id = ANY($1)
               AND ($2 IS NULL OR runs.app_id = $2)",
        )
        .bind(&ids)
        .bind(app)
        .fetch_all(&mut *c)
        .await?
    };
    let versions: std::collections::HashMap<RunId, String> =
        read.iter().map(|v| (v.run.id, v.version.clone())).collect();
    let mut plan = plan_completions(read.into_iter().map(|v| v.run).collect(), items);
    plan.writes.sort_by_key(|(id, _, _)| *id);
    let written_ids: std::collections::HashSet<RunId> =
        write_completions(c, &plan.writes, Some(&versions))
            .await?
            .into_iter()
            .collect();
    let missed: std::collections::HashSet<RunId> = plan
        .writes
        .iter()
        .map(|(id, _, _)| *id)
        .filter(|id| !written_ids.contains(id))
        .collect();
    let mut out = plan.outcomes(&written_ids);
    if missed.is_empty() {
        return Ok(out);
    }
    let (at, again): (Vec<usize>, Vec<(RunId, RunCompletion)>) = items
        .iter()
        .enumerate()
        .filter(|(_, (id, _))| missed.contains(id))
        .map(|(i, item)| (i, item.clone()))
        .unzip();
    let redone = complete_runs_locked(c, app, &again).await?;
    for (i, outcome) in at.into_iter().zip(redone) {
        out[i] = outcome;
    }
    Ok(out)
}

/// The ids of the items with a final state, sorted, each once.
fn final_ids(items: &[(RunId, RunCompletion)]) -> Vec<i64> {
    let mut ids: Vec<i64> = items
        .iter()
        .filter(|(_, c)| c.state.is_final())
        .map(|(id, _)| id.0)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// [`complete_runs`] with the runs locked (in id order) before they are read.
async fn complete_runs_locked(
    c: &mut PgConnection,
    app: Option<AppId>,
    items: &[(RunId, RunCompletion)],
) -> Result<Vec<Result<Completion>>> {
    let ids = final_ids(items);
    let locked: Vec<Run> = if ids.is_empty() {
        Vec::new()
    } else {
        sqlx::query_as(
            "SELECT * FROM runs WHERE id = ANY($1)
               AND ($2 IS NULL OR runs.app_id = $2)
             ORDER BY id FOR UPDATE",
        )
        .bind(&ids)
        .bind(app)
        .fetch_all(&mut *c)
        .await?
    };
    let plan = plan_completions(locked, items);
    let written = write_completions(c, &plan.writes, None).await?;
    Ok(plan.outcomes(&written.into_iter().collect()))
}

/// Writes planned completions (sorted by id) in one statement and returns the ids of the rows
/// written; with `versions`, only rows still at the version read. The rows are not sent back:
/// what the write leaves is known from the row read and the completion
/// (`completion::completed_run`).
async fn write_completions(
    c: &mut PgConnection,
    w: &[(RunId, RunCompletion, String)],
    versions: Option<&std::collections::HashMap<RunId, String>>,
) -> Result<Vec<RunId>> {
    if w.is_empty() {
        return Ok(Vec::new());
    }
    let written: Vec<(RunId,)> = sqlx::query_as(
        "UPDATE runs r SET state = u.state, output = u.output, error = u.error,
             log_tail = u.log_tail, started_at = COALESCE(r.started_at, u.started_at),
             finished_at = u.finished_at, lease_until = NULL,
             dispatch_attempts = r.dispatch_attempts
                 + CASE WHEN r.dispatched_at IS NULL AND u.dispatched_at IS NOT NULL THEN 1 ELSE 0 END,
             dispatched_at = COALESCE(r.dispatched_at, u.dispatched_at)
         FROM UNNEST($1::bigint[], $2::text[], $3::jsonb[], $4::text[], $5::text[],
                     $6::bigint[], $7::bigint[], $8::bigint[], $9::text[])
           AS u(id, state, output, error, log_tail, started_at, finished_at, dispatched_at, version)
         WHERE r.id = u.id AND r.state IN ('pending', 'claimed', 'running') AND r.finished_at IS NULL
           AND (u.version IS NULL OR r.xmin = u.version::xid)
         RETURNING r.id",
    )
    .bind(w.iter().map(|(id, _, _)| id.0).collect::<Vec<_>>())
    .bind(
        w.iter()
            .map(|(_, c, _)| c.state.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(
        w.iter()
            .map(|(_, c, _)| c.output.as_ref().map(Json))
            .collect::<Vec<_>>(),
    )
    .bind(
        w.iter()
            .map(|(_, c, _)| c.error.clone())
            .collect::<Vec<_>>(),
    )
    .bind(
        w.iter()
            .map(|(_, _, tail)| tail.clone())
            .collect::<Vec<_>>(),
    )
    .bind(w.iter().map(|(_, c, _)| c.started_at).collect::<Vec<_>>())
    .bind(w.iter().map(|(_, c, _)| c.finished_at).collect::<Vec<_>>())
    .bind(
        w.iter()
            .map(|(_, c, _)| c.dispatched_at())
            .collect::<Vec<_>>(),
    )
    .bind(
        w.iter()
            .map(|(id, _, _)| versions.and_then(|v| v.get(id).cloned()))
            .collect::<Vec<_>>(),
    )
    .fetch_all(&mut *c)
    .await?;
    Ok(written.into_iter().map(|(id,)| id).collect())
}

/// [`Runs::insert_runs`](crate::store::Runs::insert_runs) on PostgreSQL: [`insert_runs_returning`]
/// returning whole rows.
pub(crate) async fn insert_runs(
    c: &mut PgConnection,
    runs: &[NewRun],
    now: i64,
) -> Result<Vec<Run>> {
    insert_runs_returning(c, runs, now, INSERT_RUNS_RETURNING_ALL).await
}

/// [`Runs::insert_runs_of_tasks`](crate::store::Runs::insert_runs_of_tasks) on PostgreSQL:
/// [`insert_runs_returning`] returning only each inserted run's task.
pub(crate) async fn insert_runs_of_tasks(
    c: &mut PgConnection,
    runs: &[NewRun],
    now: i64,
) -> Result<Vec<TaskId>> {
    let tasks: Vec<(TaskId,)> =
        insert_runs_returning(c, runs, now, INSERT_RUNS_RETURNING_TASK).await?;
    Ok(tasks.into_iter().map(|(t,)| t).collect())
}

/// The statement of [`insert_runs`] up to its `RETURNING` clause, which is given.
macro_rules! insert_runs_statement {
    ($returning:literal) => {
        concat!(
            "INSERT INTO runs (tenant_id, task_id, node_group, scheduled_at, due_at, attempt,
                 shard_index, shard_total, trigger_kind, state, priority, parent_run_id,
                 chain_root_id, params, triggered_by, created_at, app_id)
             SELECT tenant_id, task_id, node_group, scheduled_at, due_at, attempt, shard_index,
                 shard_total, trigger_kind, 'pending', priority, parent_run_id, chain_root_id,
                 params, triggered_by, $15,
                 (SELECT k.app_id FROM tasks k WHERE k.id = t.task_id AND k.tenant_id = t.tenant_id)
             FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[],
                 $6::int[], $7::int[], $8::int[], $9::text[], $10::int[], $11::bigint[],
                 $12::bigint[], $13::jsonb[], $14::text[])
               AS t(tenant_id, task_id, node_group, scheduled_at, due_at, attempt, shard_index,
                    shard_total, trigger_kind, priority, parent_run_id, chain_root_id, params,
                    triggered_by)
             -- An occurrence that exists is skipped without touching the unique index: a row
             -- another transaction is changing (claiming) would make this insert wait for it,
             -- and that transaction may be waiting for a task this one holds.
             WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.task_id = t.task_id
                 AND r.scheduled_at = t.scheduled_at AND r.attempt = t.attempt
                 AND r.shard_index = t.shard_index)
             ",
            $returning
        )
    };
}
const INSERT_RUNS_RETURNING_ALL: &str = insert_runs_statement!("RETURNING *");
const INSERT_RUNS_RETURNING_TASK: &str = insert_runs_statement!("RETURNING task_id");

/// [`insert_runs`] and [`insert_runs_of_tasks`], with the `statement` given (its `RETURNING`
/// clause), returning its rows as `T`.
///
/// An occurrence given twice is inserted once (the first); one that exists is skipped by
/// `NOT EXISTS`. The engine's callers (the claim's successors, a broadcast's shards) hold what
/// makes the occurrences theirs: the claim holds the successors' tasks locked, a broadcast's
/// dispatch holds the first shard's row (by its fence). No other transaction inserts the same
/// occurrence in between, so the statement needs no `ON CONFLICT` (a speculative insertion
/// checked the unique index once more and logged a confirmation record for every row). Should
/// another insert of the occurrence commit in between all the same, the unique index refuses
/// this statement and its transaction is rolled back whole: nothing is written twice, and the
/// caller tries again.
async fn insert_runs_returning<T>(
    c: &mut PgConnection,
    runs: &[NewRun],
    now: i64,
    statement: &'static str,
) -> Result<Vec<T>>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    let mut seen = std::collections::HashSet::with_capacity(runs.len());
    let runs: Vec<&NewRun> = runs
        .iter()
        .filter(|r| seen.insert((r.task_id, r.scheduled_at, r.attempt, r.shard_index)))
        .collect();
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let col = |f: fn(&NewRun) -> i64| runs.iter().map(|r| f(r)).collect::<Vec<i64>>();
    let col32 = |f: fn(&NewRun) -> i32| runs.iter().map(|r| f(r)).collect::<Vec<i32>>();
    let opt =
        |f: fn(&NewRun) -> Option<i64>| runs.iter().map(|r| f(r)).collect::<Vec<Option<i64>>>();
    sqlx::query_as(statement)
        .bind(col(|r| r.tenant_id.0))
        .bind(col(|r| r.task_id.0))
        .bind(
            runs.iter()
                .map(|r| r.node_group.clone())
                .collect::<Vec<_>>(),
        )
        .bind(col(|r| r.scheduled_at))
        .bind(col(|r| r.due_at))
        .bind(col32(|r| r.attempt))
        .bind(col32(|r| r.shard_index))
        .bind(col32(|r| r.shard_total))
        .bind(
            runs.iter()
                .map(|r| r.trigger_kind.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(col32(|r| r.priority))
        .bind(opt(|r| r.parent_run_id.map(|i| i.0)))
        .bind(opt(|r| r.chain_root_id.map(|i| i.0)))
        .bind(
            runs.iter()
                .map(|r| r.params.as_ref().map(Json))
                .collect::<Vec<_>>(),
        )
        .bind(
            runs.iter()
                .map(|r| r.triggered_by.clone())
                .collect::<Vec<_>>(),
        )
        .bind(now)
        .fetch_all(&mut *c)
        .await
        .map_err(|e| reference_or(e, || "a task or tenant of these runs".to_owned()))
}

/// [`Runs::lock_due_runs`](crate::store::Runs::lock_due_runs) on PostgreSQL: the apps'
/// windows ([`claim_windows`]) are ranked and locked in one statement.
pub(crate) async fn lock_due_runs(c: &mut PgConnection, req: &ClaimRequest) -> Result<Vec<Run>> {
    let apps = claim_apps(c, &req.groups).await?;
    // The buckets of the rate-limited tenants, their rows locked until the claim commits; a
    // row another claim holds is skipped (that tenant waits for the next claim). NO KEY
    // UPDATE: inserting runs of the tenant (a foreign key) is not held up.
    let rated = rated_tenants(&apps);
    let stored: Vec<StoredBucket> = if rated.is_empty() {
        Vec::new()
    } else {
        sqlx::query_as(
            "SELECT id AS tenant_id, fire_tokens, fire_tokens_at FROM tenants
             WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE SKIP LOCKED",
        )
        .bind(rated.iter().map(|t| t.0).collect::<Vec<_>>())
        .fetch_all(&mut *c)
        .await?
    };
    let mut buckets = fire_buckets(&apps, &stored, req.now);
    let windows = claim_windows(&apps, req.limit, &buckets, req.now);
    if windows.is_empty() {
        return Ok(Vec::new());
    }
    // Tenant quotas cost a second ranking; a claim whose tenants have none skips it.
    let quotas = windows
        .iter()
        .any(|w| w.concurrency_room.is_some() || w.rate_room.is_some());
    let mut runs: Vec<Run> = sqlx::query_as(claim_statement(quotas))
        .bind(
            windows
                .iter()
                .map(|w| w.node_group.clone())
                .collect::<Vec<_>>(),
        )
        .bind(windows.iter().map(|w| w.app_id.0).collect::<Vec<_>>())
        .bind(windows.iter().map(|w| w.window).collect::<Vec<_>>())
        .bind(windows.iter().map(|w| w.step).collect::<Vec<_>>())
        .bind(req.now.saturating_add(req.horizon_ms))
        .bind(req.now)
        .bind(req.limit)
        .bind(
            windows
                .iter()
                .map(|w| w.in_flight_counts)
                .collect::<Vec<_>>(),
        )
        .bind(windows.iter().map(|w| w.tenant_id.0).collect::<Vec<_>>())
        .bind(
            windows
                .iter()
                .map(|w| w.concurrency_room)
                .collect::<Vec<_>>(),
        )
        .bind(windows.iter().map(|w| w.rate_room).collect::<Vec<_>>())
        .fetch_all(&mut *c)
        .await?;
    let charged = charge_buckets(&apps, &mut buckets, &runs, req.now);
    if !charged.is_empty() {
        sqlx::query(
            "UPDATE tenants t SET fire_tokens = u.tokens, fire_tokens_at = u.at
             FROM UNNEST($1::bigint[], $2::float8[], $3::bigint[]) AS u(id, tokens, at)
             WHERE t.id = u.id",
        )
        .bind(charged.iter().map(|b| b.0.0).collect::<Vec<_>>())
        .bind(charged.iter().map(|b| b.1).collect::<Vec<_>>())
        .bind(charged.iter().map(|b| b.2).collect::<Vec<_>>())
        .execute(&mut *c)
        .await?;
    }
    runs.sort_by_key(|r| (r.due_at, -r.priority, r.id));
    Ok(runs)
}

/// The claim statement, with the tenants' quota rooms applied or without (`quotas`).
///
/// Per app: the claimed runs with a live lease among its first `win` runs in due order (in
/// flight: `busy`) and the room its window leaves; then up to that room of claimable runs in
/// due order, locked, skipping those another claimer holds; the apps' runs take turns; the
/// first `limit` turns are returned (claimed by [`claim_locked_runs`]). With quotas, each tenant's turns beyond the room its quotas
/// leave (the whole tokens in its bucket; its concurrency room less its busy runs) are dropped
/// first.
fn claim_statement(quotas: bool) -> &'static str {
    static STATEMENTS: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
        let pick_all = "pick AS (
             SELECT id FROM turns
             ORDER BY turn, due_at, priority DESC, id
             LIMIT $7
         )";
        let pick_within_quotas = "tenant_room AS (
             SELECT tenant_id, LEAST(min(rate_room), min(concurrency_room) - sum(busy)) AS room
             FROM busy GROUP BY tenant_id
         ), pick AS (
             SELECT id FROM (
                 SELECT t.id, t.due_at, t.priority, t.turn, tr.room,
                     row_number() OVER (PARTITION BY t.tenant_id
                                        ORDER BY t.turn, t.due_at, t.priority DESC, t.id) AS nth
                 FROM turns t JOIN tenant_room tr ON tr.tenant_id = t.tenant_id) ranked
             WHERE room IS NULL OR nth <= room
             ORDER BY turn, due_at, priority DESC, id
             LIMIT $7
         )";
        [pick_all, pick_within_quotas].map(|pick| format!("{CLAIM_TURNS}, {pick} {CLAIM_PICKED}"))
    });
    &STATEMENTS[usize::from(quotas)]
}

/// The claim statement up to the apps' turns (see [`claim_statement`]).
const CLAIM_TURNS: &str = "WITH w AS (
         SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::float8[], $8::bool[],
                              $9::bigint[], $10::bigint[], $11::bigint[])
           AS w(node_group, app_id, win, step, counted, tenant_id, concurrency_room, rate_room)
     ), busy AS (
         SELECT w.*, (
             SELECT count(*) FROM (
                 SELECT r.state, r.lease_until FROM runs r
                 WHERE r.node_group = w.node_group AND r.app_id = w.app_id AND r.due_at <= $5
                   AND r.started_at IS NULL AND r.finished_at IS NULL
                 ORDER BY r.due_at LIMIT CASE WHEN w.counted THEN w.win ELSE 0 END) x
             WHERE x.state = 'claimed' AND x.lease_until > $6) AS busy
         FROM w
     ), front AS (
         SELECT f.id, f.due_at, f.priority, busy.app_id, busy.step, busy.tenant_id
         FROM busy CROSS JOIN LATERAL (
             SELECT r.id, r.due_at, r.priority FROM runs r
             WHERE r.node_group = busy.node_group AND r.app_id = busy.app_id AND r.due_at <= $5
               AND r.started_at IS NULL AND r.finished_at IS NULL
               AND r.state IN ('pending', 'claimed') AND (r.state = 'pending' OR r.lease_until <= $6)
             ORDER BY r.due_at, r.priority DESC, r.id
             LIMIT GREATEST(LEAST(busy.win - busy.busy, $7), 0)
             FOR UPDATE SKIP LOCKED) f
     ), turns AS (
         SELECT id, due_at, priority, tenant_id,
             row_number() OVER (PARTITION BY app_id ORDER BY due_at, priority DESC, id) * step AS turn
         FROM front
     )";

/// The claim statement's last part: the picked runs, as they are (`front` locked them).
const CLAIM_PICKED: &str =
    "SELECT r.* FROM runs r WHERE r.id IN (SELECT id FROM pick) AND r.finished_at IS NULL";

/// [`Runs::claim_locked_runs`](crate::store::Runs::claim_locked_runs) on PostgreSQL: one
/// heap-only update per run (no column an index uses changes) that claims it and, with an
/// intent, records where it goes. Returns each run's new fencing token.
pub(crate) async fn claim_locked_runs(
    c: &mut PgConnection,
    req: &ClaimRequest,
    runs: &[Run],
    intents: &std::collections::HashMap<RunId, ExecutorId>,
) -> Result<Vec<(RunId, i64)>> {
    Ok(sqlx::query_as(
        "UPDATE runs r SET state = 'claimed', claim_owner = $3, lease_until = $4,
             fence = r.fence + 1, claimed_at = $5,
             executor_id = COALESCE(u.executor_id, r.executor_id)
         FROM UNNEST($1::bigint[], $2::bigint[]) AS u(id, executor_id)
         WHERE r.id = u.id AND r.finished_at IS NULL
         RETURNING r.id, r.fence",
    )
    .bind(runs.iter().map(|r| r.id.0).collect::<Vec<_>>())
    .bind(
        runs.iter()
            .map(|r| intents.get(&r.id).map(|x| x.0))
            .collect::<Vec<_>>(),
    )
    .bind(&req.node)
    .bind(req.now.saturating_add(req.lease_ms))
    .bind(req.now)
    .fetch_all(&mut *c)
    .await?)
}

/// The apps with runs waiting in `groups` (a skip scan of `runs_claimable`: one index probe
/// per app, however many runs wait), with their executors' capacity and the runs they hold.
async fn claim_apps(c: &mut PgConnection, groups: &[String]) -> Result<Vec<ClaimApp>> {
    Ok(sqlx::query_as(
        "WITH RECURSIVE pairs (node_group, app_id) AS (
             SELECT g.node_group, (
                 SELECT r.app_id FROM runs r
                 WHERE r.node_group = g.node_group AND r.started_at IS NULL AND r.finished_at IS NULL
                 ORDER BY r.app_id LIMIT 1)
             FROM UNNEST($1::text[]) AS g(node_group)
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
             (SELECT COALESCE(sum(e.capacity), 0)::bigint FROM executors e
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
    .bind(groups)
    .fetch_all(&mut *c)
    .await?)
}

/// [`Runs::try_lock_runs`](crate::store::Runs::try_lock_runs) on PostgreSQL.
pub(crate) async fn try_lock_runs(c: &mut PgConnection, ids: &[RunId]) -> Result<Vec<RunId>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(RunId,)> =
        sqlx::query_as("SELECT id FROM runs WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED")
            .bind(raw_ids(ids, |i| i.0))
            .fetch_all(&mut *c)
            .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// [`Runs::delete_pending_runs`](crate::store::Runs::delete_pending_runs) on PostgreSQL.
pub(crate) async fn delete_pending_runs(
    c: &mut PgConnection,
    task: TaskId,
    triggers: &[TriggerKind],
) -> Result<u64> {
    let kinds: Vec<&str> = triggers.iter().map(|t| t.as_str()).collect();
    let done = sqlx::query(
        "DELETE FROM runs WHERE id IN (
             SELECT id FROM runs WHERE task_id = $1 AND state = 'pending' AND trigger_kind = ANY($2)
             FOR UPDATE SKIP LOCKED)",
    )
    .bind(task)
    .bind(kinds)
    .execute(&mut *c)
    .await?;
    Ok(done.rows_affected())
}

/// [`Runs::running_runs_on_executors`](crate::store::Runs::running_runs_on_executors) on PostgreSQL.
pub(crate) async fn running_runs_on_executors(
    c: &mut PgConnection,
    executors: &[ExecutorId],
) -> Result<Vec<Run>> {
    Ok(sqlx::query_as(
        "SELECT * FROM runs WHERE state = 'running' AND executor_id = ANY($1)
           AND started_at IS NOT NULL AND finished_at IS NULL
         ORDER BY id FOR UPDATE",
    )
    .bind(raw_ids(executors, |i| i.0))
    .fetch_all(&mut *c)
    .await?)
}

/// [`Runs::running_runs_missing_from`](crate::store::Runs::running_runs_missing_from) on PostgreSQL.
pub(crate) async fn running_runs_missing_from(
    c: &mut PgConnection,
    executor: ExecutorId,
    held: &[i64],
    sent_before: i64,
) -> Result<Vec<RunId>> {
    let rows: Vec<(RunId,)> = sqlx::query_as(
        "SELECT id FROM runs WHERE state = 'running' AND executor_id = $1
           AND started_at IS NOT NULL AND finished_at IS NULL
           AND NOT (id = ANY($2)) AND COALESCE(dispatched_at, started_at) <= $3
         ORDER BY id",
    )
    .bind(executor)
    .bind(held)
    .bind(sent_before)
    .fetch_all(&mut *c)
    .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// [`Runs::lock_chain_runs`](crate::store::Runs::lock_chain_runs) on PostgreSQL.
pub(crate) async fn lock_chain_runs(
    c: &mut PgConnection,
    chain_root: RunId,
    tasks: &[TaskId],
) -> Result<Vec<Run>> {
    let root: Option<(i64,)> = sqlx::query_as("SELECT id FROM runs WHERE id = $1 FOR UPDATE")
        .bind(chain_root)
        .fetch_optional(&mut *c)
        .await?;
    found(root, || format!("run {chain_root}"))?;
    Ok(sqlx::query_as(
        "SELECT * FROM runs WHERE (id = $1 OR chain_root_id = $1) AND task_id = ANY($2) ORDER BY id",
    )
    .bind(chain_root)
    .bind(raw_ids(tasks, |i| i.0))
    .fetch_all(&mut *c)
    .await?)
}

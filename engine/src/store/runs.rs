//! Runs: inserting occurrences, reading them, the fenced transitions of a claimed run, results
//! and progress, and the watchdog's queries (deadlines passed, runs not started, lost runs
//! revived). How a batch of results is checked and applied is in
//! [`completion`](super::completion).
//!
//! Written per dialect, in `pg/runs.rs` and `sqlite/runs.rs`: `insert_runs`,
//! `lock_due_runs`, `claim_locked_runs`, `start_claimed_runs`, `record_dispatch_intent`, `release_claimed_runs`,
//! `complete_runs`, `try_lock_runs`, `latest_scheduled_runs_before`, `delete_pending_runs`,
//! `running_runs_on_executors`, `running_runs_missing_from` and `lock_chain_runs` (batches,
//! `SKIP LOCKED` claiming, lists of ids).

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::types::Json;

use super::completion::{completed_tail, late_success_counts, not_final, report_refused};
use super::tx::{Conn, Dialect, Locking, StoreTx, found, on_conn, reference_or};
use super::{
    ClaimRequest, Completion, Result, Revival, StartClaimed, StartedRun, StoreError, page_limit,
    pg, sqlite,
};
use crate::app::{AppId, ExecutorId};
use crate::run::{
    ClaimedTransition, Fence, NewRun, Run, RunCompletion, RunFilter, RunId, RunProgress,
};
use crate::task::TaskId;
use crate::tenant::TenantId;

/// Runs: occurrences, claims and their fenced transitions, results, progress, cancel
/// requests and the watchdog's queries.
#[async_trait]
pub trait Runs: Send {
    /// Inserts a run; `None` when that occurrence (task, scheduled time, attempt, shard)
    /// already exists, waiting, running or finished (on PostgreSQL the occurrence key is unique
    /// per partition of `runs`, so a finished one is looked up in the history first).
    async fn insert_run(&mut self, run: &NewRun, now: i64) -> Result<Option<Run>>;
    /// Inserts many runs, skipping occurrences that exist (and repeats within `runs`); returns
    /// the inserted ones. The caller holds what makes the occurrences its own (their tasks
    /// locked, or the fenced run it shards): should another transaction insert one of them
    /// meanwhile all the same, the call fails and the unique occurrence key keeps it once.
    async fn insert_runs(&mut self, runs: &[NewRun], now: i64) -> Result<Vec<Run>>;
    /// [`Runs::insert_runs`], returning only the task of each run inserted: what the claim
    /// and a broadcast's sharding count, without reading every inserted row back.
    async fn insert_runs_of_tasks(&mut self, runs: &[NewRun], now: i64) -> Result<Vec<TaskId>>;
    async fn get_run(&mut self, tenant: TenantId, id: RunId) -> Result<Run>;
    async fn list_runs(&mut self, tenant: TenantId, filter: &RunFilter) -> Result<Vec<Run>>;
    /// Engine internal: for each `(task, instant)`, the task's latest first-attempt run of
    /// its schedule scheduled strictly before the instant, if any (one statement for a whole
    /// claim batch; the claim uses it to tell an outage that goes on from a late run).
    async fn latest_scheduled_runs_before(&mut self, items: &[(TaskId, i64)]) -> Result<Vec<Run>>;
    /// Engine internal: a run by id.
    async fn find_run(&mut self, id: RunId) -> Result<Option<Run>>;
    /// Claims up to `limit` runs of the given groups that are pending, or claimed with an
    /// expired lease, and due within the horizon: state `claimed`, lease, new fencing token.
    /// Concurrent claimers get disjoint sets. Returned in due order.
    ///
    /// Fair and capacity-aware: the apps with runs waiting in the groups are read first with
    /// their executors' free capacity ([`ClaimApp`](super::ClaimApp)); an app whose live
    /// executors are full is not read at all, the others at most their free capacity
    /// ([`claim_windows`](super::claim_windows)); the apps' runs take turns, each tenant in
    /// proportion to its weight, due order (then priority) holding within an app.
    async fn claim_due_runs(&mut self, req: &ClaimRequest) -> Result<Vec<Run>>;
    /// The first half of [`Runs::claim_due_runs`]: the runs it would claim, chosen the same
    /// way, locked for this transaction and returned as they are (not yet claimed), in due
    /// order. The claimer decides where they go before it claims them
    /// ([`Runs::claim_locked_runs`]).
    async fn lock_due_runs(&mut self, req: &ClaimRequest) -> Result<Vec<Run>>;
    /// The second half of [`Runs::claim_due_runs`]: claims `runs`, as
    /// [`Runs::lock_due_runs`] returned them in this transaction (state `claimed`, the lease,
    /// a new fencing token), and records on each run `intents` names the executor instance it
    /// is to be sent to first, in the same write: the claim is its dispatch intent (see
    /// [`Runs::record_dispatch_intent`]). A run without one keeps the instance it has.
    /// Returns the claimed runs in the order given (the due order `lock_due_runs` returns).
    async fn claim_locked_runs(
        &mut self,
        req: &ClaimRequest,
        runs: Vec<Run>,
        intents: &HashMap<RunId, ExecutorId>,
    ) -> Result<Vec<Run>>;
    /// Moves a claimed run on, proving the claim with its [`Fence`]; [`StoreError::Fenced`]
    /// when the lease expired or another node claimed it since.
    async fn transition_claimed(
        &mut self,
        fence: &Fence,
        to: &ClaimedTransition,
        now: i64,
    ) -> Result<Run>;
    /// Many [`ClaimedTransition::Started`] at once; returns the runs that moved (the others
    /// were fenced: claimed by another node since, or no longer claimed). An executor has
    /// accepted these runs, so the fencing token alone decides: a start is recorded after the
    /// lease has ended as long as nobody has claimed the run since. A run whose result already
    /// arrived (a handler faster than this write) stays final, but gets its executor and
    /// dispatch time recorded and is returned too; one cancelled meanwhile (by a person) is
    /// also marked for a cancel request to that executor ([`Runs::take_cancel_requests`]).
    async fn start_claimed_runs(
        &mut self,
        items: &[StartClaimed],
        now: i64,
    ) -> Result<Vec<StartedRun>>;
    /// Records, for claimed runs this node still holds (fenced as by
    /// [`Runs::transition_claimed`]), the executor instance they are about to be sent to, before
    /// sending them; returns the runs recorded. The run keeps it when it goes back to pending:
    /// a later dispatch asks that instance first, and results are accepted only from it.
    async fn record_dispatch_intent(
        &mut self,
        items: &[(Fence, ExecutorId)],
        now: i64,
    ) -> Result<Vec<RunId>>;
    /// Many [`ClaimedTransition::Released`] at once; returns the runs that moved.
    async fn release_claimed_runs(&mut self, fences: &[Fence], now: i64) -> Result<Vec<RunId>>;
    /// Finishes a run (pending, claimed or running) with a final state. A run that is already
    /// final is left as it is ([`Completion::AlreadyFinal`]). With `app`, a run of another app
    /// (`runs.app_id`: its task's app, kept once the run started) is "not found".
    async fn complete_run(
        &mut self,
        id: RunId,
        app: Option<AppId>,
        completion: &RunCompletion,
    ) -> Result<Completion>;
    /// [`Runs::complete_run`] for many runs at once, with the same rules for each item: the runs
    /// are locked in id order by one read and changed by one write. The outcomes come back in
    /// item order; an item's own error (unknown run, a completion that is not final) does not
    /// stop the others. A run named twice is completed by the first item; the second finds it
    /// final.
    async fn complete_runs(
        &mut self,
        app: Option<AppId>,
        items: &[(RunId, RunCompletion)],
    ) -> Result<Vec<Result<Completion>>>;
    /// Records progress and log lines of a running run and returns its task; `None` when the
    /// run is unknown (for that app) or no longer running. A claimed run already on its way to
    /// an executor (its dispatch recorded) counts as running: a handler may report before the
    /// engine has written that the run started.
    async fn record_progress(
        &mut self,
        app: Option<AppId>,
        progress: &RunProgress,
        now: i64,
    ) -> Result<Option<TaskId>>;
    /// A late success for `ended`, a run the engine ended without its result: declared `lost`
    /// with its executor, or `timed_out` although the handler finished before the deadline (see
    /// [`Revival`]). Its retry or recovery run is withdrawn (deleted) when it has not started —
    /// pending, or claimed but not yet sent anywhere — and no other transaction holds it.
    async fn revive_ended_run(
        &mut self,
        ended: &Run,
        completion: &RunCompletion,
    ) -> Result<Revival>;
    /// Locks those of `ids` no other transaction holds, without waiting; returns them. For a
    /// caller that already holds task locks: waiting on a run there could close a cycle with a
    /// transaction that holds the run and waits on the task (runs are locked before tasks).
    async fn try_lock_runs(&mut self, ids: &[RunId]) -> Result<Vec<RunId>>;
    /// Deletes a task's not-yet-claimed runs of the given trigger kinds (skipping rows another
    /// transaction holds); returns how many.
    async fn delete_pending_runs(
        &mut self,
        task: TaskId,
        triggers: &[crate::run::TriggerKind],
    ) -> Result<u64>;
    /// Running runs whose deadline is before `now`; concurrent callers get disjoint sets.
    async fn running_runs_past_deadline(&mut self, now: i64, limit: i64) -> Result<Vec<Run>>;
    /// Runs still pending or claimed whose task's start timeout has passed since they were
    /// due, and for which no "not started" alarm exists yet. A claimed run with its dispatch
    /// intent recorded is left out while its lease holds: it may have been accepted, and its
    /// start is written a little later (`start_write_delay_ms`).
    async fn runs_not_started(&mut self, now: i64, limit: i64) -> Result<Vec<Run>>;
    /// Running runs on the given executor instances.
    async fn running_runs_on_executors(&mut self, executors: &[ExecutorId]) -> Result<Vec<Run>>;
    /// Engine internal, without locking: running runs on `executor` that are not among `held`
    /// and were sent (or started) before `sent_before` — the runs an instance's heartbeat says
    /// it no longer holds. Cheap when there are none (the usual case).
    async fn running_runs_missing_from(
        &mut self,
        executor: ExecutorId,
        held: &[i64],
        sent_before: i64,
    ) -> Result<Vec<RunId>>;
    /// Runs of a task that are not final: pending, claimed or running (for overlap policies).
    async fn unfinished_runs_of_task(&mut self, task: TaskId) -> Result<Vec<Run>>;
    /// Every run (all shards and attempts) of one occurrence of a task, ordered by shard and
    /// attempt, locking the occurrence's first run against concurrent decisions until the
    /// transaction ends.
    async fn lock_occurrence(&mut self, task: TaskId, scheduled_at: i64) -> Result<Vec<Run>>;
    /// Runs of a chain (by root) of the given tasks, locking the chain root against concurrent
    /// joins until the transaction ends.
    async fn lock_chain_runs(&mut self, chain_root: RunId, tasks: &[TaskId]) -> Result<Vec<Run>>;
    /// Marks a tenant's run that was cancelled while an executor instance may hold it (one
    /// was recorded for it) for a cancel request to that instance, due at `at`; false when
    /// the run is not cancelled or was never sent anywhere.
    async fn request_run_cancel(&mut self, tenant: TenantId, run: RunId, at: i64) -> Result<bool>;
    /// Engine internal: takes (unmarks and returns) up to `limit` runs whose cancel request is
    /// due at `now`; concurrent nodes get disjoint sets.
    async fn take_cancel_requests(&mut self, now: i64, limit: i64) -> Result<Vec<Run>>;
    /// Engine internal: marks a cancelled run's cancel request again, due at `at` (its
    /// delivery failed).
    async fn defer_cancel_request(&mut self, run: RunId, at: i64) -> Result<()>;
    /// Deletes up to `limit` trigger idempotency keys first used before `created_before`;
    /// returns how many.
    async fn purge_trigger_keys(&mut self, created_before: i64, limit: i64) -> Result<u64>;
}

#[async_trait]
impl Runs for StoreTx {
    async fn insert_run(&mut self, run: &NewRun, now: i64) -> Result<Option<Run>> {
        on_conn!(self, |c| sqlx::query_as(
            "INSERT INTO runs (tenant_id, task_id, node_group, scheduled_at, due_at, attempt, shard_index,
                 shard_total, trigger_kind, state, priority, parent_run_id, chain_root_id, params,
                 triggered_by, created_at, app_id)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11, $12, $13, $14, $15,
                 (SELECT k.app_id FROM tasks k WHERE k.id = $2 AND k.tenant_id = $1)
             WHERE NOT EXISTS (
                 SELECT 1 FROM runs o WHERE o.task_id = $2 AND o.scheduled_at = $4
                   AND o.attempt = $6 AND o.shard_index = $7 AND o.finished_at IS NOT NULL)
             ON CONFLICT DO NOTHING
             RETURNING *",
        )
        .bind(run.tenant_id)
        .bind(run.task_id)
        .bind(&run.node_group)
        .bind(run.scheduled_at)
        .bind(run.due_at)
        .bind(run.attempt)
        .bind(run.shard_index)
        .bind(run.shard_total)
        .bind(run.trigger_kind.as_str())
        .bind(run.priority)
        .bind(run.parent_run_id)
        .bind(run.chain_root_id)
        .bind(run.params.as_ref().map(Json))
        .bind(run.triggered_by.as_deref())
        .bind(now)
        .fetch_optional(&mut **c)
        .await)
        .map_err(|e| reference_or(e, || format!("task {} of tenant {}", run.task_id, run.tenant_id)))
    }

    async fn insert_runs(&mut self, runs: &[NewRun], now: i64) -> Result<Vec<Run>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::insert_runs(c, runs, now).await,
            Conn::Sqlite(_) => sqlite::runs::insert_runs(self, runs, now).await,
        }
    }

    async fn insert_runs_of_tasks(&mut self, runs: &[NewRun], now: i64) -> Result<Vec<TaskId>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::insert_runs_of_tasks(c, runs, now).await,
            Conn::Sqlite(_) => Ok(sqlite::runs::insert_runs(self, runs, now)
                .await?
                .into_iter()
                .map(|r| r.task_id)
                .collect()),
        }
    }

    async fn get_run(&mut self, tenant: TenantId, id: RunId) -> Result<Run> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM runs WHERE tenant_id = $1 AND id = $2"
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut **c)
        .await)?;
        found(row, || format!("run {id}"))
    }

    async fn list_runs(&mut self, tenant: TenantId, filter: &RunFilter) -> Result<Vec<Run>> {
        let (sql, args) = run_list_statement(tenant, filter);
        let mut rows: Vec<Run> = on_conn!(self, |c| {
            let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()));
            for arg in &args {
                q = match arg {
                    ListArg::Int(v) => q.bind(*v),
                    ListArg::Text(v) => q.bind(*v),
                };
            }
            q.fetch_all(&mut **c).await
        })?;
        if filter.after_id.is_some() {
            rows.reverse();
        }
        Ok(rows)
    }

    async fn latest_scheduled_runs_before(&mut self, items: &[(TaskId, i64)]) -> Result<Vec<Run>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::latest_scheduled_runs_before(c, items).await,
            Conn::Sqlite(c) => sqlite::runs::latest_scheduled_runs_before(c, items).await,
        }
    }

    async fn find_run(&mut self, id: RunId) -> Result<Option<Run>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM runs WHERE id = $1"
        )
        .bind(id)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn claim_due_runs(&mut self, req: &ClaimRequest) -> Result<Vec<Run>> {
        let runs = self.lock_due_runs(req).await?;
        self.claim_locked_runs(req, runs, &HashMap::new()).await
    }

    async fn lock_due_runs(&mut self, req: &ClaimRequest) -> Result<Vec<Run>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::lock_due_runs(c, req).await,
            Conn::Sqlite(c) => sqlite::runs::lock_due_runs(c, req).await,
        }
    }

    async fn claim_locked_runs(
        &mut self,
        req: &ClaimRequest,
        runs: Vec<Run>,
        intents: &HashMap<RunId, ExecutorId>,
    ) -> Result<Vec<Run>> {
        if runs.is_empty() {
            return Ok(runs);
        }
        let claimed: Vec<(RunId, i64)> = match &mut self.conn {
            Conn::Postgres(c) => pg::runs::claim_locked_runs(c, req, &runs, intents).await?,
            Conn::Sqlite(c) => sqlite::runs::claim_locked_runs(c, req, &runs, intents).await?,
        };
        let fences: HashMap<RunId, i64> = claimed.into_iter().collect();
        let lease_until = req.now.saturating_add(req.lease_ms);
        // The write set exactly these columns: the rows read are brought up to it here rather
        // than read back.
        Ok(runs
            .into_iter()
            .filter_map(|mut run| {
                run.fence = *fences.get(&run.id)?;
                run.state = crate::run::RunState::Claimed;
                run.claim_owner = Some(req.node.clone());
                run.lease_until = Some(lease_until);
                run.claimed_at = Some(req.now);
                if let Some(x) = intents.get(&run.id) {
                    run.executor_id = Some(*x);
                }
                Some(run)
            })
            .collect())
    }

    async fn transition_claimed(
        &mut self,
        fence: &Fence,
        to: &ClaimedTransition,
        now: i64,
    ) -> Result<Run> {
        // Every transition is fenced the same way: still claimed, by this node, with this
        // token, on a lease that has not ended ($1–$4); the transition's own values follow.
        let sql = match to {
            ClaimedTransition::Started { .. } => "UPDATE runs SET state = 'running', executor_id = $5, deadline_at = $6,
                 dispatched_at = $7, started_at = $4, dispatch_attempts = dispatch_attempts + 1
                 WHERE id = $1 AND state = 'claimed' AND claim_owner = $2 AND fence = $3
                   AND lease_until > $4 RETURNING *",
            ClaimedTransition::Deferred { .. } => "UPDATE runs SET state = 'pending', claim_owner = NULL, lease_until = NULL, due_at = $5
                 WHERE id = $1 AND state = 'claimed' AND claim_owner = $2 AND fence = $3
                   AND lease_until > $4 RETURNING *",
            ClaimedTransition::Released => "UPDATE runs SET state = 'pending', claim_owner = NULL, lease_until = NULL,
                 dispatch_attempts = dispatch_attempts + 1
                 WHERE id = $1 AND state = 'claimed' AND claim_owner = $2 AND fence = $3
                   AND lease_until > $4 RETURNING *",
            ClaimedTransition::Sharded { .. } => {
                "UPDATE runs SET shard_index = $5, shard_total = $6
                 WHERE id = $1 AND state = 'claimed' AND claim_owner = $2 AND fence = $3
                   AND lease_until > $4 RETURNING *"
            }
            ClaimedTransition::Skipped { .. } => "UPDATE runs SET state = 'skipped', finished_at = $4, error = $5
                 WHERE id = $1 AND state = 'claimed' AND claim_owner = $2 AND fence = $3
                   AND lease_until > $4 RETURNING *",
            ClaimedTransition::Cancelled { .. } => "UPDATE runs SET state = 'cancelled', finished_at = $4, error = $5
                 WHERE id = $1 AND state = 'claimed' AND claim_owner = $2 AND fence = $3
                   AND lease_until > $4 RETURNING *",
            ClaimedTransition::ExtendLease { .. } => {
                "UPDATE runs SET lease_until = $5
                 WHERE id = $1 AND state = 'claimed' AND claim_owner = $2 AND fence = $3
                   AND lease_until > $4 RETURNING *"
            }
        };
        let row = on_conn!(self, |c| {
            let q = sqlx::query_as(sql)
                .bind(fence.run_id)
                .bind(&fence.node)
                .bind(fence.token)
                .bind(now);
            let q = match to {
                ClaimedTransition::Started {
                    executor_id,
                    dispatched_at,
                    deadline_at,
                } => q.bind(*executor_id).bind(*deadline_at).bind(*dispatched_at),
                ClaimedTransition::Deferred { due_at } => q.bind(*due_at),
                ClaimedTransition::Released => q,
                ClaimedTransition::Sharded { index, total } => q.bind(*index).bind(*total),
                ClaimedTransition::Skipped { reason } | ClaimedTransition::Cancelled { reason } => {
                    q.bind(reason.as_str())
                }
                ClaimedTransition::ExtendLease { lease_until } => q.bind(*lease_until),
            };
            q.fetch_optional(&mut **c).await
        })?;
        row.ok_or_else(|| StoreError::Fenced {
            run_id: fence.run_id,
            node: fence.node.clone(),
            token: fence.token,
        })
    }

    async fn start_claimed_runs(
        &mut self,
        items: &[StartClaimed],
        now: i64,
    ) -> Result<Vec<StartedRun>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::start_claimed_runs(c, items, now).await,
            Conn::Sqlite(c) => sqlite::runs::start_claimed_runs(c, items, now).await,
        }
    }

    async fn record_dispatch_intent(
        &mut self,
        items: &[(Fence, ExecutorId)],
        now: i64,
    ) -> Result<Vec<RunId>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::record_dispatch_intent(c, items, now).await,
            Conn::Sqlite(c) => sqlite::runs::record_dispatch_intent(c, items, now).await,
        }
    }

    async fn release_claimed_runs(&mut self, fences: &[Fence], now: i64) -> Result<Vec<RunId>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::release_claimed_runs(c, fences, now).await,
            Conn::Sqlite(_) => sqlite::runs::release_claimed_runs(self, fences, now).await,
        }
    }

    async fn complete_run(
        &mut self,
        id: RunId,
        app: Option<AppId>,
        completion: &RunCompletion,
    ) -> Result<Completion> {
        if !completion.state.is_final() {
            return Err(not_final(completion.state));
        }
        let row: Option<Run> = on_conn!(self, |c| sqlx::query_as(c.sql(&COMPLETE_RUN))
            .bind(id)
            .bind(app)
            .fetch_optional(&mut **c)
            .await)?;
        let run = found(row, || format!("run {id}"))?;
        if let Some(refused) = report_refused(&run, completion) {
            return Err(refused);
        }
        if run.state.is_final() {
            return Ok(Completion::AlreadyFinal(run));
        }
        let tail = completed_tail(&run, completion);
        let row: Option<Run> = on_conn!(self, |c| sqlx::query_as(
            "UPDATE runs SET state = $2, output = $3, error = $4, log_tail = $5,
                 started_at = COALESCE(started_at, $6), finished_at = $7, lease_until = NULL,
                 dispatch_attempts = dispatch_attempts
                     + CASE WHEN dispatched_at IS NULL AND $8 IS NOT NULL THEN 1 ELSE 0 END,
                 dispatched_at = COALESCE(dispatched_at, $8)
             WHERE id = $1 AND state IN ('pending', 'claimed', 'running') RETURNING *",
        )
        .bind(id)
        .bind(completion.state.as_str())
        .bind(completion.output.as_ref().map(Json))
        .bind(completion.error.as_deref())
        .bind(tail)
        .bind(completion.started_at)
        .bind(completion.finished_at)
        .bind(completion.dispatched_at())
        .fetch_optional(&mut **c)
        .await)?;
        match row {
            Some(run) => Ok(Completion::Applied(run)),
            None => Ok(Completion::AlreadyFinal(run)),
        }
    }

    async fn complete_runs(
        &mut self,
        app: Option<AppId>,
        items: &[(RunId, RunCompletion)],
    ) -> Result<Vec<Result<Completion>>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::complete_runs(c, app, items).await,
            Conn::Sqlite(_) => sqlite::runs::complete_runs(self, app, items).await,
        }
    }

    async fn record_progress(
        &mut self,
        app: Option<AppId>,
        progress: &RunProgress,
        _now: i64,
    ) -> Result<Option<TaskId>> {
        let id = progress.run_id;
        let row: Option<Run> = on_conn!(self, |c| sqlx::query_as(c.sql(&RECORD_PROGRESS))
            .bind(id)
            .bind(app)
            .fetch_optional(&mut **c)
            .await)?;
        let Some(run) = row else { return Ok(None) };
        let tail = if progress.log_lines.is_empty() {
            run.log_tail
        } else {
            crate::run::append_log_tail(&run.log_tail, &progress.log_lines)
        };
        let fraction = progress.fraction.map(|f| f.clamp(0.0, 1.0));
        on_conn!(self, |c| sqlx::query(
            "UPDATE runs SET progress = COALESCE($2, progress),
                 progress_message = COALESCE($3, progress_message), log_tail = $4
             WHERE id = $1",
        )
        .bind(id)
        .bind(fraction)
        .bind(progress.message.as_deref())
        .bind(tail)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(Some(run.task_id))
    }

    async fn revive_ended_run(
        &mut self,
        ended: &Run,
        completion: &RunCompletion,
    ) -> Result<Revival> {
        if !late_success_counts(ended, completion) {
            return Ok(Revival::Refused);
        }
        let next: Option<(RunId,)> = on_conn!(self, |c| sqlx::query_as(
            "SELECT id FROM runs
             WHERE task_id = $1 AND scheduled_at = $2 AND shard_index = $3 AND attempt = $4",
        )
        .bind(ended.task_id)
        .bind(ended.scheduled_at)
        .bind(ended.shard_index)
        .bind(ended.attempt + 1)
        .fetch_optional(&mut **c)
        .await)?;
        // The retry or recovery is withdrawn when it has not started (pending, or claimed
        // but not yet sent anywhere) and nobody holds it: never wait on it, runs are
        // locked in id order and this one comes later.
        let mut withdrawn = false;
        if let Some((next,)) = next
            && !self.try_lock_runs(&[next]).await?.is_empty()
        {
            withdrawn = on_conn!(self, |c| sqlx::query(
                "DELETE FROM runs WHERE id = $1
                   AND (state = 'pending' OR (state = 'claimed' AND executor_id IS NULL))",
            )
            .bind(next)
            .execute(&mut **c)
            .await
            .map(|done| done.rows_affected()))?
                > 0;
        }
        let tail = completed_tail(ended, completion);
        let row: Option<Run> = on_conn!(self, |c| sqlx::query_as(
            "UPDATE runs SET state = 'succeeded', output = $2, error = NULL, log_tail = $3,
                 started_at = COALESCE($4, started_at), finished_at = $5
             WHERE id = $1 AND state = $6 RETURNING *",
        )
        .bind(ended.id)
        .bind(completion.output.as_ref().map(Json))
        .bind(tail)
        .bind(completion.started_at)
        .bind(completion.finished_at)
        .bind(ended.state.as_str())
        .fetch_optional(&mut **c)
        .await)?;
        Ok(match row {
            None => Revival::Refused,
            Some(run) if withdrawn => Revival::Revived(run),
            Some(run) => Revival::Recorded(run),
        })
    }

    async fn try_lock_runs(&mut self, ids: &[RunId]) -> Result<Vec<RunId>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::try_lock_runs(c, ids).await,
            Conn::Sqlite(c) => sqlite::runs::try_lock_runs(c, ids).await,
        }
    }

    async fn delete_pending_runs(
        &mut self,
        task: TaskId,
        triggers: &[crate::run::TriggerKind],
    ) -> Result<u64> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::delete_pending_runs(c, task, triggers).await,
            Conn::Sqlite(c) => sqlite::runs::delete_pending_runs(c, task, triggers).await,
        }
    }

    async fn running_runs_past_deadline(&mut self, now: i64, limit: i64) -> Result<Vec<Run>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            c.sql(&RUNNING_RUNS_PAST_DEADLINE)
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn runs_not_started(&mut self, now: i64, limit: i64) -> Result<Vec<Run>> {
        // Most tasks have no start timeout: when none has, the waiting runs (all of them
        // behind an overloaded cluster) are not read at all. In the order of the partial
        // index `tasks_with_start_timeout`, so it is the plan even without statistics (with
        // none, PostgreSQL took a sequential scan of every task: 3.9 ms for 5,000 tasks, twice
        // a second, against 0.09 ms for the index).
        let any: Option<(TaskId,)> = on_conn!(self, |c| sqlx::query_as(
            "SELECT id FROM tasks WHERE start_timeout_ms IS NOT NULL ORDER BY id LIMIT 1"
        )
        .fetch_optional(&mut **c)
        .await)?;
        if any.is_none() {
            return Ok(Vec::new());
        }
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT r.* FROM runs r JOIN tasks t ON t.id = r.task_id
             WHERE r.state IN ('pending', 'claimed') AND r.due_at < $1
               AND r.started_at IS NULL AND r.finished_at IS NULL
               AND t.start_timeout_ms IS NOT NULL AND r.due_at + t.start_timeout_ms < $1
               AND NOT (r.state = 'claimed' AND r.executor_id IS NOT NULL AND r.lease_until > $1)
               AND NOT EXISTS (SELECT 1 FROM alarms a WHERE a.dedupe_key = 'not_started:' || r.id)
             ORDER BY r.due_at, r.id LIMIT $2",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn running_runs_on_executors(&mut self, executors: &[ExecutorId]) -> Result<Vec<Run>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::running_runs_on_executors(c, executors).await,
            Conn::Sqlite(c) => sqlite::runs::running_runs_on_executors(c, executors).await,
        }
    }

    async fn running_runs_missing_from(
        &mut self,
        executor: ExecutorId,
        held: &[i64],
        sent_before: i64,
    ) -> Result<Vec<RunId>> {
        match &mut self.conn {
            Conn::Postgres(c) => {
                pg::runs::running_runs_missing_from(c, executor, held, sent_before).await
            }
            Conn::Sqlite(c) => {
                sqlite::runs::running_runs_missing_from(c, executor, held, sent_before).await
            }
        }
    }

    async fn unfinished_runs_of_task(&mut self, task: TaskId) -> Result<Vec<Run>> {
        Ok(on_conn!(self, |c| {
            sqlx::query_as(
            "SELECT * FROM runs WHERE task_id = $1 AND state IN ('pending', 'claimed', 'running') ORDER BY id",
        )
        .bind(task)
        .fetch_all(&mut **c)
        .await
        })?)
    }

    async fn lock_occurrence(&mut self, task: TaskId, scheduled_at: i64) -> Result<Vec<Run>> {
        let _: Option<(RunId,)> = on_conn!(self, |c| sqlx::query_as(c.sql(&LOCK_OCCURRENCE))
            .bind(task)
            .bind(scheduled_at)
            .fetch_optional(&mut **c)
            .await)?;
        Ok(on_conn!(self, |c| {
            sqlx::query_as(
            "SELECT * FROM runs WHERE task_id = $1 AND scheduled_at = $2 ORDER BY shard_index, attempt",
        )
        .bind(task)
        .bind(scheduled_at)
        .fetch_all(&mut **c)
        .await
        })?)
    }

    async fn lock_chain_runs(&mut self, chain_root: RunId, tasks: &[TaskId]) -> Result<Vec<Run>> {
        match &mut self.conn {
            Conn::Postgres(c) => pg::runs::lock_chain_runs(c, chain_root, tasks).await,
            Conn::Sqlite(c) => sqlite::runs::lock_chain_runs(c, chain_root, tasks).await,
        }
    }

    async fn request_run_cancel(&mut self, tenant: TenantId, run: RunId, at: i64) -> Result<bool> {
        let done = on_conn!(self, |c| sqlx::query(
            "UPDATE runs SET cancel_pending_at = $3
             WHERE tenant_id = $1 AND id = $2 AND state = 'cancelled' AND executor_id IS NOT NULL",
        )
        .bind(tenant)
        .bind(run)
        .bind(at)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(done > 0)
    }

    async fn take_cancel_requests(&mut self, now: i64, limit: i64) -> Result<Vec<Run>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            c.sql(&TAKE_CANCEL_REQUESTS)
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn defer_cancel_request(&mut self, run: RunId, at: i64) -> Result<()> {
        on_conn!(self, |c| sqlx::query(
            "UPDATE runs SET cancel_pending_at = $2 WHERE id = $1 AND state = 'cancelled'"
        )
        .bind(run)
        .bind(at)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        Ok(())
    }

    async fn purge_trigger_keys(&mut self, created_before: i64, limit: i64) -> Result<u64> {
        let done = on_conn!(self, |c| sqlx::query(c.sql(&PURGE_TRIGGER_KEYS))
            .bind(created_before)
            .bind(limit)
            .execute(&mut **c)
            .await
            .map(|done| done.rows_affected()))?;
        Ok(done)
    }
}

/// The statement of `complete_run` that locks rows (on PostgreSQL; SQLite has one writer).
const COMPLETE_RUN: Locking = Locking {
    postgres: "SELECT * FROM runs WHERE id = $1
               AND ($2 IS NULL OR runs.app_id = $2) FOR UPDATE",
    sqlite: "SELECT * FROM runs WHERE id = $1
               AND ($2 IS NULL OR runs.app_id = $2)",
};

/// The statement of `record_progress` that locks rows (on PostgreSQL; SQLite has one writer).
const RECORD_PROGRESS: Locking = Locking {
    postgres: "SELECT * FROM runs WHERE id = $1
               AND (state = 'running' OR (state = 'claimed' AND executor_id IS NOT NULL))
               AND ($2 IS NULL OR runs.app_id = $2) FOR UPDATE",
    sqlite: "SELECT * FROM runs WHERE id = $1
               AND (state = 'running' OR (state = 'claimed' AND executor_id IS NOT NULL))
               AND ($2 IS NULL OR runs.app_id = $2)",
};

/// The statement of `running_runs_past_deadline` that locks rows (on PostgreSQL; SQLite has one writer).
const RUNNING_RUNS_PAST_DEADLINE: Locking = Locking {
    postgres: "SELECT * FROM runs WHERE state = 'running' AND deadline_at < $1
               AND started_at IS NOT NULL AND finished_at IS NULL
             ORDER BY deadline_at, id LIMIT $2 FOR UPDATE SKIP LOCKED",
    sqlite: "SELECT * FROM runs WHERE state = 'running' AND deadline_at < $1
               AND started_at IS NOT NULL AND finished_at IS NULL
             ORDER BY deadline_at, id LIMIT $2",
};

/// The statement of `lock_occurrence` that locks rows (on PostgreSQL; SQLite has one writer).
const LOCK_OCCURRENCE: Locking = Locking {
    postgres: "SELECT id FROM runs
             WHERE task_id = $1 AND scheduled_at = $2 AND shard_index = 0 AND attempt = 1 FOR UPDATE",
    sqlite: "SELECT id FROM runs
             WHERE task_id = $1 AND scheduled_at = $2 AND shard_index = 0 AND attempt = 1",
};

/// The statement of `take_cancel_requests` that locks rows (on PostgreSQL; SQLite has one writer).
const TAKE_CANCEL_REQUESTS: Locking = Locking {
    postgres: "UPDATE runs SET cancel_pending_at = NULL WHERE id IN (
                 SELECT id FROM runs WHERE cancel_pending_at IS NOT NULL AND cancel_pending_at <= $1
                 ORDER BY cancel_pending_at LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING *",
    sqlite: "UPDATE runs SET cancel_pending_at = NULL WHERE id IN (
                 SELECT id FROM runs WHERE cancel_pending_at IS NOT NULL AND cancel_pending_at <= $1
                 ORDER BY cancel_pending_at LIMIT $2) RETURNING *",
};

/// The statement of `purge_trigger_keys` that locks rows (on PostgreSQL; SQLite has one writer).
const PURGE_TRIGGER_KEYS: Locking = Locking {
    postgres: "DELETE FROM trigger_keys WHERE (tenant_id, key) IN (
                 SELECT tenant_id, key FROM trigger_keys WHERE created_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
    sqlite: "DELETE FROM trigger_keys WHERE (tenant_id, key) IN (
                 SELECT tenant_id, key FROM trigger_keys WHERE created_at < $1 LIMIT $2)",
};

/// A value bound to the run list's statement.
enum ListArg {
    Int(i64),
    Text(&'static str),
}

/// The run list's statement: a condition for each filter given and none for the others, so
/// each combination of filters is planned on its own (one index range, not a generic plan
/// full of `$n IS NULL OR …`). Newest first; with `after_id`, the oldest runs above it come
/// first (the caller turns them round), so a page just above a cursor is found by the index.
fn run_list_statement(tenant: TenantId, filter: &RunFilter) -> (String, Vec<ListArg>) {
    let mut sql = String::from("SELECT * FROM runs WHERE tenant_id = $1");
    let mut args = vec![ListArg::Int(tenant.0)];
    let mut and = |condition: &str, arg: ListArg| {
        args.push(arg);
        sql.push_str(&format!(" AND {condition} ${}", args.len()));
    };
    if let Some(t) = filter.task_id {
        and("task_id =", ListArg::Int(t.0));
    }
    if let Some(s) = filter.state {
        and("state =", ListArg::Text(s.as_str()));
    }
    if let Some(t) = filter.scheduled_from {
        and("scheduled_at >=", ListArg::Int(t));
    }
    if let Some(t) = filter.scheduled_before {
        and("scheduled_at <", ListArg::Int(t));
    }
    if let Some(id) = filter.before_id {
        and("id <", ListArg::Int(id.0));
    }
    if let Some(id) = filter.after_id {
        and("id >", ListArg::Int(id.0));
    }
    if let Some(k) = filter.trigger_kind {
        and("trigger_kind =", ListArg::Text(k.as_str()));
    }
    if let Some(e) = filter.executor_id {
        and("executor_id =", ListArg::Int(e.0));
    }
    if let Some(t) = filter.finished_from {
        and("finished_at >=", ListArg::Int(t));
    }
    if let Some(t) = filter.finished_before {
        and("finished_at <", ListArg::Int(t));
    }
    let order = if filter.after_id.is_some() {
        "ASC"
    } else {
        "DESC"
    };
    // The limit is bound too: one prepared statement per combination of filters.
    args.push(ListArg::Int(page_limit(filter.limit)));
    sql.push_str(&format!(" ORDER BY id {order} LIMIT ${}", args.len()));
    (sql, args)
}

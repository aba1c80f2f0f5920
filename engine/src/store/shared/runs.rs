//! Runs: inserting occurrences, reading them, the fenced transitions of a claimed run, results
//! and progress, and the watchdog's queries (deadlines passed, runs not started, lost runs
//! revived). How a batch of results is checked and applied is in
//! [`completion`](super::completion).
//!
//! Dialect-specific (in `postgres.rs`/`sqlite.rs`): `insert_runs`, `claim_due_runs`,
//! `start_claimed_runs`, `record_dispatch_intent`, `release_claimed_runs`, `complete_runs`,
//! `try_lock_runs`, `delete_pending_runs`, `running_runs_on_executors` and `lock_chain_runs`
//! (batches, `SKIP LOCKED` claiming, lists of ids).

/// Adds the run operations to the `impl Tx` that [`tx_impl!`](super::tx_impl)
/// writes (see [`tx_ops!`](super::tx_ops) for how the domains join).
macro_rules! run_ops {
    ($tx:ty, $for_update:literal, $skip_locked:literal, $rest:tt, { $($done:tt)* }) => {
        $crate::store::shared::tx_ops!($tx, $for_update, $skip_locked, $rest, {
            $($done)*

            async fn insert_run(&mut self, run: &NewRun, now: i64) -> Result<Option<Run>> {
                sqlx::query_as(
                    "INSERT INTO runs (tenant_id, task_id, node_group, scheduled_at, due_at, attempt, shard_index,
                         shard_total, trigger_kind, state, priority, parent_run_id, chain_root_id, params,
                         triggered_by, created_at, app_id)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11, $12, $13, $14, $15,
                         (SELECT k.app_id FROM tasks k WHERE k.id = $2))
                     ON CONFLICT (task_id, scheduled_at, attempt, shard_index) DO NOTHING
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
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(|e| fk_or(e, || format!("task {} of tenant {}", run.task_id, run.tenant_id)))
            }

            async fn get_run(&mut self, tenant: TenantId, id: RunId) -> Result<Run> {
                let row = sqlx::query_as("SELECT * FROM runs WHERE tenant_id = $1 AND id = $2")
                    .bind(tenant)
                    .bind(id)
                    .fetch_optional(&mut *self.tx)
                    .await?;
                found(row, || format!("run {id}"))
            }

            async fn list_runs(&mut self, tenant: TenantId, filter: &RunFilter) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM runs WHERE tenant_id = $1
                       AND ($2 IS NULL OR task_id = $2) AND ($3 IS NULL OR state = $3)
                       AND ($4 IS NULL OR scheduled_at >= $4) AND ($5 IS NULL OR scheduled_at < $5)
                       AND ($6 IS NULL OR id < $6)
                       AND ($8 IS NULL OR trigger_kind = $8) AND ($9 IS NULL OR executor_id = $9)
                       AND ($10 IS NULL OR finished_at >= $10) AND ($11 IS NULL OR finished_at < $11)
                     ORDER BY id DESC LIMIT $7",
                )
                .bind(tenant)
                .bind(filter.task_id)
                .bind(filter.state.map(|s| s.as_str()))
                .bind(filter.scheduled_from)
                .bind(filter.scheduled_before)
                .bind(filter.before_id)
                .bind(page_limit(filter.limit))
                .bind(filter.trigger_kind.map(|t| t.as_str()))
                .bind(filter.executor_id)
                .bind(filter.finished_from)
                .bind(filter.finished_before)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn find_run(&mut self, id: RunId) -> Result<Option<Run>> {
                Ok(sqlx::query_as("SELECT * FROM runs WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&mut *self.tx)
                    .await?)
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
                    ClaimedTransition::Started { .. } => $crate::store::shared::fenced_update!(
                        "state = 'running', executor_id = $5, deadline_at = $6,
                         dispatched_at = $7, started_at = $4, dispatch_attempts = dispatch_attempts + 1"
                    ),
                    ClaimedTransition::Deferred { .. } => $crate::store::shared::fenced_update!(
                        "state = 'pending', claim_owner = NULL, lease_until = NULL, due_at = $5"
                    ),
                    ClaimedTransition::Released => $crate::store::shared::fenced_update!(
                        "state = 'pending', claim_owner = NULL, lease_until = NULL,
                         dispatch_attempts = dispatch_attempts + 1"
                    ),
                    ClaimedTransition::Sharded { .. } => {
                        $crate::store::shared::fenced_update!("shard_index = $5, shard_total = $6")
                    }
                    ClaimedTransition::Skipped { .. } => $crate::store::shared::fenced_update!(
                        "state = 'skipped', finished_at = $4, error = $5"
                    ),
                    ClaimedTransition::Cancelled { .. } => $crate::store::shared::fenced_update!(
                        "state = 'cancelled', finished_at = $4, error = $5"
                    ),
                    ClaimedTransition::ExtendLease { .. } => {
                        $crate::store::shared::fenced_update!("lease_until = $5")
                    }
                };
                let q = sqlx::query_as(sql)
                    .bind(fence.run_id)
                    .bind(&fence.node)
                    .bind(fence.token)
                    .bind(now);
                let q = match to {
                    ClaimedTransition::Started { executor_id, dispatched_at, deadline_at } => {
                        q.bind(*executor_id).bind(*deadline_at).bind(*dispatched_at)
                    }
                    ClaimedTransition::Deferred { due_at } => q.bind(*due_at),
                    ClaimedTransition::Released => q,
                    ClaimedTransition::Sharded { index, total } => q.bind(*index).bind(*total),
                    ClaimedTransition::Skipped { reason } | ClaimedTransition::Cancelled { reason } => {
                        q.bind(reason.as_str())
                    }
                    ClaimedTransition::ExtendLease { lease_until } => q.bind(*lease_until),
                };
                let row = q.fetch_optional(&mut *self.tx).await?;
                row.ok_or_else(|| StoreError::Fenced {
                    run_id: fence.run_id,
                    node: fence.node.clone(),
                    token: fence.token,
                })
            }

            async fn complete_run(
                &mut self,
                id: RunId,
                app: Option<AppId>,
                completion: &RunCompletion,
            ) -> Result<Completion> {
                if !completion.state.is_final() {
                    return Err($crate::store::shared::not_final(completion.state));
                }
                let row: Option<Run> = sqlx::query_as(concat!(
                    "SELECT * FROM runs WHERE id = $1
                       AND ($2 IS NULL OR EXISTS (SELECT 1 FROM tasks t WHERE t.id = runs.task_id AND t.app_id = $2))",
                    $for_update
                ))
                .bind(id)
                .bind(app)
                .fetch_optional(&mut *self.tx)
                .await?;
                let run = found(row, || format!("run {id}"))?;
                if let Some(refused) = $crate::store::shared::report_refused(&run, completion) {
                    return Err(refused);
                }
                if run.state.is_final() {
                    return Ok(Completion::AlreadyFinal(run));
                }
                let tail = $crate::store::shared::completed_tail(&run, completion);
                let row: Option<Run> = sqlx::query_as(
                    "UPDATE runs SET state = $2, output = $3, error = $4, log_tail = $5,
                         started_at = COALESCE(started_at, $6), finished_at = $7, lease_until = NULL
                     WHERE id = $1 AND state IN ('pending', 'claimed', 'running') RETURNING *",
                )
                .bind(id)
                .bind(completion.state.as_str())
                .bind(completion.output.as_ref().map(Json))
                .bind(completion.error.as_deref())
                .bind(tail)
                .bind(completion.started_at)
                .bind(completion.finished_at)
                .fetch_optional(&mut *self.tx)
                .await?;
                match row {
                    Some(run) => Ok(Completion::Applied(run)),
                    None => Ok(Completion::AlreadyFinal(run)),
                }
            }

            async fn revive_ended_run(
                &mut self,
                ended: &Run,
                completion: &RunCompletion,
            ) -> Result<Revival> {
                if !$crate::store::shared::late_success_counts(ended, completion) {
                    return Ok(Revival::Refused);
                }
                let next: Option<(RunId,)> = sqlx::query_as(
                    "SELECT id FROM runs
                     WHERE task_id = $1 AND scheduled_at = $2 AND shard_index = $3 AND attempt = $4",
                )
                .bind(ended.task_id)
                .bind(ended.scheduled_at)
                .bind(ended.shard_index)
                .bind(ended.attempt + 1)
                .fetch_optional(&mut *self.tx)
                .await?;
                // The retry or recovery is withdrawn when it has not started (pending, or claimed
                // but not yet sent anywhere) and nobody holds it: never wait on it, runs are
                // locked in id order and this one comes later.
                let mut withdrawn = false;
                if let Some((next,)) = next
                    && !self.try_lock_runs(&[next]).await?.is_empty()
                {
                    withdrawn = sqlx::query(
                        "DELETE FROM runs WHERE id = $1
                           AND (state = 'pending' OR (state = 'claimed' AND executor_id IS NULL))",
                    )
                    .bind(next)
                    .execute(&mut *self.tx)
                    .await?
                    .rows_affected()
                        > 0;
                }
                let tail = $crate::store::shared::completed_tail(ended, completion);
                let row: Option<Run> = sqlx::query_as(
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
                .fetch_optional(&mut *self.tx)
                .await?;
                Ok(match row {
                    None => Revival::Refused,
                    Some(run) if withdrawn => Revival::Revived(run),
                    Some(run) => Revival::Recorded(run),
                })
            }

            async fn record_progress(
                &mut self,
                app: Option<AppId>,
                progress: &RunProgress,
                _now: i64,
            ) -> Result<Option<TaskId>> {
                let id = progress.run_id;
                let row: Option<Run> = sqlx::query_as(concat!(
                    "SELECT * FROM runs WHERE id = $1
                       AND (state = 'running' OR (state = 'claimed' AND executor_id IS NOT NULL))
                       AND ($2 IS NULL OR EXISTS (SELECT 1 FROM tasks t WHERE t.id = runs.task_id AND t.app_id = $2))",
                    $for_update
                ))
                .bind(id)
                .bind(app)
                .fetch_optional(&mut *self.tx)
                .await?;
                let Some(run) = row else { return Ok(None) };
                let tail = if progress.log_lines.is_empty() {
                    run.log_tail
                } else {
                    $crate::run::append_log_tail(&run.log_tail, &progress.log_lines)
                };
                let fraction = progress.fraction.map(|f| f.clamp(0.0, 1.0));
                sqlx::query(
                    "UPDATE runs SET progress = COALESCE($2, progress),
                         progress_message = COALESCE($3, progress_message), log_tail = $4
                     WHERE id = $1",
                )
                .bind(id)
                .bind(fraction)
                .bind(progress.message.as_deref())
                .bind(tail)
                .execute(&mut *self.tx)
                .await?;
                Ok(Some(run.task_id))
            }

            async fn running_runs_past_deadline(&mut self, now: i64, limit: i64) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(concat!(
                    "SELECT * FROM runs WHERE state = 'running' AND deadline_at < $1
                       AND started_at IS NOT NULL AND finished_at IS NULL
                     ORDER BY deadline_at, id LIMIT $2",
                    $skip_locked
                ))
                .bind(now)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn lock_occurrence(&mut self, task: TaskId, scheduled_at: i64) -> Result<Vec<Run>> {
                let _: Option<(RunId,)> = sqlx::query_as(concat!(
                    "SELECT id FROM runs
                     WHERE task_id = $1 AND scheduled_at = $2 AND shard_index = 0 AND attempt = 1",
                    $for_update
                ))
                .bind(task)
                .bind(scheduled_at)
                .fetch_optional(&mut *self.tx)
                .await?;
                Ok(sqlx::query_as(
                    "SELECT * FROM runs WHERE task_id = $1 AND scheduled_at = $2 ORDER BY shard_index, attempt",
                )
                .bind(task)
                .bind(scheduled_at)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn runs_not_started(&mut self, now: i64, limit: i64) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(
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
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn unfinished_runs_of_task(&mut self, task: TaskId) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(
                    "SELECT * FROM runs WHERE task_id = $1 AND state IN ('pending', 'claimed', 'running') ORDER BY id",
                )
                .bind(task)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn request_run_cancel(&mut self, tenant: TenantId, run: RunId, at: i64) -> Result<bool> {
                let done = sqlx::query(
                    "UPDATE runs SET cancel_pending_at = $3
                     WHERE tenant_id = $1 AND id = $2 AND state = 'cancelled' AND executor_id IS NOT NULL",
                )
                .bind(tenant)
                .bind(run)
                .bind(at)
                .execute(&mut *self.tx)
                .await?;
                Ok(done.rows_affected() > 0)
            }

            async fn take_cancel_requests(&mut self, now: i64, limit: i64) -> Result<Vec<Run>> {
                Ok(sqlx::query_as(concat!(
                    "UPDATE runs SET cancel_pending_at = NULL WHERE id IN (
                         SELECT id FROM runs WHERE cancel_pending_at IS NOT NULL AND cancel_pending_at <= $1
                         ORDER BY cancel_pending_at LIMIT $2",
                    $skip_locked,
                    ") RETURNING *"
                ))
                .bind(now)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?)
            }

            async fn defer_cancel_request(&mut self, run: RunId, at: i64) -> Result<()> {
                sqlx::query("UPDATE runs SET cancel_pending_at = $2 WHERE id = $1 AND state = 'cancelled'")
                    .bind(run)
                    .bind(at)
                    .execute(&mut *self.tx)
                    .await?;
                Ok(())
            }

            async fn purge_trigger_keys(&mut self, created_before: i64, limit: i64) -> Result<u64> {
                let done = sqlx::query(concat!(
                    "DELETE FROM trigger_keys WHERE (tenant_id, key) IN (
                         SELECT tenant_id, key FROM trigger_keys WHERE created_at < $1 LIMIT $2",
                    $skip_locked,
                    ")"
                ))
                .bind(created_before)
                .bind(limit)
                .execute(&mut *self.tx)
                .await?;
                Ok(done.rows_affected())
            }
        });
    };
}
pub(crate) use run_ops;

/// `UPDATE runs SET <set>` of a claimed run, fenced: `$1` run id, `$2` claim owner, `$3` fence
/// token, `$4` now (the lease must not have ended); the SET clause's own values start at `$5`.
macro_rules! fenced_update {
    ($set:literal) => {
        concat!(
            "UPDATE runs SET ",
            $set,
            "
                         WHERE id = $1 AND state = 'claimed' AND claim_owner = $2 AND fence = $3
                           AND lease_until > $4 RETURNING *"
        )
    };
}
pub(crate) use fenced_update;

//! The PostgreSQL backend: the cluster store. Concurrent engine nodes claim with
//! `FOR UPDATE SKIP LOCKED`, so they never wait on each other's rows and never take the same run.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions};
use sqlx::types::Json;
use sqlx::{Connection, FromRow, Postgres, Row, Transaction};

use super::shared::{check_or, fk_or, found, is_fk, plan_completions, tx_impl, unique_or};
use super::{
    Backend, CapacityBacklog, ClaimApp, ClaimRequest, Completion, DUE_CHANNEL, DueListener,
    MigrationReport, Result, Revival, Scope, StartClaimed, StartedRun, Store, StoreError, Tx,
    UserUpdate, apply_migrations, claim_windows, like_escape, page_limit, redact_url, sum_per_task,
};
use crate::alarm::{
    Alarm, AlarmEvent, AlarmEventId, AlarmEventKind, AlarmFilter, AlarmId, NewAlarm,
};
use crate::app::{
    App, AppId, Executor, ExecutorHeartbeat, ExecutorId, ExecutorRegistration, ExecutorState,
    NewApp,
};
use crate::audit::{AuditEvent, NewAuditEvent};
use crate::node::{EngineNode, NodeHeartbeat};
use crate::run::{
    ClaimedTransition, Fence, NewRun, Run, RunCompletion, RunFilter, RunId, RunProgress,
    TriggerKind,
};
use crate::task::{
    Dependency, DependencyCondition, ScheduleColumns, Task, TaskDefinition, TaskFilter, TaskId,
};
use crate::tenant::{
    ApiToken, ApiTokenId, NewApiToken, NewTenant, NewUser, Tenant, TenantId, TenantUpdate, User,
    UserId,
};

static MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");

/// The PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// Without the session timeouts: migrations may legitimately run long.
    migrate_options: PgConnectOptions,
}

/// Server-side limits on every pooled session, all below the default lease (2 s), so that a
/// node frozen mid-transaction (a paused process, a partition) holds its row locks for at most
/// about one lease, and nobody waits on a lock longer than that: the waiting transaction fails
/// instead and is tried again (a result batch is answered 503 and re-sent by its wrapper; a
/// claim or dispatch moves on at the next poll).
/// - `idle_in_transaction_session_timeout`: the server ends a session whose transaction has
///   been idle this long, releasing its locks;
/// - `lock_timeout`: a statement waits at most this long for a row lock;
/// - `statement_timeout`: no statement runs longer than this.
pub const SESSION_TIMEOUTS: [(&str, &str); 3] = [
    ("idle_in_transaction_session_timeout", "1500"),
    ("lock_timeout", "1700"),
    ("statement_timeout", "1900"),
];

impl PgStore {
    /// Connects to `url` (`postgres://user[:password]@host[:port]/database[?options]`) with a
    /// pool of up to 16 connections.
    pub async fn connect(url: &str) -> Result<Self> {
        let options = PgConnectOptions::from_str(url).map_err(|e| {
            StoreError::Unavailable(format!("invalid PostgreSQL URL {}: {e}", redact_url(url)))
        })?;
        Self::connect_with(options, 16).await.map_err(|e| match e {
            StoreError::Database(e) => StoreError::Unavailable(format!(
                "cannot connect to PostgreSQL at {}: {e}",
                redact_url(url)
            )),
            other => other,
        })
    }

    /// Connects with explicit options and pool size. Every session gets the timeouts of
    /// [`SESSION_TIMEOUTS`].
    pub async fn connect_with(options: PgConnectOptions, max_connections: u32) -> Result<Self> {
        // One direct connection first: a pool would only report "timed out" for a server that
        // refuses connections, hiding the reason.
        PgConnection::connect_with(&options).await?.close().await?;
        let migrate_options = options.clone();
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.options(SESSION_TIMEOUTS))
            .await?;
        Ok(Self {
            pool,
            migrate_options,
        })
    }

    /// The connection pool (for LISTEN/NOTIFY and tests).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn migrate(&self) -> Result<MigrationReport> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(self.migrate_options.clone())
            .await?;
        let report = apply_migrations(&MIGRATOR, &pool).await;
        pool.close().await;
        report
    }

    async fn begin(&self) -> Result<Box<dyn Tx>> {
        Ok(Box::new(PgTx {
            tx: self.pool.begin().await?,
        }))
    }

    async fn begin_read(&self) -> Result<Box<dyn Tx>> {
        Ok(Box::new(PgTx {
            tx: self.pool.begin_with("BEGIN READ ONLY").await?,
        }))
    }

    async fn listen_due(&self) -> Result<Box<dyn DueListener>> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(DUE_CHANNEL).await?;
        Ok(Box::new(PgDueListener { listener }))
    }

    async fn server_warnings(&self) -> Result<Vec<String>> {
        let (autovacuum, track_counts): (String, String) =
            sqlx::query_as("SELECT current_setting('autovacuum'), current_setting('track_counts')")
                .fetch_one(&self.pool)
                .await?;
        let mut warnings = Vec::new();
        if autovacuum != "on" || track_counts != "on" {
            warnings.push(format!(
                "PostgreSQL's autovacuum does not run (autovacuum = {autovacuum}, track_counts = \
                 {track_counts}): every finished run leaves a dead row and a dead entry in the \
                 claim index that only VACUUM removes, so claims slow down and `runs` grows \
                 until it runs (see docs/engine.md, \"Retention and rollups\")"
            ));
        }
        Ok(warnings)
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}

#[derive(Debug)]
struct PgDueListener {
    listener: PgListener,
}

#[async_trait]
impl DueListener for PgDueListener {
    async fn recv(&mut self) -> Result<String> {
        Ok(self.listener.recv().await?.payload().to_owned())
    }
}

/// A PostgreSQL transaction.
#[derive(Debug)]
pub struct PgTx {
    tx: Transaction<'static, Postgres>,
}

fn raw_ids<T: Copy>(ids: &[T], f: impl Fn(T) -> i64) -> Vec<i64> {
    ids.iter().map(|&id| f(id)).collect()
}

tx_impl!(
    PgTx,
    for_update = " FOR UPDATE",
    skip_locked = " FOR UPDATE SKIP LOCKED",
    {
        async fn commit(self: Box<Self>) -> Result<()> {
            self.tx.commit().await.map_err(StoreError::from)
        }

        async fn notify_due(&mut self, group: &str) -> Result<()> {
            // Delivered when (and only if) the transaction commits.
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(DUE_CHANNEL)
                .bind(group)
                .execute(&mut *self.tx)
                .await?;
            Ok(())
        }

        async fn start_claimed_runs(
            &mut self,
            items: &[StartClaimed],
            now: i64,
        ) -> Result<Vec<StartedRun>> {
            if items.is_empty() {
                return Ok(Vec::new());
            }
            let ids: Vec<i64> = items.iter().map(|i| i.fence.run_id.0).collect();
            // Locked in id order first, as result batches lock them: the two never deadlock.
            sqlx::query("SELECT id FROM runs WHERE id = ANY($1) ORDER BY id FOR UPDATE")
                .bind(&ids)
                .execute(&mut *self.tx)
                .await?;
            Ok(sqlx::query_as(
                "UPDATE runs r SET state = CASE WHEN r.state = 'claimed' THEN 'running' ELSE r.state END,
                     executor_id = u.executor_id, dispatched_at = u.dispatched_at,
                     started_at = COALESCE(r.started_at, $7),
                     deadline_at = CASE WHEN r.state = 'claimed' THEN u.deadline_at ELSE r.deadline_at END,
                     cancel_pending_at = CASE WHEN r.state = 'cancelled' THEN $7 ELSE r.cancel_pending_at END,
                     dispatch_attempts = r.dispatch_attempts + 1
                 FROM UNNEST($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[])
                   AS u(id, owner, fence, executor_id, dispatched_at, deadline_at)
                 WHERE r.id = ANY($1) AND r.id = u.id AND r.claim_owner = u.owner AND r.fence = u.fence
                   AND (r.state = 'claimed'
                        OR (r.state IN ('succeeded', 'failed', 'timed_out', 'cancelled') AND r.dispatched_at IS NULL))
                 RETURNING r.id, r.state = 'running' AS running",
            )
            .bind(&ids)
            .bind(items.iter().map(|i| i.fence.node.clone()).collect::<Vec<_>>())
            .bind(items.iter().map(|i| i.fence.token).collect::<Vec<_>>())
            .bind(items.iter().map(|i| i.executor_id.0).collect::<Vec<_>>())
            .bind(items.iter().map(|i| i.dispatched_at).collect::<Vec<_>>())
            .bind(items.iter().map(|i| i.deadline_at).collect::<Vec<_>>())
            .bind(now)
            .fetch_all(&mut *self.tx)
            .await?)
        }

        async fn latest_scheduled_runs_before(
            &mut self,
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
            .fetch_all(&mut *self.tx)
            .await?)
        }

        async fn record_dispatch_intent(
            &mut self,
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
                 WHERE r.id = ANY($1) AND r.id = u.id AND r.state = 'claimed' AND r.claim_owner = u.owner
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
            .fetch_all(&mut *self.tx)
            .await?;
            Ok(rows.into_iter().map(|(id,)| id).collect())
        }

        async fn mark_silent_executors_lost(
            &mut self,
            ids: &[ExecutorId],
            heartbeat_before: i64,
        ) -> Result<Vec<Executor>> {
            Ok(sqlx::query_as(
                "UPDATE executors SET state = 'lost'
                 WHERE id = ANY($1) AND state IN ('up', 'draining') AND last_heartbeat_at < $2
                 RETURNING *",
            )
            .bind(raw_ids(ids, |i| i.0))
            .bind(heartbeat_before)
            .fetch_all(&mut *self.tx)
            .await?)
        }

        async fn record_executor_probes(&mut self, ids: &[ExecutorId], now: i64) -> Result<u64> {
            let done = sqlx::query(
                "UPDATE executors SET last_heartbeat_at = $2
                 WHERE id = ANY($1) AND state IN ('up', 'draining') AND last_heartbeat_at < $2",
            )
            .bind(raw_ids(ids, |i| i.0))
            .bind(now)
            .execute(&mut *self.tx)
            .await?;
            Ok(done.rows_affected())
        }

        async fn release_claimed_runs(&mut self, fences: &[Fence], now: i64) -> Result<Vec<RunId>> {
            if fences.is_empty() {
                return Ok(Vec::new());
            }
            let rows: Vec<(RunId,)> = sqlx::query_as(
                "UPDATE runs r SET state = 'pending', claim_owner = NULL, lease_until = NULL,
                     dispatch_attempts = r.dispatch_attempts + 1
                 FROM UNNEST($1::bigint[], $2::text[], $3::bigint[]) AS u(id, owner, fence)
                 WHERE r.id = ANY($1) AND r.id = u.id AND r.state = 'claimed' AND r.claim_owner = u.owner
                   AND r.fence = u.fence AND r.lease_until > $4
                 RETURNING r.id",
            )
            .bind(fences.iter().map(|f| f.run_id.0).collect::<Vec<_>>())
            .bind(fences.iter().map(|f| f.node.clone()).collect::<Vec<_>>())
            .bind(fences.iter().map(|f| f.token).collect::<Vec<_>>())
            .bind(now)
            .fetch_all(&mut *self.tx)
            .await?;
            Ok(rows.into_iter().map(|(id,)| id).collect())
        }

        async fn get_apps_by_ids(&mut self, ids: &[AppId]) -> Result<Vec<App>> {
            Ok(
                sqlx::query_as("SELECT * FROM apps WHERE id = ANY($1) ORDER BY id")
                    .bind(raw_ids(ids, |i| i.0))
                    .fetch_all(&mut *self.tx)
                    .await?,
            )
        }

        async fn lock_tasks(&mut self, ids: &[TaskId]) -> Result<Vec<Task>> {
            Ok(
                sqlx::query_as("SELECT * FROM tasks WHERE id = ANY($1) ORDER BY id FOR SHARE")
                    .bind(raw_ids(ids, |i| i.0))
                    .fetch_all(&mut *self.tx)
                    .await?,
            )
        }

        async fn add_fires_scheduled_many(&mut self, counts: &[(TaskId, i64)]) -> Result<()> {
            let sums = sum_per_task(counts);
            if sums.is_empty() {
                return Ok(());
            }
            sqlx::query(
                "UPDATE tasks t SET fires_scheduled = t.fires_scheduled + u.n
                 FROM UNNEST($1::bigint[], $2::bigint[]) AS u(id, n)
                 WHERE t.id = ANY($1) AND t.id = u.id",
            )
            .bind(sums.iter().map(|(t, _)| t.0).collect::<Vec<_>>())
            .bind(sums.iter().map(|(_, n)| *n).collect::<Vec<_>>())
            .execute(&mut *self.tx)
            .await?;
            Ok(())
        }

        async fn lock_tasks_for_update(&mut self, ids: &[TaskId]) -> Result<Vec<Task>> {
            Ok(sqlx::query_as(
                "SELECT * FROM tasks WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE",
            )
            .bind(raw_ids(ids, |i| i.0))
            .fetch_all(&mut *self.tx)
            .await?)
        }

        async fn complete_runs(
            &mut self,
            app: Option<AppId>,
            items: &[(RunId, RunCompletion)],
        ) -> Result<Vec<Result<Completion>>> {
            let mut ids: Vec<i64> = items
                .iter()
                .filter(|(_, c)| c.state.is_final())
                .map(|(id, _)| id.0)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let locked: Vec<Run> = if ids.is_empty() {
                Vec::new()
            } else {
                sqlx::query_as(
                    "SELECT * FROM runs WHERE id = ANY($1)
                       AND ($2 IS NULL OR EXISTS (SELECT 1 FROM tasks t WHERE t.id = runs.task_id AND t.app_id = $2))
                     ORDER BY id FOR UPDATE",
                )
                .bind(&ids)
                .bind(app)
                .fetch_all(&mut *self.tx)
                .await?
            };
            let plan = plan_completions(locked, items);
            let changed: Vec<Run> = if plan.writes.is_empty() {
                Vec::new()
            } else {
                let w = &plan.writes;
                sqlx::query_as(
                    "UPDATE runs r SET state = u.state, output = u.output, error = u.error,
                         log_tail = u.log_tail, started_at = COALESCE(r.started_at, u.started_at),
                         finished_at = u.finished_at, lease_until = NULL
                     FROM UNNEST($1::bigint[], $2::text[], $3::jsonb[], $4::text[], $5::text[],
                                 $6::bigint[], $7::bigint[])
                       AS u(id, state, output, error, log_tail, started_at, finished_at)
                     WHERE r.id = ANY($1) AND r.id = u.id AND r.state IN ('pending', 'claimed', 'running')
                     RETURNING r.*",
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
                .fetch_all(&mut *self.tx)
                .await?
            };
            Ok(plan.outcomes(changed))
        }

        async fn lock_tasks_with_children(
            &mut self,
            ids: &[TaskId],
        ) -> Result<(Vec<Task>, Vec<TaskId>)> {
            let rows = sqlx::query(
                "SELECT t.*, EXISTS (SELECT 1 FROM task_dependencies d WHERE d.parent_task_id = t.id)
                     AS has_children
                 FROM tasks t WHERE t.id = ANY($1) ORDER BY t.id FOR SHARE OF t",
            )
            .bind(raw_ids(ids, |i| i.0))
            .fetch_all(&mut *self.tx)
            .await?;
            let mut tasks = Vec::with_capacity(rows.len());
            let mut parents = Vec::new();
            for row in rows {
                let task = Task::from_row(&row)?;
                if row.try_get::<bool, _>("has_children")? {
                    parents.push(task.id);
                }
                tasks.push(task);
            }
            Ok((tasks, parents))
        }

        async fn insert_runs(&mut self, runs: &[NewRun], now: i64) -> Result<Vec<Run>> {
            if runs.is_empty() {
                return Ok(Vec::new());
            }
            let col = |f: fn(&NewRun) -> i64| runs.iter().map(f).collect::<Vec<i64>>();
            let col32 = |f: fn(&NewRun) -> i32| runs.iter().map(f).collect::<Vec<i32>>();
            let opt =
                |f: fn(&NewRun) -> Option<i64>| runs.iter().map(f).collect::<Vec<Option<i64>>>();
            Ok(sqlx::query_as(
                "INSERT INTO runs (tenant_id, task_id, node_group, scheduled_at, due_at, attempt, shard_index,
                     shard_total, trigger_kind, state, priority, parent_run_id, chain_root_id, params,
                     triggered_by, created_at, app_id)
                 SELECT tenant_id, task_id, node_group, scheduled_at, due_at, attempt, shard_index, shard_total,
                     trigger_kind, 'pending', priority, parent_run_id, chain_root_id, params, triggered_by, $15,
                     (SELECT k.app_id FROM tasks k WHERE k.id = t.task_id)
                 FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[], $6::int[],
                     $7::int[], $8::int[], $9::text[], $10::int[], $11::bigint[], $12::bigint[], $13::jsonb[],
                     $14::text[])
                   AS t(tenant_id, task_id, node_group, scheduled_at, due_at, attempt, shard_index, shard_total,
                        trigger_kind, priority, parent_run_id, chain_root_id, params, triggered_by)
                 -- An occurrence that exists is skipped without touching the unique index: a row
                 -- another transaction is changing (claiming) would make this insert wait for it,
                 -- and that transaction may be waiting for a task this one holds.
                 WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.task_id = t.task_id
                     AND r.scheduled_at = t.scheduled_at AND r.attempt = t.attempt
                     AND r.shard_index = t.shard_index)
                 ON CONFLICT (task_id, scheduled_at, attempt, shard_index) DO NOTHING
                 RETURNING *",
            )
            .bind(col(|r| r.tenant_id.0))
            .bind(col(|r| r.task_id.0))
            .bind(runs.iter().map(|r| r.node_group.clone()).collect::<Vec<_>>())
            .bind(col(|r| r.scheduled_at))
            .bind(col(|r| r.due_at))
            .bind(col32(|r| r.attempt))
            .bind(col32(|r| r.shard_index))
            .bind(col32(|r| r.shard_total))
            .bind(runs.iter().map(|r| r.trigger_kind.as_str()).collect::<Vec<_>>())
            .bind(col32(|r| r.priority))
            .bind(opt(|r| r.parent_run_id.map(|i| i.0)))
            .bind(opt(|r| r.chain_root_id.map(|i| i.0)))
            .bind(runs.iter().map(|r| r.params.as_ref().map(Json)).collect::<Vec<_>>())
            .bind(runs.iter().map(|r| r.triggered_by.clone()).collect::<Vec<_>>())
            .bind(now)
            .fetch_all(&mut *self.tx)
            .await
            .map_err(|e| fk_or(e, || "a task or tenant of these runs".to_owned()))?)
        }

        async fn claim_due_runs(&mut self, req: &ClaimRequest) -> Result<Vec<Run>> {
            // The apps with runs waiting in the node's groups (a skip scan of `runs_claimable`:
            // one index probe per app, however many runs wait), with their executors' capacity
            // and the runs they hold.
            let apps: Vec<ClaimApp> = sqlx::query_as(
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
                      WHERE r.app_id = a.id AND r.started_at IS NOT NULL AND r.finished_at IS NULL) AS running
                 FROM pairs p JOIN apps a ON a.id = p.app_id JOIN tenants t ON t.id = a.tenant_id",
            )
            .bind(&req.groups)
            .fetch_all(&mut *self.tx)
            .await?;
            let windows = claim_windows(&apps, req.limit);
            if windows.is_empty() {
                return Ok(Vec::new());
            }
            // Per app: the room its window leaves (the claimed runs with a live lease among its
            // first `win` runs in due order are in flight), then up to that many claimable runs
            // in due order, locked, skipping those another claimer holds; the apps' runs take
            // turns; the first `limit` turns are claimed.
            let mut runs: Vec<Run> = sqlx::query_as(
                "WITH w AS (
                     SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::float8[], $10::bool[])
                       AS w(node_group, app_id, win, step, counted)
                 ), room AS (
                     SELECT w.node_group, w.app_id, w.step, w.win - (
                         SELECT count(*) FROM (
                             SELECT r.state, r.lease_until FROM runs r
                             WHERE r.node_group = w.node_group AND r.app_id = w.app_id AND r.due_at <= $5
                               AND r.started_at IS NULL AND r.finished_at IS NULL
                             ORDER BY r.due_at LIMIT CASE WHEN w.counted THEN w.win ELSE 0 END) x
                         WHERE x.state = 'claimed' AND x.lease_until > $6) AS room
                     FROM w
                 ), front AS (
                     SELECT f.id, f.due_at, f.priority, room.app_id, room.step
                     FROM room CROSS JOIN LATERAL (
                         SELECT r.id, r.due_at, r.priority FROM runs r
                         WHERE r.node_group = room.node_group AND r.app_id = room.app_id AND r.due_at <= $5
                           AND r.started_at IS NULL AND r.finished_at IS NULL
                           AND r.state IN ('pending', 'claimed') AND (r.state = 'pending' OR r.lease_until <= $6)
                         ORDER BY r.due_at, r.priority DESC, r.id
                         LIMIT GREATEST(LEAST(room.room, $7), 0)
                         FOR UPDATE SKIP LOCKED) f
                 ), pick AS (
                     SELECT id FROM (
                         SELECT id, due_at, priority,
                             row_number() OVER (PARTITION BY app_id ORDER BY due_at, priority DESC, id) * step AS turn
                         FROM front) ranked
                     ORDER BY turn, due_at, priority DESC, id
                     LIMIT $7
                 )
                 UPDATE runs SET state = 'claimed', claim_owner = $8, lease_until = $9, fence = fence + 1,
                     claimed_at = $6
                 WHERE id IN (SELECT id FROM pick)
                 RETURNING *",
            )
            .bind(windows.iter().map(|w| w.node_group.clone()).collect::<Vec<_>>())
            .bind(windows.iter().map(|w| w.app_id.0).collect::<Vec<_>>())
            .bind(windows.iter().map(|w| w.window).collect::<Vec<_>>())
            .bind(windows.iter().map(|w| w.step).collect::<Vec<_>>())
            .bind(req.now.saturating_add(req.horizon_ms))
            .bind(req.now)
            .bind(req.limit)
            .bind(&req.node)
            .bind(req.now.saturating_add(req.lease_ms))
            .bind(windows.iter().map(|w| w.in_flight_counts).collect::<Vec<_>>())
            .fetch_all(&mut *self.tx)
            .await?;
            runs.sort_by_key(|r| (r.due_at, -r.priority, r.id));
            Ok(runs)
        }

        async fn capacity_backlogs(
            &mut self,
            due_before: i64,
            count_limit: i64,
        ) -> Result<Vec<CapacityBacklog>> {
            Ok(sqlx::query_as(
                "SELECT a.id AS app_id, a.tenant_id, w.waiting, w.oldest_due_at,
                     (e.live > 0 AND e.capacity <= r.running) AS full, b.alarm_key
                 FROM apps a JOIN tenants t ON t.id = a.tenant_id
                 LEFT JOIN app_backlogs b ON b.app_id = a.id
                 CROSS JOIN LATERAL (
                     SELECT count(*) AS live, COALESCE(sum(x.capacity) FILTER (WHERE x.state = 'up'), 0) AS capacity
                     FROM executors x WHERE x.app_id = a.id AND x.state IN ('up', 'draining')) e
                 CROSS JOIN LATERAL (
                     SELECT count(*) AS running FROM runs x
                     WHERE x.app_id = a.id AND x.started_at IS NOT NULL AND x.finished_at IS NULL) r
                 CROSS JOIN LATERAL (
                     SELECT count(*) AS waiting, min(q.due_at) AS oldest_due_at FROM (
                         SELECT x.due_at FROM runs x
                         WHERE x.node_group = t.node_group AND x.app_id = a.id AND x.due_at < $1 AND x.state = 'pending'
                           AND x.started_at IS NULL AND x.finished_at IS NULL
                           -- Read only for apps that are full or have an episode open.
                           AND ((e.live > 0 AND e.capacity <= r.running) OR b.app_id IS NOT NULL)
                         ORDER BY x.due_at LIMIT $2) q) w
                 WHERE (e.live > 0 AND e.capacity <= r.running AND w.waiting > 0) OR b.app_id IS NOT NULL
                 ORDER BY a.id",
            )
            .bind(due_before)
            .bind(count_limit)
            .fetch_all(&mut *self.tx)
            .await?)
        }

        async fn open_backlog(&mut self, app: AppId, alarm_key: &str, now: i64) -> Result<bool> {
            let done = sqlx::query(
                "INSERT INTO app_backlogs (app_id, alarm_key, opened_at) VALUES ($1, $2, $3)
                 ON CONFLICT (app_id) DO NOTHING",
            )
            .bind(app)
            .bind(alarm_key)
            .bind(now)
            .execute(&mut *self.tx)
            .await?;
            Ok(done.rows_affected() == 1)
        }

        async fn close_backlog(&mut self, app: AppId) -> Result<Option<String>> {
            let row: Option<(String,)> =
                sqlx::query_as("DELETE FROM app_backlogs WHERE app_id = $1 RETURNING alarm_key")
                    .bind(app)
                    .fetch_optional(&mut *self.tx)
                    .await?;
            Ok(row.map(|(k,)| k))
        }

        async fn set_tenant_weight(&mut self, tenant: TenantId, weight: i32) -> Result<()> {
            let done = sqlx::query("UPDATE tenants SET weight = $2 WHERE id = $1")
                .bind(tenant)
                .bind(weight)
                .execute(&mut *self.tx)
                .await
                .map_err(|e| check_or(e, || format!("weight {weight} (at least 1)")))?;
            found((done.rows_affected() == 1).then_some(()), || {
                format!("tenant {tenant}")
            })
        }

        async fn child_task_ids(&mut self, parents: &[TaskId]) -> Result<Vec<TaskId>> {
            let rows: Vec<(TaskId,)> = sqlx::query_as(
                "SELECT DISTINCT child_task_id FROM task_dependencies
                 WHERE parent_task_id = ANY($1) ORDER BY child_task_id",
            )
            .bind(raw_ids(parents, |i| i.0))
            .fetch_all(&mut *self.tx)
            .await?;
            Ok(rows.into_iter().map(|(t,)| t).collect())
        }

        async fn try_lock_runs(&mut self, ids: &[RunId]) -> Result<Vec<RunId>> {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let rows: Vec<(RunId,)> = sqlx::query_as(
                "SELECT id FROM runs WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED",
            )
            .bind(raw_ids(ids, |i| i.0))
            .fetch_all(&mut *self.tx)
            .await?;
            Ok(rows.into_iter().map(|(id,)| id).collect())
        }

        async fn delete_pending_runs(
            &mut self,
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
            .execute(&mut *self.tx)
            .await?;
            Ok(done.rows_affected())
        }

        async fn running_runs_on_executors(
            &mut self,
            executors: &[ExecutorId],
        ) -> Result<Vec<Run>> {
            Ok(sqlx::query_as(
                "SELECT * FROM runs WHERE state = 'running' AND executor_id = ANY($1)
                   AND started_at IS NOT NULL AND finished_at IS NULL
                 ORDER BY id FOR UPDATE",
            )
            .bind(raw_ids(executors, |i| i.0))
            .fetch_all(&mut *self.tx)
            .await?)
        }

        async fn running_runs_missing_from(
            &mut self,
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
            .fetch_all(&mut *self.tx)
            .await?;
            Ok(rows.into_iter().map(|(id,)| id).collect())
        }

        async fn lock_chain_runs(
            &mut self,
            chain_root: RunId,
            tasks: &[TaskId],
        ) -> Result<Vec<Run>> {
            let root: Option<(i64,)> =
                sqlx::query_as("SELECT id FROM runs WHERE id = $1 FOR UPDATE")
                    .bind(chain_root)
                    .fetch_optional(&mut *self.tx)
                    .await?;
            found(root, || format!("run {chain_root}"))?;
            Ok(sqlx::query_as(
                "SELECT * FROM runs WHERE (id = $1 OR chain_root_id = $1) AND task_id = ANY($2) ORDER BY id",
            )
            .bind(chain_root)
            .bind(raw_ids(tasks, |i| i.0))
            .fetch_all(&mut *self.tx)
            .await?)
        }

        async fn mark_alarms_published(&mut self, ids: &[AlarmId], now: i64) -> Result<u64> {
            let done = sqlx::query(
                "UPDATE alarms SET published_at = $2 WHERE id = ANY($1) AND published_at IS NULL",
            )
            .bind(raw_ids(ids, |i| i.0))
            .bind(now)
            .execute(&mut *self.tx)
            .await?;
            Ok(done.rows_affected())
        }

        async fn tasks_with_unresolved_alarms(&mut self, tasks: &[TaskId]) -> Result<Vec<TaskId>> {
            let rows: Vec<(TaskId,)> = sqlx::query_as(concat!(
                "SELECT DISTINCT task_id FROM alarms WHERE task_id = ANY($1)
                   AND resolved_at IS NULL AND repeat_of IS NULL AND kind IN ",
                crate::store::shared::alarms::resolved_by_success_sql!()
            ))
            .bind(raw_ids(tasks, |t| t.0))
            .fetch_all(&mut *self.tx)
            .await?;
            Ok(rows.into_iter().map(|(t,)| t).collect())
        }

        async fn mark_alarm_events_published(
            &mut self,
            ids: &[AlarmEventId],
            now: i64,
        ) -> Result<u64> {
            let ids = raw_ids(ids, |i| i.0);
            let done = sqlx::query(
                "UPDATE alarm_events SET published_at = $2 WHERE id = ANY($1) AND published_at IS NULL",
            )
            .bind(&ids)
            .bind(now)
            .execute(&mut *self.tx)
            .await?;
            sqlx::query(
                "UPDATE alarms SET published_at = $2 WHERE published_at IS NULL AND id IN
                     (SELECT alarm_id FROM alarm_events WHERE id = ANY($1) AND event = 'raised')",
            )
            .bind(&ids)
            .bind(now)
            .execute(&mut *self.tx)
            .await?;
            Ok(done.rows_affected())
        }
    }
);

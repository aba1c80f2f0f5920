//! The SQLite backend: the embedded store of `mthpt standalone`. SQLite has one writer at a time,
//! so every transaction that may write starts with `BEGIN IMMEDIATE` (it takes the write lock up
//! front and waits for it, instead of failing when a reader later tries to write); row-locking
//! clauses are therefore unnecessary and lists travel as JSON arrays.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::types::Json;
use sqlx::{Sqlite, Transaction};
use tokio::sync::broadcast;

use super::shared::{check_or, fk_or, found, is_fk, tx_impl, unique_or};
use super::{
    Backend, CapacityBacklog, ClaimApp, ClaimCandidate, ClaimRequest, Completion, DueListener,
    MigrationReport, Result, Revival, Scope, StartClaimed, StartedRun, Store, StoreError, Tx,
    UserUpdate, apply_migrations, claim_windows, like_escape, page_limit, pick_claims,
    sum_per_task,
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

static MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// Due signals within this process (SQLite has no `NOTIFY`).
    due: broadcast::Sender<String>,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file `url` names: `sqlite://relative/path.db`,
    /// `sqlite:///absolute/path.db` or `sqlite:path.db`.
    pub async fn connect(url: &str) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Unavailable(format!("invalid SQLite URL {url}: {e}")))?;
        Self::connect_with(options).await.map_err(|e| match e {
            StoreError::Database(e) => {
                StoreError::Unavailable(format!("cannot open SQLite database {url}: {e}"))
            }
            other => other,
        })
    }

    /// Opens with explicit options (WAL journal, full sync, foreign keys and a busy timeout are
    /// always set).
    pub async fn connect_with(options: SqliteConnectOptions) -> Result<Self> {
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await?;
        let (due, _) = broadcast::channel(1024);
        Ok(Self { pool, due })
    }

    /// The connection pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn migrate(&self) -> Result<MigrationReport> {
        let report = apply_migrations(&MIGRATOR, &self.pool).await?;
        if !report.applied.is_empty() {
            // A connection opened before a migration changed a table prepares its first
            // statement against the schema it read then: SQLite prepares it again when it runs,
            // but the driver keeps the old column list (`SELECT *` of a table that gained a
            // column then fails). The idle connections are closed; new ones read the schema.
            while let Some(conn) = self.pool.try_acquire() {
                let _ = conn.close().await;
            }
        }
        Ok(report)
    }

    async fn begin(&self) -> Result<Box<dyn Tx>> {
        Ok(Box::new(SqliteTx {
            tx: self.pool.begin_with("BEGIN IMMEDIATE").await?,
            due: self.due.clone(),
            signals: Vec::new(),
        }))
    }

    async fn begin_read(&self) -> Result<Box<dyn Tx>> {
        Ok(Box::new(SqliteTx {
            tx: self.pool.begin().await?,
            due: self.due.clone(),
            signals: Vec::new(),
        }))
    }

    async fn listen_due(&self) -> Result<Box<dyn DueListener>> {
        Ok(Box::new(LocalDueListener {
            rx: self.due.subscribe(),
        }))
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}

/// A SQLite transaction.
#[derive(Debug)]
pub struct SqliteTx {
    tx: Transaction<'static, Sqlite>,
    due: broadcast::Sender<String>,
    /// Due signals to send once committed.
    signals: Vec<String>,
}

#[derive(Debug)]
struct LocalDueListener {
    rx: broadcast::Receiver<String>,
}

#[async_trait]
impl DueListener for LocalDueListener {
    async fn recv(&mut self) -> Result<String> {
        match self.rx.recv().await {
            Ok(group) => Ok(group),
            // Missed signals: any group may have work, wake up for all.
            Err(broadcast::error::RecvError::Lagged(_)) => Ok(String::new()),
            Err(broadcast::error::RecvError::Closed) => {
                Err(StoreError::Unavailable("the store was closed".to_owned()))
            }
        }
    }
}

fn json_ids<T: Copy>(ids: &[T], f: impl Fn(T) -> i64) -> String {
    serde_json::Value::from(ids.iter().map(|&id| f(id)).collect::<Vec<i64>>()).to_string()
}

tx_impl!(SqliteTx, for_update = "", skip_locked = "", {
    async fn commit(self: Box<Self>) -> Result<()> {
        let SqliteTx { tx, due, signals } = *self;
        tx.commit().await?;
        for group in signals {
            // Nobody listening is fine.
            let _ = due.send(group);
        }
        Ok(())
    }

    async fn notify_due(&mut self, group: &str) -> Result<()> {
        if !self.signals.iter().any(|g| g == group) {
            self.signals.push(group.to_owned());
        }
        Ok(())
    }

    async fn start_claimed_runs(
        &mut self,
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
            .fetch_optional(&mut *self.tx)
            .await?;
            started.extend(moved);
        }
        Ok(started)
    }

    async fn record_dispatch_intent(
        &mut self,
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
            .fetch_optional(&mut *self.tx)
            .await?;
            recorded.extend(row.map(|(id,)| id));
        }
        Ok(recorded)
    }

    async fn mark_silent_executors_lost(
        &mut self,
        ids: &[ExecutorId],
        heartbeat_before: i64,
    ) -> Result<Vec<Executor>> {
        Ok(sqlx::query_as(
            "UPDATE executors SET state = 'lost'
             WHERE id IN (SELECT value FROM json_each($1)) AND state IN ('up', 'draining')
               AND last_heartbeat_at < $2
             RETURNING *",
        )
        .bind(json_ids(ids, |i| i.0))
        .bind(heartbeat_before)
        .fetch_all(&mut *self.tx)
        .await?)
    }

    async fn record_executor_probes(&mut self, ids: &[ExecutorId], now: i64) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE executors SET last_heartbeat_at = $2
             WHERE id IN (SELECT value FROM json_each($1)) AND state IN ('up', 'draining')
               AND last_heartbeat_at < $2",
        )
        .bind(json_ids(ids, |i| i.0))
        .bind(now)
        .execute(&mut *self.tx)
        .await?;
        Ok(done.rows_affected())
    }

    async fn release_claimed_runs(&mut self, fences: &[Fence], now: i64) -> Result<Vec<RunId>> {
        let mut released = Vec::with_capacity(fences.len());
        for fence in fences {
            match self
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

    async fn get_apps_by_ids(&mut self, ids: &[AppId]) -> Result<Vec<App>> {
        Ok(sqlx::query_as(
            "SELECT * FROM apps WHERE id IN (SELECT value FROM json_each($1)) ORDER BY id",
        )
        .bind(json_ids(ids, |i| i.0))
        .fetch_all(&mut *self.tx)
        .await?)
    }

    async fn lock_tasks(&mut self, ids: &[TaskId]) -> Result<Vec<Task>> {
        Ok(sqlx::query_as(
            "SELECT * FROM tasks WHERE id IN (SELECT value FROM json_each($1)) ORDER BY id",
        )
        .bind(json_ids(ids, |i| i.0))
        .fetch_all(&mut *self.tx)
        .await?)
    }

    async fn add_fires_scheduled_many(&mut self, counts: &[(TaskId, i64)]) -> Result<()> {
        for (task, n) in sum_per_task(counts) {
            self.add_fires_scheduled(task, n).await?;
        }
        Ok(())
    }

    async fn lock_tasks_for_update(&mut self, ids: &[TaskId]) -> Result<Vec<Task>> {
        // One writer at a time: the shared read is already exclusive.
        self.lock_tasks(ids).await
    }

    async fn lock_tasks_with_children(
        &mut self,
        ids: &[TaskId],
    ) -> Result<(Vec<Task>, Vec<TaskId>)> {
        let tasks = self.lock_tasks(ids).await?;
        let parents: Vec<(TaskId,)> = sqlx::query_as(
            "SELECT DISTINCT parent_task_id FROM task_dependencies
             WHERE parent_task_id IN (SELECT value FROM json_each($1)) ORDER BY parent_task_id",
        )
        .bind(json_ids(ids, |i| i.0))
        .fetch_all(&mut *self.tx)
        .await?;
        Ok((tasks, parents.into_iter().map(|(t,)| t).collect()))
    }

    async fn complete_runs(
        &mut self,
        app: Option<AppId>,
        items: &[(RunId, RunCompletion)],
    ) -> Result<Vec<Result<Completion>>> {
        // One writer at a time: item by item is as good as one statement here.
        let mut out = Vec::with_capacity(items.len());
        for (id, completion) in items {
            out.push(match self.complete_run(*id, app, completion).await {
                Ok(c) => Ok(c),
                Err(e @ (StoreError::NotFound(_) | StoreError::InvalidState(_))) => Err(e),
                Err(e) => return Err(e),
            });
        }
        Ok(out)
    }

    async fn insert_runs(&mut self, runs: &[NewRun], now: i64) -> Result<Vec<Run>> {
        let mut inserted = Vec::with_capacity(runs.len());
        for run in runs {
            if let Some(r) = self.insert_run(run, now).await? {
                inserted.push(r);
            }
        }
        Ok(inserted)
    }

    async fn claim_due_runs(&mut self, req: &ClaimRequest) -> Result<Vec<Run>> {
        let groups = serde_json::Value::from(req.groups.clone()).to_string();
        // The apps of the groups' tenants with their executors' capacity and the runs they
        // hold (as on PostgreSQL).
        let apps: Vec<ClaimApp> = sqlx::query_as(
            "WITH pairs AS (
                 SELECT DISTINCT node_group, app_id FROM runs
                 WHERE node_group IN (SELECT value FROM json_each($1))
                   AND started_at IS NULL AND finished_at IS NULL AND app_id IS NOT NULL
             )
             SELECT p.node_group, a.id AS app_id, a.tenant_id, t.weight,
                 (SELECT count(*) FROM executors e
                  WHERE e.app_id = a.id AND e.state IN ('up', 'draining')) AS live,
                 (SELECT COALESCE(sum(e.capacity), 0) FROM executors e
                  WHERE e.app_id = a.id AND e.state = 'up') AS capacity,
                 (SELECT count(*) FROM runs r
                  WHERE r.app_id = a.id AND r.started_at IS NOT NULL AND r.finished_at IS NULL) AS running
             FROM pairs p JOIN apps a ON a.id = p.app_id JOIN tenants t ON t.id = a.tenant_id",
        )
        .bind(&groups)
        .fetch_all(&mut *self.tx)
        .await?;
        let windows = claim_windows(&apps, req.limit);
        // One writer at a time: each app's window is read, the turns are taken here, and the
        // picked runs are claimed in one statement (checked again all the same).
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
            .fetch_all(&mut *self.tx)
            .await?;
            fronts.push((w, candidates));
        }
        let picked = pick_claims(&fronts, req.now, req.limit);
        if picked.is_empty() {
            return Ok(Vec::new());
        }
        let mut runs: Vec<Run> = sqlx::query_as(
            "UPDATE runs SET state = 'claimed', claim_owner = $1, lease_until = $2, fence = fence + 1,
                 claimed_at = $3
             WHERE id IN (SELECT value FROM json_each($4))
               AND state IN ('pending', 'claimed') AND (state = 'pending' OR lease_until <= $3)
               AND started_at IS NULL AND finished_at IS NULL
             RETURNING *",
        )
        .bind(&req.node)
        .bind(req.now.saturating_add(req.lease_ms))
        .bind(req.now)
        .bind(serde_json::Value::from(picked).to_string())
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
            "WITH s AS (
                 SELECT a.id AS app_id, a.tenant_id, b.alarm_key,
                     (SELECT count(*) FROM executors x
                      WHERE x.app_id = a.id AND x.state IN ('up', 'draining')) AS live,
                     (SELECT COALESCE(sum(x.capacity), 0) FROM executors x
                      WHERE x.app_id = a.id AND x.state = 'up') AS capacity,
                     (SELECT count(*) FROM runs x
                      WHERE x.app_id = a.id AND x.started_at IS NOT NULL AND x.finished_at IS NULL) AS running,
                     (SELECT count(*) FROM (
                         SELECT 1 FROM runs x
                         WHERE x.node_group = t.node_group AND x.app_id = a.id AND x.due_at < $1 AND x.state = 'pending'
                           AND x.started_at IS NULL AND x.finished_at IS NULL
                         LIMIT $2)) AS waiting,
                     (SELECT min(x.due_at) FROM runs x
                      WHERE x.node_group = t.node_group AND x.app_id = a.id AND x.due_at < $1 AND x.state = 'pending'
                        AND x.started_at IS NULL AND x.finished_at IS NULL) AS oldest_due_at
                 FROM apps a JOIN tenants t ON t.id = a.tenant_id LEFT JOIN app_backlogs b ON b.app_id = a.id
             )
             SELECT app_id, tenant_id, waiting, oldest_due_at,
                 (live > 0 AND capacity <= running) AS full, alarm_key
             FROM s
             WHERE (live > 0 AND capacity <= running AND waiting > 0) OR alarm_key IS NOT NULL
             ORDER BY app_id",
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
             WHERE parent_task_id IN (SELECT value FROM json_each($1)) ORDER BY child_task_id",
        )
        .bind(json_ids(parents, |i| i.0))
        .fetch_all(&mut *self.tx)
        .await?;
        Ok(rows.into_iter().map(|(t,)| t).collect())
    }

    async fn latest_scheduled_runs_before(&mut self, items: &[(TaskId, i64)]) -> Result<Vec<Run>> {
        let mut found = Vec::with_capacity(items.len());
        for (task, before) in items {
            let row: Option<Run> = sqlx::query_as(
                "SELECT * FROM runs
                 WHERE task_id = $1 AND scheduled_at < $2 AND trigger_kind = 'schedule' AND attempt = 1
                 ORDER BY scheduled_at DESC LIMIT 1",
            )
            .bind(task)
            .bind(before)
            .fetch_optional(&mut *self.tx)
            .await?;
            found.extend(row);
        }
        Ok(found)
    }

    async fn try_lock_runs(&mut self, ids: &[RunId]) -> Result<Vec<RunId>> {
        // One writer at a time: every row is free to this transaction.
        let rows: Vec<(RunId,)> = sqlx::query_as(
            "SELECT id FROM runs WHERE id IN (SELECT value FROM json_each($1)) ORDER BY id",
        )
        .bind(json_ids(ids, |i| i.0))
        .fetch_all(&mut *self.tx)
        .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    async fn delete_pending_runs(&mut self, task: TaskId, triggers: &[TriggerKind]) -> Result<u64> {
        let kinds =
            serde_json::Value::from(triggers.iter().map(|t| t.as_str()).collect::<Vec<_>>())
                .to_string();
        let done = sqlx::query(
            "DELETE FROM runs WHERE task_id = $1 AND state = 'pending'
                   AND trigger_kind IN (SELECT value FROM json_each($2))",
        )
        .bind(task)
        .bind(kinds)
        .execute(&mut *self.tx)
        .await?;
        Ok(done.rows_affected())
    }

    async fn running_runs_on_executors(&mut self, executors: &[ExecutorId]) -> Result<Vec<Run>> {
        Ok(sqlx::query_as(
            "SELECT * FROM runs WHERE state = 'running'
                   AND started_at IS NOT NULL AND finished_at IS NULL
                   AND executor_id IN (SELECT value FROM json_each($1)) ORDER BY id",
        )
        .bind(json_ids(executors, |i| i.0))
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
               AND id NOT IN (SELECT value FROM json_each($2))
               AND COALESCE(dispatched_at, started_at) <= $3
             ORDER BY id",
        )
        .bind(executor)
        .bind(serde_json::Value::from(held.to_vec()).to_string())
        .bind(sent_before)
        .fetch_all(&mut *self.tx)
        .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    async fn lock_chain_runs(&mut self, chain_root: RunId, tasks: &[TaskId]) -> Result<Vec<Run>> {
        let root: Option<(i64,)> = sqlx::query_as("SELECT id FROM runs WHERE id = $1")
            .bind(chain_root)
            .fetch_optional(&mut *self.tx)
            .await?;
        found(root, || format!("run {chain_root}"))?;
        Ok(sqlx::query_as(
            "SELECT * FROM runs WHERE (id = $1 OR chain_root_id = $1)
                   AND task_id IN (SELECT value FROM json_each($2)) ORDER BY id",
        )
        .bind(chain_root)
        .bind(json_ids(tasks, |i| i.0))
        .fetch_all(&mut *self.tx)
        .await?)
    }

    async fn mark_alarms_published(&mut self, ids: &[AlarmId], now: i64) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE alarms SET published_at = $2
                 WHERE id IN (SELECT value FROM json_each($1)) AND published_at IS NULL",
        )
        .bind(json_ids(ids, |i| i.0))
        .bind(now)
        .execute(&mut *self.tx)
        .await?;
        Ok(done.rows_affected())
    }

    async fn tasks_with_unresolved_alarms(&mut self, tasks: &[TaskId]) -> Result<Vec<TaskId>> {
        let rows: Vec<(TaskId,)> = sqlx::query_as(concat!(
            "SELECT DISTINCT task_id FROM alarms WHERE task_id IN (SELECT value FROM json_each($1))
               AND resolved_at IS NULL AND repeat_of IS NULL AND kind IN ",
            crate::store::shared::alarms::resolved_by_success_sql!()
        ))
        .bind(json_ids(tasks, |t| t.0))
        .fetch_all(&mut *self.tx)
        .await?;
        Ok(rows.into_iter().map(|(t,)| t).collect())
    }

    async fn mark_alarm_events_published(&mut self, ids: &[AlarmEventId], now: i64) -> Result<u64> {
        let ids = json_ids(ids, |i| i.0);
        let done = sqlx::query(
            "UPDATE alarm_events SET published_at = $2
                 WHERE id IN (SELECT value FROM json_each($1)) AND published_at IS NULL",
        )
        .bind(&ids)
        .bind(now)
        .execute(&mut *self.tx)
        .await?;
        sqlx::query(
            "UPDATE alarms SET published_at = $2 WHERE published_at IS NULL AND id IN
                 (SELECT alarm_id FROM alarm_events
                  WHERE id IN (SELECT value FROM json_each($1)) AND event = 'raised')",
        )
        .bind(&ids)
        .bind(now)
        .execute(&mut *self.tx)
        .await?;
        Ok(done.rows_affected())
    }
});

//! The benchmark's database: created fresh, migrated and loaded through the engine's store API,
//! then read back for the figures. PostgreSQL for every scenario; a SQLite file (the store of
//! `mthpt standalone`) for those that say so ([`Backend`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use anyhow::{Context, bail};
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::run::{NewRun, TriggerKind};
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::{PgStore, SqliteStore, Store};
use mthpt_engine::task::{ScheduleColumns, Task, TaskDefinition};
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, PgConnection, PgPool, SqlitePool};

use super::Backend;
use super::figures::{Occurrence, RunFact};
use crate::Tenancy;

/// A fresh benchmark database: the store the harness loads it through, and the pool its figures
/// are read back with.
#[derive(Debug, Clone)]
pub struct BenchDb {
    pub store: Arc<dyn Store>,
    pub pool: Pool,
}

impl BenchDb {
    /// Creates the database `url` names on `backend` afresh and migrates it ([`fresh`],
    /// [`fresh_sqlite`]).
    pub async fn fresh(backend: Backend, url: &str) -> anyhow::Result<Self> {
        Ok(match backend {
            Backend::Postgres => {
                let pg = fresh(url).await?;
                Self {
                    pool: Pool::from(&pg),
                    store: Arc::new(pg),
                }
            }
            Backend::Sqlite => {
                let lite = fresh_sqlite(url).await?;
                Self {
                    pool: Pool::from(&lite),
                    store: Arc::new(lite),
                }
            }
        })
    }
}

/// The pool of the benchmark's store, for the figures the store API does not give: each such
/// query is one SQL text that both backends run (`$1` placeholders, `count(*)`, integer
/// columns), its `i64` parameters bound in order.
#[derive(Debug, Clone)]
pub enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

impl From<&PgStore> for Pool {
    fn from(store: &PgStore) -> Self {
        Pool::Postgres(store.pool().clone())
    }
}

impl From<&SqliteStore> for Pool {
    fn from(store: &SqliteStore) -> Self {
        Pool::Sqlite(store.pool().clone())
    }
}

/// `$query` with each of `$params` bound, in order (`$1`, `$2`, …).
macro_rules! bind_all {
    ($query:expr, $params:expr) => {{
        let mut query = $query;
        for p in $params {
            query = query.bind(*p);
        }
        query
    }};
}

/// A transaction on `pool` without the store's statement timeout, for the bench's reads: they
/// span a whole window of runs (a million and more at the rates `max-sustainable` reaches,
/// read while the engine still works off a backlog), where the timeout is meant for the
/// engine's own statements.
async fn untimed(pool: &PgPool) -> anyhow::Result<sqlx::Transaction<'static, sqlx::Postgres>> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL statement_timeout = 0")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

impl Pool {
    /// The one row of a `SELECT count(*) …` (on PostgreSQL without the statement timeout).
    pub async fn count(&self, sql: &'static str, params: &[i64]) -> anyhow::Result<u64> {
        let (n,): (i64,) = match self {
            Pool::Postgres(p) => {
                let mut tx = untimed(p).await?;
                let row = bind_all!(sqlx::query_as(sql), params)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                row
            }
            Pool::Sqlite(p) => bind_all!(sqlx::query_as(sql), params).fetch_one(p).await?,
        };
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The one nullable integer column of every row of `sql`.
    pub async fn optional_i64s(
        &self,
        sql: &'static str,
        params: &[i64],
    ) -> anyhow::Result<Vec<Option<i64>>> {
        let rows: Vec<(Option<i64>,)> = match self {
            Pool::Postgres(p) => bind_all!(sqlx::query_as(sql), params).fetch_all(p).await?,
            Pool::Sqlite(p) => bind_all!(sqlx::query_as(sql), params).fetch_all(p).await?,
        };
        Ok(rows.into_iter().map(|(v,)| v).collect())
    }

    /// Runs a statement; the rows it changed.
    pub async fn execute(&self, sql: &'static str, params: &[i64]) -> anyhow::Result<u64> {
        Ok(match self {
            Pool::Postgres(p) => bind_all!(sqlx::query(sql), params)
                .execute(p)
                .await?
                .rows_affected(),
            Pool::Sqlite(p) => bind_all!(sqlx::query(sql), params)
                .execute(p)
                .await?
                .rows_affected(),
        })
    }
}

/// Drops the database `url` names (if it exists), creates it empty and migrates it.
pub async fn fresh(url: &str) -> anyhow::Result<PgStore> {
    let options = PgConnectOptions::from_str(url).context("parse the database URL")?;
    let name = options
        .get_database()
        .context("the database URL names no database")?
        .to_owned();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        bail!("database name {name:?}: use lower-case letters, digits and _ only");
    }
    if name == "postgres" {
        bail!("the benchmark drops and recreates its database: name another one than postgres");
    }
    let mut admin = PgConnection::connect_with(&options.clone().database("postgres"))
        .await
        .context("connect to PostgreSQL (database postgres) to create the benchmark database")?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await?;
    admin.close().await?;
    let store = PgStore::connect_with(options, 8).await?;
    store.migrate().await?;
    Ok(store)
}

/// Deletes the SQLite file `url` names (with its `-wal` and `-shm` files), creates it empty and
/// migrates it, as `mthpt standalone` does with its own file.
pub async fn fresh_sqlite(url: &str) -> anyhow::Result<SqliteStore> {
    let file = sqlite_file(url)?;
    remove_sqlite(&file)?;
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let store = SqliteStore::connect(url).await?;
    store.migrate().await?;
    Ok(store)
}

/// The file a `sqlite:` URL names; an in-memory database is refused (the engine node is another
/// process and must open the same file).
fn sqlite_file(url: &str) -> anyhow::Result<PathBuf> {
    if !url.starts_with("sqlite:") {
        bail!(
            "{} is not a SQLite URL: use sqlite://path/to/file.db",
            mthpt_engine::store::redact_url(url)
        );
    }
    let options = SqliteConnectOptions::from_str(url).context("parse the SQLite URL")?;
    let file = options.get_filename();
    if file.as_os_str().is_empty() || file == Path::new(":memory:") {
        bail!("{url}: the benchmark needs a SQLite file that the engine process opens too");
    }
    Ok(file.to_path_buf())
}

/// Removes a SQLite database file and the `-wal`, `-shm` and `-journal` files beside it (those
/// missing are fine).
fn remove_sqlite(file: &Path) -> anyhow::Result<()> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        let path = PathBuf::from(name);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("remove {}", path.display())),
        }
    }
    Ok(())
}

/// Drops the database `url` names on `backend` (for SQLite: deletes the file).
pub async fn remove(backend: Backend, url: &str) -> anyhow::Result<()> {
    match backend {
        Backend::Postgres => drop_database(url).await,
        Backend::Sqlite => remove_sqlite(&sqlite_file(url)?),
    }
}

/// Drops the database `url` names.
pub async fn drop_database(url: &str) -> anyhow::Result<()> {
    let options = PgConnectOptions::from_str(url)?;
    let Some(name) = options.get_database().map(str::to_owned) else {
        return Ok(());
    };
    let mut admin = PgConnection::connect_with(&options.database("postgres")).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    Ok(())
}

/// A task to load.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPlan {
    pub name: String,
    pub handler: String,
    pub params: serde_json::Value,
    pub schedule: ScheduleSpec,
    pub timeout_ms: Option<i64>,
}

/// How many tasks one loading transaction writes.
const LOAD_CHUNK: usize = 2_000;
/// Loading transactions at once.
const LOAD_PARALLEL: usize = 4;

/// Creates the planned tasks, each with its first occurrence materialised (as creating a task
/// does), in batches.
pub async fn load(
    store: Arc<dyn Store>,
    tenancy: &Tenancy,
    plans: Vec<TaskPlan>,
) -> anyhow::Result<()> {
    let chunks: Vec<Vec<TaskPlan>> = plans.chunks(LOAD_CHUNK).map(<[_]>::to_vec).collect();
    let mut pending = chunks.into_iter();
    let mut running = tokio::task::JoinSet::new();
    loop {
        while running.len() < LOAD_PARALLEL {
            let Some(chunk) = pending.next() else { break };
            running.spawn(load_chunk(store.clone(), tenancy.clone(), chunk));
        }
        match running.join_next().await {
            Some(done) => done.context("loading task panicked")??,
            None => return Ok(()),
        }
    }
}

async fn load_chunk(
    store: Arc<dyn Store>,
    tenancy: Tenancy,
    plans: Vec<TaskPlan>,
) -> anyhow::Result<()> {
    let now = SystemClock.now_ms();
    let mut tx = store.begin().await?;
    let mut runs = Vec::with_capacity(plans.len());
    let mut counts = Vec::with_capacity(plans.len());
    for plan in plans {
        let mut def = TaskDefinition::new(tenancy.app.id, plan.name, plan.handler, plan.schedule);
        def.params = plan.params;
        def.timeout_ms = plan.timeout_ms;
        let schedule = def.validate(now)?;
        let cols = ScheduleColumns::from_schedule(&def.schedule, &schedule);
        let task = tx.insert_task(tenancy.tenant.id, &def, &cols, now).await?;
        if let Some(at) = task.first_occurrence(&schedule, now) {
            runs.push(NewRun::occurrence(
                &task,
                &tenancy.tenant.node_group,
                at,
                TriggerKind::Schedule,
            ));
            counts.push((task.id, 1));
        }
    }
    tx.insert_runs(&runs, now).await?;
    tx.add_fires_scheduled_many(&counts).await?;
    tx.commit().await?;
    Ok(())
}

/// Every task of the database.
pub async fn tasks(store: &PgStore) -> anyhow::Result<Vec<Task>> {
    Ok(sqlx::query_as("SELECT * FROM tasks ORDER BY id")
        .fetch_all(store.pool())
        .await?)
}

/// The occurrences the tasks' schedules call for in `[from, until)`; a task created inside the
/// range counts from its creation (as its first occurrence is chosen then).
pub fn expected_occurrences(tasks: &[Task], from: i64, until: i64) -> HashSet<Occurrence> {
    let mut out = HashSet::new();
    for task in tasks {
        let Ok(schedule) = task.schedule() else {
            continue;
        };
        let mut at = from.max(task.created_at) - 1;
        while let Some(next) = task.next_occurrence(&schedule, at) {
            if next >= until {
                break;
            }
            out.insert((task.id.0, next));
            at = next;
        }
    }
    out
}

/// The runs scheduled in `[from, until)`.
pub async fn runs_scheduled(
    store: &PgStore,
    from: i64,
    until: i64,
) -> anyhow::Result<Vec<RunFact>> {
    let mut tx = untimed(store.pool()).await?;
    let runs = sqlx::query_as(
        "SELECT task_id, scheduled_at, attempt, shard_index, trigger_kind, state, dispatched_at
         FROM runs WHERE scheduled_at >= $1 AND scheduled_at < $2",
    )
    .bind(from)
    .bind(until)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(runs)
}

/// Runs that succeeded with their result recorded in `[from, until)`.
pub async fn succeeded_between(pool: &Pool, from: i64, until: i64) -> anyhow::Result<u64> {
    pool.count(
        "SELECT count(*) FROM runs WHERE state = 'succeeded' AND finished_at >= $1 AND finished_at < $2",
        &[from, until],
    )
    .await
}

/// Runs scheduled in `[from, until)` that are not final yet.
pub async fn unfinished(store: &PgStore, from: i64, until: i64) -> anyhow::Result<u64> {
    Pool::from(store)
        .count(
            "SELECT count(*) FROM runs WHERE scheduled_at >= $1 AND scheduled_at < $2
               AND state IN ('pending', 'claimed', 'running') AND finished_at IS NULL",
            &[from, until],
        )
        .await
}

/// The runs `node` holds claimed (not yet dispatched): id and scheduled time.
pub async fn claimed_by(store: &PgStore, node: &str) -> anyhow::Result<Vec<(i64, i64)>> {
    Ok(sqlx::query_as(
        "SELECT id, scheduled_at FROM runs WHERE state = 'claimed' AND claim_owner = $1 ORDER BY id",
    )
    .bind(node)
    .fetch_all(store.pool())
    .await?)
}

/// Each of `ids`: when it was (last) dispatched, if it was, and whether it is final.
pub async fn dispatch_times(
    store: &PgStore,
    ids: &[i64],
) -> anyhow::Result<HashMap<i64, (Option<i64>, bool)>> {
    let rows: Vec<(i64, Option<i64>, String)> =
        sqlx::query_as("SELECT id, dispatched_at, state FROM runs WHERE id = ANY($1)")
            .bind(ids)
            .fetch_all(store.pool())
            .await?;
    Ok(rows
        .into_iter()
        .map(|(id, at, state)| {
            let done = !matches!(state.as_str(), "pending" | "claimed" | "running");
            (id, (at, done))
        })
        .collect())
}

//! The SQLite backend: the embedded store of `mthpt standalone`. SQLite has one writer at a time,
//! so every transaction that may write starts with `BEGIN IMMEDIATE` (it takes the write lock up
//! front and waits for it, instead of failing when a reader later tries to write); row-locking
//! clauses are therefore unnecessary and lists travel as JSON arrays.

pub(super) mod alarms;
pub(super) mod apps;
pub(super) mod backlogs;
pub(super) mod runs;
pub(super) mod tasks;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tokio::sync::broadcast;

use super::tx::StoreTx;
use super::{
    Backend, DueListener, MigrationReport, Result, Store, StoreError, Tx, apply_migrations,
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
        Ok(Box::new(StoreTx::sqlite(
            self.pool.begin_with("BEGIN IMMEDIATE").await?,
            self.due.clone(),
        )))
    }

    async fn begin_read(&self) -> Result<Box<dyn Tx>> {
        Ok(Box::new(StoreTx::sqlite(
            self.pool.begin().await?,
            self.due.clone(),
        )))
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

/// Ids as a JSON array parameter, read with `json_each`.
fn json_ids<T: Copy>(ids: &[T], f: impl Fn(T) -> i64) -> String {
    serde_json::Value::from(ids.iter().map(|&id| f(id)).collect::<Vec<i64>>()).to_string()
}

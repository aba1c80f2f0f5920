//! The one transaction type of both backends, [`StoreTx`], and what every operation file uses
//! to write its SQL once for both: [`on_conn!`] (one statement, type-checked against each
//! backend), [`Locking`] (a statement that locks rows on PostgreSQL only) and the mapping of
//! database errors to [`StoreError`]s.
//!
//! A shared operation is ordinary Rust in its noun's file (`tenants.rs`, `runs.rs`, …):
//!
//! ```ignore
//! let row = on_conn!(self, |c| sqlx::query_as("SELECT * FROM tenants WHERE id = $1")
//!     .bind(id)
//!     .fetch_optional(&mut **c)
//!     .await)?;
//! ```
//!
//! An operation whose SQL differs between the dialects (arrays against JSON lists, batch
//! statements against loops, claiming with `SKIP LOCKED`) is a function of the same name in
//! `pg/<noun>.rs` and `sqlite/<noun>.rs`, which the noun's `impl` calls by one `match` on
//! [`StoreTx::conn`].

use sqlx::error::ErrorKind;
use sqlx::{Postgres, Sqlite, Transaction};
use tokio::sync::broadcast;

use super::{DUE_CHANNEL, Result, StoreError};

/// A transaction on either backend; every operation trait of [`Tx`](super::Tx) is implemented
/// for it, one file per noun.
#[derive(Debug)]
pub struct StoreTx {
    pub(super) conn: Conn,
    /// SQLite's due signals (it has no `NOTIFY`): sent within this process once committed.
    local_due: Option<LocalDue>,
}

/// The backend's transaction.
#[derive(Debug)]
pub(super) enum Conn {
    Postgres(Transaction<'static, Postgres>),
    Sqlite(Transaction<'static, Sqlite>),
}

/// Due signals of a SQLite transaction, delivered when it commits.
#[derive(Debug)]
struct LocalDue {
    sender: broadcast::Sender<String>,
    groups: Vec<String>,
}

impl StoreTx {
    /// A PostgreSQL transaction.
    pub(super) fn postgres(tx: Transaction<'static, Postgres>) -> Self {
        Self {
            conn: Conn::Postgres(tx),
            local_due: None,
        }
    }

    /// A SQLite transaction whose due signals go to `due` once committed.
    pub(super) fn sqlite(tx: Transaction<'static, Sqlite>, due: broadcast::Sender<String>) -> Self {
        Self {
            conn: Conn::Sqlite(tx),
            local_due: Some(LocalDue {
                sender: due,
                groups: Vec::new(),
            }),
        }
    }
}

/// Evaluates `$body` with `$c` bound to the transaction of `$tx`'s backend (a
/// `&mut Transaction<'static, Postgres>` or `&mut Transaction<'static, Sqlite>`): the same
/// statement, written once, is type-checked against each backend. Keep `$body` to one statement
/// (`sqlx::query…(…).bind(…).fetch_…(&mut **c).await`); what follows it (`?`, error mapping)
/// goes outside.
macro_rules! on_conn {
    ($tx:expr, |$c:ident| $body:expr) => {
        match &mut $tx.conn {
            $crate::store::tx::Conn::Postgres($c) => $body,
            $crate::store::tx::Conn::Sqlite($c) => $body,
        }
    };
}
pub(super) use on_conn;

/// A statement that locks the rows it reads on PostgreSQL (`FOR UPDATE`, `FOR UPDATE SKIP
/// LOCKED`) and is the same without the lock clause on SQLite, which has one writer at a time.
/// Both texts are written out, so each backend's prepared statement is one fixed string.
pub(super) struct Locking {
    pub(super) postgres: &'static str,
    pub(super) sqlite: &'static str,
}

/// Picks a backend's text of a [`Locking`] statement inside [`on_conn!`]: `c.sql(&STATEMENT)`.
pub(super) trait Dialect {
    fn sql(&self, statement: &Locking) -> &'static str;
}

impl Dialect for Transaction<'static, Postgres> {
    fn sql(&self, statement: &Locking) -> &'static str {
        statement.postgres
    }
}

impl Dialect for Transaction<'static, Sqlite> {
    fn sql(&self, statement: &Locking) -> &'static str {
        statement.sqlite
    }
}

#[async_trait::async_trait]
impl super::Tx for StoreTx {
    async fn commit(self: Box<Self>) -> Result<()> {
        let StoreTx { conn, local_due } = *self;
        match conn {
            Conn::Postgres(tx) => tx.commit().await?,
            Conn::Sqlite(tx) => tx.commit().await?,
        }
        if let Some(LocalDue { sender, groups }) = local_due {
            for group in groups {
                // Nobody listening is fine.
                let _ = sender.send(group);
            }
        }
        Ok(())
    }

    async fn notify_due(&mut self, group: &str) -> Result<()> {
        match (&mut self.conn, &mut self.local_due) {
            (Conn::Postgres(c), _) => {
                // Delivered when (and only if) the transaction commits.
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(DUE_CHANNEL)
                    .bind(group)
                    .execute(&mut **c)
                    .await?;
            }
            (Conn::Sqlite(_), Some(due)) => {
                if !due.groups.iter().any(|g| g == group) {
                    due.groups.push(group.to_owned());
                }
            }
            (Conn::Sqlite(_), None) => {}
        }
        Ok(())
    }
}

/// Maps a unique-constraint violation to [`StoreError::Duplicate`] with `msg`.
pub(super) fn unique_or(e: sqlx::Error, msg: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::UniqueViolation) => {
            StoreError::Duplicate(msg())
        }
        _ => StoreError::from(e),
    }
}

/// Maps a foreign-key violation to [`StoreError::NotFound`] with `what`.
pub(super) fn fk_or(e: sqlx::Error, what: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::ForeignKeyViolation) => {
            StoreError::NotFound(what())
        }
        _ => StoreError::from(e),
    }
}

/// The message of SQLite's trigger that refuses a run without an app (migration 0021).
const RUN_APP_REQUIRED: &str = "run_app_required";

/// Maps a foreign-key violation, or a not-null violation (a referenced row read by a subquery
/// that found none: a run's app, read from its task within its tenant; on SQLite the trigger
/// [`RUN_APP_REQUIRED`]), to [`StoreError::NotFound`] with `what`.
pub(super) fn reference_or(e: sqlx::Error, what: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db)
            if matches!(
                db.kind(),
                ErrorKind::ForeignKeyViolation | ErrorKind::NotNullViolation
            ) || db.message().starts_with(RUN_APP_REQUIRED) =>
        {
            StoreError::NotFound(what())
        }
        _ => StoreError::from(e),
    }
}

/// Maps a check-constraint violation to [`StoreError::InvalidState`] with `msg`.
pub(super) fn check_or(e: sqlx::Error, msg: impl FnOnce() -> String) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::CheckViolation) => {
            StoreError::InvalidState(msg())
        }
        _ => StoreError::from(e),
    }
}

/// `Some(x)` or [`StoreError::NotFound`] naming `what`.
pub(super) fn found<T>(row: Option<T>, what: impl FnOnce() -> String) -> Result<T> {
    row.ok_or_else(|| StoreError::NotFound(what()))
}

/// Whether `e` is a foreign-key violation.
pub(super) fn is_fk(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if matches!(db.kind(), ErrorKind::ForeignKeyViolation))
}

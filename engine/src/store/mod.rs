//! The store seam: one [`Store`] trait with a PostgreSQL ([`PgStore`]) and a SQLite
//! ([`SqliteStore`]) backend.
//!
//! All work happens in a transaction ([`Tx`]): begin, call operations, commit; dropping a `Tx`
//! without committing rolls it back. A state change, the runs it causes and the alarms it raises
//! therefore commit together. Operations that compose several steps (create a task and
//! materialise its first occurrence, add a dependency without closing a cycle, …) are written
//! once over the primitives, in [`ops`], and work on both backends.
//!
//! Rules every operation keeps:
//! - tenant-facing operations take the tenant as a required argument and never see or change
//!   another tenant's rows (a foreign id is simply "not found");
//! - time is an argument (`now`, epoch milliseconds from the engine's [`Clock`](crate::clock::Clock)),
//!   never the database's clock;
//! - dialect differences (row locking, arrays) stay inside the store, in the `pg/` and
//!   `sqlite/` files below.
//!
//! [`Tx`] is the union of one trait per noun; each noun's file declares its trait and
//! implements it, as ordinary Rust, for `StoreTx`, the one transaction type of
//! both backends. A statement written once is type-checked against each backend by
//! `on_conn!`; a statement that locks rows on PostgreSQL only is a
//! `Locking` pair. Callers hold a `Box<dyn Tx>` and call any operation on it
//! without importing the noun traits.
//!
//! Where things live (files of `engine/src/store/`):
//!
//! | File | What it holds |
//! |---|---|
//! | `mod.rs` | the seam: [`Store`], [`Tx`] (the union of the traits below), [`StoreError`], request and result types |
//! | `tx.rs` | `StoreTx` (either backend's transaction), `on_conn!`, `Locking`, commit and due signals, error mapping |
//! | `tenants.rs` | [`Tenants`]: tenants, their quotas and usage counts |
//! | `users.rs` | [`Users`]: users and API tokens |
//! | `sessions.rs` | [`Sessions`]: console sessions and sign-in attempts |
//! | `apps.rs` | [`Apps`]: apps and executor instances |
//! | `tasks.rs` | [`Tasks`]: tasks and dependencies |
//! | `runs.rs` | [`Runs`]: inserting, claiming, reading, fenced transitions, results, progress, cancel requests, watchdog queries |
//! | `claims.rs` | how a claim shares capacity out: the apps a claim reads ([`ClaimApp`]), their windows ([`claim_windows`]) and turns |
//! | `completion.rs` | the checks a result passes and the plan of a batch of results |
//! | `backlogs.rs` | [`Backlogs`]: episodes of an app's due runs waiting for capacity (the watchdog's `backlog` alarm) |
//! | `alarms.rs` | [`Alarms`]: alarms (the outbox) |
//! | `nodes.rs` | [`Nodes`]: engine nodes |
//! | `audit.rs` | [`Audit`]: the audit trail |
//! | `views.rs` | [`Views`]: console views: statistics samples, occurrence runs, idempotency keys, alarm mutes |
//! | `channels.rs` | [`Channels`]: notification channels, their deliveries, metrics aggregates |
//! | `rollups.rs` | [`Rollups`]: per-minute rollups of finished runs, their watermark, retention deletes |
//! | `pg/mod.rs`, `sqlite/mod.rs` | [`PgStore`], [`SqliteStore`]: connecting, migrating, beginning transactions, due listeners |
//! | `pg/<noun>.rs`, `sqlite/<noun>.rs` | the operations of a noun whose SQL differs between the dialects (arrays against JSON lists, batch statements against loops, claiming with `SKIP LOCKED`): one function of the same name in each |
//! | `ops.rs` | operations composed of several primitives, written once for both backends |
//! | `reports.rs` | the types of the console views' operations |
//!
//! Where a new query goes: its noun's file, as a method of that noun's trait (declaration and
//! implementation side by side). When its SQL is the same on both backends (`$N` placeholders
//! work on both), that is the only file. When it differs, the method matches on
//! `self.conn` and calls a function of the method's name in `pg/<noun>.rs` and in
//! `sqlite/<noun>.rs`. A new noun is a new file with its trait, added to [`Tx`]'s list. The
//! conformance suite (`engine/tests/store/conformance/`, one file per noun, part of the `store`
//! test binary) runs every case on both backends.

mod alarms;
mod apps;
mod audit;
mod backlogs;
mod channels;
mod claims;
mod completion;
mod nodes;
mod ops;
mod pg;
mod reports;
mod rollups;
mod runs;
mod sessions;
mod sqlite;
mod tasks;
mod tenants;
mod tx;
mod users;
mod views;

use std::fmt;

use async_trait::async_trait;

pub use self::alarms::Alarms;
pub use self::apps::Apps;
pub use self::audit::Audit;
pub use self::backlogs::{Backlogs, CapacityBacklog, QuotaHold};
pub use self::channels::{Channels, MetricsSnapshot};
pub use self::claims::{ClaimApp, ClaimWindow, claim_windows};
pub use self::nodes::Nodes;
pub use self::ops::CreatedTask;
pub use self::pg::PgStore;
pub use self::reports::{
    AlarmMute, MAX_RUN_SAMPLES, RunRollup, RunSample, RunSampleQuery, SampleCursor,
    TRIGGER_KEY_WINDOW_MS, TriggerKey,
};
pub use self::rollups::{ExpiredRuns, Rollups};
pub use self::runs::Runs;
pub use self::sessions::Sessions;
pub use self::sqlite::SqliteStore;
pub use self::tasks::Tasks;
pub use self::tenants::Tenants;
pub use self::users::Users;
pub use self::views::Views;
use crate::app::ExecutorId;
use crate::run::{Fence, Run, RunId};
use crate::task::TaskId;
use crate::tenant::TenantId;
use crate::validate::FieldError;

/// The result type of store operations.
pub type Result<T = ()> = std::result::Result<T, StoreError>;

/// What can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The thing does not exist (or belongs to another tenant).
    #[error("{0} not found")]
    NotFound(String),
    /// Optimistic locking: the row was changed since the caller read it; nothing was written.
    #[error(
        "{what} was changed by someone else (you had version {expected}, it is now at version {actual}); reload and try again"
    )]
    Conflict {
        what: String,
        expected: i64,
        actual: i64,
    },
    /// A unique name or key is already taken.
    #[error("{0}")]
    Duplicate(String),
    /// The change would close a cycle of task dependencies.
    #[error("dependency cycle: {0}")]
    Cycle(String),
    /// The caller no longer holds the run's claim (lease expired or another node claimed it).
    #[error("run {run_id} is no longer held by {node} with fencing token {token}")]
    Fenced {
        run_id: RunId,
        node: String,
        token: i64,
    },
    /// The change is not allowed in the current state (e.g. cancelling a finished run).
    #[error("{0}")]
    InvalidState(String),
    /// An input field is wrong.
    #[error("invalid input: {0}")]
    Invalid(#[from] FieldError),
    /// A stored row could not be understood.
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    /// The database cannot be reached.
    #[error("{0}")]
    Unavailable(String),
    /// The database refused the statement.
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    /// Applying migrations failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(e.to_string())
            }
            _ => StoreError::Database(e),
        }
    }
}

impl StoreError {
    /// Whether the transaction failed because a run it read or locked moved from the live runs
    /// to the history meanwhile (PostgreSQL: a serialisation failure, 40001; the runs table is
    /// partitioned into the two, and a row that moves is not re-read by a statement that met
    /// it). The same transaction tried again reads the run where it is now.
    pub fn is_moved_run(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::Database(db))
            if db.code().as_deref() == Some("40001"))
    }

    /// Whether retrying the same transaction may succeed (serialisation failure, deadlock,
    /// a lock or statement timeout, a session ended for idling in its transaction, SQLite
    /// busy, lost connection), also against another server: what a PostgreSQL failover
    /// produces (a server that is read-only now, shutting down, starting up, or gone) passes
    /// once the store follows the new primary.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(db)) => {
                let code = db.code();
                let code = code.as_deref().unwrap_or_default();
                // Class 08: connection exception.
                code.starts_with("08")
                    || matches!(
                        code,
                        "40001" | "40P01" | "55P03" | "57014" | "25P03" | "5" | "6" | "517"
                        // read_only_sql_transaction, admin/crash shutdown, cannot connect now
                        | "25006" | "57P01" | "57P02" | "57P03"
                    )
            }
            StoreError::Database(
                sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed,
            ) => true,
            _ => false,
        }
    }
}

/// Which backend a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Postgres => "postgresql",
            Backend::Sqlite => "sqlite",
        })
    }
}

/// Opens the store a URL names: `postgres://…`/`postgresql://…` or `sqlite://…`/`sqlite:…`.
pub async fn connect(url: &str) -> Result<Box<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Box::new(PgStore::connect(url).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Box::new(SqliteStore::connect(url).await?))
    } else {
        Err(StoreError::Invalid(FieldError::new(
            "database_url",
            format!(
                "{:?} is not a database URL: use postgres://user@host:port/db or sqlite://path/to/file.db",
                redact_url(url)
            ),
        )))
    }
}

/// A URL with any password replaced by `***`, for messages and logs: the one after the user
/// name (whatever the host list holds) and a `password=` parameter.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (main, query) = rest.split_at(rest.find('?').unwrap_or(rest.len()));
    // The last `@` ends the user information, even if the password holds an unencoded `/`.
    let main = match main.rfind('@') {
        Some(at) => match main[..at].split_once(':') {
            Some((user, _)) => format!("{user}:***{}", &main[at..]),
            None => main.to_owned(),
        },
        None => main.to_owned(),
    };
    let query: Vec<&str> = query
        .split('&')
        .map(|pair| {
            let key = pair
                .trim_start_matches('?')
                .split('=')
                .next()
                .unwrap_or_default();
            match key {
                "password" if pair.starts_with('?') => "?password=***",
                "password" => "password=***",
                _ => pair,
            }
        })
        .collect();
    format!("{scheme}://{main}{}", query.join("&"))
}

/// Which rows a cross-tenant capable listing covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One tenant's rows.
    Tenant(TenantId),
    /// Every row, including cluster-level ones (operators only).
    Cluster,
}

impl Scope {
    fn tenant(self) -> Option<TenantId> {
        match self {
            Scope::Tenant(t) => Some(t),
            Scope::Cluster => None,
        }
    }
}

/// A node asking for due runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// The claiming node.
    pub node: String,
    /// The node groups it serves.
    pub groups: Vec<String>,
    pub now: i64,
    /// Claim runs due up to `now + horizon_ms` (the look-ahead window).
    pub horizon_ms: i64,
    /// How long the claim holds without renewal.
    pub lease_ms: i64,
    /// At most this many runs.
    pub limit: i64,
}

/// What `complete_run` did.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// The run was not final; it is now.
    Applied(Run),
    /// The run was already final; nothing changed (a repeated or late result).
    AlreadyFinal(Run),
}

/// What a late success did to a run the engine had ended without its result.
#[derive(Debug, Clone, PartialEq)]
pub enum Revival {
    /// The success takes the run's place: its retry or recovery had not started and was
    /// withdrawn; the run is `succeeded` and what follows a success (chain children) follows.
    Revived(Run),
    /// The retry or recovery had started (or there was none): the success is recorded on the run
    /// (`succeeded`, with its output). The occurrence's chain follows it once the later attempts
    /// have all ended without success (see `outcome::finish_runs`); nothing else follows.
    Recorded(Run),
    /// Not a late success this rule covers: the run stays as it is.
    Refused,
}

/// A change to a user; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserUpdate {
    pub password_hash: Option<String>,
    pub role: Option<crate::tenant::Role>,
    pub disabled: Option<bool>,
}

/// Opens transactions on a database.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// Which backend this is.
    fn backend(&self) -> Backend;

    /// Applies the migrations that are not applied yet.
    async fn migrate(&self) -> Result<MigrationReport>;

    /// Begins a transaction that may write (on SQLite it takes the write lock at once).
    async fn begin(&self) -> Result<Box<dyn Tx>>;

    /// Begins a transaction that only reads.
    async fn begin_read(&self) -> Result<Box<dyn Tx>>;

    /// Listens for [`Tx::notify_due`] signals of committed transactions (from any process on
    /// PostgreSQL; from this process on SQLite).
    async fn listen_due(&self) -> Result<Box<dyn DueListener>>;

    /// What about the database server works against the engine, one sentence each (logged at
    /// start-up); empty when nothing does.
    async fn server_warnings(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// Reclaims the dead row versions of the live runs and renews their statistics
    /// (PostgreSQL: `VACUUM (ANALYZE) live_runs`, skipped while another session vacuums it;
    /// nothing on SQLite, whose runs table is one). Each claim and start leaves a dead version
    /// and each result moves its run out; the table stays a few pages, and the claim's index
    /// free of dead entries, only if they go every few seconds — sooner than autovacuum's
    /// thresholds would take them ([`crate::vacuum`]). The statistics matter as much: a table
    /// whose contents turn over every few seconds is planned from what the last ANALYZE saw,
    /// and one planned as empty is scanned whole for every run a statement joins to it.
    async fn vacuum_live_runs(&self) -> Result<()> {
        Ok(())
    }

    /// Closes the connection pool.
    async fn close(&self);
}

/// Receives due signals: the node groups that have new runs due soon.
#[async_trait]
pub trait DueListener: Send + fmt::Debug {
    /// The next signalled node group. Signals may be lost (e.g. while reconnecting); nodes poll
    /// anyway, a signal only wakes them sooner.
    async fn recv(&mut self) -> Result<String>;
}

/// Runs inserted due within this many milliseconds are signalled to the nodes (later ones are
/// found by polling well before they are due).
pub const DUE_SOON_MS: i64 = 5_000;

/// The channel due signals travel on (PostgreSQL `LISTEN`/`NOTIFY`).
pub const DUE_CHANNEL: &str = "mthpt_due";

/// A claimed run accepted by an executor, for [`Runs::start_claimed_runs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartClaimed {
    pub fence: Fence,
    pub executor_id: ExecutorId,
    pub dispatched_at: i64,
    pub deadline_at: Option<i64>,
}

/// A run [`Runs::start_claimed_runs`] recorded as sent to its executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct StartedRun {
    pub id: RunId,
    /// Whether it is running now; `false` when its result came first and it is final.
    pub running: bool,
}

/// One transaction. Every operation runs inside it; [`Tx::commit`] makes them durable together.
/// The operations are grouped by noun, one trait per file (see the map above); their methods
/// are callable on a `dyn Tx` without importing the traits.
#[async_trait]
pub trait Tx:
    Tenants
    + Users
    + Sessions
    + Apps
    + Tasks
    + Runs
    + Backlogs
    + Alarms
    + Nodes
    + Audit
    + Views
    + Channels
    + Rollups
    + Send
{
    /// Makes every change of this transaction durable (and delivers its due signals).
    async fn commit(self: Box<Self>) -> Result<()>;

    /// Signals, when this transaction commits, that `group` has new runs due soon (a manual
    /// trigger, a retry, a chain child), so nodes claim them before their next poll.
    async fn notify_due(&mut self, group: &str) -> Result<()>;
}

/// What `migrate` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// The migrations applied by this call (version, description).
    pub applied: Vec<(i64, String)>,
    /// The schema version now.
    pub version: i64,
}

/// Applies `migrator` through `pool`, reporting what was new.
async fn apply_migrations<DB>(
    migrator: &sqlx::migrate::Migrator,
    pool: &sqlx::Pool<DB>,
) -> Result<MigrationReport>
where
    DB: sqlx::Database,
    DB::Connection: sqlx::migrate::Migrate,
{
    use sqlx::migrate::Migrate;
    let before: std::collections::HashSet<i64> = {
        let mut conn = pool.acquire().await?;
        conn.ensure_migrations_table(&migrator.table_name).await?;
        conn.list_applied_migrations(&migrator.table_name)
            .await?
            .into_iter()
            .map(|m| m.version)
            .collect()
    };
    migrator.run(pool).await?;
    let applied = migrator
        .iter()
        .filter(|m| m.migration_type.is_up_migration() && !before.contains(&m.version))
        .map(|m| (m.version, m.description.to_string()))
        .collect();
    let version = migrator.iter().map(|m| m.version).max().unwrap_or(0);
    Ok(MigrationReport { applied, version })
}

/// Sums `counts` per task, in task id order (the order rows are locked in, so concurrent
/// writers never wait on each other in a cycle).
pub(crate) fn sum_per_task(counts: &[(TaskId, i64)]) -> Vec<(TaskId, i64)> {
    let mut sums: std::collections::BTreeMap<TaskId, i64> = std::collections::BTreeMap::new();
    for &(task, n) in counts {
        *sums.entry(task).or_default() += n;
    }
    sums.into_iter().collect()
}

/// Clamps a listing limit to 1..=1000 (default 100).
pub(crate) fn page_limit(limit: Option<i64>) -> i64 {
    limit.unwrap_or(100).clamp(1, 1000)
}

/// Escapes `%`, `_` and `\` for a `LIKE … ESCAPE '\'` pattern.
pub(crate) fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/mthpt"),
            "postgres://app:***@db:5432/mthpt"
        );
        assert_eq!(redact_url("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(
            redact_url("postgres://app:s3cret@h1:5432,[::1]:5433/mthpt?target_session_attrs=any"),
            "postgres://app:***@h1:5432,[::1]:5433/mthpt?target_session_attrs=any"
        );
        assert_eq!(
            redact_url("postgres://app:s3/cr@et@db/x"),
            "postgres://app:***@db/x"
        );
        assert_eq!(
            redact_url("postgres://app@db/x?password=s3cret&sslmode=disable"),
            "postgres://app@db/x?password=***&sslmode=disable"
        );
        assert_eq!(
            redact_url("postgres://app@db/x?sslmode=disable&password=s3cret"),
            "postgres://app@db/x?sslmode=disable&password=***"
        );
        assert_eq!(redact_url("sqlite://a.db"), "sqlite://a.db");
    }

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(like_escape("50%_a\\b"), "50\\%\\_a\\\\b");
    }
}

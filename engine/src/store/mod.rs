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
//! - dialect differences (row locking, arrays) stay inside the backends.
//!
//! Where things live (files of `engine/src/store/`):
//!
//! | File | What it holds |
//! |---|---|
//! | `mod.rs` | the seam: [`Store`], [`Tx`] (one section per domain), [`StoreError`], request and result types |
//! | `postgres.rs`, `sqlite.rs` | connecting, migrating, transactions, and each backend's own SQL (arrays, batch writes, claiming with row locks) |
//! | `shared/mod.rs` | `tx_impl!`, which writes each backend's `impl Tx` from its own SQL and the shared files below; error mapping |
//! | `shared/tenants.rs` | tenants |
//! | `shared/users.rs` | users and API tokens |
//! | `shared/apps.rs` | apps and executor instances |
//! | `shared/tasks.rs` | tasks and dependencies |
//! | `shared/runs.rs` | runs: inserting, reading, fenced transitions, results, progress, watchdog queries |
//! | `shared/completion.rs` | the checks a result passes and the plan of a batch of results |
//! | `shared/alarms.rs` | alarms (the outbox) |
//! | `shared/nodes.rs` | engine nodes |
//! | `shared/audit.rs` | the audit trail |
//! | `shared/views.rs` | console views: statistics samples, occurrence runs, idempotency keys, alarm mutes |
//! | `shared/sessions.rs` | console sessions and sign-in attempts |
//! | `shared/channels.rs` | notification channels, their deliveries, metrics aggregates |
//! | `shared/rollups.rs` | per-minute rollups of finished runs, their watermark, retention deletes |
//! | `ops.rs` | operations composed of several primitives, written once for both backends |
//! | `reports.rs` | the types of the console views' operations |
//!
//! Each `shared/` file holds the operations whose SQL is the same on both backends and names the
//! ones of its domain that each backend writes itself. The conformance suite
//! (`engine/tests/store_conformance.rs`, cases in `engine/tests/conformance/`) runs every case
//! on both backends.

mod ops;
mod postgres;
mod reports;
mod shared;
mod sqlite;

use std::fmt;

use async_trait::async_trait;

pub use self::ops::CreatedTask;
pub use self::postgres::PgStore;
pub use self::reports::{
    AlarmMute, MAX_RUN_SAMPLES, RunRollup, RunSample, RunSampleQuery, SampleCursor,
    TRIGGER_KEY_WINDOW_MS, TriggerKey,
};
pub use self::sqlite::SqliteStore;
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
};
use crate::task::{
    Dependency, DependencyCondition, ScheduleColumns, Task, TaskDefinition, TaskFilter, TaskId,
};
use crate::tenant::{
    ApiToken, ApiTokenId, NewApiToken, NewTenant, NewUser, Tenant, TenantId, TenantUpdate, User,
    UserId,
};
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
    /// Whether retrying the same transaction may succeed (serialisation failure, deadlock,
    /// a lock or statement timeout, a session ended for idling in its transaction, SQLite
    /// busy, lost connection).
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(db)) => {
                matches!(
                    db.code().as_deref(),
                    Some("40001" | "40P01" | "55P03" | "57014" | "25P03" | "5" | "6" | "517")
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

/// A URL with any password replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
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

/// An app of a claiming node's groups as a claim sees it: whose tenant it is and how much its
/// executors can take (read in one small statement at the start of every claim).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ClaimApp {
    /// The group its runs wait in (an app whose runs wait in two of the node's groups, as
    /// while its tenant moves, is read once per group).
    pub node_group: String,
    pub app_id: AppId,
    pub tenant_id: TenantId,
    /// The tenant's claim weight (at least 1).
    pub weight: i32,
    /// Executor instances up or draining. None: the app's capacity is unknown (no instance
    /// registered, or all lost), and its runs are claimed as before capacity was known — the
    /// dispatch finds no executor and releases them, and `not_started` is raised after the
    /// task's start timeout.
    pub live: i64,
    /// The capacity of the instances that are up (a draining one takes nothing new).
    pub capacity: i64,
    /// Runs of the app started and not finished.
    pub running: i64,
}

/// How much of one app's due runs a claim reads, and how its runs take turns with the other
/// apps' (see [`claim_windows`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimWindow {
    pub node_group: String,
    pub app_id: AppId,
    /// The app's first this many claimable runs in due order, claimed ones included: those
    /// with a live lease are in flight and count against the window; the others may be
    /// claimed. Never more than the app's free capacity (when known).
    pub window: i64,
    /// Whether claimed runs with a live lease fill the window (the app's capacity is known);
    /// when it is not, the window counts claimable runs only, as claims did before capacity.
    pub in_flight_counts: bool,
    /// The app's n-th claimable run takes its turn at `n * step`: `step` is the number of the
    /// tenant's apps over the tenant's weight, so each tenant gets a share of a claim in
    /// proportion to its weight, split evenly among its apps.
    pub step: f64,
}

/// The windows of a claim over `apps` for a claim of at most `limit` runs. Apps whose
/// executors are known and have no free capacity get none: their runs are not read at all.
pub fn claim_windows(apps: &[ClaimApp], limit: i64) -> Vec<ClaimWindow> {
    let limit = limit.max(1);
    let open: Vec<(&ClaimApp, i64, bool)> = apps
        .iter()
        .filter_map(|a| {
            if a.live == 0 {
                return Some((a, limit, false));
            }
            // In flight beyond the window cannot be seen, so the window stays small: twice
            // the claim, at most the free capacity.
            let free = a.capacity.saturating_sub(a.running);
            (free > 0).then_some((a, free.min(limit.saturating_mul(2)), true))
        })
        .collect();
    let mut per_tenant: std::collections::HashMap<TenantId, usize> =
        std::collections::HashMap::new();
    for (a, _, _) in &open {
        *per_tenant.entry(a.tenant_id).or_default() += 1;
    }
    open.into_iter()
        .map(|(a, window, in_flight_counts)| ClaimWindow {
            node_group: a.node_group.clone(),
            app_id: a.app_id,
            window,
            in_flight_counts,
            step: per_tenant.get(&a.tenant_id).copied().unwrap_or(1) as f64
                / f64::from(a.weight.max(1)),
        })
        .collect()
}

/// A run a claim read (SQLite, which ranks in Rust what PostgreSQL ranks in SQL).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct ClaimCandidate {
    pub id: i64,
    pub due_at: i64,
    pub priority: i32,
    pub state: String,
    pub lease_until: Option<i64>,
}

/// The runs to claim of each window's candidates (read in due order): the claimable ones
/// (pending, or claimed with a lease ended by `now`), the n-th of an app at turn `n * step`,
/// the earliest turns first (then due order), at most `limit`.
pub(crate) fn pick_claims(
    fronts: &[(&ClaimWindow, Vec<ClaimCandidate>)],
    now: i64,
    limit: i64,
) -> Vec<i64> {
    let mut turns: Vec<(f64, i64, i32, i64)> = Vec::new();
    for (w, candidates) in fronts {
        let claimable = candidates.iter().filter(|c| {
            c.state == "pending"
                || (c.state == "claimed" && c.lease_until.is_some_and(|l| l <= now))
        });
        for (n, c) in claimable.enumerate() {
            turns.push(((n + 1) as f64 * w.step, c.due_at, c.priority, c.id));
        }
    }
    turns.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then(a.1.cmp(&b.1))
            .then(b.2.cmp(&a.2))
            .then(a.3.cmp(&b.3))
    });
    turns
        .into_iter()
        .take(usize::try_from(limit).unwrap_or(0))
        .map(|t| t.3)
        .collect()
}

/// An app with due runs waiting for capacity, or with a backlog episode still open
/// ([`Tx::capacity_backlogs`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CapacityBacklog {
    pub app_id: AppId,
    pub tenant_id: TenantId,
    /// Pending runs due before the threshold (counted up to the limit given); 0 when there
    /// are none (any more).
    pub waiting: i64,
    /// The due time of the oldest of them.
    pub oldest_due_at: Option<i64>,
    /// Whether the app has live executors (up or draining) and no free capacity.
    pub full: bool,
    /// The dedupe key of the open episode's alarm, when one is open.
    pub alarm_key: Option<String>,
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

/// A claimed run accepted by an executor, for [`Tx::start_claimed_runs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartClaimed {
    pub fence: Fence,
    pub executor_id: ExecutorId,
    pub dispatched_at: i64,
    pub deadline_at: Option<i64>,
}

/// A run [`Tx::start_claimed_runs`] recorded as sent to its executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct StartedRun {
    pub id: RunId,
    /// Whether it is running now; `false` when its result came first and it is final.
    pub running: bool,
}

/// One transaction. Every operation runs inside it; [`Tx::commit`] makes them durable together.
#[async_trait]
pub trait Tx: Send {
    /// Makes every change of this transaction durable (and delivers its due signals).
    async fn commit(self: Box<Self>) -> Result<()>;

    /// Signals, when this transaction commits, that `group` has new runs due soon (a manual
    /// trigger, a retry, a chain child), so nodes claim them before their next poll.
    async fn notify_due(&mut self, group: &str) -> Result<()>;

    // ---- tenants (operator operations) -------------------------------------------------

    async fn create_tenant(&mut self, new: &NewTenant, now: i64) -> Result<Tenant>;
    async fn get_tenant(&mut self, id: TenantId) -> Result<Tenant>;
    async fn find_tenant_by_name(&mut self, name: &str) -> Result<Option<Tenant>>;
    async fn list_tenants(&mut self) -> Result<Vec<Tenant>>;
    /// Changes a tenant; a new node group also moves its not-yet-claimed runs to that group.
    async fn update_tenant(
        &mut self,
        id: TenantId,
        update: &TenantUpdate,
        now: i64,
    ) -> Result<Tenant>;
    /// Deletes a tenant and everything it owns.
    async fn delete_tenant(&mut self, id: TenantId) -> Result<()>;
    /// Serialises changes that must see a tenant's whole state (dependency edits).
    async fn lock_tenant(&mut self, id: TenantId) -> Result<()>;

    // ---- users and API tokens ---------------------------------------------------------

    async fn create_user(&mut self, new: &NewUser, now: i64) -> Result<User>;
    /// For sign-in: any user by name.
    async fn find_user_by_username(&mut self, username: &str) -> Result<Option<User>>;
    /// Users of one tenant, or every user for [`Scope::Cluster`].
    async fn list_users(&mut self, scope: Scope) -> Result<Vec<User>>;
    /// A user in the scope (operators are in [`Scope::Cluster`] only).
    async fn get_user(&mut self, scope: Scope, id: UserId) -> Result<User>;
    async fn update_user(
        &mut self,
        scope: Scope,
        id: UserId,
        update: &UserUpdate,
        now: i64,
    ) -> Result<User>;
    async fn delete_user(&mut self, scope: Scope, id: UserId) -> Result<()>;

    async fn create_api_token(&mut self, new: &NewApiToken, now: i64) -> Result<ApiToken>;
    /// The valid token with this hash and its (enabled) user, marking it used; `None` when the
    /// token is unknown, revoked, expired or its user disabled.
    async fn authenticate_api_token(
        &mut self,
        token_hash: &str,
        now: i64,
    ) -> Result<Option<(ApiToken, User)>>;
    /// Whether token `id` still holds at `now`: not revoked, not expired, its user enabled.
    /// Reads only (an open WebSocket asks every few seconds).
    async fn api_token_holds(&mut self, id: ApiTokenId, now: i64) -> Result<bool>;
    async fn list_api_tokens(&mut self, user: UserId) -> Result<Vec<ApiToken>>;
    async fn revoke_api_token(&mut self, user: UserId, id: ApiTokenId, now: i64) -> Result<()>;

    // ---- apps and executor instances --------------------------------------------------

    async fn create_app(&mut self, tenant: TenantId, new: &NewApp, now: i64) -> Result<App>;
    async fn get_app(&mut self, tenant: TenantId, id: AppId) -> Result<App>;
    async fn find_app_by_name(&mut self, tenant: TenantId, name: &str) -> Result<Option<App>>;
    async fn list_apps(&mut self, tenant: TenantId) -> Result<Vec<App>>;
    async fn set_app_secret(
        &mut self,
        tenant: TenantId,
        id: AppId,
        secret: &str,
        now: i64,
    ) -> Result<App>;
    /// Deletes an app; refused while a task uses it.
    async fn delete_app(&mut self, tenant: TenantId, id: AppId) -> Result<()>;
    /// Engine internal: the app a wrapper request names (its key `<tenant>.<app>`), for its secret.
    async fn find_app_by_key(&mut self, tenant_name: &str, app_name: &str) -> Result<Option<App>>;
    /// Engine internal: apps by id.
    async fn get_apps_by_ids(&mut self, ids: &[AppId]) -> Result<Vec<App>>;

    /// Registers (or re-registers) an executor instance as `up`.
    async fn register_executor(&mut self, reg: &ExecutorRegistration, now: i64)
    -> Result<Executor>;
    /// Records a heartbeat; `None` when the instance is unknown, lost or down (it must register).
    async fn heartbeat_executor(
        &mut self,
        app: AppId,
        instance_id: &str,
        beat: ExecutorHeartbeat,
        now: i64,
    ) -> Result<Option<Executor>>;
    /// Marks an instance draining or down (deregistration).
    async fn set_executor_state(
        &mut self,
        app: AppId,
        instance_id: &str,
        state: ExecutorState,
        now: i64,
    ) -> Result<Option<Executor>>;
    /// An app's instance by the id it registered with (in any state); `None` when it never
    /// registered.
    async fn find_executor(&mut self, app: AppId, instance_id: &str) -> Result<Option<Executor>>;
    /// Instances of an app that are up and heartbeated at or after `heartbeat_since`.
    async fn list_live_executors(
        &mut self,
        app: AppId,
        heartbeat_since: i64,
    ) -> Result<Vec<Executor>>;
    /// A tenant's instances (every state), optionally of one app.
    async fn list_executors(
        &mut self,
        tenant: TenantId,
        app: Option<AppId>,
    ) -> Result<Vec<Executor>>;
    /// Marks up to `limit` instances whose last heartbeat is before `heartbeat_before` as lost
    /// and returns them; concurrent callers get disjoint sets.
    async fn mark_executors_lost(
        &mut self,
        heartbeat_before: i64,
        limit: i64,
    ) -> Result<Vec<Executor>>;

    /// Up to `limit` instances (up or draining) whose last heartbeat is before
    /// `heartbeat_before`, oldest first, without locking them: candidates to probe before any
    /// is declared lost.
    async fn silent_executors(
        &mut self,
        heartbeat_before: i64,
        limit: i64,
    ) -> Result<Vec<Executor>>;
    /// Marks those of `ids` that are still up or draining and still silent (last heartbeat
    /// before `heartbeat_before`) as lost and returns them: a heartbeat that arrived meanwhile
    /// saves an instance, and concurrent callers get disjoint sets.
    async fn mark_silent_executors_lost(
        &mut self,
        ids: &[ExecutorId],
        heartbeat_before: i64,
    ) -> Result<Vec<Executor>>;
    /// Counts an answered probe of instances that are up or draining as a heartbeat at `now`.
    async fn record_executor_probes(&mut self, ids: &[ExecutorId], now: i64) -> Result<u64>;

    // ---- tasks and dependencies -------------------------------------------------------

    /// Inserts a task row (see [`ops`] `create_task` for the full operation).
    async fn insert_task(
        &mut self,
        tenant: TenantId,
        def: &TaskDefinition,
        schedule: &ScheduleColumns,
        now: i64,
    ) -> Result<Task>;
    /// A task that is not deleted.
    async fn get_task(&mut self, tenant: TenantId, id: TaskId) -> Result<Task>;
    async fn find_task_by_name(&mut self, tenant: TenantId, name: &str) -> Result<Option<Task>>;
    async fn list_tasks(&mut self, tenant: TenantId, filter: &TaskFilter) -> Result<Vec<Task>>;
    /// Replaces a task's definition if it is still at `expected_version`; `reset_fires`
    /// restarts the `max_fires` count (the schedule changed).
    #[allow(clippy::too_many_arguments)]
    async fn update_task_row(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        def: &TaskDefinition,
        schedule: &ScheduleColumns,
        reset_fires: bool,
        now: i64,
    ) -> Result<Task>;
    /// Pauses or resumes a task if it is still at `expected_version`.
    async fn set_task_paused(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        paused: bool,
        now: i64,
    ) -> Result<Task>;
    /// Marks a task deleted if it is still at `expected_version`, and drops its dependencies.
    async fn mark_task_deleted(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        now: i64,
    ) -> Result<Task>;
    /// Engine internal: tasks by id (deleted ones included), locked against concurrent edits
    /// until the transaction ends.
    async fn lock_tasks(&mut self, ids: &[TaskId]) -> Result<Vec<Task>>;
    /// Engine internal: [`Tx::lock_tasks`] for a caller that is going to change the tasks (the
    /// claim counts their materialised occurrences): locked exclusively from the start, in id
    /// order, so two such callers queue one behind the other instead of deadlocking on
    /// upgrading shared locks.
    async fn lock_tasks_for_update(&mut self, ids: &[TaskId]) -> Result<Vec<Task>>;
    /// Engine internal: [`Tx::lock_tasks`], and which of the tasks are the parent of a
    /// dependency (have children), in one statement.
    async fn lock_tasks_with_children(
        &mut self,
        ids: &[TaskId],
    ) -> Result<(Vec<Task>, Vec<TaskId>)>;
    /// Engine internal: counts `n` more materialised scheduled occurrences.
    async fn add_fires_scheduled(&mut self, task: TaskId, n: i64) -> Result<()>;
    /// Engine internal: [`Tx::add_fires_scheduled`] for many tasks in one statement (a task
    /// may appear several times; its counts add up). Rows are updated in id order.
    async fn add_fires_scheduled_many(&mut self, counts: &[(TaskId, i64)]) -> Result<()>;

    async fn insert_dependency(
        &mut self,
        tenant: TenantId,
        parent: TaskId,
        child: TaskId,
        condition: DependencyCondition,
        now: i64,
    ) -> Result<Dependency>;
    async fn delete_dependency(
        &mut self,
        tenant: TenantId,
        parent: TaskId,
        child: TaskId,
    ) -> Result<()>;
    async fn list_dependencies(&mut self, tenant: TenantId) -> Result<Vec<Dependency>>;
    /// Engine internal: the edges leaving `parent`.
    async fn children_of(&mut self, parent: TaskId) -> Result<Vec<Dependency>>;
    /// Engine internal: the edges entering `child`.
    async fn parents_of(&mut self, child: TaskId) -> Result<Vec<Dependency>>;

    // ---- runs ---------------------------------------------------------------------------

    /// Inserts a run; `None` when that occurrence (task, scheduled time, attempt, shard)
    /// already exists.
    async fn insert_run(&mut self, run: &NewRun, now: i64) -> Result<Option<Run>>;
    /// Inserts many runs, skipping occurrences that exist; returns the inserted ones.
    async fn insert_runs(&mut self, runs: &[NewRun], now: i64) -> Result<Vec<Run>>;
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
    /// their executors' free capacity ([`ClaimApp`]); an app whose live executors are full is not
    /// read at all, the others at most their free capacity ([`claim_windows`]); the apps'
    /// runs take turns, each tenant in proportion to its weight, due order (then priority)
    /// holding within an app.
    async fn claim_due_runs(&mut self, req: &ClaimRequest) -> Result<Vec<Run>>;
    /// Engine internal (watchdog): apps with live executors and no free capacity whose
    /// pending runs due before `due_before` wait (counted up to `count_limit`), and apps with
    /// an open backlog episode (whether or not they still wait or are full).
    async fn capacity_backlogs(
        &mut self,
        due_before: i64,
        count_limit: i64,
    ) -> Result<Vec<CapacityBacklog>>;
    /// Opens a backlog episode of `app` under the alarm dedupe key `alarm_key`; `false` when
    /// one is open already (another node opened it).
    async fn open_backlog(&mut self, app: AppId, alarm_key: &str, now: i64) -> Result<bool>;
    /// Closes the open backlog episode of `app`; returns its alarm's dedupe key.
    async fn close_backlog(&mut self, app: AppId) -> Result<Option<String>>;
    /// Sets a tenant's claim weight (at least 1).
    async fn set_tenant_weight(&mut self, tenant: TenantId, weight: i32) -> Result<()>;
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
    /// also marked for a cancel request to that executor ([`Tx::take_cancel_requests`]).
    async fn start_claimed_runs(
        &mut self,
        items: &[StartClaimed],
        now: i64,
    ) -> Result<Vec<StartedRun>>;
    /// Records, for claimed runs this node still holds (fenced as by
    /// [`Tx::transition_claimed`]), the executor instance they are about to be sent to, before
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
    /// final is left as it is ([`Completion::AlreadyFinal`]). With `app`, a run of another
    /// app's task is "not found".
    async fn complete_run(
        &mut self,
        id: RunId,
        app: Option<AppId>,
        completion: &RunCompletion,
    ) -> Result<Completion>;
    /// [`Tx::complete_run`] for many runs at once, with the same rules for each item: the runs
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
    /// Engine internal: the tasks that depend on any of `parents` (their chain children), read
    /// without locking, so a finishing run can lock them with its own task in one pass.
    async fn child_task_ids(&mut self, parents: &[TaskId]) -> Result<Vec<TaskId>>;
    /// Runs of a chain (by root) of the given tasks, locking the chain root against concurrent
    /// joins until the transaction ends.
    async fn lock_chain_runs(&mut self, chain_root: RunId, tasks: &[TaskId]) -> Result<Vec<Run>>;

    // ---- alarms (outbox) ----------------------------------------------------------------

    /// Raises an alarm; `None` when one with the same dedupe key exists. A repeat of an open
    /// alarm of the same task and kind is recorded against it (`repeat_of`) and counted on it
    /// (`count`, `last_seen`): the open alarm is returned, with an `repeated` event. A new
    /// alarm that is not muted gets a `raised` event.
    async fn insert_alarm(&mut self, alarm: &NewAlarm, now: i64) -> Result<Option<Alarm>>;
    /// Writes an event of `alarm` to the outbox (with a snapshot of the alarm).
    async fn insert_alarm_event(
        &mut self,
        event: AlarmEventKind,
        alarm: &Alarm,
        now: i64,
    ) -> Result<AlarmEvent>;
    /// The oldest alarms whose `raised` event was not published yet (repeats left out);
    /// concurrent callers get disjoint sets.
    async fn list_unpublished_alarms(&mut self, limit: i64) -> Result<Vec<Alarm>>;
    async fn mark_alarms_published(&mut self, ids: &[AlarmId], now: i64) -> Result<u64>;
    /// The oldest unpublished alarm events, locked until the transaction ends; concurrent
    /// relays get disjoint sets.
    async fn list_unpublished_alarm_events(&mut self, limit: i64) -> Result<Vec<AlarmEvent>>;
    /// Marks events published (and, for `raised` events, their alarms); returns how many
    /// events were not marked before.
    async fn mark_alarm_events_published(&mut self, ids: &[AlarmEventId], now: i64) -> Result<u64>;
    /// Resolves a task's unresolved alarms of the kinds a success ends
    /// ([`AlarmKind::resolved_by_success`](crate::alarm::AlarmKind::resolved_by_success)),
    /// with a `resolved` event each (muted ones excepted); returns them. Runs in the success's
    /// transaction, for the tasks [`Tx::tasks_with_unresolved_alarms`] names.
    async fn resolve_task_alarms(&mut self, task: TaskId, now: i64) -> Result<Vec<Alarm>>;
    /// Those of `tasks` that have unresolved alarms a success resolves (one statement for a
    /// batch of results; usually none).
    async fn tasks_with_unresolved_alarms(&mut self, tasks: &[TaskId]) -> Result<Vec<TaskId>>;
    /// Resolves the tenant's unresolved alarm with this dedupe key (a wrapper saying its
    /// condition is over), with a `resolved` event unless it was muted; `None` when there is
    /// no such open alarm.
    async fn resolve_alarm_by_key(
        &mut self,
        tenant: TenantId,
        dedupe_key: &str,
        now: i64,
    ) -> Result<Option<Alarm>>;
    async fn get_alarm(&mut self, scope: Scope, id: AlarmId) -> Result<Alarm>;
    async fn list_alarms(&mut self, scope: Scope, filter: &AlarmFilter) -> Result<Vec<Alarm>>;
    /// Acknowledges an alarm (idempotent: the first acknowledgement is kept, and only it writes
    /// an `acknowledged` event).
    async fn acknowledge_alarm(
        &mut self,
        scope: Scope,
        id: AlarmId,
        by: &str,
        now: i64,
    ) -> Result<Alarm>;

    // ---- engine nodes and audit ---------------------------------------------------------

    async fn heartbeat_node(&mut self, beat: &NodeHeartbeat, now: i64) -> Result<EngineNode>;
    async fn list_nodes(&mut self) -> Result<Vec<EngineNode>>;
    /// Marks nodes that are up or draining with a heartbeat before `heartbeat_before` as lost
    /// and returns them (each reported once).
    async fn mark_nodes_lost(&mut self, heartbeat_before: i64) -> Result<Vec<EngineNode>>;

    async fn append_audit(&mut self, event: &NewAuditEvent, now: i64) -> Result<AuditEvent>;
    /// Newest first.
    async fn list_audit(
        &mut self,
        scope: Scope,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<AuditEvent>>;

    // ---- console views ------------------------------------------------------------------

    /// A tenant's runs in a final state scheduled in a time range, oldest first, for
    /// statistics.
    async fn run_samples(
        &mut self,
        tenant: TenantId,
        query: &RunSampleQuery,
    ) -> Result<Vec<RunSample>>;
    /// Every run (attempts and shards) of one occurrence of a tenant's task, ordered by shard
    /// and attempt, without locking anything.
    async fn occurrence_runs(
        &mut self,
        tenant: TenantId,
        task: TaskId,
        scheduled_at: i64,
    ) -> Result<Vec<Run>>;
    /// The run an idempotency key created, unless the key was first used before
    /// `created_since`.
    async fn find_trigger_key(
        &mut self,
        tenant: TenantId,
        key: &str,
        created_since: i64,
    ) -> Result<Option<TriggerKey>>;
    /// Remembers the run an idempotency key created (replacing a use of the key from before
    /// `created_since`); false when the key is taken already (a concurrent request won).
    async fn insert_trigger_key(&mut self, key: &TriggerKey, created_since: i64) -> Result<bool>;
    /// Mutes a tenant's task's alarms until `until`, or unmutes them (`None`).
    async fn set_alarm_mute(
        &mut self,
        tenant: TenantId,
        task: TaskId,
        until: Option<i64>,
        by: &str,
        now: i64,
    ) -> Result<Option<AlarmMute>>;
    /// A tenant's mutes that last beyond `now`.
    async fn list_alarm_mutes(&mut self, tenant: TenantId, now: i64) -> Result<Vec<AlarmMute>>;

    // ---- console sessions and sign-in attempts ------------------------------------------

    /// Starts a console session.
    async fn create_session(
        &mut self,
        new: &crate::tenant::NewSession,
        now: i64,
    ) -> Result<crate::tenant::Session>;
    /// The live session with this id and its (enabled) user, noting that it was seen; `None`
    /// when the session is unknown, revoked or expired, or its user disabled.
    async fn authenticate_session(
        &mut self,
        id: &str,
        now: i64,
    ) -> Result<Option<(crate::tenant::Session, User)>>;
    /// Whether session `id` still holds at `now`: not signed out, not expired, its user
    /// enabled. Reads only (an open WebSocket asks every few seconds).
    async fn session_holds(&mut self, id: &str, now: i64) -> Result<bool>;
    /// Revokes a session (sign-out); false when it was unknown or already revoked.
    async fn revoke_session(&mut self, id: &str, now: i64) -> Result<bool>;
    /// Records a sign-in attempt, forgetting the user name's attempts older than `forget_before`.
    async fn record_login_attempt(
        &mut self,
        username: &str,
        address: &str,
        succeeded: bool,
        forget_before: i64,
        now: i64,
    ) -> Result<()>;
    /// Failed sign-in attempts at or after `since`: (for this user name, from this address).
    async fn count_failed_logins(
        &mut self,
        username: &str,
        address: &str,
        since: i64,
    ) -> Result<(i64, i64)>;

    // ---- cancel requests and purges -----------------------------------------------------

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

    // ---- notification channels and deliveries (shared/channels.rs) ---------------------

    /// Creates a tenant's notification channel; it is sent the alarms raised from `now` on.
    async fn create_channel(
        &mut self,
        tenant: TenantId,
        new: &crate::channel::NewChannel,
        now: i64,
    ) -> Result<crate::channel::Channel>;
    async fn list_channels(&mut self, tenant: TenantId) -> Result<Vec<crate::channel::Channel>>;
    async fn get_channel(
        &mut self,
        tenant: TenantId,
        id: crate::channel::ChannelId,
    ) -> Result<crate::channel::Channel>;
    /// Changes a channel; enabling a disabled one starts it from `now`.
    async fn update_channel(
        &mut self,
        tenant: TenantId,
        id: crate::channel::ChannelId,
        update: &crate::channel::ChannelUpdate,
        now: i64,
    ) -> Result<crate::channel::Channel>;
    /// Deletes a channel and its delivery log.
    async fn delete_channel(
        &mut self,
        tenant: TenantId,
        id: crate::channel::ChannelId,
    ) -> Result<()>;
    /// A channel's deliveries, newest first (keyset paging by id).
    async fn list_deliveries(
        &mut self,
        tenant: TenantId,
        channel: crate::channel::ChannelId,
        before: Option<crate::channel::DeliveryId>,
        limit: i64,
    ) -> Result<Vec<crate::channel::Delivery>>;
    /// Engine internal: a channel by id.
    async fn find_channel(
        &mut self,
        id: crate::channel::ChannelId,
    ) -> Result<Option<crate::channel::Channel>>;
    /// Engine internal: makes the delivery rows of alarms raised for enabled channels (their
    /// tenant, their minimum severity, not muted, raised since the channel was created), looking
    /// back `settle_ms` before where the last pass stopped, at most `limit` per channel.
    /// Channels another node is working on are skipped. Returns the rows made.
    async fn enqueue_notifications(&mut self, now: i64, settle_ms: i64, limit: i64) -> Result<u64>;
    /// Engine internal: takes up to `limit` pending deliveries due at `now`, counting their
    /// attempt and holding them until `lease_until` (concurrent nodes get disjoint sets; a
    /// node that dies mid-attempt leaves them due again then).
    async fn claim_deliveries(
        &mut self,
        now: i64,
        lease_until: i64,
        limit: i64,
    ) -> Result<Vec<crate::channel::Delivery>>;
    /// Engine internal: what became of claimed attempts; an outcome for an attempt that was
    /// taken over meanwhile changes nothing. Returns the rows changed.
    async fn record_attempts(
        &mut self,
        outcomes: &[crate::channel::AttemptOutcome],
        now: i64,
    ) -> Result<u64>;
    /// Engine internal: the aggregates behind the database-backed metrics gauges.
    async fn metrics_snapshot(&mut self) -> Result<crate::metrics::MetricsSnapshot>;

    // ---- rollups and retention (shared/rollups.rs) --------------------------------------

    /// Engine internal: a page of a tenant's runs in a final state scheduled in a time range,
    /// ordered by scheduled time then id, starting after `after` (keyset paging).
    async fn rollup_samples(
        &mut self,
        tenant: TenantId,
        scheduled_from: i64,
        scheduled_before: i64,
        after: Option<SampleCursor>,
        limit: i64,
    ) -> Result<Vec<RunSample>>;
    /// The earliest scheduled time of a tenant's runs in the range that are not final yet.
    async fn oldest_unfinished_scheduled(
        &mut self,
        tenant: TenantId,
        scheduled_from: i64,
        scheduled_before: i64,
    ) -> Result<Option<i64>>;
    /// The earliest scheduled time of any of a tenant's runs.
    async fn oldest_run_scheduled(&mut self, tenant: TenantId) -> Result<Option<i64>>;
    /// Engine internal: a tenant's rollup watermark (every minute before it is rolled up),
    /// creating it at `initial` when it has none, locked until the transaction ends; `None`
    /// when another transaction holds it (PostgreSQL; SQLite has one writer at a time).
    async fn lock_rollup_watermark(
        &mut self,
        tenant: TenantId,
        initial: i64,
        now: i64,
    ) -> Result<Option<i64>>;
    /// A tenant's rollup watermark, read without locking; `None` before its first rollup.
    async fn rollup_watermark(&mut self, tenant: TenantId) -> Result<Option<i64>>;
    /// Every tenant's rollup watermark.
    async fn rollup_watermarks(&mut self) -> Result<Vec<(TenantId, i64)>>;
    /// Engine internal: moves a tenant's watermark forward to `rolled_before` (never back).
    async fn set_rollup_watermark(
        &mut self,
        tenant: TenantId,
        rolled_before: i64,
        now: i64,
    ) -> Result<()>;
    /// Engine internal: writes rollup rows, replacing rows of the same tenant, task and minute.
    async fn upsert_run_rollups(&mut self, rows: &[RunRollup]) -> Result<()>;
    /// A tenant's (or one task's) rollup rows of minutes in `minute_from..minute_before`,
    /// ordered by minute then task.
    async fn run_rollups(
        &mut self,
        tenant: TenantId,
        task: Option<TaskId>,
        minute_from: i64,
        minute_before: i64,
    ) -> Result<Vec<RunRollup>>;
    /// Engine internal: writes tenant-wide rollup rows (every task of the tenant merged; the
    /// rows' `task_id` is ignored), replacing rows of the same tenant and minute.
    async fn upsert_tenant_rollups(&mut self, rows: &[RunRollup]) -> Result<()>;
    /// A tenant's tenant-wide rollup rows of minutes in `minute_from..minute_before`, one per
    /// minute in order, each with `task_id` 0 (every task).
    async fn tenant_rollups(
        &mut self,
        tenant: TenantId,
        minute_from: i64,
        minute_before: i64,
    ) -> Result<Vec<RunRollup>>;
    /// Engine internal: deletes up to `limit` (at most 10,000) of a tenant's final runs that
    /// finished before `finished_before` and were scheduled before `scheduled_before` (the
    /// rollup watermark), oldest first, skipping rows other transactions hold. A run whose
    /// occurrence or chain still has a run that is not final stays. Rows referring to a
    /// deleted run keep their row with the reference set to null (alarms, chain children);
    /// idempotency keys of manual triggers go with their run. Returns how many were deleted.
    async fn delete_expired_runs(
        &mut self,
        tenant: TenantId,
        finished_before: i64,
        scheduled_before: i64,
        limit: i64,
    ) -> Result<u64>;
    /// Engine internal: deletes up to `limit` (at most 10,000) alarm events published before
    /// `published_before`, oldest first (the outbox keeps only what is still to publish and
    /// recent history); returns how many. Alarms themselves stay.
    async fn purge_alarm_events(&mut self, published_before: i64, limit: i64) -> Result<u64>;
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
        assert_eq!(redact_url("sqlite://a.db"), "sqlite://a.db");
    }

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(like_escape("50%_a\\b"), "50\\%\\_a\\\\b");
    }
}

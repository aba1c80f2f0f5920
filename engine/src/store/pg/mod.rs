//! The PostgreSQL backend: the cluster store. Concurrent engine nodes claim with
//! `FOR UPDATE SKIP LOCKED`, so they never wait on each other's rows and never take the same run.

pub(super) mod alarms;
pub(super) mod apps;
pub(super) mod backlogs;
mod hosts;
pub(super) mod runs;
pub(super) mod tasks;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::Connection;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions};

use self::hosts::{HostList, Primary};
use super::tx::StoreTx;
use super::{
    Backend, DUE_CHANNEL, DueListener, MigrationReport, Result, Store, StoreError, Tx,
    apply_migrations, redact_url,
};

static MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");

/// The PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// Without the session timeouts: migrations (and the live runs' vacuum) may legitimately
    /// run long.
    migrate_options: PgConnectOptions,
    /// The server among several hosts that the pool follows (see `hosts.rs`); `None` for one
    /// host used as written.
    primary: Option<Arc<Primary>>,
}

/// Server-side settings of every pooled session.
///
/// Limits, all below the default lease (2 s), so that a node frozen mid-transaction (a paused
/// process, a partition) holds its row locks for at most about one lease, and nobody waits on a
/// lock longer than that: the waiting transaction fails instead and is tried again (a result
/// batch is answered 503 and re-sent by its wrapper; a claim or dispatch moves on at the next
/// poll).
/// - `idle_in_transaction_session_timeout`: the server ends a session whose transaction has
///   been idle this long, releasing its locks;
/// - `lock_timeout`: a statement waits at most this long for a row lock;
/// - `statement_timeout`: no statement runs longer than this.
///
/// And `jit = off`: the engine's statements are short, and PostgreSQL compiles a statement
/// whose estimated cost passes `jit_above_cost` anew at every execution. Retention's delete of
/// 1,000 runs beside two million was estimated that high: it spent 0.9 s of its 1.2 s compiling,
/// so retention deleted 1,700 runs a second while 4,300 were made.
pub const SESSION_SETTINGS: [(&str, &str); 4] = [
    ("idle_in_transaction_session_timeout", "1500"),
    ("lock_timeout", "1700"),
    ("statement_timeout", "1900"),
    ("jit", "off"),
];

impl PgStore {
    /// Connects to `url` (`postgres://user[:password]@host[:port][,host[:port]…]/database[?options]`)
    /// with a pool of up to 16 connections. With several hosts (or
    /// `target_session_attrs=read-write`) the pool works against the primary among them and
    /// follows it through a failover (see `store/pg/hosts.rs`).
    pub async fn connect(url: &str) -> Result<Self> {
        let unavailable = |e: &dyn std::fmt::Display| {
            StoreError::Unavailable(format!(
                "cannot connect to PostgreSQL at {}: {e}",
                redact_url(url)
            ))
        };
        let hosts = HostList::parse(url).map_err(|e| {
            StoreError::Unavailable(format!("invalid PostgreSQL URL {}: {e}", redact_url(url)))
        })?;
        if hosts.follows() {
            let (pool, primary) = Primary::connect(hosts, 16)
                .await
                .map_err(|e| unavailable(&e))?;
            return Ok(Self {
                pool,
                migrate_options: primary.options(),
                primary: Some(primary),
            });
        }
        let options = hosts.hosts.into_iter().next().map(|h| h.options);
        let options = options.unwrap_or_default();
        Self::connect_with(options, 16).await.map_err(|e| match e {
            StoreError::Database(e) => unavailable(&e),
            other => other,
        })
    }

    /// Connects with explicit options and pool size. Every session gets the settings of
    /// [`SESSION_SETTINGS`].
    pub async fn connect_with(options: PgConnectOptions, max_connections: u32) -> Result<Self> {
        // One direct connection first: a pool would only report "timed out" for a server that
        // refuses connections, hiding the reason.
        PgConnection::connect_with(&options).await?.close().await?;
        let migrate_options = options.clone();
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options.options(SESSION_SETTINGS))
            .await?;
        Ok(Self {
            pool,
            migrate_options,
            primary: None,
        })
    }

    /// Options for a connection of its own, outside the pool and without its session limits,
    /// to the server the pool works against now (migrations, the live runs' vacuum).
    fn unpooled_options(&self) -> PgConnectOptions {
        match &self.primary {
            Some(primary) => primary.options(),
            None => self.migrate_options.clone(),
        }
    }

    /// The connection pool (for LISTEN/NOTIFY and tests).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Where new connections go, as `host:port`.
    pub fn server(&self) -> String {
        match &self.primary {
            Some(primary) => primary.host().to_owned(),
            None => {
                let options = self.pool.connect_options();
                format!("{}:{}", options.get_host(), options.get_port())
            }
        }
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn migrate(&self) -> Result<MigrationReport> {
        let options = self.unpooled_options();
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await?;
        let report = apply_migrations(&MIGRATOR, &pool).await;
        pool.close().await;
        report
    }

    async fn begin(&self) -> Result<Box<dyn Tx>> {
        Ok(Box::new(StoreTx::postgres(self.pool.begin().await?)))
    }

    async fn begin_read(&self) -> Result<Box<dyn Tx>> {
        Ok(Box::new(StoreTx::postgres(
            self.pool.begin_with("BEGIN READ ONLY").await?,
        )))
    }

    async fn listen_due(&self) -> Result<Box<dyn DueListener>> {
        // Taken before connecting: a switch while connecting ends the listener at once.
        let switched_at = self.primary.as_ref().map(|p| p.switched_at());
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(DUE_CHANNEL).await?;
        Ok(Box::new(PgDueListener {
            listener,
            primary: self.primary.clone().zip(switched_at),
        }))
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
                 {track_counts}): every finished run retention deletes leaves a dead row in \
                 `run_history` that only VACUUM removes, so the history grows although \
                 retention deletes (the engine vacuums the live runs itself; see \
                 docs/engine.md, \"Live runs and history\")"
            ));
        }
        Ok(warnings)
    }

    async fn vacuum_live_runs(&self) -> Result<()> {
        // A connection of its own, without the pool's statement timeout: a backlog of a million
        // waiting runs takes longer to vacuum than the 1.9 s a hot-path statement may run.
        let options = self.unpooled_options();
        let mut c =
            PgConnection::connect_with(&options.options([("lock_timeout", "1000")])).await?;
        // No parallel workers: the indexes are small, and two more processes each time
        // would contend with the hot path for the same cores.
        let vacuumed = sqlx::raw_sql("VACUUM (ANALYZE, SKIP_LOCKED, PARALLEL 0) live_runs")
            .execute(&mut c)
            .await;
        c.close().await?;
        vacuumed?;
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}

#[derive(Debug)]
struct PgDueListener {
    listener: PgListener,
    /// With several hosts: the server being followed, and when the pool last switched servers
    /// as this listener connected.
    primary: Option<(Arc<Primary>, Instant)>,
}

/// How often a listener of a following store checks that its server is still the one in use.
const LISTENER_CHECK: Duration = Duration::from_secs(1);

#[async_trait]
impl DueListener for PgDueListener {
    async fn recv(&mut self) -> Result<String> {
        let Some((primary, switched_at)) = &self.primary else {
            return Ok(self.listener.recv().await?.payload().to_owned());
        };
        loop {
            if primary.switched_at() != *switched_at {
                return Err(StoreError::Unavailable(format!(
                    "the due signals' server is no longer the one in use ({}); listen again",
                    primary.host()
                )));
            }
            tokio::select! {
                notification = self.listener.recv() => {
                    return Ok(notification?.payload().to_owned());
                }
                () = tokio::time::sleep(LISTENER_CHECK) => {}
            }
        }
    }
}

/// Ids as a PostgreSQL `bigint[]` parameter.
fn raw_ids<T: Copy>(ids: &[T], f: impl Fn(T) -> i64) -> Vec<i64> {
    ids.iter().map(|&id| f(id)).collect()
}

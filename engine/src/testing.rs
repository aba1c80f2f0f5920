//! Fresh databases for tests (feature `test-support`): a PostgreSQL schema or a SQLite file
//! per test, migrated, removed again by [`TestDb::cleanup`].
//!
//! PostgreSQL is found at `MTHPT_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); when it cannot be reached, the test fails with a
//! message saying so — it never skips.

#![allow(clippy::expect_used, missing_debug_implementations)]

use std::str::FromStr;
use std::sync::Arc;

use crate::store::{PgStore, SqliteStore, Store};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

mod backends;
pub mod rabbit;

pub use backends::CaseOutcome;

/// The PostgreSQL database the suite creates its schemas in.
pub fn postgres_url() -> String {
    std::env::var("MTHPT_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A migrated store that is removed again by [`TestDb::cleanup`].
pub struct TestDb {
    store: Arc<dyn Store>,
    cleanup: Cleanup,
}

enum Cleanup {
    PgSchema(String),
    SqliteDir(tempfile::TempDir),
}

impl TestDb {
    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    pub fn shared(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// A URL other processes can open the same database with (for PostgreSQL, the test's
    /// schema is set as the search path).
    pub fn url(&self) -> String {
        match &self.cleanup {
            Cleanup::PgSchema(schema) => {
                let base = postgres_url();
                let sep = if base.contains('?') { '&' } else { '?' };
                format!("{base}{sep}options=-csearch_path%3D{schema}")
            }
            Cleanup::SqliteDir(dir) => {
                format!("sqlite://{}", dir.path().join("mthpt.db").display())
            }
        }
    }

    /// Drops the schema (PostgreSQL) or the file (SQLite).
    pub async fn cleanup(self) {
        self.store.close().await;
        if let Cleanup::SqliteDir(dir) = &self.cleanup {
            tracing::debug!(dir = %dir.path().display(), "removing test database");
        }
        if let Cleanup::PgSchema(schema) = &self.cleanup {
            let mut conn = admin().await;
            // Schemas dropped at the same moment by other test processes can deadlock on the
            // catalog; the loser is told so and tries again.
            let mut tries = 0;
            loop {
                let dropped = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS {schema} CASCADE"
                )))
                .execute(&mut conn)
                .await;
                match dropped {
                    Ok(_) => break,
                    Err(e) if tries < 5 => {
                        tries += 1;
                        tracing::warn!(%schema, error = %e, "dropping the test schema failed; trying again");
                        tokio::time::sleep(std::time::Duration::from_millis(200 * tries)).await;
                    }
                    Err(e) => panic!("drop test schema {schema}: {e}"),
                }
            }
        }
    }
}

async fn admin() -> PgConnection {
    let url = postgres_url();
    PgConnection::connect(&url).await.unwrap_or_else(|e| {
        panic!(
            "PostgreSQL is unreachable at {url}: {e}\n\
             Start it (scripts/test.sh does) or point MTHPT_TEST_DATABASE_URL at a server."
        )
    })
}

/// A PostgreSQL store in a schema of its own.
pub async fn postgres() -> TestDb {
    let db = postgres_unmigrated().await;
    db.store.migrate().await.expect("migrate");
    db
}

/// A PostgreSQL store in an empty schema of its own, for tests that build an earlier schema
/// themselves (see `engine/tests/store/migrations.rs`).
pub async fn postgres_unmigrated() -> TestDb {
    let schema = format!("mthpt_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = admin().await;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut conn)
        .await
        .expect("create test schema");
    let options = PgConnectOptions::from_str(&postgres_url())
        .expect("test database URL")
        .options([("search_path", schema.as_str())]);
    let store = PgStore::connect_with(options, 8).await.expect("connect");
    TestDb {
        store: Arc::new(store),
        cleanup: Cleanup::PgSchema(schema),
    }
}

/// A SQLite store in a file of its own.
pub async fn sqlite() -> TestDb {
    let db = sqlite_unmigrated().await;
    db.store.migrate().await.expect("migrate");
    db
}

/// A SQLite store in a new, empty file of its own.
pub async fn sqlite_unmigrated() -> TestDb {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("mthpt.db").display());
    let store = SqliteStore::connect(&url).await.expect("open");
    TestDb {
        store: Arc::new(store),
        cleanup: Cleanup::SqliteDir(dir),
    }
}

/// The RabbitMQ the suite publishes to: `MTHPT_TEST_AMQP_URL`, default
/// `amqp://guest:guest@127.0.0.1:5672/%2f`.
pub fn amqp_url() -> String {
    std::env::var("MTHPT_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// A bus on an exchange of the test's own (tests running at once do not see each other's
/// messages); fails, never skips, when the broker cannot be reached.
pub async fn amqp_bus() -> crate::bus::AmqpBus {
    let config = crate::bus::AmqpConfig {
        url: amqp_url(),
        exchange: format!("mthpt.alarms.test.{}", uuid::Uuid::new_v4().simple()),
        connection_name: "mthpt-test".to_owned(),
    };
    crate::bus::AmqpBus::connect(config)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "RabbitMQ is unreachable at {}: {e}; start it or point MTHPT_TEST_AMQP_URL at one",
                amqp_url()
            )
        })
}

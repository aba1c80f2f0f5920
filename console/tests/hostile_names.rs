//! The schema itself refuses names outside the documented character set (migration 0002), on
//! both backends, even when the validation layer is bypassed: a tenant or app name with a dot
//! (which could never sign in, the app key being `<tenant>.<app>`), upper case or spaces, and
//! user names with spaces. Valid names, as the demo uses them, are still accepted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use anyhow::Result;
use mthpt_engine::testing::TestDb;
use sqlx::Connection;

/// Runs `sql` on the test database directly, bypassing the store's validation.
async fn raw(db: &TestDb, sql: &str) -> Result<(), String> {
    let url = db.url();
    let run = async {
        if url.starts_with("sqlite:") {
            let mut c = sqlx::SqliteConnection::connect(&url).await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
                .execute(&mut c)
                .await?;
        } else {
            let mut c = sqlx::PgConnection::connect(&url).await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
                .execute(&mut c)
                .await?;
        }
        Ok::<_, sqlx::Error>(())
    };
    run.await.map_err(|e| e.to_string())
}

async fn schema_refuses_names_outside_the_character_set(db: TestDb) -> Result<()> {
    let tenant = |name: &str| {
        format!(
            "INSERT INTO tenants (name, display_name, node_group, created_at, updated_at) \
             VALUES ('{name}', 'x', 'default', 0, 0)"
        )
    };
    raw(&db, &tenant("demo"))
        .await
        .map_err(anyhow::Error::msg)?;
    for bad in ["acme.corp", "Acme", "ac me", "-acme", ""] {
        assert!(raw(&db, &tenant(bad)).await.is_err(), "tenant {bad:?}");
    }
    let app = |name: &str| {
        format!(
            "INSERT INTO apps (tenant_id, name, secret, created_at, updated_at) \
             SELECT id, '{name}', 'secret-0123456789abcdef', 0, 0 FROM tenants WHERE name = 'demo'"
        )
    };
    raw(&db, &app("shop")).await.map_err(anyhow::Error::msg)?;
    for bad in ["shop.v2", "Shop", "sh op"] {
        assert!(raw(&db, &app(bad)).await.is_err(), "app {bad:?}");
    }
    let rename = "UPDATE apps SET name = 'a.b' WHERE name = 'shop'";
    assert!(raw(&db, rename).await.is_err(), "renaming to a dotted name");
    let user = |name: &str| {
        format!(
            "INSERT INTO users (tenant_id, username, password_hash, role, created_at, updated_at) \
             VALUES (NULL, '{name}', 'h', 'operator', 0, 0)"
        )
    };
    raw(&db, &user("alice.smith+ops@example.com"))
        .await
        .map_err(anyhow::Error::msg)?;
    for bad in ["alice smith", "bob:x", ""] {
        assert!(raw(&db, &user(bad)).await.is_err(), "user {bad:?}");
    }
    db.cleanup().await;
    Ok(())
}

#[tokio::test]
async fn sqlite_schema_refuses_names_outside_the_character_set() -> Result<()> {
    schema_refuses_names_outside_the_character_set(mthpt_engine::testing::sqlite().await).await
}

#[tokio::test]
async fn postgres_schema_refuses_names_outside_the_character_set() -> Result<()> {
    schema_refuses_names_outside_the_character_set(mthpt_engine::testing::postgres().await).await
}

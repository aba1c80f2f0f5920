//! The schema itself refuses names outside the documented character set (migration 0002), on
//! both backends, even when the validation layer is bypassed: a tenant or app name with a dot
//! (which could never sign in, the app key being `<tenant>.<app>`), upper case or spaces, and
//! user names with spaces; task names with spaces, slashes or colons (migration 0006). Valid
//! names, as the demo uses them, are still accepted.

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

/// Task names (migration 0006): new names outside `A-Z a-z 0-9 . _ -` (1 to 100, starting with a
/// letter or digit) are refused; a row named before the rule keeps working — the engine updates
/// it while scheduling — until it is renamed, and a rename must follow the rule.
async fn schema_refuses_new_task_names_outside_the_character_set(db: TestDb) -> Result<()> {
    let setup = "INSERT INTO tenants (name, display_name, node_group, created_at, updated_at) \
                 VALUES ('demo', 'x', 'default', 0, 0); \
                 INSERT INTO apps (tenant_id, name, secret, created_at, updated_at) \
                 SELECT id, 'shop', 'secret-0123456789abcdef', 0, 0 FROM tenants WHERE name = 'demo'";
    raw(&db, setup).await.map_err(anyhow::Error::msg)?;
    let task = |name: &str| {
        format!(
            "INSERT INTO tasks (tenant_id, app_id, name, handler, params, schedule_kind, \
                 misfire_policy, misfire_threshold_ms, misfire_max_catch_up, overlap_policy, \
                 routing, max_retries, retry_backoff_ms, retry_backoff_max_ms, recover_lost, \
                 priority, created_at, updated_at) \
             SELECT a.tenant_id, a.id, '{name}', 'h', '{{}}', 'manual', 'fire_once_now', 0, 1, \
                 'parallel', 'round_robin', 0, 0, 0, TRUE, 0, 0, 0 FROM apps a WHERE a.name = 'shop'"
        )
    };
    for ok in ["nightly-report", "Billing.sync_v2", &"a".repeat(100)] {
        raw(&db, &task(ok)).await.map_err(anyhow::Error::msg)?;
    }
    for bad in [
        "nightly report",
        "-x",
        ".x",
        "a/b",
        "a:b",
        "tâche",
        "",
        &"a".repeat(101),
    ] {
        assert!(raw(&db, &task(bad)).await.is_err(), "task {bad:?}");
    }
    let rename = "UPDATE tasks SET name = 'night report' WHERE name = 'nightly-report'";
    assert!(
        raw(&db, rename).await.is_err(),
        "renaming to a name with a space"
    );

    // A task named before the rule: written past the insert check, as an older schema did.
    let bypass = if db.url().starts_with("sqlite:") {
        "DROP TRIGGER tasks_name_chars_insert"
    } else {
        "ALTER TABLE tasks DISABLE TRIGGER tasks_name_chars_insert"
    };
    raw(&db, bypass).await.map_err(anyhow::Error::msg)?;
    raw(&db, &task("legacy name"))
        .await
        .map_err(anyhow::Error::msg)?;
    for keeps_working in [
        "UPDATE tasks SET fires_scheduled = fires_scheduled + 1 WHERE name = 'legacy name'",
        "UPDATE tasks SET name = 'legacy name', paused = TRUE, version = version + 1 \
         WHERE name = 'legacy name'",
    ] {
        raw(&db, keeps_working)
            .await
            .map_err(|e| anyhow::anyhow!("{keeps_working}: {e}"))?;
    }
    let to_bad = "UPDATE tasks SET name = 'legacy name 2' WHERE name = 'legacy name'";
    assert!(
        raw(&db, to_bad).await.is_err(),
        "renaming to another bad name"
    );
    raw(
        &db,
        "UPDATE tasks SET name = 'legacy-name' WHERE name = 'legacy name'",
    )
    .await
    .map_err(anyhow::Error::msg)?;
    db.cleanup().await;
    Ok(())
}

#[tokio::test]
async fn sqlite_schema_refuses_new_task_names_outside_the_character_set() -> Result<()> {
    schema_refuses_new_task_names_outside_the_character_set(mthpt_engine::testing::sqlite().await)
        .await
}

#[tokio::test]
async fn postgres_schema_refuses_new_task_names_outside_the_character_set() -> Result<()> {
    schema_refuses_new_task_names_outside_the_character_set(mthpt_engine::testing::postgres().await)
        .await
}

#[tokio::test]
async fn sqlite_schema_refuses_names_outside_the_character_set() -> Result<()> {
    schema_refuses_names_outside_the_character_set(mthpt_engine::testing::sqlite().await).await
}

#[tokio::test]
async fn postgres_schema_refuses_names_outside_the_character_set() -> Result<()> {
    schema_refuses_names_outside_the_character_set(mthpt_engine::testing::postgres().await).await
}

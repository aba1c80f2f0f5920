//! `mthpt migrate` against a fresh SQLite file and a fresh PostgreSQL schema, twice each.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use sqlx::Connection;

fn mthpt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mthpt"))
        .args(args)
        .env_remove("MTHPT_DATABASE_URL")
        .output()
        .expect("run mthpt")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The newest migration's number (the migration folders of both backends carry the same ones).
fn latest_version() -> u32 {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations/sqlite");
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.get(..4)?.parse().ok())
        .max()
        .unwrap()
}

fn assert_migrates_twice(url: &str) {
    let latest = latest_version();
    let first = mthpt(&["migrate", "--database-url", url]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let out = text(&first.stdout);
    assert!(out.contains("applied 0001 initial"), "{out}");
    assert!(out.contains("applied 0003 console sessions"), "{out}");
    assert!(
        out.contains(&format!("schema is at version {latest}")),
        "{out}"
    );

    let second = mthpt(&["migrate", "--database-url", url]);
    assert!(second.status.success(), "{}", text(&second.stderr));
    let out = text(&second.stdout);
    assert!(
        out.contains(&format!("up to date at version {latest}")),
        "{out}"
    );
    assert!(!out.contains("applied"), "{out}");
}

#[test]
fn migrate_creates_a_fresh_sqlite_file_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    assert!(!path.exists());
    assert_migrates_twice(&format!("sqlite://{}", path.display()));
    assert!(path.exists());
}

#[tokio::test]
async fn migrate_applies_to_postgres_and_is_idempotent() {
    let base = mthpt_engine::testing::postgres_url();
    let mut admin = sqlx::PgConnection::connect(&base)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is unreachable at {base}: {e}"));
    let schema = format!("mthpt_cli_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut admin)
        .await
        .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
    let result = std::panic::catch_unwind(|| assert_migrates_twice(&url));
    let (tables,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'runs'",
    )
    .bind(&schema)
    .fetch_one(&mut admin)
    .await
    .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&mut admin)
        .await
        .unwrap();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    assert_eq!(tables, 1, "the runs table exists in the migrated schema");
}

#[test]
fn migrate_reports_an_unreachable_or_unknown_database() {
    let refused = mthpt(&[
        "migrate",
        "--database-url",
        "postgres://u:secret@127.0.0.1:1/x",
    ]);
    assert_eq!(refused.status.code(), Some(1));
    let err = text(&refused.stderr);
    assert!(err.contains("cannot connect to PostgreSQL"), "{err}");
    assert!(
        !err.contains("secret"),
        "the password is never printed: {err}"
    );

    let unknown = mthpt(&["migrate", "--database-url", "mysql://x"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(text(&unknown.stderr).contains("not a database URL"));
}

/// Output read by a reader that goes away (`mthpt … | head -1`): the command ends quietly with
/// status 141, not with a panic.
#[test]
fn output_to_a_closed_pipe_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("piped.db").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_mthpt"))
        .args(["migrate", "--database-url", &url])
        .env_remove("MTHPT_DATABASE_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run mthpt");
    // The reader is gone before anything is printed.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    // Quietly, with the status a shell gives a process a closed pipe ended.
    assert_eq!(out.status.code(), Some(141), "{}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

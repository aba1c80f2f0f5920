//! `mthpt task …` against a running API: applying `examples/tasks.toml` twice changes nothing
//! the second time; trigger, pause, resume, list and runs work by task name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::app::NewApp;
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::store::Backend;
use mthpt_engine::tenant::Role;

/// Runs `mthpt task --url … --token … --tenant demo ARGS` and returns (exit code, stdout, stderr).
async fn mthpt_task(app: &TestApp, token: &str, args: &[&str]) -> (i32, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mthpt"));
    cmd.arg("task")
        .args(["--url", &app.base_url, "--tenant", "demo"])
        .args(args)
        // No CLI config file: the token comes from the environment only.
        .env("HOME", "/nonexistent-home")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("MTHPT_CLI_CONFIG")
        .env_remove("MTHPT_URL")
        .env_remove("MTHPT_TENANT")
        .env_remove("MTHPT_TOKEN")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    if !token.is_empty() {
        cmd.env("MTHPT_TOKEN", token);
    }
    let out = cmd.output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn applying_the_example_twice_changes_nothing(backend: Backend) {
    let app = spawn_app(backend).await;
    let demo = app.tenant("demo").await;
    let mut tx = app.store().begin().await.unwrap();
    tx.create_app(
        demo.id,
        &NewApp {
            name: "demo".into(),
            secret: "0123456789abcdef-secret".into(),
        },
        SystemClock.now_ms(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let (_, token) = app.user(Some(&demo), "ada", Role::TenantAdmin).await;
    let file = ["apply", "-f", "examples/tasks.toml"];

    // Without a token the console refuses, and the command says where a token comes from.
    let (code, _, err) = mthpt_task(&app, "", &["list"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--token"), "{err}");

    let (code, out, err) = mthpt_task(&app, &token, &[&file[..], &["--dry-run"]].concat()).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("+ create task greet-office-hours"), "{out}");
    assert!(out.contains("(dry run: nothing changed)"), "{out}");
    let (code, out, err) = mthpt_task(&app, &token, &file).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("4 created, 0 updated, 0 unchanged, 0 deleted"),
        "{out}"
    );
    let (code, out, err) = mthpt_task(&app, &token, &file).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "no changes (4 unchanged)\n");

    let (code, out, err) = mthpt_task(
        &app,
        &token,
        &["trigger", "report-orders", "--params", "{\"day\":1}"],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("run "), "{out}");
    let (_, out, _) = mthpt_task(&app, &token, &["pause", "extract-orders"]).await;
    assert_eq!(out, "task extract-orders is paused\n");
    let (_, out, _) = mthpt_task(&app, &token, &["list"]).await;
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(
        out.contains("extract-orders") && out.contains("paused"),
        "{out}"
    );
    // A paused task differs from the file: applying again resumes it.
    let (_, out, _) = mthpt_task(&app, &token, &file).await;
    assert!(
        out.contains("~ update task extract-orders (paused)"),
        "{out}"
    );
    let (_, out, _) = mthpt_task(&app, &token, &["runs", "report-orders"]).await;
    assert!(out.contains("manual"), "{out}");
    let (code, out, _) = mthpt_task(&app, &token, &["get", "report-orders"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("\"handler\": \"report\""), "{out}");
    let (code, _, err) = mthpt_task(&app, &token, &["pause", "no-such-task"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("no task named \"no-such-task\""), "{err}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applying_the_example_twice_changes_nothing_sqlite() {
    applying_the_example_twice_changes_nothing(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applying_the_example_twice_changes_nothing_postgres() {
    applying_the_example_twice_changes_nothing(Backend::Postgres).await;
}

/// A task file naming a task outside the character set is refused, and the command names the
/// entry's field.
#[tokio::test]
async fn applying_a_file_with_a_bad_task_name_names_the_field() {
    let app = spawn_app(Backend::Sqlite).await;
    let demo = app.tenant("demo").await;
    let mut tx = app.store().begin().await.unwrap();
    tx.create_app(
        demo.id,
        &NewApp {
            name: "demo".into(),
            secret: "0123456789abcdef-secret".into(),
        },
        SystemClock.now_ms(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let (_, token) = app.user(Some(&demo), "ada", Role::TenantAdmin).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.toml");
    std::fs::write(
        &path,
        "[[tasks]]\nname = \"fine\"\napp = \"demo\"\nhandler = \"h\"\nschedule = { kind = \"manual\" }\n\n\
         [[tasks]]\nname = \"nightly report\"\napp = \"demo\"\nhandler = \"h\"\nschedule = { kind = \"manual\" }\n",
    )
    .unwrap();
    let (code, out, err) = mthpt_task(&app, &token, &["apply", "-f", path.to_str().unwrap()]).await;
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("tasks[1].name"), "{err}");
    assert!(err.contains("nightly report"), "{err}");
    let mut tx = app.store().begin_read().await.unwrap();
    assert_eq!(
        tx.find_task_by_name(demo.id, "fine").await.unwrap(),
        None,
        "nothing applied"
    );
    drop(tx);
    app.stop().await;
}

/// The example service's task file (docs/wrapper.md) applies to the demo tenant once its app
/// `shop` exists, and a second time changes nothing.
#[tokio::test]
async fn the_example_service_task_file_applies_once() {
    let app = spawn_app(Backend::Sqlite).await;
    let demo = app.tenant("demo").await;
    let mut tx = app.store().begin().await.unwrap();
    tx.create_app(
        demo.id,
        &NewApp {
            name: "shop".into(),
            secret: "0123456789abcdef-secret".into(),
        },
        SystemClock.now_ms(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let (_, token) = app.user(Some(&demo), "ada", Role::TenantAdmin).await;
    let file = ["apply", "-f", "examples/business-service/tasks.toml"];
    let (code, out, err) = mthpt_task(&app, &token, &file).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("2 created, 0 updated, 0 unchanged, 0 deleted"),
        "{out}"
    );
    let (code, out, err) = mthpt_task(&app, &token, &file).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "no changes (2 unchanged)\n");
    app.stop().await;
}

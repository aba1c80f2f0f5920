//! What a task, a schedule or a task file is checked for before anything is written: crons that
//! never fire, every error of a schedule at once, dependency cycles refused by a dry run exactly
//! as by the apply, and dependencies listed twice — on both backends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::TestApp;
use reqwest::Method;
use serde_json::{Value, json};

use super::api_tasks::{create, cron_task, json, manual_task, problem, tenant_with_app};

mthpt_engine::on_both_backends!(
    with mthpt_console::testing::spawn_app;
    crons_that_never_fire_are_refused_naming_the_expression,
    every_error_of_a_schedule_is_reported_at_once,
    a_dry_run_refuses_a_dependency_cycle_exactly_as_the_apply_does,
    dependencies_listed_twice_are_refused_naming_the_entry,
);

/// The fields a 422 names, in order.
fn fields(problem: &Value) -> Vec<&str> {
    problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect()
}

fn with_cron(name: &str, expr: &str, timezone: &str) -> Value {
    let mut task = cron_task(name);
    task["schedule"] = json!({ "kind": "cron", "expr": expr, "timezone": timezone });
    task
}

async fn post(app: &TestApp, path: &str, body: &Value) -> reqwest::Response {
    app.op(Method::POST, path).json(body).send().await.unwrap()
}

async fn task_names(app: &TestApp) -> Vec<String> {
    let page = json(
        app.op(Method::GET, "/api/v1/tenants/acme/tasks")
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn crons_that_never_fire_are_refused_naming_the_expression(app: TestApp) {
    tenant_with_app(&app, "acme").await;
    // February 31st, and February 30th in a zone of its own.
    for (expr, tz) in [("0 0 0 31 2 ?", "UTC"), ("0 0 0 30 2 ?", "Asia/Shanghai")] {
        let p = problem(
            post(
                &app,
                "/api/v1/tenants/acme/tasks",
                &with_cron("feb", expr, tz),
            )
            .await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(fields(&p), ["schedule.expr"], "{p}");
        assert!(
            p["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("never fires"),
            "{p}"
        );

        let p = problem(
            post(
                &app,
                "/api/v1/tenants/acme/schedule-preview",
                &json!({ "schedule": { "kind": "cron", "expr": expr, "timezone": tz } }),
            )
            .await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(fields(&p), ["schedule.expr"], "{p}");

        let file = json!({ "tasks": [manual_task("ok"), with_cron("feb", expr, tz)] });
        let p = problem(
            post(&app, "/api/v1/tenants/acme/tasks/apply?dry_run=true", &file).await,
            422,
            "validation_failed",
        )
        .await;
        assert_eq!(fields(&p), ["tasks[1].schedule.expr"], "{p}");
    }
    // An edit to a never-firing cron is refused the same way.
    let task = create(&app, "acme", &cron_task("report")).await;
    let mut edited = task.clone();
    edited["schedule"]["expr"] = json!("0 0 0 31 2 ?");
    let res = app
        .op(
            Method::PUT,
            &format!("/api/v1/tenants/acme/tasks/{}", task["id"]),
        )
        .header("If-Match", "\"1\"")
        .json(&edited)
        .send()
        .await
        .unwrap();
    assert_eq!(
        fields(&problem(res, 422, "validation_failed").await),
        ["schedule.expr"]
    );
    // Leap days do fire.
    create(&app, "acme", &with_cron("leap", "0 0 0 29 2 ?", "UTC")).await;
    assert_eq!(task_names(&app).await, ["report", "leap"]);
    app.stop().await;
}

async fn every_error_of_a_schedule_is_reported_at_once(app: TestApp) {
    tenant_with_app(&app, "acme").await;
    let bad = with_cron("report", "0 0 25 * * ?", "Mars/Olympus");
    let p = problem(
        post(&app, "/api/v1/tenants/acme/tasks", &bad).await,
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(fields(&p), ["schedule.expr", "schedule.timezone"], "{p}");

    // Beside the other wrong fields of the task.
    let mut worse = bad.clone();
    worse["name"] = json!("no spaces allowed");
    worse["app"] = json!("nope");
    let p = problem(
        post(&app, "/api/v1/tenants/acme/tasks", &worse).await,
        422,
        "validation_failed",
    )
    .await;
    let mut got = fields(&p);
    got.sort_unstable();
    assert_eq!(got, ["app", "schedule.expr", "schedule.timezone"], "{p}");
    let mut other = bad.clone();
    other["app"] = json!("billing");
    other["name"] = json!("no spaces allowed");
    let p = problem(
        post(&app, "/api/v1/tenants/acme/tasks", &other).await,
        422,
        "validation_failed",
    )
    .await;
    let mut got = fields(&p);
    got.sort_unstable();
    assert_eq!(got, ["name", "schedule.expr", "schedule.timezone"], "{p}");

    let p = problem(
        post(
            &app,
            "/api/v1/tenants/acme/schedule-preview",
            &json!({ "schedule": bad["schedule"] }),
        )
        .await,
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(fields(&p), ["schedule.expr", "schedule.timezone"], "{p}");

    let file = json!({ "tasks": [manual_task("ok"), bad] });
    let p = problem(
        post(&app, "/api/v1/tenants/acme/tasks/apply", &file).await,
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(
        fields(&p),
        ["tasks[1].schedule.expr", "tasks[1].schedule.timezone"],
        "{p}"
    );
    assert!(task_names(&app).await.is_empty());
    app.stop().await;
}

/// The problem an apply of `file` answers, with and without `dry_run` (with the request id
/// left out): they must be the same.
async fn refusal_of(app: &TestApp, file: &Value, status: u16, code: &str) -> Value {
    let mut answers = Vec::new();
    for query in [
        "?dry_run=true",
        "",
        "?dry_run=true&prune=true",
        "?prune=true",
    ] {
        let path = format!("/api/v1/tenants/acme/tasks/apply{query}");
        let mut p = problem(post(app, &path, file).await, status, code).await;
        p.as_object_mut().unwrap().remove("instance");
        answers.push(p);
    }
    for p in &answers[1..] {
        assert_eq!(p, &answers[0], "a dry run refuses what the apply refuses");
    }
    answers.swap_remove(0)
}

async fn a_dry_run_refuses_a_dependency_cycle_exactly_as_the_apply_does(app: TestApp) {
    tenant_with_app(&app, "acme").await;
    let tasks = json!([
        manual_task("extract"),
        manual_task("transform"),
        manual_task("load")
    ]);

    // A cycle within the file.
    let file = json!({ "tasks": tasks, "dependencies": [
        { "parent": "extract", "child": "transform" },
        { "parent": "transform", "child": "load" },
        { "parent": "load", "child": "extract" },
    ] });
    let p = refusal_of(&app, &file, 409, "cycle").await;
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("extract → transform → load → extract"),
        "{p}"
    );
    assert!(task_names(&app).await.is_empty(), "nothing was applied");

    // A task depending on itself.
    let file = json!({ "tasks": tasks, "dependencies": [{ "parent": "load", "child": "load" }] });
    let p = refusal_of(&app, &file, 409, "cycle").await;
    assert!(p["detail"].as_str().unwrap().contains("itself"), "{p}");

    // A cycle closed with a dependency the tenant already has.
    let chain = json!({ "tasks": tasks, "dependencies": [
        { "parent": "extract", "child": "transform" },
        { "parent": "transform", "child": "load" },
    ] });
    json(
        post(&app, "/api/v1/tenants/acme/tasks/apply", &chain).await,
        200,
    )
    .await;
    let closing =
        json!({ "tasks": [], "dependencies": [{ "parent": "load", "child": "extract" }] });
    let mut answers = Vec::new();
    for query in ["?dry_run=true", ""] {
        let path = format!("/api/v1/tenants/acme/tasks/apply{query}");
        let mut p = problem(post(&app, &path, &closing).await, 409, "cycle").await;
        p.as_object_mut().unwrap().remove("instance");
        answers.push(p);
    }
    assert_eq!(answers[0], answers[1]);
    // With prune, the file drops the old chain, so the same dependency closes no cycle.
    let pruned =
        json!({ "tasks": tasks, "dependencies": [{ "parent": "load", "child": "extract" }] });
    let plan = json(
        post(
            &app,
            "/api/v1/tenants/acme/tasks/apply?prune=true&dry_run=true",
            &pruned,
        )
        .await,
        200,
    )
    .await;
    assert_eq!(plan["applied"], false);
    json(
        post(&app, "/api/v1/tenants/acme/tasks/apply?prune=true", &pruned).await,
        200,
    )
    .await;
    let deps = json(
        app.op(Method::GET, "/api/v1/tenants/acme/dependencies")
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(deps.as_array().map(Vec::len), Some(1), "{deps}");
    app.stop().await;
}

async fn dependencies_listed_twice_are_refused_naming_the_entry(app: TestApp) {
    tenant_with_app(&app, "acme").await;
    let file = json!({
        "tasks": [manual_task("extract"), manual_task("load")],
        "dependencies": [
            { "parent": "extract", "child": "load" },
            { "parent": "extract", "child": "load", "condition": "always" },
        ],
    });
    let p = refusal_of(&app, &file, 422, "validation_failed").await;
    assert_eq!(fields(&p), ["dependencies[1].parent"], "{p}");
    assert!(
        p["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("dependencies[0]"),
        "{p}"
    );
    assert!(task_names(&app).await.is_empty(), "nothing was applied");
    app.stop().await;
}

//! What a task, a schedule or a task file is checked for before anything is written: crons that
//! never fire, and every error of a schedule at once — on both backends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::TestApp;
use reqwest::Method;
use serde_json::{Value, json};

use super::api_tasks::{create, cron_task, json, manual_task, problem, tenant_with_app};

mthpt_engine::on_both_backends!(
    with mthpt_console::testing::spawn_app;
    crons_that_never_fire_are_refused_naming_the_expression,
    every_error_of_a_schedule_is_reported_at_once,
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

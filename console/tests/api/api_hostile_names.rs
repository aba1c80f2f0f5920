//! Hostile input through the API, on both backends: a tenant's allow-list of executor hosts
//! (set by operators only, read by the tenant's users, bad entries refused naming the entry),
//! and task names outside the documented character set (refused naming the field `name`, in a
//! task file `tasks[i].name`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::app::NewApp;
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::store::Backend;
use mthpt_engine::tenant::Role;
use reqwest::Method;
use serde_json::{Value, json};

async fn answer(res: reqwest::Response) -> (u16, Value) {
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// The fields a 422 names.
fn fields(body: &Value) -> Vec<String> {
    body["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["field"].as_str().map(str::to_owned))
        .collect()
}

async fn executor_hosts_are_set_by_operators_and_read_by_the_tenant(app: TestApp) {
    let acme = app.tenant("acme").await;
    let (_, admin) = app.user(Some(&acme), "ada", Role::TenantAdmin).await;

    let (status, created) = answer(
        app.op(Method::POST, "/api/v1/tenants")
            .json(&json!({ "name": "globex", "executor_hosts": ["Jobs-1.Internal", "[::1]"] }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["executor_hosts"], json!(["jobs-1.internal", "::1"]));

    let (status, fresh) = answer(
        app.op(Method::GET, "/api/v1/tenants/acme")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(fresh["executor_hosts"], json!([]), "default: any host");

    let (status, set) = answer(
        app.op(Method::PATCH, "/api/v1/tenants/acme")
            .json(&json!({ "executor_hosts": ["10.0.0.5", "*.Jobs.Example.com", "10.0.0.5"] }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(
        set["executor_hosts"],
        json!(["10.0.0.5", "*.jobs.example.com"])
    );

    // The tenant's admin reads it, but cannot change it.
    let (status, read) = answer(
        app.request(Method::GET, "/api/v1/tenants/acme", &admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(read["executor_hosts"], set["executor_hosts"]);
    let (status, refused) = answer(
        app.request(Method::PATCH, "/api/v1/tenants/acme", &admin)
            .json(&json!({ "executor_hosts": [] }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, refused["code"].as_str()), (403, Some("forbidden")));

    // A wrong entry is 422 naming it; nothing changes.
    for (bad, field) in [
        (json!(["10.0.0.5", "http://jobs:8080"]), "executor_hosts[1]"),
        (json!(["jobs example"]), "executor_hosts[0]"),
        (json!(["a.*.example.com"]), "executor_hosts[0]"),
    ] {
        let (status, body) = answer(
            app.op(Method::PATCH, "/api/v1/tenants/acme")
                .json(&json!({ "executor_hosts": bad }))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(fields(&body), [field], "{body}");
    }
    let (status, body) = answer(
        app.op(Method::POST, "/api/v1/tenants")
            .json(&json!({ "name": "initech", "executor_hosts": ["*"] }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, fields(&body)),
        (422, vec!["executor_hosts[0]".to_owned()])
    );
    let (_, still) = answer(
        app.op(Method::GET, "/api/v1/tenants/acme")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(still["executor_hosts"], set["executor_hosts"]);

    // An empty list allows any host again.
    let (status, cleared) = answer(
        app.op(Method::PATCH, "/api/v1/tenants/acme")
            .json(&json!({ "executor_hosts": [] }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, &cleared["executor_hosts"]), (200, &json!([])));
    app.stop().await;
}

async fn task_names_outside_the_character_set_are_refused(app: TestApp) {
    let acme = app.tenant("acme").await;
    {
        let mut tx = app.store().begin().await.unwrap();
        tx.create_app(
            acme.id,
            &NewApp {
                name: "shop".into(),
                secret: "0123456789abcdef-secret".into(),
            },
            SystemClock.now_ms(),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
    let task = |name: &str| json!({ "name": name, "app": "shop", "handler": "report", "schedule": { "kind": "manual" } });
    let mut ids = Vec::new();
    for ok in ["nightly-report", "Billing.sync_v2"] {
        let (status, body) = answer(
            app.op(Method::POST, "/api/v1/tenants/acme/tasks")
                .json(&task(ok))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201, "{ok}: {body}");
        ids.push(body["id"].as_i64().unwrap());
    }
    let long = "a".repeat(101);
    for bad in ["nightly report", "-x", "a/b", "tâche", "", long.as_str()] {
        let (status, body) = answer(
            app.op(Method::POST, "/api/v1/tenants/acme/tasks")
                .json(&task(bad))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, fields(&body)),
            (422, vec!["name".to_owned()]),
            "{bad:?}: {body}"
        );
    }
    // Renaming an existing task to a bad name is refused the same way.
    let (status, body) = answer(
        app.op(
            Method::PUT,
            &format!("/api/v1/tenants/acme/tasks/{}", ids[0]),
        )
        .header("If-Match", "\"1\"")
        .json(&task("nightly report"))
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        (status, fields(&body)),
        (422, vec!["name".to_owned()]),
        "{body}"
    );
    // A NUL character (which PostgreSQL cannot store) is refused naming the field, not a 500.
    let (status, body) = answer(
        app.op(Method::POST, "/api/v1/tokens")
            .json(&json!({ "name": "ci\u{0}token" }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, fields(&body)),
        (422, vec!["name".to_owned()]),
        "{body}"
    );
    // In a task file, the entry is named.
    let (status, body) = answer(
        app.op(Method::POST, "/api/v1/tenants/acme/tasks/apply")
            .json(&json!({ "tasks": [task("fine"), task("not fine")] }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, fields(&body)),
        (422, vec!["tasks[1].name".to_owned()]),
        "{body}"
    );
    app.stop().await;
}

#[tokio::test]
async fn executor_hosts_are_set_by_operators_and_read_by_the_tenant_postgres() {
    executor_hosts_are_set_by_operators_and_read_by_the_tenant(spawn_app(Backend::Postgres).await)
        .await;
}

#[tokio::test]
async fn executor_hosts_are_set_by_operators_and_read_by_the_tenant_sqlite() {
    executor_hosts_are_set_by_operators_and_read_by_the_tenant(spawn_app(Backend::Sqlite).await)
        .await;
}

#[tokio::test]
async fn task_names_outside_the_character_set_are_refused_postgres() {
    task_names_outside_the_character_set_are_refused(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn task_names_outside_the_character_set_are_refused_sqlite() {
    task_names_outside_the_character_set_are_refused(spawn_app(Backend::Sqlite).await).await;
}

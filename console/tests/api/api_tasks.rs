//! Tasks, schedule previews, dependencies, runs, alarms, audit, statistics, bulk actions and
//! task files over the REST API, on both backends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::TestApp;
use mthpt_engine::alarm::{AlarmKind, NewAlarm, Severity};
use mthpt_engine::app::NewApp;
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::tenant::{Role, Tenant};
use reqwest::Method;
use serde_json::{Value, json};

mthpt_engine::on_both_backends!(
    with mthpt_console::testing::spawn_app;
    tasks_are_created_read_updated_with_versions_and_deleted,
    schedules_are_previewed_with_descriptions,
    triggers_honour_idempotency_keys_and_runs_page_and_cancel,
    concurrent_triggers_with_one_key_create_one_run,
    dependencies_refuse_a_cycle_naming_it,
    alarms_are_listed_acknowledged_once_and_muted,
    other_tenants_and_viewers_change_nothing,
    bulk_stats_and_task_files_work,
    params_with_a_nul_or_beyond_256_kib_are_refused_naming_params,
);

pub(crate) async fn problem(res: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(res.status().as_u16(), status, "{}", res.url());
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["code"], code, "{body}");
    body
}

pub(crate) async fn json(res: reqwest::Response, status: u16) -> Value {
    let url = res.url().to_string();
    assert_eq!(res.status().as_u16(), status, "{url}");
    res.json().await.unwrap()
}

/// A tenant `name` with an app `billing`.
pub(crate) async fn tenant_with_app(app: &TestApp, name: &str) -> Tenant {
    let tenant = app.tenant(name).await;
    let mut tx = app.store().begin().await.unwrap();
    tx.create_app(
        tenant.id,
        &NewApp {
            name: "billing".into(),
            secret: "0123456789abcdef-secret".into(),
        },
        SystemClock.now_ms(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    tenant
}

pub(crate) fn cron_task(name: &str) -> Value {
    json!({
        "name": name,
        "app": "billing",
        "handler": "report",
        "schedule": { "kind": "cron", "expr": "0 15 10 ? * MON-FRI", "timezone": "Asia/Shanghai" },
    })
}

pub(crate) fn manual_task(name: &str) -> Value {
    json!({ "name": name, "app": "billing", "handler": "noop", "schedule": { "kind": "manual" } })
}

pub(crate) async fn create(app: &TestApp, tenant: &str, body: &Value) -> Value {
    let res = app
        .op(Method::POST, &format!("/api/v1/tenants/{tenant}/tasks"))
        .json(body)
        .send()
        .await
        .unwrap();
    json(res, 201).await
}

async fn audit_actions(app: &TestApp, tenant: &str) -> Vec<String> {
    let page = json(
        app.op(Method::GET, &format!("/api/v1/tenants/{tenant}/audit"))
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
        .map(|e| e["action"].as_str().unwrap().to_owned())
        .collect()
}

async fn tasks_are_created_read_updated_with_versions_and_deleted(app: TestApp) {
    tenant_with_app(&app, "acme").await;
    let res = app
        .op(Method::POST, "/api/v1/tenants/acme/tasks")
        .json(&cron_task("report"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    assert_eq!(res.headers()["etag"], "\"1\"");
    let task: Value = res.json().await.unwrap();
    let id = task["id"].as_i64().unwrap();
    assert_eq!(task["app"], "billing");
    assert_eq!(
        task["misfire_policy"], "fire_once_now",
        "defaults are spelled out"
    );
    assert_eq!(task["fires_scheduled"], 1, "first occurrence materialised");

    // Validation errors name the field.
    let mut bad = cron_task("broken");
    bad["schedule"]["expr"] = json!("0 0 12 * * *");
    let body = problem(
        app.op(Method::POST, "/api/v1/tenants/acme/tasks")
            .json(&bad)
            .send()
            .await
            .unwrap(),
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(body["errors"][0]["field"], "schedule.expr");
    let mut no_app = cron_task("orphan");
    no_app["app"] = json!("nope");
    let body = problem(
        app.op(Method::POST, "/api/v1/tenants/acme/tasks")
            .json(&no_app)
            .send()
            .await
            .unwrap(),
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(body["errors"][0]["field"], "app");
    problem(
        app.op(Method::POST, "/api/v1/tenants/acme/tasks")
            .json(&cron_task("report"))
            .send()
            .await
            .unwrap(),
        409,
        "conflict",
    )
    .await;

    let path = format!("/api/v1/tenants/acme/tasks/{id}");
    let got = json(app.op(Method::GET, &path).send().await.unwrap(), 200).await;
    assert_eq!(got["schedule"]["expr"], "0 15 10 ? * MON-FRI");
    let list = json(
        app.op(Method::GET, "/api/v1/tenants/acme/tasks")
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    // Optimistic locking: no version → 428, a stale one → 412 and nothing written.
    let mut edit = cron_task("report");
    edit["max_retries"] = json!(3);
    problem(
        app.op(Method::PUT, &path).json(&edit).send().await.unwrap(),
        428,
        "precondition_required",
    )
    .await;
    let updated = app
        .op(Method::PUT, &path)
        .header("If-Match", "\"1\"")
        .json(&edit)
        .send()
        .await
        .unwrap();
    assert_eq!(updated.headers()["etag"], "\"2\"");
    assert_eq!(json(updated, 200).await["max_retries"], 3);
    edit["max_retries"] = json!(5);
    problem(
        app.op(Method::PUT, &path)
            .header("If-Match", "\"1\"")
            .json(&edit)
            .send()
            .await
            .unwrap(),
        412,
        "version_conflict",
    )
    .await;
    assert_eq!(
        json(app.op(Method::GET, &path).send().await.unwrap(), 200).await["max_retries"],
        3
    );

    // A task as read, edited and sent back: read-only fields are ignored, `version` counts.
    let mut read_back = json(app.op(Method::GET, &path).send().await.unwrap(), 200).await;
    read_back["max_retries"] = json!(4);
    let res = app
        .op(Method::PUT, &path)
        .json(&read_back)
        .send()
        .await
        .unwrap();
    assert_eq!(json(res, 200).await["version"], 3);
    problem(
        app.op(Method::PUT, &path)
            .json(&read_back)
            .send()
            .await
            .unwrap(),
        412,
        "version_conflict",
    )
    .await;

    let paused = json(
        app.op(Method::POST, &format!("{path}/pause"))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(paused["paused"], true);
    let resumed = json(
        app.op(Method::POST, &format!("{path}/resume"))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(resumed["paused"], false);
    problem(
        app.op(Method::DELETE, &path)
            .header("If-Match", "\"2\"")
            .send()
            .await
            .unwrap(),
        412,
        "version_conflict",
    )
    .await;
    assert_eq!(
        app.op(Method::DELETE, &path).send().await.unwrap().status(),
        204
    );
    problem(
        app.op(Method::GET, &path).send().await.unwrap(),
        404,
        "not_found",
    )
    .await;
    problem(
        app.op(Method::GET, "/api/v1/tenants/acme/tasks/999999")
            .send()
            .await
            .unwrap(),
        404,
        "not_found",
    )
    .await;

    assert_eq!(
        audit_actions(&app, "acme").await,
        [
            "task.delete",
            "task.resume",
            "task.pause",
            "task.update",
            "task.update",
            "task.create"
        ]
    );
    let spec = json(
        app.client
            .get(app.url("/api/v1/openapi.json"))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    for path in [
        "/api/v1/tenants/{tenant}/tasks/{id}",
        "/api/v1/tenants/{tenant}/tasks/{id}/trigger",
        "/api/v1/tenants/{tenant}/schedule-preview",
        "/api/v1/tenants/{tenant}/runs",
        "/api/v1/tenants/{tenant}/alarms/{id}/ack",
        "/api/v1/tenants/{tenant}/stats",
        "/api/v1/tenants/{tenant}/tasks/apply",
    ] {
        assert!(spec["paths"][path].is_object(), "{path} documented");
    }
    app.stop().await;
}

async fn schedules_are_previewed_with_descriptions(app: TestApp) {
    tenant_with_app(&app, "acme").await;
    let preview = json(
        app.op(Method::POST, "/api/v1/tenants/acme/schedule-preview")
            .json(&json!({
                "schedule": { "kind": "cron", "expr": "0 15 10 ? * MON-FRI", "timezone": "Asia/Shanghai" },
                "count": 3,
                "after": "2026-06-05T00:00:00Z",
            }))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(preview["timezone"], "Asia/Shanghai");
    assert_eq!(
        preview["fire_times"],
        json!([
            "2026-06-05T10:15:00+08:00",
            "2026-06-08T10:15:00+08:00",
            "2026-06-09T10:15:00+08:00"
        ])
    );
    assert_eq!(
        preview["description"]["en"],
        "At 10:15:00, Monday through Friday (Asia/Shanghai)"
    );
    assert_eq!(
        preview["description"]["zh-CN"],
        "周一至周五 10:15:00（Asia/Shanghai 时间）"
    );

    // A one-shot time already past fires at once when the task is created: it is listed.
    let past = json(
        app.op(Method::POST, "/api/v1/tenants/acme/schedule-preview")
            .json(&json!({ "schedule": { "kind": "once", "at": "2020-01-01T00:00:00Z" } }))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(
        past["fire_times"],
        json!(["2020-01-01T00:00:00Z"]),
        "{past}"
    );

    let task = create(&app, "acme", &json!({
        "name": "tick", "app": "billing", "handler": "noop",
        "schedule": { "kind": "fixed_rate", "every_ms": 5000, "anchor_at": "2026-06-01T00:00:00Z" },
    }))
    .await;
    let of_task = json(
        app.op(Method::POST, "/api/v1/tenants/acme/schedule-preview")
            .json(&json!({ "task_id": task["id"], "count": 2, "after": "2026-06-01T00:00:00Z" }))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(
        of_task["fire_times"],
        json!(["2026-06-01T00:00:05Z", "2026-06-01T00:00:10Z"])
    );
    assert_eq!(of_task["description"]["en"], "Every 5 seconds");
    let body = problem(
        app.op(Method::POST, "/api/v1/tenants/acme/schedule-preview")
            .json(&json!({ "schedule": { "kind": "cron", "expr": "0 0 12 * *" } }))
            .send()
            .await
            .unwrap(),
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(body["errors"][0]["field"], "schedule.expr");
    let body = problem(
        app.op(Method::POST, "/api/v1/tenants/acme/schedule-preview")
            .json(&json!({ "schedule": { "kind": "manual" }, "count": 1000 }))
            .send()
            .await
            .unwrap(),
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(body["errors"][0]["field"], "count");
    app.stop().await;
}

async fn triggers_honour_idempotency_keys_and_runs_page_and_cancel(app: TestApp) {
    tenant_with_app(&app, "acme").await;
    let task = create(&app, "acme", &manual_task("job")).await;
    let trigger = format!("/api/v1/tenants/acme/tasks/{}/trigger", task["id"]);

    let first = app
        .op(Method::POST, &trigger)
        .header("Idempotency-Key", "req-1")
        .json(&json!({ "params": { "n": 1 } }))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    assert_eq!(
        (first["trigger"].as_str(), first["params"]["n"].as_i64()),
        (Some("manual"), Some(1))
    );
    let again = app
        .op(Method::POST, &trigger)
        .header("Idempotency-Key", "req-1")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<Value>().await.unwrap()["id"], first["id"]);
    let mut ids = vec![first["id"].as_i64().unwrap()];
    for _ in 0..4 {
        ids.push(
            json(app.op(Method::POST, &trigger).send().await.unwrap(), 201).await["id"]
                .as_i64()
                .unwrap(),
        );
    }
    problem(
        app.op(Method::POST, &trigger)
            .header("content-type", "application/json")
            .body("{\"parms\": 1}")
            .send()
            .await
            .unwrap(),
        422,
        "validation_failed",
    )
    .await;

    // Pages of 2, newest first; a run triggered between pages does not shift them.
    let page1 = json(
        app.op(
            Method::GET,
            "/api/v1/tenants/acme/runs?trigger=manual&limit=2",
        )
        .send()
        .await
        .unwrap(),
        200,
    )
    .await;
    let got: Vec<i64> = page1["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(got, [ids[4], ids[3]]);
    json(app.op(Method::POST, &trigger).send().await.unwrap(), 201).await;
    let cursor = page1["next_cursor"].as_str().unwrap();
    let page2 = json(
        app.op(
            Method::GET,
            &format!("/api/v1/tenants/acme/runs?trigger=manual&limit=2&cursor={cursor}"),
        )
        .send()
        .await
        .unwrap(),
        200,
    )
    .await;
    let got: Vec<i64> = page2["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(got, [ids[2], ids[1]]);
    let body = problem(
        app.op(Method::GET, "/api/v1/tenants/acme/runs?state=exploded")
            .send()
            .await
            .unwrap(),
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(body["errors"][0]["field"], "state");
    problem(
        app.op(Method::GET, "/api/v1/tenants/acme/runs?cursor=zzz")
            .send()
            .await
            .unwrap(),
        422,
        "validation_failed",
    )
    .await;

    let run_path = format!("/api/v1/tenants/acme/runs/{}", ids[0]);
    let detail = json(app.op(Method::GET, &run_path).send().await.unwrap(), 200).await;
    assert_eq!(detail["task_name"], "job");
    assert_eq!(detail["timeline"][0]["event"], "scheduled");
    assert_eq!(detail["attempts"].as_array().unwrap().len(), 1);
    let cancelled = json(
        app.op(Method::POST, &format!("{run_path}/cancel"))
            .json(&json!({ "reason": "not needed" }))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(cancelled["state"], "cancelled");
    problem(
        app.op(Method::POST, &format!("{run_path}/cancel"))
            .send()
            .await
            .unwrap(),
        409,
        "conflict",
    )
    .await;
    let rerun = json(
        app.op(Method::POST, &format!("{run_path}/rerun"))
            .send()
            .await
            .unwrap(),
        201,
    )
    .await;
    assert_eq!(
        rerun["params"]["n"], 1,
        "a re-run keeps the run's parameters"
    );
    problem(
        app.op(Method::GET, "/api/v1/tenants/acme/runs/999999")
            .send()
            .await
            .unwrap(),
        404,
        "not_found",
    )
    .await;
    let actions = audit_actions(&app, "acme").await;
    assert_eq!(
        actions.iter().filter(|a| *a == "task.trigger").count(),
        6,
        "a replay is not a new trigger"
    );
    assert!(
        actions.contains(&"run.cancel".to_owned()) && actions.contains(&"run.rerun".to_owned())
    );
    app.stop().await;
}

async fn concurrent_triggers_with_one_key_create_one_run(app: TestApp) {
    tenant_with_app(&app, "acme").await;
    let task = create(&app, "acme", &manual_task("job")).await;
    let trigger = format!("/api/v1/tenants/acme/tasks/{}/trigger", task["id"]);
    let requests: Vec<_> = (0..6)
        .map(|_| {
            let req = app
                .op(Method::POST, &trigger)
                .header("Idempotency-Key", "deploy-7");
            tokio::spawn(async move { req.send().await.unwrap() })
        })
        .collect();
    let mut ids = Vec::new();
    for r in requests {
        let res = r.await.unwrap();
        assert!(
            matches!(res.status().as_u16(), 200 | 201),
            "{}",
            res.status()
        );
        ids.push(res.json::<Value>().await.unwrap()["id"].as_i64().unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "every request answers the same run: {ids:?}");
    let runs = json(
        app.op(Method::GET, "/api/v1/tenants/acme/runs?trigger=manual")
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(
        runs["items"].as_array().unwrap().len(),
        1,
        "one run was created"
    );
    app.stop().await;
}

async fn dependencies_refuse_a_cycle_naming_it(app: TestApp) {
    tenant_with_app(&app, "acme").await;
    let mut ids = Vec::new();
    for name in ["extract", "transform", "load"] {
        ids.push(
            create(&app, "acme", &manual_task(name)).await["id"]
                .as_i64()
                .unwrap(),
        );
    }
    let add = |parent: i64, child: i64| {
        app.op(Method::POST, "/api/v1/tenants/acme/dependencies")
            .json(&json!({ "parent_task_id": parent, "child_task_id": child }))
            .send()
    };
    assert_eq!(
        json(add(ids[0], ids[1]).await.unwrap(), 201).await["condition"],
        "on_success"
    );
    json(add(ids[1], ids[2]).await.unwrap(), 201).await;
    let body = problem(add(ids[2], ids[0]).await.unwrap(), 409, "cycle").await;
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("extract → transform → load → extract"),
        "{detail}"
    );
    problem(add(ids[0], 999_999).await.unwrap(), 404, "not_found").await;
    let list = json(
        app.op(Method::GET, "/api/v1/tenants/acme/dependencies")
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(list.as_array().unwrap().len(), 2);
    let path = format!("/api/v1/tenants/acme/dependencies/{}/{}", ids[0], ids[1]);
    assert_eq!(
        app.op(Method::DELETE, &path).send().await.unwrap().status(),
        204
    );
    problem(
        app.op(Method::DELETE, &path).send().await.unwrap(),
        404,
        "not_found",
    )
    .await;
    app.stop().await;
}

async fn raise_alarm(app: &TestApp, tenant: &Tenant, task: Option<i64>, severity: Severity) -> i64 {
    let mut alarm = NewAlarm::new(Some(tenant.id), AlarmKind::RunFailed, severity, "it failed");
    alarm.task_id = task.map(mthpt_engine::task::TaskId);
    let mut tx = app.store().begin().await.unwrap();
    let a = tx
        .insert_alarm(&alarm, SystemClock.now_ms())
        .await
        .unwrap()
        .unwrap();
    tx.commit().await.unwrap();
    a.id.0
}

async fn alarms_are_listed_acknowledged_once_and_muted(app: TestApp) {
    let acme = tenant_with_app(&app, "acme").await;
    let task = create(&app, "acme", &manual_task("job")).await["id"]
        .as_i64()
        .unwrap();
    let critical = raise_alarm(&app, &acme, Some(task), Severity::Critical).await;
    let warning = raise_alarm(&app, &acme, None, Severity::Warning).await;
    let (_, ops_token) = app.user(Some(&acme), "olga", Role::TenantOperator).await;

    let ack = |token: String| {
        app.request(
            Method::POST,
            &format!("/api/v1/tenants/acme/alarms/{critical}/ack"),
            &token,
        )
        .send()
    };
    let first = json(ack(ops_token.clone()).await.unwrap(), 200).await;
    assert!(
        first["acknowledged_by"]
            .as_str()
            .unwrap()
            .starts_with("olga")
    );
    let again = json(ack(app.operator_token.clone()).await.unwrap(), 200).await;
    assert_eq!(
        again["acknowledged_by"], first["acknowledged_by"],
        "the first acknowledgement stays"
    );
    assert_eq!(again["acknowledged_at"], first["acknowledged_at"]);

    let list = |q: &str| {
        app.op(Method::GET, &format!("/api/v1/tenants/acme/alarms?{q}"))
            .send()
    };
    let open = json(list("status=open").await.unwrap(), 200).await;
    assert_eq!(open["items"][0]["id"], warning);
    assert_eq!(open["items"].as_array().unwrap().len(), 1);
    let acked = json(
        list("status=acknowledged&severity=critical").await.unwrap(),
        200,
    )
    .await;
    assert_eq!(acked["items"][0]["id"], critical);
    let of_task = json(list(&format!("task={task}")).await.unwrap(), 200).await;
    assert_eq!(of_task["items"].as_array().unwrap().len(), 1);
    problem(
        list("status=sleeping").await.unwrap(),
        422,
        "validation_failed",
    )
    .await;

    let until = chrono::Utc::now() + chrono::Duration::hours(2);
    let mute = json(
        app.op(
            Method::PUT,
            &format!("/api/v1/tenants/acme/tasks/{task}/alarm-mute"),
        )
        .json(&json!({ "until": until }))
        .send()
        .await
        .unwrap(),
        200,
    )
    .await;
    assert_eq!(mute["task_id"], task);
    let muted = json(list(&format!("task={task}")).await.unwrap(), 200).await;
    assert!(muted["items"][0]["muted_until"].is_string());
    let mutes = json(
        app.op(Method::GET, "/api/v1/tenants/acme/alarm-mutes")
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(mutes.as_array().unwrap().len(), 1);
    problem(
        app.op(
            Method::PUT,
            &format!("/api/v1/tenants/acme/tasks/{task}/alarm-mute"),
        )
        .json(&json!({ "until": "2000-01-01T00:00:00Z" }))
        .send()
        .await
        .unwrap(),
        422,
        "validation_failed",
    )
    .await;
    let unmuted = app
        .op(
            Method::PUT,
            &format!("/api/v1/tenants/acme/tasks/{task}/alarm-mute"),
        )
        .json(&json!({ "until": null }))
        .send()
        .await
        .unwrap();
    assert_eq!(unmuted.status(), 204);
    let actions = audit_actions(&app, "acme").await;
    assert_eq!(actions.iter().filter(|a| *a == "alarm.ack").count(), 1);
    assert!(
        actions.contains(&"alarm.mute".to_owned()) && actions.contains(&"alarm.unmute".to_owned())
    );
    app.stop().await;
}

/// What tenant A has, read straight from the store.
async fn snapshot(app: &TestApp, tenant: &Tenant) -> String {
    let mut tx = app.store().begin_read().await.unwrap();
    let tasks = tx.list_tasks(tenant.id, &Default::default()).await.unwrap();
    let runs = tx.list_runs(tenant.id, &Default::default()).await.unwrap();
    let alarms = tx
        .list_alarms(
            mthpt_engine::store::Scope::Tenant(tenant.id),
            &Default::default(),
        )
        .await
        .unwrap();
    let deps = tx.list_dependencies(tenant.id).await.unwrap();
    format!("{tasks:?}{runs:?}{alarms:?}{deps:?}")
}

async fn other_tenants_and_viewers_change_nothing(app: TestApp) {
    let acme = tenant_with_app(&app, "acme").await;
    let globex = tenant_with_app(&app, "globex").await;
    let task = create(&app, "acme", &manual_task("job")).await["id"]
        .as_i64()
        .unwrap();
    let child = create(&app, "acme", &manual_task("child")).await["id"]
        .as_i64()
        .unwrap();
    let run = json(
        app.op(
            Method::POST,
            &format!("/api/v1/tenants/acme/tasks/{task}/trigger"),
        )
        .send()
        .await
        .unwrap(),
        201,
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let alarm = raise_alarm(&app, &acme, Some(task), Severity::Critical).await;
    let (_, b_admin) = app.user(Some(&globex), "bea", Role::TenantAdmin).await;
    let (_, a_viewer) = app.user(Some(&acme), "vic", Role::TenantViewer).await;
    let before = snapshot(&app, &acme).await;

    let spec = manual_task("job");
    let dep = json!({ "parent_task_id": task, "child_task_id": child });
    let file = json!({ "tasks": [manual_task("intruder")] });
    let mute = json!({ "until": chrono::Utc::now() + chrono::Duration::hours(1) });
    let bulk = json!({ "action": "delete", "task_ids": [task] });
    // (method, path under the tenant, body) for every endpoint that names a resource.
    let calls: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/tasks/{task}"), None),
        (Method::PUT, format!("/tasks/{task}"), Some(spec.clone())),
        (Method::DELETE, format!("/tasks/{task}"), None),
        (Method::POST, format!("/tasks/{task}/pause"), None),
        (Method::POST, format!("/tasks/{task}/resume"), None),
        (Method::POST, format!("/tasks/{task}/trigger"), None),
        (
            Method::PUT,
            format!("/tasks/{task}/alarm-mute"),
            Some(mute.clone()),
        ),
        (
            Method::POST,
            "/schedule-preview".into(),
            Some(json!({ "task_id": task })),
        ),
        (Method::POST, "/dependencies".into(), Some(dep.clone())),
        (
            Method::DELETE,
            format!("/dependencies/{task}/{child}"),
            None,
        ),
        (Method::GET, format!("/runs/{run}"), None),
        (Method::POST, format!("/runs/{run}/cancel"), None),
        (Method::POST, format!("/runs/{run}/rerun"), None),
        (Method::POST, format!("/alarms/{alarm}/ack"), None),
        (Method::POST, "/tasks/bulk".into(), Some(bulk.clone())),
        (
            Method::POST,
            "/tasks/apply?prune=true".into(),
            Some(file.clone()),
        ),
    ];
    for (method, path, body) in &calls {
        // Tenant B's admin on A's path: the tenant is hidden.
        let mut req = app.request(
            method.clone(),
            &format!("/api/v1/tenants/acme{path}"),
            &b_admin,
        );
        // A version, so that updates reach the id check instead of asking for one.
        req = req.header("If-Match", "\"1\"");
        if let Some(b) = body {
            req = req.json(b);
        }
        problem(req.send().await.unwrap(), 404, "not_found").await;
        // On its own path with A's ids: A's resources do not exist there.
        let mut req = app.request(
            method.clone(),
            &format!("/api/v1/tenants/globex{path}"),
            &b_admin,
        );
        // A version, so that updates reach the id check instead of asking for one.
        req = req.header("If-Match", "\"1\"");
        if let Some(b) = body {
            req = req.json(b);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        if path.starts_with("/tasks/bulk") {
            let out: Value = res.json().await.unwrap();
            assert_eq!(out["results"][0]["status"], 404, "{out}");
        } else if path.starts_with("/tasks/apply") {
            // B's own (empty) tenant gains the intruder task; A is untouched (checked below).
            assert_eq!(status, 200, "{path}");
        } else {
            assert_eq!(status, 404, "{method} globex{path}");
        }
        // A's viewer may read but not change.
        let mut req = app.request(
            method.clone(),
            &format!("/api/v1/tenants/acme{path}"),
            &a_viewer,
        );
        // A version, so that updates reach the id check instead of asking for one.
        req = req.header("If-Match", "\"1\"");
        if let Some(b) = body {
            req = req.json(b);
        }
        let res = req.send().await.unwrap();
        if *method == Method::GET || path == "/schedule-preview" {
            assert_eq!(res.status(), 200, "viewer reads {path}");
        } else {
            problem(res, 403, "forbidden").await;
        }
    }
    assert_eq!(snapshot(&app, &acme).await, before, "tenant A unchanged");
    app.stop().await;
}

async fn bulk_stats_and_task_files_work(app: TestApp) {
    tenant_with_app(&app, "acme").await;
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        ids.push(
            create(&app, "acme", &manual_task(name)).await["id"]
                .as_i64()
                .unwrap(),
        );
    }
    let bulk = json(
        app.op(Method::POST, "/api/v1/tenants/acme/tasks/bulk")
            .json(&json!({ "action": "trigger", "task_ids": [ids[0], 999_999, ids[1]] }))
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(
        (bulk["succeeded"].as_u64(), bulk["failed"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(bulk["results"][1]["code"], "not_found");
    assert!(bulk["results"][0]["run_id"].is_i64());
    let too_many: Vec<i64> = (1..=501).collect();
    problem(
        app.op(Method::POST, "/api/v1/tenants/acme/tasks/bulk")
            .json(&json!({ "action": "pause", "task_ids": too_many }))
            .send()
            .await
            .unwrap(),
        422,
        "validation_failed",
    )
    .await;

    let stats = json(
        app.op(Method::GET, "/api/v1/tenants/acme/stats?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&bucket_seconds=3600")
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert_eq!(stats["buckets"].as_array().unwrap().len(), 24);
    assert_eq!(stats["total"]["runs"], 0);
    let body = problem(
        app.op(Method::GET, "/api/v1/tenants/acme/stats?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&bucket_seconds=1")
            .send()
            .await
            .unwrap(),
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(body["errors"][0]["field"], "bucket_seconds");

    // A file applied twice: the second time nothing changes.
    let file = json!({
        "tasks": [cron_task("nightly"), manual_task("mail")],
        "dependencies": [{ "parent": "nightly", "child": "mail" }],
    });
    let apply = |q: &'static str| {
        app.op(
            Method::POST,
            &format!("/api/v1/tenants/acme/tasks/apply{q}"),
        )
        .json(&file)
        .send()
    };
    let dry = json(apply("?dry_run=true").await.unwrap(), 200).await;
    assert_eq!(dry["applied"], false);
    let first = json(apply("").await.unwrap(), 200).await;
    let steps: Vec<&str> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["create", "create", "create"]);
    let second = json(apply("").await.unwrap(), 200).await;
    assert!(
        second["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["step"] == "unchanged"),
        "{second}"
    );
    let pruned = json(apply("?prune=true&dry_run=true").await.unwrap(), 200).await;
    let deletes: Vec<&str> = pruned["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["step"] == "delete")
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(deletes, ["a", "b"]);
    let mut broken = file.clone();
    broken["tasks"][1]["schedule"] = json!({ "kind": "fixed_rate", "every_ms": 0 });
    let body = problem(
        app.op(Method::POST, "/api/v1/tenants/acme/tasks/apply")
            .json(&broken)
            .send()
            .await
            .unwrap(),
        422,
        "validation_failed",
    )
    .await;
    assert_eq!(body["errors"][0]["field"], "tasks[1].schedule.every_ms");

    let exported = app
        .op(Method::GET, "/api/v1/tenants/acme/tasks/export")
        .send()
        .await
        .unwrap();
    assert_eq!(exported.status(), 200);
    let text = exported.text().await.unwrap();
    assert!(text.contains("name = \"nightly\""), "{text}");
    let imported = json(
        app.op(Method::POST, "/api/v1/tenants/acme/tasks/import")
            .header("Content-Type", "application/toml")
            .body(text)
            .send()
            .await
            .unwrap(),
        200,
    )
    .await;
    assert!(
        imported["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["step"] == "unchanged"),
        "an export imported again changes nothing: {imported}"
    );
    app.stop().await;
}

async fn params_with_a_nul_or_beyond_256_kib_are_refused_naming_params(app: TestApp) {
    tenant_with_app(&app, "acme").await;
    let mut with_nul = manual_task("nul");
    with_nul["params"] = json!({ "script": "echo a\u{0}b" });
    let mut nul_key = manual_task("nul-key");
    nul_key["params"] = json!({ "a\u{0}": 1 });
    for body in [with_nul, nul_key] {
        let res = app
            .op(Method::POST, "/api/v1/tenants/acme/tasks")
            .json(&body)
            .send()
            .await
            .unwrap();
        let p = problem(res, 422, "validation_failed").await;
        assert_eq!(p["errors"][0]["field"], "params", "{p}");
        assert!(p.to_string().contains("NUL"), "{p}");
    }

    let task = create(&app, "acme", &manual_task("job")).await;
    let trigger = format!("/api/v1/tenants/acme/tasks/{}/trigger", task["id"]);
    for params in [
        json!({ "script": "echo a\u{0}b" }),
        json!({ "x": "y".repeat(256 * 1024) }),
    ] {
        let res = app
            .op(Method::POST, &trigger)
            .json(&json!({ "params": params }))
            .send()
            .await
            .unwrap();
        let p = problem(res, 422, "validation_failed").await;
        assert_eq!(p["errors"][0]["field"], "params", "{p}");
    }
    let runs = json(
        app.op(
            Method::GET,
            &format!("/api/v1/tenants/acme/runs?task={}", task["id"]),
        )
        .send()
        .await
        .unwrap(),
        200,
    )
    .await;
    assert_eq!(
        runs["items"].as_array().map(Vec::len),
        Some(0),
        "nothing was triggered: {runs}"
    );
}

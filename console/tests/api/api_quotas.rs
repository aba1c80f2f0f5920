//! Tenant quotas over the REST API, on both backends: operators set them, tenant users of every
//! role read their own but may not change them (403), another tenant's users get 404 for both;
//! a task create beyond `max_tasks` and a manual trigger beyond `max_waiting_runs` or
//! `max_fires_per_second` get `429 quota_exceeded` naming the quota and its value (the rate
//! with `Retry-After`); the first refusal raises one `quota` alarm, which the engine's watchdog
//! resolves once the tenant is back under the quota.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use mthpt_console::testing::{TestApp, spawn_app_with_clock};
use mthpt_engine::alarm::{AlarmFilter, AlarmKind};
use mthpt_engine::app::NewApp;
use mthpt_engine::clock::ManualClock;
use mthpt_engine::store::{Backend, ClaimRequest, Scope};
use mthpt_engine::tenant::Role;
use mthpt_engine::watchdog::{WatchConfig, Watchdog};
use reqwest::Method;
use serde_json::{Value, json};

/// 2026-06-01T00:00:00Z.
const T0: i64 = 1_780_272_000_000;

async fn answer(res: reqwest::Response) -> (u16, Option<String>, Value) {
    let status = res.status().as_u16();
    let retry = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, retry, res.json().await.unwrap_or(Value::Null))
}

async fn with_app(app: &TestApp, name: &str) {
    let tenant = app.tenant(name).await;
    let mut tx = app.store().begin().await.unwrap();
    tx.create_app(
        tenant.id,
        &NewApp {
            name: "billing".into(),
            secret: "0123456789abcdef-secret".into(),
        },
        T0,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

fn manual_task(name: &str) -> Value {
    json!({ "name": name, "app": "billing", "handler": "noop", "schedule": { "kind": "manual" } })
}

async fn put_quotas(app: &TestApp, tenant: &str, quotas: Value) -> Value {
    let (status, _, body) = answer(
        app.op(Method::PUT, &format!("/api/v1/tenants/{tenant}/quotas"))
            .json(&quotas)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of one sample of `GET /metrics` (`name{labels}` as Prometheus writes it).
async fn metric(app: &TestApp, sample: &str) -> Option<f64> {
    let text = app
        .op(Method::GET, "/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
}

async fn quota_alarms(app: &TestApp, tenant: &str) -> Vec<mthpt_engine::alarm::Alarm> {
    let mut tx = app.store().begin().await.unwrap();
    let t = tx.find_tenant_by_name(tenant).await.unwrap().unwrap().id;
    tx.list_alarms(
        Scope::Tenant(t),
        &AlarmFilter {
            kind: Some(AlarmKind::Quota),
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

async fn quotas_are_set_by_operators_and_read_by_the_tenant_only(app: TestApp) {
    let acme = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let (_, admin) = app.user(Some(&acme), "ada", Role::TenantAdmin).await;
    let (_, operator) = app.user(Some(&acme), "otto", Role::TenantOperator).await;
    let (_, viewer) = app.user(Some(&acme), "vic", Role::TenantViewer).await;
    let (_, stranger) = app.user(Some(&other), "olga", Role::TenantAdmin).await;

    let (status, _, fresh) = answer(
        app.request(Method::GET, "/api/v1/tenants/acme/quotas", &viewer)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{fresh}");
    assert_eq!(fresh["quotas"]["max_tasks"], Value::Null, "unlimited");
    assert_eq!(fresh["usage"]["tasks"], json!(0));

    let set = put_quotas(
        &app,
        "acme",
        json!({ "max_tasks": 5, "max_fires_per_second": 2, "fire_burst": 4 }),
    )
    .await;
    assert_eq!(set["quotas"]["max_tasks"], json!(5));
    assert_eq!(set["quotas"]["fire_burst"], json!(4));
    assert_eq!(set["quotas"]["max_waiting_runs"], Value::Null);

    for (who, token) in [
        ("admin", &admin),
        ("operator", &operator),
        ("viewer", &viewer),
    ] {
        let (status, _, body) = answer(
            app.request(Method::PUT, "/api/v1/tenants/acme/quotas", token)
                .json(&json!({ "max_tasks": 500 }))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("forbidden")),
            "{who}: {body}"
        );
    }
    let (status, _, body) = answer(
        app.request(Method::GET, "/api/v1/tenants/acme/quotas", &stranger)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404, "another tenant's quotas are not found: {body}");
    let (status, _, body) = answer(
        app.request(Method::PUT, "/api/v1/tenants/acme/quotas", &stranger)
            .json(&json!({ "max_tasks": 500 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404, "another tenant's quotas cannot be set: {body}");
    let (status, _, body) = answer(
        app.client
            .put(app.url("/api/v1/tenants/acme/quotas"))
            .json(&json!({ "max_tasks": 500 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401, "no credentials: {body}");

    for bad in [json!({ "max_tasks": 0 }), json!({ "fire_burst": 3 })] {
        let (status, _, body) = answer(
            app.op(Method::PUT, "/api/v1/tenants/acme/quotas")
                .json(&bad)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 422, "{body}");
    }
    let (_, _, read) = answer(
        app.request(Method::GET, "/api/v1/tenants/acme/quotas", &admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        read["quotas"]["max_tasks"],
        json!(5),
        "refused changes changed nothing"
    );

    let audit = {
        let mut tx = app.store().begin_read().await.unwrap();
        tx.list_audit(Scope::Tenant(acme.id), None, 100)
            .await
            .unwrap()
    };
    assert!(
        audit.iter().any(|e| e.action == "tenant.quotas"),
        "the change is audited"
    );
    app.stop().await;
}

async fn task_create_beyond_max_tasks_is_429_naming_the_quota(app: TestApp) {
    with_app(&app, "acme").await;
    put_quotas(&app, "acme", json!({ "max_tasks": 2 })).await;
    for name in ["one", "two"] {
        let (status, _, body) = answer(
            app.op(Method::POST, "/api/v1/tenants/acme/tasks")
                .json(&manual_task(name))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    for _ in 0..2 {
        let res = app
            .op(Method::POST, "/api/v1/tenants/acme/tasks")
            .json(&manual_task("three"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            res.headers()["content-type"].to_str().unwrap(),
            "application/problem+json"
        );
        let (status, _, body) = answer(res).await;
        assert_eq!(status, 429, "{body}");
        assert_eq!(body["code"], json!("quota_exceeded"));
        assert_eq!(body["quota"], json!("max_tasks"));
        assert_eq!(body["limit"], json!(2));
    }
    let alarms = quota_alarms(&app, "acme").await;
    assert_eq!(alarms.len(), 1, "one alarm per episode: {alarms:?}");
    assert_eq!(alarms[0].details.0["quota"], json!("max_tasks"));
    assert_eq!(
        metric(
            &app,
            "mthpt_tenant_quota_hits_total{tenant=\"acme\",quota=\"max_tasks\"}"
        )
        .await,
        Some(2.0),
        "each refusal counts"
    );

    // A task file creating one more is refused the same way, and creates nothing.
    let (status, _, body) = answer(
        app.op(Method::POST, "/api/v1/tenants/acme/tasks/apply")
            .json(
                &json!({ "tasks": [manual_task("one"), manual_task("two"), manual_task("four")] }),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body["quota"].as_str()),
        (429, Some("max_tasks")),
        "{body}"
    );

    // Raised: back under the quota (room for one more) resolves the episode's alarm.
    put_quotas(&app, "acme", json!({ "max_tasks": 4 })).await;
    let (status, _, body) = answer(
        app.op(Method::POST, "/api/v1/tenants/acme/tasks")
            .json(&manual_task("three"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let watchdog = Watchdog::new(app.services.store.clone(), WatchConfig::default());
    let report = watchdog.run_once(app.now(), 0.5).await.unwrap();
    assert_eq!(report.quotas_resolved.len(), 1, "{report:?}");
    let alarms = quota_alarms(&app, "acme").await;
    assert_eq!(alarms.len(), 1, "{alarms:?}");
    assert!(alarms[0].resolved_at.is_some(), "{alarms:?}");
    app.stop().await;
}

async fn triggers_beyond_waiting_runs_or_rate_are_429(app: TestApp, clock: Arc<ManualClock>) {
    with_app(&app, "acme").await;
    with_app(&app, "other").await;
    let (_, _, task) = answer(
        app.op(Method::POST, "/api/v1/tenants/acme/tasks")
            .json(&manual_task("job"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let trigger = format!("/api/v1/tenants/acme/tasks/{}/trigger", task["id"]);
    put_quotas(&app, "acme", json!({ "max_fires_per_second": 1 })).await;
    let (status, _, body) = answer(app.op(Method::POST, &trigger).send().await.unwrap()).await;
    assert_eq!(status, 201, "{body}");
    clock.advance_ms(250);
    let (status, retry, body) = answer(app.op(Method::POST, &trigger).send().await.unwrap()).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["quota"], json!("max_fires_per_second"));
    assert_eq!(body["limit"], json!(1));
    assert_eq!(
        retry.as_deref(),
        Some("1"),
        "the run waiting takes the one token: another in 1 s"
    );
    // The claim takes the waiting run's token from the tenant's row: a second later the
    // bucket holds one again, and the trigger passes.
    clock.advance_ms(250);
    let claimed = {
        let mut tx = app.store().begin().await.unwrap();
        let runs = tx
            .claim_due_runs(&ClaimRequest {
                node: "node-1".into(),
                groups: vec!["default".into()],
                now: app.now(),
                horizon_ms: 0,
                lease_ms: 60_000,
                limit: 10,
            })
            .await
            .unwrap();
        tx.commit().await.unwrap();
        runs
    };
    assert_eq!(claimed.len(), 1);
    let (status, _, body) = answer(app.op(Method::POST, &trigger).send().await.unwrap()).await;
    assert_eq!(status, 429, "the claim took the token: {body}");
    clock.advance_ms(1_000);
    let (status, _, body) = answer(app.op(Method::POST, &trigger).send().await.unwrap()).await;
    assert_eq!(status, 201, "{body}");

    put_quotas(&app, "acme", json!({ "max_waiting_runs": 2 })).await;
    let (status, _, waiting) = answer(app.op(Method::POST, &trigger).send().await.unwrap()).await;
    assert_eq!(status, 201, "{waiting}");
    let (status, retry, body) = answer(app.op(Method::POST, &trigger).send().await.unwrap()).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["quota"], json!("max_waiting_runs"));
    assert_eq!(body["limit"], json!(2));
    assert_eq!(retry, None);
    // A re-run makes a waiting run too: refused the same way.
    let (status, _, body) = answer(
        app.op(
            Method::POST,
            &format!("/api/v1/tenants/acme/runs/{}/rerun", waiting["id"]),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["quota"], json!("max_waiting_runs"));
    mthpt_engine::metrics::refresh_gauges(app.store(), app.now())
        .await
        .unwrap();
    assert_eq!(
        metric(&app, "mthpt_tenant_waiting_runs{tenant=\"acme\"}").await,
        Some(2.0)
    );
    assert_eq!(
        metric(&app, "mthpt_tenant_waiting_runs{tenant=\"other\"}").await,
        Some(0.0)
    );

    // Only that tenant is slowed.
    let (_, _, theirs) = answer(
        app.op(Method::POST, "/api/v1/tenants/other/tasks")
            .json(&manual_task("job"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let (status, _, body) = answer(
        app.op(
            Method::POST,
            &format!("/api/v1/tenants/other/tasks/{}/trigger", theirs["id"]),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    app.stop().await;
}

async fn clocked(backend: Backend) -> (TestApp, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at_ms(T0));
    (spawn_app_with_clock(backend, clock.clone()).await, clock)
}

#[tokio::test]
async fn quotas_are_set_by_operators_and_read_by_the_tenant_only_postgres() {
    quotas_are_set_by_operators_and_read_by_the_tenant_only(clocked(Backend::Postgres).await.0)
        .await;
}

#[tokio::test]
async fn quotas_are_set_by_operators_and_read_by_the_tenant_only_sqlite() {
    quotas_are_set_by_operators_and_read_by_the_tenant_only(clocked(Backend::Sqlite).await.0).await;
}

#[tokio::test]
async fn task_create_beyond_max_tasks_is_429_naming_the_quota_postgres() {
    task_create_beyond_max_tasks_is_429_naming_the_quota(clocked(Backend::Postgres).await.0).await;
}

#[tokio::test]
async fn task_create_beyond_max_tasks_is_429_naming_the_quota_sqlite() {
    task_create_beyond_max_tasks_is_429_naming_the_quota(clocked(Backend::Sqlite).await.0).await;
}

#[tokio::test]
async fn triggers_beyond_waiting_runs_or_rate_are_429_postgres() {
    let (app, clock) = clocked(Backend::Postgres).await;
    triggers_beyond_waiting_runs_or_rate_are_429(app, clock).await;
}

#[tokio::test]
async fn triggers_beyond_waiting_runs_or_rate_are_429_sqlite() {
    let (app, clock) = clocked(Backend::Sqlite).await;
    triggers_beyond_waiting_runs_or_rate_are_429(app, clock).await;
}

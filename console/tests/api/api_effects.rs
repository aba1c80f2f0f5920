//! Console actions that take effect beyond their own rows, on both backends: tokens limited
//! to a lower role, a cancel that reaches the wrapper's handler, a cancel that leaves the
//! schedule going, muted alarms that are never open nor published, and idempotency keys
//! purged after their window.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mthpt_console::testing::TestApp;
use mthpt_engine::alarm::{AlarmKind, NewAlarm, Severity};
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::store::{TRIGGER_KEY_WINDOW_MS, TriggerKey};
use mthpt_engine::task::TaskId;
use mthpt_engine::tenant::Role;
use mthpt_engine::watchdog::{WatchConfig, Watchdog};
use mthpt_tests::{TestWrapper, quick_engine_config, start_engine, tenancy, wait_until};
use mthpt_wrapper::HandlerError;
use reqwest::Method;
use serde_json::{Value, json};

mthpt_engine::on_both_backends!(
    with mthpt_console::testing::spawn_app;
    tokens_are_limited_to_a_role_at_most_their_issuers,
    api_cancel_reaches_the_running_handler_and_the_run_ends_cancelled,
    run_cancelled_while_pending_is_never_dispatched,
    cancelling_a_waiting_occurrence_leaves_the_schedule_going,
    operators_list_and_acknowledge_alarms_of_no_tenant,
    alarms_raised_while_muted_are_recorded_but_not_open_nor_published,
    idempotency_keys_are_purged_after_their_window,
);

const WAIT: Duration = Duration::from_secs(15);

async fn call(
    app: &TestApp,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = app.request(method, path, token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn tokens_are_limited_to_a_role_at_most_their_issuers(app: TestApp) {
    let acme = app.tenant("acme").await;
    app.tenant("other").await;
    let (_, admin) = app.user(Some(&acme), "ada", Role::TenantAdmin).await;
    let (olga, ops) = app.user(Some(&acme), "olga", Role::TenantOperator).await;

    // An admin mints a viewer token for itself: it reads, but cannot operate or administer.
    let (s, viewer) = call(
        &app,
        Method::POST,
        "/api/v1/tokens",
        &admin,
        Some(json!({ "name": "dashboard", "role": "tenant_viewer" })),
    )
    .await;
    assert_eq!((s, viewer["role"].as_str()), (201, Some("tenant_viewer")));
    let viewer = viewer["token"].as_str().unwrap().to_owned();
    let (_, me) = call(&app, Method::GET, "/api/v1/me", &viewer, None).await;
    assert_eq!(me["role"], "tenant_viewer");
    assert_eq!(
        call(
            &app,
            Method::GET,
            "/api/v1/tenants/acme/tasks",
            &viewer,
            None
        )
        .await
        .0,
        200
    );
    let (s, body) = call(
        &app,
        Method::POST,
        "/api/v1/tenants/acme/users",
        &viewer,
        Some(json!({ "username": "eve", "password": "long enough pw", "role": "tenant_admin" })),
    )
    .await;
    assert_eq!((s, body["code"].as_str()), (403, Some("forbidden")));

    // The viewer token cannot mint itself anything higher, and by default mints a viewer.
    let (s, body) = call(
        &app,
        Method::POST,
        "/api/v1/tokens",
        &viewer,
        Some(json!({ "name": "up", "role": "tenant_admin" })),
    )
    .await;
    assert_eq!((s, body["code"].as_str()), (403, Some("role_above_own")));
    let (s, body) = call(
        &app,
        Method::POST,
        "/api/v1/tokens",
        &viewer,
        Some(json!({ "name": "same" })),
    )
    .await;
    assert_eq!((s, body["role"].as_str()), (201, Some("tenant_viewer")));

    // Nor revoke a token that may do more than it: the admin's own, which still works after.
    let (s, mine) = call(&app, Method::GET, "/api/v1/tokens", &admin, None).await;
    assert_eq!(s, 200, "{mine}");
    let full = mine
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] != "dashboard" && t["name"] != "same")
        .unwrap()["id"]
        .clone();
    let (s, body) = call(
        &app,
        Method::DELETE,
        &format!("/api/v1/tokens/{full}"),
        &viewer,
        None,
    )
    .await;
    assert_eq!(
        (s, body["code"].as_str()),
        (403, Some("role_above_own")),
        "{body}"
    );
    assert_eq!(
        call(&app, Method::GET, "/api/v1/me", &admin, None).await.0,
        200
    );

    // A token that expires mints none that outlives it: by default the new one expires with
    // it, and a later expiry is refused naming the field.
    let soon = chrono::Utc::now() + chrono::Duration::hours(1);
    let (s, body) = call(
        &app,
        Method::POST,
        "/api/v1/tokens",
        &admin,
        Some(json!({ "name": "short", "expires_at": soon.to_rfc3339() })),
    )
    .await;
    assert_eq!(s, 201, "{body}");
    let short = body["token"].as_str().unwrap().to_owned();
    let (s, body) = call(
        &app,
        Method::POST,
        "/api/v1/tokens",
        &short,
        Some(json!({ "name": "forever" })),
    )
    .await;
    assert_eq!(s, 201, "{body}");
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(body["expires_at"].as_str().unwrap())
            .unwrap()
            .timestamp(),
        soon.timestamp(),
        "{body}"
    );
    let later = soon + chrono::Duration::days(30);
    let (s, body) = call(
        &app,
        Method::POST,
        "/api/v1/tokens",
        &short,
        Some(json!({ "name": "longer", "expires_at": later.to_rfc3339() })),
    )
    .await;
    assert_eq!(
        (s, body["code"].as_str()),
        (422, Some("validation_failed")),
        "{body}"
    );
    assert!(body.to_string().contains("expires_at"), "{body}");

    // A tenant operator may not mint an admin token, nor an operator one.
    for role in ["tenant_admin", "operator"] {
        let (s, body) = call(
            &app,
            Method::POST,
            "/api/v1/tokens",
            &ops,
            Some(json!({ "name": "x", "role": role })),
        )
        .await;
        let want = if role == "operator" {
            (422, Some("validation_failed"))
        } else {
            (403, Some("role_above_own"))
        };
        assert_eq!((s, body["code"].as_str()), want, "{role}: {body}");
    }

    // The admin mints an operator token for olga; not above olga's role, not for another
    // tenant.
    let olga_tokens = format!("/api/v1/tenants/acme/users/{}/tokens", olga.id);
    let (s, body) = call(
        &app,
        Method::POST,
        &olga_tokens,
        &admin,
        Some(json!({ "name": "cron", "role": "tenant_operator" })),
    )
    .await;
    assert_eq!((s, body["role"].as_str()), (201, Some("tenant_operator")));
    let (s, body) = call(
        &app,
        Method::POST,
        &olga_tokens,
        &admin,
        Some(json!({ "name": "cron", "role": "tenant_admin" })),
    )
    .await;
    assert_eq!((s, body["code"].as_str()), (403, Some("role_above_own")));
    let foreign = format!("/api/v1/tenants/other/users/{}/tokens", olga.id);
    assert_eq!(
        call(
            &app,
            Method::POST,
            &foreign,
            &admin,
            Some(json!({ "name": "x", "role": "tenant_viewer" }))
        )
        .await
        .0,
        404
    );
    let (s, body) = call(
        &app,
        Method::POST,
        "/api/v1/tokens",
        &admin,
        Some(json!({ "name": "x", "role": "superuser" })),
    )
    .await;
    assert_eq!(
        (s, body["errors"][0]["field"].as_str()),
        (422, Some("role"))
    );

    // A user demoted after minting keeps no more than the new role in old tokens.
    let (s, admin_token) = call(
        &app,
        Method::POST,
        "/api/v1/tokens",
        &admin,
        Some(json!({ "name": "full" })),
    )
    .await;
    assert_eq!(
        (s, admin_token["role"].as_str()),
        (201, Some("tenant_admin"))
    );
    let (_, me) = call(&app, Method::GET, "/api/v1/me", &admin, None).await;
    let ada_id = me["user_id"].as_i64().unwrap();
    let (s, _) = call(
        &app,
        Method::PATCH,
        &format!("/api/v1/tenants/acme/users/{ada_id}"),
        &app.operator_token,
        Some(json!({ "role": "tenant_viewer" })),
    )
    .await;
    assert_eq!(s, 200);
    let (_, me) = call(
        &app,
        Method::GET,
        "/api/v1/me",
        admin_token["token"].as_str().unwrap(),
        None,
    )
    .await;
    assert_eq!(me["role"], "tenant_viewer");
    app.stop().await;
}

/// A tenant `acme` with app `billing` (its wrapper's key and secret), as the engine tests
/// make it.
async fn acme(app: &TestApp) -> mthpt_tests::Tenancy {
    tenancy(app.store(), "acme", "billing").await.unwrap()
}

async fn create_manual_task(app: &TestApp, name: &str, handler: &str) -> i64 {
    let (s, task) = call(
        app,
        Method::POST,
        "/api/v1/tenants/acme/tasks",
        &app.operator_token,
        Some(json!({
            "name": name, "app": "billing", "handler": handler, "schedule": { "kind": "manual" }
        })),
    )
    .await;
    assert_eq!(s, 201, "{task}");
    task["id"].as_i64().unwrap()
}

async fn trigger(app: &TestApp, task: i64) -> i64 {
    let (s, run) = call(
        app,
        Method::POST,
        &format!("/api/v1/tenants/acme/tasks/{task}/trigger"),
        &app.operator_token,
        None,
    )
    .await;
    assert_eq!(s, 201, "{run}");
    run["id"].as_i64().unwrap()
}

async fn run_state(app: &TestApp, run: i64) -> Value {
    let (s, body) = call(
        app,
        Method::GET,
        &format!("/api/v1/tenants/acme/runs/{run}"),
        &app.operator_token,
        None,
    )
    .await;
    assert_eq!(s, 200, "{body}");
    body
}

async fn api_cancel_reaches_the_running_handler_and_the_run_ends_cancelled(app: TestApp) {
    let t = acme(&app).await;
    let engine = start_engine(app.shared_store(), quick_engine_config("node-1"))
        .await
        .unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let (s, c) = (started.clone(), cancelled.clone());
    let w = TestWrapper::start(&t, &[engine.url()], move |b| {
        b.async_handler("slow", move |ctx| {
            let (started, cancelled) = (s.clone(), c.clone());
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                tokio::select! {
                    _ = ctx.cancelled() => {
                        cancelled.fetch_add(1, Ordering::SeqCst);
                        Err(HandlerError::cancelled())
                    }
                    () = tokio::time::sleep(Duration::from_secs(60)) => Ok(json!("finished")),
                }
            }
        })
    })
    .unwrap();
    w.registered().await.unwrap();
    let task = create_manual_task(&app, "long", "slow").await;
    let run = trigger(&app, task).await;
    wait_until(WAIT, "the handler runs", || async {
        Ok(started.load(Ordering::SeqCst) == 1 && run_state(&app, run).await["state"] == "running")
    })
    .await
    .unwrap();

    let (s, body) = call(
        &app,
        Method::POST,
        &format!("/api/v1/tenants/acme/runs/{run}/cancel"),
        &app.operator_token,
        Some(json!({ "reason": "wrong input" })),
    )
    .await;
    assert_eq!(
        (s, body["state"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    wait_until(WAIT, "the handler sees its cancellation", || async {
        Ok(cancelled.load(Ordering::SeqCst) == 1)
    })
    .await
    .unwrap();
    // The handler's own "cancelled" result reaches the engine and is ignored: the run stays
    // as the person cancelled it, and the wrapper holds nothing more.
    wait_until(WAIT, "the wrapper's result is confirmed", || async {
        Ok(w.wrapper.running() == 0 && w.wrapper.pending_results() == 0)
    })
    .await
    .unwrap();
    let detail = run_state(&app, run).await;
    assert_eq!(detail["state"], "cancelled");
    assert!(
        detail["error"].as_str().unwrap().starts_with("wrong input"),
        "{detail}"
    );
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "started once, never again"
    );
    w.stop().await;
    engine.shutdown().await;
    app.stop().await;
}

async fn run_cancelled_while_pending_is_never_dispatched(app: TestApp) {
    let t = acme(&app).await;
    let started = Arc::new(AtomicUsize::new(0));
    let task = create_manual_task(&app, "quick", "count").await;
    // No engine runs yet: the run waits, pending, and is cancelled there.
    let run = trigger(&app, task).await;
    assert_eq!(run_state(&app, run).await["state"], "pending");
    let (s, _) = call(
        &app,
        Method::POST,
        &format!("/api/v1/tenants/acme/runs/{run}/cancel"),
        &app.operator_token,
        None,
    )
    .await;
    assert_eq!(s, 200);
    let engine = start_engine(app.shared_store(), quick_engine_config("node-1"))
        .await
        .unwrap();
    let s = started.clone();
    let w = TestWrapper::start(&t, &[engine.url()], move |b| {
        b.async_handler("count", move |_ctx| {
            let started = s.clone();
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                Ok(json!(null))
            }
        })
    })
    .unwrap();
    w.registered().await.unwrap();
    // A later run of the same task goes through: the engine is working.
    let later = trigger(&app, task).await;
    wait_until(WAIT, "the later run succeeded", || async {
        Ok(run_state(&app, later).await["state"] == "succeeded")
    })
    .await
    .unwrap();
    let detail = run_state(&app, run).await;
    assert_eq!(detail["state"], "cancelled");
    assert!(detail["dispatched_at"].is_null(), "{detail}");
    assert_eq!(started.load(Ordering::SeqCst), 1, "only the later run ran");
    w.stop().await;
    engine.shutdown().await;
    app.stop().await;
}

/// The task's runs waiting to fire (newest first).
async fn pending_runs(app: &TestApp, task: i64) -> Vec<Value> {
    let (s, page) = call(
        app,
        Method::GET,
        &format!("/api/v1/tenants/acme/runs?task={task}&state=pending"),
        &app.operator_token,
        None,
    )
    .await;
    assert_eq!(s, 200, "{page}");
    page["items"].as_array().unwrap().clone()
}

async fn cancelling_a_waiting_occurrence_leaves_the_schedule_going(app: TestApp) {
    acme(&app).await;
    // No engine runs: each task's first occurrence waits, unclaimed, and is cancelled there.
    let schedules = [
        ("hourly", json!({ "kind": "cron", "expr": "0 0 * * * ?" })),
        ("rate", json!({ "kind": "fixed_rate", "every_ms": 60_000 })),
        (
            "delay",
            json!({ "kind": "fixed_delay", "delay_ms": 60_000 }),
        ),
    ];
    for (name, schedule) in schedules {
        let (s, task) = call(
            &app,
            Method::POST,
            "/api/v1/tenants/acme/tasks",
            &app.operator_token,
            Some(json!({ "name": name, "app": "billing", "handler": "h", "schedule": schedule })),
        )
        .await;
        assert_eq!(s, 201, "{task}");
        let task = task["id"].as_i64().unwrap();
        let waiting = pending_runs(&app, task).await;
        assert_eq!(
            waiting.len(),
            1,
            "{name}: the first occurrence waits: {waiting:?}"
        );
        let first = waiting[0].clone();
        let (s, body) = call(
            &app,
            Method::POST,
            &format!("/api/v1/tenants/acme/runs/{}/cancel", first["id"]),
            &app.operator_token,
            None,
        )
        .await;
        assert_eq!(s, 200, "{body}");
        assert_eq!(body["state"], "cancelled");
        let next = pending_runs(&app, task).await;
        assert_eq!(next.len(), 1, "{name}: the next occurrence waits: {next:?}");
        assert_ne!(next[0]["id"], first["id"]);
        assert!(
            next[0]["scheduled_at"].as_str().unwrap() > first["scheduled_at"].as_str().unwrap(),
            "{name}: the next occurrence follows the cancelled one: {next:?} after {first}"
        );
    }

    // A schedule that is over stays over: the only fire of a task with `max_fires` 1.
    let (s, task) = call(
        &app,
        Method::POST,
        "/api/v1/tenants/acme/tasks",
        &app.operator_token,
        Some(json!({
            "name": "once-only", "app": "billing", "handler": "h", "max_fires": 1,
            "schedule": { "kind": "fixed_rate", "every_ms": 60_000 }
        })),
    )
    .await;
    assert_eq!(s, 201, "{task}");
    let task = task["id"].as_i64().unwrap();
    let only = pending_runs(&app, task).await;
    assert_eq!(only.len(), 1, "{only:?}");
    let (s, _) = call(
        &app,
        Method::POST,
        &format!("/api/v1/tenants/acme/runs/{}/cancel", only[0]["id"]),
        &app.operator_token,
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert!(
        pending_runs(&app, task).await.is_empty(),
        "no fire past max_fires"
    );
}

async fn operators_list_and_acknowledge_alarms_of_no_tenant(app: TestApp) {
    let acme = app.tenant("acme").await;
    let (_, admin) = app.user(Some(&acme), "ada", Role::TenantAdmin).await;
    let alarm = NewAlarm::new(
        None,
        AlarmKind::NodeLost,
        Severity::Critical,
        "engine node n1 stopped heartbeating",
    );
    let mut tx = app.store().begin().await.unwrap();
    let id = tx
        .insert_alarm(&alarm, SystemClock.now_ms())
        .await
        .unwrap()
        .unwrap()
        .id
        .0;
    tx.commit().await.unwrap();

    let (s, page) = call(
        &app,
        Method::GET,
        "/api/v1/alarms",
        &app.operator_token,
        None,
    )
    .await;
    assert_eq!(s, 200, "{page}");
    assert!(ids(&page).contains(&id), "{page}");
    let (s, body) = call(&app, Method::GET, "/api/v1/alarms", &admin, None).await;
    assert_eq!(
        (s, body["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let ack = format!("/api/v1/alarms/{id}/ack");
    let (s, body) = call(&app, Method::POST, &ack, &admin, None).await;
    assert_eq!(s, 403, "{body}");
    let (s, body) = call(&app, Method::POST, &ack, &app.operator_token, None).await;
    assert_eq!(s, 200, "{body}");
    assert!(body["acknowledged_by"].as_str().is_some(), "{body}");
}

async fn raise(app: &TestApp, t: &mthpt_tests::Tenancy, task: Option<i64>) -> i64 {
    let mut alarm = NewAlarm::new(
        Some(t.tenant.id),
        AlarmKind::RunFailed,
        Severity::Critical,
        "it failed",
    );
    alarm.task_id = task.map(TaskId);
    let mut tx = app.store().begin().await.unwrap();
    let a = tx
        .insert_alarm(&alarm, SystemClock.now_ms())
        .await
        .unwrap()
        .unwrap();
    tx.commit().await.unwrap();
    a.id.0
}

fn ids(page: &Value) -> Vec<i64> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_i64().unwrap())
        .collect()
}

async fn alarms_raised_while_muted_are_recorded_but_not_open_nor_published(app: TestApp) {
    let t = acme(&app).await;
    let quiet = create_manual_task(&app, "quiet", "noop").await;
    let loud = create_manual_task(&app, "loud", "noop").await;
    let before = raise(&app, &t, Some(quiet)).await;
    let until = chrono::Utc::now() + chrono::Duration::hours(1);
    let (s, _) = call(
        &app,
        Method::PUT,
        &format!("/api/v1/tenants/acme/tasks/{quiet}/alarm-mute"),
        &app.operator_token,
        Some(json!({ "until": until })),
    )
    .await;
    assert_eq!(s, 200);
    let muted = raise(&app, &t, Some(quiet)).await;
    let other = raise(&app, &t, Some(loud)).await;

    let app_ref = &app;
    let list = |q: &'static str| async move {
        let (s, page) = call(
            app_ref,
            Method::GET,
            &format!("/api/v1/tenants/acme/alarms?{q}"),
            &app_ref.operator_token,
            None,
        )
        .await;
        assert_eq!(s, 200, "{page}");
        page
    };
    let all = list("").await;
    assert_eq!(ids(&all), [other, muted, before], "every alarm is recorded");
    assert_eq!(
        all["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["muted"].as_bool().unwrap())
            .collect::<Vec<_>>(),
        [false, true, false]
    );
    assert_eq!(
        ids(&list("status=open").await),
        [other, before],
        "muted is not open"
    );
    assert_eq!(ids(&list("muted=true").await), [muted]);
    assert_eq!(ids(&list("muted=false").await), [other, before]);

    // The outbox never publishes the muted one.
    let mut tx = app.store().begin().await.unwrap();
    let unpublished: Vec<i64> = tx
        .list_unpublished_alarms(100)
        .await
        .unwrap()
        .iter()
        .map(|a| a.id.0)
        .collect();
    tx.commit().await.unwrap();
    assert_eq!(unpublished, [before, other]);

    // Unmuted: alarms pop up again.
    let (s, _) = call(
        &app,
        Method::PUT,
        &format!("/api/v1/tenants/acme/tasks/{quiet}/alarm-mute"),
        &app.operator_token,
        Some(json!({ "until": null })),
    )
    .await;
    assert_eq!(s, 204);
    // The task's alarm from before the mute is still open: a new failure counts on it.
    let after = raise(&app, &t, Some(quiet)).await;
    assert_eq!(after, before, "a repeat of the open alarm, not a new one");
    let open = list("status=open&muted=false").await;
    assert_eq!(ids(&open), [other, before]);
    assert_eq!(open["items"][1]["count"], 2);
    app.stop().await;
}

async fn idempotency_keys_are_purged_after_their_window(app: TestApp) {
    let t = acme(&app).await;
    let task = create_manual_task(&app, "job", "noop").await;
    let run = trigger(&app, task).await;
    let now = SystemClock.now_ms();
    let key = |name: &str, created_at: i64| TriggerKey {
        tenant_id: t.tenant.id,
        key: name.to_owned(),
        task_id: TaskId(task),
        run_id: mthpt_engine::run::RunId(run),
        created_at,
    };
    {
        let mut tx = app.store().begin().await.unwrap();
        let old = now - TRIGGER_KEY_WINDOW_MS - 1;
        for i in 0..3 {
            assert!(
                tx.insert_trigger_key(&key(&format!("old-{i}"), old), 0)
                    .await
                    .unwrap()
            );
        }
        assert!(tx.insert_trigger_key(&key("fresh", now), 0).await.unwrap());
        tx.commit().await.unwrap();
    }
    let watchdog = Watchdog::new(app.shared_store(), WatchConfig::default());
    let report = watchdog.run_once(now, 0.5).await.unwrap();
    assert_eq!(report.trigger_keys_purged, 3);
    // The next purge waits for its interval (no backlog).
    let report = watchdog.run_once(now + 1_000, 0.5).await.unwrap();
    assert_eq!(report.trigger_keys_purged, 0);
    let mut tx = app.store().begin_read().await.unwrap();
    assert!(
        tx.find_trigger_key(t.tenant.id, "old-0", 0)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        tx.find_trigger_key(t.tenant.id, "fresh", 0)
            .await
            .unwrap()
            .is_some()
    );
    drop(tx);
    app.stop().await;
}

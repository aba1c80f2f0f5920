//! `/tenants/{tenant}/channels` on both backends: notification channels are created (a
//! webhook's generated secret shown once), validated naming the field, changed, audited without
//! their secrets, readable by every tenant role and changeable by admins only; the delivery
//! log shows the notifier's attempts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use mthpt_console::testing::TestApp;
use mthpt_engine::alarm::{AlarmKind, NewAlarm, Severity};
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::notify::{Notifier, NotifyConfig};
use mthpt_engine::tenant::Role;
use reqwest::Method;
use serde_json::{Value, json};

mthpt_engine::on_both_backends!(
    with mthpt_console::testing::spawn_app;
    channels_are_created_validated_changed_audited_and_deleted,
    delivery_log_shows_attempts,
);

async fn call(
    app: &TestApp,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = app.request(method, &format!("/api/v1{path}"), token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn channels_are_created_validated_changed_audited_and_deleted(app: TestApp) {
    let acme = app.tenant("acme").await;
    let (_, admin) = app.user(Some(&acme), "ada", Role::TenantAdmin).await;
    let (_, viewer) = app.user(Some(&acme), "vic", Role::TenantViewer).await;
    let (_, operator) = app.user(Some(&acme), "otto", Role::TenantOperator).await;

    let hook = json!({
        "name": "ops", "min_severity": "critical",
        "config": { "kind": "webhook", "url": "https://hooks.example.com/mthpt?team=ops" }
    });
    let (s, created) = call(
        &app,
        Method::POST,
        "/tenants/acme/channels",
        &admin,
        Some(hook.clone()),
    )
    .await;
    assert_eq!(s, 201, "{created}");
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.len() >= 32, "a generated secret: {secret}");
    assert_eq!(created["has_secret"], true);
    assert_eq!(created["min_severity"], "critical");
    assert_eq!(created["enabled"], true);
    let id = created["id"].as_i64().unwrap();

    // Read by every role; the secret never again.
    for token in [&admin, &viewer, &operator] {
        let (s, list) = call(&app, Method::GET, "/tenants/acme/channels", token, None).await;
        assert_eq!(s, 200);
        assert_eq!(list.as_array().unwrap().len(), 1);
        assert!(!list.to_string().contains(&secret), "{list}");
    }
    let (s, one) = call(
        &app,
        Method::GET,
        &format!("/tenants/acme/channels/{id}"),
        &viewer,
        None,
    )
    .await;
    assert_eq!(
        (s, one["config"]["url"].as_str()),
        (200, Some("https://hooks.example.com/mthpt?team=ops"))
    );
    assert!(one.get("secret").is_none());

    // Changed by admins only.
    for token in [&viewer, &operator] {
        let (s, _) = call(
            &app,
            Method::POST,
            "/tenants/acme/channels",
            token,
            Some(json!({
                "name": "mine", "config": { "kind": "webhook", "url": "https://x.example.com/" }
            })),
        )
        .await;
        assert_eq!(s, 403);
        let (s, _) = call(
            &app,
            Method::PATCH,
            &format!("/tenants/acme/channels/{id}"),
            token,
            Some(json!({ "enabled": false })),
        )
        .await;
        assert_eq!(s, 403);
    }

    // Validation names the field.
    let cases = [
        (
            json!({ "name": "x", "config": { "kind": "webhook", "url": "ftp://h/x" } }),
            "config.url",
        ),
        (
            json!({ "name": "Bad Name", "config": { "kind": "webhook", "url": "https://h/x" } }),
            "name",
        ),
        (
            json!({ "name": "x", "min_severity": "loud", "config": { "kind": "webhook", "url": "https://h/x" } }),
            "min_severity",
        ),
        (
            json!({ "name": "m", "config": { "kind": "email", "smtp_host": "smtp.example.com", "smtp_port": 587,
            "from": "a@example.com", "to": [] } }),
            "config.to",
        ),
        (
            json!({ "name": "m", "config": { "kind": "email", "smtp_host": "smtp.example.com", "smtp_port": 587,
            "from": "a@example.com", "to": ["ok@example.com", "not an address"] } }),
            "config.to[1]",
        ),
        (
            json!({ "name": "m", "config": { "kind": "email", "smtp_host": "smtp.example.com", "smtp_port": 587,
            "username": "u", "from": "a@example.com", "to": ["ok@example.com"] } }),
            "secret",
        ),
    ];
    for (body, field) in cases {
        let (s, p) = call(
            &app,
            Method::POST,
            "/tenants/acme/channels",
            &admin,
            Some(body.clone()),
        )
        .await;
        assert_eq!(s, 422, "{body} → {p}");
        assert_eq!(p["code"], "validation_failed");
        assert_eq!(p["errors"][0]["field"], field, "{p}");
    }
    let (s, p) = call(
        &app,
        Method::POST,
        "/tenants/acme/channels",
        &admin,
        Some(hook),
    )
    .await;
    assert_eq!((s, p["code"].as_str()), (409, Some("conflict")), "{p}");

    // An e-mail channel; its password is never shown.
    let (s, mail) = call(&app, Method::POST, "/tenants/acme/channels", &admin, Some(json!({
        "name": "oncall", "config": { "kind": "email", "smtp_host": "smtp.example.com", "smtp_port": 465,
            "tls": "tls", "username": "mthpt", "from": "mthpt@example.com", "to": ["oncall@example.com"] },
        "secret": "smtp-password-1"
    }))).await;
    assert_eq!(s, 201, "{mail}");
    assert!(mail.get("secret").is_none());
    assert_eq!(mail["min_severity"], "warning", "the default");
    assert_eq!(mail["config"]["tls"], "tls");

    // Changes: severity, secret, enabled; the kind stays.
    let (s, p) = call(&app, Method::PATCH, &format!("/tenants/acme/channels/{id}"), &admin, Some(json!({
        "config": { "kind": "email", "smtp_host": "h", "smtp_port": 25, "from": "a@b.c", "to": ["d@e.f"] }
    }))).await;
    assert_eq!(
        (s, p["errors"][0]["field"].as_str()),
        (422, Some("config.kind")),
        "{p}"
    );
    let (s, changed) = call(
        &app,
        Method::PATCH,
        &format!("/tenants/acme/channels/{id}"),
        &admin,
        Some(json!({
            "min_severity": "info", "secret": "rotated-secret", "enabled": false
        })),
    )
    .await;
    assert_eq!(s, 200, "{changed}");
    assert_eq!(
        (
            changed["min_severity"].as_str(),
            changed["enabled"].as_bool()
        ),
        (Some("info"), Some(false))
    );

    let (s, _) = call(
        &app,
        Method::DELETE,
        &format!("/tenants/acme/channels/{id}"),
        &admin,
        None,
    )
    .await;
    assert_eq!(s, 204);
    let (s, _) = call(
        &app,
        Method::GET,
        &format!("/tenants/acme/channels/{id}"),
        &admin,
        None,
    )
    .await;
    assert_eq!(s, 404);

    // Audited, without secrets.
    let (s, audit) = call(&app, Method::GET, "/tenants/acme/audit", &admin, None).await;
    assert_eq!(s, 200);
    let text = audit.to_string();
    for action in ["channel.create", "channel.update", "channel.delete"] {
        assert!(text.contains(action), "{action} in {text}");
    }
    for secret in [secret.as_str(), "smtp-password-1", "rotated-secret"] {
        assert!(!text.contains(secret), "the audit log shows a secret");
    }
    app.stop().await;
}

async fn delivery_log_shows_attempts(app: TestApp) {
    let acme = app.tenant("acme").await;
    let (s, created) = call(&app, Method::POST, "/tenants/acme/channels", &app.operator_token, Some(json!({
        // Nobody listens on port 1.
        "name": "down", "config": { "kind": "webhook", "url": "http://127.0.0.1:1/hook" }, "secret": "s"
    }))).await;
    assert_eq!(s, 201, "{created}");
    let id = created["id"].as_i64().unwrap();
    let now = SystemClock.now_ms();
    let alarm = {
        let mut tx = app.store().begin().await.unwrap();
        let a = tx
            .insert_alarm(
                &NewAlarm::new(
                    Some(acme.id),
                    AlarmKind::TimedOut,
                    Severity::Critical,
                    "too slow",
                ),
                now + 1,
            )
            .await
            .unwrap()
            .unwrap();
        tx.commit().await.unwrap();
        a
    };
    let notifier = Notifier::new(Arc::clone(&app.shared_store()), NotifyConfig::default()).unwrap();
    let report = notifier.run_once(now + 10).await.unwrap();
    assert_eq!((report.attempted, report.retrying), (1, 1), "{report:?}");

    let (s, page) = call(
        &app,
        Method::GET,
        &format!("/tenants/acme/channels/{id}/deliveries"),
        &app.operator_token,
        None,
    )
    .await;
    assert_eq!(s, 200, "{page}");
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["alarm_id"], alarm.id.0);
    assert_eq!(items[0]["state"], "pending");
    assert_eq!(items[0]["attempts"], 1);
    assert!(items[0]["next_attempt_at"].is_string());
    assert!(
        items[0]["last_error"].as_str().unwrap().contains("connect"),
        "{page}"
    );
    let (s, p) = call(
        &app,
        Method::GET,
        &format!("/tenants/acme/channels/{id}/deliveries?cursor=zzz"),
        &app.operator_token,
        None,
    )
    .await;
    assert_eq!((s, p["errors"][0]["field"].as_str()), (422, Some("cursor")));
    app.stop().await;
}

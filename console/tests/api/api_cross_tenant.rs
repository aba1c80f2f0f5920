//! The cross-tenant matrix: every admin endpoint × every tenant role of tenant B × a resource of
//! tenant A answers 403 or 404, and the database is unchanged afterwards. And a viewer's unsafe
//! request in its own tenant is 403 (its tenant's quotas and weight included) — on both
//! backends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::app::ExecutorRegistration;
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::store::{Backend, Scope};
use mthpt_engine::tenant::Role;
use reqwest::Method;
use serde_json::{Value, json};

/// Everything the admin endpoints could change, as text.
async fn snapshot(app: &TestApp) -> String {
    let mut tx = app.store().begin_read().await.unwrap();
    let mut out = String::new();
    for t in tx.list_tenants().await.unwrap() {
        out += &format!("{t:?}\n");
        out += &format!(
            "  {:?} weight {}\n",
            tx.get_tenant_quotas(t.id).await.unwrap(),
            tx.get_tenant_weight(t.id).await.unwrap()
        );
        for a in tx.list_apps(t.id).await.unwrap() {
            out += &format!("{a:?} secret={}\n", a.secret);
        }
        for e in tx.list_executors(t.id, None).await.unwrap() {
            out += &format!("{:?} {:?}\n", e.id, e.state);
        }
        for c in tx.list_channels(t.id).await.unwrap() {
            out += &format!("{c:?}\n");
        }
    }
    for u in tx.list_users(Scope::Cluster).await.unwrap() {
        out += &format!("{u:?} {}\n", u.password_hash);
        for k in tx.list_api_tokens(u.id).await.unwrap() {
            out += &format!("  {:?} {} {:?}\n", k.id, k.name, k.revoked_at);
        }
    }
    let audit = tx.list_audit(Scope::Cluster, None, 1000).await.unwrap();
    out += &format!("audit events: {}\n", audit.len());
    out
}

async fn cross_tenant_matrix(app: TestApp) {
    let acme = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let (a_user, _) = app.user(Some(&acme), "ada", Role::TenantAdmin).await;
    let a_token_id = {
        let mut tx = app.store().begin_read().await.unwrap();
        tx.list_api_tokens(a_user.id).await.unwrap()[0].id
    };
    let (op_user, _) = app.user(None, "opal", Role::Operator).await;
    let created: Value = app
        .op(Method::POST, "/api/v1/tenants/acme/apps")
        .json(&json!({ "name": "shop" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let executor = {
        let mut tx = app.store().begin().await.unwrap();
        let e = tx
            .register_executor(
                &ExecutorRegistration {
                    app_id: mthpt_engine::app::AppId(created["id"].as_i64().unwrap()),
                    instance_id: "shop-1".into(),
                    base_url: "http://127.0.0.1:9".into(),
                    capacity: 1,
                    handlers: vec![],
                    labels: BTreeMap::new(),
                },
                SystemClock.now_ms(),
            )
            .await
            .unwrap();
        tx.commit().await.unwrap();
        e.id
    };
    let channel: Value = app
        .op(Method::POST, "/api/v1/tenants/acme/channels")
        .json(&json!({ "name": "ops", "config": { "kind": "webhook", "url": "http://127.0.0.1:9/hook" } }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let c = channel["id"].as_i64().unwrap();
    let (u, t, o, e) = (a_user.id, a_token_id, op_user.id, executor);
    let hook =
        json!({ "name": "evil", "config": { "kind": "webhook", "url": "http://evil.example/x" } });
    let user =
        json!({ "username": "intruder", "password": "long enough pw", "role": "tenant_admin" });
    let endpoints: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, "/tenants/acme".into(), None),
        (
            Method::PATCH,
            "/tenants/acme".into(),
            Some(json!({ "node_group": "mine" })),
        ),
        (Method::DELETE, "/tenants/acme".into(), None),
        (
            Method::POST,
            "/tenants".into(),
            Some(json!({ "name": "new" })),
        ),
        (Method::GET, "/tenants/acme/quotas".into(), None),
        (
            Method::PUT,
            "/tenants/acme/quotas".into(),
            Some(json!({ "max_tasks": 1 })),
        ),
        (Method::GET, "/tenants/acme/weight".into(), None),
        (
            Method::PUT,
            "/tenants/acme/weight".into(),
            Some(json!({ "weight": 1000 })),
        ),
        (Method::GET, "/tenants/acme/apps".into(), None),
        (
            Method::POST,
            "/tenants/acme/apps".into(),
            Some(json!({ "name": "evil" })),
        ),
        (Method::GET, "/tenants/acme/apps/shop".into(), None),
        (
            Method::POST,
            "/tenants/acme/apps/shop/rotate-secret".into(),
            None,
        ),
        (Method::DELETE, "/tenants/acme/apps/shop".into(), None),
        (Method::GET, "/tenants/acme/executors".into(), None),
        (
            Method::POST,
            format!("/tenants/acme/executors/{e}/drain"),
            None,
        ),
        (
            Method::POST,
            format!("/tenants/other/executors/{e}/drain"),
            None,
        ),
        (Method::GET, "/tenants/acme/users".into(), None),
        (
            Method::POST,
            "/tenants/acme/users".into(),
            Some(user.clone()),
        ),
        (Method::GET, format!("/tenants/acme/users/{u}"), None),
        (
            Method::PATCH,
            format!("/tenants/acme/users/{u}"),
            Some(json!({ "disabled": true })),
        ),
        (Method::DELETE, format!("/tenants/acme/users/{u}"), None),
        (Method::GET, format!("/tenants/other/users/{u}"), None),
        (
            Method::PATCH,
            format!("/tenants/other/users/{u}"),
            Some(json!({ "password": "taken over!!" })),
        ),
        (Method::DELETE, format!("/tenants/other/users/{u}"), None),
        (Method::GET, format!("/tenants/acme/users/{u}/tokens"), None),
        (
            Method::POST,
            format!("/tenants/acme/users/{u}/tokens"),
            Some(json!({ "name": "x" })),
        ),
        (
            Method::DELETE,
            format!("/tenants/acme/users/{u}/tokens/{t}"),
            None,
        ),
        (
            Method::POST,
            format!("/tenants/other/users/{u}/tokens"),
            Some(json!({ "name": "x" })),
        ),
        (
            Method::DELETE,
            format!("/tenants/other/users/{u}/tokens/{t}"),
            None,
        ),
        (Method::DELETE, format!("/tokens/{t}"), None),
        (Method::GET, "/tenants/acme/channels".into(), None),
        (
            Method::POST,
            "/tenants/acme/channels".into(),
            Some(hook.clone()),
        ),
        (Method::GET, format!("/tenants/acme/channels/{c}"), None),
        (
            Method::PATCH,
            format!("/tenants/acme/channels/{c}"),
            Some(json!({ "enabled": false })),
        ),
        (Method::DELETE, format!("/tenants/acme/channels/{c}"), None),
        (
            Method::GET,
            format!("/tenants/acme/channels/{c}/deliveries"),
            None,
        ),
        (Method::GET, format!("/tenants/other/channels/{c}"), None),
        (
            Method::PATCH,
            format!("/tenants/other/channels/{c}"),
            Some(json!({ "config": { "kind": "webhook", "url": "http://evil.example/x" } })),
        ),
        (Method::DELETE, format!("/tenants/other/channels/{c}"), None),
        (
            Method::GET,
            format!("/tenants/other/channels/{c}/deliveries"),
            None,
        ),
        (Method::GET, "/nodes".into(), None),
        (Method::GET, "/users".into(), None),
        (Method::POST, "/users".into(), Some(user.clone())),
        (Method::GET, format!("/users/{o}"), None),
        (
            Method::PATCH,
            format!("/users/{o}"),
            Some(json!({ "disabled": true })),
        ),
        (Method::DELETE, format!("/users/{o}"), None),
        (Method::GET, format!("/users/{o}/tokens"), None),
        (
            Method::POST,
            format!("/users/{o}/tokens"),
            Some(json!({ "name": "x" })),
        ),
    ];
    let mut callers = Vec::new();
    for (name, role) in [
        ("b-admin", Role::TenantAdmin),
        ("b-operator", Role::TenantOperator),
        ("b-viewer", Role::TenantViewer),
    ] {
        callers.push((role, app.user(Some(&other), name, role).await.1));
    }
    let before = snapshot(&app).await;
    let mut wrong = Vec::new();
    for (role, token) in &callers {
        for (method, path, body) in &endpoints {
            let mut req = app.request(method.clone(), &format!("/api/v1{path}"), token);
            if let Some(b) = body {
                req = req.json(b);
            }
            let res = req.send().await.unwrap();
            let status = res.status().as_u16();
            let text = res.text().await.unwrap();
            if status != 403 && status != 404 {
                wrong.push(format!("{role} {method} {path} → {status} {text}"));
            }
            assert!(
                !text.contains("shop-1") && !text.contains("\"ada\""),
                "{role} {method} {path} leaked: {text}"
            );
        }
    }
    assert!(
        wrong.is_empty(),
        "answered other than 403/404:\n{}",
        wrong.join("\n")
    );
    assert_eq!(snapshot(&app).await, before, "the database changed");

    // A viewer's unsafe requests in its own tenant are 403.
    let (_, viewer) = &callers[2];
    let own_unsafe: Vec<(Method, String, Option<Value>)> = vec![
        (
            Method::PATCH,
            "/tenants/other".into(),
            Some(json!({ "display_name": "x" })),
        ),
        (
            Method::POST,
            "/tenants/other/apps".into(),
            Some(json!({ "name": "mine" })),
        ),
        (
            Method::POST,
            "/tenants/other/users".into(),
            Some(user.clone()),
        ),
        (Method::POST, "/tenants/other/channels".into(), Some(hook)),
        (
            Method::PUT,
            "/tenants/other/quotas".into(),
            Some(json!({ "max_tasks": 1 })),
        ),
        (
            Method::PUT,
            "/tenants/other/weight".into(),
            Some(json!({ "weight": 1000 })),
        ),
    ];
    for (method, path, body) in own_unsafe {
        let mut req = app.request(method.clone(), &format!("/api/v1{path}"), viewer);
        if let Some(b) = body {
            req = req.json(&b);
        }
        assert_eq!(req.send().await.unwrap().status(), 403, "{method} {path}");
    }
    assert_eq!(snapshot(&app).await, before, "the database changed");
    app.stop().await;
}

#[tokio::test]
async fn cross_tenant_matrix_postgres() {
    cross_tenant_matrix(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn cross_tenant_matrix_sqlite() {
    cross_tenant_matrix(spawn_app(Backend::Sqlite).await).await;
}

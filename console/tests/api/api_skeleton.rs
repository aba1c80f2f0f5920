//! The API's frame: authentication, the role table at the HTTP edge, problem+json errors, the
//! body cap, and the tenants resource — on both backends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::api::ApiLimits;
use mthpt_console::testing::{TestApp, spawn_app, spawn_app_with};
use mthpt_engine::store::Backend;
use mthpt_engine::tenant::Role;
use reqwest::Method;
use serde_json::{Value, json};

pub(crate) async fn problem(res: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(res.status().as_u16(), status);
    let ct = res.headers()["content-type"].to_str().unwrap().to_owned();
    assert_eq!(ct, "application/problem+json");
    let request_id = res.headers()["x-request-id"].to_str().unwrap().to_owned();
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status);
    assert_eq!(
        body["instance"],
        format!("urn:mthpt:request:{request_id}"),
        "{body}"
    );
    body
}

async fn audit_actions(app: &TestApp) -> Vec<String> {
    let mut tx = app.store().begin_read().await.unwrap();
    let events = tx
        .list_audit(mthpt_engine::store::Scope::Cluster, None, 10)
        .await
        .unwrap();
    events.into_iter().map(|e| e.action).collect()
}

async fn tenants_crud_and_errors(app: TestApp) {
    let res = app
        .op(Method::POST, "/api/v1/tenants")
        .json(&json!({ "name": "acme", "display_name": "Acme Corp" }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    assert_eq!(
        (created["name"].as_str(), created["node_group"].as_str()),
        (Some("acme"), Some("default"))
    );

    let dup = app
        .op(Method::POST, "/api/v1/tenants")
        .json(&json!({ "name": "acme" }))
        .send()
        .await
        .unwrap();
    problem(dup, 409, "conflict").await;

    let bad = app
        .op(Method::POST, "/api/v1/tenants")
        .json(&json!({ "name": "Not A Slug" }))
        .send()
        .await
        .unwrap();
    let body = problem(bad, 422, "validation_failed").await;
    assert_eq!(body["errors"][0]["field"], "name");

    let patched: Value = app
        .op(Method::PATCH, "/api/v1/tenants/acme")
        .json(&json!({ "node_group": "eu" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(patched["node_group"], "eu");

    assert_eq!(
        audit_actions(&app).await,
        ["tenant.update", "tenant.create"]
    );

    let missing = app
        .op(Method::GET, "/api/v1/tenants/nope")
        .send()
        .await
        .unwrap();
    problem(missing, 404, "not_found").await;

    let deleted = app
        .op(Method::DELETE, "/api/v1/tenants/acme")
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let gone = app
        .op(Method::GET, "/api/v1/tenants/acme")
        .send()
        .await
        .unwrap();
    problem(gone, 404, "not_found").await;

    // The tenant's own history goes with it; the deletion stays in the cluster's log.
    assert_eq!(audit_actions(&app).await, ["tenant.delete"]);
    app.stop().await;
}

#[tokio::test]
async fn tenants_crud_and_errors_postgres() {
    tenants_crud_and_errors(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn tenants_crud_and_errors_sqlite() {
    tenants_crud_and_errors(spawn_app(Backend::Sqlite).await).await;
}

async fn authentication_and_tenant_scoping(app: TestApp) {
    let none = app.client.get(app.url("/api/v1/me")).send().await.unwrap();
    problem(none, 401, "unauthenticated").await;
    let unknown = app
        .request(Method::GET, "/api/v1/me", "mthpt_0000")
        .send()
        .await
        .unwrap();
    problem(unknown, 401, "unauthenticated").await;

    let a = app.tenant("alpha").await;
    app.tenant("beta").await;
    let (viewer, viewer_token) = app.user(Some(&a), "val", Role::TenantViewer).await;
    let me: Value = app
        .request(Method::GET, "/api/v1/me", &viewer_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (me["role"].as_str(), me["tenant"].as_str()),
        (Some("tenant_viewer"), Some("alpha"))
    );

    // A tenant user lists only its own tenant, and another tenant looks like no tenant at all.
    let list: Value = app
        .request(Method::GET, "/api/v1/tenants", &viewer_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    let other = app
        .request(Method::GET, "/api/v1/tenants/beta", &viewer_token)
        .send()
        .await
        .unwrap();
    problem(other, 404, "not_found").await;
    let unsafe_req = app
        .request(Method::PATCH, "/api/v1/tenants/alpha", &viewer_token)
        .json(&json!({ "display_name": "mine now" }))
        .send()
        .await
        .unwrap();
    problem(unsafe_req, 403, "forbidden").await;

    // A tenant operator reads its tenant but may not change its configuration.
    let (_, op_token) = app.user(Some(&a), "olga", Role::TenantOperator).await;
    let read = app
        .request(Method::GET, "/api/v1/tenants/alpha", &op_token)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    let change = app
        .request(Method::DELETE, "/api/v1/tenants/alpha", &op_token)
        .send()
        .await
        .unwrap();
    problem(change, 403, "forbidden").await;

    let expired = app.token(&viewer, Some(1)).await;
    let res = app
        .request(Method::GET, "/api/v1/me", &expired)
        .send()
        .await
        .unwrap();
    problem(res, 401, "unauthenticated").await;
    app.stop().await;
}

#[tokio::test]
async fn authentication_and_tenant_scoping_postgres() {
    authentication_and_tenant_scoping(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn authentication_and_tenant_scoping_sqlite() {
    authentication_and_tenant_scoping(spawn_app(Backend::Sqlite).await).await;
}

#[tokio::test]
async fn oversized_bodies_and_unknown_paths_are_problems() {
    let app = spawn_app_with(
        Backend::Sqlite,
        ApiLimits {
            max_body_bytes: 100,
        },
    )
    .await;
    let big = app
        .op(Method::POST, "/api/v1/tenants")
        .json(&json!({ "name": "x".repeat(200) }))
        .send()
        .await
        .unwrap();
    problem(big, 413, "payload_too_large").await;
    let nowhere = app.op(Method::GET, "/api/v1/nowhere").send().await.unwrap();
    problem(nowhere, 404, "not_found").await;
    let spec: Value = app
        .client
        .get(app.url("/api/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3.1"));
    assert!(spec["paths"]["/api/v1/tenants/{tenant}"].is_object());
    let docs = app.client.get(app.url("/api/docs/")).send().await.unwrap();
    assert_eq!(docs.status(), 200);
    app.stop().await;
}

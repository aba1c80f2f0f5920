//! Users, role grants and API tokens through the API — on both backends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::store::Backend;
use mthpt_engine::tenant::Role;
use reqwest::Method;
use serde_json::{Value, json};

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

async fn users_roles_and_tokens(app: TestApp) {
    let acme = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let (admin_user, admin) = app.user(Some(&acme), "ada", Role::TenantAdmin).await;
    let (_, viewer) = app.user(Some(&acme), "vic", Role::TenantViewer).await;
    let (_, stranger) = app.user(Some(&other), "sam", Role::TenantAdmin).await;
    let users = "/api/v1/tenants/acme/users";

    let (s, created) = call(
        &app,
        Method::POST,
        users,
        &admin,
        Some(json!({
            "username": "neo", "password": "long enough pw", "role": "tenant_viewer"
        })),
    )
    .await;
    assert_eq!(s, 201, "{created}");
    assert_eq!(created["role"], "tenant_viewer");
    assert!(created.get("password_hash").is_none());
    let neo = created["id"].as_i64().unwrap();

    let (s, body) = call(
        &app,
        Method::POST,
        users,
        &admin,
        Some(json!({
            "username": "short", "password": "tiny", "role": "tenant_viewer"
        })),
    )
    .await;
    assert_eq!(
        (s, body["errors"][0]["field"].as_str()),
        (422, Some("password"))
    );
    let (s, body) = call(
        &app,
        Method::POST,
        users,
        &admin,
        Some(json!({
            "username": "boss", "password": "long enough pw", "role": "operator"
        })),
    )
    .await;
    assert_eq!(
        (s, body["errors"][0]["field"].as_str()),
        (422, Some("role"))
    );
    let (s, _) = call(
        &app,
        Method::POST,
        users,
        &admin,
        Some(json!({
            "username": "neo", "password": "long enough pw", "role": "tenant_viewer"
        })),
    )
    .await;
    assert_eq!(s, 409);
    let (s, _) = call(&app, Method::GET, users, &viewer, None).await;
    assert_eq!(s, 403, "viewers do not manage users");
    let (s, _) = call(&app, Method::GET, users, &stranger, None).await;
    assert_eq!(s, 404, "another tenant's users are invisible");
    let (s, list) = call(&app, Method::GET, users, &admin, None).await;
    assert_eq!((s, list.as_array().map(Vec::len)), (200, Some(3)));

    // Role grant, then a token for the user, then disabling the user stops the token.
    let neo_path = format!("{users}/{neo}");
    let (s, changed) = call(
        &app,
        Method::PATCH,
        &neo_path,
        &admin,
        Some(json!({ "role": "tenant_operator" })),
    )
    .await;
    assert_eq!(
        (s, changed["role"].as_str()),
        (200, Some("tenant_operator"))
    );
    let (s, issued) = call(
        &app,
        Method::POST,
        &format!("{neo_path}/tokens"),
        &admin,
        Some(json!({ "name": "ci" })),
    )
    .await;
    assert_eq!(s, 201, "{issued}");
    let neo_token = issued["token"].as_str().unwrap().to_owned();
    let (s, me) = call(&app, Method::GET, "/api/v1/me", &neo_token, None).await;
    assert_eq!((s, me["role"].as_str()), (200, Some("tenant_operator")));
    let (_, listed) = call(
        &app,
        Method::GET,
        &format!("{neo_path}/tokens"),
        &admin,
        None,
    )
    .await;
    assert!(listed[0]["last_used_at"].is_string(), "{listed}");
    assert!(listed[0].get("token").is_none());
    let (s, _) = call(
        &app,
        Method::PATCH,
        &neo_path,
        &admin,
        Some(json!({ "disabled": true })),
    )
    .await;
    assert_eq!(s, 200);
    let (s, _) = call(&app, Method::GET, "/api/v1/me", &neo_token, None).await;
    assert_eq!(s, 401, "a disabled user's token stops working");

    // Own tokens: create, use, revoke.
    let (s, mine) = call(
        &app,
        Method::POST,
        "/api/v1/tokens",
        &admin,
        Some(json!({
            "name": "laptop", "expires_at": "2999-01-01T00:00:00Z"
        })),
    )
    .await;
    assert_eq!(s, 201);
    let laptop = mine["token"].as_str().unwrap().to_owned();
    assert_eq!(
        call(&app, Method::GET, "/api/v1/me", &laptop, None).await.0,
        200
    );
    let (s, _) = call(
        &app,
        Method::POST,
        "/api/v1/tokens",
        &admin,
        Some(json!({
            "name": "old", "expires_at": "2001-01-01T00:00:00Z"
        })),
    )
    .await;
    assert_eq!(s, 422);
    let id = mine["id"].as_i64().unwrap();
    assert_eq!(
        call(
            &app,
            Method::DELETE,
            &format!("/api/v1/tokens/{id}"),
            &admin,
            None
        )
        .await
        .0,
        204
    );
    assert_eq!(
        call(&app, Method::GET, "/api/v1/me", &laptop, None).await.0,
        401,
        "revoked"
    );

    // Nobody removes themselves; the user's own admin removes others.
    let self_path = format!("{users}/{}", admin_user.id);
    assert_eq!(
        call(&app, Method::DELETE, &self_path, &admin, None).await.0,
        409
    );
    assert_eq!(
        call(&app, Method::DELETE, &neo_path, &admin, None).await.0,
        204
    );
    assert_eq!(
        call(&app, Method::GET, &neo_path, &admin, None).await.0,
        404
    );

    // Operators under /users.
    let (s, op) = call(
        &app,
        Method::POST,
        "/api/v1/users",
        &app.operator_token,
        Some(json!({
            "username": "opal", "password": "long enough pw"
        })),
    )
    .await;
    assert_eq!((s, op["role"].as_str()), (201, Some("operator")));
    let (s, ops) = call(
        &app,
        Method::GET,
        "/api/v1/users",
        &app.operator_token,
        None,
    )
    .await;
    assert_eq!((s, ops.as_array().map(Vec::len)), (200, Some(2)));
    assert_eq!(
        call(&app, Method::GET, "/api/v1/users", &admin, None)
            .await
            .0,
        403
    );
    let op_id = op["id"].as_i64().unwrap();
    let (s, op_tok) = call(
        &app,
        Method::POST,
        &format!("/api/v1/users/{op_id}/tokens"),
        &app.operator_token,
        Some(json!({ "name": "x" })),
    )
    .await;
    assert_eq!(s, 201);
    let (_, me) = call(
        &app,
        Method::GET,
        "/api/v1/me",
        op_tok["token"].as_str().unwrap(),
        None,
    )
    .await;
    assert_eq!(me["username"], "opal");
    let acme_user_via_users = format!("/api/v1/users/{}", admin_user.id);
    assert_eq!(
        call(
            &app,
            Method::GET,
            &acme_user_via_users,
            &app.operator_token,
            None
        )
        .await
        .0,
        404
    );
    app.stop().await;
}

#[tokio::test]
async fn users_roles_and_tokens_postgres() {
    users_roles_and_tokens(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn users_roles_and_tokens_sqlite() {
    users_roles_and_tokens(spawn_app(Backend::Sqlite).await).await;
}

/// A disabled tenant's users may look but change nothing; an operator enables it again.
async fn a_disabled_tenants_users_read_but_change_nothing(app: TestApp) {
    let acme = app.tenant("acme").await;
    let (_, admin) = app.user(Some(&acme), "ada", Role::TenantAdmin).await;
    let disable = |disabled: bool| Some(json!({ "disabled": disabled }));
    let (s, body) = call(
        &app,
        Method::PATCH,
        "/api/v1/tenants/acme",
        &app.operator_token,
        disable(true),
    )
    .await;
    assert_eq!((s, &body["disabled"]), (200, &json!(true)), "{body}");
    let (s, _) = call(
        &app,
        Method::GET,
        "/api/v1/tenants/acme/tasks",
        &admin,
        None,
    )
    .await;
    assert_eq!(s, 200, "reads go on");
    let app_body = Some(json!({ "name": "shop" }));
    let (s, body) = call(
        &app,
        Method::POST,
        "/api/v1/tenants/acme/apps",
        &admin,
        app_body.clone(),
    )
    .await;
    assert_eq!(
        (s, body["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    assert!(body.to_string().contains("disabled"), "{body}");
    call(
        &app,
        Method::PATCH,
        "/api/v1/tenants/acme",
        &app.operator_token,
        disable(false),
    )
    .await;
    let (s, body) = call(
        &app,
        Method::POST,
        "/api/v1/tenants/acme/apps",
        &admin,
        app_body,
    )
    .await;
    assert_eq!(s, 201, "{body}");
    app.stop().await;
}

#[tokio::test]
async fn a_disabled_tenants_users_read_but_change_nothing_postgres() {
    a_disabled_tenants_users_read_but_change_nothing(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn a_disabled_tenants_users_read_but_change_nothing_sqlite() {
    a_disabled_tenants_users_read_but_change_nothing(spawn_app(Backend::Sqlite).await).await;
}

//! Tenant claim weights over the REST API, on both backends: every tenant starts at 1;
//! operators set a tenant's weight and it is audited; the tenant's own users read it but may
//! not set it (403), another tenant's users get 404 for both; a weight that is not a whole
//! number from 1 to 1000 is `422` naming `weight` and changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::TestApp;
use mthpt_engine::store::Scope;
use mthpt_engine::tenant::Role;
use reqwest::Method;
use serde_json::{Value, json};

mthpt_engine::on_both_backends!(
    with mthpt_console::testing::spawn_app;
    operators_set_a_weight_the_tenant_reads,
    only_operators_set_a_weight_and_other_tenants_see_nothing,
    weights_outside_one_to_a_thousand_are_refused_naming_the_field,
);

const ACME: &str = "/api/v1/tenants/acme/weight";

async fn answer(res: reqwest::Response) -> (u16, Value) {
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn read_as(app: &TestApp, token: &str) -> (u16, Value) {
    answer(app.request(Method::GET, ACME, token).send().await.unwrap()).await
}

async fn put_as(app: &TestApp, token: &str, body: &Value) -> (u16, Value) {
    answer(
        app.request(Method::PUT, ACME, token)
            .json(body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

async fn operators_set_a_weight_the_tenant_reads(app: TestApp) {
    let acme = app.tenant("acme").await;
    let (_, viewer) = app.user(Some(&acme), "vic", Role::TenantViewer).await;

    let (status, fresh) = read_as(&app, &viewer).await;
    assert_eq!(status, 200, "{fresh}");
    assert_eq!(
        fresh,
        json!({ "tenant": "acme", "weight": 1 }),
        "the default"
    );

    let (status, set) = put_as(&app, &app.operator_token, &json!({ "weight": 3 })).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set, json!({ "tenant": "acme", "weight": 3 }));
    let (_, read) = read_as(&app, &viewer).await;
    assert_eq!(read["weight"], json!(3), "the tenant reads the new weight");
    let stored = {
        let mut tx = app.store().begin_read().await.unwrap();
        tx.get_tenant_weight(acme.id).await.unwrap()
    };
    assert_eq!(
        stored, 3,
        "the claim reads the weight from the tenant's row"
    );

    let audit = {
        let mut tx = app.store().begin_read().await.unwrap();
        tx.list_audit(Scope::Tenant(acme.id), None, 100)
            .await
            .unwrap()
    };
    let change = audit
        .iter()
        .find(|e| e.action == "tenant.weight")
        .expect("the change is audited");
    assert_eq!(
        change.details.0,
        json!({ "before": 1, "after": 3 }),
        "{change:?}"
    );
    app.stop().await;
}

async fn only_operators_set_a_weight_and_other_tenants_see_nothing(app: TestApp) {
    let acme = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let mut own = Vec::new();
    for (name, role) in [
        ("ada", Role::TenantAdmin),
        ("otto", Role::TenantOperator),
        ("vic", Role::TenantViewer),
    ] {
        own.push((role, app.user(Some(&acme), name, role).await.1));
    }
    let (_, stranger) = app.user(Some(&other), "olga", Role::TenantAdmin).await;
    put_as(&app, &app.operator_token, &json!({ "weight": 5 })).await;

    for (role, token) in &own {
        let (status, body) = read_as(&app, token).await;
        assert_eq!((status, &body["weight"]), (200, &json!(5)), "{role}");
        let (status, body) = put_as(&app, token, &json!({ "weight": 50 })).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("forbidden")),
            "{role}: {body}"
        );
        // Access is checked before the value: a bad value is still 403.
        let (status, _) = put_as(&app, token, &json!({ "weight": 0 })).await;
        assert_eq!(status, 403, "{role}");
    }
    let (status, body) = read_as(&app, &stranger).await;
    assert_eq!(status, 404, "another tenant's weight is not found: {body}");
    let (status, body) = put_as(&app, &stranger, &json!({ "weight": 50 })).await;
    assert_eq!(status, 404, "another tenant's weight cannot be set: {body}");

    let unknown = app
        .op(Method::PUT, "/api/v1/tenants/nobody/weight")
        .json(&json!({ "weight": 2 }))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let anonymous = app
        .client
        .put(app.url(ACME))
        .json(&json!({ "weight": 2 }))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);

    let (_, read) = read_as(&app, &app.operator_token).await;
    assert_eq!(read["weight"], json!(5), "no refused change wrote anything");
    app.stop().await;
}

async fn weights_outside_one_to_a_thousand_are_refused_naming_the_field(app: TestApp) {
    app.tenant("acme").await;
    let op = app.operator_token.clone();
    for bad in [0, -1, 1001, 2_147_483_648_i64] {
        let (status, body) = put_as(&app, &op, &json!({ "weight": bad })).await;
        assert_eq!(
            (
                status,
                body["code"].as_str(),
                body["errors"][0]["field"].as_str()
            ),
            (422, Some("validation_failed"), Some("weight")),
            "{bad}: {body}"
        );
    }
    for bad in [
        json!({ "weight": "heavy" }),
        json!({ "weight": 2.5 }),
        json!({}),
    ] {
        let (status, body) = put_as(&app, &op, &bad).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (422, Some("validation_failed")),
            "{bad}: {body}"
        );
    }
    let not_json = app
        .op(Method::PUT, ACME)
        .header("content-type", "text/plain")
        .body("weight=3")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), 400);

    let (_, read) = read_as(&app, &op).await;
    assert_eq!(read["weight"], json!(1), "refused values changed nothing");
    app.stop().await;
}

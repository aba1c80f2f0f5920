//! A tenant's retention of finished runs through the API, on both backends: 7 days unless an
//! operator sets it, 1 to 87600 hours, anything else refused naming `retention_hours`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::store::Backend;
use mthpt_engine::tenant::Role;
use reqwest::Method;
use serde_json::{Value, json};

async fn answer(res: reqwest::Response) -> (u16, Value) {
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

async fn retention_is_set_by_operators_within_its_range(app: TestApp) {
    let acme = app.tenant("acme").await;
    let (_, admin) = app.user(Some(&acme), "ada", Role::TenantAdmin).await;

    let (status, fresh) = answer(
        app.op(Method::GET, "/api/v1/tenants/acme")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(fresh["retention_hours"], json!(168), "default: 7 days");

    let (status, set) = answer(
        app.op(Method::PATCH, "/api/v1/tenants/acme")
            .json(&json!({ "retention_hours": 720 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["retention_hours"], json!(720));

    let (status, refused) = answer(
        app.request(Method::PATCH, "/api/v1/tenants/acme", &admin)
            .json(&json!({ "retention_hours": 1 }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, refused["code"].as_str()), (403, Some("forbidden")));

    for bad in [0, -5, 87_601] {
        let (status, body) = answer(
            app.op(Method::PATCH, "/api/v1/tenants/acme")
                .json(&json!({ "retention_hours": bad }))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(
            body["errors"][0]["field"],
            json!("retention_hours"),
            "{body}"
        );
    }
    let (_, read) = answer(
        app.request(Method::GET, "/api/v1/tenants/acme", &admin)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        read["retention_hours"],
        json!(720),
        "refused changes changed nothing"
    );
    app.stop().await;
}

#[tokio::test]
async fn retention_is_set_by_operators_within_its_range_postgres() {
    retention_is_set_by_operators_within_its_range(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn retention_is_set_by_operators_within_its_range_sqlite() {
    retention_is_set_by_operators_within_its_range(spawn_app(Backend::Sqlite).await).await;
}

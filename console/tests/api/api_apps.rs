//! Apps (secrets shown once, rotate, delete), executor instances (live view, drain, undrain)
//! and engine nodes through the API — on both backends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::app::ExecutorRegistration;
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::store::{Backend, Scope};
use mthpt_engine::tenant::Role;
use reqwest::Method;
use serde_json::{Value, json};

async fn status_code(res: reqwest::Response) -> (u16, String) {
    let status = res.status().as_u16();
    let body: Value = res.json().await.unwrap_or(Value::Null);
    (status, body["code"].as_str().unwrap_or("").to_owned())
}

fn pair(status: u16, code: &str) -> (u16, String) {
    (status, code.to_owned())
}

async fn apps_executors_and_nodes(app: TestApp) {
    let acme = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let (_, admin) = app.user(Some(&acme), "ada", Role::TenantAdmin).await;
    let (_, viewer) = app.user(Some(&acme), "vic", Role::TenantViewer).await;
    let (_, operator) = app.user(Some(&acme), "oto", Role::TenantOperator).await;
    let (_, stranger) = app.user(Some(&other), "sam", Role::TenantAdmin).await;

    let res = app
        .request(Method::POST, "/api/v1/tenants/acme/apps", &admin)
        .json(&json!({ "name": "shop" }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let created: Value = res.json().await.unwrap();
    assert_eq!(created["key"], "acme.shop");
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert_eq!(secret.len(), 64);
    let stored = {
        let mut tx = app.store().begin_read().await.unwrap();
        tx.find_app_by_key("acme", "shop").await.unwrap().unwrap()
    };
    assert_eq!(
        stored.secret, secret,
        "the shown secret is the one wrappers sign with"
    );

    let dup = app
        .request(Method::POST, "/api/v1/tenants/acme/apps", &admin)
        .json(&json!({ "name": "shop" }))
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(dup).await, pair(409, "conflict"));
    let bad = app
        .request(Method::POST, "/api/v1/tenants/acme/apps", &admin)
        .json(&json!({ "name": "Shop!" }))
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(bad).await, pair(422, "validation_failed"));
    let by_viewer = app
        .request(Method::POST, "/api/v1/tenants/acme/apps", &viewer)
        .json(&json!({ "name": "mine" }))
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(by_viewer).await, pair(403, "forbidden"));

    let list: Value = app
        .request(Method::GET, "/api/v1/tenants/acme/apps", &viewer)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert!(list[0].get("secret").is_none(), "{list}");
    let missing = app
        .request(Method::GET, "/api/v1/tenants/acme/apps/nope", &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(missing).await, pair(404, "not_found"));
    let foreign = app
        .request(
            Method::POST,
            "/api/v1/tenants/acme/apps/shop/rotate-secret",
            &stranger,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(foreign).await, pair(404, "not_found"));

    let rotated: Value = app
        .request(
            Method::POST,
            "/api/v1/tenants/acme/apps/shop/rotate-secret",
            &admin,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let new_secret = rotated["secret"].as_str().unwrap();
    assert_ne!(new_secret, secret);
    let stored = {
        let mut tx = app.store().begin_read().await.unwrap();
        tx.find_app_by_key("acme", "shop").await.unwrap().unwrap()
    };
    assert_eq!(stored.secret, new_secret);

    // Executors: a registered wrapper shows in the live view and can be drained.
    let executor = {
        let mut tx = app.store().begin().await.unwrap();
        let e = tx
            .register_executor(
                &ExecutorRegistration {
                    app_id: stored.id,
                    instance_id: "shop-1".into(),
                    base_url: "http://127.0.0.1:9".into(),
                    capacity: 4,
                    handlers: vec!["export".into()],
                    labels: BTreeMap::from([("zone".into(), "a".into())]),
                },
                SystemClock.now_ms(),
            )
            .await
            .unwrap();
        tx.commit().await.unwrap();
        e
    };
    let live: Value = app
        .request(
            Method::GET,
            "/api/v1/tenants/acme/executors?app=shop",
            &viewer,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(live[0]["instance_id"], "shop-1");
    assert_eq!(
        (live[0]["capacity"].as_i64(), live[0]["state"].as_str()),
        (Some(4), Some("up"))
    );
    assert_eq!(live[0]["labels"]["zone"], "a");
    let drain_path = format!("/api/v1/tenants/acme/executors/{}/drain", executor.id);
    let by_viewer = app
        .request(Method::POST, &drain_path, &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(by_viewer).await, pair(403, "forbidden"));
    let by_stranger = app
        .request(
            Method::POST,
            &format!("/api/v1/tenants/other/executors/{}/drain", executor.id),
            &stranger,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(by_stranger).await, pair(404, "not_found"));
    let drained: Value = app
        .request(Method::POST, &drain_path, &operator)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(drained["state"], "draining");
    let unknown = app
        .request(
            Method::POST,
            "/api/v1/tenants/acme/executors/999999/drain",
            &admin,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(unknown).await, pair(404, "not_found"));

    // Undrain, the undo of drain: asked for now, up from the instance's next heartbeat.
    let undrain_path = format!("/api/v1/tenants/acme/executors/{}/undrain", executor.id);
    let by_viewer = app
        .request(Method::POST, &undrain_path, &viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(by_viewer).await, pair(403, "forbidden"));
    let by_stranger = app
        .request(
            Method::POST,
            &format!("/api/v1/tenants/other/executors/{}/undrain", executor.id),
            &stranger,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(by_stranger).await, pair(404, "not_found"));
    let asked: Value = app
        .request(Method::POST, &undrain_path, &operator)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            asked["state"].as_str(),
            asked["undrain_requested"].as_bool()
        ),
        (Some("draining"), Some(true))
    );
    {
        let mut tx = app.store().begin().await.unwrap();
        let beat = mthpt_engine::app::ExecutorHeartbeat {
            capacity: 4,
            running: 0,
        };
        tx.heartbeat_executor(executor.app_id, "shop-1", beat, SystemClock.now_ms())
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let live: Value = app
        .request(Method::GET, "/api/v1/tenants/acme/executors", &viewer)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            live[0]["state"].as_str(),
            live[0]["undrain_requested"].as_bool()
        ),
        (Some("up"), Some(false))
    );
    let again: Value = app
        .request(Method::POST, &undrain_path, &operator)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["state"], "up", "an instance up needs nothing");
    {
        let mut tx = app.store().begin().await.unwrap();
        tx.set_executor_state(
            executor.app_id,
            "shop-1",
            mthpt_engine::app::ExecutorState::Lost,
            SystemClock.now_ms(),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
    let lost = app
        .request(Method::POST, &undrain_path, &operator)
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(lost).await, pair(409, "conflict"));

    let deleted = app
        .request(Method::DELETE, "/api/v1/tenants/acme/apps/shop", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    let gone = app
        .request(Method::GET, "/api/v1/tenants/acme/apps/shop", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(gone).await, pair(404, "not_found"));

    // Engine nodes are for operators only.
    let nodes = app.op(Method::GET, "/api/v1/nodes").send().await.unwrap();
    assert_eq!(nodes.status(), 200);
    let by_admin = app
        .request(Method::GET, "/api/v1/nodes", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(status_code(by_admin).await, pair(403, "forbidden"));

    let mut tx = app.store().begin_read().await.unwrap();
    let actions: Vec<String> = tx
        .list_audit(Scope::Tenant(acme.id), None, 20)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(
        actions,
        [
            "app.delete",
            "executor.undrain",
            "executor.drain",
            "app.rotate_secret",
            "app.create"
        ]
    );
    drop(tx);
    app.stop().await;
}

#[tokio::test]
async fn apps_executors_and_nodes_postgres() {
    apps_executors_and_nodes(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn apps_executors_and_nodes_sqlite() {
    apps_executors_and_nodes(spawn_app(Backend::Sqlite).await).await;
}

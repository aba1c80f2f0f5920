//! A tenant's retention of finished runs through the API, on both backends: 7 days unless an
//! operator sets it, 1 to 87600 hours, anything else refused naming `retention_hours`; and
//! statistics over a range whose older minutes are rolled up (their runs deleted) and whose
//! newer minutes are not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::app::NewApp;
use mthpt_engine::rollup::{Rollup, RollupConfig};
use mthpt_engine::run::{NewRun, RunCompletion, RunState, TriggerKind};
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::Backend;
use mthpt_engine::task::TaskDefinition;
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

/// 2026-06-01T00:00:00Z.
const T0: i64 = 1_780_272_000_000;
const MINUTE: i64 = 60_000;
const DAY: i64 = 24 * 60 * MINUTE;

async fn statistics_mix_rolled_up_and_raw_minutes(app: TestApp) {
    let acme = app.tenant("acme").await;
    let store = app.store();
    let mut tx = store.begin().await.unwrap();
    let billing = tx
        .create_app(
            acme.id,
            &NewApp {
                name: "billing".into(),
                secret: "0123456789abcdef-secret".into(),
            },
            T0,
        )
        .await
        .unwrap();
    let task = tx
        .create_task(
            acme.id,
            &TaskDefinition::new(billing.id, "job", "noop", ScheduleSpec::Manual),
            T0,
        )
        .await
        .unwrap()
        .task;
    // Minutes 1 and 2 will be rolled up (and their runs deleted); 7 and 8 will not.
    for (minute, state, took) in [
        (1, RunState::Succeeded, 100),
        (2, RunState::Failed, 300),
        (7, RunState::Succeeded, 40),
        (8, RunState::Succeeded, 60),
    ] {
        let at = T0 + minute * MINUTE;
        let run = tx
            .insert_run(
                &NewRun::occurrence(&task, &acme.node_group, at, TriggerKind::Schedule),
                T0,
            )
            .await
            .unwrap()
            .unwrap();
        let completion = RunCompletion {
            state,
            output: None,
            error: None,
            log: None,
            started_at: Some(at),
            finished_at: at + took,
            reported_by: None,
        };
        tx.complete_run(run.id, None, &completion).await.unwrap();
    }
    tx.commit().await.unwrap();

    let rollup = Rollup::new(
        app.shared_store(),
        RollupConfig {
            max_minutes: 5,
            ..RollupConfig::default()
        },
    );
    let report = rollup.run_once(T0 + 8 * DAY).await.unwrap();
    assert_eq!(
        report.deleted, 2,
        "the rolled-up minutes' runs are past the retention"
    );

    let (status, stats) = answer(
        app.op(
            Method::GET,
            "/api/v1/tenants/acme/stats?from=2026-06-01T00:00:00Z&to=2026-06-01T00:10:00Z&bucket_seconds=300",
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{stats}");
    let rolled = &stats["buckets"][0];
    assert_eq!(rolled["runs"], json!(2), "{stats}");
    assert_eq!(rolled["by_state"], json!({"succeeded": 1, "failed": 1}));
    assert_eq!(rolled["success_rate"], json!(0.5));
    assert_eq!(rolled["approximate"], json!(true));
    let p99 = rolled["duration_ms"]["p99"].as_i64().unwrap();
    assert!((282..=318).contains(&p99), "p99 {p99} within 6% of 300");
    let raw = &stats["buckets"][1];
    assert_eq!(raw["runs"], json!(2));
    assert_eq!(raw["approximate"], json!(false));
    assert_eq!(raw["duration_ms"]["p50"], json!(40), "exact from the runs");
    assert_eq!(stats["total"]["runs"], json!(4));
    assert_eq!(stats["total"]["by_state"]["succeeded"], json!(3));
    app.stop().await;
}

#[tokio::test]
async fn statistics_mix_rolled_up_and_raw_minutes_postgres() {
    statistics_mix_rolled_up_and_raw_minutes(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn statistics_mix_rolled_up_and_raw_minutes_sqlite() {
    statistics_mix_rolled_up_and_raw_minutes(spawn_app(Backend::Sqlite).await).await;
}

#[tokio::test]
async fn retention_is_set_by_operators_within_its_range_postgres() {
    retention_is_set_by_operators_within_its_range(spawn_app(Backend::Postgres).await).await;
}

#[tokio::test]
async fn retention_is_set_by_operators_within_its_range_sqlite() {
    retention_is_set_by_operators_within_its_range(spawn_app(Backend::Sqlite).await).await;
}

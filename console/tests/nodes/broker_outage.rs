//! The broker stopped and started again, on a RabbitMQ node of this test's own
//! ([`RabbitNode`]; the shared broker is never stopped): alarms raised while it is down all
//! reach the WebSocket client within 5 s of it being back — as events, or through the re-sync
//! the console node asks for (the database is the source of truth) — none lost; the engine
//! kept firing runs throughout, and the outbox is published within 5 s of the broker being back
//! too (the bus reconnects about once a second, however long the outage lasted).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::alarm::{AlarmKind, NewAlarm, Severity};
use mthpt_engine::bus::{AmqpBus, AmqpConfig, Bus};
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::run::RunState;
use mthpt_engine::runtime::EngineNode;
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::{Backend, Store};
use mthpt_engine::task::TaskDefinition;
use mthpt_engine::tenant::{Role, TenantId};
use mthpt_engine::testing::rabbit::RabbitNode;
use mthpt_tests::{TestWrapper, quick_engine_config, tenancy};
use serde_json::Value;
use support::{connect, next_where};

/// How soon after the broker is back every alarm must have reached the client.
const BACK_WITHIN: Duration = Duration::from_secs(5);

async fn raise(store: &dyn Store, tenant: TenantId, key: &str) -> i64 {
    let mut alarm = NewAlarm::new(Some(tenant), AlarmKind::Misfire, Severity::Warning, key);
    alarm.dedupe_key = Some(key.to_owned());
    let mut tx = store.begin().await.unwrap();
    let a = tx
        .insert_alarm(&alarm, SystemClock.now_ms())
        .await
        .unwrap()
        .unwrap();
    tx.commit().await.unwrap();
    a.id.0
}

/// The open alarms of tenant `acme`, as the console lists them to `token`.
async fn open_alarms(app: &TestApp, token: &str) -> Vec<Value> {
    let res = app
        .request(
            reqwest::Method::GET,
            "/api/v1/tenants/acme/alarms?status=open",
            token,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let body: Value = res.json().await.unwrap();
    body["items"].as_array().cloned().unwrap_or_default()
}

async fn bus(node: &RabbitNode, name: &str) -> AmqpBus {
    AmqpBus::connect(AmqpConfig {
        connection_name: name.to_owned(),
        ..AmqpConfig::new(node.url())
    })
    .await
    .unwrap_or_else(|e| panic!("the test's own broker {} is unreachable: {e}", node.name()))
}

/// Runs `f` on `node` off the runtime's worker threads (rabbitmqctl takes a second or two).
async fn ctl(
    node: &Arc<RabbitNode>,
    f: fn(&RabbitNode) -> Result<(), String>,
) -> Result<(), String> {
    let node = node.clone();
    tokio::task::spawn_blocking(move || f(&node)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn alarms_raised_while_the_broker_is_stopped_all_arrive_once_it_is_back() {
    let node = tokio::task::spawn_blocking(RabbitNode::start)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start a RabbitMQ node of the test's own: {e}"));
    let node = Arc::new(node);
    let engine_bus = bus(&node, "mthpt-test-engine").await;
    let console_bus = bus(&node, "mthpt-test-console").await;

    let mut app = spawn_app(Backend::Postgres).await;
    app.listen_to(Arc::new(console_bus.clone()), "mthpt.console.outage-test");
    let t = tenancy(app.store(), "acme", "billing").await.unwrap();
    let (_, ada) = app.user(Some(&t.tenant), "ada", Role::TenantOperator).await;
    let engine = EngineNode::start_with_bus(
        app.shared_store(),
        Arc::new(SystemClock),
        quick_engine_config("engine-1"),
        Some(Arc::new(engine_bus.clone()) as Arc<dyn Bus>),
    )
    .await
    .unwrap();
    let w = TestWrapper::start(&t, &[engine.url()], |b| {
        b.async_handler("tick", |_ctx| async { Ok(Value::Null) })
    })
    .unwrap();
    w.registered().await.unwrap();
    let task = mthpt_tests::create(
        app.store(),
        &t,
        &TaskDefinition::new(
            t.app.id,
            "ticker",
            "tick",
            ScheduleSpec::FixedRate {
                every_ms: 200,
                anchor_at: None,
            },
        ),
    )
    .await
    .unwrap();

    let mut socket = connect(&app.events_url(), &ada).await;
    let first = raise(app.store(), t.tenant.id, "before").await;
    next_where(
        &mut socket,
        &mut Vec::new(),
        support::is("alarm.raised", first),
    )
    .await;

    ctl(&node, RabbitNode::stop_app).await.unwrap();
    let stopped_at = SystemClock.now_ms();
    let mut raised = BTreeSet::new();
    for i in 0..20 {
        raised.insert(raise(app.store(), t.tenant.id, &format!("outage-{i}")).await);
        // Down for 6 s and more: past the first few reconnect attempts, so a reconnect that
        // backs off longer and longer would leave the outbox unpublished well after the
        // broker is back.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    ctl(&node, RabbitNode::start_app).await.unwrap();
    let back_at = SystemClock.now_ms();
    let back = Instant::now();

    // Every alarm raised meanwhile reaches the client: as an event, or in the list it re-reads
    // when told to re-sync.
    let mut as_events = BTreeSet::new();
    let mut after_resync = BTreeSet::new();
    let mut resyncs = 0;
    while !raised
        .iter()
        .all(|id| as_events.contains(id) || after_resync.contains(id))
    {
        let left = BACK_WITHIN.saturating_sub(back.elapsed());
        assert!(
            !left.is_zero(),
            "not every alarm arrived within {BACK_WITHIN:?} of the broker being back: \
             {} of {} as events, {} after {resyncs} re-syncs",
            as_events.len(),
            raised.len(),
            after_resync.len()
        );
        let frame = support::next_within(&mut socket, left, &mut Vec::new(), |v| {
            v["type"] == "alarm.raised" || v["type"] == "resync"
        })
        .await;
        if frame["type"] == "resync" {
            resyncs += 1;
            for alarm in open_alarms(&app, &ada).await {
                after_resync.extend(alarm["id"].as_i64());
            }
        } else if let Some(id) = frame["alarm"]["id"].as_i64() {
            as_events.insert(id);
        }
    }
    let took = back.elapsed();

    // The outbox was published, not merely re-read.
    mthpt_tests::wait_until(BACK_WITHIN, "the outbox empty after the outage", || async {
        let mut tx = app.store().begin_read().await?;
        let snapshot = tx.metrics_snapshot().await?;
        Ok(snapshot.outbox_backlog == 0)
    })
    .await
    .unwrap();
    let drained = back.elapsed();

    // The engine kept firing runs while the broker was down.
    let runs = mthpt_tests::runs(app.store(), &t, &task).await.unwrap();
    let during = runs
        .iter()
        .filter(|r| r.state == RunState::Succeeded)
        .filter(|r| r.finished_at.is_some_and(|f| f > stopped_at && f < back_at))
        .count();
    eprintln!(
        "broker down {} ms: {during} runs finished meanwhile; {} alarms raised meanwhile reached the \
         client {} ms after the broker was back ({} as events, {} through {resyncs} re-sync(s)); \
         the outbox was empty {} ms after it was back",
        back_at - stopped_at,
        raised.len(),
        took.as_millis(),
        as_events.len(),
        raised.difference(&as_events).count(),
        drained.as_millis()
    );
    let expected = (back_at - stopped_at) / 200 / 2;
    assert!(
        i64::try_from(during).unwrap() >= expected,
        "the engine kept firing runs while the broker was down: {during} runs finished, \
         expected at least {expected}"
    );

    // Alarms raised after the outage arrive as events again.
    let after = raise(app.store(), t.tenant.id, "after").await;
    next_where(
        &mut socket,
        &mut Vec::new(),
        support::is("alarm.raised", after),
    )
    .await;

    w.stop().await;
    engine.shutdown().await;
    app.stop().await;
    // Closed before the node goes, or their connections would try to recover.
    engine_bus.close().await;
    console_bus.close().await;
    match Arc::try_unwrap(node) {
        Ok(mut node) => tokio::task::spawn_blocking(move || node.shutdown())
            .await
            .unwrap(),
        Err(node) => drop(node),
    }
}

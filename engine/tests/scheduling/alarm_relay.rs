//! The alarm relay against a real RabbitMQ (`MTHPT_TEST_AMQP_URL`, default
//! `amqp://guest:guest@127.0.0.1:5672/%2f`) and the in-process bus. Each test publishes to an
//! exchange of its own, so tests running at once do not see each other's messages. When the
//! broker cannot be reached, the RabbitMQ tests fail; they never skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use mthpt_engine::alarm::{AlarmKind, AlarmMessage, NewAlarm, Severity};
use mthpt_engine::bus::{AmqpBus, AmqpConfig, Bus, Delivery, InProcessBus};
use mthpt_engine::clock::ManualClock;
use mthpt_engine::relay::AlarmRelay;
use mthpt_engine::store::Store;
use mthpt_engine::testing::amqp_bus;
use support::fixtures::*;
use tokio::sync::mpsc;

async fn raise(store: &dyn Store, w: &World, n: i64) {
    let mut tx = store.begin().await.unwrap();
    for i in 0..n {
        let mut alarm = NewAlarm::new(
            Some(w.tenant.id),
            AlarmKind::Misfire,
            Severity::Warning,
            format!("late {i}"),
        );
        alarm.dedupe_key = Some(format!("late:{i}"));
        tx.insert_alarm(&alarm, T0 + i).await.unwrap().unwrap();
    }
    let mut cluster = NewAlarm::new(None, AlarmKind::NodeLost, Severity::Critical, "node-b lost");
    cluster.dedupe_key = Some("node_lost:b".into());
    tx.insert_alarm(&cluster, T0 + n).await.unwrap().unwrap();
    tx.commit().await.unwrap();
}

async fn take(rx: &mut mpsc::Receiver<Delivery>, n: usize) -> Vec<mthpt_engine::bus::BusMessage> {
    let mut got = Vec::new();
    while got.len() < n {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(Delivery::Message(m))) => got.push(m),
            Ok(Some(Delivery::Resync)) => {}
            Ok(None) => panic!("subscription ended"),
            Err(_) => panic!("only {} of {n} messages arrived", got.len()),
        }
    }
    got
}

async fn unpublished(store: &dyn Store) -> usize {
    let mut tx = read(store).await;
    let n = tx
        .list_unpublished_alarm_events(100_000)
        .await
        .unwrap()
        .len();
    // Ended here: a dropped transaction keeps the listing's row locks until its connection is
    // next used, hiding the events from the relay.
    tx.commit().await.unwrap();
    n
}

async fn relay_publishes_each_event_once_with_its_id_and_key(
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
) {
    let w = world(&*store, "acme").await;
    let name = format!("test.{}", uuid::Uuid::new_v4().simple());
    let mut rx = bus.subscribe(&name, &["alarm.#".to_owned()]).await.unwrap();
    raise(&*store, &w, 2).await;
    let relay = AlarmRelay::new(
        store.clone(),
        bus.clone(),
        Arc::new(ManualClock::at_ms(T0)),
        100,
    );
    let report = relay.run_once().await.unwrap();
    assert_eq!((report.published, report.failed), (3, 0));
    assert_eq!(
        relay.run_once().await.unwrap().published,
        0,
        "published once"
    );
    assert_eq!(unpublished(&*store).await, 0);

    let got = take(&mut rx, 3).await;
    let keys: Vec<_> = got.iter().map(|m| m.routing_key.as_str()).collect();
    let tenant = w.tenant.id.0;
    assert_eq!(
        keys,
        vec![
            format!("alarm.{tenant}.warning.misfire").as_str(),
            format!("alarm.{tenant}.warning.misfire").as_str(),
            "alarm.cluster.critical.node_lost",
        ]
    );
    for m in &got {
        let body: AlarmMessage = serde_json::from_slice(&m.body).unwrap();
        assert_eq!(m.message_id, body.event_id.to_string());
        assert_eq!(body.kind, "alarm.raised");
    }
    let last: AlarmMessage = serde_json::from_slice(&got[2].body).unwrap();
    assert_eq!(
        (last.tenant_id, last.alarm.message.as_str()),
        (None, "node-b lost")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_relay_publishes_to_rabbitmq_once_per_event() {
    let db = mthpt_engine::testing::postgres().await;
    let bus = amqp_bus().await;
    relay_publishes_each_event_once_with_its_id_and_key(db.shared(), Arc::new(bus.clone())).await;
    bus.delete_exchange().await.unwrap();
    bus.close().await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_relay_publishes_to_the_in_process_bus_once_per_event() {
    let db = mthpt_engine::testing::sqlite().await;
    relay_publishes_each_event_once_with_its_id_and_key(db.shared(), Arc::new(InProcessBus::new()))
        .await;
    db.cleanup().await;
}

/// Two engine nodes relaying the same outbox at once publish every event exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_relays_share_the_outbox_without_publishing_twice() {
    let db = mthpt_engine::testing::postgres().await;
    let store = db.shared();
    let bus = amqp_bus().await;
    let name = format!("test.{}", uuid::Uuid::new_v4().simple());
    let mut rx = bus.subscribe(&name, &["alarm.#".to_owned()]).await.unwrap();
    let w = world(&*store, "acme").await;
    raise(&*store, &w, 999).await;

    let clock = Arc::new(ManualClock::at_ms(T0));
    let relays: Vec<_> = (0..2)
        .map(|_| AlarmRelay::new(store.clone(), Arc::new(bus.clone()), clock.clone(), 50))
        .collect();
    let mut tasks = Vec::new();
    for relay in relays {
        tasks.push(tokio::spawn(async move {
            let mut published = 0;
            loop {
                let r = relay.run_once().await.unwrap();
                assert_eq!(r.failed, 0);
                if r.published == 0 {
                    return published;
                }
                published += r.published;
            }
        }));
    }
    let mut per_relay = Vec::new();
    for t in tasks {
        per_relay.push(t.await.unwrap());
    }
    assert_eq!(per_relay.iter().sum::<usize>(), 1000, "{per_relay:?}");
    assert!(
        per_relay.iter().all(|n| *n > 0),
        "both relays worked: {per_relay:?}"
    );
    let got = take(&mut rx, 1000).await;
    let ids: HashSet<_> = got.iter().map(|m| m.message_id.clone()).collect();
    assert_eq!(ids.len(), 1000, "no event published twice");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), rx.recv())
            .await
            .is_err(),
        "nothing more"
    );
    assert_eq!(unpublished(&*store).await, 0);
    bus.delete_exchange().await.unwrap();
    bus.close().await;
    db.cleanup().await;
}

/// With the broker unreachable, nothing is marked published; the next pass after it is back
/// publishes everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unconfirmed_events_stay_in_the_outbox_until_the_broker_answers() {
    let db = mthpt_engine::testing::postgres().await;
    let store = db.shared();
    let w = world(&*store, "acme").await;
    raise(&*store, &w, 4).await;
    let clock = Arc::new(ManualClock::at_ms(T0));
    // Nothing listens on port 1.
    let down = AmqpBus::new(AmqpConfig::new("amqp://guest:guest@127.0.0.1:1/%2f")).unwrap();
    let relay = AlarmRelay::new(store.clone(), Arc::new(down), clock.clone(), 100);
    let report = relay.run_once().await.unwrap();
    assert_eq!((report.published, report.failed), (0, 5));
    assert_eq!(unpublished(&*store).await, 5);

    let up = amqp_bus().await;
    let relay = AlarmRelay::new(store.clone(), Arc::new(up.clone()), clock, 100);
    assert_eq!(relay.run_once().await.unwrap().published, 5);
    assert_eq!(unpublished(&*store).await, 0);
    up.delete_exchange().await.unwrap();
    up.close().await;
    db.cleanup().await;
}

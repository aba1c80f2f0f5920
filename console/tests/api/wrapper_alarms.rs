//! Alarms raised by wrappers reach WebSocket clients: published straight to RabbitMQ when no
//! engine runs (the wrapper's own "engine unreachable" and a handler's `ctx.alarm`), checked by
//! the console (a wrong signature or another tenant's routing key reaches no client, and the
//! drop counter moves), and, with an engine up, stored once in the database and shown once.
//! Real RabbitMQ (`MTHPT_TEST_AMQP_URL`) and PostgreSQL; they fail, never skip, when absent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use mthpt_console::testing::{connect_events, next_event_where, spawn_app};
use mthpt_engine::alarm::{AlarmFilter, AlarmKind};
use mthpt_engine::bus::{Bus, BusMessage};
use mthpt_engine::clock::SystemClock;
use mthpt_engine::runtime::EngineNode;
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::{Backend, Scope};
use mthpt_engine::task::TaskDefinition;
use mthpt_engine::tenant::Role;
use mthpt_engine::testing::{amqp_bus, amqp_url};
use mthpt_tests::{TestWrapper, quick_engine_config, tenancy, wait_until};
use mthpt_wrapper::client::SignedClient;
use mthpt_wrapper::protocol::{
    self, PUBLISH_METHOD, RunAck, RunRequest, Signer, Trigger, dedupe_key, signed_message_id,
};
use mthpt_wrapper::{AlarmSeverity, ShellOptions};
use serde_json::{Value, json};

fn queue() -> String {
    format!("test.console.{}", uuid::Uuid::new_v4().simple())
}

fn app_kind(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v["alarm"]["kind"] == "app" && v["alarm"]["details"]["app_kind"] == kind
}

/// The value of a counter with `label` in this process's metrics (0 when absent).
fn dropped(reason: &str) -> f64 {
    let wanted = format!("mthpt_console_wrapper_alarms_dropped_total{{reason=\"{reason}\"}}");
    mthpt_engine::metrics::render()
        .lines()
        .find_map(|l| l.strip_prefix(&wanted))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Sends a signed run request straight to a wrapper (as an engine would).
async fn dispatch(
    w: &TestWrapper,
    key: &str,
    secret: &str,
    run_id: i64,
    handler: &str,
    params: Value,
) {
    let client = SignedClient::new(
        Signer::new(key, secret.as_bytes().to_vec()),
        Duration::from_secs(2),
        Duration::from_secs(5),
    )
    .unwrap();
    let req = RunRequest {
        run_id,
        task_id: 1,
        task_name: "disk-check".into(),
        handler: handler.into(),
        params,
        attempt: 1,
        scheduled_at: chrono::Utc::now(),
        shard_index: 0,
        shard_total: 1,
        deadline: None,
        trigger: Trigger::Manual,
        not_after: None,
        sent_at: None,
    };
    let ack: RunAck = client
        .post_json(&w.url, protocol::paths::RUNS, &req)
        .await
        .unwrap();
    assert_eq!(ack.status, protocol::AckStatus::Accepted);
}

/// A direct alarm message as a wrapper would publish it, signed with `secret`.
fn direct_message(
    key: &str,
    secret: &[u8],
    tenant: i64,
    routing_tenant: i64,
    id: &str,
) -> BusMessage {
    let at = chrono::Utc::now().timestamp_millis();
    let body = json!({
        "event_id": null, "type": "alarm.raised", "at": at, "tenant_id": tenant,
        "alarm": {
            "id": null, "tenant_id": tenant, "kind": "app", "severity": "critical",
            "task_id": null, "run_id": null, "executor_id": null, "node_id": null,
            "message": format!("forged {id}"),
            "details": {"app": key, "app_kind": "forged", "instance": "x", "alarm_id": id},
            "dedupe_key": dedupe_key(key, id), "created_at": at, "published_at": null,
            "acknowledged_at": null, "acknowledged_by": null, "muted": false, "count": 1,
            "last_seen": at, "resolved_at": null, "repeat_of": null
        }
    })
    .to_string()
    .into_bytes();
    let routing_key = format!("alarm.{routing_tenant}.critical.app");
    let signed = Signer::new(key, secret.to_vec()).sign(PUBLISH_METHOD, &routing_key, &body);
    BusMessage {
        routing_key,
        message_id: signed_message_id(key, signed.timestamp, &signed.nonce, &signed.signature),
        body,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_no_engine_a_wrappers_alarms_reach_clients_and_forged_ones_do_not() {
    let bus = amqp_bus().await;
    let shared: Arc<dyn Bus> = Arc::new(bus.clone());
    let mut app = spawn_app(Backend::Postgres).await;
    app.listen_to(shared.clone(), &queue());
    let t = tenancy(app.store(), "acme", "billing").await.unwrap();
    let other = tenancy(app.store(), "globex", "shop").await.unwrap();
    let (_, ada) = app.user(Some(&t.tenant), "ada", Role::TenantViewer).await;
    let (_, gil) = app
        .user(Some(&other.tenant), "gil", Role::TenantViewer)
        .await;
    let mut op = connect_events(&app.events_url(), &app.operator_token).await;
    let mut acme = connect_events(&app.events_url(), &ada).await;
    let mut globex = connect_events(&app.events_url(), &gil).await;

    // No engine anywhere: port 1 refuses every connection.
    let started = Instant::now();
    let exchange = bus.exchange().to_owned();
    let tenant = t.tenant.id.0;
    let w = TestWrapper::start(&t, &["http://127.0.0.1:1".to_owned()], move |b| {
        b.amqp_url(amqp_url())
            .amqp_exchange(exchange)
            .tenant_id(tenant)
            .engine_unreachable_after(Duration::from_millis(500))
            // Its result has no engine to go to: do not wait for one on shutdown.
            .flush_timeout(Duration::from_millis(100))
            .enable_shell(ShellOptions::default())
            .async_handler("disk-check", |ctx| async move {
                ctx.alarm(AlarmSeverity::Warning, "disk_full", "disk 91% full on /var")
                    .map_err(|e| mthpt_wrapper::HandlerError::fatal(e.to_string()))?;
                Ok(Value::Null)
            })
    })
    .unwrap();

    let mut skipped = Vec::new();
    let unreachable =
        next_event_where(&mut acme, &mut skipped, app_kind("engine_unreachable")).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(unreachable["type"], "alarm.raised");
    assert_eq!(unreachable["tenant_id"], tenant);
    assert_eq!(unreachable["alarm"]["severity"], "critical");
    next_event_where(&mut op, &mut skipped, app_kind("engine_unreachable")).await;

    // A handler's alarm, while still no engine answers.
    dispatch(&w, &t.key, &t.secret, 4242, "disk-check", Value::Null).await;
    let disk = next_event_where(&mut acme, &mut skipped, app_kind("disk_full")).await;
    assert_eq!(disk["alarm"]["run_id"], 4242);
    assert_eq!(disk["alarm"]["message"], "disk 91% full on /var");

    // The shell built-in raises one from a prefixed line of its script's output.
    let script = json!("echo '::mthpt-alarm critical backup_failed backup of /srv failed'");
    dispatch(&w, &t.key, &t.secret, 4243, "shell", script).await;
    let backup = next_event_where(&mut acme, &mut skipped, app_kind("backup_failed")).await;
    assert_eq!(backup["alarm"]["severity"], "critical");
    assert_eq!(backup["alarm"]["message"], "backup of /srv failed");

    // Forged: a wrong secret; acme's app signing for globex's routing key and tenant; an
    // unsigned message pretending to come from a wrapper. Then a genuine marker.
    let bad_signature = dropped("bad_signature");
    let wrong_tenant = dropped("wrong_tenant");
    let unsigned = dropped("unsigned");
    let mut no_signature =
        direct_message(&t.key, t.secret.as_bytes(), tenant, tenant, "unsigned-1");
    no_signature.message_id = "not-a-signature".to_owned();
    let forged = [
        direct_message(
            &t.key,
            b"not-the-secret-0123456789",
            tenant,
            tenant,
            "forged-1",
        ),
        direct_message(
            &t.key,
            t.secret.as_bytes(),
            other.tenant.id.0,
            other.tenant.id.0,
            "forged-2",
        ),
        direct_message(
            &t.key,
            t.secret.as_bytes(),
            tenant,
            other.tenant.id.0,
            "forged-3",
        ),
        no_signature,
    ];
    assert!(shared.publish(&forged).await.iter().all(Result::is_ok));
    let marker = direct_message(&t.key, t.secret.as_bytes(), tenant, tenant, "marker-1");
    assert!(shared.publish(&[marker]).await.iter().all(Result::is_ok));
    let is_marker = |v: &Value| v["alarm"]["details"]["alarm_id"] == "marker-1";
    let mut after_op = Vec::new();
    next_event_where(&mut op, &mut after_op, is_marker).await;
    let mut after_acme = Vec::new();
    next_event_where(&mut acme, &mut after_acme, is_marker).await;
    for v in after_op.iter().chain(&after_acme).chain(&skipped) {
        assert_ne!(
            v["alarm"]["details"]["app_kind"], "forged",
            "a forged alarm was shown: {v}"
        );
    }
    assert!(dropped("bad_signature") > bad_signature);
    assert!(dropped("wrong_tenant") >= wrong_tenant + 2.0);
    assert!(dropped("unsigned") > unsigned);
    // globex's user saw nothing at all.
    let more = tokio::time::timeout(
        Duration::from_millis(300),
        futures::StreamExt::next(&mut globex),
    )
    .await;
    assert!(
        !matches!(
            more,
            Ok(Some(Ok(tokio_tungstenite::tungstenite::Message::Text(_))))
        ),
        "globex received {more:?}"
    );

    w.stop().await;
    app.stop().await;
    bus.delete_exchange().await.unwrap();
    bus.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_an_engine_up_a_handler_alarm_is_stored_once_and_shown_once() {
    let bus = amqp_bus().await;
    let shared: Arc<dyn Bus> = Arc::new(bus.clone());
    let mut app = spawn_app(Backend::Postgres).await;
    app.listen_to(shared.clone(), &queue());
    let t = tenancy(app.store(), "acme", "billing").await.unwrap();
    let engine = EngineNode::start_with_bus(
        app.shared_store(),
        Arc::new(SystemClock),
        quick_engine_config("engine-1"),
        Some(shared.clone()),
    )
    .await
    .unwrap();
    let exchange = bus.exchange().to_owned();
    let w = TestWrapper::start(&t, &[engine.url()], move |b| {
        b.amqp_url(amqp_url())
            .amqp_exchange(exchange)
            .async_handler("disk-check", |ctx| async move {
                ctx.alarm(AlarmSeverity::Warning, "disk_full", "disk 91% full on /var")
                    .map_err(|e| mthpt_wrapper::HandlerError::fatal(e.to_string()))?;
                Ok(Value::Null)
            })
    })
    .unwrap();
    w.registered().await.unwrap();
    let task = mthpt_tests::create(
        app.store(),
        &t,
        &TaskDefinition::new(t.app.id, "disk", "disk-check", ScheduleSpec::Manual),
    )
    .await
    .unwrap();
    let mut op = connect_events(&app.events_url(), &app.operator_token).await;
    let run = mthpt_tests::trigger(app.store(), &t, &task).await.unwrap();

    let mut skipped = Vec::new();
    let shown = next_event_where(&mut op, &mut skipped, app_kind("disk_full")).await;
    assert_eq!(shown["type"], "alarm.raised");

    let store = app.shared_store();
    let filter = AlarmFilter {
        kind: Some(AlarmKind::App),
        ..AlarmFilter::default()
    };
    wait_until(Duration::from_secs(10), "the alarm stored", || {
        let store = store.clone();
        let filter = filter.clone();
        async move {
            let mut tx = store.begin_read().await?;
            Ok(!tx
                .list_alarms(Scope::Tenant(t.tenant.id), &filter)
                .await?
                .is_empty())
        }
    })
    .await
    .unwrap();
    // Both copies have gone their way by now (the relay passes every 50 ms).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut tx = store.begin_read().await.unwrap();
    let stored = tx
        .list_alarms(Scope::Tenant(t.tenant.id), &filter)
        .await
        .unwrap();
    drop(tx);
    assert_eq!(stored.len(), 1, "{stored:?}");
    let alarm = &stored[0];
    assert_eq!(alarm.task_id, Some(task.id));
    assert_eq!(alarm.run_id.map(|r| r.0), Some(run.id.0));
    assert_eq!(alarm.details.0["app_kind"], "disk_full");
    assert!(alarm.published_at.is_some(), "relayed through the outbox");
    // The relayed copy carries the same dedupe key: the client saw the alarm once.
    let more = tokio::time::timeout(Duration::from_millis(300), async {
        next_event_where(&mut op, &mut skipped, app_kind("disk_full")).await
    })
    .await;
    assert!(more.is_err(), "shown twice: {more:?}");

    // The engine refuses what is not an alarm, naming what is wrong, and oversized batches.
    let client = SignedClient::new(
        Signer::new(&t.key, t.secret.as_bytes().to_vec()),
        Duration::from_secs(2),
        Duration::from_secs(5),
    )
    .unwrap();
    let bad = protocol::WrapperAlarm {
        id: "0123456789abcdef".into(),
        severity: AlarmSeverity::Info,
        kind: "Disk Full".into(),
        message: "x".into(),
        state: protocol::AlarmState::Raised,
        run_id: None,
        task_id: None,
        at: chrono::Utc::now(),
    };
    let answer: protocol::AlarmBatchResponse = client
        .post_json(
            &engine.url(),
            protocol::paths::ALARMS,
            &protocol::AlarmBatch {
                instance_id: "i".into(),
                alarms: vec![bad.clone()],
            },
        )
        .await
        .unwrap();
    assert_eq!(answer.items[0].status, protocol::ItemStatus::Rejected);
    assert!(
        answer.items[0]
            .message
            .as_deref()
            .is_some_and(|m| m.contains("\"Disk Full\"") && m.contains("a-z 0-9 _")),
        "{answer:?}"
    );
    let too_many = protocol::AlarmBatch {
        instance_id: "i".into(),
        alarms: vec![bad; protocol::MAX_ALARMS_PER_BATCH + 1],
    };
    let refused = client
        .post_json::<_, protocol::AlarmBatchResponse>(
            &engine.url(),
            protocol::paths::ALARMS,
            &too_many,
        )
        .await;
    assert!(
        refused
            .as_ref()
            .err()
            .is_some_and(|e| e.to_string().contains("400")),
        "{refused:?}"
    );

    w.stop().await;
    engine.shutdown().await;
    app.stop().await;
    bus.delete_exchange().await.unwrap();
    bus.close().await;
}

/// The broker's `host:port` in `url`, and `url` with that part replaced by `authority`.
fn swap_authority(url: &str, authority: &str) -> (String, String) {
    let start = url
        .find('@')
        .map_or_else(|| url.find("//").unwrap() + 2, |at| at + 1);
    let end = url[start..].find('/').map_or(url.len(), |i| start + i);
    let upstream = url[start..end].to_owned();
    let swapped = format!("{}{authority}{}", &url[..start], &url[end..]);
    (upstream, swapped)
}

/// Forwards every connection to `listener` to `upstream` until aborted.
async fn forward(listener: tokio::net::TcpListener, upstream: String) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            return;
        };
        let upstream = upstream.clone();
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_direct_alarm_raised_while_the_broker_is_away_is_published_when_it_is_back() {
    let bus = amqp_bus().await;
    let shared: Arc<dyn Bus> = Arc::new(bus.clone());
    let mut app = spawn_app(Backend::Postgres).await;
    app.listen_to(shared.clone(), &queue());
    let t = tenancy(app.store(), "acme", "billing").await.unwrap();
    let mut op = connect_events(&app.events_url(), &app.operator_token).await;

    // The wrapper's broker address: a port with nothing behind it yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (upstream, url) = swap_authority(&amqp_url(), &format!("127.0.0.1:{port}"));
    let exchange = bus.exchange().to_owned();
    let tenant = t.tenant.id.0;
    let w = TestWrapper::start(&t, &["http://127.0.0.1:1".to_owned()], move |b| {
        b.amqp_url(url)
            .amqp_exchange(exchange)
            .tenant_id(tenant)
            .engine_unreachable_after(Duration::from_millis(300))
            .blocking_handler("noop", |_ctx| Ok(Value::Null))
    })
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // The broker comes back (behind a forwarder on that port).
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let back = Instant::now();
    let proxy = tokio::spawn(forward(listener, upstream));
    let mut skipped = Vec::new();
    let shown = next_event_where(&mut op, &mut skipped, app_kind("engine_unreachable")).await;
    assert_eq!(shown["tenant_id"], tenant);
    let took = back.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "published {took:?} after the broker was back"
    );

    w.stop().await;
    proxy.abort();
    app.stop().await;
    bus.delete_exchange().await.unwrap();
    bus.close().await;
}

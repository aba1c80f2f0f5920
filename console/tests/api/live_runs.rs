//! Live run events over the WebSocket `GET /api/v1/events?runs=true`: state changes, progress
//! and log lines of runs reach the clients that asked for them and may see the tenant (through
//! RabbitMQ at `MTHPT_TEST_AMQP_URL`, an exchange of this test's own; standalone through the
//! in-process bus); a chatty handler is rate-limited and the events say what was left out; a
//! run cancelled through the console is announced at once; a socket closes within seconds of
//! its session being signed out or its token revoked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mthpt_console::testing::{TestApp, spawn_app};
use mthpt_engine::bus::{Bus, BusError, BusMessage, Delivery, InProcessBus};
use mthpt_engine::clock::SystemClock;
use mthpt_engine::runtime::EngineNode;
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::Backend;
use mthpt_engine::task::TaskDefinition;
use mthpt_engine::tenant::Role;
use mthpt_engine::testing::amqp_bus;
use mthpt_tests::{Tenancy, TestWrapper, quick_engine_config, tenancy};
use serde_json::{Value, json};
use support::{Socket, connect, frames_for, next_where};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

async fn engine_with(app: &TestApp, bus: Arc<dyn Bus>, node: &str) -> EngineNode {
    EngineNode::start_with_bus(
        app.shared_store(),
        Arc::new(SystemClock),
        quick_engine_config(node),
        Some(bus),
    )
    .await
    .unwrap()
}

fn runs_url(app: &TestApp) -> String {
    format!("{}?runs=true", app.events_url())
}

/// A wrapper of `t` with a handler `work` that reports progress and a log line.
fn worker(t: &Tenancy, engine: &EngineNode) -> TestWrapper {
    TestWrapper::start(t, &[engine.url()], |b| {
        b.async_handler("work", |ctx| async move {
            ctx.progress(0.5, "half way");
            ctx.log("hello from the handler");
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(json!({ "done": true }))
        })
    })
    .unwrap()
}

/// Run events of run `run` until its final state (`succeeded`), in arrival order.
async fn run_events_until_done(socket: &mut Socket, run: i64) -> Vec<Value> {
    let mut seen = Vec::new();
    next_where(socket, &mut seen, |v| {
        v["type"] == "run.state" && v["run_id"] == run && v["state"] == "succeeded"
    })
    .await;
    seen.retain(|v| v["run_id"] == run);
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_events_reach_the_clients_that_asked_and_may_see_the_tenant() {
    let bus = amqp_bus().await;
    let shared: Arc<dyn Bus> = Arc::new(bus.clone());
    let mut app = spawn_app(Backend::Postgres).await;
    app.listen_to(
        shared.clone(),
        &format!("test.runs.{}", uuid::Uuid::new_v4()),
    );
    let acme = tenancy(app.store(), "acme", "billing").await.unwrap();
    let globex = tenancy(app.store(), "globex", "ledger").await.unwrap();
    let (_, ada) = app
        .user(Some(&acme.tenant), "ada", Role::TenantViewer)
        .await;
    let (_, gil) = app
        .user(Some(&globex.tenant), "gil", Role::TenantAdmin)
        .await;
    let engine = engine_with(&app, shared.clone(), "engine-1").await;
    let (wa, wb) = (worker(&acme, &engine), worker(&globex, &engine));
    wa.registered().await.unwrap();
    wb.registered().await.unwrap();
    let def = |t: &Tenancy| TaskDefinition::new(t.app.id, "nightly", "work", ScheduleSpec::Manual);
    let task_a = mthpt_tests::create(app.store(), &acme, &def(&acme))
        .await
        .unwrap();
    let task_b = mthpt_tests::create(app.store(), &globex, &def(&globex))
        .await
        .unwrap();

    let mut a = connect(&runs_url(&app), &ada).await;
    let mut b = connect(&runs_url(&app), &gil).await;
    let mut op = connect(&runs_url(&app), &app.operator_token).await;
    let mut a_alarms_only = connect(&app.events_url(), &ada).await;

    let run_a = mthpt_tests::trigger(app.store(), &acme, &task_a)
        .await
        .unwrap();
    let run_b = mthpt_tests::trigger(app.store(), &globex, &task_b)
        .await
        .unwrap();

    let on_a = run_events_until_done(&mut a, run_a.id.0).await;
    let states: Vec<&Value> = on_a.iter().filter(|v| v["type"] == "run.state").collect();
    assert!(
        states.iter().any(|v| v["state"] == "running"
            && v["attempt"] == 1
            && v["executor_id"].is_i64()
            && v["started_at"].is_i64()),
        "a running event with attempt, executor and start: {on_a:?}"
    );
    let progress = on_a
        .iter()
        .find(|v| v["type"] == "run.progress")
        .unwrap_or_else(|| panic!("a progress event: {on_a:?}"));
    assert_eq!(progress["fraction"], 0.5);
    assert_eq!(progress["message"], "half way");
    let log = on_a
        .iter()
        .find(|v| v["type"] == "run.log")
        .unwrap_or_else(|| panic!("a log event: {on_a:?}"));
    assert_eq!(log["lines"], json!(["hello from the handler"]));
    for v in &on_a {
        assert_eq!(v["tenant_id"], acme.tenant.id.0);
        assert_eq!(v["task_id"], task_a.id.0);
    }

    let on_b = run_events_until_done(&mut b, run_b.id.0).await;
    assert!(on_b.iter().any(|v| v["type"] == "run.progress"));
    // The operator sees both tenants' runs.
    run_events_until_done(&mut op, run_a.id.0).await;

    // Tenant sockets never carry the other tenant's run events; a socket that did not ask
    // for run events gets none.
    let rest_a = frames_for(&mut a, Duration::from_millis(500)).await;
    let rest_b = frames_for(&mut b, Duration::from_millis(500)).await;
    for (socket, frames, tenant) in [
        ("a", &rest_a, &acme),
        ("b", &rest_b, &globex),
        ("a", &on_a, &acme),
        ("b", &on_b, &globex),
    ] {
        assert!(
            frames
                .iter()
                .all(|v| v["tenant_id"] == tenant.tenant.id.0 || v["type"] == "resync"),
            "{socket}: {frames:?}"
        );
    }
    let plain = frames_for(&mut a_alarms_only, Duration::from_millis(300)).await;
    assert!(
        plain
            .iter()
            .all(|v| !v["type"].as_str().unwrap_or("").starts_with("run.")),
        "{plain:?}"
    );

    wa.stop().await;
    wb.stop().await;
    engine.shutdown().await;
    app.stop().await;
    bus.delete_exchange().await.unwrap();
    bus.close().await;
}

/// Standalone (in-process bus): a handler writing 400 log lines and 400 progress updates as
/// fast as it can reaches the browser as a few events a second that say what they left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chatty_handler_is_rate_limited_and_says_what_was_left_out() {
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new());
    let mut app = spawn_app(Backend::Sqlite).await;
    app.listen_to(bus.clone(), "standalone-console");
    let t = tenancy(app.store(), "acme", "billing").await.unwrap();
    let (_, ada) = app.user(Some(&t.tenant), "ada", Role::TenantViewer).await;
    let engine = engine_with(&app, bus.clone(), "standalone").await;
    let w = TestWrapper::start(&t, &[engine.url()], |b| {
        b.async_handler("chatty", |ctx| async move {
            for i in 0..400 {
                ctx.log(format!("line {i}"));
                ctx.progress(f64::from(i) / 400.0, "");
                if i % 40 == 0 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            ctx.progress(1.0, "done");
            tokio::time::sleep(Duration::from_millis(600)).await;
            Ok(Value::Null)
        })
    })
    .unwrap();
    w.registered().await.unwrap();
    let task = mthpt_tests::create(
        app.store(),
        &t,
        &TaskDefinition::new(t.app.id, "chatty", "chatty", ScheduleSpec::Manual),
    )
    .await
    .unwrap();
    let mut socket = connect(&runs_url(&app), &ada).await;
    let run = mthpt_tests::trigger(app.store(), &t, &task).await.unwrap();
    let events = run_events_until_done(&mut socket, run.id.0).await;

    let running_at = events
        .iter()
        .find(|v| v["type"] == "run.state" && v["state"] == "running")
        .and_then(|v| v["at"].as_i64())
        .unwrap_or_else(|| panic!("a running event: {events:?}"));
    let finished_at = events
        .last()
        .and_then(|v| v["at"].as_i64())
        .unwrap_or_default();
    let seconds = ((finished_at - running_at) as f64 / 1000.0).ceil().max(1.0);
    let lines: usize = events
        .iter()
        .filter(|v| v["type"] == "run.log")
        .map(|v| v["lines"].as_array().map_or(0, Vec::len))
        .sum();
    let dropped: u64 = events
        .iter()
        .filter(|v| v["type"] == "run.log")
        .map(|v| v["dropped"].as_u64().unwrap_or(0))
        .sum();
    let progress: Vec<&Value> = events
        .iter()
        .filter(|v| v["type"] == "run.progress")
        .collect();
    eprintln!(
        "chatty handler over {seconds} s: {lines} log lines passed, {dropped} dropped, {} progress events",
        progress.len()
    );
    assert!(
        lines as f64 <= 20.0 * (seconds + 1.0),
        "at most 20 lines a second: {lines} in {seconds} s"
    );
    assert!(dropped > 0, "the dropped lines are counted: {events:?}");
    assert!(lines as u64 + dropped <= 400);
    assert!(
        progress.len() as f64 <= 4.0 * (seconds + 1.0) + 1.0,
        "at most 4 progress events a second: {} in {seconds} s",
        progress.len()
    );
    assert!(
        progress.iter().any(|v| v["coalesced"].as_u64() > Some(0)),
        "coalesced updates are counted"
    );
    let last = progress.last().unwrap();
    assert_eq!(last["fraction"], 1.0, "the latest value wins");
    assert_eq!(last["message"], "done");

    w.stop().await;
    engine.shutdown().await;
    app.stop().await;
}

/// A run cancelled through the console is announced like a change an engine makes: the
/// clients watching runs see it `cancelled` at once (the console node publishes it; the
/// handler's own late result changes nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_cancelled_through_the_console_is_announced_at_once() {
    let bus: Arc<dyn Bus> = Arc::new(InProcessBus::new());
    let mut app = spawn_app(Backend::Sqlite).await;
    app.join_bus(bus.clone(), "standalone-console");
    let t = tenancy(app.store(), "acme", "billing").await.unwrap();
    let (_, ada) = app.user(Some(&t.tenant), "ada", Role::TenantViewer).await;
    let engine = engine_with(&app, bus.clone(), "standalone").await;
    let w = TestWrapper::start(&t, &[engine.url()], |b| {
        b.async_handler("long", |ctx| async move {
            for _ in 0..300 {
                if ctx.is_cancelled() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(Value::Null)
        })
    })
    .unwrap();
    w.registered().await.unwrap();
    let task = mthpt_tests::create(
        app.store(),
        &t,
        &TaskDefinition::new(t.app.id, "long", "long", ScheduleSpec::Manual),
    )
    .await
    .unwrap();
    let mut socket = connect(&runs_url(&app), &ada).await;
    let run = mthpt_tests::trigger(app.store(), &t, &task).await.unwrap();
    let mut seen = Vec::new();
    next_where(&mut socket, &mut seen, |v| {
        v["type"] == "run.state" && v["run_id"] == run.id.0 && v["state"] == "running"
    })
    .await;
    let res = app
        .op(
            reqwest::Method::POST,
            &format!("/api/v1/tenants/acme/runs/{}/cancel", run.id),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let cancelled_at = std::time::Instant::now();
    next_where(&mut socket, &mut seen, |v| {
        v["type"] == "run.state" && v["run_id"] == run.id.0 && v["state"] == "cancelled"
    })
    .await;
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(5),
        "announced {:?} after the cancel",
        cancelled_at.elapsed()
    );

    w.stop().await;
    engine.shutdown().await;
    app.stop().await;
}

/// Waits for the server to close `socket`; returns how long that took.
async fn closed_within(socket: &mut Socket, wait: Duration) -> Duration {
    let started = std::time::Instant::now();
    let ended = tokio::time::timeout(wait, async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => continue,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the socket is still open after {wait:?}");
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_socket_closes_within_seconds_of_sign_out_or_token_revocation() {
    let app = spawn_app(Backend::Sqlite).await;
    let acme = app.tenant("acme").await;
    let (ada, token) = app.user(Some(&acme), "ada", Role::TenantViewer).await;
    let mut by_token = connect(&app.events_url(), &token).await;
    let mut by_other_token = connect(&app.events_url(), &app.operator_token).await;

    let mut tx = app.store().begin().await.unwrap();
    let id = tx.list_api_tokens(ada.id).await.unwrap()[0].id;
    tx.commit().await.unwrap();
    let res = app
        .request(
            reqwest::Method::DELETE,
            &format!("/api/v1/tokens/{}", id.0),
            &token,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 204);
    let took = closed_within(&mut by_token, Duration::from_secs(5)).await;
    eprintln!("socket of a revoked token closed after {took:?}");
    // Another credential's socket stays open.
    assert!(
        tokio::time::timeout(Duration::from_millis(2_500), by_other_token.next())
            .await
            .is_err(),
        "the operator's socket stays open"
    );

    // A session cookie's socket closes when the session signs out.
    let res = app
        .client
        .post(app.url("/api/v1/session"))
        .json(&json!({ "username": "ada", "password": "password-ada" }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let cookie = res
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("mthpt_session="))
        .expect("session cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let mut request = app.events_url().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("Cookie", cookie.parse().unwrap());
    request
        .headers_mut()
        .insert("Origin", app.base_url.parse().unwrap());
    let (mut by_cookie, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let res = app
        .client
        .delete(app.url("/api/v1/session"))
        .header("Cookie", &cookie)
        .header("Origin", &app.base_url)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 204);
    let took = closed_within(&mut by_cookie, Duration::from_secs(5)).await;
    eprintln!("socket of a signed-out session closed after {took:?}");
    app.stop().await;
}

/// A bus that takes every message and never confirms one, nor delivers any: what a broker
/// that stopped answering looks like to a publisher.
#[derive(Debug)]
struct SilentBus;

#[async_trait::async_trait]
impl Bus for SilentBus {
    async fn publish(&self, _: &[BusMessage]) -> Vec<Result<(), BusError>> {
        std::future::pending().await
    }

    async fn subscribe(
        &self,
        _: &str,
        _: &[String],
    ) -> Result<tokio::sync::mpsc::Receiver<Delivery>, BusError> {
        Err(BusError::Unavailable("silent".into()))
    }
}

/// Triggers `n` runs of a handler that reports progress and a log line, and returns how long
/// it took until all were final; the engine publishes run events to `bus`, and with `reader`
/// a console node forwards them to a client reading `?runs=true`, which must have read at
/// least one frame a run.
async fn time_runs(n: usize, bus: Option<Arc<dyn Bus>>, reader: bool) -> Duration {
    let mut app = spawn_app(Backend::Postgres).await;
    let t = tenancy(app.store(), "acme", "billing").await.unwrap();
    let engine = EngineNode::start_with_bus(
        app.shared_store(),
        Arc::new(SystemClock),
        quick_engine_config("engine-1"),
        bus.clone(),
    )
    .await
    .unwrap();
    let w = TestWrapper::start(&t, &[engine.url()], |b| {
        b.capacity(10_000).async_handler("work", |ctx| async move {
            ctx.progress(0.5, "half way");
            ctx.log("a line");
            Ok(Value::Null)
        })
    })
    .unwrap();
    w.registered().await.unwrap();
    let task = mthpt_tests::create(
        app.store(),
        &t,
        &TaskDefinition::new(t.app.id, "many", "work", ScheduleSpec::Manual),
    )
    .await
    .unwrap();
    let reader = match bus {
        Some(bus) if reader => {
            app.listen_to(bus, "console");
            let (_, ada) = app.user(Some(&t.tenant), "ada", Role::TenantViewer).await;
            let mut socket = connect(&runs_url(&app), &ada).await;
            Some(tokio::spawn(async move {
                let mut frames = 0_usize;
                while let Some(Ok(_)) = socket.next().await {
                    frames += 1;
                }
                frames
            }))
        }
        _ => None,
    };

    let started = std::time::Instant::now();
    let now = mthpt_engine::clock::Clock::now_ms(&SystemClock);
    let mut tx = app.store().begin().await.unwrap();
    for i in 0..n {
        tx.trigger_task(t.tenant.id, task.id, None, "test", now + i as i64)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    mthpt_tests::wait_until(Duration::from_secs(60), "every run final", || async {
        Ok(mthpt_tests::runs(app.store(), &t, &task)
            .await?
            .iter()
            .filter(|r| r.state.is_final())
            .count()
            >= n)
    })
    .await
    .unwrap();
    let took = started.elapsed();
    w.stop().await;
    engine.shutdown().await;
    app.stop().await;
    if let Some(reader) = reader {
        let frames = reader.await.unwrap();
        assert!(
            frames >= n,
            "the client read the run events: {frames} frames"
        );
    }
    took
}

/// The result path never waits for the bus: with a bus that never confirms a publish, every
/// run still finishes (events are handed to a bounded queue and dropped when it is full). Had
/// a result waited for its events, the first would never have finished. Beside it the same
/// runs with an in-process bus and a client reading every event, and with no bus at all; how
/// long each took is printed, not compared (a shared machine's load decides that).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn results_never_wait_for_the_bus_that_publishes_run_events() {
    let n = 200;
    let silent = time_runs(n, Some(Arc::new(SilentBus)), false).await;
    let read = time_runs(n, Some(Arc::new(InProcessBus::new())), true).await;
    let none = time_runs(n, None, false).await;
    eprintln!(
        "{n} runs until final: {silent:?} with a bus that never confirms, {read:?} with run \
         events read by a client, {none:?} without run events"
    );
}

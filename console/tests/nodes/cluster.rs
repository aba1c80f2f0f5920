//! Engine nodes and wrappers as separate processes on PostgreSQL (the `mthpt engine` and
//! `mthpt wrapper` commands): several nodes never create or dispatch an occurrence twice, nor
//! when one of them is stopped (SIGSTOP) for 10 s in the middle of it; a SIGKILLed node's claimed runs fire on another node once its lease ends; a SIGKILLed
//! wrapper's running run is declared lost and recovered elsewhere; a run past its deadline is
//! cancelled and its shell process group is gone; a SIGKILLed console node's WebSocket clients
//! reconnect to it once it is started again and re-sync the open alarms.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use mthpt_engine::alarm::{AlarmFilter, AlarmKind};
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::run::{RunState, TriggerKind};
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::{Scope, Store};
use mthpt_engine::task::{Routing, TaskDefinition};
use mthpt_engine::testing::TestDb;
use mthpt_testkit::ChildGuard;
use mthpt_tests::{Tenancy, TestWrapper, create, runs, tenancy, trigger, wait_until};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

/// The tests of this file run one at a time: each starts several processes, and together they
/// would starve a small machine of CPU for longer than a lease.
pub(crate) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts `mthpt` with `args` as `name`, logging to `<dir>/<name>.log`; stopped when dropped
/// (its log is printed if the test failed).
pub(crate) fn spawn(name: &str, dir: &Path, args: &[String]) -> ChildGuard {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mthpt"));
    command
        .args(args)
        .env("RUST_LOG", "info,mthpt_engine=debug")
        .env_remove("MTHPT_DATABASE_URL");
    ChildGuard::spawn_logged(name, &mut command, &dir.join(format!("{name}.log"))).unwrap()
}

pub(crate) fn now() -> i64 {
    SystemClock.now_ms()
}

/// Starts `mthpt engine` as `node` with quick timings plus `extra`, and waits until it is up.
pub(crate) async fn engine(
    db: &TestDb,
    dir: &Path,
    node: &str,
    extra: &[&str],
) -> Result<(ChildGuard, String)> {
    let mut args: Vec<String> = [
        "engine",
        "--database-url",
        &db.url(),
        "--node-id",
        node,
        "--listen",
        "127.0.0.1:0",
        "--poll-interval-ms",
        "50",
        "--executor-heartbeat-ms",
        "200",
        "--executor-timeout-ms",
        "1500",
        "--node-timeout-ms",
        "2000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let proc = spawn(node, dir, &args);
    let store = db.shared();
    wait_until(WAIT, &format!("engine {node} up"), || async {
        Ok(node_address(&*store, node).await?.is_some())
    })
    .await?;
    let address = node_address(&*store, node).await?.unwrap_or_default();
    Ok((proc, address))
}

async fn node_address(store: &dyn Store, node: &str) -> Result<Option<String>> {
    let mut tx = store.begin_read().await?;
    Ok(tx
        .list_nodes()
        .await?
        .into_iter()
        .find(|n| n.id == node && n.state == mthpt_engine::node::NodeState::Up)
        .map(|n| n.address))
}

/// Starts `mthpt wrapper` with the built-in handler `builtin` (`shell` or `http`), labelled
/// `name`, and waits until it is registered.
async fn builtin_wrapper(
    db: &TestDb,
    dir: &Path,
    t: &Tenancy,
    engines: &str,
    name: &str,
    builtin: &str,
) -> Result<ChildGuard> {
    let secret = dir.join(format!("{name}.secret"));
    std::fs::write(&secret, &t.secret)?;
    let args: Vec<String> = [
        "wrapper",
        "--app",
        &t.key,
        "--secret-file",
        &secret.display().to_string(),
        "--engine",
        engines,
        "--listen",
        "127.0.0.1:0",
        &format!("--enable-{builtin}"),
        "--label",
        &format!("name={name}"),
        "--spool",
        &dir.join(format!("{name}.spool")).display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let proc = spawn(name, dir, &args);
    let store = db.shared();
    wait_until(WAIT, &format!("wrapper {name} registered"), || async {
        let mut tx = store.begin_read().await?;
        Ok(tx.list_executors(t.tenant.id, None).await?.iter().any(|e| {
            e.labels.0.get("name").map(String::as_str) == Some(name)
                && e.state == mthpt_engine::app::ExecutorState::Up
        }))
    })
    .await?;
    Ok(proc)
}

/// `pause`: node-0 is stopped (SIGSTOP) for that long a second into the schedules, then
/// continued — a VM freeze or a long pause of the process.
async fn several_nodes_never_fire_an_occurrence_twice(
    nodes: usize,
    pause: Option<Duration>,
) -> Result<()> {
    let _serial = SERIAL.lock().await;
    let db = mthpt_engine::testing::postgres().await;
    let dir = tempfile::tempdir()?;
    let store = db.shared();
    let t = tenancy(&*store, "acme", "billing").await?;
    let mut engines = Vec::new();
    for i in 0..nodes {
        engines.push(
            engine(
                &db,
                dir.path(),
                &format!("node-{i}"),
                &["--horizon-ms", "300", "--lease-ms", "1500"],
            )
            .await?,
        );
    }
    let urls: Vec<String> = engines.iter().map(|(_, url)| url.clone()).collect();
    // Every invocation of the handler, by run id, across two wrapper instances.
    let calls: Arc<Mutex<HashMap<i64, usize>>> = Arc::default();
    let counting = |calls: Arc<Mutex<HashMap<i64, usize>>>| {
        move |b: mthpt_wrapper::WrapperBuilder| {
            b.async_handler("count", move |ctx| {
                let calls = calls.clone();
                async move {
                    *calls.lock().unwrap().entry(ctx.run_id()).or_default() += 1;
                    Ok(json!(null))
                }
            })
        }
    };
    let w1 = TestWrapper::start(&t, &urls, counting(calls.clone()))?;
    let w2 = TestWrapper::start(&t, &urls, counting(calls.clone()))?;
    w1.registered().await?;
    w2.registered().await?;

    let start = now() + 500;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let def = TaskDefinition::new(
            t.app.id,
            format!("t{i}"),
            "count",
            ScheduleSpec::FixedRate {
                every_ms: 250,
                anchor_at: Some(start + i * 10),
            },
        );
        tasks.push(create(&*store, &t, &def).await?);
    }
    match pause {
        Some(pause) => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let pid = engines[0].0.id().to_string();
            Command::new("kill").args(["-STOP", &pid]).status()?;
            tokio::time::sleep(pause).await;
            Command::new("kill").args(["-CONT", &pid]).status()?;
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        None => tokio::time::sleep(Duration::from_secs(5)).await,
    }
    // Every occurrence due until `checked_until` must fire. A busy machine may run them late
    // (pausing a task deletes its occurrences not yet claimed), so the schedules are stopped
    // only once every task has fired one due at or after that instant.
    let checked_until = now();
    wait_until(WAIT, "every task fired up to now", || async {
        for task in &tasks {
            let caught_up = runs(&*store, &t, task)
                .await?
                .iter()
                .any(|r| r.state != RunState::Pending && r.scheduled_at >= checked_until);
            if !caught_up {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;
    // Stop the schedules, then let what was fired finish.
    for task in &tasks {
        let mut tx = store.begin().await?;
        tx.pause_task(t.tenant.id, task.id, task.version, now())
            .await?;
        tx.commit().await?;
    }
    wait_until(WAIT, "every fired run finished", || async {
        let mut unfinished = 0;
        for task in &tasks {
            unfinished += runs(&*store, &t, task)
                .await?
                .iter()
                .filter(|r| matches!(r.state, RunState::Claimed | RunState::Running))
                .count();
        }
        Ok(unfinished == 0)
    })
    .await?;

    let mut owners = std::collections::BTreeSet::new();
    let mut total = 0;
    let mut reclaimed = 0;
    for task in &tasks {
        let all = runs(&*store, &t, task).await?;
        let anchor = task.anchor_at.unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for r in all.iter().filter(|r| r.state != RunState::Pending) {
            assert!(
                seen.insert((r.scheduled_at, r.attempt, r.shard_index)),
                "occurrence created twice: {r:?}"
            );
            assert_eq!(r.state, RunState::Succeeded, "{r:?}");
            // A run claimed again after its lease ended is legitimate (a starved node); it must
            // still reach an executor once, which the handler counts and the logs below show.
            if r.fence > 1 {
                reclaimed += 1;
            }
            owners.insert(r.claim_owner.clone());
            total += 1;
        }
        // Nothing missed: every occurrence from the anchor (or the task's creation) until
        // `checked_until` fired.
        let mut at = anchor;
        // On a busy machine a task may be created after its anchor: it starts from then.
        while at < task.created_at {
            at += 250;
        }
        while at <= checked_until {
            assert!(
                seen.contains(&(at, 1, 0)),
                "task {} missed its occurrence at {at} (anchor + {} ms)",
                task.name,
                at - anchor
            );
            at += 250;
        }
    }
    let calls: HashMap<i64, usize> = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), total, "every run reached a handler");
    assert!(
        calls.values().all(|&n| n == 1),
        "a handler ran twice for one run: {:?}",
        calls.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
    // A node that had an executor accept a run it no longer held says so: without a pause that
    // would be a second dispatch of the same run. (A paused node does that for the runs it sent
    // just before it stopped; the node that took them over asked the same instance, which
    // answered that it had them: the handler counts above show each ran once.)
    for (proc, _) in engines.iter().filter(|_| pause.is_none()) {
        let log = proc.log_text();
        assert!(
            !log.contains("no longer held"),
            "{} dispatched a run another node had taken over:\n{}",
            proc.name(),
            log.lines()
                .filter(|l| l.contains("no longer held"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    eprintln!(
        "{nodes} nodes: {total} runs, each fired once ({reclaimed} claimed again after a lease ended); claimed by {owners:?}"
    );
    w1.stop().await;
    w2.stop().await;
    drop(engines);
    db.cleanup().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_never_create_or_dispatch_an_occurrence_twice() {
    several_nodes_never_fire_an_occurrence_twice(2, None)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_paused_for_ten_seconds_starts_no_run_twice_and_loses_no_result() {
    several_nodes_never_fire_an_occurrence_twice(2, Some(Duration::from_secs(10)))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_never_create_or_dispatch_an_occurrence_twice() {
    several_nodes_never_fire_an_occurrence_twice(3, None)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_nodes_claimed_runs_fire_on_another_node_within_the_lease() {
    let _serial = SERIAL.lock().await;
    let db = mthpt_engine::testing::postgres().await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.shared();
    let t = tenancy(&*store, "acme", "billing").await.unwrap();
    // Node A claims far ahead with a 4 s lease; node B only claims what is nearly due.
    let (mut a, a_url) = engine(
        &db,
        dir.path(),
        "node-a",
        &["--horizon-ms", "3000", "--lease-ms", "4000"],
    )
    .await
    .unwrap();
    let (_b, b_url) = engine(
        &db,
        dir.path(),
        "node-b",
        &["--horizon-ms", "200", "--lease-ms", "1500"],
    )
    .await
    .unwrap();
    let w = TestWrapper::start(&t, &[a_url, b_url], |b| {
        b.async_handler("echo", |_| async { Ok(json!(null)) })
    })
    .unwrap();
    w.registered().await.unwrap();
    let task = create(
        &*store,
        &t,
        &TaskDefinition::new(
            t.app.id,
            "later",
            "echo",
            ScheduleSpec::Once { at: now() + 2_500 },
        ),
    )
    .await
    .unwrap();
    wait_until(WAIT, "node A holds the run", || async {
        Ok(runs(&*store, &t, &task).await?.first().is_some_and(|r| {
            r.state == RunState::Claimed && r.claim_owner.as_deref() == Some("node-a")
        }))
    })
    .await
    .unwrap();
    let held = runs(&*store, &t, &task).await.unwrap().remove(0);
    let lease_end = held.lease_until.unwrap();
    a.kill();
    let killed_at = now();
    // Its result may come before node B writes that it sent it (the dispatch time).
    wait_until(WAIT, "the run succeeded on node B", || async {
        Ok(runs(&*store, &t, &task)
            .await?
            .first()
            .is_some_and(|r| r.state == RunState::Succeeded && r.dispatched_at.is_some()))
    })
    .await
    .unwrap();
    let run = runs(&*store, &t, &task).await.unwrap().remove(0);
    assert_eq!(run.id, held.id);
    assert_eq!(run.claim_owner.as_deref(), Some("node-b"));
    assert_eq!(run.fence, held.fence + 1, "claimed again, once");
    let dispatched = run.dispatched_at.unwrap();
    assert!(dispatched >= lease_end, "not before node A's lease ended");
    assert!(
        dispatched - lease_end < 1_500,
        "fired {} ms after the lease ended",
        dispatched - lease_end
    );
    assert!(
        dispatched - killed_at <= 4_000 + 1_500,
        "refire {} ms after the kill",
        dispatched - killed_at
    );
    eprintln!(
        "refired {} ms after the kill, {} ms after the lease ended",
        dispatched - killed_at,
        dispatched - lease_end
    );
    w.stop().await;
    drop(_b);
    db.cleanup().await;
}

/// A tiny HTTP endpoint: the first request is held open (the work "runs" until its wrapper
/// dies), later ones are answered 200 at once. Returns its URL and the count of requests.
async fn slow_then_fast_endpoint() -> Result<(String, Arc<std::sync::atomic::AtomicUsize>)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/work", listener.local_addr()?);
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let n = count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                if n == 0 {
                    // Hold the first request until the caller goes away.
                    let _ = conn.read(&mut buf).await;
                    return;
                }
                let _ = conn
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    Ok((url, seen))
}

/// The wrapper is killed with SIGKILL while its run is in flight. Its handler makes an HTTP
/// call rather than running a script, so the kill leaves no orphaned child process behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_wrappers_running_run_is_lost_and_recovered() {
    let _serial = SERIAL.lock().await;
    use std::sync::atomic::Ordering;
    let db = mthpt_engine::testing::postgres().await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.shared();
    let t = tenancy(&*store, "acme", "billing").await.unwrap();
    let (_engine, url) = engine(&db, dir.path(), "node-1", &[]).await.unwrap();
    let mut a = builtin_wrapper(&db, dir.path(), &t, &url, "a", "http")
        .await
        .unwrap();
    let _b = builtin_wrapper(&db, dir.path(), &t, &url, "b", "http")
        .await
        .unwrap();
    let (endpoint, requests) = slow_then_fast_endpoint().await.unwrap();
    let mut def = TaskDefinition::new(t.app.id, "fragile", "http", ScheduleSpec::Manual);
    def.params = json!({ "url": endpoint, "method": "POST", "timeout_ms": 60_000 });
    def.routing = Routing::Failover;
    let task = create(&*store, &t, &def).await.unwrap();
    trigger(&*store, &t, &task).await.unwrap();
    wait_until(WAIT, "attempt 1 in flight on wrapper a", || async {
        Ok(requests.load(Ordering::SeqCst) == 1
            && runs(&*store, &t, &task)
                .await?
                .first()
                .is_some_and(|r| r.state == RunState::Running))
    })
    .await
    .unwrap();
    a.kill();
    wait_until(WAIT, "the recovery run succeeded", || async {
        Ok(runs(&*store, &t, &task)
            .await?
            .iter()
            .any(|r| r.trigger_kind == TriggerKind::Recovery && r.state == RunState::Succeeded))
    })
    .await
    .unwrap();
    let all = runs(&*store, &t, &task).await.unwrap();
    assert_eq!(
        all.iter().map(|r| (r.attempt, r.state)).collect::<Vec<_>>(),
        vec![(1, RunState::Lost), (2, RunState::Succeeded)]
    );
    assert_ne!(
        all[0].executor_id, all[1].executor_id,
        "recovered on the other wrapper"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 2);
    let mut tx = store.begin_read().await.unwrap();
    let lost = tx
        .list_alarms(
            Scope::Tenant(t.tenant.id),
            &AlarmFilter {
                kind: Some(AlarmKind::ExecutorLost),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(lost.len(), 1);
    drop(tx);
    drop(_b);
    db.cleanup().await;
}

/// Live (not zombie) processes whose process group is `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...: comm may hold spaces, so split after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2].parse::<i32>() == Ok(pgid) {
            members.push(pid);
        }
    }
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_past_its_deadline_is_cancelled_and_its_shell_group_is_gone() {
    let _serial = SERIAL.lock().await;
    let db = mthpt_engine::testing::postgres().await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.shared();
    let t = tenancy(&*store, "acme", "billing").await.unwrap();
    let (_engine, url) = engine(&db, dir.path(), "node-1", &[]).await.unwrap();
    let w = builtin_wrapper(&db, dir.path(), &t, &url, "a", "shell")
        .await
        .unwrap();
    let pgid_file = dir.path().join("script.pgid");
    let script = format!(
        "echo $$ > {}; sleep 60 & sleep 60 & wait",
        pgid_file.display()
    );
    let mut def = TaskDefinition::new(t.app.id, "stuck", "shell", ScheduleSpec::Manual);
    def.params = json!({ "script": script });
    def.timeout_ms = Some(1_500);
    let task = create(&*store, &t, &def).await.unwrap();
    trigger(&*store, &t, &task).await.unwrap();
    wait_until(WAIT, "the script started", || async {
        Ok(pgid_file.exists()
            && std::fs::read_to_string(&pgid_file)?
                .trim()
                .parse::<i32>()
                .is_ok())
    })
    .await
    .unwrap();
    let pgid: i32 = std::fs::read_to_string(&pgid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The script wrote its pid before starting its children.
    wait_until(WAIT, "bash and its two children run", || async {
        Ok(group_members(pgid).len() >= 3)
    })
    .await
    .unwrap();
    wait_until(WAIT, "timed out", || async {
        Ok(runs(&*store, &t, &task)
            .await?
            .first()
            .is_some_and(|r| r.state == RunState::TimedOut))
    })
    .await
    .unwrap();
    wait_until(
        Duration::from_secs(10),
        "no process of the script's group is left",
        || async { Ok(group_members(pgid).is_empty()) },
    )
    .await
    .unwrap();
    drop(w);
    db.cleanup().await;
}

/// The open alarms of tenant `acme` on the console at `base`, as `token` sees them: what a
/// reconnecting client re-reads (ids).
async fn open_alarm_ids(base: &str, token: &str) -> std::collections::BTreeSet<i64> {
    let res = reqwest::Client::new()
        .get(format!("{base}/api/v1/tenants/acme/alarms?status=open"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let body: serde_json::Value = res.json().await.unwrap();
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["id"].as_i64())
        .collect()
}

async fn raise_alarm(store: &dyn Store, tenant: mthpt_engine::tenant::TenantId, key: &str) -> i64 {
    let mut alarm = mthpt_engine::alarm::NewAlarm::new(
        Some(tenant),
        AlarmKind::Misfire,
        mthpt_engine::alarm::Severity::Warning,
        key,
    );
    alarm.dedupe_key = Some(key.to_owned());
    let mut tx = store.begin().await.unwrap();
    let a = tx.insert_alarm(&alarm, now()).await.unwrap().unwrap();
    tx.commit().await.unwrap();
    a.id.0
}

/// Raises alarms until one reaches `socket` (the node's subscription is up once one does).
async fn live_alarm(
    store: &dyn Store,
    tenant: mthpt_engine::tenant::TenantId,
    socket: &mut support::Socket,
    key: &str,
) -> i64 {
    for attempt in 0..40 {
        let id = raise_alarm(store, tenant, &format!("{key}-{attempt}")).await;
        let frames = support::frames_for(socket, Duration::from_millis(500)).await;
        if frames
            .iter()
            .any(|v| v["type"] == "alarm.raised" && v["alarm"]["id"] == id)
        {
            return id;
        }
    }
    panic!("no alarm reached the console node's client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_console_nodes_clients_reconnect_and_resync_the_open_alarms() {
    use mthpt_engine::bus::{AmqpBus, AmqpConfig, Bus};
    let _serial = SERIAL.lock().await;
    let app = mthpt_console::testing::spawn_app(mthpt_engine::store::Backend::Postgres).await;
    let acme = app.tenant("acme").await;
    let (_, ada) = app
        .user(
            Some(&acme),
            "ada",
            mthpt_engine::tenant::Role::TenantOperator,
        )
        .await;
    let amqp_url = std::env::var("MTHPT_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let exchange = format!("mthpt.alarms.test.{}", uuid::Uuid::new_v4().simple());
    let bus = AmqpBus::connect(AmqpConfig {
        exchange: exchange.clone(),
        ..AmqpConfig::new(amqp_url.clone())
    })
    .await
    .unwrap_or_else(|e| panic!("RabbitMQ is unreachable at {amqp_url}: {e}"));
    let relay_bus: Arc<dyn Bus> = Arc::new(bus.clone());
    let engine = mthpt_engine::runtime::EngineNode::start_with_bus(
        app.shared_store(),
        Arc::new(SystemClock),
        mthpt_tests::quick_engine_config("engine-1"),
        Some(relay_bus),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The node is killed and started again on this port.
    let port = mthpt_testkit::restartable_port();
    let base = format!("http://127.0.0.1:{port}");
    let events = format!("ws://127.0.0.1:{port}/api/v1/events");
    let args: Vec<String> = [
        "console",
        "--database-url",
        &app.database_url(),
        "--bind",
        &format!("127.0.0.1:{port}"),
        "--amqp-url",
        &amqp_url,
        "--amqp-exchange",
        &exchange,
        "--node-id",
        "console-1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let store = app.shared_store();

    let mut console = spawn("console-1", dir.path(), &args);
    let mut socket = support::connect_when_up(&events, &ada, WAIT).await;
    let first = live_alarm(&*store, acme.id, &mut socket, "before").await;

    console.kill();
    // The client sees its socket end.
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        use futures::StreamExt;
        while let Some(Ok(_)) = socket.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the socket of a killed node ends");
    // Meanwhile: alarms raised, and one acknowledged through another node.
    let mut down = Vec::new();
    for i in 0..3 {
        down.push(raise_alarm(&*store, acme.id, &format!("while-down-{i}")).await);
    }
    let res = app
        .request(
            reqwest::Method::POST,
            &format!("/api/v1/tenants/acme/alarms/{}/ack", down[0]),
            &ada,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);

    drop(console);
    let mut console = spawn("console-1", dir.path(), &args);
    let started = std::time::Instant::now();
    let mut socket = support::connect_when_up(&events, &ada, WAIT).await;
    // Re-sync: one list call shows what is open now, including what happened while the node
    // was down.
    let open = open_alarm_ids(&base, &ada).await;
    assert!(open.contains(&first), "{open:?}");
    for id in &down[1..] {
        assert!(
            open.contains(id),
            "alarm {id} raised while the node was down: {open:?}"
        );
    }
    assert!(!open.contains(&down[0]), "acknowledged meanwhile: {open:?}");
    // And live events flow again.
    live_alarm(&*store, acme.id, &mut socket, "after").await;
    eprintln!(
        "console node restarted: client reconnected, re-synced and live again after {:?}",
        started.elapsed()
    );
    console.kill();
    engine.shutdown().await;
    app.stop().await;
    bus.delete_exchange().await.unwrap();
    bus.close().await;
}

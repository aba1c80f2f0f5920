//! `mthpt standalone` in a fresh directory: the demo runs, the chain child follows its parent,
//! and the failing task retries and leaves a "retries exhausted" alarm — read back from the
//! SQLite file it creates. SIGTERM stops it cleanly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::{Connection, SqliteConnection};

async fn count(db: &std::path::Path, sql: &'static str) -> i64 {
    let Ok(mut conn) =
        SqliteConnection::connect(&format!("sqlite://{}?mode=ro", db.display())).await
    else {
        return 0;
    };
    let n: Result<(i64,), _> = sqlx::query_as(sql).fetch_one(&mut conn).await;
    n.map(|(n,)| n).unwrap_or(0)
}

#[tokio::test]
async fn standalone_runs_the_demo_in_a_fresh_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mthpt"))
        .args([
            "standalone",
            "--listen",
            "127.0.0.1:0",
            "--wrapper-listen",
            "127.0.0.1:0",
            "--console-listen",
            "127.0.0.1:0",
        ])
        .current_dir(dir.path())
        .env_remove("MTHPT_DATA")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let db = dir.path().join("mthpt-data").join("mthpt.db");

    let checks: [(&str, &'static str); 4] = [
        (
            "a scheduled heartbeat run succeeded",
            "SELECT COUNT(*) FROM runs r JOIN tasks t ON t.id = r.task_id
             WHERE t.name = 'heartbeat' AND r.state = 'succeeded' AND r.executor_id IS NOT NULL",
        ),
        (
            "the chain child report succeeded after its parent extract",
            "SELECT COUNT(*) FROM runs c JOIN tasks t ON t.id = c.task_id
             JOIN runs p ON p.id = c.parent_run_id JOIN tasks pt ON pt.id = p.task_id
             WHERE t.name = 'report' AND c.state = 'succeeded' AND c.trigger_kind = 'chain'
               AND pt.name = 'extract' AND p.state = 'succeeded' AND c.scheduled_at >= p.finished_at",
        ),
        (
            "flaky failed three times (two retries)",
            "SELECT COUNT(*) FROM runs r JOIN tasks t ON t.id = r.task_id
             WHERE t.name = 'flaky' AND r.state = 'failed' AND r.attempt IN (1, 2, 3)",
        ),
        (
            "a retries-exhausted alarm row for flaky",
            "SELECT COUNT(*) FROM alarms a JOIN tasks t ON t.id = a.task_id
             WHERE t.name = 'flaky' AND a.kind = 'retries_exhausted'",
        ),
    ];
    let wanted = [1, 1, 3, 1];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = Vec::new();
    loop {
        last.clear();
        for (what, sql) in &checks {
            last.push((*what, count(&db, sql).await));
        }
        if last.iter().zip(wanted).all(|((_, n), w)| *n >= w) {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("mthpt standalone exited early with {status}; reached: {last:?}");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the demo did not get there in 60 s; reached: {last:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM alarms WHERE kind = 'retries_exhausted'"
        )
        .await,
        1,
        "one alarm, not one per attempt"
    );

    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        status.status.success(),
        "clean exit on SIGTERM: {:?}",
        status.status
    );
    let banner = String::from_utf8_lossy(&status.stdout);
    assert!(
        banner.contains("MTHPT standalone") && banner.contains("demo.demo"),
        "{banner}"
    );
}

/// Starts `mthpt standalone --no-demo` in `dir` and returns it with the console URL and the
/// printed operator password.
fn start_bare(dir: &std::path::Path) -> (std::process::Child, String, String) {
    start(dir, &["--no-demo"])
}

/// Starts `mthpt standalone` with `extra` arguments in `dir` on free ports and returns it with
/// the console URL and the printed operator password.
fn start(dir: &std::path::Path, extra: &[&str]) -> (std::process::Child, String, String) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_mthpt"))
        .args([
            "standalone",
            "--listen",
            "127.0.0.1:0",
            "--wrapper-listen",
            "127.0.0.1:0",
            "--console-listen",
            "127.0.0.1:0",
        ])
        .args(extra)
        .current_dir(dir)
        .env_remove("MTHPT_DATA")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut url, mut password) = (None, None);
    while url.is_none() || password.is_none() {
        let line = lines
            .next()
            .expect("standalone printed its banner")
            .unwrap();
        if let Some(rest) = line.trim().strip_prefix("console") {
            url = rest
                .split_whitespace()
                .next()
                .map(|u| u.trim_end_matches("/api/v1").to_owned());
        }
        if let Some(rest) = line.trim().strip_prefix("login") {
            let mut words = rest.split_whitespace();
            assert_eq!(words.next(), Some("admin"), "{line}");
            assert_eq!(words.next(), Some("/"), "{line}");
            password = words.next().map(str::to_owned);
        }
    }
    (child, url.unwrap(), password.unwrap())
}

fn stop(child: std::process::Child) {
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "clean exit on SIGTERM: {:?}",
        out.status
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_prints_a_generated_operator_login_that_works_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let (child, url, password) = tokio::task::block_in_place(|| start_bare(dir.path()));
    assert!(password.len() >= 16, "{password}");
    let kept = std::fs::read_to_string(dir.path().join("mthpt-data/operator-password")).unwrap();
    assert_eq!(kept.trim(), password);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("mthpt-data/operator-password"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "only the owner may read the password file");
    }
    let client = reqwest::Client::new();
    let res = client
        .post(format!("{url}/api/v1/session"))
        .json(&serde_json::json!({ "username": "admin", "password": password }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let wrong = client
        .post(format!("{url}/api/v1/session"))
        .json(&serde_json::json!({ "username": "admin", "password": "admin" }))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401, "no fixed default password");
    tokio::task::block_in_place(|| stop(child));

    // A second start keeps the same operator and prints the same password.
    let (child, _, again) = tokio::task::block_in_place(|| start_bare(dir.path()));
    assert_eq!(again, password);
    tokio::task::block_in_place(|| stop(child));
}

/// The README's quick start over HTTP: the printed login signs in, the session makes a token,
/// and the token creates a cron task, previews its schedule, triggers it and reads the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_login_creates_previews_and_triggers_a_cron_task() {
    use serde_json::{Value, json};
    let dir = tempfile::tempdir().unwrap();
    let (child, url, password) = tokio::task::block_in_place(|| start(dir.path(), &[]));
    let api = format!("{url}/api/v1");
    let client = reqwest::Client::new();
    let signed_in = client
        .post(format!("{api}/session"))
        .json(&json!({ "username": "admin", "password": password }))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), 200);
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let issued = client
        .post(format!("{api}/tokens"))
        .header("Cookie", cookie)
        .header("Origin", &url)
        .json(&json!({ "name": "quick-start" }))
        .send()
        .await
        .unwrap();
    assert_eq!(issued.status(), 201);
    let token = issued.json::<Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();

    let task: Value = client
        .post(format!("{api}/tenants/demo/tasks"))
        .bearer_auth(&token)
        .json(&json!({
            "name": "greet", "app": "demo", "handler": "hello",
            "schedule": {"kind": "cron", "expr": "0 0/10 * * * ?", "timezone": "Asia/Shanghai"}
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let task_id = task["id"].as_i64().unwrap_or_else(|| panic!("{task}"));
    let preview: Value = client
        .post(format!("{api}/tenants/demo/schedule-preview"))
        .bearer_auth(&token)
        .json(&json!({ "task_id": task_id, "count": 3 }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(preview["timezone"], "Asia/Shanghai", "{preview}");
    let times = preview["fire_times"].as_array().unwrap();
    assert_eq!(times.len(), 3, "{preview}");
    assert!(
        times
            .iter()
            .all(|t| t.as_str().unwrap().ends_with("0:00+08:00")),
        "every 10 minutes, Shanghai time: {preview}"
    );
    let run: Value = client
        .post(format!("{api}/tenants/demo/tasks/{task_id}/trigger"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = run["id"].as_i64().unwrap_or_else(|| panic!("{run}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let detail = loop {
        let detail: Value = client
            .get(format!("{api}/tenants/demo/runs/{run_id}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if detail["state"] == "succeeded" || Instant::now() > deadline {
            break detail;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(detail["state"], "succeeded", "{detail}");
    assert_eq!(detail["output"], json!({ "greeting": "hello" }), "{detail}");
    assert!(
        detail["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "finished"),
        "{detail}"
    );
    tokio::task::block_in_place(|| stop(child));
}

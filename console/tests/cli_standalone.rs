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
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_mthpt"))
        .args([
            "standalone",
            "--no-demo",
            "--listen",
            "127.0.0.1:0",
            "--console-listen",
            "127.0.0.1:0",
        ])
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

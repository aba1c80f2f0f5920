//! A cluster's console from the command line, as real processes: `mthpt bootstrap` creates the
//! first operator (once), `mthpt console` serves the API, and the admin commands create a
//! tenant and an app through it. SIGTERM stops the console cleanly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn mthpt(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mthpt"));
    cmd.args(args)
        .env_remove("MTHPT_DATABASE_URL")
        .env_remove("MTHPT_TOKEN")
        .env_remove("MTHPT_URL")
        .env_remove("MTHPT_CLI_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn line_value(out: &str, label: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label} in {out}"))
        .trim()
        .to_owned()
}

#[test]
fn bootstrap_then_console_then_admin_commands() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("cluster.db").display());

    let first = mthpt(&["bootstrap", "--database-url", &db], &[]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let out = String::from_utf8_lossy(&first.stdout).into_owned();
    let token = line_value(&out, "token");
    assert!(token.starts_with("mthpt_"), "{out}");
    let again = mthpt(&["bootstrap", "--database-url", &db], &[]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists already"));

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind = format!("127.0.0.1:{port}");
    let url = format!("http://{bind}");
    let mut console = Command::new(env!("CARGO_BIN_EXE_mthpt"))
        .args(["console", "--database-url", &db, "--bind", &bind])
        .env_remove("MTHPT_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let env = [("MTHPT_URL", url.as_str()), ("MTHPT_TOKEN", token.as_str())];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if mthpt(&["tenant", "list"], &env).status.success() {
            break;
        }
        assert!(
            console.try_wait().unwrap().is_none(),
            "mthpt console exited"
        );
        assert!(
            Instant::now() < deadline,
            "the console did not answer in 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let tenant = mthpt(&["tenant", "create", "acme"], &env);
    assert!(
        tenant.status.success(),
        "{}",
        String::from_utf8_lossy(&tenant.stderr)
    );
    let app = mthpt(&["app", "create", "--tenant", "acme", "ops"], &env);
    assert!(
        app.status.success(),
        "{}",
        String::from_utf8_lossy(&app.stderr)
    );
    let app_out = String::from_utf8_lossy(&app.stdout).into_owned();
    assert_eq!(line_value(&app_out, "app"), "acme.ops");
    assert_eq!(line_value(&app_out, "secret").len(), 64);

    let pid = console.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = console.wait().unwrap();
    assert!(status.success(), "clean exit on SIGTERM: {status:?}");
}

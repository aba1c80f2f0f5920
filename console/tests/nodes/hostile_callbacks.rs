//! Ambiguous and oversized requests to a real `mthpt engine` process's callback API are refused
//! from their headers, in the protocol's error body: repeated signature headers, non-canonical
//! timestamps, upper-case hex signatures, bodies over the limit or without a declared length,
//! unknown paths; and an executor whose base URL carries a query, a fragment or user-info is not
//! registered.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Result;
use chrono::Utc;
use mthpt_engine::node::NodeState;
use mthpt_engine::store::Store;
use mthpt_tests::{Tenancy, tenancy, wait_until};
use mthpt_wrapper::protocol::{ErrorBody, ErrorCode, RegisterRequest, Signer, paths, unix_now};

struct Engine {
    child: Child,
    log: PathBuf,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("{}", std::fs::read_to_string(&self.log).unwrap_or_default());
        }
    }
}

async fn engine(store: &dyn Store, url: &str) -> Result<Engine> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("engine.log");
    let child = Command::new(env!("CARGO_BIN_EXE_mthpt"))
        .args([
            "engine",
            "--database-url",
            url,
            "--node-id",
            "strict-1",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "info")
        .env_remove("MTHPT_DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let mut e = Engine {
        child,
        log,
        addr: String::new(),
        _dir: dir,
    };
    wait_until(Duration::from_secs(30), "engine up", || async {
        Ok(address(store).await?.is_some())
    })
    .await?;
    e.addr = address(store).await?.unwrap_or_default();
    Ok(e)
}

async fn address(store: &dyn Store) -> Result<Option<String>> {
    let mut tx = store.begin_read().await?;
    Ok(tx
        .list_nodes()
        .await?
        .into_iter()
        .find(|n| n.id == "strict-1" && n.state == NodeState::Up)
        .map(|n| n.address.trim_start_matches("http://").to_owned()))
}

/// Sends a request on a raw socket and returns its status and error body.
fn send(addr: &str, path: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, ErrorBody) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut head =
        format!("POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    let error = serde_json::from_str(body).unwrap_or_else(|e| panic!("{body:?}: {e}"));
    (status, error)
}

fn register_body(base_url: &str) -> Vec<u8> {
    serde_json::to_vec(&RegisterRequest {
        instance_id: "i-1".into(),
        base_url: base_url.into(),
        capacity: 4,
        running: 0,
        handlers: vec![],
        labels: Default::default(),
        version: "test".into(),
        started_at: Utc::now(),
    })
    .unwrap()
}

fn signed(t: &Tenancy, path: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    let mut headers: Vec<(&str, String)> = Signer::new(t.key.clone(), t.secret.clone())
        .sign("POST", path, body)
        .pairs()
        .into_iter()
        .collect();
    headers.push(("Content-Length", body.len().to_string()));
    headers
}

fn assert_refused(answer: (u16, ErrorBody), status: u16, code: ErrorCode, mentions: &str) {
    assert_eq!(answer.0, status, "{answer:?}");
    assert_eq!(answer.1.error, code, "{answer:?}");
    assert!(
        answer.1.message.contains(mentions),
        "{:?} does not mention {mentions:?}",
        answer.1.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callback_api_refuses_ambiguous_and_oversized_requests() -> Result<()> {
    let db = mthpt_engine::testing::postgres().await;
    let store = db.shared();
    let t = tenancy(&*store, "acme", "billing").await?;
    let e = engine(&*store, &db.url()).await?;
    let path = paths::REGISTER;
    let body = register_body("http://127.0.0.1:9");

    // A repeated signature header.
    let mut headers = signed(&t, path, &body);
    let again = Signer::new(t.key.clone(), t.secret.clone()).sign("POST", path, &body);
    headers.push(("X-Mthpt-Signature", again.signature));
    let a = send(&e.addr, path, &headers, &body);
    assert_refused(a, 401, ErrorCode::Unauthorized, "appears more than once");

    // A timestamp with a sign or a leading zero, signed over the integer it stands for.
    for text in [format!("+{}", unix_now()), format!("0{}", unix_now())] {
        let mut headers = signed(&t, path, &body);
        for (name, value) in &mut headers {
            if *name == "X-Mthpt-Timestamp" {
                value.clone_from(&text);
            }
        }
        let a = send(&e.addr, path, &headers, &body);
        assert_refused(a, 401, ErrorCode::Unauthorized, "plain decimal digits");
    }

    // An upper-case hex signature.
    let mut headers = signed(&t, path, &body);
    for (name, value) in &mut headers {
        if *name == "X-Mthpt-Signature" {
            *value = value.to_ascii_uppercase();
        }
    }
    let a = send(&e.addr, path, &headers, &body);
    assert_refused(a, 401, ErrorCode::Unauthorized, "lower-case hex");

    // A body over the limit, refused from its declared length.
    let mut headers = signed(&t, path, &body);
    headers.pop();
    headers.push(("Content-Length", (64 << 20).to_string()));
    let a = send(&e.addr, path, &headers, b"");
    assert_refused(a, 413, ErrorCode::TooLarge, "16777216 bytes");

    // A chunked body.
    let mut headers = signed(&t, path, &body);
    headers.pop();
    headers.push(("Transfer-Encoding", "chunked".to_owned()));
    let a = send(&e.addr, path, &headers, b"0\r\n\r\n");
    assert_refused(a, 411, ErrorCode::LengthRequired, "Content-Length");

    // An unknown path.
    let a = send(&e.addr, "/mthpt/v1/nothing", &[], b"");
    assert_refused(a, 404, ErrorCode::NotFound, "/mthpt/v1/nothing");

    // Base URLs with a query, a fragment or user-info are not registered.
    for (url, why) in [
        ("http://127.0.0.1:9/?steal=1", "query"),
        ("http://127.0.0.1:9/#x", "fragment"),
        ("http://u:p@127.0.0.1:9", "user-info"),
    ] {
        let body = register_body(url);
        let a = send(&e.addr, path, &signed(&t, path, &body), &body);
        assert_refused(a, 400, ErrorCode::Malformed, why);
    }
    let mut tx = store.begin_read().await?;
    assert!(
        tx.list_executors(t.tenant.id, Some(t.app.id))
            .await?
            .is_empty()
    );
    drop(tx);

    // The same registration with a plain base URL is accepted.
    let body = register_body("http://127.0.0.1:9/prefix");
    let mut stream = TcpStream::connect(&e.addr)?;
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (name, value) in signed(&t, path, &body) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(&body)?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    // The refusals were logged with the app key.
    let log = std::fs::read_to_string(&e.log)?;
    assert!(log.contains("acme.billing"), "{log}");
    Ok(())
}

//! Hostile and ambiguous requests to a wrapper's run API: refused from their headers before the
//! body is read, bodies bounded in size, time and total unverified bytes, and every refusal in
//! the protocol's error body. Requests are written on raw sockets so that headers can be
//! repeated, bodies held back and answers read before the body is sent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{APP, EngineStandIn, SECRET, TestWrapper, run_request};
use hmac::{Hmac, KeyInit, Mac};
use mthpt_wrapper::WrapperBuilder;
use mthpt_wrapper::protocol::{ErrorBody, ErrorCode, Signer, paths, unix_now};
use serde_json::json;
use sha2::Sha256;

struct Target {
    _engine: EngineStandIn,
    _spool: tempfile::TempDir,
    wrapper: TestWrapper,
    calls: Arc<AtomicU32>,
}

fn target(configure: impl FnOnce(WrapperBuilder) -> WrapperBuilder) -> anyhow::Result<Target> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let wrapper = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        configure(b).blocking_handler("count", move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(json!(null))
        })
    })?;
    Ok(Target {
        _engine: engine,
        _spool: spool,
        wrapper,
        calls,
    })
}

impl Target {
    fn addr(&self) -> String {
        self.wrapper.url.trim_start_matches("http://").to_owned()
    }

    /// Writes a request head (with `headers`) and `body`, leaving the socket open.
    fn open(&self, path: &str, headers: &[(&str, String)], body: &[u8]) -> TcpStream {
        let mut stream = TcpStream::connect(self.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut head = format!("POST {path} HTTP/1.1\r\nHost: test\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body).unwrap();
        stream
    }

    /// Sends a complete request and reads its answer.
    fn send(&self, path: &str, headers: &[(&str, String)], body: &[u8]) -> Answer {
        let mut all = headers.to_vec();
        all.push(("Content-Length", body.len().to_string()));
        all.push(("Content-Type", "application/json".to_owned()));
        answer(self.open(path, &all, body))
    }

    async fn assert_handler_never_ran(&self) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(self.calls.load(Ordering::SeqCst), 0);
        assert!(self.wrapper.wrapper.run_status(1).is_none());
    }
}

/// A response: status, error body (when it is one) and whether the server closed the
/// connection after it.
#[derive(Debug)]
struct Answer {
    status: u16,
    error: Option<ErrorBody>,
    closed: bool,
}

/// Reads one response; the servers close the connection after every refusal, so the response
/// ends at end of stream (a stream still open after the body is reported as not closed).
fn answer(mut stream: TcpStream) -> Answer {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match stream.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) => panic!("reading the answer failed after {} bytes: {e}", raw.len()),
        }
        if let Some(end) = complete_response(&raw) {
            raw.truncate(end);
            stream
                .set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            break matches!(stream.read(&mut buf), Ok(0) | Err(_));
        }
    };
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    Answer {
        status,
        error: serde_json::from_str(body).ok(),
        closed,
    }
}

/// The length of a complete response with a `content-length` in `raw`, if it is all there.
fn complete_response(raw: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(raw).ok()?;
    let head_end = text.find("\r\n\r\n")? + 4;
    let length: usize = text[..head_end]
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    (raw.len() >= head_end + length).then_some(head_end + length)
}

fn assert_error(a: &Answer, status: u16, code: ErrorCode, mentions: &str) {
    assert_eq!(a.status, status, "{a:?}");
    let body = a.error.as_ref().expect("an error body");
    assert_eq!(body.error, code);
    assert!(
        body.message.contains(mentions),
        "{:?} does not mention {mentions:?}",
        body.message
    );
}

/// The signature headers of a correctly signed request.
fn signed(path: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    Signer::new(APP, SECRET)
        .sign("POST", path, body)
        .pairs()
        .into_iter()
        .collect()
}

/// Headers that pass every check made before the body (right app, fresh canonical timestamp,
/// well-formed nonce and signature) but whose signature matches nothing.
fn plausible(length: usize) -> Vec<(&'static str, String)> {
    vec![
        ("X-Mthpt-App", APP.to_owned()),
        ("X-Mthpt-Timestamp", unix_now().to_string()),
        ("X-Mthpt-Nonce", "abcdefgh12345678".to_owned()),
        ("X-Mthpt-Signature", "ab".repeat(32)),
        ("Content-Length", length.to_string()),
    ]
}

fn hmac_hex(canonical: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET).unwrap();
    mac.update(canonical);
    hex::encode(mac.finalize().into_bytes())
}

fn run_body() -> Vec<u8> {
    serde_json::to_vec(&run_request(1, "count")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_signature_header_is_refused() -> anyhow::Result<()> {
    let t = target(|b| b)?;
    let body = run_body();
    let mut headers = signed(paths::RUNS, &body);
    let other = Signer::new(APP, SECRET).sign("POST", paths::RUNS, &body);
    headers.push(("X-Mthpt-Signature", other.signature));
    let a = t.send(paths::RUNS, &headers, &body);
    assert_error(
        &a,
        401,
        ErrorCode::Unauthorized,
        "X-Mthpt-Signature appears more than once",
    );
    t.assert_handler_never_ran().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_canonical_timestamps_are_refused_even_when_signed_as_sent() -> anyhow::Result<()> {
    let t = target(|b| b)?;
    let body = run_body();
    let now = unix_now();
    for text in [format!("+{now}"), format!("0{now}")] {
        // Signed over the text as sent, and over the integer it parses to: both refused.
        let over_text = {
            let mut canonical =
                format!("POST\n{}\n{text}\nabcdefgh1234\n", paths::RUNS).into_bytes();
            canonical.extend_from_slice(&body);
            hmac_hex(&canonical)
        };
        let over_integer = Signer::new(APP, SECRET)
            .sign_with("POST", paths::RUNS, &body, now, "abcdefgh1234")
            .signature;
        for signature in [over_text, over_integer] {
            let headers = vec![
                ("X-Mthpt-App", APP.to_owned()),
                ("X-Mthpt-Timestamp", text.clone()),
                ("X-Mthpt-Nonce", "abcdefgh1234".to_owned()),
                ("X-Mthpt-Signature", signature),
            ];
            let a = t.send(paths::RUNS, &headers, &body);
            assert_error(&a, 401, ErrorCode::Unauthorized, "plain decimal digits");
        }
    }
    t.assert_handler_never_ran().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upper_case_hex_signature_is_refused() -> anyhow::Result<()> {
    let t = target(|b| b)?;
    let body = run_body();
    let mut headers = signed(paths::RUNS, &body);
    for (name, value) in &mut headers {
        if *name == "X-Mthpt-Signature" {
            *value = value.to_ascii_uppercase();
        }
    }
    let a = t.send(paths::RUNS, &headers, &body);
    assert_error(&a, 401, ErrorCode::Unauthorized, "lower-case hex");
    t.assert_handler_never_ran().await;
    // The same request with the signature as the protocol writes it runs.
    let a = t.send(paths::RUNS, &signed(paths::RUNS, &body), &body);
    assert_eq!(a.status, 202, "{a:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_upload_is_answered_from_its_headers_alone() -> anyhow::Result<()> {
    let t = target(|b| b)?;
    // 30 MiB announced, not a byte sent: the answer cannot have waited for the body.
    let stream = t.open(
        paths::RUNS_BATCH,
        &[("Content-Length", (30 << 20).to_string())],
        b"",
    );
    let started = Instant::now();
    let a = answer(stream);
    assert_error(&a, 401, ErrorCode::Unauthorized, "X-Mthpt-App");
    assert!(a.closed, "the connection is closed after the refusal");
    // Waiting for the body would take the 10 s read timeout.
    assert!(started.elapsed() < Duration::from_secs(5));
    // The same for another app's key.
    let mut headers = plausible(30 << 20);
    headers[0].1 = "other.app".to_owned();
    let a = answer(t.open(paths::RUNS_BATCH, &headers, b""));
    assert_error(&a, 401, ErrorCode::Unauthorized, "unknown app");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_gets_413_in_the_error_body() -> anyhow::Result<()> {
    let t = target(|b| b.body_limits(1 << 20, 4 << 20, Duration::from_secs(5)))?;
    // Declared too large: refused before any of it is sent.
    let a = answer(t.open(paths::RUNS_BATCH, &plausible((1 << 20) + 1), b""));
    assert_error(&a, 413, ErrorCode::TooLarge, "limit of 1048576 bytes");
    assert!(a.closed);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_gets_411_from_its_headers() -> anyhow::Result<()> {
    let t = target(|b| b)?;
    let mut headers = plausible(0);
    headers.pop();
    headers.push(("Transfer-Encoding", "chunked".to_owned()));
    let a = answer(t.open(paths::RUNS_BATCH, &headers, b""));
    assert_error(&a, 411, ErrorCode::LengthRequired, "Content-Length");
    assert!(a.closed);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_held_back_is_cut_after_the_read_timeout() -> anyhow::Result<()> {
    let t = target(|b| b.body_limits(1 << 20, 4 << 20, Duration::from_millis(500)))?;
    let started = Instant::now();
    // One byte short of the announced length, then silence.
    let stream = t.open(paths::RUNS_BATCH, &plausible(1000), &[b' '; 999]);
    let a = answer(stream);
    assert_error(&a, 408, ErrorCode::Timeout, "did not arrive within 500 ms");
    assert!(a.closed, "the held connection is closed");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(8),
        "{took:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_beyond_the_unverified_budget_get_503() -> anyhow::Result<()> {
    let t = target(|b| b.body_limits(1 << 20, 1 << 20, Duration::from_secs(3)))?;
    let almost = vec![b' '; (1 << 20) - 1];
    // Holds nearly the whole budget, unverified.
    let held = t.open(paths::RUNS_BATCH, &plausible(1 << 20), &almost);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = answer(t.open(paths::RUNS_BATCH, &plausible(100), &[b' '; 100]));
    assert_error(&a, 503, ErrorCode::Unavailable, "try again");
    // Once the held body is cut, a genuine request gets through again.
    let a = answer(held);
    assert_eq!(a.status, 408, "{a:?}");
    let body = run_body();
    let a = t.send(paths::RUNS, &signed(paths::RUNS, &body), &body);
    assert_eq!(a.status, 202, "{a:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_path_gets_404_in_the_error_body() -> anyhow::Result<()> {
    let t = target(|b| b)?;
    let a = t.send("/mthpt/v1/nothing-here", &[], b"{}");
    assert_error(&a, 404, ErrorCode::NotFound, "/mthpt/v1/nothing-here");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_chunked_upload_is_cut_rather_than_drained() -> anyhow::Result<()> {
    let t = target(|b| b)?;
    // Unsigned and chunked, and the client would keep sending forever.
    let mut stream = t.open(
        paths::RUNS_BATCH,
        &[("Transfer-Encoding", "chunked".to_owned())],
        b"",
    );
    let chunk = [format!("{:x}\r\n", 8192).as_bytes(), &[b' '; 8192], b"\r\n"].concat();
    let started = Instant::now();
    let mut cut = false;
    while started.elapsed() < Duration::from_secs(10) {
        if stream.write_all(&chunk).is_err() {
            cut = true;
            break;
        }
    }
    assert!(cut, "the server kept reading a refused upload for 10 s");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

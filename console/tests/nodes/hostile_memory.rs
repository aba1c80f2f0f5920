//! Hostile uploads against the real `mthpt wrapper` and `mthpt engine` processes cannot pin
//! their memory: 128 concurrent 30 MiB uploads (unsigned, or with plausible signature headers,
//! with a declared length or chunked) and 48 bodies held one byte short of complete raise the
//! process's resident memory (VmRSS from /proc) by at most 50 MB, and the held sockets are cut
//! once the body read timeout passes (set to 2 s here, `--body-read-timeout`, so the test
//! need not wait out the default 10 s). Prints the measured figures.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use mthpt_engine::node::NodeState;
use mthpt_engine::store::Store;
use mthpt_testkit::{ChildGuard, free_port};
use mthpt_tests::{tenancy, wait_until};
use mthpt_wrapper::intake::MAX_BODY_BYTES;
use mthpt_wrapper::protocol::{paths, unix_now};

/// The body read timeout both processes are started with.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// How long an attacking client waits for an answer: well past [`READ_TIMEOUT`].
const CLIENT_WAIT: Duration = Duration::from_secs(60);

/// How soon after connecting every held socket must have been cut: the read timeout, plus room
/// for the attack's own writes and a 2-core machine running the whole suite beside it (7.5 s
/// seen on one, 16.9 s on a slower one). A server that did not cut them would hold them for the
/// client's whole [`CLIENT_WAIT`].
const CUT_WITHIN: Duration = Duration::from_secs(30);

/// The most a process's resident memory may grow under any of the attacks.
const MAX_GROWTH_KB: u64 = 50 * 1000;

/// The two processes of this file take turns: each attack uses both cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts `mthpt` with `args` as `name`, logging to `<dir>/<name>.log`; SIGKILLed when dropped,
/// its log tail printed if the test failed.
fn spawn(dir: &Path, name: &str, args: &[String]) -> ChildGuard {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mthpt"));
    command
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("MTHPT_DATABASE_URL");
    ChildGuard::spawn_logged(name, &mut command, &dir.join(format!("{name}.log")))
        .unwrap()
        .with_grace(Duration::ZERO)
}

/// The process's resident memory (VmRSS) in kB.
fn rss_kb(proc: &ChildGuard) -> u64 {
    rss_of(proc.id())()
}

/// Samples a process's VmRSS every 20 ms while an attack runs; returns the peak.
fn peak_rss_during<T>(proc: &ChildGuard, attack: impl FnOnce() -> T) -> (T, u64) {
    let peak = Arc::new(AtomicU64::new(rss_kb(proc)));
    let done = Arc::new(AtomicBool::new(false));
    let pid = proc.id();
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            let probe = rss_of(pid);
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(probe(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let out = attack();
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    peak.fetch_max(rss_kb(proc), Ordering::SeqCst);
    (out, peak.load(Ordering::SeqCst))
}

fn rss_of(pid: u32) -> impl Fn() -> u64 {
    move || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

/// How one hostile connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ending {
    /// The status the server answered, if it answered.
    status: Option<u16>,
    /// From the first byte sent until the server closed the connection.
    after: Duration,
}

/// Writes a request head, then up to `send` body bytes (declared length, or chunked when
/// `declared` is `None`), then waits for the server to answer and close.
fn hostile(
    addr: &str,
    path: &str,
    headers: &[(String, String)],
    declared: Option<usize>,
    send: usize,
) -> Ending {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(CLIENT_WAIT)).unwrap();
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: attack\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match declared {
        Some(n) => head.push_str(&format!("Content-Length: {n}\r\n\r\n")),
        None => head.push_str("Transfer-Encoding: chunked\r\n\r\n"),
    }
    let mut ok = stream.write_all(head.as_bytes()).is_ok();
    let piece = vec![b'x'; 256 * 1024];
    let mut sent = 0;
    while ok && sent < send {
        let n = piece.len().min(send - sent);
        ok = match declared {
            Some(_) => stream.write_all(&piece[..n]).is_ok(),
            None => {
                let framed = [format!("{n:x}\r\n").as_bytes(), &piece[..n], b"\r\n"].concat();
                stream.write_all(&framed).is_ok()
            }
        };
        sent += n;
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let status = String::from_utf8_lossy(&answer)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok());
    Ending {
        status,
        after: started.elapsed(),
    }
}

/// Runs `n` hostile connections at once.
fn flood(
    n: usize,
    addr: &str,
    path: &str,
    headers: &[(String, String)],
    declared: Option<usize>,
    send: usize,
) -> Vec<Ending> {
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (addr, path, headers) = (addr.to_owned(), path.to_owned(), headers.to_vec());
            std::thread::spawn(move || hostile(&addr, &path, &headers, declared, send))
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Headers that pass every check made before the body for app `key`, with a signature that
/// matches nothing.
fn plausible(key: &str) -> Vec<(String, String)> {
    vec![
        ("X-Mthpt-App".into(), key.into()),
        ("X-Mthpt-Timestamp".into(), unix_now().to_string()),
        ("X-Mthpt-Nonce".into(), "abcdefgh12345678".into()),
        ("X-Mthpt-Signature".into(), "ab".repeat(32)),
    ]
}

fn statuses(endings: &[Ending]) -> std::collections::BTreeMap<Option<u16>, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for e in endings {
        *counts.entry(e.status).or_insert(0) += 1;
    }
    counts
}

/// Every attack against one process at `addr`, on its signed endpoint `path`, for its app
/// `key`.
fn attack_all(what: &str, proc: &ChildGuard, addr: &str, path: &str, key: &str) {
    const UPLOAD: usize = 30 << 20;
    let start = rss_kb(proc);
    // Each attack is measured from the memory just before it (the allocator keeps part of what
    // an earlier attack freed, and reuses it); the total is printed at the end.
    let mut before = start;
    let mut check = |attack: &str, peak: u64, endings: &[Ending]| {
        let after = rss_kb(proc);
        eprintln!(
            "{what}: {attack}: VmRSS before {before} kB, peak {peak} kB (+{} kB), after {after} kB; answers {:?}",
            peak.saturating_sub(before),
            statuses(endings)
        );
        assert!(
            peak <= before + MAX_GROWTH_KB,
            "{what}: {attack} raised VmRSS from {before} kB to {peak} kB"
        );
        before = after;
    };

    let (endings, peak) =
        peak_rss_during(proc, || flood(128, addr, path, &[], Some(UPLOAD), UPLOAD));
    check("128 unsigned 30 MiB uploads", peak, &endings);
    assert!(endings.iter().all(|e| e.status.is_none_or(|s| s == 401)));
    assert!(endings.iter().any(|e| e.status == Some(401)));

    let headers = plausible(key);
    let (endings, peak) = peak_rss_during(proc, || {
        flood(128, addr, path, &headers, Some(UPLOAD), UPLOAD)
    });
    check("128 30 MiB uploads with plausible headers", peak, &endings);
    assert!(endings.iter().all(|e| e.status.is_none_or(|s| s == 413)));

    let (endings, peak) = peak_rss_during(proc, || flood(128, addr, path, &headers, None, UPLOAD));
    check(
        "128 chunked 30 MiB uploads with plausible headers",
        peak,
        &endings,
    );
    assert!(endings.iter().all(|e| e.status.is_none_or(|s| s == 411)));
    let slowest = endings.iter().map(|e| e.after).max().unwrap_or_default();
    assert!(
        slowest < CUT_WITHIN,
        "refused chunked uploads are cut, not drained ({slowest:?})"
    );

    let (endings, peak) = peak_rss_during(proc, || {
        flood(
            48,
            addr,
            path,
            &headers,
            Some(MAX_BODY_BYTES),
            MAX_BODY_BYTES - 1,
        )
    });
    check("48 bodies held one byte short", peak, &endings);
    let slowest = endings.iter().map(|e| e.after).max().unwrap_or_default();
    eprintln!("{what}: the last held connection was closed after {slowest:?}");
    assert!(
        slowest < CUT_WITHIN,
        "held sockets are cut after the read timeout"
    );
    assert!(
        endings
            .iter()
            .all(|e| e.status.is_none_or(|s| [408, 503].contains(&s)))
    );
    assert!(endings.iter().any(|e| e.status == Some(408)));

    // Smaller bodies: as many are held as the budget allows, and all are cut in time.
    let (endings, peak) = peak_rss_during(proc, || {
        flood(48, addr, path, &headers, Some(1 << 20), (1 << 20) - 1)
    });
    check("48 bodies of 1 MiB held one byte short", peak, &endings);
    let slowest = endings.iter().map(|e| e.after).max().unwrap_or_default();
    assert!(slowest < CUT_WITHIN, "{slowest:?}");
    assert!(
        endings.iter().filter(|e| e.status == Some(408)).count() >= 8,
        "several bodies are held at once, then cut"
    );
    assert!(
        endings
            .iter()
            .all(|e| e.status.is_none_or(|s| [408, 503].contains(&s)))
    );
    eprintln!(
        "{what}: VmRSS {start} kB at the start, {} kB after every attack",
        rss_kb(proc)
    );
}

/// Waits until something answers HTTP on `addr`.
async fn wait_listening(addr: &str) -> Result<()> {
    wait_until(Duration::from_secs(30), "listening", || async {
        Ok(TcpStream::connect(addr).is_ok())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_uploads_do_not_pin_a_wrappers_memory() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir()?;
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "demo-shop-secret-0123456789")?;
    let addr = format!("127.0.0.1:{}", free_port());
    let args: Vec<String> = [
        "wrapper",
        "--app",
        "demo.shop",
        "--secret-file",
        secret.to_str().unwrap(),
        // No engine answers: the run API is what is attacked.
        "--engine",
        "http://127.0.0.1:9",
        "--listen",
        &addr,
        "--enable-shell",
        "--spool",
        dir.path().join("spool").to_str().unwrap(),
        "--body-read-timeout",
        &READ_TIMEOUT.as_secs().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let wrapper = spawn(dir.path(), "wrapper", &args);
    wait_listening(&addr).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::task::spawn_blocking(move || {
        attack_all("wrapper", &wrapper, &addr, paths::RUNS_BATCH, "demo.shop")
    })
    .await?;
    Ok(())
}

/// The callback address (`host:port`) of the engine node `hostile-1`, once it is up.
async fn engine_address(store: &dyn Store) -> Result<Option<String>> {
    let mut tx = store.begin_read().await?;
    Ok(tx
        .list_nodes()
        .await?
        .into_iter()
        .find(|n| n.id == "hostile-1" && n.state == NodeState::Up)
        .map(|n| n.address.trim_start_matches("http://").to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_uploads_do_not_pin_an_engines_memory() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let db = mthpt_engine::testing::postgres().await;
    let store = db.shared();
    let t = tenancy(&*store, "acme", "billing").await?;
    let dir = tempfile::tempdir()?;
    let args: Vec<String> = [
        "engine",
        "--database-url",
        &db.url(),
        "--node-id",
        "hostile-1",
        "--listen",
        "127.0.0.1:0",
        "--body-read-timeout-ms",
        &READ_TIMEOUT.as_millis().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let engine = spawn(dir.path(), "engine", &args);
    wait_until(Duration::from_secs(30), "engine up", || {
        let store = store.clone();
        async move { Ok(engine_address(&*store).await?.is_some()) }
    })
    .await?;
    let addr = engine_address(&*store).await?.unwrap_or_default();
    wait_listening(&addr).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let key = t.key.clone();
    tokio::task::spawn_blocking(move || attack_all("engine", &engine, &addr, paths::RESULTS, &key))
        .await?;
    Ok(())
}

//! Every request to a wrapper must be signed: forged, unsigned, stale and replayed requests get
//! 401 and never start a handler.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{APP, EngineStandIn, SECRET, TestWrapper, engine_client, run_request};
use mthpt_wrapper::protocol::{
    ErrorBody, ErrorCode, HealthResponse, SignatureHeaders, Signer, paths, unix_now,
};
use serde_json::json;

struct Target {
    _engine: EngineStandIn,
    _spool: tempfile::TempDir,
    wrapper: TestWrapper,
    calls: Arc<AtomicU32>,
    http: reqwest::Client,
}

fn target() -> anyhow::Result<Target> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let wrapper = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.blocking_handler("count", move |_| {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(json!(null))
        })
    })?;
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .build()?;
    Ok(Target {
        _engine: engine,
        _spool: spool,
        wrapper,
        calls,
        http,
    })
}

impl Target {
    async fn send(
        &self,
        path: &str,
        body: &[u8],
        headers: Option<&SignatureHeaders>,
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        let mut req = self
            .http
            .post(format!("{}{}", self.wrapper.url, path))
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(headers) = headers {
            for (name, value) in headers.pairs() {
                req = req.header(name, value);
            }
        }
        let resp = req.send().await?;
        Ok((resp.status().as_u16(), resp.bytes().await?.to_vec()))
    }

    /// Asserts a 401 with the `unauthorized` code and a message containing `why`.
    fn assert_refused(&self, answer: (u16, Vec<u8>), why: &str) -> anyhow::Result<()> {
        assert_eq!(answer.0, 401);
        let body: ErrorBody = serde_json::from_slice(&answer.1)?;
        assert_eq!(body.error, ErrorCode::Unauthorized);
        assert!(
            body.message.contains(why),
            "{:?} does not mention {why:?}",
            body.message
        );
        Ok(())
    }

    async fn assert_handler_never_ran(&self) {
        // Give a wrongly started run every chance to show up before checking.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(self.calls.load(Ordering::SeqCst), 0);
        assert_eq!(self.wrapper.wrapper.running(), 0);
        assert!(self.wrapper.wrapper.run_status(1).is_none());
    }
}

fn body() -> anyhow::Result<Vec<u8>> {
    Ok(serde_json::to_vec(&run_request(1, "count"))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_request_is_refused() -> anyhow::Result<()> {
    let t = target()?;
    let answer = t.send(paths::RUNS, &body()?, None).await?;
    t.assert_refused(answer, "X-Mthpt-App")?;
    t.assert_handler_never_ran().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_signature_is_refused() -> anyhow::Result<()> {
    let t = target()?;
    let body = body()?;
    // Signed with the wrong secret.
    let wrong = Signer::new(APP, b"guessed-secret".to_vec()).sign("POST", paths::RUNS, &body);
    let answer = t.send(paths::RUNS, &body, Some(&wrong)).await?;
    t.assert_refused(answer, "does not match")?;
    // Right secret, but the body was changed after signing.
    let signed = Signer::new(APP, SECRET).sign("POST", paths::RUNS, &body);
    let tampered = serde_json::to_vec(&run_request(1, "count").params.clone())?;
    let answer = t.send(paths::RUNS, &tampered, Some(&signed)).await?;
    t.assert_refused(answer, "does not match")?;
    // Right secret, signed for another path.
    let other_path = Signer::new(APP, SECRET).sign("POST", paths::RUNS_BATCH, &body);
    let answer = t.send(paths::RUNS, &body, Some(&other_path)).await?;
    t.assert_refused(answer, "does not match")?;
    // Another app's name.
    let other_app = Signer::new("payroll", SECRET).sign("POST", paths::RUNS, &body);
    let answer = t.send(paths::RUNS, &body, Some(&other_app)).await?;
    t.assert_refused(answer, "unknown app")?;
    t.assert_handler_never_ran().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_timestamp_is_refused() -> anyhow::Result<()> {
    let t = target()?;
    let body = body()?;
    let signer = Signer::new(APP, SECRET);
    let old = signer.sign_with(
        "POST",
        paths::RUNS,
        &body,
        unix_now() - 301,
        "nonce-old-0001",
    );
    let answer = t.send(paths::RUNS, &body, Some(&old)).await?;
    t.assert_refused(answer, "away from this clock")?;
    let future = signer.sign_with(
        "POST",
        paths::RUNS,
        &body,
        unix_now() + 400,
        "nonce-new-0001",
    );
    let answer = t.send(paths::RUNS, &body, Some(&future)).await?;
    t.assert_refused(answer, "away from this clock")?;
    t.assert_handler_never_ran().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_signature_is_refused() -> anyhow::Result<()> {
    let t = target()?;
    // A captured health probe, played twice: the copy is refused.
    let probe = Signer::new(APP, SECRET).sign("GET", paths::HEALTH, b"");
    let mut first = t.http.get(format!("{}{}", t.wrapper.url, paths::HEALTH));
    for (name, value) in probe.pairs() {
        first = first.header(name, value);
    }
    let Some(copy) = first.try_clone() else {
        anyhow::bail!("request cannot be cloned");
    };
    assert_eq!(first.send().await?.status().as_u16(), 200);
    let again = copy.send().await?;
    let status = again.status().as_u16();
    t.assert_refused((status, again.bytes().await?.to_vec()), "replayed")?;

    // The nonce of the probe cannot be reused for a run start either.
    let body = body()?;
    let reused = Signer::new(APP, SECRET).sign_with(
        "POST",
        paths::RUNS,
        &body,
        probe.timestamp,
        &probe.nonce,
    );
    let answer = t.send(paths::RUNS, &body, Some(&reused)).await?;
    t.assert_refused(answer, "replayed")?;
    t.assert_handler_never_ran().await;

    // A captured run start, played again after the genuine one: 401, not a second start.
    let start = Signer::new(APP, SECRET).sign("POST", paths::RUNS, &body);
    assert_eq!(t.send(paths::RUNS, &body, Some(&start)).await?.0, 202);
    let answer = t.send(paths::RUNS, &body, Some(&start)).await?;
    t.assert_refused(answer, "replayed")?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(t.calls.load(Ordering::SeqCst), 1);

    // A legitimate retry signs again with a fresh nonce and is answered normally (409 here).
    let client = engine_client()?;
    let retry = client
        .post_json_raw(&t.wrapper.url, paths::RUNS, &run_request(1, "count"))
        .await?;
    assert_eq!(retry.status.as_u16(), 409);
    let health: HealthResponse = client.get_json(&t.wrapper.url, paths::HEALTH).await?;
    assert_eq!(health.handlers, vec!["count"]);
    Ok(())
}

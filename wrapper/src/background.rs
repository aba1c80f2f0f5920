//! Background loops: result delivery, progress/log batching, registration and heartbeat.
//!
//! Every call to an engine goes to the engine URL under the shared cursor; a failure moves the
//! cursor to the next URL, so all loops fail over together.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::client::ClientError;
use crate::context::{CancelReason, ProgressEvent};
use crate::protocol::{
    DeregisterRequest, DeregisterResponse, HeartbeatRequest, HeartbeatResponse, ItemStatus,
    MAX_BATCH_ITEMS, ProgressBatch, ProgressBatchResponse, RegisterRequest, RegisterResponse,
    ResultBatch, ResultBatchResponse, paths,
};
use crate::runtime::{DrainReport, Inner, join_or_abort, lock};

/// The engine to call now: the position of the shared cursor and its URL.
pub(crate) fn engine_url(inner: &Inner) -> (usize, String) {
    let urls = &inner.settings.engine_urls;
    let at = inner.engine_cursor.load(Ordering::Relaxed);
    let url = urls
        .get(at % urls.len().max(1))
        .cloned()
        .unwrap_or_default();
    (at, url)
}

/// Moves the shared cursor past the engine at `failed`, unless another loop already moved it
/// (two loops failing on the same engine must not skip the next one, nor bring the cursor back
/// to the failed engine).
pub(crate) fn next_engine(inner: &Inner, failed: usize) {
    let _ = inner.engine_cursor.compare_exchange(
        failed,
        failed.wrapping_add(1),
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
}

/// Exponential backoff with jitter: `initial * 2^round`, capped at `max`, then a random value
/// between half of that and all of it, so that many wrappers do not retry in step.
pub fn backoff(initial: Duration, max: Duration, round: u32) -> Duration {
    let factor = 2u32.saturating_pow(round.min(20));
    let full = initial.saturating_mul(factor).min(max);
    let half = full / 2;
    let jitter_ms = u64::try_from(half.as_millis()).unwrap_or(u64::MAX);
    half + Duration::from_millis(if jitter_ms == 0 {
        0
    } else {
        rand::random_range(0..=jitter_ms)
    })
}

pub(crate) async fn sleep_or_stop(dur: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(dur) => false,
        _ = stop.wait_for(|s| *s) => true,
    }
}

/// Delivers outbox results until stopped. Results leave the outbox only when an engine settles
/// them (accepted, duplicate or rejected).
pub(crate) async fn deliver_results(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let urls = inner.settings.engine_urls.len().max(1);
    let mut failures: u32 = 0;
    loop {
        let notified = inner.outbox_changed.notified();
        linger_for_more(&inner, &mut stop).await;
        let batch: Vec<_> = inner
            .outbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .take(MAX_BATCH_ITEMS)
            .cloned()
            .map(|mut r| {
                if r.instance_id.as_deref() == Some(inner.settings.instance_id.as_str()) {
                    r.instance_id = None;
                }
                r
            })
            .collect();
        if batch.is_empty() {
            tokio::select! {
                _ = notified => continue,
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        let count = batch.len();
        let (at, base) = engine_url(&inner);
        let body = ResultBatch {
            instance_id: inner.settings.instance_id.clone(),
            results: batch,
        };
        let sent: Result<ResultBatchResponse, ClientError> = inner
            .client
            .post_json_within(&base, paths::RESULTS, &body, RESULT_TIMEOUT)
            .await;
        let settled_any = match sent {
            Ok(resp) => {
                inner.engine_contact();
                let mut settled = Vec::new();
                for item in &resp.items {
                    if item.status == ItemStatus::Rejected {
                        tracing::warn!(
                            run_id = item.run_id,
                            message = item.message.as_deref().unwrap_or(""),
                            "engine rejected a result; dropping it"
                        );
                    }
                    if item.status.is_settled() {
                        settled.push(item.run_id);
                    }
                }
                tracing::debug!(engine = %base, sent = count, settled = settled.len(), "results delivered");
                let any = !settled.is_empty();
                inner.settle(&settled);
                any
            }
            Err(e) => {
                tracing::warn!(engine = %base, error = %e, pending = count, "result delivery failed");
                next_engine(&inner, at);
                false
            }
        };
        if settled_any {
            failures = 0;
            continue;
        }
        failures = failures.saturating_add(1);
        // Try every engine URL once before waiting; then back off, longer each full round.
        let per_round = u32::try_from(urls).unwrap_or(u32::MAX);
        if failures.is_multiple_of(per_round) {
            let round = failures / per_round - 1;
            let wait = backoff(
                inner.settings.retry_initial,
                inner.settings.retry_max,
                round,
            );
            if sleep_or_stop(wait, &mut stop).await {
                return;
            }
        }
    }
}

/// How long a result delivery may take before the next engine is tried: an engine writes a
/// batch in one transaction, well within this; a paused engine must not hold results back until
/// their runs' deadlines pass.
const RESULT_TIMEOUT: Duration = Duration::from_secs(3);

/// When results are waiting but fewer than a full batch, gives runs finishing at about the same
/// time the linger to join them, so that a steady stream of results travels in few requests.
/// A stop cuts the linger short; what is waiting is delivered all the same.
async fn linger_for_more(inner: &Inner, stop: &mut watch::Receiver<bool>) {
    let waiting = inner
        .outbox
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .len();
    if waiting > 0
        && waiting < MAX_BATCH_ITEMS
        && !inner.settings.result_linger.is_zero()
        && !*stop.borrow()
    {
        sleep_or_stop(inner.settings.result_linger, stop).await;
    }
}

/// Batches progress updates and log lines and sends them, best effort, until stopped.
pub(crate) async fn forward_progress(inner: Arc<Inner>, mut events: mpsc::Receiver<ProgressEvent>) {
    let mut stop = inner.stop.subscribe();
    loop {
        let first = tokio::select! {
            ev = events.recv() => match ev {
                Some(ev) => ev,
                None => return,
            },
            _ = stop.wait_for(|s| *s) => return,
        };
        let mut batch = ProgressBatch {
            instance_id: inner.settings.instance_id.clone(),
            updates: Vec::new(),
            logs: Vec::new(),
        };
        let mut push = |ev| match ev {
            ProgressEvent::Update(u) => batch.updates.push(u),
            ProgressEvent::Log(l) => batch.logs.push(l),
        };
        push(first);
        let until = Instant::now() + inner.settings.progress_flush_interval;
        let mut size = 1;
        while size < MAX_BATCH_ITEMS {
            tokio::select! {
                ev = events.recv() => match ev {
                    Some(ev) => { push(ev); size += 1; }
                    None => break,
                },
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        let (at, base) = engine_url(&inner);
        let sent: Result<ProgressBatchResponse, ClientError> =
            inner.client.post_json(&base, paths::PROGRESS, &batch).await;
        if let Err(e) = sent {
            tracing::debug!(engine = %base, error = %e, items = size, "progress batch dropped");
            next_engine(&inner, at);
        }
    }
}

async fn register_once(inner: &Inner) -> Result<RegisterResponse, ClientError> {
    let body = RegisterRequest {
        instance_id: inner.settings.instance_id.clone(),
        base_url: inner.settings.advertise_url.clone(),
        capacity: inner.settings.capacity,
        running: inner.running(),
        handlers: inner.handler_infos(),
        labels: inner.settings.labels.clone(),
        version: crate::VERSION.to_owned(),
        started_at: inner.started_at,
    };
    let (at, base) = engine_url(inner);
    let resp = inner
        .client
        .post_json_within(&base, paths::REGISTER, &body, REGISTER_TIMEOUT)
        .await
        .inspect_err(|_| next_engine(inner, at))?;
    tracing::info!(engine = %base, instance = %inner.settings.instance_id, "registered");
    Ok(resp)
}

/// How long a registration may take before the next engine is tried.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a heartbeat may take before the next engine is tried: well below the interval, so
/// a paused or partitioned engine costs one short wait, never the instance's membership.
pub(crate) fn heartbeat_timeout(interval: Duration) -> Duration {
    (interval / 2).clamp(Duration::from_millis(250), Duration::from_secs(2))
}

/// Sends one heartbeat to the current engine, giving up after `timeout`.
pub(crate) async fn heartbeat_once(
    inner: &Inner,
    timeout: Duration,
) -> Result<HeartbeatResponse, ClientError> {
    let body = HeartbeatRequest {
        instance_id: inner.settings.instance_id.clone(),
        capacity: inner.settings.capacity,
        running: inner.running(),
        draining: inner.draining.load(Ordering::SeqCst),
        running_runs: inner.unconfirmed_ids(),
        sent_at: Utc::now(),
    };
    let (at, base) = engine_url(inner);
    inner
        .client
        .post_json_within(&base, paths::HEARTBEAT, &body, timeout)
        .await
        .inspect_err(|_| next_engine(inner, at))
}

/// One heartbeat (or registration while not registered), trying every engine URL in turn at
/// once when one fails or is slow; `interval` takes the heartbeat interval an engine asks for.
async fn membership_round(inner: &Inner, interval: &mut Duration) -> Result<(), ClientError> {
    let mut failure = None;
    for _ in 0..inner.settings.engine_urls.len().max(1) {
        let outcome = if inner.registered.load(Ordering::SeqCst) {
            heartbeat_once(inner, heartbeat_timeout(*interval))
                .await
                .map(|resp| {
                    if !resp.known {
                        tracing::info!("engine does not know this instance; registering again");
                        inner.registered.store(false, Ordering::SeqCst);
                    }
                })
        } else {
            register_once(inner).await.map(|resp| {
                inner.registered.store(true, Ordering::SeqCst);
                inner.alarms.learn_tenant(resp.tenant_id);
                if let Some(ms) = resp.heartbeat_interval_ms {
                    *interval = Duration::from_millis(ms.clamp(100, 3_600_000));
                    inner.alarms.learn_interval(*interval);
                }
                if let Some(timeout) = resp.executor_timeout_ms {
                    inner
                        .fence_after_ms
                        .store(fence_after(timeout, *interval), Ordering::Relaxed);
                }
            })
        };
        match outcome {
            Ok(()) => {
                inner.engine_contact();
                return Ok(());
            }
            Err(e) => {
                match &e {
                    // The engine answered and refused: this instance's settings are wrong (a
                    // wrong secret or app key, a host the tenant does not allow), not the
                    // network; every engine will say the same.
                    ClientError::Status { status, .. } if matches!(status.as_u16(), 401 | 403) => {
                        tracing::error!(
                            error = %e,
                            app = %inner.settings.app,
                            "the engine refused this instance's registration/heartbeat; check the app key (<tenant>.<app>) and its secret"
                        );
                    }
                    _ => {
                        tracing::warn!(error = %e, "engine unreachable for registration/heartbeat; trying the next");
                    }
                }
                failure = Some(e);
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Registers, then heartbeats, re-registering when an engine no longer knows the instance.
pub(crate) async fn keep_membership(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let mut interval = inner.settings.heartbeat_interval;
    let mut failures: u32 = 0;
    loop {
        let wait = match membership_round(&inner, &mut interval).await {
            Ok(()) => {
                failures = 0;
                if inner.registered.load(Ordering::SeqCst) {
                    interval
                } else {
                    Duration::ZERO
                }
            }
            Err(_) => {
                failures = failures.saturating_add(1);
                backoff(inner.settings.retry_initial, interval, failures - 1)
            }
        };
        if sleep_or_stop(wait, &mut stop).await {
            return;
        }
    }
}

/// How long without engine contact the instance waits before stopping its runs, for engines
/// that declare it lost after `executor_timeout_ms`: a margin of a heartbeat interval (at
/// least a quarter of the timeout) before that, so the runs stop before any recovery starts.
pub(crate) fn fence_after(executor_timeout_ms: u64, interval: Duration) -> i64 {
    let timeout = i64::try_from(executor_timeout_ms).unwrap_or(i64::MAX);
    let interval = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
    let margin = interval.max(timeout / 4);
    (timeout - margin).max(1)
}

/// Checks now and then whether the instance is cut off from every engine, and stops its runs
/// if so (see [`Inner::fence_if_cut_off`]).
pub(crate) async fn fence_when_cut_off(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    loop {
        if sleep_or_stop(Duration::from_millis(100), &mut stop).await {
            return;
        }
        inner.fence_if_cut_off();
    }
}

/// Tells an engine the instance is leaving, trying each engine URL once.
pub(crate) async fn deregister(inner: &Inner) -> bool {
    let body = DeregisterRequest {
        instance_id: inner.settings.instance_id.clone(),
        reason: "shutdown".to_owned(),
    };
    for _ in 0..inner.settings.engine_urls.len() {
        let (at, base) = engine_url(inner);
        let sent: Result<DeregisterResponse, ClientError> = inner
            .client
            .post_json(&base, paths::DEREGISTER, &body)
            .await;
        match sent {
            Ok(_) => {
                inner.registered.store(false, Ordering::SeqCst);
                tracing::info!(engine = %base, "deregistered");
                return true;
            }
            Err(e) => {
                tracing::warn!(engine = %base, error = %e, "deregistration failed");
                next_engine(inner, at);
            }
        }
    }
    false
}

/// Drains the instance (see [`crate::Wrapper::shutdown`]): refuses new runs, tells the engines
/// at once, lets running runs finish during `grace` and cancels the rest, delivers results (up
/// to the flush timeout), deregisters and stops the background work.
pub(crate) async fn drain(inner: &Arc<Inner>, grace: Duration) -> DrainReport {
    inner.draining.store(true, Ordering::SeqCst);
    let mut report = DrainReport {
        running_at_start: inner.running(),
        ..DrainReport::default()
    };
    tracing::info!(
        running = report.running_at_start,
        grace_ms = grace.as_millis() as u64,
        "draining: refusing new runs"
    );
    // Tell the engines at once, so they stop routing here; best effort.
    let announcer = inner.clone();
    inner.runtime.spawn(async move {
        let timeout = heartbeat_timeout(announcer.settings.heartbeat_interval);
        if let Err(e) = heartbeat_once(&announcer, timeout).await {
            tracing::debug!(error = %e, "drain heartbeat failed");
        }
    });
    inner.wait_idle(Instant::now() + grace).await;
    if inner.running() > 0 {
        report.cancelled = inner.cancel_all(CancelReason::Shutdown);
        tracing::warn!(
            cancelled = report.cancelled,
            "grace period over, cancelling running runs"
        );
        inner
            .wait_idle(Instant::now() + inner.settings.cancel_wait)
            .await;
    }
    report.abandoned = inner.running();
    inner
        .wait_delivered(Instant::now() + inner.settings.flush_timeout)
        .await;
    report.undelivered = u32::try_from(inner.pending_results()).unwrap_or(u32::MAX);
    report.deregistered = deregister(inner).await;
    inner.stop.send_replace(true);
    let tasks: Vec<_> = lock(&inner.tasks).drain(..).collect();
    for task in tasks {
        join_or_abort(task, Duration::from_secs(5)).await;
    }
    if report.abandoned == 0 {
        inner.spool.release();
    }
    tracing::info!(?report, "drain finished");
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_stays_within_bounds() {
        let initial = Duration::from_millis(100);
        let max = Duration::from_secs(5);
        for round in 0..30 {
            let full = initial
                .saturating_mul(2u32.saturating_pow(round.min(20)))
                .min(max);
            let d = backoff(initial, max, round);
            assert!(
                d >= full / 2 && d <= full,
                "round {round}: {d:?} not in [{:?}, {full:?}]",
                full / 2
            );
        }
    }
}

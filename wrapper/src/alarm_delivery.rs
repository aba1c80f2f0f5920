//! The tasks that deliver the wrapper's alarms ([`crate::alarms`] holds the queues): to engines
//! ([`deliver_alarms`]), straight to the alarm exchange when an AMQP URL is configured (`direct`,
//! feature `amqp-alarms`), and the engine watch that raises and resolves `engine_unreachable`
//! ([`watch_engines`]).

#[cfg(feature = "amqp-alarms")]
pub(crate) mod direct;

use std::sync::Arc;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::Utc;

use crate::alarms::{clip_message, new_id};
use crate::background::{backoff, engine_url, next_engine, sleep_or_stop};
use crate::client::ClientError;
use crate::protocol::{
    AlarmBatch, AlarmBatchResponse, AlarmSeverity, AlarmState, ENGINE_UNREACHABLE,
    MAX_ALARMS_PER_BATCH, WrapperAlarm, paths,
};
use crate::runtime::Inner;

/// Sends queued alarms to engines until stopped; an alarm leaves the queue once an engine
/// settles it (accepted, duplicate or rejected).
pub(crate) async fn deliver_alarms(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let mut failures: u32 = 0;
    loop {
        let changed = inner.alarms.to_engine.changed();
        let batch = inner.alarms.to_engine.peek(MAX_ALARMS_PER_BATCH);
        if batch.is_empty() {
            tokio::select! {
                () = changed => continue,
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        let (at, base) = engine_url(&inner);
        let body = AlarmBatch {
            instance_id: inner.settings.instance_id.clone(),
            alarms: batch,
        };
        let sent: Result<AlarmBatchResponse, ClientError> = inner
            .client
            .post_json_within(&base, paths::ALARMS, &body, ALARM_TIMEOUT)
            .await;
        match sent {
            Ok(resp) => {
                inner.engine_contact();
                failures = 0;
                // One ack per alarm, in request order.
                let settled: Vec<&WrapperAlarm> = body
                    .alarms
                    .iter()
                    .zip(&resp.items)
                    .inspect(|(_, item)| {
                        if item.status == crate::protocol::ItemStatus::Rejected {
                            tracing::warn!(id = %item.id, message = item.message.as_deref().unwrap_or(""), "engine rejected an alarm; dropping it");
                        }
                    })
                    .filter(|(alarm, item)| item.status.is_settled() && item.id == alarm.id)
                    .map(|(alarm, _)| alarm)
                    .collect();
                inner.alarms.to_engine.remove(&settled);
                if settled.is_empty() {
                    // Every item asked for a retry: wait before sending them again.
                    if sleep_or_stop(inner.settings.retry_initial, &mut stop).await {
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::debug!(engine = %base, error = %e, "alarm delivery failed");
                next_engine(&inner, at);
                failures = failures.saturating_add(1);
                let wait = backoff(
                    inner.settings.retry_initial,
                    inner.settings.retry_max,
                    failures - 1,
                );
                if sleep_or_stop(wait, &mut stop).await {
                    return;
                }
            }
        }
    }
}

/// How long one alarm delivery may take before the next engine is tried.
const ALARM_TIMEOUT: Duration = Duration::from_secs(3);

/// How often the engine watch looks at the time since the last engine contact.
const WATCH_EVERY: Duration = Duration::from_millis(200);

/// Raises `engine_unreachable` when no engine has been heard from (no answered heartbeat,
/// registration, result or alarm delivery, no run request) for `after`, and resolves it when
/// one is heard from again.
pub(crate) async fn watch_engines(inner: Arc<Inner>, after: Duration) {
    let mut stop = inner.stop.subscribe();
    let after_ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
    loop {
        if sleep_or_stop(WATCH_EVERY, &mut stop).await {
            return;
        }
        let now = Utc::now();
        let after_ms = after_ms.max(2 * inner.alarms.heartbeat_ms.load(Ordering::Relaxed));
        let silent_ms = now.timestamp_millis() - inner.last_contact_ms.load(Ordering::Relaxed);
        let mut open = inner
            .alarms
            .unreachable
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match (open.as_ref(), silent_ms > after_ms) {
            (None, true) => {
                let id = new_id();
                let message = format!(
                    "instance {} of app {} has had no answer from any engine for {} s (engines: {})",
                    inner.settings.instance_id,
                    inner.settings.app,
                    silent_ms / 1000,
                    inner.settings.engine_urls.join(", ")
                );
                tracing::error!(%message, "raising an engine_unreachable alarm");
                *open = Some(id.clone());
                drop(open);
                inner.alarms.raise(WrapperAlarm {
                    id,
                    severity: AlarmSeverity::Critical,
                    kind: ENGINE_UNREACHABLE.to_owned(),
                    message: clip_message(message),
                    state: AlarmState::Raised,
                    run_id: None,
                    task_id: None,
                    at: now,
                });
            }
            (Some(_), false) => {
                let Some(id) = open.take() else { continue };
                drop(open);
                tracing::info!("an engine answers again; resolving the engine_unreachable alarm");
                inner.alarms.raise(WrapperAlarm {
                    id,
                    severity: AlarmSeverity::Critical,
                    kind: ENGINE_UNREACHABLE.to_owned(),
                    message: format!(
                        "instance {} of app {} reaches an engine again",
                        inner.settings.instance_id, inner.settings.app
                    ),
                    state: AlarmState::Resolved,
                    run_id: None,
                    task_id: None,
                    at: now,
                });
            }
            _ => {}
        }
    }
}

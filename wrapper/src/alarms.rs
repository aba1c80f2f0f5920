//! Alarms the wrapper raises: a handler's [`RunContext::alarm`](crate::RunContext::alarm), and
//! its own `engine_unreachable` when no engine has answered for a while (resolved when one
//! answers again).
//!
//! This module holds the queues and what the wrapper knows of its tenant; the tasks that empty
//! the queues and the engine watch are in [`crate::alarm_delivery`]. Every alarm goes two ways
//! under one id:
//! - to an engine, with `POST /mthpt/v1/alarms`; the engine stores it as an alarm of the app's
//!   tenant (the database stays the source of truth) and settles it;
//! - when an AMQP URL is configured (feature `amqp-alarms`), straight to the alarm exchange,
//!   signed with the app's secret, so operators hear of it even when no engine can relay it.
//!
//! Both queues are bounded ([`QUEUE_LIMIT`]): when full, the oldest alarm is dropped (logged
//! and counted) rather than the process growing without end.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::protocol::WrapperAlarm;

/// Most alarms waiting in each queue (to the engine, to the broker).
pub const QUEUE_LIMIT: usize = 1000;

/// A bounded queue of alarms with a wake-up.
#[derive(Debug, Default)]
pub(crate) struct AlarmQueue {
    items: Mutex<VecDeque<WrapperAlarm>>,
    changed: Notify,
}

impl AlarmQueue {
    fn push(&self, alarm: WrapperAlarm, path: &'static str) {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        if items.len() >= QUEUE_LIMIT
            && let Some(old) = items.pop_front()
        {
            tracing::warn!(id = %old.id, kind = %old.kind, path, "alarm queue full; dropped the oldest alarm");
            crate::metrics::alarm_dropped(path);
        }
        items.push_back(alarm);
        drop(items);
        self.changed.notify_one();
    }

    /// Up to `n` alarms from the front, left in the queue.
    pub(crate) fn peek(&self, n: usize) -> Vec<WrapperAlarm> {
        let items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        items.iter().take(n).cloned().collect()
    }

    /// Removes these alarms, once each, matched by id and state: the resolution of an alarm
    /// shares the raise's id, and one queued while the raise was in flight must stay queued
    /// when the raise is settled.
    pub(crate) fn remove(&self, sent: &[&WrapperAlarm]) {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        for alarm in sent {
            if let Some(at) = items
                .iter()
                .position(|a| a.id == alarm.id && a.state == alarm.state)
            {
                items.remove(at);
            }
        }
    }

    // Read by direct alarms (feature `amqp-alarms`).
    #[cfg_attr(not(feature = "amqp-alarms"), allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.items
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }
}

/// The wrapper's alarms: the queues and what it knows of its tenant.
#[derive(Debug)]
pub(crate) struct Alarms {
    pub(crate) to_engine: AlarmQueue,
    /// `Some` when an AMQP URL is configured.
    pub(crate) direct: Option<AlarmQueue>,
    /// The app's tenant id (0: not known yet): configured, or told by an engine at registration.
    tenant_id: AtomicI64,
    /// The id of the open `engine_unreachable` alarm.
    pub(crate) unreachable: Mutex<Option<String>>,
    /// The heartbeat interval an engine asked for (ms; 0: none yet): silence shorter than two
    /// of them is never "unreachable".
    pub(crate) heartbeat_ms: AtomicI64,
}

impl Alarms {
    pub(crate) fn new(direct: bool, tenant_id: Option<i64>) -> Self {
        Self {
            to_engine: AlarmQueue::default(),
            direct: direct.then(AlarmQueue::default),
            tenant_id: AtomicI64::new(tenant_id.unwrap_or(0)),
            unreachable: Mutex::new(None),
            heartbeat_ms: AtomicI64::new(0),
        }
    }

    /// Queues an (already validated) alarm on both paths.
    pub(crate) fn raise(&self, alarm: WrapperAlarm) {
        crate::metrics::alarm_raised(alarm.severity, alarm.state);
        if let Some(direct) = &self.direct {
            direct.push(alarm.clone(), "amqp");
        }
        self.to_engine.push(alarm, "engine");
    }

    /// The tenant id, once known.
    // Read by direct alarms (feature `amqp-alarms`).
    #[cfg_attr(not(feature = "amqp-alarms"), allow(dead_code))]
    pub(crate) fn tenant_id(&self) -> Option<i64> {
        Some(self.tenant_id.load(Ordering::Relaxed)).filter(|t| *t > 0)
    }

    /// Learns the tenant id from an engine (a configured one is kept).
    pub(crate) fn learn_tenant(&self, tenant_id: Option<i64>) {
        if let Some(t) = tenant_id.filter(|t| *t > 0) {
            let _ = self
                .tenant_id
                .compare_exchange(0, t, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

impl Alarms {
    /// Notes the heartbeat interval an engine asked for.
    pub(crate) fn learn_interval(&self, interval: Duration) {
        self.heartbeat_ms.store(
            i64::try_from(interval.as_millis()).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }
}

/// A fresh alarm id: 32 random hex digits.
pub(crate) fn new_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Cuts a message to the protocol's limit (on a character boundary).
pub(crate) fn clip_message(message: String) -> String {
    match message
        .char_indices()
        .nth(crate::protocol::MAX_ALARM_MESSAGE_CHARS)
    {
        Some((cut, _)) => message[..cut].to_owned(),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::protocol::{AlarmSeverity, AlarmState};

    fn alarm(id: &str) -> WrapperAlarm {
        WrapperAlarm {
            id: id.to_owned(),
            severity: AlarmSeverity::Info,
            kind: "k".to_owned(),
            message: "m".to_owned(),
            state: AlarmState::Raised,
            run_id: None,
            task_id: None,
            at: Utc::now(),
        }
    }

    #[test]
    fn a_full_queue_drops_its_oldest_alarm() {
        let q = AlarmQueue::default();
        for i in 0..QUEUE_LIMIT + 2 {
            q.push(alarm(&format!("alarm-{i:06}")), "engine");
        }
        assert_eq!(q.len(), QUEUE_LIMIT);
        assert_eq!(q.peek(1)[0].id, "alarm-000002");
        let oldest = q.peek(1);
        q.remove(&[&oldest[0]]);
        assert_eq!(q.peek(1)[0].id, "alarm-000003");
    }

    #[test]
    fn settling_a_raise_keeps_its_resolution_queued_behind_it() {
        let q = AlarmQueue::default();
        let raised = alarm("a");
        q.push(raised.clone(), "engine");
        // The raise is in flight when the resolution, under the same id, is queued.
        let in_flight = q.peek(10);
        q.push(
            WrapperAlarm {
                state: AlarmState::Resolved,
                ..raised
            },
            "engine",
        );
        q.remove(&in_flight.iter().collect::<Vec<_>>());
        let left = q.peek(10);
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(
            (left[0].id.as_str(), left[0].state),
            ("a", AlarmState::Resolved)
        );
    }

    #[test]
    fn the_tenant_learnt_from_an_engine_does_not_replace_a_configured_one() {
        let a = Alarms::new(true, Some(7));
        a.learn_tenant(Some(9));
        assert_eq!(a.tenant_id(), Some(7));
        let b = Alarms::new(false, None);
        assert_eq!(b.tenant_id(), None);
        b.learn_tenant(Some(9));
        assert_eq!(b.tenant_id(), Some(9));
        assert!(b.direct.is_none());
    }

    #[test]
    fn long_messages_are_clipped_on_a_character_boundary() {
        let m = clip_message("é".repeat(1500));
        assert_eq!(m.chars().count(), crate::protocol::MAX_ALARM_MESSAGE_CHARS);
    }
}

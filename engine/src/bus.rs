//! The message bus alarm (and run) events travel on: a [`Bus`] publishes messages with a
//! confirm and gives subscribers a stream of [`Delivery`]s for their routing-key patterns.
//!
//! Two implementations:
//! - [`AmqpBus`] (module [`amqp`]): RabbitMQ through lapin, one connection with automatic
//!   recovery, publisher confirms, a durable topic exchange ([`EXCHANGE`](crate::alarm::EXCHANGE)),
//!   persistent messages, and client-named exclusive queues for subscribers (server-named ones
//!   do not survive a recovery);
//! - [`InProcessBus`]: a tokio broadcast channel, for `mthpt standalone` and nodes without an
//!   AMQP URL (publishing is "confirmed" once the message is handed to the channel).
//!
//! Delivery is at least once: a subscriber may see a message twice (receivers de-duplicate by
//! [`BusMessage::message_id`]), and after a reconnect (or when it fell behind) it gets
//! [`Delivery::Resync`]: messages may have been missed, re-read the database.

pub mod amqp;

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{broadcast, mpsc};

pub use self::amqp::{AmqpBus, AmqpConfig};

/// A message on the bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusMessage {
    /// Dot-separated words, e.g. `alarm.7.critical.run_failed`.
    pub routing_key: String,
    /// Unique per message; receivers de-duplicate by it.
    pub message_id: String,
    /// JSON.
    pub body: Vec<u8>,
}

/// What a subscriber receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    Message(BusMessage),
    /// Messages may have been missed (the connection was recovered, or the subscriber fell
    /// behind): views should re-read the database.
    Resync,
}

/// Why a bus operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BusError {
    /// The broker cannot be reached or the connection is recovering.
    #[error("message bus unavailable: {0}")]
    Unavailable(String),
    /// The broker refused the message (a negative confirm) or did not confirm it in time.
    #[error("message not confirmed: {0}")]
    NotConfirmed(String),
    /// A setting is wrong (URL, names).
    #[error("message bus configuration: {0}")]
    Config(String),
}

/// Publishes with confirms and subscribes by routing-key patterns.
#[async_trait]
pub trait Bus: Send + Sync + std::fmt::Debug {
    /// Publishes `messages` in order and waits for the broker's confirms; one result per
    /// message (a message is stored by the broker only when its result is `Ok`).
    async fn publish(&self, messages: &[BusMessage]) -> Vec<Result<(), BusError>>;

    /// Subscribes under the client-chosen `name` (unique per subscriber, e.g. per console node)
    /// to messages whose routing key matches one of `patterns` (AMQP topic patterns: `*` is one
    /// word, `#` any number of words). The subscription ends when the receiver is dropped.
    async fn subscribe(
        &self,
        name: &str,
        patterns: &[String],
    ) -> Result<mpsc::Receiver<Delivery>, BusError>;
}

/// How many messages a subscriber may have waiting before it is told to re-sync.
pub const SUBSCRIBER_BUFFER: usize = 4096;

/// The bus inside one process: a broadcast channel (see the module docs).
#[derive(Debug, Clone)]
pub struct InProcessBus {
    tx: broadcast::Sender<Arc<BusMessage>>,
}

impl Default for InProcessBus {
    fn default() -> Self {
        Self::new()
    }
}

impl InProcessBus {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(SUBSCRIBER_BUFFER);
        Self { tx }
    }
}

#[async_trait]
impl Bus for InProcessBus {
    async fn publish(&self, messages: &[BusMessage]) -> Vec<Result<(), BusError>> {
        messages
            .iter()
            .map(|m| {
                // No subscriber is not an error: like an exchange without bound queues.
                let _ = self.tx.send(Arc::new(m.clone()));
                Ok(())
            })
            .collect()
    }

    async fn subscribe(
        &self,
        _name: &str,
        patterns: &[String],
    ) -> Result<mpsc::Receiver<Delivery>, BusError> {
        let mut rx = self.tx.subscribe();
        let (out, out_rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let patterns = patterns.to_vec();
        tokio::spawn(async move {
            loop {
                let delivery = match rx.recv().await {
                    Ok(m) if patterns.iter().any(|p| topic_matches(p, &m.routing_key)) => {
                        Delivery::Message((*m).clone())
                    }
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(_)) => Delivery::Resync,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if out.send(delivery).await.is_err() {
                    return;
                }
            }
        });
        Ok(out_rx)
    }
}

/// Whether `key` matches the AMQP topic `pattern` (`*`: exactly one word, `#`: zero or more).
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    fn go(p: &[&str], k: &[&str]) -> bool {
        match (p.first(), k.first()) {
            (None, None) => true,
            (Some(&"#"), _) => go(&p[1..], k) || (!k.is_empty() && go(p, &k[1..])),
            (Some(&"*"), Some(_)) => go(&p[1..], &k[1..]),
            (Some(w), Some(x)) if w == x => go(&p[1..], &k[1..]),
            _ => false,
        }
    }
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = key.split('.').collect();
    go(&p, &k)
}

/// Remembers the last message ids seen, to drop repeats of at-least-once delivery.
#[derive(Debug)]
pub struct SeenIds {
    order: std::collections::VecDeque<String>,
    set: std::collections::HashSet<String>,
    capacity: usize,
}

impl SeenIds {
    /// Remembers up to `capacity` ids.
    pub fn new(capacity: usize) -> Self {
        Self {
            order: std::collections::VecDeque::with_capacity(capacity),
            set: std::collections::HashSet::with_capacity(capacity),
            capacity: capacity.max(1),
        }
    }

    /// True the first time `id` is seen (among the last `capacity`).
    pub fn first_time(&mut self, id: &str) -> bool {
        if self.set.contains(id) {
            return false;
        }
        if self.order.len() >= self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        self.order.push_back(id.to_owned());
        self.set.insert(id.to_owned());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_patterns_match_like_amqp() {
        assert!(topic_matches("alarm.#", "alarm.7.critical.run_failed"));
        assert!(topic_matches("alarm.#", "alarm"));
        assert!(topic_matches(
            "alarm.*.critical.*",
            "alarm.7.critical.run_failed"
        ));
        assert!(!topic_matches(
            "alarm.*.critical.*",
            "alarm.7.warning.run_failed"
        ));
        assert!(!topic_matches("alarm.*", "alarm.7.critical"));
        assert!(topic_matches("#.run_failed", "alarm.7.critical.run_failed"));
        assert!(!topic_matches("run.#", "alarm.7.critical.run_failed"));
    }

    #[test]
    fn repeated_ids_are_seen_once_within_the_window() {
        let mut seen = SeenIds::new(2);
        assert!(seen.first_time("a"));
        assert!(!seen.first_time("a"));
        assert!(seen.first_time("b"));
        assert!(seen.first_time("c"));
        assert!(seen.first_time("a"), "forgotten after two newer ids");
    }

    #[tokio::test]
    async fn in_process_subscribers_get_matching_messages_in_order() {
        let bus = InProcessBus::new();
        let mut alarms = bus.subscribe("a", &["alarm.#".to_owned()]).await.unwrap();
        let msg = |key: &str, id: &str| BusMessage {
            routing_key: key.to_owned(),
            message_id: id.to_owned(),
            body: b"{}".to_vec(),
        };
        let results = bus
            .publish(&[msg("run.1.2", "r1"), msg("alarm.1.info.misfire", "a1")])
            .await;
        assert!(results.iter().all(Result::is_ok));
        match alarms.recv().await {
            Some(Delivery::Message(m)) => assert_eq!(m.message_id, "a1"),
            other => panic!("expected the alarm, got {other:?}"),
        }
    }
}

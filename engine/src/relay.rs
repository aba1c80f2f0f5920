//! The alarm relay: publishes the outbox of alarm events (`alarm_events`) to the [`Bus`].
//!
//! Every engine node runs it. One [`AlarmRelay::run_once`] takes a batch of the oldest
//! unpublished events, locked (`FOR UPDATE SKIP LOCKED` on PostgreSQL, so nodes share the work
//! without publishing the same event twice in the normal case), publishes them, and marks
//! published, in the same transaction, only those the broker confirmed. An event whose
//! publication failed stays in the outbox and is taken again by the next pass (of any node):
//! delivery is at least once, and receivers de-duplicate by the message id (the event id).

use std::sync::Arc;
use std::time::Duration;

use crate::alarm::AlarmEvent;
use crate::bus::{Bus, BusMessage};
use crate::clock::Clock;
use crate::store::{Result, Store};

/// How long a batch may wait for the broker's confirms before the pass gives up (and the
/// events stay unpublished for the next pass). Below PostgreSQL's idle-in-transaction limit
/// (1.5 s), which would otherwise end the session holding the batch while it waits.
pub const PUBLISH_TIMEOUT: Duration = Duration::from_millis(1_000);

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayReport {
    /// Events published and marked.
    pub published: usize,
    /// Events the broker did not confirm (left for a later pass).
    pub failed: usize,
}

/// Publishes alarm events; see the module docs.
#[derive(Debug, Clone)]
pub struct AlarmRelay {
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    clock: Arc<dyn Clock>,
    batch: i64,
}

impl AlarmRelay {
    /// A relay taking up to `batch` events per pass.
    pub fn new(
        store: Arc<dyn Store>,
        bus: Arc<dyn Bus>,
        clock: Arc<dyn Clock>,
        batch: i64,
    ) -> Self {
        Self {
            store,
            bus,
            clock,
            batch: batch.max(1),
        }
    }

    /// The most events one pass takes.
    pub fn batch(&self) -> i64 {
        self.batch
    }

    /// One pass: take, publish, mark what was confirmed.
    pub async fn run_once(&self) -> Result<RelayReport> {
        let mut tx = self.store.begin().await?;
        let events = tx.list_unpublished_alarm_events(self.batch).await?;
        if events.is_empty() {
            tx.commit().await?;
            return Ok(RelayReport::default());
        }
        let messages: Vec<BusMessage> = events.iter().map(message).collect();
        let results = match tokio::time::timeout(PUBLISH_TIMEOUT, self.bus.publish(&messages)).await
        {
            Ok(results) => results,
            Err(_) => {
                tracing::warn!(
                    events = events.len(),
                    "the message bus did not confirm in time; the alarm events stay in the outbox"
                );
                // Ended here, not when dropped: a dropped transaction keeps its row locks
                // until its connection is next used, hiding the events from other relays.
                tx.commit().await?;
                return Ok(RelayReport {
                    published: 0,
                    failed: events.len(),
                });
            }
        };
        let mut confirmed = Vec::with_capacity(events.len());
        let mut failed = 0;
        for (event, result) in events.iter().zip(results) {
            match result {
                Ok(()) => confirmed.push(event.id),
                Err(e) => {
                    failed += 1;
                    tracing::debug!(event = event.id.0, error = %e, "alarm event not published");
                }
            }
        }
        failed += events.len().saturating_sub(confirmed.len() + failed);
        if !confirmed.is_empty() {
            tx.mark_alarm_events_published(&confirmed, self.clock.now_ms())
                .await?;
        }
        tx.commit().await?;
        if failed > 0 {
            tracing::warn!(
                failed,
                published = confirmed.len(),
                "some alarm events were not confirmed by the message bus; they are retried"
            );
        }
        Ok(RelayReport {
            published: confirmed.len(),
            failed,
        })
    }
}

/// The bus message of an alarm event: routing key `alarm.<tenant>.<severity>.<kind>`, message
/// id the event id, body [`AlarmMessage`](crate::alarm::AlarmMessage) as JSON.
pub fn message(event: &AlarmEvent) -> BusMessage {
    BusMessage {
        routing_key: event.routing_key(),
        message_id: event.id.0.to_string(),
        body: serde_json::to_vec(&event.message()).unwrap_or_default(),
    }
}

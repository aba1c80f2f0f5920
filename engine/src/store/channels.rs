//! Notification channels and their deliveries (the work the engines' notifier shares with
//! `SKIP LOCKED`), and the aggregate read behind the database-backed metrics gauges.
//!
//! Every operation here is written once for both backends; neither has its own.

use async_trait::async_trait;
use sqlx::types::Json;

use super::tx::{Dialect, Locking, StoreTx, found, is_fk, on_conn, unique_or};
use super::{Result, StoreError, page_limit};
use crate::tenant::TenantId;

/// Notification channels, their deliveries and the metrics aggregates.
#[async_trait]
pub trait Channels: Send {
    /// Creates a tenant's notification channel; it is sent the alarms raised from `now` on.
    async fn create_channel(
        &mut self,
        tenant: TenantId,
        new: &crate::channel::NewChannel,
        now: i64,
    ) -> Result<crate::channel::Channel>;
    async fn list_channels(&mut self, tenant: TenantId) -> Result<Vec<crate::channel::Channel>>;
    async fn get_channel(
        &mut self,
        tenant: TenantId,
        id: crate::channel::ChannelId,
    ) -> Result<crate::channel::Channel>;
    /// Changes a channel; enabling a disabled one starts it from `now`.
    async fn update_channel(
        &mut self,
        tenant: TenantId,
        id: crate::channel::ChannelId,
        update: &crate::channel::ChannelUpdate,
        now: i64,
    ) -> Result<crate::channel::Channel>;
    /// Deletes a channel and its delivery log.
    async fn delete_channel(
        &mut self,
        tenant: TenantId,
        id: crate::channel::ChannelId,
    ) -> Result<()>;
    /// A channel's deliveries, newest first (keyset paging by id).
    async fn list_deliveries(
        &mut self,
        tenant: TenantId,
        channel: crate::channel::ChannelId,
        before: Option<crate::channel::DeliveryId>,
        limit: i64,
    ) -> Result<Vec<crate::channel::Delivery>>;
    /// Engine internal: a channel by id.
    async fn find_channel(
        &mut self,
        id: crate::channel::ChannelId,
    ) -> Result<Option<crate::channel::Channel>>;
    /// Engine internal: makes the delivery rows of alarms raised for enabled channels (their
    /// tenant, their minimum severity, not muted, raised since the channel was created), looking
    /// back `settle_ms` before where the last pass stopped, at most `limit` per channel.
    /// Channels another node is working on are skipped. Returns the rows made.
    async fn enqueue_notifications(&mut self, now: i64, settle_ms: i64, limit: i64) -> Result<u64>;
    /// Engine internal: takes up to `limit` pending deliveries due at `now`, counting their
    /// attempt and holding them until `lease_until` (concurrent nodes get disjoint sets; a
    /// node that dies mid-attempt leaves them due again then).
    async fn claim_deliveries(
        &mut self,
        now: i64,
        lease_until: i64,
        limit: i64,
    ) -> Result<Vec<crate::channel::Delivery>>;
    /// Engine internal: what became of claimed attempts; an outcome for an attempt that was
    /// taken over meanwhile changes nothing. Returns the rows changed.
    async fn record_attempts(
        &mut self,
        outcomes: &[crate::channel::AttemptOutcome],
        now: i64,
    ) -> Result<u64>;
    /// Engine internal: the aggregates behind the database-backed metrics gauges.
    async fn metrics_snapshot(&mut self) -> Result<MetricsSnapshot>;
}

#[async_trait]
impl Channels for StoreTx {
    async fn create_channel(
        &mut self,
        tenant: TenantId,
        new: &crate::channel::NewChannel,
        now: i64,
    ) -> Result<crate::channel::Channel> {
        on_conn!(self, |c| sqlx::query_as(
            "INSERT INTO notification_channels (tenant_id, name, kind, min_severity, config,
                 secret, enabled, created_at, updated_at, scanned_until)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $8) RETURNING *",
        )
        .bind(tenant)
        .bind(&new.name)
        .bind(new.config.kind().as_str())
        .bind(new.min_severity.as_str())
        .bind(Json(&new.config))
        .bind(new.secret.as_deref())
        .bind(new.enabled)
        .bind(now)
        .fetch_one(&mut **c)
        .await)
        .map_err(|e| {
            if is_fk(&e) {
                return StoreError::NotFound(format!("tenant {tenant}"));
            }
            unique_or(e, || {
                format!("a notification channel named {:?} exists already", new.name)
            })
        })
    }

    async fn list_channels(&mut self, tenant: TenantId) -> Result<Vec<crate::channel::Channel>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM notification_channels WHERE tenant_id = $1 ORDER BY id"
        )
        .bind(tenant)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn get_channel(
        &mut self,
        tenant: TenantId,
        id: crate::channel::ChannelId,
    ) -> Result<crate::channel::Channel> {
        let row = on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM notification_channels WHERE tenant_id = $1 AND id = $2",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut **c)
        .await)?;
        found(row, || format!("notification channel {id}"))
    }

    async fn update_channel(
        &mut self,
        tenant: TenantId,
        id: crate::channel::ChannelId,
        update: &crate::channel::ChannelUpdate,
        now: i64,
    ) -> Result<crate::channel::Channel> {
        // Enabling a disabled channel starts it from now: what was raised while it was
        // off is not sent in a burst.
        let row = on_conn!(self, |c| {
            sqlx::query_as(
            "UPDATE notification_channels SET
                 min_severity = COALESCE($3, min_severity),
                 config = COALESCE($4, config),
                 secret = COALESCE($5, secret),
                 scanned_until = CASE WHEN enabled = FALSE AND $6 = TRUE THEN $7 ELSE scanned_until END,
                 enabled = COALESCE($6, enabled),
                 updated_at = $7
             WHERE tenant_id = $1 AND id = $2 RETURNING *",
        )
        .bind(tenant)
        .bind(id)
        .bind(update.min_severity.map(|s| s.as_str()))
        .bind(update.config.as_ref().map(Json))
        .bind(update.secret.as_deref())
        .bind(update.enabled)
        .bind(now)
        .fetch_optional(&mut **c)
        .await
        })?;
        found(row, || format!("notification channel {id}"))
    }

    async fn delete_channel(
        &mut self,
        tenant: TenantId,
        id: crate::channel::ChannelId,
    ) -> Result<()> {
        let done = on_conn!(self, |c| sqlx::query(
            "DELETE FROM notification_channels WHERE tenant_id = $1 AND id = $2"
        )
        .bind(tenant)
        .bind(id)
        .execute(&mut **c)
        .await
        .map(|done| done.rows_affected()))?;
        if done == 0 {
            return Err(StoreError::NotFound(format!("notification channel {id}")));
        }
        Ok(())
    }

    async fn list_deliveries(
        &mut self,
        tenant: TenantId,
        channel: crate::channel::ChannelId,
        before: Option<crate::channel::DeliveryId>,
        limit: i64,
    ) -> Result<Vec<crate::channel::Delivery>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM notification_deliveries
             WHERE tenant_id = $1 AND channel_id = $2 AND ($3 IS NULL OR id < $3)
             ORDER BY id DESC LIMIT $4",
        )
        .bind(tenant)
        .bind(channel)
        .bind(before)
        .bind(page_limit(Some(limit)))
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn find_channel(
        &mut self,
        id: crate::channel::ChannelId,
    ) -> Result<Option<crate::channel::Channel>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            "SELECT * FROM notification_channels WHERE id = $1"
        )
        .bind(id)
        .fetch_optional(&mut **c)
        .await)?)
    }

    async fn enqueue_notifications(&mut self, now: i64, settle_ms: i64, limit: i64) -> Result<u64> {
        let channels: Vec<crate::channel::Channel> =
            on_conn!(self, |c| sqlx::query_as(c.sql(&ENQUEUE_NOTIFICATIONS))
                .fetch_all(&mut **c)
                .await)?;
        let mut made = 0;
        for channel in channels {
            let mut severities = crate::channel::severities_from(channel.min_severity);
            while severities.len() < 3 {
                severities.push(severities[severities.len() - 1]);
            }
            let since = channel.created_at.max(channel.scanned_until - settle_ms);
            let alarms: Vec<(i64, i64)> = on_conn!(self, |c| sqlx::query_as(
                "SELECT a.id, a.created_at FROM alarms a
                 WHERE a.tenant_id = $1 AND a.created_at >= $2 AND a.muted = FALSE
                   AND a.repeat_of IS NULL
                   AND a.severity IN ($3, $4, $5)
                   AND NOT EXISTS (SELECT 1 FROM notification_deliveries d
                                   WHERE d.channel_id = $6 AND d.alarm_id = a.id)
                 ORDER BY a.created_at, a.id LIMIT $7",
            )
            .bind(channel.tenant_id)
            .bind(since)
            .bind(severities[0].as_str())
            .bind(severities[1].as_str())
            .bind(severities[2].as_str())
            .bind(channel.id)
            .bind(limit)
            .fetch_all(&mut **c)
            .await)?;
            for (alarm, _) in &alarms {
                made += on_conn!(self, |c| {
                    sqlx::query(
                    "INSERT INTO notification_deliveries (channel_id, tenant_id, alarm_id, state,
                         attempts, next_attempt_at, created_at, updated_at)
                     VALUES ($1, $2, $3, 'pending', 0, $4, $4, $4) ON CONFLICT DO NOTHING",
                )
                .bind(channel.id)
                .bind(channel.tenant_id)
                .bind(alarm)
                .bind(now)
                .execute(&mut **c)
                .await
                .map(|done| done.rows_affected())
                })?;
            }
            // A full page: go on from the last one next time (the look-back finds the
            // rest); otherwise everything raised up to now has its row. An idle
            // channel's mark moves only every half look-back (the window is then at
            // most one and a half look-backs), so idle passes write nothing.
            let full = i64::try_from(alarms.len()).unwrap_or(i64::MAX) >= limit;
            let until = match alarms.last() {
                Some((_, at)) if full => *at,
                _ => now.max(channel.scanned_until),
            };
            if full || until - channel.scanned_until >= settle_ms / 2 {
                on_conn!(self, |c| sqlx::query(
                    "UPDATE notification_channels SET scanned_until = $2 WHERE id = $1"
                )
                .bind(channel.id)
                .bind(until)
                .execute(&mut **c)
                .await
                .map(|done| done.rows_affected()))?;
            }
        }
        Ok(made)
    }

    async fn claim_deliveries(
        &mut self,
        now: i64,
        lease_until: i64,
        limit: i64,
    ) -> Result<Vec<crate::channel::Delivery>> {
        Ok(on_conn!(self, |c| sqlx::query_as(
            c.sql(&CLAIM_DELIVERIES)
        )
        .bind(now)
        .bind(lease_until)
        .bind(limit)
        .fetch_all(&mut **c)
        .await)?)
    }

    async fn record_attempts(
        &mut self,
        outcomes: &[crate::channel::AttemptOutcome],
        now: i64,
    ) -> Result<u64> {
        let mut recorded = 0;
        for o in outcomes {
            let state = match (o.delivered, o.retry_at) {
                (true, _) => "delivered",
                (false, Some(_)) => "pending",
                (false, None) => "failed",
            };
            recorded += on_conn!(self, |c| sqlx::query(
                "UPDATE notification_deliveries SET state = $3, last_status = $4,
                     last_error = $5, next_attempt_at = COALESCE($6, next_attempt_at),
                     delivered_at = $7, updated_at = $8
                 WHERE id = $1 AND attempts = $2 AND state = 'pending'",
            )
            .bind(o.delivery)
            .bind(o.attempt)
            .bind(state)
            .bind(o.status)
            .bind(o.error.as_deref())
            .bind(o.retry_at)
            .bind(o.delivered.then_some(now))
            .bind(now)
            .execute(&mut **c)
            .await
            .map(|done| done.rows_affected()))?;
        }
        Ok(recorded)
    }

    async fn metrics_snapshot(&mut self) -> Result<MetricsSnapshot> {
        let (outbox_backlog, outbox_oldest_at): (i64, Option<i64>) =
            on_conn!(self, |c| sqlx::query_as(
                "SELECT COUNT(*), MIN(created_at) FROM alarm_events WHERE published_at IS NULL",
            )
            .fetch_one(&mut **c)
            .await)?;
        let live_executors: Vec<(String, i64)> = on_conn!(self, |c| sqlx::query_as(
            "SELECT t.name || '.' || a.name, COUNT(*) FROM executors e
             JOIN apps a ON a.id = e.app_id JOIN tenants t ON t.id = a.tenant_id
             WHERE e.state = 'up' GROUP BY t.name, a.name ORDER BY 1",
        )
        .fetch_all(&mut **c)
        .await)?;
        let (notification_backlog,): (i64,) = on_conn!(self, |c| sqlx::query_as(
            "SELECT COUNT(*) FROM notification_deliveries WHERE state = 'pending'",
        )
        .fetch_one(&mut **c)
        .await)?;
        Ok(MetricsSnapshot {
            outbox_backlog,
            outbox_oldest_at,
            live_executors,
            notification_backlog,
        })
    }
}

/// The statement of `enqueue_notifications` that locks rows (on PostgreSQL; SQLite has one writer).
const ENQUEUE_NOTIFICATIONS: Locking = Locking {
    postgres: "SELECT * FROM notification_channels WHERE enabled = TRUE ORDER BY id LIMIT 200 FOR UPDATE SKIP LOCKED",
    sqlite: "SELECT * FROM notification_channels WHERE enabled = TRUE ORDER BY id LIMIT 200",
};

/// The statement of `claim_deliveries` that locks rows (on PostgreSQL; SQLite has one writer).
const CLAIM_DELIVERIES: Locking = Locking {
    postgres:
        "UPDATE notification_deliveries SET attempts = attempts + 1,
                 next_attempt_at = $2, updated_at = $1
             WHERE id IN (SELECT id FROM notification_deliveries
                          WHERE state = 'pending' AND next_attempt_at <= $1
                          ORDER BY next_attempt_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) RETURNING *",
    sqlite: "UPDATE notification_deliveries SET attempts = attempts + 1,
                 next_attempt_at = $2, updated_at = $1
             WHERE id IN (SELECT id FROM notification_deliveries
                          WHERE state = 'pending' AND next_attempt_at <= $1
                          ORDER BY next_attempt_at, id LIMIT $3) RETURNING *",
};

/// The aggregates behind the database-backed metrics gauges (what the engine's
/// [`refresh_gauges`](crate::metrics::refresh_gauges) reads), from [`Channels::metrics_snapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Alarms not published (and not muted).
    pub outbox_backlog: i64,
    /// When the oldest of them was raised.
    pub outbox_oldest_at: Option<i64>,
    /// Live (`up`) executor instances per app key `<tenant>.<app>`, for apps that have any.
    pub live_executors: Vec<(String, i64)>,
    /// Notification deliveries pending.
    pub notification_backlog: i64,
}

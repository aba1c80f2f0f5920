//! Publishing alarms straight to the alarm exchange (RabbitMQ, lapin), for when no engine can
//! relay them.
//!
//! One connection with lapin's automatic recovery and one channel in confirm mode; the exchange
//! is declared durable (topic), like the engine does. Each alarm becomes one persistent JSON
//! message in the body shape of docs/alarms.md, routed `alarm.<tenant id>.<severity>.app`, and
//! signed with the app's secret: HMAC-SHA256 over the protocol's canonical string with
//! `PUBLISH` as the method and the routing key as the path; the `message_id` carries the
//! signature ([`signed_message_id`]). An alarm leaves the queue only when the broker confirms
//! it; while the broker is away the queue waits (bounded, see [`crate::alarms::QUEUE_LIMIT`]) and
//! publishing is retried with backoff.
//!
//! A repeat of an alarm already published for the same task and kind within
//! [`REPEAT_QUIET`] is not published again: the engine counts repeats on the open alarm, and
//! an operator should not get a second pop-up for it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use serde_json::json;
use tokio::time::Instant;

use crate::protocol::{
    AlarmState, PUBLISH_METHOD, TaskId, WrapperAlarm, dedupe_key, routing_key, signed_message_id,
};
use crate::runtime::Inner;

/// Where to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DirectConfig {
    pub(crate) url: String,
    pub(crate) exchange: String,
}

/// How long a repeat of an alarm (same task and kind) is not published again.
pub const REPEAT_QUIET: Duration = Duration::from_secs(60);

/// How long connecting or one confirm may take.
const BROKER_TIMEOUT: Duration = Duration::from_secs(5);

/// The body of a direct alarm message: the shape of the engine's alarm messages, with the
/// fields only the database knows (`event_id`, `alarm.id`) `null`.
pub(crate) fn message_body(
    app_key: &str,
    instance_id: &str,
    tenant_id: i64,
    alarm: &WrapperAlarm,
) -> Vec<u8> {
    let at = alarm.at.timestamp_millis();
    let resolved = alarm.state == AlarmState::Resolved;
    let body = json!({
        "event_id": null,
        "type": if resolved { "alarm.resolved" } else { "alarm.raised" },
        "at": at,
        "tenant_id": tenant_id,
        "alarm": {
            "id": null,
            "tenant_id": tenant_id,
            "kind": "app",
            "severity": alarm.severity.as_str(),
            "task_id": alarm.task_id,
            "run_id": alarm.run_id,
            "executor_id": null,
            "node_id": null,
            "message": alarm.message,
            "details": alarm.details(app_key, instance_id),
            "dedupe_key": dedupe_key(app_key, &alarm.id),
            "created_at": at,
            "published_at": null,
            "acknowledged_at": null,
            "acknowledged_by": null,
            "muted": false,
            "count": 1,
            "last_seen": at,
            "resolved_at": if resolved { Some(at) } else { None },
            "repeat_of": null,
        },
    });
    body.to_string().into_bytes()
}

struct Link {
    connection: Connection,
    channel: Channel,
}

/// Closes the link, if any (a dropped lapin connection would stay open).
async fn close(link: &mut Option<Link>) {
    if let Some(l) = link.take() {
        let _ = l.connection.close(200, "closing".into()).await;
    }
}

async fn connect(inner: &Inner, config: &DirectConfig) -> Result<Link, String> {
    let properties = ConnectionProperties::default()
        .enable_auto_recover()
        .with_connection_name(format!("mthpt-wrapper {}", inner.settings.instance_id).into());
    let connection =
        tokio::time::timeout(BROKER_TIMEOUT, Connection::connect(&config.url, properties))
            .await
            .map_err(|_| "connecting timed out".to_owned())?
            .map_err(|e| e.to_string())?;
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| e.to_string())?;
    channel
        .exchange_declare(
            config.exchange.as_str().into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(Link {
        connection,
        channel,
    })
}

/// Publishes one alarm and waits for the broker's confirm.
async fn publish(
    inner: &Inner,
    link: &Link,
    exchange: &str,
    tenant_id: i64,
    alarm: &WrapperAlarm,
) -> Result<(), String> {
    let app = inner.settings.app.as_str();
    let key = routing_key(tenant_id, alarm.severity);
    let body = message_body(app, &inner.settings.instance_id, tenant_id, alarm);
    let signed = inner.client.signer().sign(PUBLISH_METHOD, &key, &body);
    let message_id = signed_message_id(app, signed.timestamp, &signed.nonce, &signed.signature);
    let properties = BasicProperties::default()
        .with_message_id(message_id.into())
        .with_content_type("application/json".into())
        .with_app_id("mthpt-wrapper".into())
        .with_delivery_mode(2);
    let confirm = link
        .channel
        .basic_publish(
            exchange.into(),
            key.as_str().into(),
            BasicPublishOptions::default(),
            &body,
            properties,
        )
        .await
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(BROKER_TIMEOUT, confirm).await {
        Ok(Ok(c)) if c.is_ack() => Ok(()),
        Ok(Ok(c)) => Err(format!("broker did not confirm: {c:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no confirm in time".to_owned()),
    }
}

/// Publishes the direct queue until stopped; see the module docs.
pub(crate) async fn publish_direct(inner: Arc<Inner>, config: DirectConfig) {
    let Some(queue) = inner.alarms.direct.as_ref() else {
        return;
    };
    let mut stop = inner.stop.subscribe();
    let mut link: Option<Link> = None;
    let mut failures: u32 = 0;
    let mut recent: HashMap<(TaskId, String), Instant> = HashMap::new();
    loop {
        let changed = queue.changed();
        let batch = queue.peek(64);
        let tenant = inner.alarms.tenant_id();
        let wait = match (batch.is_empty(), tenant) {
            (true, _) => None,
            (false, None) => Some(Duration::from_millis(500)),
            (false, Some(_)) => Some(Duration::ZERO),
        };
        match wait {
            None => {
                let stopped = tokio::select! {
                    () = changed => false,
                    _ = stop.wait_for(|s| *s) => true,
                };
                if stopped {
                    close(&mut link).await;
                    return;
                }
                continue;
            }
            Some(w) if !w.is_zero() => {
                // The tenant is neither configured nor told by an engine yet.
                if crate::background::sleep_or_stop(w, &mut stop).await {
                    return;
                }
                continue;
            }
            Some(_) => {}
        }
        let Some(tenant) = tenant else { continue };
        if link
            .as_ref()
            .is_some_and(|l| !l.connection.status().connected())
        {
            close(&mut link).await;
        }
        if link.is_none() {
            match connect(&inner, &config).await {
                Ok(l) => {
                    tracing::info!(exchange = %config.exchange, "publishing alarms to the message bus");
                    link = Some(l);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reach the message bus for alarms; retrying");
                    failures = failures.saturating_add(1);
                    let wait = crate::background::backoff(
                        inner.settings.retry_initial,
                        Duration::from_secs(5),
                        failures - 1,
                    );
                    if crate::background::sleep_or_stop(wait, &mut stop).await {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some(current) = link.as_ref() else {
            continue;
        };
        let now = Instant::now();
        recent.retain(|_, at| now.duration_since(*at) < REPEAT_QUIET);
        let mut done = Vec::new();
        let mut broken = None;
        for alarm in &batch {
            let repeat_key = alarm.task_id.map(|t| (t, alarm.kind.clone()));
            if alarm.state == AlarmState::Raised
                && repeat_key.as_ref().is_some_and(|k| recent.contains_key(k))
            {
                done.push(alarm);
                continue;
            }
            match publish(&inner, current, &config.exchange, tenant, alarm).await {
                Ok(()) => {
                    crate::metrics::alarm_published();
                    if let Some(k) = repeat_key {
                        recent.insert(k, now);
                    }
                    done.push(alarm);
                }
                Err(e) => {
                    broken = Some(e);
                    break;
                }
            }
        }
        queue.remove(&done);
        if let Some(e) = broken {
            tracing::warn!(error = %e, waiting = queue.len(), "publishing an alarm failed; retrying");
            close(&mut link).await;
            failures = failures.saturating_add(1);
            let wait = crate::background::backoff(
                inner.settings.retry_initial,
                Duration::from_secs(5),
                failures - 1,
            );
            if crate::background::sleep_or_stop(wait, &mut stop).await {
                return;
            }
        } else {
            failures = 0;
        }
    }
}

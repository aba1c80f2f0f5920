//! Checking alarm messages wrappers publish straight to the alarm exchange, before a console
//! node shows them (docs/alarms.md, "Alarms from wrappers").
//!
//! A wrapper's message carries its signature in its `message_id`
//! (`wrapper.<timestamp>.<nonce>.<signature>.<tenant>.<app>`). A console node shows it only
//! when the app exists, the signature (the app's secret over `PUBLISH`, the routing key, the
//! timestamp, the nonce and the body) matches, the timestamp is within the protocol's window,
//! and the routing key, the body's tenant and the alarm's app all name that app's tenant and
//! app. Anything else is dropped and counted in
//! `mthpt_console_wrapper_alarms_dropped_total{reason}`. An alarm message without a wrapper
//! signature that looks like one (no `event_id`, or a non-numeric message id) is dropped too:
//! engines publish numbered events only.
//!
//! Both copies of one wrapper alarm (direct, and relayed by an engine from the database) carry
//! the dedupe key `app:<tenant>.<app>:<alarm id>`; [`cross_path_key`] names them alike so the
//! feeder shows whichever arrives first and drops the other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use mthpt_engine::app::App;
use mthpt_engine::bus::BusMessage;
use mthpt_engine::clock::Clock;
use mthpt_engine::store::Store;
use mthpt_wrapper::protocol::{
    PUBLISH_METHOD, parse_signed_message_id, unix_now, verify_signature,
};
use serde_json::Value;

/// How long an app looked up by its key is remembered (found or not).
const CACHE_MS: i64 = 30_000;

/// Why a wrapper's message was dropped (the metric's `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// An alarm message that should carry a wrapper signature and does not.
    Unsigned,
    /// The signature in the message id is malformed or outside the time window.
    Malformed,
    /// No app has the key the message names.
    UnknownApp,
    /// The signature does not match.
    BadSignature,
    /// The routing key or the body names another tenant or app than the signing app's.
    WrongTenant,
    /// The app could not be looked up (database unavailable).
    Unavailable,
}

impl Dropped {
    fn label(self) -> &'static str {
        match self {
            Dropped::Unsigned => "unsigned",
            Dropped::Malformed => "malformed",
            Dropped::UnknownApp => "unknown_app",
            Dropped::BadSignature => "bad_signature",
            Dropped::WrongTenant => "wrong_tenant",
            Dropped::Unavailable => "unavailable",
        }
    }
}

/// Checks wrappers' alarm messages; see the module docs.
#[derive(Debug)]
pub struct WrapperCheck {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    apps: Mutex<HashMap<String, (i64, Option<App>)>>,
}

impl WrapperCheck {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            apps: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the feeder may show `m`: `Ok` for engine messages and correctly signed wrapper
    /// messages; otherwise the reason (already logged and counted).
    pub async fn admit(&self, m: &BusMessage) -> Result<(), Dropped> {
        let result = self.check(m).await;
        if let Err(reason) = result {
            tracing::warn!(key = %m.routing_key, reason = reason.label(), "dropped an alarm message from a wrapper");
            metrics::counter!("mthpt_console_wrapper_alarms_dropped_total", "reason" => reason.label())
                .increment(1);
        }
        result
    }

    async fn check(&self, m: &BusMessage) -> Result<(), Dropped> {
        if !m.routing_key.starts_with("alarm.") {
            return Ok(());
        }
        let body: Option<Value> = serde_json::from_slice(&m.body).ok();
        let Some(headers) = parse_signed_message_id(&m.message_id) else {
            if m.message_id.starts_with("wrapper.") {
                return Err(Dropped::Malformed);
            }
            let numbered = !m.message_id.is_empty()
                && m.message_id.bytes().all(|b| b.is_ascii_digit())
                && body
                    .as_ref()
                    .is_some_and(|b| b.get("event_id").is_some_and(Value::is_i64));
            return if numbered {
                Ok(())
            } else {
                Err(Dropped::Unsigned)
            };
        };
        headers
            .check_before_body(unix_now())
            .map_err(|_| Dropped::Malformed)?;
        let app = self
            .app(&headers.app)
            .await
            .map_err(|()| Dropped::Unavailable)?
            .ok_or(Dropped::UnknownApp)?;
        verify_signature(
            app.secret.as_bytes(),
            PUBLISH_METHOD,
            &m.routing_key,
            &headers,
            &m.body,
            unix_now(),
        )
        .map_err(|_| Dropped::BadSignature)?;
        let tenant = app.tenant_id.0;
        let key_tenant = m.routing_key.split('.').nth(1);
        let body = body.ok_or(Dropped::Malformed)?;
        let alarm = body.get("alarm");
        let same_tenant = key_tenant == Some(tenant.to_string().as_str())
            && body.get("tenant_id").and_then(Value::as_i64) == Some(tenant)
            && alarm
                .and_then(|a| a.get("tenant_id"))
                .and_then(Value::as_i64)
                == Some(tenant);
        let own_key = format!("app:{}:", headers.app);
        let same_app = alarm
            .and_then(|a| a.get("dedupe_key"))
            .and_then(Value::as_str)
            .is_some_and(|k| k.starts_with(&own_key))
            && alarm
                .and_then(|a| a.pointer("/details/app"))
                .and_then(Value::as_str)
                == Some(headers.app.as_str());
        if same_tenant && same_app {
            Ok(())
        } else {
            Err(Dropped::WrongTenant)
        }
    }

    /// The app with this key, cached for [`CACHE_MS`]; `Err` when the store cannot answer.
    async fn app(&self, key: &str) -> Result<Option<App>, ()> {
        let now = self.clock.now_ms();
        if let Some((at, app)) = self
            .apps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            && now - at < CACHE_MS
        {
            return Ok(app.clone());
        }
        let app = match key.split_once('.') {
            Some((tenant, app)) if !app.contains('.') => {
                let mut tx = self.store.begin_read().await.map_err(|_| ())?;
                tx.find_app_by_key(tenant, app).await.map_err(|_| ())?
            }
            _ => None,
        };
        let mut apps = self.apps.lock().unwrap_or_else(PoisonError::into_inner);
        if apps.len() > 10_000 {
            apps.clear();
        }
        apps.insert(key.to_owned(), (now, app.clone()));
        Ok(app)
    }
}

/// The key under which both copies of a wrapper alarm's transition are de-duplicated:
/// `<type>|<dedupe key>` for `alarm.raised` and `alarm.resolved` messages of wrapper alarms
/// (dedupe key `app:…`); `None` for every other message.
pub fn cross_path_key(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let kind = value.get("type")?.as_str()?;
    if kind != "alarm.raised" && kind != "alarm.resolved" {
        return None;
    }
    let key = value.pointer("/alarm/dedupe_key")?.as_str()?;
    key.starts_with("app:").then(|| format!("{kind}|{key}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_copies_of_a_wrapper_alarm_share_a_key_and_engine_alarms_have_none() {
        let direct = br#"{"event_id":null,"type":"alarm.raised","alarm":{"id":null,"dedupe_key":"app:acme.billing:0123456789abcdef"}}"#;
        let relayed = br#"{"event_id":1042,"type":"alarm.raised","alarm":{"id":311,"dedupe_key":"app:acme.billing:0123456789abcdef"}}"#;
        assert!(cross_path_key(direct).is_some());
        assert_eq!(cross_path_key(direct), cross_path_key(relayed));
        let repeated = br#"{"type":"alarm.repeated","alarm":{"dedupe_key":"app:acme.billing:0123456789abcdef"}}"#;
        assert_eq!(cross_path_key(repeated), None);
        let engine = br#"{"type":"alarm.raised","alarm":{"dedupe_key":"run_failed:8990"}}"#;
        assert_eq!(cross_path_key(engine), None);
    }
}

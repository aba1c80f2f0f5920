//! Alarms raised by a wrapper: the `POST /mthpt/v1/alarms` batch to an engine, and the signed
//! message a wrapper publishes straight to the alarm exchange when it is given an AMQP URL.
//!
//! The same alarm travels both ways under one id ([`WrapperAlarm::id`]): the engine stores it
//! with the dedupe key [`dedupe_key`]`(app key, id)` and the direct message carries that key
//! too, so a console shows the alarm once whichever copy arrives first (docs/alarms.md).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::signing::{SignatureHeaders, canonical_string, signature_hex};
use super::{ItemStatus, RunId, TaskId};

/// Most alarms in one [`AlarmBatch`].
pub const MAX_ALARMS_PER_BATCH: usize = 100;

/// Longest alarm message, in characters.
pub const MAX_ALARM_MESSAGE_CHARS: usize = 1000;

/// Longest alarm kind, in characters.
pub const MAX_ALARM_KIND_CHARS: usize = 63;

/// The kind of the alarm a wrapper raises itself when no engine answers.
pub const ENGINE_UNREACHABLE: &str = "engine_unreachable";

/// The method word of the canonical string a direct alarm message is signed over (the routing
/// key takes the path's place).
pub const PUBLISH_METHOD: &str = "PUBLISH";

/// How urgent an alarm is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlarmSeverity {
    /// For the record.
    Info,
    /// Someone should look.
    Warning,
    /// Someone must act now.
    Critical,
}

impl AlarmSeverity {
    /// The wire word (`info`, `warning`, `critical`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }
}

impl std::str::FromStr for AlarmSeverity {
    type Err = AlarmError;

    fn from_str(s: &str) -> Result<Self, AlarmError> {
        match s {
            "info" => Ok(Self::Info),
            "warning" => Ok(Self::Warning),
            "critical" => Ok(Self::Critical),
            other => Err(AlarmError::Severity(other.to_owned())),
        }
    }
}

/// Whether an alarm item raises the alarm or says its condition is over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlarmState {
    /// The alarm is raised.
    #[default]
    Raised,
    /// The condition of the alarm with this `id` is over (e.g. engines answer again).
    Resolved,
}

/// Why an alarm is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlarmError {
    /// The kind is not 1 to 63 of `a-z 0-9 _` starting with a letter.
    #[error("alarm kind {0:?} must be 1 to 63 characters of a-z 0-9 _, starting with a letter")]
    Kind(String),
    /// Not a severity.
    #[error("alarm severity {0:?} must be info, warning or critical")]
    Severity(String),
    /// The message is empty, too long or has control characters.
    #[error(
        "alarm message must be 1 to 1000 characters without control characters (it has {chars})"
    )]
    Message {
        /// Its length in characters.
        chars: usize,
    },
    /// The id is not 8 to 64 of `A-Z a-z 0-9 - _`.
    #[error("alarm id {0:?} must be 8 to 64 characters of A-Z a-z 0-9 - _")]
    Id(String),
}

/// Checks an alarm kind: 1 to 63 characters of `a-z 0-9 _`, starting with a letter.
pub fn check_kind(kind: &str) -> Result<(), AlarmError> {
    let ok = (1..=MAX_ALARM_KIND_CHARS).contains(&kind.len())
        && kind.starts_with(|c: char| c.is_ascii_lowercase())
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(AlarmError::Kind(kind.to_owned()))
    }
}

/// Checks an alarm message: 1 to 1000 characters, none of them a control character (a line
/// break included: an alarm is one line on an operator's screen).
pub fn check_message(message: &str) -> Result<(), AlarmError> {
    let chars = message.chars().count();
    if (1..=MAX_ALARM_MESSAGE_CHARS).contains(&chars) && !message.chars().any(char::is_control) {
        Ok(())
    } else {
        Err(AlarmError::Message { chars })
    }
}

fn check_id(id: &str) -> Result<(), AlarmError> {
    let ok = (8..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(AlarmError::Id(id.to_owned()))
    }
}

/// The dedupe key an alarm of app `app_key` with id `id` is stored under, and carried in both
/// copies of it: `app:<tenant>.<app>:<id>`.
pub fn dedupe_key(app_key: &str, id: &str) -> String {
    format!("app:{app_key}:{id}")
}

/// One alarm raised by a wrapper. Item of [`AlarmBatch`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WrapperAlarm {
    /// Unique per alarm (8 to 64 characters of `A-Z a-z 0-9 - _`); the same alarm sent again
    /// (a retry, the other path) has the same id and is stored once.
    pub id: String,
    /// How urgent.
    pub severity: AlarmSeverity,
    /// What happened: 1 to 63 of `a-z 0-9 _`, starting with a letter.
    pub kind: String,
    /// For the operator: 1 to 1000 characters, no control characters.
    pub message: String,
    /// `raised` (default) or `resolved`.
    #[serde(default)]
    pub state: AlarmState,
    /// The run the alarm is about, when a handler raised it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// The task of that run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// When it was raised (epoch milliseconds).
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub at: DateTime<Utc>,
}

impl WrapperAlarm {
    /// Checks what serde cannot: id, kind and message.
    pub fn validate(&self) -> Result<(), AlarmError> {
        check_id(&self.id)?;
        check_kind(&self.kind)?;
        check_message(&self.message)
    }
}

/// `POST /mthpt/v1/alarms`: alarms raised by an instance, at most [`MAX_ALARMS_PER_BATCH`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlarmBatch {
    /// The sending instance.
    pub instance_id: String,
    /// The alarms, oldest first.
    pub alarms: Vec<WrapperAlarm>,
}

/// What an engine did with one alarm of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlarmAck {
    /// The alarm's id.
    pub id: String,
    /// `accepted` (stored, or counted on the open alarm it repeats), `duplicate` (an alarm with
    /// this id was stored before), `rejected` (invalid; `message` says why) or `retry`.
    pub status: ItemStatus,
    /// A readable explanation, for anything but `accepted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Answer to [`AlarmBatch`] (HTTP 200): one ack per alarm, in request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlarmBatchResponse {
    /// The acks.
    pub items: Vec<AlarmAck>,
}

/// The routing key of an alarm on the exchange: `alarm.<tenant id>.<severity>.app`. Wrapper
/// alarms are stored with kind `app` (their own kind is in `details.app_kind`), so both copies
/// of one alarm travel under the same key.
pub fn routing_key(tenant_id: i64, severity: AlarmSeverity) -> String {
    format!("alarm.{tenant_id}.{}.app", severity.as_str())
}

/// The signature of a message published straight to the alarm exchange: HMAC-SHA256 with the
/// app's secret over the protocol's canonical string, with `PUBLISH` as the method and the
/// routing key as the path (see [`canonical_string`]).
pub fn message_signature(
    secret: &[u8],
    routing_key: &str,
    timestamp: i64,
    nonce: &str,
    body: &[u8],
) -> String {
    signature_hex(secret, PUBLISH_METHOD, routing_key, timestamp, nonce, body)
}

/// The canonical string of a direct alarm message (for receivers that verify with their own
/// HMAC code).
pub fn message_canonical(routing_key: &str, timestamp: i64, nonce: &str, body: &[u8]) -> Vec<u8> {
    canonical_string(PUBLISH_METHOD, routing_key, timestamp, nonce, body)
}

/// Prefix of the `message_id` of a message a wrapper publishes straight to the exchange.
pub const SIGNED_ID_PREFIX: &str = "wrapper";

/// The `message_id` of a direct alarm message: it carries the signature,
/// `wrapper.<timestamp>.<nonce>.<signature>.<tenant>.<app>` (see docs/alarms.md). The nonce
/// makes it unique per message; the app key comes last because it holds the only other dot.
pub fn signed_message_id(app_key: &str, timestamp: i64, nonce: &str, signature: &str) -> String {
    format!("{SIGNED_ID_PREFIX}.{timestamp}.{nonce}.{signature}.{app_key}")
}

/// The signature headers a direct alarm message's `message_id` carries; `None` when it is not
/// of that form (every value is checked like the HTTP headers are).
pub fn parse_signed_message_id(id: &str) -> Option<SignatureHeaders> {
    let mut parts = id.splitn(5, '.');
    if parts.next()? != SIGNED_ID_PREFIX {
        return None;
    }
    let (timestamp, nonce, signature, app) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    SignatureHeaders::from_lookup(|name| match name {
        super::headers::APP => Some(app),
        super::headers::TIMESTAMP => Some(timestamp),
        super::headers::NONCE => Some(nonce),
        super::headers::SIGNATURE => Some(signature),
        _ => None,
    })
    .ok()
}

impl WrapperAlarm {
    /// The alarm's `details` as stored by an engine and sent in a direct message: the app key,
    /// the wrapper's own kind, the instance and the alarm's id.
    pub fn details(&self, app_key: &str, instance_id: &str) -> serde_json::Value {
        serde_json::json!({
            "app": app_key,
            "app_kind": self.kind,
            "instance": instance_id,
            "alarm_id": self.id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_messages_and_ids_are_checked_with_clear_errors() {
        assert!(check_kind("disk_full").is_ok());
        assert!(check_kind(ENGINE_UNREACHABLE).is_ok());
        for bad in ["", "Disk", "1st", "disk-full", "disk.full", &"a".repeat(64)] {
            let err = check_kind(bad).err();
            assert!(
                err.is_some_and(|e| e.to_string().contains("a-z 0-9 _")),
                "{bad:?}"
            );
        }
        assert!(check_message("disk 91% full on /var").is_ok());
        assert!(check_message("").is_err());
        assert!(check_message("two\nlines").is_err());
        assert!(check_message(&"é".repeat(1000)).is_ok());
        assert!(
            check_message(&"é".repeat(1001))
                .err()
                .is_some_and(|e| e.to_string().contains("1001"))
        );
        assert!(check_id("short").is_err());
        assert!(check_id("0123456789abcdef").is_ok());
        assert!("urgent".parse::<AlarmSeverity>().is_err());
        assert_eq!("warning".parse(), Ok(AlarmSeverity::Warning));
    }

    #[test]
    fn the_message_id_carries_the_signature() {
        let sig = "a".repeat(64);
        let id = signed_message_id("acme.billing", 1795000003, "nonce-123", &sig);
        assert_eq!(
            id,
            format!("wrapper.1795000003.nonce-123.{sig}.acme.billing")
        );
        let headers = parse_signed_message_id(&id);
        assert!(headers.as_ref().is_some_and(|h| h.app == "acme.billing"
            && h.timestamp == 1795000003
            && h.nonce == "nonce-123"
            && h.signature == sig));
        assert!(parse_signed_message_id("1042").is_none());
        assert!(parse_signed_message_id(&format!("wrapper.01.nonce-123.{sig}.a.b")).is_none());
        assert!(parse_signed_message_id("wrapper.1.n.s").is_none());
    }

    #[test]
    fn the_routing_key_names_tenant_and_severity() {
        assert_eq!(
            routing_key(7, AlarmSeverity::Critical),
            "alarm.7.critical.app"
        );
    }
}

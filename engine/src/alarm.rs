//! Alarms: events an operator must see. Written in the same transaction as the state change that
//! caused them, acknowledged by a person, resolved by the task's next success.
//!
//! Life cycle (see docs/alarms.md):
//!
//! ```text
//! raised ──(same task and kind again while open)──> repeated: count + 1, last_seen
//!   │  └──(a person)──> acknowledged (who, when)
//!   └─────(the task's next successful run; failure kinds only)──> resolved
//! ```
//!
//! Every transition writes an [`AlarmEvent`] in the same transaction: the outbox the engine's
//! relay ([`crate::relay`]) publishes to the message bus.

use serde::{Deserialize, Serialize};
use sqlx::types::Json;

use crate::app::ExecutorId;
use crate::macros::{id_type, text_enum};
use crate::run::RunId;
use crate::task::TaskId;
use crate::tenant::TenantId;

id_type!(
    /// Identifies an alarm.
    AlarmId
);

text_enum!(
    /// What happened.
    AlarmKind {
        RunFailed = "run_failed",
        RetriesExhausted = "retries_exhausted",
        /// Not finished before its deadline.
        TimedOut = "timed_out",
        /// Not started within its start timeout (late, or no executor accepted it).
        NotStarted = "not_started",
        ExecutorLost = "executor_lost",
        NodeLost = "node_lost",
        Misfire = "misfire",
        /// Raised by an app's wrapper (a handler, or the wrapper itself, e.g. no engine
        /// reachable); the wrapper's own kind is `details.app_kind`.
        App = "app",
        /// Due runs of an app wait for capacity: its live executors are full (or draining).
        Backlog = "backlog",
    }
);

text_enum!(
    /// How urgent it is.
    Severity {
        Info = "info",
        Warning = "warning",
        Critical = "critical",
    }
);

impl AlarmKind {
    /// Whether a successful run of the alarm's task shows the problem is over (the alarm is
    /// then resolved).
    pub fn resolved_by_success(self) -> bool {
        matches!(
            self,
            AlarmKind::RunFailed
                | AlarmKind::RetriesExhausted
                | AlarmKind::TimedOut
                | AlarmKind::NotStarted
        )
    }
}

/// An alarm as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Alarm {
    pub id: AlarmId,
    /// `None` for cluster-level alarms (engine node lost), seen by operators only.
    pub tenant_id: Option<TenantId>,
    #[sqlx(try_from = "String")]
    pub kind: AlarmKind,
    #[sqlx(try_from = "String")]
    pub severity: Severity,
    pub task_id: Option<TaskId>,
    pub run_id: Option<RunId>,
    pub executor_id: Option<ExecutorId>,
    pub node_id: Option<String>,
    pub message: String,
    pub details: Json<serde_json::Value>,
    /// Raising an alarm with a key that already exists raises nothing.
    pub dedupe_key: Option<String>,
    pub created_at: i64,
    pub published_at: Option<i64>,
    pub acknowledged_at: Option<i64>,
    pub acknowledged_by: Option<String>,
    /// Raised while its task's alarms were muted: recorded for history, never published (no
    /// pop-up, no notification) and not open.
    pub muted: bool,
    /// How often it happened: 1, plus one per repeat while it was open.
    pub count: i64,
    /// When it last happened.
    pub last_seen: Option<i64>,
    /// When the task's next successful run resolved it.
    pub resolved_at: Option<i64>,
    /// Set on a repeat: the open alarm it was counted on. Repeats are kept for their dedupe key
    /// only; they are never listed or published on their own.
    pub repeat_of: Option<AlarmId>,
}

impl Alarm {
    /// Open: nobody acknowledged it, it is not resolved, and it was not raised muted.
    pub fn is_open(&self) -> bool {
        self.acknowledged_at.is_none()
            && self.resolved_at.is_none()
            && !self.muted
            && self.repeat_of.is_none()
    }
}

id_type!(
    /// Identifies an alarm event (the message id on the bus).
    AlarmEventId
);

text_enum!(
    /// A transition of an alarm.
    AlarmEventKind {
        Raised = "raised",
        /// The same task and kind happened again while the alarm was open.
        Repeated = "repeated",
        Acknowledged = "acknowledged",
        Resolved = "resolved",
    }
);

/// A transition of an alarm, as stored in the outbox, with the alarm as it was then.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AlarmEvent {
    pub id: AlarmEventId,
    pub alarm_id: AlarmId,
    pub tenant_id: Option<TenantId>,
    #[sqlx(try_from = "String")]
    pub event: AlarmEventKind,
    pub alarm: Json<Alarm>,
    pub created_at: i64,
    pub published_at: Option<i64>,
}

/// The exchange alarm and run events are published to.
pub const EXCHANGE: &str = "mthpt.alarms";

/// The message an alarm event travels as (JSON; documented in docs/alarms.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlarmMessage {
    /// The event's id; also the message id on the bus. Receivers de-duplicate by it.
    pub event_id: i64,
    /// `alarm.raised`, `alarm.repeated`, `alarm.acknowledged` or `alarm.resolved`.
    #[serde(rename = "type")]
    pub kind: String,
    /// When the transition happened (epoch ms).
    pub at: i64,
    /// The alarm's tenant; `null` for cluster-level alarms (operators only).
    pub tenant_id: Option<i64>,
    /// The alarm as it was right after the transition.
    pub alarm: Alarm,
}

impl AlarmEvent {
    /// `alarm.<tenant id or "cluster">.<severity>.<kind>`.
    pub fn routing_key(&self) -> String {
        let tenant = match self.tenant_id {
            Some(t) => t.to_string(),
            None => "cluster".to_owned(),
        };
        format!(
            "alarm.{tenant}.{}.{}",
            self.alarm.0.severity, self.alarm.0.kind
        )
    }

    /// The message this event is published as.
    pub fn message(&self) -> AlarmMessage {
        AlarmMessage {
            event_id: self.id.0,
            kind: format!("alarm.{}", self.event),
            at: self.created_at,
            tenant_id: self.tenant_id.map(|t| t.0),
            alarm: self.alarm.0.clone(),
        }
    }
}

/// An alarm to raise.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAlarm {
    pub tenant_id: Option<TenantId>,
    pub kind: AlarmKind,
    pub severity: Severity,
    pub task_id: Option<TaskId>,
    pub run_id: Option<RunId>,
    pub executor_id: Option<ExecutorId>,
    pub node_id: Option<String>,
    pub message: String,
    pub details: serde_json::Value,
    pub dedupe_key: Option<String>,
}

impl NewAlarm {
    /// A wrapper alarm's own kind (`details.app_kind`); `None` for other alarms. A repeat of an
    /// open `app` alarm must have the same task and the same own kind.
    pub fn app_kind(&self) -> Option<&str> {
        match self.kind {
            AlarmKind::App => self.details.get("app_kind").and_then(|v| v.as_str()),
            _ => None,
        }
    }

    /// An alarm of `kind` for a tenant, with no references yet.
    pub fn new(
        tenant_id: Option<TenantId>,
        kind: AlarmKind,
        severity: Severity,
        message: impl Into<String>,
    ) -> Self {
        Self {
            tenant_id,
            kind,
            severity,
            task_id: None,
            run_id: None,
            executor_id: None,
            node_id: None,
            message: message.into(),
            details: serde_json::Value::Object(serde_json::Map::new()),
            dedupe_key: None,
        }
    }
}

/// Filters for listing a tenant's alarms.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlarmFilter {
    pub kind: Option<AlarmKind>,
    /// Only open alarms: nobody has acknowledged them yet, they are not resolved and they were
    /// not raised muted.
    pub unacknowledged: bool,
    /// Keyset paging, newest first: alarms with an id lower than this.
    pub before_id: Option<AlarmId>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<i64>,
    pub severity: Option<Severity>,
    pub task_id: Option<TaskId>,
    /// Only alarms someone has acknowledged.
    pub acknowledged: bool,
    /// Only alarms raised while their task's alarms were muted (`true`) or only the others
    /// (`false`).
    pub muted: Option<bool>,
}

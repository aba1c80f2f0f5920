//! Alarms: events an operator must see. Written in the same transaction as the state change that
//! caused them (the outbox), published to AMQP afterwards, acknowledged by a person.

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

/// An alarm as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
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
    /// Only open alarms: nobody has acknowledged them yet and they were not raised muted.
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

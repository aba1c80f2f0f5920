//! The audit log: who changed what, when.

use serde::{Deserialize, Serialize};
use sqlx::types::Json;

use crate::tenant::TenantId;

/// An audit event as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct AuditEvent {
    pub id: i64,
    /// `None` for cluster-level events.
    pub tenant_id: Option<TenantId>,
    /// Who: a username, `token:<name>`, or `engine:<node>`.
    pub actor: String,
    /// What, e.g. `task.update`, `task.pause`, `run.trigger`, `alarm.ack`, `login`.
    pub action: String,
    pub target_kind: String,
    pub target_id: Option<String>,
    pub details: Json<serde_json::Value>,
    pub at: i64,
}

/// An audit event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAuditEvent {
    pub tenant_id: Option<TenantId>,
    pub actor: String,
    pub action: String,
    pub target_kind: String,
    pub target_id: Option<String>,
    pub details: serde_json::Value,
}

impl NewAuditEvent {
    /// An event with no details.
    pub fn new(
        tenant_id: Option<TenantId>,
        actor: impl Into<String>,
        action: impl Into<String>,
        target_kind: impl Into<String>,
        target_id: Option<String>,
    ) -> Self {
        Self {
            tenant_id,
            actor: actor.into(),
            action: action.into(),
            target_kind: target_kind.into(),
            target_id,
            details: serde_json::Value::Object(serde_json::Map::new()),
        }
    }
}

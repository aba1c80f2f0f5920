//! `/tenants/{tenant}/audit`: who changed what, when, newest first.

use actix_web::{get, web};
use chrono::{DateTime, Utc};
use mthpt_engine::audit::AuditEvent;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::error::{ApiResult, Problem};
use super::{LimitQuery, at};
use crate::service::{Services, audit_log};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_audit);
}

/// One audit event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditBody {
    pub id: i64,
    /// Who: the user and the token used.
    pub actor: String,
    /// What, e.g. `task.update`, `task.trigger`, `alarm.ack`.
    pub action: String,
    pub target_kind: String,
    pub target_id: Option<String>,
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
    pub at: DateTime<Utc>,
}

impl From<AuditEvent> for AuditBody {
    fn from(e: AuditEvent) -> Self {
        Self {
            id: e.id,
            actor: e.actor,
            action: e.action,
            target_kind: e.target_kind,
            target_id: e.target_id,
            details: e.details.0,
            at: at(e.at),
        }
    }
}

/// A page of audit events.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditPage {
    pub items: Vec<AuditBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Paging of the audit log.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// A tenant's audit events, newest first.
#[utoipa::path(tag = "audit", params(("tenant" = String, Path), AuditQuery, LimitQuery), responses(
    (status = 200, body = AuditPage),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/audit")]
async fn list_audit(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    query: web::Query<AuditQuery>,
    limit: web::Query<LimitQuery>,
) -> ApiResult<web::Json<AuditPage>> {
    let limit = limit.into_inner().get()?;
    let page = audit_log::list(&services, &caller, &tenant, query.cursor.as_deref(), limit).await?;
    Ok(web::Json(AuditPage {
        items: page.items.into_iter().map(Into::into).collect(),
        next_cursor: page.next_cursor,
    }))
}

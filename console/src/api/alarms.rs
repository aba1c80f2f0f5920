//! `/tenants/{tenant}/alarms`: list (open or acknowledged, by kind, severity, task),
//! acknowledge (idempotent, records who; the acknowledgement reaches every console node's
//! WebSocket sessions through the bus), and mute a task's alarms until a time.

use actix_web::{HttpResponse, get, post, put, web};
use chrono::{DateTime, Utc};
use mthpt_engine::alarm::{Alarm, AlarmFilter, AlarmId, AlarmKind, Severity};
use mthpt_engine::store::AlarmMute;
use mthpt_engine::task::TaskId;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiError, ApiResult, Problem};
use super::{LimitQuery, at};
use crate::service::Services;
use crate::service::alarms::{self, AlarmView};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_alarms)
        .service(acknowledge_alarm)
        .service(list_all_alarms)
        .service(acknowledge_any_alarm)
        .service(list_mutes)
        .service(mute_task_alarms);
}

/// An alarm as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AlarmBody {
    pub id: i64,
    /// run_failed, retries_exhausted, timed_out, not_started, executor_lost, node_lost, misfire,
    /// or app (raised by an app's wrapper; its own kind is `details.app_kind`).
    pub kind: String,
    /// info, warning or critical.
    pub severity: String,
    pub task_id: Option<i64>,
    pub run_id: Option<i64>,
    pub executor_id: Option<i64>,
    pub message: String,
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub acknowledged_at: Option<DateTime<Utc>>,
    pub acknowledged_by: Option<String>,
    /// Raised while its task's alarms were muted: recorded for history, but never published
    /// (no pop-up, no notification) and not open.
    pub muted: bool,
    /// The task's alarms are muted now, until then.
    pub muted_until: Option<DateTime<Utc>>,
    /// How often it happened: 1, plus one per repeat (same task and kind) while it was open.
    pub count: i64,
    /// When it last happened.
    pub last_seen: DateTime<Utc>,
    /// When the task's next successful run resolved it (failure kinds only).
    pub resolved_at: Option<DateTime<Utc>>,
}

impl From<AlarmView> for AlarmBody {
    fn from(v: AlarmView) -> Self {
        let mut body = AlarmBody::from(v.alarm);
        body.muted_until = v.muted_until.map(at);
        body
    }
}

impl From<Alarm> for AlarmBody {
    fn from(a: Alarm) -> Self {
        Self {
            id: a.id.0,
            kind: a.kind.to_string(),
            severity: a.severity.to_string(),
            task_id: a.task_id.map(|t| t.0),
            run_id: a.run_id.map(|r| r.0),
            executor_id: a.executor_id.map(|e| e.0),
            message: a.message,
            details: a.details.0,
            created_at: at(a.created_at),
            acknowledged_at: a.acknowledged_at.map(at),
            acknowledged_by: a.acknowledged_by,
            muted: a.muted,
            muted_until: None,
            count: a.count,
            last_seen: at(a.last_seen.unwrap_or(a.created_at)),
            resolved_at: a.resolved_at.map(at),
        }
    }
}

/// A page of alarms.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AlarmPage {
    pub items: Vec<AlarmBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Filters of the alarm list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AlarmQuery {
    /// `open` (not acknowledged, not resolved, not raised muted) or `acknowledged`; default
    /// both.
    pub status: Option<String>,
    /// `true`: only alarms raised while their task's alarms were muted; `false`: only the
    /// others; default both.
    pub muted: Option<bool>,
    pub kind: Option<String>,
    pub severity: Option<String>,
    pub task: Option<i64>,
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

impl AlarmQuery {
    fn filter(&self) -> ApiResult<AlarmFilter> {
        let (unacknowledged, acknowledged) = match self.status.as_deref() {
            None => (false, false),
            Some("open") => (true, false),
            Some("acknowledged") => (false, true),
            Some(other) => {
                return Err(ApiError::field(
                    "status",
                    format!("{other:?} is not open or acknowledged"),
                ));
            }
        };
        Ok(AlarmFilter {
            kind: self
                .kind
                .as_deref()
                .map(str::parse::<AlarmKind>)
                .transpose()
                .map_err(|e| ApiError::field("kind", e.to_string()))?,
            severity: self
                .severity
                .as_deref()
                .map(str::parse::<Severity>)
                .transpose()
                .map_err(|e| ApiError::field("severity", e.to_string()))?,
            task_id: self.task.map(TaskId),
            unacknowledged,
            acknowledged,
            muted: self.muted,
            ..Default::default()
        })
    }
}

/// A tenant's alarms, newest first.
#[utoipa::path(tag = "alarms", params(("tenant" = String, Path), AlarmQuery, LimitQuery), responses(
    (status = 200, body = AlarmPage),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/alarms")]
async fn list_alarms(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    query: web::Query<AlarmQuery>,
    limit: web::Query<LimitQuery>,
) -> ApiResult<web::Json<AlarmPage>> {
    let limit = limit.into_inner().get()?;
    let filter = query.filter()?;
    let page = alarms::list(
        &services,
        &caller,
        &tenant,
        filter,
        query.cursor.as_deref(),
        limit,
    )
    .await?;
    Ok(web::Json(AlarmPage {
        items: page.items.into_iter().map(Into::into).collect(),
        next_cursor: page.next_cursor,
    }))
}

/// Acknowledges an alarm. Repeating it changes nothing: the first person and time stay.
#[utoipa::path(tag = "alarms", params(("tenant" = String, Path), ("id" = i64, Path)), responses(
    (status = 200, body = AlarmBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/alarms/{id}/ack")]
async fn acknowledge_alarm(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64)>,
) -> ApiResult<web::Json<AlarmBody>> {
    let (tenant, id) = path.into_inner();
    let alarm = alarms::acknowledge(&services, &caller, &tenant, AlarmId(id)).await?;
    Ok(web::Json(alarm.into()))
}

/// Every alarm of the cluster, newest first (operators): every tenant's, and those of no
/// tenant (`node_lost`: an engine node stopped heartbeating).
#[utoipa::path(tag = "alarms", params(AlarmQuery, LimitQuery), responses(
    (status = 200, body = AlarmPage),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[get("/alarms")]
async fn list_all_alarms(
    services: web::Data<Services>,
    caller: Caller,
    query: web::Query<AlarmQuery>,
    limit: web::Query<LimitQuery>,
) -> ApiResult<web::Json<AlarmPage>> {
    let limit = limit.into_inner().get()?;
    let filter = query.filter()?;
    let page = alarms::list_all(&services, &caller, filter, query.cursor.as_deref(), limit).await?;
    Ok(web::Json(AlarmPage {
        items: page
            .items
            .into_iter()
            .map(|alarm| AlarmView {
                alarm,
                muted_until: None,
            })
            .map(Into::into)
            .collect(),
        next_cursor: page.next_cursor,
    }))
}

/// Acknowledges any alarm of the cluster (operators), one of no tenant included. Repeating
/// it changes nothing.
#[utoipa::path(tag = "alarms", params(("id" = i64, Path)), responses(
    (status = 200, body = AlarmBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[post("/alarms/{id}/ack")]
async fn acknowledge_any_alarm(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<i64>,
) -> ApiResult<web::Json<AlarmBody>> {
    let alarm = alarms::acknowledge_any(&services, &caller, AlarmId(path.into_inner())).await?;
    Ok(web::Json(alarm.into()))
}

/// A task whose alarms are muted.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MuteBody {
    pub task_id: i64,
    pub muted_until: DateTime<Utc>,
    pub muted_by: String,
}

impl From<AlarmMute> for MuteBody {
    fn from(m: AlarmMute) -> Self {
        Self {
            task_id: m.task_id.0,
            muted_until: at(m.muted_until),
            muted_by: m.muted_by,
        }
    }
}

/// Tasks whose alarms are muted now.
#[utoipa::path(tag = "alarms", params(("tenant" = String, Path)), responses(
    (status = 200, body = Vec<MuteBody>),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/alarm-mutes")]
async fn list_mutes(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
) -> ApiResult<web::Json<Vec<MuteBody>>> {
    let mutes = alarms::mutes(&services, &caller, &tenant).await?;
    Ok(web::Json(mutes.into_iter().map(Into::into).collect()))
}

/// Until when to mute; `null` unmutes.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MuteRequest {
    /// At most 90 days ahead.
    pub until: Option<DateTime<Utc>>,
}

/// Mutes a task's alarms until a time, or unmutes them. Alarms raised meanwhile are recorded
/// and listed with `muted: true`, but never published (no pop-up, no notification) and never
/// open.
#[utoipa::path(tag = "alarms", params(("tenant" = String, Path), ("id" = i64, Path, description = "task id")),
    request_body = MuteRequest, responses(
    (status = 200, body = MuteBody),
    (status = 204, description = "unmuted"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[put("/tenants/{tenant}/tasks/{id}/alarm-mute")]
async fn mute_task_alarms(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64)>,
    body: JsonBody<MuteRequest>,
) -> ApiResult<HttpResponse> {
    let (tenant, id) = path.into_inner();
    let until = body.until.map(|t| t.timestamp_millis());
    Ok(
        match alarms::mute(&services, &caller, &tenant, TaskId(id), until).await? {
            Some(mute) => HttpResponse::Ok().json(MuteBody::from(mute)),
            None => HttpResponse::NoContent().finish(),
        },
    )
}

//! `POST /tenants/{tenant}/schedule-preview`: the next fire times of a schedule in its zone,
//! and what it says in English and Chinese.

use std::collections::BTreeMap;

use actix_web::{post, web};
use chrono::{DateTime, FixedOffset, TimeZone, Utc};
use mthpt_engine::task::TaskId;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiResult, Problem};
use crate::service::Services;
use crate::service::tasks::{self, ScheduleInput};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(preview_schedule);
}

/// What to preview: a schedule, or an existing task's.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewRequest {
    pub schedule: Option<ScheduleInput>,
    /// Preview this task's schedule (when no `schedule` is given).
    pub task_id: Option<i64>,
    /// How many fire times (1-100, default 10).
    pub count: Option<usize>,
    /// Fire times after this instant (default now).
    pub after: Option<DateTime<Utc>>,
}

/// The preview.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PreviewBody {
    /// The IANA zone the times are shown in.
    pub timezone: String,
    /// Next fire times, with the zone's offset.
    pub fire_times: Vec<DateTime<FixedOffset>>,
    /// Language tag (`en`, `zh-CN`) → description.
    pub description: BTreeMap<String, String>,
}

/// The next fire times of a schedule (or a task's) and its description in `en` and `zh-CN`.
#[utoipa::path(tag = "tasks", params(("tenant" = String, Path)), request_body = PreviewRequest, responses(
    (status = 200, body = PreviewBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/schedule-preview")]
async fn preview_schedule(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    body: JsonBody<PreviewRequest>,
) -> ApiResult<web::Json<PreviewBody>> {
    let body = body.into_inner();
    let preview = tasks::preview(
        &services,
        &caller,
        &tenant,
        body.schedule.as_ref(),
        body.task_id.map(TaskId),
        body.count.unwrap_or(10),
        body.after.map(|t| t.timestamp_millis()),
    )
    .await?;
    let tz = preview.timezone;
    Ok(web::Json(PreviewBody {
        timezone: tz.name().to_owned(),
        fire_times: preview
            .fire_times
            .iter()
            .filter_map(|ms| tz.timestamp_millis_opt(*ms).single())
            .map(|t| t.fixed_offset())
            .collect(),
        description: preview
            .descriptions
            .into_iter()
            .map(|(tag, text)| (tag.to_owned(), text))
            .collect(),
    }))
}

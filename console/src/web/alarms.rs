//! `/t/{tenant}/alarms`: a tenant's alarms with filters kept in the URL, newest first, paged;
//! acknowledge (a form post; the pop-ups acknowledge through the REST API instead).

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use mthpt_engine::alarm::{AlarmFilter, AlarmId, AlarmKind, Severity};
use mthpt_engine::task::TaskId;
use serde::Deserialize;

use super::{Ctx, Layout, Opt, html, local_path, options, see_other, urlencode};
use crate::service::alarms;
use crate::service::error::{ApiError, ApiResult};
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}/alarms", web::get().to(list))
        .route("/t/{tenant}/alarms/{id}/ack", web::post().to(acknowledge));
}

/// Alarms per page.
const PAGE: i64 = 50;

/// The filters of the list, as they appear in the URL.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AlarmQuery {
    /// `open`, `acknowledged` or empty (both).
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub severity: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub task: String,
    #[serde(default)]
    pub cursor: String,
}

impl AlarmQuery {
    fn filter(&self) -> ApiResult<AlarmFilter> {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Ok(AlarmFilter {
            unacknowledged: self.status == "open",
            acknowledged: self.status == "acknowledged",
            muted: (self.status == "open").then_some(false),
            kind: some(&self.kind)
                .map(|k| k.parse::<AlarmKind>())
                .transpose()
                .map_err(|e| ApiError::field("kind", e.to_string()))?,
            severity: some(&self.severity)
                .map(|k| k.parse::<Severity>())
                .transpose()
                .map_err(|e| ApiError::field("severity", e.to_string()))?,
            task_id: some(&self.task)
                .map(|t| t.trim().parse::<i64>().map(TaskId))
                .transpose()
                .map_err(|_| ApiError::field("task", "must be a task id (a number)"))?,
            ..Default::default()
        })
    }

    /// This query continued at `cursor`.
    fn at(&self, cursor: &str) -> String {
        format!(
            "status={}&severity={}&kind={}&task={}&cursor={}",
            urlencode(&self.status),
            urlencode(&self.severity),
            urlencode(&self.kind),
            urlencode(&self.task),
            urlencode(cursor)
        )
    }
}

/// One row of the list.
#[derive(Debug, Clone)]
pub struct AlarmRow {
    pub id: i64,
    pub severity: String,
    pub severity_label: String,
    pub kind_label: String,
    pub status_label: String,
    pub message: String,
    pub run_id: String,
    pub run_link: String,
    pub ack_action: String,
    pub count: i64,
    pub created: String,
    pub last_seen: String,
    /// `open`, `acknowledged`, `resolved` or `muted`.
    pub status: &'static str,
    pub acknowledged_by: String,
}

#[derive(Template)]
#[template(path = "alarms.html")]
struct AlarmsPage {
    l: Layout,
    rows: Vec<AlarmRow>,
    statuses: Vec<Opt>,
    kinds: Vec<Opt>,
    severities: Vec<Opt>,
    tasks: Vec<Opt>,
    next: String,
}

async fn list(
    req: HttpRequest,
    tenant: web::Path<String>,
    q: web::Query<AlarmQuery>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let q = q.into_inner();
    let tenant = or_error!(ctx, ctx.tenant(&tenant).await);
    let filter = or_error!(ctx, q.filter());
    let cursor = (!q.cursor.is_empty()).then_some(q.cursor.as_str());
    let page = or_error!(
        ctx,
        alarms::list(
            &ctx.services,
            &ctx.caller,
            &tenant.name,
            filter,
            cursor,
            PAGE
        )
        .await
    );
    let title = ctx.tr.t("alarms.title");
    let l = or_error!(
        ctx,
        Layout::of(&ctx, &tenant, title, local_path(&req), "alarms").await
    );
    let names = or_error!(ctx, super::runs::task_names(&ctx, &tenant.name).await);
    let rows = page
        .items
        .into_iter()
        .map(|v| row(&ctx, &l, v.alarm))
        .collect();
    let tasks = super::runs::task_options(ctx.tr, names, &q.task);
    let next = page
        .next_cursor
        .map(|c| format!("{}?{}", l.link("alarms"), q.at(&c)))
        .unwrap_or_default();
    html(
        StatusCode::OK,
        &AlarmsPage {
            statuses: options(
                ctx.tr,
                "alarm.status.",
                &["open", "acknowledged"],
                &q.status,
                Some("filter.any"),
            ),
            kinds: options(
                ctx.tr,
                "alarm.kind.",
                &AlarmKind::ALL
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>(),
                &q.kind,
                Some("filter.any"),
            ),
            severities: options(
                ctx.tr,
                "severity.",
                &Severity::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                &q.severity,
                Some("filter.any"),
            ),
            l,
            rows,
            tasks,
            next,
        },
    )
}

fn row(ctx: &Ctx, l: &Layout, a: mthpt_engine::alarm::Alarm) -> AlarmRow {
    let status = if a.resolved_at.is_some() {
        "resolved"
    } else if a.acknowledged_at.is_some() {
        "acknowledged"
    } else if a.muted {
        "muted"
    } else {
        "open"
    };
    let tr = ctx.tr;
    AlarmRow {
        id: a.id.0,
        severity: a.severity.to_string(),
        severity_label: tr.t(&format!("severity.{}", a.severity)),
        kind_label: tr.t(&format!("alarm.kind.{}", a.kind)),
        status_label: tr.t(&format!("alarm.status.{status}")),
        message: tr.msg(&a.message),
        run_id: a.run_id.map(|r| r.0.to_string()).unwrap_or_default(),
        run_link: a
            .run_id
            .map(|r| l.link(&format!("runs/{r}")))
            .unwrap_or_default(),
        ack_action: l.link(&format!("alarms/{}/ack", a.id)),
        count: a.count,
        created: ctx.time(a.created_at),
        last_seen: ctx.time(a.last_seen.unwrap_or(a.created_at)),
        status,
        acknowledged_by: a.acknowledged_by.unwrap_or_default(),
    }
}

#[derive(Debug, Deserialize)]
struct BackForm {
    back: Option<String>,
}

async fn acknowledge(
    req: HttpRequest,
    path: web::Path<(String, i64)>,
    form: web::Form<BackForm>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, id) = path.into_inner();
    or_error!(
        ctx,
        alarms::acknowledge(&ctx.services, &ctx.caller, &tenant, AlarmId(id)).await
    );
    see_other(&super::flash::Done::Acknowledged(id).on(&super::safe_next(form.back.as_deref())))
}

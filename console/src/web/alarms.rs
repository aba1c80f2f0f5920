//! `/t/{tenant}/alarms`: a tenant's alarms with filters kept in the URL, newest first, paged;
//! acknowledge one or the ones ticked (form posts; the pop-ups acknowledge through the REST
//! API instead); the tasks whose alarms are muted now, muting a task's alarms for 1, 4 or 24
//! hours and unmuting them.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use mthpt_engine::alarm::{AlarmFilter, AlarmId, AlarmKind, Severity};
use mthpt_engine::task::TaskId;
use serde::Deserialize;

use super::bulk::{Outcome, Posted};
use super::flash::Done;
use super::{Ctx, Layout, Opt, html, local_path, options, safe_next, see_other, urlencode};
use crate::service::access::{Action, tenant_access};
use crate::service::error::{ApiError, ApiResult};
use crate::service::{alarms, bulk as bulk_service};
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}/alarms", web::get().to(list))
        .route("/t/{tenant}/alarms/ack", web::post().to(acknowledge_many))
        .route("/t/{tenant}/alarms/mute", web::post().to(mute))
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
    /// After acknowledging the ticked alarms: `ack` (`none` when none was ticked), how many
    /// were acknowledged, and `id:code` of each that failed.
    #[serde(default)]
    pub bulk: String,
    #[serde(default)]
    pub done: String,
    #[serde(default)]
    pub failed: String,
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

/// A task whose alarms are muted now.
#[derive(Debug, Clone)]
pub struct MuteRow {
    pub task_id: i64,
    pub task: String,
    pub task_link: String,
    pub until: String,
    pub by: String,
    pub unmute_action: String,
}

#[derive(Template)]
#[template(path = "alarms.html")]
struct AlarmsPage {
    l: Layout,
    q: AlarmQuery,
    rows: Vec<AlarmRow>,
    statuses: Vec<Opt>,
    kinds: Vec<Opt>,
    severities: Vec<Opt>,
    tasks: Vec<Opt>,
    next: String,
    /// Open rows have a checkbox (roles that may operate).
    select: bool,
    /// What acknowledging the ticked alarms just did.
    outcome: Outcome,
    mutes: Vec<MuteRow>,
    /// The tasks the mute form offers.
    mute_tasks: Vec<Opt>,
}

/// The mute durations offered, in hours.
pub const MUTE_HOURS: [i64; 3] = [1, 4, 24];

/// Mutes task `task`'s alarms for `hours` (one of [`MUTE_HOURS`]) from now.
pub(super) async fn mute_for(ctx: &Ctx, tenant: &str, task: i64, hours: &str) -> ApiResult<Done> {
    tenant_access(&ctx.services, &ctx.caller, tenant, Action::Operate).await?;
    let hours = hours
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|h| MUTE_HOURS.contains(h))
        .ok_or_else(|| ApiError::field("hours", format!("must be 1, 4 or 24 (was {hours:?})")))?;
    let until = ctx.services.now() + hours * 3_600_000;
    alarms::mute(
        &ctx.services,
        &ctx.caller,
        tenant,
        TaskId(task),
        Some(until),
    )
    .await?;
    Ok(Done::Muted(task))
}

/// Unmutes task `task`'s alarms.
pub(super) async fn unmute(ctx: &Ctx, tenant: &str, task: i64) -> ApiResult<Done> {
    alarms::mute(&ctx.services, &ctx.caller, tenant, TaskId(task), None).await?;
    Ok(Done::Unmuted(task))
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
        Layout::of(
            &ctx,
            &tenant,
            title,
            super::bulk::without_outcome(&local_path(&req)),
            "alarms"
        )
        .await
    );
    let names = or_error!(ctx, super::runs::task_names(&ctx, &tenant.name).await);
    let rows = page
        .items
        .into_iter()
        .map(|v| row(&ctx, &l, v.alarm))
        .collect();
    let mutes = or_error!(
        ctx,
        alarms::mutes(&ctx.services, &ctx.caller, &tenant.name).await
    );
    let name_of = |id: i64| {
        names
            .iter()
            .find(|(t, _)| *t == id)
            .map_or_else(|| format!("#{id}"), |(_, n)| n.clone())
    };
    let mutes = mutes
        .into_iter()
        .map(|m| MuteRow {
            task_id: m.task_id.0,
            task: name_of(m.task_id.0),
            task_link: l.link(&format!("tasks/{}", m.task_id)),
            until: ctx.time(m.muted_until),
            by: m.muted_by,
            unmute_action: l.link(&format!("tasks/{}/unmute", m.task_id)),
        })
        .collect();
    let outcome = super::bulk::outcome(
        ctx.tr,
        "alarm",
        &["ack"],
        (&q.bulk, &q.done, &q.failed),
        |id| format!("{} #{id}", ctx.tr.t("alarm.popup_title")),
    );
    let mute_tasks = names
        .iter()
        .map(|(id, name)| Opt {
            value: id.to_string(),
            label: name.clone(),
            selected: q.task == id.to_string(),
        })
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
            select: l.can_operate,
            l,
            q,
            rows,
            tasks,
            next,
            outcome,
            mutes,
            mute_tasks,
        },
    )
}

/// The row of alarm `a` on a page framed by `l`.
pub(super) fn row(ctx: &Ctx, l: &Layout, a: mthpt_engine::alarm::Alarm) -> AlarmRow {
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
    see_other(&Done::Acknowledged(id).on(&safe_next(form.back.as_deref())))
}

/// `POST /t/{tenant}/alarms/ack`: acknowledges every alarm ticked (`id`), each on its own;
/// back on the list (its filters, posted along) saying how many and naming each failure.
async fn acknowledge_many(
    req: HttpRequest,
    tenant: web::Path<String>,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let tenant = tenant.into_inner();
    let posted = Posted(&form);
    let ids = or_error!(ctx, posted.ids());
    let filters = AlarmQuery {
        status: posted.value("status"),
        severity: posted.value("severity"),
        kind: posted.value("kind"),
        task: posted.value("task"),
        ..Default::default()
    };
    let back = format!("/t/{}/alarms?{}", urlencode(&tenant), filters.at(""));
    if ids.is_empty() {
        or_error!(
            ctx,
            tenant_access(&ctx.services, &ctx.caller, &tenant, Action::Operate).await
        );
        return see_other(&format!("{back}&bulk=none"));
    }
    let ids: Vec<AlarmId> = ids.into_iter().map(AlarmId).collect();
    let outcomes = or_error!(
        ctx,
        bulk_service::acknowledge_alarms(&ctx.services, &ctx.caller, &tenant, &ids).await
    );
    see_other(&format!(
        "{back}&{}",
        super::bulk::outcome_query("ack", &outcomes)
    ))
}

#[derive(Debug, Deserialize)]
struct MuteForm {
    #[serde(default)]
    task: String,
    #[serde(default)]
    hours: String,
    back: Option<String>,
}

/// `POST /t/{tenant}/alarms/mute`: mutes the chosen task's alarms for `hours`; back with a
/// message that offers the unmute.
async fn mute(
    req: HttpRequest,
    tenant: web::Path<String>,
    form: web::Form<MuteForm>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let Ok(task) = form.task.trim().parse::<i64>() else {
        // A role that may not operate is refused before the form is read.
        or_error!(
            ctx,
            tenant_access(&ctx.services, &ctx.caller, &tenant, Action::Operate).await
        );
        return ctx.error(&ApiError::field("task", ctx.tr.t("mute.choose_task")));
    };
    let done = or_error!(ctx, mute_for(&ctx, &tenant, task, &form.hours).await);
    let back = match form.back.as_deref() {
        Some(b) if !b.is_empty() => safe_next(Some(b)),
        _ => format!("/t/{}/alarms", urlencode(&tenant)),
    };
    see_other(&done.on(&back))
}

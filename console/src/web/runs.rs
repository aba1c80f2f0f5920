//! `/t/{tenant}/runs`: runs newest first with filters in the URL and pages; the first page
//! refreshes its rows live (the script re-reads `/t/{tenant}/runs/rows` when a run event
//! arrives). `/t/{tenant}/runs/{id}`: a run's detail (timeline, attempts, output or error, log
//! tail) with cancel and re-run. `POST /t/{tenant}/runs/bulk`: cancel (after a confirmation
//! step) or re-run the runs ticked in the list, back on the list saying what was done.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::TimeZone;
use chrono_tz::Tz;
use mthpt_engine::run::{Run, RunFilter, RunId, RunState};
use mthpt_engine::task::{TaskFilter, TaskId};
use serde::Deserialize;

use super::bulk::Posted;
use super::confirm::{self, ConfirmForm};
use super::flash::Done;
use super::i18n::Tr;
use super::{Ctx, Layout, Opt, html, local_path, options, see_other, urlencode};
use crate::service::access::{Action, tenant_access};
use crate::service::bulk::{self as bulk_service, RunBulkAction};
use crate::service::error::{ApiError, ApiResult};
use crate::service::{runs, tasks};
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}/runs", web::get().to(list))
        .route("/t/{tenant}/runs/bulk", web::post().to(bulk))
        .route("/t/{tenant}/runs/rows", web::get().to(rows_fragment))
        .route("/t/{tenant}/runs/{id}", web::get().to(detail))
        .route("/t/{tenant}/runs/{id}/{action}", web::post().to(act));
}

/// Runs per page.
const PAGE: i64 = 50;

/// The list's filters, as they appear in the URL.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RunQuery {
    #[serde(default)]
    pub task: String,
    #[serde(default)]
    pub state: String,
    /// Scheduled on or after this day (`YYYY-MM-DD`, in the user's zone).
    #[serde(default)]
    pub from: String,
    /// Scheduled on or before this day.
    #[serde(default)]
    pub to: String,
    /// A run id to go to.
    #[serde(default)]
    pub run: String,
    /// Older pages: the runs below this cursor.
    #[serde(default)]
    pub cursor: String,
    /// Newer pages: the runs just above this cursor.
    #[serde(default)]
    pub after: String,
    /// After a bulk action: the action (`cancel`, `rerun`; `none` when no run was selected),
    /// how many runs it was done to, and `id:code` of each run it failed for.
    #[serde(default)]
    pub bulk: String,
    #[serde(default)]
    pub done: String,
    #[serde(default)]
    pub failed: String,
}

impl RunQuery {
    fn filter(&self, tz: Tz) -> ApiResult<RunFilter> {
        Ok(RunFilter {
            task_id: match self.task.trim() {
                "" => None,
                t => Some(TaskId(t.parse().map_err(|_| {
                    ApiError::field("task", "must be a task id (a number)")
                })?)),
            },
            state: match self.state.as_str() {
                "" => None,
                s => Some(
                    s.parse::<RunState>()
                        .map_err(|e| ApiError::field("state", e.to_string()))?,
                ),
            },
            scheduled_from: day_start("from", &self.from, tz, 0)?,
            scheduled_before: day_start("to", &self.to, tz, 1)?,
            after_id: match self.after.trim() {
                "" => None,
                a => Some(RunId(a.parse().map_err(|_| {
                    ApiError::field("after", "must be a run id (a number)")
                })?)),
            },
            ..Default::default()
        })
    }

    /// The list's URL query with the filters and one cursor (`cursor=` older, `after=` newer;
    /// neither: the newest page).
    fn query(&self, cursor: &str, after: &str) -> String {
        format!(
            "task={}&state={}&from={}&to={}&cursor={}&after={}",
            urlencode(&self.task),
            urlencode(&self.state),
            urlencode(&self.from),
            urlencode(&self.to),
            urlencode(cursor),
            urlencode(after)
        )
    }

    /// Whether the page asked for is the newest (the one refreshed live).
    fn newest(&self) -> bool {
        self.cursor.is_empty() && self.after.is_empty()
    }
}

/// The start (epoch ms) of the day `text` (`YYYY-MM-DD`) plus `days` days, in `tz`; `None` for
/// an empty field.
fn day_start(field: &str, text: &str, tz: Tz, days: u64) -> ApiResult<Option<i64>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let day = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.checked_add_days(chrono::Days::new(days)))
        .ok_or_else(|| {
            ApiError::field(field, format!("must be a day as YYYY-MM-DD (was {text:?})"))
        })?;
    let start = day
        .and_hms_opt(0, 0, 0)
        .and_then(|t| tz.from_local_datetime(&t).earliest())
        .ok_or_else(|| ApiError::field(field, format!("{text} has no midnight in {tz}")))?;
    Ok(Some(start.timestamp_millis()))
}

/// How long a run ran, from its start to its end: `850 ms`, `12.3 s`, `4 min 5 s`, `2 h 3 min`.
pub(super) fn fmt_duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// One row of the list.
#[derive(Debug, Clone)]
pub struct RunRow {
    pub id: i64,
    pub link: String,
    pub task: String,
    /// The task's page.
    pub task_link: String,
    pub state: String,
    pub state_label: String,
    pub trigger: String,
    pub attempt: i32,
    pub scheduled: String,
    pub finished: String,
    /// From its start to its end, for a finished run that started.
    pub duration: String,
    /// Percent, for a running run that reported progress.
    pub progress: Option<u8>,
    pub progress_message: String,
}

#[derive(Template)]
#[template(path = "runs.html")]
struct RunsPage {
    l: Layout,
    tasks: Vec<Opt>,
    states: Vec<Opt>,
    rows: Vec<RunRow>,
    q: RunQuery,
    /// Older, newer and newest pages (empty: none).
    next: String,
    newer: String,
    newest: String,
    /// The rows fragment the script refreshes (first page only; empty: not live).
    live: String,
    /// Rows have a checkbox for the bulk actions (roles that may operate).
    select: bool,
    /// What the bulk action just done did.
    outcome: super::bulk::Outcome,
}

#[derive(Template)]
#[template(path = "run_rows.html")]
struct RowsFragment {
    l: Layout,
    rows: Vec<RunRow>,
    select: bool,
}

/// The rows of a page, and the cursor of the next.
/// The rows of a page, the cursor of the next older one, whether newer runs than these exist
/// (known for pages reached with `after=`; the others are newest or below one), and the
/// tenant's task names.
struct Rows {
    rows: Vec<RunRow>,
    older: Option<String>,
    above: bool,
    names: Vec<(i64, String)>,
}

async fn page(ctx: &Ctx, l: &Layout, q: &RunQuery) -> ApiResult<Rows> {
    let filter = q.filter(ctx.tz)?;
    let cursor = (!q.cursor.is_empty()).then_some(q.cursor.as_str());
    // A page above a cursor reads one run more: when it comes, newer runs exist.
    let upwards = filter.after_id.is_some();
    let limit = if upwards { PAGE + 1 } else { PAGE };
    let mut page = runs::list(&ctx.services, &ctx.caller, &l.tenant, filter, cursor, limit).await?;
    let above = upwards && i64::try_from(page.items.len()).is_ok_and(|n| n > PAGE);
    if above {
        page.items.remove(0);
    }
    let older = if upwards {
        page.items.last().map(|r| runs::cursor_after(r.id.0))
    } else {
        page.next_cursor
    };
    let names = task_names(ctx, &l.tenant).await?;
    let rows = page
        .items
        .into_iter()
        .map(|r| row(ctx, l, &names, r))
        .collect();
    Ok(Rows {
        rows,
        older,
        above,
        names,
    })
}

/// The tenant's tasks (id, name), by name: for task filters and to name runs' tasks.
pub(super) async fn task_names(ctx: &Ctx, tenant: &str) -> ApiResult<Vec<(i64, String)>> {
    Ok(tasks::list(
        &ctx.services,
        &ctx.caller,
        tenant,
        &TaskFilter {
            limit: Some(1000),
            ..Default::default()
        },
    )
    .await?
    .into_iter()
    .map(|v| (v.task.id.0, v.task.name))
    .collect())
}

/// A task filter's choices: any task, then each by name; `selected` is the chosen id.
pub(super) fn task_options(tr: Tr, names: Vec<(i64, String)>, selected: &str) -> Vec<Opt> {
    let mut out = vec![Opt {
        value: String::new(),
        label: tr.t("filter.any"),
        selected: selected.trim().is_empty(),
    }];
    out.extend(names.into_iter().map(|(id, name)| Opt {
        selected: selected.trim() == id.to_string(),
        value: id.to_string(),
        label: name,
    }));
    out
}

/// The row of `r`, its task named from `names` (id, name).
pub(super) fn row(ctx: &Ctx, l: &Layout, names: &[(i64, String)], r: Run) -> RunRow {
    let task = names
        .iter()
        .find(|(id, _)| *id == r.task_id.0)
        .map_or_else(|| format!("#{}", r.task_id), |(_, n)| n.clone());
    RunRow {
        id: r.id.0,
        link: l.link(&format!("runs/{}", r.id)),
        task,
        task_link: l.link(&format!("tasks/{}", r.task_id)),
        state: r.state.to_string(),
        state_label: ctx.tr.t(&format!("state.{}", r.state)),
        trigger: ctx.tr.t(&format!("trigger.{}", r.trigger_kind)),
        attempt: r.attempt,
        scheduled: ctx.time(r.scheduled_at),
        finished: r.finished_at.map(|ms| ctx.time(ms)).unwrap_or_default(),
        duration: match (r.started_at, r.finished_at) {
            (Some(start), Some(end)) => fmt_duration(end - start),
            _ => String::new(),
        },
        progress: match (r.state, r.progress) {
            (RunState::Running, Some(p)) => Some((p.clamp(0.0, 1.0) * 100.0).round() as u8),
            (RunState::Running, None) => Some(0),
            _ => None,
        },
        progress_message: r.progress_message.unwrap_or_default(),
    }
}

async fn list(
    req: HttpRequest,
    tenant: web::Path<String>,
    q: web::Query<RunQuery>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let q = q.into_inner();
    let tenant = or_error!(ctx, ctx.tenant(&tenant).await);
    let l = or_error!(
        ctx,
        Layout::of(
            &ctx,
            &tenant,
            ctx.tr.t("runs.title"),
            super::bulk::without_outcome(&local_path(&req)),
            "runs"
        )
        .await
    );
    if let Ok(id) = q.run.trim().parse::<i64>() {
        return see_other(&l.link(&format!("runs/{id}")));
    }
    let Rows {
        rows,
        older,
        above,
        names,
    } = or_error!(ctx, page(&ctx, &l, &q).await);
    let list = l.link("runs");
    let next = older
        .map(|c| format!("{list}?{}", q.query(&c, "")))
        .unwrap_or_default();
    let newer = match rows.first() {
        Some(first) if !q.cursor.is_empty() || above => {
            format!("{list}?{}", q.query("", &first.id.to_string()))
        }
        _ => String::new(),
    };
    let newest = if q.newest() {
        String::new()
    } else {
        format!("{list}?{}", q.query("", ""))
    };
    let live = if q.newest() {
        format!("{}?{}", l.link("runs/rows"), q.query("", ""))
    } else {
        String::new()
    };
    let tasks = task_options(ctx.tr, names, &q.task);
    let states: Vec<&str> = RunState::ALL.iter().map(|s| s.as_str()).collect();
    let outcome = super::bulk::outcome(
        ctx.tr,
        "run",
        &["cancel", "rerun"],
        (&q.bulk, &q.done, &q.failed),
        |id| format!("{} #{id}", ctx.tr.t("runs.run")),
    );
    html(
        StatusCode::OK,
        &RunsPage {
            states: options(ctx.tr, "state.", &states, &q.state, Some("filter.any")),
            select: l.can_operate,
            outcome,
            l,
            tasks,
            rows,
            q,
            next,
            newer,
            newest,
            live,
        },
    )
}

/// `GET /t/{tenant}/runs/rows?…`: the rows of the first page, for live refreshes.
async fn rows_fragment(
    req: HttpRequest,
    tenant: web::Path<String>,
    q: web::Query<RunQuery>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let mut q = q.into_inner();
    q.cursor.clear();
    q.after.clear();
    let tenant = or_error!(ctx, ctx.tenant(&tenant).await);
    let l = or_error!(
        ctx,
        Layout::of(&ctx, &tenant, String::new(), local_path(&req), "runs").await
    );
    let rows = or_error!(ctx, page(&ctx, &l, &q).await).rows;
    html(
        StatusCode::OK,
        &RowsFragment {
            select: l.can_operate,
            l,
            rows,
        },
    )
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    l: Layout,
    r: RunRow,
    final_state: bool,
    /// The run's task, whose other attempts' events refresh the page too.
    task_id: i64,
    task_link: String,
    timeline: Vec<(String, String)>,
    /// Every attempt of the occurrence.
    rows: Vec<RunRow>,
    output: String,
    error: String,
    log_tail: String,
    action_base: String,
    /// (Rows have no checkbox here.)
    select: bool,
}

async fn detail(req: HttpRequest, path: web::Path<(String, i64)>) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, id) = path.into_inner();
    let tenant = or_error!(ctx, ctx.tenant(&tenant).await);
    let d = or_error!(
        ctx,
        runs::get(&ctx.services, &ctx.caller, &tenant.name, RunId(id)).await
    );
    let title = format!("{} {id} · {}", ctx.tr.t("runs.run"), d.task_name);
    let l = or_error!(
        ctx,
        Layout::of(&ctx, &tenant, title, local_path(&req), "runs").await
    );
    let names = vec![(d.run.task_id.0, d.task_name.clone())];
    let page = RunPage {
        final_state: d.run.state.is_final(),
        task_id: d.run.task_id.0,
        task_link: format!("{}?task={}", l.link("runs"), d.run.task_id),
        timeline: d
            .timeline
            .iter()
            .map(|(event, ms)| (ctx.tr.t(&format!("timeline.{event}")), ctx.time(*ms)))
            .collect(),
        rows: d
            .attempts
            .into_iter()
            .map(|r| row(&ctx, &l, &names, r))
            .collect(),
        output: d
            .run
            .output
            .as_ref()
            .map(|o| serde_json::to_string_pretty(&o.0).unwrap_or_default())
            .unwrap_or_default(),
        error: ctx.tr.msg(d.run.error.as_deref().unwrap_or_default()),
        log_tail: d.run.log_tail.clone(),
        action_base: l.link(&format!("runs/{id}")),
        select: false,
        r: row(&ctx, &l, &names, d.run),
        l,
    };
    html(StatusCode::OK, &page)
}

/// `POST /t/{tenant}/runs/{id}/{cancel|rerun}`: cancel after a confirmation step, back with
/// a message linking the run; a re-run opens the new run's page, which says it was made.
async fn act(
    req: HttpRequest,
    path: web::Path<(String, i64, String)>,
    form: web::Form<ConfirmForm>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, id, action) = path.into_inner();
    let (s, c) = (&ctx.services, &ctx.caller);
    let run_page = format!("/t/{}/runs/{id}", urlencode(&tenant));
    let back = match action.as_str() {
        "cancel" if !form.confirmed() => {
            let detail = ctx
                .tr
                .t("confirm.cancel_detail")
                .replace("{id}", &id.to_string());
            return confirm::ask(
                &ctx,
                &req,
                &tenant,
                Action::Operate,
                "runs",
                "confirm.cancel_title",
                detail,
                "runs.cancel",
                form.back_or(&run_page),
            )
            .await;
        }
        "cancel" => runs::cancel(s, c, &tenant, RunId(id), Some("cancelled in the console"))
            .await
            .map(|_| Done::Cancelled(id).on(&form.back_or(&run_page))),
        "rerun" => runs::rerun(s, c, &tenant, RunId(id)).await.map(|r| {
            Done::Triggered(r.id.0).on(&format!("/t/{}/runs/{}", urlencode(&tenant), r.id))
        }),
        _ => Err(ApiError::not_found(format!("run action {action:?}"))),
    };
    see_other(&or_error!(ctx, back))
}

/// `POST /t/{tenant}/runs/bulk`: `action` (`cancel`, `rerun`) on every run ticked (`id`);
/// a cancel asks first. Back on the list (its filters, posted along) saying how many runs it
/// was done to and naming each it failed for.
async fn bulk(
    req: HttpRequest,
    tenant: web::Path<String>,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let tenant = tenant.into_inner();
    let posted = Posted(&form);
    let action = match posted.value("action").as_str() {
        "cancel" => RunBulkAction::Cancel,
        "rerun" => RunBulkAction::Rerun,
        other => {
            return ctx.error(&ApiError::field(
                "action",
                format!("must be cancel or rerun (was {other:?})"),
            ));
        }
    };
    let name = match action {
        RunBulkAction::Cancel => "cancel",
        RunBulkAction::Rerun => "rerun",
    };
    let ids = or_error!(ctx, posted.ids());
    let filters = RunQuery {
        task: posted.value("task"),
        state: posted.value("state"),
        from: posted.value("from"),
        to: posted.value("to"),
        ..Default::default()
    };
    let back = format!("/t/{}/runs?{}", urlencode(&tenant), filters.query("", ""));
    if ids.is_empty() {
        // Refused as any bulk action is for a role that may not operate.
        or_error!(
            ctx,
            tenant_access(&ctx.services, &ctx.caller, &tenant, Action::Operate).await
        );
        return see_other(&format!("{back}&bulk=none"));
    }
    if action == RunBulkAction::Cancel && posted.value("confirm") != "yes" {
        let list = ids
            .iter()
            .map(|id| format!("#{id}"))
            .collect::<Vec<_>>()
            .join(", ");
        let detail = ctx
            .tr
            .t("confirm.bulk_cancel_detail")
            .replace("{n}", &ids.len().to_string())
            .replace("{ids}", &list);
        let mut fields = posted.id_fields();
        for key in ["action", "task", "state", "from", "to"] {
            fields.push((key.to_owned(), posted.value(key)));
        }
        return confirm::ask_carrying(
            &ctx,
            &req,
            &tenant,
            Action::Operate,
            "runs",
            ("confirm.bulk_cancel_title", "runs.cancel_selected"),
            detail,
            back,
            fields,
        )
        .await;
    }
    let ids: Vec<RunId> = ids.into_iter().map(RunId).collect();
    let outcomes = or_error!(
        ctx,
        bulk_service::bulk_runs(&ctx.services, &ctx.caller, &tenant, action, &ids).await
    );
    see_other(&format!(
        "{back}&{}",
        super::bulk::outcome_query(name, &outcomes)
    ))
}

//! `/t/{tenant}/runs`: runs newest first with filters in the URL and pages; the first page
//! refreshes its rows live (the script re-reads `/t/{tenant}/runs/rows` when a run event
//! arrives). `/t/{tenant}/runs/{id}`: a run's detail (timeline, attempts, output or error, log
//! tail) with cancel and re-run.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use mthpt_engine::run::{Run, RunFilter, RunId, RunState};
use mthpt_engine::task::{TaskFilter, TaskId};
use serde::Deserialize;

use super::confirm::{self, ConfirmForm};
use super::flash::Done;
use super::{Ctx, Layout, Opt, html, local_path, options, see_other, urlencode};
use crate::service::access::Action;
use crate::service::error::{ApiError, ApiResult};
use crate::service::{runs, tasks};
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}/runs", web::get().to(list))
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
    #[serde(default)]
    pub cursor: String,
}

impl RunQuery {
    fn filter(&self) -> ApiResult<RunFilter> {
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
            ..Default::default()
        })
    }

    fn query(&self, cursor: &str) -> String {
        format!(
            "task={}&state={}&cursor={}",
            urlencode(&self.task),
            urlencode(&self.state),
            urlencode(cursor)
        )
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
    next: String,
    /// The rows fragment the script refreshes (first page only; empty: not live).
    live: String,
}

#[derive(Template)]
#[template(path = "run_rows.html")]
struct RowsFragment {
    l: Layout,
    rows: Vec<RunRow>,
}

/// The rows of a page, and the cursor of the next.
async fn page(
    ctx: &Ctx,
    l: &Layout,
    q: &RunQuery,
) -> ApiResult<(Vec<RunRow>, Option<String>, Vec<(i64, String)>)> {
    let filter = q.filter()?;
    let cursor = (!q.cursor.is_empty()).then_some(q.cursor.as_str());
    let page = runs::list(&ctx.services, &ctx.caller, &l.tenant, filter, cursor, PAGE).await?;
    let names: Vec<(i64, String)> = tasks::list(
        &ctx.services,
        &ctx.caller,
        &l.tenant,
        &TaskFilter {
            limit: Some(1000),
            ..Default::default()
        },
    )
    .await?
    .into_iter()
    .map(|v| (v.task.id.0, v.task.name))
    .collect();
    let rows = page
        .items
        .into_iter()
        .map(|r| row(ctx, l, &names, r))
        .collect();
    Ok((rows, page.next_cursor, names))
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
            local_path(&req),
            "runs"
        )
        .await
    );
    let (rows, next, names) = or_error!(ctx, page(&ctx, &l, &q).await);
    let next = next
        .map(|c| format!("{}?{}", l.link("runs"), q.query(&c)))
        .unwrap_or_default();
    let live = if q.cursor.is_empty() {
        format!("{}?{}", l.link("runs/rows"), q.query(""))
    } else {
        String::new()
    };
    let mut tasks = vec![Opt {
        value: String::new(),
        label: ctx.tr.t("filter.any"),
        selected: q.task.is_empty(),
    }];
    tasks.extend(names.into_iter().map(|(id, name)| Opt {
        selected: q.task.trim() == id.to_string(),
        value: id.to_string(),
        label: name,
    }));
    let states: Vec<&str> = RunState::ALL.iter().map(|s| s.as_str()).collect();
    html(
        StatusCode::OK,
        &RunsPage {
            states: options(ctx.tr, "state.", &states, &q.state, Some("filter.any")),
            l,
            tasks,
            rows,
            next,
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
    let tenant = or_error!(ctx, ctx.tenant(&tenant).await);
    let l = or_error!(
        ctx,
        Layout::of(&ctx, &tenant, String::new(), local_path(&req), "runs").await
    );
    let (rows, _, _) = or_error!(ctx, page(&ctx, &l, &q).await);
    html(StatusCode::OK, &RowsFragment { l, rows })
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
        error: d.run.error.clone().unwrap_or_default(),
        log_tail: d.run.log_tail.clone(),
        action_base: l.link(&format!("runs/{id}")),
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

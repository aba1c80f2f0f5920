//! `/t/{tenant}/tasks`: the task list (search and filters in the URL, next fire, last result,
//! pause / resume / trigger), the task form (create, edit, and create from a copy of a task
//! with `?clone=<id>`; errors next to the fields), a task's delete (confirmed first), alarm
//! mute and unmute, and the schedule preview fragment the form shows live.

use std::collections::HashMap;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::TimeZone;
use mthpt_engine::run::{Run, RunFilter};
use mthpt_engine::schedule::describe::describe;
use mthpt_engine::task::{MisfirePolicy, OverlapPolicy, Routing, TaskFilter, TaskId};
use serde::Deserialize;

use super::confirm;
use super::flash::Done;
use super::task_form::{KINDS, TaskForm};
use super::{Ctx, Layout, Opt, html, local_path, options, safe_next, see_other, urlencode};
use crate::service::access::{Action, tenant_access};
use crate::service::bulk::BulkAction;
use crate::service::credentials::random_hex;
use crate::service::error::{ApiError, ApiResult, Code};
use crate::service::runs::{cursor_after, parse_cursor};
use crate::service::tasks::{self, TaskView};
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}/tasks", web::get().to(list))
        .route("/t/{tenant}/tasks/new", web::get().to(new_form))
        .route("/t/{tenant}/tasks/new", web::post().to(create))
        .route("/t/{tenant}/tasks/bulk", web::post().to(bulk))
        .route("/t/{tenant}/tasks/{id}/edit", web::get().to(edit_form))
        .route("/t/{tenant}/tasks/{id}/edit", web::post().to(update))
        .route("/t/{tenant}/tasks/{id}/{action}", web::post().to(act))
        .route("/t/{tenant}/schedule-preview", web::get().to(preview));
}

/// Tasks per page.
const PAGE: i64 = 100;
/// Fire times in the preview.
const PREVIEW_COUNT: usize = 5;

/// The list's filters, as they appear in the URL.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TaskQuery {
    #[serde(default)]
    pub q: String,
    /// `active`, `paused` or empty (both).
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub cursor: String,
    /// After a bulk action: the action (`pause`, `resume`, `trigger`; `none` when no task was
    /// selected), how many tasks it was done to, and `id:code` of each task it failed for.
    #[serde(default)]
    pub bulk: String,
    #[serde(default)]
    pub done: String,
    #[serde(default)]
    pub failed: String,
}

/// One row of the list.
#[derive(Debug, Clone)]
pub struct TaskRow {
    pub id: i64,
    pub name: String,
    pub handler: String,
    pub schedule: String,
    pub next_fire: String,
    pub last_state: String,
    pub last_label: String,
    pub last_at: String,
    pub last_link: String,
    pub paused: bool,
    pub detail_link: String,
    pub edit_link: String,
    pub runs_link: String,
    pub action_base: String,
}

#[derive(Template)]
#[template(path = "tasks.html")]
struct TasksPage {
    l: Layout,
    q: TaskQuery,
    statuses: Vec<Opt>,
    rows: Vec<TaskRow>,
    next: String,
    /// A fresh key per rendering: a trigger form sent twice fires once.
    trigger_key: String,
    /// The outcome of the bulk action just done (empty: none).
    bulk_result: String,
    /// The tasks the bulk action failed for, each with why.
    bulk_failures: Vec<String>,
}

async fn list(
    req: HttpRequest,
    tenant: web::Path<String>,
    q: web::Query<TaskQuery>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let q = q.into_inner();
    let tenant = or_error!(ctx, ctx.tenant(&tenant).await);
    let after = if q.cursor.is_empty() {
        None
    } else {
        Some(TaskId(or_error!(ctx, parse_cursor(&q.cursor))))
    };
    let filter = TaskFilter {
        paused: match q.status.as_str() {
            "active" => Some(false),
            "paused" => Some(true),
            _ => None,
        },
        name_contains: (!q.q.trim().is_empty()).then(|| q.q.trim().to_owned()),
        after_id: after,
        limit: Some(PAGE),
        ..Default::default()
    };
    let views = or_error!(
        ctx,
        tasks::list(&ctx.services, &ctx.caller, &tenant.name, &filter).await
    );
    let last = or_error!(ctx, last_results(&ctx, &tenant.name).await);
    let l = or_error!(
        ctx,
        Layout::of(
            &ctx,
            &tenant,
            ctx.tr.t("tasks.title"),
            local_path(&req),
            "tasks"
        )
        .await
    );
    let next = if views.len() as i64 >= PAGE {
        views
            .last()
            .map(|v| {
                format!(
                    "{}?q={}&status={}&cursor={}",
                    l.link("tasks"),
                    urlencode(&q.q),
                    urlencode(&q.status),
                    cursor_after(v.task.id.0)
                )
            })
            .unwrap_or_default()
    } else {
        String::new()
    };
    let now = ctx.services.now();
    let outcome = super::bulk::outcome(
        ctx.tr,
        "task",
        &["pause", "resume", "trigger"],
        (&q.bulk, &q.done, &q.failed),
        |id| {
            views
                .iter()
                .find(|v| v.task.id.0 == id)
                .map_or_else(|| format!("#{id}"), |v| v.task.name.clone())
        },
    );
    let (bulk_result, bulk_failures) = (outcome.summary, outcome.failures);
    let rows = views
        .iter()
        .map(|v| row(&ctx, &l, v, last.get(&v.task.id), now))
        .collect();
    html(
        StatusCode::OK,
        &TasksPage {
            statuses: options(
                ctx.tr,
                "tasks.status.",
                &["active", "paused"],
                &q.status,
                Some("filter.any"),
            ),
            l,
            q,
            rows,
            next,
            trigger_key: random_hex(8),
            bulk_result,
            bulk_failures,
        },
    )
}

/// `POST /t/{tenant}/tasks/bulk`: `action` (pause, resume, trigger) on every `id` posted;
/// back to the list (its `q` and `status`) saying what was done and what failed.
async fn bulk(
    req: HttpRequest,
    tenant: web::Path<String>,
    form: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let tenant = tenant.into_inner();
    let value = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let (action, name) = match value("action").as_str() {
        "pause" => (BulkAction::Pause, "pause"),
        "resume" => (BulkAction::Resume, "resume"),
        "trigger" => (BulkAction::Trigger, "trigger"),
        other => {
            return ctx.error(&ApiError::field(
                "action",
                format!("must be pause, resume or trigger (was {other:?})"),
            ));
        }
    };
    let mut ids = Vec::new();
    for (k, v) in form.iter() {
        if k == "id" {
            match v.parse() {
                Ok(id) => ids.push(TaskId(id)),
                Err(_) => {
                    return ctx.error(&ApiError::field("id", format!("{v:?} is not a task id")));
                }
            }
        }
    }
    let back = format!(
        "/t/{}/tasks?q={}&status={}",
        urlencode(&tenant),
        urlencode(&value("q")),
        urlencode(&value("status"))
    );
    if ids.is_empty() {
        // Refused as any other bulk action would be for a role that may not operate.
        or_error!(
            ctx,
            tenant_access(&ctx.services, &ctx.caller, &tenant, Action::Operate).await
        );
        return see_other(&format!("{back}&bulk=none"));
    }
    let outcomes = or_error!(
        ctx,
        crate::service::bulk::bulk(&ctx.services, &ctx.caller, &tenant, action, &ids).await
    );
    let done = outcomes.iter().filter(|o| o.error.is_none()).count();
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            o.error
                .as_ref()
                .map(|(code, _)| format!("{}:{}", o.task_id, code.as_str()))
        })
        .collect();
    see_other(&format!(
        "{back}&bulk={name}&done={done}&failed={}",
        urlencode(&failed.join(","))
    ))
}

/// The newest finished run of each task, among the tenant's latest finished runs.
async fn last_results(ctx: &Ctx, tenant: &str) -> ApiResult<HashMap<TaskId, Run>> {
    let page = crate::service::runs::list(
        &ctx.services,
        &ctx.caller,
        tenant,
        RunFilter {
            finished_from: Some(0),
            ..Default::default()
        },
        None,
        1000,
    )
    .await?;
    let mut last = HashMap::new();
    for run in page.items {
        last.entry(run.task_id).or_insert(run);
    }
    Ok(last)
}

fn row(ctx: &Ctx, l: &Layout, v: &TaskView, last: Option<&Run>, now: i64) -> TaskRow {
    let t = &v.task;
    let schedule = t.schedule().ok();
    let next_fire = match (&schedule, t.paused) {
        (Some(s), false) => s.next_after(now).map(|ms| ctx.time(ms)).unwrap_or_default(),
        _ => String::new(),
    };
    TaskRow {
        id: t.id.0,
        name: t.name.clone(),
        handler: format!("{} · {}", v.app_name, t.handler),
        schedule: schedule
            .map(|s| describe(&s, ctx.tr.lang().describe_language()))
            .unwrap_or_default(),
        next_fire,
        last_state: last.map(|r| r.state.to_string()).unwrap_or_default(),
        last_label: last
            .map(|r| ctx.tr.t(&format!("state.{}", r.state)))
            .unwrap_or_default(),
        last_at: last
            .and_then(|r| r.finished_at)
            .map(|ms| ctx.time(ms))
            .unwrap_or_default(),
        last_link: last
            .map(|r| l.link(&format!("runs/{}", r.id)))
            .unwrap_or_default(),
        paused: t.paused,
        detail_link: l.link(&format!("tasks/{}", t.id)),
        edit_link: l.link(&format!("tasks/{}/edit", t.id)),
        runs_link: format!("{}?task={}", l.link("runs"), t.id),
        action_base: l.link(&format!("tasks/{}", t.id)),
    }
}

#[derive(Debug, Deserialize)]
struct ActForm {
    back: Option<String>,
    key: Option<String>,
    /// `yes` once a delete is confirmed.
    confirm: Option<String>,
    /// How long a mute lasts (1, 4 or 24).
    hours: Option<String>,
}

/// `POST /t/{tenant}/tasks/{id}/{pause|resume|trigger|delete|mute|unmute}`. A delete asks
/// first and lands on the task list; the others come back to `back`.
async fn act(
    req: HttpRequest,
    path: web::Path<(String, i64, String)>,
    form: web::Form<ActForm>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, id, action) = path.into_inner();
    let (s, c, id) = (&ctx.services, &ctx.caller, TaskId(id));
    let done = match action.as_str() {
        "pause" => tasks::set_paused(s, c, &tenant, id, None, true)
            .await
            .map(|_| Done::Paused(id.0)),
        "resume" => tasks::set_paused(s, c, &tenant, id, None, false)
            .await
            .map(|_| Done::Resumed(id.0)),
        "trigger" => {
            let key = form.key.as_deref().filter(|k| !k.is_empty());
            let key = key.map(|k| format!("web-{id}-{k}"));
            tasks::trigger(s, c, &tenant, id, None, key.as_deref())
                .await
                .map(|t| Done::Triggered(t.run.id.0))
        }
        "delete" => return delete(&ctx, &req, &tenant, id, &form).await,
        "mute" => {
            let hours = form.hours.as_deref().unwrap_or_default();
            super::alarms::mute_for(&ctx, &tenant, id.0, hours).await
        }
        "unmute" => super::alarms::unmute(&ctx, &tenant, id.0).await,
        _ => Err(ApiError::not_found(format!("task action {action:?}"))),
    };
    let done = or_error!(ctx, done);
    see_other(&done.on(&safe_next(form.back.as_deref())))
}

/// A task's delete: the confirmation page first (naming the task), then the task list with
/// a message.
async fn delete(
    ctx: &Ctx,
    req: &HttpRequest,
    tenant: &str,
    id: TaskId,
    form: &ActForm,
) -> HttpResponse {
    if form.confirm.as_deref() != Some("yes") {
        let view = or_error!(
            ctx,
            tasks::get(&ctx.services, &ctx.caller, tenant, id).await
        );
        let detail = ctx
            .tr
            .t("confirm.delete_task_detail")
            .replace("{task}", &view.task.name);
        let back = match form.back.as_deref() {
            Some(b) if !b.is_empty() => safe_next(Some(b)),
            _ => format!("/t/{}/tasks/{id}", urlencode(tenant)),
        };
        return confirm::ask(
            ctx,
            req,
            tenant,
            Action::Administer,
            "tasks",
            "confirm.delete_task_title",
            detail,
            "task.delete",
            back,
        )
        .await;
    }
    or_error!(
        ctx,
        tasks::delete(&ctx.services, &ctx.caller, tenant, id, None).await
    );
    see_other(&Done::TaskDeleted(id.0).on(&format!("/t/{}/tasks", urlencode(tenant))))
}

#[derive(Template)]
#[template(path = "task_form.html")]
struct FormPage {
    l: Layout,
    f: TaskForm,
    action: String,
    apps: Vec<Opt>,
    /// Handlers the tenant's executors advertise (value: handler, label: its app), to suggest.
    handlers: Vec<Opt>,
    kinds: Vec<Opt>,
    misfire: Vec<Opt>,
    overlap: Vec<Opt>,
    routing: Vec<Opt>,
    preview: String,
    preview_url: String,
    /// The tenant's other tasks, to choose the parents from (at most [`PARENT_CHOICES`]).
    parent_opts: Vec<Opt>,
    parents_cut: bool,
}

/// The most tasks the form offers as parents.
const PARENT_CHOICES: i64 = 200;

fn names<T: std::fmt::Display>(all: &[T]) -> Vec<String> {
    all.iter().map(|v| v.to_string()).collect()
}

/// Renders the form (first view, or again with its errors).
async fn form_page(
    ctx: &Ctx,
    req: &HttpRequest,
    tenant: &str,
    f: TaskForm,
    id: Option<i64>,
    action: String,
    status: StatusCode,
) -> HttpResponse {
    // The form's own problems (and the service's) in the page's language.
    let mut f = f;
    for message in f.errors.values_mut() {
        *message = ctx.tr.msg(message);
    }
    f.general = ctx.tr.msg(&f.general);
    let (tenant, apps, others) = or_error!(
        ctx,
        tasks::form_choices(&ctx.services, &ctx.caller, tenant, PARENT_CHOICES + 1).await
    );
    let parents_cut = others.len() as i64 > PARENT_CHOICES;
    let parent_opts = others
        .iter()
        .take(PARENT_CHOICES as usize)
        .filter(|t| Some(t.id.0) != id)
        .map(|t| Opt {
            value: t.id.0.to_string(),
            label: t.name.clone(),
            selected: f.parents.contains(&t.id.0),
        })
        .collect();
    let title = if f.version.is_empty() {
        ctx.tr.t("form.new_title")
    } else {
        format!("{} {}", ctx.tr.t("form.edit_title"), f.v("name"))
    };
    let l = or_error!(
        ctx,
        Layout::of(ctx, &tenant, title, local_path(req), "tasks").await
    );
    let preview = match f.schedule(ctx.tz) {
        Ok(s) if f.v("schedule.kind") == "cron" && !f.v("schedule.expr").is_empty() => {
            preview_html(ctx, &tenant.name, &s).await
        }
        _ => String::new(),
    };
    let opts = |prefix: &str, all: &[String], field: &str| {
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        options(ctx.tr, prefix, &all, &f.v(field), None)
    };
    // Suggestions only: a handler no executor advertises yet may still be typed.
    let handlers =
        match crate::service::apps::executors(&ctx.services, &ctx.caller, &tenant.name, None).await
        {
            Ok((executors, apps)) => {
                let mut seen = std::collections::BTreeSet::new();
                for e in &executors {
                    let app = apps
                        .iter()
                        .find(|a| a.id == e.app_id)
                        .map(|a| a.name.clone())
                        .unwrap_or_default();
                    for h in e.handlers.0.iter() {
                        seen.insert((h.clone(), app.clone()));
                    }
                }
                seen.into_iter()
                    .map(|(h, app)| Opt {
                        value: h,
                        label: app,
                        selected: false,
                    })
                    .collect()
            }
            Err(_) => Vec::new(),
        };
    let app_names: Vec<String> = apps.iter().map(|a| a.name.clone()).collect();
    let apps = app_names
        .iter()
        .map(|n| Opt {
            value: n.clone(),
            label: n.clone(),
            selected: *n == f.v("app"),
        })
        .collect();
    let page = FormPage {
        kinds: opts("kind.", &names(&KINDS), "schedule.kind"),
        misfire: opts("misfire.", &names(MisfirePolicy::ALL), "misfire_policy"),
        overlap: opts("overlap.", &names(OverlapPolicy::ALL), "overlap_policy"),
        routing: opts("routing.", &names(Routing::ALL), "routing"),
        apps,
        handlers,
        preview,
        preview_url: l.link("schedule-preview"),
        parent_opts,
        parents_cut,
        action,
        l,
        f,
    };
    html(status, &page)
}

#[derive(Debug, Deserialize)]
struct NewQuery {
    /// A task to copy: the form starts from its definition, named `<name>-copy`.
    clone: Option<String>,
}

async fn new_form(
    req: HttpRequest,
    tenant: web::Path<String>,
    q: web::Query<NewQuery>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let action = format!("/t/{}/tasks/new", urlencode(&tenant));
    let f = match q.clone.as_deref().map(str::trim) {
        None | Some("") => TaskForm::blank(ctx.tz),
        Some(id) => {
            let id = or_error!(
                ctx,
                id.parse::<i64>()
                    .map_err(|_| ApiError::field("clone", format!("{id:?} is not a task id")))
            );
            or_error!(ctx, copy_of(&ctx, &tenant, TaskId(id)).await)
        }
    };
    form_page(&ctx, &req, &tenant, f, None, action, StatusCode::OK).await
}

/// The new-task form filled with task `id`'s definition, named `<name>-copy` (saving creates
/// a new task; the copy has no parents).
async fn copy_of(ctx: &Ctx, tenant: &str, id: TaskId) -> ApiResult<TaskForm> {
    let view = tasks::get(&ctx.services, &ctx.caller, tenant, id).await?;
    let mut spec = tasks::TaskSpec::of(&view.task, &view.app_name)?;
    spec.name = format!("{}-copy", spec.name);
    let mut f = TaskForm::of(&spec, 0, ctx.tz);
    f.version.clear();
    Ok(f)
}

async fn edit_form(req: HttpRequest, path: web::Path<(String, i64)>) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, id) = path.into_inner();
    let view = or_error!(
        ctx,
        tasks::get(&ctx.services, &ctx.caller, &tenant, TaskId(id)).await
    );
    let spec = or_error!(ctx, tasks::TaskSpec::of(&view.task, &view.app_name));
    let mut f = TaskForm::of(&spec, view.task.version, ctx.tz);
    let deps = or_error!(
        ctx,
        tasks::list_dependencies(&ctx.services, &ctx.caller, &tenant).await
    );
    f.parents = deps
        .iter()
        .filter(|d| d.child_task_id == TaskId(id))
        .map(|d| d.parent_task_id.0)
        .collect();
    let action = format!("/t/{}/tasks/{id}/edit", urlencode(&tenant));
    form_page(&ctx, &req, &tenant, f, Some(id), action, StatusCode::OK).await
}

/// Reads a posted form; the form again with its errors when it cannot be read or saved.
/// The task and its parents are saved in one transaction: a parent that cannot be set (a
/// cycle, a missing task) saves nothing and is shown next to the parents.
async fn save(
    req: HttpRequest,
    tenant: String,
    id: Option<i64>,
    input: Vec<(String, String)>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let mut f = TaskForm::posted_pairs(&input);
    let action = match id {
        Some(id) => format!("/t/{}/tasks/{id}/edit", urlencode(&tenant)),
        None => format!("/t/{}/tasks/new", urlencode(&tenant)),
    };
    let read = match f.read(ctx.tz) {
        (spec, problems) if problems.is_empty() => Ok(spec),
        (spec, mut problems) => {
            // What saving would refuse as well, in the fields the form could read: one
            // submission reports every error.
            let more = tasks::problems(&ctx.services, &ctx.caller, &tenant, &spec)
                .await
                .unwrap_or_default();
            for p in more {
                if !problems.iter().any(|q| same_input(&q.field, &p.field)) {
                    problems.push(p);
                }
            }
            Err(problems)
        }
    };
    let saved = match (read, f.errors.is_empty()) {
        (Err(problems), _) => Err(ApiError::fields(problems)),
        (Ok(_), false) => Err(ApiError::new(
            Code::ValidationFailed,
            ctx.tr.t("form.has_errors"),
        )),
        (Ok(spec), true) => save_in_one(&ctx, &tenant, id, &f, &spec).await,
    };
    match saved {
        Ok(view) => see_other(&Done::Saved(view.task.id.0).on(&format!(
            "/t/{}/tasks?q={}",
            urlencode(&tenant),
            urlencode(&view.task.name)
        ))),
        Err(e)
            if e.code == Code::ValidationFailed
                || e.code == Code::Conflict
                || e.code == Code::VersionConflict
                || e.code == Code::Cycle =>
        {
            // (Translated here: a problem of a field the form has no input for goes into the
            // general message with its field's name, which the page cannot translate later.)
            let e = ctx.tr.error(&e);
            if e.code == Code::Conflict && e.errors.is_empty() {
                f.errors.insert("name".to_owned(), e.detail.clone());
            } else if !e.errors.is_empty() || f.errors.is_empty() {
                // (Errors the form found itself are already next to their fields.)
                f.add_error(&e);
            }
            let status = crate::http::status_of(e.code);
            form_page(&ctx, &req, &tenant, f, id, action, status).await
        }
        Err(e) => ctx.error(&e),
    }
}

/// Whether two field names point at the same input (`schedule` and `schedule.expr` do).
fn same_input(a: &str, b: &str) -> bool {
    let head = |f: &str| f.split('.').next().unwrap_or_default().to_owned();
    a == b || (head(a) == "schedule" && head(b) == "schedule")
}

/// Creates or updates the task and sets its parents to the form's, in one transaction.
async fn save_in_one(
    ctx: &Ctx,
    tenant: &str,
    id: Option<i64>,
    f: &TaskForm,
    spec: &tasks::TaskSpec,
) -> ApiResult<TaskView> {
    let save = match id {
        None => tasks::Save::Create,
        Some(id) => tasks::Save::Update {
            id: TaskId(id),
            version: f.version.parse().ok(),
        },
    };
    let parents: Vec<TaskId> = f.parents.iter().map(|p| TaskId(*p)).collect();
    tasks::save_with_parents(&ctx.services, &ctx.caller, tenant, save, spec, &parents).await
}

async fn create(
    req: HttpRequest,
    tenant: web::Path<String>,
    input: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    save(req, tenant.into_inner(), None, input.into_inner()).await
}

async fn update(
    req: HttpRequest,
    path: web::Path<(String, i64)>,
    input: web::Form<Vec<(String, String)>>,
) -> HttpResponse {
    let (tenant, id) = path.into_inner();
    save(req, tenant, Some(id), input.into_inner()).await
}

#[derive(Template)]
#[template(path = "preview.html")]
struct PreviewFragment {
    error: String,
    zone: String,
    times: Vec<String>,
    words: String,
    zone_label: String,
    next_label: String,
}

/// The preview fragment of `schedule` (the next fire times in its zone, and its meaning).
async fn preview_html(ctx: &Ctx, tenant: &str, schedule: &tasks::ScheduleInput) -> String {
    let fragment = match tasks::preview(
        &ctx.services,
        &ctx.caller,
        tenant,
        Some(schedule),
        None,
        PREVIEW_COUNT,
        None,
    )
    .await
    {
        Ok(p) => PreviewFragment {
            error: String::new(),
            zone: p.timezone.name().to_owned(),
            times: p
                .fire_times
                .iter()
                .filter_map(|ms| p.timezone.timestamp_millis_opt(*ms).single())
                .map(|t| t.format("%Y-%m-%d %H:%M:%S %:z").to_string())
                .collect(),
            words: p
                .descriptions
                .iter()
                .find(|(tag, _)| *tag == ctx.tr.tag())
                .map(|(_, d)| d.clone())
                .unwrap_or_default(),
            zone_label: ctx.tr.t("preview.zone"),
            next_label: ctx.tr.t("preview.next"),
        },
        Err(e) => PreviewFragment {
            error: ctx.tr.error(&e).detail,
            zone: String::new(),
            times: Vec::new(),
            words: String::new(),
            zone_label: String::new(),
            next_label: String::new(),
        },
    };
    fragment.render().unwrap_or_default()
}

/// `GET /t/{tenant}/schedule-preview?schedule.kind=cron&schedule.expr=…`: the preview fragment.
async fn preview(
    req: HttpRequest,
    tenant: web::Path<String>,
    input: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let f = TaskForm::posted(&input);
    let body = match f.schedule(ctx.tz) {
        Ok(s) => preview_html(&ctx, &tenant, &s).await,
        Err(problems) => PreviewFragment {
            error: ctx.tr.error(&ApiError::fields(problems)).detail,
            zone: String::new(),
            times: Vec::new(),
            words: String::new(),
            zone_label: String::new(),
            next_label: String::new(),
        }
        .render()
        .unwrap_or_default(),
    };
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(body)
}

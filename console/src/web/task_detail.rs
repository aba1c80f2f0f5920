//! `/t/{tenant}/tasks/{id}`: one task — its settings in words, its latest runs, a chart of its
//! run durations and fire lateness over the last 24 hours, and its dependency graph (parents
//! and children, every node a link), with edit / clone / delete / run now / pause or resume /
//! mute or unmute its alarms as the role allows.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use chrono_tz::Tz;
use mthpt_engine::run::RunFilter;
use mthpt_engine::schedule::describe::describe;
use mthpt_engine::task::TaskId;

use super::charts::{self, Series, TimeChart};
use super::dag::{self, MAX_NODES, Node};
use super::i18n::Tr;
use super::runs::{RunRow, row as run_row};
use super::{Ctx, Layout, html, local_path};
use crate::service::credentials::random_hex;
use crate::service::error::ApiResult;
use crate::service::stats::{self, Stats};
use crate::service::tasks::{self, TaskView};
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}/tasks/{id}", web::get().to(detail));
}

/// Runs listed on the page.
const RUNS: i64 = 10;
/// The chart's range and bucket.
const CHART_RANGE_MS: i64 = 24 * 3_600_000;
const CHART_BUCKET_MS: i64 = 3_600_000;

/// A task linked from the page (a parent or a child).
#[derive(Debug, Clone)]
pub struct Linked {
    pub name: String,
    pub href: String,
}

#[derive(Template)]
#[template(path = "task.html")]
struct TaskPage {
    l: Layout,
    id: i64,
    paused: bool,
    /// (label, value) of the task's settings.
    settings: Vec<(String, String)>,
    rows: Vec<RunRow>,
    runs_link: String,
    /// The chart (SVG), or why there is none.
    chart: String,
    chart_note: String,
    /// The dependency graph (SVG), empty without dependencies.
    dag: String,
    dag_cut: bool,
    parents: Vec<Linked>,
    children: Vec<Linked>,
    edit_link: String,
    action_base: String,
    /// A fresh key per rendering: a trigger form sent twice fires once.
    trigger_key: String,
    /// The new-task form filled with a copy of this task.
    clone_link: String,
    /// Until when the task's alarms are muted (empty: not muted).
    muted_until: String,
    /// (Run rows have no checkbox here.)
    select: bool,
}

async fn detail(req: HttpRequest, path: web::Path<(String, i64)>) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, id) = path.into_inner();
    let tenant = or_error!(ctx, ctx.tenant(&tenant).await);
    let id = TaskId(id);
    let view = or_error!(
        ctx,
        tasks::get(&ctx.services, &ctx.caller, &tenant.name, id).await
    );
    let l = or_error!(
        ctx,
        Layout::of(
            &ctx,
            &tenant,
            view.task.name.clone(),
            local_path(&req),
            "tasks"
        )
        .await
    );
    let names = vec![(id.0, view.task.name.clone())];
    let runs = or_error!(
        ctx,
        crate::service::runs::list(
            &ctx.services,
            &ctx.caller,
            &tenant.name,
            RunFilter {
                task_id: Some(id),
                ..Default::default()
            },
            None,
            RUNS,
        )
        .await
    );
    let rows = runs
        .items
        .into_iter()
        .map(|r| run_row(&ctx, &l, &names, r))
        .collect();
    let now = ctx.services.now();
    let (chart, chart_note) = match stats::stats(
        &ctx.services,
        &ctx.caller,
        &tenant.name,
        Some(id),
        now - CHART_RANGE_MS,
        now,
        CHART_BUCKET_MS,
    )
    .await
    {
        Ok(s) if s.total.runs == 0 => (String::new(), ctx.tr.t("task.chart.none")),
        Ok(s) => match chart(ctx.tr, ctx.tz, &s) {
            Ok(svg) => (svg, String::new()),
            Err(e) => {
                tracing::warn!(error = %e, "the task chart could not be drawn");
                (String::new(), ctx.tr.t("task.chart.failed"))
            }
        },
        Err(e) => (String::new(), ctx.tr.error(&e).detail),
    };
    let graph = or_error!(ctx, graph(&ctx, &l, &tenant, id).await);
    let mutes = or_error!(
        ctx,
        crate::service::alarms::mutes(&ctx.services, &ctx.caller, &tenant.name).await
    );
    let muted_until = mutes
        .iter()
        .find(|m| m.task_id == id)
        .map(|m| ctx.time(m.muted_until))
        .unwrap_or_default();
    let page = TaskPage {
        id: id.0,
        paused: view.task.paused,
        settings: settings(&ctx, &view, now),
        rows,
        runs_link: format!("{}?task={id}", l.link("runs")),
        chart,
        chart_note,
        dag: graph.svg,
        dag_cut: graph.cut,
        parents: graph.parents,
        children: graph.children,
        edit_link: l.link(&format!("tasks/{id}/edit")),
        action_base: l.link(&format!("tasks/{id}")),
        trigger_key: random_hex(8),
        clone_link: format!("{}?clone={id}", l.link("tasks/new")),
        muted_until,
        select: false,
        l,
    };
    html(StatusCode::OK, &page)
}

/// The task's settings, in the page's language.
fn settings(ctx: &Ctx, v: &TaskView, now: i64) -> Vec<(String, String)> {
    let t = &v.task;
    let tr = ctx.tr;
    let schedule = t.schedule().ok();
    let mut out = vec![
        (
            tr.t("tasks.handler"),
            format!("{} · {}", v.app_name, t.handler),
        ),
        (
            tr.t("tasks.schedule"),
            schedule
                .as_ref()
                .map(|s| describe(s, tr.lang().describe_language()))
                .unwrap_or_default(),
        ),
        (
            tr.t("tasks.next_fire"),
            match (&schedule, t.paused) {
                (_, true) => tr.t("tasks.paused"),
                (Some(s), false) => s.next_after(now).map(|ms| ctx.time(ms)).unwrap_or_default(),
                (None, false) => String::new(),
            },
        ),
    ];
    if let Some(expr) = &t.cron_expr {
        out.push((
            tr.t("field.schedule.expr"),
            format!("{expr} ({})", t.timezone),
        ));
    }
    let mut field = |key: &str, value: String| out.push((tr.t(&format!("field.{key}")), value));
    field("routing", tr.t(&format!("routing.{}", t.routing)));
    field(
        "overlap_policy",
        tr.t(&format!("overlap.{}", t.overlap_policy)),
    );
    field(
        "misfire_policy",
        tr.t(&format!("misfire.{}", t.misfire_policy)),
    );
    field("max_retries", t.max_retries.to_string());
    field("retry_backoff_ms", t.retry_backoff_ms.to_string());
    field("retry_backoff_max_ms", t.retry_backoff_max_ms.to_string());
    let none = tr.t("task.none");
    let opt = |v: Option<i64>| v.map_or_else(|| none.clone(), |v| v.to_string());
    field("timeout_ms", opt(t.timeout_ms));
    field("start_timeout_ms", opt(t.start_timeout_ms));
    field("priority", t.priority.to_string());
    if !t.description.is_empty() {
        field("description", t.description.clone());
    }
    out
}

/// What the page shows of the task's dependencies.
struct Graph {
    svg: String,
    cut: bool,
    parents: Vec<Linked>,
    children: Vec<Linked>,
}

/// The task's ancestors and descendants (at most [`MAX_NODES`]) drawn as links.
async fn graph(
    ctx: &Ctx,
    l: &Layout,
    tenant: &mthpt_engine::tenant::Tenant,
    id: TaskId,
) -> ApiResult<Graph> {
    let deps = tasks::list_dependencies(&ctx.services, &ctx.caller, &tenant.name).await?;
    let (ids, edges, cut) = dag::around(&deps, id, MAX_NODES);
    let names: std::collections::HashMap<TaskId, String> =
        tasks::get_many(&ctx.services, &ctx.caller, &tenant.name, &ids)
            .await?
            .into_iter()
            .map(|t| (t.id, t.name))
            .collect();
    let nodes: Vec<Node> = ids
        .iter()
        .map(|task| Node {
            name: names
                .get(task)
                .cloned()
                .unwrap_or_else(|| format!("#{task}")),
            href: l.link(&format!("tasks/{task}")),
            current: *task == id,
        })
        .collect();
    let index = |t: TaskId| ids.iter().position(|x| *x == t);
    let linked = |t: TaskId| {
        index(t).and_then(|i| nodes.get(i)).map(|n| Linked {
            name: n.name.clone(),
            href: n.href.clone(),
        })
    };
    let parents = edges
        .iter()
        .filter(|(_, c)| *c == id)
        .filter_map(|(p, _)| linked(*p))
        .collect();
    let children = edges
        .iter()
        .filter(|(p, _)| *p == id)
        .filter_map(|(_, c)| linked(*c))
        .collect();
    let svg = if edges.is_empty() {
        String::new()
    } else {
        let at: Vec<(usize, usize)> = edges
            .iter()
            .filter_map(|(p, c)| Some((index(*p)?, index(*c)?)))
            .collect();
        dag::svg(&nodes, &at, &ctx.tr.t("task.dag"))
    };
    Ok(Graph {
        svg,
        cut,
        parents,
        children,
    })
}

/// Duration and fire lateness (p95 of each hour) over the range of `s`, as SVG: the console's
/// themed line chart (text in the page's colour, dark mode included; an hour with a value
/// between two without is drawn as a point).
fn chart(tr: Tr, tz: Tz, s: &Stats) -> Result<String, String> {
    let half = s.bucket_ms / 2;
    let p95 = |pick: fn(&stats::Bucket) -> Option<i64>| -> Vec<(i64, Option<f64>)> {
        s.buckets
            .iter()
            .map(|b| (b.start + half, pick(b).map(|v| v as f64)))
            .collect()
    };
    let series = [
        Series {
            label: tr.t("task.chart.duration"),
            class: "duration".to_owned(),
            points: p95(|b| b.duration_ms.as_ref().map(|d| d.p95)),
        },
        Series {
            label: tr.t("task.chart.lateness"),
            class: "lateness".to_owned(),
            points: p95(|b| b.lateness_ms.as_ref().map(|d| d.p95)),
        },
    ];
    let title = tr.t("task.chart");
    let y_label = tr.t("task.chart.ms");
    let svg = charts::time_series(
        &TimeChart {
            title: &title,
            y_label: &y_label,
            from_ms: s.from,
            to_ms: s.to,
            tz,
            y_max: None,
        },
        &series,
    );
    if svg.is_empty() {
        Err("the chart could not be drawn".to_owned())
    } else {
        Ok(svg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::i18n::Lang;
    use mthpt_engine::run::RunState;
    use mthpt_engine::store::RunSample;

    #[test]
    fn the_chart_is_an_svg_image_with_both_series_named() {
        let hour = CHART_BUCKET_MS;
        let samples: Vec<RunSample> = (0..24)
            .map(|i| RunSample {
                id: mthpt_engine::run::RunId(i + 1),
                task_id: TaskId(1),
                state: RunState::Succeeded,
                scheduled_at: i * hour,
                due_at: i * hour,
                started_at: Some(i * hour + 20 * i),
                finished_at: Some(i * hour + 20 * i + 1_000 + 50 * i),
            })
            .collect();
        let s = stats::summarise(&samples, 0, CHART_RANGE_MS, hour, Some(TaskId(1)));
        let svg = chart(Tr::new(Lang::Zh), chrono_tz::Asia::Shanghai, &s).unwrap();
        assert!(
            svg.starts_with("<svg class=\"chart\" role=\"img\" aria-label=\""),
            "{svg}"
        );
        assert!(
            !svg.contains("#FFFFFF"),
            "no white background in dark mode: {svg}"
        );
        assert!(svg.contains("运行时长") && svg.contains("触发延迟"));
        assert!(svg.contains("08:00"), "hours are in the user's zone");
        assert!(
            svg.matches("<polyline").count() >= 2,
            "both series are drawn"
        );
    }

    #[test]
    fn runs_all_in_one_hour_are_drawn_as_points() {
        let hour = CHART_BUCKET_MS;
        let samples: Vec<RunSample> = (0..3)
            .map(|i| RunSample {
                id: mthpt_engine::run::RunId(i + 1),
                task_id: TaskId(1),
                state: RunState::Succeeded,
                scheduled_at: 5 * hour + i * 1_000,
                due_at: 5 * hour + i * 1_000,
                started_at: Some(5 * hour + i * 1_000 + 10),
                finished_at: Some(5 * hour + i * 1_000 + 400),
            })
            .collect();
        let s = stats::summarise(&samples, 0, CHART_RANGE_MS, hour, Some(TaskId(1)));
        let svg = chart(Tr::new(Lang::En), chrono_tz::UTC, &s).unwrap();
        assert!(
            svg.matches("<circle").count() >= 2,
            "one hour with runs is a point per series: {svg}"
        );
    }
}

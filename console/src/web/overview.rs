//! `/t/{tenant}`: the overview of a tenant over the last hour, day or week (`?range=1h|24h|7d`):
//! finished runs per bucket by final state, success rate and fire lateness (charts drawn on the
//! server, [`charts`](super::charts)), the tasks failing most, open alarms, live executors per
//! app and, for operators, live engine nodes.
//!
//! Every figure comes from a service the REST API uses too, each read bounded: the statistics
//! (`service::stats`, which refuses a range holding too many runs — its message then stands
//! in place of the charts), the newest failed runs of the range (at most [`FAILED_SAMPLE`] per
//! failing state), the names of the few tasks shown (one lookup by id each, at most
//! [`FAILING_SHOWN`]), the newest open alarms, the executors and the nodes.

use std::collections::HashMap;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use mthpt_engine::alarm::AlarmFilter;
use mthpt_engine::app::ExecutorState;
use mthpt_engine::node::NodeState;
use mthpt_engine::run::{RunFilter, RunState};
use mthpt_engine::task::TaskId;
use serde::Deserialize;

use super::charts::{Series, TimeChart, time_series};
use super::{Ctx, Layout, html, local_path};
use crate::service::error::{ApiError, ApiResult, Code};
use crate::service::stats::{Percentiles, Stats, stats};
use crate::service::{alarms, apps, nodes, runs, tasks};
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}", web::get().to(overview));
}

/// The newest failed runs of each failing state read to rank the failing tasks.
pub const FAILED_SAMPLE: i64 = 500;
/// The failing tasks shown.
pub const FAILING_SHOWN: usize = 8;
/// The open alarms listed.
const ALARMS_SHOWN: i64 = 5;
/// The states counted as a failure.
const FAILING: [RunState; 3] = [RunState::Failed, RunState::TimedOut, RunState::Lost];

/// A range of the overview: its name in the URL, its length and its bucket (each range has
/// at most about 100 buckets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub name: &'static str,
    pub ms: i64,
    pub bucket_ms: i64,
}

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;

/// The ranges offered, the first being the default.
pub const RANGES: [Range; 3] = [
    Range {
        name: "1h",
        ms: HOUR,
        bucket_ms: MINUTE,
    },
    Range {
        name: "24h",
        ms: 24 * HOUR,
        bucket_ms: 15 * MINUTE,
    },
    Range {
        name: "7d",
        ms: 7 * 24 * HOUR,
        bucket_ms: 2 * HOUR,
    },
];

impl Range {
    /// The range named in the URL (none: the first).
    pub fn named(name: &str) -> ApiResult<Range> {
        match name {
            "" => Ok(RANGES[0]),
            n => RANGES
                .iter()
                .find(|r| r.name == n)
                .copied()
                .ok_or_else(|| ApiError::field("range", "must be 1h, 24h or 7d")),
        }
    }

    /// `(from, to)` ending at the end of the bucket holding `now`.
    pub fn window(self, now: i64) -> (i64, i64) {
        let to = (now.div_euclid(self.bucket_ms) + 1) * self.bucket_ms;
        (to - self.ms, to)
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct OverviewQuery {
    #[serde(default)]
    pub range: String,
}

/// A link to another range.
#[derive(Debug, Clone)]
pub struct RangeLink {
    pub label: String,
    pub href: String,
    pub current: bool,
}

/// A task failing in the range.
#[derive(Debug, Clone)]
pub struct FailingTask {
    pub name: String,
    pub failures: usize,
    pub last: String,
    pub runs_link: String,
}

/// An open alarm.
#[derive(Debug, Clone)]
pub struct AlarmLine {
    pub severity: String,
    pub severity_label: String,
    pub message: String,
    pub at: String,
    pub link: String,
}

/// Executor instances of one app.
#[derive(Debug, Clone)]
pub struct AppExecutors {
    pub app: String,
    /// Up: taking runs. A draining instance takes none, so it is not counted here.
    pub live: usize,
    pub draining: usize,
    /// "2 draining".
    pub draining_label: String,
    pub total: usize,
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    l: Layout,
    ranges: Vec<RangeLink>,
    /// The statistics service's refusal, shown in place of the charts (empty: charts).
    stats_error: String,
    total_runs: u64,
    success_rate: String,
    lateness_p99: String,
    runs_chart: String,
    success_chart: String,
    lateness_chart: String,
    failing: Vec<FailingTask>,
    /// The failure sample was full: the ranking is of the newest failures only.
    failing_sampled: bool,
    alarms: Vec<AlarmLine>,
    executors: Vec<AppExecutors>,
    /// `(live, total)` engine nodes, for operators.
    nodes: Option<(usize, usize)>,
}

async fn overview(
    req: HttpRequest,
    tenant: web::Path<String>,
    q: web::Query<OverviewQuery>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let tenant = or_error!(ctx, ctx.tenant(&tenant).await);
    let range = or_error!(ctx, Range::named(&q.range));
    let l = or_error!(
        ctx,
        Layout::of(
            &ctx,
            &tenant,
            ctx.tr.t("overview.title"),
            local_path(&req),
            "overview"
        )
        .await
    );
    let (from, to) = range.window(ctx.services.now());
    let figures = stats(
        &ctx.services,
        &ctx.caller,
        &tenant.name,
        None,
        from,
        to,
        range.bucket_ms,
    )
    .await;
    let (failing, failing_sampled) = or_error!(ctx, failing_tasks(&ctx, &l, from, to).await);
    let alarms = or_error!(ctx, open_alarms(&ctx, &l).await);
    let (list, apps) = or_error!(
        ctx,
        apps::executors(&ctx.services, &ctx.caller, &tenant.name, None).await
    );
    let executors = apps
        .iter()
        .map(|a| {
            let mine: Vec<_> = list.iter().filter(|e| e.app_id == a.id).collect();
            let draining = mine
                .iter()
                .filter(|e| e.state == ExecutorState::Draining)
                .count();
            AppExecutors {
                app: a.name.clone(),
                live: mine.iter().filter(|e| e.state == ExecutorState::Up).count(),
                draining,
                draining_label: ctx
                    .tr
                    .t("overview.draining")
                    .replace("{n}", &draining.to_string()),
                total: mine.len(),
            }
        })
        .collect();
    let nodes = match nodes::list(&ctx.services, &ctx.caller).await {
        Ok(all) => Some((
            all.iter()
                .filter(|n| matches!(n.state, NodeState::Up | NodeState::Draining))
                .count(),
            all.len(),
        )),
        Err(e) if e.code == Code::Forbidden => None,
        Err(e) => return ctx.error(&e),
    };
    let ranges = RANGES
        .iter()
        .map(|r| RangeLink {
            label: ctx.tr.t(&format!("overview.range.{}", r.name)),
            href: format!("{}?range={}", l.link_home(), r.name),
            current: *r == range,
        })
        .collect();
    let mut page = OverviewPage {
        l,
        ranges,
        stats_error: String::new(),
        total_runs: 0,
        success_rate: String::new(),
        lateness_p99: String::new(),
        runs_chart: String::new(),
        success_chart: String::new(),
        lateness_chart: String::new(),
        failing,
        failing_sampled,
        alarms,
        executors,
        nodes,
    };
    match figures {
        Ok(s) => draw(&ctx, &mut page, &s),
        Err(e) => {
            if e.code == Code::Internal {
                tracing::error!(error = ?e.internal, detail = %e.detail, "overview statistics failed");
                page.stats_error = ctx.tr.t("overview.stats_unavailable");
            } else {
                page.stats_error = ctx.tr.error(&e).detail;
            }
        }
    }
    html(StatusCode::OK, &page)
}

/// The figures and charts of `s`.
fn draw(ctx: &Ctx, page: &mut OverviewPage, s: &Stats) {
    let tr = ctx.tr;
    page.total_runs = s.total.runs;
    page.success_rate = s
        .total
        .success_rate
        .map(|r| format!("{:.1} %", r * 100.0))
        .unwrap_or_else(|| "–".to_owned());
    page.lateness_p99 = s
        .total
        .lateness_ms
        .map(|p| format!("{} ms", p.p99))
        .unwrap_or_else(|| "–".to_owned());
    // Runs by final state: the states that occurred, succeeded and failed always.
    let states: Vec<RunState> = RunState::ALL
        .iter()
        .copied()
        .filter(|st| st.is_final())
        .filter(|st| {
            matches!(st, RunState::Succeeded | RunState::Failed)
                || s.total.by_state.get(st.as_str()).is_some_and(|n| *n > 0)
        })
        .collect();
    let by_state: Vec<Series> = states
        .iter()
        .map(|st| Series {
            label: tr.t(&format!("state.{st}")),
            class: st.to_string(),
            points: s
                .buckets
                .iter()
                .map(|b| {
                    let n = b.by_state.get(st.as_str()).copied().unwrap_or(0);
                    (b.start, Some(n as f64))
                })
                .collect(),
        })
        .collect();
    page.runs_chart = chart(ctx, s, "runs", "runs", None, &by_state);

    let rate = [Series {
        label: tr.t("overview.success_rate"),
        class: "succeeded".to_owned(),
        points: s
            .buckets
            .iter()
            .map(|b| (b.start, b.success_rate.map(|r| r * 100.0)))
            .collect(),
    }];
    page.success_chart = chart(ctx, s, "success", "percent", Some(100.0), &rate);

    type Pick = fn(Percentiles) -> i64;
    let pickers: [(&str, Pick); 2] = [("p50", |p| p.p50), ("p99", |p| p.p99)];
    let lateness = pickers
        .into_iter()
        .map(|(name, pick)| Series {
            label: name.to_owned(),
            class: format!("lateness-{name}"),
            points: s
                .buckets
                .iter()
                .map(|b| (b.start, b.lateness_ms.map(|p| pick(p) as f64)))
                .collect(),
        })
        .collect::<Vec<_>>();
    page.lateness_chart = chart(ctx, s, "lateness", "ms", None, &lateness);
}

/// The chart `overview.chart.{name}` of `series` over the range of `s`, its vertical axis
/// described by `overview.axis.{axis}`.
fn chart(
    ctx: &Ctx,
    s: &Stats,
    name: &str,
    axis: &str,
    y_max: Option<f64>,
    series: &[Series],
) -> String {
    let title = ctx.tr.t(&format!("overview.chart.{name}"));
    let y_label = ctx.tr.t(&format!("overview.axis.{axis}"));
    time_series(
        &TimeChart {
            title: &title,
            y_label: &y_label,
            from_ms: s.from,
            to_ms: s.to,
            tz: ctx.tz,
            y_max,
        },
        series,
    )
}

/// The tasks with the most failed runs scheduled in `from..to`, most first, from the newest
/// [`FAILED_SAMPLE`] runs of each failing state; and whether a sample was full.
async fn failing_tasks(
    ctx: &Ctx,
    l: &Layout,
    from: i64,
    to: i64,
) -> ApiResult<(Vec<FailingTask>, bool)> {
    // task → (failures, newest failure's finish)
    let mut counts: HashMap<TaskId, (usize, i64)> = HashMap::new();
    let mut sampled = false;
    for state in FAILING {
        let page = runs::list(
            &ctx.services,
            &ctx.caller,
            &l.tenant,
            RunFilter {
                state: Some(state),
                scheduled_from: Some(from),
                scheduled_before: Some(to),
                ..Default::default()
            },
            None,
            FAILED_SAMPLE,
        )
        .await?;
        sampled |= page.next_cursor.is_some();
        for run in page.items {
            let at = run.finished_at.unwrap_or(run.scheduled_at);
            let entry = counts.entry(run.task_id).or_insert((0, at));
            entry.0 += 1;
            entry.1 = entry.1.max(at);
        }
    }
    let mut ranked: Vec<(TaskId, usize, i64)> =
        counts.into_iter().map(|(t, (n, at))| (t, n, at)).collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)));
    ranked.truncate(FAILING_SHOWN);
    let mut out = Vec::with_capacity(ranked.len());
    for (id, failures, at) in ranked {
        let name = match tasks::get(&ctx.services, &ctx.caller, &l.tenant, id).await {
            Ok(v) => v.task.name,
            Err(e) if e.code == Code::NotFound => format!("#{id}"),
            Err(e) => return Err(e),
        };
        out.push(FailingTask {
            name,
            failures,
            last: ctx.time(at),
            runs_link: format!("{}?task={id}", l.link("runs")),
        });
    }
    Ok((out, sampled))
}

/// The newest open alarms.
async fn open_alarms(ctx: &Ctx, l: &Layout) -> ApiResult<Vec<AlarmLine>> {
    let page = alarms::list(
        &ctx.services,
        &ctx.caller,
        &l.tenant,
        AlarmFilter {
            unacknowledged: true,
            muted: Some(false),
            ..Default::default()
        },
        None,
        ALARMS_SHOWN,
    )
    .await?;
    Ok(page
        .items
        .into_iter()
        .map(|v| {
            let a = v.alarm;
            AlarmLine {
                severity: a.severity.to_string(),
                severity_label: ctx.tr.t(&format!("severity.{}", a.severity)),
                message: ctx.tr.msg(&a.message),
                at: ctx.time(a.last_seen.unwrap_or(a.created_at)),
                link: match a.run_id {
                    Some(r) => l.link(&format!("runs/{r}")),
                    None => l.link("alarms?status=open"),
                },
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_have_at_most_about_a_hundred_buckets_and_end_after_now() {
        for r in RANGES {
            assert!(r.ms / r.bucket_ms <= 120, "{}", r.name);
            let (from, to) = r.window(1_000_000_123);
            assert_eq!(to - from, r.ms);
            assert!(to > 1_000_000_123 && to - r.bucket_ms <= 1_000_000_123);
            assert_eq!(from % r.bucket_ms, 0);
        }
        assert_eq!(Range::named("").unwrap().name, "1h");
        assert_eq!(Range::named("7d").unwrap().name, "7d");
        assert!(Range::named("1y").is_err());
    }
}

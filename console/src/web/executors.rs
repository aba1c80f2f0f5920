//! `/t/{tenant}/executors`: a tenant's apps and, per app, its executor instances (the wrappers
//! that registered): state, capacity, load, handlers, labels, heartbeat age; drain (confirmed
//! first) and undrain, its undo. `/t/{tenant}/executors/{id}`: one instance with the runs sent
//! to it and the alarms about it.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;

use mthpt_engine::alarm::AlarmFilter;
use mthpt_engine::app::{Executor, ExecutorId, ExecutorState};
use mthpt_engine::run::RunFilter;

use super::alarms::AlarmRow;
use super::confirm::{self, ConfirmForm};
use super::flash::Done;
use super::i18n::Tr;
use super::runs::RunRow;
use super::{Ctx, Layout, html, local_path, see_other, urlencode};
use crate::service::access::Action;
use crate::service::error::ApiError;
use crate::service::{alarms, apps, runs};
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}/executors", web::get().to(list))
        .route("/t/{tenant}/executors/{id}", web::get().to(detail))
        .route("/t/{tenant}/executors/{id}/drain", web::post().to(drain))
        .route(
            "/t/{tenant}/executors/{id}/undrain",
            web::post().to(undrain),
        );
}

/// How long ago `then` was at `now` (epoch ms), in words: "3 s ago", "5 min ago", …
pub fn age(tr: Tr, now: i64, then: i64) -> String {
    let s = (now - then).max(0) / 1000;
    let (n, key) = match s {
        0..60 => (s, "age.seconds"),
        60..3600 => (s / 60, "age.minutes"),
        3600..86_400 => (s / 3600, "age.hours"),
        _ => (s / 86_400, "age.days"),
    };
    tr.t(key).replace("{n}", &n.to_string())
}

/// One executor instance.
#[derive(Debug, Clone)]
pub struct ExecutorRow {
    pub id: i64,
    pub instance_id: String,
    pub base_url: String,
    pub state: String,
    pub state_label: String,
    pub capacity: i32,
    pub running: i32,
    pub handlers: String,
    pub labels: Vec<(String, String)>,
    pub heartbeat_age: String,
    pub heartbeat_at: String,
    /// Draining with an undrain asked for (up at its next heartbeat).
    pub undrain_requested: bool,
    pub drain_action: String,
    pub undrain_action: String,
    /// The instance's own page.
    pub detail_link: String,
}

impl ExecutorRow {
    /// The row of `e` on a page framed by `l`, at `now`.
    pub fn of(ctx: &Ctx, l: &Layout, e: &Executor, now: i64) -> ExecutorRow {
        ExecutorRow {
            id: e.id.0,
            instance_id: e.instance_id.clone(),
            base_url: e.base_url.clone(),
            state: e.state.to_string(),
            state_label: ctx.tr.t(&format!("executor.state.{}", e.state)),
            capacity: e.capacity,
            running: e.running,
            handlers: e.handlers.0.join(", "),
            labels: e
                .labels
                .0
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            heartbeat_age: age(ctx.tr, now, e.last_heartbeat_at),
            heartbeat_at: ctx.time(e.last_heartbeat_at),
            undrain_requested: e.state == ExecutorState::Draining && e.undrain_requested,
            drain_action: l.link(&format!("executors/{}/drain", e.id.0)),
            undrain_action: l.link(&format!("executors/{}/undrain", e.id.0)),
            detail_link: l.link(&format!("executors/{}", e.id.0)),
        }
    }
}

/// An app and its instances.
#[derive(Debug, Clone)]
pub struct AppGroup {
    pub name: String,
    pub executors: Vec<ExecutorRow>,
}

#[derive(Template)]
#[template(path = "executors.html")]
struct ExecutorsPage {
    l: Layout,
    apps: Vec<AppGroup>,
}

async fn list(req: HttpRequest, tenant: web::Path<String>) -> HttpResponse {
    let ctx = page_ctx!(req);
    let tenant = or_error!(ctx, ctx.tenant(&tenant).await);
    let (executors, apps) = or_error!(
        ctx,
        apps::executors(&ctx.services, &ctx.caller, &tenant.name, None).await
    );
    let title = ctx.tr.t("executors.title");
    let l = or_error!(
        ctx,
        Layout::of(&ctx, &tenant, title, local_path(&req), "executors").await
    );
    let now = ctx.services.now();
    let groups = apps
        .into_iter()
        .map(|app| AppGroup {
            executors: executors
                .iter()
                .filter(|e| e.app_id == app.id)
                .map(|e| ExecutorRow::of(&ctx, &l, e, now))
                .collect(),
            name: app.name,
        })
        .collect();
    html(StatusCode::OK, &ExecutorsPage { l, apps: groups })
}

/// Runs and alarms listed on an instance's page.
const DETAIL_ROWS: i64 = 20;

#[derive(Template)]
#[template(path = "executor.html")]
struct ExecutorPage {
    l: Layout,
    app: String,
    e: ExecutorRow,
    /// The newest runs sent to this instance.
    rows: Vec<RunRow>,
    runs_more: bool,
    /// The newest alarms about it.
    alarms: Vec<AlarmRow>,
    /// (Run rows have no checkbox here.)
    select: bool,
}

/// `GET /t/{tenant}/executors/{id}`: one instance — app, address, state, heartbeat, load,
/// handlers and labels; the newest runs sent to it and alarms about it; drain or undrain.
async fn detail(req: HttpRequest, path: web::Path<(String, i64)>) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, id) = path.into_inner();
    let tenant = or_error!(ctx, ctx.tenant(&tenant).await);
    let (list, apps) = or_error!(
        ctx,
        apps::executors(&ctx.services, &ctx.caller, &tenant.name, None).await
    );
    let Some(e) = list.into_iter().find(|e| e.id.0 == id) else {
        return ctx.error(&ApiError::not_found(format!("executor {id}")));
    };
    let app = apps
        .iter()
        .find(|a| a.id == e.app_id)
        .map_or_else(|| e.app_id.to_string(), |a| a.name.clone());
    let title = format!("{} {}", ctx.tr.t("executors.instance"), e.instance_id);
    let l = or_error!(
        ctx,
        Layout::of(&ctx, &tenant, title, local_path(&req), "executors").await
    );
    let page = or_error!(
        ctx,
        runs::list(
            &ctx.services,
            &ctx.caller,
            &tenant.name,
            RunFilter {
                executor_id: Some(ExecutorId(id)),
                ..Default::default()
            },
            None,
            DETAIL_ROWS,
        )
        .await
    );
    let names = or_error!(ctx, super::runs::task_names(&ctx, &tenant.name).await);
    let runs_more = page.next_cursor.is_some();
    let rows = page
        .items
        .into_iter()
        .map(|r| super::runs::row(&ctx, &l, &names, r))
        .collect();
    let alarms = or_error!(
        ctx,
        alarms::list(
            &ctx.services,
            &ctx.caller,
            &tenant.name,
            AlarmFilter {
                executor_id: Some(ExecutorId(id)),
                ..Default::default()
            },
            None,
            DETAIL_ROWS,
        )
        .await
    )
    .items
    .into_iter()
    .map(|v| super::alarms::row(&ctx, &l, v.alarm))
    .collect();
    let now = ctx.services.now();
    html(
        StatusCode::OK,
        &ExecutorPage {
            e: ExecutorRow::of(&ctx, &l, &e, now),
            app,
            rows,
            runs_more,
            alarms,
            select: false,
            l,
        },
    )
}

/// `POST /t/{tenant}/executors/{id}/drain`: after a confirmation step; back with a message
/// that offers the undrain.
async fn drain(
    req: HttpRequest,
    path: web::Path<(String, i64)>,
    form: web::Form<ConfirmForm>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, id) = path.into_inner();
    let back = form.back_or(&format!("/t/{}/executors", urlencode(&tenant)));
    if !form.confirmed() {
        let (list, apps) = or_error!(
            ctx,
            apps::executors(&ctx.services, &ctx.caller, &tenant, None).await
        );
        let Some(e) = list.iter().find(|e| e.id.0 == id) else {
            return ctx.error(&ApiError::not_found(format!("executor {id}")));
        };
        let app = apps
            .iter()
            .find(|a| a.id == e.app_id)
            .map_or("", |a| a.name.as_str());
        let detail = ctx
            .tr
            .t("confirm.drain_detail")
            .replace("{instance}", &e.instance_id)
            .replace("{app}", app);
        return confirm::ask(
            &ctx,
            &req,
            &tenant,
            Action::Operate,
            "executors",
            "confirm.drain_title",
            detail,
            "executors.drain",
            back,
        )
        .await;
    }
    or_error!(
        ctx,
        apps::drain(&ctx.services, &ctx.caller, &tenant, id).await
    );
    see_other(&Done::Drained(id).on(&back))
}

/// `POST /t/{tenant}/executors/{id}/undrain`: the undo of a drain.
async fn undrain(
    req: HttpRequest,
    path: web::Path<(String, i64)>,
    form: web::Form<ConfirmForm>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, id) = path.into_inner();
    or_error!(
        ctx,
        apps::undrain(&ctx.services, &ctx.caller, &tenant, id).await
    );
    let back = form.back_or(&format!("/t/{}/executors", urlencode(&tenant)));
    see_other(&Done::Undrained(id).on(&back))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::i18n::Lang;

    #[test]
    fn ages_are_in_the_largest_whole_unit() {
        let tr = Tr::new(Lang::En);
        assert_eq!(age(tr, 10_000, 7_000), "3 s ago");
        assert_eq!(age(tr, 600_000, 0), "10 min ago");
        assert_eq!(age(tr, 7_200_000, 0), "2 h ago");
        assert_eq!(age(tr, 0, 5_000), "0 s ago");
        assert_eq!(age(Tr::new(Lang::Zh), 10_000, 7_000), "3 秒前");
    }
}

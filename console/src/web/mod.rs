//! The web console at `/`: pages rendered on the server (askama templates, HTML-escaped by
//! default) over the same [`service`](crate::service) operations as the REST API, with the
//! CSS and one small script of our own embedded in the binary ([`assets`]).
//!
//! - Pages are tenant-scoped: `/t/{tenant}` (the overview), `/t/{tenant}/tasks`,
//!   `/t/{tenant}/tasks/{id}`, `/t/{tenant}/tasks/import` (and the `…/tasks/export` download),
//!   `/t/{tenant}/runs`, `/t/{tenant}/alarms`, `/t/{tenant}/executors`,
//!   `/t/{tenant}/executors/{id}`, `/t/{tenant}/users`, `/t/{tenant}/audit`; besides them the
//!   user's own `/account/tokens` and the operators' `/nodes` and `/tenants`.
//! - Sign-in makes the same session cookie as `POST /api/v1/session`; changes are HTML form
//!   posts that follow the API's CSRF rule for cookie sessions (same origin only).
//! - Every string goes through one catalog ([`i18n`]): English and Simplified Chinese,
//!   switched with a cookie; times are shown in the zone the user chose (a cookie, default UTC).
//! - Pages read without JavaScript; the script adds alarm pop-ups from the WebSocket
//!   (`/api/v1/events`), acknowledges through the REST API, refreshes live run rows and the
//!   cron preview of the task form.

pub mod alarms;
pub mod apps;
pub mod assets;
pub mod audit;
pub mod bulk;
pub mod charts;
pub mod confirm;
pub mod dag;
pub mod executors;
pub mod flash;
pub mod i18n;
mod layout;
pub mod nodes;
pub mod overview;
pub mod runs;
pub mod session;
pub mod task_detail;
pub mod task_form;
pub mod taskfile;
pub mod tasks;
pub mod users;

use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::TimeZone;
use chrono_tz::Tz;
use mthpt_engine::tenant::Tenant;

use self::i18n::{Lang, Tr};
pub use self::layout::Layout;
use crate::service::Services;
use crate::service::access::{Action, Caller, tenant_access};
use crate::service::error::{ApiError, Code};

/// The cookie naming the chosen language (`en`, `zh-CN`).
pub const LANG_COOKIE: &str = "mthpt_lang";
/// The cookie naming the chosen time zone (IANA).
pub const TZ_COOKIE: &str = "mthpt_tz";

/// Mounts the pages: `App::new().configure(api::configure(..)).configure(web::configure(services))`.
pub fn configure(services: Services) -> impl FnOnce(&mut web::ServiceConfig) + Clone {
    move |cfg: &mut web::ServiceConfig| {
        cfg.app_data(web::Data::new(services))
            // A path or a form the pages cannot read gets the error page, in the reader's
            // language, not the extractor's bare text.
            .app_data(web::PathConfig::default().error_handler(|e, req| {
                let detail = format!(
                    "no page at {}: {}",
                    mthpt_engine::validate::clip_chars(req.path(), 200),
                    crate::http::unwrapped(&e.to_string(), "Path deserialize error: ")
                );
                let page = error_page(
                    Tr::new(lang_of(req)),
                    &ApiError::new(Code::NotFound, detail),
                );
                actix_web::error::InternalError::from_response(e, page).into()
            }))
            .app_data(web::FormConfig::default().error_handler(|e, req| {
                let detail = format!(
                    "the form cannot be read (send it as application/x-www-form-urlencoded): {e}"
                );
                let page = error_page(
                    Tr::new(lang_of(req)),
                    &ApiError::new(Code::BadRequest, detail),
                );
                actix_web::error::InternalError::from_response(e, page).into()
            }))
            .route("/", web::get().to(home))
            .configure(assets::routes)
            .configure(session::routes)
            .configure(overview::routes)
            .configure(alarms::routes)
            // Before the task pages: `/tasks/export` is not a task id.
            .configure(taskfile::routes)
            .configure(tasks::routes)
            .configure(task_detail::routes)
            .configure(runs::routes)
            .configure(executors::routes)
            .configure(apps::routes)
            .configure(nodes::routes)
            .configure(users::routes)
            .configure(audit::routes);
    }
}

/// What every signed-in page handler starts from.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub services: web::Data<Services>,
    pub caller: Caller,
    pub tr: Tr,
    pub tz: Tz,
}

impl Ctx {
    /// The signed-in caller of `req`; otherwise a redirect to the sign-in page (or, for a
    /// change from another origin, the refusal).
    pub async fn of(req: &HttpRequest) -> Result<Ctx, HttpResponse> {
        let tr = Tr::new(lang_of(req));
        let Some(services) = req.app_data::<web::Data<Services>>().cloned() else {
            return Err(error_page(
                tr,
                &ApiError::internal("pages mounted without services"),
            ));
        };
        match crate::http::authenticate(&services, req).await {
            Ok(caller) => Ok(Ctx {
                services,
                caller,
                tr,
                tz: tz_of(req),
            }),
            Err(e) if e.code == Code::Unauthenticated => Err(see_other(&format!(
                "/login?next={}",
                urlencode(&local_path(req))
            ))),
            Err(e) => Err(error_page(tr, &e)),
        }
    }

    /// The tenant a `/t/{tenant}/…` path names, if the caller may read it.
    pub async fn tenant(&self, name: &str) -> Result<Tenant, ApiError> {
        tenant_access(&self.services, &self.caller, name, Action::Read).await
    }

    /// An instant (epoch ms) in the user's zone.
    pub fn time(&self, ms: i64) -> String {
        fmt_time(ms, self.tz)
    }

    /// The page for an error of a service operation.
    pub fn error(&self, e: &ApiError) -> HttpResponse {
        error_page(self.tr, e)
    }
}

/// One `<option>` of a filter or form `<select>`.
#[derive(Debug, Clone)]
pub struct Opt {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

/// Options for `values`, labelled with the catalog entries `{prefix}{value}`, with `current`
/// selected; an empty first option labelled `empty` (a catalog key) when given.
pub fn options(
    tr: Tr,
    prefix: &str,
    values: &[&str],
    current: &str,
    empty: Option<&str>,
) -> Vec<Opt> {
    let mut out = Vec::with_capacity(values.len() + 1);
    if let Some(key) = empty {
        out.push(Opt {
            value: String::new(),
            label: tr.t(key),
            selected: current.is_empty(),
        });
    }
    out.extend(values.iter().map(|v| Opt {
        value: (*v).to_owned(),
        label: tr.t(&format!("{prefix}{v}")),
        selected: *v == current,
    }));
    out
}

/// An instant (epoch ms) as `YYYY-MM-DD HH:MM:SS +08:00` in `tz`: the offset says which
/// moment it is whatever zone the reader has in mind.
pub fn fmt_time(ms: i64, tz: Tz) -> String {
    match tz.timestamp_millis_opt(ms).single() {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S %:z").to_string(),
        None => String::new(),
    }
}

/// The language of a request: the cookie, else the browser's first preference, else English.
pub fn lang_of(req: &HttpRequest) -> Lang {
    if let Some(c) = req.cookie(LANG_COOKIE)
        && let Some(lang) = Lang::from_tag(c.value())
    {
        return lang;
    }
    let accept = req
        .headers()
        .get(header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if accept.trim_start().to_ascii_lowercase().starts_with("zh") {
        Lang::Zh
    } else {
        Lang::En
    }
}

/// The user's zone: the cookie if it names an IANA zone, else UTC.
pub fn tz_of(req: &HttpRequest) -> Tz {
    req.cookie(TZ_COOKIE)
        .and_then(|c| c.value().parse().ok())
        .unwrap_or(chrono_tz::UTC)
}

/// The request's path and query, to come back to.
pub fn local_path(req: &HttpRequest) -> String {
    match req.query_string() {
        "" => req.path().to_owned(),
        q => format!("{}?{q}", req.path()),
    }
}

/// `next` if it is a path on this site (never another origin), else `/`.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_owned(),
        _ => "/".to_owned(),
    }
}

/// Percent-encodes a query value.
pub fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A 303 redirect (after a form post, or to sign in).
pub fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}

/// A rendered template as an HTML answer.
pub fn html(status: StatusCode, t: &impl Template) -> HttpResponse {
    match t.render() {
        Ok(body) => HttpResponse::build(status)
            .content_type("text/html; charset=utf-8")
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .body(body),
        Err(e) => {
            tracing::error!(error = %e, "a page template failed to render");
            HttpResponse::InternalServerError().body("the page could not be rendered")
        }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    l: Layout,
    status: u16,
    detail: String,
}

/// The error page for `e` (its status, title and detail; never internal causes).
pub fn error_page(tr: Tr, e: &ApiError) -> HttpResponse {
    if e.code == Code::Internal {
        tracing::error!(error = ?e.internal, detail = %e.detail, "a page failed");
    }
    let page = ErrorPage {
        l: Layout::bare(tr, tr.t("error.title")),
        status: e.code.status(),
        detail: tr.error(e).detail,
    };
    html(crate::http::status_of(e.code), &page)
}

/// `/`: the signed-in user's tenant's overview (an operator's: the first tenant's).
async fn home(req: HttpRequest) -> HttpResponse {
    let ctx = match Ctx::of(&req).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    match layout::tenants(&ctx).await {
        Ok(tenants) => match tenants.first() {
            Some(t) => see_other(&format!("/t/{}", urlencode(&t.name))),
            None => ctx.error(&ApiError::new(Code::NotFound, ctx.tr.t("error.no_tenant"))),
        },
        Err(e) => ctx.error(&e),
    }
}

/// Unwraps a page context or returns the answer that replaces the page.
#[macro_export]
#[doc(hidden)]
macro_rules! page_ctx {
    ($req:expr) => {
        match $crate::web::Ctx::of(&$req).await {
            Ok(c) => c,
            Err(r) => return r,
        }
    };
}

/// Unwraps a service result or returns the error page.
#[macro_export]
#[doc(hidden)]
macro_rules! or_error {
    ($ctx:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return $ctx.error(&e),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        assert_eq!(safe_next(Some("/t/a/tasks?x=1")), "/t/a/tasks?x=1");
        assert_eq!(safe_next(Some("//evil.example/")), "/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/");
        assert_eq!(safe_next(Some("/\\evil.example")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(urlencode("/t/a b?x=1&y"), "/t/a%20b%3Fx%3D1%26y");
        assert_eq!(urlencode("名"), "%E5%90%8D");
    }
}

//! `/t/{tenant}/audit`: a tenant's audit log, newest first, paged with "Older".

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use serde::Deserialize;

use super::{Layout, html, local_path, urlencode};
use crate::service::audit_log;
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}/audit", web::get().to(list));
}

/// Events per page.
const PAGE: i64 = 50;

#[derive(Debug, Clone, Default, Deserialize)]
struct AuditQuery {
    #[serde(default)]
    cursor: String,
}

/// One event.
#[derive(Debug, Clone)]
pub struct AuditRow {
    pub at: String,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub details: String,
}

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    l: Layout,
    rows: Vec<AuditRow>,
    next: String,
}

async fn list(
    req: HttpRequest,
    tenant: web::Path<String>,
    q: web::Query<AuditQuery>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let tenant = or_error!(ctx, ctx.tenant(&tenant).await);
    let cursor = (!q.cursor.is_empty()).then_some(q.cursor.as_str());
    let page = or_error!(
        ctx,
        audit_log::list(&ctx.services, &ctx.caller, &tenant.name, cursor, PAGE).await
    );
    let title = ctx.tr.t("audit.title");
    let l = or_error!(
        ctx,
        Layout::of(&ctx, &tenant, title, local_path(&req), "audit").await
    );
    let rows = page
        .items
        .into_iter()
        .map(|e| AuditRow {
            at: ctx.time(e.at),
            target: match e.target_id {
                Some(id) => format!("{} {id}", e.target_kind),
                None => e.target_kind,
            },
            details: match &e.details.0 {
                serde_json::Value::Null => String::new(),
                serde_json::Value::Object(m) if m.is_empty() => String::new(),
                v => v.to_string(),
            },
            actor: e.actor,
            action: e.action,
        })
        .collect();
    let next = page
        .next_cursor
        .map(|c| format!("{}?cursor={}", l.link("audit"), urlencode(&c)))
        .unwrap_or_default();
    html(StatusCode::OK, &AuditPage { l, rows, next })
}

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
    /// The action in the page's language (empty: the catalog has no words for it).
    pub action_label: String,
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
            // In words where the catalog has them; the action's name stays beside them.
            action_label: ctx
                .tr
                .get(&format!("audit.action.{}", e.action))
                .unwrap_or_default(),
            action: e.action,
        })
        .collect();
    let next = page
        .next_cursor
        .map(|c| format!("{}?cursor={}", l.link("audit"), urlencode(&c)))
        .unwrap_or_default();
    html(StatusCode::OK, &AuditPage { l, rows, next })
}

#[cfg(test)]
mod tests {
    use super::super::i18n::{Lang, Tr};

    /// Every audit action the services write (`action: "x.y"`, or a quoted `"task.…"` or
    /// `"executor.…"` handed to the task and executor services' audit helpers) has words in the
    /// catalog.
    #[test]
    fn every_audit_action_the_services_write_is_in_the_catalog() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/service");
        let mut actions = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for piece in text.split('"').skip(1).step_by(2) {
                let mut parts = piece.split('.');
                let (Some(kind), Some(verb), None) = (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                let word = |s: &str| {
                    !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                };
                let is_action = text.contains(&format!("action: \"{piece}\""))
                    || (matches!(kind, "task" | "executor")
                        && text.contains(&format!("\"{piece}\",")));
                if word(kind) && word(verb) && is_action {
                    actions.push(piece.to_owned());
                }
            }
        }
        assert!(actions.len() >= 20, "found {actions:?}");
        for action in actions {
            for lang in [Lang::En, Lang::Zh] {
                assert!(
                    Tr::new(lang)
                        .get(&format!("audit.action.{action}"))
                        .is_some(),
                    "audit action {action} has no words"
                );
            }
        }
    }
}

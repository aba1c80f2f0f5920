//! The confirmation step of destructive actions (drain, cancel a run, delete a user, revoke a
//! token, rotate or delete an app's secret): the action's form post without `confirm=yes`
//! answers with a page that says what will happen and posts the same form again with
//! `confirm=yes`, or goes back. Plain HTML, so it works without JavaScript.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use askama::Template;
use serde::Deserialize;

use super::{Ctx, Layout, html, safe_next};
use crate::service::access::{Action, tenant_access};

/// The fields every confirmable form posts.
#[derive(Debug, Default, Deserialize)]
pub struct ConfirmForm {
    /// Where to go afterwards (a local path).
    pub back: Option<String>,
    /// `yes` once the person confirmed.
    pub confirm: Option<String>,
}

impl ConfirmForm {
    /// Whether the person confirmed the action.
    pub fn confirmed(&self) -> bool {
        self.confirm.as_deref() == Some("yes")
    }

    /// Where to go afterwards: `back` if it is local, else `default`.
    pub fn back_or(&self, default: &str) -> String {
        match self.back.as_deref() {
            Some(b) if !b.is_empty() => safe_next(Some(b)),
            _ => default.to_owned(),
        }
    }
}

#[derive(Template)]
#[template(path = "confirm.html")]
struct ConfirmPage {
    l: Layout,
    /// What will happen, in words.
    detail: String,
    action: String,
    back: String,
    button: String,
    /// More fields the confirmed post carries again (the ids of a bulk action, …).
    fields: Vec<(String, String)>,
}

/// The confirmation page of posting to `action`: `l` is its frame (titled with the question),
/// `detail` says what will happen, `button` names the action, `back` is where Cancel leads
/// (and where the action, once confirmed, comes back to).
pub fn page(
    l: Layout,
    detail: String,
    action: String,
    button: String,
    back: String,
) -> HttpResponse {
    page_carrying(l, detail, action, button, back, Vec::new())
}

/// [`page`] whose confirmed post carries `fields` (name, value) again.
pub fn page_carrying(
    l: Layout,
    detail: String,
    action: String,
    button: String,
    back: String,
    fields: Vec<(String, String)>,
) -> HttpResponse {
    html(
        StatusCode::OK,
        &ConfirmPage {
            l,
            detail,
            action,
            back,
            button,
            fields,
        },
    )
}

/// The confirmation page of an action on `tenant` that needs `action`'s permission (refused
/// here already, with the error page, when the caller lacks it): titled with the catalog entry
/// `title`, saying `detail`, its button labelled with the catalog entry `button`.
#[allow(clippy::too_many_arguments)]
pub async fn ask(
    ctx: &Ctx,
    req: &HttpRequest,
    tenant: &str,
    action: Action,
    nav: &'static str,
    title: &str,
    detail: String,
    button: &str,
    back: String,
) -> HttpResponse {
    ask_carrying(
        ctx,
        req,
        tenant,
        action,
        nav,
        (title, button),
        detail,
        back,
        Vec::new(),
    )
    .await
}

/// [`ask`] whose confirmed post carries `fields` (name, value) again; `words` are the catalog
/// entries of the title and of the button.
#[allow(clippy::too_many_arguments)]
pub async fn ask_carrying(
    ctx: &Ctx,
    req: &HttpRequest,
    tenant: &str,
    action: Action,
    nav: &'static str,
    words: (&str, &str),
    detail: String,
    back: String,
    fields: Vec<(String, String)>,
) -> HttpResponse {
    let (title, button) = words;
    let tenant = match tenant_access(&ctx.services, &ctx.caller, tenant, action).await {
        Ok(t) => t,
        Err(e) => return ctx.error(&e),
    };
    let l = match Layout::of(ctx, &tenant, ctx.tr.t(title), back.clone(), nav).await {
        Ok(l) => l,
        Err(e) => return ctx.error(&e),
    };
    page_carrying(
        l,
        detail,
        req.path().to_owned(),
        ctx.tr.t(button),
        back,
        fields,
    )
}

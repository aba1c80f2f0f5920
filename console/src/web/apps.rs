//! `/t/{tenant}/apps`: onboarding. A tenant's apps with their executor instances; tenant
//! admins create an app and see its signing secret once, on the answer to the form, with the
//! `mthpt wrapper` command to start an executor for it; they replace a secret (shown once too)
//! and delete an app, both after a confirmation step. The same services as
//! `POST /api/v1/tenants/{tenant}/apps`, `…/rotate-secret` and `DELETE …/apps/{app}`.

use std::collections::HashMap;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;

use super::confirm::{self, ConfirmForm};
use super::executors::{AppGroup, ExecutorRow};
use super::flash::Done;
use super::nodes::field_errors;
use super::{Ctx, Layout, html, local_path, see_other, urlencode};
use crate::service::access::Action;
use crate::service::apps::{self, AppWithSecret};
use crate::service::error::ApiError;
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}/apps", web::get().to(list))
        .route("/t/{tenant}/apps", web::post().to(create))
        .route(
            "/t/{tenant}/apps/{app}/rotate-secret",
            web::post().to(rotate),
        )
        .route("/t/{tenant}/apps/{app}/delete", web::post().to(delete));
}

/// What the console puts in the wrapper command when it does not know the engines' address.
pub const ENGINE_PLACEHOLDER: &str = "<ENGINE_URL>";

/// An app's secret, shown once, and how to start a wrapper with it.
#[derive(Debug, Clone)]
pub struct NewSecret {
    /// `<tenant>.<app>`.
    pub key: String,
    pub secret: String,
    /// The shell lines to paste: write the secret file, start `mthpt wrapper`.
    pub command: String,
    /// Whether the engine URL in the command is a placeholder.
    pub engine_unknown: bool,
    /// Created (else: a replaced secret).
    pub created: bool,
}

/// The lines that start a standalone wrapper (built-in `shell` handler) for app `key` with
/// `secret`: its flags are those of `mthpt wrapper` (`console/src/cli/wrapper.rs`).
pub fn wrapper_command(key: &str, secret: &str, engine: Option<&str>) -> String {
    let file = format!("{key}.secret");
    let engine = engine.unwrap_or(ENGINE_PLACEHOLDER);
    format!(
        "printf '%s' '{secret}' > {file}\nmthpt wrapper --app {key} --secret-file {file} --engine {engine} --listen 127.0.0.1:9010 --enable-shell"
    )
}

#[derive(Template)]
#[template(path = "apps.html")]
struct AppsPage {
    l: Layout,
    apps: Vec<AppGroup>,
    /// The secret just made (shown this once).
    new_secret: Option<NewSecret>,
    /// The name typed into the form and its error, when it was refused.
    name: String,
    name_error: String,
}

async fn list(req: HttpRequest, tenant: web::Path<String>) -> HttpResponse {
    let ctx = page_ctx!(req);
    page(&ctx, &req, &tenant, None, String::new(), String::new()).await
}

/// The page, with a secret just made or a refused name.
async fn page(
    ctx: &Ctx,
    req: &HttpRequest,
    tenant: &str,
    new_secret: Option<NewSecret>,
    name: String,
    name_error: String,
) -> HttpResponse {
    let tenant = or_error!(ctx, ctx.tenant(tenant).await);
    let (executors, apps) = or_error!(
        ctx,
        apps::executors(&ctx.services, &ctx.caller, &tenant.name, None).await
    );
    let here = format!("/t/{}/apps", urlencode(&tenant.name));
    let here = if req.method() == actix_web::http::Method::GET {
        local_path(req)
    } else {
        here
    };
    let l = or_error!(
        ctx,
        Layout::of(ctx, &tenant, ctx.tr.t("apps.title"), here, "apps").await
    );
    let now = ctx.services.now();
    let apps = apps
        .into_iter()
        .map(|app| AppGroup {
            executors: executors
                .iter()
                .filter(|e| e.app_id == app.id)
                .map(|e| ExecutorRow::of(ctx, &l, e, now))
                .collect(),
            name: app.name,
        })
        .collect();
    html(
        StatusCode::OK,
        &AppsPage {
            l,
            apps,
            new_secret,
            name,
            name_error,
        },
    )
}

/// The apps page showing `made`'s new secret (once), after a create or a replacement.
async fn secret_page(
    ctx: &Ctx,
    req: &HttpRequest,
    tenant: &str,
    made: AppWithSecret,
    created: bool,
) -> HttpResponse {
    let secret = shown(ctx, tenant, made, created);
    page(ctx, req, tenant, Some(secret), String::new(), String::new()).await
}

fn shown(ctx: &Ctx, tenant: &str, made: AppWithSecret, created: bool) -> NewSecret {
    let key = format!("{tenant}.{}", made.app.name);
    let engine = ctx.services.engine_url();
    NewSecret {
        command: wrapper_command(&key, &made.secret, engine),
        engine_unknown: engine.is_none(),
        key,
        secret: made.secret,
        created,
    }
}

/// `POST /t/{tenant}/apps`: creates an app and answers with the page showing its secret (once).
async fn create(
    req: HttpRequest,
    tenant: web::Path<String>,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let name = form
        .get("name")
        .map(|n| n.trim().to_owned())
        .unwrap_or_default();
    match apps::create(&ctx.services, &ctx.caller, &tenant, &name).await {
        Ok(made) => secret_page(&ctx, &req, &tenant, made, true).await,
        Err(e) => match field_errors(ctx.tr, &e, "name") {
            Some(errors) => {
                let message = errors
                    .get("name")
                    .cloned()
                    .unwrap_or_else(|| ctx.tr.msg(&e.detail));
                let status = crate::http::status_of(e.code);
                let mut answer = page(&ctx, &req, &tenant, None, name, message).await;
                *answer.status_mut() = status;
                answer
            }
            None => ctx.error(&e),
        },
    }
}

/// `POST /t/{tenant}/apps/{app}/rotate-secret`: after a confirmation step, the page with the
/// new secret (once).
async fn rotate(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    form: web::Form<ConfirmForm>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, app) = path.into_inner();
    if !form.confirmed() {
        let detail = ctx.tr.t("confirm.rotate_detail").replace("{app}", &app);
        return confirm::ask(
            &ctx,
            &req,
            &tenant,
            Action::Administer,
            "apps",
            "confirm.rotate_title",
            detail,
            "apps.rotate",
            format!("/t/{}/apps", urlencode(&tenant)),
        )
        .await;
    }
    let made = or_error!(
        ctx,
        apps::rotate_secret(&ctx.services, &ctx.caller, &tenant, &app).await
    );
    secret_page(&ctx, &req, &tenant, made, false).await
}

/// `POST /t/{tenant}/apps/{app}/delete`: after a confirmation step (refused while tasks use it).
async fn delete(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    form: web::Form<ConfirmForm>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, app) = path.into_inner();
    let back = format!("/t/{}/apps", urlencode(&tenant));
    if !form.confirmed() {
        let detail = ctx.tr.t("confirm.delete_app_detail").replace("{app}", &app);
        return confirm::ask(
            &ctx,
            &req,
            &tenant,
            Action::Administer,
            "apps",
            "confirm.delete_app_title",
            detail,
            "apps.delete",
            back,
        )
        .await;
    }
    let found = or_error!(
        ctx,
        apps::get(&ctx.services, &ctx.caller, &tenant, &app).await
    );
    let done: Result<(), ApiError> = apps::delete(&ctx.services, &ctx.caller, &tenant, &app).await;
    or_error!(ctx, done);
    see_other(&Done::AppDeleted(found.id.0).on(&back))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrapper_command_writes_the_secret_file_and_names_the_app_and_engine() {
        let c = wrapper_command("acme.ops", "s3cr3t", Some("http://10.0.0.2:7700"));
        assert_eq!(
            c,
            "printf '%s' 's3cr3t' > acme.ops.secret\n\
             mthpt wrapper --app acme.ops --secret-file acme.ops.secret \
             --engine http://10.0.0.2:7700 --listen 127.0.0.1:9010 --enable-shell"
        );
        assert!(wrapper_command("a.b", "s", None).contains("--engine <ENGINE_URL> "));
    }
}

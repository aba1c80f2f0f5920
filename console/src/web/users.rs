//! `/t/{tenant}/users`: a tenant's users and their roles (tenant admins and operators): create,
//! change role, delete. `/account/tokens`: the signed-in user's own API tokens: create (the
//! secret is shown once, in the answer to the form), list, revoke.

use std::collections::HashMap;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use mthpt_engine::tenant::{ApiTokenId, Role, UserId};
use serde::Deserialize;

use super::confirm::{self, ConfirmForm};
use super::flash::Done;
use super::nodes::{field_errors, own_layout};
use super::{Ctx, Layout, Opt, html, local_path, options, see_other};
use crate::service::access::Action;
use crate::service::error::ApiError;
use crate::service::users::{self, TokenOwner, UserChange, Where};
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/t/{tenant}/users", web::get().to(user_list))
        .route("/t/{tenant}/users", web::post().to(user_create))
        .route("/t/{tenant}/users/{id}/role", web::post().to(user_role))
        .route("/t/{tenant}/users/{id}/delete", web::post().to(user_delete))
        .route("/account/tokens", web::get().to(token_list))
        .route("/account/tokens", web::post().to(token_create))
        .route("/account/tokens/{id}/revoke", web::post().to(token_revoke));
}

/// The roles the caller may give a tenant user or a token: no higher than its own, and of
/// the same kind (tenant roles for tenant users, operator for operators).
fn grantable(ctx: &Ctx, tenant_roles: bool) -> Vec<&'static str> {
    let own = ctx.caller.role();
    Role::ALL
        .iter()
        .filter(|r| r.is_tenant_role() == tenant_roles && r.rank() <= own.rank())
        .map(|r| r.as_str())
        .collect()
}

/// A form as typed, with the service's errors per field.
#[derive(Debug, Clone, Default)]
pub struct Form {
    pub values: HashMap<String, String>,
    pub errors: HashMap<String, String>,
}

impl Form {
    fn posted(input: HashMap<String, String>) -> Form {
        Form {
            values: input
                .into_iter()
                .map(|(k, v)| (k, v.trim().to_owned()))
                .collect(),
            errors: HashMap::new(),
        }
    }

    pub fn value(&self, field: &str) -> String {
        self.values.get(field).cloned().unwrap_or_default()
    }

    pub fn error(&self, field: &str) -> String {
        self.errors.get(field).cloned().unwrap_or_default()
    }
}

/// One user.
#[derive(Debug, Clone)]
pub struct UserRow {
    pub id: i64,
    pub username: String,
    pub role_label: String,
    pub disabled: bool,
    pub created: String,
    /// The signed-in user (no role change or delete offered).
    pub me: bool,
    pub roles: Vec<Opt>,
    pub role_action: String,
    pub delete_action: String,
}

#[derive(Template)]
#[template(path = "users.html")]
struct UsersPage {
    l: Layout,
    rows: Vec<UserRow>,
    roles: Vec<Opt>,
    f: Form,
    action: String,
}

async fn users_page(
    ctx: &Ctx,
    req: &HttpRequest,
    tenant: &str,
    f: Form,
    status: StatusCode,
) -> HttpResponse {
    let tenant = or_error!(ctx, ctx.tenant(tenant).await);
    let list = or_error!(
        ctx,
        users::list(&ctx.services, &ctx.caller, Where::Tenant(&tenant.name)).await
    );
    let title = ctx.tr.t("users.title");
    let l = or_error!(
        ctx,
        Layout::of(ctx, &tenant, title, local_path(req), "users").await
    );
    let grant = grantable(ctx, true);
    let rows = list
        .into_iter()
        .map(|u| UserRow {
            id: u.id.0,
            role_label: ctx.tr.t(&format!("role.{}", u.role)),
            disabled: u.disabled,
            created: ctx.time(u.created_at),
            me: u.id == ctx.caller.user.id,
            roles: options(ctx.tr, "role.", &grant, u.role.as_str(), None),
            role_action: l.link(&format!("users/{}/role", u.id.0)),
            delete_action: l.link(&format!("users/{}/delete", u.id.0)),
            username: u.username,
        })
        .collect();
    let chosen = f.value("role");
    let roles = options(
        ctx.tr,
        "role.",
        &grant,
        if chosen.is_empty() {
            "tenant_viewer"
        } else {
            &chosen
        },
        None,
    );
    let action = l.link("users");
    html(
        status,
        &UsersPage {
            l,
            rows,
            roles,
            f,
            action,
        },
    )
}

async fn user_list(req: HttpRequest, tenant: web::Path<String>) -> HttpResponse {
    let ctx = page_ctx!(req);
    users_page(&ctx, &req, &tenant, Form::default(), StatusCode::OK).await
}

fn parse_role(value: &str) -> Result<Role, ApiError> {
    value
        .parse::<Role>()
        .map_err(|e| ApiError::field("role", e.to_string()))
}

async fn user_create(
    req: HttpRequest,
    tenant: web::Path<String>,
    input: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let mut f = Form::posted(input.into_inner());
    let password = f.values.remove("password").unwrap_or_default();
    let created = match parse_role(&f.value("role")) {
        Ok(role) => {
            users::create(
                &ctx.services,
                &ctx.caller,
                Where::Tenant(&tenant),
                &f.value("username"),
                &password,
                role,
            )
            .await
        }
        Err(e) => Err(e),
    };
    match created {
        Ok(_) => see_other(&format!("/t/{}/users", super::urlencode(&tenant))),
        Err(e) => match field_errors(ctx.tr, &e, "username") {
            Some(errors) => {
                f.errors = errors;
                users_page(&ctx, &req, &tenant, f, crate::http::status_of(e.code)).await
            }
            None => ctx.error(&e),
        },
    }
}

#[derive(Debug, Deserialize)]
struct RoleForm {
    role: String,
}

async fn user_role(
    req: HttpRequest,
    path: web::Path<(String, i64)>,
    form: web::Form<RoleForm>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, id) = path.into_inner();
    let role = or_error!(ctx, parse_role(&form.role));
    or_error!(
        ctx,
        users::update(
            &ctx.services,
            &ctx.caller,
            Where::Tenant(&tenant),
            UserId(id),
            UserChange {
                role: Some(role),
                ..Default::default()
            },
        )
        .await
    );
    see_other(&format!("/t/{}/users", super::urlencode(&tenant)))
}

/// `POST /t/{tenant}/users/{id}/delete`: after a confirmation step.
async fn user_delete(
    req: HttpRequest,
    path: web::Path<(String, i64)>,
    form: web::Form<ConfirmForm>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let (tenant, id) = path.into_inner();
    let list = format!("/t/{}/users", super::urlencode(&tenant));
    if !form.confirmed() {
        let user = or_error!(
            ctx,
            users::get(
                &ctx.services,
                &ctx.caller,
                Where::Tenant(&tenant),
                UserId(id)
            )
            .await
        );
        let detail = ctx
            .tr
            .t("confirm.delete_user_detail")
            .replace("{user}", &user.username);
        return confirm::ask(
            &ctx,
            &req,
            &tenant,
            Action::Administer,
            "users",
            "confirm.delete_user_title",
            detail,
            "users.delete",
            list,
        )
        .await;
    }
    or_error!(
        ctx,
        users::delete(
            &ctx.services,
            &ctx.caller,
            Where::Tenant(&tenant),
            UserId(id)
        )
        .await
    );
    see_other(&Done::UserDeleted(id).on(&list))
}

/// One token (never its secret).
#[derive(Debug, Clone)]
pub struct TokenRow {
    pub id: i64,
    pub name: String,
    pub role_label: String,
    pub created: String,
    pub expires: String,
    pub last_used: String,
    /// `active`, `expired` or `revoked`.
    pub status: &'static str,
    pub status_label: String,
    pub revoke_action: String,
}

#[derive(Template)]
#[template(path = "tokens.html")]
struct TokensPage {
    l: Layout,
    rows: Vec<TokenRow>,
    roles: Vec<Opt>,
    f: Form,
    /// The secret of the token just created (shown this once).
    secret: String,
    secret_name: String,
}

/// The frame of the account pages: the user's own tenant, or none for an operator.
async fn account_layout(ctx: &Ctx, req: &HttpRequest) -> Result<Layout, ApiError> {
    let title = ctx.tr.t("tokens.title");
    match &ctx.caller.tenant {
        Some(t) => Layout::of(ctx, t, title, local_path(req), "tokens").await,
        None => Ok(own_layout(ctx, title, local_path(req), "tokens")),
    }
}

async fn tokens_page(
    ctx: &Ctx,
    req: &HttpRequest,
    f: Form,
    issued: Option<(String, String)>,
    status: StatusCode,
) -> HttpResponse {
    let list = or_error!(
        ctx,
        users::list_tokens(&ctx.services, &ctx.caller, TokenOwner::Me).await
    );
    let l = or_error!(ctx, account_layout(ctx, req).await);
    let now = ctx.services.now();
    let rows = list
        .into_iter()
        .map(|t| {
            let status = if t.revoked_at.is_some() {
                "revoked"
            } else if t.expires_at.is_some_and(|e| e <= now) {
                "expired"
            } else {
                "active"
            };
            TokenRow {
                id: t.id.0,
                role_label: ctx
                    .tr
                    .t(&format!("role.{}", t.effective_role(&ctx.caller.user))),
                created: ctx.time(t.created_at),
                expires: t.expires_at.map(|e| ctx.time(e)).unwrap_or_default(),
                last_used: t.last_used_at.map(|e| ctx.time(e)).unwrap_or_default(),
                status,
                status_label: ctx.tr.t(&format!("tokens.status.{status}")),
                revoke_action: format!("/account/tokens/{}/revoke", t.id.0),
                name: t.name,
            }
        })
        .collect();
    let grant = grantable(ctx, ctx.caller.user.role.is_tenant_role());
    let chosen = f.value("role");
    let roles = options(ctx.tr, "role.", &grant, &chosen, Some("tokens.role_own"));
    let (secret_name, secret) = issued.unwrap_or_default();
    html(
        status,
        &TokensPage {
            l,
            rows,
            roles,
            f,
            secret,
            secret_name,
        },
    )
}

async fn token_list(req: HttpRequest) -> HttpResponse {
    let ctx = page_ctx!(req);
    tokens_page(&ctx, &req, Form::default(), None, StatusCode::OK).await
}

/// The longest expiry offered, in days.
const MAX_EXPIRY_DAYS: i64 = 3650;

async fn token_create(req: HttpRequest, input: web::Form<HashMap<String, String>>) -> HttpResponse {
    let ctx = page_ctx!(req);
    let mut f = Form::posted(input.into_inner());
    let role = f.value("role");
    let days = f.value("expires_days");
    let parsed = (|| {
        let role = (!role.is_empty()).then(|| parse_role(&role)).transpose()?;
        let expires_at = match days.as_str() {
            "" => None,
            d => match d.parse::<i64>() {
                Ok(n) if (1..=MAX_EXPIRY_DAYS).contains(&n) => {
                    Some(ctx.services.now() + n * 86_400_000)
                }
                _ => {
                    return Err(ApiError::field(
                        "expires_days",
                        format!("must be a whole number of days from 1 to {MAX_EXPIRY_DAYS}"),
                    ));
                }
            },
        };
        Ok((role, expires_at))
    })();
    let issued = match parsed {
        Ok((role, expires_at)) => {
            users::create_token(
                &ctx.services,
                &ctx.caller,
                TokenOwner::Me,
                &f.value("name"),
                expires_at,
                role,
            )
            .await
        }
        Err(e) => Err(e),
    };
    match issued {
        Ok(t) => {
            tokens_page(
                &ctx,
                &req,
                Form::default(),
                Some((t.token.name, t.value)),
                StatusCode::OK,
            )
            .await
        }
        Err(e) => match field_errors(ctx.tr, &e, "name") {
            Some(mut errors) => {
                if let Some(m) = errors.remove("expires_at") {
                    errors.insert("expires_days".to_owned(), m);
                }
                if e.code == crate::service::error::Code::RoleAboveOwn {
                    errors.remove("name");
                    errors.insert("role".to_owned(), e.detail.clone());
                }
                f.errors = errors;
                tokens_page(&ctx, &req, f, None, crate::http::status_of(e.code)).await
            }
            None => ctx.error(&e),
        },
    }
}

/// `POST /account/tokens/{id}/revoke`: after a confirmation step.
async fn token_revoke(
    req: HttpRequest,
    id: web::Path<i64>,
    form: web::Form<ConfirmForm>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let id = id.into_inner();
    let back = form.back_or("/account/tokens");
    if !form.confirmed() {
        let list = or_error!(
            ctx,
            users::list_tokens(&ctx.services, &ctx.caller, TokenOwner::Me).await
        );
        let Some(token) = list.iter().find(|t| t.id.0 == id) else {
            return ctx.error(&ApiError::not_found(format!("token {id}")));
        };
        let mut l = or_error!(ctx, account_layout(&ctx, &req).await);
        l.title = ctx.tr.t("confirm.revoke_title");
        l.take_flash(&back);
        let detail = ctx
            .tr
            .t("confirm.revoke_detail")
            .replace("{token}", &token.name);
        return confirm::page(
            l,
            detail,
            req.path().to_owned(),
            ctx.tr.t("tokens.revoke"),
            back,
        );
    }
    or_error!(
        ctx,
        users::revoke_token(&ctx.services, &ctx.caller, TokenOwner::Me, ApiTokenId(id)).await
    );
    see_other(&Done::TokenRevoked(id).on(&back))
}

//! Platform pages (operators only): `/nodes`, the engine nodes with their groups and heartbeat
//! age, and `/tenants`, the tenants with their claim weight and their quotas (usage against
//! each; a form to set each) and a form to create one.

use std::collections::HashMap;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use mthpt_engine::quota::TenantQuotas;
use mthpt_engine::tenant::{DEFAULT_NODE_GROUP, NewTenant, Weight};

use super::executors::age;
use super::i18n::Tr;
use super::{Ctx, Layout, html, local_path, see_other, urlencode};
use crate::service::access::{Action, Target, authorize};
use crate::service::error::{ApiError, Code};
use crate::service::{nodes, quotas, tenants, weights};
use crate::{or_error, page_ctx};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/nodes", web::get().to(node_list))
        .route("/tenants", web::get().to(tenant_list))
        .route("/tenants", web::post().to(tenant_create))
        .route("/tenants/{tenant}/quotas", web::post().to(quotas_set))
        .route("/tenants/{tenant}/weight", web::post().to(weight_set));
}

/// The frame of a page that is about no tenant (platform pages, the user's own account).
pub fn own_layout(ctx: &Ctx, title: String, here: String, nav: &'static str) -> Layout {
    let mut l = Layout::bare(ctx.tr, title);
    l.user = ctx.caller.user.username.clone();
    l.role = format!("role.{}", ctx.caller.role());
    l.take_flash(&here);
    l.tz = ctx.tz.name().to_owned();
    l.nav = nav;
    l
}

/// One engine node.
#[derive(Debug, Clone)]
pub struct NodeRow {
    pub id: String,
    pub groups: String,
    pub address: String,
    pub state: String,
    pub state_label: String,
    pub started: String,
    pub heartbeat_age: String,
    pub heartbeat_at: String,
}

#[derive(Template)]
#[template(path = "nodes.html")]
struct NodesPage {
    l: Layout,
    rows: Vec<NodeRow>,
}

async fn node_list(req: HttpRequest) -> HttpResponse {
    let ctx = page_ctx!(req);
    let list = or_error!(ctx, nodes::list(&ctx.services, &ctx.caller).await);
    let now = ctx.services.now();
    let rows = list
        .into_iter()
        .map(|n| NodeRow {
            groups: n.node_groups.0.join(", "),
            address: n.address,
            state: n.state.to_string(),
            state_label: ctx.tr.t(&format!("node.state.{}", n.state)),
            started: ctx.time(n.started_at),
            heartbeat_age: age(ctx.tr, now, n.last_heartbeat_at),
            heartbeat_at: ctx.time(n.last_heartbeat_at),
            id: n.id,
        })
        .collect();
    let l = own_layout(&ctx, ctx.tr.t("nodes.title"), local_path(&req), "nodes");
    html(StatusCode::OK, &NodesPage { l, rows })
}

/// The tenant form, as typed.
#[derive(Debug, Clone, Default)]
pub struct TenantForm {
    pub name: String,
    pub display_name: String,
    pub node_group: String,
    pub errors: HashMap<String, String>,
}

impl TenantForm {
    pub fn error(&self, field: &str) -> String {
        self.errors.get(field).cloned().unwrap_or_default()
    }
}

/// One tenant.
#[derive(Debug, Clone)]
pub struct TenantRow {
    pub name: String,
    pub display_name: String,
    pub node_group: String,
    pub disabled: bool,
    pub link: String,
    pub created: String,
    /// Usage against quota, e.g. `3 / 100` (`∞`: unlimited).
    pub tasks: String,
    pub waiting: String,
    pub running: String,
    /// The quotas as the form shows them (empty: unlimited).
    pub q_max_tasks: String,
    pub q_max_waiting_runs: String,
    pub q_max_concurrent_runs: String,
    pub q_max_fires_per_second: String,
    pub q_fire_burst: String,
    /// The form's action.
    pub quotas_action: String,
    /// The claim weight as its form shows it (as typed, after a refused change).
    pub weight: String,
    pub weight_action: String,
    /// Why the weight typed was refused (empty: it was not).
    pub weight_error: String,
}

/// A weight the tenants page refused: the tenant, what was typed, and why.
#[derive(Debug, Clone)]
struct RefusedWeight {
    tenant: String,
    typed: String,
    message: String,
}

/// `used / limit`, `∞` for no limit.
fn against(used: i64, limit: Option<i64>) -> String {
    match limit {
        Some(l) => format!("{used} / {l}"),
        None => format!("{used} / ∞"),
    }
}

fn shown(limit: Option<i64>) -> String {
    limit.map(|l| l.to_string()).unwrap_or_default()
}

#[derive(Template)]
#[template(path = "tenants.html")]
struct TenantsPage {
    l: Layout,
    rows: Vec<TenantRow>,
    f: TenantForm,
}

async fn tenants_page(
    ctx: &Ctx,
    req: &HttpRequest,
    f: TenantForm,
    refused: Option<RefusedWeight>,
    status: StatusCode,
) -> HttpResponse {
    or_error!(
        ctx,
        authorize(&ctx.caller, Action::Platform, Target::Platform)
    );
    let list = or_error!(ctx, quotas::list(&ctx.services, &ctx.caller).await);
    let weights: HashMap<_, _> = or_error!(ctx, weights::list(&ctx.services, &ctx.caller).await)
        .into_iter()
        .map(|w| (w.tenant.id, w.weight))
        .collect();
    let rows = list
        .into_iter()
        .map(|r| {
            let (t, q, u) = (r.tenant, r.quotas, r.usage);
            let (weight, weight_error) = match &refused {
                Some(w) if w.tenant == t.name => (w.typed.clone(), w.message.clone()),
                _ => (
                    weights.get(&t.id).map(i32::to_string).unwrap_or_default(),
                    String::new(),
                ),
            };
            TenantRow {
                link: format!("/t/{}/tasks", urlencode(&t.name)),
                quotas_action: format!("/tenants/{}/quotas", urlencode(&t.name)),
                weight_action: format!("/tenants/{}/weight", urlencode(&t.name)),
                weight,
                weight_error,
                display_name: t.display_name,
                node_group: t.node_group,
                disabled: t.disabled,
                created: ctx.time(t.created_at),
                name: t.name,
                tasks: against(u.tasks, q.max_tasks),
                waiting: against(u.waiting_runs, q.max_waiting_runs),
                running: against(u.running_runs, q.max_concurrent_runs),
                q_max_tasks: shown(q.max_tasks),
                q_max_waiting_runs: shown(q.max_waiting_runs),
                q_max_concurrent_runs: shown(q.max_concurrent_runs),
                q_max_fires_per_second: shown(q.max_fires_per_second),
                q_fire_burst: shown(q.fire_burst),
            }
        })
        .collect();
    let l = own_layout(ctx, ctx.tr.t("tenants.title"), local_path(req), "tenants");
    html(status, &TenantsPage { l, rows, f })
}

async fn tenant_list(req: HttpRequest) -> HttpResponse {
    let ctx = page_ctx!(req);
    let f = TenantForm {
        node_group: DEFAULT_NODE_GROUP.to_owned(),
        ..Default::default()
    };
    tenants_page(&ctx, &req, f, None, StatusCode::OK).await
}

async fn tenant_create(
    req: HttpRequest,
    input: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let get = |k: &str| {
        input
            .get(k)
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    let mut f = TenantForm {
        name: get("name"),
        display_name: get("display_name"),
        node_group: get("node_group"),
        errors: HashMap::new(),
    };
    let new = NewTenant {
        display_name: if f.display_name.is_empty() {
            f.name.clone()
        } else {
            f.display_name.clone()
        },
        name: f.name.clone(),
        node_group: if f.node_group.is_empty() {
            DEFAULT_NODE_GROUP.to_owned()
        } else {
            f.node_group.clone()
        },
        executor_hosts: Vec::new(),
    };
    match tenants::create(&ctx.services, &ctx.caller, &new).await {
        Ok(_) => see_other("/tenants"),
        Err(e) => match field_errors(ctx.tr, &e, "name") {
            Some(errors) => {
                f.errors = errors;
                tenants_page(&ctx, &req, f, None, crate::http::status_of(e.code)).await
            }
            None => ctx.error(&e),
        },
    }
}

/// Sets a tenant's quotas from its row's form (empty field: unlimited).
async fn quotas_set(
    req: HttpRequest,
    path: web::Path<String>,
    input: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let mut wanted = TenantQuotas::default();
    for (field, slot) in [
        ("max_tasks", &mut wanted.max_tasks),
        ("max_waiting_runs", &mut wanted.max_waiting_runs),
        ("max_concurrent_runs", &mut wanted.max_concurrent_runs),
        ("max_fires_per_second", &mut wanted.max_fires_per_second),
        ("fire_burst", &mut wanted.fire_burst),
    ] {
        let text = input.get(field).map(|v| v.trim()).unwrap_or_default();
        if text.is_empty() {
            continue;
        }
        match text.parse::<i64>() {
            Ok(n) => *slot = Some(n),
            Err(_) => {
                return ctx.error(&ApiError::field(
                    field,
                    "must be a positive integer or empty",
                ));
            }
        }
    }
    match quotas::set(&ctx.services, &ctx.caller, &path, &wanted).await {
        Ok(_) => see_other("/tenants"),
        Err(e) => ctx.error(&e),
    }
}

/// Sets a tenant's claim weight from its row's form; a refused value is shown next to the
/// field, as typed.
async fn weight_set(
    req: HttpRequest,
    path: web::Path<String>,
    input: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    let ctx = page_ctx!(req);
    let typed = input
        .get("weight")
        .map(|v| v.trim().to_owned())
        .unwrap_or_default();
    let result = match Weight::parse(&typed) {
        Ok(weight) => weights::set(&ctx.services, &ctx.caller, &path, weight.get().into()).await,
        // Text that is no weight at all: refused on the page (which only operators see) once
        // the tenant is known to exist.
        Err(e) => weights::get(&ctx.services, &ctx.caller, &path)
            .await
            .and_then(|_| Err(e.into())),
    };
    match result {
        Ok(_) => see_other("/tenants"),
        Err(e) if e.code == Code::ValidationFailed => {
            let message = e
                .errors
                .iter()
                .find(|p| p.field == "weight")
                .map_or_else(|| e.detail.clone(), |p| p.message.clone());
            let message = ctx.tr.msg(&message);
            let refused = RefusedWeight {
                tenant: path.into_inner(),
                typed,
                message,
            };
            let f = TenantForm {
                node_group: DEFAULT_NODE_GROUP.to_owned(),
                ..Default::default()
            };
            tenants_page(&ctx, &req, f, Some(refused), crate::http::status_of(e.code)).await
        }
        Err(e) => ctx.error(&e),
    }
}

/// The field errors of a refused form (a conflict without a field goes to `conflict_field`);
/// `None` for other errors, which get the error page.
pub fn field_errors(tr: Tr, e: &ApiError, conflict_field: &str) -> Option<HashMap<String, String>> {
    let e = &tr.error(e);
    match e.code {
        Code::ValidationFailed if !e.errors.is_empty() => Some(
            e.errors
                .iter()
                .map(|p| (p.field.clone(), p.message.clone()))
                .collect(),
        ),
        Code::ValidationFailed | Code::Conflict | Code::RoleAboveOwn => Some(HashMap::from([(
            conflict_field.to_owned(),
            e.detail.clone(),
        )])),
        _ => None,
    }
}

//! `/tenants`: tenants and their node group (operators; a tenant user sees its own).

use actix_web::{HttpResponse, delete, get, patch, post, put, web};
use chrono::{DateTime, Utc};
use mthpt_engine::tenant::{DEFAULT_NODE_GROUP, MAX_RETENTION_MS, NewTenant, Tenant, TenantUpdate};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::at;
use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiError, ApiResult, Problem};
use crate::service::quotas::QuotaReport;
use crate::service::weights::WeightReport;
use crate::service::{Services, quotas, tenants, weights};
use mthpt_engine::quota::TenantQuotas;

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_tenants)
        .service(create_tenant)
        .service(get_tenant)
        .service(update_tenant)
        .service(delete_tenant)
        .service(get_quotas)
        .service(set_quotas)
        .service(get_weight)
        .service(set_weight);
}

/// A tenant as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TenantBody {
    pub id: i64,
    /// Unique short name (`[a-z0-9][a-z0-9_-]*`), used in paths.
    pub name: String,
    pub display_name: String,
    /// The engine node group that schedules this tenant's runs.
    pub node_group: String,
    pub disabled: bool,
    /// The hosts its executors may register with: host names, IP addresses and `*.domain`
    /// wildcards (any host below that domain), normalised (lower case, canonical IP text).
    /// Empty: any host.
    pub executor_hosts: Vec<String>,
    /// How long finished runs are kept after they finish, in hours (their statistics stay,
    /// rolled up per minute).
    pub retention_hours: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<Tenant> for TenantBody {
    fn from(t: Tenant) -> Self {
        Self {
            id: t.id.0,
            name: t.name,
            display_name: t.display_name,
            node_group: t.node_group,
            disabled: t.disabled,
            executor_hosts: t.executor_hosts.0,
            retention_hours: t.retention_ms / 3_600_000,
            created_at: at(t.created_at),
            updated_at: at(t.updated_at),
        }
    }
}

/// A new tenant.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    pub name: String,
    /// Defaults to the name.
    pub display_name: Option<String>,
    /// Defaults to `default`.
    pub node_group: Option<String>,
    /// The hosts its executors may register with (see `TenantBody`); defaults to any host.
    pub executor_hosts: Option<Vec<String>>,
}

/// A change to a tenant: only the given fields change.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTenant {
    pub display_name: Option<String>,
    /// Moving a tenant moves its not-yet-claimed runs to the new group.
    pub node_group: Option<String>,
    pub disabled: Option<bool>,
    /// Replaces the allow-list of executor hosts; `[]` allows any host. Instances already
    /// registered at a host no longer allowed get no new runs from their next heartbeat on.
    pub executor_hosts: Option<Vec<String>>,
    /// How long finished runs are kept after they finish, in hours: 1 to 87600 (3650 days);
    /// 168 (7 days) for a new tenant. Older finished runs are deleted once their statistics
    /// are rolled up.
    pub retention_hours: Option<i64>,
}

/// Tenants the caller can see.
#[utoipa::path(tag = "tenants", responses(
    (status = 200, body = Vec<TenantBody>),
    (status = 401, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants")]
async fn list_tenants(
    services: web::Data<Services>,
    caller: Caller,
) -> ApiResult<web::Json<Vec<TenantBody>>> {
    let list = tenants::list(&services, &caller).await?;
    Ok(web::Json(list.into_iter().map(Into::into).collect()))
}

/// Creates a tenant (operators).
#[utoipa::path(tag = "tenants", request_body = CreateTenant, responses(
    (status = 201, body = TenantBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "name taken", body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants")]
async fn create_tenant(
    services: web::Data<Services>,
    caller: Caller,
    body: JsonBody<CreateTenant>,
) -> ApiResult<HttpResponse> {
    let body = body.into_inner();
    let new = NewTenant {
        display_name: body.display_name.unwrap_or_else(|| body.name.clone()),
        node_group: body
            .node_group
            .unwrap_or_else(|| DEFAULT_NODE_GROUP.to_owned()),
        name: body.name,
        executor_hosts: body.executor_hosts.unwrap_or_default(),
    };
    let tenant = tenants::create(&services, &caller, &new).await?;
    Ok(HttpResponse::Created().json(TenantBody::from(tenant)))
}

/// One tenant.
#[utoipa::path(tag = "tenants", params(("tenant" = String, Path, description = "tenant name")), responses(
    (status = 200, body = TenantBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}")]
async fn get_tenant(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
) -> ApiResult<web::Json<TenantBody>> {
    Ok(web::Json(
        tenants::get(&services, &caller, &path).await?.into(),
    ))
}

/// Changes a tenant's display name, node group, disabled flag, allow-list of executor hosts or
/// retention of finished runs (operators).
#[utoipa::path(tag = "tenants", params(("tenant" = String, Path, description = "tenant name")),
    request_body = UpdateTenant, responses(
    (status = 200, body = TenantBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[patch("/tenants/{tenant}")]
async fn update_tenant(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
    body: JsonBody<UpdateTenant>,
) -> ApiResult<web::Json<TenantBody>> {
    let body = body.into_inner();
    let retention_ms = match body.retention_hours {
        Some(h) if !(1..=MAX_RETENTION_MS / 3_600_000).contains(&h) => {
            return Err(ApiError::field(
                "retention_hours",
                format!(
                    "must be from 1 to {} hours (3650 days)",
                    MAX_RETENTION_MS / 3_600_000
                ),
            ));
        }
        h => h.map(|h| h * 3_600_000),
    };
    let update = TenantUpdate {
        display_name: body.display_name,
        node_group: body.node_group,
        disabled: body.disabled,
        executor_hosts: body.executor_hosts,
        retention_ms,
    };
    Ok(web::Json(
        tenants::update(&services, &caller, &path, &update)
            .await?
            .into(),
    ))
}

/// Deletes a tenant and everything it owns (operators).
#[utoipa::path(tag = "tenants", params(("tenant" = String, Path, description = "tenant name")), responses(
    (status = 204),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[delete("/tenants/{tenant}")]
async fn delete_tenant(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
) -> ApiResult<HttpResponse> {
    tenants::delete(&services, &caller, &path).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// A tenant's quotas; `null` is unlimited. Each is a positive integer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotasBody {
    /// Runs claimed or running at once (enforced by the claim; see docs/api.md).
    #[serde(default)]
    pub max_concurrent_runs: Option<i64>,
    /// Fires per second: the refill rate of the tenant's token bucket (manual triggers beyond
    /// it get `429` with `Retry-After`).
    #[serde(default)]
    pub max_fires_per_second: Option<i64>,
    /// How many fires the bucket holds (a burst after a quiet spell); needs
    /// `max_fires_per_second`; `null`: one second's worth.
    #[serde(default)]
    pub fire_burst: Option<i64>,
    /// Tasks the tenant may have (creating one more gets `429`).
    #[serde(default)]
    pub max_tasks: Option<i64>,
    /// Runs due and not yet claimed (a manual trigger beyond it gets `429`).
    #[serde(default)]
    pub max_waiting_runs: Option<i64>,
}

impl From<TenantQuotas> for QuotasBody {
    fn from(q: TenantQuotas) -> Self {
        Self {
            max_concurrent_runs: q.max_concurrent_runs,
            max_fires_per_second: q.max_fires_per_second,
            fire_burst: q.fire_burst,
            max_tasks: q.max_tasks,
            max_waiting_runs: q.max_waiting_runs,
        }
    }
}

impl From<QuotasBody> for TenantQuotas {
    fn from(q: QuotasBody) -> Self {
        Self {
            max_concurrent_runs: q.max_concurrent_runs,
            max_fires_per_second: q.max_fires_per_second,
            fire_burst: q.fire_burst,
            max_tasks: q.max_tasks,
            max_waiting_runs: q.max_waiting_runs,
        }
    }
}

/// What a tenant uses now, against its quotas.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct UsageBody {
    pub tasks: i64,
    /// Runs due and not yet claimed.
    pub waiting_runs: i64,
    /// Runs claimed or running.
    pub running_runs: i64,
}

/// A tenant's quotas and its usage.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QuotaReportBody {
    pub tenant: String,
    pub quotas: QuotasBody,
    pub usage: UsageBody,
}

impl From<QuotaReport> for QuotaReportBody {
    fn from(r: QuotaReport) -> Self {
        Self {
            tenant: r.tenant.name,
            quotas: r.quotas.into(),
            usage: UsageBody {
                tasks: r.usage.tasks,
                waiting_runs: r.usage.waiting_runs,
                running_runs: r.usage.running_runs,
            },
        }
    }
}

/// A tenant's quotas and its usage against them (operators, and the tenant's own users).
#[utoipa::path(tag = "tenants", params(("tenant" = String, Path, description = "tenant name")), responses(
    (status = 200, body = QuotaReportBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/quotas")]
async fn get_quotas(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
) -> ApiResult<web::Json<QuotaReportBody>> {
    Ok(web::Json(
        quotas::get(&services, &caller, &path).await?.into(),
    ))
}

/// Replaces a tenant's quotas (operators); a quota left out or `null` is unlimited.
#[utoipa::path(tag = "tenants", params(("tenant" = String, Path, description = "tenant name")),
    request_body = QuotasBody, responses(
    (status = 200, body = QuotaReportBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[put("/tenants/{tenant}/quotas")]
async fn set_quotas(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
    body: JsonBody<QuotasBody>,
) -> ApiResult<web::Json<QuotaReportBody>> {
    let wanted = TenantQuotas::from(body.into_inner());
    Ok(web::Json(
        quotas::set(&services, &caller, &path, &wanted)
            .await?
            .into(),
    ))
}

/// A tenant's claim weight: its share of each claim of its node group relative to the other
/// tenants with due runs there (weight 3 gets three runs for every one of weight 1).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WeightBody {
    pub tenant: String,
    /// 1 (every tenant's default) to 1000.
    pub weight: i32,
}

impl From<WeightReport> for WeightBody {
    fn from(r: WeightReport) -> Self {
        Self {
            tenant: r.tenant.name,
            weight: r.weight,
        }
    }
}

/// A new claim weight for a tenant.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetWeight {
    /// A whole number from 1 to 1000.
    #[schema(minimum = 1, maximum = 1000)]
    pub weight: i64,
}

/// A tenant's claim weight (operators, and the tenant's own users).
#[utoipa::path(tag = "tenants", params(("tenant" = String, Path, description = "tenant name")), responses(
    (status = 200, body = WeightBody),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 404, description = "no such tenant, or another tenant's", body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/weight")]
async fn get_weight(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
) -> ApiResult<web::Json<WeightBody>> {
    Ok(web::Json(
        weights::get(&services, &caller, &path).await?.into(),
    ))
}

/// Sets a tenant's claim weight (operators): its share of each claim of its node group
/// relative to the other tenants with due runs there. Audited as `tenant.weight`.
#[utoipa::path(tag = "tenants", params(("tenant" = String, Path, description = "tenant name")),
    request_body = SetWeight, responses(
    (status = 200, body = WeightBody),
    (status = 400, description = "the body is not JSON", body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, description = "not an operator", body = Problem, content_type = "application/problem+json"),
    (status = 404, description = "no such tenant, or another tenant's", body = Problem, content_type = "application/problem+json"),
    (status = 422, description = "`weight` is not a whole number from 1 to 1000", body = Problem, content_type = "application/problem+json"),
))]
#[put("/tenants/{tenant}/weight")]
async fn set_weight(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<String>,
    body: JsonBody<SetWeight>,
) -> ApiResult<web::Json<WeightBody>> {
    Ok(web::Json(
        weights::set(&services, &caller, &path, body.weight)
            .await?
            .into(),
    ))
}

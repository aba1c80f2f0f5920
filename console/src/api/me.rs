//! `/me`: who the caller is.

use actix_web::{get, web};
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::{Caller, Credential};
use super::error::{ApiResult, Problem};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(me);
}

/// The caller.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MeBody {
    pub user_id: i64,
    pub username: String,
    /// `operator`, `tenant_admin`, `tenant_operator` or `tenant_viewer`.
    pub role: String,
    /// The caller's tenant (none for operators).
    pub tenant: Option<String>,
    /// `token` or `session`.
    pub authenticated_by: String,
}

/// Who the caller is: user, role, tenant.
#[utoipa::path(tag = "session", responses(
    (status = 200, body = MeBody),
    (status = 401, body = Problem, content_type = "application/problem+json"),
))]
#[get("/me")]
async fn me(caller: Caller) -> ApiResult<web::Json<MeBody>> {
    Ok(web::Json(MeBody {
        user_id: caller.user.id.0,
        username: caller.user.username.clone(),
        role: caller.role().to_string(),
        tenant: caller.tenant.as_ref().map(|t| t.name.clone()),
        authenticated_by: match caller.credential {
            Credential::Token { .. } => "token".to_owned(),
            Credential::Session { .. } => "session".to_owned(),
        },
    }))
}

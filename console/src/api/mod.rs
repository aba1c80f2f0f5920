//! The REST API under `/api/v1`, its OpenAPI description (`/api/v1/openapi.json`) and an
//! offline Swagger UI (`/api/docs/`).
//!
//! Every resource is a module with a `routes` function that registers its handlers; adding a
//! resource is one line in [`resources`]. Handlers are thin: they parse input, call a
//! [`service`](crate::service) operation and shape its answer. Handlers carry
//! `#[utoipa::path]`, so the specification is generated from them.

pub mod alarms;
pub mod apps;
pub mod audit;
pub mod auth;
pub mod body;
pub mod bulk;
pub mod channels;
pub mod dependencies;
pub mod error;
pub mod events;
pub mod executors;
pub mod me;
pub mod middleware;
pub mod nodes;
pub mod runs;
pub mod schedule;
pub mod session;
pub mod stats;
pub mod taskfile;
pub mod tasks;
pub mod tenants;
pub mod tokens;
pub mod users;

use actix_web::web;
use serde::Deserialize;
use utoipa::openapi::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify};
use utoipa_actix_web::AppExt;

use self::error::{ApiError, ApiResult, Code};
use crate::service::Services;

/// Limits of the API (see docs/api.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiLimits {
    /// The largest request body accepted; larger ones are answered 413 `payload_too_large`.
    pub max_body_bytes: usize,
}

/// The default body cap: 1 MiB, enough for a bulk change of 500 tasks.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

impl Default for ApiLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

/// The resources of `/api/v1`: one line each.
fn resources(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    me::routes(cfg);
    session::routes(cfg);
    tenants::routes(cfg);
    // Task files and bulk first: `/tasks/export` must not be read as `/tasks/{id}`.
    taskfile::routes(cfg);
    bulk::routes(cfg);
    tasks::routes(cfg);
    schedule::routes(cfg);
    dependencies::routes(cfg);
    runs::routes(cfg);
    alarms::routes(cfg);
    channels::routes(cfg);
    events::routes(cfg);
    audit::routes(cfg);
    stats::routes(cfg);
    apps::routes(cfg);
    executors::routes(cfg);
    nodes::routes(cfg);
    users::routes(cfg);
    tokens::routes(cfg);
}

/// Mounts the API on an actix app or scope: `App::new().configure(api::configure(services, limits))`.
pub fn configure(
    services: Services,
    limits: ApiLimits,
) -> impl FnOnce(&mut web::ServiceConfig) + Clone {
    move |cfg: &mut web::ServiceConfig| {
        let spec = openapi();
        cfg.configure(mthpt_engine::metrics::route);
        cfg.service(
            utoipa_swagger_ui::SwaggerUi::new("/api/docs/{_:.*}")
                .config(utoipa_swagger_ui::Config::new(["/api/v1/openapi.json"])),
        )
        .route(
            "/api/docs",
            web::get().to(|| async {
                actix_web::HttpResponse::Found()
                    .insert_header(("Location", "/api/docs/"))
                    .finish()
            }),
        )
        .service(
            utoipa_actix_web::scope("/api/v1")
                .app_data(web::Data::new(services))
                .app_data(limits)
                .app_data(web::PayloadConfig::new(limits.max_body_bytes))
                .app_data(web::QueryConfig::default().error_handler(|e, req| {
                    ApiError::bad_request(format!(
                        "the query string {:?} cannot be read: {}",
                        mthpt_engine::validate::clip_chars(req.query_string(), 200),
                        crate::http::unwrapped(&e.to_string(), "Query deserialize error: ")
                    ))
                    .into()
                }))
                .app_data(web::PathConfig::default().error_handler(|e, req| {
                    ApiError::new(
                        Code::NotFound,
                        format!(
                            "nothing at {}: {}",
                            mthpt_engine::validate::clip_chars(req.path(), 200),
                            crate::http::unwrapped(&e.to_string(), "Path deserialize error: ")
                        ),
                    )
                    .into()
                }))
                .wrap(actix_web::middleware::from_fn(middleware::request_id))
                .configure(resources)
                .route(
                    "/openapi.json",
                    web::get().to(move || {
                        let spec = spec.clone();
                        async move { actix_web::HttpResponse::Ok().json(spec) }
                    }),
                )
                .default_service(web::to(|| async {
                    Err::<actix_web::HttpResponse, _>(ApiError::new(
                        Code::NotFound,
                        "no such API path or method",
                    ))
                })),
        );
    }
}

/// The OpenAPI 3.1 description of `/api/v1`, generated from the handlers.
pub fn openapi() -> OpenApi {
    #[derive(utoipa::OpenApi)]
    #[openapi(
        info(
            title = "MTHPT console API",
            description = "Tenants, apps, users, tokens, tasks and runs of an MTHPT cluster. \
                Authenticate with `Authorization: Bearer mthpt_…`. Errors are RFC 9457 \
                `application/problem+json` with a stable `code`.",
        ),
        modifiers(&BearerAuth),
        security(("bearer" = [])),
        components(schemas(error::Problem))
    )]
    struct Base;
    struct BearerAuth;
    impl Modify for BearerAuth {
        fn modify(&self, openapi: &mut OpenApi) {
            if let Some(components) = openapi.components.as_mut() {
                components.add_security_scheme(
                    "bearer",
                    SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
                );
            }
        }
    }
    let (_, mut spec) = actix_web::App::new()
        .into_utoipa_app()
        .openapi(<Base as utoipa::OpenApi>::openapi())
        .service(utoipa_actix_web::scope("/api/v1").configure(resources))
        .split_for_parts();
    // After the paths are collected: modifiers named in `#[openapi]` run before.
    ErrorResponses.modify(&mut spec);
    spec
}

/// Adds to every operation the error answers its shape allows, where its handler does not
/// describe them itself: `400` (a body or a query that cannot be read), `401` (every
/// operation but signing in), `403` (every change: the role and CSRF checks), `413` and `422`
/// (every operation with a body, or with query parameters for `422`).
struct ErrorResponses;

impl Modify for ErrorResponses {
    fn modify(&self, openapi: &mut OpenApi) {
        use utoipa::openapi::path::{Operation, ParameterIn};
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};

        fn add(op: &mut Operation, status: &str, description: &str) {
            op.responses
                .responses
                .entry(status.to_owned())
                .or_insert_with(|| {
                    ResponseBuilder::new()
                        .description(description)
                        .content(
                            error::PROBLEM_JSON,
                            ContentBuilder::new()
                                .schema(Some(Ref::from_schema_name("Problem")))
                                .build(),
                        )
                        .into()
                });
        }
        fn errors_of(op: &mut Operation, change: bool) {
            let has_body = op.request_body.is_some();
            let params_in = |place: ParameterIn| {
                op.parameters.iter().flatten().any(|p| match p {
                    RefOr::T(p) => p.parameter_in == place,
                    RefOr::Ref(_) => false,
                })
            };
            let has_query = params_in(ParameterIn::Query);
            // `security(())`: signing in, the one operation without credentials.
            let public = op
                .security
                .as_ref()
                .is_some_and(|s| s.iter().all(|r| r == &Default::default()));
            if has_body || has_query {
                add(
                    op,
                    "400",
                    "`bad_request`: the body is not JSON (or not sent as `application/json`), or a parameter cannot be read",
                );
            }
            if !public {
                add(
                    op,
                    "401",
                    "`unauthenticated`: no credentials, or unknown, expired or revoked ones",
                );
                if change {
                    add(
                        op,
                        "403",
                        "`forbidden`: the caller's role may not do this, or a cookie-authenticated request failed the CSRF check",
                    );
                }
            }
            if has_body {
                add(
                    op,
                    "413",
                    "`payload_too_large`: the body is larger than the server accepts",
                );
            }
            if has_body || has_query {
                add(
                    op,
                    "422",
                    "`validation_failed`: a field is wrong; `errors[]` names it",
                );
            }
        }
        for item in openapi.paths.paths.values_mut() {
            for (op, change) in [
                (item.get.as_mut(), false),
                (item.head.as_mut(), false),
                (item.post.as_mut(), true),
                (item.put.as_mut(), true),
                (item.patch.as_mut(), true),
                (item.delete.as_mut(), true),
            ] {
                if let Some(op) = op {
                    errors_of(op, change);
                }
            }
        }
    }
}

/// The largest page a listing returns.
pub const MAX_LIMIT: u32 = 500;
/// The page size when none is asked for.
pub const DEFAULT_LIMIT: u32 = 100;

/// `?limit=` of a listing: at most [`MAX_LIMIT`].
#[derive(Debug, Clone, Copy, Default, Deserialize, IntoParams)]
pub struct LimitQuery {
    /// Items per page (1–500, default 100).
    pub limit: Option<u32>,
}

impl LimitQuery {
    /// The limit, refusing 0 and anything above [`MAX_LIMIT`].
    pub fn get(self) -> ApiResult<i64> {
        match self.limit.unwrap_or(DEFAULT_LIMIT) {
            n @ 1..=MAX_LIMIT => Ok(i64::from(n)),
            n => Err(ApiError::field(
                "limit",
                format!("must be between 1 and {MAX_LIMIT} (was {n})"),
            )),
        }
    }
}

pub use crate::service::at;

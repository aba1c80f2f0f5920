//! `/events`: the WebSocket of live events (alarm raised, repeated, acknowledged, resolved;
//! live run events on request; re-sync requests). See [`crate::events`] and docs/alarms.md.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, get, web};

use super::auth::Credential;
use super::error::{ApiError, ApiResult, Code, Problem};
use crate::events::{Viewer, run_session};
use crate::service::Services;
use mthpt_engine::tenant::Role;

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(events);
}

/// Opens the WebSocket of live events. Authenticated by a bearer token or the session cookie;
/// with the cookie, the `Origin` must be the console's own. Operators receive every event;
/// tenant users their tenant's only. Text frames are JSON: the alarm messages of
/// docs/alarms.md, and `{"type":"resync"}` when events may have been missed (re-read the
/// lists). With `?runs=true` the socket also carries live run events (`run.state`,
/// `run.progress`, `run.log`; rate-limited per run). The server pings every 20 s, and closes
/// the socket (code 1008) within a few seconds of its session being signed out or its token
/// revoked or expired. A user holds at most 32 sockets on a node, a node 1,000 in all (`429`).
#[utoipa::path(tag = "events", params(EventsQuery), responses(
    (status = 101, description = "switched to the WebSocket protocol"),
    (status = 400, body = Problem, content_type = "application/problem+json"),
    (status = 401, body = Problem, content_type = "application/problem+json"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 429, description = "`rate_limited`: the user or the node holds as many sockets as it may",
        body = Problem, content_type = "application/problem+json"),
))]
#[get("/events")]
async fn events(
    req: HttpRequest,
    body: web::Payload,
    services: web::Data<Services>,
    query: web::Query<EventsQuery>,
) -> ApiResult<HttpResponse> {
    let caller = crate::http::authenticate(&services, &req).await?;
    if matches!(caller.credential, Credential::Session { .. }) {
        check_origin(&req)?;
    }
    let viewer = match (caller.role(), caller.tenant_id()) {
        (Role::Operator, _) => Viewer::Operator,
        (_, Some(t)) => Viewer::Tenant(t),
        (_, None) => return Err(ApiError::forbidden("this user belongs to no tenant")),
    };
    let permit = services
        .events
        .admit(caller.user.id.0)
        .map_err(|why| ApiError::new(Code::RateLimited, why))?;
    let (response, session, msgs) = actix_ws::handle(&req, body)
        .map_err(|e| ApiError::bad_request(format!("not a WebSocket upgrade: {e}")))?;
    // Subscribed before the answer goes out: every event after the handshake reaches it.
    let frames = services.events.subscribe();
    let runs = query.runs.then(|| services.events.subscribe_runs());
    let still_allowed = move || {
        let (services, caller) = (services.clone(), caller.clone());
        async move { caller.still_holds(&services).await }
    };
    let chinese = query.lang.as_deref().is_some_and(|l| l.starts_with("zh"));
    actix_web::rt::spawn(async move {
        run_session(viewer, chinese, session, msgs, frames, runs, still_allowed).await;
        drop(permit);
    });
    Ok(response)
}

/// What the socket carries besides alarms.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct EventsQuery {
    /// `true`: also live run events (state changes, progress, log lines of the runs the caller
    /// may see). Default `false`.
    #[serde(default)]
    runs: bool,
    /// `zh-CN`: alarm messages the engine wrote come in Simplified Chinese (a wrapper's own
    /// alarm text stays as written).
    #[serde(default)]
    lang: Option<String>,
}

/// A browser opening the socket with the session cookie must be on the console's own origin
/// (a page elsewhere cannot use the cookie to listen in).
fn check_origin(req: &HttpRequest) -> ApiResult<()> {
    let info = req.connection_info();
    let own = format!("{}://{}", info.scheme(), info.host());
    match req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
    {
        Some(origin) if origin == own => Ok(()),
        _ => Err(ApiError::forbidden(
            "a cookie-authenticated WebSocket must come from the console's own origin; \
             API clients use a bearer token",
        )),
    }
}

//! `/tenants/{tenant}/channels`: notification channels (webhook, e-mail) with a minimum
//! severity, and each channel's delivery log. See docs/alarms-channels.md.

use actix_web::{HttpResponse, delete, get, patch, post, web};
use chrono::{DateTime, Utc};
use mthpt_engine::alarm::Severity;
use mthpt_engine::channel::{
    Channel, ChannelConfig, ChannelUpdate, Delivery, DeliveryState, NewChannel, SmtpTls,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::body::JsonBody;
use super::error::{ApiError, ApiResult, Problem};
use super::{LimitQuery, at};
use crate::service::Services;
use crate::service::channels;

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(list_channels)
        .service(create_channel)
        .service(get_channel)
        .service(update_channel)
        .service(delete_channel)
        .service(list_deliveries);
}

/// SMTP transport security.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SmtpTlsBody {
    /// TLS from the first byte (usually port 465).
    Tls,
    /// STARTTLS, required (usually port 587).
    Starttls,
    /// No encryption: a relay on the same host or a trusted network only.
    None,
}

/// Where a channel sends, by `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ChannelConfigBody {
    /// An HMAC-signed JSON `POST` per alarm.
    Webhook {
        /// `http://` or `https://` URL; redirects are not followed.
        url: String,
    },
    /// One e-mail per alarm, over SMTP.
    Email {
        smtp_host: String,
        smtp_port: u16,
        /// Default `starttls`.
        tls: Option<SmtpTlsBody>,
        /// SMTP user name; the password is the channel's `secret`.
        username: Option<String>,
        /// Sender address (`alerts@example.com`).
        from: String,
        /// 1 to 20 recipient addresses.
        to: Vec<String>,
    },
}

impl From<ChannelConfigBody> for ChannelConfig {
    fn from(b: ChannelConfigBody) -> Self {
        match b {
            ChannelConfigBody::Webhook { url } => ChannelConfig::Webhook { url },
            ChannelConfigBody::Email {
                smtp_host,
                smtp_port,
                tls,
                username,
                from,
                to,
            } => ChannelConfig::Email {
                smtp_host,
                smtp_port,
                tls: match tls {
                    Some(SmtpTlsBody::Tls) => SmtpTls::Tls,
                    Some(SmtpTlsBody::None) => SmtpTls::None,
                    Some(SmtpTlsBody::Starttls) | None => SmtpTls::Starttls,
                },
                username,
                from,
                to,
            },
        }
    }
}

impl From<ChannelConfig> for ChannelConfigBody {
    fn from(c: ChannelConfig) -> Self {
        match c {
            ChannelConfig::Webhook { url } => ChannelConfigBody::Webhook { url },
            ChannelConfig::Email {
                smtp_host,
                smtp_port,
                tls,
                username,
                from,
                to,
            } => ChannelConfigBody::Email {
                smtp_host,
                smtp_port,
                tls: Some(match tls {
                    SmtpTls::Tls => SmtpTlsBody::Tls,
                    SmtpTls::Starttls => SmtpTlsBody::Starttls,
                    SmtpTls::None => SmtpTlsBody::None,
                }),
                username,
                from,
                to,
            },
        }
    }
}

/// A channel as the API shows it (never its secret).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ChannelBody {
    pub id: i64,
    pub name: String,
    /// `webhook` or `email`.
    pub kind: String,
    /// Alarms of this severity and above are sent: `info`, `warning` or `critical`.
    pub min_severity: String,
    pub enabled: bool,
    pub config: ChannelConfigBody,
    /// Whether a secret (webhook signing secret, SMTP password) is set.
    pub has_secret: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<Channel> for ChannelBody {
    fn from(c: Channel) -> Self {
        Self {
            id: c.id.0,
            name: c.name,
            kind: c.kind.to_string(),
            min_severity: c.min_severity.to_string(),
            enabled: c.enabled,
            config: c.config.0.into(),
            has_secret: c.secret.is_some(),
            created_at: at(c.created_at),
            updated_at: at(c.updated_at),
        }
    }
}

/// A created channel, with the webhook secret the server generated (shown only here).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ChannelCreatedBody {
    #[serde(flatten)]
    pub channel: ChannelBody,
    /// Only when the server generated it: verify webhook signatures with it; not shown again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// A new channel.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateChannel {
    /// Unique in the tenant (`[a-z0-9][a-z0-9_-]*`, at most 63).
    pub name: String,
    /// `info`, `warning` (default) or `critical`.
    pub min_severity: Option<String>,
    pub config: ChannelConfigBody,
    /// Webhook: the signing secret (generated and shown once when left out). E-mail: the
    /// SMTP password (needed with a `username`).
    pub secret: Option<String>,
    /// Default true.
    pub enabled: Option<bool>,
}

/// A change to a channel; fields left out stay as they are.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateChannel {
    pub min_severity: Option<String>,
    /// Of the channel's own kind.
    pub config: Option<ChannelConfigBody>,
    pub secret: Option<String>,
    /// Enabling a disabled channel sends the alarms raised from then on.
    pub enabled: Option<bool>,
}

fn severity(value: Option<&str>) -> ApiResult<Option<Severity>> {
    value
        .map(str::parse::<Severity>)
        .transpose()
        .map_err(|e| ApiError::field("min_severity", e.to_string()))
}

/// One delivery of one alarm to a channel.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeliveryBody {
    pub id: i64,
    pub alarm_id: i64,
    /// `pending` (not sent yet or to be retried), `delivered` or `failed` (attempts used up).
    pub state: String,
    pub attempts: i32,
    /// When a pending delivery is tried (again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The HTTP status the webhook receiver last answered.
    pub last_status: Option<i32>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
}

impl From<Delivery> for DeliveryBody {
    fn from(d: Delivery) -> Self {
        Self {
            id: d.id.0,
            alarm_id: d.alarm_id.0,
            state: d.state.to_string(),
            attempts: d.attempts,
            next_attempt_at: (d.state == DeliveryState::Pending).then(|| at(d.next_attempt_at)),
            last_status: d.last_status,
            last_error: d.last_error,
            created_at: at(d.created_at),
            delivered_at: d.delivered_at.map(at),
        }
    }
}

/// A page of deliveries.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeliveryPage {
    pub items: Vec<DeliveryBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Paging of the delivery log.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveryQuery {
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// A tenant's notification channels.
#[utoipa::path(tag = "channels", params(("tenant" = String, Path, description = "tenant name")), responses(
    (status = 200, body = Vec<ChannelBody>),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/channels")]
async fn list_channels(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
) -> ApiResult<web::Json<Vec<ChannelBody>>> {
    let list = channels::list(&services, &caller, &tenant).await?;
    Ok(web::Json(list.into_iter().map(ChannelBody::from).collect()))
}

/// Creates a notification channel; it is sent the alarms raised from now on.
#[utoipa::path(tag = "channels", params(("tenant" = String, Path, description = "tenant name")),
    request_body = CreateChannel, responses(
    (status = 201, body = ChannelCreatedBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 409, description = "name taken", body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[post("/tenants/{tenant}/channels")]
async fn create_channel(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    body: JsonBody<CreateChannel>,
) -> ApiResult<HttpResponse> {
    let body = body.into_inner();
    let new = NewChannel {
        name: body.name,
        min_severity: severity(body.min_severity.as_deref())?.unwrap_or(Severity::Warning),
        config: body.config.into(),
        secret: body.secret,
        enabled: body.enabled.unwrap_or(true),
    };
    let created = channels::create(&services, &caller, &tenant, new).await?;
    Ok(HttpResponse::Created().json(ChannelCreatedBody {
        channel: created.channel.into(),
        secret: created.generated_secret,
    }))
}

/// One notification channel.
#[utoipa::path(tag = "channels", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "channel id"),
), responses(
    (status = 200, body = ChannelBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/channels/{id}")]
async fn get_channel(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64)>,
) -> ApiResult<web::Json<ChannelBody>> {
    let (tenant, id) = path.into_inner();
    Ok(web::Json(
        channels::get(&services, &caller, &tenant, id).await?.into(),
    ))
}

/// Changes a notification channel (severity, config of its kind, secret, enabled).
#[utoipa::path(tag = "channels", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "channel id"),
), request_body = UpdateChannel, responses(
    (status = 200, body = ChannelBody),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[patch("/tenants/{tenant}/channels/{id}")]
async fn update_channel(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64)>,
    body: JsonBody<UpdateChannel>,
) -> ApiResult<web::Json<ChannelBody>> {
    let (tenant, id) = path.into_inner();
    let body = body.into_inner();
    let update = ChannelUpdate {
        min_severity: severity(body.min_severity.as_deref())?,
        config: body.config.map(Into::into),
        secret: body.secret,
        enabled: body.enabled,
    };
    Ok(web::Json(
        channels::update(&services, &caller, &tenant, id, update)
            .await?
            .into(),
    ))
}

/// Deletes a notification channel and its delivery log.
#[utoipa::path(tag = "channels", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "channel id"),
), responses(
    (status = 204, description = "deleted"),
    (status = 403, body = Problem, content_type = "application/problem+json"),
    (status = 404, body = Problem, content_type = "application/problem+json"),
))]
#[delete("/tenants/{tenant}/channels/{id}")]
async fn delete_channel(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64)>,
) -> ApiResult<HttpResponse> {
    let (tenant, id) = path.into_inner();
    channels::delete(&services, &caller, &tenant, id).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// A channel's delivery log, newest first: each alarm sent to it, its attempts and outcome.
#[utoipa::path(tag = "channels", params(
    ("tenant" = String, Path, description = "tenant name"),
    ("id" = i64, Path, description = "channel id"),
    DeliveryQuery, LimitQuery,
), responses(
    (status = 200, body = DeliveryPage),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/channels/{id}/deliveries")]
async fn list_deliveries(
    services: web::Data<Services>,
    caller: Caller,
    path: web::Path<(String, i64)>,
    query: web::Query<DeliveryQuery>,
    limit: web::Query<LimitQuery>,
) -> ApiResult<web::Json<DeliveryPage>> {
    let (tenant, id) = path.into_inner();
    let limit = limit.into_inner().get()?;
    let page = channels::deliveries(
        &services,
        &caller,
        &tenant,
        id,
        query.cursor.as_deref(),
        limit,
    )
    .await?;
    Ok(web::Json(DeliveryPage {
        items: page.items.into_iter().map(DeliveryBody::from).collect(),
        next_cursor: page.next_cursor,
    }))
}

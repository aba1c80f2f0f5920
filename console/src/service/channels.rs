//! A tenant's notification channels (webhook, e-mail) and their delivery logs. Reading them
//! takes the tenant's read role, changing them its administrator's (like apps); every change
//! is audited. Secrets (a webhook's signing secret, an SMTP password) are never shown again
//! after a webhook's generated secret was shown once, at creation.

use mthpt_engine::channel::{
    Channel, ChannelConfig, ChannelId, ChannelUpdate, Delivery, DeliveryId, NewChannel,
    check_secret,
};
use serde_json::json;

use super::credentials::new_app_secret;
use super::runs::{Page, page, parse_cursor};
use super::{Change, Services, audit};
use crate::service::access::{Action, Caller, tenant_access};
use crate::service::error::{ApiError, ApiResult};

/// A created channel and, for a webhook created without one, its generated secret (shown
/// only in this answer).
#[derive(Debug, Clone)]
pub struct CreatedChannel {
    pub channel: Channel,
    pub generated_secret: Option<String>,
}

pub async fn list(services: &Services, caller: &Caller, tenant: &str) -> ApiResult<Vec<Channel>> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    Ok(tx.list_channels(tenant.id).await?)
}

pub async fn get(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: i64,
) -> ApiResult<Channel> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    Ok(tx.get_channel(tenant.id, ChannelId(id)).await?)
}

/// Creates a channel. A webhook without a secret gets a generated one; an e-mail channel's
/// secret is its SMTP password (needed when it names a user name).
pub async fn create(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    mut new: NewChannel,
) -> ApiResult<CreatedChannel> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let mut generated_secret = None;
    if matches!(new.config, ChannelConfig::Webhook { .. }) && new.secret.is_none() {
        let secret = new_app_secret();
        new.secret = Some(secret.clone());
        generated_secret = Some(secret);
    }
    if let ChannelConfig::Email {
        username: Some(_), ..
    } = &new.config
        && new.secret.is_none()
    {
        return Err(ApiError::field(
            "secret",
            "give the SMTP password as the secret when a username is set",
        ));
    }
    new.validate()?;
    let now = services.now();
    let mut tx = services.write().await?;
    let channel = tx.create_channel(tenant.id, &new, now).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "channel.create",
            target_kind: "notification_channel",
            target_id: channel.id.to_string(),
            details: json!({
                "name": channel.name,
                "kind": channel.kind.as_str(),
                "min_severity": channel.min_severity.as_str(),
                "config": channel.config.0,
                "enabled": channel.enabled,
            }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(CreatedChannel {
        channel,
        generated_secret,
    })
}

/// Changes a channel; its kind stays (a config of another kind is a validation error).
pub async fn update(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: i64,
    update: ChannelUpdate,
) -> ApiResult<Channel> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    let current = tx.get_channel(tenant.id, ChannelId(id)).await?;
    if let Some(config) = &update.config {
        if config.kind() != current.kind {
            return Err(ApiError::field(
                "config.kind",
                format!(
                    "the channel is a {} channel; its kind cannot change (create another)",
                    current.kind
                ),
            ));
        }
        config.validate()?;
    }
    check_secret(update.secret.as_deref())?;
    let channel = tx
        .update_channel(tenant.id, current.id, &update, now)
        .await?;
    let mut changed = serde_json::Map::new();
    if let Some(s) = update.min_severity {
        changed.insert("min_severity".into(), json!(s.as_str()));
    }
    if update.config.is_some() {
        changed.insert("config".into(), json!(channel.config.0));
    }
    if update.secret.is_some() {
        // That it changed, never the value.
        changed.insert("secret".into(), json!("changed"));
    }
    if let Some(e) = update.enabled {
        changed.insert("enabled".into(), json!(e));
    }
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "channel.update",
            target_kind: "notification_channel",
            target_id: channel.id.to_string(),
            details: json!({ "name": channel.name, "changed": changed }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(channel)
}

/// Deletes a channel and its delivery log.
pub async fn delete(services: &Services, caller: &Caller, tenant: &str, id: i64) -> ApiResult<()> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    let channel = tx.get_channel(tenant.id, ChannelId(id)).await?;
    tx.delete_channel(tenant.id, channel.id).await?;
    audit(
        tx.as_mut(),
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "channel.delete",
            target_kind: "notification_channel",
            target_id: channel.id.to_string(),
            details: json!({ "name": channel.name, "kind": channel.kind.as_str() }),
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// A page of a channel's deliveries, newest first.
pub async fn deliveries(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: i64,
    cursor: Option<&str>,
    limit: i64,
) -> ApiResult<Page<Delivery>> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let before = cursor.map(parse_cursor).transpose()?.map(DeliveryId);
    let mut tx = services.read().await?;
    let channel = tx.get_channel(tenant.id, ChannelId(id)).await?;
    let items = tx
        .list_deliveries(tenant.id, channel.id, before, limit)
        .await?;
    Ok(page(items, limit, |d| d.id.0))
}

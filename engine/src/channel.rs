//! Notification channels: where a tenant's alarms are sent besides the console — a webhook
//! (an HMAC-signed JSON `POST`) or e-mail over SMTP — each with a minimum severity. The
//! engine's [`Notifier`](crate::notify::Notifier) delivers them; the console API configures
//! them.

use serde::{Deserialize, Serialize};
use sqlx::types::Json;

use crate::alarm::{AlarmId, Severity};
use crate::macros::{id_type, text_enum};
use crate::tenant::TenantId;
use crate::validate::FieldError;

id_type!(
    /// Identifies a notification channel.
    ChannelId
);

id_type!(
    /// Identifies one delivery (of one alarm to one channel).
    DeliveryId
);

text_enum!(
    /// How a channel sends.
    ChannelKind {
        Webhook = "webhook",
        Email = "email",
    }
);

text_enum!(
    /// Where a delivery stands.
    DeliveryState {
        /// Not sent yet, or to be tried again at `next_attempt_at`.
        Pending = "pending",
        Delivered = "delivered",
        /// Every attempt failed; no more are made.
        Failed = "failed",
    }
);

/// How urgent a severity is, for a channel's minimum: info < warning < critical.
pub fn severity_rank(s: Severity) -> u8 {
    match s {
        Severity::Info => 0,
        Severity::Warning => 1,
        Severity::Critical => 2,
    }
}

/// The severities at or above `min`.
pub fn severities_from(min: Severity) -> Vec<Severity> {
    Severity::ALL
        .iter()
        .copied()
        .filter(|s| severity_rank(*s) >= severity_rank(min))
        .collect()
}

/// Transport security of an SMTP connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SmtpTls {
    /// TLS from the first byte (port 465).
    Tls,
    /// Plain connection upgraded with STARTTLS, required (port 587).
    #[default]
    Starttls,
    /// No encryption (a relay on the same host or network only).
    None,
}

/// Where and how a channel sends, by kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChannelConfig {
    Webhook {
        /// `http://` or `https://` URL the alarm is posted to.
        url: String,
    },
    Email {
        smtp_host: String,
        smtp_port: u16,
        #[serde(default)]
        tls: SmtpTls,
        /// SMTP user name; the password is the channel's secret.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        username: Option<String>,
        /// The sender address.
        from: String,
        /// Recipients (1 to 20).
        to: Vec<String>,
    },
}

impl ChannelConfig {
    pub fn kind(&self) -> ChannelKind {
        match self {
            ChannelConfig::Webhook { .. } => ChannelKind::Webhook,
            ChannelConfig::Email { .. } => ChannelKind::Email,
        }
    }

    /// Checks the fields, naming the first wrong one (`config.url`, `config.to[1]`, …).
    pub fn validate(&self) -> Result<(), FieldError> {
        match self {
            ChannelConfig::Webhook { url } => {
                if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
                    return Err(FieldError::new(
                        "config.url",
                        "must not contain spaces or control characters",
                    ));
                }
                let parsed = reqwest::Url::parse(url).map_err(|e| {
                    FieldError::new("config.url", format!("{url:?} is not a URL: {e}"))
                })?;
                if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                    return Err(FieldError::new(
                        "config.url",
                        format!("{url:?} must be an http:// or https:// URL with a host"),
                    ));
                }
                if url.len() > 2000 {
                    return Err(FieldError::new(
                        "config.url",
                        "must be at most 2000 characters",
                    ));
                }
                Ok(())
            }
            ChannelConfig::Email {
                smtp_host,
                smtp_port,
                from,
                to,
                username,
                ..
            } => {
                let host_ok = !smtp_host.is_empty()
                    && smtp_host.len() <= 253
                    && smtp_host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'));
                if !host_ok {
                    return Err(FieldError::new(
                        "config.smtp_host",
                        format!("{smtp_host:?} is not a host name or address"),
                    ));
                }
                if *smtp_port == 0 {
                    return Err(FieldError::new("config.smtp_port", "must be 1 to 65535"));
                }
                if username.as_ref().is_some_and(|u| {
                    u.is_empty() || u.len() > 200 || u.chars().any(char::is_control)
                }) {
                    return Err(FieldError::new(
                        "config.username",
                        "must be 1 to 200 characters, none of them control characters",
                    ));
                }
                check_address("config.from", from)?;
                if to.is_empty() || to.len() > 20 {
                    return Err(FieldError::new("config.to", "give 1 to 20 recipients"));
                }
                for (i, a) in to.iter().enumerate() {
                    check_address(&format!("config.to[{i}]"), a)?;
                }
                Ok(())
            }
        }
    }
}

/// A plain `local@domain` address: no display name, no spaces or angle brackets.
fn check_address(field: &str, a: &str) -> Result<(), FieldError> {
    let ok = a.len() <= 254
        && a.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty() && !domain.is_empty() && !domain.contains('@')
        })
        && !a
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '<' | '>' | ',' | ';'));
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("{a:?} is not an e-mail address (local@domain)"),
        ))
    }
}

/// A channel as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Channel {
    pub id: ChannelId,
    pub tenant_id: TenantId,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub kind: ChannelKind,
    #[sqlx(try_from = "String")]
    pub min_severity: Severity,
    pub config: Json<ChannelConfig>,
    /// The webhook's signing secret or the SMTP password.
    pub secret: Option<String>,
    pub enabled: bool,
    pub created_at: i64,
    pub updated_at: i64,
    /// Delivery rows exist for the alarms raised before this (see the migration).
    pub scanned_until: i64,
}

/// A channel to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewChannel {
    pub name: String,
    pub min_severity: Severity,
    pub config: ChannelConfig,
    pub secret: Option<String>,
    pub enabled: bool,
}

impl NewChannel {
    /// Checks the name, the config and the secret.
    pub fn validate(&self) -> Result<(), FieldError> {
        crate::validate::check_slug("name", &self.name)?;
        self.config.validate()?;
        check_secret(self.secret.as_deref())
    }
}

/// A secret: at most 500 characters, none of them control characters.
pub fn check_secret(secret: Option<&str>) -> Result<(), FieldError> {
    match secret {
        Some(s) if s.is_empty() || s.len() > 500 || s.chars().any(char::is_control) => {
            Err(FieldError::new(
                "secret",
                "must be 1 to 500 characters, none of them control characters",
            ))
        }
        _ => Ok(()),
    }
}

/// A change to a channel; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelUpdate {
    pub min_severity: Option<Severity>,
    /// Of the channel's own kind.
    pub config: Option<ChannelConfig>,
    pub secret: Option<String>,
    pub enabled: Option<bool>,
}

/// One delivery of one alarm to one channel, with its attempts.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Delivery {
    pub id: DeliveryId,
    pub channel_id: ChannelId,
    pub tenant_id: TenantId,
    pub alarm_id: AlarmId,
    #[sqlx(try_from = "String")]
    pub state: DeliveryState,
    /// Attempts made (a claimed delivery counts its attempt when it is claimed).
    pub attempts: i32,
    /// When it is (or was) due next.
    pub next_attempt_at: i64,
    /// The HTTP status of the last attempt, for webhooks that answered.
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub delivered_at: Option<i64>,
}

/// What became of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptOutcome {
    pub delivery: DeliveryId,
    /// The attempt number the delivery had when claimed: a node whose claim was taken over
    /// (the lease ran out) cannot record over the newer attempt.
    pub attempt: i32,
    pub delivered: bool,
    pub status: Option<i32>,
    pub error: Option<String>,
    /// When to try again (`None` with `delivered == false`: give up, `failed`).
    pub retry_at: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn email(to: Vec<&str>, username: Option<&str>) -> ChannelConfig {
        ChannelConfig::Email {
            smtp_host: "smtp.example.com".into(),
            smtp_port: 587,
            tls: SmtpTls::Starttls,
            username: username.map(str::to_owned),
            from: "mthpt@example.com".into(),
            to: to.into_iter().map(str::to_owned).collect(),
        }
    }

    fn field(c: &ChannelConfig) -> Option<String> {
        c.validate().err().map(|e| e.field)
    }

    #[test]
    fn configs_are_checked_naming_the_field() {
        let hook = |url: &str| ChannelConfig::Webhook { url: url.into() };
        assert_eq!(field(&hook("https://hooks.example.com/x?a=1")), None);
        for bad in [
            "ftp://h/x",
            "mailto:a@b.c",
            "not a url",
            "https://h/\0x",
            "https://h/a b",
        ] {
            assert_eq!(field(&hook(bad)).as_deref(), Some("config.url"), "{bad:?}");
        }
        assert_eq!(field(&email(vec!["a@example.com"], Some("u"))), None);
        assert_eq!(field(&email(vec![], None)).as_deref(), Some("config.to"));
        assert_eq!(
            field(&email(vec!["a@example.com", "Ann <a@example.com>"], None)).as_deref(),
            Some("config.to[1]")
        );
        assert_eq!(
            field(&email(vec!["a@example.com"], Some("u\0"))).as_deref(),
            Some("config.username")
        );
    }

    #[test]
    fn severities_from_a_minimum_include_the_more_urgent() {
        assert_eq!(severities_from(Severity::Info), Severity::ALL.to_vec());
        assert_eq!(
            severities_from(Severity::Warning),
            vec![Severity::Warning, Severity::Critical]
        );
        assert_eq!(
            severities_from(Severity::Critical),
            vec![Severity::Critical]
        );
    }
}

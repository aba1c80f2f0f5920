//! The notifier: sends alarms to tenants' notification channels (webhook, e-mail).
//!
//! Every engine node runs it; one [`Notifier::run_once`] pass
//! 1. makes delivery rows for the alarms raised since the last pass, per enabled channel (the
//!    channel's tenant, from its minimum severity up, not muted, raised after the channel was
//!    created) — channels are taken with `SKIP LOCKED`, so nodes share them;
//! 2. claims due deliveries with `SKIP LOCKED`, counting the attempt and holding them for a
//!    lease (a node that dies mid-attempt leaves them due again when the lease ends);
//! 3. sends them, all at once, each bounded by its timeout;
//! 4. records each outcome: delivered, or due again after an exponential backoff, or `failed`
//!    after the last attempt.
//!
//! The notifier has its own rows and its own transactions: a channel that fails or hangs
//! delays only its own deliveries, never the alarm outbox, the relay or the scheduler. Delivery
//! is at least once (a node that dies after sending and before recording sends again); every
//! attempt of one delivery carries the same `X-Mthpt-Delivery` id for receivers to de-duplicate.
//!
//! Webhook requests are signed exactly like the wrapper protocol's (docs/protocol.md §2), with
//! the channel's secret: `X-Mthpt-App: <tenant>.<channel>`, `X-Mthpt-Timestamp`,
//! `X-Mthpt-Nonce` and `X-Mthpt-Signature` = hex HMAC-SHA256 over
//! `POST\n<path>\n<timestamp>\n<nonce>\n<body>`; a receiver can verify them with the same code.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use mthpt_wrapper::protocol::Signer;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::alarm::{Alarm, AlarmId};
use crate::channel::{AttemptOutcome, Channel, ChannelConfig, ChannelId, Delivery, SmtpTls};
use crate::clock::{Clock, ms_to_datetime};
use crate::store::{Result, Scope, Store};
use crate::tenant::TenantId;

/// The notifier's settings. [`NotifyConfig::default`] gives working values.
#[derive(Debug, Clone, PartialEq)]
pub struct NotifyConfig {
    /// How often a node makes a pass.
    pub interval_ms: i64,
    /// Deliveries claimed per pass.
    pub batch: i64,
    /// Delivery rows made per channel per pass.
    pub enqueue_limit: i64,
    /// How far before the last pass's end each pass looks again for alarms (an alarm whose
    /// transaction committed late is still found).
    pub settle_ms: i64,
    /// How long a claimed attempt is held before another node may make it.
    pub lease_ms: i64,
    /// Attempts before a delivery is given up as `failed`.
    pub max_attempts: i32,
    /// The wait after the first failed attempt; doubled after each further one.
    pub backoff_ms: i64,
    /// The longest wait between attempts.
    pub backoff_max_ms: i64,
    /// Whole time of one webhook request (connecting 5 s at most).
    pub http_timeout: Duration,
    /// Time of each SMTP command.
    pub smtp_timeout: Duration,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            interval_ms: 1_000,
            batch: 100,
            enqueue_limit: 500,
            settle_ms: 60_000,
            lease_ms: 60_000,
            max_attempts: 10,
            backoff_ms: 5_000,
            backoff_max_ms: 900_000,
            http_timeout: Duration::from_secs(10),
            smtp_timeout: Duration::from_secs(15),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotifyReport {
    /// Delivery rows made.
    pub enqueued: u64,
    /// Attempts made.
    pub attempted: usize,
    pub delivered: usize,
    /// Failed attempts that will be tried again.
    pub retrying: usize,
    /// Deliveries given up.
    pub failed: usize,
}

/// The JSON body a webhook receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookBody {
    /// The same in every attempt of this delivery: de-duplicate by it.
    pub delivery_id: i64,
    /// Which attempt this is (1, 2, …).
    pub attempt: i32,
    pub tenant: String,
    pub channel: String,
    pub alarm: AlarmBody,
}

/// An alarm as notifications show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlarmBody {
    pub id: i64,
    pub kind: String,
    pub severity: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<i64>,
    pub message: String,
    pub details: serde_json::Value,
    /// RFC 3339, UTC.
    pub created_at: chrono::DateTime<chrono::Utc>,
}

impl AlarmBody {
    pub fn of(a: &Alarm) -> Self {
        Self {
            id: a.id.0,
            kind: a.kind.as_str().to_owned(),
            severity: a.severity.as_str().to_owned(),
            task_id: a.task_id.map(|t| t.0),
            run_id: a.run_id.map(|r| r.0),
            executor_id: a.executor_id.map(|e| e.0),
            message: a.message.clone(),
            details: a.details.0.clone(),
            created_at: ms_to_datetime(a.created_at),
        }
    }
}

/// Header naming the delivery (the same in every attempt).
pub const DELIVERY_HEADER: &str = "X-Mthpt-Delivery";

/// Sends alarms to notification channels for one node.
#[derive(Debug, Clone)]
pub struct Notifier {
    store: Arc<dyn Store>,
    http: reqwest::Client,
    config: NotifyConfig,
}

/// Everything one attempt needs.
struct Attempt {
    delivery: Delivery,
    channel: Arc<Channel>,
    tenant: String,
    alarm: Alarm,
}

impl Notifier {
    /// A notifier over `store`; fails only when the HTTP client cannot be built.
    pub fn new(store: Arc<dyn Store>, config: NotifyConfig) -> reqwest::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5).min(config.http_timeout))
            .timeout(config.http_timeout)
            // A redirect would post the signed alarm somewhere the tenant did not name.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("mthpt-notifier/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            store,
            http,
            config,
        })
    }

    pub fn config(&self) -> &NotifyConfig {
        &self.config
    }

    /// The wait before attempt `attempts + 1`, after `attempts` failed ones.
    pub fn backoff_ms(&self, attempts: i32) -> i64 {
        let exp = u32::try_from(attempts.saturating_sub(1))
            .unwrap_or(0)
            .min(30);
        self.config
            .backoff_ms
            .saturating_mul(1_i64 << exp)
            .min(self.config.backoff_max_ms)
    }

    /// One pass at `now` (see the module docs).
    pub async fn run_once(&self, now: i64) -> Result<NotifyReport> {
        let mut report = NotifyReport::default();
        let mut tx = self.store.begin().await?;
        report.enqueued = tx
            .enqueue_notifications(now, self.config.settle_ms, self.config.enqueue_limit)
            .await?;
        tx.commit().await?;

        let mut tx = self.store.begin().await?;
        let claimed = tx
            .claim_deliveries(now, now + self.config.lease_ms, self.config.batch)
            .await?;
        tx.commit().await?;
        if claimed.is_empty() {
            return Ok(report);
        }

        let attempts = self.gather(claimed).await?;
        let sends = attempts.iter().map(|a| self.attempt(a));
        let results = join_all(sends).await;
        let mut outcomes = Vec::with_capacity(results.len());
        for (a, result) in attempts.iter().zip(results) {
            report.attempted += 1;
            let (delivered, status, error) = match result {
                Ok(status) => (true, status, None),
                Err((status, why)) => (false, status, Some(why)),
            };
            crate::metrics::notification_attempt(a.channel.kind.as_str(), delivered);
            let retry_at = if delivered || a.delivery.attempts >= self.config.max_attempts {
                None
            } else {
                Some(now + self.backoff_ms(a.delivery.attempts))
            };
            match (delivered, retry_at) {
                (true, _) => report.delivered += 1,
                (false, Some(_)) => report.retrying += 1,
                (false, None) => report.failed += 1,
            }
            if let Some(why) = &error {
                tracing::info!(
                    channel = %a.channel.name, tenant = %a.tenant, alarm = %a.alarm.id,
                    delivery = %a.delivery.id, attempt = a.delivery.attempts, error = %why,
                    retry = retry_at.is_some(), "notification not delivered"
                );
            }
            outcomes.push(AttemptOutcome {
                delivery: a.delivery.id,
                attempt: a.delivery.attempts,
                delivered,
                status,
                error,
                retry_at,
            });
        }
        let mut tx = self.store.begin().await?;
        tx.record_attempts(&outcomes, now).await?;
        tx.commit().await?;
        Ok(report)
    }

    /// Reads the channels, tenants and alarms of claimed deliveries. A delivery whose channel
    /// or alarm is gone (deleted meanwhile) is dropped; its row went with them.
    async fn gather(&self, claimed: Vec<Delivery>) -> Result<Vec<Attempt>> {
        let mut tx = self.store.begin_read().await?;
        let mut channels: HashMap<ChannelId, Option<Arc<Channel>>> = HashMap::new();
        let mut tenants: HashMap<TenantId, String> = HashMap::new();
        let mut alarms: HashMap<AlarmId, Alarm> = HashMap::new();
        let mut out = Vec::with_capacity(claimed.len());
        for delivery in claimed {
            if let Entry::Vacant(slot) = channels.entry(delivery.channel_id) {
                slot.insert(tx.find_channel(delivery.channel_id).await?.map(Arc::new));
            }
            let Some(Some(channel)) = channels.get(&delivery.channel_id).cloned() else {
                continue;
            };
            if let Entry::Vacant(slot) = tenants.entry(delivery.tenant_id) {
                slot.insert(tx.get_tenant(delivery.tenant_id).await?.name);
            }
            let alarm = match alarms.get(&delivery.alarm_id) {
                Some(a) => a.clone(),
                None => match tx.get_alarm(Scope::Cluster, delivery.alarm_id).await {
                    Ok(a) => {
                        alarms.insert(a.id, a.clone());
                        a
                    }
                    Err(crate::store::StoreError::NotFound(_)) => continue,
                    Err(e) => return Err(e),
                },
            };
            out.push(Attempt {
                tenant: tenants
                    .get(&delivery.tenant_id)
                    .cloned()
                    .unwrap_or_default(),
                delivery,
                channel,
                alarm,
            });
        }
        Ok(out)
    }

    /// Makes one attempt: `Ok` with the HTTP status (webhooks) when delivered, `Err` with the
    /// status (if any) and why not.
    async fn attempt(
        &self,
        a: &Attempt,
    ) -> std::result::Result<Option<i32>, (Option<i32>, String)> {
        match &a.channel.config.0 {
            ChannelConfig::Webhook { url } => self.post_webhook(a, url).await,
            ChannelConfig::Email {
                smtp_host,
                smtp_port,
                tls,
                username,
                from,
                to,
            } => {
                let smtp = Smtp {
                    host: smtp_host,
                    port: *smtp_port,
                    tls: *tls,
                    username: username.as_deref(),
                    password: a.channel.secret.as_deref(),
                    timeout: self.config.smtp_timeout,
                };
                send_email(&smtp, from, to, a)
                    .await
                    .map(|()| None)
                    .map_err(|why| (None, why))
            }
        }
    }

    async fn post_webhook(
        &self,
        a: &Attempt,
        url: &str,
    ) -> std::result::Result<Option<i32>, (Option<i32>, String)> {
        let body = serde_json::to_vec(&WebhookBody {
            delivery_id: a.delivery.id.0,
            attempt: a.delivery.attempts,
            tenant: a.tenant.clone(),
            channel: a.channel.name.clone(),
            alarm: AlarmBody::of(&a.alarm),
        })
        .map_err(|e| (None, format!("cannot encode the alarm: {e}")))?;
        let parsed = reqwest::Url::parse(url).map_err(|e| (None, format!("bad URL: {e}")))?;
        let path = match parsed.query() {
            Some(q) => format!("{}?{q}", parsed.path()),
            None => parsed.path().to_owned(),
        };
        let secret = a.channel.secret.as_deref().unwrap_or_default();
        let signer = Signer::new(signing_key(&a.tenant, &a.channel.name), secret.as_bytes());
        let mut request = self
            .http
            .post(parsed)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(DELIVERY_HEADER, a.delivery.id.0.to_string());
        for (name, value) in signer.sign("POST", &path, &body).pairs() {
            request = request.header(name, value);
        }
        let sent = request.body(body).send().await;
        match sent {
            Ok(resp) if resp.status().is_success() => Ok(Some(i32::from(resp.status().as_u16()))),
            Ok(resp) => Err((
                Some(i32::from(resp.status().as_u16())),
                format!("the receiver answered {}", resp.status()),
            )),
            Err(e) if e.is_timeout() => {
                Err((None, "the receiver did not answer in time".to_owned()))
            }
            Err(e) if e.is_connect() => Err((None, format!("cannot connect: {e}"))),
            Err(e) => Err((None, e.to_string())),
        }
    }
}

/// What a webhook request names as the owner of its secret (`X-Mthpt-App`):
/// `<tenant>.<channel>`.
pub fn signing_key(tenant: &str, channel: &str) -> String {
    format!("{tenant}.{channel}")
}

/// An SMTP server as a channel names it.
struct Smtp<'a> {
    host: &'a str,
    port: u16,
    tls: SmtpTls,
    username: Option<&'a str>,
    password: Option<&'a str>,
    timeout: Duration,
}

/// The subject and text of an alarm's e-mail.
pub fn email_text(tenant: &str, alarm: &Alarm) -> (String, String) {
    let subject = format!(
        "[mthpt {tenant}] {} {}: {}",
        alarm.severity,
        alarm.kind,
        alarm.message.chars().take(120).collect::<String>()
    );
    let mut text = format!(
        "Tenant: {tenant}\nAlarm: {} (id {})\nSeverity: {}\nRaised: {}\n",
        alarm.kind,
        alarm.id,
        alarm.severity,
        ms_to_datetime(alarm.created_at).to_rfc3339()
    );
    if let Some(t) = alarm.task_id {
        text.push_str(&format!("Task: {t}\n"));
    }
    if let Some(r) = alarm.run_id {
        text.push_str(&format!("Run: {r}\n"));
    }
    text.push_str(&format!("\n{}\n\n{}\n", alarm.message, alarm.details.0));
    (subject, text)
}

async fn send_email(
    smtp: &Smtp<'_>,
    from: &str,
    to: &[String],
    a: &Attempt,
) -> std::result::Result<(), String> {
    use lettre::message::header::ContentType;
    use lettre::transport::smtp::authentication::Credentials;
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

    let (subject, text) = email_text(&a.tenant, &a.alarm);
    let mut message = Message::builder()
        .from(from.parse().map_err(|e| format!("sender {from:?}: {e}"))?)
        .subject(subject)
        .header(ContentType::TEXT_PLAIN);
    for rcpt in to {
        message = message.to(rcpt
            .parse()
            .map_err(|e| format!("recipient {rcpt:?}: {e}"))?);
    }
    let message = message
        .body(text)
        .map_err(|e| format!("cannot build the message: {e}"))?;
    let builder = match smtp.tls {
        SmtpTls::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(smtp.host)
            .map_err(|e| format!("SMTP TLS setup: {e}"))?,
        SmtpTls::Starttls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(smtp.host)
            .map_err(|e| format!("SMTP STARTTLS setup: {e}"))?,
        SmtpTls::None => AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(smtp.host),
    };
    let mut builder = builder.port(smtp.port).timeout(Some(smtp.timeout));
    if let Some(user) = smtp.username {
        builder = builder.credentials(Credentials::new(
            user.to_owned(),
            smtp.password.unwrap_or_default().to_owned(),
        ));
    }
    let transport = builder.build();
    // The whole exchange is bounded too, not only each command.
    match tokio::time::timeout(smtp.timeout * 2, transport.send(message)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("SMTP: {e}")),
        Err(_) => Err("SMTP: the server did not finish in time".to_owned()),
    }
}

/// The notifier of an engine node: a pass every interval until `stop`.
pub async fn run_loop(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    mut stop: watch::Receiver<bool>,
) {
    let notifier = match Notifier::new(store, NotifyConfig::default()) {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the notifier's HTTP client; no notifications from this node");
            return;
        }
    };
    let every = Duration::from_millis(u64::try_from(notifier.config.interval_ms).unwrap_or(1_000));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(every) => {}
        }
        match notifier.run_once(clock.now_ms()).await {
            Ok(r) if r.attempted > 0 => tracing::debug!(?r, "notifications"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "notification pass failed"),
        }
    }
}

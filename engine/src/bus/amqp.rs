//! [`AmqpBus`]: the [`Bus`] on RabbitMQ (lapin).
//!
//! One connection per process, with lapin's automatic recovery (it reconnects and replays
//! exchanges, queues, bindings and consumers). Publishing uses one channel in confirm mode:
//! every message is persistent, carries its `message_id`, and counts as published only when
//! the broker acks it. Each subscriber gets its own channel and a client-named, exclusive
//! queue (`<name>`) bound to its patterns; when its consumer sees the connection fail it waits
//! for the recovery and then tells its receiver to re-sync ([`Delivery::Resync`]): messages
//! published while the queue was gone are not in it. If recovery gives up, the subscriber
//! builds its channel, queue and consumer again (on a new connection if needed) until it
//! works, and re-syncs then too.
//!
//! A recovery can also stall: a connection reset in the middle of a write can leave lapin's
//! I/O loop waiting for socket events that never come, the connection "reconnecting" for good
//! while the broker is back. So while the connection is down the bus probes the broker with a
//! plain TCP connect (at most every [`PROBE_EVERY`]); once the broker has answered for
//! [`STUCK_AFTER`] and the connection still has not recovered, the bus drops it and connects
//! afresh, and subscribers on the dropped connection subscribe again.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use tokio::sync::{Mutex, mpsc};

use super::{Bus, BusError, BusMessage, Delivery, SUBSCRIBER_BUFFER};

/// Where and how to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpConfig {
    /// `amqp://user:password@host:port/vhost`.
    pub url: String,
    /// The durable topic exchange (default [`EXCHANGE`](crate::alarm::EXCHANGE)).
    pub exchange: String,
    /// How the connection shows in the broker's management tools (e.g. `mthpt-engine node-1`).
    pub connection_name: String,
}

impl AmqpConfig {
    /// The default exchange at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            exchange: crate::alarm::EXCHANGE.to_owned(),
            connection_name: "mthpt".to_owned(),
        }
    }
}

/// How long to wait between attempts to rebuild a subscription or a connection.
const RETRY: Duration = Duration::from_secs(1);

/// lapin's recovery tries to reconnect after 250 ms, then at most a second apart (with
/// jitter), so alarms flow again within about a second of the broker being back, however long
/// it was down (lapin's own default doubles the wait up to a minute). After 60 failed attempts
/// it gives up; the next use of the bus then connects afresh.
const RECONNECT_MIN: Duration = Duration::from_millis(250);
const RECONNECT_MAX: Duration = Duration::from_secs(1);
const RECONNECT_ATTEMPTS: usize = 60;

/// How often a connection that is down has the broker probed (see the module docs).
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// How long the broker must answer while the connection stays down before the recovery is
/// taken for stalled: well past lapin's next attempt ([`RECONNECT_MAX`]) and its handshake.
const STUCK_AFTER: Duration = Duration::from_secs(3);

/// How long one probe of the broker may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a batch may wait for the broker's confirms before the publishing channel is taken
/// for broken (below the callers' own limit, [`crate::relay::PUBLISH_TIMEOUT`]).
const CONFIRM_WITHIN: Duration = Duration::from_millis(800);

/// The [`Bus`] on RabbitMQ; see the module docs.
#[derive(Clone)]
pub struct AmqpBus {
    inner: Arc<Inner>,
}

struct Inner {
    config: AmqpConfig,
    connection: Mutex<Option<Arc<Connection>>>,
    publisher: Mutex<Option<Channel>>,
    recovery: std::sync::Mutex<RecoveryWatch>,
}

/// What the bus saw of the broker while its connection was down.
#[derive(Debug, Default)]
struct RecoveryWatch {
    last_probe: Option<Instant>,
    /// Since when the broker has answered every probe.
    reachable_since: Option<Instant>,
}

impl std::fmt::Debug for AmqpBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpBus")
            .field("url", &crate::store::redact_url(&self.inner.config.url))
            .field("exchange", &self.inner.config.exchange)
            .finish()
    }
}

fn unavailable(e: impl std::fmt::Display) -> BusError {
    BusError::Unavailable(e.to_string())
}

impl AmqpBus {
    /// A bus that connects when first used (and again whenever the connection is lost for
    /// good), so a node starts while the broker is down.
    pub fn new(config: AmqpConfig) -> Result<AmqpBus, BusError> {
        if config.exchange.is_empty() {
            return Err(BusError::Config("the exchange name is empty".to_owned()));
        }
        if !(config.url.starts_with("amqp://") || config.url.starts_with("amqps://")) {
            return Err(BusError::Config(format!(
                "{:?} is not an AMQP URL: use amqp://user:password@host:5672/vhost",
                crate::store::redact_url(&config.url)
            )));
        }
        Ok(AmqpBus {
            inner: Arc::new(Inner {
                config,
                connection: Mutex::new(None),
                publisher: Mutex::new(None),
                recovery: std::sync::Mutex::new(RecoveryWatch::default()),
            }),
        })
    }

    /// Connects and declares the exchange; fails when the broker cannot be reached.
    pub async fn connect(config: AmqpConfig) -> Result<AmqpBus, BusError> {
        let bus = Self::new(config)?;
        let channel = bus.inner.channel().await?;
        bus.inner.declare_exchange(&channel).await?;
        let _ = channel.close(200, "declared".into()).await;
        Ok(bus)
    }

    /// The exchange messages go to.
    pub fn exchange(&self) -> &str {
        &self.inner.config.exchange
    }

    /// Deletes the exchange (for tests that made one of their own).
    pub async fn delete_exchange(&self) -> Result<(), BusError> {
        let channel = self.inner.channel().await?;
        channel
            .exchange_delete(
                self.inner.config.exchange.as_str().into(),
                Default::default(),
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Closes the connection.
    pub async fn close(&self) {
        if let Some(conn) = self.inner.connection.lock().await.take() {
            let _ = conn.close(200, "closing".into()).await;
        }
    }
}

impl Inner {
    /// The connection, connecting (again) when there is none, it is closed for good, or its
    /// recovery has stalled (see the module docs).
    async fn connection(&self) -> Result<Arc<Connection>, BusError> {
        let mut slot = self.connection.lock().await;
        if let Some(conn) = slot.as_ref() {
            let status = conn.status();
            if status.connected() {
                self.watch().reachable_since = None;
                return Ok(conn.clone());
            }
            if !(status.closed() || status.errored()) {
                if !self.recovery_stalled().await {
                    return Ok(conn.clone());
                }
                tracing::warn!(
                    "the message broker answers but the connection has not recovered for {} s; connecting afresh",
                    STUCK_AFTER.as_secs()
                );
                let stalled = conn.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(RETRY, stalled.close(200, "stalled".into())).await;
                });
                *slot = None;
            }
        }
        let conn = Connection::connect(
            &self.config.url,
            ConnectionProperties::default()
                .enable_auto_recover()
                .configure_backoff(|b| {
                    b.with_min_delay(RECONNECT_MIN)
                        .with_max_delay(RECONNECT_MAX)
                        .with_max_times(RECONNECT_ATTEMPTS)
                        .with_jitter()
                })
                .with_connection_name(self.config.connection_name.as_str().into()),
        )
        .await
        .map_err(|e| {
            BusError::Unavailable(format!(
                "cannot connect to {}: {e}",
                crate::store::redact_url(&self.config.url)
            ))
        })?;
        let conn = Arc::new(conn);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    fn watch(&self) -> std::sync::MutexGuard<'_, RecoveryWatch> {
        self.recovery.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the broker has answered probes for [`STUCK_AFTER`] while the connection stayed
    /// down; probes at most every [`PROBE_EVERY`].
    async fn recovery_stalled(&self) -> bool {
        let now = Instant::now();
        {
            let watch = self.watch();
            if watch
                .last_probe
                .is_some_and(|at| now.duration_since(at) < PROBE_EVERY)
            {
                return watch
                    .reachable_since
                    .is_some_and(|since| now.duration_since(since) >= STUCK_AFTER);
            }
        }
        let reachable = self.broker_answers().await;
        let mut watch = self.watch();
        watch.last_probe = Some(now);
        if !reachable {
            watch.reachable_since = None;
            return false;
        }
        let since = *watch.reachable_since.get_or_insert(now);
        now.duration_since(since) >= STUCK_AFTER
    }

    /// Whether the broker's host accepts a TCP connection on its AMQP port.
    async fn broker_answers(&self) -> bool {
        let Ok(uri) = self.config.url.parse::<lapin::uri::AMQPUri>() else {
            return false;
        };
        let target = (uri.authority.host.clone(), uri.authority.port);
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(target)).await,
            Ok(Ok(_))
        )
    }

    /// Whether a subscriber on `conn`, which is down, should subscribe again: the bus has
    /// replaced it (see [`Self::connection`], which this calls to notice a stalled recovery).
    async fn superseded(&self, conn: &Arc<Connection>) -> bool {
        // A failed fresh connect leaves nothing to move to yet: the next look tries again.
        self.connection()
            .await
            .is_ok_and(|current| !Arc::ptr_eq(&current, conn))
    }

    async fn channel(&self) -> Result<Channel, BusError> {
        let conn = self.connection().await?;
        conn.create_channel().await.map_err(unavailable)
    }

    async fn declare_exchange(&self, channel: &Channel) -> Result<(), BusError> {
        channel
            .exchange_declare(
                self.config.exchange.as_str().into(),
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(unavailable)
    }

    /// The publishing channel, in confirm mode.
    async fn publisher(&self) -> Result<Channel, BusError> {
        let mut slot = self.publisher.lock().await;
        if let Some(ch) = slot.as_ref()
            && ch.status().connected()
        {
            return Ok(ch.clone());
        }
        let ch = self.channel().await?;
        self.declare_exchange(&ch).await?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(unavailable)?;
        *slot = Some(ch.clone());
        Ok(ch)
    }

    async fn publish_all(&self, messages: &[BusMessage]) -> Vec<Result<(), BusError>> {
        let channel = match self.publisher().await {
            Ok(ch) => ch,
            Err(e) => return messages.iter().map(|_| Err(e.clone())).collect(),
        };
        match tokio::time::timeout(CONFIRM_WITHIN, self.send_and_confirm(&channel, messages)).await
        {
            Ok(results) => results,
            Err(_) => {
                // A channel whose confirms do not come (a recovery that left it half working)
                // would hold every later batch too: the next batch opens a new one.
                tracing::warn!(
                    messages = messages.len(),
                    "the message broker did not confirm in time; opening a new publishing channel"
                );
                self.discard_publisher(&channel).await;
                let e = BusError::NotConfirmed(format!(
                    "no confirm from the broker within {} ms",
                    CONFIRM_WITHIN.as_millis()
                ));
                messages.iter().map(|_| Err(e.clone())).collect()
            }
        }
    }

    /// Sends every message first, then collects the confirms: one round trip per batch.
    async fn send_and_confirm(
        &self,
        channel: &Channel,
        messages: &[BusMessage],
    ) -> Vec<Result<(), BusError>> {
        let mut pending = Vec::with_capacity(messages.len());
        for m in messages {
            let properties = BasicProperties::default()
                .with_message_id(m.message_id.as_str().into())
                .with_content_type("application/json".into())
                .with_delivery_mode(2);
            let sent = channel
                .basic_publish(
                    self.config.exchange.as_str().into(),
                    m.routing_key.as_str().into(),
                    BasicPublishOptions::default(),
                    &m.body,
                    properties,
                )
                .await;
            pending.push(sent);
        }
        let mut results = Vec::with_capacity(messages.len());
        let mut broken = None;
        for sent in pending {
            let result = match sent {
                Err(e) => {
                    broken = Some(e.clone());
                    Err(unavailable(e))
                }
                Ok(confirm) => match confirm.await {
                    Ok(c) if c.is_ack() => Ok(()),
                    Ok(c) => Err(BusError::NotConfirmed(format!("{c:?}"))),
                    Err(e) => {
                        broken = Some(e.clone());
                        Err(unavailable(e))
                    }
                },
            };
            results.push(result);
        }
        if let Some(e) = broken {
            // The next batch waits for the recovery (or builds a new channel).
            if channel.wait_for_recovery(e).await.is_err() {
                self.discard_publisher(channel).await;
            }
        }
        results
    }

    /// Forgets the publishing channel `channel` (unless another one replaced it meanwhile) and
    /// closes it in the background.
    async fn discard_publisher(&self, channel: &Channel) {
        let mut slot = self.publisher.lock().await;
        if slot.as_ref().is_some_and(|ch| ch.id() == channel.id()) {
            *slot = None;
        }
        drop(slot);
        let channel = channel.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(RETRY, channel.close(200, "replaced".into())).await;
        });
    }

    /// Declares the subscriber's queue and bindings and starts consuming; with the connection,
    /// to notice recoveries (lapin replays the consumer without a word to it).
    async fn consume(&self, name: &str, patterns: &[String]) -> Result<Subscription, BusError> {
        let conn = self.connection().await?;
        let channel = conn.create_channel().await.map_err(unavailable)?;
        self.declare_exchange(&channel).await?;
        channel
            .basic_qos(256, BasicQosOptions::default())
            .await
            .map_err(unavailable)?;
        channel
            .queue_declare(
                name.into(),
                QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(unavailable)?;
        for pattern in patterns {
            channel
                .queue_bind(
                    name.into(),
                    self.config.exchange.as_str().into(),
                    pattern.as_str().into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(unavailable)?;
        }
        let consumer = channel
            .basic_consume(
                name.into(),
                name.into(),
                BasicConsumeOptions {
                    no_ack: true,
                    exclusive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(unavailable)?;
        Ok(Subscription {
            channel,
            consumer,
            connection: conn,
        })
    }
}

/// A subscriber's channel, consumer and connection.
struct Subscription {
    channel: Channel,
    consumer: lapin::Consumer,
    connection: Arc<Connection>,
}

/// How often a subscriber looks at its connection's state. A reconnection takes at least a
/// second (lapin waits that long before it tries), so none goes unnoticed.
const WATCH_EVERY: Duration = Duration::from_millis(200);

/// After the connection came back, waits (at most 10 s) for the subscriber's channel to be
/// recovered too, so a re-sync is not announced before the queue is bound again.
async fn channel_recovered(channel: &Channel) {
    for _ in 0..200 {
        if channel.status().connected() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[async_trait]
impl Bus for AmqpBus {
    async fn publish(&self, messages: &[BusMessage]) -> Vec<Result<(), BusError>> {
        self.inner.publish_all(messages).await
    }

    async fn subscribe(
        &self,
        name: &str,
        patterns: &[String],
    ) -> Result<mpsc::Receiver<Delivery>, BusError> {
        if name.is_empty() || name.starts_with("amq.") {
            return Err(BusError::Config(format!(
                "{name:?} cannot name a queue: give a client-chosen name not starting with amq."
            )));
        }
        let first = self.inner.consume(name, patterns).await?;
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let inner = self.inner.clone();
        let name = name.to_owned();
        let patterns = patterns.to_vec();
        tokio::spawn(async move {
            let mut current = Some(first);
            loop {
                let Subscription {
                    channel,
                    mut consumer,
                    connection,
                } = match current.take() {
                    Some(c) => c,
                    None => match inner.consume(&name, &patterns).await {
                        Ok(c) => {
                            tracing::info!(queue = %name, "message bus subscription rebuilt");
                            if tx.send(Delivery::Resync).await.is_err() {
                                return;
                            }
                            c
                        }
                        Err(e) => {
                            tracing::warn!(queue = %name, error = %e, "cannot subscribe to the message bus; retrying");
                            if tx.is_closed() {
                                return;
                            }
                            tokio::time::sleep(RETRY).await;
                            continue;
                        }
                    },
                };
                let mut disrupted = false;
                let mut watch = tokio::time::interval(WATCH_EVERY);
                loop {
                    tokio::select! {
                        _ = watch.tick() => {
                            let status = connection.status();
                            if status.closed() || status.errored() {
                                tracing::warn!(queue = %name, "message bus connection closed; subscribing again");
                                tokio::time::sleep(RETRY).await;
                                break;
                            }
                            if !status.connected() {
                                if !disrupted {
                                    tracing::warn!(queue = %name, "message bus connection lost; waiting for recovery");
                                }
                                disrupted = true;
                                if inner.superseded(&connection).await {
                                    tracing::warn!(queue = %name, "message bus connection replaced; subscribing again");
                                    break;
                                }
                            } else if disrupted {
                                channel_recovered(&channel).await;
                                tracing::info!(queue = %name, "message bus connection recovered");
                                disrupted = false;
                                if tx.send(Delivery::Resync).await.is_err() {
                                    return;
                                }
                            }
                        }
                        () = tx.closed() => {
                            let _ = channel.close(200, "unsubscribed".into()).await;
                            return;
                        }
                        next = consumer.next() => match next {
                            Some(Ok(d)) => {
                                let message = BusMessage {
                                    routing_key: d.routing_key.to_string(),
                                    message_id: d
                                        .properties
                                        .message_id()
                                        .as_ref()
                                        .map(|m| m.to_string())
                                        .unwrap_or_default(),
                                    body: d.data,
                                };
                                if tx.send(Delivery::Message(message)).await.is_err() {
                                    return;
                                }
                            }
                            Some(Err(e)) => {
                                tracing::warn!(queue = %name, error = %e, "message bus connection failed; waiting for recovery");
                                match channel.wait_for_recovery(e).await {
                                    Ok(()) => {
                                        tracing::info!(queue = %name, "message bus connection recovered");
                                        if tx.send(Delivery::Resync).await.is_err() {
                                            return;
                                        }
                                    }
                                    Err(e) => {
                                        tracing::warn!(queue = %name, error = %e, "message bus recovery failed; subscribing again");
                                        tokio::time::sleep(RETRY).await;
                                        break;
                                    }
                                }
                            }
                            None => {
                                tracing::warn!(queue = %name, "message bus consumer ended; subscribing again");
                                tokio::time::sleep(RETRY).await;
                                break;
                            }
                        }
                    }
                }
            }
        });
        Ok(rx)
    }
}

//! Live events for browsers: what arrives on the message bus is pushed to the WebSocket
//! sessions (`GET /api/v1/events`) allowed to see it.
//!
//! - The [`EventHub`] of a console node fans frames out to its sessions (a broadcast
//!   channel; a session that falls behind is told to re-sync).
//! - The feeder ([`spawn_feeder`]) consumes the node's own subscription (an exclusive,
//!   client-named queue bound to `alarm.#` and `run.#`), drops repeats by message id, and
//!   hands each message to the hub with the tenant it belongs to. After a broker reconnect it
//!   sends every session `{"type":"resync"}`: the database is the source of truth.
//!   Alarm messages published by wrappers are shown only when correctly signed for their
//!   tenant ([`crate::wrapper_alarms`]).
//! - Each session ([`run_session`]) is one task: frames for its audience, a ping every
//!   [`PING_EVERY`], answers to the browser's pings, and nothing else (acknowledging is a REST
//!   call; its event comes back through the bus to every node). Every [`RECHECK_EVERY`] it
//!   asks whether its credential still holds, and closes when it was signed out, revoked or
//!   expired (close code 1008, policy).
//! - Live run events (`run.#`: state changes, progress, log lines) have a channel of their
//!   own in the hub: only sessions that asked for them (`?runs=true`) subscribe to it, with
//!   the same audience rules.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_ws::{AggregatedMessage, Session};
use futures::StreamExt;
use mthpt_engine::bus::{Bus, BusMessage, Delivery, SeenIds};
use mthpt_engine::tenant::TenantId;
use mthpt_wrapper::protocol::parse_signed_message_id;
use tokio::sync::broadcast;

use crate::wrapper_alarms::{WrapperCheck, cross_path_key};

/// The routing-key patterns a console node subscribes to.
pub const PATTERNS: &[&str] = &["alarm.#", "run.#"];

/// How often a session pings its browser.
pub const PING_EVERY: Duration = Duration::from_secs(20);

/// Frames a session may have waiting before it is told to re-sync.
const HUB_BUFFER: usize = 4096;

/// How many message ids the feeder remembers to drop repeats.
const SEEN_IDS: usize = 65_536;

/// The re-sync frame.
pub const RESYNC: &str = r#"{"type":"resync"}"#;

/// How often a session checks that its credential still holds.
pub const RECHECK_EVERY: Duration = Duration::from_secs(2);

/// Who may see a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Every session (re-sync).
    All,
    /// Operators and the users of this tenant.
    Tenant(TenantId),
    /// Operators only (cluster-level events).
    Operators,
}

/// One text frame for the sessions of its audience.
#[derive(Debug)]
pub struct Frame {
    pub audience: Audience,
    pub text: String,
    /// The text for sessions that asked for Chinese, made once for all of them by the first
    /// ([`text_for`]); `None`: the same as `text`.
    chinese: std::sync::OnceLock<Option<String>>,
}

impl Frame {
    pub fn new(audience: Audience, text: String) -> Frame {
        Frame {
            audience,
            text,
            chinese: std::sync::OnceLock::new(),
        }
    }
}

/// What a session may see: everything (operators) or one tenant's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Viewer {
    Operator,
    Tenant(TenantId),
}

impl Viewer {
    /// Whether this viewer may see frames for `audience`.
    pub fn sees(self, audience: Audience) -> bool {
        match (self, audience) {
            (_, Audience::All) | (Viewer::Operator, _) => true,
            (Viewer::Tenant(mine), Audience::Tenant(t)) => mine == t,
            (Viewer::Tenant(_), Audience::Operators) => false,
        }
    }
}

/// The fan-out to a console node's sessions.
#[derive(Debug, Clone)]
pub struct EventHub {
    tx: broadcast::Sender<Arc<Frame>>,
    /// Checks alarm messages wrappers publish; without it the feeder drops them all.
    wrapper_check: Option<Arc<WrapperCheck>>,
    /// Live run events, for the sessions that asked for them.
    runs: broadcast::Sender<Arc<Frame>>,
    /// The sockets open, per user and in all ([`EventHub::admit`]).
    sockets: Arc<Mutex<Sockets>>,
}

/// The most event sockets one user (all its tokens and sessions) may hold open on a node.
pub const MAX_SOCKETS_PER_USER: usize = 32;
/// The most event sockets a node holds open in all.
pub const MAX_SOCKETS: usize = 1_000;

#[derive(Debug, Default)]
struct Sockets {
    per_user: HashMap<i64, usize>,
    total: usize,
}

/// A socket's place among those open ([`EventHub::admit`]); given back when dropped.
#[derive(Debug)]
pub struct SocketPermit {
    sockets: Arc<Mutex<Sockets>>,
    user: i64,
}

impl Drop for SocketPermit {
    fn drop(&mut self) {
        let mut s = self
            .sockets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.total = s.total.saturating_sub(1);
        if let Some(n) = s.per_user.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.per_user.remove(&self.user);
            }
        }
    }
}

impl Default for EventHub {
    fn default() -> Self {
        Self::new()
    }
}

impl EventHub {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(HUB_BUFFER);
        let (runs, _) = broadcast::channel(HUB_BUFFER);
        Self {
            tx,
            wrapper_check: None,
            runs,
            sockets: Arc::default(),
        }
    }

    /// A place for one more event socket of `user`, or why there is none: each socket costs
    /// a task and a credential check every few seconds, so one credential (or many) cannot
    /// open thousands.
    pub fn admit(&self, user: i64) -> Result<SocketPermit, String> {
        let mut s = self
            .sockets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if s.total >= MAX_SOCKETS {
            return Err(format!(
                "this console node holds {MAX_SOCKETS} event sockets already; try again later"
            ));
        }
        let mine = s.per_user.entry(user).or_default();
        if *mine >= MAX_SOCKETS_PER_USER {
            return Err(format!(
                "this user has {MAX_SOCKETS_PER_USER} event sockets open already; close one first"
            ));
        }
        *mine += 1;
        s.total += 1;
        Ok(SocketPermit {
            sockets: self.sockets.clone(),
            user,
        })
    }

    /// A hub whose feeder shows wrappers' alarm messages that `check` admits.
    pub fn with_wrapper_check(check: WrapperCheck) -> Self {
        Self {
            wrapper_check: Some(Arc::new(check)),
            ..Self::new()
        }
    }

    /// Sends a live run event to the sessions that asked for run events and may see it.
    pub fn send_run(&self, frame: Frame) -> usize {
        self.runs.send(Arc::new(frame)).unwrap_or(0)
    }

    /// A new session's feed of live run events.
    pub fn subscribe_runs(&self) -> broadcast::Receiver<Arc<Frame>> {
        self.runs.subscribe()
    }

    /// Sends a frame to the sessions that may see it; returns how many sessions are open.
    pub fn send(&self, frame: Frame) -> usize {
        self.tx.send(Arc::new(frame)).unwrap_or(0)
    }

    /// Ends every session of this node (the node is stopping): each gets a close frame
    /// ("going away") and can reconnect to another node.
    pub fn close_sessions(&self) {
        self.send(Frame::new(Audience::All, String::new()));
    }

    /// A new session's feed.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Frame>> {
        self.tx.subscribe()
    }

    /// Open sessions.
    pub fn sessions(&self) -> usize {
        self.tx.receiver_count()
    }
}

/// The audience of a bus message: its body's `tenant_id` (`null`: cluster level). `None`
/// when the body is not a JSON object with that field.
pub fn audience_of(body: &[u8]) -> Option<Audience> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    match value.get("tenant_id")? {
        serde_json::Value::Null => Some(Audience::Operators),
        v => v.as_i64().map(|t| Audience::Tenant(TenantId(t))),
    }
}

/// Consumes the node's subscription `queue` on `bus` into `hub` until the task is aborted;
/// subscribing is retried while the bus is unavailable.
pub fn spawn_feeder(
    bus: Arc<dyn Bus>,
    queue: String,
    hub: EventHub,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let patterns: Vec<String> = PATTERNS.iter().map(|p| (*p).to_owned()).collect();
        let mut seen = SeenIds::new(SEEN_IDS);
        let mut first = true;
        loop {
            let mut rx = match bus.subscribe(&queue, &patterns).await {
                Ok(rx) => rx,
                Err(e) => {
                    tracing::warn!(%queue, error = %e, "cannot subscribe to live events; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            if !first {
                hub.send(Frame::new(Audience::All, RESYNC.to_owned()));
            }
            first = false;
            tracing::info!(%queue, "console node receives live events");
            while let Some(delivery) = rx.recv().await {
                match delivery {
                    Delivery::Resync => {
                        hub.send(Frame::new(Audience::All, RESYNC.to_owned()));
                    }
                    Delivery::Message(m) => {
                        // Run events are published once and never re-sent: only alarm events
                        // take room among the remembered ids.
                        if !m.routing_key.starts_with("run.")
                            && !m.message_id.is_empty()
                            && !seen.first_time(&m.message_id)
                        {
                            continue;
                        }
                        if !m.routing_key.starts_with("run.")
                            && !admit_from_wrapper(&hub, &m, &mut seen).await
                        {
                            continue;
                        }
                        let Some(audience) = audience_of(&m.body) else {
                            tracing::debug!(key = %m.routing_key, "dropped a live event without a tenant_id");
                            continue;
                        };
                        match String::from_utf8(m.body) {
                            Ok(text) if m.routing_key.starts_with("run.") => {
                                hub.send_run(Frame::new(audience, text));
                            }
                            Ok(text) => {
                                hub.send(Frame::new(audience, text));
                            }
                            Err(_) => {
                                tracing::debug!(key = %m.routing_key, "dropped a live event that is not UTF-8")
                            }
                        }
                    }
                }
            }
            tracing::warn!(%queue, "live event subscription ended; subscribing again");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// Whether a message passes the wrapper check (engine messages do; a wrapper's must be
/// correctly signed for its own tenant), and is the first copy of a wrapper alarm's
/// transition ([`cross_path_key`]): the direct and the relayed copy are shown once.
async fn admit_from_wrapper(hub: &EventHub, m: &BusMessage, seen: &mut SeenIds) -> bool {
    let admitted = match &hub.wrapper_check {
        Some(check) => check.admit(m).await.is_ok(),
        None => parse_signed_message_id(&m.message_id).is_none(),
    };
    admitted && cross_path_key(&m.body).is_none_or(|k| seen.first_time(&k))
}

/// The next frame of an optional feed (never, without one).
async fn next_frame(
    feed: &mut Option<broadcast::Receiver<Arc<Frame>>>,
) -> Result<Arc<Frame>, broadcast::error::RecvError> {
    match feed {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The text of `frame` for a session: as published, or with an alarm event's `alarm.message`
/// in Chinese for a session that asked for it (see [`crate::messages`]).
pub fn text_for(frame: &Frame, chinese: bool) -> String {
    if !chinese {
        return frame.text.clone();
    }
    frame
        .chinese
        .get_or_init(|| alarm_in_chinese(&frame.text))
        .clone()
        .unwrap_or_else(|| frame.text.clone())
}

/// An alarm event's text with its `alarm.message` in Chinese; `None` for other frames.
fn alarm_in_chinese(text: &str) -> Option<String> {
    if !text.contains("\"alarm.") {
        return None;
    }
    let mut body = serde_json::from_str::<serde_json::Value>(text).ok()?;
    let is_alarm = body
        .get("type")
        .and_then(|t| t.as_str())
        .is_some_and(|t| t.starts_with("alarm."));
    match body.pointer_mut("/alarm/message") {
        Some(serde_json::Value::String(message)) if is_alarm => {
            *message = crate::messages::chinese(message);
            Some(body.to_string())
        }
        _ => None,
    }
}

/// One WebSocket session: see the module docs. `runs` is the feed of live run events when the
/// client asked for them; `chinese`: alarm messages in Chinese; `still_allowed` answers whether
/// the session's credential still holds (asked every [`RECHECK_EVERY`]).
#[allow(clippy::too_many_arguments)]
pub async fn run_session<F, Fut>(
    viewer: Viewer,
    chinese: bool,
    mut session: Session,
    msgs: actix_ws::MessageStream,
    mut frames: broadcast::Receiver<Arc<Frame>>,
    mut runs: Option<broadcast::Receiver<Arc<Frame>>>,
    still_allowed: F,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut msgs = msgs
        .aggregate_continuations()
        .max_continuation_size(64 * 1024);
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    let mut recheck =
        tokio::time::interval_at(tokio::time::Instant::now() + RECHECK_EVERY, RECHECK_EVERY);
    loop {
        tokio::select! {
            _ = recheck.tick() => {
                if !still_allowed().await {
                    let _ = session
                        .close(Some(actix_ws::CloseReason {
                            code: actix_ws::CloseCode::Policy,
                            description: Some("signed out, revoked or expired".to_owned()),
                        }))
                        .await;
                    return;
                }
            }
            frame = next_frame(&mut runs) => match frame {
                Ok(frame) => {
                    if viewer.sees(frame.audience) && session.text(frame.text.clone()).await.is_err() {
                        break;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Run events in between were missed: the run views re-read.
                    if session.text(RESYNC).await.is_err() {
                        break;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => runs = None,
            },
            frame = frames.recv() => match frame {
                Ok(frame) if frame.text.is_empty() => {
                    // The node is stopping (see `EventHub::close_sessions`).
                    let _ = session
                        .close(Some(actix_ws::CloseReason {
                            code: actix_ws::CloseCode::Away,
                            description: Some("console node stopping".to_owned()),
                        }))
                        .await;
                    return;
                }
                Ok(frame) => {
                    if viewer.sees(frame.audience)
                        && session.text(text_for(&frame, chinese)).await.is_err()
                    {
                        break;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if session.text(RESYNC).await.is_err() {
                        break;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            msg = msgs.next() => match msg {
                Some(Ok(AggregatedMessage::Ping(bytes))) => {
                    if session.pong(&bytes).await.is_err() {
                        break;
                    }
                }
                Some(Ok(AggregatedMessage::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            _ = ping.tick() => {
                if session.ping(b"").await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = session.close(None).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_viewers_see_their_tenant_and_resyncs_only() {
        let a = Viewer::Tenant(TenantId(1));
        assert!(a.sees(Audience::Tenant(TenantId(1))));
        assert!(!a.sees(Audience::Tenant(TenantId(2))));
        assert!(!a.sees(Audience::Operators));
        assert!(a.sees(Audience::All));
        assert!(Viewer::Operator.sees(Audience::Tenant(TenantId(2))));
        assert!(Viewer::Operator.sees(Audience::Operators));
    }

    #[test]
    fn a_chinese_session_gets_engine_alarm_messages_in_chinese() {
        let frame = Frame::new(
            Audience::All,
            r#"{"type":"alarm.raised","alarm":{"id":1,"message":"task \"a\" failed after 3 attempt(s); last error: exit 1"}}"#
                .to_owned(),
        );
        let zh: serde_json::Value = serde_json::from_str(&text_for(&frame, true)).unwrap();
        assert_eq!(zh["alarm"]["id"], 1);
        assert_eq!(
            zh["alarm"]["message"],
            "任务 \"a\" 尝试 3 次后失败；最后的错误：exit 1"
        );
        assert_eq!(text_for(&frame, false), frame.text);
        let run = Frame::new(
            Audience::All,
            r#"{"type":"run.log","alarm":{"message":"run 5 not found"}}"#.to_owned(),
        );
        assert_eq!(text_for(&run, true), run.text);
    }

    #[test]
    fn the_audience_comes_from_the_body() {
        assert_eq!(
            audience_of(br#"{"tenant_id":7,"type":"alarm.raised"}"#),
            Some(Audience::Tenant(TenantId(7)))
        );
        assert_eq!(
            audience_of(br#"{"tenant_id":null}"#),
            Some(Audience::Operators)
        );
        assert_eq!(audience_of(b"{}"), None);
        assert_eq!(audience_of(b"not json"), None);
    }
}

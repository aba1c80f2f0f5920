//! Helpers shared by this crate's integration tests: a WebSocket client of the live events
//! (`GET /api/v1/events`).

#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

pub use mthpt_console::testing::{
    EVENT_WAIT as WAIT, EventSocket as Socket, connect_events as connect,
    next_event_where as next_where, next_event_within as next_within,
    try_connect_events as try_connect,
};

/// Every JSON text frame arriving within `wait`.
pub async fn frames_for(socket: &mut Socket, wait: Duration) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut out = Vec::new();
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, socket.next()).await {
        if let Message::Text(text) = frame {
            out.push(serde_json::from_str(&text).unwrap());
        }
    }
    out
}

/// An alarm event of `kind` (`alarm.raised`, …) for alarm `alarm`.
pub fn is(kind: &'static str, alarm: i64) -> impl Fn(&Value) -> bool {
    move |v| v["type"] == kind && v["alarm"]["id"] == alarm
}

pub use mthpt_testkit::free_port;

/// [`connect`], retried until the server answers (a node that is starting), within `wait`.
pub async fn connect_when_up(url: &str, token: &str, wait: Duration) -> Socket {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match try_connect(url, token).await {
            Ok(socket) => return socket,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                panic!("{url} did not answer within {wait:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

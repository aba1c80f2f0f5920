//! Helpers shared by this crate's integration tests: a WebSocket client of the live events
//! (`GET /api/v1/events`).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long a test waits for one event.
pub const WAIT: Duration = Duration::from_secs(15);

/// Opens the events socket at `url` (query included) with a bearer token.
pub async fn connect(url: &str, token: &str) -> Socket {
    try_connect(url, token)
        .await
        .unwrap_or_else(|e| panic!("cannot open {url}: {e}"))
}

/// [`connect`], or why not.
pub async fn try_connect(url: &str, token: &str) -> Result<Socket, String> {
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    request.headers_mut().insert(
        "Authorization",
        format!("Bearer {token}").parse().map_err(|_| "bad token")?,
    );
    let (socket, response) = tokio_tungstenite::connect_async(request)
        .await
        .map_err(|e| e.to_string())?;
    if response.status().as_u16() != 101 {
        return Err(format!("status {}", response.status()));
    }
    Ok(socket)
}

/// The next JSON text frame for which `wanted` holds, within `wait` (others are collected in
/// `skipped`).
pub async fn next_within(
    socket: &mut Socket,
    wait: Duration,
    skipped: &mut Vec<Value>,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let frame = tokio::time::timeout_at(deadline, socket.next())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for an event; got {skipped:?}"))
            .expect("socket closed")
            .unwrap();
        if let Message::Text(text) = frame {
            let value: Value = serde_json::from_str(&text).unwrap();
            if wanted(&value) {
                return value;
            }
            skipped.push(value);
        }
    }
}

/// [`next_within`] the usual [`WAIT`].
pub async fn next_where(
    socket: &mut Socket,
    skipped: &mut Vec<Value>,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    next_within(socket, WAIT, skipped, wanted).await
}

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

/// A free local TCP port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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

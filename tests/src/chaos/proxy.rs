//! A TCP proxy whose link can be cut, to partition two parts of the cluster from each other.
//!
//! Two ways to cut: **blackhole** stops forwarding but keeps every socket open (new
//! connections are accepted and then hang), which is what a real partition looks like to both
//! sides: requests stall until their own timeouts; when the link heals, held bytes flow on, as
//! TCP retransmission would deliver them. **drop** closes every connection at once and closes
//! new ones as soon as they are accepted, which is what a crashed peer or a reset looks like.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The state of a proxy's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Open,
    /// Nothing is forwarded; sockets stay open.
    Blackhole,
    /// Connections are closed.
    Drop,
}

/// How a partition cuts links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cut {
    /// Stop forwarding, keep sockets open.
    Blackhole,
    /// Close connections.
    Drop,
}

impl Cut {
    fn link(self) -> Link {
        match self {
            Cut::Blackhole => Link::Blackhole,
            Cut::Drop => Link::Drop,
        }
    }
}

/// One proxy: listens on a local port and forwards to `upstream`.
#[derive(Debug)]
pub struct Proxy {
    pub port: u16,
    upstream: SocketAddr,
    link: watch::Sender<Link>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (link, _) = watch::channel(Link::Open);
        let links = link.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(connection(client, upstream, links.subscribe()));
            }
        });
        Ok(Self {
            port,
            upstream,
            link,
            accept,
        })
    }

    /// The address this proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Cuts the link the way `cut` says.
    pub fn cut(&self, cut: Cut) {
        self.link.send_replace(cut.link());
    }

    /// Heals the link.
    pub fn heal(&self) {
        self.link.send_replace(Link::Open);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Ends the connections still forwarding.
        self.link.send_replace(Link::Drop);
    }
}

/// Waits until the link is open (true) or dropped (false).
async fn open(link: &mut watch::Receiver<Link>) -> bool {
    loop {
        match *link.borrow_and_update() {
            Link::Open => return true,
            Link::Drop => return false,
            Link::Blackhole => {}
        }
        if link.changed().await.is_err() {
            return false;
        }
    }
}

async fn connection(client: TcpStream, upstream: SocketAddr, mut link: watch::Receiver<Link>) {
    // A connection arriving during a blackhole hangs as a SYN into a partition would; it goes
    // through if the link heals.
    if !open(&mut link).await {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = tokio::spawn(pump(client_read, server_write, link.clone()));
    let down = tokio::spawn(pump(server_read, client_write, link));
    let _ = tokio::join!(up, down);
}

/// Copies `from` to `to` while the link is open; a blackholed link holds what was read until
/// it heals; a dropped link ends the copy (and, with the other direction, the connection).
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut link: watch::Receiver<Link>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if !open(&mut link).await {
            return;
        }
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(n) => n,
                Err(_) => return,
            },
            _ = link.wait_for(|l| *l == Link::Drop) => return,
        };
        if n == 0 {
            let _ = to.shutdown().await;
            return;
        }
        if !open(&mut link).await {
            return;
        }
        let wrote = tokio::select! {
            wrote = to.write_all(&buf[..n]) => wrote,
            _ = link.wait_for(|l| *l == Link::Drop) => return,
        };
        if wrote.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8], wait: Duration) -> Option<Vec<u8>> {
        s.write_all(msg).await.ok()?;
        let mut buf = vec![0u8; msg.len()];
        match tokio::time::timeout(wait, s.read_exact(&mut buf)).await {
            Ok(Ok(_)) => Some(buf),
            _ => None,
        }
    }

    #[tokio::test]
    async fn blackholed_link_holds_bytes_until_it_heals() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        assert_eq!(
            roundtrip(&mut s, b"one", Duration::from_secs(2))
                .await
                .as_deref(),
            Some(&b"one"[..])
        );
        proxy.cut(Cut::Blackhole);
        assert_eq!(
            roundtrip(&mut s, b"two", Duration::from_millis(300)).await,
            None
        );
        proxy.heal();
        let mut buf = [0u8; 3];
        tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf, b"two", "the held bytes arrive after the heal");
    }

    #[tokio::test]
    async fn dropped_link_closes_connections_and_refuses_new_ones_until_healed() {
        let proxy = Proxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        assert!(
            roundtrip(&mut s, b"hi", Duration::from_secs(2))
                .await
                .is_some()
        );
        proxy.cut(Cut::Drop);
        let mut buf = [0u8; 8];
        let read = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed: {read:?}");
        let mut fresh = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        assert_eq!(
            roundtrip(&mut fresh, b"x", Duration::from_millis(500)).await,
            None
        );
        proxy.heal();
        let mut healed = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        assert!(
            roundtrip(&mut healed, b"ok", Duration::from_secs(2))
                .await
                .is_some()
        );
    }
}

//! Local ports.

use std::io;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

/// A free local TCP port: bound on 127.0.0.1 and released at once, for a server the test starts
/// next. Panics when none can be bound (a test-machine problem, not a test failure to handle).
///
/// The port comes from the kernel's ephemeral range, which outgoing connections also draw their
/// local ports from: fine for a server that keeps it, not for one stopped and started again on
/// it (see [`restartable_port`]).
pub fn free_port() -> u16 {
    try_free_port().unwrap_or_else(|e| panic!("no free local TCP port: {e}"))
}

/// [`free_port`], or why none could be bound (for tools that report errors instead).
pub fn try_free_port() -> io::Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
}

/// Lowest port handed out by [`restartable_port`].
const RESTARTABLE_FROM: u16 = 20_000;

/// Where this process's search for a restartable port continues.
static NEXT_RESTARTABLE: AtomicU16 = AtomicU16::new(0);

/// A free local TCP port below the kernel's ephemeral range, for a server a test stops and
/// starts again on the same port (a broker, a database, an engine killed and restarted).
///
/// While such a server is down, a port from the ephemeral range can be taken meanwhile as the
/// local port of any outgoing connection, or by another test's [`free_port`], and the restart
/// then fails with "address in use". Ports below the range are only ever taken by servers
/// that ask for them. Processes start their search at different places (by process id), and
/// one process never hands out the same port twice.
pub fn restartable_port() -> u16 {
    try_restartable_port().unwrap_or_else(|e| panic!("no free restartable TCP port: {e}"))
}

/// [`restartable_port`], or why none could be found.
pub fn try_restartable_port() -> io::Result<u16> {
    let below = ephemeral_low().max(RESTARTABLE_FROM + 1);
    let span = below - RESTARTABLE_FROM;
    let start = u16::try_from(std::process::id() % 997).unwrap_or(0) * 11 % span;
    let _ = NEXT_RESTARTABLE.compare_exchange(0, start + 1, Ordering::SeqCst, Ordering::SeqCst);
    for _ in 0..span {
        let offset = NEXT_RESTARTABLE.fetch_add(1, Ordering::SeqCst) % span;
        let port = RESTARTABLE_FROM + offset;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("every port from {RESTARTABLE_FROM} to {below} is in use"),
    ))
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

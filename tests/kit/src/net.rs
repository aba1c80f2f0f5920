//! Local ports.

use std::io;
use std::net::TcpListener;

/// A free local TCP port: bound on 127.0.0.1 and released at once, for a server the test starts
/// next. Panics when none can be bound (a test-machine problem, not a test failure to handle).
pub fn free_port() -> u16 {
    try_free_port().unwrap_or_else(|e| panic!("no free local TCP port: {e}"))
}

/// [`free_port`], or why none could be bound (for tools that report errors instead).
pub fn try_free_port() -> io::Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
}

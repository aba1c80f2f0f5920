//! Built-in handlers, off unless the wrapper's operator enables them
//! ([`WrapperBuilder::enable_shell`](crate::WrapperBuilder::enable_shell),
//! [`WrapperBuilder::enable_http`](crate::WrapperBuilder::enable_http)).

pub(crate) mod http;
pub(crate) mod shell;

pub use shell::ShellOptions;

/// Name of the shell handler.
pub const SHELL: &str = "shell";
/// Name of the HTTP handler.
pub const HTTP: &str = "http";

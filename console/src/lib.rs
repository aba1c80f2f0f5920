//! MTHPT console: the `mthpt` command line and the REST API (`/api/v1`).
//!
//! - [`api`]: HTTP handlers, authentication and roles, errors, OpenAPI;
//! - [`service`]: the operations beneath the handlers (reused by the web UI);
//! - [`events`]: live events from the message bus to WebSocket sessions, and
//!   [`wrapper_alarms`]: the check of alarm messages wrappers publish;
//! - [`cli`]: the `mthpt` subcommands.

pub mod api;
pub mod cli;
pub mod events;
pub mod service;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod wrapper_alarms;

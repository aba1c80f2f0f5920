//! MTHPT console: the `mthpt` command line, the REST API (`/api/v1`) and the web console (`/`).
//!
//! - [`api`]: HTTP handlers, authentication and roles, errors, OpenAPI;
//! - [`service`]: the operations beneath the handlers (reused by the web UI);
//! - [`web`]: the web console's pages, over the same service layer as the API;
//! - [`events`]: live events from the message bus to WebSocket sessions, and
//!   [`wrapper_alarms`]: the check of alarm messages wrappers publish;
//! - [`cli`]: the `mthpt` subcommands.

pub mod api;
pub mod cli;
pub mod events;
pub mod service;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod web;
pub mod wrapper_alarms;

//! MTHPT console: the `mthpt` command line, the REST API (`/api/v1`) and the web console (`/`).
//!
//! - [`api`]: HTTP handlers, problem+json errors, OpenAPI;
//! - [`service`]: the operations beneath the handlers, with access control and error codes
//!   (shared by the API and the web UI, and knowing neither);
//! - [`http`]: what the API and the pages both read from a request (caller, CSRF, cookie);
//! - [`web`]: the web console's pages, over the same service layer as the API;
//! - [`events`]: live events from the message bus to WebSocket sessions, and
//!   [`wrapper_alarms`]: the check of alarm messages wrappers publish;
//! - [`startup`]: the HTTP server of all of them, as `mthpt console`, `mthpt standalone`
//!   and the tests run it;
//! - [`cli`]: the `mthpt` subcommands.

pub mod api;
pub mod cli;
pub mod events;
pub mod http;
mod layering;
pub mod messages;
pub mod service;
pub mod startup;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod web;
pub mod wrapper_alarms;

//! The console's in-process tests, in one binary (each test binary is a link): the REST API
//! (`api_*`, `openapi`), the live events WebSocket (`live_*`, `wrapper_alarms`), the web pages
//! over HTTP and the schema's name checks. Most run on both backends against a server on a
//! random port over a fresh database.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod api_apps;
mod api_channels;
mod api_cross_tenant;
mod api_effects;
mod api_errors;
mod api_hostile_names;
mod api_quotas;
mod api_retention;
mod api_session;
mod api_skeleton;
mod api_task_checks;
mod api_tasks;
mod api_users;
mod api_weights;
mod hostile_names;
mod live_events;
mod live_runs;
mod openapi;
mod web_actions;
mod web_pages;
mod web_session;
mod wrapper_alarms;

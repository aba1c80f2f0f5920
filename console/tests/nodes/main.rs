//! `mthpt engine`, `mthpt wrapper` and `mthpt console` as separate processes, in one binary
//! (each test binary is a link): clusters of nodes, a flooded tenant beside a quiet one, hostile
//! callbacks and uploads, metrics, a broker outage, and schemathesis against the console API. Heavy: `.config/nextest.toml` keeps these from all running at once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod broker_outage;
mod cluster;
mod flooded_tenant;
mod hostile_callbacks;
mod hostile_memory;
mod metrics;
mod schemathesis;

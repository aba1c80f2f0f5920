//! `mthpt engine`, `mthpt wrapper` and `mthpt console` as separate processes, in one binary
//! (each test binary is a link): clusters of nodes, hostile callbacks and uploads, metrics, and
//! a broker outage. Heavy: `.config/nextest.toml` keeps these from all running at once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod broker_outage;
mod cluster;
mod hostile_callbacks;
mod hostile_memory;
mod metrics;

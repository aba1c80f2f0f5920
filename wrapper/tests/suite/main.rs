//! The wrapper's integration tests, in one binary (each test binary is a link): acks,
//! delivery, alarms, built-in handlers, request signatures, hostile requests, the protocol
//! document and the fuzz corpora.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod acks;
mod alarms;
mod builtins;
mod delivery;
mod fuzz_corpus;
mod hostile_requests;
mod protocol_docs;
mod signatures;

//! The cross-crate tests, in one binary (each test binary is a link): an engine and real
//! wrappers end to end, the README's cluster section as written, and smoke runs of the
//! benchmark and fault-injection harnesses (one PostgreSQL failover among them).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bench_smoke;
mod chaos_smoke;
mod end_to_end;
mod pg_failover_smoke;
mod readme_cluster;

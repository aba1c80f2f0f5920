//! Shared helpers for MTHPT's cross-crate tests and the benchmark harness.

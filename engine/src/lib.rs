//! MTHPT scheduling engine.
//!
//! Engine nodes compete for due runs in a shared table, fire them on time to executor wrappers,
//! and handle their results. See `docs/` and the workspace README for the architecture.

pub mod clock;
pub mod schedule;

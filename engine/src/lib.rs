//! MTHPT scheduling engine.
//!
//! Engine nodes compete for due runs in a shared table, fire them on time to executor wrappers,
//! and handle their results. This crate holds the domain types (one module per noun), the
//! schedules, and the [`store`] seam with its PostgreSQL and SQLite backends.

mod macros;

pub mod admission;
pub mod alarm;
pub mod api;
pub mod app;
pub mod audit;
pub mod bus;
pub mod channel;
pub mod claimer;
pub mod clock;
pub mod directory;
pub mod dispatcher;
pub mod finished_here;
pub mod group_commit;
pub mod hosts;
pub mod metrics;
pub mod node;
pub mod notify;
pub mod outcome;
pub mod quota;
pub mod relay;
pub mod results;
pub mod rollup;
pub mod routing;
pub mod run;
pub mod run_events;
pub mod runtime;
pub mod schedule;
pub mod store;
pub mod task;
pub mod tenant;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod vacuum;
pub mod validate;
pub mod watchdog;

/// A stored or submitted text value that is not one of an enum's spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a valid {kind} (expected one of: {})", expected.join(", "))]
pub struct UnknownVariant {
    /// The enum.
    pub kind: &'static str,
    /// What was given.
    pub value: String,
    /// What is accepted.
    pub expected: &'static [&'static str],
}

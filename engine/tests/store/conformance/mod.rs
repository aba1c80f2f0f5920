//! Store conformance cases, each an `async fn(&dyn Store)`.

pub mod alarms;
pub mod apps;
pub mod channels;
pub mod claims;
pub mod isolation;
pub mod runs;
pub mod tasks;
pub mod tenants;
pub mod views;

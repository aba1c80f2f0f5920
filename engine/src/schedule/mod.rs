//! Schedules: when a task fires.

pub mod cron;
pub use cron::{CronError, CronSpec};

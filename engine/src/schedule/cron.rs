//! Cron expressions (interim: plain `cron` crate semantics; replaced by the Quartz-exact CronSpec).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};

/// A parsed cron expression.
#[derive(Debug, Clone)]
pub struct CronSpec {
    source: String,
    schedule: cron::Schedule,
}

impl PartialEq for CronSpec {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}
impl Eq for CronSpec {}

/// A cron field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CronField {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
    Year,
}

/// Why an expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CronError {
    pub field: Option<CronField>,
    pub message: String,
}

impl CronSpec {
    /// Parses an expression.
    pub fn parse(expr: &str) -> Result<CronSpec, CronError> {
        let schedule = cron::Schedule::from_str(expr.trim()).map_err(|e| CronError {
            field: None,
            message: e.to_string(),
        })?;
        Ok(CronSpec {
            source: expr.trim().to_owned(),
            schedule,
        })
    }

    /// The text as given.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The first fire time strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>, tz: &chrono_tz::Tz) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(tz);
        self.schedule
            .after(&local)
            .map(|t| t.with_timezone(&Utc))
            .find(|t| *t > after)
    }
}

impl FromStr for CronSpec {
    type Err = CronError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for CronSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

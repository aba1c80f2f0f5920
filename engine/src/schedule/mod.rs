//! When tasks fire: cron expressions (Quartz meaning), fixed rate, fixed delay, one-shot, manual.
//!
//! [`ScheduleSpec`] is the definition as a tenant writes and the store keeps it; [`Schedule`] is
//! the parsed form that computes occurrences. Every instant is epoch milliseconds (UTC).

pub mod cron;
pub mod describe;

use std::fmt;

use chrono::DateTime;
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

pub use self::cron::{CronError, CronField, CronSpec};
use crate::clock::ms_to_datetime;
use crate::macros::text_enum;
use crate::validate::FieldError;

text_enum!(
    /// The kind of schedule, as stored.
    ScheduleKind {
        Cron = "cron",
        FixedRate = "fixed_rate",
        FixedDelay = "fixed_delay",
        Once = "once",
        Manual = "manual",
    }
);

impl ScheduleKind {
    /// Whether the engine materialises the following occurrence when it claims one (see
    /// [`Schedule::follows_on_claim`]).
    pub fn follows_on_claim(self) -> bool {
        matches!(self, ScheduleKind::Cron | ScheduleKind::FixedRate)
    }
}

/// The longest period or delay accepted: one year.
pub const MAX_INTERVAL_MS: i64 = 366 * 24 * 3600 * 1000;

/// A schedule as written by a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ScheduleSpec {
    /// A Quartz cron expression (seconds field required) in an IANA time zone.
    Cron {
        expr: String,
        #[serde(default = "utc_name")]
        timezone: String,
    },
    /// Every `every_ms` milliseconds, counted from `anchor_at` (default: when the task is created).
    FixedRate {
        every_ms: i64,
        #[serde(default)]
        anchor_at: Option<i64>,
    },
    /// `delay_ms` after the previous run finished (the first run `delay_ms` after creation).
    FixedDelay { delay_ms: i64 },
    /// Once, at an instant.
    Once { at: i64 },
    /// Only when triggered by a person or the API.
    Manual,
}

fn utc_name() -> String {
    "UTC".to_owned()
}

impl ScheduleSpec {
    /// The stored kind.
    pub fn kind(&self) -> ScheduleKind {
        match self {
            ScheduleSpec::Cron { .. } => ScheduleKind::Cron,
            ScheduleSpec::FixedRate { .. } => ScheduleKind::FixedRate,
            ScheduleSpec::FixedDelay { .. } => ScheduleKind::FixedDelay,
            ScheduleSpec::Once { .. } => ScheduleKind::Once,
            ScheduleSpec::Manual => ScheduleKind::Manual,
        }
    }

    /// Parses and checks the definition. `now_ms` anchors a fixed rate given without an anchor.
    pub fn parse(&self, now_ms: i64) -> Result<Schedule, FieldError> {
        match self {
            ScheduleSpec::Cron { expr, timezone } => {
                let spec = CronSpec::parse(expr)
                    .map_err(|e| FieldError::new("schedule.expr", e.to_string()))?;
                let tz = parse_timezone(timezone)?;
                Ok(Schedule::Cron {
                    spec: Box::new(spec),
                    tz,
                })
            }
            ScheduleSpec::FixedRate {
                every_ms,
                anchor_at,
            } => {
                check_interval("schedule.every_ms", *every_ms)?;
                Ok(Schedule::FixedRate {
                    every_ms: *every_ms,
                    anchor_ms: anchor_at.unwrap_or(now_ms),
                })
            }
            ScheduleSpec::FixedDelay { delay_ms } => {
                check_interval("schedule.delay_ms", *delay_ms)?;
                Ok(Schedule::FixedDelay {
                    delay_ms: *delay_ms,
                })
            }
            ScheduleSpec::Once { at } => Ok(Schedule::Once { at_ms: *at }),
            ScheduleSpec::Manual => Ok(Schedule::Manual),
        }
    }
}

impl ScheduleSpec {
    /// Checks a schedule being written (a task created or edited, a preview): like
    /// [`ScheduleSpec::parse`], but every error at once (a wrong expression *and* a wrong zone),
    /// and a cron expression that never fires from `now_ms` up to the search
    /// [horizon](cron::horizon_year) (`0 0 0 31 2 ?`, February 31st; a year already past) is
    /// refused naming `schedule.expr`. Stored schedules are read with [`ScheduleSpec::parse`],
    /// which keeps accepting them.
    pub fn check(&self, now_ms: i64) -> Result<Schedule, Vec<FieldError>> {
        let ScheduleSpec::Cron { expr, timezone } = self else {
            return self.parse(now_ms).map_err(|e| vec![e]);
        };
        let spec =
            CronSpec::parse(expr).map_err(|e| FieldError::new("schedule.expr", e.to_string()));
        let tz = parse_timezone(timezone);
        let (spec, tz) = match (spec, tz) {
            (Ok(spec), Ok(tz)) => (spec, tz),
            (spec, tz) => return Err(spec.err().into_iter().chain(tz.err()).collect()),
        };
        let schedule = Schedule::Cron {
            spec: Box::new(spec),
            tz,
        };
        if schedule.next_after(now_ms).is_none() {
            return Err(vec![FieldError::new(
                "schedule.expr",
                format!(
                    "{:?} never fires: it has no fire time from now to the end of {}, the end of the search horizon",
                    expr.trim(),
                    cron::horizon_year()
                ),
            )]);
        }
        Ok(schedule)
    }
}

fn check_interval(field: &str, ms: i64) -> Result<(), FieldError> {
    if !(1..=MAX_INTERVAL_MS).contains(&ms) {
        Err(FieldError::new(
            field,
            format!("must be between 1 ms and {MAX_INTERVAL_MS} ms (one year), is {ms}"),
        ))
    } else {
        Ok(())
    }
}

/// Parses an IANA time zone name such as `Europe/London`.
pub fn parse_timezone(name: &str) -> Result<Tz, FieldError> {
    name.parse::<Tz>().map_err(|_| {
        FieldError::new(
            "schedule.timezone",
            format!(
                "{name:?} is not an IANA time zone name (e.g. UTC, Europe/London, Asia/Shanghai)"
            ),
        )
    })
}

/// A parsed schedule that computes occurrences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    Cron { spec: Box<CronSpec>, tz: Tz },
    FixedRate { every_ms: i64, anchor_ms: i64 },
    FixedDelay { delay_ms: i64 },
    Once { at_ms: i64 },
    Manual,
}

impl Schedule {
    /// The first occurrence strictly after `after_ms`, if any.
    ///
    /// For a fixed delay, `after_ms` is when the previous run finished (or when the task was
    /// created or resumed).
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        match self {
            Schedule::Cron { spec, tz } => spec
                .next_after(ms_to_datetime(after_ms), tz)
                .map(|t: DateTime<_>| t.timestamp_millis()),
            Schedule::FixedRate {
                every_ms,
                anchor_ms,
            } => {
                if after_ms < *anchor_ms {
                    Some(*anchor_ms)
                } else {
                    let periods = (after_ms - anchor_ms) / every_ms + 1;
                    periods
                        .checked_mul(*every_ms)
                        .and_then(|d| anchor_ms.checked_add(d))
                }
            }
            Schedule::FixedDelay { delay_ms } => after_ms.checked_add(*delay_ms),
            Schedule::Once { at_ms } => (*at_ms > after_ms).then_some(*at_ms),
            Schedule::Manual => None,
        }
    }

    /// Whether the engine materialises the following occurrence when it claims one. A fixed
    /// delay's next occurrence depends on when the previous run finishes, so it is materialised
    /// when the result arrives instead; one-shot and manual schedules have no following one.
    pub fn follows_on_claim(&self) -> bool {
        self.kind().follows_on_claim()
    }

    /// The kind stored for this schedule.
    pub fn kind(&self) -> ScheduleKind {
        match self {
            Schedule::Cron { .. } => ScheduleKind::Cron,
            Schedule::FixedRate { .. } => ScheduleKind::FixedRate,
            Schedule::FixedDelay { .. } => ScheduleKind::FixedDelay,
            Schedule::Once { .. } => ScheduleKind::Once,
            Schedule::Manual => ScheduleKind::Manual,
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Cron { spec, tz } => write!(f, "cron {spec} ({tz})"),
            Schedule::FixedRate { every_ms, .. } => write!(f, "every {every_ms} ms"),
            Schedule::FixedDelay { delay_ms } => write!(f, "{delay_ms} ms after the previous run"),
            Schedule::Once { at_ms } => {
                write!(f, "once at {}", ms_to_datetime(*at_ms).to_rfc3339())
            }
            Schedule::Manual => f.write_str("manual"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_rate_counts_from_its_anchor() {
        let s = Schedule::FixedRate {
            every_ms: 1_000,
            anchor_ms: 10_500,
        };
        assert_eq!(s.next_after(0), Some(10_500));
        assert_eq!(s.next_after(10_500), Some(11_500));
        assert_eq!(s.next_after(11_499), Some(11_500));
        assert_eq!(s.next_after(11_500), Some(12_500));
    }

    #[test]
    fn once_fires_only_after_earlier_instants() {
        let s = Schedule::Once { at_ms: 5_000 };
        assert_eq!(s.next_after(4_999), Some(5_000));
        assert_eq!(s.next_after(5_000), None);
    }

    #[test]
    fn fixed_delay_follows_the_previous_finish() {
        let s = Schedule::FixedDelay { delay_ms: 250 };
        assert_eq!(s.next_after(1_000), Some(1_250));
        assert!(!s.follows_on_claim());
    }

    #[test]
    fn manual_never_fires_by_itself() {
        assert_eq!(Schedule::Manual.next_after(0), None);
    }

    #[test]
    fn bad_definitions_name_the_field() {
        let err = ScheduleSpec::FixedRate {
            every_ms: 0,
            anchor_at: None,
        }
        .parse(0)
        .unwrap_err();
        assert_eq!(err.field, "schedule.every_ms");
        let err = ScheduleSpec::Cron {
            expr: "0 0 12 * * ?".into(),
            timezone: "Mars/Olympus".into(),
        }
        .parse(0)
        .unwrap_err();
        assert_eq!(err.field, "schedule.timezone");
        let err = ScheduleSpec::Cron {
            expr: "not cron".into(),
            timezone: "UTC".into(),
        }
        .parse(0)
        .unwrap_err();
        assert_eq!(err.field, "schedule.expr");
    }

    #[test]
    fn a_written_schedule_reports_every_error_at_once() {
        let errors = ScheduleSpec::Cron {
            expr: "0 0 25 * * ?".into(),
            timezone: "Mars/Olympus".into(),
        }
        .check(0)
        .unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["schedule.expr", "schedule.timezone"]);
    }

    #[test]
    fn a_cron_that_never_fires_is_refused_when_written_but_read_when_stored() {
        let now = 1_780_000_000_000; // 2026-05-28
        for expr in ["0 0 0 31 2 ?", "0 0 0 30 2 ?", "0 0 12 * * ? 2020"] {
            let spec = ScheduleSpec::Cron {
                expr: expr.into(),
                timezone: "UTC".into(),
            };
            let errors = spec.check(now).unwrap_err();
            assert_eq!(errors.len(), 1, "{expr}");
            assert_eq!(errors[0].field, "schedule.expr");
            assert!(
                errors[0].reason.contains("never fires"),
                "{}",
                errors[0].reason
            );
            assert!(spec.parse(now).is_ok(), "{expr}");
        }
        let leap = ScheduleSpec::Cron {
            expr: "0 0 0 29 2 ?".into(),
            timezone: "UTC".into(),
        };
        assert!(leap.check(now).is_ok());
    }

    #[test]
    fn spec_round_trips_through_json() {
        let spec: ScheduleSpec =
            serde_json::from_str(r#"{"kind":"cron","expr":"0 0 12 * * ?"}"#).unwrap();
        assert_eq!(
            spec,
            ScheduleSpec::Cron {
                expr: "0 0 12 * * ?".into(),
                timezone: "UTC".into()
            }
        );
        let err = serde_json::from_str::<ScheduleSpec>(r#"{"kind":"hourly"}"#).unwrap_err();
        assert!(err.to_string().contains("hourly"), "{err}");
    }
}

//! The checks behind the `cron` fuzz target, shared with the corpus replay test
//! (`engine/tests/scheduling/fuzz_corpus.rs`). Must never panic on any input.
//!
//! Input format: line 1 is the cron expression (bytes that are not UTF-8 are replaced, so the
//! parser still sees the rest), line 2 an optional IANA time zone (default UTC), line 3 an
//! optional start instant in Unix seconds (default 2027-01-15).

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use mthpt_engine::schedule::{CronSpec, ScheduleSpec};

/// Start instant when the input gives none (2027-01-15).
pub const DEFAULT_START: i64 = 1_800_000_000;

/// How many fire times are computed per parsed expression.
pub const FIRE_TIMES: usize = 6;

/// Target `cron`: parse an expression and compute its next fire times in a zone. Returns whether
/// the expression was accepted.
pub fn check_cron(data: &[u8]) -> bool {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let expr = lines.next().unwrap_or_default();
    let zone_name = lines.next().map(str::trim).filter(|z| !z.is_empty());
    let start = lines
        .next()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|secs| DateTime::<Utc>::from_timestamp(secs, 0))
        .or_else(|| DateTime::<Utc>::from_timestamp(DEFAULT_START, 0))
        .unwrap_or_default();
    let tz: Tz = zone_name.and_then(|z| z.parse().ok()).unwrap_or(Tz::UTC);

    let Ok(spec) = CronSpec::parse(expr) else {
        return false;
    };
    // The stored text means the same expression.
    assert_eq!(
        CronSpec::parse(spec.source()).as_ref(),
        Ok(&spec),
        "the source of a parsed expression does not parse to the same expression"
    );

    // Fire times come strictly after the start and strictly increase, as the claim loop assumes.
    let times: Vec<DateTime<Utc>> = spec.iter_after(start, tz).take(FIRE_TIMES).collect();
    let mut previous = start;
    for t in &times {
        assert!(
            *t > previous,
            "{expr:?} in {tz}: fire time {t} is not after {previous}"
        );
        previous = *t;
    }
    // The first one is what `next_after` answers, also through the task schedule.
    assert_eq!(spec.next_after(start, &tz), times.first().copied());
    let schedule = ScheduleSpec::Cron {
        expr: expr.to_owned(),
        timezone: tz.name().to_owned(),
    }
    .parse(start.timestamp_millis());
    if let Ok(schedule) = schedule {
        // The schedule works in whole milliseconds; the start has none below the second.
        assert_eq!(
            schedule.next_after(start.timestamp_millis()),
            times.first().map(DateTime::timestamp_millis),
            "the task schedule and the cron expression disagree"
        );
    }
    true
}

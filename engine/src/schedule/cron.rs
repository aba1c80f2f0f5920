//! Quartz cron expressions: [`CronSpec`].
//!
//! A [`CronSpec`] means exactly what the same text means to Quartz 2.3.2's
//! `org.quartz.CronExpression`, including the fire times it computes around daylight-saving
//! transitions. Expressions that Quartz accepts but that are malformed or cannot mean what they
//! seem to say are refused here with an error naming the field (see [Refused](#refused)).
//!
//! # Syntax
//!
//! Six or seven fields separated by spaces or tabs:
//!
//! | # | Field        | Values                      | Also allowed                     |
//! |---|--------------|-----------------------------|----------------------------------|
//! | 1 | second       | 0-59                        | `*` `,` `-` `/`                  |
//! | 2 | minute       | 0-59                        | `*` `,` `-` `/`                  |
//! | 3 | hour         | 0-23                        | `*` `,` `-` `/`                  |
//! | 4 | day-of-month | 1-31                        | `*` `,` `-` `/` `?` `L` `W`      |
//! | 5 | month        | 1-12 or `JAN`-`DEC`         | `*` `,` `-` `/`                  |
//! | 6 | day-of-week  | 1-7 or `SUN`-`SAT`          | `*` `,` `-` `/` `?` `L` `#`      |
//! | 7 | year (opt.)  | 1970-2199                   | `*` `,` `-` `/`                  |
//!
//! - **Seconds come first and are required**: `0 0 12 * * ?` fires every day at noon. A
//!   five-field Unix expression is refused rather than guessed at.
//! - **Day-of-week counts from Sunday: 1 = SUN, 2 = MON, ... 7 = SAT.** This is Quartz's
//!   numbering, not Unix cron's (where 6 is Saturday and 0 is Sunday); `0` is refused. Names
//!   (`MON-FRI`) avoid the question.
//! - **Exactly one of day-of-month and day-of-week must be `?`** ("no specific value"):
//!   `0 0 12 * * ?` or `0 0 12 ? * MON`. Giving both (`0 0 12 * * *`, `0 0 12 13 * FRI`) is
//!   refused, as Quartz refuses it.
//! - Names are case-insensitive, as three letters (`JAN`, `MON`) or in full (`JANUARY`,
//!   `MONDAY`).
//! - `a-b` is a range; when `a > b` it wraps around: hours `22-2` are 22, 23, 0, 1, 2 and
//!   `FRI-MON` is Friday to Monday. `*/n`, `a/n` (from `a` to the end of the range) and `a-b/n`
//!   step through values (`0/15` in minutes: 0, 15, 30, 45); a wrapping range steps on past the
//!   end (`50-10/5` seconds: 50, 55, 0, 5, 10). Steps are not allowed after names.
//! - Day-of-month: `L` is the last day of the month, `L-n` the n-th day before it (n = 0-30; a
//!   month too short for it has no such day: `L-30` is the 1st of 31-day months only), `LW` the
//!   last weekday (Monday-Friday) of the month, `L-nW` the weekday nearest to `L-n` (n = 0-27),
//!   `nW` the weekday nearest to day n: a Saturday moves back to Friday, a Sunday forward to
//!   Monday, but never into another month (the 1st on a Saturday moves forward to Monday the
//!   3rd, the last day on a Sunday back to Friday). These forms stand alone in the field.
//!   Quartz's quirks with `nW` are kept: when n is beyond the month's end (`31W` in April) it is
//!   read as the overflowing date (May 1st), so the month only fires when that date is a
//!   Saturday (then on Friday the 30th); and after the month's fire day has passed the search
//!   continues from day n of the next month, so that month's fire day can be the Friday before
//!   n (`15W` with the 15th on a Saturday fires on the 14th) while such a short-month fire
//!   (`29W` on February 28th when March 1st is a Saturday) is only seen by a search that starts
//!   inside February.
//! - Day-of-week: `L` alone means 7 (Saturday); `nL` is the last such weekday of the month
//!   (`6L` = last Friday); `n#k` is the k-th such weekday (`2#1` = first Monday, k = 1-5; months
//!   without a fifth one are skipped). These forms stand alone in the field.
//! - Year: values, ranges (not wrapping), `*/n` (counting from 1970) and `a/n`.
//!
//! # Time zones and daylight saving
//!
//! Fire times are computed on the wall clock of an IANA zone ([`chrono_tz::Tz`]) and returned
//! as UTC instants, as Quartz does with a `java.util.GregorianCalendar` in that zone:
//!
//! - **A wall time that does not exist (clocks jump forward) never fires.** `0 30 2 * * ?` in
//!   America/New_York does not fire on the spring-forward day. Schedules that fire repeatedly
//!   resume after the jump (`0 0/30 1-3 * * ?` fires 01:00, 01:30, 03:00, 03:30 EDT that day). In
//!   zones with a 30-minute jump (Australia/Lord_Howe, 02:00 becomes 02:30) the search is carried
//!   forward by the jump: `0 10,35 * * * ?` fires 01:35 and then 03:10 on that day, not 02:35,
//!   exactly like Quartz.
//! - **A wall time that exists twice (clocks go back) fires once, on the later pass.** In
//!   New York `0 30 1 * * ?` fires at 01:30 EST (06:30Z) on the fall-back day, and
//!   `0 0/30 * * * ?` skips the first pass of 01:00-01:59 (00:30 EDT, then 01:00 EST).
//! - A search starting inside the first pass of a repeated hour continues on the second pass
//!   (from 05:15Z = 01:15 EDT on the fall-back day, `* * * * * ?` next fires at 01:15:01 EST).
//! - Successive fire times strictly increase in UTC; [`CronSpec::next_after`] returns a time
//!   strictly after its argument (sub-second parts of the argument are dropped: the search starts
//!   at the next whole second).
//!
//! # Horizon
//!
//! Like Quartz, searches end at the end of the year 100 years after the current year
//! ([`horizon_year`], taken once from the system clock): `0 0 12 * * ? 2150` is a valid expression
//! that has no fire time yet, and `0 0 0 30 2 ?` (February 30th) returns `None` after scanning
//! up to the horizon, in well under a millisecond. The zone database ends its rules in 2099;
//! later fire times use the offset in force at the end of 2099.
//!
//! # Refused
//!
//! Quartz silently accepts some malformed input and gives it a meaning nobody wrote. These are
//! refused, with the field and the reason: more than seven fields; trailing characters
//! (`?x`, `15WW`, `6Lx`); doubled or dangling operators (`**`, `1-5-`, `/15`); steps of 0; steps
//! after names (`MON-WED/2`, where Quartz ignores the step); names that only start like a name
//! (`MONKEY`, `TUES`); `L`, `W` or `#` in lists or ranges (`1,15W`, `2,6#3`, `1-5#2`, where Quartz
//! drops part of the list); `L` outside the day fields; `0W` and `L-nW` with n above 27 (Quartz
//! can loop forever on them); `L-n` for day-of-week; years before 1970 or after 2199. Everything
//! Quartz itself refuses is refused too.
//!
//! # Example
//!
//! ```
//! use chrono::{DateTime, Utc};
//! use mthpt_engine::schedule::CronSpec;
//!
//! let spec: CronSpec = "0 0 12 ? * MON-FRI".parse()?;
//! let after: DateTime<Utc> = "2026-06-05T13:00:00Z".parse()?; // a Friday afternoon
//! let next = spec.next_after(after, &chrono_tz::UTC);
//! assert_eq!(next, Some("2026-06-08T12:00:00Z".parse()?)); // Monday noon
//!
//! let refused = "0 0 12 * * *".parse::<CronSpec>();
//! assert!(refused.is_err_and(|e| e.to_string().contains("cannot both be specified")));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod fields;
mod parse;
mod search;
mod zone;

#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use chrono::{DateTime, Datelike, Utc};
use chrono_tz::Tz;

pub use error::{CronError, CronField};
pub(crate) use fields::DayRule;
use fields::Fields;
pub(crate) use parse::{Field as WrittenField, Item as WrittenItem, Written};

/// The last year a search reaches: the current year (UTC, read once per process) plus 100, as
/// Quartz's `CronExpression.MAX_YEAR`.
pub fn horizon_year() -> i32 {
    static HORIZON: OnceLock<i32> = OnceLock::new();
    *HORIZON.get_or_init(|| Utc::now().year() + 100)
}

/// A validated Quartz cron expression. See the [module documentation](self) for its meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronSpec {
    source: String,
    fields: Fields,
    written: Written,
}

impl CronSpec {
    /// Parses and validates an expression (surrounding whitespace is ignored).
    pub fn parse(expr: &str) -> Result<CronSpec, CronError> {
        let source = expr.trim();
        let (fields, written) = parse::parse_expression(source, horizon_year())?;
        Ok(CronSpec {
            source: source.to_string(),
            fields,
            written,
        })
    }

    /// The fields as written (for descriptions, which keep the author's structure: `0/15`
    /// reads "every 15 minutes").
    pub(crate) fn written(&self) -> &Written {
        &self.written
    }

    /// The expression as given, without surrounding whitespace.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The first fire time strictly after `after`, on the wall clock of `tz`; `None` when there
    /// is none before the [horizon](horizon_year).
    pub fn next_after(&self, after: DateTime<Utc>, tz: &Tz) -> Option<DateTime<Utc>> {
        search::next_after(&self.fields, after, tz, horizon_year())
    }

    /// The fire times after `after`, in strictly increasing order.
    pub fn iter_after(&self, after: DateTime<Utc>, tz: Tz) -> FireTimes<'_> {
        FireTimes {
            spec: self,
            tz,
            last: Some(after),
        }
    }
}

/// Iterator over the fire times of a [`CronSpec`], from [`CronSpec::iter_after`].
#[derive(Debug, Clone)]
pub struct FireTimes<'a> {
    spec: &'a CronSpec,
    tz: Tz,
    last: Option<DateTime<Utc>>,
}

impl Iterator for FireTimes<'_> {
    type Item = DateTime<Utc>;

    fn next(&mut self) -> Option<DateTime<Utc>> {
        let after = self.last?;
        self.last = self.spec.next_after(after, &self.tz);
        self.last
    }
}

impl std::iter::FusedIterator for FireTimes<'_> {}

impl FromStr for CronSpec {
    type Err = CronError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CronSpec::parse(s)
    }
}

impl fmt::Display for CronSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl serde::Serialize for CronSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.source)
    }
}

impl<'de> serde::Deserialize<'de> for CronSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        CronSpec::parse(&text).map_err(serde::de::Error::custom)
    }
}

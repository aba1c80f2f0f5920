//! Wall-clock time in a zone, and how a wall time that is skipped or repeated maps to an instant.
//!
//! The mapping is the one Quartz gets from `java.util.GregorianCalendar` (measured against
//! OpenJDK 17):
//! - a wall time that exists once maps to that instant;
//! - a wall time that exists twice (the repeated hour when clocks go back) maps to the **later**
//!   instant, the one after the transition;
//! - a wall time that does not exist (skipped when clocks go forward) is read with the offset in
//!   force **before** the transition, which lands after the transition: 02:30 on a New York
//!   spring-forward day becomes 07:30Z, shown as 03:30 EDT. Reading the wall clock again then
//!   gives a time moved forward by the size of the jump.

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

/// The instant a wall time stands for in `tz`.
pub(crate) fn resolve(tz: &Tz, wall: &NaiveDateTime) -> Option<DateTime<Utc>> {
    let at = |offset_secs: i32| -> Option<DateTime<Utc>> {
        wall.checked_sub_signed(Duration::seconds(i64::from(offset_secs)))
            .map(|naive| naive.and_utc())
    };
    match tz.offset_from_local_datetime(wall) {
        LocalResult::Single(offset) => at(offset.fix().local_minus_utc()),
        LocalResult::Ambiguous(a, b) => {
            let a = at(a.fix().local_minus_utc())?;
            let b = at(b.fix().local_minus_utc())?;
            Some(a.max(b))
        }
        LocalResult::None => {
            // Inside a gap. Of the two offsets around the transition, the smaller one was in
            // force before it (offsets grow across a gap). Reading the wall time with one offset
            // lands on the side of the transition where the other one applies, so two look-ups
            // give both.
            let offset_at = |utc: NaiveDateTime| tz.offset_from_utc_datetime(&utc).fix();
            let guess = offset_at(*wall).local_minus_utc();
            let first = offset_at(at(guess)?.naive_utc()).local_minus_utc();
            let second = offset_at(at(first)?.naive_utc()).local_minus_utc();
            at(first.min(second))
        }
    }
}

/// The wall time `tz` shows at `instant`.
pub(crate) fn wall_at(tz: &Tz, instant: &DateTime<Utc>) -> NaiveDateTime {
    instant.with_timezone(tz).naive_local()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn wall(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, mo, d)
            .and_then(|d| d.and_hms_opt(h, mi, 0))
            .unwrap_or_default()
    }

    fn utc(s: &str) -> Option<DateTime<Utc>> {
        DateTime::parse_from_rfc3339(s).ok().map(|d| d.to_utc())
    }

    #[test]
    fn skipped_wall_time_reads_with_the_offset_before_the_jump() {
        let ny = chrono_tz::America::New_York;
        assert_eq!(
            resolve(&ny, &wall(2027, 3, 14, 2, 30)),
            utc("2027-03-14T07:30:00Z")
        );
        let lh = chrono_tz::Australia::Lord_Howe;
        assert_eq!(
            resolve(&lh, &wall(2027, 10, 3, 2, 15)),
            utc("2027-10-02T15:45:00Z")
        );
    }

    #[test]
    fn repeated_wall_time_maps_to_the_later_instant() {
        let ny = chrono_tz::America::New_York;
        assert_eq!(
            resolve(&ny, &wall(2027, 11, 7, 1, 30)),
            utc("2027-11-07T06:30:00Z")
        );
        let lh = chrono_tz::Australia::Lord_Howe;
        assert_eq!(
            resolve(&lh, &wall(2027, 4, 4, 1, 45)),
            utc("2027-04-03T15:15:00Z")
        );
    }
}

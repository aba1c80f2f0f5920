//! Finding the next fire time.
//!
//! The search walks a wall-clock cursor forward field by field, from seconds up to years. Each
//! round checks the fields in that order; the first field that does not match moves the cursor to
//! its next candidate (resetting the smaller fields) and the round starts again. Every move
//! writes calendar fields that may overflow (minute 60, day 32), normalises them like a lenient
//! calendar and reads the wall clock back through [`zone::resolve`], so a cursor that lands in a
//! skipped hour is carried forward by the size of the jump and a repeated hour is always seen on
//! its second pass. This is what makes fire times around DST transitions come out as Quartz's.

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, Timelike, Utc};
use chrono_tz::Tz;

use super::fields::{Bits, DayRule, Fields};
use super::zone;

/// Upper bound on search rounds; far above what any expression needs before its horizon
/// (an impossible day such as February 30 costs about two rounds per month of the horizon).
const MAX_ROUNDS: u32 = 100_000;

/// The first fire time strictly after `after`, or `None` when there is none up to the end of
/// `horizon` (a year).
pub(crate) fn next_after(
    fields: &Fields,
    after: DateTime<Utc>,
    tz: &Tz,
    horizon: i32,
) -> Option<DateTime<Utc>> {
    // Whole seconds only: the search starts at the second after `after`.
    let start = DateTime::from_timestamp(after.timestamp().checked_add(1)?, 0)?;
    let mut cursor = Cursor {
        tz,
        wall: zone::wall_at(tz, &start),
    };
    // Reading the wall clock back settles a time in a repeated hour onto its second pass.
    let wall = cursor.wall;
    cursor.set(
        wall.year(),
        i64::from(wall.month()),
        i64::from(wall.day()),
        i64::from(wall.hour()),
        i64::from(wall.minute()),
        i64::from(wall.second()),
    )?;

    let search = Search {
        fields,
        tz,
        start,
        horizon,
    };
    for _ in 0..MAX_ROUNDS {
        match search.round(&mut cursor)? {
            Round::Moved => continue,
            Round::Found => {
                let instant = zone::resolve(tz, &cursor.wall)?;
                if instant > after {
                    return Some(instant);
                }
                // The resolution rules never map a settled cursor before the start; should a
                // zone ever do so, step on rather than end the schedule.
                let w = cursor.wall;
                cursor.set(
                    w.year(),
                    i64::from(w.month()),
                    i64::from(w.day()),
                    i64::from(w.hour()),
                    i64::from(w.minute()),
                    i64::from(w.second()) + 1,
                )?;
            }
        }
    }
    None
}

/// One search: what to match, where, from when, and up to which year.
struct Search<'a> {
    fields: &'a Fields,
    tz: &'a Tz,
    /// The first instant a fire time may have (the whole second after `after`).
    start: DateTime<Utc>,
    horizon: i32,
}

enum Round {
    /// The cursor moved; check every field again.
    Moved,
    /// Every field matches the cursor.
    Found,
}

/// The outcome of checking the cursor's day against the day rule.
enum DayCheck {
    /// The day is a fire day.
    Matches,
    /// Move to midnight of this (year, month, day); month and day may overflow.
    MoveTo(i32, i64, i64),
}

/// A wall-clock position, always normalised (it shows a time the zone's clock really shows).
struct Cursor<'a> {
    tz: &'a Tz,
    wall: NaiveDateTime,
}

impl Cursor<'_> {
    /// Moves to the given calendar fields, each of which may lie outside its usual range; they
    /// are normalised as a lenient calendar does (month 13 is January of the next year, day 0 the
    /// last day of the previous month, minute 60 the next hour), then read back through the zone.
    fn set(
        &mut self,
        year: i32,
        month: i64,
        day: i64,
        hour: i64,
        minute: i64,
        second: i64,
    ) -> Option<()> {
        let wall = lenient(year, month, day, hour, minute, second)?;
        let instant = zone::resolve(self.tz, &wall)?;
        self.wall = zone::wall_at(self.tz, &instant);
        Some(())
    }

    /// Like [`Cursor::set`], for a move that picks a new hour: when the hour lands in a skipped
    /// stretch and the clock then shows another hour, the move is repeated with the next hour on
    /// the normalised fields (24 means the next day's midnight and is left as is).
    fn set_hour(&mut self, day: i64, hour: i64, minute: i64) -> Option<()> {
        let w = self.wall;
        self.set(w.year(), i64::from(w.month()), day, hour, minute, 0)?;
        if hour != 24 && i64::from(self.wall.hour()) != hour {
            let w = self.wall;
            self.set(
                w.year(),
                i64::from(w.month()),
                i64::from(w.day()),
                hour + 1,
                i64::from(w.minute()),
                i64::from(w.second()),
            )?;
        }
        Some(())
    }

    /// Moves to midnight (wall clock) of the given day, which may overflow its month.
    fn set_day(&mut self, year: i32, month: i64, day: i64) -> Option<()> {
        self.set(year, month, day, 0, 0, 0)
    }
}

impl Search<'_> {
    /// One pass over the fields. `None` ends the search without a result.
    fn round(&self, c: &mut Cursor<'_>) -> Option<Round> {
        let fields = self.fields;
        let horizon = self.horizon;
        if c.wall.year() > horizon {
            return None;
        }

        // Seconds: the next allowed second in this minute, else the first one in the next minute.
        let w = c.wall;
        let (second, minute_carry) = match fields.seconds.at_or_after(w.second()) {
            Some(s) => (s, 0),
            None => (fields.seconds.first()?, 1),
        };
        if second != w.second() || minute_carry != 0 {
            c.set(
                w.year(),
                i64::from(w.month()),
                i64::from(w.day()),
                i64::from(w.hour()),
                i64::from(w.minute()) + minute_carry,
                i64::from(second),
            )?;
        }

        // Minutes.
        let w = c.wall;
        let minute = w.minute();
        if !fields.minutes.contains(minute) {
            let day = i64::from(w.day());
            let hour = i64::from(w.hour());
            match fields.minutes.at_or_after(minute) {
                Some(m) => c.set_hour(day, hour, i64::from(m))?,
                None => c.set_hour(day, hour + 1, i64::from(fields.minutes.first()?))?,
            }
            return Some(Round::Moved);
        }

        // Hours.
        let w = c.wall;
        let hour = w.hour();
        if !fields.hours.contains(hour) {
            let day = i64::from(w.day());
            match fields.hours.at_or_after(hour) {
                Some(h) => c.set_hour(day, i64::from(h), 0)?,
                None => c.set_hour(day + 1, i64::from(fields.hours.first()?), 0)?,
            }
            return Some(Round::Moved);
        }

        // Days.
        if let DayCheck::MoveTo(year, month, day) = self.day_check(&c.wall)? {
            c.set_day(year, month, day)?;
            return Some(Round::Moved);
        }

        // Months.
        let w = c.wall;
        if w.year() > horizon {
            return None;
        }
        let month = w.month();
        if !fields.months.contains(month) {
            match fields.months.at_or_after(month) {
                Some(m) => c.set_day(w.year(), i64::from(m), 1)?,
                None => c.set_day(w.year() + 1, i64::from(fields.months.first()?), 1)?,
            }
            return Some(Round::Moved);
        }

        // Years.
        let year = w.year();
        if !fields.years.contains(year) {
            let next = fields.years.at_or_after(year + 1)?;
            c.set_day(next, 1, 1)?;
            return Some(Round::Moved);
        }
        Some(Round::Found)
    }

    /// Whether the cursor's day satisfies the day rule, and if not where to move. `None` aborts
    /// the search.
    fn day_check(&self, wall: &NaiveDateTime) -> Option<DayCheck> {
        let rule = &self.fields.days;
        let year = wall.year();
        let month = wall.month();
        let day = i64::from(wall.day());
        let last = days_in_month(year, month)?;
        let this = |d: i64| {
            Some(if d == day {
                DayCheck::Matches
            } else {
                DayCheck::MoveTo(year, i64::from(month), d)
            })
        };
        let next_month = |d: i64| Some(DayCheck::MoveTo(year, i64::from(month) + 1, d));

        match *rule {
            DayRule::DaysOfMonth(days) => {
                let first = i64::from(days.first()?);
                match days.at_or_after(wall.day()).map(i64::from) {
                    Some(d) if d <= last => this(d),
                    _ => next_month(first),
                }
            }
            DayRule::LastDayOfMonth {
                offset,
                weekday: false,
            } => {
                let target = last - i64::from(offset);
                if target < day {
                    next_month(1)
                } else {
                    this(target)
                }
            }
            // The weekday rules compare the candidate day (at the cursor's time of day) with the
            // start of the search rather than with the cursor, as Quartz does: a candidate before
            // the cursor but not before the start is still taken (moving the cursor back), and
            // `nW` goes on to day n of the next month, which can overflow past a short month.
            DayRule::LastDayOfMonth {
                offset,
                weekday: true,
            } => {
                let target = nearest_weekday(year, month, last - i64::from(offset), last)?;
                if self.before_start(wall, target)? {
                    next_month(1)
                } else {
                    this(target)
                }
            }
            DayRule::NearestWeekday(n) => {
                let n = i64::from(n);
                let target = nearest_weekday(year, month, n, last)?;
                if self.before_start(wall, target)? {
                    next_month(n)
                } else {
                    this(target)
                }
            }
            DayRule::DaysOfWeek(days) => {
                let today = weekday_of(year, month, day)?;
                let wanted = days_of_week_from(days, today)?;
                let target = day + i64::from((wanted + 7 - today) % 7);
                if target > last {
                    next_month(1)
                } else {
                    this(target)
                }
            }
            DayRule::LastWeekdayOfMonth(weekday) => {
                let today = weekday_of(year, month, day)?;
                let mut target = day + i64::from((weekday + 7 - today) % 7);
                if target > last {
                    return next_month(1);
                }
                while target + 7 <= last {
                    target += 7;
                }
                this(target)
            }
            DayRule::NthWeekdayOfMonth { weekday, nth } => {
                let first_weekday = weekday_of(year, month, 1)?;
                let first = 1 + i64::from((weekday + 7 - first_weekday) % 7);
                let target = first + 7 * (i64::from(nth) - 1);
                if target > last || target < day {
                    next_month(1)
                } else {
                    this(target)
                }
            }
        }
    }

    /// Whether day `day` (possibly overflowing) of the cursor's month, at the cursor's time of day,
    /// lies before the start of the search.
    fn before_start(&self, wall: &NaiveDateTime, day: i64) -> Option<bool> {
        let candidate = lenient(
            wall.year(),
            i64::from(wall.month()),
            day,
            i64::from(wall.hour()),
            i64::from(wall.minute()),
            i64::from(wall.second()),
        )?;
        Some(zone::resolve(self.tz, &candidate)? < self.start)
    }
}

/// Calendar fields, each possibly outside its usual range, normalised as a lenient calendar does:
/// month 13 is January of the next year, day 0 the last day of the previous month, minute 60
/// the next hour.
fn lenient(
    year: i32,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
) -> Option<NaiveDateTime> {
    let months = i64::from(year) * 12 + month - 1;
    let first = NaiveDate::from_ymd_opt(
        i32::try_from(months.div_euclid(12)).ok()?,
        u32::try_from(months.rem_euclid(12) + 1).ok()?,
        1,
    )?;
    let offset = (day - 1) * 86_400 + hour * 3_600 + minute * 60 + second;
    first
        .and_time(NaiveTime::MIN)
        .checked_add_signed(Duration::try_seconds(offset)?)
}

/// Day of the week of a (possibly overflowing) day of a month: 1 = Sunday ... 7 = Saturday.
fn weekday_of(year: i32, month: u32, day: i64) -> Option<u32> {
    let date = NaiveDate::from_ymd_opt(year, month, 1)?
        .checked_add_signed(Duration::try_days(day - 1)?)?;
    Some(date.weekday().number_from_sunday())
}

fn days_in_month(year: i32, month: u32) -> Option<i64> {
    let first = NaiveDate::from_ymd_opt(year, month, 1)?;
    let next = if month == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)?
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)?
    };
    Some((next - first).num_days())
}

const SUNDAY: u32 = 1;
const SATURDAY: u32 = 7;

/// The weekday nearest to `day` without leaving the month: a Saturday moves back to Friday
/// (forward to Monday the 3rd when it is the 1st), a Sunday moves forward to Monday (back to
/// Friday when it is the last day). `day` may lie outside the month; its weekday is then taken
/// from the overflowing date, so e.g. `31W` in a 30-day month lands on the 30th exactly when the
/// next month starts on a Saturday.
fn nearest_weekday(year: i32, month: u32, day: i64, last: i64) -> Option<i64> {
    Some(match weekday_of(year, month, day)? {
        SATURDAY if day == 1 => day + 2,
        SATURDAY => day - 1,
        SUNDAY if day == last => day - 2,
        SUNDAY => day + 1,
        _ => day,
    })
}

/// The first weekday in `days` on or after `today`, wrapping to the start of the week.
fn days_of_week_from(days: Bits, today: u32) -> Option<u32> {
    days.at_or_after(today).or_else(|| days.first())
}

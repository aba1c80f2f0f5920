//! From expression text to [`Fields`] (what the search needs) and to the fields as written
//! ([`Written`], what descriptions read).
//!
//! The text is split into fields and each field is read by a strict grammar that knows the
//! Quartz extras (`?`, `L`, `W`, `#`, wrap-around ranges). The plain parts of the
//! seconds-to-day-of-week fields are then rewritten into the `cron` crate's syntax (numbers only,
//! wrap-around ranges spelled out) and expanded into value sets by `cron::Schedule`; years are
//! expanded here because the crate stops at 2100.

use std::str::FromStr;

use ::cron::{Schedule, TimeUnitSpec};

use super::error::{CronError, CronField};
use super::fields::{Bits, DayRule, Fields, YearSet};

/// Smallest and largest year a year field may name.
pub(crate) const YEAR_MIN: u32 = 1970;
pub(crate) const YEAR_MAX: u32 = 2199;

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const MONTH_FULL_NAMES: [&str; 12] = [
    "JANUARY",
    "FEBRUARY",
    "MARCH",
    "APRIL",
    "MAY",
    "JUNE",
    "JULY",
    "AUGUST",
    "SEPTEMBER",
    "OCTOBER",
    "NOVEMBER",
    "DECEMBER",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
const DAY_FULL_NAMES: [&str; 7] = [
    "SUNDAY",
    "MONDAY",
    "TUESDAY",
    "WEDNESDAY",
    "THURSDAY",
    "FRIDAY",
    "SATURDAY",
];

const FIELDS_HELP: &str = "sec min hour day-of-month month day-of-week [year]";

/// What one field accepts.
struct Limits {
    field: CronField,
    min: u32,
    max: u32,
    /// Largest step after `/`.
    max_step: u32,
    /// Text appended to out-of-range messages.
    hint: &'static str,
}

impl Limits {
    fn of(field: CronField) -> Limits {
        let (min, max, max_step, hint) = match field {
            CronField::Second | CronField::Minute => (0, 59, 59, ""),
            CronField::Hour => (0, 23, 23, ""),
            CronField::DayOfMonth => (1, 31, 31, ""),
            CronField::Month => (1, 12, 12, " (1=JAN ... 12=DEC)"),
            CronField::DayOfWeek => (1, 7, 7, " (1=SUN ... 7=SAT)"),
            CronField::Year => (YEAR_MIN, YEAR_MAX, u32::MAX, ""),
        };
        Limits {
            field,
            min,
            max,
            max_step,
            hint,
        }
    }

    fn err(&self, message: impl Into<String>) -> CronError {
        CronError::in_field(self.field, message)
    }

    fn names(&self) -> Option<(&'static [&'static str], &'static [&'static str])> {
        match self.field {
            CronField::Month => Some((&MONTH_NAMES, &MONTH_FULL_NAMES)),
            CronField::DayOfWeek => Some((&DAY_NAMES, &DAY_FULL_NAMES)),
            _ => None,
        }
    }

    fn check_range(&self, value: u32) -> Result<u32, CronError> {
        if value < self.min || value > self.max {
            return Err(self.err(format!(
                "value {value} out of range {}-{}{}",
                self.min, self.max, self.hint
            )));
        }
        Ok(value)
    }
}

/// One comma-separated element of a plain field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Item {
    /// `*` or `*/step`.
    All { step: Option<u32> },
    /// A single value.
    One(u32),
    /// `a-b` or `a-b/step`; `a > b` wraps around the end of the field's range.
    Range {
        from: u32,
        to: u32,
        step: Option<u32>,
    },
    /// `a/step`: from `a` to the end of the range.
    From { start: u32, step: u32 },
}

/// A field as written (names read as their numbers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Field {
    /// `?`
    NoSpec,
    /// A list of plain items.
    List(Vec<Item>),
    /// A day rule written with `L`, `W` or `#`.
    Special(DayRule),
}

/// The fields of an expression as written: second, minute, hour, day-of-month, month,
/// day-of-week and, when given, year.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written(Vec<Field>);

impl Written {
    /// The field, `None` for a year not given.
    pub(crate) fn field(&self, which: CronField) -> Option<&Field> {
        let at = CronField::ALL.iter().position(|f| *f == which)?;
        self.0.get(at)
    }
}

/// Parses a whole expression.
pub(crate) fn parse_expression(text: &str, horizon: i32) -> Result<(Fields, Written), CronError> {
    let parts: Vec<&str> = text.split([' ', '\t']).filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return Err(CronError::whole(format!(
            "empty expression: expected 6 or 7 fields ({FIELDS_HELP})"
        )));
    }
    if parts.len() < 6 {
        return Err(CronError::whole(format!(
            "expected 6 or 7 fields ({FIELDS_HELP}), found {}: seconds field required \
             (Quartz format, e.g. `0 0 12 * * ?` fires every day at noon)",
            parts.len()
        )));
    }
    if parts.len() > 7 {
        return Err(CronError::whole(format!(
            "expected 6 or 7 fields ({FIELDS_HELP}), found {}: unexpected `{}` after the year",
            parts.len(),
            parts[7]
        )));
    }

    let mut syntax = Vec::with_capacity(7);
    for (field, part) in CronField::ALL.into_iter().zip(parts.iter()) {
        syntax.push(parse_field(field, part)?);
    }

    let dom = &syntax[3];
    let dow = &syntax[5];
    let days_from_dom = match (dom, dow) {
        (Field::NoSpec, Field::NoSpec) => {
            return Err(CronError::in_field(
                CronField::DayOfWeek,
                "? cannot be used in both day-of-month and day-of-week; give one of them a value \
                 (e.g. `0 0 12 * * ?`)",
            ));
        }
        (Field::NoSpec, _) => false,
        (_, Field::NoSpec) => true,
        _ => {
            return Err(CronError::in_field(
                CronField::DayOfWeek,
                "day-of-month and day-of-week cannot both be specified; use ? in one of them \
                 (e.g. `0 0 12 * * ?` for every day, `0 0 12 ? * MON-FRI` for weekdays)",
            ));
        }
    };

    // Let the cron crate expand the plain fields into value sets.
    let normalised = CronField::ALL[..6]
        .iter()
        .zip(&syntax)
        .map(|(field, syntax)| match syntax {
            Field::List(items) => cron_text(items, &Limits::of(*field)),
            _ => "*".to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ");
    let schedule = Schedule::from_str(&normalised).map_err(|e| {
        CronError::whole(format!(
            "cannot be expanded (normalised as `{normalised}`): {e}"
        ))
    })?;

    let days = if days_from_dom {
        match &syntax[3] {
            Field::Special(rule) => rule.clone(),
            _ => DayRule::DaysOfMonth(to_bits(schedule.days_of_month())),
        }
    } else {
        match &syntax[5] {
            Field::Special(rule) => rule.clone(),
            _ => DayRule::DaysOfWeek(to_bits(schedule.days_of_week())),
        }
    };

    let years = match syntax.get(6) {
        Some(Field::List(items)) => year_set(items, horizon)?,
        Some(_) => {
            return Err(CronError::in_field(
                CronField::Year,
                "only values, ranges and steps are allowed",
            ));
        }
        None => year_set(&[Item::All { step: None }], horizon)?,
    };

    let fields = Fields {
        seconds: to_bits(schedule.seconds()),
        minutes: to_bits(schedule.minutes()),
        hours: to_bits(schedule.hours()),
        days,
        months: to_bits(schedule.months()),
        years,
    };
    Ok((fields, Written(syntax)))
}

fn to_bits(spec: &impl TimeUnitSpec) -> Bits {
    let mut bits = Bits::default();
    for v in spec.iter().filter(|v| *v < 64) {
        bits.insert(v);
    }
    bits
}

/// The values of a wrap-around range `from-to/step` with `from > to`: counting on past the
/// field's maximum and continuing from its minimum, as Quartz does (`22-2` = 22, 23, 0, 1, 2).
fn wrapped_values(from: u32, to: u32, step: u32, limits: &Limits) -> Vec<u32> {
    let size = limits.max - limits.min + 1;
    let end = to + size;
    (from..=end)
        .step_by(step.max(1) as usize)
        .map(|i| if i > limits.max { i - size } else { i })
        .collect()
}

/// The items in the `cron` crate's syntax: numbers only, wrap-around ranges spelled out.
fn cron_text(items: &[Item], limits: &Limits) -> String {
    let parts: Vec<String> = items
        .iter()
        .map(|item| match *item {
            Item::All { step: None } => "*".to_string(),
            Item::All { step: Some(s) } => format!("*/{s}"),
            Item::One(v) => v.to_string(),
            Item::Range { from, to, step } if from > to => {
                let values = wrapped_values(from, to, step.unwrap_or(1), limits);
                values
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            }
            Item::Range { from, to, step } => match step {
                Some(s) => format!("{from}-{to}/{s}"),
                None => format!("{from}-{to}"),
            },
            Item::From { start, step } => format!("{start}/{step}"),
        })
        .collect();
    parts.join(",")
}

fn year_set(items: &[Item], horizon: i32) -> Result<YearSet, CronError> {
    let err = |m: String| CronError::in_field(CronField::Year, m);
    let last = u32::try_from(horizon).unwrap_or(YEAR_MIN);
    let mut set = YearSet::default();
    let mut add = |from: u32, to: u32, step: u32| {
        let mut y = from;
        while y <= to {
            set.insert(y as i32);
            match y.checked_add(step.max(1)) {
                Some(n) => y = n,
                None => break,
            }
        }
    };
    for item in items {
        match *item {
            Item::All { step } => add(YEAR_MIN, last, step.unwrap_or(1)),
            Item::One(y) => add(y, y, 1),
            Item::Range { from, to, .. } if from > to => {
                return Err(err(format!(
                    "range {from}-{to} runs backwards; years cannot wrap around"
                )));
            }
            Item::Range { from, to, step } => add(from, to, step.unwrap_or(1)),
            Item::From { start, .. } if start > last => {
                return Err(err(format!(
                    "{start}/n starts after {last}, the last year schedules reach"
                )));
            }
            Item::From { start, step } => add(start, last, step),
        }
    }
    Ok(set)
}

fn parse_field(field: CronField, text: &str) -> Result<Field, CronError> {
    let limits = Limits::of(field);
    let upper = text.to_ascii_uppercase();
    if let Some(bad) = upper
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '*' | '?' | ',' | '-' | '/' | '#')))
    {
        return Err(limits.err(format!("unexpected character `{bad}` in `{text}`")));
    }

    if upper.contains('?') {
        if !matches!(field, CronField::DayOfMonth | CronField::DayOfWeek) {
            return Err(limits.err("? is only allowed in day-of-month and day-of-week"));
        }
        if upper != "?" {
            return Err(limits.err(format!("? must stand alone in the field, found `{text}`")));
        }
        return Ok(Field::NoSpec);
    }

    match field {
        CronField::DayOfMonth if upper.contains(['L', 'W']) => {
            return parse_dom_special(&upper, text, &limits).map(Field::Special);
        }
        CronField::DayOfWeek if upper.contains(['L', '#']) => {
            return parse_dow_special(&upper, text, &limits);
        }
        _ => {}
    }
    if upper.contains('#') {
        return Err(limits.err("# (n-th weekday) is only allowed in day-of-week"));
    }
    if limits.names().is_none() {
        if upper.contains('L') {
            return Err(limits.err("L is only allowed in day-of-month and day-of-week"));
        }
        if upper.contains('W') {
            return Err(limits.err("W is only allowed in day-of-month"));
        }
    }

    let mut items = Vec::new();
    for part in upper.split(',') {
        if part.is_empty() {
            return Err(limits.err(format!("empty element in list `{text}`")));
        }
        items.push(parse_item(part, &limits)?);
    }
    Ok(Field::List(items))
}

/// Reads one list element: `*`, `*/n`, `v`, `a-b`, `a-b/n`, `a/n`.
fn parse_item(part: &str, limits: &Limits) -> Result<Item, CronError> {
    let (base, step) = match part.split_once('/') {
        Some((base, step)) => (base, Some(parse_step(step, part, limits)?)),
        None => (part, None),
    };
    if base == "*" {
        return Ok(Item::All { step });
    }
    if base.is_empty() {
        return Err(limits.err(format!("`{part}` has no start before /; write */n or a/n")));
    }
    if base.contains('*') {
        return Err(limits.err(format!(
            "`*` must stand alone before / or a comma, found `{part}`"
        )));
    }
    let (value, named) = match base.split_once('-') {
        Some((a, b)) => {
            let (from, a_named) = parse_value(a, part, limits)?;
            let (to, b_named) = parse_value(b, part, limits)?;
            if a_named != b_named {
                return Err(limits.err(format!(
                    "range `{part}` mixes a name and a number; use two names or two numbers"
                )));
            }
            (Item::Range { from, to, step }, a_named)
        }
        None => {
            let (v, named) = parse_value(base, part, limits)?;
            let item = match step {
                Some(step) => Item::From { start: v, step },
                None => Item::One(v),
            };
            (item, named)
        }
    };
    if named && step.is_some() {
        return Err(limits.err(format!(
            "a step cannot follow a name (`{part}`); use numbers, e.g. 2-6/2"
        )));
    }
    Ok(value)
}

fn parse_step(text: &str, part: &str, limits: &Limits) -> Result<u32, CronError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(limits.err(format!("/ must be followed by a number, found `{part}`")));
    }
    let step: u32 = text
        .parse()
        .map_err(|_| limits.err(format!("step `{text}` is too large")))?;
    if step == 0 {
        return Err(limits.err(format!("step must be at least 1, found `{part}`")));
    }
    if step > limits.max_step {
        return Err(limits.err(format!(
            "step {step} too large (at most {}), found `{part}`",
            limits.max_step
        )));
    }
    Ok(step)
}

/// Reads a number or a name; returns the value and whether it was a name.
fn parse_value(text: &str, part: &str, limits: &Limits) -> Result<(u32, bool), CronError> {
    if text.is_empty() {
        return Err(limits.err(format!("malformed range `{part}`")));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        let v: u32 = text.parse().map_err(|_| {
            limits.err(format!(
                "value {text} out of range {}-{}{}",
                limits.min, limits.max, limits.hint
            ))
        })?;
        return Ok((limits.check_range(v)?, false));
    }
    if text.bytes().all(|b| b.is_ascii_alphabetic()) {
        return match limits.names() {
            Some((short, long)) => short
                .iter()
                .position(|n| *n == text)
                .or_else(|| long.iter().position(|n| *n == text))
                .map(|i| (i as u32 + limits.min, true))
                .ok_or_else(|| {
                    limits.err(format!(
                        "unknown name `{text}` (expected {}-{})",
                        short[0],
                        short[short.len() - 1]
                    ))
                }),
            None => Err(limits.err(format!("names are not allowed here, found `{text}`"))),
        };
    }
    Err(limits.err(format!("malformed value `{text}` in `{part}`")))
}

fn parse_number(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Day-of-month forms with `L` or `W`: `L`, `L-n`, `LW`, `L-nW`, `nW`.
fn parse_dom_special(upper: &str, text: &str, limits: &Limits) -> Result<DayRule, CronError> {
    const FORMS: &str = "expected L, L-n, LW, L-nW or nW";
    if upper.contains(',') {
        return Err(limits.err(format!(
            "L and W cannot be combined with other days in a list, found `{text}`"
        )));
    }
    if let Some(rest) = upper.strip_prefix('L') {
        let (rest, weekday) = match rest.strip_suffix('W') {
            Some(r) => (r, true),
            None => (rest, false),
        };
        let offset = if rest.is_empty() {
            0
        } else {
            let digits = rest
                .strip_prefix('-')
                .ok_or_else(|| limits.err(format!("malformed `{text}`: {FORMS}")))?;
            let offset = parse_number(digits)
                .ok_or_else(|| limits.err(format!("malformed `{text}`: {FORMS}")))?;
            if offset > 30 {
                return Err(limits.err(format!(
                    "offset from the last day must be at most 30, found `{text}`"
                )));
            }
            if weekday && offset > 27 {
                // In February L-28 and beyond fall before the month starts; the nearest weekday
                // of such a day is not defined (Quartz loops forever on it).
                return Err(limits.err(format!(
                    "L-nW needs n at most 27 (L-{offset} falls outside February), found `{text}`"
                )));
            }
            offset
        };
        return Ok(DayRule::LastDayOfMonth { offset, weekday });
    }
    if let Some(digits) = upper.strip_suffix('W') {
        let day = parse_number(digits)
            .ok_or_else(|| limits.err(format!("malformed `{text}`: {FORMS}")))?;
        if !(1..=31).contains(&day) {
            return Err(limits.err(format!(
                "value {day} out of range 1-31 in `{text}` (nW needs a day of the month)"
            )));
        }
        return Ok(DayRule::NearestWeekday(day));
    }
    Err(limits.err(format!("malformed `{text}`: {FORMS}")))
}

/// Day-of-week forms with `L` or `#`: `L` (Saturday), `nL`, `n#k`.
fn parse_dow_special(upper: &str, text: &str, limits: &Limits) -> Result<Field, CronError> {
    const FORMS: &str = "expected L, nL or n#k (e.g. 6L = last Friday, 2#1 = first Monday)";
    if upper.contains(',') {
        return Err(limits.err(format!(
            "L and # cannot be combined with other days in a list, found `{text}`"
        )));
    }
    if upper == "L" {
        let mut saturday = Bits::default();
        saturday.insert(7);
        return Ok(Field::Special(DayRule::DaysOfWeek(saturday)));
    }
    if let Some((day, nth)) = upper.split_once('#') {
        let weekday = single_weekday(day, text, limits)?;
        let nth = parse_number(nth)
            .filter(|n| (1..=5).contains(n))
            .ok_or_else(|| {
                limits.err(format!(
                    "# must be followed by a number 1-5 (the n-th weekday of the month), found `{text}`"
                ))
            })?;
        return Ok(Field::Special(DayRule::NthWeekdayOfMonth { weekday, nth }));
    }
    if let Some(day) = upper.strip_suffix('L') {
        let weekday = single_weekday(day, text, limits)?;
        return Ok(Field::Special(DayRule::LastWeekdayOfMonth(weekday)));
    }
    Err(limits.err(format!("malformed `{text}`: {FORMS}")))
}

fn single_weekday(day: &str, text: &str, limits: &Limits) -> Result<u32, CronError> {
    if day.is_empty() || day.contains(['-', '/', '*', 'L', '#']) {
        return Err(limits.err(format!(
            "L and # need a single day before them (e.g. 6L, FRI#3), found `{text}`"
        )));
    }
    parse_value(day, text, limits).map(|(v, _)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_around_ranges_continue_from_the_field_minimum() {
        let sec = Limits::of(CronField::Second);
        assert_eq!(wrapped_values(50, 10, 5, &sec), vec![50, 55, 0, 5, 10]);
        assert_eq!(wrapped_values(45, 15, 20, &sec), vec![45, 5]);
        let dom = Limits::of(CronField::DayOfMonth);
        assert_eq!(wrapped_values(28, 3, 2, &dom), vec![28, 30, 1, 3]);
        let dow = Limits::of(CronField::DayOfWeek);
        assert_eq!(wrapped_values(6, 2, 1, &dow), vec![6, 7, 1, 2]);
        let month = Limits::of(CronField::Month);
        assert_eq!(wrapped_values(10, 3, 2, &month), vec![10, 12, 2]);
    }
}

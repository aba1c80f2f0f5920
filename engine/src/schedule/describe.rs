//! Human-readable descriptions of schedules, in English and Simplified Chinese, for people
//! reading a task list or previewing a schedule: `0 15 10 ? * MON-FRI` is "At 10:15:00, Monday
//! through Friday" / "周一至周五 10:15:00".
//!
//! A description is written from the fields of the parsed [`CronSpec`] as they were written
//! ([`CronSpec::written`]), not from the value sets the search uses, so it keeps the author's
//! structure: `0 0/15 * * * ?` reads "Every 15 minutes", not "At minutes 0, 15, 30 and 45".
//! Forms it has no wording for fall back to quoting the expression; the fire times themselves
//! always come from the schedule, never from the description. The cron grammar is read once,
//! by [`super::cron`].

use chrono_tz::Tz;

use super::cron::{CronField, DayRule, WrittenField, WrittenItem};
use super::{CronSpec, Schedule};
use crate::clock::ms_to_datetime;

/// The languages descriptions are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    English,
    /// Simplified Chinese.
    Chinese,
}

impl Language {
    /// Every language, in the order responses list them.
    pub const ALL: [Language; 2] = [Language::English, Language::Chinese];

    /// The BCP 47 tag: `en` or `zh-CN`.
    pub fn tag(self) -> &'static str {
        match self {
            Language::English => "en",
            Language::Chinese => "zh-CN",
        }
    }
}

/// Describes a parsed schedule. A cron schedule outside UTC names its zone.
pub fn describe(schedule: &Schedule, lang: Language) -> String {
    use Language::{Chinese, English};
    match (schedule, lang) {
        (Schedule::Cron { spec, tz }, _) => {
            let text = describe_cron(spec, lang);
            match (*tz == Tz::UTC, lang) {
                (true, _) => text,
                (false, English) => format!("{text} ({})", tz.name()),
                (false, Chinese) => format!("{text}（{} 时间）", tz.name()),
            }
        }
        (Schedule::FixedRate { every_ms, .. }, English) => {
            format!("Every {}", duration_en(*every_ms, true))
        }
        (Schedule::FixedRate { every_ms, .. }, Chinese) => format!("每{}", duration_zh(*every_ms)),
        (Schedule::FixedDelay { delay_ms }, English) => format!(
            "{} after the previous run finishes",
            capitalise(&duration_en(*delay_ms, false))
        ),
        (Schedule::FixedDelay { delay_ms }, Chinese) => {
            let (n, _, unit) = unit_of(*delay_ms);
            format!("上次运行结束 {n} {unit}后")
        }
        (Schedule::Once { at_ms }, English) => format!("Once, at {}", instant(*at_ms)),
        (Schedule::Once { at_ms }, Chinese) => format!("仅一次，于 {}", instant(*at_ms)),
        (Schedule::Manual, English) => "Only when triggered manually".to_owned(),
        (Schedule::Manual, Chinese) => "仅手动触发".to_owned(),
    }
}

/// Describes a validated cron expression (without its zone).
pub fn describe_cron(spec: &CronSpec, lang: Language) -> String {
    match Parsed::of(spec) {
        Some(p) => match lang {
            Language::English => english(&p),
            Language::Chinese => chinese(&p),
        },
        None => match lang {
            Language::English => format!("Cron expression {}", spec.source()),
            Language::Chinese => format!("cron 表达式 {}", spec.source()),
        },
    }
}

fn instant(ms: i64) -> String {
    ms_to_datetime(ms)
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

const UNITS: [(i64, &str, &str); 5] = [
    (86_400_000, "day", "天"),
    (3_600_000, "hour", "小时"),
    (60_000, "minute", "分钟"),
    (1_000, "second", "秒"),
    (1, "millisecond", "毫秒"),
];

fn unit_of(ms: i64) -> (i64, &'static str, &'static str) {
    UNITS
        .iter()
        .find(|(size, ..)| ms % size == 0)
        .map_or((ms, "millisecond", "毫秒"), |&(size, en, zh)| {
            (ms / size, en, zh)
        })
}

/// `5 seconds`; `second` alone for one when `bare_one` ("every second"), else `1 second`.
fn duration_en(ms: i64, bare_one: bool) -> String {
    match unit_of(ms) {
        (1, unit, _) if bare_one => unit.to_owned(),
        (1, unit, _) => format!("1 {unit}"),
        (n, unit, _) => format!("{n} {unit}s"),
    }
}

/// ` 5 秒` (with the space that follows 每), `秒` for one.
fn duration_zh(ms: i64) -> String {
    match unit_of(ms) {
        (1, _, unit) => unit.to_owned(),
        (n, _, unit) => format!(" {n} {unit}"),
    }
}

fn capitalise(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

// ---- the written fields, as descriptions read them ------------------------------------------

const MONTHS: [&str; 12] = [
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
const DAYS: [&str; 7] = [
    "SUNDAY",
    "MONDAY",
    "TUESDAY",
    "WEDNESDAY",
    "THURSDAY",
    "FRIDAY",
    "SATURDAY",
];
const DAYS_ZH: [&str; 7] = ["周日", "周一", "周二", "周三", "周四", "周五", "周六"];
const ORDINALS: [&str; 5] = ["first", "second", "third", "fourth", "fifth"];
const ORDINALS_ZH: [&str; 5] = ["一", "二", "三", "四", "五"];

/// One comma-separated element of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    All,
    One(u32),
    Range(u32, u32),
    /// `*/n` (`from` None), `a/n`, `a-b/n`.
    Step {
        from: Option<u32>,
        to: Option<u32>,
        every: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Field {
    /// `?`
    Any,
    List(Vec<Item>),
    /// `L`, `L-n`, `LW`, `L-nW` (day-of-month).
    Last {
        offset: u32,
        weekday: bool,
    },
    /// `nW`
    NearestWeekday(u32),
    /// `nL` (day-of-week)
    LastOf(u32),
    /// `n#k`
    Nth(u32, u32),
}

impl Field {
    fn is_all(&self) -> bool {
        matches!(self, Field::Any)
            || matches!(self, Field::List(items) if items.contains(&Item::All))
    }

    /// The values, when the field lists only single values.
    fn singles(&self) -> Option<Vec<u32>> {
        match self {
            Field::List(items) => items
                .iter()
                .map(|i| match i {
                    Item::One(v) => Some(*v),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }

    fn single(&self) -> Option<u32> {
        match self.singles()?.as_slice() {
            [v] => Some(*v),
            _ => None,
        }
    }

    fn items(&self) -> &[Item] {
        match self {
            Field::List(items) => items,
            _ => &[],
        }
    }

    /// Steps and ranges of a small field (months, weekdays) spelled out as values, so they can
    /// be named; wrapping or unknown forms are left as they are.
    fn expanded(&self, max: u32) -> Field {
        let Field::List(items) = self else {
            return self.clone();
        };
        let mut values = Vec::new();
        for item in items {
            match *item {
                Item::One(v) => values.push(v),
                Item::Step { from, to, every } if from.unwrap_or(1) <= to.unwrap_or(max) => {
                    values.extend((from.unwrap_or(1)..=to.unwrap_or(max)).step_by(every as usize))
                }
                _ => return self.clone(),
            }
        }
        Field::List(values.into_iter().map(Item::One).collect())
    }
}

#[derive(Debug)]
struct Parsed {
    sec: Field,
    min: Field,
    hour: Field,
    dom: Field,
    month: Field,
    dow: Field,
    year: Field,
}

impl Parsed {
    /// The fields of `spec` as written, in the shape the phrasing below reads.
    fn of(spec: &CronSpec) -> Option<Parsed> {
        let written = spec.written();
        let field = |which| written.field(which).map(Field::of);
        Some(Parsed {
            sec: field(CronField::Second)?,
            min: field(CronField::Minute)?,
            hour: field(CronField::Hour)?,
            dom: field(CronField::DayOfMonth)?,
            month: field(CronField::Month)?.expanded(12),
            dow: field(CronField::DayOfWeek)?.expanded(7),
            year: field(CronField::Year).unwrap_or(Field::List(vec![Item::All])),
        })
    }
}

impl Field {
    fn of(written: &WrittenField) -> Field {
        match written {
            WrittenField::NoSpec => Field::Any,
            WrittenField::List(items) => Field::List(items.iter().map(Item::of).collect()),
            WrittenField::Special(rule) => match rule {
                DayRule::LastDayOfMonth { offset, weekday } => Field::Last {
                    offset: *offset,
                    weekday: *weekday,
                },
                DayRule::NearestWeekday(day) => Field::NearestWeekday(*day),
                DayRule::LastWeekdayOfMonth(day) => Field::LastOf(*day),
                DayRule::NthWeekdayOfMonth { weekday, nth } => Field::Nth(*weekday, *nth),
                // `L` in day-of-week: Saturday, as a set of one.
                DayRule::DaysOfWeek(days) | DayRule::DaysOfMonth(days) => Field::List(
                    (0..64)
                        .filter(|d| days.contains(*d))
                        .map(Item::One)
                        .collect(),
                ),
            },
        }
    }
}

impl Item {
    fn of(written: &WrittenItem) -> Item {
        match *written {
            WrittenItem::All {
                step: None | Some(1),
            } => Item::All,
            WrittenItem::All { step: Some(every) } => Item::Step {
                from: None,
                to: None,
                every,
            },
            WrittenItem::One(v) => Item::One(v),
            WrittenItem::Range {
                from,
                to,
                step: None,
            } => Item::Range(from, to),
            WrittenItem::Range {
                from,
                to,
                step: Some(every),
            } => Item::Step {
                from: Some(from),
                to: Some(to),
                every,
            },
            WrittenItem::From { start, step } => Item::Step {
                from: Some(start),
                to: None,
                every: step,
            },
        }
    }
}

fn hms(h: u32, m: u32, s: u32) -> String {
    format!("{h:02}:{m:02}:{s:02}")
}

fn join_en(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn numbers(values: &[u32]) -> Vec<String> {
    values.iter().map(u32::to_string).collect()
}

fn day_name(d: u32) -> String {
    DAYS.get(d.wrapping_sub(1) as usize)
        .map_or_else(|| d.to_string(), |n| capitalise(&n.to_ascii_lowercase()))
}

fn day_zh(d: u32) -> String {
    DAYS_ZH
        .get(d.wrapping_sub(1) as usize)
        .map_or_else(|| d.to_string(), |n| (*n).to_owned())
}

fn month_name(m: u32) -> String {
    MONTHS
        .get(m.wrapping_sub(1) as usize)
        .map_or_else(|| m.to_string(), |n| capitalise(&n.to_ascii_lowercase()))
}

// ---- English -----------------------------------------------------------------------------

fn english(p: &Parsed) -> String {
    let (time, fixed) = time_en(p);
    let mut parts = vec![time];
    let day = day_en(p);
    if fixed && day.is_none() {
        parts.push("every day".to_owned());
    }
    parts.extend(day);
    parts.extend(month_en(&p.month));
    parts.extend(year_en(&p.year));
    parts.join(", ")
}

/// The time of day, and whether it names fixed times (then the day is said explicitly).
fn time_en(p: &Parsed) -> (String, bool) {
    if let (Some(s), Some(m)) = (p.sec.single(), p.min.single()) {
        if let Some(hours) = p.hour.singles() {
            let times: Vec<String> = hours.iter().map(|&h| hms(h, m, s)).collect();
            return (format!("At {}", join_en(&times)), true);
        }
        if p.hour.is_all() {
            return (
                match (m, s) {
                    (0, 0) => "Every hour".to_owned(),
                    (m, 0) => format!("At minute {m} of every hour"),
                    (m, s) => format!("At minute {m}, second {s} of every hour"),
                },
                false,
            );
        }
        let phrases: Vec<String> = p
            .hour
            .items()
            .iter()
            .map(|item| match *item {
                Item::One(h) => format!("at {}", hms(h, m, s)),
                Item::Range(a, b) => {
                    format!("every hour from {} through {}", hms(a, m, s), hms(b, m, s))
                }
                Item::Step { from, to, every } => {
                    let from = hms(from.unwrap_or(0), m, s);
                    match to {
                        Some(b) => {
                            format!("every {every} hours from {from} through {}", hms(b, m, s))
                        }
                        None => format!("every {every} hours from {from}"),
                    }
                }
                Item::All => "every hour".to_owned(),
            })
            .collect();
        return (capitalise(&phrases.join(", ")), false);
    }
    let mut parts = Vec::new();
    match p.sec.single() {
        Some(s) => {
            parts.push(unit_en(&p.min, "minute", "at"));
            if s != 0 {
                parts.push(format!("at second {s}"));
            }
        }
        None => {
            parts.push(unit_en(&p.sec, "second", "at"));
            if !p.min.is_all() {
                parts.push(unit_en(&p.min, "minute", "during"));
            }
        }
    }
    if !p.hour.is_all() {
        parts.push(hours_en(&p.hour));
    }
    (capitalise(&parts.join(", ")), false)
}

/// Seconds or minutes: "every 15 minutes", "at seconds 0 and 30", ...
fn unit_en(field: &Field, unit: &str, single: &str) -> String {
    if field.is_all() {
        return format!("every {unit}");
    }
    if let Some(values) = field.singles() {
        let plural = if values.len() > 1 { "s" } else { "" };
        return format!("{single} {unit}{plural} {}", join_en(&numbers(&values)));
    }
    let phrases: Vec<String> = field
        .items()
        .iter()
        .map(|item| match *item {
            Item::One(v) => format!("{single} {unit} {v}"),
            Item::Range(a, b) => format!("every {unit} from {unit} {a} through {b}"),
            Item::Step {
                from: None, every, ..
            } => format!("every {every} {unit}s"),
            Item::Step {
                from: Some(a),
                to: None,
                every,
            } => format!("every {every} {unit}s from {unit} {a}"),
            Item::Step {
                from: Some(a),
                to: Some(b),
                every,
            } => format!("every {every} {unit}s from {unit} {a} through {b}"),
            Item::All => format!("every {unit}"),
        })
        .collect();
    phrases.join(", ")
}

fn hours_en(field: &Field) -> String {
    if let Some(values) = field.singles() {
        return match values.as_slice() {
            [h] => format!("between {h:02}:00 and {h:02}:59"),
            _ => format!("during hours {}", join_en(&numbers(&values))),
        };
    }
    let phrases: Vec<String> = field
        .items()
        .iter()
        .map(|item| match *item {
            Item::One(h) => format!("during hour {h}"),
            Item::Range(a, b) => format!("between {a:02}:00 and {b:02}:59"),
            Item::Step {
                from: None, every, ..
            } => format!("every {every} hours"),
            Item::Step {
                from: Some(a),
                to,
                every,
            } => match to {
                Some(b) => format!("every {every} hours from {a:02}:00 through {b:02}:59"),
                None => format!("every {every} hours from {a:02}:00"),
            },
            Item::All => "every hour".to_owned(),
        })
        .collect();
    phrases.join(", ")
}

fn day_en(p: &Parsed) -> Option<String> {
    if !p.dom.is_all() {
        return Some(dom_en(&p.dom));
    }
    if !p.dow.is_all() {
        return Some(dow_en(&p.dow));
    }
    None
}

fn dom_en(field: &Field) -> String {
    match *field {
        Field::Last {
            offset: 0,
            weekday: false,
        } => "on the last day of the month".to_owned(),
        Field::Last {
            offset,
            weekday: false,
        } => format!("{offset} days before the last day of the month"),
        Field::Last {
            offset: 0,
            weekday: true,
        } => "on the last weekday of the month".to_owned(),
        Field::Last {
            offset,
            weekday: true,
        } => format!("on the weekday nearest {offset} days before the last day of the month"),
        Field::NearestWeekday(d) => format!("on the weekday nearest day {d} of the month"),
        _ => {
            if let Some(values) = field.singles() {
                let plural = if values.len() > 1 { "s" } else { "" };
                return format!("on day{plural} {} of the month", join_en(&numbers(&values)));
            }
            let phrases: Vec<String> = field
                .items()
                .iter()
                .map(|item| match *item {
                    Item::One(d) => format!("on day {d}"),
                    Item::Range(a, b) => format!("on days {a} through {b}"),
                    Item::Step {
                        from: None, every, ..
                    } => format!("every {every} days"),
                    Item::Step {
                        from: Some(a),
                        to,
                        every,
                    } => match to {
                        Some(b) => format!("every {every} days from day {a} through {b}"),
                        None => format!("every {every} days from day {a}"),
                    },
                    Item::All => "every day".to_owned(),
                })
                .collect();
            format!("{} of the month", phrases.join(", "))
        }
    }
}

fn dow_en(field: &Field) -> String {
    match *field {
        Field::LastOf(d) => format!("on the last {} of the month", day_name(d)),
        Field::Nth(d, k) => format!(
            "on the {} {} of the month",
            ORDINALS.get(k.wrapping_sub(1) as usize).unwrap_or(&"n-th"),
            day_name(d)
        ),
        _ => {
            if let Some(values) = field.singles() {
                let names: Vec<String> = values.iter().map(|&d| day_name(d)).collect();
                return format!("only on {}", join_en(&names));
            }
            let phrases: Vec<String> = field
                .items()
                .iter()
                .map(|item| match *item {
                    Item::One(d) => day_name(d),
                    Item::Range(a, b) => format!("{} through {}", day_name(a), day_name(b)),
                    Item::Step { from, every, .. } => format!(
                        "every {every} days of the week from {}",
                        day_name(from.unwrap_or(1))
                    ),
                    Item::All => "every day".to_owned(),
                })
                .collect();
            phrases.join(", ")
        }
    }
}

fn month_en(field: &Field) -> Option<String> {
    if field.is_all() {
        return None;
    }
    if let Some(values) = field.singles() {
        let names: Vec<String> = values.iter().map(|&m| month_name(m)).collect();
        return Some(format!("only in {}", join_en(&names)));
    }
    let phrases: Vec<String> = field
        .items()
        .iter()
        .map(|item| match *item {
            Item::One(m) => month_name(m),
            Item::Range(a, b) => format!("{} through {}", month_name(a), month_name(b)),
            Item::Step { from, every, .. } => format!(
                "every {every} months from {}",
                month_name(from.unwrap_or(1))
            ),
            Item::All => "every month".to_owned(),
        })
        .collect();
    Some(phrases.join(", "))
}

fn year_en(field: &Field) -> Option<String> {
    if field.is_all() {
        return None;
    }
    if let Some(values) = field.singles() {
        return Some(format!("only in {}", join_en(&numbers(&values))));
    }
    let phrases: Vec<String> = field
        .items()
        .iter()
        .map(|item| match *item {
            Item::One(y) => y.to_string(),
            Item::Range(a, b) => format!("{a} through {b}"),
            Item::Step {
                from: None, every, ..
            } => format!("every {every} years"),
            Item::Step {
                from: Some(a),
                to,
                every,
            } => match to {
                Some(b) => format!("every {every} years from {a} through {b}"),
                None => format!("every {every} years from {a}"),
            },
            Item::All => "every year".to_owned(),
        })
        .collect();
    Some(phrases.join(", "))
}

// ---- Chinese -----------------------------------------------------------------------------

fn chinese(p: &Parsed) -> String {
    let mut date: Vec<String> = Vec::new();
    date.extend(year_zh(&p.year));
    date.extend(month_zh(&p.month));
    let day = day_zh_clause(p);
    let has_day = day.is_some();
    date.extend(day);
    let (time, fixed) = time_zh(p);
    if fixed {
        let when = if has_day {
            date.pop().unwrap_or_default()
        } else {
            "每天".to_owned()
        };
        date.push(format!("{when} {time}"));
        date.join("，")
    } else {
        date.push(time);
        date.join("，")
    }
}

fn time_zh(p: &Parsed) -> (String, bool) {
    if let (Some(s), Some(m)) = (p.sec.single(), p.min.single()) {
        if let Some(hours) = p.hour.singles() {
            let times: Vec<String> = hours.iter().map(|&h| hms(h, m, s)).collect();
            return (times.join("、"), true);
        }
        if p.hour.is_all() {
            return (
                match (m, s) {
                    (0, 0) => "每小时整点".to_owned(),
                    (m, 0) => format!("每小时的第 {m} 分钟"),
                    (m, s) => format!("每小时的第 {m} 分 {s} 秒"),
                },
                false,
            );
        }
        let phrases: Vec<String> = p
            .hour
            .items()
            .iter()
            .map(|item| match *item {
                Item::One(h) => hms(h, m, s),
                Item::Range(a, b) => {
                    format!("从 {} 到 {} 每小时一次", hms(a, m, s), hms(b, m, s))
                }
                Item::Step { from, to, every } => {
                    let from = hms(from.unwrap_or(0), m, s);
                    match to {
                        Some(b) => format!("从 {from} 到 {} 每 {every} 小时一次", hms(b, m, s)),
                        None => format!("从 {from} 起每 {every} 小时一次"),
                    }
                }
                Item::All => "每小时".to_owned(),
            })
            .collect();
        return (phrases.join("，"), false);
    }
    let mut parts = Vec::new();
    if !p.hour.is_all() {
        parts.push(hours_zh(&p.hour));
    }
    match p.sec.single() {
        Some(0) => parts.push(unit_zh(&p.min, "分钟")),
        Some(s) => parts.push(format!("{}的第 {s} 秒", unit_zh(&p.min, "分钟"))),
        None => {
            if !p.min.is_all() {
                parts.push(unit_zh(&p.min, "分钟"));
            }
            parts.push(unit_zh(&p.sec, "秒"));
        }
    }
    (parts.join("，"), false)
}

/// Seconds or minutes: "每 15 分钟", "第 0、30 秒", ...
fn unit_zh(field: &Field, unit: &str) -> String {
    let every = |n: u32| {
        if n == 1 {
            format!("每{unit}")
        } else {
            format!("每 {n} {unit}")
        }
    };
    if field.is_all() {
        return every(1);
    }
    if let Some(values) = field.singles() {
        return format!("第 {} {unit}", numbers(&values).join("、"));
    }
    let phrases: Vec<String> = field
        .items()
        .iter()
        .map(|item| match *item {
            Item::One(v) => format!("第 {v} {unit}"),
            Item::Range(a, b) => format!("第 {a} 到 {b} {unit}{}", every(1)),
            Item::Step {
                from: None,
                every: n,
                ..
            } => every(n),
            Item::Step {
                from: Some(a),
                to: None,
                every: n,
            } => format!("从第 {a} {unit}起{}", every(n)),
            Item::Step {
                from: Some(a),
                to: Some(b),
                every: n,
            } => format!("第 {a} 到 {b} {unit}{}", every(n)),
            Item::All => every(1),
        })
        .collect();
    phrases.join("，")
}

fn hours_zh(field: &Field) -> String {
    if let Some(values) = field.singles() {
        return match values.as_slice() {
            [h] => format!("{h:02}:00 至 {h:02}:59"),
            _ => format!("{} 点", numbers(&values).join("、")),
        };
    }
    let phrases: Vec<String> = field
        .items()
        .iter()
        .map(|item| match *item {
            Item::One(h) => format!("{h} 点"),
            Item::Range(a, b) => format!("{a:02}:00 至 {b:02}:59"),
            Item::Step {
                from: None, every, ..
            } => format!("每 {every} 小时"),
            Item::Step {
                from: Some(a),
                to,
                every,
            } => match to {
                Some(b) => format!("{a:02}:00 至 {b:02}:59 每 {every} 小时"),
                None => format!("从 {a:02}:00 起每 {every} 小时"),
            },
            Item::All => "每小时".to_owned(),
        })
        .collect();
    phrases.join("，")
}

fn day_zh_clause(p: &Parsed) -> Option<String> {
    if !p.dom.is_all() {
        return Some(dom_zh(&p.dom));
    }
    if !p.dow.is_all() {
        return Some(dow_zh(&p.dow));
    }
    None
}

fn dom_zh(field: &Field) -> String {
    match *field {
        Field::Last {
            offset: 0,
            weekday: false,
        } => "每月最后一天".to_owned(),
        Field::Last {
            offset,
            weekday: false,
        } => format!("每月倒数第 {} 天", offset + 1),
        Field::Last {
            offset: 0,
            weekday: true,
        } => "每月最后一个工作日".to_owned(),
        Field::Last {
            offset,
            weekday: true,
        } => format!("每月离倒数第 {} 天最近的工作日", offset + 1),
        Field::NearestWeekday(d) => format!("每月离 {d} 日最近的工作日"),
        _ => {
            let phrases: Vec<String> = field
                .items()
                .iter()
                .map(|item| match *item {
                    Item::One(d) => format!("{d} 日"),
                    Item::Range(a, b) => format!("{a} 日至 {b} 日"),
                    Item::Step {
                        from: None, every, ..
                    } => format!("每 {every} 天"),
                    Item::Step {
                        from: Some(a),
                        to,
                        every,
                    } => match to {
                        Some(b) => format!("{a} 日至 {b} 日每 {every} 天"),
                        None => format!("从 {a} 日起每 {every} 天"),
                    },
                    Item::All => "每天".to_owned(),
                })
                .collect();
            format!("每月 {}", phrases.join("、"))
        }
    }
}

fn dow_zh(field: &Field) -> String {
    match *field {
        Field::LastOf(d) => format!("每月最后一个{}", day_zh(d)),
        Field::Nth(d, k) => format!(
            "每月第{}个{}",
            ORDINALS_ZH
                .get(k.wrapping_sub(1) as usize)
                .map_or_else(|| k.to_string(), |o| (*o).to_owned()),
            day_zh(d)
        ),
        _ => {
            let phrases: Vec<String> = field
                .items()
                .iter()
                .map(|item| match *item {
                    Item::One(d) => day_zh(d),
                    Item::Range(a, b) => format!("{}至{}", day_zh(a), day_zh(b)),
                    Item::Step { from, every, .. } => {
                        format!("从{}起每 {every} 天", day_zh(from.unwrap_or(1)))
                    }
                    Item::All => "每天".to_owned(),
                })
                .collect();
            phrases.join("、")
        }
    }
}

fn month_zh(field: &Field) -> Option<String> {
    if field.is_all() {
        return None;
    }
    let phrases: Vec<String> = field
        .items()
        .iter()
        .map(|item| match *item {
            Item::One(m) => format!("{m} 月"),
            Item::Range(a, b) => format!("{a} 月至 {b} 月"),
            Item::Step { from, every, .. } => {
                format!("从 {} 月起每 {every} 个月", from.unwrap_or(1))
            }
            Item::All => "每月".to_owned(),
        })
        .collect();
    Some(phrases.join("、"))
}

fn year_zh(field: &Field) -> Option<String> {
    if field.is_all() {
        return None;
    }
    let phrases: Vec<String> = field
        .items()
        .iter()
        .map(|item| match *item {
            Item::One(y) => format!("{y} 年"),
            Item::Range(a, b) => format!("{a} 年至 {b} 年"),
            Item::Step {
                from: None, every, ..
            } => format!("每 {every} 年"),
            Item::Step {
                from: Some(a),
                to,
                every,
            } => match to {
                Some(b) => format!("{a} 年至 {b} 年每 {every} 年"),
                None => format!("从 {a} 年起每 {every} 年"),
            },
            Item::All => "每年".to_owned(),
        })
        .collect();
    Some(phrases.join("、"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (expression, English, Chinese)
    const CASES: &[(&str, &str, &str)] = &[
        (
            "0 15 10 ? * MON-FRI",
            "At 10:15:00, Monday through Friday",
            "周一至周五 10:15:00",
        ),
        ("0 0 12 * * ?", "At 12:00:00, every day", "每天 12:00:00"),
        (
            "0 30 9,17 * * ?",
            "At 09:30:00 and 17:30:00, every day",
            "每天 09:30:00、17:30:00",
        ),
        ("*/5 * * * * ?", "Every 5 seconds", "每 5 秒"),
        ("* * * * * ?", "Every second", "每秒"),
        ("0 * * * * ?", "Every minute", "每分钟"),
        (
            "0 0/15 * * * ?",
            "Every 15 minutes from minute 0",
            "从第 0 分钟起每 15 分钟",
        ),
        ("0 */15 * * * ?", "Every 15 minutes", "每 15 分钟"),
        (
            "30 */15 * * * ?",
            "Every 15 minutes, at second 30",
            "每 15 分钟的第 30 秒",
        ),
        ("0 0 * * * ?", "Every hour", "每小时整点"),
        (
            "0 30 * * * ?",
            "At minute 30 of every hour",
            "每小时的第 30 分钟",
        ),
        (
            "0 0 9-17 * * ?",
            "Every hour from 09:00:00 through 17:00:00",
            "从 09:00:00 到 17:00:00 每小时一次",
        ),
        (
            "0 0 */2 * * ?",
            "Every 2 hours from 00:00:00",
            "从 00:00:00 起每 2 小时一次",
        ),
        (
            "0 0/5 14 * * ?",
            "Every 5 minutes from minute 0, between 14:00 and 14:59",
            "14:00 至 14:59，从第 0 分钟起每 5 分钟",
        ),
        (
            "0 0,15,45 9-17 ? * MON-FRI",
            "At minutes 0, 15 and 45, between 09:00 and 17:59, Monday through Friday",
            "周一至周五，09:00 至 17:59，第 0、15、45 分钟",
        ),
        (
            "0-10 5 * * * ?",
            "Every second from second 0 through 10, during minute 5",
            "第 5 分钟，第 0 到 10 秒每秒",
        ),
        (
            "0 0 12 L * ?",
            "At 12:00:00, on the last day of the month",
            "每月最后一天 12:00:00",
        ),
        (
            "0 0 12 L-3 * ?",
            "At 12:00:00, 3 days before the last day of the month",
            "每月倒数第 4 天 12:00:00",
        ),
        (
            "0 0 12 LW * ?",
            "At 12:00:00, on the last weekday of the month",
            "每月最后一个工作日 12:00:00",
        ),
        (
            "0 0 12 15W * ?",
            "At 12:00:00, on the weekday nearest day 15 of the month",
            "每月离 15 日最近的工作日 12:00:00",
        ),
        (
            "0 0 12 1,15 * ?",
            "At 12:00:00, on days 1 and 15 of the month",
            "每月 1 日、15 日 12:00:00",
        ),
        (
            "0 0 12 ? * 6L",
            "At 12:00:00, on the last Friday of the month",
            "每月最后一个周五 12:00:00",
        ),
        (
            "0 0 12 ? * 6#3",
            "At 12:00:00, on the third Friday of the month",
            "每月第三个周五 12:00:00",
        ),
        (
            "0 0 12 ? * MON,WED,FRI",
            "At 12:00:00, only on Monday, Wednesday and Friday",
            "周一、周三、周五 12:00:00",
        ),
        (
            "0 0 12 ? * L",
            "At 12:00:00, only on Saturday",
            "周六 12:00:00",
        ),
        (
            "0 0 8 ? * SAT-SUN",
            "At 08:00:00, Saturday through Sunday",
            "周六至周日 08:00:00",
        ),
        (
            "0 0 12 1 JAN,JUL ?",
            "At 12:00:00, on day 1 of the month, only in January and July",
            "1 月、7 月，每月 1 日 12:00:00",
        ),
        (
            "0 0 6 1 */3 ?",
            "At 06:00:00, on day 1 of the month, only in January, April, July and October",
            "1 月、4 月、7 月、10 月，每月 1 日 06:00:00",
        ),
        (
            "0 0 12 * * ? 2027",
            "At 12:00:00, every day, only in 2027",
            "2027 年，每天 12:00:00",
        ),
        (
            "0 0 0 1 1 ? 2027-2030",
            "At 00:00:00, on day 1 of the month, only in January, 2027 through 2030",
            "2027 年至 2030 年，1 月，每月 1 日 00:00:00",
        ),
    ];

    #[test]
    fn cron_expressions_read_as_english_and_chinese() {
        let mut wrong = Vec::new();
        for (expr, en, zh) in CASES {
            let spec = CronSpec::parse(expr).unwrap();
            let got = (
                describe_cron(&spec, Language::English),
                describe_cron(&spec, Language::Chinese),
            );
            if got != (en.to_string(), zh.to_string()) {
                wrong.push(format!("{expr}: got {got:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    fn both(schedule: &Schedule) -> (String, String) {
        (
            describe(schedule, Language::English),
            describe(schedule, Language::Chinese),
        )
    }

    #[test]
    fn other_schedule_kinds_are_described() {
        let rate = |every_ms| Schedule::FixedRate {
            every_ms,
            anchor_ms: 0,
        };
        assert_eq!(
            both(&rate(5_000)),
            ("Every 5 seconds".into(), "每 5 秒".into())
        );
        assert_eq!(
            both(&rate(60_000)),
            ("Every minute".into(), "每分钟".into())
        );
        assert_eq!(
            both(&rate(7_200_000)),
            ("Every 2 hours".into(), "每 2 小时".into())
        );
        assert_eq!(
            both(&rate(1_500)),
            ("Every 1500 milliseconds".into(), "每 1500 毫秒".into())
        );
        assert_eq!(
            both(&Schedule::FixedDelay { delay_ms: 30_000 }),
            (
                "30 seconds after the previous run finishes".into(),
                "上次运行结束 30 秒后".into()
            )
        );
        assert_eq!(
            both(&Schedule::Once {
                at_ms: 1_780_315_200_000
            }),
            (
                "Once, at 2026-06-01 12:00:00 UTC".into(),
                "仅一次，于 2026-06-01 12:00:00 UTC".into()
            )
        );
        assert_eq!(
            both(&Schedule::Manual),
            ("Only when triggered manually".into(), "仅手动触发".into())
        );
    }

    #[test]
    fn cron_outside_utc_names_its_zone() {
        let schedule = super::super::ScheduleSpec::Cron {
            expr: "0 0 9 ? * MON-FRI".into(),
            timezone: "Asia/Shanghai".into(),
        }
        .parse(0)
        .unwrap();
        assert_eq!(
            both(&schedule),
            (
                "At 09:00:00, Monday through Friday (Asia/Shanghai)".into(),
                "周一至周五 09:00:00（Asia/Shanghai 时间）".into()
            )
        );
    }

    #[test]
    fn language_tags_are_bcp47() {
        let tags: Vec<_> = Language::ALL.iter().map(|l| l.tag()).collect();
        assert_eq!(tags, ["en", "zh-CN"]);
    }
}

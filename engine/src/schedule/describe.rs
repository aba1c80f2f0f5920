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
//!
//! Each language is one table of phrases (`Phrases`: `ENGLISH`, `CHINESE`); one code path
//! decides which phrase a schedule needs and fills it in. A new language is a new table.

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

    fn phrases(self) -> &'static Phrases {
        match self {
            Language::English => &ENGLISH,
            Language::Chinese => &CHINESE,
        }
    }
}

/// Describes a parsed schedule. A cron schedule outside UTC names its zone.
pub fn describe(schedule: &Schedule, lang: Language) -> String {
    let w = lang.phrases();
    match schedule {
        Schedule::Cron { spec, tz } => {
            let text = describe_cron(spec, lang);
            if *tz == Tz::UTC {
                text
            } else {
                (w.in_zone)(&text, tz.name())
            }
        }
        Schedule::FixedRate { every_ms, .. } => {
            let (n, unit) = unit_of(*every_ms);
            (w.every)(n, w.duration_units[unit])
        }
        Schedule::FixedDelay { delay_ms } => {
            let (n, unit) = unit_of(*delay_ms);
            (w.after_previous)(n, w.duration_units[unit])
        }
        Schedule::Once { at_ms } => (w.once)(&instant(*at_ms)),
        Schedule::Manual => w.manual.to_owned(),
    }
}

/// Describes a validated cron expression (without its zone).
pub fn describe_cron(spec: &CronSpec, lang: Language) -> String {
    let w = lang.phrases();
    match Parsed::of(spec) {
        Some(p) => cron_sentence(&p, w),
        None => (w.cron_expression)(spec.source()),
    }
}

fn instant(ms: i64) -> String {
    ms_to_datetime(ms)
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

/// The sizes of the units a duration is said in, largest first; [`Phrases::duration_units`]
/// names them.
const UNITS: [i64; 5] = [86_400_000, 3_600_000, 60_000, 1_000, 1];

/// `ms` as a count of the largest unit that divides it, and that unit's index in [`UNITS`].
fn unit_of(ms: i64) -> (i64, usize) {
    UNITS
        .iter()
        .position(|size| ms % size == 0)
        .map_or((ms, UNITS.len() - 1), |i| (ms / UNITS[i], i))
}

// ---- the phrase tables ------------------------------------------------------------------------

/// Everything one language says. Values arrive already written where the language does not
/// change them (times `hh:mm:ss`, padded hours); names of weekdays and months come from the
/// table itself.
struct Phrases {
    // -- schedules that are not cron
    /// A cron description and the zone it is read in, when that is not UTC.
    in_zone: fn(&str, &str) -> String,
    /// A cron expression there are no words for.
    cron_expression: fn(&str) -> String,
    /// Fixed rate: every `n` of a unit.
    every: fn(i64, &str) -> String,
    /// Fixed delay: `n` of a unit after the previous run.
    after_previous: fn(i64, &str) -> String,
    /// One-shot, at an instant.
    once: fn(&str) -> String,
    manual: &'static str,
    /// The names of [`UNITS`], singular.
    duration_units: [&'static str; 5],

    // -- how a cron sentence is put together
    /// True: clauses run from the year down to the time of day; false: the other way round.
    largest_first: bool,
    /// Between clauses, and between the parts of the time of day.
    sep: &'static str,
    /// Single values listed: `0, 15 and 45`.
    list: fn(&[String]) -> String,
    /// The finished sentence (its first letter).
    sentence: fn(String) -> String,

    // -- the time of day
    /// Fixed times of day, listed.
    at_times: fn(&str) -> String,
    /// A fixed minute and second of every hour.
    hourly: fn(u32, u32) -> String,
    /// Hours at a fixed minute and second; values are times `hh:mm:ss`.
    timed_hours: Items,
    /// A minutes phrase and a fixed second that is not 0.
    at_second: fn(String, u32) -> String,
    second: Unit,
    /// Minutes when the second is fixed.
    minute: Unit,
    /// Minutes when the seconds vary within them.
    minute_within: Unit,
    seconds_minutes: UnitItems,
    /// Hours when minutes or seconds vary; a range is `hh:00` to `hh:59`.
    hours: Items,

    // -- the date
    every_day: &'static str,
    /// A day clause and fixed times of day, as one clause.
    day_and_time: fn(&str, &str) -> String,
    /// `L`, `L-n`, `LW`, `L-nW`: offset before the last day, nearest weekday or not.
    last_day: fn(u32, bool) -> String,
    /// `nW`
    nearest_weekday: fn(u32) -> String,
    days_of_month: Items,
    /// A weekday's name, 1 = Sunday.
    weekday: fn(u32) -> String,
    /// `nL`, with the weekday's name.
    last_weekday: fn(&str) -> String,
    /// `n#k`: the k-th and the weekday's name.
    nth_weekday: fn(u32, &str) -> String,
    days_of_week: Items,
    /// A month's name, 1 = January.
    month: fn(u32) -> String,
    months: Items,
    years: Items,
}

/// How a language words the comma-separated items of one field.
struct Items {
    /// The field lists only single values: the list as a whole (`and`, plural) when the
    /// language words it differently from the items one by one.
    values: Option<fn(&str, bool) -> String>,
    one: fn(&str) -> String,
    range: fn(&str, &str) -> String,
    /// A step from the first value of the field (`*/n`), when the language has its own words
    /// for it; otherwise it reads as a step from that first value.
    every_n: Option<fn(u32) -> String>,
    /// Every `n`th value from a value, up to a last one or the end of the field.
    step: fn(u32, &str, Option<&str>) -> String,
    /// `*` among other items.
    all: &'static str,
    sep: &'static str,
    /// The joined items.
    whole: fn(String) -> String,
}

/// Seconds and minutes: the same phrases, with the unit's own words.
struct Unit {
    name: &'static str,
    /// The preposition before a single value (English only).
    at: &'static str,
}

/// How a language words the items of a seconds or minutes field.
struct UnitItems {
    /// `*`, or `*` among other items.
    every: fn(&Unit) -> String,
    /// Only single values: the joined list, and whether there is more than one.
    values: fn(&Unit, &str, bool) -> String,
    one: fn(&Unit, u32) -> String,
    range: fn(&Unit, u32, u32) -> String,
    /// `*/n`
    every_n: fn(&Unit, u32) -> String,
    /// `a/n` and `a-b/n`.
    step: fn(&Unit, u32, u32, Option<u32>) -> String,
    sep: &'static str,
}

fn as_is(s: String) -> String {
    s
}

const ENGLISH: Phrases = Phrases {
    in_zone: |text, zone| format!("{text} ({zone})"),
    cron_expression: |source| format!("Cron expression {source}"),
    every: |n, unit| match n {
        1 => format!("Every {unit}"),
        n => format!("Every {n} {unit}s"),
    },
    after_previous: |n, unit| match n {
        1 => format!("1 {unit} after the previous run finishes"),
        n => format!("{n} {unit}s after the previous run finishes"),
    },
    once: |at| format!("Once, at {at}"),
    manual: "Only when triggered manually",
    duration_units: ["day", "hour", "minute", "second", "millisecond"],

    largest_first: false,
    sep: ", ",
    list: join_en,
    sentence: |s| capitalise(&s),

    at_times: |times| format!("At {times}"),
    hourly: |m, s| match (m, s) {
        (0, 0) => "Every hour".to_owned(),
        (m, 0) => format!("At minute {m} of every hour"),
        (m, s) => format!("At minute {m}, second {s} of every hour"),
    },
    timed_hours: Items {
        values: None,
        one: |t| format!("at {t}"),
        range: |a, b| format!("every hour from {a} through {b}"),
        every_n: None,
        step: |n, from, to| match to {
            Some(b) => format!("every {n} hours from {from} through {b}"),
            None => format!("every {n} hours from {from}"),
        },
        all: "every hour",
        sep: ", ",
        whole: as_is,
    },
    at_second: |minutes, s| format!("{minutes}, at second {s}"),
    second: Unit {
        name: "second",
        at: "at",
    },
    minute: Unit {
        name: "minute",
        at: "at",
    },
    minute_within: Unit {
        name: "minute",
        at: "during",
    },
    seconds_minutes: UnitItems {
        every: |u| format!("every {}", u.name),
        values: |u, list, many| {
            let plural = if many { "s" } else { "" };
            format!("{} {}{plural} {list}", u.at, u.name)
        },
        one: |u, v| format!("{} {} {v}", u.at, u.name),
        range: |u, a, b| format!("every {0} from {0} {a} through {b}", u.name),
        every_n: |u, n| every_en(n, u.name),
        step: |u, n, a, to| match to {
            Some(b) => format!("{} from {} {a} through {b}", every_en(n, u.name), u.name),
            None => format!("{} from {} {a}", every_en(n, u.name), u.name),
        },
        sep: ", ",
    },
    hours: Items {
        values: Some(|list, _| format!("during hours {list}")),
        one: |h| format!("during hour {h}"),
        range: |a, b| format!("between {a} and {b}"),
        every_n: Some(|n| every_en(n, "hour")),
        step: |n, a, to| match to {
            Some(b) => format!("{} from {a} through {b}", every_en(n, "hour")),
            None => format!("{} from {a}", every_en(n, "hour")),
        },
        all: "every hour",
        sep: ", ",
        whole: as_is,
    },

    every_day: "every day",
    day_and_time: |day, time| format!("{time}, {day}"),
    last_day: |offset, weekday| match (offset, weekday) {
        (0, false) => "on the last day of the month".to_owned(),
        (n, false) => format!("{n} days before the last day of the month"),
        (0, true) => "on the last weekday of the month".to_owned(),
        (n, true) => format!("on the weekday nearest {n} days before the last day of the month"),
    },
    nearest_weekday: |d| format!("on the weekday nearest day {d} of the month"),
    days_of_month: Items {
        values: Some(|list, many| {
            let plural = if many { "s" } else { "" };
            format!("on day{plural} {list} of the month")
        }),
        one: |d| format!("on day {d}"),
        range: |a, b| format!("on days {a} through {b}"),
        every_n: Some(|n| every_en(n, "day")),
        step: |n, a, to| match to {
            Some(b) => format!("{} from day {a} through {b}", every_en(n, "day")),
            None => format!("{} from day {a}", every_en(n, "day")),
        },
        all: "every day",
        sep: ", ",
        whole: |days| format!("{days} of the month"),
    },
    weekday: |d| name_from(&DAYS, d),
    last_weekday: |day| format!("on the last {day} of the month"),
    nth_weekday: |k, day| {
        let nth = ORDINALS.get(k.wrapping_sub(1) as usize).unwrap_or(&"n-th");
        format!("on the {nth} {day} of the month")
    },
    days_of_week: Items {
        values: Some(|list, _| format!("only on {list}")),
        one: str::to_owned,
        range: |a, b| format!("{a} through {b}"),
        every_n: None,
        step: |n, from, _| format!("every {n} days of the week from {from}"),
        all: "every day",
        sep: ", ",
        whole: as_is,
    },
    month: |m| name_from(&MONTHS, m),
    months: Items {
        values: Some(|list, _| format!("only in {list}")),
        one: str::to_owned,
        range: |a, b| format!("{a} through {b}"),
        every_n: None,
        step: |n, from, _| format!("{} from {from}", every_en(n, "month")),
        all: "every month",
        sep: ", ",
        whole: as_is,
    },
    years: Items {
        values: Some(|list, _| format!("only in {list}")),
        one: str::to_owned,
        range: |a, b| format!("{a} through {b}"),
        every_n: Some(|n| every_en(n, "year")),
        step: |n, a, to| match to {
            Some(b) => format!("{} from {a} through {b}", every_en(n, "year")),
            None => format!("{} from {a}", every_en(n, "year")),
        },
        all: "every year",
        sep: ", ",
        whole: as_is,
    },
};

const CHINESE: Phrases = Phrases {
    in_zone: |text, zone| format!("{text}（{zone} 时间）"),
    cron_expression: |source| format!("cron 表达式 {source}"),
    every: |n, unit| match n {
        1 => format!("每{unit}"),
        n => format!("每 {n} {unit}"),
    },
    after_previous: |n, unit| format!("上次运行结束 {n} {unit}后"),
    once: |at| format!("仅一次，于 {at}"),
    manual: "仅手动触发",
    duration_units: ["天", "小时", "分钟", "秒", "毫秒"],

    largest_first: true,
    sep: "，",
    list: |items| items.join("、"),
    sentence: as_is,

    at_times: str::to_owned,
    hourly: |m, s| match (m, s) {
        (0, 0) => "每小时整点".to_owned(),
        (m, 0) => format!("每小时的第 {m} 分钟"),
        (m, s) => format!("每小时的第 {m} 分 {s} 秒"),
    },
    timed_hours: Items {
        values: None,
        one: str::to_owned,
        range: |a, b| format!("从 {a} 到 {b} 每小时一次"),
        every_n: None,
        step: |n, from, to| match to {
            Some(b) => format!("从 {from} 到 {b} 每 {n} 小时一次"),
            None => format!("从 {from} 起每 {n} 小时一次"),
        },
        all: "每小时",
        sep: "，",
        whole: as_is,
    },
    at_second: |minutes, s| format!("{minutes}的第 {s} 秒"),
    second: Unit {
        name: "秒", at: ""
    },
    minute: Unit {
        name: "分钟",
        at: "",
    },
    minute_within: Unit {
        name: "分钟",
        at: "",
    },
    seconds_minutes: UnitItems {
        every: |u| format!("每{}", u.name),
        values: |u, list, _| format!("第 {list} {}", u.name),
        one: |u, v| format!("第 {v} {}", u.name),
        range: |u, a, b| format!("第 {a} 到 {b} {0}每{0}", u.name),
        every_n: every_zh,
        step: |u, n, a, to| match to {
            Some(b) => format!("第 {a} 到 {b} {}{}", u.name, every_zh(u, n)),
            None => format!("从第 {a} {}起{}", u.name, every_zh(u, n)),
        },
        sep: "，",
    },
    hours: Items {
        values: Some(|list, _| format!("{list} 点")),
        one: |h| format!("{h} 点"),
        range: |a, b| format!("{a} 至 {b}"),
        every_n: Some(|n| format!("每 {n} 小时")),
        step: |n, a, to| match to {
            Some(b) => format!("{a} 至 {b} 每 {n} 小时"),
            None => format!("从 {a} 起每 {n} 小时"),
        },
        all: "每小时",
        sep: "，",
        whole: as_is,
    },

    every_day: "每天",
    day_and_time: |day, time| format!("{day} {time}"),
    last_day: |offset, weekday| match (offset, weekday) {
        (0, false) => "每月最后一天".to_owned(),
        (n, false) => format!("每月倒数第 {} 天", n + 1),
        (0, true) => "每月最后一个工作日".to_owned(),
        (n, true) => format!("每月离倒数第 {} 天最近的工作日", n + 1),
    },
    nearest_weekday: |d| format!("每月离 {d} 日最近的工作日"),
    days_of_month: Items {
        values: None,
        one: |d| format!("{d} 日"),
        range: |a, b| format!("{a} 日至 {b} 日"),
        every_n: Some(|n| format!("每 {n} 天")),
        step: |n, a, to| match to {
            Some(b) => format!("{a} 日至 {b} 日每 {n} 天"),
            None => format!("从 {a} 日起每 {n} 天"),
        },
        all: "每天",
        sep: "、",
        whole: |days| format!("每月 {days}"),
    },
    weekday: |d| {
        DAYS_ZH
            .get(d.wrapping_sub(1) as usize)
            .map_or_else(|| d.to_string(), |n| (*n).to_owned())
    },
    last_weekday: |day| format!("每月最后一个{day}"),
    nth_weekday: |k, day| {
        let nth = ORDINALS_ZH
            .get(k.wrapping_sub(1) as usize)
            .map_or_else(|| k.to_string(), |o| (*o).to_owned());
        format!("每月第{nth}个{day}")
    },
    days_of_week: Items {
        values: None,
        one: str::to_owned,
        range: |a, b| format!("{a}至{b}"),
        every_n: None,
        step: |n, from, _| format!("从{from}起每 {n} 天"),
        all: "每天",
        sep: "、",
        whole: as_is,
    },
    month: |m| format!("{m} 月"),
    months: Items {
        values: None,
        one: str::to_owned,
        // `2 月至 5 月`
        range: |a, b| format!("{a}至 {b}"),
        every_n: None,
        step: |n, from, _| format!("从 {from}起每 {n} 个月"),
        all: "每月",
        sep: "、",
        whole: as_is,
    },
    years: Items {
        values: None,
        one: |y| format!("{y} 年"),
        range: |a, b| format!("{a} 年至 {b} 年"),
        every_n: Some(|n| format!("每 {n} 年")),
        step: |n, a, to| match to {
            Some(b) => format!("{a} 年至 {b} 年每 {n} 年"),
            None => format!("从 {a} 年起每 {n} 年"),
        },
        all: "每年",
        sep: "、",
        whole: as_is,
    },
};

/// `每秒`, `每 5 秒`.
/// "every minute", "every 5 minutes".
fn every_en(n: u32, unit: &str) -> String {
    if n == 1 {
        format!("every {unit}")
    } else {
        format!("every {n} {unit}s")
    }
}

fn every_zh(u: &Unit, n: u32) -> String {
    if n == 1 {
        format!("每{}", u.name)
    } else {
        format!("每 {n} {}", u.name)
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const DAYS_ZH: [&str; 7] = ["周日", "周一", "周二", "周三", "周四", "周五", "周六"];
const ORDINALS: [&str; 5] = ["first", "second", "third", "fourth", "fifth"];
const ORDINALS_ZH: [&str; 5] = ["一", "二", "三", "四", "五"];

/// The `n`th name (1-based), or the number itself when there is none.
fn name_from(names: &[&str], n: u32) -> String {
    names
        .get(n.wrapping_sub(1) as usize)
        .map_or_else(|| n.to_string(), |name| (*name).to_owned())
}

fn join_en(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
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

// ---- the one code path: which phrase a cron expression needs ----------------------------------

fn cron_sentence(p: &Parsed, w: &Phrases) -> String {
    let (time, fixed) = time_of_day(p, w);
    let day = day_clause(p, w);
    // Clauses from the largest down; reversed at the end for languages that go the other way.
    let mut clauses: Vec<String> = Vec::new();
    clauses.extend(years(&p.year, w));
    clauses.extend(months(&p.month, w));
    if fixed {
        // Fixed times of day always say their day, "every day" when no field limits it.
        let day = day.unwrap_or_else(|| w.every_day.to_owned());
        clauses.push((w.day_and_time)(&day, &time));
    } else {
        clauses.extend(day);
        clauses.push(time);
    }
    if !w.largest_first {
        clauses.reverse();
    }
    (w.sentence)(clauses.join(w.sep))
}

fn hms(h: u32, m: u32, s: u32) -> String {
    format!("{h:02}:{m:02}:{s:02}")
}

fn numbers(values: &[u32]) -> Vec<String> {
    values.iter().map(u32::to_string).collect()
}

/// The time of day, and whether it names fixed times (then the day is said explicitly).
fn time_of_day(p: &Parsed, w: &Phrases) -> (String, bool) {
    if let (Some(s), Some(m)) = (p.sec.single(), p.min.single()) {
        if let Some(hours) = p.hour.singles() {
            let times: Vec<String> = hours.iter().map(|&h| hms(h, m, s)).collect();
            return ((w.at_times)(&(w.list)(&times)), true);
        }
        if p.hour.is_all() {
            return ((w.hourly)(m, s), false);
        }
        // A step of hours without a start starts at hour 0.
        return (
            items(&p.hour, &w.timed_hours, w, 0, |h| hms(h, m, s)),
            false,
        );
    }
    // Parts from the smallest unit up; reversed for languages that go the other way.
    let mut parts = Vec::new();
    match p.sec.single() {
        Some(s) => {
            let minutes = unit_items(&p.min, &w.minute, w);
            parts.push(if s == 0 {
                minutes
            } else {
                (w.at_second)(minutes, s)
            });
        }
        None => {
            parts.push(unit_items(&p.sec, &w.second, w));
            if !p.min.is_all() {
                parts.push(unit_items(&p.min, &w.minute_within, w));
            }
        }
    }
    if !p.hour.is_all() {
        parts.push(hours(&p.hour, w));
    }
    if w.largest_first {
        parts.reverse();
    }
    (parts.join(w.sep), false)
}

/// Seconds or minutes: "every 15 minutes", "at seconds 0 and 30", ...
fn unit_items(field: &Field, unit: &Unit, w: &Phrases) -> String {
    let words = &w.seconds_minutes;
    if field.is_all() {
        return (words.every)(unit);
    }
    if let Some(values) = field.singles() {
        return (words.values)(unit, &(w.list)(&numbers(&values)), values.len() > 1);
    }
    let phrases: Vec<String> = field
        .items()
        .iter()
        .map(|item| match *item {
            Item::One(v) => (words.one)(unit, v),
            Item::Range(a, b) => (words.range)(unit, a, b),
            Item::Step {
                from: None, every, ..
            } => (words.every_n)(unit, every),
            Item::Step {
                from: Some(a),
                to,
                every,
            } => (words.step)(unit, every, a, to),
            Item::All => (words.every)(unit),
        })
        .collect();
    phrases.join(words.sep)
}

/// Hours when minutes or seconds vary: one hour reads as its minutes, `09:00` to `09:59`.
fn hours(field: &Field, w: &Phrases) -> String {
    let start = |h: u32| format!("{h:02}:00");
    let end = |h: u32| format!("{h:02}:59");
    let words = &w.hours;
    if let Some(values) = field.singles() {
        if let [h] = values.as_slice() {
            return (words.range)(&start(*h), &end(*h));
        }
        if let Some(whole) = words.values {
            return whole(&(w.list)(&numbers(&values)), true);
        }
    }
    let phrases: Vec<String> = field
        .items()
        .iter()
        .map(|item| match *item {
            Item::One(h) => (words.one)(&h.to_string()),
            Item::Range(a, b) => (words.range)(&start(a), &end(b)),
            Item::Step { from, to, every } => match (from, words.every_n) {
                (None, Some(every_n)) => every_n(every),
                _ => (words.step)(every, &start(from.unwrap_or(0)), to.map(end).as_deref()),
            },
            Item::All => words.all.to_owned(),
        })
        .collect();
    (words.whole)(phrases.join(words.sep))
}

/// The items of a field through its words. `write` writes one value; a step without a start
/// reads as a step from `first` unless the language has its own words for it.
fn items(
    field: &Field,
    words: &Items,
    w: &Phrases,
    first: u32,
    write: impl Fn(u32) -> String,
) -> String {
    if let (Some(values), Some(whole)) = (field.singles(), words.values) {
        let written: Vec<String> = values.iter().map(|&v| write(v)).collect();
        return whole(&(w.list)(&written), values.len() > 1);
    }
    let phrases: Vec<String> = field
        .items()
        .iter()
        .map(|item| match *item {
            Item::One(v) => (words.one)(&write(v)),
            Item::Range(a, b) => (words.range)(&write(a), &write(b)),
            Item::Step { from, to, every } => match (from, words.every_n) {
                (None, Some(every_n)) => every_n(every),
                _ => (words.step)(
                    every,
                    &write(from.unwrap_or(first)),
                    to.map(&write).as_deref(),
                ),
            },
            Item::All => words.all.to_owned(),
        })
        .collect();
    (words.whole)(phrases.join(words.sep))
}

/// The day, from day-of-month or else day-of-week; none when neither limits it.
fn day_clause(p: &Parsed, w: &Phrases) -> Option<String> {
    if !p.dom.is_all() {
        return Some(match p.dom {
            Field::Last { offset, weekday } => (w.last_day)(offset, weekday),
            Field::NearestWeekday(d) => (w.nearest_weekday)(d),
            _ => items(&p.dom, &w.days_of_month, w, 1, |d| d.to_string()),
        });
    }
    if !p.dow.is_all() {
        return Some(match p.dow {
            Field::LastOf(d) => (w.last_weekday)(&(w.weekday)(d)),
            Field::Nth(d, k) => (w.nth_weekday)(k, &(w.weekday)(d)),
            _ => items(&p.dow, &w.days_of_week, w, 1, w.weekday),
        });
    }
    None
}

fn months(field: &Field, w: &Phrases) -> Option<String> {
    (!field.is_all()).then(|| items(field, &w.months, w, 1, w.month))
}

fn years(field: &Field, w: &Phrases) -> Option<String> {
    (!field.is_all()).then(|| items(field, &w.years, w, 1, |y| y.to_string()))
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
        ("0 */1 * * * ?", "Every minute", "每分钟"),
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

//! Differential test: `CronSpec` against Quartz 2.3.2's `org.quartz.CronExpression`.
//!
//! A fixed-seed generator produces valid expressions covering every feature (steps, ranges,
//! wrap-around ranges, names, `L`, `L-n`, `LW`, `L-nW`, `nW`, `nL`, `n#k`, `?` on either side,
//! the year field) and a set of invalid ones. Each valid expression is evaluated in several zones
//! from random start instants and from instants around daylight-saving transitions (before a
//! gap, inside the first and second pass of an overlap, on the transition itself). The reference
//! results come from `tests/scheduling/quartz/QuartzOracle.java`, compiled with `javac` and run once for all
//! cases. The next five fire times (or the refusal) must agree in every case. The only allowed
//! difference is an expression Quartz accepts but `CronSpec` refuses as junk; those are counted
//! and listed, never dropped silently.
//!
//! Zones: UTC, America/New_York, Europe/London, Australia/Lord_Howe (30-minute DST),
//! Australia/Sydney, Asia/Kolkata (+05:30, no DST) and Pacific/Chatham (+12:45/+13:45). Their
//! rules have not changed between 2000 and today, so the JDK's time-zone data (2025a in
//! OpenJDK 17 here) and chrono-tz's (2025b) agree for the instants tested. chrono-tz stops
//! applying rules after 2099 while Java goes on, so fire times from 2099 on are not compared.
//!
//! Requires `javac`/`java` (OpenJDK 17; `JAVA_HOME/bin` is tried before `PATH`) and the Debian
//! Quartz jars: `apt-get install openjdk-17-jdk-headless libquartz2-java`. Set
//! `QUARTZ_ORACLE_DUMP=<file>` to keep the oracle's input for running it by hand. Run with
//! `-- --nocapture` to see the summary of a passing run.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use chrono::{DateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use mthpt_engine::schedule::CronSpec;

const JARS: [&str; 3] = [
    "/usr/share/java/quartz2.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-nop.jar",
];
const INSTALL_HINT: &str = "apt-get install openjdk-17-jdk-headless libquartz2-java";
const ZONES: [&str; 7] = [
    "UTC",
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "Australia/Sydney",
    "Asia/Kolkata",
    "Pacific/Chatham",
];
const DST_ZONES: [&str; 5] = [
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "Australia/Sydney",
    "Pacific/Chatham",
];
const FIRES: usize = 5;
/// Random valid expressions evaluated in every zone.
const GENERATED: usize = 900;
/// Fire times from here on are not compared (chrono-tz has no rules after 2099).
const COMPARE_BEFORE_MS: i64 = 4_070_908_800_000; // 2099-01-01T00:00:00Z

// ---------------------------------------------------------------------------------------------
// A small deterministic generator (SplitMix64), so the case list never changes between runs.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi - lo + 1) as u64;
        lo + (self.next() % span) as i64
    }

    fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.int(0, items.len() as i64 - 1) as usize]
    }

    fn chance(&mut self, percent: i64) -> bool {
        self.int(0, 99) < percent
    }
}

// ---------------------------------------------------------------------------------------------
// Expressions.

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// A numeric field with values `lo..=hi`: every plain form, wrap-around ranges included.
fn gen_plain(r: &mut Rng, lo: i64, hi: i64, single_weight: i64) -> String {
    let v = |r: &mut Rng| r.int(lo, hi);
    let step = |r: &mut Rng| r.int(1, (hi - lo).clamp(1, 20));
    let roll = r.int(0, 99);
    if roll < single_weight {
        return v(r).to_string();
    }
    match r.int(0, 9) {
        0 => "*".into(),
        1 => format!("*/{}", step(r)),
        2 => format!("{}/{}", v(r), step(r)),
        3 => {
            let (a, b) = (v(r), v(r));
            format!("{}-{}", a.min(b), a.max(b))
        }
        4 => {
            let (a, b) = (v(r), v(r));
            format!("{}-{}/{}", a.min(b), a.max(b), step(r))
        }
        5 => {
            let n = r.int(2, 4);
            let vals: Vec<String> = (0..n).map(|_| v(r).to_string()).collect();
            vals.join(",")
        }
        6 => {
            // Wrap-around range.
            let a = r.int(lo + (hi - lo) / 2, hi);
            let b = r.int(lo, lo + (hi - lo) / 3);
            format!("{a}-{b}")
        }
        7 => {
            let a = r.int(lo + (hi - lo) / 2, hi);
            let b = r.int(lo, lo + (hi - lo) / 2);
            format!("{a}-{b}/{}", step(r))
        }
        8 => format!("{},{}-{}", v(r), lo, r.int(lo, hi)),
        _ => v(r).to_string(),
    }
}

fn name_case(r: &mut Rng, name: &str) -> String {
    match r.int(0, 9) {
        0 => name.to_lowercase(),
        1 => {
            let mut s = name[..1].to_string();
            s.push_str(&name[1..].to_lowercase());
            s
        }
        _ => name.to_string(),
    }
}

fn gen_month(r: &mut Rng) -> String {
    let name = |r: &mut Rng| {
        let n = MONTHS[r.int(0, 11) as usize];
        name_case(r, n)
    };
    match r.int(0, 19) {
        0..=8 => "*".into(),
        9 => r.int(1, 12).to_string(),
        10 => name(r),
        11 => format!("{}-{}", name(r), name(r)),
        12 => format!("{},{}", name(r), name(r)),
        13 => format!("*/{}", r.int(1, 6)),
        14 => format!("{}/{}", r.int(1, 12), r.int(1, 5)),
        15 => {
            let a = r.int(8, 12);
            let b = r.int(1, 4);
            format!("{a}-{b}")
        }
        16 => "NOV-FEB".into(),
        _ => gen_plain(r, 1, 12, 30),
    }
}

fn gen_dom(r: &mut Rng) -> String {
    let edge = |r: &mut Rng| *r.pick(&[&1, &2, &3, &15, &27, &28, &29, &30, &31]);
    match r.int(0, 19) {
        0..=3 => "*".into(),
        4 => r.int(1, 31).to_string(),
        5 => "L".into(),
        6 => format!("L-{}", r.int(0, 30)),
        7 => format!("L-{}", r.int(25, 30)),
        8 => "LW".into(),
        9 => format!("L-{}W", r.int(0, 27)),
        10 | 11 => format!("{}W", edge(r)),
        12 => format!("{}W", r.int(1, 31)),
        13 => {
            let a = r.int(25, 31);
            let b = r.int(1, 5);
            format!("{a}-{b}")
        }
        14 => format!("{},{}", edge(r), edge(r)),
        15 => format!("*/{}", r.int(2, 15)),
        16 => format!("{}/{}", r.int(1, 31), r.int(2, 10)),
        17 => format!("{}-{}", r.int(1, 15), r.int(15, 31)),
        18 => "l".into(),
        _ => gen_plain(r, 1, 31, 40),
    }
}

fn gen_dow(r: &mut Rng) -> String {
    let name = |r: &mut Rng| {
        let n = DAYS[r.int(0, 6) as usize];
        name_case(r, n)
    };
    match r.int(0, 19) {
        0..=2 => "*".into(),
        3 => r.int(1, 7).to_string(),
        4 => name(r),
        5 => "MON-FRI".into(),
        6 => format!("{}-{}", name(r), name(r)),
        7 => format!("{},{},{}", name(r), name(r), name(r)),
        8 => format!("{}L", r.int(1, 7)),
        9 => format!("{}L", name(r)),
        10 | 11 => format!("{}#{}", r.int(1, 7), r.int(1, 5)),
        12 => format!("{}#{}", name(r), r.int(1, 5)),
        13 => format!("*/{}", r.int(1, 7)),
        14 => format!("{}/{}", r.int(1, 7), r.int(1, 4)),
        15 => {
            let a = r.int(5, 7);
            let b = r.int(1, 3);
            format!("{a}-{b}")
        }
        16 => "L".into(),
        17 => format!("{}-{}/{}", r.int(1, 3), r.int(4, 7), r.int(1, 3)),
        _ => gen_plain(r, 1, 7, 40),
    }
}

fn gen_year(r: &mut Rng) -> Option<String> {
    if r.chance(70) {
        return None;
    }
    Some(match r.int(0, 7) {
        0 => "*".into(),
        1 => r.int(2024, 2045).to_string(),
        2 => {
            let a = r.int(2020, 2040);
            format!("{}-{}", a, a + r.int(0, 10))
        }
        3 => format!("{}/{}", r.int(2020, 2040), r.int(1, 5)),
        4 => format!("*/{}", r.int(1, 6)),
        5 => format!("{},{}", r.int(2024, 2035), r.int(2035, 2045)),
        6 => format!(
            "{}-{}/{}",
            r.int(2020, 2030),
            r.int(2030, 2050),
            r.int(1, 4)
        ),
        _ => r.int(2030, 2060).to_string(),
    })
}

/// A random valid expression.
fn gen_valid(r: &mut Rng) -> String {
    // Keep the time of day sparse most of the time so that fire times spread over days.
    let sec = if r.chance(60) {
        r.int(0, 59).to_string()
    } else {
        gen_plain(r, 0, 59, 20)
    };
    let min = if r.chance(40) {
        r.int(0, 59).to_string()
    } else {
        gen_plain(r, 0, 59, 20)
    };
    let hour = gen_plain(r, 0, 23, 40);
    let (dom, dow) = if r.chance(55) {
        (gen_dom(r), "?".to_string())
    } else {
        ("?".to_string(), gen_dow(r))
    };
    let month = gen_month(r);
    let mut fields = vec![sec, min, hour, dom, month, dow];
    if let Some(year) = gen_year(r) {
        fields.push(year);
    }
    let sep = |r: &mut Rng| match r.int(0, 19) {
        0 => "  ",
        1 => "\t",
        _ => " ",
    };
    let mut out = String::new();
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push_str(sep(r));
        }
        out.push_str(f);
    }
    out
}

/// Hand-picked valid expressions: the documented features and known edge cases.
const CURATED: &[&str] = &[
    "0 0 12 * * ?",
    "0 15 10 ? * *",
    "0 15 10 * * ?",
    "0 15 10 * * ? *",
    "0 15 10 * * ? 2027",
    "0 * 14 * * ?",
    "0 0/5 14 * * ?",
    "0 0/5 14,18 * * ?",
    "0 0-5 14 * * ?",
    "0 10,44 14 ? 3 WED",
    "0 15 10 ? * MON-FRI",
    "0 15 10 15 * ?",
    "0 15 10 L * ?",
    "0 15 10 L-2 * ?",
    "0 15 10 ? * 6L",
    "0 15 10 ? * 6L 2026-2030",
    "0 15 10 ? * 6#3",
    "0 0 12 1/5 * ?",
    "0 11 11 11 11 ?",
    "*/20 * * * * ?",
    "0 0/15 * * * ?",
    "0 0 12 ? * 6#3",
    "0 0 12 ? * 6L",
    "0 0 12 15W * ?",
    "0 0 12 1W * ?",
    "0 0 12 31W * ?",
    "0 0 12 30W * ?",
    "0 0 12 29W * ?",
    "0 0 12 LW * ?",
    "0 0 12 L-3W * ?",
    "0 0 12 L-30 * ?",
    "0 0 12 L-29 * ?",
    "0 0 12 L-28 * ?",
    "0 0 12 L-27W * ?",
    "0 0 12 L-26W * ?",
    "0 0 0 29 2 ?",
    "0 0 0 30 2 ?",
    "0 0 0 31 4,6,9,11 ?",
    "0 0 0 ? 2 1#5",
    "0 0 0 ? 2 7#5",
    "0 0 22-2 * * ?",
    "0 0 22-2/3 * * ?",
    "50-10/5 * * * * ?",
    "58-2 * * * * ?",
    "0 0 12 ? * FRI-MON",
    "0 0 12 ? NOV-FEB *",
    "0 0 12 28-3 * ?",
    "0 0 12 28-3/2 * ?",
    "0 0 12 ? * fri-mon",
    "0 0 12 ? jan *",
    "0 0 12 ? January *",
    "0 0 12 ? * MONDAY",
    "0 0 12 ? * SUNDAY",
    "0 0 12 ? * L",
    "0 0 12 ? * SATL",
    "0 0 12 ? * SAT#1",
    "0 0 12 ? * FRI#5",
    "0 0 12 l * ?",
    "0 0 12 lw * ?",
    "0 0 12 15w * ?",
    "0 0 12 L-0 * ?",
    "0 0 12 ? * 7-1",
    "0 0 12 ? * 6-2/2",
    "0 0 12 ? * */3",
    "0 0 12 ? * 2/3",
    "0 0 0 1 10-3/2 ?",
    "0 0 0 1 12-1 ?",
    "0/59 * * * * ?",
    "0/24 * * * * ?",
    "0 0 0/23 * * ?",
    "0 0 0 1/31 * ?",
    "0 0 0 1 1/12 ?",
    "0 0 0 ? * 1/7",
    "59-59 * * * * ?",
    "5-4 * * * * ?",
    "10-5/20 * * * * ?",
    "0 0 12 * * ? 2125",
    "0 0 12 * * ? 2126",
    "0 0 12 * * ? 2127",
    "0 0 12 1 1 ? 2126",
    "0 0 12 * * ? 2150",
    "0 0 12 * * ? 2100/10",
    "0 0 12 * * ? 2120-2130",
    "0 0 12 1 1 ? */50",
    "0 0 12 1 1 ? */5",
    "0 0 0 1 1 ? 1970/200",
    "0 0 0 1 1 ? 2026/100",
    "0 0 0 1 1 ? */101",
    "05 * * * * ?",
    "0 0 0 ? * 01",
    "0 0 0 01W * ?",
    "0 0 0 L-05 * ?",
    "0 0 0 ? * 6#05",
    "0 0 0 ? * 06L",
    "5,5 * * * * ?",
    "1-3,2-5 * * * * ?",
    "*,5 * * * * ?",
    "0 0 0 ? * SUN-SAT",
    "0 0 0 ? * SAT-SUN",
    "0 0 0 ? DEC-JAN *",
    "0 0 0 ? * 7-7",
    "  0 0 0 * * ?  ",
    "0  0\t0 * * ?",
    "* * * * * ?",
    "0 * * * * ?",
    "0 0 * * * ?",
    "0 30 2 * * ?",
    "0 30 1 * * ?",
    "0 0/30 1-3 * * ?",
    "0 0/30 0-2 * * ?",
    "0 10,35 * * * ?",
    "0 0,15,40 2 * * ?",
    "0 45 2 * * ?",
    "0 0 0 * * ?",
    "0 0 23 L * ?",
    "0 0 0 ? * 1L",
    "0 0 0 ? * 7L",
];

/// Expressions with a day rule, swept over many start days.
fn day_rule_sweep() -> Vec<String> {
    let mut v = Vec::new();
    for n in [1, 2, 3, 15, 27, 28, 29, 30, 31] {
        v.push(format!("0 0 12 {n}W * ?"));
    }
    for n in [0, 1, 2, 15, 26, 27, 28, 29, 30] {
        v.push(format!("0 0 12 L-{n} * ?"));
    }
    for n in [0, 1, 2, 25, 26, 27] {
        v.push(format!("0 30 6 L-{n}W * ?"));
    }
    for d in 1..=7 {
        v.push(format!("0 0 12 ? * {d}L"));
        v.push(format!("0 0 12 ? * {d}#5"));
        v.push(format!("0 0 12 ? * {d}#{}", 1 + d % 4));
    }
    v.push("0 0 12 LW * ?".into());
    v.push("0 0 12 L * ?".into());
    v.push("0 0 0 29 2 ?".into());
    v.push("0 0 0 31 * ?".into());
    v.push("0 0 0 29,30,31 * ?".into());
    v.push("0 0 0 30-31 * ?".into());
    v.push("0 0 0 ? * 2,4,6".into());
    v
}

/// Expressions that fire around the hours where clocks change.
const DST_SWEEP: &[&str] = &[
    "* * * * * ?",
    "0 * * * * ?",
    "0 */15 * * * ?",
    "0 0/30 1-3 * * ?",
    "0 0/30 0-2 * * ?",
    "0 0 * * * ?",
    "0 30 1 * * ?",
    "0 30 2 * * ?",
    "0 59 1 * * ?",
    "0 0 2 * * ?",
    "0 0 3 * * ?",
    "0 10,35 * * * ?",
    "0 20,50 1-3 * * ?",
    "0 45 2 * * ?",
    "0 0,15,40 2 * * ?",
    "30 59 1,2 * * ?",
    "0 0 1-3 ? * SUN",
    "0 30 2 ? * 1#2",
    "0 15 2 L * ?",
    "0 0/20 2-3 * * ?",
];

/// Random expressions for the DST sweep.
const DST_GENERATED: usize = 40;

/// An expression that fires often during the small hours, sometimes only on rule-chosen days.
fn gen_dst_expression(r: &mut Rng) -> String {
    let sec = if r.chance(70) {
        "0".to_string()
    } else {
        gen_plain(r, 0, 59, 30)
    };
    let min = gen_plain(r, 0, 59, 30);
    let hour = match r.int(0, 5) {
        0 => "*".to_string(),
        1 => format!("{}-{}", r.int(0, 2), r.int(2, 4)),
        2 => format!("{},{}", r.int(0, 2), r.int(2, 4)),
        3 => format!("*/{}", r.int(1, 3)),
        4 => r.int(1, 3).to_string(),
        _ => gen_plain(r, 0, 23, 20),
    };
    let (dom, dow) = match r.int(0, 9) {
        0 => (gen_dom(r), "?".to_string()),
        1 => ("?".to_string(), gen_dow(r)),
        2 => ("?".to_string(), "1".to_string()),
        _ => ("*".to_string(), "?".to_string()),
    };
    format!("{sec} {min} {hour} {dom} * {dow}")
}

/// Invalid expressions; `true` marks junk that Quartz 2.3.2 accepts (parses without error).
const INVALID: &[(&str, bool)] = &[
    ("", false),
    ("0 12 * * *", false),
    ("0 0 12 * *", false),
    ("0 0 12 * * *", false),
    ("0 0 0 15 * 1-7", false),
    ("0 0 0 * * 1", false),
    ("0 0 0 L * 6L", false),
    ("0 0 12 ? * ?", false),
    ("? 0 0 ? * 1", false),
    ("0 0 0 ?/2 * 1", false),
    ("0 0 0 ?,1 * ?", false),
    ("0 0 0 * * ? ?", false),
    ("60 * * * * ?", false),
    ("0 60 * * * ?", false),
    ("0 0 24 * * ?", false),
    ("0 0 12 32 * ?", false),
    ("0 0 12 0 * ?", false),
    ("0 0 12 ? 13 *", false),
    ("0 0 12 ? 0 *", false),
    ("0 0 12 ? * 0", false),
    ("0 0 12 ? * 8", false),
    ("0 0 12 ? * 1-8", false),
    ("0/60 * * * * ?", false),
    ("0 0 0/24 * * ?", false),
    ("0 0 0 1/32 * ?", false),
    ("0 0 0 1 1/13 ?", false),
    ("0 0 0 ? * 1/8", false),
    ("5/ * * * * ?", false),
    ("*/ * * * * ?", false),
    ("0 0 0 L-31 * ?", false),
    ("0 0 0 L,15 * ?", false),
    ("0 0 0 15,L * ?", false),
    ("0 0 0 L/2 * ?", false),
    ("0 0 0 1-L * ?", false),
    ("0 0 0 LW,1 * ?", false),
    ("0 0 0 L- * ?", false),
    ("0 0 0 WL * ?", false),
    ("0 0 0 32W * ?", false),
    ("0 0 0 W * ?", false),
    ("0 0 0 15L * ?", false),
    ("0 0 0 15#2 * ?", false),
    ("0 0 0 */5W * ?", false),
    ("0 0 0 15/2W * ?", false),
    ("0 0 0 ? * 6L,2", false),
    ("0 0 0 ? * 2,6L", false),
    ("0 0 0 ? * 8L", false),
    ("0 0 0 ? * 0L", false),
    ("0 0 0 ? * 6#0", false),
    ("0 0 0 ? * 6#6", false),
    ("0 0 0 ? * 6#3,2#1", false),
    ("0 0 0 ? * #3", false),
    ("0 0 0 ? * 6#", false),
    ("0 0 0 ? * LL", false),
    ("0 0 0 ? * 6W", false),
    ("0 0 0 ? * 6/2#1", false),
    ("0 0 0 ? * L,2", false),
    ("0 0 0 ? * 1-L", false),
    ("0 0 0 * * ? 2026W", false),
    ("0 0 0 * * ? 2027#1", false),
    ("0 0 12 * * ? 2027-2025", false),
    ("0 0 12 1 1 ? 2199/1", false),
    ("0 0 12 ? FOO *", false),
    ("0 0 12 ? * MO", false),
    ("0 0 12 ? JA *", false),
    ("0 0 12 ? * MON-3", false),
    ("0 0 12 ? * 2-WED", false),
    ("0 0 12 ? 1-MAR *", false),
    ("99999999999 * * * * ?", false),
    ("5-* * * * * ?", false),
    // Junk that Quartz accepts.
    ("0 0 12 * * ? * *", true),
    ("0 0 12 * * ? 2030 extra", true),
    ("1-5- * * * * ?", true),
    ("** * * * * ?", true),
    ("0/0 * * * * ?", true),
    ("*/0 * * * * ?", true),
    ("1-5/0 * * * * ?", true),
    ("0 0 0 1 1 ? 2026-2030/0", true),
    ("0 0 12 * * ?x", true),
    ("0 0 12 ? JANXYZ *", true),
    ("0 0 12 ? * MONKEY", true),
    ("0 0 12 ? * SUNX", true),
    ("0 0 12 ? * TUES", true),
    ("0 0 12 ? JAN/2 *", true),
    ("0 0 12 ? * MON/2", true),
    ("0 0 12 ? * MON-WED/2", true),
    ("/15 * * * * ?", true),
    ("0 0 0 0W * ?", true),
    ("0 0 0 15W,20 * ?", true),
    ("0 0 0 1,15W * ?", true),
    ("0 0 0 1-15W * ?", true),
    ("0 0 0 15WL * ?", true),
    ("0 0 0 15WW * ?", true),
    ("0 0 0 15W5 * ?", true),
    ("0 0 0 L-W * ?", true),
    ("0 0 0 ? * 6L-2", true),
    ("0 0 0 ? * L-2", true),
    ("0 0 0 ? * L-3", true),
    ("0 0 0 ? * 2,6#3", true),
    ("0 0 0 ? * 1-5#2", true),
    ("0 0 0 ? * 6Lx", true),
    ("0 0 0 ? * 1-3L", true),
    ("0 0 0 ? * 6L#2", true),
    ("0 0 0 * * ? L", true),
    ("0 0 L * * ?", true),
    ("0 0 0 * L ?", true),
    ("L 0 0 * * ?", true),
    ("0 0 0 ??  * 1", true),
    ("0 0 0 ?1 * 1", true),
    // L-nW beyond 27 falls before the start of February; Quartz can loop forever on it.
    ("0 0 12 L-28W * ?", true),
    ("0 0 12 L-29W * ?", true),
    ("0 0 12 L-30W * ?", true),
    ("0 0 12 * * ? 1969", true),
    ("0 0 12 * * ? 3000", true),
    ("0 0 12 * * ? 99999", true),
];

/// Random invalid expressions: a valid one with one field broken.
fn gen_invalid(r: &mut Rng) -> String {
    let base = gen_valid(r);
    let mut fields: Vec<String> = base
        .split([' ', '\t'])
        .filter(|f| !f.is_empty())
        .map(String::from)
        .collect();
    let i = r.int(0, 5) as usize;
    let broken = match i {
        0 | 1 => r
            .pick(&["60", "61", "0-60", "*/60", "70/5", "L", "5W", "1#2"])
            .to_string(),
        2 => r
            .pick(&["24", "0-24", "25/2", "*/24", "L", "?"])
            .to_string(),
        3 => r
            .pick(&["0", "32", "0-5", "L-31", "32W", "?,1", "1-32", "2#1"])
            .to_string(),
        4 => r
            .pick(&["0", "13", "0-5", "FOO", "*/13", "12-13", "L", "?"])
            .to_string(),
        _ => r
            .pick(&["0", "8", "1-8", "0L", "8#1", "1#6", "1#0", "*/8", "W"])
            .to_string(),
    };
    fields[i] = broken;
    fields.join(" ")
}

// ---------------------------------------------------------------------------------------------
// Start instants.

fn offset_at(tz: &Tz, secs: i64) -> i32 {
    let at = DateTime::from_timestamp(secs, 0).unwrap_or_default();
    tz.offset_from_utc_datetime(&at.naive_utc())
        .fix()
        .local_minus_utc()
}

/// Instants (UTC seconds) where the zone's offset changes during `year`, with the change in
/// seconds (positive when clocks go forward).
fn transitions(tz: &Tz, year: i32) -> Vec<(i64, i64)> {
    let start = Utc
        .with_ymd_and_hms(year, 1, 1, 0, 0, 0)
        .single()
        .map(|d| d.timestamp())
        .unwrap_or_default();
    let end = start + 366 * 86_400;
    let mut out = Vec::new();
    let mut t = start;
    let mut off = offset_at(tz, t);
    while t < end {
        let next = t + 3_600;
        let next_off = offset_at(tz, next);
        if next_off != off {
            // First second with the new offset.
            let (mut lo, mut hi) = (t, next);
            while hi - lo > 1 {
                let mid = (lo + hi) / 2;
                if offset_at(tz, mid) == off {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            out.push((hi, i64::from(next_off - off)));
            off = next_off;
        }
        t = next;
    }
    out
}

fn random_instant_ms(r: &mut Rng) -> i64 {
    // 2001-01-01 .. 2036-12-31
    let secs = r.int(978_307_200, 2_114_294_400);
    let ms = if r.chance(15) { r.int(0, 999) } else { 0 };
    secs * 1_000 + ms
}

/// Start instants around one transition at `t` (UTC seconds) of size `delta` seconds.
fn around_transition(r: &mut Rng, t: i64, delta: i64) -> Vec<i64> {
    let d = delta.abs();
    vec![
        t - d - r.int(1, 3_600),
        t - r.int(1, d),
        t - 1,
        t,
        t + r.int(0, d - 1),
        t + d - 1,
    ]
    .into_iter()
    .map(|s| s * 1_000)
    .collect()
}

// ---------------------------------------------------------------------------------------------
// Cases and the oracle.

struct Case {
    expr: String,
    zone: &'static str,
    start_ms: i64,
    /// 0 for invalid expressions (parse only).
    count: usize,
    junk: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Fires(Vec<i64>),
    Refused(String),
    Other(String),
}

fn escape(expr: &str) -> String {
    expr.replace('\\', "\\\\").replace('\t', "\\t")
}

fn find_tool(name: &str) -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let p = Path::new(&home).join("bin").join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

fn run_oracle(cases: &[Case]) -> Vec<Outcome> {
    let javac = find_tool("javac").unwrap_or_else(|| {
        panic!("`javac` not found (JAVA_HOME/bin or PATH); install it: {INSTALL_HINT}")
    });
    let java = find_tool("java").unwrap_or_else(|| {
        panic!("`java` not found (JAVA_HOME/bin or PATH); install it: {INSTALL_HINT}")
    });
    for jar in JARS {
        assert!(
            Path::new(jar).is_file(),
            "{jar} is missing; the Quartz reference needs it: {INSTALL_HINT}"
        );
    }
    let classpath = JARS.join(":");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("cannot create a temp dir: {e}"));
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scheduling/quartz/QuartzOracle.java");
    let status = Command::new(&javac)
        .arg("-cp")
        .arg(&classpath)
        .arg("-d")
        .arg(dir.path())
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL_HINT}", javac.display()));
    assert!(status.success(), "javac failed on {}", source.display());

    let mut input = String::new();
    for (i, c) in cases.iter().enumerate() {
        let _ = writeln!(
            input,
            "{i}\t{}\t{}\t{}\t{}",
            escape(&c.expr),
            c.zone,
            c.start_ms,
            c.count
        );
    }
    if let Some(path) = std::env::var_os("QUARTZ_ORACLE_DUMP") {
        let _ = std::fs::write(path, &input);
    }
    let mut child = Command::new(&java)
        .arg("-cp")
        .arg(format!("{classpath}:{}", dir.path().display()))
        .arg("QuartzOracle")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL_HINT}", java.display()));
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("oracle failed: {e}"));
    let _ = writer.join();
    assert!(
        output.status.success(),
        "oracle exited with {}",
        output.status
    );

    let text = String::from_utf8_lossy(&output.stdout);
    let mut results: Vec<Option<Outcome>> = vec![None; cases.len()];
    for line in text.lines() {
        let mut parts = line.splitn(3, '\t');
        let id: usize = parts
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad oracle line {line:?}"));
        let status = parts.next().unwrap_or("");
        let rest = parts.next().unwrap_or("");
        let outcome = match status {
            "OK" => Outcome::Fires(
                rest.split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse().unwrap_or_else(|_| panic!("bad time {s:?}")))
                    .collect(),
            ),
            "ERR" => Outcome::Refused(rest.to_string()),
            other => Outcome::Other(format!("{other} {rest}")),
        };
        results[id] = Some(outcome);
    }
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.unwrap_or_else(|| panic!("oracle gave no answer for case {i}")))
        .collect()
}

fn ours(case: &Case, parsed: &HashMap<String, Result<CronSpec, String>>) -> Outcome {
    match &parsed[&case.expr] {
        Err(e) => Outcome::Refused(e.clone()),
        Ok(spec) => {
            let tz: Tz = case
                .zone
                .parse()
                .unwrap_or_else(|e| panic!("zone {}: {e}", case.zone));
            let start = DateTime::from_timestamp_millis(case.start_ms)
                .unwrap_or_else(|| panic!("bad start {}", case.start_ms));
            Outcome::Fires(
                spec.iter_after(start, tz)
                    .take(case.count)
                    .map(|t| t.timestamp_millis())
                    .collect(),
            )
        }
    }
}

fn comparable(times: &[i64]) -> Vec<i64> {
    times
        .iter()
        .copied()
        .take_while(|t| *t < COMPARE_BEFORE_MS)
        .collect()
}

fn show(outcome: &Outcome, zone: &str) -> String {
    let tz: Tz = zone.parse().unwrap_or(chrono_tz::UTC);
    match outcome {
        Outcome::Fires(ts) => ts
            .iter()
            .map(|t| {
                DateTime::from_timestamp_millis(*t)
                    .map(|d| {
                        d.with_timezone(&tz)
                            .format("%Y-%m-%dT%H:%M:%S%:z")
                            .to_string()
                    })
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join(" "),
        Outcome::Refused(m) => format!("refused: {m}"),
        Outcome::Other(m) => m.clone(),
    }
}

#[test]
fn cron_spec_agrees_with_quartz() {
    let started = Instant::now();
    let mut r = Rng(0x5EED_C0DE_2026);
    let mut cases: Vec<Case> = Vec::new();
    let mut valid: Vec<String> = Vec::new();

    // Curated and random expressions, in every zone, from random and DST-edge instants.
    let mut general: Vec<String> = CURATED.iter().map(|s| s.to_string()).collect();
    while general.len() < CURATED.len() + GENERATED {
        let e = gen_valid(&mut r);
        if !general.contains(&e) {
            general.push(e);
        }
    }
    let transitions_by_zone: HashMap<&str, Vec<(i64, i64)>> = DST_ZONES
        .iter()
        .map(|z| {
            let tz: Tz = z.parse().unwrap_or(chrono_tz::UTC);
            let all = (2001..=2036).flat_map(|y| transitions(&tz, y)).collect();
            (*z, all)
        })
        .collect();
    for expr in &general {
        valid.push(expr.clone());
        for zone in ZONES {
            let mut starts = vec![random_instant_ms(&mut r), random_instant_ms(&mut r)];
            match transitions_by_zone.get(zone) {
                Some(ts) if !ts.is_empty() => {
                    for _ in 0..3 {
                        let (t, d) = ts[r.int(0, ts.len() as i64 - 1) as usize];
                        let around = around_transition(&mut r, t, d);
                        starts.push(around[r.int(0, 5) as usize]);
                    }
                }
                _ => {
                    starts.push(random_instant_ms(&mut r));
                    starts.push(random_instant_ms(&mut r));
                }
            }
            for start_ms in starts {
                cases.push(Case {
                    expr: expr.clone(),
                    zone,
                    start_ms,
                    count: FIRES,
                    junk: None,
                });
            }
        }
    }

    // Day rules from many start days.
    for expr in day_rule_sweep() {
        valid.push(expr.clone());
        for zone in ["UTC", "America/New_York", "Australia/Lord_Howe"] {
            for _ in 0..30 {
                // Random day in 2024-2031, at a time near the fire time or midnight.
                let day = r.int(19_723, 22_644) * 86_400;
                let secs =
                    day + *r.pick(&[&0, &21_600, &43_199, &43_200, &43_201, &46_800, &86_399]);
                cases.push(Case {
                    expr: expr.clone(),
                    zone,
                    start_ms: secs * 1_000,
                    count: FIRES,
                    junk: None,
                });
            }
        }
    }

    // DST: every expression from every edge of transitions in a few years; the fixed list plus
    // random expressions with busy time-of-day fields and day rules.
    let mut dst_sweep: Vec<String> = DST_SWEEP.iter().map(|s| s.to_string()).collect();
    while dst_sweep.len() < DST_SWEEP.len() + DST_GENERATED {
        let e = gen_dst_expression(&mut r);
        if !dst_sweep.contains(&e) && !general.contains(&e) {
            dst_sweep.push(e);
        }
    }
    for expr in &dst_sweep {
        valid.push(expr.to_string());
        for zone in DST_ZONES {
            let ts: Vec<(i64, i64)> = [2024, 2027, 2031, 2035]
                .iter()
                .flat_map(|y| {
                    let tz: Tz = zone.parse().unwrap_or(chrono_tz::UTC);
                    transitions(&tz, *y)
                })
                .collect();
            for (t, d) in ts {
                for start_s in around_transition(&mut r, t, d) {
                    cases.push(Case {
                        expr: expr.to_string(),
                        zone,
                        start_ms: start_s,
                        count: FIRES,
                        junk: None,
                    });
                }
            }
        }
    }

    // Invalid expressions: parse only.
    let mut invalid: Vec<(String, Option<bool>)> = INVALID
        .iter()
        .map(|(e, j)| (e.to_string(), Some(*j)))
        .collect();
    for _ in 0..60 {
        invalid.push((gen_invalid(&mut r), None));
    }
    for (expr, junk) in &invalid {
        cases.push(Case {
            expr: expr.clone(),
            zone: "UTC",
            start_ms: 1_780_000_000_000,
            count: 0,
            junk: Some(junk.unwrap_or(false)),
        });
    }

    let oracle_started = Instant::now();
    let reference = run_oracle(&cases);
    let oracle_time = oracle_started.elapsed();

    let ours_started = Instant::now();
    let mut parsed: HashMap<String, Result<CronSpec, String>> = HashMap::new();
    for c in &cases {
        parsed
            .entry(c.expr.clone())
            .or_insert_with(|| CronSpec::parse(&c.expr).map_err(|e| e.to_string()));
    }
    let mut agreements = 0usize;
    let mut refused_junk: Vec<(String, String)> = Vec::new();
    let mut disagreements: Vec<String> = Vec::new();
    let mut quartz_refused = 0usize;
    for (case, theirs) in cases.iter().zip(&reference) {
        let mine = ours(case, &parsed);
        let start = DateTime::from_timestamp_millis(case.start_ms)
            .map(|d| d.to_rfc3339())
            .unwrap_or_default();
        let agree = match (&mine, theirs) {
            // Generated "valid" expressions must be valid; invalid ones must be refused by both.
            (Outcome::Refused(_), Outcome::Refused(_)) if case.count == 0 => {
                quartz_refused += 1;
                true
            }
            (Outcome::Fires(a), Outcome::Fires(b)) if case.count > 0 => {
                comparable(a) == comparable(b)
            }
            (Outcome::Refused(why), Outcome::Fires(_) | Outcome::Other(_)) if case.count == 0 => {
                // Quartz accepts it; we refuse it as junk. Allowed, counted, listed.
                refused_junk.push((case.expr.clone(), why.clone()));
                true
            }
            _ => false,
        };
        if agree {
            agreements += 1;
        } else {
            disagreements.push(format!(
                "{:?} in {} after {start}:\n    quartz: {}\n    ours:   {}",
                case.expr,
                case.zone,
                show(theirs, case.zone),
                show(&mine, case.zone)
            ));
        }
        // Junk marked as accepted by Quartz must really be accepted by it (keeps the list true).
        if case.junk == Some(true) && matches!(theirs, Outcome::Refused(_)) {
            disagreements.push(format!(
                "{:?} is listed as junk Quartz accepts, but Quartz refuses it",
                case.expr
            ));
        }
    }
    let ours_time = ours_started.elapsed();

    let mut summary = String::new();
    let _ = writeln!(summary, "Quartz differential summary");
    let _ = writeln!(
        summary,
        "  valid expressions: {} ({} curated, {} generated, {} day-rule sweep, {} DST sweep)",
        valid.len(),
        CURATED.len(),
        general.len() - CURATED.len(),
        day_rule_sweep().len(),
        dst_sweep.len()
    );
    let _ = writeln!(summary, "  invalid expressions: {}", invalid.len());
    let _ = writeln!(summary, "  zones: {}", ZONES.join(", "));
    let _ = writeln!(
        summary,
        "  cases: {} ({} with {FIRES} fire times, {} parse-only)",
        cases.len(),
        cases.iter().filter(|c| c.count > 0).count(),
        cases.iter().filter(|c| c.count == 0).count()
    );
    let _ = writeln!(summary, "  agreements: {agreements} / {}", cases.len());
    let _ = writeln!(
        summary,
        "  invalid expressions refused by both: {quartz_refused}"
    );
    let _ = writeln!(
        summary,
        "  refused junk (Quartz accepts, we refuse): {}",
        refused_junk.len()
    );
    for (expr, why) in &refused_junk {
        let _ = writeln!(summary, "    {expr:?}: {why}");
    }
    let _ = writeln!(
        summary,
        "  time: oracle {:.1?}, CronSpec {:.1?}, total {:.1?}",
        oracle_time,
        ours_time,
        started.elapsed()
    );
    println!("{summary}");

    if !disagreements.is_empty() {
        let shown: Vec<&String> = disagreements.iter().take(25).collect();
        panic!(
            "{} disagreement(s) with Quartz; first {}:\n{}\n\n{summary}",
            disagreements.len(),
            shown.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

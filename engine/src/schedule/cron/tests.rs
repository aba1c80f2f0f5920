//! Behaviour of [`CronSpec`]. Expected values were taken from Quartz 2.3.2; the broad comparison
//! with Quartz itself lives in `engine/tests/scheduling/quartz_differential.rs`.

use std::time::{Duration, Instant};

use chrono_tz::America::New_York;
use chrono_tz::Asia::Kolkata;
use chrono_tz::Australia::Lord_Howe;
use chrono_tz::Tz;

use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.to_utc())
        .unwrap_or_else(|e| panic!("bad test instant {s}: {e}"))
}

fn spec(expr: &str) -> CronSpec {
    CronSpec::parse(expr).unwrap_or_else(|e| panic!("{expr:?} should parse: {e}"))
}

fn refused(expr: &str) -> CronError {
    match CronSpec::parse(expr) {
        Ok(_) => panic!("{expr:?} should be refused"),
        Err(e) => e,
    }
}

/// The next `n` fire times, as RFC 3339 strings in the zone (easy to compare with a calendar).
fn next(expr: &str, tz: Tz, after: &str, n: usize) -> Vec<String> {
    spec(expr)
        .iter_after(utc(after), tz)
        .take(n)
        .map(|t| t.with_timezone(&tz).to_rfc3339())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Refusals.

#[test]
fn five_field_expression_is_refused_asking_for_seconds() {
    let e = refused("0 12 * * *");
    assert_eq!(e.field, None);
    assert!(e.message.contains("expected 6 or 7 fields"), "{e}");
    assert!(e.message.contains("seconds field required"), "{e}");
}

#[test]
fn more_than_seven_fields_are_refused() {
    let e = refused("0 0 12 * * ? 2030 *");
    assert!(e.message.contains("found 8"), "{e}");
}

#[test]
fn empty_expression_is_refused() {
    assert!(refused("   ").message.contains("empty"));
}

#[test]
fn both_day_fields_specified_is_refused() {
    for expr in [
        "0 0 12 * * *",
        "0 0 12 13 * FRI",
        "0 0 0 L * 6L",
        "0 0 0 15 * 1-7",
    ] {
        let e = refused(expr);
        assert_eq!(e.field, Some(CronField::DayOfWeek), "{expr}");
        assert!(
            e.message.contains(
                "day-of-month and day-of-week cannot both be specified; use ? in one of them"
            ),
            "{expr}: {e}"
        );
    }
}

#[test]
fn question_mark_in_both_day_fields_is_refused() {
    let e = refused("0 0 12 ? * ?");
    assert_eq!(e.field, Some(CronField::DayOfWeek));
    assert!(e.message.contains("both"), "{e}");
}

#[test]
fn question_mark_outside_the_day_fields_is_refused() {
    assert_eq!(refused("? 0 12 * * ?").field, Some(CronField::Second));
    assert_eq!(refused("0 0 12 * ? ?").field, Some(CronField::Month));
    assert_eq!(refused("0 0 12 * * ? ?").field, Some(CronField::Year));
    assert_eq!(refused("0 0 12 ?,1 * ?").field, Some(CronField::DayOfMonth));
}

#[test]
fn day_of_week_zero_is_refused_with_sunday_numbering_hint() {
    assert_eq!(
        refused("0 0 12 ? * 0").to_string(),
        "day-of-week: value 0 out of range 1-7 (1=SUN ... 7=SAT)"
    );
}

#[test]
fn out_of_range_values_name_their_field() {
    let cases = [
        (
            "60 * * * * ?",
            CronField::Second,
            "value 60 out of range 0-59",
        ),
        (
            "0 60 * * * ?",
            CronField::Minute,
            "value 60 out of range 0-59",
        ),
        (
            "0 0 24 * * ?",
            CronField::Hour,
            "value 24 out of range 0-23",
        ),
        (
            "0 0 12 32 * ?",
            CronField::DayOfMonth,
            "value 32 out of range 1-31",
        ),
        (
            "0 0 12 0 * ?",
            CronField::DayOfMonth,
            "value 0 out of range 1-31",
        ),
        (
            "0 0 12 ? 13 *",
            CronField::Month,
            "value 13 out of range 1-12",
        ),
        (
            "0 0 12 ? * 1-8",
            CronField::DayOfWeek,
            "value 8 out of range 1-7",
        ),
        (
            "0 0 12 * * ? 1969",
            CronField::Year,
            "value 1969 out of range 1970-2199",
        ),
        (
            "0 0 12 * * ? 3000",
            CronField::Year,
            "value 3000 out of range 1970-2199",
        ),
    ];
    for (expr, field, text) in cases {
        let e = refused(expr);
        assert_eq!(e.field, Some(field), "{expr}: {e}");
        assert!(e.message.contains(text), "{expr}: {e}");
    }
}

#[test]
fn steps_must_be_between_one_and_the_field_size() {
    assert!(
        refused("0/60 * * * * ?")
            .message
            .contains("step 60 too large")
    );
    assert!(
        refused("0 0 0/24 * * ?")
            .message
            .contains("step 24 too large")
    );
    assert!(refused("*/0 * * * * ?").message.contains("at least 1"));
    assert!(
        refused("0 0 0 1 1 ? 2026-2030/0")
            .message
            .contains("at least 1")
    );
}

#[test]
fn junk_that_quartz_silently_accepts_is_refused_with_the_field() {
    let cases = [
        ("** * * * * ?", CronField::Second),
        ("1-5- * * * * ?", CronField::Second),
        ("/15 * * * * ?", CronField::Second),
        ("0 0 12 * * ?x", CronField::DayOfWeek),
        ("0 0 12 ? * MONKEY", CronField::DayOfWeek),
        ("0 0 12 ? JANXYZ *", CronField::Month),
        ("0 0 12 ? * MON-WED/2", CronField::DayOfWeek),
        ("0 0 0 1,15W * ?", CronField::DayOfMonth),
        ("0 0 0 15WW * ?", CronField::DayOfMonth),
        ("0 0 0 0W * ?", CronField::DayOfMonth),
        ("0 0 0 L-28W * ?", CronField::DayOfMonth),
        ("0 0 0 ? * 2,6#3", CronField::DayOfWeek),
        ("0 0 0 ? * 1-5#2", CronField::DayOfWeek),
        ("0 0 0 ? * 6Lx", CronField::DayOfWeek),
        ("0 0 0 ? * L-2", CronField::DayOfWeek),
        ("L 0 0 * * ?", CronField::Second),
        ("0 0 0 * * ? 2026W", CronField::Year),
    ];
    for (expr, field) in cases {
        assert_eq!(refused(expr).field, Some(field), "{expr}");
    }
}

#[test]
fn quartz_refusals_are_refused_too() {
    for expr in [
        "0 0 0 L-31 * ?",
        "0 0 0 L,15 * ?",
        "0 0 0 32W * ?",
        "0 0 0 15L * ?",
        "0 0 0 ? * 6#6",
        "0 0 0 ? * 6#3,2#1",
        "0 0 0 ? * 6W",
        "0 0 12 * * ? 2027-2025",
        "0 0 12 ? * MON-3",
        "99999999999 * * * * ?",
    ] {
        refused(expr);
    }
}

// ---------------------------------------------------------------------------------------------
// The type.

#[test]
fn source_is_kept_trimmed_and_displayed() {
    let s: CronSpec = "  0 0 12 * * ?\t".parse().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.source(), "0 0 12 * * ?");
    assert_eq!(s.to_string(), "0 0 12 * * ?");
    assert_eq!(s, spec("0 0 12 * * ?"));
}

#[test]
fn serde_uses_the_expression_text() {
    let s = spec("0 15 10 ? * MON-FRI");
    let json = serde_json::to_string(&s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json, "\"0 15 10 ? * MON-FRI\"");
    let back: CronSpec = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, s);
    assert!(serde_json::from_str::<CronSpec>("\"0 0 12 * * *\"").is_err());
}

#[test]
fn cron_fields_display_their_names() {
    let names: Vec<String> = CronField::ALL.iter().map(ToString::to_string).collect();
    assert_eq!(
        names,
        [
            "second",
            "minute",
            "hour",
            "day-of-month",
            "month",
            "day-of-week",
            "year"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Fire times (UTC).

#[test]
fn daily_noon_fires_every_day_at_noon() {
    assert_eq!(
        next("0 0 12 * * ?", chrono_tz::UTC, "2026-06-01T00:00:00Z", 3),
        [
            "2026-06-01T12:00:00+00:00",
            "2026-06-02T12:00:00+00:00",
            "2026-06-03T12:00:00+00:00"
        ]
    );
}

#[test]
fn day_of_week_counts_from_sunday() {
    // 2026-06-01 is a Monday.
    let sundays = next("0 0 12 ? * 1", chrono_tz::UTC, "2026-06-01T00:00:00Z", 1);
    assert_eq!(sundays, ["2026-06-07T12:00:00+00:00"]);
    let saturdays = next("0 0 12 ? * 7", chrono_tz::UTC, "2026-06-01T00:00:00Z", 1);
    assert_eq!(saturdays, ["2026-06-06T12:00:00+00:00"]);
    let named = next("0 0 12 ? * sat", chrono_tz::UTC, "2026-06-01T00:00:00Z", 1);
    assert_eq!(named, saturdays);
}

#[test]
fn names_are_case_insensitive_and_may_be_spelled_out() {
    let a = next(
        "0 0 12 ? JAN MON",
        chrono_tz::UTC,
        "2026-06-01T00:00:00Z",
        3,
    );
    assert_eq!(
        a,
        next(
            "0 0 12 ? january Monday",
            chrono_tz::UTC,
            "2026-06-01T00:00:00Z",
            3
        )
    );
    assert_eq!(a[0], "2027-01-04T12:00:00+00:00");
}

#[test]
fn wrap_around_hour_range_crosses_midnight() {
    assert_eq!(
        next("0 0 22-2 * * ?", chrono_tz::UTC, "2026-06-01T03:00:00Z", 5),
        [
            "2026-06-01T22:00:00+00:00",
            "2026-06-01T23:00:00+00:00",
            "2026-06-02T00:00:00+00:00",
            "2026-06-02T01:00:00+00:00",
            "2026-06-02T02:00:00+00:00"
        ]
    );
}

#[test]
fn wrap_around_weekday_range_runs_friday_to_monday() {
    assert_eq!(
        next(
            "0 0 12 ? * FRI-MON",
            chrono_tz::UTC,
            "2026-06-02T00:00:00Z",
            4
        ),
        [
            "2026-06-05T12:00:00+00:00",
            "2026-06-06T12:00:00+00:00",
            "2026-06-07T12:00:00+00:00",
            "2026-06-08T12:00:00+00:00"
        ]
    );
}

#[test]
fn stepped_wrap_around_range_continues_past_the_end() {
    let secs: Vec<String> = next(
        "50-10/5 * * * * ?",
        chrono_tz::UTC,
        "2026-06-01T00:00:49Z",
        5,
    );
    assert_eq!(
        secs,
        [
            "2026-06-01T00:00:50+00:00",
            "2026-06-01T00:00:55+00:00",
            "2026-06-01T00:01:00+00:00",
            "2026-06-01T00:01:05+00:00",
            "2026-06-01T00:01:10+00:00"
        ]
    );
}

#[test]
fn steps_start_from_the_given_value() {
    assert_eq!(
        next("0 7/20 * * * ?", chrono_tz::UTC, "2026-06-01T00:00:00Z", 4),
        [
            "2026-06-01T00:07:00+00:00",
            "2026-06-01T00:27:00+00:00",
            "2026-06-01T00:47:00+00:00",
            "2026-06-01T01:07:00+00:00"
        ]
    );
}

#[test]
fn last_day_of_month_follows_february() {
    assert_eq!(
        next("0 0 12 L * ?", chrono_tz::UTC, "2028-01-31T13:00:00Z", 2),
        ["2028-02-29T12:00:00+00:00", "2028-03-31T12:00:00+00:00"]
    );
}

#[test]
fn last_day_offset_skips_months_too_short_for_it() {
    // L-30 is the 1st of 31-day months and does not exist in shorter ones.
    assert_eq!(
        next("0 0 12 L-30 * ?", chrono_tz::UTC, "2027-04-01T00:00:00Z", 3),
        [
            "2027-05-01T12:00:00+00:00",
            "2027-07-01T12:00:00+00:00",
            "2027-08-01T12:00:00+00:00"
        ]
    );
}

#[test]
fn last_weekday_of_month_avoids_the_weekend() {
    // 2027-07-31 is a Saturday, 2027-10-31 a Sunday.
    assert_eq!(
        next("0 0 12 LW * ?", chrono_tz::UTC, "2027-07-01T00:00:00Z", 4),
        [
            "2027-07-30T12:00:00+00:00",
            "2027-08-31T12:00:00+00:00",
            "2027-09-30T12:00:00+00:00",
            "2027-10-29T12:00:00+00:00"
        ]
    );
}

#[test]
fn nearest_weekday_stays_inside_the_month() {
    // 2027-05-01 is a Saturday: 1W moves forward to Monday the 3rd, not back into April.
    assert_eq!(
        next("0 0 12 1W * ?", chrono_tz::UTC, "2027-04-01T00:00:00Z", 3),
        [
            "2027-04-01T12:00:00+00:00",
            "2027-05-03T12:00:00+00:00",
            "2027-06-01T12:00:00+00:00"
        ]
    );
    // 2027-10-31 is a Sunday and the last day: 31W moves back to Friday the 29th.
    assert_eq!(
        next("0 0 12 31W * ?", chrono_tz::UTC, "2027-10-01T00:00:00Z", 1),
        ["2027-10-29T12:00:00+00:00"]
    );
}

#[test]
fn nearest_weekday_past_month_end_fires_only_before_a_saturday() {
    // Quartz reads 31W in April as May 1st; 2027-05-01 is a Saturday, so it fires on Friday
    // April 30th. June 31st (July 1st, a Thursday) gives nothing in June.
    assert_eq!(
        next("0 0 12 31W * ?", chrono_tz::UTC, "2027-04-01T00:00:00Z", 3),
        [
            "2027-04-30T12:00:00+00:00",
            "2027-05-31T12:00:00+00:00",
            "2027-07-30T12:00:00+00:00"
        ]
    );
}

#[test]
fn nearest_weekday_may_fall_before_the_day_and_still_fire() {
    // 2001-09-15 is a Saturday: after firing on August 15th the next is Friday September 14th.
    assert_eq!(
        next("0 0 12 15W * ?", chrono_tz::UTC, "2001-08-15T12:00:00Z", 2),
        ["2001-09-14T12:00:00+00:00", "2001-10-15T12:00:00+00:00"]
    );
}

#[test]
fn nth_weekday_skips_months_without_it() {
    assert_eq!(
        next("0 0 12 ? * 6#5", chrono_tz::UTC, "2027-04-01T00:00:00Z", 3),
        [
            "2027-04-30T12:00:00+00:00",
            "2027-07-30T12:00:00+00:00",
            "2027-10-29T12:00:00+00:00"
        ]
    );
    assert_eq!(
        next(
            "0 0 12 ? * FRI#3",
            chrono_tz::UTC,
            "2026-06-01T00:00:00Z",
            2
        ),
        ["2026-06-19T12:00:00+00:00", "2026-07-17T12:00:00+00:00"]
    );
}

#[test]
fn last_given_weekday_of_month() {
    assert_eq!(
        next("0 0 12 ? * 6L", chrono_tz::UTC, "2026-06-01T00:00:00Z", 3),
        [
            "2026-06-26T12:00:00+00:00",
            "2026-07-31T12:00:00+00:00",
            "2026-08-28T12:00:00+00:00"
        ]
    );
}

#[test]
fn year_field_limits_fire_times() {
    assert_eq!(
        next(
            "0 0 12 1 1 ? 2027,2029",
            chrono_tz::UTC,
            "2026-06-01T00:00:00Z",
            3
        ),
        ["2027-01-01T12:00:00+00:00", "2029-01-01T12:00:00+00:00"]
    );
    assert!(
        next(
            "0 0 12 * * ? 2020",
            chrono_tz::UTC,
            "2026-06-01T00:00:00Z",
            1
        )
        .is_empty()
    );
}

#[test]
fn impossible_date_returns_none_quickly() {
    let s = spec("0 0 0 30 2 ?");
    let started = Instant::now();
    assert_eq!(
        s.next_after(utc("2026-06-01T00:00:00Z"), &chrono_tz::UTC),
        None
    );
    assert_eq!(s.next_after(utc("2026-06-01T00:00:00Z"), &New_York), None);
    // A search that walked every day to its horizon would take seconds here.
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn years_beyond_the_horizon_never_fire() {
    let horizon = horizon_year();
    assert_eq!(horizon, Utc::now().year() + 100);
    let at_horizon = spec(&format!("0 0 12 1 1 ? {horizon}"));
    assert!(
        at_horizon
            .next_after(utc("2026-06-01T00:00:00Z"), &chrono_tz::UTC)
            .is_some()
    );
    let beyond = spec(&format!("0 0 12 1 1 ? {}", horizon + 1));
    assert_eq!(
        beyond.next_after(utc("2026-06-01T00:00:00Z"), &chrono_tz::UTC),
        None
    );
}

#[test]
fn next_after_is_strictly_after_and_ignores_sub_seconds() {
    let every_second = spec("* * * * * ?");
    let z = chrono_tz::UTC;
    assert_eq!(
        every_second.next_after(utc("2026-06-01T12:00:00Z"), &z),
        Some(utc("2026-06-01T12:00:01Z"))
    );
    assert_eq!(
        every_second.next_after(utc("2026-06-01T12:00:00.500Z"), &z),
        Some(utc("2026-06-01T12:00:01Z"))
    );
    assert_eq!(
        spec("0 0 12 * * ?").next_after(utc("2026-06-01T11:59:59.999Z"), &z),
        Some(utc("2026-06-01T12:00:00Z"))
    );
}

#[test]
fn half_hour_zone_offsets_apply() {
    assert_eq!(
        spec("0 0 12 * * ?").next_after(utc("2026-06-01T00:00:00Z"), &Kolkata),
        Some(utc("2026-06-01T06:30:00Z"))
    );
}

// ---------------------------------------------------------------------------------------------
// Daylight saving (New York: 2027-03-14 02:00 -> 03:00, 2027-11-07 02:00 -> 01:00;
// Lord Howe: 2027-10-03 02:00 -> 02:30, 2027-04-04 02:00 -> 01:30).

#[test]
fn skipped_wall_time_never_fires_in_new_york() {
    assert_eq!(
        next("0 30 2 * * ?", New_York, "2027-03-14T05:00:00Z", 2),
        ["2027-03-15T02:30:00-04:00", "2027-03-16T02:30:00-04:00"]
    );
}

#[test]
fn interval_schedule_resumes_after_the_gap() {
    assert_eq!(
        next("0 0/30 1-3 * * ?", New_York, "2027-03-14T05:00:00Z", 4),
        [
            "2027-03-14T01:00:00-05:00",
            "2027-03-14T01:30:00-05:00",
            "2027-03-14T03:00:00-04:00",
            "2027-03-14T03:30:00-04:00"
        ]
    );
}

#[test]
fn repeated_wall_time_fires_once_on_the_later_pass() {
    assert_eq!(
        next("0 30 1 * * ?", New_York, "2027-11-07T04:00:00Z", 2),
        ["2027-11-07T01:30:00-05:00", "2027-11-08T01:30:00-05:00"]
    );
}

#[test]
fn interval_schedule_skips_the_first_pass_of_a_repeated_hour() {
    assert_eq!(
        next("0 0/30 0-2 * * ?", New_York, "2027-11-07T04:00:00Z", 4),
        [
            "2027-11-07T00:30:00-04:00",
            "2027-11-07T01:00:00-05:00",
            "2027-11-07T01:30:00-05:00",
            "2027-11-07T02:00:00-05:00"
        ]
    );
}

#[test]
fn search_from_inside_the_first_pass_continues_on_the_second_pass() {
    // 05:15Z is 01:15 EDT, the first pass of the repeated hour.
    assert_eq!(
        next("* * * * * ?", New_York, "2027-11-07T05:15:00Z", 1),
        ["2027-11-07T01:15:01-05:00"]
    );
}

#[test]
fn thirty_minute_gap_in_lord_howe_carries_the_search_forward() {
    // 02:10 does not exist and reads as 02:40, so 02:35 is passed over, as in Quartz.
    assert_eq!(
        next("0 10,35 * * * ?", Lord_Howe, "2027-10-02T14:45:00Z", 3),
        [
            "2027-10-03T01:35:00+10:30",
            "2027-10-03T03:10:00+11:00",
            "2027-10-03T03:35:00+11:00"
        ]
    );
    assert_eq!(
        next("0 20 2 * * ?", Lord_Howe, "2027-10-02T14:45:00Z", 1),
        ["2027-10-04T02:20:00+11:00"]
    );
}

#[test]
fn lord_howe_repeated_half_hour_fires_once() {
    assert_eq!(
        next("0 0/15 1 * * ?", Lord_Howe, "2027-04-03T14:00:00Z", 4),
        [
            "2027-04-04T01:15:00+11:00",
            "2027-04-04T01:30:00+10:30",
            "2027-04-04T01:45:00+10:30",
            "2027-04-05T01:00:00+10:30"
        ]
    );
}

#[test]
fn fire_times_strictly_increase_across_transitions() {
    let cases = [
        (New_York, "2027-11-07T03:00:00Z"),
        (New_York, "2027-03-14T05:00:00Z"),
        (Lord_Howe, "2027-04-03T13:00:00Z"),
        (Lord_Howe, "2027-10-02T14:00:00Z"),
    ];
    for expr in ["0 * * * * ?", "0 0/7 * * * ?", "30 59 * * * ?"] {
        for (tz, after) in cases {
            let times: Vec<_> = spec(expr).iter_after(utc(after), tz).take(300).collect();
            assert!(
                times.windows(2).all(|w| w[0] < w[1]),
                "{expr} in {tz} is not increasing"
            );
        }
    }
}

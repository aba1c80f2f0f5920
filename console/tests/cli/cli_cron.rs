//! `mthpt cron next`, run as a real process.

use std::process::{Command, Output};

fn mthpt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mthpt"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run mthpt: {e}"))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn next_prints_fire_times_as_utc_instants() {
    let o = mthpt(&[
        "cron",
        "next",
        "0 0 12 * * ?",
        "--after",
        "2026-06-01T00:00:00Z",
        "--count",
        "3",
    ]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "2026-06-01T12:00:00Z\n2026-06-02T12:00:00Z\n2026-06-03T12:00:00Z\n"
    );
}

#[test]
fn next_prints_five_by_default() {
    let o = mthpt(&[
        "cron",
        "next",
        "0 0 12 * * ?",
        "--after",
        "2026-06-01T00:00:00Z",
    ]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 5);
}

#[test]
fn next_without_after_starts_from_now() {
    let o = mthpt(&["cron", "next", "* * * * * ?", "--count", "2"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let lines: Vec<String> = stdout(&o).lines().map(String::from).collect();
    assert_eq!(lines.len(), 2);
    let first = chrono::DateTime::parse_from_rfc3339(&lines[0])
        .unwrap_or_else(|e| panic!("{}: {e}", lines[0]));
    let lag = (first.to_utc() - chrono::Utc::now()).num_seconds().abs();
    assert!(lag < 60, "first fire time {first} is not near now");
}

#[test]
fn next_follows_the_wall_clock_of_the_zone() {
    let o = mthpt(&[
        "cron",
        "next",
        "0 0 9 ? * MON-FRI",
        "--tz",
        "America/New_York",
        "--after",
        "2026-06-05T14:00:00Z",
        "--count",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    // Friday 2026-06-05 09:00 EDT has passed; next are Monday and Tuesday.
    assert_eq!(stdout(&o), "2026-06-08T13:00:00Z\n2026-06-09T13:00:00Z\n");
}

#[test]
fn both_day_fields_specified_exits_2_naming_the_rule() {
    let o = mthpt(&["cron", "next", "0 0 12 * * *"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).is_empty());
    let err = stderr(&o);
    assert!(
        err.contains("day-of-week")
            && err.contains("day-of-month and day-of-week cannot both be specified"),
        "{err}"
    );
}

#[test]
fn five_field_expression_exits_2_asking_for_seconds() {
    let o = mthpt(&["cron", "next", "0 12 * * *"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("seconds field required"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn out_of_range_value_exits_2_naming_the_field() {
    let o = mthpt(&["cron", "next", "0 0 12 ? * 0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("day-of-week: value 0 out of range 1-7 (1=SUN ... 7=SAT)"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn unknown_zone_exits_2() {
    let o = mthpt(&["cron", "next", "0 0 12 * * ?", "--tz", "Mars/Olympus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--tz `Mars/Olympus`"), "{}", stderr(&o));
}

#[test]
fn malformed_after_exits_2() {
    let o = mthpt(&["cron", "next", "0 0 12 * * ?", "--after", "yesterday"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--after `yesterday`"), "{}", stderr(&o));
}

#[test]
fn schedule_ending_early_prints_what_there_is() {
    let o = mthpt(&[
        "cron",
        "next",
        "0 0 12 1 1 ? 2027",
        "--after",
        "2026-06-01T00:00:00Z",
        "--count",
        "3",
    ]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(stdout(&o), "2027-01-01T12:00:00Z\n");
    assert!(stderr(&o).contains("only 1 of 3"), "{}", stderr(&o));

    let o = mthpt(&[
        "cron",
        "next",
        "0 0 12 * * ? 2020",
        "--after",
        "2026-06-01T00:00:00Z",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).is_empty());
    assert!(stderr(&o).contains("only 0 of 5"), "{}", stderr(&o));
}

//! Behaviour of [`CronSpec`]; the exhaustive comparison with Quartz lives in
//! `tests/quartz_differential.rs`.

use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.to_utc())
        .unwrap_or_else(|e| panic!("bad test instant {s}: {e}"))
}

#[test]
fn daily_noon_fires_every_day_at_noon() {
    let spec = CronSpec::parse("0 0 12 * * ?").unwrap_or_else(|e| panic!("{e}"));
    let got: Vec<_> = spec
        .iter_after(utc("2026-06-01T00:00:00Z"), chrono_tz::UTC)
        .take(3)
        .collect();
    assert_eq!(
        got,
        vec![
            utc("2026-06-01T12:00:00Z"),
            utc("2026-06-02T12:00:00Z"),
            utc("2026-06-03T12:00:00Z")
        ]
    );
}

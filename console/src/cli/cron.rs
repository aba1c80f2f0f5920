//! `mthpt cron`: inspect Quartz cron expressions.
//!
//! `mthpt cron next "<expr>" [--tz ZONE] [--after RFC3339] [--count N]` prints the next fire
//! times, one per line, as RFC 3339 UTC instants (`2026-06-01T12:00:00Z`). An invalid expression,
//! zone or `--after` is reported on stderr with exit code 2.

use std::io::Write;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use clap::{Args, Subcommand};
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::schedule::CronSpec;
use mthpt_engine::schedule::cron::horizon_year;

/// Arguments of `mthpt cron`.
#[derive(Debug, Args)]
pub struct CronArgs {
    #[command(subcommand)]
    pub command: CronCommand,
}

/// The subcommands of `mthpt cron`.
#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Print the next fire times of a Quartz cron expression
    /// (`sec min hour day-of-month month day-of-week [year]`, day-of-week 1=SUN ... 7=SAT).
    Next(NextArgs),
}

/// Arguments of `mthpt cron next`.
#[derive(Debug, Args)]
pub struct NextArgs {
    /// The expression, e.g. "0 0 12 * * ?" (every day at noon).
    pub expr: String,
    /// IANA time zone whose wall clock the expression follows.
    #[arg(long, default_value = "UTC")]
    pub tz: String,
    /// Print fire times strictly after this RFC 3339 instant (default: now).
    #[arg(long)]
    pub after: Option<String>,
    /// How many fire times to print.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub count: u32,
}

/// Exit code for invalid input.
const USAGE: u8 = 2;

/// Runs `mthpt cron` against the system clock, stdout and stderr.
pub fn run(args: CronArgs) -> ExitCode {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    execute(args, &SystemClock, &mut stdout.lock(), &mut stderr.lock())
}

/// Runs `mthpt cron` with the given clock and output streams.
pub fn execute(
    args: CronArgs,
    clock: &dyn Clock,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    match args.command {
        CronCommand::Next(next) => execute_next(next, clock, out, err),
    }
}

fn execute_next(
    args: NextArgs,
    clock: &dyn Clock,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    let spec = match CronSpec::parse(&args.expr) {
        Ok(spec) => spec,
        Err(e) => {
            return fail(
                err,
                &format!("invalid cron expression `{}`: {e}", args.expr),
            );
        }
    };
    let tz: Tz = match args.tz.parse() {
        Ok(tz) => tz,
        Err(_) => {
            return fail(
                err,
                &format!(
                    "invalid --tz `{}`: not an IANA time zone name (e.g. UTC, Europe/London, \
                     America/New_York)",
                    args.tz
                ),
            );
        }
    };
    let after: DateTime<Utc> = match &args.after {
        None => clock.now(),
        Some(text) => match DateTime::parse_from_rfc3339(text) {
            Ok(t) => t.to_utc(),
            Err(e) => {
                return fail(
                    err,
                    &format!(
                        "invalid --after `{text}`: {e}; expected an RFC 3339 instant such as \
                         2026-06-01T00:00:00Z"
                    ),
                );
            }
        },
    };

    let wanted = args.count as usize;
    let mut printed = 0usize;
    for t in spec.iter_after(after, tz).take(wanted) {
        if writeln!(out, "{}", t.format("%Y-%m-%dT%H:%M:%SZ")).is_err() {
            return ExitCode::FAILURE;
        }
        printed += 1;
    }
    if printed < wanted {
        let _ = writeln!(
            err,
            "note: only {printed} of {wanted} fire time(s): `{}` fires no more before the end of \
             {} (the search horizon)",
            spec.source(),
            horizon_year()
        );
    }
    ExitCode::SUCCESS
}

fn fail(err: &mut dyn Write, message: &str) -> ExitCode {
    let _ = writeln!(err, "error: {message}");
    ExitCode::from(USAGE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use mthpt_engine::clock::ManualClock;

    fn run_next(expr: &str, after: Option<&str>, count: u32) -> (ExitCode, String, String) {
        let clock = ManualClock::new(
            Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0)
                .single()
                .unwrap_or_default(),
        );
        let args = CronArgs {
            command: CronCommand::Next(NextArgs {
                expr: expr.to_string(),
                tz: "UTC".to_string(),
                after: after.map(str::to_string),
                count,
            }),
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = execute(args, &clock, &mut out, &mut err);
        (
            code,
            String::from_utf8_lossy(&out).into_owned(),
            String::from_utf8_lossy(&err).into_owned(),
        )
    }

    #[test]
    fn after_defaults_to_the_clock() {
        let (code, out, _) = run_next("0 0 12 * * ?", None, 2);
        assert_eq!(code, ExitCode::SUCCESS);
        assert_eq!(out, "2026-06-01T12:00:00Z\n2026-06-02T12:00:00Z\n");
    }

    #[test]
    fn fewer_fire_times_than_asked_are_printed_with_a_note() {
        let (code, out, err) = run_next("0 0 12 1 1 ? 2027", None, 3);
        assert_eq!(code, ExitCode::SUCCESS);
        assert_eq!(out, "2027-01-01T12:00:00Z\n");
        assert!(err.contains("only 1 of 3"), "{err}");
    }

    #[test]
    fn invalid_expression_names_the_field() {
        let (code, out, err) = run_next("0 0 12 ? * 0", None, 1);
        assert_eq!(code, ExitCode::from(USAGE));
        assert!(out.is_empty());
        assert!(
            err.contains("day-of-week: value 0 out of range 1-7"),
            "{err}"
        );
    }
}

//! What the wrapper records through the [`metrics`] facade. The wrapper installs no exporter:
//! the host application decides (`mthpt wrapper` serves them at `GET /metrics`; an app with a
//! Prometheus recorder of its own gets them there). Names and labels are listed in
//! `docs/metrics.md`; every label takes values from a fixed set.

use metrics::{counter, gauge, histogram};

use crate::protocol::{AckStatus, AlarmSeverity, AlarmState, Outcome};

/// A run request was answered with `status`.
pub(crate) fn run_request(status: AckStatus) {
    let status = match status {
        AckStatus::Accepted => "accepted",
        AckStatus::AlreadyKnown => "already_known",
        AckStatus::AtCapacity => "at_capacity",
        AckStatus::Draining => "draining",
        AckStatus::UnknownHandler => "unknown_handler",
        AckStatus::Malformed => "malformed",
        AckStatus::Expired => "expired",
    };
    counter!("mthpt_wrapper_run_requests_total", "status" => status).increment(1);
}

/// A handler ended with `outcome` after `seconds`.
pub(crate) fn run_finished(outcome: Outcome, seconds: f64) {
    let outcome = match outcome {
        Outcome::Succeeded => "succeeded",
        Outcome::FailedRetryable => "failed_retryable",
        Outcome::FailedFatal => "failed_fatal",
        Outcome::Cancelled => "cancelled",
        Outcome::TimedOut => "timed_out",
    };
    counter!("mthpt_wrapper_runs_finished_total", "outcome" => outcome).increment(1);
    histogram!("mthpt_wrapper_handler_seconds").record(seconds.max(0.0));
}

/// Runs executing now and results waiting for an engine's confirmation.
pub(crate) fn load(running: u32, pending_results: usize) {
    gauge!("mthpt_wrapper_running").set(f64::from(running));
    gauge!("mthpt_wrapper_results_pending").set(pending_results as f64);
}

/// Results an engine confirmed.
pub(crate) fn results_confirmed(n: usize) {
    counter!("mthpt_wrapper_results_confirmed_total").increment(n as u64);
}

/// An alarm was raised (or resolved) by a handler or by the wrapper itself.
pub(crate) fn alarm_raised(severity: AlarmSeverity, state: AlarmState) {
    let state = match state {
        AlarmState::Raised => "raised",
        AlarmState::Resolved => "resolved",
    };
    counter!("mthpt_wrapper_alarms_total", "severity" => severity.as_str(), "state" => state)
        .increment(1);
}

/// An alarm was published straight to the message bus and confirmed.
// Read by direct alarms (feature `amqp-alarms`).
#[cfg_attr(not(feature = "amqp-alarms"), allow(dead_code))]
pub(crate) fn alarm_published() {
    counter!("mthpt_wrapper_alarms_published_total").increment(1);
}

/// An alarm was dropped from a full queue (`path`: `engine` or `amqp`).
pub(crate) fn alarm_dropped(path: &'static str) {
    counter!("mthpt_wrapper_alarms_dropped_total", "path" => path).increment(1);
}

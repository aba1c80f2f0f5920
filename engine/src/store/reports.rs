//! Types of the store operations behind people's views: statistics samples, idempotent
//! triggers and muted alarms.

use serde::Serialize;

use crate::run::{RunId, RunState};
use crate::task::TaskId;
use crate::tenant::TenantId;

/// The most runs one statistics query reads; a longer range is refused by the caller rather
/// than read partially without saying so.
pub const MAX_RUN_SAMPLES: i64 = 200_000;

/// Which finished runs [`Views::run_samples`](super::Views::run_samples) reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSampleQuery {
    /// Only this task's runs.
    pub task_id: Option<TaskId>,
    /// Runs scheduled at or after this instant.
    pub scheduled_from: i64,
    /// Runs scheduled before this instant.
    pub scheduled_before: i64,
    /// At most this many (capped at [`MAX_RUN_SAMPLES`]); one more than the caller can use
    /// tells it the range was too large.
    pub limit: i64,
}

/// The facts statistics are computed from, for one run in a final state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct RunSample {
    pub id: RunId,
    pub task_id: TaskId,
    #[sqlx(try_from = "String")]
    pub state: RunState,
    pub scheduled_at: i64,
    pub due_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// How long an `Idempotency-Key` of a manual trigger is remembered: a repeat within this
/// window returns the first run; engines purge older keys ([`Watchdog`](crate::watchdog::Watchdog)).
pub const TRIGGER_KEY_WINDOW_MS: i64 = 24 * 3600 * 1000;

/// An `Idempotency-Key` of a manual trigger and the run it created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct TriggerKey {
    pub tenant_id: TenantId,
    pub key: String,
    pub task_id: TaskId,
    pub run_id: RunId,
    pub created_at: i64,
}

/// A task whose alarms are muted until a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct AlarmMute {
    pub task_id: TaskId,
    pub tenant_id: TenantId,
    pub muted_until: i64,
    pub muted_by: String,
    pub updated_at: i64,
}

/// Where a page of [`Rollups::rollup_samples`](super::Rollups::rollup_samples) starts: after this run
/// (by scheduled time, then id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleCursor {
    pub scheduled_at: i64,
    pub id: RunId,
}

/// One task's finished runs scheduled in one minute, rolled up: counts by final state and
/// log-spaced histograms of durations and lateness ([`Histogram`](crate::rollup::Histogram),
/// stored sparse).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct RunRollup {
    pub tenant_id: TenantId,
    pub task_id: TaskId,
    /// Start of the scheduled minute (epoch ms, a multiple of 60,000).
    pub minute: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub timed_out: i64,
    pub lost: i64,
    pub skipped: i64,
    pub cancelled: i64,
    pub duration_hist: sqlx::types::Json<Vec<[i64; 2]>>,
    pub lateness_hist: sqlx::types::Json<Vec<[i64; 2]>>,
}

impl RunRollup {
    /// Final state → runs, leaving out states with none.
    pub fn by_state(&self) -> impl Iterator<Item = (RunState, i64)> + '_ {
        [
            (RunState::Succeeded, self.succeeded),
            (RunState::Failed, self.failed),
            (RunState::TimedOut, self.timed_out),
            (RunState::Lost, self.lost),
            (RunState::Skipped, self.skipped),
            (RunState::Cancelled, self.cancelled),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
    }

    /// All the runs it counts.
    pub fn runs(&self) -> i64 {
        self.succeeded + self.failed + self.timed_out + self.lost + self.skipped + self.cancelled
    }
}

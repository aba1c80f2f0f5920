//! Types of the store operations behind people's views: statistics samples, idempotent
//! triggers and muted alarms.

use serde::Serialize;

use crate::run::{RunId, RunState};
use crate::task::TaskId;
use crate::tenant::TenantId;

/// The most runs one statistics query reads; a longer range is refused by the caller rather
/// than read partially without saying so.
pub const MAX_RUN_SAMPLES: i64 = 200_000;

/// Which finished runs [`Tx::run_samples`](super::Tx::run_samples) reads.
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

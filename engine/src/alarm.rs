//! Alarms: events an operator must see. Written in the same transaction as the state change that
//! caused them, acknowledged by a person, resolved by the task's next success.
//!
//! Life cycle (see docs/alarms.md):
//!
//! ```text
//! raised ──(same task and kind again while open)──> repeated: count + 1, last_seen
//!   │  └──(a person)──> acknowledged (who, when)
//!   └─────(the task's next successful run; failure kinds only)──> resolved
//! ```
//!
//! Every transition writes an [`AlarmEvent`] in the same transaction: the outbox the engine's
//! relay ([`crate::relay`]) publishes to the message bus.

use serde::{Deserialize, Serialize};
use sqlx::types::Json;

use crate::app::{AppId, Executor, ExecutorId};
use crate::clock::ms_to_datetime;
use crate::macros::{id_type, text_enum};
use crate::node::EngineNode;
use crate::run::{Run, RunId};
use crate::task::{MisfirePolicy, Task, TaskId};
use crate::tenant::TenantId;

id_type!(
    /// Identifies an alarm.
    AlarmId
);

text_enum!(
    /// What happened.
    AlarmKind {
        RunFailed = "run_failed",
        RetriesExhausted = "retries_exhausted",
        /// Not finished before its deadline.
        TimedOut = "timed_out",
        /// Not started within its start timeout (late, or no executor accepted it).
        NotStarted = "not_started",
        ExecutorLost = "executor_lost",
        NodeLost = "node_lost",
        Misfire = "misfire",
        /// Raised by an app's wrapper (a handler, or the wrapper itself, e.g. no engine
        /// reachable); the wrapper's own kind is `details.app_kind`.
        App = "app",
        /// Due runs of an app wait for capacity: its live executors are full (or draining).
        Backlog = "backlog",
        /// A tenant reached one of its quotas (see [`crate::quota`]): once per episode,
        /// resolved when its usage is back under the quota.
        Quota = "quota",
    }
);

text_enum!(
    /// How urgent it is.
    Severity {
        Info = "info",
        Warning = "warning",
        Critical = "critical",
    }
);

impl AlarmKind {
    /// Whether a successful run of the alarm's task shows the problem is over (the alarm is
    /// then resolved).
    pub fn resolved_by_success(self) -> bool {
        matches!(
            self,
            AlarmKind::RunFailed
                | AlarmKind::RetriesExhausted
                | AlarmKind::TimedOut
                | AlarmKind::NotStarted
        )
    }
}

/// An alarm as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Alarm {
    pub id: AlarmId,
    /// `None` for cluster-level alarms (engine node lost), seen by operators only.
    pub tenant_id: Option<TenantId>,
    #[sqlx(try_from = "String")]
    pub kind: AlarmKind,
    #[sqlx(try_from = "String")]
    pub severity: Severity,
    pub task_id: Option<TaskId>,
    pub run_id: Option<RunId>,
    pub executor_id: Option<ExecutorId>,
    pub node_id: Option<String>,
    pub message: String,
    pub details: Json<serde_json::Value>,
    /// Raising an alarm with a key that already exists raises nothing.
    pub dedupe_key: Option<String>,
    pub created_at: i64,
    pub published_at: Option<i64>,
    pub acknowledged_at: Option<i64>,
    pub acknowledged_by: Option<String>,
    /// Raised while its task's alarms were muted: recorded for history, never published (no
    /// pop-up, no notification) and not open.
    pub muted: bool,
    /// How often it happened: 1, plus one per repeat while it was open.
    pub count: i64,
    /// When it last happened.
    pub last_seen: Option<i64>,
    /// When the task's next successful run resolved it.
    pub resolved_at: Option<i64>,
    /// Set on a repeat: the open alarm it was counted on. Repeats are kept for their dedupe key
    /// only; they are never listed or published on their own.
    pub repeat_of: Option<AlarmId>,
}

impl Alarm {
    /// Open: nobody acknowledged it, it is not resolved, and it was not raised muted.
    pub fn is_open(&self) -> bool {
        self.acknowledged_at.is_none()
            && self.resolved_at.is_none()
            && !self.muted
            && self.repeat_of.is_none()
    }
}

id_type!(
    /// Identifies an alarm event (the message id on the bus).
    AlarmEventId
);

text_enum!(
    /// A transition of an alarm.
    AlarmEventKind {
        Raised = "raised",
        /// The same task and kind happened again while the alarm was open.
        Repeated = "repeated",
        Acknowledged = "acknowledged",
        Resolved = "resolved",
    }
);

/// A transition of an alarm, as stored in the outbox, with the alarm as it was then.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AlarmEvent {
    pub id: AlarmEventId,
    pub alarm_id: AlarmId,
    pub tenant_id: Option<TenantId>,
    #[sqlx(try_from = "String")]
    pub event: AlarmEventKind,
    pub alarm: Json<Alarm>,
    pub created_at: i64,
    pub published_at: Option<i64>,
}

/// The exchange alarm and run events are published to.
pub const EXCHANGE: &str = "mthpt.alarms";

/// The message an alarm event travels as (JSON; documented in docs/alarms.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlarmMessage {
    /// The event's id; also the message id on the bus. Receivers de-duplicate by it.
    pub event_id: i64,
    /// `alarm.raised`, `alarm.repeated`, `alarm.acknowledged` or `alarm.resolved`.
    #[serde(rename = "type")]
    pub kind: String,
    /// When the transition happened (epoch ms).
    pub at: i64,
    /// The alarm's tenant; `null` for cluster-level alarms (operators only).
    pub tenant_id: Option<i64>,
    /// The alarm as it was right after the transition.
    pub alarm: Alarm,
}

impl AlarmEvent {
    /// `alarm.<tenant id or "cluster">.<severity>.<kind>`.
    pub fn routing_key(&self) -> String {
        let tenant = match self.tenant_id {
            Some(t) => t.to_string(),
            None => "cluster".to_owned(),
        };
        format!(
            "alarm.{tenant}.{}.{}",
            self.alarm.0.severity, self.alarm.0.kind
        )
    }

    /// The message this event is published as.
    pub fn message(&self) -> AlarmMessage {
        AlarmMessage {
            event_id: self.id.0,
            kind: format!("alarm.{}", self.event),
            at: self.created_at,
            tenant_id: self.tenant_id.map(|t| t.0),
            alarm: self.alarm.0.clone(),
        }
    }
}

/// An alarm to raise.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAlarm {
    pub tenant_id: Option<TenantId>,
    pub kind: AlarmKind,
    pub severity: Severity,
    pub task_id: Option<TaskId>,
    pub run_id: Option<RunId>,
    pub executor_id: Option<ExecutorId>,
    pub node_id: Option<String>,
    pub message: String,
    pub details: serde_json::Value,
    pub dedupe_key: Option<String>,
}

/// The longest alarm message, as for a wrapper's alarms
/// ([`MAX_ALARM_MESSAGE_CHARS`](mthpt_wrapper::protocol::MAX_ALARM_MESSAGE_CHARS)).
pub const MAX_MESSAGE_CHARS: usize = mthpt_wrapper::protocol::MAX_ALARM_MESSAGE_CHARS;

impl NewAlarm {
    /// A wrapper alarm's own kind (`details.app_kind`); `None` for other alarms. A repeat of an
    /// open `app` alarm must have the same task and the same own kind.
    pub fn app_kind(&self) -> Option<&str> {
        match self.kind {
            AlarmKind::App => self.details.get("app_kind").and_then(|v| v.as_str()),
            _ => None,
        }
    }

    /// An alarm of `kind` for a tenant, with no references yet; a message longer than
    /// [`MAX_MESSAGE_CHARS`] is cut there.
    pub fn new(
        tenant_id: Option<TenantId>,
        kind: AlarmKind,
        severity: Severity,
        message: impl Into<String>,
    ) -> Self {
        Self {
            tenant_id,
            kind,
            severity,
            task_id: None,
            run_id: None,
            executor_id: None,
            node_id: None,
            // As a wrapper's alarms: a run's error of megabytes makes no alarm of megabytes
            // on every operator's screen.
            message: crate::validate::clip_chars(message, MAX_MESSAGE_CHARS),
            details: serde_json::Value::Object(serde_json::Map::new()),
            dedupe_key: None,
        }
    }

    /// `kind` (`timed_out`, `retries_exhausted` or `run_failed`) for a run of `task` that just
    /// ended; `error` is the run's last error. One per run and kind.
    pub fn run_ended(
        task: &Task,
        run: &Run,
        kind: AlarmKind,
        severity: Severity,
        message: String,
        error: Option<&str>,
    ) -> Self {
        let mut a = Self::new(Some(run.tenant_id), kind, severity, message);
        a.task_id = Some(run.task_id);
        a.run_id = Some(run.id);
        a.executor_id = run.executor_id;
        a.details = serde_json::json!({
            "task": task.name,
            "attempt": run.attempt,
            "state": run.state.as_str(),
            "error": error.map(|e| crate::validate::clip_chars(e, MAX_MESSAGE_CHARS)),
        });
        a.dedupe_key = Some(format!("{kind}:{}", run.id));
        a
    }

    /// `timed_out`: a run of `task` did not finish before its deadline.
    pub fn timed_out(task: &Task, run: &Run, error: Option<&str>) -> Self {
        let message = format!(
            "task {:?} run {} (attempt {}) did not finish before its deadline",
            task.name, run.id, run.attempt
        );
        Self::run_ended(
            task,
            run,
            AlarmKind::TimedOut,
            Severity::Warning,
            message,
            error,
        )
    }

    /// `retries_exhausted`: the last attempt of a run of `task` failed.
    pub fn retries_exhausted(task: &Task, run: &Run, error: Option<&str>) -> Self {
        let message = format!(
            "task {:?} failed after {} attempt(s); last error: {}",
            task.name,
            run.attempt,
            error.unwrap_or(NO_ERROR)
        );
        Self::run_ended(
            task,
            run,
            AlarmKind::RetriesExhausted,
            Severity::Critical,
            message,
            error,
        )
    }

    /// `run_failed`: a run of `task` that was not to be retried failed.
    pub fn run_failed(task: &Task, run: &Run, error: Option<&str>) -> Self {
        let message = format!(
            "task {:?} run {} {}: {}",
            task.name,
            run.id,
            run.state,
            error.unwrap_or(NO_ERROR)
        );
        Self::run_ended(
            task,
            run,
            AlarmKind::RunFailed,
            Severity::Critical,
            message,
            error,
        )
    }

    /// `not_started`: `run` was due and no executor has started it (`now`: when judged).
    pub fn not_started(run: &Run, now: i64) -> Self {
        let mut a = Self::new(
            Some(run.tenant_id),
            AlarmKind::NotStarted,
            Severity::Warning,
            format!(
                "run {} was due at {} and has not started ({} dispatch attempt(s); no executor accepted it)",
                run.id,
                ms_to_datetime(run.due_at).to_rfc3339(),
                run.dispatch_attempts
            ),
        );
        a.task_id = Some(run.task_id);
        a.run_id = Some(run.id);
        a.details = serde_json::json!({
            "due_at": run.due_at,
            "late_ms": now - run.due_at,
            "dispatch_attempts": run.dispatch_attempts,
        });
        a.dedupe_key = Some(format!("not_started:{}", run.id));
        a
    }

    /// `executor_lost`: `executor` stopped heartbeating and does not answer; `runs` were
    /// running on it (`now`: when judged). One per executor and last heartbeat.
    pub fn executor_lost(executor: &Executor, runs: &[RunId], now: i64) -> Self {
        let silent = now - executor.last_heartbeat_at;
        let mut a = Self::new(
            Some(executor.tenant_id),
            AlarmKind::ExecutorLost,
            Severity::Critical,
            format!(
                "executor {} ({}) stopped heartbeating {silent} ms ago and does not answer; {} running run(s) lost",
                executor.instance_id,
                executor.base_url,
                runs.len()
            ),
        );
        a.executor_id = Some(executor.id);
        a.details = serde_json::json!({
            "instance_id": executor.instance_id,
            "base_url": executor.base_url,
            "last_heartbeat_at": executor.last_heartbeat_at,
            "runs": runs,
        });
        a.dedupe_key = Some(format!(
            "executor_lost:{}:{}",
            executor.id, executor.last_heartbeat_at
        ));
        a
    }

    /// `quota`: a change of `tenant` was refused for `exceeded` (`now`: the first refusal of
    /// the episode, which the dedupe key names: one alarm per tenant, quota and episode).
    pub fn quota(
        tenant: TenantId,
        tenant_name: &str,
        exceeded: &crate::quota::QuotaExceeded,
        now: i64,
    ) -> Self {
        let mut a = Self::new(
            Some(tenant),
            AlarmKind::Quota,
            Severity::Warning,
            format!(
                "tenant {tenant_name} reached its quota {} ({}); further work beyond it is refused until usage is back under it",
                exceeded.quota, exceeded.limit
            ),
        );
        a.details = serde_json::json!({
            "tenant": tenant_name,
            "quota": exceeded.quota.as_str(),
            "limit": exceeded.limit,
        });
        a.dedupe_key = Some(Self::quota_key(tenant, exceeded.quota, now));
        a
    }

    /// `quota`: runs of `tenant` wait behind its concurrency or rate quota (`oldest_due_at`:
    /// the oldest of them; `now`: when the watchdog found it, which the dedupe key names: one
    /// alarm per tenant, quota and episode).
    pub fn quota_held(
        tenant: TenantId,
        tenant_name: &str,
        quota: crate::quota::Quota,
        limit: i64,
        oldest_due_at: i64,
        now: i64,
    ) -> Self {
        let mut a = Self::new(
            Some(tenant),
            AlarmKind::Quota,
            Severity::Warning,
            format!(
                "tenant {tenant_name} is at its quota {quota} ({limit}); its due runs wait, {}",
                oldest_waiting(oldest_due_at, now)
            ),
        );
        a.details = serde_json::json!({
            "tenant": tenant_name,
            "quota": quota.as_str(),
            "limit": limit,
            "oldest_due_at": oldest_due_at,
            "late_ms": now - oldest_due_at,
        });
        a.dedupe_key = Some(Self::quota_key(tenant, quota, now));
        a
    }

    /// The dedupe key of the `quota` alarm of an episode that began at `began`.
    pub fn quota_key(tenant: TenantId, quota: crate::quota::Quota, began: i64) -> String {
        format!("quota:{tenant}:{quota}:{began}")
    }

    /// `node_lost`: engine `node` stopped heartbeating (`now`: when judged). One per node and
    /// last heartbeat.
    pub fn node_lost(node: &EngineNode, now: i64) -> Self {
        let mut a = Self::new(
            None,
            AlarmKind::NodeLost,
            Severity::Critical,
            format!(
                "engine node {} ({}) stopped heartbeating {} ms ago; its claims move to other nodes when their leases end",
                node.id,
                node.address,
                now - node.last_heartbeat_at
            ),
        );
        a.node_id = Some(node.id.clone());
        a.details = serde_json::json!({
            "groups": node.node_groups.0,
            "last_heartbeat_at": node.last_heartbeat_at,
        });
        a.dedupe_key = Some(format!("node_lost:{}:{}", node.id, node.last_heartbeat_at));
        a
    }

    /// `misfire`: an occurrence of `task` was found `late_ms` late. `fire`: whether this
    /// occurrence still fires; `fired_missed`/`skipped_missed`: missed occurrences caught up or
    /// skipped (`fire_all`). `dedupe_key`: the outage's key (one alarm per outage).
    #[allow(clippy::too_many_arguments)]
    pub fn misfire(
        task: &Task,
        run: &Run,
        late_ms: i64,
        fire: bool,
        fired_missed: usize,
        skipped_missed: usize,
        dedupe_key: String,
    ) -> Self {
        let what = match task.misfire_policy {
            MisfirePolicy::FireOnceNow => "fired once now; missed occurrences dropped".to_owned(),
            MisfirePolicy::Skip => "skipped; the schedule continues from now".to_owned(),
            MisfirePolicy::FireAll => format!(
                "catching up: {} occurrence(s) fire, {} skipped (bound {})",
                usize::from(fire) + fired_missed,
                skipped_missed + usize::from(!fire),
                task.misfire_max_catch_up
            ),
        };
        let mut a = Self::new(
            Some(task.tenant_id),
            AlarmKind::Misfire,
            Severity::Warning,
            format!(
                "task {:?}: occurrence due at {} found {late_ms} ms late; {what}",
                task.name,
                ms_to_datetime(run.due_at).to_rfc3339()
            ),
        );
        a.task_id = Some(task.id);
        a.run_id = Some(run.id);
        a.details = serde_json::json!({
            "late_ms": late_ms,
            "policy": task.misfire_policy.as_str(),
            "fired_missed": fired_missed,
            "skipped_missed": skipped_missed,
        });
        a.dedupe_key = Some(dedupe_key);
        a
    }

    /// `backlog`: `waiting` due runs of app `app` (`app_name`) wait for capacity, its live executors full
    /// or draining; the oldest was due at `oldest_due_at` (`now`: when judged). `counted_up_to`:
    /// the most runs counted (the message says "at least" when `waiting` reached it).
    /// `dedupe_key`: the backlog episode's key (one alarm per episode).
    #[allow(clippy::too_many_arguments)]
    pub fn backlog(
        tenant_id: TenantId,
        app: AppId,
        app_name: &str,
        waiting: i64,
        counted_up_to: i64,
        oldest_due_at: i64,
        now: i64,
        dedupe_key: String,
    ) -> Self {
        let at_least = if waiting >= counted_up_to {
            "at least "
        } else {
            ""
        };
        let mut a = Self::new(
            Some(tenant_id),
            AlarmKind::Backlog,
            Severity::Warning,
            format!(
                "app {app_name:?}: {at_least}{waiting} due run(s) wait for capacity, {}; its live executors are full or draining",
                oldest_waiting(oldest_due_at, now)
            ),
        );
        a.details = serde_json::json!({
            "app_id": app,
            "app": app_name,
            "waiting": waiting,
            "waiting_counted_up_to": counted_up_to,
            "oldest_due_at": oldest_due_at,
            "late_ms": now - oldest_due_at,
        });
        a.dedupe_key = Some(dedupe_key);
        a
    }

    /// `app`: an alarm an app's wrapper raised (`details` and `dedupe_key` from the wrapper's
    /// alarm, see [`mthpt_wrapper::protocol::WrapperAlarm`]). [`NewAlarm::about_run`] ties it to
    /// a run when it names one.
    pub fn from_app(
        tenant_id: TenantId,
        severity: Severity,
        message: String,
        details: serde_json::Value,
        dedupe_key: String,
    ) -> Self {
        let mut a = Self::new(Some(tenant_id), AlarmKind::App, severity, message);
        a.details = details;
        a.dedupe_key = Some(dedupe_key);
        a
    }

    /// The same alarm about `run` (and its task).
    pub fn about_run(mut self, run: &Run) -> Self {
        self.run_id = Some(run.id);
        self.task_id = Some(run.task_id);
        self
    }
}

/// The error of an alarm's message when the run recorded none.
const NO_ERROR: &str = "no error message";

impl From<mthpt_wrapper::protocol::AlarmSeverity> for Severity {
    fn from(s: mthpt_wrapper::protocol::AlarmSeverity) -> Self {
        use mthpt_wrapper::protocol::AlarmSeverity;
        match s {
            AlarmSeverity::Info => Severity::Info,
            AlarmSeverity::Warning => Severity::Warning,
            AlarmSeverity::Critical => Severity::Critical,
        }
    }
}

/// Filters for listing a tenant's alarms.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlarmFilter {
    pub kind: Option<AlarmKind>,
    /// Only open alarms: nobody has acknowledged them yet, they are not resolved and they were
    /// not raised muted.
    pub unacknowledged: bool,
    /// Keyset paging, newest first: alarms with an id lower than this.
    pub before_id: Option<AlarmId>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<i64>,
    pub severity: Option<Severity>,
    pub task_id: Option<TaskId>,
    /// Only alarms someone has acknowledged.
    pub acknowledged: bool,
    /// Only alarms raised while their task's alarms were muted (`true`) or only the others
    /// (`false`).
    pub muted: Option<bool>,
    /// Only alarms about this executor instance.
    pub executor_id: Option<ExecutorId>,
}

/// "the oldest due at <time> (<n> ms late)": how the backlog and quota alarms name the run
/// that has waited longest.
fn oldest_waiting(oldest_due_at: i64, now: i64) -> String {
    format!(
        "the oldest due at {} ({} ms late)",
        ms_to_datetime(oldest_due_at).to_rfc3339(),
        now - oldest_due_at
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alarm_quoting_a_huge_error_stays_small() {
        let a = NewAlarm::new(
            None,
            AlarmKind::RunFailed,
            Severity::Critical,
            format!("run 7 failed: {}", "e".repeat(10_000_000)),
        );
        assert!(a.message.chars().count() <= MAX_MESSAGE_CHARS);
        assert!(a.message.starts_with("run 7 failed: eee"));
        assert!(
            a.message.ends_with("more characters)"),
            "{}",
            &a.message[900..]
        );
    }
}

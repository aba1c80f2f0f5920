//! Tasks (what to run, where and when) and the dependencies that chain them.

use serde::{Deserialize, Serialize};
use sqlx::types::Json;

use crate::app::AppId;
use crate::macros::{from_row_in_table_order, id_type, text_enum};
use crate::schedule::{Schedule, ScheduleKind, ScheduleSpec};
use crate::tenant::TenantId;
use crate::validate::{FieldError, check_len, check_range, check_task_name};

id_type!(
    /// Identifies a task.
    TaskId
);

text_enum!(
    /// What to do with occurrences found due long after their time (engine down, no executor).
    MisfirePolicy {
        /// Fire the late occurrence once, now, and continue from now (default).
        FireOnceNow = "fire_once_now",
        /// Skip the late occurrence and continue with the next one in the future.
        Skip = "skip",
        /// Fire every missed occurrence, up to the task's catch-up bound.
        FireAll = "fire_all",
    }
);

text_enum!(
    /// What to do when an occurrence is due while the previous run of the task still runs.
    OverlapPolicy {
        /// Run both (default).
        Parallel = "parallel",
        /// Skip the new occurrence.
        Skip = "skip",
        /// Wait for the previous run to finish.
        Serial = "serial",
        /// Cancel the previous run and start the new one.
        Replace = "replace",
    }
);

text_enum!(
    /// How the engine picks an executor instance for a run.
    Routing {
        RoundRobin = "round_robin",
        Random = "random",
        /// The instance with the most free capacity at its last heartbeat.
        LeastBusy = "least_busy",
        /// Sticky per task: the same instance while it lives.
        ConsistentHash = "consistent_hash",
        /// The first live instance in a fixed order, then the next.
        Failover = "failover",
        /// One run per live instance, with shard index and total.
        Broadcast = "broadcast",
    }
);

/// A task definition: everything a tenant writes when creating or editing a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskDefinition {
    pub app_id: AppId,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub handler: String,
    #[serde(default = "empty_object")]
    pub params: serde_json::Value,
    pub schedule: ScheduleSpec,
    /// No occurrence before this instant.
    #[serde(default)]
    pub window_start_at: Option<i64>,
    /// No occurrence after this instant.
    #[serde(default)]
    pub window_end_at: Option<i64>,
    /// Stop after this many scheduled occurrences.
    #[serde(default)]
    pub max_fires: Option<i64>,
    #[serde(default = "default_misfire_policy")]
    pub misfire_policy: MisfirePolicy,
    /// How late an occurrence may be found before the misfire policy applies.
    #[serde(default = "default_misfire_threshold_ms")]
    pub misfire_threshold_ms: i64,
    /// The most missed occurrences `fire_all` fires.
    #[serde(default = "default_misfire_max_catch_up")]
    pub misfire_max_catch_up: i32,
    #[serde(default = "default_overlap_policy")]
    pub overlap_policy: OverlapPolicy,
    #[serde(default = "default_routing")]
    pub routing: Routing,
    /// A run not finished this long after it started is timed out.
    #[serde(default)]
    pub timeout_ms: Option<i64>,
    /// A run not started this long after it was due raises "not started in time".
    #[serde(default)]
    pub start_timeout_ms: Option<i64>,
    #[serde(default)]
    pub max_retries: i32,
    /// First retry delay; doubles per attempt (with jitter) up to `retry_backoff_max_ms`.
    #[serde(default = "default_retry_backoff_ms")]
    pub retry_backoff_ms: i64,
    #[serde(default = "default_retry_backoff_max_ms")]
    pub retry_backoff_max_ms: i64,
    /// Start a recovery run when a run is lost with its executor.
    #[serde(default = "yes")]
    pub recover_lost: bool,
    /// Higher runs first among runs due at the same time.
    #[serde(default)]
    pub priority: i32,
    /// Created paused: no occurrence until resumed.
    #[serde(default)]
    pub paused: bool,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}
fn default_misfire_policy() -> MisfirePolicy {
    MisfirePolicy::FireOnceNow
}
/// Default misfire threshold: 60 s.
pub const DEFAULT_MISFIRE_THRESHOLD_MS: i64 = 60_000;
fn default_misfire_threshold_ms() -> i64 {
    DEFAULT_MISFIRE_THRESHOLD_MS
}
fn default_misfire_max_catch_up() -> i32 {
    10
}
fn default_overlap_policy() -> OverlapPolicy {
    OverlapPolicy::Parallel
}
fn default_routing() -> Routing {
    Routing::RoundRobin
}
fn default_retry_backoff_ms() -> i64 {
    1_000
}
fn default_retry_backoff_max_ms() -> i64 {
    300_000
}
fn yes() -> bool {
    true
}

const DAY_MS: i64 = 24 * 3600 * 1000;

impl TaskDefinition {
    /// A definition with every optional field at its default.
    pub fn new(
        app_id: AppId,
        name: impl Into<String>,
        handler: impl Into<String>,
        schedule: ScheduleSpec,
    ) -> Self {
        Self {
            app_id,
            name: name.into(),
            description: String::new(),
            handler: handler.into(),
            params: empty_object(),
            schedule,
            window_start_at: None,
            window_end_at: None,
            max_fires: None,
            misfire_policy: default_misfire_policy(),
            misfire_threshold_ms: default_misfire_threshold_ms(),
            misfire_max_catch_up: default_misfire_max_catch_up(),
            overlap_policy: default_overlap_policy(),
            routing: default_routing(),
            timeout_ms: None,
            start_timeout_ms: None,
            max_retries: 0,
            retry_backoff_ms: default_retry_backoff_ms(),
            retry_backoff_max_ms: default_retry_backoff_max_ms(),
            recover_lost: true,
            priority: 0,
            paused: false,
        }
    }

    /// Checks every field and returns the parsed schedule, or the first field that is wrong.
    pub fn validate(&self, now_ms: i64) -> Result<Schedule, FieldError> {
        let (schedule, problems) = self.check(now_ms);
        match (schedule, problems.into_iter().next()) {
            (_, Some(first)) => Err(first),
            (Some(schedule), None) => Ok(schedule),
            (None, None) => Err(FieldError::new("schedule", "is not valid")),
        }
    }

    /// Every field that is wrong, in the order of the fields (empty: the task is valid), so a
    /// form or a client learns all of them at once.
    pub fn problems(&self, now_ms: i64) -> Vec<FieldError> {
        self.check(now_ms).1
    }

    /// The parsed schedule (when it parses) and every field that is wrong.
    fn check(&self, now_ms: i64) -> (Option<Schedule>, Vec<FieldError>) {
        let mut problems = Vec::new();
        let mut note = |r: Result<(), FieldError>| {
            if let Err(e) = r {
                problems.push(e);
            }
        };
        note(check_task_name("name", &self.name));
        note(check_len("description", &self.description, 0, 4000));
        note(check_len("handler", &self.handler, 1, 200));
        note(crate::validate::check_params("params", &self.params));
        let schedule = match self.schedule.parse(now_ms) {
            Ok(s) => Some(s),
            Err(e) => {
                note(Err(e));
                None
            }
        };
        if let (Some(s), Some(e)) = (self.window_start_at, self.window_end_at)
            && e < s
        {
            note(Err(FieldError::new(
                "window_end_at",
                "must not be before window_start_at",
            )));
        }
        if let Some(n) = self.max_fires {
            note(check_range("max_fires", n, 1, i64::MAX));
        }
        note(check_range(
            "misfire_threshold_ms",
            self.misfire_threshold_ms,
            0,
            DAY_MS,
        ));
        note(check_range(
            "misfire_max_catch_up",
            i64::from(self.misfire_max_catch_up),
            1,
            1_000,
        ));
        if let Some(t) = self.timeout_ms {
            note(check_range("timeout_ms", t, 1, 30 * DAY_MS));
        }
        if let Some(t) = self.start_timeout_ms {
            note(check_range("start_timeout_ms", t, 1, 30 * DAY_MS));
        }
        note(check_range(
            "max_retries",
            i64::from(self.max_retries),
            0,
            100,
        ));
        note(check_range(
            "retry_backoff_ms",
            self.retry_backoff_ms,
            0,
            DAY_MS,
        ));
        note(check_range(
            "retry_backoff_max_ms",
            self.retry_backoff_max_ms,
            self.retry_backoff_ms,
            DAY_MS,
        ));
        note(check_range(
            "priority",
            i64::from(self.priority),
            -1000,
            1000,
        ));
        (schedule, problems)
    }
}

/// A stored task; read from a row of `tasks` by [`TASK_COLUMNS`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Task {
    pub id: TaskId,
    pub tenant_id: TenantId,
    pub app_id: AppId,
    pub name: String,
    pub description: String,
    pub handler: String,
    pub params: Json<serde_json::Value>,
    pub schedule_kind: ScheduleKind,
    pub cron_expr: Option<String>,
    pub interval_ms: Option<i64>,
    pub anchor_at: Option<i64>,
    pub timezone: String,
    pub window_start_at: Option<i64>,
    pub window_end_at: Option<i64>,
    pub max_fires: Option<i64>,
    /// Scheduled occurrences materialised so far (counts toward `max_fires`).
    pub fires_scheduled: i64,
    pub misfire_policy: MisfirePolicy,
    pub misfire_threshold_ms: i64,
    pub misfire_max_catch_up: i32,
    pub overlap_policy: OverlapPolicy,
    pub routing: Routing,
    pub timeout_ms: Option<i64>,
    pub start_timeout_ms: Option<i64>,
    pub max_retries: i32,
    pub retry_backoff_ms: i64,
    pub retry_backoff_max_ms: i64,
    pub recover_lost: bool,
    pub priority: i32,
    pub paused: bool,
    /// Incremented by every change; a change made against an older version is refused.
    pub version: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub deleted_at: Option<i64>,
}

from_row_in_table_order!(Task, TASK_COLUMNS, {
    id: value,
    tenant_id: value,
    app_id: value,
    name: value,
    description: value,
    handler: value,
    params: value,
    schedule_kind: text,
    cron_expr: value,
    interval_ms: value,
    anchor_at: value,
    timezone: value,
    window_start_at: value,
    window_end_at: value,
    max_fires: value,
    fires_scheduled: value,
    misfire_policy: text,
    misfire_threshold_ms: value,
    misfire_max_catch_up: value,
    overlap_policy: text,
    routing: text,
    timeout_ms: value,
    start_timeout_ms: value,
    max_retries: value,
    retry_backoff_ms: value,
    retry_backoff_max_ms: value,
    recover_lost: value,
    priority: value,
    paused: value,
    version: value,
    created_at: value,
    updated_at: value,
    deleted_at: value,
});

/// The columns a definition's schedule is stored in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleColumns {
    pub kind: ScheduleKind,
    pub cron_expr: Option<String>,
    pub interval_ms: Option<i64>,
    pub anchor_at: Option<i64>,
    pub timezone: String,
}

impl ScheduleColumns {
    /// Splits a parsed schedule into its stored columns (a fixed rate's anchor is resolved).
    pub fn from_schedule(spec: &ScheduleSpec, parsed: &Schedule) -> Self {
        let mut cols = ScheduleColumns {
            kind: spec.kind(),
            cron_expr: None,
            interval_ms: None,
            anchor_at: None,
            timezone: "UTC".to_owned(),
        };
        match parsed {
            Schedule::Cron { spec, tz } => {
                cols.cron_expr = Some(spec.source().to_owned());
                cols.timezone = tz.name().to_owned();
            }
            Schedule::FixedRate {
                every_ms,
                anchor_ms,
            } => {
                cols.interval_ms = Some(*every_ms);
                cols.anchor_at = Some(*anchor_ms);
            }
            Schedule::FixedDelay { delay_ms } => cols.interval_ms = Some(*delay_ms),
            Schedule::Once { at_ms } => cols.anchor_at = Some(*at_ms),
            Schedule::Manual => {}
        }
        cols
    }
}

impl Task {
    /// The schedule as written.
    pub fn schedule_spec(&self) -> Result<ScheduleSpec, FieldError> {
        let missing = |col: &str| {
            FieldError::new(
                "schedule",
                format!(
                    "stored {} schedule of task {} lacks {col}",
                    self.schedule_kind, self.id
                ),
            )
        };
        Ok(match self.schedule_kind {
            ScheduleKind::Cron => ScheduleSpec::Cron {
                expr: self.cron_expr.clone().ok_or_else(|| missing("cron_expr"))?,
                timezone: self.timezone.clone(),
            },
            ScheduleKind::FixedRate => ScheduleSpec::FixedRate {
                every_ms: self.interval_ms.ok_or_else(|| missing("interval_ms"))?,
                anchor_at: self.anchor_at,
            },
            ScheduleKind::FixedDelay => ScheduleSpec::FixedDelay {
                delay_ms: self.interval_ms.ok_or_else(|| missing("interval_ms"))?,
            },
            ScheduleKind::Once => ScheduleSpec::Once {
                at: self.anchor_at.ok_or_else(|| missing("anchor_at"))?,
            },
            ScheduleKind::Manual => ScheduleSpec::Manual,
        })
    }

    /// The parsed schedule.
    pub fn schedule(&self) -> Result<Schedule, FieldError> {
        self.schedule_spec()?.parse(self.created_at)
    }

    /// The definition this task was created or last edited with.
    pub fn definition(&self) -> Result<TaskDefinition, FieldError> {
        Ok(TaskDefinition {
            app_id: self.app_id,
            name: self.name.clone(),
            description: self.description.clone(),
            handler: self.handler.clone(),
            params: self.params.0.clone(),
            schedule: self.schedule_spec()?,
            window_start_at: self.window_start_at,
            window_end_at: self.window_end_at,
            max_fires: self.max_fires,
            misfire_policy: self.misfire_policy,
            misfire_threshold_ms: self.misfire_threshold_ms,
            misfire_max_catch_up: self.misfire_max_catch_up,
            overlap_policy: self.overlap_policy,
            routing: self.routing,
            timeout_ms: self.timeout_ms,
            start_timeout_ms: self.start_timeout_ms,
            max_retries: self.max_retries,
            retry_backoff_ms: self.retry_backoff_ms,
            retry_backoff_max_ms: self.retry_backoff_max_ms,
            recover_lost: self.recover_lost,
            priority: self.priority,
            paused: self.paused,
        })
    }

    /// Whether the task's schedule may produce another occurrence at all (not paused, not
    /// deleted, `max_fires` not reached).
    pub fn is_schedulable(&self) -> bool {
        !self.paused
            && self.deleted_at.is_none()
            && self.max_fires.is_none_or(|max| self.fires_scheduled < max)
    }

    /// The next scheduled occurrence strictly after `after_ms`, honouring the window and
    /// `max_fires`; `None` when the schedule is over (or the task is paused or deleted).
    pub fn next_occurrence(&self, schedule: &Schedule, after_ms: i64) -> Option<i64> {
        if !self.is_schedulable() {
            return None;
        }
        let after = match self.window_start_at {
            Some(start) if after_ms < start => start - 1,
            _ => after_ms,
        };
        let at = schedule.next_after(after)?;
        match self.window_end_at {
            Some(end) if at > end => None,
            _ => Some(at),
        }
    }
}

impl Task {
    /// The first occurrence when the task is created, edited or resumed at `now_ms`: a
    /// one-shot instant that has not fired yet (even if it is past: the misfire policy decides),
    /// a fixed delay after `now_ms`, otherwise the schedule's next time from `now_ms` on.
    pub fn first_occurrence(&self, schedule: &Schedule, now_ms: i64) -> Option<i64> {
        match schedule {
            Schedule::Once { at_ms } => {
                (self.is_schedulable() && self.fires_scheduled == 0).then_some(*at_ms)
            }
            Schedule::FixedDelay { .. } => self.next_occurrence(schedule, now_ms),
            _ => self.next_occurrence(schedule, now_ms.saturating_sub(1)),
        }
    }
}

/// A path of dependency edges from `from` to `to` (both included), if one exists.
pub fn dependency_path(edges: &[Dependency], from: TaskId, to: TaskId) -> Option<Vec<TaskId>> {
    use std::collections::{HashMap, VecDeque};
    let mut came_from: HashMap<TaskId, TaskId> = HashMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(at) = queue.pop_front() {
        if at == to {
            let mut path = vec![to];
            let mut cur = to;
            while cur != from {
                cur = came_from[&cur];
                path.push(cur);
            }
            path.reverse();
            return Some(path);
        }
        for e in edges.iter().filter(|e| e.parent_task_id == at) {
            let next = e.child_task_id;
            if next != from && !came_from.contains_key(&next) {
                came_from.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    None
}

text_enum!(
    /// When a child task runs after its parent's run finished.
    DependencyCondition {
        OnSuccess = "on_success",
        OnFailure = "on_failure",
        Always = "always",
    }
);

impl DependencyCondition {
    /// Whether a parent run that finished with `succeeded` (true) or not (false) lets the child run.
    pub fn admits(self, succeeded: bool) -> bool {
        match self {
            DependencyCondition::OnSuccess => succeeded,
            DependencyCondition::OnFailure => !succeeded,
            DependencyCondition::Always => true,
        }
    }
}

/// A parent → child edge. Edges form a DAG within a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Dependency {
    pub tenant_id: TenantId,
    pub parent_task_id: TaskId,
    pub child_task_id: TaskId,
    #[sqlx(try_from = "String")]
    pub condition: DependencyCondition,
    pub created_at: i64,
}

/// Filters for listing tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFilter {
    pub app_id: Option<AppId>,
    pub paused: Option<bool>,
    /// Tasks whose name contains this text.
    pub name_contains: Option<String>,
    /// Keyset paging: tasks with an id greater than this.
    pub after_id: Option<TaskId>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<i64>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stored manual task with default settings, for unit tests.
    pub(crate) fn sample_task() -> Task {
        let d = TaskDefinition::new(AppId(1), "sample", "noop", ScheduleSpec::Manual);
        Task {
            id: TaskId(1),
            tenant_id: TenantId(1),
            app_id: d.app_id,
            name: d.name,
            description: d.description,
            handler: d.handler,
            params: Json(d.params),
            schedule_kind: ScheduleKind::Manual,
            cron_expr: None,
            interval_ms: None,
            anchor_at: None,
            timezone: "UTC".into(),
            window_start_at: None,
            window_end_at: None,
            max_fires: None,
            fires_scheduled: 0,
            misfire_policy: d.misfire_policy,
            misfire_threshold_ms: d.misfire_threshold_ms,
            misfire_max_catch_up: d.misfire_max_catch_up,
            overlap_policy: d.overlap_policy,
            routing: d.routing,
            timeout_ms: None,
            start_timeout_ms: None,
            max_retries: d.max_retries,
            retry_backoff_ms: d.retry_backoff_ms,
            retry_backoff_max_ms: d.retry_backoff_max_ms,
            recover_lost: d.recover_lost,
            priority: 0,
            paused: false,
            version: 1,
            created_at: 0,
            updated_at: 0,
            deleted_at: None,
        }
    }

    fn def() -> TaskDefinition {
        TaskDefinition::new(
            AppId(1),
            "report",
            "build-report",
            ScheduleSpec::FixedRate {
                every_ms: 1000,
                anchor_at: Some(0),
            },
        )
    }

    #[test]
    fn definition_defaults_are_valid() {
        assert!(def().validate(0).is_ok());
    }

    #[test]
    fn every_wrong_field_is_named_at_once_in_field_order() {
        let mut d = def();
        d.handler = String::new();
        d.schedule = ScheduleSpec::Cron {
            expr: "not a cron".into(),
            timezone: "UTC".into(),
        };
        d.max_retries = 1_000;
        d.priority = 5_000;
        let fields: Vec<String> = d.problems(0).into_iter().map(|p| p.field).collect();
        assert_eq!(fields[0], "handler");
        assert!(fields[1].starts_with("schedule"), "{fields:?}");
        assert_eq!(fields[2..], ["max_retries", "priority"]);
        assert_eq!(d.validate(0).unwrap_err().field, "handler", "the first one");
    }

    #[test]
    fn window_end_before_start_is_refused() {
        let mut d = def();
        d.window_start_at = Some(10);
        d.window_end_at = Some(5);
        assert_eq!(d.validate(0).unwrap_err().field, "window_end_at");
    }

    #[test]
    fn backoff_max_below_base_is_refused() {
        let mut d = def();
        d.retry_backoff_ms = 10_000;
        d.retry_backoff_max_ms = 1_000;
        assert_eq!(d.validate(0).unwrap_err().field, "retry_backoff_max_ms");
    }

    #[test]
    fn unknown_definition_fields_are_refused() {
        let err = serde_json::from_str::<TaskDefinition>(
            r#"{"app_id":1,"name":"a","handler":"h","schedule":{"kind":"manual"},"retries":3}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("retries"), "{err}");
    }

    fn edge(p: i64, c: i64) -> Dependency {
        Dependency {
            tenant_id: TenantId(1),
            parent_task_id: TaskId(p),
            child_task_id: TaskId(c),
            condition: DependencyCondition::Always,
            created_at: 0,
        }
    }

    #[test]
    fn dependency_path_finds_the_chain_between_two_tasks() {
        let edges = [edge(1, 2), edge(2, 3), edge(3, 4), edge(1, 5)];
        assert_eq!(
            dependency_path(&edges, TaskId(1), TaskId(4)),
            Some(vec![TaskId(1), TaskId(2), TaskId(3), TaskId(4)])
        );
        assert_eq!(dependency_path(&edges, TaskId(4), TaskId(1)), None);
        assert_eq!(
            dependency_path(&edges, TaskId(2), TaskId(2)),
            Some(vec![TaskId(2)])
        );
    }

    #[test]
    fn dependency_conditions_admit_the_right_outcomes() {
        assert!(DependencyCondition::OnSuccess.admits(true));
        assert!(!DependencyCondition::OnSuccess.admits(false));
        assert!(DependencyCondition::OnFailure.admits(false));
        assert!(!DependencyCondition::OnFailure.admits(true));
        assert!(DependencyCondition::Always.admits(false));
    }
}

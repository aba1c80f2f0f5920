//! Tasks of a tenant: create, read, update (optimistic version), delete, pause, resume, trigger
//! (with an idempotency key), dependencies, and schedule previews.
//!
//! Tasks are written as [`TaskSpec`]s: the engine's definition with the app named instead of
//! numbered and instants as RFC 3339 times, so the same text works in the API, in task files
//! and across clusters.

use chrono::{DateTime, Utc};
use mthpt_engine::app::App;
use mthpt_engine::run::Run;
use mthpt_engine::schedule::describe::{Language, describe};
use mthpt_engine::schedule::{Schedule, ScheduleSpec};
use mthpt_engine::store::{TriggerKey, Tx};
use mthpt_engine::task::{
    Dependency, DependencyCondition, MisfirePolicy, OverlapPolicy, Routing, Task, TaskDefinition,
    TaskFilter, TaskId,
};
use mthpt_engine::tenant::Tenant;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::{Change, Services, audit, quotas};
use crate::service::access::{Action, Caller, tenant_access};
use crate::service::error::{ApiError, ApiResult, FieldProblem};

/// How long an `Idempotency-Key` of a trigger is remembered (engines purge older keys).
pub const IDEMPOTENCY_WINDOW_MS: i64 = mthpt_engine::store::TRIGGER_KEY_WINDOW_MS;

/// The longest idempotency key accepted.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 200;

/// When a task fires, as written in the API and in task files.
// Read by hand (`impl Deserialize` below) rather than as a derived internally tagged enum,
// which buffers the object and so cannot say which of its fields is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ScheduleInput {
    /// A Quartz cron expression (seconds first) on the wall clock of an IANA zone.
    Cron {
        expr: String,
        #[serde(default = "utc")]
        timezone: String,
    },
    /// Every `every_ms` milliseconds from `anchor_at` (default: when the task is created; an
    /// edit without an anchor keeps the current phase).
    FixedRate {
        every_ms: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        anchor_at: Option<DateTime<Utc>>,
    },
    /// `delay_ms` after the previous run finished.
    FixedDelay { delay_ms: i64 },
    /// Once, at an instant.
    Once { at: DateTime<Utc> },
    /// Only when triggered.
    Manual,
}

fn utc() -> String {
    "UTC".to_owned()
}

/// The keys of a schedule object, whatever its kind.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ScheduleKey {
    Kind,
    Expr,
    Timezone,
    EveryMs,
    AnchorAt,
    DelayMs,
    At,
}

/// The kinds of schedule.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ScheduleKindName {
    Cron,
    FixedRate,
    FixedDelay,
    Once,
    Manual,
}

impl<'de> Deserialize<'de> for ScheduleInput {
    /// Each field is read with its own type as it comes (every key means the same in every
    /// kind), so an error names it (`schedule.every_ms`); then the kind decides which fields
    /// it needs and which it refuses.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ScheduleVisitor)
    }
}

struct ScheduleVisitor;

impl<'de> serde::de::Visitor<'de> for ScheduleVisitor {
    type Value = ScheduleInput;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a schedule object with a `kind`")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<ScheduleInput, A::Error> {
        use serde::de::Error;
        let mut kind = None;
        let (mut expr, mut timezone, mut every_ms, mut anchor_at, mut delay_ms, mut at) =
            (None, None, None, None, None, None);
        fn once<T, E: Error>(slot: &mut Option<T>, name: &'static str, v: T) -> Result<(), E> {
            if slot.replace(v).is_some() {
                return Err(E::duplicate_field(name));
            }
            Ok(())
        }
        while let Some(key) = map.next_key::<ScheduleKey>()? {
            match key {
                ScheduleKey::Kind => {
                    once(&mut kind, "kind", map.next_value::<ScheduleKindName>()?)?
                }
                ScheduleKey::Expr => once(&mut expr, "expr", map.next_value::<String>()?)?,
                ScheduleKey::Timezone => {
                    once(&mut timezone, "timezone", map.next_value::<String>()?)?
                }
                ScheduleKey::EveryMs => once(&mut every_ms, "every_ms", map.next_value::<i64>()?)?,
                ScheduleKey::AnchorAt => once(
                    &mut anchor_at,
                    "anchor_at",
                    map.next_value::<Option<DateTime<Utc>>>()?,
                )?,
                ScheduleKey::DelayMs => once(&mut delay_ms, "delay_ms", map.next_value::<i64>()?)?,
                ScheduleKey::At => once(&mut at, "at", map.next_value::<DateTime<Utc>>()?)?,
            }
        }
        let kind = kind.ok_or_else(|| A::Error::missing_field("kind"))?;
        let given = [
            ("expr", expr.is_some()),
            ("timezone", timezone.is_some()),
            ("every_ms", every_ms.is_some()),
            ("anchor_at", anchor_at.is_some()),
            ("delay_ms", delay_ms.is_some()),
            ("at", at.is_some()),
        ];
        let allowed: &'static [&'static str] = match kind {
            ScheduleKindName::Cron => &["kind", "expr", "timezone"],
            ScheduleKindName::FixedRate => &["kind", "every_ms", "anchor_at"],
            ScheduleKindName::FixedDelay => &["kind", "delay_ms"],
            ScheduleKindName::Once => &["kind", "at"],
            ScheduleKindName::Manual => &["kind"],
        };
        if let Some((name, _)) = given.iter().find(|(n, g)| *g && !allowed.contains(n)) {
            return Err(A::Error::unknown_field(name, allowed));
        }
        Ok(match kind {
            ScheduleKindName::Cron => ScheduleInput::Cron {
                expr: expr.ok_or_else(|| A::Error::missing_field("expr"))?,
                timezone: timezone.unwrap_or_else(utc),
            },
            ScheduleKindName::FixedRate => ScheduleInput::FixedRate {
                every_ms: every_ms.ok_or_else(|| A::Error::missing_field("every_ms"))?,
                anchor_at: anchor_at.flatten(),
            },
            ScheduleKindName::FixedDelay => ScheduleInput::FixedDelay {
                delay_ms: delay_ms.ok_or_else(|| A::Error::missing_field("delay_ms"))?,
            },
            ScheduleKindName::Once => ScheduleInput::Once {
                at: at.ok_or_else(|| A::Error::missing_field("at"))?,
            },
            ScheduleKindName::Manual => ScheduleInput::Manual,
        })
    }
}

impl ScheduleInput {
    /// The engine's form.
    pub fn to_spec(&self) -> ScheduleSpec {
        match self {
            ScheduleInput::Cron { expr, timezone } => ScheduleSpec::Cron {
                expr: expr.clone(),
                timezone: timezone.clone(),
            },
            ScheduleInput::FixedRate {
                every_ms,
                anchor_at,
            } => ScheduleSpec::FixedRate {
                every_ms: *every_ms,
                anchor_at: anchor_at.map(|t| t.timestamp_millis()),
            },
            ScheduleInput::FixedDelay { delay_ms } => ScheduleSpec::FixedDelay {
                delay_ms: *delay_ms,
            },
            ScheduleInput::Once { at } => ScheduleSpec::Once {
                at: at.timestamp_millis(),
            },
            ScheduleInput::Manual => ScheduleSpec::Manual,
        }
    }

    /// The API form of an engine schedule.
    pub fn from_spec(spec: &ScheduleSpec) -> Self {
        match spec {
            ScheduleSpec::Cron { expr, timezone } => ScheduleInput::Cron {
                expr: expr.clone(),
                timezone: timezone.clone(),
            },
            ScheduleSpec::FixedRate {
                every_ms,
                anchor_at,
            } => ScheduleInput::FixedRate {
                every_ms: *every_ms,
                anchor_at: anchor_at.map(crate::service::at),
            },
            ScheduleSpec::FixedDelay { delay_ms } => ScheduleInput::FixedDelay {
                delay_ms: *delay_ms,
            },
            ScheduleSpec::Once { at } => ScheduleInput::Once {
                at: crate::service::at(*at),
            },
            ScheduleSpec::Manual => ScheduleInput::Manual,
        }
    }
}

/// A task as written: everything but `name`, `app`, `handler` and `schedule` is optional and
/// takes the engine's default when left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Unique within the tenant; task files match tasks by it.
    pub name: String,
    /// The app (by name) whose executors run the task.
    pub app: String,
    pub handler: String,
    pub schedule: ScheduleInput,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Any JSON value (an object, an array, a string, a number, a boolean), handed to the
    /// handler as it is; left out or `null`: `{}`. At most 256 KiB of JSON, without NUL
    /// characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_start_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_end_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_fires: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "fire_once_now")]
    pub misfire_policy: Option<MisfirePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire_threshold_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misfire_max_catch_up: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "parallel")]
    pub overlap_policy: Option<OverlapPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "round_robin")]
    pub routing: Option<Routing>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timeout_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff_max_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recover_lost: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

impl TaskSpec {
    /// The engine definition, with the app resolved among `apps`; an unknown app is a
    /// validation error naming the field.
    pub fn resolve(&self, apps: &[App]) -> ApiResult<TaskDefinition> {
        let app = apps.iter().find(|a| a.name == self.app).ok_or_else(|| {
            ApiError::field("app", format!("no app named {:?} in this tenant", self.app))
        })?;
        let mut d = TaskDefinition::new(
            app.id,
            self.name.clone(),
            self.handler.clone(),
            self.schedule.to_spec(),
        );
        let ms = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_millis());
        if let Some(v) = &self.description {
            d.description = v.clone();
        }
        if let Some(v) = &self.params {
            d.params = v.clone();
        }
        d.window_start_at = ms(self.window_start_at);
        d.window_end_at = ms(self.window_end_at);
        d.max_fires = self.max_fires;
        d.timeout_ms = self.timeout_ms;
        d.start_timeout_ms = self.start_timeout_ms;
        macro_rules! or_default {
            ($($f:ident),*) => { $(if let Some(v) = self.$f { d.$f = v; })* };
        }
        or_default!(
            misfire_policy,
            misfire_threshold_ms,
            misfire_max_catch_up,
            overlap_policy,
            routing,
            max_retries,
            retry_backoff_ms,
            retry_backoff_max_ms,
            recover_lost,
            priority,
            paused
        );
        Ok(d)
    }

    /// The engine definition of a task being written, checked: every error of the schedule at
    /// once (a never-firing cron included, see [`ScheduleSpec::check`]), beside an unknown app
    /// and every other wrong field.
    pub fn check(&self, apps: &[App], now: i64) -> ApiResult<TaskDefinition> {
        let mut problems: Vec<FieldProblem> = Vec::new();
        let schedule_ok = match self.schedule.to_spec().check(now) {
            Ok(_) => true,
            Err(errors) => {
                problems.extend(errors.into_iter().map(|e| FieldProblem {
                    field: e.field,
                    message: e.reason,
                }));
                false
            }
        };
        let def = match self.resolve(apps) {
            Ok(def) => Some(def),
            Err(e) => {
                problems.extend(e.errors);
                None
            }
        };
        if let Some(def) = &def {
            // The other fields, with the schedule (reported above) out of the way.
            let mut rest = def.clone();
            if !schedule_ok {
                rest.schedule = ScheduleSpec::Manual;
            }
            problems.extend(rest.problems(now).into_iter().map(|e| FieldProblem {
                field: e.field,
                message: e.reason,
            }));
        }
        match def {
            Some(def) if problems.is_empty() => Ok(def),
            _ => Err(ApiError::fields(problems)),
        }
    }

    /// The spec of a stored task, every field spelled out.
    pub fn of(task: &Task, app_name: &str) -> ApiResult<TaskSpec> {
        let d = task.definition().map_err(ApiError::internal)?;
        let at = |t: Option<i64>| t.map(crate::service::at);
        Ok(TaskSpec {
            name: d.name,
            app: app_name.to_owned(),
            handler: d.handler,
            schedule: ScheduleInput::from_spec(&d.schedule),
            description: Some(d.description),
            params: Some(d.params),
            window_start_at: at(d.window_start_at),
            window_end_at: at(d.window_end_at),
            max_fires: d.max_fires,
            misfire_policy: Some(d.misfire_policy),
            misfire_threshold_ms: Some(d.misfire_threshold_ms),
            misfire_max_catch_up: Some(d.misfire_max_catch_up),
            overlap_policy: Some(d.overlap_policy),
            routing: Some(d.routing),
            timeout_ms: d.timeout_ms,
            start_timeout_ms: d.start_timeout_ms,
            max_retries: Some(d.max_retries),
            retry_backoff_ms: Some(d.retry_backoff_ms),
            retry_backoff_max_ms: Some(d.retry_backoff_max_ms),
            recover_lost: Some(d.recover_lost),
            priority: Some(d.priority),
            paused: Some(d.paused),
        })
    }
}

/// The fields in which `wanted` differs from the stored `current` definition. A fixed rate
/// given without an anchor matches the stored one of the same period (an edit keeps the phase).
pub fn changed_fields(current: &TaskDefinition, wanted: &TaskDefinition) -> Vec<&'static str> {
    let mut changed = Vec::new();
    let schedule_same = match (&current.schedule, &wanted.schedule) {
        (
            ScheduleSpec::FixedRate { every_ms: a, .. },
            ScheduleSpec::FixedRate {
                every_ms: b,
                anchor_at: None,
            },
        ) => a == b,
        (a, b) => a == b,
    };
    if !schedule_same {
        changed.push("schedule");
    }
    macro_rules! cmp {
        ($($f:ident),*) => { $(if current.$f != wanted.$f { changed.push(stringify!($f)); })* };
    }
    cmp!(
        app_id,
        name,
        description,
        handler,
        params,
        window_start_at,
        window_end_at,
        max_fires,
        misfire_policy,
        misfire_threshold_ms,
        misfire_max_catch_up,
        overlap_policy,
        routing,
        timeout_ms,
        start_timeout_ms,
        max_retries,
        retry_backoff_ms,
        retry_backoff_max_ms,
        recover_lost,
        priority,
        paused
    );
    changed
}

/// A task with its app's name, as shown to people.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskView {
    pub task: Task,
    pub app_name: String,
}

fn view(task: Task, apps: &[App]) -> TaskView {
    let app_name = apps
        .iter()
        .find(|a| a.id == task.app_id)
        .map_or_else(|| task.app_id.to_string(), |a| a.name.clone());
    TaskView { task, app_name }
}

fn change(
    tenant: &Tenant,
    action: &'static str,
    task: &Task,
    details: serde_json::Value,
) -> Change<'static> {
    Change {
        tenant: Some(tenant.id),
        action,
        target_kind: "task",
        target_id: task.id.to_string(),
        details,
    }
}

/// A page of a tenant's tasks.
pub async fn list(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    filter: &TaskFilter,
) -> ApiResult<Vec<TaskView>> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    let apps = tx.list_apps(tenant.id).await?;
    let tasks = tx.list_tasks(tenant.id, filter).await?;
    Ok(tasks.into_iter().map(|t| view(t, &apps)).collect())
}

pub async fn get(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: TaskId,
) -> ApiResult<TaskView> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    let task = tx.get_task(tenant.id, id).await?;
    let apps = tx.list_apps(tenant.id).await?;
    Ok(view(task, &apps))
}

pub async fn create(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    spec: &TaskSpec,
) -> ApiResult<TaskView> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let now = services.now();
    let created = async {
        let mut tx = services.write().await?;
        let task = create_in(tx.as_mut(), caller, &tenant, spec, now).await?;
        tx.commit().await?;
        Ok(task)
    }
    .await;
    quotas::after_check(services, &tenant, created).await
}

/// Creates a task inside a caller's transaction (task files create many in one).
pub async fn create_in(
    tx: &mut dyn Tx,
    caller: &Caller,
    tenant: &Tenant,
    spec: &TaskSpec,
    now: i64,
) -> ApiResult<TaskView> {
    let apps = tx.list_apps(tenant.id).await?;
    let def = spec.check(&apps, now)?;
    quotas::check_new_task(tx, tenant, now).await?;
    let created = tx.create_task(tenant.id, &def, now).await?;
    audit(
        tx,
        caller,
        change(
            tenant,
            "task.create",
            &created.task,
            json!({ "name": def.name }),
        ),
        now,
    )
    .await?;
    Ok(view(created.task, &apps))
}

/// What is wrong with `spec` in `tenant`, without saving anything: an unknown app, or every
/// wrong field of the task it describes (empty: nothing). A form shows these beside the
/// fields it could not read itself, so that one submission reports everything.
pub async fn problems(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    spec: &TaskSpec,
) -> ApiResult<Vec<FieldProblem>> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    let apps = tx.list_apps(tenant.id).await?;
    Ok(match spec.check(&apps, services.now()) {
        Ok(_) => Vec::new(),
        Err(e) => e.errors,
    })
}

/// Replaces a task's definition if it is still at `version` (412 `version_conflict` if not;
/// 428 `precondition_required` without one).
pub async fn update(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: TaskId,
    version: Option<i64>,
    spec: &TaskSpec,
) -> ApiResult<TaskView> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    // Asked only once the caller may edit here, so another tenant's caller learns nothing.
    let version = version.ok_or_else(|| {
        ApiError::new(
            crate::service::error::Code::PreconditionRequired,
            "send If-Match with the task's version (its ETag) to update it",
        )
    })?;
    let now = services.now();
    let mut tx = services.write().await?;
    let task = update_in(tx.as_mut(), caller, &tenant, id, version, spec, now).await?;
    tx.commit().await?;
    Ok(task)
}

/// [`update`] inside a caller's transaction.
pub async fn update_in(
    tx: &mut dyn Tx,
    caller: &Caller,
    tenant: &Tenant,
    id: TaskId,
    version: i64,
    spec: &TaskSpec,
    now: i64,
) -> ApiResult<TaskView> {
    let apps = tx.list_apps(tenant.id).await?;
    let def = spec.check(&apps, now)?;
    let current = tx.get_task(tenant.id, id).await?;
    let changed = current
        .definition()
        .map(|c| changed_fields(&c, &def))
        .unwrap_or_default();
    let updated = tx.update_task(tenant.id, id, version, &def, now).await?;
    audit(
        tx,
        caller,
        change(
            tenant,
            "task.update",
            &updated.task,
            json!({ "version": updated.task.version, "changed": changed }),
        ),
        now,
    )
    .await?;
    Ok(view(updated.task, &apps))
}

/// The version to write against: the caller's, or the current one when none was given.
async fn version_or_current(
    tx: &mut dyn Tx,
    tenant: &Tenant,
    id: TaskId,
    version: Option<i64>,
) -> ApiResult<i64> {
    match version {
        Some(v) => Ok(v),
        None => Ok(tx.get_task(tenant.id, id).await?.version),
    }
}

/// Deletes a task (at `version` when given): its pending runs go, its history stays.
pub async fn delete(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: TaskId,
    version: Option<i64>,
) -> ApiResult<()> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    delete_in(tx.as_mut(), caller, &tenant, id, version, now).await?;
    tx.commit().await?;
    Ok(())
}

/// [`delete`] inside a caller's transaction.
pub async fn delete_in(
    tx: &mut dyn Tx,
    caller: &Caller,
    tenant: &Tenant,
    id: TaskId,
    version: Option<i64>,
    now: i64,
) -> ApiResult<()> {
    let version = version_or_current(tx, tenant, id, version).await?;
    let task = tx.delete_task(tenant.id, id, version, now).await?;
    audit(
        tx,
        caller,
        change(tenant, "task.delete", &task, json!({ "name": task.name })),
        now,
    )
    .await
}

/// Pauses (`paused`) or resumes a task, at `version` when given.
pub async fn set_paused(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: TaskId,
    version: Option<i64>,
    paused: bool,
) -> ApiResult<TaskView> {
    let tenant = tenant_access(services, caller, tenant, Action::Operate).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    let task = set_paused_in(tx.as_mut(), caller, &tenant, id, version, paused, now).await?;
    let apps = tx.list_apps(tenant.id).await?;
    tx.commit().await?;
    Ok(view(task, &apps))
}

/// [`set_paused`] inside a caller's transaction.
pub async fn set_paused_in(
    tx: &mut dyn Tx,
    caller: &Caller,
    tenant: &Tenant,
    id: TaskId,
    version: Option<i64>,
    paused: bool,
    now: i64,
) -> ApiResult<Task> {
    let version = version_or_current(tx, tenant, id, version).await?;
    let (task, action) = if paused {
        (
            tx.pause_task(tenant.id, id, version, now).await?,
            "task.pause",
        )
    } else {
        (
            tx.resume_task(tenant.id, id, version, now).await?.task,
            "task.resume",
        )
    };
    audit(
        tx,
        caller,
        change(tenant, action, &task, json!({ "version": task.version })),
        now,
    )
    .await?;
    Ok(task)
}

/// What a trigger did.
#[derive(Debug, Clone, PartialEq)]
pub struct Triggered {
    pub run: Run,
    /// The run was created by an earlier request with the same idempotency key.
    pub replayed: bool,
}

/// Triggers a task now, with optional parameters replacing the task's. A repeated request
/// with the same `idempotency_key` (within [`IDEMPOTENCY_WINDOW_MS`]) returns the first run.
pub async fn trigger(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    id: TaskId,
    params: Option<serde_json::Value>,
    idempotency_key: Option<&str>,
) -> ApiResult<Triggered> {
    let tenant = tenant_access(services, caller, tenant, Action::Operate).await?;
    if let Some(key) = idempotency_key
        && (key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN)
    {
        return Err(ApiError::field(
            "Idempotency-Key",
            format!("must have 1 to {MAX_IDEMPOTENCY_KEY_LEN} characters"),
        ));
    }
    let now = services.now();
    let since = now - IDEMPOTENCY_WINDOW_MS;
    if let Some(key) = idempotency_key
        && let Some(found) = replay(services, &tenant, id, key, since).await?
    {
        return Ok(found);
    }
    let triggered = trigger_new(services, caller, &tenant, id, params, idempotency_key, now).await;
    quotas::after_check(services, &tenant, triggered).await
}

/// [`trigger`] once the request is known not to be a replay: within the tenant's quotas.
async fn trigger_new(
    services: &Services,
    caller: &Caller,
    tenant: &Tenant,
    id: TaskId,
    params: Option<serde_json::Value>,
    idempotency_key: Option<&str>,
    now: i64,
) -> ApiResult<Triggered> {
    let since = now - IDEMPOTENCY_WINDOW_MS;
    quotas::check_fire(services, tenant, now).await?;
    let mut tx = services.write().await?;
    let run = trigger_in(tx.as_mut(), caller, tenant, id, params, now).await?;
    if let Some(key) = idempotency_key {
        let remembered = TriggerKey {
            tenant_id: tenant.id,
            key: key.to_owned(),
            task_id: id,
            run_id: run.id,
            created_at: now,
        };
        if !tx.insert_trigger_key(&remembered, since).await? {
            // A concurrent request with the same key won: undo this run, answer with that one.
            drop(tx);
            return replay(services, tenant, id, key, since)
                .await?
                .ok_or_else(|| ApiError::internal("idempotency key taken but not found"));
        }
    }
    tx.commit().await?;
    Ok(Triggered {
        run,
        replayed: false,
    })
}

async fn replay(
    services: &Services,
    tenant: &Tenant,
    id: TaskId,
    key: &str,
    since: i64,
) -> ApiResult<Option<Triggered>> {
    let mut tx = services.read().await?;
    let Some(found) = tx.find_trigger_key(tenant.id, key, since).await? else {
        return Ok(None);
    };
    if found.task_id != id {
        return Err(ApiError::new(
            crate::service::error::Code::Conflict,
            format!(
                "Idempotency-Key {key:?} was already used to trigger task {}",
                found.task_id
            ),
        ));
    }
    let run = tx.get_run(tenant.id, found.run_id).await?;
    Ok(Some(Triggered {
        run,
        replayed: true,
    }))
}

/// Triggers a task inside a caller's transaction, within the tenant's `max_waiting_runs`; its
/// `params` (for this run only) are checked as a task's are.
pub async fn trigger_in(
    tx: &mut dyn Tx,
    caller: &Caller,
    tenant: &Tenant,
    id: TaskId,
    params: Option<serde_json::Value>,
    now: i64,
) -> ApiResult<Run> {
    if let Some(p) = &params {
        mthpt_engine::validate::check_params("params", p)?;
    }
    quotas::check_new_waiting_run(tx, tenant, now).await?;
    let run = tx
        .trigger_task(tenant.id, id, params, &caller.actor(), now)
        .await?;
    audit(
        tx,
        caller,
        Change {
            tenant: Some(tenant.id),
            action: "task.trigger",
            target_kind: "task",
            target_id: id.to_string(),
            details: json!({ "run_id": run.id }),
        },
        now,
    )
    .await?;
    Ok(run)
}

// ---- dependencies ------------------------------------------------------------------------

pub async fn list_dependencies(
    services: &Services,
    caller: &Caller,
    tenant: &str,
) -> ApiResult<Vec<Dependency>> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    Ok(tx.list_dependencies(tenant.id).await?)
}

/// The tasks of `tenant` among `ids` that exist (deleted ones and other tenants' are left
/// out), in id order, read in one transaction: the tenant's tasks in the id range of `ids`, a
/// page at a time (one statement when fewer than [`MANY_PAGE`] tasks lie in the range); ids a
/// few pages do not reach are read one by one.
pub async fn get_many(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    ids: &[TaskId],
) -> ApiResult<Vec<Task>> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut wanted: Vec<TaskId> = ids.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let (Some(first), Some(last)) = (wanted.first().copied(), wanted.last().copied()) else {
        return Ok(Vec::new());
    };
    let mut tx = services.read().await?;
    let mut found = Vec::with_capacity(wanted.len());
    let mut after = TaskId(first.0 - 1);
    let mut pages = 0;
    while after < last && pages < MANY_PAGES {
        let page = tx
            .list_tasks(
                tenant.id,
                &TaskFilter {
                    after_id: Some(after),
                    limit: Some(MANY_PAGE),
                    ..Default::default()
                },
            )
            .await?;
        pages += 1;
        let full = page.len() as i64 == MANY_PAGE;
        let Some(end) = page.last().map(|t| t.id) else {
            after = last;
            break;
        };
        found.extend(
            page.into_iter()
                .filter(|t| wanted.binary_search(&t.id).is_ok()),
        );
        after = if full { end } else { last };
    }
    for id in wanted.into_iter().filter(|id| *id > after) {
        match tx.get_task(tenant.id, id).await {
            Ok(task) => found.push(task),
            Err(mthpt_engine::store::StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(found)
}

/// The page size of [`get_many`].
pub const MANY_PAGE: i64 = 1000;
/// How many pages [`get_many`] reads before it reads the rest one by one.
const MANY_PAGES: usize = 2;

/// What a task form offers: the tenant's apps (to run the task on) and its first `limit`
/// tasks (parents to choose), for a caller who may change the tenant's tasks.
pub async fn form_choices(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    limit: i64,
) -> ApiResult<(Tenant, Vec<App>, Vec<Task>)> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let mut tx = services.read().await?;
    let apps = tx.list_apps(tenant.id).await?;
    let filter = TaskFilter {
        limit: Some(limit),
        ..Default::default()
    };
    let tasks = tx.list_tasks(tenant.id, &filter).await?;
    Ok((tenant, apps, tasks))
}

/// Which task [`save_with_parents`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Save {
    /// A new task.
    Create,
    /// Task `id`, if it is still at `version` (none: 428 `precondition_required`).
    Update { id: TaskId, version: Option<i64> },
}

/// Creates or updates a task and makes `parents` its parents (each edge `on_success`; other
/// parents are removed), all in one transaction: a parent that cannot be set (a cycle, a
/// missing task) saves nothing and is reported as field `parents` (code `cycle` for a cycle).
pub async fn save_with_parents(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    save: Save,
    spec: &TaskSpec,
    parents: &[TaskId],
) -> ApiResult<TaskView> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    let view = match save {
        Save::Create => create_in(tx.as_mut(), caller, &tenant, spec, now).await?,
        Save::Update { id, version } => {
            let version = version.ok_or_else(|| {
                ApiError::new(
                    crate::service::error::Code::PreconditionRequired,
                    "the form lacks the task's version; open the task again to edit it",
                )
            })?;
            update_in(tx.as_mut(), caller, &tenant, id, version, spec, now).await?
        }
    };
    let child = view.task.id;
    let current: Vec<TaskId> = tx
        .list_dependencies(tenant.id)
        .await?
        .into_iter()
        .filter(|d| d.child_task_id == child)
        .map(|d| d.parent_task_id)
        .collect();
    let on_parents = |e: ApiError| {
        let mut field = ApiError::field("parents", e.detail.clone());
        if e.code == crate::service::error::Code::Cycle {
            field.code = crate::service::error::Code::Cycle;
        }
        field
    };
    for parent in current.iter().filter(|p| !parents.contains(p)) {
        remove_dependency_in(tx.as_mut(), caller, &tenant, *parent, child, now)
            .await
            .map_err(on_parents)?;
    }
    for parent in parents {
        if !current.contains(parent) {
            add_dependency_in(
                tx.as_mut(),
                caller,
                &tenant,
                *parent,
                child,
                DependencyCondition::OnSuccess,
                now,
            )
            .await
            .map_err(on_parents)?;
        }
    }
    tx.commit().await?;
    Ok(view)
}

/// Adds (or changes the condition of) parent → child; a cycle is refused naming it.
pub async fn add_dependency(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    parent: TaskId,
    child: TaskId,
    condition: DependencyCondition,
) -> ApiResult<Dependency> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    let dep =
        add_dependency_in(tx.as_mut(), caller, &tenant, parent, child, condition, now).await?;
    tx.commit().await?;
    Ok(dep)
}

/// [`add_dependency`] inside a caller's transaction.
pub async fn add_dependency_in(
    tx: &mut dyn Tx,
    caller: &Caller,
    tenant: &Tenant,
    parent: TaskId,
    child: TaskId,
    condition: DependencyCondition,
    now: i64,
) -> ApiResult<Dependency> {
    let dep = tx
        .add_dependency(tenant.id, parent, child, condition, now)
        .await?;
    audit(
        tx,
        caller,
        dependency_change(tenant, "dependency.add", parent, child, Some(condition)),
        now,
    )
    .await?;
    Ok(dep)
}

pub async fn remove_dependency(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    parent: TaskId,
    child: TaskId,
) -> ApiResult<()> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let now = services.now();
    let mut tx = services.write().await?;
    remove_dependency_in(tx.as_mut(), caller, &tenant, parent, child, now).await?;
    tx.commit().await?;
    Ok(())
}

/// [`remove_dependency`] inside a caller's transaction.
pub async fn remove_dependency_in(
    tx: &mut dyn Tx,
    caller: &Caller,
    tenant: &Tenant,
    parent: TaskId,
    child: TaskId,
    now: i64,
) -> ApiResult<()> {
    tx.delete_dependency(tenant.id, parent, child).await?;
    audit(
        tx,
        caller,
        dependency_change(tenant, "dependency.remove", parent, child, None),
        now,
    )
    .await
}

fn dependency_change(
    tenant: &Tenant,
    action: &'static str,
    parent: TaskId,
    child: TaskId,
    condition: Option<DependencyCondition>,
) -> Change<'static> {
    Change {
        tenant: Some(tenant.id),
        action,
        target_kind: "dependency",
        target_id: format!("{parent}->{child}"),
        details: json!({ "parent_task_id": parent, "child_task_id": child, "condition": condition }),
    }
}

// ---- schedule preview --------------------------------------------------------------------

/// The most fire times a preview lists.
pub const MAX_PREVIEW: usize = 100;

/// The next fire times of a schedule and what it says in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Preview {
    /// The zone the times are shown in (the cron schedule's, else UTC).
    pub timezone: chrono_tz::Tz,
    /// Epoch milliseconds.
    pub fire_times: Vec<i64>,
    /// (language tag, description).
    pub descriptions: Vec<(&'static str, String)>,
}

/// Previews `schedule`, or the schedule of task `task` when no schedule is given: the next
/// `count` fire times after `after` (default now). A fixed delay is previewed as if every run
/// finished at once.
pub async fn preview(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    schedule: Option<&ScheduleInput>,
    task: Option<TaskId>,
    count: usize,
    after: Option<i64>,
) -> ApiResult<Preview> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    if !(1..=MAX_PREVIEW).contains(&count) {
        return Err(ApiError::field(
            "count",
            format!("must be between 1 and {MAX_PREVIEW} (is {count})"),
        ));
    }
    let now = services.now();
    let parsed: Schedule = match (schedule, task) {
        (Some(s), _) => s.to_spec().check(now).map_err(|errors| {
            ApiError::fields(
                errors
                    .into_iter()
                    .map(|e| FieldProblem {
                        field: e.field,
                        message: e.reason,
                    })
                    .collect(),
            )
        })?,
        (None, Some(id)) => {
            let mut tx = services.read().await?;
            tx.get_task(tenant.id, id)
                .await?
                .schedule()
                .map_err(ApiError::internal)?
        }
        (None, None) => return Err(ApiError::field("schedule", "give a schedule or a task_id")),
    };
    let timezone = match &parsed {
        Schedule::Cron { tz, .. } => *tz,
        _ => chrono_tz::UTC,
    };
    let mut fire_times = Vec::with_capacity(count);
    let mut cursor = after.unwrap_or(now);
    // A one-shot time already past is not "never": a task created with it fires it at once,
    // its misfire policy deciding, so the preview of such a schedule lists it.
    if let (Schedule::Once { at_ms }, None, Some(_)) = (&parsed, after, schedule)
        && *at_ms <= now
    {
        fire_times.push(*at_ms);
    }
    while fire_times.len() < count {
        let Some(next) = parsed.next_after(cursor) else {
            break;
        };
        fire_times.push(next);
        cursor = next;
    }
    let descriptions = Language::ALL
        .iter()
        .map(|l| (l.tag(), describe(&parsed, *l)))
        .collect();
    Ok(Preview {
        timezone,
        fire_times,
        descriptions,
    })
}

//! Task files: a tenant's tasks and dependencies as TOML or JSON, matched by task name.
//!
//! [`apply`] computes a plan (create, update, unchanged, and with `prune` delete what the file
//! no longer names) and carries it out in one transaction, so a file is applied whole or not
//! at all; applying the same file twice changes nothing the second time. [`export`] writes a
//! tenant's current tasks in the same format, so export → apply elsewhere copies them.

use std::collections::{BTreeMap, HashMap, HashSet};

use mthpt_engine::app::App;
use mthpt_engine::store::Tx;
use mthpt_engine::task::{DependencyCondition, Task, TaskDefinition, TaskFilter, TaskId};
use mthpt_engine::tenant::{Tenant, TenantId};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::tasks::{TaskSpec, changed_fields};
use super::{Change, Services, audit};
use crate::service::access::{Action, Caller, tenant_access};
use crate::service::error::{ApiError, ApiResult, FieldProblem};

/// The most tasks one file may hold.
pub const MAX_FILE_TASKS: usize = 20_000;

/// A tenant's tasks and the dependencies between them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskFile {
    #[serde(default)]
    pub tasks: Vec<TaskSpec>,
    #[serde(default)]
    pub dependencies: Vec<DependencySpec>,
}

/// parent → child, by task name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DependencySpec {
    pub parent: String,
    pub child: String,
    /// `on_success` (default), `on_failure` or `always`.
    #[serde(default = "on_success")]
    #[schema(value_type = String, example = "on_success")]
    pub condition: DependencyCondition,
}

fn on_success() -> DependencyCondition {
    DependencyCondition::OnSuccess
}

/// The text formats of a task file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Toml,
    Json,
}

/// What is wrong with a task file's text.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("the task file is not valid TOML: {0}")]
    Toml(#[from] toml::de::Error),
    /// Valid TOML, but a value is not what its key takes (`path`: `tasks[1].schedule.at`).
    #[error("the task file is not valid: {path}: {message}")]
    Field { path: String, message: String },
    #[error("the task file is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the tasks cannot be written as TOML: {0}")]
    WriteToml(#[from] toml::ser::Error),
}

impl TaskFile {
    pub fn parse(text: &str, format: Format) -> Result<TaskFile, FileError> {
        Ok(match format {
            Format::Toml => {
                // Read as TOML first (a syntax error keeps its line and column), then as tasks
                // (a wrong value is named by its path). TOML's own date-times (`at =
                // 2026-12-01T09:30:00+08:00`, unquoted) are read as the RFC 3339 text they are.
                let mut value: toml::Value = toml::from_str(text)?;
                datetimes_as_text(&mut value);
                serde_path_to_error::deserialize(value).map_err(|e| FileError::Field {
                    path: e.path().to_string(),
                    message: e.inner().to_string(),
                })?
            }
            Format::Json => serde_json::from_str(text)?,
        })
    }

    pub fn render(&self, format: Format) -> Result<String, FileError> {
        Ok(match format {
            Format::Toml => toml::to_string(self)?,
            Format::Json => serde_json::to_string_pretty(self)?,
        })
    }
}

/// What applying a file does to one task or dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Create,
    Update,
    Unchanged,
    Delete,
}

/// One line of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlanItem {
    /// `task` or `dependency`.
    pub kind: String,
    /// The task's name, or `parent -> child`.
    pub name: String,
    pub step: Step,
    /// For updates: the fields that change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
}

/// What applying a file does (or did).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Plan {
    pub items: Vec<PlanItem>,
    /// False for a dry run.
    pub applied: bool,
}

impl Plan {
    /// How many items take each step.
    pub fn count(&self, step: Step) -> usize {
        self.items.iter().filter(|i| i.step == step).count()
    }

    /// Whether applying changes anything.
    pub fn has_changes(&self) -> bool {
        self.items.iter().any(|i| i.step != Step::Unchanged)
    }
}

/// Every task of a tenant (a listing pages by 1000).
async fn all_tasks(tx: &mut dyn Tx, tenant: TenantId) -> ApiResult<Vec<Task>> {
    let mut tasks: Vec<Task> = Vec::new();
    loop {
        let filter = TaskFilter {
            after_id: tasks.last().map(|t| t.id),
            limit: Some(1000),
            ..Default::default()
        };
        let page = tx.list_tasks(tenant, &filter).await?;
        let done = page.len() < 1000;
        tasks.extend(page);
        if done {
            return Ok(tasks);
        }
    }
}

/// A tenant's tasks and dependencies as a file.
pub async fn export(services: &Services, caller: &Caller, tenant: &str) -> ApiResult<TaskFile> {
    let tenant = tenant_access(services, caller, tenant, Action::Read).await?;
    let mut tx = services.read().await?;
    let apps = tx.list_apps(tenant.id).await?;
    let tasks = all_tasks(tx.as_mut(), tenant.id).await?;
    let names: HashMap<TaskId, &str> = tasks.iter().map(|t| (t.id, t.name.as_str())).collect();
    let mut file = TaskFile::default();
    for task in &tasks {
        let app = apps
            .iter()
            .find(|a| a.id == task.app_id)
            .map_or_else(|| task.app_id.to_string(), |a| a.name.clone());
        file.tasks.push(TaskSpec::of(task, &app)?);
    }
    for dep in tx.list_dependencies(tenant.id).await? {
        if let (Some(p), Some(c)) = (
            names.get(&dep.parent_task_id),
            names.get(&dep.child_task_id),
        ) {
            file.dependencies.push(DependencySpec {
                parent: (*p).to_owned(),
                child: (*c).to_owned(),
                condition: dep.condition,
            });
        }
    }
    Ok(file)
}

/// Checks a file on its own: unique names, known apps, valid definitions, dependencies
/// between named (or existing) tasks. Errors name the entry (`tasks[3].schedule.expr`).
fn resolve_file(
    file: &TaskFile,
    apps: &[App],
    existing: &HashMap<&str, &Task>,
    now: i64,
) -> ApiResult<Vec<TaskDefinition>> {
    if file.tasks.len() > MAX_FILE_TASKS {
        return Err(ApiError::field(
            "tasks",
            format!("at most {MAX_FILE_TASKS} tasks per file"),
        ));
    }
    let mut problems = Vec::new();
    let mut seen = HashSet::new();
    let mut defs = Vec::with_capacity(file.tasks.len());
    for (i, spec) in file.tasks.iter().enumerate() {
        if !seen.insert(spec.name.as_str()) {
            problems.push(FieldProblem {
                field: format!("tasks[{i}].name"),
                message: format!("{:?} appears more than once", spec.name),
            });
        }
        match spec.check(apps, now) {
            Ok(d) => defs.push(d),
            Err(e) => problems.extend(e.errors.into_iter().map(|p| FieldProblem {
                field: format!("tasks[{i}].{}", p.field),
                message: p.message,
            })),
        }
    }
    let mut pairs: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, dep) in file.dependencies.iter().enumerate() {
        if let Some(first) = pairs.get(&(dep.parent.as_str(), dep.child.as_str())) {
            problems.push(FieldProblem {
                field: format!("dependencies[{i}].parent"),
                message: format!(
                    "{:?} is already a parent of {:?} in dependencies[{first}]; list a dependency once",
                    dep.parent, dep.child
                ),
            });
        } else {
            pairs.insert((dep.parent.as_str(), dep.child.as_str()), i);
        }
        for (field, name) in [("parent", &dep.parent), ("child", &dep.child)] {
            if !seen.contains(name.as_str()) && !existing.contains_key(name.as_str()) {
                problems.push(FieldProblem {
                    field: format!("dependencies[{i}].{field}"),
                    message: format!("no task named {name:?} in the file or the tenant"),
                });
            }
        }
    }
    if problems.is_empty() {
        Ok(defs)
    } else {
        Err(ApiError::fields(problems))
    }
}

/// Plans and, unless `dry_run`, applies a task file in one transaction. With `prune`, tasks
/// and dependencies the file does not name are deleted.
pub async fn apply(
    services: &Services,
    caller: &Caller,
    tenant: &str,
    file: &TaskFile,
    prune: bool,
    dry_run: bool,
) -> ApiResult<Plan> {
    let tenant = tenant_access(services, caller, tenant, Action::Administer).await?;
    let applied = apply_to(services, caller, &tenant, file, prune, dry_run).await;
    super::quotas::after_check(services, &tenant, applied).await
}

/// [`apply`] to a tenant the caller may administer; each task created is within `max_tasks`.
async fn apply_to(
    services: &Services,
    caller: &Caller,
    tenant: &Tenant,
    file: &TaskFile,
    prune: bool,
    dry_run: bool,
) -> ApiResult<Plan> {
    let now = services.now();
    let mut tx = services.write().await?;
    let apps = tx.list_apps(tenant.id).await?;
    let current = all_tasks(tx.as_mut(), tenant.id).await?;
    let by_name: HashMap<&str, &Task> = current.iter().map(|t| (t.name.as_str(), t)).collect();
    let defs = resolve_file(file, &apps, &by_name, now)?;

    let mut plan = Plan::default();
    let mut work = Vec::new();
    for def in defs {
        let (step, changes) = match by_name.get(def.name.as_str()) {
            None => (Step::Create, Vec::new()),
            Some(task) => {
                let stored = task.definition().map_err(ApiError::internal)?;
                match changed_fields(&stored, &def) {
                    c if c.is_empty() => (Step::Unchanged, Vec::new()),
                    c => (Step::Update, c.into_iter().map(str::to_owned).collect()),
                }
            }
        };
        plan.items.push(task_item(&def.name, step, changes));
        work.push((step, def));
    }
    let named: HashSet<&str> = file.tasks.iter().map(|t| t.name.as_str()).collect();
    let doomed: Vec<&Task> = if prune {
        current
            .iter()
            .filter(|t| !named.contains(t.name.as_str()))
            .collect()
    } else {
        Vec::new()
    };
    for task in &doomed {
        plan.items
            .push(task_item(&task.name, Step::Delete, Vec::new()));
    }

    // Dependencies, by names.
    let names: HashMap<TaskId, &str> = current.iter().map(|t| (t.id, t.name.as_str())).collect();
    let mut existing_deps: BTreeMap<(String, String), DependencyCondition> = BTreeMap::new();
    for d in tx.list_dependencies(tenant.id).await? {
        if let (Some(p), Some(c)) = (names.get(&d.parent_task_id), names.get(&d.child_task_id)) {
            existing_deps.insert(((*p).to_owned(), (*c).to_owned()), d.condition);
        }
    }
    let mut dep_work = Vec::new();
    for dep in &file.dependencies {
        let key = (dep.parent.clone(), dep.child.clone());
        let step = match existing_deps.get(&key) {
            None => Step::Create,
            Some(c) if *c == dep.condition => Step::Unchanged,
            Some(_) => Step::Update,
        };
        plan.items.push(dependency_item(&key, step));
        if step != Step::Unchanged {
            dep_work.push(dep.clone());
        }
    }
    let wanted: HashSet<(String, String)> = file
        .dependencies
        .iter()
        .map(|d| (d.parent.clone(), d.child.clone()))
        .collect();
    let doomed_names: HashSet<&str> = doomed.iter().map(|t| t.name.as_str()).collect();
    let mut dep_removals = Vec::new();
    if prune {
        for key in existing_deps.keys().filter(|k| !wanted.contains(*k)) {
            plan.items.push(dependency_item(key, Step::Delete));
            // Deleting a task drops its dependencies with it.
            if !doomed_names.contains(key.0.as_str()) && !doomed_names.contains(key.1.as_str()) {
                dep_removals.push(key.clone());
            }
        }
    }
    // Refused here, before anything is written, so a dry run refuses what applying would.
    check_cycles(&existing_deps, &dep_removals, &doomed_names, &dep_work)?;
    if dry_run {
        return Ok(plan);
    }

    let mut ids: HashMap<String, TaskId> = current.iter().map(|t| (t.name.clone(), t.id)).collect();
    for (parent, child) in &dep_removals {
        let (p, c) = (id_of(&ids, parent)?, id_of(&ids, child)?);
        tx.delete_dependency(tenant.id, p, c).await?;
        audit_dependency(tx.as_mut(), caller, tenant, "dependency.remove", p, c, now).await?;
    }
    for task in &doomed {
        tx.delete_task(tenant.id, task.id, task.version, now)
            .await?;
        audit_task(
            tx.as_mut(),
            caller,
            tenant,
            "task.delete",
            task.id,
            json!({ "name": task.name, "by": "apply" }),
            now,
        )
        .await?;
    }
    for ((step, def), item) in work.iter().zip(&plan.items) {
        match step {
            Step::Create => {
                super::quotas::check_new_task(tx.as_mut(), tenant, now).await?;
                let created = tx.create_task(tenant.id, def, now).await?;
                ids.insert(def.name.clone(), created.task.id);
                audit_task(
                    tx.as_mut(),
                    caller,
                    tenant,
                    "task.create",
                    created.task.id,
                    json!({ "name": def.name, "by": "apply" }),
                    now,
                )
                .await?;
            }
            Step::Update => {
                let task = by_name
                    .get(def.name.as_str())
                    .ok_or_else(|| ApiError::internal("planned update of an unknown task"))?;
                tx.update_task(tenant.id, task.id, task.version, def, now)
                    .await?;
                audit_task(
                    tx.as_mut(),
                    caller,
                    tenant,
                    "task.update",
                    task.id,
                    json!({ "changed": item.changes, "by": "apply" }),
                    now,
                )
                .await?;
            }
            Step::Unchanged | Step::Delete => {}
        }
    }
    for dep in &dep_work {
        let (p, c) = (id_of(&ids, &dep.parent)?, id_of(&ids, &dep.child)?);
        tx.add_dependency(tenant.id, p, c, dep.condition, now)
            .await?;
        audit_dependency(tx.as_mut(), caller, tenant, "dependency.add", p, c, now).await?;
    }
    tx.commit().await?;
    plan.applied = true;
    Ok(plan)
}

/// Refuses dependencies that would close a cycle once the file is applied: the tenant's
/// dependencies, less those the file removes, plus those it adds, in the file's order — the
/// same refusal (`409 cycle`, naming the cycle) as the store gives for one dependency.
fn check_cycles(
    existing: &BTreeMap<(String, String), DependencyCondition>,
    removed: &[(String, String)],
    doomed: &HashSet<&str>,
    added: &[DependencySpec],
) -> ApiResult<()> {
    let mut edges: Vec<(&str, &str)> = existing
        .keys()
        .filter(|k| !removed.contains(k))
        .filter(|(p, c)| !doomed.contains(p.as_str()) && !doomed.contains(c.as_str()))
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    for dep in added {
        let (parent, child) = (dep.parent.as_str(), dep.child.as_str());
        let cycle = |detail: String| {
            ApiError::new(
                crate::service::error::Code::Cycle,
                format!("dependency cycle: {detail}"),
            )
        };
        if parent == child {
            return Err(cycle(format!("task {parent:?} cannot depend on itself")));
        }
        if let Some(mut path) = name_path(&edges, child, parent) {
            path.push(child);
            return Err(cycle(format!(
                "making {child:?} a child of {parent:?} would close the cycle {}",
                path.join(" → ")
            )));
        }
        if !edges.contains(&(parent, child)) {
            edges.push((parent, child));
        }
    }
    Ok(())
}

/// The shortest chain of dependencies from task `from` to task `to` (by name), both included.
fn name_path<'a>(edges: &[(&'a str, &'a str)], from: &'a str, to: &'a str) -> Option<Vec<&'a str>> {
    let mut came_from: HashMap<&str, &str> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([from]);
    while let Some(at) = queue.pop_front() {
        if at == to {
            let mut path = vec![to];
            let mut cur = to;
            while cur != from {
                cur = came_from.get(cur)?;
                path.push(cur);
            }
            path.reverse();
            return Some(path);
        }
        for &(_, next) in edges.iter().filter(|(p, _)| *p == at) {
            if next != from && !came_from.contains_key(next) {
                came_from.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    None
}

fn id_of(ids: &HashMap<String, TaskId>, name: &str) -> ApiResult<TaskId> {
    ids.get(name)
        .copied()
        .ok_or_else(|| ApiError::field("dependencies", format!("no task named {name:?}")))
}

fn task_item(name: &str, step: Step, changes: Vec<String>) -> PlanItem {
    PlanItem {
        kind: "task".to_owned(),
        name: name.to_owned(),
        step,
        changes,
    }
}

fn dependency_item(key: &(String, String), step: Step) -> PlanItem {
    PlanItem {
        kind: "dependency".to_owned(),
        name: format!("{} -> {}", key.0, key.1),
        step,
        changes: Vec::new(),
    }
}

async fn audit_task(
    tx: &mut dyn Tx,
    caller: &Caller,
    tenant: &Tenant,
    action: &str,
    id: TaskId,
    details: serde_json::Value,
    now: i64,
) -> ApiResult<()> {
    let change = Change {
        tenant: Some(tenant.id),
        action,
        target_kind: "task",
        target_id: id.to_string(),
        details,
    };
    audit(tx, caller, change, now).await
}

async fn audit_dependency(
    tx: &mut dyn Tx,
    caller: &Caller,
    tenant: &Tenant,
    action: &str,
    parent: TaskId,
    child: TaskId,
    now: i64,
) -> ApiResult<()> {
    let change = Change {
        tenant: Some(tenant.id),
        action,
        target_kind: "dependency",
        target_id: format!("{parent}->{child}"),
        details: json!({ "by": "apply" }),
    };
    audit(tx, caller, change, now).await
}

/// Every TOML date-time in `value` as its text. A time with an offset is RFC 3339 and reads as
/// the API's times do; a local date-time or a bare date is refused when read, naming its key.
fn datetimes_as_text(value: &mut toml::Value) {
    match value {
        toml::Value::Datetime(d) => *value = toml::Value::String(d.to_string()),
        toml::Value::Array(items) => items.iter_mut().for_each(datetimes_as_text),
        toml::Value::Table(table) => table.iter_mut().for_each(|(_, v)| datetimes_as_text(v)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::tasks::ScheduleInput;

    const EXAMPLE: &str = r#"
[[tasks]]
name = "nightly-report"
app = "billing"
handler = "build-report"
params = { format = "pdf" }
max_retries = 2

[tasks.schedule]
kind = "cron"
expr = "0 0 2 * * ?"
timezone = "Asia/Shanghai"

[[tasks]]
name = "send-report"
app = "billing"
handler = "mail"
schedule = { kind = "manual" }

[[dependencies]]
parent = "nightly-report"
child = "send-report"
"#;

    #[test]
    fn toml_files_read_and_write_the_same_tasks() {
        let file = TaskFile::parse(EXAMPLE, Format::Toml).unwrap();
        assert_eq!(file.tasks.len(), 2);
        assert_eq!(file.tasks[0].max_retries, Some(2));
        assert_eq!(
            file.dependencies[0].condition,
            DependencyCondition::OnSuccess
        );
        for format in [Format::Toml, Format::Json] {
            let text = file.render(format).unwrap();
            assert_eq!(TaskFile::parse(&text, format).unwrap(), file, "{text}");
        }
    }

    #[test]
    fn unknown_keys_are_refused_naming_them() {
        let err =
            TaskFile::parse("[[tasks]]\nname = \"a\"\nretries = 3\n", Format::Toml).unwrap_err();
        assert!(err.to_string().contains("retries"), "{err}");
        assert!(err.to_string().contains("tasks[0]"), "{err}");
    }

    #[test]
    fn toml_date_times_are_read_quoted_or_not_and_a_time_without_offset_is_named() {
        let task = |at: &str| {
            format!(
                "[[tasks]]\nname = \"a\"\napp = \"x\"\nhandler = \"h\"\n[tasks.schedule]\nkind = \"once\"\nat = {at}\n"
            )
        };
        for at in [
            "2026-12-01T09:30:00+08:00",
            "\"2026-12-01T09:30:00+08:00\"",
            "2026-12-01T01:30:00Z",
        ] {
            let file = TaskFile::parse(&task(at), Format::Toml).unwrap();
            let ScheduleInput::Once { at } = &file.tasks[0].schedule else {
                panic!("{:?}", file.tasks[0].schedule);
            };
            assert_eq!(at.to_rfc3339(), "2026-12-01T01:30:00+00:00");
        }
        let err = TaskFile::parse(&task("2026-12-01T09:30:00"), Format::Toml).unwrap_err();
        assert!(err.to_string().contains("tasks[0].schedule"), "{err}");
    }
}

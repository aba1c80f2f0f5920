//! Operations composed of several store primitives, written once for both backends.
//!
//! They are inherent methods of `dyn Tx`, so callers use them like the primitives:
//! `tx.create_task(tenant, &def, now)`.

use crate::run::{NewRun, Run, TriggerKind};
use crate::schedule::{Schedule, ScheduleKind, ScheduleSpec};
use crate::task::{
    Dependency, DependencyCondition, ScheduleColumns, Task, TaskDefinition, TaskId, dependency_path,
};
use crate::tenant::TenantId;

use super::{Result, StoreError, Tx};

/// A task after a change, with the occurrence the change materialised (if any).
#[derive(Debug, Clone, PartialEq)]
pub struct CreatedTask {
    pub task: Task,
    pub next_run: Option<Run>,
}

/// Trigger kinds whose pending runs a paused task keeps (work already under way).
const SCHEDULED: &[TriggerKind] = &[TriggerKind::Schedule];

/// Every trigger kind: a deleted task keeps no pending run.
const ALL_TRIGGERS: &[TriggerKind] = &[
    TriggerKind::Schedule,
    TriggerKind::Manual,
    TriggerKind::Retry,
    TriggerKind::Chain,
    TriggerKind::Recovery,
];

impl dyn Tx + '_ {
    /// Creates a task and, unless it is created paused, materialises its first occurrence.
    pub async fn create_task(
        &mut self,
        tenant: TenantId,
        def: &TaskDefinition,
        now: i64,
    ) -> Result<CreatedTask> {
        let schedule = def.validate(now)?;
        let cols = ScheduleColumns::from_schedule(&def.schedule, &schedule);
        let mut task = self.insert_task(tenant, def, &cols, now).await?;
        let next_run = self.materialise_first(&mut task, &schedule, now).await?;
        Ok(CreatedTask { task, next_run })
    }

    /// Replaces a task's definition if it is still at `expected_version`. When the schedule
    /// changes, the pending scheduled occurrence is replaced by one from the new schedule (and
    /// the `max_fires` count restarts).
    pub async fn update_task(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        def: &TaskDefinition,
        now: i64,
    ) -> Result<CreatedTask> {
        let current = self.get_task(tenant, id).await?;
        let schedule = def.validate(now)?;
        let mut cols = ScheduleColumns::from_schedule(&def.schedule, &schedule);
        // Editing a fixed rate without giving an anchor keeps the period's phase.
        if matches!(
            def.schedule,
            ScheduleSpec::FixedRate {
                anchor_at: None,
                ..
            }
        ) && current.schedule_kind == ScheduleKind::FixedRate
            && cols.interval_ms == current.interval_ms
        {
            cols.anchor_at = current.anchor_at;
        }
        let schedule_changed = cols != current_columns(&current);
        let mut task = self
            .update_task_row(
                tenant,
                id,
                expected_version,
                def,
                &cols,
                schedule_changed,
                now,
            )
            .await?;
        // The pending occurrence stays unless the schedule changed or the task was paused or
        // resumed by this edit: editing a description must not drop an occurrence that is due.
        let mut next_run = None;
        if task.paused {
            self.delete_pending_runs(id, SCHEDULED).await?;
        } else if schedule_changed || current.paused {
            self.delete_pending_runs(id, SCHEDULED).await?;
            let schedule = task.schedule().map_err(StoreError::Invalid)?;
            next_run = self.materialise_first(&mut task, &schedule, now).await?;
        }
        Ok(CreatedTask { task, next_run })
    }

    /// Pauses a task: no scheduled occurrence until it is resumed.
    pub async fn pause_task(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        now: i64,
    ) -> Result<Task> {
        let task = self
            .set_task_paused(tenant, id, expected_version, true, now)
            .await?;
        self.delete_pending_runs(id, SCHEDULED).await?;
        Ok(task)
    }

    /// Resumes a task: its next occurrence is materialised from now on (missed ones are not
    /// fired).
    pub async fn resume_task(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        now: i64,
    ) -> Result<CreatedTask> {
        let mut task = self
            .set_task_paused(tenant, id, expected_version, false, now)
            .await?;
        let schedule = task.schedule().map_err(StoreError::Invalid)?;
        let next_run = self.materialise_first(&mut task, &schedule, now).await?;
        Ok(CreatedTask { task, next_run })
    }

    /// Deletes a task: it disappears from listings, its dependencies go and its pending runs
    /// are removed; its run history stays.
    pub async fn delete_task(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        expected_version: i64,
        now: i64,
    ) -> Result<Task> {
        let task = self
            .mark_task_deleted(tenant, id, expected_version, now)
            .await?;
        self.delete_pending_runs(id, ALL_TRIGGERS).await?;
        Ok(task)
    }

    /// Materialises the occurrence of `task` that follows `after_ms` as a pending run in
    /// `node_group`, counting it toward `max_fires`. `None` when the schedule is over or the
    /// occurrence already exists.
    pub async fn materialise_next(
        &mut self,
        task: &Task,
        schedule: &Schedule,
        node_group: &str,
        after_ms: i64,
        now: i64,
    ) -> Result<Option<Run>> {
        let Some(at) = task.next_occurrence(schedule, after_ms) else {
            return Ok(None);
        };
        self.insert_occurrence(task, node_group, at, now).await
    }

    /// Triggers a task by hand: a run due now, with optional parameters replacing the task's.
    pub async fn trigger_task(
        &mut self,
        tenant: TenantId,
        id: TaskId,
        params: Option<serde_json::Value>,
        by: &str,
        now: i64,
    ) -> Result<Run> {
        let task = self.get_task(tenant, id).await?;
        let group = self.get_tenant(tenant).await?.node_group;
        // Two triggers in the same millisecond are two runs.
        let mut run = NewRun::occurrence(&task, &group, now, TriggerKind::Manual);
        run.params = params;
        run.triggered_by = Some(by.to_owned());
        let Some(run) = self.insert_run_at_free_ms(&mut run, now).await? else {
            return Err(StoreError::InvalidState(format!(
                "task {id} was triggered too often in the same second; try again"
            )));
        };
        self.notify_due(&run.node_group).await?;
        Ok(run)
    }

    /// Inserts `run` at its scheduled time or, when that occurrence exists already (another
    /// run of the task in the same millisecond), at the next free millisecond within a second;
    /// its due time stays. `None`: the whole second is taken.
    pub async fn insert_run_at_free_ms(
        &mut self,
        run: &mut NewRun,
        now: i64,
    ) -> Result<Option<Run>> {
        let at = run.scheduled_at;
        for offset in 0..1000 {
            run.scheduled_at = at + offset;
            if let Some(inserted) = self.insert_run(run, now).await? {
                return Ok(Some(inserted));
            }
        }
        Ok(None)
    }

    /// Adds (or changes the condition of) a dependency parent → child within a tenant. A
    /// dependency that would close a cycle is refused with an error naming the cycle.
    pub async fn add_dependency(
        &mut self,
        tenant: TenantId,
        parent: TaskId,
        child: TaskId,
        condition: DependencyCondition,
        now: i64,
    ) -> Result<Dependency> {
        // Serialise dependency changes of this tenant so two concurrent additions cannot
        // close a cycle between them.
        self.lock_tenant(tenant).await?;
        let parent_task = self.get_task(tenant, parent).await?;
        let child_task = self.get_task(tenant, child).await?;
        if parent == child {
            return Err(StoreError::Cycle(format!(
                "task {:?} cannot depend on itself",
                parent_task.name
            )));
        }
        let edges = self.list_dependencies(tenant).await?;
        if let Some(path) = dependency_path(&edges, child, parent) {
            let mut names = Vec::with_capacity(path.len() + 1);
            for id in &path {
                names.push(self.get_task(tenant, *id).await?.name);
            }
            names.push(child_task.name.clone());
            return Err(StoreError::Cycle(format!(
                "making {:?} a child of {:?} would close the cycle {}",
                child_task.name,
                parent_task.name,
                names.join(" → ")
            )));
        }
        self.insert_dependency(tenant, parent, child, condition, now)
            .await
    }

    /// Materialises the first occurrence after a create, edit or resume, and counts it in
    /// `task` too.
    async fn materialise_first(
        &mut self,
        task: &mut Task,
        schedule: &Schedule,
        now: i64,
    ) -> Result<Option<Run>> {
        let Some(at) = task.first_occurrence(schedule, now) else {
            return Ok(None);
        };
        let group = self.get_tenant(task.tenant_id).await?.node_group;
        let run = self.insert_occurrence(task, &group, at, now).await?;
        if run.is_some() {
            task.fires_scheduled += 1;
        }
        Ok(run)
    }

    async fn insert_occurrence(
        &mut self,
        task: &Task,
        node_group: &str,
        at: i64,
        now: i64,
    ) -> Result<Option<Run>> {
        let run = NewRun::occurrence(task, node_group, at, TriggerKind::Schedule);
        let inserted = self.insert_run(&run, now).await?;
        if inserted.is_some() {
            self.add_fires_scheduled(task.id, 1).await?;
        }
        Ok(inserted)
    }
}

fn current_columns(task: &Task) -> ScheduleColumns {
    ScheduleColumns {
        kind: task.schedule_kind,
        cron_expr: task.cron_expr.clone(),
        interval_ms: task.interval_ms,
        anchor_at: task.anchor_at,
        timezone: task.timezone.clone(),
    }
}

//! The watchdog: every node runs it; the store hands each piece of work to one node only
//! (`SKIP LOCKED` selections, atomic state changes and alarm dedupe keys).
//!
//! One [`Watchdog::run_once`]:
//! - times out running runs past their deadline (their executor is then told to cancel them,
//!   see [`WatchReport::cancel`]) and applies the retry policy;
//! - declares executor instances that stopped heartbeating lost, their running runs `lost`
//!   (recovered when the task allows) and raises `executor_lost`;
//! - reports engine nodes that stopped heartbeating (`node_lost`);
//! - raises `not_started` for runs still waiting past their task's start timeout.

use std::collections::HashMap;
use std::sync::Arc;

use crate::alarm::{AlarmKind, NewAlarm, Severity};
use crate::app::ExecutorId;
use crate::claimer::Cancellation;
use crate::clock::ms_to_datetime;
use crate::outcome::{Finish, Finished, finish_run};
use crate::run::{Run, RunState};
use crate::store::{Result, Store};
use crate::task::{Task, TaskId};

/// How long silence means death, and how much work one pass takes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchConfig {
    /// An executor instance with no heartbeat for this long is lost.
    pub executor_timeout_ms: i64,
    /// An engine node with no heartbeat for this long is reported lost.
    pub node_timeout_ms: i64,
    /// At most this many runs per kind of check and pass.
    pub batch: i64,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            executor_timeout_ms: 5_000,
            node_timeout_ms: 10_000,
            batch: 500,
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchReport {
    /// Runs timed out; their executors should be told to cancel them.
    pub cancel: Vec<Cancellation>,
    /// Runs declared lost with their executor.
    pub lost: Vec<Run>,
    /// Recovery and retry runs started.
    pub retried: usize,
    pub executors_lost: Vec<ExecutorId>,
    pub nodes_lost: Vec<String>,
    /// Runs alarmed as not started in time.
    pub not_started: Vec<Run>,
}

/// Watches deadlines and heartbeats.
#[derive(Debug, Clone)]
pub struct Watchdog {
    store: Arc<dyn Store>,
    config: WatchConfig,
}

impl Watchdog {
    pub fn new(store: Arc<dyn Store>, config: WatchConfig) -> Self {
        Self { store, config }
    }

    /// One pass at `now`; `jitter` (0..=1) spreads retry delays.
    pub async fn run_once(&self, now: i64, jitter: f64) -> Result<WatchReport> {
        let mut report = WatchReport::default();
        self.deadlines(now, jitter, &mut report).await?;
        self.executors(now, jitter, &mut report).await?;
        self.nodes(now, &mut report).await?;
        self.start_timeouts(now, &mut report).await?;
        Ok(report)
    }

    async fn deadlines(&self, now: i64, jitter: f64, report: &mut WatchReport) -> Result<()> {
        let mut tx = self.store.begin().await?;
        let overdue = tx
            .running_runs_past_deadline(now, self.config.batch)
            .await?;
        if overdue.is_empty() {
            return tx.commit().await;
        }
        let ids: Vec<TaskId> = overdue.iter().map(|r| r.task_id).collect();
        let tasks: HashMap<TaskId, Arc<Task>> = tx
            .lock_tasks(&ids)
            .await?
            .into_iter()
            .map(|t| (t.id, Arc::new(t)))
            .collect();
        for run in overdue {
            let late = now - run.deadline_at.unwrap_or(now);
            let finish = Finish::decided(
                RunState::TimedOut,
                format!(
                    "did not finish before its deadline ({}); {late} ms over",
                    ms_to_datetime(run.deadline_at.unwrap_or(now)).to_rfc3339()
                ),
                true,
                now,
            );
            if let Finished::Applied { run, effects } =
                finish_run(tx.as_mut(), run.id, None, &finish, jitter).await?
            {
                report.retried += usize::from(effects.next_attempt.is_some());
                if let Some(task) = tasks.get(&run.task_id) {
                    report.cancel.push(Cancellation {
                        task: task.clone(),
                        run,
                    });
                }
            }
        }
        tx.commit().await
    }

    async fn executors(&self, now: i64, jitter: f64, report: &mut WatchReport) -> Result<()> {
        let mut tx = self.store.begin().await?;
        let lost = tx
            .mark_executors_lost(now - self.config.executor_timeout_ms, self.config.batch)
            .await?;
        if lost.is_empty() {
            return tx.commit().await;
        }
        let ids: Vec<ExecutorId> = lost.iter().map(|e| e.id).collect();
        let runs = tx.running_runs_on_executors(&ids).await?;
        for executor in &lost {
            let theirs: Vec<&Run> = runs
                .iter()
                .filter(|r| r.executor_id == Some(executor.id))
                .collect();
            let silent = now - executor.last_heartbeat_at;
            let mut alarm = NewAlarm::new(
                Some(executor.tenant_id),
                AlarmKind::ExecutorLost,
                Severity::Critical,
                format!(
                    "executor {} ({}) stopped heartbeating {silent} ms ago; {} running run(s) lost",
                    executor.instance_id,
                    executor.base_url,
                    theirs.len()
                ),
            );
            alarm.executor_id = Some(executor.id);
            alarm.details = serde_json::json!({
                "instance_id": executor.instance_id,
                "base_url": executor.base_url,
                "last_heartbeat_at": executor.last_heartbeat_at,
                "runs": theirs.iter().map(|r| r.id).collect::<Vec<_>>(),
            });
            alarm.dedupe_key = Some(format!(
                "executor_lost:{}:{}",
                executor.id, executor.last_heartbeat_at
            ));
            tx.insert_alarm(&alarm, now).await?;
            for run in theirs {
                let finish = Finish::decided(
                    RunState::Lost,
                    format!("executor {} stopped heartbeating", executor.instance_id),
                    true,
                    now,
                );
                if let Finished::Applied { run, effects } =
                    finish_run(tx.as_mut(), run.id, None, &finish, jitter).await?
                {
                    report.retried += usize::from(effects.next_attempt.is_some());
                    report.lost.push(run);
                }
            }
        }
        report.executors_lost.extend(ids);
        tx.commit().await
    }

    async fn nodes(&self, now: i64, report: &mut WatchReport) -> Result<()> {
        let mut tx = self.store.begin().await?;
        for node in tx
            .mark_nodes_lost(now - self.config.node_timeout_ms)
            .await?
        {
            let mut alarm = NewAlarm::new(
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
            alarm.node_id = Some(node.id.clone());
            alarm.details = serde_json::json!({
                "groups": node.node_groups.0,
                "last_heartbeat_at": node.last_heartbeat_at,
            });
            alarm.dedupe_key = Some(format!("node_lost:{}:{}", node.id, node.last_heartbeat_at));
            tx.insert_alarm(&alarm, now).await?;
            report.nodes_lost.push(node.id);
        }
        tx.commit().await
    }

    async fn start_timeouts(&self, now: i64, report: &mut WatchReport) -> Result<()> {
        let mut tx = self.store.begin().await?;
        for run in tx.runs_not_started(now, self.config.batch).await? {
            let mut alarm = NewAlarm::new(
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
            alarm.task_id = Some(run.task_id);
            alarm.run_id = Some(run.id);
            alarm.details = serde_json::json!({
                "due_at": run.due_at,
                "late_ms": now - run.due_at,
                "dispatch_attempts": run.dispatch_attempts,
            });
            alarm.dedupe_key = Some(format!("not_started:{}", run.id));
            if tx.insert_alarm(&alarm, now).await?.is_some() {
                report.not_started.push(run);
            }
        }
        tx.commit().await
    }
}

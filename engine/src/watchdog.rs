//! The watchdog: every node runs it; the store hands each piece of work to one node only
//! (`SKIP LOCKED` selections, atomic state changes and alarm dedupe keys).
//!
//! One [`Watchdog::run_once`]:
//! - times out running runs past their deadline (their executor is then told to cancel them,
//!   see [`WatchReport::cancel`]) and applies the retry policy;
//! - declares executor instances lost that stopped heartbeating to every node and do not answer
//!   a direct probe ([`Probe`]); their running runs become `lost` (recovered when the task
//!   allows) and `executor_lost` is raised;
//! - reports engine nodes that stopped heartbeating (`node_lost`);
//! - raises `not_started` for runs still waiting past their task's start timeout;
//! - raises one `backlog` alarm per episode of an app whose due runs wait for capacity (its
//!   live executors are full or draining and a pending run is more than
//!   [`BACKLOG_AFTER_MS`] late), resolved when no run waits that long any more;
//! - raises one `quota` alarm per episode of a tenant whose due runs wait that long behind its
//!   concurrency or rate quota, and closes every quota episode (the console opens those of
//!   refused changes) once the tenant is back under the quota, resolving its alarm;
//! - takes the cancel requests people made through the console for runs an executor instance
//!   may hold ([`WatchReport::cancel_requested`]: the caller tells those instances);
//! - purges manual triggers' idempotency keys older than their window
//!   ([`TRIGGER_KEY_WINDOW_MS`]), one small batch at a time, every
//!   [`TRIGGER_KEY_PURGE_EVERY_MS`] (at once again while a batch comes back full).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use mthpt_wrapper::protocol::{HealthResponse, paths};

use crate::alarm::NewAlarm;
use crate::app::{AppId, Executor, ExecutorId};
use crate::claimer::Cancellation;
use crate::clock::{Clock, ms_to_datetime};
use crate::directory::Directory;
use crate::outcome::{Finish, Finished, finish_runs, log_finished};
use crate::quota::{FireBucket, Quota};
use crate::run::{Run, RunId, RunState};
use crate::run_events::RunEvents;
use crate::store::{Result, Store, TRIGGER_KEY_WINDOW_MS};
use crate::task::{Task, TaskId};
use crate::tenant::TenantId;

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

/// How late an app's oldest pending run must be, while the app's executors are full, for a
/// `backlog` alarm: long enough that a burst the executors absorb in a few seconds is not one.
pub const BACKLOG_AFTER_MS: i64 = 10_000;

/// Waiting runs an app's backlog alarm counts at most (its details say "at least" beyond).
pub const BACKLOG_COUNT_LIMIT: i64 = 10_000;

/// How often idempotency keys are purged (while there is no backlog).
pub const TRIGGER_KEY_PURGE_EVERY_MS: i64 = 60_000;

/// The most idempotency keys one purge deletes.
pub const TRIGGER_KEY_PURGE_BATCH: i64 = 500;

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
    /// Silent instances that answered a direct probe: alive, not lost.
    pub executors_answered: Vec<ExecutorId>,
    pub nodes_lost: Vec<String>,
    /// Runs alarmed as not started in time.
    pub not_started: Vec<Run>,
    /// Runs a person cancelled while an executor instance may hold them: that instance should
    /// be told (the run's `error` says why and who).
    pub cancel_requested: Vec<Cancellation>,
    /// Idempotency keys purged.
    pub trigger_keys_purged: u64,
    /// Backlog episodes opened (an alarm raised each), by app.
    pub backlogs_raised: Vec<AppId>,
    /// Backlog episodes closed (their alarms resolved), by app.
    pub backlogs_resolved: Vec<AppId>,
    /// Quota episodes opened here (an alarm raised each).
    pub quotas_raised: Vec<(TenantId, Quota)>,
    /// Quota episodes closed (their alarms resolved).
    pub quotas_resolved: Vec<(TenantId, Quota)>,
}

/// Asks executor instances directly whether they are alive.
#[async_trait::async_trait]
pub trait Probe: Send + Sync + std::fmt::Debug {
    /// Those of `executors` that answer a health check as themselves, now.
    async fn answering(&self, executors: &[Executor]) -> HashSet<ExecutorId>;
}

/// A probe nobody answers: silence alone decides (for tests and tools without a network).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProbe;

#[async_trait::async_trait]
impl Probe for NoProbe {
    async fn answering(&self, _executors: &[Executor]) -> HashSet<ExecutorId> {
        HashSet::new()
    }
}

/// How long a probed instance may take to answer.
pub const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Probes instances with a signed `GET /mthpt/v1/health`; an instance answers as itself when
/// the answer names its instance id (another process at the same address does not count).
#[derive(Debug)]
pub struct HealthProbe {
    directory: Arc<Directory>,
    clock: Arc<dyn Clock>,
    timeout: std::time::Duration,
}

impl HealthProbe {
    pub fn new(directory: Arc<Directory>, clock: Arc<dyn Clock>) -> Self {
        Self {
            directory,
            clock,
            timeout: PROBE_TIMEOUT,
        }
    }
}

#[async_trait::async_trait]
impl Probe for HealthProbe {
    async fn answering(&self, executors: &[Executor]) -> HashSet<ExecutorId> {
        let mut apps: Vec<_> = executors.iter().map(|e| e.app_id).collect();
        apps.sort_unstable();
        apps.dedup();
        let entries = match self.directory.entries(&apps, self.clock.now_ms()).await {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look up apps to probe their instances");
                return HashSet::new();
            }
        };
        let probes = executors.iter().filter_map(|e| {
            let entry = entries.get(&e.app_id)?.clone();
            Some(async move {
                let answer = tokio::time::timeout(
                    self.timeout,
                    entry
                        .client
                        .get_json::<HealthResponse>(&e.base_url, paths::HEALTH),
                )
                .await;
                match answer {
                    Ok(Ok(health)) if health.instance_id == e.instance_id => Some(e.id),
                    Ok(Ok(health)) => {
                        tracing::info!(app = %entry.key, instance = %e.instance_id, answered = %health.instance_id, "another instance answers at a silent instance's address");
                        None
                    }
                    Ok(Err(err)) => {
                        tracing::info!(app = %entry.key, instance = %e.instance_id, error = %err, "silent instance does not answer its probe");
                        None
                    }
                    Err(_) => {
                        tracing::info!(app = %entry.key, instance = %e.instance_id, "silent instance's probe timed out");
                        None
                    }
                }
            })
        });
        futures::future::join_all(probes)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Watches deadlines and heartbeats.
#[derive(Debug, Clone)]
pub struct Watchdog {
    store: Arc<dyn Store>,
    config: WatchConfig,
    probe: Arc<dyn Probe>,
    /// When idempotency keys are to be purged next (epoch ms).
    next_purge: Arc<AtomicI64>,
    /// Names the apps of finished runs in the log.
    directory: Option<Arc<Directory>>,
    /// Where live run events go (after the commit).
    run_events: RunEvents,
    /// How late a waiting run makes a backlog ([`BACKLOG_AFTER_MS`]).
    backlog_after_ms: i64,
}

impl Watchdog {
    /// A watchdog that declares silent instances lost without asking them ([`NoProbe`]).
    pub fn new(store: Arc<dyn Store>, config: WatchConfig) -> Self {
        Self {
            store,
            config,
            probe: Arc::new(NoProbe),
            next_purge: Arc::new(AtomicI64::new(i64::MIN)),
            directory: None,
            run_events: RunEvents::default(),
            backlog_after_ms: BACKLOG_AFTER_MS,
        }
    }

    /// Raises `backlog` for runs waiting this long instead of [`BACKLOG_AFTER_MS`].
    pub fn with_backlog_after(mut self, ms: i64) -> Self {
        self.backlog_after_ms = ms;
        self
    }

    /// Publishes the state changes of the runs it ends to `events`.
    pub fn with_run_events(mut self, events: RunEvents) -> Self {
        self.run_events = events;
        self
    }

    /// Asks silent instances with `probe` before declaring them lost.
    pub fn with_probe(mut self, probe: Arc<dyn Probe>) -> Self {
        self.probe = probe;
        self
    }

    /// Names apps by their keys in the log lines of the runs it finishes (ids otherwise).
    pub fn with_directory(mut self, directory: Arc<Directory>) -> Self {
        self.directory = Some(directory);
        self
    }

    /// One pass at `now`; `jitter` (0..=1) spreads retry delays.
    pub async fn run_once(&self, now: i64, jitter: f64) -> Result<WatchReport> {
        let mut report = WatchReport::default();
        self.deadlines(now, jitter, &mut report).await?;
        self.executors(now, jitter, &mut report).await?;
        self.nodes(now, &mut report).await?;
        self.start_timeouts(now, &mut report).await?;
        self.backlogs(now, &mut report).await?;
        self.quotas(now, &mut report).await?;
        self.cancel_requests(now, &mut report).await?;
        self.purge_trigger_keys(now, &mut report).await?;
        Ok(report)
    }

    /// Takes the due cancel requests (an indexed look-up of the few marked runs, not a scan)
    /// with the tasks their executors are found by.
    async fn cancel_requests(&self, now: i64, report: &mut WatchReport) -> Result<()> {
        let mut tx = self.store.begin().await?;
        let runs = tx.take_cancel_requests(now, self.config.batch).await?;
        if runs.is_empty() {
            return tx.commit().await;
        }
        let ids: Vec<TaskId> = runs.iter().map(|r| r.task_id).collect();
        let tasks: HashMap<TaskId, Arc<Task>> = tx
            .lock_tasks(&ids)
            .await?
            .into_iter()
            .map(|t| (t.id, Arc::new(t)))
            .collect();
        tx.commit().await?;
        for run in runs {
            if let Some(task) = tasks.get(&run.task_id) {
                report.cancel_requested.push(Cancellation {
                    task: task.clone(),
                    run,
                });
            }
        }
        Ok(())
    }

    /// Deletes one batch of expired idempotency keys when a purge is due.
    async fn purge_trigger_keys(&self, now: i64, report: &mut WatchReport) -> Result<()> {
        if now < self.next_purge.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut tx = self.store.begin().await?;
        let purged = tx
            .purge_trigger_keys(now - TRIGGER_KEY_WINDOW_MS, TRIGGER_KEY_PURGE_BATCH)
            .await?;
        tx.commit().await?;
        let full = i64::try_from(purged).unwrap_or(i64::MAX) >= TRIGGER_KEY_PURGE_BATCH;
        let next = if full {
            now
        } else {
            now + TRIGGER_KEY_PURGE_EVERY_MS
        };
        self.next_purge.store(next, Ordering::Relaxed);
        report.trigger_keys_purged = purged;
        Ok(())
    }

    async fn deadlines(&self, now: i64, jitter: f64, report: &mut WatchReport) -> Result<()> {
        let mut tx = self.store.begin().await?;
        let overdue = tx
            .running_runs_past_deadline(now, self.config.batch)
            .await?;
        if overdue.is_empty() {
            return tx.commit().await;
        }
        let items: Vec<(RunId, Finish)> = overdue
            .iter()
            .map(|run| {
                let deadline = run.deadline_at.unwrap_or(now);
                let finish = Finish::decided(
                    RunState::TimedOut,
                    format!(
                        "did not finish before its deadline ({}); {} ms over",
                        ms_to_datetime(deadline).to_rfc3339(),
                        now - deadline
                    ),
                    true,
                    now,
                );
                (run.id, finish)
            })
            .collect();
        // One batch: the runs are locked in id order, then their tasks, as every path does.
        let finished = finish_runs(tx.as_mut(), None, &items, &mut || jitter).await?;
        let mut timed_out = Vec::new();
        for f in &finished {
            if let Ok(Finished::Applied { run, effects, .. }) = f {
                report.retried += usize::from(effects.next_attempt.is_some());
                timed_out.push(run.clone());
            }
        }
        let ids: Vec<TaskId> = timed_out.iter().map(|r| r.task_id).collect();
        let tasks: HashMap<TaskId, Arc<Task>> = tx
            .lock_tasks(&ids)
            .await?
            .into_iter()
            .map(|t| (t.id, Arc::new(t)))
            .collect();
        for run in timed_out {
            if let Some(task) = tasks.get(&run.task_id) {
                report.cancel.push(Cancellation {
                    task: task.clone(),
                    run,
                });
            }
        }
        tx.commit().await?;
        log_finished(&finished, self.directory.as_deref());
        self.run_events.finished(&finished);
        Ok(())
    }

    /// Instances silent for the executor timeout are probed directly first: one that answers
    /// is alive (its heartbeats went astray, e.g. to a paused node) and the answer counts as
    /// its heartbeat; only one silent to every node and not answering is lost.
    async fn executors(&self, now: i64, jitter: f64, report: &mut WatchReport) -> Result<()> {
        let before = now - self.config.executor_timeout_ms;
        let silent = {
            let mut tx = self.store.begin_read().await?;
            tx.silent_executors(before, self.config.batch).await?
        };
        if silent.is_empty() {
            return Ok(());
        }
        let answering = self.probe.answering(&silent).await;
        let (alive, dead): (Vec<ExecutorId>, Vec<ExecutorId>) = silent
            .iter()
            .map(|e| e.id)
            .partition(|id| answering.contains(id));
        let mut tx = self.store.begin().await?;
        if !alive.is_empty() {
            tx.record_executor_probes(&alive, now).await?;
            report.executors_answered.extend(alive);
        }
        let lost = if dead.is_empty() {
            Vec::new()
        } else {
            tx.mark_silent_executors_lost(&dead, before).await?
        };
        if lost.is_empty() {
            return tx.commit().await;
        }
        let ids: Vec<ExecutorId> = lost.iter().map(|e| e.id).collect();
        let runs = tx.running_runs_on_executors(&ids).await?;
        let mut items: Vec<(RunId, Finish)> = Vec::with_capacity(runs.len());
        for executor in &lost {
            let theirs: Vec<&Run> = runs
                .iter()
                .filter(|r| r.executor_id == Some(executor.id))
                .collect();
            let ids: Vec<RunId> = theirs.iter().map(|r| r.id).collect();
            let alarm = NewAlarm::executor_lost(executor, &ids, now);
            tx.insert_alarm(&alarm, now).await?;
            for run in theirs {
                let finish = Finish::decided(
                    RunState::Lost,
                    format!(
                        "executor {} stopped heartbeating and does not answer",
                        executor.instance_id
                    ),
                    true,
                    now,
                );
                items.push((run.id, finish));
            }
        }
        items.sort_by_key(|(id, _)| *id);
        let finished = finish_runs(tx.as_mut(), None, &items, &mut || jitter).await?;
        for f in &finished {
            if let Ok(Finished::Applied { run, effects, .. }) = f {
                report.retried += usize::from(effects.next_attempt.is_some());
                report.lost.push(run.clone());
            }
        }
        report.executors_lost.extend(ids);
        tx.commit().await?;
        log_finished(&finished, self.directory.as_deref());
        self.run_events.finished(&finished);
        Ok(())
    }

    async fn nodes(&self, now: i64, report: &mut WatchReport) -> Result<()> {
        let mut tx = self.store.begin().await?;
        for node in tx
            .mark_nodes_lost(now - self.config.node_timeout_ms)
            .await?
        {
            let alarm = NewAlarm::node_lost(&node, now);
            tx.insert_alarm(&alarm, now).await?;
            report.nodes_lost.push(node.id);
        }
        tx.commit().await
    }

    async fn start_timeouts(&self, now: i64, report: &mut WatchReport) -> Result<()> {
        let mut tx = self.store.begin().await?;
        for run in tx.runs_not_started(now, self.config.batch).await? {
            let alarm = NewAlarm::not_started(&run, now);
            if tx.insert_alarm(&alarm, now).await?.is_some() {
                report.not_started.push(run);
            }
        }
        tx.commit().await
    }

    /// Opens a backlog episode (and raises its one alarm) for each app whose executors are
    /// full while a pending run is more than `backlog_after_ms` late; closes the episode (and
    /// resolves the alarm) once no run waits that long. The runs are never claimed while the
    /// app is full, so this, not `not_started` alone, is what tells of them.
    async fn backlogs(&self, now: i64, report: &mut WatchReport) -> Result<()> {
        let mut tx = self.store.begin().await?;
        let backlogs = tx
            .capacity_backlogs(
                now.saturating_sub(self.backlog_after_ms),
                BACKLOG_COUNT_LIMIT,
            )
            .await?;
        for b in backlogs {
            match &b.alarm_key {
                None if b.full && b.waiting > 0 => {
                    let key = format!("backlog:{}:{now}", b.app_id);
                    if !tx.open_backlog(b.app_id, &key, now).await? {
                        continue;
                    }
                    let alarm = NewAlarm::backlog(
                        b.tenant_id,
                        b.app_id,
                        &b.app_name,
                        b.waiting,
                        BACKLOG_COUNT_LIMIT,
                        b.oldest_due_at.unwrap_or(now),
                        now,
                        key,
                    );
                    tx.insert_alarm(&alarm, now).await?;
                    report.backlogs_raised.push(b.app_id);
                }
                Some(key) if b.waiting == 0 => {
                    tx.close_backlog(b.app_id).await?;
                    tx.resolve_alarm_by_key(b.tenant_id, key, now).await?;
                    report.backlogs_resolved.push(b.app_id);
                }
                _ => {}
            }
        }
        tx.commit().await
    }

    /// Quota episodes: opens one (raising its alarm) for each tenant whose pending runs are
    /// more than `backlog_after_ms` late while it is at its concurrency quota (its running
    /// runs) or its bucket of fires is empty; closes each open one once the tenant is back
    /// under its quota (for these two: no run that late waits and, for the rate, a token is
    /// there; for tasks and waiting runs: its usage is under the quota; or the quota is gone).
    async fn quotas(&self, now: i64, report: &mut WatchReport) -> Result<()> {
        let mut tx = self.store.begin().await?;
        let holds = tx.quota_holds().await?;
        if holds.is_empty() {
            return Ok(());
        }
        let open = tx.open_quota_episodes().await?;
        let late_before = now.saturating_sub(self.backlog_after_ms);
        for h in holds {
            let quotas = h.quotas;
            let oldest = h.oldest_waiting_due_at.filter(|d| *d < late_before);
            let tokens = FireBucket::stored(&quotas, h.fire_tokens, h.fire_tokens_at, now)
                .available(&quotas, now);
            let mine: Vec<&(TenantId, String, String)> =
                open.iter().filter(|o| o.0 == h.tenant_id).collect();
            let usage = if mine
                .iter()
                .any(|o| o.1 == Quota::MaxTasks.as_str() || o.1 == Quota::MaxWaitingRuns.as_str())
            {
                Some(tx.tenant_usage(h.tenant_id, now).await?)
            } else {
                None
            };
            for quota in Quota::ALL {
                let limit = quota.limit(&quotas);
                let held = match quota {
                    Quota::MaxConcurrentRuns => limit.is_some_and(|max| h.running >= max),
                    Quota::MaxFiresPerSecond => limit.is_some() && tokens < 1.0,
                    Quota::MaxTasks | Quota::MaxWaitingRuns => false,
                };
                let key = mine
                    .iter()
                    .find(|o| o.1 == quota.as_str())
                    .map(|o| o.2.clone());
                match (key, limit, oldest) {
                    (None, Some(limit), Some(oldest)) if held => {
                        let alarm = NewAlarm::quota_held(
                            h.tenant_id,
                            &h.tenant_name,
                            quota,
                            limit,
                            oldest,
                            now,
                        );
                        let Some(key) = alarm.dedupe_key.clone() else {
                            continue;
                        };
                        if !tx.open_quota_episode(h.tenant_id, quota, &key, now).await? {
                            continue;
                        }
                        tx.insert_alarm(&alarm, now).await?;
                        crate::metrics::quota_hit(&h.tenant_name, quota.as_str());
                        report.quotas_raised.push((h.tenant_id, quota));
                    }
                    (Some(key), limit, oldest) => {
                        let under = match (quota, limit) {
                            (_, None) => true,
                            (Quota::MaxConcurrentRuns, Some(_)) => oldest.is_none(),
                            (Quota::MaxFiresPerSecond, Some(_)) => {
                                oldest.is_none() && tokens >= 1.0
                            }
                            (Quota::MaxTasks, Some(max)) => usage.is_some_and(|u| u.tasks < max),
                            (Quota::MaxWaitingRuns, Some(max)) => {
                                usage.is_some_and(|u| u.waiting_runs < max)
                            }
                        };
                        if under {
                            tx.close_quota_episode(h.tenant_id, quota).await?;
                            tx.resolve_alarm_by_key(h.tenant_id, &key, now).await?;
                            report.quotas_resolved.push((h.tenant_id, quota));
                        }
                    }
                    _ => {}
                }
            }
        }
        tx.commit().await
    }
}

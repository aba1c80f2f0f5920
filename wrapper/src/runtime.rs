//! The running wrapper: the run table, starting handlers, finishing runs, drain.
//!
//! Life of a run on one instance:
//!
//! ```text
//!  run request ──accept──> running ──handler returns──> finished ──engine confirms──> reported
//!                            │  ^                         (spooled, being delivered)
//!        cancel / deadline / │  │
//!        shutdown            v  │ handler returns
//!                         cancelling
//! ```
//!
//! A run id enters the table once; a second request for it gets 409 with the entry's state, so
//! the handler never starts twice for one run id on this instance. Finished entries are kept
//! (up to a configurable number) so that late re-dispatches are still recognised.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::runtime::Handle;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

use crate::client::SignedClient;
use crate::context::{CancelReason, Cancellation, ContextParts, ProgressEvent, RunContext};
use crate::failure::{FailureKind, HandlerError, HandlerResult};
use crate::handler::Handler;
use crate::protocol::{
    AckStatus, CancelResponse, CancelStatus, HandlerInfo, HealthResponse, InstanceState,
    LocalRunState, Outcome, ReplayGuard, RunAck, RunId, RunRequest, RunResult, RunStatus,
};
use crate::spool::Spool;
use crate::threads::ThreadCache;

/// Settings fixed at build time.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) app: String,
    pub(crate) instance_id: String,
    pub(crate) engine_urls: Vec<String>,
    pub(crate) advertise_url: String,
    pub(crate) capacity: u32,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) retry_initial: Duration,
    pub(crate) retry_max: Duration,
    pub(crate) flush_timeout: Duration,
    pub(crate) cancel_wait: Duration,
    pub(crate) progress_flush_interval: Duration,
    /// How long results are gathered before a delivery (see the builder).
    pub(crate) result_linger: Duration,
    pub(crate) log_tail_lines: usize,
    pub(crate) remember_finished: usize,
    /// After how long without an answer from any engine `engine_unreachable` is raised.
    pub(crate) engine_unreachable_after: Duration,
}

#[derive(Debug)]
struct RunEntry {
    handler: String,
    state: LocalRunState,
    started_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
    outcome: Option<Outcome>,
    cancel: Arc<Cancellation>,
    deadline_timer: Option<AbortHandle>,
}

impl RunEntry {
    fn status(&self, run_id: RunId) -> RunStatus {
        let state = match self.state {
            LocalRunState::Running if self.cancel.reason().is_some() => LocalRunState::Cancelling,
            other => other,
        };
        RunStatus {
            run_id,
            handler: self.handler.clone(),
            state,
            started_at: self.started_at,
            finished_at: self.finished_at,
            outcome: self.outcome,
        }
    }
}

#[derive(Debug, Default)]
struct RunTable {
    runs: HashMap<RunId, RunEntry>,
    /// Runs accepted whose handler has not returned yet.
    running: HashSet<RunId>,
    /// Finished run ids, oldest first, to bound how many are remembered.
    finished_order: VecDeque<RunId>,
}

impl RunTable {
    fn running_count(&self) -> u32 {
        u32::try_from(self.running.len()).unwrap_or(u32::MAX)
    }

    fn forget_old(&mut self, keep: usize) {
        while self.finished_order.len() > keep {
            let Some(id) = self.finished_order.pop_front() else {
                break;
            };
            match self.runs.get(&id).map(|e| e.state) {
                Some(LocalRunState::Reported) => {
                    self.runs.remove(&id);
                }
                // Not yet confirmed: keep it (its result is still in the outbox) and look again later.
                Some(_) => {
                    self.finished_order.push_back(id);
                    break;
                }
                None => {}
            }
        }
    }
}

/// What [`Wrapper::shutdown`](crate::Wrapper::shutdown) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DrainReport {
    /// Runs that were running when the drain began.
    pub running_at_start: u32,
    /// Runs still running when the grace period ended, whose cancellation was then signalled.
    pub cancelled: u32,
    /// Runs whose handler had still not returned after cancellation (their threads are left
    /// behind; their results are lost unless they finish before the process exits).
    pub abandoned: u32,
    /// Results not confirmed by any engine; they stay in the spool for the next start.
    pub undelivered: u32,
    /// Whether an engine confirmed the deregistration.
    pub deregistered: bool,
}

pub(crate) struct Inner {
    pub(crate) settings: Settings,
    pub(crate) handlers: BTreeMap<String, Handler>,
    pub(crate) replay: ReplayGuard,
    pub(crate) client: SignedClient,
    pub(crate) runtime: Handle,
    threads: Arc<ThreadCache>,
    table: Mutex<RunTable>,
    pub(crate) draining: AtomicBool,
    run_finished: Notify,
    pub(crate) spool: Spool,
    pub(crate) outbox: Mutex<BTreeMap<RunId, RunResult>>,
    pub(crate) outbox_changed: Notify,
    events: mpsc::Sender<ProgressEvent>,
    /// Index (modulo the number of engine URLs) of the engine to call next.
    pub(crate) engine_cursor: AtomicUsize,
    pub(crate) registered: AtomicBool,
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) tasks: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) started_at: DateTime<Utc>,
    /// When an engine was last heard from (epoch ms): an answered heartbeat, registration or
    /// result delivery, or a run request.
    pub(crate) last_contact_ms: AtomicI64,
    /// After this long without engine contact the instance stops its runs (0: never; set from
    /// the executor timeout an engine announces at registration).
    pub(crate) fence_after_ms: AtomicI64,
    /// Alarms on their way to engines and to the message bus.
    pub(crate) alarms: Arc<crate::alarms::Alarms>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("settings", &self.settings)
            .field("handlers", &self.handlers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Locks `m`, also after a thread panicked holding it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits up to `limit` for `task` to end, then aborts it.
pub(crate) async fn join_or_abort<T>(task: JoinHandle<T>, limit: Duration) {
    let abort = task.abort_handle();
    if tokio::time::timeout(limit, task).await.is_err() {
        abort.abort();
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Maps what the handler returned, and whether cancellation was signalled, to the outcome.
fn classify(
    result: HandlerResult,
    reason: Option<CancelReason>,
) -> (Outcome, serde_json::Value, Option<String>) {
    match result {
        Ok(output) => (Outcome::Succeeded, output, None),
        Err(err) => {
            let (outcome, why) = match (reason, err.kind()) {
                (Some(CancelReason::Deadline), _) => (Outcome::TimedOut, "deadline passed"),
                (Some(CancelReason::Requested), _) => (Outcome::Cancelled, "cancel requested"),
                // Not a person's cancel: the work did not get done, so the engines apply the
                // task's retries (and alarms) to it, unless they already recovered it.
                (Some(CancelReason::CutOff), _) => (
                    Outcome::FailedRetryable,
                    "no engine reachable for too long; stopped before engines recover it elsewhere",
                ),
                (Some(CancelReason::Shutdown), _) => (
                    Outcome::Cancelled,
                    "wrapper shut down before the run finished",
                ),
                (None, FailureKind::Cancelled) => (Outcome::Cancelled, "handler cancelled itself"),
                (None, FailureKind::Retryable) => (Outcome::FailedRetryable, ""),
                (None, FailureKind::Fatal) => (Outcome::FailedFatal, ""),
            };
            let message = if why.is_empty() {
                err.message().to_owned()
            } else if err.kind() == FailureKind::Cancelled {
                why.to_owned()
            } else {
                format!("{why}: {}", err.message())
            };
            (outcome, serde_json::Value::Null, Some(message))
        }
    }
}

pub(crate) struct InnerParts {
    pub(crate) settings: Settings,
    pub(crate) handlers: BTreeMap<String, Handler>,
    pub(crate) client: SignedClient,
    pub(crate) runtime: Handle,
    pub(crate) spool: Spool,
    pub(crate) events: mpsc::Sender<ProgressEvent>,
    pub(crate) alarms: Arc<crate::alarms::Alarms>,
}

impl Inner {
    pub(crate) fn new(parts: InnerParts, replayed: Vec<RunResult>) -> Self {
        let (stop, _) = watch::channel(false);
        let mut table = RunTable::default();
        let mut outbox = BTreeMap::new();
        for result in replayed {
            table.runs.insert(
                result.run_id,
                RunEntry {
                    handler: result.handler.clone(),
                    state: LocalRunState::Finished,
                    started_at: result.started_at,
                    finished_at: Some(result.finished_at),
                    outcome: Some(result.outcome),
                    cancel: Arc::new(Cancellation::new()),
                    deadline_timer: None,
                },
            );
            table.finished_order.push_back(result.run_id);
            outbox.insert(result.run_id, result);
        }
        Self {
            settings: parts.settings,
            handlers: parts.handlers,
            replay: ReplayGuard::new(),
            client: parts.client,
            runtime: parts.runtime,
            threads: Arc::new(ThreadCache::new(Duration::from_secs(60))),
            table: Mutex::new(table),
            draining: AtomicBool::new(false),
            run_finished: Notify::new(),
            spool: parts.spool,
            outbox: Mutex::new(outbox),
            outbox_changed: Notify::new(),
            events: parts.events,
            engine_cursor: AtomicUsize::new(0),
            registered: AtomicBool::new(false),
            stop,
            tasks: Mutex::new(Vec::new()),
            started_at: Utc::now(),
            last_contact_ms: AtomicI64::new(Utc::now().timestamp_millis()),
            fence_after_ms: AtomicI64::new(0),
            alarms: parts.alarms,
        }
    }

    /// Notes that an engine was heard from now.
    pub(crate) fn engine_contact(&self) {
        self.last_contact_ms
            .fetch_max(Utc::now().timestamp_millis(), Ordering::Relaxed);
    }

    /// Stops the running runs when no engine has been heard from for longer than the fence
    /// time: engines are about to declare this instance lost and recover its runs elsewhere,
    /// and a run must never go on here alongside its recovery. Returns how many were stopped.
    pub(crate) fn fence_if_cut_off(&self) -> u32 {
        let after = self.fence_after_ms.load(Ordering::Relaxed);
        if after <= 0 {
            return 0;
        }
        let silent = Utc::now().timestamp_millis() - self.last_contact_ms.load(Ordering::Relaxed);
        if silent <= after {
            return 0;
        }
        let stopped = self.cancel_all(CancelReason::CutOff);
        if stopped > 0 {
            tracing::error!(
                silent_ms = silent,
                stopped,
                "no engine reachable for too long; stopping the running runs before engines recover them elsewhere"
            );
        }
        stopped
    }

    pub(crate) fn add_task(&self, task: JoinHandle<()>) {
        lock(&self.tasks).push(task);
    }

    pub(crate) fn running(&self) -> u32 {
        lock(&self.table).running_count()
    }

    /// Every run whose result no engine has confirmed yet: running, being cancelled, or
    /// finished with its result waiting in the outbox (results replayed from the spool
    /// included). An engine may declare a run it sent here lost once it is missing from this.
    pub(crate) fn unconfirmed_ids(&self) -> Vec<RunId> {
        let mut ids: Vec<RunId> = {
            let table = lock(&self.table);
            // Only entries still in state Running (cancelling is derived, never stored): `settle`
            // marks any id an engine confirms as reported, a running one included.
            table
                .running
                .iter()
                .filter(|id| {
                    table
                        .runs
                        .get(id)
                        .is_some_and(|e| e.state == LocalRunState::Running)
                })
                .copied()
                .collect()
        };
        ids.extend(lock(&self.outbox).keys().copied());
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    pub(crate) fn pending_results(&self) -> usize {
        lock(&self.outbox).len()
    }

    pub(crate) fn handler_infos(&self) -> Vec<HandlerInfo> {
        self.handlers
            .iter()
            .map(|(name, h)| HandlerInfo {
                name: name.clone(),
                kind: h.kind(),
            })
            .collect()
    }

    pub(crate) fn health(&self) -> HealthResponse {
        HealthResponse {
            app: self.settings.app.clone(),
            instance_id: self.settings.instance_id.clone(),
            state: if self.draining.load(Ordering::SeqCst) {
                InstanceState::Draining
            } else {
                InstanceState::Ready
            },
            capacity: self.settings.capacity,
            running: self.running(),
            pending_results: u32::try_from(self.pending_results()).unwrap_or(u32::MAX),
            handlers: self.handlers.keys().cloned().collect(),
            labels: self.settings.labels.clone(),
            version: crate::VERSION.to_owned(),
        }
    }

    pub(crate) fn run_status(&self, run_id: RunId) -> Option<RunStatus> {
        lock(&self.table)
            .runs
            .get(&run_id)
            .map(|e| e.status(run_id))
    }

    /// Decides on a run request and, when accepted, starts its thread or task before returning.
    pub(crate) fn accept(self: &Arc<Self>, request: RunRequest) -> RunAck {
        // Only a verified engine request gets here.
        self.engine_contact();
        let run_id = request.run_id;
        let refuse = |status, message: String| RunAck {
            run_id: Some(run_id),
            status,
            run: None,
            message: Some(message),
        };
        if let Err(problem) = request.validate() {
            return refuse(
                AckStatus::Malformed,
                format!("invalid run request: {problem}"),
            );
        }
        let handler = self.handlers.get(&request.handler).cloned();
        let cancel = Arc::new(Cancellation::new());
        let started_at = Utc::now();
        let handler = {
            let mut table = lock(&self.table);
            if let Some(entry) = table.runs.get(&run_id) {
                return RunAck {
                    run_id: Some(run_id),
                    status: AckStatus::AlreadyKnown,
                    run: Some(entry.status(run_id)),
                    message: Some(format!("run {run_id} is already known on this instance")),
                };
            }
            if let Some(not_after) = request.not_after
                && started_at > not_after
            {
                return refuse(
                    AckStatus::Expired,
                    format!(
                        "the request expired at {} (its sender's hold on run {run_id} ended; another engine node may have the run now); if fresh requests are refused so, this host's clock runs ahead of the engines'",
                        not_after.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                    ),
                );
            }
            if self.draining.load(Ordering::SeqCst) {
                return refuse(
                    AckStatus::Draining,
                    "instance is shutting down and takes no new runs".to_owned(),
                );
            }
            let Some(handler) = handler else {
                return refuse(
                    AckStatus::UnknownHandler,
                    format!(
                        "no handler {:?} on this instance (handlers: {})",
                        request.handler,
                        self.handlers.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                );
            };
            if table.running_count() >= self.settings.capacity {
                return refuse(
                    AckStatus::AtCapacity,
                    format!(
                        "all {} slots of this instance are busy",
                        self.settings.capacity
                    ),
                );
            }
            table.runs.insert(
                run_id,
                RunEntry {
                    handler: request.handler.clone(),
                    state: LocalRunState::Running,
                    started_at,
                    finished_at: None,
                    outcome: None,
                    cancel: cancel.clone(),
                    deadline_timer: None,
                },
            );
            table.running.insert(run_id);
            handler
        };
        match self.launch(request, handler, cancel, started_at) {
            Ok(()) => RunAck {
                run_id: Some(run_id),
                status: AckStatus::Accepted,
                run: None,
                message: None,
            },
            Err(problem) => {
                tracing::error!(run_id, %problem, "could not start run");
                {
                    let mut table = lock(&self.table);
                    table.runs.remove(&run_id);
                    table.running.remove(&run_id);
                }
                self.run_finished.notify_waiters();
                refuse(AckStatus::AtCapacity, problem)
            }
        }
    }

    fn launch(
        self: &Arc<Self>,
        request: RunRequest,
        handler: Handler,
        cancel: Arc<Cancellation>,
        started_at: DateTime<Utc>,
    ) -> Result<(), String> {
        let run_id = request.run_id;
        let deadline = request.deadline;
        let ctx = RunContext::new(ContextParts {
            request,
            cancel: cancel.clone(),
            events: self.events.clone(),
            tail_lines: self.settings.log_tail_lines,
            alarms: self.alarms.clone(),
        });
        match handler {
            Handler::Blocking(f) => {
                let inner = self.clone();
                let thread_ctx = ctx.clone();
                self.threads
                    .run(Box::new(move || {
                        let result =
                            std::panic::catch_unwind(AssertUnwindSafe(|| f(thread_ctx.clone())))
                                .unwrap_or_else(|payload| {
                                    Err(HandlerError::fatal(format!(
                                        "handler panicked: {}",
                                        panic_message(payload.as_ref())
                                    )))
                                });
                        inner.complete(&thread_ctx, started_at, result);
                    }))
                    .map_err(|e| format!("cannot start a thread for run {run_id}: {e}"))?;
            }
            Handler::Async { f, .. } => {
                let inner = self.clone();
                let task_ctx = ctx.clone();
                let _guard = self.runtime.enter();
                let future = f(ctx.clone());
                let work = self.runtime.spawn(future);
                self.runtime.spawn(async move {
                    let result = match work.await {
                        Ok(result) => result,
                        Err(e) if e.is_panic() => Err(HandlerError::fatal(format!(
                            "handler panicked: {}",
                            panic_message(e.into_panic().as_ref())
                        ))),
                        Err(_) => Err(HandlerError::cancelled()),
                    };
                    inner.complete(&task_ctx, started_at, result);
                });
            }
        }
        if let Some(deadline) = deadline {
            let delay = (deadline - Utc::now()).to_std().unwrap_or(Duration::ZERO);
            let timer = self.runtime.spawn(async move {
                tokio::time::sleep(delay).await;
                if cancel.cancel(CancelReason::Deadline) {
                    tracing::info!(run_id, "run deadline passed, cancelling");
                }
            });
            let mut table = lock(&self.table);
            match table.runs.get_mut(&run_id) {
                Some(entry) if entry.state == LocalRunState::Running => {
                    entry.deadline_timer = Some(timer.abort_handle());
                }
                _ => timer.abort(),
            }
        }
        Ok(())
    }

    /// Records a finished run: hands its result to the spool, which writes it with the others
    /// finishing meanwhile and then calls [`Inner::spooled`]. Never blocks on the disk.
    fn complete(&self, ctx: &RunContext, started_at: DateTime<Utc>, result: HandlerResult) {
        let run_id = ctx.run_id();
        let (outcome, output, error) = classify(result, ctx.cancel_reason());
        let result = RunResult {
            run_id,
            attempt: ctx.attempt(),
            handler: ctx.handler().to_owned(),
            outcome,
            output,
            error,
            started_at,
            finished_at: Utc::now(),
            log_tail: ctx.log_tail(),
            // Spooled with it: after a restart under another id, engines still know where the
            // run ran (delivery leaves it out while it is the sender's own).
            instance_id: Some(self.settings.instance_id.clone()),
            sent_at: ctx.request().sent_at,
        };
        self.spool.submit(result);
    }

    /// Results the spool made durable (called on the spool's thread): their runs are finished
    /// in the table and the results go to the delivery outbox. A run stays `running` (and
    /// holds its slot) until then.
    pub(crate) fn spooled(&self, results: Vec<RunResult>) {
        // Into the outbox before out of `running`, both under the outbox's lock: a heartbeat
        // (`unconfirmed_ids`) always finds the run in one of them, and a settle (which takes
        // the outbox's lock first) cannot come between and be overwritten.
        let mut outbox = lock(&self.outbox);
        let mut table = lock(&self.table);
        for result in results {
            let run_id = result.run_id;
            if let Some(entry) = table.runs.get_mut(&run_id) {
                entry.state = LocalRunState::Finished;
                entry.outcome = Some(result.outcome);
                entry.finished_at = Some(result.finished_at);
                if let Some(timer) = entry.deadline_timer.take() {
                    timer.abort();
                }
            }
            table.running.remove(&run_id);
            table.finished_order.push_back(run_id);
            tracing::debug!(run_id, outcome = ?result.outcome, "run finished");
            let took = (result.finished_at - result.started_at).num_milliseconds() as f64 / 1000.0;
            crate::metrics::run_finished(result.outcome, took);
            outbox.insert(run_id, result);
        }
        table.forget_old(self.settings.remember_finished);
        drop(table);
        drop(outbox);
        crate::metrics::load(self.running(), self.pending_results());
        self.outbox_changed.notify_one();
        self.run_finished.notify_waiters();
    }

    /// Marks results as confirmed by an engine: out of the outbox, the spool and the table's
    /// pending states.
    pub(crate) fn settle(&self, run_ids: &[RunId]) {
        {
            let mut outbox = lock(&self.outbox);
            for id in run_ids {
                outbox.remove(id);
            }
        }
        {
            let mut table = lock(&self.table);
            for id in run_ids {
                if let Some(entry) = table.runs.get_mut(id) {
                    entry.state = LocalRunState::Reported;
                }
            }
        }
        self.spool.settle(run_ids);
        crate::metrics::results_confirmed(run_ids.len());
        crate::metrics::load(self.running(), self.pending_results());
        self.outbox_changed.notify_one();
    }

    pub(crate) fn cancel(&self, run_id: RunId, reason: CancelReason) -> CancelResponse {
        let table = lock(&self.table);
        match table.runs.get(&run_id) {
            None => CancelResponse {
                run_id,
                status: CancelStatus::Unknown,
                run: None,
            },
            Some(entry) if entry.state == LocalRunState::Running => {
                entry.cancel.cancel(reason);
                CancelResponse {
                    run_id,
                    status: CancelStatus::Cancelling,
                    run: Some(entry.status(run_id)),
                }
            }
            Some(entry) => CancelResponse {
                run_id,
                status: CancelStatus::AlreadyFinished,
                run: Some(entry.status(run_id)),
            },
        }
    }

    pub(crate) fn cancel_all(&self, reason: CancelReason) -> u32 {
        let table = lock(&self.table);
        let mut n = 0;
        for entry in table.runs.values() {
            if entry.state == LocalRunState::Running && entry.cancel.cancel(reason) {
                n += 1;
            }
        }
        n
    }

    pub(crate) async fn wait_idle(&self, until: Instant) {
        loop {
            let notified = self.run_finished.notified();
            if self.running() == 0 {
                return;
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(until) => return,
                // A safety net against a missed wake-up: look again now and then.
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }

    pub(crate) async fn wait_delivered(&self, until: Instant) {
        while self.pending_results() > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_after_a_deadline_count_as_timed_out() {
        let (outcome, _, error) = classify(
            Err(HandlerError::retryable("killed")),
            Some(CancelReason::Deadline),
        );
        assert_eq!(outcome, Outcome::TimedOut);
        assert_eq!(error.as_deref(), Some("deadline passed: killed"));
    }

    #[test]
    fn a_run_stopped_for_being_cut_off_is_retryable_not_cancelled() {
        let (outcome, _, error) =
            classify(Err(HandlerError::cancelled()), Some(CancelReason::CutOff));
        assert_eq!(outcome, Outcome::FailedRetryable);
        assert!(
            error
                .unwrap()
                .starts_with("no engine reachable for too long")
        );
    }

    #[test]
    fn success_after_a_cancel_request_still_counts_as_success() {
        let (outcome, _, error) = classify(Ok(serde_json::json!(1)), Some(CancelReason::Requested));
        assert_eq!(outcome, Outcome::Succeeded);
        assert_eq!(error, None);
    }

    #[test]
    fn failure_kinds_map_to_outcomes() {
        let retry = classify(Err(HandlerError::retryable("x")), None).0;
        let fatal = classify(Err(HandlerError::fatal("x")), None).0;
        let cancelled = classify(Err(HandlerError::cancelled()), None).0;
        assert_eq!(
            (retry, fatal, cancelled),
            (
                Outcome::FailedRetryable,
                Outcome::FailedFatal,
                Outcome::Cancelled
            )
        );
    }
}

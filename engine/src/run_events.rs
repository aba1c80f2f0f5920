//! Live run events: state changes, progress and log lines of runs, published on the [`Bus`]
//! under `run.<tenant id>.<task id>` for the console's live views (docs/alarms.md, "Live run
//! events").
//!
//! Best effort, and off the hot path. The database stays the source of truth: no outbox row
//! per event. Code that changed a run hands an event to [`RunEvents::emit`] after its
//! transaction committed; that is a `try_send` into a bounded queue, and when the queue is
//! full the event is dropped and counted (`mthpt_run_events_dropped_total{reason="queue_full"}`),
//! never waited for. One publisher task per node drains the queue through a [`Limiter`] and
//! publishes batches; what the bus does not take is dropped and counted too.
//!
//! The [`Limiter`] keeps a chatty handler from flooding browsers: per run, progress is
//! coalesced to the latest value at most [`RunEventsConfig::progress_per_sec`] times a second
//! (a progress event says how many updates it replaced: `coalesced`), and at most
//! [`RunEventsConfig::log_lines_per_sec`] log lines a second pass (a log event says how many
//! lines were left out just before its own: `dropped`). State changes always pass; a run's
//! pending progress and its count of dropped lines go out before its next state change.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::app::ExecutorId;
use crate::bus::{Bus, BusMessage};
use crate::clock::Clock;
use crate::outcome::Finished;
use crate::run::{Run, RunId, RunState};
use crate::store::Result as StoreResult;
use crate::task::TaskId;
use crate::tenant::TenantId;

/// How run events are queued and limited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEventsConfig {
    /// Events waiting to be published; more are dropped (and counted).
    pub queue: usize,
    /// Progress events per run and second, at most (the latest value wins).
    pub progress_per_sec: u32,
    /// Log lines per run and second, at most (the rest are dropped and counted).
    pub log_lines_per_sec: u32,
    /// How often coalesced progress and dropped-line counts are flushed.
    pub flush_ms: u64,
}

impl Default for RunEventsConfig {
    fn default() -> Self {
        Self {
            queue: 8_192,
            progress_per_sec: 4,
            log_lines_per_sec: 20,
            flush_ms: 100,
        }
    }
}

/// One thing that happened to a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEvent {
    pub tenant_id: TenantId,
    pub task_id: TaskId,
    pub run_id: RunId,
    /// When it happened (engine clock, epoch ms).
    pub at: i64,
    pub what: What,
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum What {
    /// The run's state changed (pending for a new attempt, running, or a final state).
    State(Box<StateChange>),
    /// Progress reported by the handler; `coalesced` earlier updates were replaced by it.
    Progress {
        fraction: Option<f64>,
        message: Option<String>,
        coalesced: u32,
    },
    /// Log lines; `dropped` lines were left out just before them.
    Log { lines: Vec<String>, dropped: u64 },
}

/// A run's state and its facts at a state change.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StateChange {
    pub state: RunState,
    pub attempt: i32,
    pub executor_id: Option<ExecutorId>,
    pub scheduled_at: i64,
    pub due_at: i64,
    pub dispatched_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub error: Option<String>,
}

impl RunEvent {
    /// The state change `run` is in now.
    pub fn state_of(run: &Run, at: i64) -> Self {
        Self {
            tenant_id: run.tenant_id,
            task_id: run.task_id,
            run_id: run.id,
            at,
            what: What::State(Box::new(StateChange {
                state: run.state,
                attempt: run.attempt,
                executor_id: run.executor_id,
                scheduled_at: run.scheduled_at,
                due_at: run.due_at,
                dispatched_at: run.dispatched_at,
                started_at: run.started_at,
                finished_at: run.finished_at,
                error: run.error.clone(),
            })),
        }
    }

    /// The routing key: `run.<tenant id>.<task id>`.
    pub fn routing_key(&self) -> String {
        format!("run.{}.{}", self.tenant_id, self.task_id)
    }

    /// The JSON body (docs/alarms.md).
    pub fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({
            "tenant_id": self.tenant_id,
            "task_id": self.task_id,
            "run_id": self.run_id,
            "at": self.at,
        });
        let (kind, fields) = match &self.what {
            What::State(s) => (
                "run.state",
                serde_json::to_value(s.as_ref()).unwrap_or_default(),
            ),
            What::Progress {
                fraction,
                message,
                coalesced,
            } => (
                "run.progress",
                serde_json::json!({ "fraction": fraction, "message": message, "coalesced": coalesced }),
            ),
            What::Log { lines, dropped } => (
                "run.log",
                serde_json::json!({ "lines": lines, "dropped": dropped }),
            ),
        };
        if let (Some(body), serde_json::Value::Object(fields)) = (body.as_object_mut(), fields) {
            body.insert("type".to_owned(), kind.into());
            body.extend(fields);
        }
        body
    }

    fn is_final_state(&self) -> bool {
        matches!(&self.what, What::State(s) if s.state.is_final())
    }
}

/// Where code that changed runs hands their events (cheap to clone). [`RunEvents::default`]
/// publishes nothing (a node without a bus).
#[derive(Debug, Clone, Default)]
pub struct RunEvents {
    tx: Option<mpsc::Sender<RunEvent>>,
    dropped: Arc<AtomicU64>,
}

impl RunEvents {
    /// Whether events go anywhere (callers skip building them otherwise).
    pub fn is_on(&self) -> bool {
        self.tx.is_some()
    }

    /// Queues `event` without waiting; a full queue drops it (counted).
    pub fn emit(&self, event: RunEvent) {
        let Some(tx) = &self.tx else { return };
        if tx.try_send(event).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            crate::metrics::run_events_dropped("queue_full", 1);
        }
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The state changes of runs just finished (committed): each applied run's final state,
    /// and the new attempt it made pending, if any.
    pub fn finished(&self, outcomes: &[StoreResult<Finished>]) {
        if !self.is_on() {
            return;
        }
        for outcome in outcomes {
            if let Ok(Finished::Applied { run, effects, .. }) = outcome {
                self.emit(RunEvent::state_of(
                    run,
                    run.finished_at.unwrap_or(run.created_at),
                ));
                for next in effects.next_attempt.iter().chain(&effects.children) {
                    self.emit(RunEvent::state_of(next, next.created_at));
                }
            }
        }
    }

    /// A handle and the publisher that drains it onto `bus` until `stop` turns true (then
    /// what is queued is published once more). The publisher is to be spawned.
    pub fn start(
        bus: Arc<dyn Bus>,
        clock: Arc<dyn Clock>,
        config: RunEventsConfig,
        stop: watch::Receiver<bool>,
    ) -> (
        RunEvents,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        let events = RunEvents {
            tx: Some(tx),
            dropped: Arc::new(AtomicU64::new(0)),
        };
        (events, publish_loop(rx, bus, clock, config, stop))
    }
}

/// Most messages per publish call.
const PUBLISH_BATCH: usize = 500;

/// How long one publish call may wait for the bus.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);

/// A run with no event for this long is forgotten by the limiter.
const FORGET_AFTER_MS: i64 = 60_000;

async fn publish_loop(
    mut rx: mpsc::Receiver<RunEvent>,
    bus: Arc<dyn Bus>,
    clock: Arc<dyn Clock>,
    config: RunEventsConfig,
    mut stop: watch::Receiver<bool>,
) {
    let mut limiter = Limiter::new(config.clone());
    let mut ids = MessageIds::new();
    let mut out: Vec<RunEvent> = Vec::new();
    let mut flush = tokio::time::interval(Duration::from_millis(config.flush_ms.max(10)));
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            event = rx.recv() => match event {
                Some(event) => {
                    limiter.offer(event, clock.now_ms(), &mut out);
                    false
                }
                None => true,
            },
            _ = flush.tick() => {
                limiter.tick(clock.now_ms(), &mut out);
                false
            }
            _ = stop.changed() => true,
        };
        while out.len() < PUBLISH_BATCH {
            match rx.try_recv() {
                Ok(event) => limiter.offer(event, clock.now_ms(), &mut out),
                Err(_) => break,
            }
        }
        if stopping {
            limiter.flush_all(&mut out);
        }
        if !out.is_empty() {
            let messages: Vec<BusMessage> = out
                .drain(..)
                .map(|e| BusMessage {
                    routing_key: e.routing_key(),
                    message_id: ids.next(),
                    body: serde_json::to_vec(&e.body()).unwrap_or_default(),
                })
                .collect();
            publish(&*bus, &messages).await;
        }
        if stopping {
            return;
        }
    }
}

async fn publish(bus: &dyn Bus, messages: &[BusMessage]) {
    match tokio::time::timeout(PUBLISH_TIMEOUT, bus.publish(messages)).await {
        Ok(results) => {
            let failed = results.iter().filter(|r| r.is_err()).count();
            crate::metrics::run_events_published(messages.len() - failed.min(messages.len()));
            if failed > 0 {
                crate::metrics::run_events_dropped("bus", failed);
                tracing::debug!(failed, "the message bus did not take some run events");
            }
        }
        Err(_) => {
            crate::metrics::run_events_dropped("bus", messages.len());
            tracing::debug!(
                events = messages.len(),
                "the message bus did not confirm run events in time; dropped"
            );
        }
    }
}

/// Unique message ids: a random prefix per publisher and a sequence number.
#[derive(Debug)]
struct MessageIds {
    prefix: u64,
    next: u64,
}

impl MessageIds {
    fn new() -> Self {
        Self {
            prefix: rand::random(),
            next: 0,
        }
    }

    fn next(&mut self) -> String {
        self.next += 1;
        format!("run-{:016x}-{}", self.prefix, self.next)
    }
}

/// Per-run rate limits (see the module docs). Deterministic: every call takes the time.
#[derive(Debug)]
pub struct Limiter {
    config: RunEventsConfig,
    runs: HashMap<RunId, RunWindow>,
}

#[derive(Debug)]
struct RunWindow {
    tenant_id: TenantId,
    task_id: TaskId,
    /// Start of the current one-second log window and lines passed in it.
    window_start: i64,
    lines_in_window: u32,
    /// Lines left out since the last log event.
    dropped_lines: u64,
    last_progress_at: Option<i64>,
    /// The latest progress not sent yet: (fraction, message, at).
    pending_progress: Option<(Option<f64>, Option<String>, i64)>,
    /// Progress updates replaced since the last progress event.
    coalesced: u32,
    last_seen: i64,
}

impl RunWindow {
    fn new(event: &RunEvent, now: i64) -> Self {
        Self {
            tenant_id: event.tenant_id,
            task_id: event.task_id,
            window_start: now,
            lines_in_window: 0,
            dropped_lines: 0,
            last_progress_at: None,
            pending_progress: None,
            coalesced: 0,
            last_seen: now,
        }
    }

    fn event(&self, run_id: RunId, at: i64, what: What) -> RunEvent {
        RunEvent {
            tenant_id: self.tenant_id,
            task_id: self.task_id,
            run_id,
            at,
            what,
        }
    }

    fn take_progress(&mut self, run_id: RunId, now: i64) -> Option<RunEvent> {
        let (fraction, message, at) = self.pending_progress.take()?;
        let coalesced = std::mem::take(&mut self.coalesced);
        self.last_progress_at = Some(now);
        Some(self.event(
            run_id,
            at,
            What::Progress {
                fraction,
                message,
                coalesced,
            },
        ))
    }

    fn take_dropped(&mut self, run_id: RunId, now: i64) -> Option<RunEvent> {
        let dropped = std::mem::take(&mut self.dropped_lines);
        (dropped > 0).then(|| {
            self.event(
                run_id,
                now,
                What::Log {
                    lines: Vec::new(),
                    dropped,
                },
            )
        })
    }
}

impl Limiter {
    pub fn new(config: RunEventsConfig) -> Self {
        Self {
            config,
            runs: HashMap::new(),
        }
    }

    fn progress_gap_ms(&self) -> i64 {
        1_000 / i64::from(self.config.progress_per_sec.max(1))
    }

    /// Takes `event` at `now`; what may go out now is appended to `out`.
    pub fn offer(&mut self, event: RunEvent, now: i64, out: &mut Vec<RunEvent>) {
        let gap = self.progress_gap_ms();
        let cap = self.config.log_lines_per_sec;
        let run_id = event.run_id;
        let window = self
            .runs
            .entry(run_id)
            .or_insert_with(|| RunWindow::new(&event, now));
        window.last_seen = now;
        match event.what {
            What::State(_) => {
                out.extend(window.take_progress(run_id, now));
                out.extend(window.take_dropped(run_id, now));
                let last = event.is_final_state();
                out.push(event);
                if last {
                    self.runs.remove(&run_id);
                }
            }
            What::Progress {
                fraction, message, ..
            } => {
                let previous = window.pending_progress.take();
                window.coalesced += u32::from(previous.is_some());
                // A message stays until the handler says another.
                let message = message.or_else(|| previous.and_then(|(_, m, _)| m));
                window.pending_progress = Some((fraction, message, event.at));
                if window.last_progress_at.is_none_or(|t| now - t >= gap) {
                    out.extend(window.take_progress(run_id, now));
                }
            }
            What::Log { mut lines, .. } => {
                if now - window.window_start >= 1_000 {
                    window.window_start = now;
                    window.lines_in_window = 0;
                }
                let before = std::mem::take(&mut window.dropped_lines);
                let room = usize::try_from(cap.saturating_sub(window.lines_in_window))
                    .unwrap_or(usize::MAX);
                let over = lines.len().saturating_sub(room) as u64;
                lines.truncate(room);
                if lines.is_empty() {
                    window.dropped_lines = before + over;
                } else {
                    window.lines_in_window += u32::try_from(lines.len()).unwrap_or(u32::MAX);
                    // Lines over the cap in this batch come after the ones passed: a later
                    // event reports them.
                    window.dropped_lines = over;
                    out.push(window.event(
                        run_id,
                        event.at,
                        What::Log {
                            lines,
                            dropped: before,
                        },
                    ));
                }
            }
        }
    }

    /// At `now`: progress held back whose time has come, counts of dropped lines whose window
    /// ended, and runs silent for a minute forgotten.
    pub fn tick(&mut self, now: i64, out: &mut Vec<RunEvent>) {
        let gap = self.progress_gap_ms();
        for (run_id, window) in &mut self.runs {
            if window.pending_progress.is_some()
                && window.last_progress_at.is_none_or(|t| now - t >= gap)
            {
                out.extend(window.take_progress(*run_id, now));
            }
            if now - window.window_start >= 1_000 {
                out.extend(window.take_dropped(*run_id, now));
            }
        }
        self.runs.retain(|_, w| {
            now - w.last_seen < FORGET_AFTER_MS
                || w.pending_progress.is_some()
                || w.dropped_lines > 0
        });
    }

    /// Everything held back, now (the node is stopping).
    pub fn flush_all(&mut self, out: &mut Vec<RunEvent>) {
        for (run_id, mut window) in self.runs.drain() {
            let at = window.last_seen;
            out.extend(window.take_progress(run_id, at));
            out.extend(window.take_dropped(run_id, at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at: i64, what: What) -> RunEvent {
        RunEvent {
            tenant_id: TenantId(7),
            task_id: TaskId(55),
            run_id: RunId(9001),
            at,
            what,
        }
    }

    fn progress(at: i64, fraction: f64) -> RunEvent {
        event(
            at,
            What::Progress {
                fraction: Some(fraction),
                message: None,
                coalesced: 0,
            },
        )
    }

    fn log(at: i64, n: usize) -> RunEvent {
        event(
            at,
            What::Log {
                lines: (0..n).map(|i| format!("line {i}")).collect(),
                dropped: 0,
            },
        )
    }

    fn state(at: i64, state: RunState) -> RunEvent {
        event(
            at,
            What::State(Box::new(StateChange {
                state,
                attempt: 1,
                executor_id: Some(ExecutorId(3)),
                scheduled_at: 0,
                due_at: 0,
                dispatched_at: Some(1),
                started_at: Some(1),
                finished_at: None,
                error: None,
            })),
        )
    }

    #[test]
    fn chatty_progress_is_coalesced_to_the_latest_value_a_few_times_a_second() {
        let mut limiter = Limiter::new(RunEventsConfig::default());
        let mut out = Vec::new();
        // 100 updates within one second: the first passes, the rest wait their turn.
        for i in 0..100 {
            limiter.offer(progress(i * 10, i as f64 / 100.0), i * 10, &mut out);
            limiter.tick(i * 10, &mut out);
        }
        limiter.tick(1_000, &mut out);
        assert!(
            out.len() <= 5,
            "at most 4 a second (+1 at the edge): {out:?}"
        );
        let Some(What::Progress {
            fraction,
            coalesced,
            ..
        }) = out.last().map(|e| &e.what)
        else {
            panic!("progress expected: {out:?}")
        };
        assert_eq!(*fraction, Some(0.99), "the latest value wins");
        assert!(*coalesced > 0);
        let total: u32 = out
            .iter()
            .map(|e| match &e.what {
                What::Progress { coalesced, .. } => coalesced + 1,
                _ => 0,
            })
            .sum();
        assert_eq!(
            total, 100,
            "every update is either sent or counted as coalesced"
        );
    }

    #[test]
    fn log_lines_over_the_cap_are_dropped_and_counted() {
        let mut limiter = Limiter::new(RunEventsConfig::default());
        let mut out = Vec::new();
        limiter.offer(log(0, 15), 0, &mut out);
        limiter.offer(log(10, 15), 10, &mut out);
        limiter.offer(log(20, 5), 20, &mut out);
        let passed: usize = out
            .iter()
            .map(|e| match &e.what {
                What::Log { lines, .. } => lines.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(passed, 20, "20 lines a second pass");
        limiter.tick(1_000, &mut out);
        assert_eq!(
            out.last().map(|e| &e.what),
            Some(&What::Log {
                lines: Vec::new(),
                dropped: 15
            }),
            "the window's end says how many were left out"
        );
        out.clear();
        limiter.offer(log(1_100, 2), 1_100, &mut out);
        assert_eq!(out.len(), 1, "a new second passes lines again");
    }

    #[test]
    fn a_state_change_flushes_held_progress_first_and_ends_the_runs_window() {
        let mut limiter = Limiter::new(RunEventsConfig::default());
        let mut out = Vec::new();
        limiter.offer(state(0, RunState::Running), 0, &mut out);
        limiter.offer(progress(1, 0.1), 1, &mut out);
        limiter.offer(progress(2, 0.9), 2, &mut out);
        limiter.offer(state(3, RunState::Succeeded), 3, &mut out);
        let kinds: Vec<String> = out
            .iter()
            .map(|e| e.body()["type"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(
            kinds,
            ["run.state", "run.progress", "run.progress", "run.state"]
        );
        assert_eq!(out[2].body()["fraction"], 0.9);
        assert!(limiter.runs.is_empty(), "a final state forgets the run");
    }

    #[test]
    fn bodies_name_tenant_task_run_and_type() {
        let body = state(5, RunState::Running).body();
        assert_eq!(body["type"], "run.state");
        assert_eq!(body["tenant_id"], 7);
        assert_eq!(body["task_id"], 55);
        assert_eq!(body["run_id"], 9001);
        assert_eq!(body["state"], "running");
        assert_eq!(body["executor_id"], 3);
        assert_eq!(state(5, RunState::Running).routing_key(), "run.7.55");
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let (tx, _rx) = mpsc::channel(100);
        let events = RunEvents {
            tx: Some(tx),
            dropped: Arc::new(AtomicU64::new(0)),
        };
        // Nothing reads `_rx`: an emit that waited for room would never return, and the test
        // would hang instead of counting.
        for i in 0..100_000 {
            events.emit(progress(i, 0.5));
        }
        assert_eq!(events.dropped(), 100_000 - 100);
    }

    #[test]
    fn message_ids_are_unique() {
        let mut a = MessageIds::new();
        let mut b = MessageIds::new();
        let ids: std::collections::HashSet<String> =
            (0..100).flat_map(|_| [a.next(), b.next()]).collect();
        assert_eq!(ids.len(), 200);
    }
}

//! What a handler sees of its run: the request's facts, cancellation, progress and logging.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::alarms::Alarms;
use crate::failure::HandlerError;
use crate::protocol::{
    AlarmError, AlarmSeverity, AlarmState, LogLine, LogStream, ProgressUpdate, RunId, RunRequest,
    TaskId, Trigger, WrapperAlarm, check_kind, check_message,
};

/// Longest log line kept or sent, in bytes; longer lines are cut.
pub const MAX_LOG_LINE_BYTES: usize = 4096;

/// Why a run's cancellation was signalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancelReason {
    /// An engine asked to cancel the run.
    Requested,
    /// The run's deadline passed.
    Deadline,
    /// The wrapper is shutting down and its drain grace period ran out.
    Shutdown,
    /// No engine was reachable for so long that engines may declare this instance lost and
    /// start its runs elsewhere: the run stops here first.
    CutOff,
}

/// A one-way cancellation flag that blocking code and async code can both wait on.
#[derive(Debug)]
pub(crate) struct Cancellation {
    reason: Mutex<Option<CancelReason>>,
    cond: Condvar,
    watch: watch::Sender<Option<CancelReason>>,
}

impl Cancellation {
    pub(crate) fn new() -> Self {
        Self {
            reason: Mutex::new(None),
            cond: Condvar::new(),
            watch: watch::Sender::new(None),
        }
    }

    /// Signals cancellation; the first reason wins. Returns whether this call signalled it.
    pub(crate) fn cancel(&self, reason: CancelReason) -> bool {
        let mut guard = self.reason.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.is_some() {
            return false;
        }
        *guard = Some(reason);
        drop(guard);
        self.cond.notify_all();
        self.watch.send_replace(Some(reason));
        true
    }

    pub(crate) fn reason(&self) -> Option<CancelReason> {
        *self.reason.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Blocks the calling thread for `dur` or until cancelled; returns the reason if cancelled.
    fn wait_timeout(&self, dur: Duration) -> Option<CancelReason> {
        let guard = self.reason.lock().unwrap_or_else(PoisonError::into_inner);
        let (guard, _) = self
            .cond
            .wait_timeout_while(guard, dur, |r| r.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        *guard
    }

    async fn wait(&self) -> CancelReason {
        let mut rx = self.watch.subscribe();
        loop {
            if let Some(reason) = *rx.borrow_and_update() {
                return reason;
            }
            if rx.changed().await.is_err() {
                // The sender lives as long as `self`; this cannot happen while we are borrowed.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// A progress update or log line on its way to the engine.
#[derive(Debug, Clone)]
pub(crate) enum ProgressEvent {
    Update(ProgressUpdate),
    Log(LogLine),
}

pub(crate) struct ContextParts {
    pub(crate) request: RunRequest,
    pub(crate) cancel: Arc<Cancellation>,
    pub(crate) events: mpsc::Sender<ProgressEvent>,
    pub(crate) tail_lines: usize,
    pub(crate) alarms: Arc<Alarms>,
}

struct ContextInner {
    request: RunRequest,
    cancel: Arc<Cancellation>,
    events: mpsc::Sender<ProgressEvent>,
    tail: Mutex<VecDeque<String>>,
    tail_lines: usize,
    alarms: Arc<Alarms>,
}

/// The context of one run, handed to its handler. Cheap to clone; every clone is the same run.
///
/// The run id is the idempotency key: a handler whose effects must not happen twice (a retried
/// attempt, a re-dispatch to another instance) should key them by [`run_id`](Self::run_id) or by
/// task + [`scheduled_at`](Self::scheduled_at).
#[derive(Clone)]
pub struct RunContext {
    inner: Arc<ContextInner>,
}

impl fmt::Debug for RunContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunContext")
            .field("run_id", &self.run_id())
            .field("handler", &self.handler())
            .field("attempt", &self.attempt())
            .field("cancelled", &self.cancel_reason())
            .finish()
    }
}

fn clip(mut line: String) -> String {
    if line.len() > MAX_LOG_LINE_BYTES {
        let mut cut = MAX_LOG_LINE_BYTES;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
    }
    line
}

impl RunContext {
    pub(crate) fn new(parts: ContextParts) -> Self {
        Self {
            inner: Arc::new(ContextInner {
                request: parts.request,
                cancel: parts.cancel,
                events: parts.events,
                tail: Mutex::new(VecDeque::new()),
                tail_lines: parts.tail_lines,
                alarms: parts.alarms,
            }),
        }
    }

    /// The whole run request.
    pub fn request(&self) -> &RunRequest {
        &self.inner.request
    }

    /// The run id: the idempotency key.
    pub fn run_id(&self) -> RunId {
        self.inner.request.run_id
    }

    /// The task id.
    pub fn task_id(&self) -> TaskId {
        self.inner.request.task_id
    }

    /// The task name.
    pub fn task_name(&self) -> &str {
        &self.inner.request.task_name
    }

    /// The handler name the run was sent to.
    pub fn handler(&self) -> &str {
        &self.inner.request.handler
    }

    /// The task's parameters as JSON.
    pub fn params(&self) -> &Value {
        &self.inner.request.params
    }

    /// The parameters parsed into `T`; a mismatch is a fatal error naming what is wrong.
    pub fn params_as<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        T::deserialize(&self.inner.request.params)
            .map_err(|e| HandlerError::fatal(format!("invalid params: {e}")))
    }

    /// The attempt number, from 1.
    pub fn attempt(&self) -> u32 {
        self.inner.request.attempt
    }

    /// The occurrence this run fires for.
    pub fn scheduled_at(&self) -> DateTime<Utc> {
        self.inner.request.scheduled_at
    }

    /// Shard index, from 0.
    pub fn shard_index(&self) -> u32 {
        self.inner.request.shard_index
    }

    /// Number of shards.
    pub fn shard_total(&self) -> u32 {
        self.inner.request.shard_total
    }

    /// The run's deadline, if any. The wrapper cancels the run when it passes.
    pub fn deadline(&self) -> Option<DateTime<Utc>> {
        self.inner.request.deadline
    }

    /// Why the run was created.
    pub fn trigger(&self) -> Trigger {
        self.inner.request.trigger
    }

    /// Whether cancellation (request, deadline or shutdown) has been signalled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.reason().is_some()
    }

    /// Why the run is cancelled, if it is.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.inner.cancel.reason()
    }

    /// `Err(HandlerError::cancelled())` once cancellation is signalled: use with `?` in loops.
    pub fn check_cancelled(&self) -> Result<(), HandlerError> {
        if self.is_cancelled() {
            Err(HandlerError::cancelled())
        } else {
            Ok(())
        }
    }

    /// Resolves when cancellation is signalled (for async handlers, e.g. in `tokio::select!`).
    pub async fn cancelled(&self) -> CancelReason {
        self.inner.cancel.wait().await
    }

    /// Blocks the thread for `dur`, waking early on cancellation (for blocking handlers).
    /// Returns `Err(HandlerError::cancelled())` if cancelled.
    pub fn sleep(&self, dur: Duration) -> Result<(), HandlerError> {
        let until = Instant::now() + dur;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if self.inner.cancel.wait_timeout(left).is_some() {
                return Err(HandlerError::cancelled());
            }
            if left.is_zero() || Instant::now() >= until {
                return Ok(());
            }
        }
    }

    /// Reports progress: `fraction` from 0.0 to 1.0 (clamped) and what is being done. Sent to the
    /// engine in batches, best effort.
    pub fn progress(&self, fraction: f64, message: impl Into<String>) {
        let message = message.into();
        let fraction = if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        let update = ProgressUpdate {
            run_id: self.run_id(),
            at: Utc::now(),
            fraction,
            message: (!message.is_empty()).then(|| clip(message)),
        };
        // A full queue drops the update: progress is advisory and must never block a handler.
        let _ = self.inner.events.try_send(ProgressEvent::Update(update));
    }

    /// Raises an alarm for an operator, about this run: `kind` is 1 to 63 characters of
    /// `a-z 0-9 _` starting with a letter (e.g. `disk_full`), `message` 1 to 1000 characters
    /// without control characters. It goes to an engine, which stores it as an alarm of the
    /// app's tenant (a repeat of an open alarm of the same task and kind is counted on it), and,
    /// when the wrapper has an AMQP URL, straight to the alarm exchange too. Never blocks; a bad
    /// kind or message is refused with an error naming what is wrong.
    pub fn alarm(
        &self,
        severity: AlarmSeverity,
        kind: &str,
        message: impl Into<String>,
    ) -> Result<(), AlarmError> {
        let message = message.into();
        check_kind(kind)?;
        check_message(&message)?;
        self.inner.alarms.raise(WrapperAlarm {
            id: crate::alarms::new_id(),
            severity,
            kind: kind.to_owned(),
            message,
            state: AlarmState::Raised,
            run_id: Some(self.run_id()),
            task_id: Some(self.task_id()),
            at: Utc::now(),
        });
        Ok(())
    }

    /// Logs a line: kept in the run's log tail (sent with its result) and streamed to the engine.
    pub fn log(&self, line: impl Into<String>) {
        self.log_stream(LogStream::Handler, line.into());
    }

    pub(crate) fn log_stream(&self, stream: LogStream, line: String) {
        let line = clip(line);
        {
            let mut tail = self
                .inner
                .tail
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if self.inner.tail_lines > 0 {
                if tail.len() == self.inner.tail_lines {
                    tail.pop_front();
                }
                // Spelled as the engine stores a streamed line, so that it can tell which
                // lines of the tail it already has.
                tail.push_back(match stream {
                    LogStream::Stderr => format!("[stderr] {line}"),
                    LogStream::Handler | LogStream::Stdout => line.clone(),
                });
            }
        }
        let log = LogLine {
            run_id: self.run_id(),
            at: Utc::now(),
            stream,
            line,
        };
        let _ = self.inner.events.try_send(ProgressEvent::Log(log));
    }

    /// The last log lines, oldest first.
    pub fn log_tail(&self) -> Vec<String> {
        self.inner
            .tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(tail_lines: usize) -> (RunContext, Arc<Cancellation>) {
        let cancel = Arc::new(Cancellation::new());
        let (events, _rx) = mpsc::channel(16);
        let request = RunRequest {
            run_id: 7,
            task_id: 1,
            task_name: "t".into(),
            handler: "h".into(),
            params: serde_json::json!({"n": 3}),
            attempt: 1,
            scheduled_at: Utc::now(),
            shard_index: 0,
            shard_total: 1,
            deadline: None,
            trigger: Trigger::Manual,
            not_after: None,
            sent_at: None,
        };
        let ctx = RunContext::new(ContextParts {
            request,
            cancel: cancel.clone(),
            events,
            tail_lines,
            alarms: Arc::new(Alarms::new(false, None)),
        });
        (ctx, cancel)
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let (ctx, _) = context(2);
        for i in 0..5 {
            ctx.log(format!("line {i}"));
        }
        assert_eq!(ctx.log_tail(), vec!["line 3", "line 4"]);
    }

    #[test]
    fn blocking_sleep_wakes_on_cancel() {
        let (ctx, cancel) = context(0);
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            cancel.cancel(CancelReason::Requested)
        });
        let started = Instant::now();
        assert!(ctx.sleep(Duration::from_secs(30)).is_err());
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(matches!(canceller.join(), Ok(true)));
        assert_eq!(ctx.cancel_reason(), Some(CancelReason::Requested));
    }

    #[test]
    fn first_cancel_reason_wins() {
        let (ctx, cancel) = context(0);
        assert!(cancel.cancel(CancelReason::Deadline));
        assert!(!cancel.cancel(CancelReason::Requested));
        assert_eq!(ctx.cancel_reason(), Some(CancelReason::Deadline));
    }

    #[tokio::test]
    async fn async_wait_sees_earlier_cancel() {
        let (ctx, cancel) = context(0);
        cancel.cancel(CancelReason::Shutdown);
        assert_eq!(ctx.cancelled().await, CancelReason::Shutdown);
    }

    #[test]
    fn a_handler_alarm_is_validated_and_queued_with_its_run() {
        let (ctx, _) = context(0);
        assert!(
            ctx.alarm(AlarmSeverity::Warning, "Disk Full", "x")
                .err()
                .is_some_and(|e| e.to_string().contains("a-z 0-9 _"))
        );
        assert!(ctx.alarm(AlarmSeverity::Warning, "disk_full", "").is_err());
        assert!(
            ctx.alarm(AlarmSeverity::Warning, "disk_full", "disk 91% full")
                .is_ok()
        );
        let queued = ctx.inner.alarms.to_engine.peek(10);
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].run_id, Some(7));
        assert_eq!(queued[0].task_id, Some(1));
    }

    #[test]
    fn params_mismatch_is_fatal_and_named() {
        let (ctx, _) = context(0);
        let err = ctx.params_as::<Vec<u8>>().err();
        assert!(err.is_some_and(|e| e.message().contains("invalid params")));
    }
}

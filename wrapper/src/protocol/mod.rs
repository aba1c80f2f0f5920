//! The wire protocol between MTHPT engine nodes and executor wrappers.
//!
//! Everything both sides put on the wire lives here: the versioned paths, the signature headers,
//! the JSON messages and the signing and verification functions. The engine uses the same types
//! for its side (dispatching runs, receiving callbacks), so the two can never drift apart.
//! `docs/protocol.md` describes the same protocol for teams writing a wrapper in another language;
//! a test round-trips every JSON example of that document through these types.
//!
//! Conventions:
//! - every time on the wire is an integer number of **milliseconds since the Unix epoch (UTC)**;
//! - run ids are signed 64-bit integers (`run_id`), the idempotency key of a run;
//! - enum values are `snake_case` strings;
//! - optional fields are left out when empty.

mod alarm;
mod signing;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use alarm::{
    AlarmAck, AlarmBatch, AlarmBatchResponse, AlarmError, AlarmSeverity, AlarmState,
    ENGINE_UNREACHABLE, MAX_ALARM_KIND_CHARS, MAX_ALARM_MESSAGE_CHARS, MAX_ALARMS_PER_BATCH,
    PUBLISH_METHOD, SIGNED_ID_PREFIX, WrapperAlarm, check_kind, check_message, dedupe_key,
    message_canonical, message_signature, parse_signed_message_id, routing_key, signed_message_id,
};
pub use signing::{
    BodySignature, MAX_CLOCK_SKEW_SECS, ReplayGuard, SignatureError, SignatureHeaders, Signer,
    canonical_string, signature_hex, unix_now, verify_signature,
};

/// Identifier of a run: the idempotency key a handler can rely on.
pub type RunId = i64;

/// Identifier of a task definition.
pub type TaskId = i64;

/// Largest number of items accepted in one batch request (runs, results, progress updates or
/// log lines). Larger batches are refused with 400.
pub const MAX_BATCH_ITEMS: usize = 1000;

/// Versioned request paths. Every path is absolute; when a wrapper is mounted under a prefix
/// (its advertised URL has a path), the prefix comes before these paths and is signed with them.
pub mod paths {
    use super::RunId;

    /// Common prefix of every protocol path.
    pub const PREFIX: &str = "/mthpt/v1";

    /// Engine → wrapper: start one run (`POST`, body [`RunRequest`](super::RunRequest)).
    pub const RUNS: &str = "/mthpt/v1/runs";
    /// Engine → wrapper: start several runs (`POST`, body [`RunBatchRequest`](super::RunBatchRequest)).
    pub const RUNS_BATCH: &str = "/mthpt/v1/runs/batch";
    /// Engine → wrapper: cancel a run (`POST`), as a route pattern; see [`run_cancel`].
    pub const RUN_CANCEL_PATTERN: &str = "/mthpt/v1/runs/{run_id}/cancel";
    /// Engine → wrapper: instance health (`GET`, no body).
    pub const HEALTH: &str = "/mthpt/v1/health";

    /// Wrapper → engine: register an instance (`POST`).
    pub const REGISTER: &str = "/mthpt/v1/executors/register";
    /// Wrapper → engine: heartbeat (`POST`).
    pub const HEARTBEAT: &str = "/mthpt/v1/executors/heartbeat";
    /// Wrapper → engine: deregister after a drain (`POST`).
    pub const DEREGISTER: &str = "/mthpt/v1/executors/deregister";
    /// Wrapper → engine: a batch of run results (`POST`).
    pub const RESULTS: &str = "/mthpt/v1/results";
    /// Wrapper → engine: a batch of progress updates and log lines (`POST`).
    pub const PROGRESS: &str = "/mthpt/v1/progress";
    /// Wrapper → engine: a batch of alarms raised by the instance or its handlers (`POST`).
    pub const ALARMS: &str = "/mthpt/v1/alarms";

    /// The cancel path of one run, e.g. `/mthpt/v1/runs/42/cancel`.
    pub fn run_cancel(run_id: RunId) -> String {
        format!("{PREFIX}/runs/{run_id}/cancel")
    }
}

/// Names of the signature headers carried by every request in both directions.
pub mod headers {
    /// The app whose secret signed the request.
    pub const APP: &str = "X-Mthpt-App";
    /// Seconds since the Unix epoch when the request was signed (decimal integer).
    pub const TIMESTAMP: &str = "X-Mthpt-Timestamp";
    /// A value unique to this request (8 to 128 characters of `A-Z a-z 0-9 - _`).
    pub const NONCE: &str = "X-Mthpt-Nonce";
    /// Lowercase hex of HMAC-SHA256(secret, canonical string).
    pub const SIGNATURE: &str = "X-Mthpt-Signature";
}

// ---------------------------------------------------------------------------------------------
// Engine → wrapper
// ---------------------------------------------------------------------------------------------

/// Why a run was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The task's schedule fired.
    Schedule,
    /// A person triggered the task by hand.
    Manual,
    /// A retry of a failed attempt.
    Retry,
    /// A child started by its parent's outcome.
    Chain,
    /// Re-run of a run whose executor was lost.
    Recovery,
}

/// `POST /mthpt/v1/runs`: start one run. Also the item type of [`RunBatchRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The run id: the idempotency key. A wrapper starts the handler at most once per run id.
    pub run_id: RunId,
    /// The task this run belongs to.
    pub task_id: TaskId,
    /// The task's name, for logs.
    pub task_name: String,
    /// The handler to run, as registered in the wrapper.
    pub handler: String,
    /// The task's parameters, any JSON value (`null` when the task has none).
    #[serde(default)]
    pub params: Value,
    /// Attempt number, starting at 1.
    pub attempt: u32,
    /// The occurrence this run fires for (epoch milliseconds).
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub scheduled_at: DateTime<Utc>,
    /// Shard index, `0 <= shard_index < shard_total`.
    pub shard_index: u32,
    /// Number of shards (1 when the run is not sharded).
    pub shard_total: u32,
    /// When the run must be finished (epoch milliseconds); the wrapper cancels it at that time
    /// and reports `timed_out`. Absent: no deadline.
    #[serde(
        default,
        with = "chrono::serde::ts_milliseconds_option",
        skip_serializing_if = "Option::is_none"
    )]
    pub deadline: Option<DateTime<Utc>>,
    /// Why the run was created.
    pub trigger: Trigger,
    /// Until when the sender holds the run (epoch milliseconds; its claim's lease). A request
    /// read after that is stale — delayed in the network while another engine node may have
    /// taken the run over — and is refused with `expired`, starting nothing. Absent: no limit.
    #[serde(
        default,
        with = "chrono::serde::ts_milliseconds_option",
        skip_serializing_if = "Option::is_none"
    )]
    pub not_after: Option<DateTime<Utc>>,
    /// When the engine sent the request (epoch milliseconds). The wrapper echoes it in the run's
    /// result ([`RunResult::sent_at`]), so a result that arrives before the engine has written
    /// the run's start still records when the run was dispatched. Absent: an engine that does
    /// not say.
    #[serde(
        default,
        with = "chrono::serde::ts_milliseconds_option",
        skip_serializing_if = "Option::is_none"
    )]
    pub sent_at: Option<DateTime<Utc>>,
}

impl RunRequest {
    /// Checks the values serde cannot: non-empty handler, attempt >= 1, shard bounds.
    pub fn validate(&self) -> Result<(), String> {
        if self.handler.trim().is_empty() {
            return Err("handler is empty".to_owned());
        }
        if self.attempt == 0 {
            return Err("attempt must be 1 or more".to_owned());
        }
        if self.shard_total == 0 {
            return Err("shard_total must be 1 or more".to_owned());
        }
        if self.shard_index >= self.shard_total {
            return Err(format!(
                "shard_index {} is not below shard_total {}",
                self.shard_index, self.shard_total
            ));
        }
        Ok(())
    }
}

/// `POST /mthpt/v1/runs/batch`: start several runs in one signed request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunBatchRequest {
    /// The runs, at most [`MAX_BATCH_ITEMS`].
    pub runs: Vec<RunRequest>,
    /// The instance the engine means to start them on. A wrapper that is another instance (one
    /// restarted on the same address under a new id) refuses the whole batch with 409
    /// `wrong_instance` and starts nothing: the engine then knows that instance is not there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
}

/// The wrapper's answer to a run start, one per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckStatus {
    /// 202: the handler's thread or task is started.
    Accepted,
    /// 409: this run id is already known on this instance; the handler is not started again.
    AlreadyKnown,
    /// 503: every slot of the instance's capacity is taken.
    AtCapacity,
    /// 503: the instance is shutting down and takes no new runs.
    Draining,
    /// 404: no handler of that name is registered on this instance.
    UnknownHandler,
    /// 400: the request (or this batch item) is malformed.
    Malformed,
    /// 410: read after its `not_after` (a stale request); nothing is started.
    Expired,
}

impl AckStatus {
    /// The HTTP status that carries this ack for a single-run request.
    pub fn http_status(self) -> u16 {
        match self {
            Self::Accepted => 202,
            Self::AlreadyKnown => 409,
            Self::AtCapacity | Self::Draining => 503,
            Self::UnknownHandler => 404,
            Self::Malformed => 400,
            Self::Expired => 410,
        }
    }

    /// Whether the engine may try this run on another instance (capacity or drain).
    pub fn is_busy(self) -> bool {
        matches!(self, Self::AtCapacity | Self::Draining)
    }
}

/// Body of every answer to a run start, and the item of [`RunBatchResponse`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunAck {
    /// The run this ack is for (absent only when a malformed item had no readable `run_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// What the wrapper did.
    pub status: AckStatus,
    /// With `already_known`: the run's current state on this instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunStatus>,
    /// A readable explanation for anything but `accepted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Answer to [`RunBatchRequest`] (HTTP 200): one ack per run, in request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunBatchResponse {
    /// The acks, in the order of the request's runs.
    pub acks: Vec<RunAck>,
}

/// Where a run stands on the instance that runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalRunState {
    /// The handler is running.
    Running,
    /// Cancellation (request, deadline or shutdown) is signalled; the handler has not returned yet.
    Cancelling,
    /// The handler returned; its result is spooled and being delivered.
    Finished,
    /// An engine confirmed the result.
    Reported,
}

/// A run's current state on one wrapper instance (in 409 acks and cancel answers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStatus {
    /// The run.
    pub run_id: RunId,
    /// Its handler.
    pub handler: String,
    /// Where it stands.
    pub state: LocalRunState,
    /// When its handler started (epoch milliseconds).
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub started_at: DateTime<Utc>,
    /// When its handler returned (epoch milliseconds), once finished.
    #[serde(
        default,
        with = "chrono::serde::ts_milliseconds_option",
        skip_serializing_if = "Option::is_none"
    )]
    pub finished_at: Option<DateTime<Utc>>,
    /// Its outcome, once finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

/// `POST /mthpt/v1/runs/{run_id}/cancel` body (an empty body means no reason).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CancelRequest {
    /// Why, for the run's log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What a cancel request found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelStatus {
    /// 200: cancellation is signalled to the running handler.
    Cancelling,
    /// 200: the run had already finished; its state is in `run`.
    AlreadyFinished,
    /// 404: this instance does not know the run.
    Unknown,
}

/// Answer to a cancel request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelResponse {
    /// The run.
    pub run_id: RunId,
    /// What the wrapper found.
    pub status: CancelStatus,
    /// The run's state, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunStatus>,
}

/// Whether an instance takes new runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceState {
    /// Taking runs.
    Ready,
    /// Shutting down: refusing new runs, finishing running ones.
    Draining,
}

/// `GET /mthpt/v1/health` answer (HTTP 200).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthResponse {
    /// The app.
    pub app: String,
    /// This instance.
    pub instance_id: String,
    /// Ready or draining.
    pub state: InstanceState,
    /// Most runs executed at once.
    pub capacity: u32,
    /// Runs executing now.
    pub running: u32,
    /// Results written to the spool and not yet confirmed by an engine.
    pub pending_results: u32,
    /// Handler names, sorted.
    pub handlers: Vec<String>,
    /// Labels, for routing.
    pub labels: BTreeMap<String, String>,
    /// Wrapper version.
    pub version: String,
}

// ---------------------------------------------------------------------------------------------
// Wrapper → engine
// ---------------------------------------------------------------------------------------------

/// How a handler is executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandlerKind {
    /// Blocking code, on an OS thread of its own per run.
    Blocking,
    /// An async task.
    Async,
    /// A built-in handler (`shell`, `http`).
    Builtin,
}

/// A handler an instance can run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandlerInfo {
    /// The name tasks refer to.
    pub name: String,
    /// How it runs.
    pub kind: HandlerKind,
}

/// `POST /mthpt/v1/executors/register`: an instance announces itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterRequest {
    /// Unique id of this instance (stable for the life of the process).
    pub instance_id: String,
    /// Base URL the engine calls (the protocol paths are appended to it).
    pub base_url: String,
    /// Most runs executed at once.
    pub capacity: u32,
    /// Runs executing now.
    pub running: u32,
    /// The handlers this instance runs.
    pub handlers: Vec<HandlerInfo>,
    /// Labels, for routing.
    pub labels: BTreeMap<String, String>,
    /// Wrapper version.
    pub version: String,
    /// When the instance started (epoch milliseconds).
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub started_at: DateTime<Utc>,
}

/// Answer to [`RegisterRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterResponse {
    /// The instance id, echoed.
    pub instance_id: String,
    /// How often the engine wants heartbeats; absent: the wrapper's own setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_interval_ms: Option<u64>,
    /// After how long without a heartbeat engines may declare the instance lost and recover its
    /// runs elsewhere; a wrapper cut off from every engine stops its runs before that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_timeout_ms: Option<u64>,
    /// The id of the app's tenant: the tenant part of the routing key of alarms the wrapper
    /// publishes straight to the alarm exchange.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<i64>,
}

/// `POST /mthpt/v1/executors/heartbeat`: an instance is alive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatRequest {
    /// The instance.
    pub instance_id: String,
    /// Most runs executed at once.
    pub capacity: u32,
    /// Runs executing now.
    pub running: u32,
    /// Whether the instance is draining (refusing new runs).
    pub draining: bool,
    /// Every run this instance holds whose result no engine has confirmed yet: running, being
    /// cancelled, or finished with the result still to deliver. An engine declares a run it sent
    /// here a while ago and that is missing from this list lost (e.g. the instance restarted).
    pub running_runs: Vec<RunId>,
    /// When the heartbeat was sent (epoch milliseconds).
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub sent_at: DateTime<Utc>,
}

/// Answer to [`HeartbeatRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatResponse {
    /// `false` when the engine does not know the instance (it expired, or the engine lost it):
    /// the wrapper then registers again.
    pub known: bool,
}

/// `POST /mthpt/v1/executors/deregister`: an instance leaves after its drain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeregisterRequest {
    /// The instance.
    pub instance_id: String,
    /// Why, for the engine's log.
    pub reason: String,
}

/// Answer to [`DeregisterRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeregisterResponse {
    /// Whether the engine knew the instance.
    pub known: bool,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The handler returned success.
    Succeeded,
    /// The handler failed in a way another attempt may fix.
    FailedRetryable,
    /// The handler failed in a way no retry will fix.
    FailedFatal,
    /// The run was cancelled (cancel request or wrapper shutdown).
    Cancelled,
    /// The run's deadline passed.
    TimedOut,
}

impl Outcome {
    /// Whether the run failed (either kind).
    pub fn is_failure(self) -> bool {
        matches!(self, Self::FailedRetryable | Self::FailedFatal)
    }
}

/// The result of one run. Item of [`ResultBatch`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The run.
    pub run_id: RunId,
    /// Its attempt number, echoed from the request.
    pub attempt: u32,
    /// The handler that ran it.
    pub handler: String,
    /// How it ended.
    pub outcome: Outcome,
    /// The handler's output (`null` when it gave none or failed).
    #[serde(default)]
    pub output: Value,
    /// The error message, for anything but `succeeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the handler started (epoch milliseconds).
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub started_at: DateTime<Utc>,
    /// When the handler returned (epoch milliseconds).
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub finished_at: DateTime<Utc>,
    /// The last log lines of the run, oldest first.
    #[serde(default)]
    pub log_tail: Vec<String>,
    /// The instance the run ran on, when it is not the sending one (a result replayed from the
    /// spool after a restart under a new instance id). Absent: the batch's `instance_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// The request's `sent_at`, echoed (epoch milliseconds): when the engine dispatched the run.
    /// Absent when the request had none.
    #[serde(
        default,
        with = "chrono::serde::ts_milliseconds_option",
        skip_serializing_if = "Option::is_none"
    )]
    pub sent_at: Option<DateTime<Utc>>,
}

/// `POST /mthpt/v1/results`: results of finished runs. The engine answers one status per result;
/// a result stays in the wrapper's spool until an engine confirms it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultBatch {
    /// The sending instance.
    pub instance_id: String,
    /// The results, at most [`MAX_BATCH_ITEMS`].
    pub results: Vec<RunResult>,
}

/// What an engine did with one item of a callback batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    /// Recorded.
    Accepted,
    /// Already recorded before (the run is in a final state); nothing changed.
    Duplicate,
    /// Will never be accepted (e.g. unknown run); the wrapper drops it and logs why.
    Rejected,
    /// Not recorded this time (e.g. the database is unavailable); send it again later.
    Retry,
}

impl ItemStatus {
    /// Whether the wrapper may forget the item: the engine has settled it for good.
    pub fn is_settled(self) -> bool {
        !matches!(self, Self::Retry)
    }
}

/// One item's status in a callback answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemAck {
    /// The run the item was about.
    pub run_id: RunId,
    /// What the engine did.
    pub status: ItemStatus,
    /// A readable explanation, for anything but `accepted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Answer to [`ResultBatch`] (HTTP 200): one ack per result, in request order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultBatchResponse {
    /// The acks.
    pub items: Vec<ItemAck>,
}

/// A progress update of a running run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressUpdate {
    /// The run.
    pub run_id: RunId,
    /// When the handler reported it (epoch milliseconds).
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub at: DateTime<Utc>,
    /// Fraction done, from 0.0 to 1.0.
    pub fraction: f64,
    /// What the handler is doing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogStream {
    /// The handler's own `log` calls.
    Handler,
    /// Standard output of a shell script.
    Stdout,
    /// Standard error of a shell script.
    Stderr,
}

/// One log line of a running run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    /// The run.
    pub run_id: RunId,
    /// When it was logged (epoch milliseconds).
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub at: DateTime<Utc>,
    /// Where it came from.
    pub stream: LogStream,
    /// The text, without its line break (at most 4 KiB).
    pub line: String,
}

/// `POST /mthpt/v1/progress`: progress updates and log lines of running runs, batched. These are
/// best effort: a batch an engine does not take is dropped, not spooled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressBatch {
    /// The sending instance.
    pub instance_id: String,
    /// Progress updates, oldest first.
    #[serde(default)]
    pub updates: Vec<ProgressUpdate>,
    /// Log lines, oldest first.
    #[serde(default)]
    pub logs: Vec<LogLine>,
}

/// Answer to [`ProgressBatch`] (HTTP 200): one ack per distinct run id, in order of first
/// appearance in the batch (updates first, then logs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressBatchResponse {
    /// The acks.
    pub items: Vec<ItemAck>,
}

impl ProgressBatch {
    /// The distinct run ids of the batch, in the order the answer lists them.
    pub fn run_ids(&self) -> Vec<RunId> {
        let mut seen = Vec::new();
        let ids = self
            .updates
            .iter()
            .map(|u| u.run_id)
            .chain(self.logs.iter().map(|l| l.run_id));
        for id in ids {
            if !seen.contains(&id) {
                seen.push(id);
            }
        }
        seen
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Stable error codes of [`ErrorBody`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 401: missing, malformed, stale, forged or replayed signature.
    Unauthorized,
    /// 400: the body is not the expected JSON, or a value is out of range.
    Malformed,
    /// 403: the request is understood and signed, but refused by the tenant's policy (an
    /// executor whose host is not in the tenant's allow-list of executor hosts).
    HostNotAllowed,
    /// 404: no such resource (e.g. unknown run).
    NotFound,
    /// 409: a run batch meant for another instance (its `instance_id` is not this one's).
    WrongInstance,
    /// 408: the request body did not arrive in time.
    Timeout,
    /// 411: the request has a body without a `Content-Length` (e.g. chunked).
    LengthRequired,
    /// 413: the request body is larger than the receiver's limit.
    TooLarge,
    /// 503: the receiver cannot take the request now.
    Unavailable,
    /// 500: the receiver failed; details are in its log.
    Internal,
}

impl ErrorCode {
    /// The HTTP status that carries this code.
    pub fn http_status(self) -> u16 {
        match self {
            Self::Unauthorized => 401,
            Self::Malformed => 400,
            Self::HostNotAllowed => 403,
            Self::NotFound => 404,
            Self::WrongInstance => 409,
            Self::Timeout => 408,
            Self::LengthRequired => 411,
            Self::TooLarge => 413,
            Self::Unavailable => 503,
            Self::Internal => 500,
        }
    }
}

/// Body of error answers that are not acks (401 on both sides, 400 on batch envelopes, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable code.
    pub error: ErrorCode,
    /// Readable explanation.
    pub message: String,
}

impl ErrorBody {
    /// An error body.
    pub fn new(error: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_path_matches_pattern() {
        assert_eq!(paths::run_cancel(42), "/mthpt/v1/runs/42/cancel");
        assert_eq!(
            paths::RUN_CANCEL_PATTERN.replace("{run_id}", "42"),
            paths::run_cancel(42)
        );
    }

    #[test]
    fn run_request_validation_names_the_problem() {
        let mut req = RunRequest {
            run_id: 1,
            task_id: 1,
            task_name: "t".into(),
            handler: "h".into(),
            params: Value::Null,
            attempt: 1,
            scheduled_at: Utc::now(),
            shard_index: 0,
            shard_total: 1,
            deadline: None,
            trigger: Trigger::Manual,
            not_after: None,
            sent_at: None,
        };
        assert!(req.validate().is_ok());
        req.shard_index = 1;
        assert!(
            req.validate()
                .err()
                .is_some_and(|e| e.contains("shard_index"))
        );
        req.shard_index = 0;
        req.attempt = 0;
        assert!(req.validate().err().is_some_and(|e| e.contains("attempt")));
    }

    #[test]
    fn progress_batch_lists_each_run_once() {
        let at = Utc::now();
        let batch = ProgressBatch {
            instance_id: "i".into(),
            updates: vec![ProgressUpdate {
                run_id: 2,
                at,
                fraction: 0.5,
                message: None,
            }],
            logs: vec![
                LogLine {
                    run_id: 3,
                    at,
                    stream: LogStream::Handler,
                    line: "a".into(),
                },
                LogLine {
                    run_id: 2,
                    at,
                    stream: LogStream::Handler,
                    line: "b".into(),
                },
            ],
        };
        assert_eq!(batch.run_ids(), vec![2, 3]);
    }
}

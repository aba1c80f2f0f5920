//! Runs: one firing of a task, the row engine nodes compete for.
//!
//! ```text
//! pending ──claim──> claimed ──dispatch accepted (202)──> running ──result ok──> succeeded ──> children pending
//!    ^                 │  │                                  │  │──result error──> failed ──> retry pending | alarm
//!    │   lease expired │  └─refused / no capacity / 503──┐    │  ├──deadline passed──> timed_out ──> retry | alarm
//!    └─────────────────┴──────────────<──────────────────┘    │  └──executor lost──> lost ──> recovery pending | alarm
//!  pending ──overlap policy "skip" / misfire "skip"──> skipped     any non-final ──cancel──> cancelled
//! ```
//!
//! Final states are succeeded, failed, timed_out, lost, skipped and cancelled; a final run never
//! changes again. A claimed run is changed only by the node that holds its lease, proving it with
//! the run's fencing token ([`Fence`]); once the lease has expired another node may claim it,
//! which bumps the token and locks the first node out.

use serde::{Deserialize, Serialize};
use sqlx::types::Json;

use crate::app::ExecutorId;
use crate::macros::{from_row_in_table_order, id_type, text_enum};
use crate::task::TaskId;
use crate::tenant::TenantId;

id_type!(
    /// Identifies a run. It is also the handler's idempotency key.
    RunId
);

text_enum!(
    /// Where a run is in its life.
    RunState {
        Pending = "pending",
        Claimed = "claimed",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        TimedOut = "timed_out",
        Lost = "lost",
        Skipped = "skipped",
        Cancelled = "cancelled",
    }
);

impl RunState {
    /// Whether the run is over and never changes again.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            RunState::Pending | RunState::Claimed | RunState::Running
        )
    }
}

text_enum!(
    /// Why a run exists.
    TriggerKind {
        /// The task's schedule.
        Schedule = "schedule",
        /// A person or API call.
        Manual = "manual",
        /// A failed or timed-out attempt being tried again.
        Retry = "retry",
        /// A parent task's run finished.
        Chain = "chain",
        /// The previous attempt was lost with its executor.
        Recovery = "recovery",
    }
);

/// A run as stored; read from a row of `runs` by [`RUN_COLUMNS`] (SQLite) or
/// [`RUN_COLUMNS_ON_POSTGRES`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub id: RunId,
    pub tenant_id: TenantId,
    pub task_id: TaskId,
    pub node_group: String,
    /// The occurrence this run belongs to (unchanged by retries).
    pub scheduled_at: i64,
    /// When this attempt should fire.
    pub due_at: i64,
    /// 1 for the first attempt, 2 for the first retry, …
    pub attempt: i32,
    pub shard_index: i32,
    pub shard_total: i32,
    pub trigger_kind: TriggerKind,
    pub state: RunState,
    pub priority: i32,
    pub parent_run_id: Option<RunId>,
    pub chain_root_id: Option<RunId>,
    /// Parameters for this run only (manual triggers); `None` means the task's.
    pub params: Option<Json<serde_json::Value>>,
    pub triggered_by: Option<String>,
    /// The engine node holding the claim.
    pub claim_owner: Option<String>,
    pub lease_until: Option<i64>,
    /// The fencing token: incremented by every claim.
    pub fence: i64,
    pub executor_id: Option<ExecutorId>,
    pub dispatch_attempts: i32,
    pub created_at: i64,
    pub claimed_at: Option<i64>,
    pub dispatched_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub deadline_at: Option<i64>,
    pub progress: Option<f64>,
    pub progress_message: Option<String>,
    pub output: Option<Json<serde_json::Value>>,
    pub error: Option<String>,
    pub log_tail: String,
}

from_row_in_table_order!(Run, RUN_COLUMNS,
    // PostgreSQL's order (migration 0028): fixed columns, eight bytes wide before four, then
    // texts, then what the claim and the start rewrite.
    RUN_COLUMNS_ON_POSTGRES = [
        id, tenant_id, task_id, app_id, scheduled_at, due_at, created_at, parent_run_id,
        chain_root_id, finished_at, cancel_pending_at, progress, attempt, shard_index,
        shard_total, priority, dispatch_attempts, node_group, trigger_kind, params, triggered_by,
        progress_message, output, error, log_tail, fence, executor_id, lease_until, claimed_at,
        dispatched_at, started_at, deadline_at, state, claim_owner,
    ], {
    id: value,
    tenant_id: value,
    task_id: value,
    node_group: value,
    scheduled_at: value,
    due_at: value,
    attempt: value,
    shard_index: value,
    shard_total: value,
    trigger_kind: text,
    state: text,
    priority: value,
    parent_run_id: value,
    chain_root_id: value,
    params: value,
    triggered_by: value,
    claim_owner: value,
    lease_until: value,
    fence: value,
    executor_id: value,
    dispatch_attempts: value,
    created_at: value,
    claimed_at: value,
    dispatched_at: value,
    started_at: value,
    finished_at: value,
    deadline_at: value,
    progress: value,
    progress_message: value,
    output: value,
    error: value,
    log_tail: value,
});

impl Run {
    /// A claimed run of task 1 of tenant 1, for unit tests.
    #[cfg(test)]
    pub(crate) fn claimed_for_tests(id: RunId) -> Run {
        Run {
            id,
            tenant_id: TenantId(1),
            task_id: TaskId(1),
            node_group: "default".into(),
            scheduled_at: 0,
            due_at: 0,
            attempt: 1,
            shard_index: 0,
            shard_total: 1,
            trigger_kind: TriggerKind::Schedule,
            state: RunState::Claimed,
            priority: 0,
            parent_run_id: None,
            chain_root_id: None,
            params: None,
            triggered_by: None,
            claim_owner: Some("n".into()),
            lease_until: Some(1),
            fence: 1,
            executor_id: None,
            dispatch_attempts: 0,
            created_at: 0,
            claimed_at: None,
            dispatched_at: None,
            started_at: None,
            finished_at: None,
            deadline_at: None,
            progress: None,
            progress_message: None,
            output: None,
            error: None,
            log_tail: String::new(),
        }
    }

    /// The proof of ownership a claimed run's holder presents to change it.
    pub fn fence(&self) -> Option<Fence> {
        self.claim_owner.as_ref().map(|node| Fence {
            run_id: self.id,
            node: node.clone(),
            token: self.fence,
        })
    }
}

/// Proof that a node holds a run's claim: the run, the node and the token it claimed with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fence {
    pub run_id: RunId,
    pub node: String,
    pub token: i64,
}

/// A run to insert. Inserting an occurrence that already exists (same task, scheduled time,
/// attempt and shard) inserts nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub tenant_id: TenantId,
    pub task_id: TaskId,
    pub node_group: String,
    pub scheduled_at: i64,
    pub due_at: i64,
    pub attempt: i32,
    pub shard_index: i32,
    pub shard_total: i32,
    pub trigger_kind: TriggerKind,
    pub priority: i32,
    pub parent_run_id: Option<RunId>,
    pub chain_root_id: Option<RunId>,
    pub params: Option<serde_json::Value>,
    pub triggered_by: Option<String>,
}

impl NewRun {
    /// A fresh occurrence of `task` at `at`, with the given trigger, due at once at `at`.
    pub fn occurrence(
        task: &crate::task::Task,
        node_group: &str,
        at: i64,
        trigger_kind: TriggerKind,
    ) -> Self {
        Self {
            tenant_id: task.tenant_id,
            task_id: task.id,
            node_group: node_group.to_owned(),
            scheduled_at: at,
            due_at: at,
            attempt: 1,
            shard_index: 0,
            shard_total: 1,
            trigger_kind,
            priority: task.priority,
            parent_run_id: None,
            chain_root_id: None,
            params: None,
            triggered_by: None,
        }
    }

    /// The next attempt of `run`, due at `due_at`, with the given trigger (retry or recovery).
    pub fn next_attempt(run: &Run, due_at: i64, trigger_kind: TriggerKind) -> Self {
        Self {
            tenant_id: run.tenant_id,
            task_id: run.task_id,
            node_group: run.node_group.clone(),
            scheduled_at: run.scheduled_at,
            due_at,
            attempt: run.attempt + 1,
            shard_index: run.shard_index,
            shard_total: run.shard_total,
            trigger_kind,
            priority: run.priority,
            parent_run_id: run.parent_run_id,
            chain_root_id: run.chain_root_id,
            params: run.params.as_ref().map(|p| p.0.clone()),
            triggered_by: run.triggered_by.clone(),
        }
    }
}

impl NewRun {
    /// Shard `index` of broadcast run `run` (which is shard 0 of `run.shard_total`), due at
    /// `due_at`.
    pub fn shard(run: &Run, index: i32, due_at: i64) -> Self {
        Self {
            attempt: run.attempt,
            shard_index: index,
            ..Self::next_attempt(run, due_at, run.trigger_kind)
        }
    }
}

/// What to change when a claimed run leaves the `claimed` state.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimedTransition {
    /// The executor accepted the run: `running` on that executor since the transition's
    /// `now`, with the instant the request was sent and an optional deadline.
    Started {
        executor_id: ExecutorId,
        dispatched_at: i64,
        deadline_at: Option<i64>,
    },
    /// Nobody accepted it: back to `pending`, keeping its due time so it stays first in line
    /// (FIFO throttling), with the attempt counted.
    Released,
    /// Not yet: back to `pending`, due again at `due_at` (overlap policy "serial" waiting for
    /// the previous run), without counting a dispatch attempt.
    Deferred { due_at: i64 },
    /// Broadcast: the run becomes shard `index` of `total`, still claimed (the other shards are
    /// inserted alongside).
    Sharded { index: i32, total: i32 },
    /// Not run, because of the overlap or misfire policy: `skipped`, with the reason.
    Skipped { reason: String },
    /// Cancelled before it started (e.g. the task was deleted).
    Cancelled { reason: String },
    /// Keep holding it: the lease moves to `lease_until`.
    ExtendLease { lease_until: i64 },
}

/// How a run ended, as reported by its executor or decided by the engine.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCompletion {
    /// One of the final states.
    pub state: RunState,
    pub output: Option<serde_json::Value>,
    pub error: Option<String>,
    /// Appended to the run's log tail.
    pub log: Option<String>,
    pub started_at: Option<i64>,
    pub finished_at: i64,
    /// Who reports it, for results from a wrapper: the completion applies only to a run
    /// dispatched to that executor instance in that attempt. `None`: the engine decided.
    pub reported_by: Option<ReportedBy>,
}

/// The executor instance and attempt a wrapper's result names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportedBy {
    pub executor_id: ExecutorId,
    pub attempt: i32,
    /// When the engine sent the run, as the wrapper echoes it from the request (epoch
    /// milliseconds): recorded as the run's dispatch time when its start was not written yet.
    /// `None`: a wrapper that does not echo it.
    pub dispatched_at: Option<i64>,
}

impl RunCompletion {
    /// The dispatch time the reporting wrapper echoed, if any.
    pub fn dispatched_at(&self) -> Option<i64> {
        self.reported_by.and_then(|r| r.dispatched_at)
    }
}

/// Progress reported by a running handler.
#[derive(Debug, Clone, PartialEq)]
pub struct RunProgress {
    pub run_id: RunId,
    /// 0.0 ..= 1.0
    pub fraction: Option<f64>,
    pub message: Option<String>,
    /// Log lines to append to the tail.
    pub log_lines: Vec<String>,
}

/// The most log text kept per run; older lines are dropped first.
pub const LOG_TAIL_MAX_BYTES: usize = 64 * 1024;

/// Appends `lines` to `tail`, keeping at most [`LOG_TAIL_MAX_BYTES`] and cutting at a line start.
pub fn append_log_tail(tail: &str, lines: &[String]) -> String {
    let mut out =
        String::with_capacity(tail.len() + lines.iter().map(|l| l.len() + 1).sum::<usize>());
    out.push_str(tail);
    for line in lines {
        out.push_str(line);
        if !line.ends_with('\n') {
            out.push('\n');
        }
    }
    if out.len() <= LOG_TAIL_MAX_BYTES {
        return out;
    }
    let mut cut = out.len() - LOG_TAIL_MAX_BYTES;
    while !out.is_char_boundary(cut) {
        cut += 1;
    }
    let keep_from = out[cut..].find('\n').map_or(cut, |i| cut + i + 1);
    out[keep_from..].to_owned()
}

/// Adds to `tail` the lines of `reported` (the log tail an executor sends with a result, its
/// last lines, oldest first) that `tail` does not already end with: lines streamed while the run
/// ran are stored once, and a line that was not streamed (sent after the last progress batch, or
/// dropped on the way) is added. The overlap is the longest run of `tail`'s last lines equal to
/// `reported`'s first lines, found in linear time.
pub fn merge_log_tail(tail: &str, reported: &str) -> String {
    let old: Vec<&str> = tail.lines().collect();
    let new: Vec<&str> = reported.lines().collect();
    let overlap = overlap(&old, &new);
    let rest: Vec<String> = new[overlap..].iter().map(|l| (*l).to_owned()).collect();
    append_log_tail(tail, &rest)
}

/// The largest `k` such that the last `k` items of `old` are the first `k` items of `new`
/// (prefix function over `new`, then a match of `old`'s suffix against it).
fn overlap(old: &[&str], new: &[&str]) -> usize {
    if new.is_empty() || old.is_empty() {
        return 0;
    }
    let mut prefix = vec![0usize; new.len()];
    for i in 1..new.len() {
        let mut k = prefix[i - 1];
        while k > 0 && new[i] != new[k] {
            k = prefix[k - 1];
        }
        if new[i] == new[k] {
            k += 1;
        }
        prefix[i] = k;
    }
    let from = old.len().saturating_sub(new.len());
    let mut k = 0;
    for line in &old[from..] {
        while k > 0 && (k == new.len() || *line != new[k]) {
            k = prefix[k - 1];
        }
        if k < new.len() && *line == new[k] {
            k += 1;
        }
    }
    k
}

/// Filters for listing runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFilter {
    pub task_id: Option<TaskId>,
    pub state: Option<RunState>,
    /// Runs scheduled at or after this instant.
    pub scheduled_from: Option<i64>,
    /// Runs scheduled before this instant.
    pub scheduled_before: Option<i64>,
    /// Keyset paging, newest first: runs with an id lower than this.
    pub before_id: Option<RunId>,
    /// Keyset paging back towards the newest: the runs just above this id (still listed
    /// newest first).
    pub after_id: Option<RunId>,
    /// At most this many (default 100, at most 1000).
    pub limit: Option<i64>,
    pub trigger_kind: Option<TriggerKind>,
    /// Runs sent to this executor instance.
    pub executor_id: Option<ExecutorId>,
    /// Runs finished at or after this instant.
    pub finished_from: Option<i64>,
    /// Runs finished before this instant.
    pub finished_before: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_states_are_exactly_the_six_ends() {
        let finals: Vec<_> = RunState::ALL.iter().filter(|s| s.is_final()).collect();
        assert_eq!(finals.len(), 6);
        assert!(!RunState::Claimed.is_final());
    }

    #[test]
    fn log_tail_drops_oldest_whole_lines() {
        let line = "x".repeat(1000);
        let lines: Vec<String> = (0..100).map(|i| format!("{i:03} {line}")).collect();
        let tail = append_log_tail("", &lines);
        assert!(tail.len() <= LOG_TAIL_MAX_BYTES);
        assert!(tail.starts_with("0"), "cut at a line start");
        assert!(tail.ends_with(&format!("099 {line}\n")));
    }

    #[test]
    fn a_reported_tail_adds_only_the_lines_not_streamed() {
        let streamed: Vec<String> = (1..=6).map(|i| format!("line {i}")).collect();
        let tail = append_log_tail("", &streamed);
        let reported = (1..=7)
            .map(|i| format!("line {i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let merged = merge_log_tail(&tail, &reported);
        let want: String = (1..=7).map(|i| format!("line {i}\n")).collect();
        assert_eq!(merged, want);
    }

    #[test]
    fn a_reported_tail_shorter_than_the_log_overlaps_its_end() {
        let tail: String = (1..=50).map(|i| format!("{i}\n")).collect();
        // The executor keeps its last 10 lines: 43..=52, of which 43..=50 were streamed.
        let reported = (43..=52)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join("\n");
        let merged = merge_log_tail(&tail, &reported);
        let want: String = (1..=52).map(|i| format!("{i}\n")).collect();
        assert_eq!(merged, want);
    }

    #[test]
    fn repeated_lines_are_kept_as_often_as_they_were_printed() {
        // "a a" streamed, the log was "a a a b": one "a" and the "b" were not streamed.
        let merged = merge_log_tail("a\na\n", "a\na\na\nb");
        assert_eq!(merged, "a\na\na\nb\n");
        // Nothing streamed: everything reported is kept. All streamed: nothing is added.
        assert_eq!(merge_log_tail("", "x\ny"), "x\ny\n");
        assert_eq!(merge_log_tail("x\ny\n", "x\ny"), "x\ny\n");
        // Lines lost between the streamed part and the reported tail: both are kept, in order.
        assert_eq!(merge_log_tail("1\n2\n", "7\n8"), "1\n2\n7\n8\n");
    }

    #[test]
    fn unknown_state_text_is_an_error_naming_the_value() {
        let err = "exploded".parse::<RunState>().unwrap_err();
        assert!(err.to_string().contains("exploded"));
    }

    /// A table with the run's columns in [`RUN_COLUMNS`] order and one row in which every
    /// column holds a value of its own.
    async fn one_run_table() -> sqlx::SqliteConnection {
        use sqlx::Connection as _;
        let mut c = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .expect("in-memory SQLite");
        sqlx::query(
            "CREATE TABLE runs (id INTEGER, tenant_id INTEGER, task_id INTEGER, node_group TEXT,
                 scheduled_at INTEGER, due_at INTEGER, attempt INTEGER, shard_index INTEGER,
                 shard_total INTEGER, trigger_kind TEXT, state TEXT, priority INTEGER,
                 parent_run_id INTEGER, chain_root_id INTEGER, params TEXT, triggered_by TEXT,
                 claim_owner TEXT, lease_until INTEGER, fence INTEGER, executor_id INTEGER,
                 dispatch_attempts INTEGER, created_at INTEGER, claimed_at INTEGER,
                 dispatched_at INTEGER, started_at INTEGER, finished_at INTEGER,
                 deadline_at INTEGER, progress REAL, progress_message TEXT, output TEXT,
                 error TEXT, log_tail TEXT, app_id INTEGER)",
        )
        .execute(&mut c)
        .await
        .expect("create");
        sqlx::query(
            "INSERT INTO runs VALUES (1, 2, 3, 'g', 4, 5, 6, 7, 8, 'retry', 'running', 9, 10, 11,
                 '{\"p\":1}', 'someone', 'node-a', 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 0.5,
                 'half', '{\"o\":2}', 'boom', 'tail', 22)",
        )
        .execute(&mut c)
        .await
        .expect("insert");
        c
    }

    #[tokio::test]
    async fn a_run_reads_the_same_by_position_and_by_name() {
        let mut c = one_run_table().await;
        let in_order: Run = sqlx::query_as("SELECT * FROM runs")
            .fetch_one(&mut c)
            .await
            .expect("by position");
        assert_eq!(in_order.id, RunId(1));
        assert_eq!(in_order.trigger_kind, TriggerKind::Retry);
        assert_eq!(in_order.state, RunState::Running);
        assert_eq!(in_order.chain_root_id, Some(RunId(11)));
        assert_eq!(in_order.executor_id, Some(ExecutorId(14)));
        assert_eq!(in_order.progress, Some(0.5));
        assert_eq!(
            in_order.params.as_ref().map(|p| p.0.clone()),
            Some(serde_json::json!({"p": 1}))
        );
        assert_eq!(in_order.log_tail, "tail");
        let mut reversed = RUN_COLUMNS.to_vec();
        reversed.reverse();
        assert_eq!(read_in(&mut c, &reversed).await, in_order, "by name");
        // Two columns swapped: read by name, not by position.
        let mut swapped = RUN_COLUMNS.to_vec();
        swapped.swap(4, 5);
        assert_eq!(read_in(&mut c, &swapped).await, in_order, "swapped");
    }

    /// The run of [`one_run_table`] selected with its columns in the order given.
    async fn read_in(c: &mut sqlx::SqliteConnection, columns: &[&str]) -> Run {
        sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {} FROM runs",
            columns.join(", ")
        )))
        .fetch_one(c)
        .await
        .expect("a run")
    }

    #[tokio::test]
    async fn a_run_with_an_unknown_state_is_a_decode_error_naming_the_column() {
        let mut c = one_run_table().await;
        sqlx::query("UPDATE runs SET state = 'exploded'")
            .execute(&mut c)
            .await
            .expect("update");
        let err = sqlx::query_as::<_, Run>("SELECT * FROM runs")
            .fetch_one(&mut c)
            .await
            .expect_err("an unknown state is not a run");
        let text = err.to_string();
        assert!(
            text.contains("state") && text.contains("exploded"),
            "{text}"
        );
    }
}

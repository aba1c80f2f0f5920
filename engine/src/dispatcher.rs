//! Firing claimed runs at executor wrappers.
//!
//! For each due batch: the runs are grouped by app; broadcast tasks are split into one shard per
//! live instance; each run gets its instances in its task's routing order; every round sends one
//! signed batch request per instance (the wrapper answers at once, it never waits for the work);
//! a run an instance refuses (at capacity, draining, no such handler, unreachable) moves on to
//! its next instance; a run no instance accepts goes back to `pending` keeping its place in line.
//! The accepted runs become `running` in one write at the end, made
//! [`DispatchConfig::start_write_delay_ms`] later, so a quick run's result usually comes first;
//! a run whose result this node wrote meanwhile is not looked up again ([`FinishedHere`]).
//! Dispatch is async and bounded by a semaphore, never by threads waiting on business code.
//!
//! A run whose lease is about to expire is not sent: another node may be about to take it over.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use mthpt_wrapper::client::ClientError;
use mthpt_wrapper::protocol::{
    self, AckStatus, CancelRequest, RunAck, RunBatchRequest, RunBatchResponse, RunRequest, Trigger,
};
use tokio::sync::Semaphore;

use crate::app::{AppId, ExecutorId, ExecutorState};
use crate::claimer::{Cancellation, Fire};
use crate::clock::{self, Clock, ms_to_datetime};
use crate::directory::{AppEntry, Directory, lock};
use crate::finished_here::FinishedHere;
use crate::group_commit::{GroupCommit, Ticket, take_all};
use crate::outcome::{Finish, finish_runs, log_finished};
use crate::routing::{self, RoutingState};
use crate::run::{ClaimedTransition, Fence, NewRun, Run, RunId, RunState, TriggerKind};
use crate::run_events::{RunEvent, RunEvents};
use crate::store::{Result, StartClaimed, StartedRun, Store, StoreError};
use crate::task::{Routing, Task};
use crate::tenant::TenantId;

/// Dispatch settings.
#[derive(Debug, Clone, PartialEq)]
pub struct DispatchConfig {
    /// Do not ready a run (record where it goes) when its lease ends within this many
    /// milliseconds: another node may be about to take it over.
    pub min_lease_left_ms: i64,
    /// At most this many requests to wrappers in flight.
    pub max_in_flight: usize,
    /// At most one dispatch round per this many milliseconds: runs falling due in between wait
    /// for the next round (at most this much), so a steady stream of runs costs fewer, larger
    /// requests and writes. A run falling due after a quiet spell fires at once. 0: every due
    /// instant is a round of its own.
    pub coalesce_ms: i64,
    /// Runs an executor accepted are written as started this many milliseconds later, together
    /// with every other round's of that span. A quick run's result usually arrives first and
    /// records the dispatch itself (the wrapper echoes the send time): the run skips the
    /// `running` write with its index entries, and when this node wrote the result its start
    /// is not even looked up ([`FinishedHere`]). The dispatch intent, written before the
    /// send, keeps every guarantee meanwhile. 0: written as soon as the round ends.
    pub start_write_delay_ms: i64,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            min_lease_left_ms: 1_000,
            max_in_flight: 256,
            coalesce_ms: 0,
            start_write_delay_ms: 300,
        }
    }
}

/// What one dispatch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatchReport {
    /// Accepted by an executor and recorded as running.
    pub started: Vec<RunId>,
    /// Refused everywhere: back to pending.
    pub released: Vec<RunId>,
    /// Accepted, but this node no longer held the claim when recording it.
    pub fenced: Vec<RunId>,
    /// Refused as malformed by the executor: failed.
    pub failed: Vec<RunId>,
    /// Not sent: the lease was about to expire.
    pub expiring: Vec<RunId>,
    /// Back to pending for the instance they were sent to, which may hold them but could not
    /// be asked (unreachable, or no clear answer): only that instance gets them next.
    pub held: Vec<RunId>,
    /// Last sent to an instance that is now lost or gone: ended `lost` (recovered as new runs
    /// when their tasks allow), never sent elsewhere under the same id.
    pub lost: Vec<RunId>,
    /// Extra shard runs created for broadcast tasks.
    pub shards_created: usize,
    /// Batch requests sent.
    pub requests: usize,
}

impl DispatchReport {
    /// Adds `other`'s runs and counts to these.
    pub fn merge(&mut self, other: DispatchReport) {
        self.started.extend(other.started);
        self.released.extend(other.released);
        self.fenced.extend(other.fenced);
        self.failed.extend(other.failed);
        self.expiring.extend(other.expiring);
        self.held.extend(other.held);
        self.lost.extend(other.lost);
        self.shards_created += other.shards_created;
        self.requests += other.requests;
    }
}

/// One round's writes for a group commit ([`crate::group_commit`]): rounds queue their writes;
/// one writer at a time writes everything queued in one transaction, so a steady stream of
/// small rounds costs one transaction at a time instead of one per round. A dispatcher has
/// two: one for the intents rounds write before sending, one for the starts and releases they
/// write after, so a round about to send never waits behind the (larger, lock-heavier) outcome
/// writes of earlier rounds.
#[derive(Debug)]
struct RoundWrites {
    /// Where runs are about to be sent.
    intents: Vec<(Fence, ExecutorId)>,
    started: Vec<StartClaimed>,
    released: Vec<Fence>,
}

type Recorder = GroupCommit<RoundWrites, Recorded>;

/// What the write did to one round's runs.
#[derive(Debug)]
struct Recorded {
    /// Runs whose intent was written: still held by this node, free to be sent.
    intended: HashSet<RunId>,
    started: Vec<StartedRun>,
    /// Accepted by an executor, but no longer held by this node.
    fenced: Vec<Fence>,
    released: Vec<RunId>,
}

/// Sends runs to wrappers.
#[derive(Debug)]
pub struct Dispatcher {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    directory: Arc<Directory>,
    config: DispatchConfig,
    permits: Arc<Semaphore>,
    routing: Mutex<RoutingState>,
    /// Dispatch intents.
    intents: Recorder,
    /// Starts and releases.
    outcomes: Recorder,
    /// Where live run events go (after the commit).
    run_events: RunEvents,
    /// The runs whose results this node wrote: their starts have nothing to write.
    finished: Arc<FinishedHere>,
}

/// A batch an instance answered: who, its heartbeat as this node last saw it, when the batch
/// was sent and the acks.
struct Delivered {
    executor: ExecutorId,
    heartbeat_at: i64,
    sent_at: i64,
    acks: Vec<RunAck>,
}

/// Why a batch got no acks.
struct Refusal {
    why: String,
    /// The request may have reached the instance (a timeout after sending, an answer that
    /// could not be read): it may be running the runs.
    maybe_delivered: bool,
}

impl Refusal {
    fn not_sent(why: String) -> Self {
        Self {
            why,
            maybe_delivered: false,
        }
    }
}

/// One run on its way: its candidates and how far down the list it got.
struct Pending {
    fire: Fire,
    /// The instance the run was last sent to (by any node), when it was claimed: that
    /// instance may be running it, so it is asked first and never passed over while it may
    /// hold the run.
    intent: Option<ExecutorId>,
    candidates: Vec<ExecutorId>,
    next: usize,
    /// Whether the intent for `candidates[next]` is recorded.
    intended: bool,
    /// Why the last instance tried did not take it (`None`: no instance was tried).
    last_refusal: Option<String>,
}

/// A run readied by [`Dispatcher::prepare`]: routed, its first instance's intent recorded.
pub struct Ready(Pending);

impl Ready {
    /// When the run falls due.
    pub fn due_at(&self) -> i64 {
        self.0.fire.run.due_at
    }

    pub fn run_id(&self) -> RunId {
        self.0.fire.run.id
    }

    /// The claim to hand back when the run is not sent after all.
    pub fn fence(&self) -> Option<Fence> {
        self.0.fire.run.fence()
    }
}

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ready")
            .field("run", &self.0.fire.run.id)
            .field("due_at", &self.0.fire.run.due_at)
            .field("to", &self.0.candidates.get(self.0.next))
            .finish()
    }
}

/// The live event of `run` accepted by `executor` at `at`.
fn running_event(run: &Run, executor: ExecutorId, at: i64) -> RunEvent {
    let mut run = run.clone();
    run.state = RunState::Running;
    run.executor_id = Some(executor);
    run.dispatched_at = Some(at);
    run.started_at = Some(at);
    RunEvent::state_of(&run, at)
}

impl Dispatcher {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        directory: Arc<Directory>,
        config: DispatchConfig,
    ) -> Self {
        let permits = Arc::new(Semaphore::new(config.max_in_flight.max(1)));
        Self {
            store,
            clock,
            directory,
            config,
            permits,
            routing: Mutex::new(RoutingState::default()),
            intents: GroupCommit::new(take_all),
            outcomes: GroupCommit::new(take_all),
            run_events: RunEvents::default(),
            finished: Arc::default(),
        }
    }

    /// The runs whose results this node wrote, for its callback handlers to note them in
    /// ([`crate::api::CallbackApi::with_finished_here`]).
    pub fn finished_here(&self) -> &Arc<FinishedHere> {
        &self.finished
    }

    /// Publishes live run events (runs started, runs it ends) to `events`.
    pub fn with_run_events(mut self, events: RunEvents) -> Self {
        self.run_events = events;
        self
    }

    /// The directory this dispatcher routes with.
    pub fn directory(&self) -> &Arc<Directory> {
        &self.directory
    }

    /// Sends `fires` now and records what happened: [`prepare`](Self::prepare) then
    /// [`send`](Self::send).
    pub async fn dispatch(&self, fires: Vec<Fire>) -> Result<DispatchReport> {
        let (ready, mut report) = self.prepare(fires).await?;
        report.merge(self.send(ready).await?);
        Ok(report)
    }

    /// Readies claimed runs for sending, ahead of their due time when they are claimed early:
    /// broadcast tasks split into shards, runs of instances no longer live settled, each run
    /// routed, and the dispatch intent of its first instance recorded. Sending at the due time
    /// is then only the request: no database write stands between the due time and the wire.
    pub async fn prepare(&self, fires: Vec<Fire>) -> Result<(Vec<Ready>, DispatchReport)> {
        let mut report = DispatchReport::default();
        let now = self.clock.now_ms();
        let (fires, expiring): (Vec<Fire>, Vec<Fire>) = fires
            .into_iter()
            .partition(|f| f.run.lease_until.unwrap_or(0) - now >= self.config.min_lease_left_ms);
        report.expiring = expiring.iter().map(|f| f.run.id).collect();
        if fires.is_empty() {
            return Ok((Vec::new(), report));
        }
        let mut apps: Vec<AppId> = fires.iter().map(|f| f.task.app_id).collect();
        apps.sort_unstable();
        apps.dedup();
        let entries = self.directory.entries(&apps, now).await?;
        let fires = self
            .shard_broadcasts(fires, &entries, now, &mut report)
            .await?;
        let (fires, held) = self.settle_orphaned(fires, &entries, &mut report).await?;

        // Runs with no instance to go to (none live, or held for a silent one) stay readied
        // without one: they go back in line at their due time, not before.
        let mut pending: Vec<Pending> = held
            .into_iter()
            .map(|fire| Pending {
                fire,
                intent: None,
                candidates: Vec::new(),
                next: 0,
                intended: false,
                last_refusal: Some("held for the silent instance it was sent to".to_owned()),
            })
            .collect();
        {
            let mut state = lock(&self.routing);
            for mut fire in fires {
                if !fire.routed.is_empty() {
                    // Routed by the claim, which recorded the intent for its first instance.
                    pending.push(Pending {
                        candidates: std::mem::take(&mut fire.routed),
                        fire,
                        intent: None,
                        next: 0,
                        intended: true,
                        last_refusal: None,
                    });
                    continue;
                }
                let mut candidates = entries
                    .get(&fire.task.app_id)
                    .map(|e| route(&fire.task, &fire.run, e, &mut state))
                    .unwrap_or_default();
                let intent = fire.run.executor_id;
                if let Some(at) = intent.and_then(|x| candidates.iter().position(|&c| c == x)) {
                    // Sent there before (this claim's predecessor may have paused before
                    // recording the start): that instance answers 409 if it has the run.
                    let x = candidates.remove(at);
                    candidates.insert(0, x);
                }
                pending.push(Pending {
                    fire,
                    intent,
                    candidates,
                    next: 0,
                    intended: false,
                    last_refusal: None,
                });
            }
        }
        let ready = self.record_intent(pending, &mut report).await;
        Ok((ready.into_iter().map(Ready).collect(), report))
    }

    /// Sends readied runs now and records what happened. A run whose lease is all but over is
    /// not sent; one its instance refuses moves on to its next instance (its intent recorded
    /// first).
    pub async fn send(&self, ready: Vec<Ready>) -> Result<DispatchReport> {
        self.send_at(ready, self.clock.now_ms()).await
    }

    /// [`send`](Self::send), readied now and sent at `at`: everything before the requests (the
    /// lease check, routing, batching) is done first, and each request of the first round waits
    /// until the clock reads `at` ([`clock::reach`]), so a round readied a little early goes out
    /// on its millisecond. The lease is checked as at `at`.
    pub async fn send_at(&self, ready: Vec<Ready>, at: i64) -> Result<DispatchReport> {
        let mut report = DispatchReport::default();
        let now = self.clock.now_ms().max(at);
        // The lease was checked when the intent was written; a run readied then still goes out
        // unless its lease is all but over (the wrapper refuses a request read after the lease,
        // and whoever takes the run over asks the intended instance first).
        let (ready, expiring): (Vec<Ready>, Vec<Ready>) = ready
            .into_iter()
            .partition(|r| r.0.fire.run.lease_until.unwrap_or(0) - now >= SEND_LEASE_MARGIN_MS);
        report.expiring = expiring.iter().map(|r| r.0.fire.run.id).collect();
        crate::metrics::fired(now, ready.iter().map(|r| r.0.fire.run.due_at));
        if ready.is_empty() {
            return Ok(report);
        }
        let mut apps: Vec<AppId> = ready.iter().map(|r| r.0.fire.task.app_id).collect();
        apps.sort_unstable();
        apps.dedup();
        let entries = self.directory.entries(&apps, now).await?;
        let mut pending: Vec<Pending> = ready.into_iter().map(|r| r.0).collect();
        let mut released: Vec<Fence> = Vec::new();

        let mut started: Vec<StartClaimed> = Vec::new();
        // The running events of those starts, emitted once recorded.
        let mut starting: Vec<RunEvent> = Vec::new();
        let mut malformed: Vec<(Fire, String)> = Vec::new();
        // Runs an instance may hold although this node could not find out: back to pending,
        // keeping their intent, never sent elsewhere meanwhile.
        let mut unsure: Vec<Fence> = Vec::new();
        while !pending.is_empty() {
            // Runs out of candidates go back in line.
            let (exhausted, rest): (Vec<Pending>, Vec<Pending>) = pending
                .into_iter()
                .partition(|p| p.next >= p.candidates.len());
            for p in exhausted {
                tracing::debug!(run = %p.fire.run.id, reason = p.last_refusal.as_deref().unwrap_or("no live instance has this handler"), "no executor accepted the run");
                if let Some(f) = p.fire.run.fence() {
                    released.push(f);
                }
            }
            // Where each run goes this round is recorded before it is sent.
            pending = self.record_intent(rest, &mut report).await;
            if pending.is_empty() {
                break;
            }
            // One batch per (app, instance) this round.
            let mut batches: BTreeMap<(AppId, ExecutorId), Vec<Pending>> = BTreeMap::new();
            for p in pending.drain(..) {
                let target = p.candidates[p.next];
                batches
                    .entry((p.fire.task.app_id, target))
                    .or_default()
                    .push(p);
            }
            // A wrapper takes at most `MAX_BATCH_ITEMS` runs per request.
            let mut requests: Vec<((AppId, ExecutorId), Vec<Pending>)> = Vec::new();
            for (target, mut items) in batches {
                while items.len() > protocol::MAX_BATCH_ITEMS {
                    let rest = items.split_off(protocol::MAX_BATCH_ITEMS);
                    requests.push((target, items));
                    items = rest;
                }
                requests.push((target, items));
            }
            let sends = requests.into_iter().map(|((app, executor), items)| {
                let entry = entries.get(&app).cloned();
                self.send_batch(entry, executor, items, at)
            });
            report.requests += sends.len();
            for (items, outcome) in join_all(sends).await {
                match outcome {
                    Err(refusal) => {
                        for mut p in items {
                            let target = p.candidates[p.next];
                            if refusal.maybe_delivered || p.intent == Some(target) {
                                tracing::debug!(run = %p.fire.run.id, why = %refusal.why, "the instance may hold the run; holding it back for that instance");
                                report.held.push(p.fire.run.id);
                                unsure.extend(p.fire.run.fence());
                                continue;
                            }
                            p.next += 1;
                            p.intended = false;
                            p.last_refusal = Some(refusal.why.clone());
                            pending.push(p);
                        }
                    }
                    Ok(Delivered {
                        executor,
                        heartbeat_at,
                        sent_at,
                        acks,
                    }) => {
                        crate::metrics::acks(&acks);
                        let by_run: HashMap<RunId, RunAck> = acks
                            .into_iter()
                            .filter_map(|a| a.run_id.map(|id| (RunId(id), a)))
                            .collect();
                        for mut p in items {
                            let ack = by_run.get(&p.fire.run.id);
                            match ack.map(|a| a.status) {
                                Some(AckStatus::Accepted | AckStatus::AlreadyKnown) => {
                                    lock(&self.routing).sent(executor, heartbeat_at);
                                    if let Some(fence) = p.fire.run.fence() {
                                        if self.run_events.is_on() {
                                            starting.push(running_event(
                                                &p.fire.run,
                                                executor,
                                                sent_at,
                                            ));
                                        }
                                        started.push(StartClaimed {
                                            fence,
                                            executor_id: executor,
                                            dispatched_at: sent_at,
                                            deadline_at: p
                                                .fire
                                                .task
                                                .timeout_ms
                                                .map(|t| sent_at.saturating_add(t)),
                                        });
                                    }
                                }
                                Some(AckStatus::Malformed) => {
                                    let why = ack
                                        .and_then(|a| a.message.clone())
                                        .unwrap_or_else(|| "malformed".to_owned());
                                    malformed.push((p.fire, why));
                                }
                                Some(AckStatus::Expired) => {
                                    // Read after this node's lease on it ended: nothing was
                                    // started, and the run is no longer this node's to send.
                                    report.expiring.push(p.fire.run.id);
                                }
                                None => {
                                    // The instance read the batch but said nothing of this run.
                                    report.held.push(p.fire.run.id);
                                    unsure.extend(p.fire.run.fence());
                                }
                                other => {
                                    p.next += 1;
                                    p.intended = false;
                                    p.last_refusal =
                                        Some(match (other, ack.and_then(|a| a.message.clone())) {
                                            (Some(s), Some(m)) => format!("{s:?}: {m}"),
                                            (Some(s), None) => format!("{s:?}"),
                                            (None, _) => {
                                                "no ack for this run in the answer".to_owned()
                                            }
                                        });
                                    pending.push(p);
                                }
                            }
                        }
                    }
                }
            }
        }

        released.extend(unsure);
        let running = self
            .record(started, released, malformed, &mut report)
            .await?;
        if !starting.is_empty() {
            for event in starting {
                if running.contains(&event.run_id) {
                    self.run_events.emit(event);
                }
            }
        }
        Ok(report)
    }

    /// Runs last sent to an instance that is no longer live are never sent elsewhere under the
    /// same id: that instance may hold them, and its result must still find them. While it may
    /// come back (up but silent, or draining) they are held for it (returned as fences to
    /// release); once it is lost or gone they end `lost`, recovered as a new run when the task
    /// allows, and the instance's late success still counts. Returns the runs to send.
    async fn settle_orphaned(
        &self,
        fires: Vec<Fire>,
        entries: &HashMap<AppId, Arc<AppEntry>>,
        report: &mut DispatchReport,
    ) -> Result<(Vec<Fire>, Vec<Fire>)> {
        // A run the claim routed has the instance the claim chose, not one it was sent to.
        let (orphaned, fires): (Vec<Fire>, Vec<Fire>) = fires.into_iter().partition(|f| {
            f.routed.is_empty()
                && f.run.executor_id.is_some_and(|x| {
                    entries
                        .get(&f.task.app_id)
                        .is_none_or(|e| e.executor(x).is_none())
                })
        });
        if orphaned.is_empty() {
            return Ok((fires, Vec::new()));
        }
        let mut apps: Vec<(TenantId, AppId)> = orphaned
            .iter()
            .map(|f| (f.task.tenant_id, f.task.app_id))
            .collect();
        apps.sort_unstable();
        apps.dedup();
        let mut states: HashMap<ExecutorId, ExecutorState> = HashMap::new();
        {
            let mut tx = self.store.begin_read().await?;
            for (tenant, app) in apps {
                for e in tx.list_executors(tenant, Some(app)).await? {
                    states.insert(e.id, e.state);
                }
            }
        }
        let now = self.clock.now_ms();
        let mut hold = Vec::new();
        let mut lost: Vec<(RunId, Finish)> = Vec::new();
        for f in orphaned {
            let Some(x) = f.run.executor_id else { continue };
            match states.get(&x) {
                Some(ExecutorState::Up | ExecutorState::Draining) => {
                    tracing::debug!(run = %f.run.id, executor = %x, "the instance the run was sent to is silent or draining; holding the run for it");
                    report.held.push(f.run.id);
                    hold.push(f);
                }
                state => {
                    let why = match state {
                        Some(s) => format!("the executor instance it was sent to is {s}"),
                        None => "the executor instance it was sent to is gone".to_owned(),
                    };
                    let finish = Finish::decided(
                        RunState::Lost,
                        format!("{why} and never confirmed the run"),
                        true,
                        now,
                    );
                    lost.push((f.run.id, finish));
                }
            }
        }
        if !lost.is_empty() {
            lost.sort_by_key(|(id, _)| *id);
            let mut tx = self.store.begin().await?;
            let finished = finish_runs(tx.as_mut(), None, &lost, &mut rand::random).await?;
            tx.commit().await?;
            report.lost.extend(lost.iter().map(|(id, _)| *id));
            log_finished(&finished, Some(&self.directory));
            self.run_events.finished(&finished);
        }
        Ok((fires, hold))
    }

    /// Records, before a run is sent, which instance it goes to next (the dispatch intent): a
    /// node that takes the run over after this one paused asks that instance first, and a
    /// result is accepted only from it. Returns the runs free to be sent to their next
    /// instance: those already recorded, and those recorded now; runs this node no longer
    /// holds are reported fenced. When the write fails, none of the runs needing it is sent
    /// (they move when their leases end).
    async fn record_intent(
        &self,
        pending: Vec<Pending>,
        report: &mut DispatchReport,
    ) -> Vec<Pending> {
        // Already recorded, or with no instance to go to: nothing to write.
        let (mut ready, unrecorded): (Vec<Pending>, Vec<Pending>) = pending
            .into_iter()
            .partition(|p| p.intended || p.next >= p.candidates.len());
        let items: Vec<(Fence, ExecutorId)> = unrecorded
            .iter()
            .filter_map(|p| p.fire.run.fence().map(|f| (f, p.candidates[p.next])))
            .collect();
        if items.is_empty() {
            ready.extend(unrecorded);
            return ready;
        }
        let held: HashSet<RunId> = match self
            .commit(&self.intents, items, Vec::new(), Vec::new())
            .await
        {
            Ok(recorded) => recorded.intended,
            Err(e) => {
                tracing::warn!(error = %e, "could not record where runs go; not sending them");
                HashSet::new()
            }
        };
        for mut p in unrecorded {
            if held.contains(&p.fire.run.id) {
                p.intended = true;
                ready.push(p);
            } else {
                report.fenced.push(p.fire.run.id);
            }
        }
        ready
    }

    /// Queues a round's writes for a group commit ([`Recorder`]) and waits until they are
    /// written: by this call when no write is in progress, else together with whatever else
    /// queued meanwhile.
    async fn commit(
        &self,
        recorder: &Recorder,
        intents: Vec<(Fence, ExecutorId)>,
        started: Vec<StartClaimed>,
        released: Vec<Fence>,
    ) -> Result<Recorded> {
        let writes = RoundWrites {
            intents,
            started,
            released,
        };
        recorder
            .submit(writes, |tickets| self.write(tickets))
            .await
            .map_err(StoreError::Unavailable)
    }

    /// Writes the round's outcome: starts (after [`DispatchConfig::start_write_delay_ms`]) and
    /// releases go through the group commit ([`Recorder`]); runs an executor refused as
    /// malformed fail in a transaction of their own. Returns the started runs that are running
    /// (not those whose result came before their start was written: their final state was
    /// announced already).
    async fn record(
        &self,
        started: Vec<StartClaimed>,
        released: Vec<Fence>,
        malformed: Vec<(Fire, String)>,
        report: &mut DispatchReport,
    ) -> Result<HashSet<RunId>> {
        let mut running = HashSet::new();
        if !started.is_empty() || !released.is_empty() {
            if !started.is_empty() && self.config.start_write_delay_ms > 0 {
                let delay = u64::try_from(self.config.start_write_delay_ms).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            let recorded = self
                .commit(&self.outcomes, Vec::new(), started, released)
                .await?;
            for fence in &recorded.fenced {
                tracing::warn!(
                    run = %fence.run_id,
                    node = %fence.node,
                    "an executor accepted a run this node no longer holds (claimed again since)"
                );
            }
            report.started.extend(recorded.started.iter().map(|s| s.id));
            running = recorded
                .started
                .iter()
                .filter(|s| s.running)
                .map(|s| s.id)
                .collect();
            report
                .fenced
                .extend(recorded.fenced.into_iter().map(|f| f.run_id));
            report.released.extend(recorded.released);
        }
        if malformed.is_empty() {
            return Ok(running);
        }
        let now = self.clock.now_ms();
        let mut items: Vec<(RunId, Finish)> = malformed
            .into_iter()
            .map(|(fire, why)| {
                let finish = Finish::decided(
                    RunState::Failed,
                    format!("the executor refused the run request: {why}"),
                    false,
                    now,
                );
                (fire.run.id, finish)
            })
            .collect();
        items.sort_by_key(|(id, _)| *id);
        let mut tx = self.store.begin().await?;
        // One batch: runs locked in id order, then their tasks.
        let finished = finish_runs(tx.as_mut(), None, &items, &mut rand::random).await?;
        report.failed.extend(items.iter().map(|(id, _)| *id));
        tx.commit().await?;
        log_finished(&finished, Some(&self.directory));
        self.run_events.finished(&finished);
        Ok(running)
    }

    /// Writes what every queued round asked for (a recorder's tickets carry intents only, or
    /// starts and releases only) in one transaction and answers each round with its share. The
    /// runs go in slices of [`WRITE_SLICE`]: each statement stays far below the database's
    /// statement timeout when the database is saturated, so a big group is slowed, never
    /// thrown away.
    async fn write(&self, tickets: Vec<Ticket<RoundWrites, Recorded>>) {
        let now = self.clock.now_ms();
        let intents: Vec<(Fence, ExecutorId)> = tickets
            .iter()
            .flat_map(|t| t.item.intents.iter().cloned())
            .collect();
        // In id order, so the slices take their row locks in the order result batches do.
        let mut started: Vec<StartClaimed> = tickets
            .iter()
            .flat_map(|t| t.item.started.iter().cloned())
            .collect();
        started.sort_by_key(|s| s.fence.run_id);
        // Runs whose results this node wrote, with their dispatch, under the claim the start
        // names: the database would answer them as not running, with nothing written.
        let mut settled = Vec::new();
        started.retain(|s| {
            let answered = self.finished.take(&s.fence);
            if answered {
                settled.push(StartedRun {
                    id: s.fence.run_id,
                    running: false,
                });
            }
            !answered
        });
        crate::metrics::run_starts(settled.len(), started.len());
        let mut released: Vec<Fence> = tickets
            .iter()
            .flat_map(|t| t.item.released.iter().cloned())
            .collect();
        released.sort_by_key(|f| f.run_id);
        let write_once = || async {
            if intents.is_empty() && started.is_empty() && released.is_empty() {
                return Ok((HashSet::new(), Vec::new(), Vec::new()));
            }
            let mut tx = self.store.begin().await?;
            let mut intended = HashSet::with_capacity(intents.len());
            for slice in intents.chunks(WRITE_SLICE) {
                intended.extend(tx.record_dispatch_intent(slice, now).await?);
            }
            let mut moved = Vec::with_capacity(started.len());
            for slice in started.chunks(WRITE_SLICE) {
                moved.extend(tx.start_claimed_runs(slice, now).await?);
            }
            let mut back = Vec::with_capacity(released.len());
            for slice in released.chunks(WRITE_SLICE) {
                back.extend(tx.release_claimed_runs(slice, now).await?);
            }
            tx.commit().await?;
            Ok::<_, StoreError>((intended, moved, back))
        };
        // A run whose result (or timeout, or cancel) moved it to the history while this
        // transaction read it fails the transaction (see `StoreError::is_moved_run`); tried
        // again, the run is read where it went.
        let mut outcome = write_once().await;
        for _ in 1..WRITE_TRIES {
            match &outcome {
                Err(e) if e.is_moved_run() => outcome = write_once().await,
                _ => break,
            }
        }
        match outcome {
            Ok((intended, moved, back)) => {
                let moved: HashMap<RunId, StartedRun> = moved
                    .into_iter()
                    .chain(settled)
                    .map(|s| (s.id, s))
                    .collect();
                let back: HashSet<RunId> = back.into_iter().collect();
                for t in tickets {
                    let (writes, reply) = t.into_parts();
                    let (started, fenced): (Vec<_>, Vec<_>) = writes
                        .started
                        .into_iter()
                        .partition(|s| moved.contains_key(&s.fence.run_id));
                    reply.answer(Ok(Recorded {
                        intended: writes
                            .intents
                            .iter()
                            .map(|(f, _)| f.run_id)
                            .filter(|id| intended.contains(id))
                            .collect(),
                        started: started
                            .iter()
                            .filter_map(|s| moved.get(&s.fence.run_id).copied())
                            .collect(),
                        fenced: fenced.into_iter().map(|s| s.fence).collect(),
                        released: writes
                            .released
                            .iter()
                            .map(|f| f.run_id)
                            .filter(|id| back.contains(id))
                            .collect(),
                    }));
                }
            }
            Err(e) => {
                let why = e.to_string();
                for t in tickets {
                    t.answer(Err(why.clone()));
                }
            }
        }
    }

    /// Sends one batch to one instance. `Ok` carries the instance, when it was sent and the
    /// acks; `Err` says why none of the runs got there.
    async fn send_batch(
        &self,
        entry: Option<Arc<AppEntry>>,
        executor: ExecutorId,
        items: Vec<Pending>,
        not_before: i64,
    ) -> (Vec<Pending>, std::result::Result<Delivered, Refusal>) {
        let Some(entry) = entry else {
            return (
                items,
                Err(Refusal::not_sent("the app is unknown".to_owned())),
            );
        };
        let Some(instance) = entry.executor(executor) else {
            return (
                items,
                Err(Refusal::not_sent(format!("instance {executor} is gone"))),
            );
        };
        let Ok(_permit) = self.permits.acquire().await else {
            return (
                items,
                Err(Refusal::not_sent(
                    "the dispatcher is shutting down".to_owned(),
                )),
            );
        };
        clock::reach(&*self.clock, not_before).await;
        let _in_flight = crate::metrics::InFlight::start();
        let sent_at = self.clock.now_ms();
        let body = RunBatchRequest {
            runs: items
                .iter()
                .map(|p| run_request(&p.fire, sent_at))
                .collect(),
            instance_id: Some(instance.instance_id.clone()),
        };
        let answer = entry
            .client
            .post_json_raw(&instance.base_url, protocol::paths::RUNS_BATCH, &body)
            .await;
        let outcome = match answer {
            Err(e) => Err(Refusal {
                maybe_delivered: matches!(&e, ClientError::Transport { source, .. } if !source.is_connect()),
                why: e.to_string(),
            }),
            Ok(raw) if raw.status.is_success() => match raw.json::<RunBatchResponse>() {
                Ok(resp) => Ok(Delivered {
                    executor,
                    heartbeat_at: instance.last_heartbeat_at,
                    sent_at,
                    acks: resp.acks,
                }),
                Err(e) => Err(Refusal {
                    maybe_delivered: true,
                    why: format!("{} answered with unexpected JSON: {e}", instance.base_url),
                }),
            },
            Ok(raw) => Err(Refusal::not_sent(format!(
                "{} answered {}: {}",
                instance.base_url,
                raw.status,
                String::from_utf8_lossy(&raw.body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ))),
        };
        crate::metrics::dispatch_request(outcome.is_ok());
        if let Err(refusal) = &outcome {
            tracing::debug!(app = %entry.key, instance = %instance.instance_id, why = %refusal.why, "batch not delivered");
            // Its heartbeat view is stale or it died: look again next time.
            self.directory.invalidate(entry.app.id);
        }
        (items, outcome)
    }

    /// Splits each broadcast run that is not sharded yet into one shard per live instance:
    /// the run becomes shard 0 of `n`, shards 1.. are inserted due now (claimed by whichever
    /// node is first, this one included).
    async fn shard_broadcasts(
        &self,
        fires: Vec<Fire>,
        entries: &HashMap<AppId, Arc<AppEntry>>,
        now: i64,
        report: &mut DispatchReport,
    ) -> Result<Vec<Fire>> {
        let needs = |f: &Fire| f.task.routing == Routing::Broadcast && f.run.shard_total == 1;
        if !fires.iter().any(needs) {
            return Ok(fires);
        }
        let mut tx = self.store.begin().await?;
        let mut out = Vec::with_capacity(fires.len());
        let mut shards: Vec<NewRun> = Vec::new();
        for mut fire in fires {
            let n = entries
                .get(&fire.task.app_id)
                .map(|e| able(&e.live, &fire.task))
                .unwrap_or(0);
            if needs(&fire) && n > 1 {
                let Some(fence) = fire.run.fence() else {
                    continue;
                };
                let total = i32::try_from(n).unwrap_or(i32::MAX);
                match tx
                    .transition_claimed(
                        &fence,
                        &ClaimedTransition::Sharded { index: 0, total },
                        now,
                    )
                    .await
                {
                    Ok(run) => {
                        shards.extend((1..total).map(|i| NewRun::shard(&run, i, now)));
                        fire.run = run;
                    }
                    Err(crate::store::StoreError::Fenced { .. }) => continue,
                    Err(e) => return Err(e),
                }
            }
            out.push(fire);
        }
        if !shards.is_empty() {
            report.shards_created += tx.insert_runs_of_tasks(&shards, now).await?.len();
            let mut groups: Vec<&str> = shards.iter().map(|r| r.node_group.as_str()).collect();
            groups.sort_unstable();
            groups.dedup();
            for group in groups {
                tx.notify_due(group).await?;
            }
        }
        tx.commit().await?;
        Ok(out)
    }

    /// Tells the executors of `runs` to cancel them (best effort: a gone executor is skipped).
    pub async fn cancel(&self, runs: &[Cancellation], reason: &str) {
        let items: Vec<(&Cancellation, &str)> = runs.iter().map(|c| (c, reason)).collect();
        self.cancel_each(&items).await;
    }

    /// Tells the executor of each run to cancel it, with the run's own reason. Returns the
    /// runs whose request did not get through (the instance could not be reached); an
    /// instance that answered, whatever it said, or that is gone, is not asked again.
    pub async fn cancel_each(&self, runs: &[(&Cancellation, &str)]) -> Vec<RunId> {
        if runs.is_empty() {
            return Vec::new();
        }
        let now = self.clock.now_ms();
        let mut app_ids: Vec<AppId> = runs.iter().map(|(c, _)| c.task.app_id).collect();
        app_ids.sort_unstable();
        app_ids.dedup();
        let Ok(entries) = self.directory.entries(&app_ids, now).await else {
            return runs.iter().map(|(c, _)| c.run.id).collect();
        };
        let sends = runs.iter().filter_map(|(c, reason)| {
            let entry = entries.get(&c.task.app_id)?.clone();
            let base = entry.executor(c.run.executor_id?)?.base_url.clone();
            let body = CancelRequest {
                reason: Some((*reason).to_owned()),
            };
            let path = protocol::paths::run_cancel(c.run.id.0);
            let run = c.run.id;
            Some(async move {
                let app = &entry.key;
                match entry.client.post_json_raw(&base, &path, &body).await {
                    Ok(raw) if raw.status.is_success() => {
                        tracing::info!(%app, %path, "cancel request delivered");
                        None
                    }
                    Ok(raw) => {
                        tracing::info!(%app, %path, status = %raw.status, "cancel request refused");
                        None
                    }
                    Err(e) => {
                        tracing::info!(%app, %path, error = %e, "cancel request not delivered");
                        Some(run)
                    }
                }
            })
        });
        join_all(sends).await.into_iter().flatten().collect()
    }
}

/// The claim routes the runs that certainly fire through the node's dispatcher: the same
/// routing (and round-robin positions) as [`Dispatcher::prepare`], over the directory's cached
/// instances only, so a claim never waits on the directory. A run of an app not cached, or
/// with no instance able to take it, is left to [`Dispatcher::prepare`].
impl crate::claimer::Router for Dispatcher {
    fn route(&self, runs: &[(&Run, &Arc<Task>)], now: i64) -> HashMap<RunId, Vec<ExecutorId>> {
        let mut apps: Vec<AppId> = runs.iter().map(|(_, t)| t.app_id).collect();
        apps.sort_unstable();
        apps.dedup();
        let entries = self.directory.cached(&apps, now);
        if entries.is_empty() {
            return HashMap::new();
        }
        let mut state = lock(&self.routing);
        runs.iter()
            .filter_map(|(run, task)| {
                let to = route(task, run, entries.get(&task.app_id)?, &mut state);
                (!to.is_empty()).then_some((run.id, to))
            })
            .collect()
    }
}

/// The instances of `entry` to try for `run`, in its task's routing order.
fn route(task: &Task, run: &Run, entry: &AppEntry, state: &mut RoutingState) -> Vec<ExecutorId> {
    routing::order(task, run, &entry.live, state, rand::random)
        .into_iter()
        .map(|x| x.id)
        .collect()
}

/// How many live instances have the task's handler.
fn able(live: &[crate::app::Executor], task: &Task) -> usize {
    live.iter().filter(|e| e.has_handler(&task.handler)).count()
}

/// The protocol request for a claimed run sent at `sent_at` (its deadline counts from then).
pub fn run_request(fire: &Fire, sent_at: i64) -> RunRequest {
    let run = &fire.run;
    let task = &fire.task;
    let deadline = task
        .timeout_ms
        .map(|t| ms_to_datetime(sent_at.saturating_add(t)));
    RunRequest {
        run_id: run.id.0,
        task_id: task.id.0,
        task_name: task.name.clone(),
        handler: task.handler.clone(),
        params: run
            .params
            .as_ref()
            .map_or_else(|| task.params.0.clone(), |p| p.0.clone()),
        attempt: u32::try_from(run.attempt).unwrap_or(1),
        scheduled_at: ms_to_datetime(run.scheduled_at),
        shard_index: u32::try_from(run.shard_index).unwrap_or(0),
        shard_total: u32::try_from(run.shard_total).unwrap_or(1),
        deadline,
        trigger: match run.trigger_kind {
            TriggerKind::Schedule => Trigger::Schedule,
            TriggerKind::Manual => Trigger::Manual,
            TriggerKind::Retry => Trigger::Retry,
            TriggerKind::Chain => Trigger::Chain,
            TriggerKind::Recovery => Trigger::Recovery,
        },
        not_after: run.lease_until.map(ms_to_datetime),
        sent_at: Some(ms_to_datetime(sent_at)),
    }
}

/// Runs per statement when recording dispatch intents, starts and releases: a group commit of
/// many rounds on a saturated database stays far below the statement timeout, so it is slowed,
/// never thrown away.
const WRITE_SLICE: usize = 500;

/// How many times [`Dispatcher::write`] runs its transaction while runs it reads move to the
/// history under it (each try reads them anew, so a second rarely meets a move again).
const WRITE_TRIES: usize = 5;

/// A readied run is still sent when at least this much of its lease is left.
const SEND_LEASE_MARGIN_MS: i64 = 100;

/// How long a wrapper may take to answer a run request (it answers before running anything).
pub const ACK_TIMEOUT: Duration = Duration::from_secs(3);

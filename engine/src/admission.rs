//! Admission control: a node claims only as many runs as it gets written in time.
//!
//! Every claimed run a node fires is held until its dispatch is settled: written as started
//! (or found finished already), handed back, failed or fenced. Past the rate the database can
//! write, those writes queue; claims that kept coming would hold runs until their leases ended,
//! the runs would be claimed and sent again, and the cluster would do every run twice exactly
//! when it has the least room (the collapse past saturation). [`Admission`] caps the runs a node
//! holds with a window that follows how quickly they settle (additive increase, multiplicative
//! decrease, as TCP does): a run held past [`Admission::target_ms`] (half the lease) after it
//! was due (or claimed, if later) shrinks the window, quick settles widen it. Runs beyond the window wait in
//! the database, costing nothing, until the node has room; the completed rate stays at what
//! the database carries instead of falling.
//!
//! A run no settle ever names (a dispatch that failed as a whole, a node stopping) leaves the
//! window when its lease has ended: the node no longer holds it then anyway.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::run::RunId;

/// The fewest runs a node may hold: enough for a claim to make progress at any load.
pub const MIN_WINDOW: f64 = 64.0;

/// The window of claimed, unsettled runs one node may hold (see the module docs).
#[derive(Debug)]
pub struct Admission {
    state: Mutex<State>,
    room: Notify,
    /// A run settled later than this after it was due (or claimed) counts as a sign of
    /// overload.
    target_ms: i64,
    /// Held runs older than this are forgotten (their lease has ended).
    forget_ms: i64,
    max_window: f64,
}

#[derive(Debug)]
struct State {
    /// Held runs and when each became the node's to send: its due time, or its claim if later.
    held: HashMap<RunId, i64>,
    window: f64,
    /// No decrease before this (one per round trip, as the settles of one overload arrive
    /// together).
    calm_until: i64,
}

/// What [`Admission::settle`] saw, for the node's metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settled {
    pub runs: usize,
    pub late: usize,
    pub window: f64,
}

impl Admission {
    /// A window starting at `initial` runs, for a node whose claims last `lease_ms` and which
    /// writes the starts of accepted runs `start_delay_ms` after sending them (a settle that
    /// late is on time).
    pub fn new(initial: i64, lease_ms: i64, start_delay_ms: i64) -> Self {
        let lease_ms = lease_ms.max(1);
        let max_window = (initial.max(1) as f64 * 64.0).max(MIN_WINDOW);
        Self {
            state: Mutex::new(State {
                held: HashMap::new(),
                window: (initial as f64).clamp(MIN_WINDOW, max_window),
                calm_until: i64::MIN,
            }),
            room: Notify::new(),
            // Half the lease, or the start write's delay and a quarter of it if that is longer:
            // a run claimed ahead of its due time (the horizon) still settles well before its
            // lease ends.
            target_ms: (lease_ms / 2).max(lease_ms / 4 + start_delay_ms.max(0)),
            forget_ms: lease_ms,
            max_window,
        }
    }

    /// See [`Self::target_ms`](Admission).
    pub fn target_ms(&self) -> i64 {
        self.target_ms
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many more runs the node may claim at `now` (0: wait for [`Self::wait_for_room`]).
    pub fn room(&self, now: i64) -> i64 {
        let mut s = self.lock();
        let forget_before = now.saturating_sub(self.forget_ms);
        let before = s.held.len();
        s.held.retain(|_, since| *since >= forget_before);
        if s.held.len() < before {
            // Held until their leases ended: the node is behind.
            s.window = (s.window * 0.5).max(MIN_WINDOW);
            s.calm_until = now.saturating_add(self.target_ms);
        }
        (s.window as i64 - s.held.len() as i64).max(0)
    }

    /// The runs a claim took (`id`, due time), held from `now`.
    pub fn claimed(&self, runs: impl IntoIterator<Item = (RunId, i64)>, now: i64) {
        let mut s = self.lock();
        for (id, due_at) in runs {
            s.held.insert(id, due_at.max(now));
        }
    }

    /// Runs whose dispatch is settled at `now`; the window follows how long they were held.
    pub fn settle(&self, ids: impl IntoIterator<Item = RunId>, now: i64) -> Settled {
        let mut s = self.lock();
        let (mut runs, mut late) = (0usize, 0usize);
        for id in ids {
            if let Some(since) = s.held.remove(&id) {
                runs += 1;
                if now.saturating_sub(since) > self.target_ms {
                    late += 1;
                }
            }
        }
        if late > 0 && now >= s.calm_until {
            s.window = (s.window * 0.8).max(MIN_WINDOW);
            s.calm_until = now.saturating_add(self.target_ms);
        } else if late == 0 && runs > 0 {
            // About a tenth more per window's worth of quick settles.
            s.window = (s.window + runs as f64 * 0.1).min(self.max_window);
        }
        let window = s.window;
        drop(s);
        if runs > 0 {
            self.room.notify_waiters();
        }
        Settled { runs, late, window }
    }

    /// Runs claimed and not settled.
    pub fn held(&self) -> usize {
        self.lock().held.len()
    }

    /// The current window.
    pub fn window(&self) -> f64 {
        self.lock().window
    }

    /// Resolves when runs settle (or after `max`, so leases ending are noticed).
    pub async fn wait_for_room(&self, max: std::time::Duration) {
        let _ = tokio::time::timeout(max, self.room.notified()).await;
    }
}

/// How many runs one claim may take, after claims were cut off by their time bound.
///
/// A claim whose work does not fit in the node's pass bound (a lease plus 0.5 s) is cut off and
/// rolled back; the next one of the same size would be cut off too, and the node would never
/// claim again (every claimed run of a long-overdue backlog is a misfire, whose policy and
/// alarm cost more than a fire). A cut-off claim halves the cap, down to [`MIN_CLAIM`]; each
/// claim that finishes raises it by a quarter, back up to the claim batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClaimCap {
    cap: f64,
    batch: f64,
}

/// The fewest runs a claim is allowed after cut-off claims.
pub const MIN_CLAIM: f64 = 16.0;

impl ClaimCap {
    /// No cap below the claim batch.
    pub fn new(batch: i64) -> Self {
        let batch = (batch.max(1)) as f64;
        Self { cap: batch, batch }
    }

    /// The most runs the next claim may take.
    pub fn limit(&self) -> i64 {
        self.cap as i64
    }

    /// A claim was cut off by its time bound.
    pub fn cut_off(&mut self) {
        self.cap = (self.cap / 2.0).max(MIN_CLAIM.min(self.batch));
    }

    /// A claim finished in time.
    pub fn finished(&mut self) {
        self.cap = (self.cap * 1.25).min(self.batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(range: std::ops::Range<i64>) -> Vec<(RunId, i64)> {
        range.map(|i| (RunId(i), 0)).collect()
    }

    #[test]
    fn claims_stop_at_the_window_and_resume_as_runs_settle() {
        let a = Admission::new(100, 2_000, 0);
        assert_eq!(a.room(0), 100);
        a.claimed(ids(0..100), 0);
        assert_eq!(a.room(10), 0);
        let s = a.settle((0..40).map(RunId), 50);
        assert_eq!((s.runs, s.late), (40, 0));
        assert!(a.room(60) >= 40, "room again once runs settle");
    }

    #[test]
    fn late_settles_shrink_the_window_once_per_round_trip_and_quick_ones_widen_it() {
        let a = Admission::new(1_000, 2_000, 0);
        a.claimed(ids(0..1_000), 0);
        let first = a.settle((0..10).map(RunId), 1_100);
        assert!(
            first.window < 1_000.0,
            "held 1,100 ms, past the 1,000 ms target"
        );
        let second = a.settle((10..20).map(RunId), 1_101);
        assert_eq!(second.window, first.window, "one decrease per round trip");
        a.claimed((2_000..2_100).map(|i| (RunId(i), 2_000)), 2_000);
        let quick = a.settle((2_000..2_100).map(RunId), 2_010);
        assert!(quick.window > second.window);
    }

    #[test]
    fn the_window_never_falls_below_the_minimum() {
        let a = Admission::new(100, 2_000, 0);
        for round in 0..20 {
            let at = round * 10_000;
            a.claimed([(RunId(round), at)], at);
            a.settle([RunId(round)], at + 5_000);
        }
        assert_eq!(a.window(), MIN_WINDOW);
    }

    #[test]
    fn runs_held_past_their_lease_are_forgotten() {
        let a = Admission::new(100, 2_000, 0);
        a.claimed(ids(0..100), 0);
        assert_eq!(a.room(1_000), 0);
        assert!(a.room(2_001) > 0, "the leases ended: not held any more");
        assert_eq!(a.held(), 0);
    }

    #[test]
    fn the_start_writes_delay_is_on_time() {
        let a = Admission::new(100, 2_000, 300);
        assert_eq!(a.target_ms(), 1_000);
        let slow = Admission::new(100, 2_000, 900);
        assert_eq!(
            slow.target_ms(),
            1_400,
            "the delay and a quarter of the lease"
        );
        a.claimed([(RunId(1), 0)], 0);
        assert_eq!(a.settle([RunId(1)], 900).late, 0);
    }

    #[test]
    fn a_run_held_from_its_due_time_not_from_its_claim() {
        let a = Admission::new(100, 2_000, 0);
        // Claimed 400 ms ahead of its due time and settled 100 ms after it: quick.
        a.claimed([(RunId(1), 1_400)], 1_000);
        let s = a.settle([RunId(1)], 1_500);
        assert_eq!(s.late, 0);
    }

    #[test]
    fn cut_off_claims_halve_the_claim_down_to_a_floor_and_finished_ones_bring_it_back() {
        let mut cap = ClaimCap::new(2_000);
        assert_eq!(cap.limit(), 2_000);
        cap.finished();
        assert_eq!(cap.limit(), 2_000, "never above the batch");
        for _ in 0..20 {
            cap.cut_off();
        }
        assert_eq!(
            cap.limit(),
            MIN_CLAIM as i64,
            "a claim always takes some runs"
        );
        let mut finished = 0;
        while cap.limit() < 2_000 {
            cap.finished();
            finished += 1;
        }
        assert_eq!(finished, 22, "back to the batch within a few dozen claims");
        let mut small = ClaimCap::new(4);
        small.cut_off();
        assert_eq!(small.limit(), 4, "a batch below the floor is not cut");
    }
}

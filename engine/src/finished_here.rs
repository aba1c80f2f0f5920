//! The runs whose results this node wrote, for the start writes still to come.
//!
//! A quick run's result usually comes before its start is written: the start waits
//! [`start_write_delay_ms`](crate::dispatcher::DispatchConfig::start_write_delay_ms) after its
//! round, and the result's write records the dispatch itself (the wrapper echoes the send time).
//! The start write then has nothing to do: the database answers the run as not running, under
//! the same claim. [`FinishedHere`] lets the dispatcher give that answer itself for the runs
//! whose results this node wrote, so their rows are not read and locked again; the runs other
//! nodes finished are looked up in the database as before.
//!
//! Only a run noted with the claim (node and token) the start names is answered here: the
//! answer is the one the database would give, since a final run's state, claim and dispatch
//! never change again. Bounded: at most [`KEPT`] runs, the oldest forgotten first (a run
//! forgotten is looked up in the database, as before).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::outcome::Finished;
use crate::run::{Fence, Run, RunId};
use crate::store::Result;

/// The most runs remembered: several seconds of results at the highest rates measured.
pub const KEPT: usize = 65_536;

/// The runs whose results this node wrote with their dispatch recorded, by id, with the claim
/// they were finished under.
#[derive(Debug, Default)]
pub struct FinishedHere {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    claims: HashMap<RunId, (String, i64)>,
    /// Noting order, for forgetting the oldest first (may name runs taken since).
    order: VecDeque<RunId>,
}

impl FinishedHere {
    /// Notes the runs `outcomes` made final with their dispatch recorded (after the
    /// transaction that wrote them committed).
    pub fn note(&self, outcomes: &[Result<Finished>]) {
        let runs = outcomes.iter().filter_map(|o| match o {
            Ok(Finished::Applied { run, .. }) => Some(run),
            _ => None,
        });
        self.note_runs(runs);
    }

    fn note_runs<'a>(&self, runs: impl Iterator<Item = &'a Run>) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        for run in runs {
            let Some(owner) = run.claim_owner.as_ref() else {
                continue;
            };
            if !run.state.is_final() || run.dispatched_at.is_none() {
                continue;
            }
            if inner
                .claims
                .insert(run.id, (owner.clone(), run.fence))
                .is_none()
            {
                inner.order.push_back(run.id);
            }
            while inner.claims.len() > KEPT {
                match inner.order.pop_front() {
                    Some(old) => {
                        inner.claims.remove(&old);
                    }
                    None => break,
                }
            }
        }
        // Ids taken since they were noted: dropped once they are most of the queue.
        if inner.order.len() > 2 * inner.claims.len() + 1_024 {
            let Inner { claims, order } = &mut *inner;
            order.retain(|id| claims.contains_key(id));
        }
    }

    /// Whether this node finished the run `fence` names, under that claim, with its dispatch
    /// recorded: then its start has nothing to write and it is not running. Forgets the run.
    pub fn take(&self, fence: &Fence) -> bool {
        let Ok(mut inner) = self.inner.lock() else {
            return false;
        };
        match inner.claims.get(&fence.run_id) {
            Some((node, token)) if *node == fence.node && *token == fence.token => {
                inner.claims.remove(&fence.run_id);
                true
            }
            _ => false,
        }
    }

    /// How many runs are remembered now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().map(|i| i.claims.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::RunState;

    fn run(id: i64, state: RunState, owner: Option<&str>, fence: i64, sent: bool) -> Run {
        let mut r = Run::claimed_for_tests(RunId(id));
        r.state = state;
        r.claim_owner = owner.map(str::to_owned);
        r.fence = fence;
        r.dispatched_at = sent.then_some(1_000);
        r
    }

    fn fence(id: i64, node: &str, token: i64) -> Fence {
        Fence {
            run_id: RunId(id),
            node: node.to_owned(),
            token,
        }
    }

    #[test]
    fn a_run_finished_with_its_dispatch_recorded_is_taken_once_under_its_claim() {
        let here = FinishedHere::default();
        let runs = [run(1, RunState::Succeeded, Some("a"), 3, true)];
        here.note_runs(runs.iter());
        assert!(!here.take(&fence(1, "b", 3)), "another node's claim");
        assert!(!here.take(&fence(1, "a", 2)), "an earlier claim of the run");
        assert!(here.take(&fence(1, "a", 3)));
        assert!(!here.take(&fence(1, "a", 3)), "taken once");
        assert_eq!(here.len(), 0);
    }

    #[test]
    fn runs_not_final_unclaimed_or_without_their_dispatch_are_not_noted() {
        let here = FinishedHere::default();
        let runs = [
            run(1, RunState::Running, Some("a"), 1, true),
            run(2, RunState::Failed, None, 1, true),
            run(3, RunState::Failed, Some("a"), 1, false),
            run(4, RunState::Pending, Some("a"), 1, true),
        ];
        here.note_runs(runs.iter());
        assert_eq!(here.len(), 0);
        for id in 1..=4 {
            assert!(!here.take(&fence(id, "a", 1)));
        }
    }

    #[test]
    fn the_oldest_runs_are_forgotten_beyond_the_bound() {
        let here = FinishedHere::default();
        let runs: Vec<Run> = (0..KEPT as i64 + 10)
            .map(|i| run(i, RunState::Succeeded, Some("a"), 1, true))
            .collect();
        here.note_runs(runs.iter());
        assert_eq!(here.len(), KEPT);
        assert!(!here.take(&fence(0, "a", 1)), "forgotten");
        assert!(!here.take(&fence(9, "a", 1)), "forgotten");
        assert!(here.take(&fence(10, "a", 1)));
        assert!(here.take(&fence(KEPT as i64 + 9, "a", 1)));
    }

    #[test]
    fn taken_runs_do_not_pile_up_in_the_noting_order() {
        let here = FinishedHere::default();
        for i in 0..100_000 {
            here.note_runs([run(i, RunState::Succeeded, Some("a"), 1, true)].iter());
            assert!(here.take(&fence(i, "a", 1)));
        }
        let inner = here.inner.lock().unwrap();
        assert!(inner.order.len() <= 1_025, "{}", inner.order.len());
    }
}

//! Choosing an executor instance for a run: the task's routing strategy orders the live
//! instances that have the handler; the dispatcher tries them in that order (the first that
//! accepts gets the run — busy-over on 503 or a connection error).
//!
//! - `round_robin`: rotates through the instances, per task;
//! - `random`: a random order;
//! - `least_busy`: most free capacity first (capacity − running at the last heartbeat − runs
//!   this node has sent it since that heartbeat);
//! - `consistent_hash`: rendezvous hashing of (task, instance): a task sticks to the same
//!   instance while it lives, and only the tasks of an instance that leaves move;
//! - `failover`: a fixed order (oldest registration first): the first live one takes all;
//! - `broadcast`: one run per live instance; shard `i` of `n` goes to the `i`-th instance (in
//!   the failover order), falling back to the others.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::app::{Executor, ExecutorId};
use crate::run::Run;
use crate::task::{Routing, Task, TaskId};

/// Per-node routing memory: round-robin positions and runs in flight per instance.
#[derive(Debug, Default)]
pub struct RoutingState {
    next: HashMap<TaskId, usize>,
    /// Per instance: the heartbeat this node last saw from it, and the runs sent since.
    in_flight: HashMap<ExecutorId, (i64, i64)>,
}

impl RoutingState {
    /// Counts a run sent to `executor`, whose last heartbeat seen was at `heartbeat_at`. A
    /// newer heartbeat counts the instance's running runs itself, so what was sent before it
    /// is forgotten.
    pub fn sent(&mut self, executor: ExecutorId, heartbeat_at: i64) {
        let seen = self.in_flight.entry(executor).or_insert((heartbeat_at, 0));
        if seen.0 < heartbeat_at {
            *seen = (heartbeat_at, 0);
        }
        seen.1 += 1;
    }

    /// Runs sent to `e` that its last heartbeat does not count yet.
    fn in_flight(&self, e: &Executor) -> i64 {
        match self.in_flight.get(&e.id) {
            Some(&(seen, runs)) if seen >= e.last_heartbeat_at => runs,
            _ => 0,
        }
    }
}

/// The instances able to run `task`'s handler, in the order the strategy wants them tried.
/// `random` is a source of uniform `u64`s (used by `random` only).
pub fn order<'a>(
    task: &Task,
    run: &Run,
    live: &'a [Executor],
    state: &mut RoutingState,
    mut random: impl FnMut() -> u64,
) -> Vec<&'a Executor> {
    let mut able: Vec<&Executor> = live
        .iter()
        .filter(|e| e.has_handler(&task.handler))
        .collect();
    if able.is_empty() {
        return able;
    }
    // A stable base order: oldest registration first.
    able.sort_by_key(|e| (e.registered_at, e.id));
    let n = able.len();
    match task.routing {
        Routing::RoundRobin => {
            let next = state.next.entry(task.id).or_default();
            let start = *next % n;
            *next = next.wrapping_add(1);
            able.rotate_left(start);
        }
        Routing::Random => {
            // Fisher–Yates.
            for i in (1..n).rev() {
                let j = usize::try_from(random() % (i as u64 + 1)).unwrap_or(0);
                able.swap(i, j);
            }
        }
        Routing::LeastBusy => {
            let free =
                |e: &Executor| i64::from(e.capacity) - i64::from(e.running) - state.in_flight(e);
            able.sort_by_key(|e| (std::cmp::Reverse(free(e)), e.registered_at, e.id));
        }
        Routing::ConsistentHash => {
            able.sort_by_key(|e| std::cmp::Reverse(rendezvous(task.id, &e.instance_id)));
        }
        Routing::Failover => {}
        Routing::Broadcast => {
            let start = usize::try_from(run.shard_index).unwrap_or(0) % n;
            able.rotate_left(start);
        }
    }
    able
}

/// Rendezvous (highest random weight) score of an instance for a task.
fn rendezvous(task: TaskId, instance: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    task.0.hash(&mut h);
    instance.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use sqlx::types::Json;

    use super::*;
    use crate::app::{AppId, ExecutorState};
    use crate::run::RunId;
    use crate::tenant::TenantId;

    fn exec(id: i64, handlers: &[&str], capacity: i32, running: i32) -> Executor {
        Executor {
            id: ExecutorId(id),
            tenant_id: TenantId(1),
            app_id: AppId(1),
            instance_id: format!("host-{id}"),
            base_url: format!("http://10.0.0.{id}:8080"),
            capacity,
            running,
            handlers: Json(handlers.iter().map(|h| h.to_string()).collect()),
            labels: Json(BTreeMap::new()),
            state: ExecutorState::Up,
            registered_at: id,
            last_heartbeat_at: 0,
            undrain_requested: false,
        }
    }

    fn task(id: i64, routing: Routing) -> Task {
        let mut t = crate::task::tests::sample_task();
        t.id = TaskId(id);
        t.handler = "work".into();
        t.routing = routing;
        t
    }

    fn run(shard: i32, total: i32) -> Run {
        let mut r = Run::claimed_for_tests(RunId(1));
        r.shard_index = shard;
        r.shard_total = total;
        r
    }

    fn ids(v: &[&Executor]) -> Vec<i64> {
        v.iter().map(|e| e.id.0).collect()
    }

    fn live() -> Vec<Executor> {
        vec![
            exec(3, &["work"], 4, 0),
            exec(1, &["work"], 4, 3),
            exec(2, &["work", "other"], 4, 1),
            exec(4, &["other"], 4, 0),
        ]
    }

    #[test]
    fn only_instances_with_the_handler_are_candidates() {
        let mut st = RoutingState::default();
        let l = live();
        let first = order(&task(1, Routing::Failover), &run(0, 1), &l, &mut st, || 0);
        assert_eq!(
            ids(&first),
            vec![1, 2, 3],
            "failover: registration order, without host-4"
        );
        let other = [exec(9, &["x"], 1, 0)];
        let none = order(
            &task(1, Routing::Failover),
            &run(0, 1),
            &other,
            &mut st,
            || 0,
        );
        assert!(none.is_empty());
    }

    #[test]
    fn round_robin_rotates_per_task() {
        let mut st = RoutingState::default();
        let l = live();
        let firsts: Vec<i64> = (0..4)
            .map(|_| {
                order(&task(1, Routing::RoundRobin), &run(0, 1), &l, &mut st, || 0)[0]
                    .id
                    .0
            })
            .collect();
        assert_eq!(firsts, vec![1, 2, 3, 1]);
        // Another task has its own position.
        assert_eq!(
            order(&task(2, Routing::RoundRobin), &run(0, 1), &l, &mut st, || 0)[0]
                .id
                .0,
            1
        );
        // The rest of the order are the fallbacks.
        assert_eq!(
            ids(&order(
                &task(1, Routing::RoundRobin),
                &run(0, 1),
                &l,
                &mut st,
                || 0
            )),
            vec![2, 3, 1]
        );
    }

    #[test]
    fn least_busy_prefers_free_capacity_and_counts_runs_in_flight() {
        let mut st = RoutingState::default();
        let l = live();
        assert_eq!(
            ids(&order(
                &task(1, Routing::LeastBusy),
                &run(0, 1),
                &l,
                &mut st,
                || 0
            )),
            vec![3, 2, 1]
        );
        for _ in 0..4 {
            st.sent(ExecutorId(3), 0);
        }
        assert_eq!(
            ids(&order(
                &task(1, Routing::LeastBusy),
                &run(0, 1),
                &l,
                &mut st,
                || 0
            )),
            vec![2, 1, 3]
        );
        // A newer heartbeat counts the instance's runs itself: what was sent before is forgotten.
        let l: Vec<Executor> = l
            .into_iter()
            .map(|mut e| {
                e.last_heartbeat_at = 1_000;
                e
            })
            .collect();
        assert_eq!(
            order(&task(1, Routing::LeastBusy), &run(0, 1), &l, &mut st, || 0)[0]
                .id
                .0,
            3
        );
    }

    #[test]
    fn consistent_hash_is_sticky_and_moves_only_the_departed_instances_tasks() {
        let mut st = RoutingState::default();
        let l = live();
        let pick = |tasks: &[Executor], t: i64, st: &mut RoutingState| {
            order(
                &task(t, Routing::ConsistentHash),
                &run(0, 1),
                tasks,
                st,
                || 0,
            )[0]
            .id
            .0
        };
        let before: Vec<i64> = (0..200).map(|t| pick(&l, t, &mut st)).collect();
        let again: Vec<i64> = (0..200).map(|t| pick(&l, t, &mut st)).collect();
        assert_eq!(before, again, "sticky");
        for id in [1, 2, 3] {
            assert!(before.contains(&id), "spread over every instance");
        }
        let without_2: Vec<Executor> = l.iter().filter(|e| e.id.0 != 2).cloned().collect();
        let after: Vec<i64> = (0..200).map(|t| pick(&without_2, t, &mut st)).collect();
        for (b, a) in before.iter().zip(&after) {
            if *b != 2 {
                assert_eq!(b, a, "tasks of the remaining instances do not move");
            }
        }
    }

    #[test]
    fn random_order_is_a_permutation_driven_by_the_source() {
        let mut st = RoutingState::default();
        let l = live();
        let mut seq = [5u64, 0, 7, 1].into_iter().cycle();
        let o = order(&task(1, Routing::Random), &run(0, 1), &l, &mut st, || {
            seq.next().unwrap_or(0)
        });
        let mut sorted = ids(&o);
        sorted.sort();
        assert_eq!(sorted, vec![1, 2, 3]);
    }

    #[test]
    fn broadcast_sends_each_shard_to_its_own_instance() {
        let mut st = RoutingState::default();
        let l = live();
        let firsts: Vec<i64> = (0..3)
            .map(|i| {
                order(&task(1, Routing::Broadcast), &run(i, 3), &l, &mut st, || 0)[0]
                    .id
                    .0
            })
            .collect();
        assert_eq!(firsts, vec![1, 2, 3]);
    }
}

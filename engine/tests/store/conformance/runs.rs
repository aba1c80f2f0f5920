use std::sync::Arc;
use std::time::Duration;

use mthpt_engine::app::AppId;
use mthpt_engine::run::{
    ClaimedTransition, Fence, NewRun, ReportedBy, Run, RunCompletion, RunFilter, RunId,
    RunProgress, RunState, TriggerKind,
};
use mthpt_engine::store::{ClaimRequest, Completion, StartClaimed, StartedRun, Store, StoreError};

use crate::in_tx;
use crate::support::fixtures::*;

fn claim_req(node: &str, now: i64) -> ClaimRequest {
    ClaimRequest {
        node: node.into(),
        groups: vec!["default".into()],
        now,
        horizon_ms: 0,
        lease_ms: 30 * SECOND,
        limit: 100,
    }
}

async fn claim(store: &dyn Store, req: &ClaimRequest) -> Vec<Run> {
    in_tx!(store, |tx| tx.claim_due_runs(req).await.unwrap())
}

/// A world with a manual task and `n` pending runs of it, due a second apart from `T0 - n s`.
async fn with_runs(store: &dyn Store, n: i64) -> (World, mthpt_engine::task::Task, Vec<Run>) {
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "job")).await;
    let mut runs = Vec::new();
    for i in 0..n {
        runs.push(insert(store, &occurrence(&w, &task, T0 - (n - i) * SECOND)).await);
    }
    (w, task, runs)
}

pub async fn same_occurrence_inserted_by_two_nodes_exists_once(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "job")).await;
    let occ = occurrence(&w, &task, T0 + MINUTE);

    // Node A inserts and holds its transaction open while node B inserts the same occurrence.
    let mut a = store.begin().await.unwrap();
    let inserted_a = a.insert_run(&occ, T0).await.unwrap();
    assert!(inserted_a.is_some());
    let node_b = async {
        let mut b = store.begin().await.unwrap();
        let inserted = b.insert_run(&occ, T0).await.unwrap();
        b.commit().await.unwrap();
        inserted
    };
    let node_a = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        a.commit().await.unwrap();
    };
    let (inserted_b, ()) = tokio::join!(node_b, node_a);
    assert!(
        inserted_b.is_none(),
        "the second node must not create the occurrence again"
    );

    // A batch containing it (twice) inserts nothing more either.
    let later = occurrence(&w, &task, T0 + 2 * MINUTE);
    let batch = in_tx!(store, |tx| tx
        .insert_runs(&[occ.clone(), later.clone(), later.clone()], T0)
        .await
        .unwrap());
    assert_eq!(
        batch.iter().map(|r| r.scheduled_at).collect::<Vec<_>>(),
        vec![T0 + 2 * MINUTE]
    );
    // So does the insert that returns only the inserted runs' tasks.
    let latest = occurrence(&w, &task, T0 + 3 * MINUTE);
    let tasks = in_tx!(store, |tx| tx
        .insert_runs_of_tasks(&[later.clone(), latest.clone(), latest.clone()], T0)
        .await
        .unwrap());
    assert_eq!(tasks, vec![task.id]);

    let mut tx = read(store).await;
    let all = tx
        .list_runs(
            w.tenant.id,
            &RunFilter {
                task_id: Some(task.id),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(all.len(), 3);
    // A retry of the same occurrence is a different attempt, hence a new row.
    let retry = NewRun::next_attempt(&all[1], T0 + 2 * MINUTE, TriggerKind::Retry);
    assert_eq!(tx.insert_run(&retry, T0).await.unwrap().unwrap().attempt, 2);
}

/// A finished occurrence is not inserted again: on PostgreSQL it is in the history, a partition
/// of its own with its own occurrence key, and the inserts look there too.
pub async fn a_finished_occurrence_is_not_inserted_again(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "job")).await;
    let occ = occurrence(&w, &task, T0 - SECOND);
    let run = insert(store, &occ).await;
    let done = in_tx!(store, |tx| tx
        .complete_run(run.id, None, &success(T0))
        .await
        .unwrap());
    assert!(matches!(done, Completion::Applied(ref r) if r.state == RunState::Succeeded));

    let again = in_tx!(store, |tx| tx.insert_run(&occ, T0).await.unwrap());
    assert!(again.is_none(), "inserted again: {again:?}");
    let batch = in_tx!(store, |tx| tx
        .insert_runs(std::slice::from_ref(&occ), T0)
        .await
        .unwrap());
    assert!(batch.is_empty(), "inserted again in a batch: {batch:?}");
    let tasks = in_tx!(store, |tx| tx
        .insert_runs_of_tasks(std::slice::from_ref(&occ), T0)
        .await
        .unwrap());
    assert!(tasks.is_empty(), "inserted again for its task: {tasks:?}");
    let listed = read(store)
        .await
        .list_runs(w.tenant.id, &RunFilter::default())
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|r| (r.id, r.state)).collect::<Vec<_>>(),
        vec![(run.id, RunState::Succeeded)]
    );
}

/// Inserting `run`, alone and as a batch, is refused as naming something not found.
async fn assert_insert_refused(store: &dyn Store, run: &mthpt_engine::run::NewRun) {
    let mut tx = store.begin().await.unwrap();
    let one = tx.insert_run(run, T0).await;
    assert!(matches!(one, Err(StoreError::NotFound(_))), "{one:?}");
    drop(tx);
    let mut tx = store.begin().await.unwrap();
    let many = tx.insert_runs(std::slice::from_ref(run), T0).await;
    assert!(matches!(many, Err(StoreError::NotFound(_))), "{many:?}");
    drop(tx);
}

pub async fn a_run_of_a_task_that_does_not_exist_is_refused(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "job")).await;
    let mut ghost = occurrence(&w, &task, T0 + MINUTE);
    ghost.task_id = mthpt_engine::task::TaskId(task.id.0 + 1_000);
    assert_insert_refused(store, &ghost).await;
    let listed = read(store)
        .await
        .list_runs(w.tenant.id, &RunFilter::default())
        .await
        .unwrap();
    assert!(
        listed.iter().all(|r| r.task_id == task.id),
        "nothing of the missing task was stored"
    );
}

pub async fn a_run_naming_another_tenants_task_is_refused(store: Arc<dyn Store>) {
    let store = &*store;
    let acme = world(store, "acme").await;
    let globex = world(store, "globex").await;
    let (theirs, _) = create_task(store, &globex, &manual(globex.app.id, "job")).await;
    // acme's tenant with globex's task: the run would belong to no app of its tenant.
    let mut stray = occurrence(&globex, &theirs, T0 + MINUTE);
    stray.tenant_id = acme.tenant.id;
    assert_insert_refused(store, &stray).await;
    let listed = read(store)
        .await
        .list_runs(acme.tenant.id, &RunFilter::default())
        .await
        .unwrap();
    assert!(listed.is_empty(), "nothing was stored for acme: {listed:?}");
}

pub async fn claims_take_due_runs_of_served_groups_in_order(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "job")).await;
    let at = |offset: i64, prio: i32, group: &str| {
        let mut r = occurrence(&w, &task, T0 + offset);
        r.priority = prio;
        r.node_group = group.into();
        r
    };
    let late = insert(store, &at(-2 * SECOND, 0, "default")).await;
    let low = insert(store, &at(-SECOND, 0, "default")).await;
    let mut high_run = at(-SECOND, 5, "default");
    high_run.shard_index = 1;
    let high = insert(store, &high_run).await;
    let soon = insert(store, &at(500, 0, "default")).await;
    let _later = insert(store, &at(10 * SECOND, 0, "default")).await;
    let _eu = insert(store, &at(0, 0, "eu")).await;

    let mut req = claim_req("node-1", T0);
    req.horizon_ms = SECOND;
    req.limit = 3;
    let first = claim(store, &req).await;
    assert_eq!(
        first.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![late.id, high.id, low.id]
    );
    for r in &first {
        assert_eq!(r.state, RunState::Claimed);
        assert_eq!(r.claim_owner.as_deref(), Some("node-1"));
        assert_eq!(r.lease_until, Some(T0 + 30 * SECOND));
        assert_eq!(r.claimed_at, Some(T0));
        assert_eq!(r.fence, 1);
    }
    // The next claim gets what is left within the horizon; a held claim is not taken.
    let mut req2 = claim_req("node-2", T0);
    req2.horizon_ms = SECOND;
    let second = claim(store, &req2).await;
    assert_eq!(
        second.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![soon.id]
    );
    // Another group's node sees only its group.
    let mut eu = claim_req("node-eu", T0);
    eu.groups = vec!["eu".into(), "asia".into()];
    assert_eq!(claim(store, &eu).await.len(), 1);
    assert!(claim(store, &req2).await.is_empty());
}

pub async fn expired_lease_fences_the_old_claimer_and_another_node_reclaims(store: Arc<dyn Store>) {
    let store = &*store;
    let (w, _, runs) = with_runs(store, 1).await;
    let e = executor(store, w.app.id, "host-1", T0).await;
    let mut req = claim_req("node-a", T0);
    req.lease_ms = SECOND;
    let claimed = claim(store, &req).await;
    let fence_a = claimed[0].fence().unwrap();
    assert_eq!(fence_a.token, 1);

    // While the lease holds, nobody else can claim it.
    assert!(
        claim(store, &claim_req("node-b", T0 + 500))
            .await
            .is_empty()
    );

    // Node A stalls past its lease: it can no longer change the run.
    let start = ClaimedTransition::Started {
        executor_id: e.id,
        dispatched_at: T0,
        deadline_at: None,
    };
    let mut tx = store.begin().await.unwrap();
    let err = tx
        .transition_claimed(&fence_a, &start, T0 + 1_500)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err}");
    drop(tx);

    // Node B reclaims it with a new token; node A stays locked out even "in time" by its clock.
    let reclaimed = claim(store, &claim_req("node-b", T0 + 1_500)).await;
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].id, runs[0].id);
    let fence_b = reclaimed[0].fence().unwrap();
    assert_eq!((fence_b.node.as_str(), fence_b.token), ("node-b", 2));
    let mut tx = store.begin().await.unwrap();
    assert!(matches!(
        tx.transition_claimed(&fence_a, &start, T0 + 1_600).await,
        Err(StoreError::Fenced { .. })
    ));
    let running = tx
        .transition_claimed(&fence_b, &start, T0 + 1_600)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(running.state, RunState::Running);
    assert_eq!(running.executor_id, Some(e.id));
    assert_eq!(running.claim_owner.as_deref(), Some("node-b"));
}

pub async fn every_claimed_transition_needs_the_current_fence(store: Arc<dyn Store>) {
    let store = &*store;
    let (w, _, _) = with_runs(store, 7).await;
    // Claimed before an instance (capacity 4) registers: more than it could take.
    let claimed = claim(store, &claim_req("node-a", T0)).await;
    assert_eq!(claimed.len(), 7);
    let e = executor(store, w.app.id, "host-1", T0).await;
    let now = T0 + SECOND;
    let transitions = [
        ClaimedTransition::Started {
            executor_id: e.id,
            dispatched_at: T0,
            deadline_at: Some(now + MINUTE),
        },
        ClaimedTransition::Released,
        ClaimedTransition::Deferred {
            due_at: now + MINUTE,
        },
        ClaimedTransition::Sharded { index: 2, total: 3 },
        ClaimedTransition::Skipped {
            reason: "overlap: previous run still running".into(),
        },
        ClaimedTransition::Cancelled {
            reason: "task deleted".into(),
        },
        ClaimedTransition::ExtendLease {
            lease_until: now + MINUTE,
        },
    ];
    for (run, to) in claimed.iter().zip(transitions) {
        let fence = run.fence().unwrap();
        let forged = [
            Fence {
                token: fence.token + 1,
                ..fence.clone()
            },
            Fence {
                node: "node-z".into(),
                ..fence.clone()
            },
        ];
        let mut tx = store.begin().await.unwrap();
        for f in &forged {
            let err = tx.transition_claimed(f, &to, now).await.unwrap_err();
            assert!(matches!(err, StoreError::Fenced { .. }), "{to:?}: {err}");
        }
        let after = tx.transition_claimed(&fence, &to, now).await.unwrap();
        tx.commit().await.unwrap();
        match to {
            ClaimedTransition::Started { .. } => {
                assert_eq!(after.state, RunState::Running);
                assert_eq!(after.deadline_at, Some(now + MINUTE));
                assert_eq!(
                    (after.dispatched_at, after.started_at),
                    (Some(T0), Some(now)),
                    "sent at T0, acknowledged now"
                );
                assert_eq!(after.dispatch_attempts, 1);
            }
            ClaimedTransition::Deferred { due_at } => {
                assert_eq!(after.state, RunState::Pending);
                assert_eq!(after.due_at, due_at);
                assert_eq!(after.claim_owner, None);
                assert_eq!(
                    after.dispatch_attempts, 0,
                    "waiting is not a dispatch attempt"
                );
            }
            ClaimedTransition::Released => {
                assert_eq!(after.state, RunState::Pending);
                assert_eq!(
                    (after.claim_owner.as_deref(), after.lease_until),
                    (None, None)
                );
                assert_eq!(after.dispatch_attempts, 1);
            }
            ClaimedTransition::Sharded { .. } => {
                assert_eq!(after.state, RunState::Claimed);
                assert_eq!((after.shard_index, after.shard_total), (2, 3));
            }
            ClaimedTransition::Skipped { .. } => {
                assert_eq!(after.state, RunState::Skipped);
                assert_eq!(after.finished_at, Some(now));
                assert!(after.error.unwrap().contains("overlap"));
            }
            ClaimedTransition::Cancelled { .. } => {
                assert_eq!(after.state, RunState::Cancelled);
                assert_eq!(after.error.as_deref(), Some("task deleted"));
            }
            ClaimedTransition::ExtendLease { lease_until } => {
                assert_eq!(after.state, RunState::Claimed);
                assert_eq!(after.lease_until, Some(lease_until));
            }
        }
        // Once it has left `claimed` (or moved its lease), the same move is refused.
        if !matches!(after.state, RunState::Claimed) {
            let mut tx = store.begin().await.unwrap();
            assert!(matches!(
                tx.transition_claimed(&fence, &ClaimedTransition::Released, now)
                    .await,
                Err(StoreError::Fenced { .. })
            ));
        }
    }
}

pub async fn batch_start_and_release_move_only_runs_still_held(store: Arc<dyn Store>) {
    let store = &*store;
    let (w, _, runs) = with_runs(store, 5).await;
    // Claimed before an instance (capacity 4) registers: more than it could take.
    let claimed = claim(store, &claim_req("node-a", T0)).await;
    let e = executor(store, w.app.id, "host-1", T0).await;
    let fences: Vec<Fence> = claimed.iter().map(|r| r.fence().unwrap()).collect();
    let stale = Fence {
        token: fences[1].token + 1,
        ..fences[1].clone()
    };
    let items: Vec<StartClaimed> = [fences[0].clone(), stale]
        .into_iter()
        .map(|fence| StartClaimed {
            fence,
            executor_id: e.id,
            dispatched_at: T0 + 1,
            deadline_at: Some(T0 + MINUTE),
        })
        .collect();
    let (started, released) = in_tx!(store, |tx| (
        tx.start_claimed_runs(&items, T0 + 2).await.unwrap(),
        tx.release_claimed_runs(&[fences[2].clone(), fences[0].clone()], T0 + 2)
            .await
            .unwrap()
    ));
    assert_eq!(
        started,
        vec![StartedRun {
            id: runs[0].id,
            running: true
        }],
        "the stale fence moved nothing"
    );
    assert_eq!(
        released,
        vec![runs[2].id],
        "a started run is no longer claimed"
    );
    let mut tx = read(store).await;
    let r0 = tx.find_run(runs[0].id).await.unwrap().unwrap();
    assert_eq!(r0.state, RunState::Running);
    assert_eq!(
        (r0.dispatched_at, r0.started_at, r0.deadline_at),
        (Some(T0 + 1), Some(T0 + 2), Some(T0 + MINUTE))
    );
    assert_eq!(
        tx.find_run(runs[1].id).await.unwrap().unwrap().state,
        RunState::Claimed
    );
    let r2 = tx.find_run(runs[2].id).await.unwrap().unwrap();
    assert_eq!((r2.state, r2.dispatch_attempts), (RunState::Pending, 1));
    drop(tx);
    // The result of run 3 arrives before its dispatch is written: it stays final, and the
    // dispatch facts are still recorded.
    let finished = done(RunState::Succeeded, T0 + 3, T0 + 4);
    let late_start = StartClaimed {
        fence: fences[3].clone(),
        executor_id: e.id,
        dispatched_at: T0 + 2,
        deadline_at: Some(T0 + MINUTE),
    };
    let recorded = in_tx!(store, |tx| {
        tx.complete_run(runs[3].id, None, &finished).await.unwrap();
        tx.start_claimed_runs(std::slice::from_ref(&late_start), T0 + 5)
            .await
            .unwrap()
    });
    assert_eq!(
        recorded,
        vec![StartedRun {
            id: runs[3].id,
            running: false
        }],
        "recorded as sent, and final: its result came first"
    );
    let r3 = read(store)
        .await
        .find_run(runs[3].id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r3.state, RunState::Succeeded);
    assert_eq!(
        (r3.executor_id, r3.dispatched_at, r3.started_at),
        (Some(e.id), Some(T0 + 2), Some(T0 + 3))
    );
    assert_eq!(
        in_tx!(store, |tx| tx
            .start_claimed_runs(&[late_start], T0 + 6)
            .await
            .unwrap()),
        vec![StartedRun {
            id: runs[3].id,
            running: false
        }],
        "asked again: still this node's, and final"
    );
    let again = read(store)
        .await
        .find_run(runs[3].id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (again.dispatched_at, again.dispatch_attempts),
        (Some(T0 + 2), r3.dispatch_attempts),
        "recorded once"
    );
    // After the lease, nothing moves.
    let late = in_tx!(store, |tx| tx
        .release_claimed_runs(&[fences[3].clone()], T0 + MINUTE)
        .await
        .unwrap());
    assert!(late.is_empty());
    // An accepted run's start is recorded after the lease has ended while nobody has claimed
    // the run since; once another node has, the old token records nothing.
    let start = |fence: &Fence| StartClaimed {
        fence: fence.clone(),
        executor_id: e.id,
        dispatched_at: T0 + 3,
        deadline_at: None,
    };
    assert_eq!(
        in_tx!(store, |tx| tx
            .start_claimed_runs(&[start(&fences[1])], T0 + MINUTE)
            .await
            .unwrap()),
        vec![StartedRun {
            id: runs[1].id,
            running: true
        }],
        "lease over, token unchanged"
    );
    let reclaimed = claim(store, &claim_req("node-b", T0 + MINUTE)).await;
    assert_eq!(
        reclaimed.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![runs[2].id, runs[4].id],
        "the started run is not claimed again; the released one and the one left claimed are"
    );
    assert!(
        in_tx!(store, |tx| tx
            .start_claimed_runs(&[start(&fences[4])], T0 + MINUTE + 1)
            .await
            .unwrap())
        .is_empty(),
        "claimed by another node since"
    );
}

pub async fn a_result_carrying_its_send_time_records_the_dispatch_before_the_start(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let (w, _, runs) = with_runs(store, 2).await;
    let claimed = claim(store, &claim_req("node-a", T0)).await;
    let e = executor(store, w.app.id, "host-1", T0).await;
    let fences: Vec<Fence> = claimed.iter().map(|r| r.fence().unwrap()).collect();
    let intents: Vec<_> = fences.iter().map(|f| (f.clone(), e.id)).collect();
    in_tx!(store, |tx| tx
        .record_dispatch_intent(&intents, T0 + 1)
        .await
        .unwrap());
    // The wrapper echoes the send time of run 0's request; run 1's result comes from a wrapper
    // that does not.
    let result = |echo: Option<i64>| RunCompletion {
        state: RunState::Succeeded,
        output: None,
        error: None,
        log: None,
        started_at: Some(T0 + 3),
        finished_at: T0 + 4,
        reported_by: Some(ReportedBy {
            executor_id: e.id,
            attempt: 1,
            dispatched_at: echo,
        }),
    };
    let done = in_tx!(store, |tx| tx
        .complete_runs(
            None,
            &[
                (runs[0].id, result(Some(T0 + 2))),
                (runs[1].id, result(None))
            ]
        )
        .await
        .unwrap());
    assert!(
        done.iter().all(|d| matches!(d, Ok(Completion::Applied(_)))),
        "{done:?}"
    );
    let mut tx = read(store).await;
    let r0 = tx.find_run(runs[0].id).await.unwrap().unwrap();
    assert_eq!(
        (r0.state, r0.dispatched_at, r0.dispatch_attempts),
        (RunState::Succeeded, Some(T0 + 2), 1),
        "the echoed send time is the dispatch"
    );
    let r1 = tx.find_run(runs[1].id).await.unwrap().unwrap();
    assert_eq!((r1.dispatched_at, r1.dispatch_attempts), (None, 0));
    drop(tx);
    // The start write after them: run 0 needs none (answered not running, not fenced), run 1
    // gets its dispatch recorded.
    let starts: Vec<StartClaimed> = fences
        .iter()
        .map(|fence| StartClaimed {
            fence: fence.clone(),
            executor_id: e.id,
            dispatched_at: T0 + 5,
            deadline_at: None,
        })
        .collect();
    let mut started = in_tx!(store, |tx| tx
        .start_claimed_runs(&starts, T0 + 6)
        .await
        .unwrap());
    started.sort_by_key(|s| s.id);
    assert_eq!(
        started,
        vec![
            StartedRun {
                id: runs[0].id,
                running: false
            },
            StartedRun {
                id: runs[1].id,
                running: false
            }
        ]
    );
    let mut tx = read(store).await;
    let r0 = tx.find_run(runs[0].id).await.unwrap().unwrap();
    assert_eq!(
        (r0.dispatched_at, r0.dispatch_attempts),
        (Some(T0 + 2), 1),
        "not written again"
    );
    let r1 = tx.find_run(runs[1].id).await.unwrap().unwrap();
    assert_eq!((r1.dispatched_at, r1.dispatch_attempts), (Some(T0 + 5), 1));
}

pub async fn due_signals_arrive_only_after_commit(store: Arc<dyn Store>) {
    let mut listener = store.listen_due().await.unwrap();
    async fn wait(
        l: &mut Box<dyn mthpt_engine::store::DueListener>,
    ) -> Result<mthpt_engine::store::Result<String>, tokio::time::error::Elapsed> {
        tokio::time::timeout(Duration::from_millis(500), l.recv()).await
    }
    // Rolled back: no signal.
    let mut tx = store.begin().await.unwrap();
    tx.notify_due("eu").await.unwrap();
    drop(tx);
    assert!(
        wait(&mut listener).await.is_err(),
        "a rolled-back signal must not arrive"
    );
    // Committed: one signal per group.
    let mut tx = store.begin().await.unwrap();
    tx.notify_due("eu").await.unwrap();
    tx.notify_due("eu").await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(wait(&mut listener).await.unwrap().unwrap(), "eu");
}

pub async fn released_run_keeps_its_place_in_line(store: Arc<dyn Store>) {
    let store = &*store;
    let (_, _, runs) = with_runs(store, 3).await;
    let mut req = claim_req("node-a", T0);
    req.limit = 1;
    let first = claim(store, &req).await;
    assert_eq!(first[0].id, runs[0].id);
    in_tx!(store, |tx| tx
        .transition_claimed(&first[0].fence().unwrap(), &ClaimedTransition::Released, T0)
        .await
        .unwrap());
    // Nobody accepted it: it is first in line again, ahead of younger runs.
    let again = claim(
        store,
        &ClaimRequest {
            now: T0 + SECOND,
            ..req.clone()
        },
    )
    .await;
    assert_eq!(again[0].id, runs[0].id);
    assert_eq!(again[0].fence, 2);
    assert_eq!(again[0].dispatch_attempts, 1);
    assert_eq!(again[0].due_at, runs[0].due_at);
}

fn success(at: i64) -> RunCompletion {
    RunCompletion {
        state: RunState::Succeeded,
        output: Some(serde_json::json!({"rows": 42})),
        error: None,
        log: Some("done".into()),
        started_at: Some(at - SECOND),
        finished_at: at,
        reported_by: None,
    }
}

/// A task moved to another app keeps its started run with the app whose executor runs it: that
/// app's result is recorded, the new app's is "not found" (it never ran the run).
pub async fn a_started_runs_result_belongs_to_the_app_that_runs_it(store: Arc<dyn Store>) {
    let store = &*store;
    let (w, task, runs) = with_runs(store, 2).await;
    let e = executor(store, w.app.id, "host-1", T0).await;
    let claimed = claim(store, &claim_req("node-a", T0)).await;
    let oldest = claimed
        .iter()
        .find(|c| c.id == runs[0].id)
        .expect("the oldest run is claimed");
    started(store, oldest, e.id, T0).await;
    let other = in_tx!(store, |tx| tx
        .create_app(
            w.tenant.id,
            &mthpt_engine::app::NewApp {
                name: "ledger".into(),
                secret: "fedcba9876543210-secret".into(),
            },
            T0,
        )
        .await
        .unwrap());
    in_tx!(store, |tx| tx
        .update_task(
            w.tenant.id,
            task.id,
            task.version,
            &manual(other.id, "job"),
            T0
        )
        .await
        .unwrap());

    let mut tx = store.begin().await.unwrap();
    assert!(
        matches!(
            tx.complete_run(runs[0].id, Some(other.id), &success(T0 + SECOND))
                .await,
            Err(StoreError::NotFound(_))
        ),
        "the task's new app never ran the started run"
    );
    let done = tx
        .complete_run(runs[0].id, Some(w.app.id), &success(T0 + SECOND))
        .await
        .unwrap();
    assert!(
        matches!(done, Completion::Applied(_)),
        "the app that runs it reports it: {done:?}"
    );
    tx.commit().await.unwrap();
}

pub async fn results_are_recorded_once_and_repeats_are_ignored(store: Arc<dyn Store>) {
    let store = &*store;
    let (w, _, runs) = with_runs(store, 2).await;
    let e = executor(store, w.app.id, "host-1", T0).await;
    let claimed = claim(store, &claim_req("node-a", T0)).await;
    started(store, &claimed[0], e.id, T0).await;

    let first = in_tx!(store, |tx| tx
        .complete_run(runs[0].id, Some(w.app.id), &success(T0 + 5 * SECOND))
        .await
        .unwrap());
    let Completion::Applied(done) = first else {
        panic!("first result must apply: {first:?}")
    };
    assert_eq!(done.state, RunState::Succeeded);
    assert_eq!(done.output.as_ref().unwrap().0["rows"], 42);
    assert_eq!(done.finished_at, Some(T0 + 5 * SECOND));
    assert_eq!(
        done.started_at,
        Some(T0),
        "the dispatch time stays the start"
    );
    assert_eq!(done.log_tail, "done\n");

    // A repeated (or contradicting) result changes nothing.
    let failed = RunCompletion {
        state: RunState::Failed,
        error: Some("late".into()),
        ..success(T0 + 9 * SECOND)
    };
    let again = in_tx!(store, |tx| tx
        .complete_run(runs[0].id, Some(w.app.id), &failed)
        .await
        .unwrap());
    assert_eq!(again, Completion::AlreadyFinal(done.clone()));

    let mut tx = store.begin().await.unwrap();
    assert!(
        matches!(
            tx.complete_run(runs[1].id, Some(AppId(w.app.id.0 + 1000)), &failed)
                .await,
            Err(StoreError::NotFound(_))
        ),
        "another app's result is refused"
    );
    assert!(matches!(
        tx.complete_run(RunId(987_654), None, &failed).await,
        Err(StoreError::NotFound(_))
    ));
    let not_final = RunCompletion {
        state: RunState::Running,
        ..failed.clone()
    };
    assert!(matches!(
        tx.complete_run(runs[1].id, None, &not_final).await,
        Err(StoreError::InvalidState(_))
    ));
    // A claimed (not yet running) run can be finished by the engine, e.g. cancelled.
    let cancelled = RunCompletion {
        state: RunState::Cancelled,
        output: None,
        log: None,
        ..failed
    };
    assert!(matches!(
        tx.complete_run(runs[1].id, None, &cancelled).await.unwrap(),
        Completion::Applied(_)
    ));
    tx.commit().await.unwrap();
}

pub async fn progress_and_logs_are_recorded_for_runs_sent_to_an_executor_only(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let (w, _, runs) = with_runs(store, 2).await;
    let e = executor(store, w.app.id, "host-1", T0).await;
    let claimed = claim(store, &claim_req("node-a", T0)).await;
    started(store, &claimed[0], e.id, T0).await;
    let p = |id, fraction, lines: &[&str]| RunProgress {
        run_id: id,
        fraction,
        message: Some("working".into()),
        log_lines: lines.iter().map(|l| l.to_string()).collect(),
    };
    let mut tx = store.begin().await.unwrap();
    assert_eq!(
        tx.record_progress(Some(w.app.id), &p(runs[0].id, Some(0.25), &["a", "b"]), T0)
            .await
            .unwrap(),
        Some(runs[0].task_id),
        "the run's task is returned"
    );
    assert!(
        tx.record_progress(None, &p(runs[0].id, Some(7.0), &["c"]), T0)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        tx.record_progress(None, &p(runs[1].id, Some(0.5), &[]), T0)
            .await
            .unwrap()
            .is_none(),
        "claimed, not yet sent to an executor"
    );
    // Sent (its dispatch recorded) but not yet written as started: a handler that reports at
    // once may be faster than that write.
    assert_eq!(
        tx.record_dispatch_intent(&[(claimed[1].fence().unwrap(), e.id)], T0)
            .await
            .unwrap(),
        vec![runs[1].id]
    );
    assert_eq!(
        tx.record_progress(Some(w.app.id), &p(runs[1].id, Some(0.5), &[]), T0)
            .await
            .unwrap(),
        Some(runs[1].task_id),
        "claimed and on its way to an executor"
    );
    assert!(
        tx.record_progress(
            Some(AppId(w.app.id.0 + 1000)),
            &p(runs[0].id, None, &["x"]),
            T0
        )
        .await
        .unwrap()
        .is_none()
    );
    tx.commit().await.unwrap();
    let mut tx = read(store).await;
    let run = tx.find_run(runs[0].id).await.unwrap().unwrap();
    assert_eq!(run.progress, Some(1.0), "fractions are clamped to 0..=1");
    assert_eq!(run.progress_message.as_deref(), Some("working"));
    assert_eq!(run.log_tail, "a\nb\nc\n");
}

pub async fn watchdog_queries_find_overdue_lost_and_active_runs(store: Arc<dyn Store>) {
    let store = &*store;
    let (w, task, runs) = with_runs(store, 3).await;
    let e1 = executor(store, w.app.id, "host-1", T0).await;
    let e2 = executor(store, w.app.id, "host-2", T0).await;
    let claimed = claim(store, &claim_req("node-a", T0)).await;
    let start = |e, deadline| ClaimedTransition::Started {
        executor_id: e,
        dispatched_at: T0,
        deadline_at: deadline,
    };
    in_tx!(store, |tx| {
        tx.transition_claimed(
            &claimed[0].fence().unwrap(),
            &start(e1.id, Some(T0 + SECOND)),
            T0,
        )
        .await
        .unwrap();
        tx.transition_claimed(
            &claimed[1].fence().unwrap(),
            &start(e2.id, Some(T0 + MINUTE)),
            T0,
        )
        .await
        .unwrap();
    });
    let pending = insert(store, &occurrence(&w, &task, T0 + MINUTE)).await;

    let mut tx = store.begin().await.unwrap();
    let overdue = tx
        .running_runs_past_deadline(T0 + 2 * SECOND, 10)
        .await
        .unwrap();
    assert_eq!(
        overdue.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![runs[0].id]
    );
    let on_e2 = tx.running_runs_on_executors(&[e2.id]).await.unwrap();
    assert_eq!(
        on_e2.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![runs[1].id]
    );
    let unfinished = tx.unfinished_runs_of_task(task.id).await.unwrap();
    assert_eq!(
        unfinished.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![runs[0].id, runs[1].id, runs[2].id, pending.id]
    );
    assert_eq!(
        tx.delete_pending_runs(task.id, &[TriggerKind::Retry])
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        tx.delete_pending_runs(task.id, &[TriggerKind::Schedule])
            .await
            .unwrap(),
        1
    );
    assert!(tx.find_run(pending.id).await.unwrap().is_none());
    assert!(
        tx.find_run(runs[2].id).await.unwrap().is_some(),
        "claimed runs are not deleted"
    );
    tx.commit().await.unwrap();
}

pub async fn runs_past_their_start_timeout_are_found_until_alarmed(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let mut def = manual(w.app.id, "strict");
    def.start_timeout_ms = Some(5 * SECOND);
    let (strict, _) = create_task(store, &w, &def).await;
    let (lax, _) = create_task(store, &w, &manual(w.app.id, "lax")).await;
    let late = insert(store, &occurrence(&w, &strict, T0)).await;
    let _fresh = insert(store, &occurrence(&w, &strict, T0 + 4 * SECOND)).await;
    let _no_timeout = insert(store, &occurrence(&w, &lax, T0)).await;
    let mut tx = store.begin().await.unwrap();
    let found = tx.runs_not_started(T0 + 6 * SECOND, 10).await.unwrap();
    assert_eq!(
        found.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![late.id]
    );
    let mut alarm = mthpt_engine::alarm::NewAlarm::new(
        Some(w.tenant.id),
        mthpt_engine::alarm::AlarmKind::NotStarted,
        mthpt_engine::alarm::Severity::Warning,
        "late",
    );
    alarm.dedupe_key = Some(format!("not_started:{}", late.id));
    tx.insert_alarm(&alarm, T0).await.unwrap();
    assert!(
        tx.runs_not_started(T0 + 6 * SECOND, 10)
            .await
            .unwrap()
            .is_empty(),
        "alarmed once"
    );
    assert_eq!(
        tx.runs_not_started(T0 + 10 * SECOND, 10)
            .await
            .unwrap()
            .len(),
        1,
        "the fresh one now"
    );
    tx.commit().await.unwrap();

    // A run on its way to an executor (dispatch intent recorded, under its node's live lease)
    // may be accepted before its start is written: it is judged once the lease has ended.
    let sent = insert(store, &occurrence(&w, &strict, T0 + 20 * SECOND)).await;
    let e = executor(store, w.app.id, "host-1", T0).await;
    let claimed = claim(store, &claim_req("node-a", T0 + 20 * SECOND)).await;
    let fence = claimed
        .iter()
        .find(|r| r.id == sent.id)
        .and_then(|r| r.fence())
        .unwrap();
    in_tx!(store, |tx| tx
        .record_dispatch_intent(&[(fence, e.id)], T0 + 20 * SECOND)
        .await
        .unwrap());
    let not_started = |at: i64| async move {
        in_tx!(store, |tx| tx.runs_not_started(at, 10).await.unwrap())
            .iter()
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    assert!(
        !not_started(T0 + 49 * SECOND).await.contains(&sent.id),
        "sent under a live lease"
    );
    assert!(
        not_started(T0 + 50 * SECOND).await.contains(&sent.id),
        "its lease has ended"
    );
}

pub async fn runs_of_an_occurrence_are_found_across_shards_and_attempts(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "fanout")).await;
    let mut ids = Vec::new();
    for shard in [1, 0] {
        let mut r = occurrence(&w, &task, T0);
        r.shard_index = shard;
        r.shard_total = 2;
        ids.push(insert(store, &r).await);
    }
    let retry = insert(
        store,
        &NewRun::next_attempt(&ids[1], T0 + SECOND, TriggerKind::Retry),
    )
    .await;
    insert(store, &occurrence(&w, &task, T0 + 1)).await;
    let mut tx = store.begin().await.unwrap();
    let found = tx.lock_occurrence(task.id, T0).await.unwrap();
    assert_eq!(
        found
            .iter()
            .map(|r| (r.shard_index, r.attempt))
            .collect::<Vec<_>>(),
        vec![(0, 1), (0, 2), (1, 1)]
    );
    assert_eq!(found[1].id, retry.id);
    assert!(
        tx.lock_occurrence(task.id, T0 + 7)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn chain_runs_are_found_by_root(store: Arc<dyn Store>) {
    let store = &*store;
    let w = world(store, "acme").await;
    let (parent, _) = create_task(store, &w, &manual(w.app.id, "parent")).await;
    let (left, _) = create_task(store, &w, &manual(w.app.id, "left")).await;
    let (right, _) = create_task(store, &w, &manual(w.app.id, "right")).await;
    let root = insert(store, &occurrence(&w, &parent, T0)).await;
    let child = |task: &mthpt_engine::task::Task| {
        let mut r = occurrence(&w, task, T0);
        r.trigger_kind = TriggerKind::Chain;
        r.parent_run_id = Some(root.id);
        r.chain_root_id = Some(root.id);
        r
    };
    let l = insert(store, &child(&left)).await;
    let r = insert(store, &child(&right)).await;
    let other_root = insert(store, &occurrence(&w, &parent, T0 + 1)).await;
    let mut tx = store.begin().await.unwrap();
    let found = tx
        .lock_chain_runs(root.id, &[parent.id, left.id])
        .await
        .unwrap();
    assert_eq!(
        found.iter().map(|x| x.id).collect::<Vec<_>>(),
        vec![root.id, l.id]
    );
    let found = tx.lock_chain_runs(root.id, &[right.id]).await.unwrap();
    assert_eq!(found.iter().map(|x| x.id).collect::<Vec<_>>(), vec![r.id]);
    assert!(
        tx.lock_chain_runs(other_root.id, &[left.id])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        tx.lock_chain_runs(RunId(999_999), &[left.id]).await,
        Err(StoreError::NotFound(_))
    ));
}

pub async fn runs_are_listed_with_filters_and_pages(store: Arc<dyn Store>) {
    let store = &*store;
    let (w, task, runs) = with_runs(store, 5).await;
    let (other_task, _) = create_task(store, &w, &manual(w.app.id, "other")).await;
    let other = insert(store, &occurrence(&w, &other_task, T0)).await;
    claim(
        store,
        &ClaimRequest {
            limit: 2,
            ..claim_req("n", T0)
        },
    )
    .await;
    let mut tx = read(store).await;
    let ids = |rs: Vec<Run>| rs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        tx.get_run(w.tenant.id, runs[0].id).await.unwrap().state,
        RunState::Claimed
    );
    let all = tx
        .list_runs(w.tenant.id, &RunFilter::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 6);
    assert_eq!(all[0].id, other.id, "newest first");
    let of_task = tx
        .list_runs(
            w.tenant.id,
            &RunFilter {
                task_id: Some(task.id),
                state: Some(RunState::Pending),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(of_task), vec![runs[4].id, runs[3].id, runs[2].id]);
    let window = tx
        .list_runs(
            w.tenant.id,
            &RunFilter {
                scheduled_from: Some(T0 - 4 * SECOND),
                scheduled_before: Some(T0 - 2 * SECOND),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(window), vec![runs[2].id, runs[1].id]);
    let page = tx
        .list_runs(
            w.tenant.id,
            &RunFilter {
                before_id: Some(runs[3].id),
                limit: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(page), vec![runs[2].id, runs[1].id]);
    // Back towards the newest: the two runs just above runs[1], still newest first.
    let newer = tx
        .list_runs(
            w.tenant.id,
            &RunFilter {
                after_id: Some(runs[1].id),
                limit: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(newer), vec![runs[3].id, runs[2].id]);
}

pub async fn results_completed_in_one_batch_follow_the_single_result_rules(store: Arc<dyn Store>) {
    let store = &*store;
    let (w, _, runs) = with_runs(store, 4).await;
    // runs[3] is final before the batch.
    in_tx!(store, |tx| tx
        .complete_run(runs[3].id, None, &success(T0))
        .await
        .unwrap());
    let failed = RunCompletion {
        state: RunState::Failed,
        error: Some("boom".into()),
        output: None,
        log: None,
        ..success(T0 + SECOND)
    };
    let not_final = RunCompletion {
        state: RunState::Running,
        ..failed.clone()
    };
    let items = vec![
        (runs[2].id, success(T0 + SECOND)),
        (RunId(987_654), failed.clone()),
        (runs[0].id, failed.clone()),
        (runs[1].id, not_final),
        (runs[3].id, failed.clone()),
        (runs[2].id, failed.clone()),
    ];
    let out = in_tx!(store, |tx| tx
        .complete_runs(Some(w.app.id), &items)
        .await
        .unwrap());
    assert_eq!(out.len(), items.len());
    let Ok(Completion::Applied(second)) = &out[0] else {
        panic!("{:?}", out[0])
    };
    assert_eq!(
        (second.state, second.log_tail.as_str()),
        (RunState::Succeeded, "done\n")
    );
    assert!(matches!(out[1], Err(StoreError::NotFound(_))));
    let Ok(Completion::Applied(first)) = &out[2] else {
        panic!("{:?}", out[2])
    };
    assert_eq!(
        (first.state, first.error.as_deref()),
        (RunState::Failed, Some("boom"))
    );
    assert!(matches!(out[3], Err(StoreError::InvalidState(_))));
    assert!(matches!(&out[4], Ok(Completion::AlreadyFinal(r)) if r.state == RunState::Succeeded));
    assert_eq!(
        out[5].as_ref().unwrap(),
        &Completion::AlreadyFinal(second.clone()),
        "a run named twice completes once"
    );
    let mut tx = read(store).await;
    assert_eq!(
        tx.find_run(runs[1].id).await.unwrap().unwrap().state,
        RunState::Pending
    );
    // What a batch gives back as applied is the row as stored, column for column.
    for applied in [second, first] {
        assert_eq!(
            &tx.find_run(applied.id).await.unwrap().unwrap(),
            applied,
            "run {} as given back and as stored",
            applied.id
        );
    }
    drop(tx);

    // Another app's runs are not found; an empty batch does nothing.
    let other = in_tx!(store, |tx| tx
        .complete_runs(
            Some(AppId(w.app.id.0 + 1000)),
            &[(runs[1].id, failed.clone())]
        )
        .await
        .unwrap());
    assert!(matches!(other[0], Err(StoreError::NotFound(_))));
    assert!(in_tx!(store, |tx| tx.complete_runs(None, &[]).await.unwrap()).is_empty());
}

pub async fn cancel_requests_reach_runs_an_executor_may_hold_once(store: Arc<dyn Store>) {
    let store = &*store;
    let (w, _, runs) = with_runs(store, 3).await;
    let e = executor(store, w.app.id, "host-1", T0).await;
    let claimed = claim(store, &claim_req("node-a", T0)).await;
    let fences: Vec<Fence> = runs
        .iter()
        .map(|run| {
            let c = claimed.iter().find(|c| c.id == run.id).unwrap();
            c.fence().unwrap()
        })
        .collect();
    let start = |i: usize| StartClaimed {
        fence: fences[i].clone(),
        executor_id: e.id,
        dispatched_at: T0 + 1,
        deadline_at: None,
    };
    // Run 0 is running; run 1 is on its way (intent recorded, start not yet); run 2 was never
    // sent.
    in_tx!(store, |tx| {
        tx.start_claimed_runs(&[start(0)], T0 + 1).await.unwrap();
        tx.record_dispatch_intent(&[(fences[1].clone(), e.id)], T0 + 1)
            .await
            .unwrap();
    });
    let cancel = RunCompletion {
        state: RunState::Cancelled,
        output: None,
        error: Some("by hand".into()),
        log: None,
        started_at: None,
        finished_at: T0 + 2,
        reported_by: None,
    };
    let marked: Vec<bool> = in_tx!(store, |tx| {
        let mut marked = Vec::new();
        for r in &runs {
            tx.complete_run(r.id, None, &cancel).await.unwrap();
            marked.push(
                tx.request_run_cancel(w.tenant.id, r.id, T0 + 2)
                    .await
                    .unwrap(),
            );
        }
        marked
    });
    assert_eq!(marked, [true, true, false], "only runs sent somewhere");
    let other = world(store, "other").await;
    assert!(
        !in_tx!(store, |tx| tx
            .request_run_cancel(other.tenant.id, runs[0].id, T0 + 2)
            .await
            .unwrap()),
        "another tenant's run is not found"
    );
    // Not due before their time; taken once.
    assert!(
        in_tx!(store, |tx| tx
            .take_cancel_requests(T0 + 1, 10)
            .await
            .unwrap())
        .is_empty()
    );
    let taken = in_tx!(store, |tx| tx
        .take_cancel_requests(T0 + 2, 10)
        .await
        .unwrap());
    let mut ids: Vec<RunId> = taken.iter().map(|r| r.id).collect();
    ids.sort();
    assert_eq!(ids, [runs[0].id, runs[1].id]);
    assert!(taken.iter().all(|r| r.executor_id == Some(e.id)));
    assert!(
        in_tx!(store, |tx| tx
            .take_cancel_requests(T0 + 3, 10)
            .await
            .unwrap())
        .is_empty()
    );
    // Run 1's start is recorded after it was cancelled: it stays cancelled and its executor,
    // which accepted it, is told again.
    let recorded = in_tx!(store, |tx| tx
        .start_claimed_runs(&[start(1)], T0 + 4)
        .await
        .unwrap());
    assert_eq!(
        recorded,
        [StartedRun {
            id: runs[1].id,
            running: false
        }]
    );
    let again = in_tx!(store, |tx| tx
        .take_cancel_requests(T0 + 4, 10)
        .await
        .unwrap());
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].id, again[0].state),
        (runs[1].id, RunState::Cancelled)
    );
    // A failed delivery is deferred and comes back when due.
    in_tx!(store, |tx| tx
        .defer_cancel_request(runs[1].id, T0 + 10)
        .await
        .unwrap());
    assert!(
        in_tx!(store, |tx| tx
            .take_cancel_requests(T0 + 9, 10)
            .await
            .unwrap())
        .is_empty()
    );
    assert_eq!(
        in_tx!(store, |tx| tx
            .take_cancel_requests(T0 + 10, 10)
            .await
            .unwrap())
        .len(),
        1
    );
}

/// The claim reads the runs that have neither started nor finished, and the watchdog the runs
/// that have started and not finished (the partial indexes are defined by those times, not by
/// the state, so a claim or a release is a heap-only update on PostgreSQL). Every way a run
/// moves keeps its times in step with its state.
pub async fn every_transition_keeps_a_runs_times_in_step_with_its_state(store: Arc<dyn Store>) {
    let store = &*store;
    let (w, _, runs) = with_runs(store, 9).await;
    // Claimed before an instance (capacity 4) registers: more than it could take.
    let claimed = claim(store, &claim_req("node-a", T0)).await;
    assert_eq!(claimed.len(), 9);
    let e = executor(store, w.app.id, "host-1", T0).await;
    let fence = |i: usize| claimed[i].fence().unwrap();
    let reason = || "test".to_owned();
    let start = |i: usize| StartClaimed {
        fence: fence(i),
        executor_id: e.id,
        dispatched_at: T0,
        deadline_at: Some(T0 + MINUTE),
    };
    let failed = |at: i64| RunCompletion {
        state: RunState::Failed,
        output: None,
        error: Some("boom".into()),
        log: None,
        started_at: None,
        finished_at: at,
        reported_by: None,
    };
    in_tx!(store, |tx| {
        let started = ClaimedTransition::Started {
            executor_id: e.id,
            dispatched_at: T0,
            deadline_at: Some(T0 + MINUTE),
        };
        tx.transition_claimed(&fence(0), &started, T0)
            .await
            .unwrap();
        tx.start_claimed_runs(&[start(1)], T0).await.unwrap();
        tx.transition_claimed(&fence(2), &ClaimedTransition::Released, T0)
            .await
            .unwrap();
        let deferred = ClaimedTransition::Deferred { due_at: T0 + 1 };
        tx.transition_claimed(&fence(3), &deferred, T0)
            .await
            .unwrap();
        let skipped = ClaimedTransition::Skipped { reason: reason() };
        tx.transition_claimed(&fence(4), &skipped, T0)
            .await
            .unwrap();
        let cancelled = ClaimedTransition::Cancelled { reason: reason() };
        tx.transition_claimed(&fence(5), &cancelled, T0)
            .await
            .unwrap();
        // Sent, and its result came before its start was written.
        tx.record_dispatch_intent(&[(fence(6), e.id)], T0)
            .await
            .unwrap();
        tx.complete_run(runs[6].id, Some(w.app.id), &success(T0 + 2))
            .await
            .unwrap();
        tx.start_claimed_runs(&[start(6)], T0 + 3).await.unwrap();
        // Ended by the engine while claimed, with no start time.
        tx.complete_runs(None, &[(runs[7].id, failed(T0 + 2))])
            .await
            .unwrap();
        // Started, then finished.
        tx.complete_run(runs[0].id, Some(w.app.id), &success(T0 + 4))
            .await
            .unwrap();
    });

    let mut states = Vec::new();
    let mut tx = read(store).await;
    for run in &runs {
        let r = tx.find_run(run.id).await.unwrap().unwrap();
        let waiting = r.started_at.is_none() && r.finished_at.is_none();
        let running = r.started_at.is_some() && r.finished_at.is_none();
        assert_eq!(
            (waiting, running, r.finished_at.is_some()),
            (
                matches!(r.state, RunState::Pending | RunState::Claimed),
                r.state == RunState::Running,
                r.state.is_final()
            ),
            "run {} is {:?} with started_at {:?} and finished_at {:?}",
            r.id,
            r.state,
            r.started_at,
            r.finished_at
        );
        states.push(r.state);
    }
    drop(tx);
    assert_eq!(
        states,
        [
            RunState::Succeeded,
            RunState::Running,
            RunState::Pending,
            RunState::Pending,
            RunState::Skipped,
            RunState::Cancelled,
            RunState::Succeeded,
            RunState::Failed,
            RunState::Claimed,
        ]
    );

    // The claim finds the released and the deferred run; the watchdog the running one.
    let again = claim(store, &claim_req("node-b", T0 + 1)).await;
    let mut ids: Vec<RunId> = again.iter().map(|r| r.id).collect();
    ids.sort();
    assert_eq!(ids, vec![runs[2].id, runs[3].id]);
    let overdue = in_tx!(store, |tx| tx
        .running_runs_past_deadline(T0 + 2 * MINUTE, 10)
        .await
        .unwrap());
    assert_eq!(
        overdue.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![runs[1].id]
    );
}

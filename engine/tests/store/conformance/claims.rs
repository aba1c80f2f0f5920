use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use mthpt_engine::app::{ExecutorId, ExecutorState};
use mthpt_engine::quota::TenantQuotas;
use mthpt_engine::run::{Run, RunFilter, RunId, RunState};
use mthpt_engine::store::{Backend, ClaimRequest, StartClaimed, Store, StoreError};

use crate::in_tx;
use crate::support::fixtures::*;

const RUNS: i64 = 10_000;

/// PostgreSQL: 4 concurrent claimers; SQLite: 2. Every due run is claimed exactly once.
pub async fn concurrent_claimers_claim_every_run_exactly_once(store: Arc<dyn Store>) {
    let store = &*store;
    let claimers = match store.backend() {
        Backend::Postgres => 4,
        Backend::Sqlite => 2,
    };
    let w = world(store, "acme").await;
    let (task, _) = create_task(store, &w, &manual(w.app.id, "bulk")).await;
    let runs: Vec<_> = (0..RUNS)
        .map(|i| occurrence(&w, &task, T0 - RUNS + i))
        .collect();
    for chunk in runs.chunks(2_000) {
        let inserted = in_tx!(store, |tx| tx.insert_runs(chunk, T0).await.unwrap());
        assert_eq!(inserted.len(), chunk.len());
    }

    let started = Instant::now();
    let per_claimer: Vec<Vec<(RunId, i64, String)>> = join_all((0..claimers).map(|c| async move {
        let req = ClaimRequest {
            node: format!("node-{c}"),
            groups: vec!["default".into()],
            now: T0,
            horizon_ms: 0,
            lease_ms: 10 * MINUTE,
            limit: 64,
        };
        let mut mine = Vec::new();
        loop {
            let mut tx = store.begin().await.unwrap();
            let got = tx.claim_due_runs(&req).await.unwrap();
            tx.commit().await.unwrap();
            if got.is_empty() {
                break;
            }
            mine.extend(
                got.into_iter()
                    .map(|r| (r.id, r.fence, r.claim_owner.unwrap_or_default())),
            );
        }
        mine
    }))
    .await;
    let elapsed = started.elapsed();

    let total: usize = per_claimer.iter().map(Vec::len).sum();
    let distinct: HashSet<RunId> = per_claimer.iter().flatten().map(|(id, _, _)| *id).collect();
    let twice = total - distinct.len();
    let left = RUNS as usize - distinct.len();
    let counts: Vec<usize> = per_claimer.iter().map(Vec::len).collect();
    eprintln!(
        "[{}] {claimers} concurrent claimers over {RUNS} due runs: {} claimed, {} distinct, {twice} claimed twice, \
         {left} left unclaimed; per claimer {counts:?}; {} ms ({:.0} claims/s)",
        store.backend(),
        total,
        distinct.len(),
        elapsed.as_millis(),
        total as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(twice, 0, "no run may be claimed twice");
    assert_eq!(left, 0, "no run may be left");

    // The database agrees: every run claimed once (fence 1) by the claimer that reported it.
    let owner: HashMap<RunId, String> = per_claimer
        .into_iter()
        .flatten()
        .map(|(id, fence, node)| {
            assert_eq!(fence, 1);
            (id, node)
        })
        .collect();
    let mut tx = read(store).await;
    let mut seen = 0;
    let mut before = None;
    loop {
        let page = tx
            .list_runs(
                w.tenant.id,
                &RunFilter {
                    before_id: before,
                    limit: Some(1000),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        for run in &page {
            assert_eq!(run.state, RunState::Claimed, "run {}", run.id);
            assert_eq!(run.fence, 1, "run {} claimed more than once", run.id);
            assert_eq!(run.claim_owner.as_ref(), owner.get(&run.id));
            seen += 1;
        }
    }
    assert_eq!(seen, RUNS);
}

fn fair_req(node: &str, now: i64, limit: i64) -> ClaimRequest {
    ClaimRequest {
        node: node.into(),
        groups: vec!["default".into()],
        now,
        horizon_ms: 0,
        lease_ms: 10 * MINUTE,
        limit,
    }
}

async fn claim_now(store: &dyn Store, req: &ClaimRequest) -> Vec<Run> {
    in_tx!(store, |tx| tx.claim_due_runs(req).await.unwrap())
}

/// `n` runs of one manual task of `w`'s app, due one millisecond apart from `first_due`.
async fn due_runs(store: &dyn Store, w: &World, name: &str, n: i64, first_due: i64) -> Vec<Run> {
    let (task, _) = create_task(store, w, &manual(w.app.id, name)).await;
    let runs: Vec<_> = (0..n)
        .map(|i| occurrence(w, &task, first_due + i))
        .collect();
    let mut inserted = Vec::new();
    for chunk in runs.chunks(2_000) {
        inserted.extend(in_tx!(store, |tx| tx.insert_runs(chunk, T0).await.unwrap()));
    }
    assert_eq!(inserted.len() as i64, n);
    inserted.sort_by_key(|r| r.due_at);
    inserted
}

/// Tenant `noisy` has 10,000 runs due before tenant `quiet`'s one: quiet's is in the very next
/// claim all the same, whether noisy's app has no instance (its capacity unknown) or a full one.
pub async fn another_tenants_backlog_does_not_hold_back_a_due_run(store: Arc<dyn Store>) {
    let store = &*store;
    let noisy = world(store, "noisy").await;
    let quiet = world(store, "quiet").await;
    due_runs(store, &noisy, "flood", RUNS, T0 - RUNS - SECOND).await;
    let mine = due_runs(store, &quiet, "tick", 1, T0).await;

    let first = claim_now(store, &fair_req("node-1", T0, 64)).await;
    assert_eq!(first.len(), 64);
    assert!(
        first.iter().any(|r| r.id == mine[0].id),
        "the quiet tenant's due run is in the first claim"
    );
    assert_eq!(
        first
            .iter()
            .filter(|r| r.tenant_id == noisy.tenant.id)
            .count(),
        63,
        "the rest of the claim goes to the backlog"
    );

    // The same with noisy's executors full: its backlog is not even read.
    let e = executor(store, noisy.app.id, "host-1", T0).await;
    let later = due_runs(store, &quiet, "tock", 1, T0 + SECOND).await;
    let second = claim_now(store, &fair_req("node-1", T0 + SECOND, 64)).await;
    assert_eq!(
        second.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![later[0].id],
        "noisy's 63 claimed runs with a live lease fill its capacity (4)"
    );
    assert!(e.capacity < 63);
}

/// An app whose live instances are full gets nothing; as its runs finish, the freed capacity is
/// claimed in due order; draining the last instance stops claims again; an expired lease makes
/// a claimed run claimable again, with a new fence.
pub async fn runs_of_an_app_at_capacity_wait_and_freed_capacity_is_claimed_in_due_order(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let w = world(store, "acme").await;
    let runs = due_runs(store, &w, "job", 10, T0 - MINUTE).await;
    let e = executor(store, w.app.id, "host-1", T0).await;
    assert_eq!(e.capacity, 4);

    let first = claim_now(store, &fair_req("node-1", T0, 64)).await;
    let ids = |rs: &[Run]| rs.iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(ids(&first), ids(&runs[..4]), "the capacity, in due order");
    assert!(
        claim_now(store, &fair_req("node-2", T0 + 1, 64))
            .await
            .is_empty(),
        "claimed and in flight: no room"
    );

    // Two start, one of them finishes: one slot frees, and the next run in due order fills it.
    assert_eq!(start_all(store, &first[..2], e.id, T0 + 2).await, 2);
    assert!(
        claim_now(store, &fair_req("node-2", T0 + 3, 64))
            .await
            .is_empty(),
        "two running and two claimed fill the capacity"
    );
    succeed(store, first[0].id, T0 + 2, T0 + 4).await;
    let freed = claim_now(store, &fair_req("node-2", T0 + 5, 64)).await;
    assert_eq!(ids(&freed), vec![runs[4].id]);

    // A claim whose lease ended is in flight no more: the run is claimed again, fenced anew.
    let after_lease = T0 + 11 * MINUTE;
    let reclaimed = claim_now(store, &fair_req("node-3", after_lease, 64)).await;
    assert_eq!(
        ids(&reclaimed),
        vec![first[2].id, first[3].id, runs[4].id],
        "the expired claims come back first, in due order, up to the free capacity (3)"
    );
    assert!(reclaimed.iter().all(|r| r.fence == 2));

    // The last instance drains: no capacity at all, nothing is claimed, even after the leases.
    in_tx!(store, |tx| tx
        .set_executor_state(w.app.id, "host-1", ExecutorState::Draining, after_lease)
        .await
        .unwrap());
    let much_later = after_lease + 11 * MINUTE;
    assert!(
        claim_now(store, &fair_req("node-3", much_later, 64))
            .await
            .is_empty()
    );
}

/// Two tenants with plenty due, weights 3 and 1: a claim of 40 takes 30 and 10.
pub async fn tenant_weights_give_proportional_shares_of_a_claim(store: Arc<dyn Store>) {
    let store = &*store;
    let heavy = world(store, "heavy").await;
    let light = world(store, "light").await;
    in_tx!(store, |tx| tx
        .set_tenant_weight(heavy.tenant.id, 3)
        .await
        .unwrap());
    let mut tx = store.begin().await.unwrap();
    assert!(matches!(
        tx.set_tenant_weight(light.tenant.id, 0).await,
        Err(StoreError::InvalidState(_))
    ));
    drop(tx);
    // The light tenant's runs are all older: due order alone would give it everything.
    due_runs(store, &light, "old", 1_000, T0 - 10 * MINUTE).await;
    due_runs(store, &heavy, "new", 1_000, T0 - MINUTE).await;

    let got = claim_now(store, &fair_req("node-1", T0, 40)).await;
    let of = |w: &World| got.iter().filter(|r| r.tenant_id == w.tenant.id).count();
    assert_eq!((of(&heavy), of(&light)), (30, 10));
    // Due order holds within each tenant.
    for w in [&heavy, &light] {
        let dues: Vec<i64> = got
            .iter()
            .filter(|r| r.tenant_id == w.tenant.id)
            .map(|r| r.due_at)
            .collect();
        assert!(dues.windows(2).all(|p| p[0] < p[1]));
    }
}

fn quotas(concurrent: Option<i64>, rate: Option<i64>, burst: Option<i64>) -> TenantQuotas {
    TenantQuotas {
        max_concurrent_runs: concurrent,
        max_fires_per_second: rate,
        fire_burst: burst,
        ..TenantQuotas::default()
    }
}

/// A tenant with `max_concurrent_runs` 3 and 20 runs due (its app's capacity unknown): a claim
/// takes 3, and nothing more while they are claimed or running; one finishing frees one. The
/// other tenant's due run is claimed all along.
pub async fn a_tenant_at_its_concurrency_quota_gets_no_share_until_a_run_finishes(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let busy = world(store, "busy").await;
    let other = world(store, "other").await;
    in_tx!(store, |tx| tx
        .set_tenant_quotas(busy.tenant.id, &quotas(Some(3), None, None), T0)
        .await
        .unwrap());
    let runs = due_runs(store, &busy, "job", 20, T0 - MINUTE).await;
    let ids = |rs: &[Run]| rs.iter().map(|r| r.id).collect::<Vec<_>>();

    let first = claim_now(store, &fair_req("node-1", T0, 64)).await;
    assert_eq!(ids(&first), ids(&runs[..3]), "the quota, in due order");
    let mine = due_runs(store, &other, "tick", 1, T0).await;
    let second = claim_now(store, &fair_req("node-2", T0 + 1, 64)).await;
    assert_eq!(
        ids(&second),
        vec![mine[0].id],
        "three claimed in flight fill busy's quota; the other tenant is not held back"
    );

    // Two start (their claims count as running now), one finishes: one more may be claimed.
    let e = executor(store, busy.app.id, "host-1", T0).await;
    assert_eq!(start_all(store, &first[..2], e.id, T0 + 2).await, 2);
    assert!(
        claim_now(store, &fair_req("node-2", T0 + 3, 64))
            .await
            .is_empty(),
        "two running and one claimed: at the quota"
    );
    succeed(store, first[0].id, T0 + 2, T0 + 4).await;
    let freed = claim_now(store, &fair_req("node-2", T0 + 5, 64)).await;
    assert_eq!(ids(&freed), vec![runs[3].id]);

    // Lifting the quota lets the app's capacity (4) decide again: 2 running + 1 claimed + 1.
    in_tx!(store, |tx| tx
        .set_tenant_quotas(busy.tenant.id, &TenantQuotas::default(), T0 + 6)
        .await
        .unwrap());
    let lifted = claim_now(store, &fair_req("node-2", T0 + 7, 64)).await;
    assert_eq!(ids(&lifted), vec![runs[4].id]);
}

/// `max_fires_per_second` 5 with a burst of 10: a claim takes the 10 tokens, the next none;
/// 400 ms later 2 more; a long quiet spell refills to the burst only. The bucket is the
/// tenant's row's: claims of any node share it.
pub async fn the_fire_rate_quota_limits_claims_to_the_tokens_in_the_tenants_bucket(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let rated = world(store, "rated").await;
    let free = world(store, "free").await;
    in_tx!(store, |tx| tx
        .set_tenant_quotas(rated.tenant.id, &quotas(None, Some(5), Some(10)), T0)
        .await
        .unwrap());
    due_runs(store, &rated, "job", 100, T0 - MINUTE).await;
    due_runs(store, &free, "job", 100, T0 - MINUTE).await;
    let of = |rs: &[Run], w: &World| rs.iter().filter(|r| r.tenant_id == w.tenant.id).count();

    let first = claim_now(store, &fair_req("node-1", T0, 40)).await;
    assert_eq!(
        (of(&first, &rated), of(&first, &free)),
        (10, 30),
        "the burst"
    );
    let second = claim_now(store, &fair_req("node-2", T0 + 1, 40)).await;
    assert_eq!(
        (of(&second, &rated), of(&second, &free)),
        (0, 40),
        "an empty bucket"
    );
    let third = claim_now(store, &fair_req("node-1", T0 + 400, 40)).await;
    assert_eq!(of(&third, &rated), 2, "5 per second for 0.4 s");
    let fourth = claim_now(store, &fair_req("node-2", T0 + 10 * MINUTE, 40)).await;
    assert_eq!(of(&fourth, &rated), 10, "refilled up to the burst only");

    // Setting the quotas again starts from a full bucket.
    in_tx!(store, |tx| tx
        .set_tenant_quotas(
            rated.tenant.id,
            &quotas(None, Some(5), Some(3)),
            T0 + 10 * MINUTE
        )
        .await
        .unwrap());
    let fifth = claim_now(store, &fair_req("node-1", T0 + 10 * MINUTE + 1, 40)).await;
    assert_eq!(of(&fifth, &rated), 3);
}

/// Records that `executor` started `runs` (claimed) at `at`; returns how many moved.
async fn start_all(store: &dyn Store, runs: &[Run], executor: ExecutorId, at: i64) -> usize {
    let items: Vec<StartClaimed> = runs
        .iter()
        .map(|r| StartClaimed {
            fence: r.fence().unwrap(),
            executor_id: executor,
            dispatched_at: at,
            deadline_at: None,
        })
        .collect();
    in_tx!(store, |tx| tx.start_claimed_runs(&items, at).await.unwrap()).len()
}

/// Finishes `run` as succeeded: started at `started`, finished at `at`.
async fn succeed(store: &dyn Store, run: RunId, started: i64, at: i64) {
    let success = done(RunState::Succeeded, started, at);
    in_tx!(store, |tx| tx
        .complete_run(run, None, &success)
        .await
        .unwrap());
}

/// A claim in two halves: the runs are locked and returned as they are, then claimed with the
/// instance each is to be sent to recorded in the same write (its dispatch intent); a run
/// given none keeps the instance it had. The database holds what the claim returns.
pub async fn a_claim_records_the_dispatch_intent_it_is_given_in_the_same_write(
    store: Arc<dyn Store>,
) {
    let store = &*store;
    let w = world(store, "acme").await;
    let runs = due_runs(store, &w, "intents", 3, T0 - 10).await;
    let first = executor(store, w.app.id, "first", T0).await;
    let earlier = executor(store, w.app.id, "earlier", T0).await;
    // The third run was sent before (claimed, its intent recorded, released): it carries
    // that instance.
    let claimed_before = claim_now(store, &fair_req("node-a", T0, 3)).await;
    assert_eq!(claimed_before.len(), 3);
    let third = claimed_before[2].fence().expect("claimed");
    in_tx!(store, |tx| {
        let recorded = tx
            .record_dispatch_intent(&[(third.clone(), earlier.id)], T0)
            .await
            .unwrap();
        assert_eq!(recorded, vec![third.run_id]);
        tx.release_claimed_runs(
            &claimed_before
                .iter()
                .filter_map(Run::fence)
                .collect::<Vec<_>>(),
            T0,
        )
        .await
        .unwrap()
    });

    let req = fair_req("node-b", T0 + 1, 10);
    let mut tx = store.begin().await.unwrap();
    let locked = tx.lock_due_runs(&req).await.unwrap();
    assert_eq!(
        locked.iter().map(|r| r.id).collect::<Vec<_>>(),
        runs.iter().map(|r| r.id).collect::<Vec<_>>(),
        "in due order"
    );
    for r in &locked {
        assert_eq!(r.state, RunState::Pending, "locked, not claimed yet");
        assert_eq!(r.claim_owner, None);
        assert_eq!(r.fence, 1, "not claimed again yet");
    }
    let intents: HashMap<RunId, ExecutorId> = [(runs[0].id, first.id)].into_iter().collect();
    let claimed = tx.claim_locked_runs(&req, locked, &intents).await.unwrap();
    tx.commit().await.unwrap();

    assert_eq!(claimed.len(), 3);
    let mut tx = read(store).await;
    for (r, expected_executor) in claimed.iter().zip([Some(first.id), None, Some(earlier.id)]) {
        assert_eq!(r.state, RunState::Claimed);
        assert_eq!(r.claim_owner.as_deref(), Some("node-b"));
        assert_eq!(r.fence, 2, "a new fencing token");
        assert_eq!(r.lease_until, Some(T0 + 1 + 10 * MINUTE));
        assert_eq!(r.claimed_at, Some(T0 + 1));
        assert_eq!(r.executor_id, expected_executor, "run {}", r.id);
        let stored = tx.get_run(w.tenant.id, r.id).await.unwrap();
        assert_eq!(&stored, r, "the database holds what the claim returned");
    }
}

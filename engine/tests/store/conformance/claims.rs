use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use mthpt_engine::run::{RunFilter, RunId, RunState};
use mthpt_engine::store::{Backend, ClaimRequest, Store};

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

//! How a claim shares a node's capacity out (docs/engine.md, "Claim order and capacity"): the
//! apps with runs waiting in the node's groups are read first with their executors' free
//! capacity ([`ClaimApp`]); an app whose live executors are full gets no window and its runs
//! are not read at all, the others a window of at most their free capacity
//! ([`claim_windows`]); the apps' runs then take turns, each tenant in proportion to its
//! weight, due order (then priority) holding within an app.
//!
//! This file holds the part both backends share, in plain Rust. The statements are
//! [`Runs::claim_due_runs`](super::Runs::claim_due_runs) in `pg/runs.rs` (which ranks the turns
//! in SQL) and `sqlite/runs.rs` (which reads each window and ranks them here, [`pick_claims`]).

use crate::app::AppId;
use crate::tenant::TenantId;

/// An app of a claiming node's groups as a claim sees it: whose tenant it is and how much its
/// executors can take (read in one small statement at the start of every claim).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ClaimApp {
    /// The group its runs wait in (an app whose runs wait in two of the node's groups, as
    /// while its tenant moves, is read once per group).
    pub node_group: String,
    pub app_id: AppId,
    pub tenant_id: TenantId,
    /// The tenant's claim weight (at least 1).
    pub weight: i32,
    /// Executor instances up or draining. None: the app's capacity is unknown (no instance
    /// registered, or all lost), and its runs are claimed as before capacity was known — the
    /// dispatch finds no executor and releases them, and `not_started` is raised after the
    /// task's start timeout.
    pub live: i64,
    /// The capacity of the instances that are up (a draining one takes nothing new).
    pub capacity: i64,
    /// Runs of the app started and not finished.
    pub running: i64,
}

/// How much of one app's due runs a claim reads, and how its runs take turns with the other
/// apps' (see [`claim_windows`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimWindow {
    pub node_group: String,
    pub app_id: AppId,
    /// The app's first this many claimable runs in due order, claimed ones included: those
    /// with a live lease are in flight and count against the window; the others may be
    /// claimed. Never more than the app's free capacity (when known).
    pub window: i64,
    /// Whether claimed runs with a live lease fill the window (the app's capacity is known);
    /// when it is not, the window counts claimable runs only, as claims did before capacity.
    pub in_flight_counts: bool,
    /// The app's n-th claimable run takes its turn at `n * step`: `step` is the number of the
    /// tenant's apps over the tenant's weight, so each tenant gets a share of a claim in
    /// proportion to its weight, split evenly among its apps.
    pub step: f64,
}

/// The windows of a claim over `apps` for a claim of at most `limit` runs. Apps whose
/// executors are known and have no free capacity get none: their runs are not read at all.
pub fn claim_windows(apps: &[ClaimApp], limit: i64) -> Vec<ClaimWindow> {
    let limit = limit.max(1);
    let open: Vec<(&ClaimApp, i64, bool)> = apps
        .iter()
        .filter_map(|a| {
            if a.live == 0 {
                return Some((a, limit, false));
            }
            // In flight beyond the window cannot be seen, so the window stays small: twice
            // the claim, at most the free capacity.
            let free = a.capacity.saturating_sub(a.running);
            (free > 0).then_some((a, free.min(limit.saturating_mul(2)), true))
        })
        .collect();
    let mut per_tenant: std::collections::HashMap<TenantId, usize> =
        std::collections::HashMap::new();
    for (a, _, _) in &open {
        *per_tenant.entry(a.tenant_id).or_default() += 1;
    }
    open.into_iter()
        .map(|(a, window, in_flight_counts)| ClaimWindow {
            node_group: a.node_group.clone(),
            app_id: a.app_id,
            window,
            in_flight_counts,
            step: per_tenant.get(&a.tenant_id).copied().unwrap_or(1) as f64
                / f64::from(a.weight.max(1)),
        })
        .collect()
}

/// A run a claim read (SQLite, which ranks in Rust what PostgreSQL ranks in SQL).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct ClaimCandidate {
    pub id: i64,
    pub due_at: i64,
    pub priority: i32,
    pub state: String,
    pub lease_until: Option<i64>,
}

/// The runs to claim of each window's candidates (read in due order): the claimable ones
/// (pending, or claimed with a lease ended by `now`), the n-th of an app at turn `n * step`,
/// the earliest turns first (then due order), at most `limit`.
pub(crate) fn pick_claims(
    fronts: &[(&ClaimWindow, Vec<ClaimCandidate>)],
    now: i64,
    limit: i64,
) -> Vec<i64> {
    let mut turns: Vec<(f64, i64, i32, i64)> = Vec::new();
    for (w, candidates) in fronts {
        let claimable = candidates.iter().filter(|c| {
            c.state == "pending"
                || (c.state == "claimed" && c.lease_until.is_some_and(|l| l <= now))
        });
        for (n, c) in claimable.enumerate() {
            turns.push(((n + 1) as f64 * w.step, c.due_at, c.priority, c.id));
        }
    }
    turns.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then(a.1.cmp(&b.1))
            .then(b.2.cmp(&a.2))
            .then(a.3.cmp(&b.3))
    });
    turns
        .into_iter()
        .take(usize::try_from(limit).unwrap_or(0))
        .map(|t| t.3)
        .collect()
}

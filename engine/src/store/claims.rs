//! How a claim shares a node's capacity out (docs/engine.md, "Claim order and capacity"): the
//! apps with runs waiting in the node's groups are read first with their executors' free
//! capacity ([`ClaimApp`]); an app whose live executors are full gets no window and its runs
//! are not read at all, the others a window of at most their free capacity
//! ([`claim_windows`]); the apps' runs then take turns, each tenant in proportion to its
//! weight, due order (then priority) holding within an app.
//!
//! This file holds the part both backends share, in plain Rust. The statements are
//! [`Runs::lock_due_runs`](super::Runs::lock_due_runs) in `pg/runs.rs` (which ranks the turns
//! in SQL) and `sqlite/runs.rs` (which reads each window and ranks them here, [`pick_claims`]).

use std::collections::HashMap;

use crate::app::AppId;
use crate::quota::{FireBucket, TenantQuotas};
use crate::run::Run;
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
    /// The tenant's quotas (a claim applies the concurrency and rate quotas; see
    /// [`crate::quota`]).
    #[sqlx(flatten)]
    pub quotas: TenantQuotas,
    /// Runs of the tenant started and not finished (read only when it has a concurrency quota).
    pub tenant_running: Option<i64>,
}

/// A rate-limited tenant's bucket of fires as a claim read it, its row locked (a row another
/// claim holds is skipped: that tenant gets no share of this claim).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct StoredBucket {
    pub tenant_id: TenantId,
    pub fire_tokens: Option<f64>,
    pub fire_tokens_at: Option<i64>,
}

/// The tenants of `apps` with a fire rate quota, each once: the rows a claim locks.
pub fn rated_tenants(apps: &[ClaimApp]) -> Vec<TenantId> {
    let mut out: Vec<TenantId> = apps
        .iter()
        .filter(|a| a.quotas.max_fires_per_second.is_some())
        .map(|a| a.tenant_id)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The buckets of the rate-limited tenants whose rows the claim locked, at `now`.
pub fn fire_buckets(
    apps: &[ClaimApp],
    stored: &[StoredBucket],
    now: i64,
) -> HashMap<TenantId, FireBucket> {
    stored
        .iter()
        .filter_map(|b| {
            let app = apps.iter().find(|a| a.tenant_id == b.tenant_id)?;
            Some((
                b.tenant_id,
                FireBucket::stored(&app.quotas, b.fire_tokens, b.fire_tokens_at, now),
            ))
        })
        .collect()
}

/// Takes a token from each tenant's bucket per run of it the claim took, and returns the
/// buckets to write back (tenant, tokens, at).
pub fn charge_buckets(
    apps: &[ClaimApp],
    buckets: &mut HashMap<TenantId, FireBucket>,
    claimed: &[Run],
    now: i64,
) -> Vec<(TenantId, f64, i64)> {
    let mut out = Vec::new();
    for (tenant, bucket) in buckets.iter_mut() {
        let taken = claimed.iter().filter(|r| r.tenant_id == *tenant).count();
        if taken == 0 {
            continue;
        }
        let Some(app) = apps.iter().find(|a| a.tenant_id == *tenant) else {
            continue;
        };
        bucket.take(&app.quotas, now, i64::try_from(taken).unwrap_or(i64::MAX));
        let (tokens, at) = bucket.state();
        out.push((*tenant, tokens, at));
    }
    out.sort_by_key(|b| b.0);
    out
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
    pub tenant_id: TenantId,
    /// The tenant's `max_concurrent_runs` less its runs started and not finished: how many
    /// more it may hold, before its claimed runs in flight (counted by the claim statement)
    /// are taken off. `None`: no concurrency quota.
    pub concurrency_room: Option<i64>,
    /// The whole fires in the tenant's bucket. `None`: no rate quota.
    pub rate_room: Option<i64>,
}

/// The windows of a claim over `apps` for a claim of at most `limit` runs, given the buckets of
/// the rate-limited tenants whose rows the claim holds. Apps whose executors are known and
/// have no free capacity get none, and neither do the apps of a tenant at its concurrency
/// quota or with no whole token in its bucket (or whose bucket another claim holds): their
/// runs are not read at all.
pub fn claim_windows(
    apps: &[ClaimApp],
    limit: i64,
    buckets: &HashMap<TenantId, FireBucket>,
    now: i64,
) -> Vec<ClaimWindow> {
    let limit = limit.max(1);
    let mut windows: Vec<(ClaimWindow, i32)> = apps
        .iter()
        .filter_map(|a| {
            let concurrency_room = a
                .quotas
                .max_concurrent_runs
                .map(|max| max.saturating_sub(a.tenant_running.unwrap_or(0)).max(0));
            let rate_room = a.quotas.max_fires_per_second.map(|_| {
                buckets.get(&a.tenant_id).map_or(0, |b| {
                    let held = b.available(&a.quotas, now);
                    if held.is_finite() {
                        held.floor().max(0.0) as i64
                    } else {
                        limit
                    }
                })
            });
            if concurrency_room == Some(0) || rate_room == Some(0) {
                return None;
            }
            let (window, in_flight_counts) = if a.live == 0 {
                (limit, false)
            } else {
                // In flight beyond the window cannot be seen, so the window stays small:
                // twice the claim, at most the free capacity.
                let free = a.capacity.saturating_sub(a.running);
                if free <= 0 {
                    return None;
                }
                (free.min(limit.saturating_mul(2)), true)
            };
            // A concurrency quota counts the tenant's claimed runs in flight: within a window
            // no wider than what the quota leaves.
            let (window, in_flight_counts) = match concurrency_room {
                Some(room) => (window.min(room), true),
                None => (window, in_flight_counts),
            };
            let w = ClaimWindow {
                node_group: a.node_group.clone(),
                app_id: a.app_id,
                window,
                in_flight_counts,
                step: 1.0,
                tenant_id: a.tenant_id,
                concurrency_room,
                rate_room,
            };
            Some((w, a.weight))
        })
        .collect();
    let mut per_tenant: HashMap<TenantId, usize> = HashMap::new();
    for (w, _) in &windows {
        *per_tenant.entry(w.tenant_id).or_default() += 1;
    }
    for (w, weight) in &mut windows {
        w.step =
            per_tenant.get(&w.tenant_id).copied().unwrap_or(1) as f64 / f64::from((*weight).max(1));
    }
    windows.into_iter().map(|(w, _)| w).collect()
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
/// the earliest turns first (then due order), at most `limit`, and no more of a tenant than
/// its quotas leave ([`tenant_rooms`]).
pub(crate) fn pick_claims(
    fronts: &[(&ClaimWindow, Vec<ClaimCandidate>)],
    now: i64,
    limit: i64,
) -> Vec<i64> {
    let mut rooms = tenant_rooms(fronts.iter().map(|(w, candidates)| {
        let in_flight = candidates
            .iter()
            .filter(|c| c.state == "claimed" && c.lease_until.is_some_and(|l| l > now))
            .count();
        (*w, i64::try_from(in_flight).unwrap_or(i64::MAX))
    }));
    let mut turns: Vec<(f64, i64, i32, i64, TenantId)> = Vec::new();
    for (w, candidates) in fronts {
        let claimable = candidates.iter().filter(|c| {
            c.state == "pending"
                || (c.state == "claimed" && c.lease_until.is_some_and(|l| l <= now))
        });
        for (n, c) in claimable.enumerate() {
            turns.push((
                (n + 1) as f64 * w.step,
                c.due_at,
                c.priority,
                c.id,
                w.tenant_id,
            ));
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
        .filter(|t| match rooms.get_mut(&t.4) {
            Some(room) if *room <= 0 => false,
            Some(room) => {
                *room -= 1;
                true
            }
            None => true,
        })
        .take(usize::try_from(limit).unwrap_or(0))
        .map(|t| t.3)
        .collect()
}

/// How many runs each tenant with a quota may take in one claim: the fewer of the whole
/// tokens in its bucket and its concurrency room less its claimed runs in flight (`windows`
/// with the claimed runs with a live lease counted in each). Tenants without a quota are
/// absent. The PostgreSQL statement computes the same in SQL.
pub(crate) fn tenant_rooms<'a>(
    windows: impl Iterator<Item = (&'a ClaimWindow, i64)>,
) -> HashMap<TenantId, i64> {
    let mut by_tenant: HashMap<TenantId, (Option<i64>, Option<i64>, i64)> = HashMap::new();
    for (w, in_flight) in windows {
        let e = by_tenant.entry(w.tenant_id).or_insert((None, None, 0));
        e.0 = min_some(e.0, w.concurrency_room);
        e.1 = min_some(e.1, w.rate_room);
        e.2 += in_flight;
    }
    by_tenant
        .into_iter()
        .filter_map(|(tenant, (concurrency, rate, in_flight))| {
            let by_concurrency = concurrency.map(|c| c - in_flight);
            min_some(by_concurrency, rate).map(|room| (tenant, room))
        })
        .collect()
}

fn min_some(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

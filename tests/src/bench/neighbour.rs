//! `noisy-neighbour`: one tenant's backlog beside quiet tenants in the same node group.
//!
//! Tenant `noisy` has one wrapper instance of small capacity ([`NOISY_CAPACITY`]) whose runs
//! sleep [`NOISY_RUN_MS`], a backlog of `--backlog` runs already due, and fixed-rate tasks
//! offering [`NOISY_OVERLOAD`] times what its instance can take (`--noisy-overload`). Tenants
//! `quiet1`..`quiet4` each have their own instance and offer `--tasks` no-op runs a second
//! (default 200). The report gives each quiet tenant's lateness, the noisy tenant's completed
//! rate, the time a claim takes beside the backlog (timed here, in a transaction rolled back)
//! and PostgreSQL's CPU per run.
//!
//! It runs on PostgreSQL or on a SQLite file (`--backend sqlite`, one node: `mthpt engine` on the
//! file, the store `mthpt standalone` uses); PostgreSQL's CPU and WAL are `null` on SQLite.

use std::time::{Duration, Instant};

use mthpt_engine::run::{NewRun, TriggerKind};
use mthpt_engine::schedule::ScheduleSpec;
use mthpt_engine::store::{ClaimRequest, Store};
use mthpt_engine::task::TaskDefinition;
use serde::Serialize;

use super::cost::{CostPerRun, CostProbe};
use super::database::{self, BenchDb, Pool, TaskPlan};
use super::figures::Lateness;
use super::nodes::NodeProcess;
use super::wrappers::{BenchWrappers, NOOP, SLEEP};
use super::{Backend, BenchConfig, now_ms, progress, round1, sleep_until_ms};
use crate::Tenancy;

/// Runs the noisy tenant's instance takes at once.
pub const NOISY_CAPACITY: u32 = 2;
/// How long after the window its quiet runs may still be dispatched, ms (then they count as
/// not dispatched).
const QUIET_WAIT_MS: i64 = 30_000;

/// How long the quiet tenants' first runs may take to be sent once the instances registered.
const FLOWING_WAIT: Duration = Duration::from_secs(60);

/// How long each noisy run sleeps, ms: the instance completes about
/// `NOISY_CAPACITY * 1000 / NOISY_RUN_MS` runs a second.
pub const NOISY_RUN_MS: i64 = 100;
/// The noisy tenant's tasks offer this many times what its instance completes.
pub const NOISY_OVERLOAD: u64 = 20;
/// Quiet tenants.
pub const QUIET_TENANTS: usize = 4;
/// Claims timed per measurement.
const CLAIM_SAMPLES: usize = 20;

/// One quiet tenant's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuietTenant {
    pub tenant: String,
    /// Occurrences of its tasks scheduled in the window.
    pub scheduled: u64,
    /// Of those, not dispatched by the end of the drain.
    pub not_dispatched: u64,
    /// Dispatch time minus scheduled time.
    pub lateness_ms: Lateness,
}

/// What `noisy-neighbour` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NeighbourReport {
    pub scenario: String,
    /// `postgres` or `sqlite`.
    pub backend: String,
    pub nodes: usize,
    pub duration_s: f64,
    /// Runs of the noisy tenant waiting when the window began (the `--backlog`, less what the
    /// warm-up took).
    pub noisy_backlog: u64,
    /// What the noisy tenant's instance completes at most, runs/s, and what its tasks offer.
    pub noisy_capacity_per_sec: f64,
    pub noisy_offered_per_sec: f64,
    /// Noisy runs that succeeded in the window, per second.
    pub noisy_completed_per_sec: f64,
    pub quiet: Vec<QuietTenant>,
    /// One claim transaction's time (apps, windows, turns; rolled back) beside the backlog, ms.
    pub claim_ms_p50: f64,
    pub claim_ms_max: f64,
    /// The same right after the window, with the noisy tenant's waiting runs deleted (its
    /// instance still full): the claim's cost without the backlog, to set beside the above.
    pub claim_ms_p50_without_backlog: f64,
    /// Runs completed in the window (all tenants), and what they cost PostgreSQL and the WAL
    /// (`null` on SQLite; PostgreSQL's CPU also when its processes are not visible here).
    pub runs_completed: u64,
    pub pg_cpu_us_per_run: Option<f64>,
    pub wal_bytes_per_run: Option<f64>,
}

fn fixed_rate(
    prefix: &str,
    count: usize,
    handler: &str,
    params: serde_json::Value,
    every_ms: i64,
    now: i64,
) -> Vec<TaskPlan> {
    let n = i64::try_from(count.max(1)).unwrap_or(i64::MAX);
    (0..count)
        .map(|k| {
            let k64 = i64::try_from(k).unwrap_or(0);
            TaskPlan {
                name: format!("{prefix}{k:06}"),
                handler: handler.to_owned(),
                params: params.clone(),
                schedule: ScheduleSpec::FixedRate {
                    every_ms,
                    anchor_at: Some(now + k64 * every_ms / n),
                },
                timeout_ms: None,
            }
        })
        .collect()
}

/// Writes `count` runs of one manual task of `t`, all due a minute ago.
async fn backlog(store: &dyn Store, t: &Tenancy, count: u64) -> anyhow::Result<()> {
    if count == 0 {
        return Ok(());
    }
    let mut def = TaskDefinition::new(t.app.id, "backlog", SLEEP, ScheduleSpec::Manual);
    def.params = serde_json::json!({ "ms": NOISY_RUN_MS });
    let task = crate::create(store, t, &def).await?;
    let now = now_ms();
    let mut written = 0u64;
    while written < count {
        let n = (count - written).min(2_000);
        let runs: Vec<NewRun> = (0..n)
            .map(|i| {
                let at = now - 60_000 + i64::try_from(written + i).unwrap_or(0) % 60_000;
                let mut r =
                    NewRun::occurrence(&task, &t.tenant.node_group, at, TriggerKind::Manual);
                // Distinct occurrences: the key is (task, scheduled time, attempt, shard).
                r.scheduled_at = now - 1_000_000_000 + i64::try_from(written + i).unwrap_or(0);
                r
            })
            .collect();
        let mut tx = store.begin().await?;
        tx.insert_runs(&runs, now).await?;
        tx.commit().await?;
        written += n;
    }
    Ok(())
}

/// Times `CLAIM_SAMPLES` claims as a node would make them, each rolled back. On SQLite the
/// transaction holds the one write lock (`BEGIN IMMEDIATE`) until it is dropped: dropping it right
/// after the claim sends the rollback at once, so the node waits for the claim alone.
pub(super) async fn time_claims(store: &dyn Store, batch: i64) -> anyhow::Result<(f64, f64)> {
    let mut samples = Vec::with_capacity(CLAIM_SAMPLES);
    for _ in 0..CLAIM_SAMPLES {
        let req = ClaimRequest {
            node: "bench-probe".to_owned(),
            groups: vec!["default".to_owned()],
            now: now_ms(),
            horizon_ms: 0,
            lease_ms: 2_000,
            limit: batch,
        };
        let mut tx = store.begin().await?;
        let t = Instant::now();
        tx.claim_due_runs(&req).await?;
        samples.push(t.elapsed().as_secs_f64() * 1_000.0);
        // Rolls back (the store's transactions roll back when dropped).
        drop(tx);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    samples.sort_by(f64::total_cmp);
    let p50 = samples[samples.len() / 2];
    let max = samples.last().copied().unwrap_or(0.0);
    Ok((
        (p50 * 1_000.0).round() / 1_000.0,
        (max * 1_000.0).round() / 1_000.0,
    ))
}

async fn quiet_lateness(
    pool: &Pool,
    t: &Tenancy,
    from: i64,
    until: i64,
) -> anyhow::Result<QuietTenant> {
    let rows = pool
        .optional_i64s(
            "SELECT dispatched_at - scheduled_at FROM runs
             WHERE tenant_id = $1 AND trigger_kind = 'schedule' AND attempt = 1
               AND scheduled_at >= $2 AND scheduled_at < $3",
            &[t.tenant.id.0, from, until],
        )
        .await?;
    let scheduled = rows.len() as u64;
    let late: Vec<i64> = rows.into_iter().flatten().collect();
    Ok(QuietTenant {
        tenant: t.tenant.name.clone(),
        scheduled,
        not_dispatched: scheduled - late.len() as u64,
        lateness_ms: Lateness::of(late),
    })
}

/// Runs the scenario: `config.tasks` is each quiet tenant's runs a second (tasks every 1 s),
/// `backlog` the noisy tenant's waiting runs.
pub async fn run(config: &BenchConfig, backlog_runs: u64) -> anyhow::Result<NeighbourReport> {
    config.check_backend()?;
    super::nodes::check_mthpt(&config.mthpt)?;
    std::fs::create_dir_all(&config.work_dir)?;
    let spools = config.work_dir.join("spool");
    if spools.exists() {
        std::fs::remove_dir_all(&spools)?;
    }
    progress(format_args!(
        "noisy-neighbour on {}: fresh database {}",
        config.backend.name(),
        mthpt_engine::store::redact_url(&config.database_url)
    ));
    let BenchDb { store, pool } = BenchDb::fresh(config.backend, &config.database_url).await?;
    let noisy = crate::tenancy(&*store, "noisy", "flood").await?;
    let mut quiet = Vec::with_capacity(QUIET_TENANTS);
    for i in 1..=QUIET_TENANTS {
        quiet.push(crate::tenancy(&*store, &format!("quiet{i}"), "tick").await?);
    }
    let noisy_capacity = f64::from(NOISY_CAPACITY) * 1_000.0 / NOISY_RUN_MS as f64;
    let noisy_tasks = (noisy_capacity as u64 * config.noisy_overload.max(1)) as usize;
    let now = now_ms();
    let params = serde_json::json!({ "ms": NOISY_RUN_MS });
    database::load(
        store.clone(),
        &noisy,
        fixed_rate("n", noisy_tasks, SLEEP, params, 1_000, now),
    )
    .await?;
    for q in &quiet {
        database::load(
            store.clone(),
            q,
            fixed_rate("q", config.tasks, NOOP, serde_json::json!({}), 1_000, now),
        )
        .await?;
    }
    let loading = Instant::now();
    backlog(&*store, &noisy, backlog_runs).await?;
    progress(format_args!(
        "noisy-neighbour: {backlog_runs} backlog runs written in {:.1} s; {noisy_tasks} noisy tasks, {} tasks per quiet tenant",
        loading.elapsed().as_secs_f64(),
        config.tasks
    ));
    let idle_claim = time_claims(&*store, config.engine.claim_batch).await?;
    progress(format_args!(
        "claim before the nodes start (backlog due, no instance yet): p50 {} ms",
        idle_claim.0
    ));

    let http = reqwest::Client::new();
    let mut nodes = Vec::with_capacity(config.nodes);
    for i in 0..config.nodes {
        let mut node = NodeProcess::spawn(
            &config.mthpt,
            &format!("bench-node-{i}"),
            &config.database_url,
            &config.engine,
            &config.work_dir,
        )?;
        node.ready(&http, Duration::from_secs(30)).await?;
        nodes.push(node);
    }
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let mut wrappers = vec![BenchWrappers::start(
        &noisy,
        &urls,
        1,
        NOISY_CAPACITY,
        config.result_linger,
        &spools.join("noisy"),
    )?];
    for q in &quiet {
        wrappers.push(BenchWrappers::start(
            q,
            &urls,
            1,
            config.capacity,
            config.result_linger,
            &spools.join(&q.tenant.name),
        )?);
    }
    for w in &wrappers {
        w.registered(Duration::from_secs(30)).await?;
    }
    // The warm-up counts from when every quiet tenant has had a run sent: on a slow machine
    // the nodes' first claims beside the backlog can take longer than the warm-up itself.
    crate::wait_until(
        FLOWING_WAIT,
        "a run of every quiet tenant sent after the instances registered",
        || async {
            for q in &quiet {
                let sent = pool
                    .count(
                        "SELECT count(*) FROM runs WHERE tenant_id = $1 AND dispatched_at IS NOT NULL",
                        &[q.tenant.id.0],
                    )
                    .await?;
                if sent == 0 {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await?;

    let result = async {
        // PostgreSQL's CPU and WAL; SQLite has neither server nor WAL position to read.
        let mut probe = match config.backend {
            Backend::Postgres => Some(CostProbe::connect(&config.database_url).await?),
            Backend::Sqlite => None,
        };
        let warmup_ms = i64::try_from(config.warmup.as_millis()).unwrap_or(i64::MAX);
        let window_ms = i64::try_from(config.duration.as_millis()).unwrap_or(i64::MAX);
        let from = (now_ms() + warmup_ms + 999) / 1_000 * 1_000;
        let until = from + window_ms;
        sleep_until_ms(from).await;
        let waiting = pool
            .count(
                "SELECT count(*) FROM runs WHERE tenant_id = $1 AND started_at IS NULL AND finished_at IS NULL AND due_at BETWEEN $2 AND $3",
                &[noisy.tenant.id.0, 0, from],
            )
            .await?;
        let cost_start = match &mut probe {
            Some(p) => Some(p.sample().await?),
            None => None,
        };
        progress(format_args!("measuring {} s from {from}; noisy backlog {waiting}", config.duration.as_secs_f64()));
        let claim = time_claims(&*store, config.engine.claim_batch).await?;
        sleep_until_ms(until).await;
        let cost_end = match probe {
            Some(mut p) => {
                let end = p.sample().await?;
                p.close().await;
                Some(end)
            }
            None => None,
        };
        let completed = database::succeeded_between(&pool, from, until).await?;
        let noisy_done = pool
            .count(
                "SELECT count(*) FROM runs WHERE tenant_id = $1 AND state = 'succeeded' AND finished_at >= $2 AND finished_at < $3",
                &[noisy.tenant.id.0, from, until],
            )
            .await?;
        // The quiet tenants' runs of the window may still be made and dispatched for a while
        // on a busy machine: their lateness is read once every tenant has a run scheduled past
        // the window (all of the window's exist) and all were dispatched, or after
        // QUIET_WAIT_MS (those left are reported as not dispatched).
        let quiet_figures = loop {
            let mut figures = Vec::with_capacity(quiet.len());
            let mut all_made = true;
            for q in &quiet {
                figures.push(quiet_lateness(&pool, q, from, until).await?);
                all_made &= pool
                    .count(
                        "SELECT count(*) FROM runs WHERE tenant_id = $1 AND scheduled_at >= $2",
                        &[q.tenant.id.0, until],
                    )
                    .await?
                    > 0;
            }
            if (all_made && figures.iter().all(|f| f.not_dispatched == 0))
                || now_ms() >= until + QUIET_WAIT_MS
            {
                break figures;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        // The claim once more without the backlog (what the noisy tasks add meanwhile stays).
        const DELETE_BACKLOG: &str = "DELETE FROM runs WHERE tenant_id = $1 AND state = 'pending'
               AND started_at IS NULL AND finished_at IS NULL";
        match &pool {
            // 100,000 rows take the store's statement timeout and more to delete, and stay dead
            // rows under the claim index until a vacuum: the bench's PostgreSQL runs without
            // autovacuum, so this one stands in for it.
            Pool::Postgres(p) => {
                let mut conn = p.acquire().await?;
                sqlx::raw_sql("SET statement_timeout = 0").execute(&mut *conn).await?;
                sqlx::query(DELETE_BACKLOG)
                    .bind(noisy.tenant.id.0)
                    .execute(&mut *conn)
                    .await?;
                sqlx::raw_sql("VACUUM runs").execute(&mut *conn).await?;
                sqlx::raw_sql("RESET statement_timeout").execute(&mut *conn).await?;
            }
            Pool::Sqlite(_) => {
                pool.execute(DELETE_BACKLOG, &[noisy.tenant.id.0]).await?;
            }
        }
        let claim_without_backlog = time_claims(&*store, config.engine.claim_batch).await?;
        let costs = cost_start
            .zip(cost_end)
            .map(|(start, end)| CostPerRun::between(&start, &end, completed));
        let secs = config.duration.as_secs_f64();
        anyhow::Ok(NeighbourReport {
            scenario: "noisy-neighbour".to_owned(),
            backend: config.backend.name().to_owned(),
            nodes: config.nodes,
            duration_s: secs,
            noisy_backlog: waiting,
            noisy_capacity_per_sec: round1(noisy_capacity),
            noisy_offered_per_sec: round1(noisy_tasks as f64),
            noisy_completed_per_sec: round1(noisy_done as f64 / secs),
            quiet: quiet_figures,
            claim_ms_p50: claim.0,
            claim_ms_max: claim.1,
            claim_ms_p50_without_backlog: claim_without_backlog.0,
            runs_completed: completed,
            pg_cpu_us_per_run: costs.and_then(|c| c.pg_cpu_us_per_run),
            wal_bytes_per_run: costs.map(|c| c.wal_bytes_per_run),
        })
    }
    .await;
    // Wrappers first, while the engines still take their last results (see `Cluster::stop`).
    for w in wrappers {
        w.stop().await;
    }
    for node in nodes {
        let _ = node.stop(Duration::from_secs(15)).await;
    }
    store.close().await;
    if config.drop_database {
        database::remove(config.backend, &config.database_url).await?;
    }
    result
}

//! `soak`: one steady rate for a long time (default 30 minutes) with retention and autovacuum
//! on, reported as a time series of intervals; whether the claim's time and the runs table's
//! size stay flat once retention deletes runs as fast as they are made.
//!
//! - **Autovacuum on.** By default the soak starts its own PostgreSQL cluster (`initdb` on a free
//!   port, under the system's temporary directory, on disk), whose settings are the server's
//!   defaults: autovacuum on. A `--database-url` names another server instead; the soak refuses
//!   one whose autovacuum is off.
//! - **Retention on, and short.** A tenant keeps its finished runs at least an hour, longer than
//!   the soak. The bench lifts that limit in its own database and gives the bench tenant
//!   `--retention-seconds` (default 300), so the engines' rollup and retention pass deletes runs
//!   as fast as they finish from the first minutes on. Runs are deleted once their minute is
//!   rolled up, which waits five minutes: the table reaches its steady size after about
//!   retention + 6 minutes.
//! - **Each interval** (`--step-seconds`, default 60) reports the offered and completed rates,
//!   lateness, duplicates and misses of its runs (read one interval later, when they are final
//!   and not yet deleted), WAL and CPU per run, the claim's time (timed here, rolled back) and
//!   the runs table: size with its indexes, live and dead rows, rows deleted, autovacuums.
//! - **Flat** ([`flatness`]): over the window's second half, once retention deletes runs in
//!   each interval, its last three intervals against its first three: the table's size may grow
//!   by at most 10 %, the claim's median time by at most half (plus 1 ms of noise).

use anyhow::{Context, bail};
use mthpt_engine::store::Store;
use serde::Serialize;
use sqlx::{Connection, PgConnection};

use super::cost::{CostPerRun, CostProbe, CostSample};
use super::database::{self, Pool};
use super::figures::{self, Lateness};
use super::neighbour::time_claims;
use super::{BenchConfig, Cluster, StepSample, now_ms, progress, round1, sleep_until_ms};
use crate::chaos::postgres::{OwnPostgres, default_bin_dir};

/// Intervals compared at each end of the steady part.
const ENDS: usize = 3;
/// The table's size may grow by this share over the steady part and still be flat.
const SIZE_GROWTH: f64 = 0.10;
/// The claim's median time may grow by this share (plus [`CLAIM_NOISE_MS`]) and still be flat.
const CLAIM_GROWTH: f64 = 0.5;
const CLAIM_NOISE_MS: f64 = 1.0;

/// The runs table as PostgreSQL's statistics see it.
#[derive(Debug, Clone, Copy, Default, PartialEq, sqlx::FromRow)]
pub struct TableStats {
    /// Heap, indexes and TOAST, bytes.
    pub total_bytes: i64,
    pub live_rows: i64,
    pub dead_rows: i64,
    /// Rows deleted since the statistics began.
    pub deleted: i64,
    pub autovacuums: i64,
}

/// Summed over `runs`' partitions, the live runs and the history; rows deleted from the history
/// only (a run moving out of `live_runs` counts as a row deleted there).
const TABLE_STATS: &str = "SELECT coalesce(sum(pg_total_relation_size(relid)), 0)::int8 AS total_bytes,
        coalesce(sum(n_live_tup), 0)::int8 AS live_rows, coalesce(sum(n_dead_tup), 0)::int8 AS dead_rows,
        coalesce(sum(n_tup_del) FILTER (WHERE relname = 'run_history'), 0)::int8 AS deleted,
        coalesce(sum(autovacuum_count), 0)::int8 AS autovacuums
     FROM pg_stat_user_tables WHERE relname IN ('live_runs', 'run_history')";

/// One interval of the soak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SoakInterval {
    /// Seconds from the window's start to the interval's.
    pub at_s: f64,
    pub offered_per_sec: f64,
    /// Runs of the interval that succeeded (read an interval later), and per second.
    pub completed: u64,
    pub completed_per_sec: f64,
    /// Of the interval's scheduled first attempts.
    pub lateness_ms: Lateness,
    pub duplicates: u64,
    pub missed: u64,
    /// Runs of the interval not final one interval after it ended.
    pub unfinished: u64,
    pub wal_bytes_per_run: f64,
    pub pg_cpu_us_per_run: Option<f64>,
    pub engine_cpu_us_per_run: f64,
    /// One claim transaction (rolled back), timed at the interval's end.
    pub claim_ms_p50: f64,
    pub claim_ms_max: f64,
    /// The runs table at the interval's end.
    pub runs_table_mb: f64,
    pub live_runs: i64,
    pub dead_runs: i64,
    /// Runs deleted (by retention) during the interval.
    pub runs_deleted: i64,
    /// Autovacuums of the runs table so far.
    pub autovacuums: i64,
}

/// Whether the soak stayed flat, and the figures it was judged on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Flatness {
    /// Seconds into the window of the first interval judged: the window's second half
    /// (`null`: retention did not delete runs in each of its intervals, or it has fewer than six,
    /// and nothing is judged).
    pub steady_from_s: Option<f64>,
    pub runs_table_mb_first: f64,
    pub runs_table_mb_last: f64,
    pub claim_ms_p50_first: f64,
    pub claim_ms_p50_last: f64,
    pub flat: bool,
}

fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Judges the intervals: see the module docs. The second half of the window is judged when
/// retention deleted runs in each of its intervals and it has at least `2 * ENDS` of them;
/// otherwise nothing is, and it is not flat.
pub fn flatness(intervals: &[SoakInterval]) -> Flatness {
    let half = &intervals[intervals.len() / 2..];
    let steady = half.len() >= 2 * ENDS && half.iter().all(|i| i.runs_deleted > 0);
    let ends = |part: &[SoakInterval]| {
        (
            median(part.iter().map(|i| i.runs_table_mb).collect()),
            median(part.iter().map(|i| i.claim_ms_p50).collect()),
        )
    };
    let (first, last) = if steady {
        (ends(&half[..ENDS]), ends(&half[half.len() - ENDS..]))
    } else {
        ((0.0, 0.0), (0.0, 0.0))
    };
    let flat = steady
        && last.0 <= first.0 * (1.0 + SIZE_GROWTH)
        && last.1 <= first.1 * (1.0 + CLAIM_GROWTH) + CLAIM_NOISE_MS;
    Flatness {
        steady_from_s: steady.then(|| half[0].at_s),
        runs_table_mb_first: first.0,
        runs_table_mb_last: last.0,
        claim_ms_p50_first: first.1,
        claim_ms_p50_last: last.1,
        flat,
    }
}

/// What `soak` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SoakReport {
    pub scenario: String,
    pub nodes: usize,
    /// The bench's own cluster (`true`) or the `--database-url`'s server.
    pub own_cluster: bool,
    pub offered_per_sec: f64,
    pub runs_per_sec: f64,
    pub duration_s: f64,
    pub interval_s: f64,
    pub retention_s: f64,
    pub duplicates: u64,
    pub missed: u64,
    pub unfinished: u64,
    /// The largest p99 lateness of any interval.
    pub worst_p99_ms: i64,
    pub wal_bytes_per_run: f64,
    pub pg_cpu_us_per_run: Option<f64>,
    pub engine_cpu_us_per_run: f64,
    pub wrapper_cpu_us_per_run: f64,
    #[serde(flatten)]
    pub flatness: Flatness,
    pub intervals: Vec<SoakInterval>,
}

/// The database the soak runs on: the bench's own cluster, or the given URL's server with
/// autovacuum on.
async fn database(config: &BenchConfig) -> anyhow::Result<(Option<OwnCluster>, String)> {
    if !config.database_url.is_empty() {
        let mut conn = PgConnection::connect(&config.database_url)
            .await
            .context("connect to the --database-url server")?;
        let (on,): (String,) = sqlx::query_as("SHOW autovacuum")
            .fetch_one(&mut conn)
            .await?;
        conn.close().await?;
        if on != "on" {
            bail!(
                "autovacuum is off on the --database-url server: the soak measures the table with \
                 it on (turn it on, or leave out --database-url and the soak starts its own cluster)"
            );
        }
        return Ok((None, config.database_url.clone()));
    }
    let dir = std::env::temp_dir().join(format!("mthpt-bench-soak-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clear {}", dir.display()))?;
    }
    let pg = match OwnPostgres::create(&default_bin_dir()?, &dir).await {
        Ok(pg) => pg,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    let url = pg.url_via(pg.port());
    progress(format_args!(
        "soak: own PostgreSQL cluster on port {} (autovacuum on), data in {}",
        pg.port(),
        dir.display()
    ));
    Ok((Some(OwnCluster { pg: Some(pg), dir }), url))
}

/// The soak's own cluster and its directory: stopped, then removed, when dropped (the soak's
/// data runs to gigabytes).
struct OwnCluster {
    pg: Option<OwnPostgres>,
    dir: std::path::PathBuf,
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        // The server stops when its value is dropped; then nothing uses the directory.
        drop(self.pg.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Gives the bench tenant a retention shorter than the product's one-hour minimum (its own
/// database only).
async fn shorten_retention(pool: &Pool, tenant: i64, retention_ms: i64) -> anyhow::Result<()> {
    pool.execute(
        "ALTER TABLE tenants DROP CONSTRAINT IF EXISTS tenants_retention_ms_check",
        &[],
    )
    .await?;
    pool.execute(
        "UPDATE tenants SET retention_ms = $1 WHERE id = $2",
        &[retention_ms, tenant],
    )
    .await?;
    Ok(())
}

async fn table_stats(probe: &mut PgConnection) -> anyhow::Result<TableStats> {
    Ok(sqlx::query_as(TABLE_STATS).fetch_one(probe).await?)
}

/// An interval measured, waiting for its runs to be final before its correctness is read.
struct Pending {
    from: i64,
    until: i64,
    cost_from: CostSample,
    cost_until: CostSample,
    engine_cpu_us: u64,
    claim: (f64, f64),
    stats: TableStats,
    deleted: i64,
}

/// Runs the soak: `config.tasks` no-op tasks every `config.every_ms`, for `config.duration` in
/// intervals of `config.step`, keeping finished runs `config.retention`.
pub async fn run(config: &BenchConfig) -> anyhow::Result<SoakReport> {
    let retention = config.retention;
    super::nodes::check_mthpt(&config.mthpt)?;
    let (own, url) = database(config).await?;
    let mut config = config.clone();
    config.database_url = url;
    let config = &config;
    std::fs::create_dir_all(&config.work_dir)?;
    let spools = config.work_dir.join("spool");
    if spools.exists() {
        std::fs::remove_dir_all(&spools)?;
    }
    let pg = database::fresh(&config.database_url).await?;
    let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(pg.clone());
    let pool: Pool = (&pg).into();
    let tenancy = crate::tenancy(&*store, "bench", "noop").await?;
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    shorten_retention(&pool, tenancy.tenant.id.0, retention_ms).await?;
    database::load(store.clone(), &tenancy, config.plans(now_ms())).await?;
    progress(format_args!(
        "soak: {} tasks every {} ms, retention {} s",
        config.tasks,
        config.every_ms,
        retention.as_secs()
    ));
    let result = match Cluster::start(config, &tenancy).await {
        Ok(mut cluster) => {
            let measured = measure(
                config,
                &pg,
                tenancy.tenant.id.0,
                &*store,
                &mut cluster,
                own.is_some(),
            )
            .await;
            let stopped = cluster.stop().await;
            measured.and_then(|report| stopped.map(|()| report))
        }
        Err(e) => Err(e),
    };
    store.close().await;
    drop(own);
    result
}

async fn measure(
    config: &BenchConfig,
    pg: &mthpt_engine::store::PgStore,
    tenant: i64,
    store: &dyn Store,
    cluster: &mut Cluster,
    own_cluster: bool,
) -> anyhow::Result<SoakReport> {
    let mut probe = CostProbe::connect(&config.database_url).await?;
    // The bench's own reads, on a connection of its own: without the store's statement timeout
    // (they read up to an interval of runs).
    let mut reads = PgConnection::connect(&config.database_url).await?;
    let step_ms = i64::try_from(config.step.as_millis())
        .unwrap_or(i64::MAX)
        .max(1_000);
    let window_ms = i64::try_from(config.duration.as_millis()).unwrap_or(i64::MAX);
    let warmup_ms = i64::try_from(config.warmup.as_millis()).unwrap_or(i64::MAX);
    let from = (now_ms() + warmup_ms + 999) / 1_000 * 1_000;
    let until = from + window_ms / step_ms * step_ms;
    if until == from {
        bail!(
            "--duration {} s leaves no room for one interval of {} s",
            config.duration.as_secs_f64(),
            config.step.as_secs_f64()
        );
    }
    sleep_until_ms(from).await;
    let tasks = database::tasks(pg).await?;
    let whole_start = StepSample::take(cluster, &mut probe).await?;
    let (mut edge_at, mut edge) = (from, whole_start.clone());
    let mut deleted_before = table_stats(&mut reads).await?.deleted;
    let mut intervals: Vec<SoakInterval> = Vec::new();
    let mut pending: Option<Pending> = None;
    while edge_at < until {
        let next_at = edge_at + step_ms;
        sleep_until_ms(next_at).await;
        let next = StepSample::take(cluster, &mut probe).await?;
        let claim = time_claims(store, config.engine.claim_batch).await?;
        let stats = table_stats(&mut reads).await?;
        let measured = Pending {
            from: edge_at,
            until: next_at,
            cost_from: edge.cost,
            cost_until: next.cost,
            engine_cpu_us: edge.engine_cpu_us(&next),
            claim,
            stats,
            deleted: stats.deleted - deleted_before,
        };
        deleted_before = stats.deleted;
        if let Some(p) = pending.replace(measured) {
            intervals.push(settle(config, &mut reads, tenant, cluster, &tasks, p, from).await?);
        }
        (edge_at, edge) = (next_at, next);
    }
    probe.close().await;
    let last = until - step_ms;
    super::drain_until(config, async || {
        unfinished(&mut reads, tenant, last, until).await
    })
    .await?;
    if let Some(p) = pending.take() {
        intervals.push(settle(config, &mut reads, tenant, cluster, &tasks, p, from).await?);
    }
    let _ = reads.close().await;
    let completed_total: u64 = intervals.iter().map(|i| i.completed).sum();
    let engine_us = whole_start.engine_cpu_us(&edge);
    let costs = CostPerRun::between(&whole_start.cost, &edge.cost, completed_total);
    let secs = (until - from) as f64 / 1_000.0;
    let offered = database::expected_occurrences(&tasks, from, until).len();
    Ok(SoakReport {
        scenario: "soak".to_owned(),
        nodes: config.nodes,
        own_cluster,
        offered_per_sec: round1(offered as f64 / secs),
        runs_per_sec: round1(completed_total as f64 / secs),
        duration_s: secs,
        interval_s: step_ms as f64 / 1_000.0,
        retention_s: config.retention.as_secs_f64(),
        duplicates: intervals.iter().map(|i| i.duplicates).sum(),
        missed: intervals.iter().map(|i| i.missed).sum(),
        unfinished: intervals.iter().map(|i| i.unfinished).sum(),
        worst_p99_ms: intervals
            .iter()
            .map(|i| i.lateness_ms.p99)
            .max()
            .unwrap_or(0),
        wal_bytes_per_run: costs.wal_bytes_per_run,
        pg_cpu_us_per_run: costs.pg_cpu_us_per_run,
        engine_cpu_us_per_run: super::cost::per_run(engine_us, completed_total),
        wrapper_cpu_us_per_run: costs.wrapper_cpu_us_per_run,
        flatness: flatness(&intervals),
        intervals,
    })
}

/// The bench tenant's runs scheduled in `[from, until)` not final yet.
async fn unfinished(
    reads: &mut PgConnection,
    tenant: i64,
    from: i64,
    until: i64,
) -> anyhow::Result<u64> {
    let (left,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM runs WHERE tenant_id = $1 AND scheduled_at >= $2
           AND scheduled_at < $3 AND finished_at IS NULL",
    )
    .bind(tenant)
    .bind(from)
    .bind(until)
    .fetch_one(reads)
    .await?;
    Ok(u64::try_from(left).unwrap_or(0))
}

/// The runs of the bench tenant scheduled in `[from, until)` (through its index on tenant and
/// scheduled time: the table holds minutes of runs).
async fn runs_of(
    reads: &mut PgConnection,
    tenant: i64,
    from: i64,
    until: i64,
) -> anyhow::Result<Vec<figures::RunFact>> {
    Ok(sqlx::query_as(
        "SELECT task_id, scheduled_at, attempt, shard_index, trigger_kind, state, dispatched_at
         FROM runs WHERE tenant_id = $1 AND scheduled_at >= $2 AND scheduled_at < $3",
    )
    .bind(tenant)
    .bind(from)
    .bind(until)
    .fetch_all(reads)
    .await?)
}

/// Reads the correctness of a measured interval, whose runs are final by now (or as final as
/// they get), and takes its executions off the wrappers' record.
async fn settle(
    config: &BenchConfig,
    reads: &mut PgConnection,
    tenant: i64,
    cluster: &Cluster,
    tasks: &[mthpt_engine::task::Task],
    p: Pending,
    window_from: i64,
) -> anyhow::Result<SoakInterval> {
    let expected = database::expected_occurrences(tasks, p.from, p.until);
    let runs = runs_of(reads, tenant, p.from, p.until).await?;
    let completed = runs.iter().filter(|r| r.state == "succeeded").count() as u64;
    let executions = cluster.wrappers.executions.take_before(p.until);
    let c = figures::correctness(&runs, &expected, &executions, config.delay_limit_ms);
    let costs = CostPerRun::between(&p.cost_from, &p.cost_until, completed);
    let secs = (p.until - p.from) as f64 / 1_000.0;
    let interval = SoakInterval {
        at_s: (p.from - window_from) as f64 / 1_000.0,
        offered_per_sec: round1(expected.len() as f64 / secs),
        completed,
        completed_per_sec: round1(completed as f64 / secs),
        lateness_ms: c.lateness,
        duplicates: c.duplicates,
        missed: c.missed,
        unfinished: c.unfinished,
        wal_bytes_per_run: costs.wal_bytes_per_run,
        pg_cpu_us_per_run: costs.pg_cpu_us_per_run,
        engine_cpu_us_per_run: super::cost::per_run(p.engine_cpu_us, completed),
        claim_ms_p50: p.claim.0,
        claim_ms_max: p.claim.1,
        runs_table_mb: round1(p.stats.total_bytes as f64 / (1024.0 * 1024.0)),
        live_runs: p.stats.live_rows,
        dead_runs: p.stats.dead_rows,
        runs_deleted: p.deleted,
        autovacuums: p.stats.autovacuums,
    };
    progress(format_args!("soak: {}", serde_json::to_string(&interval)?));
    Ok(interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(at_s: f64, mb: f64, claim: f64, deleted: i64) -> SoakInterval {
        SoakInterval {
            at_s,
            offered_per_sec: 100.0,
            completed: 6_000,
            completed_per_sec: 100.0,
            lateness_ms: Lateness::default(),
            duplicates: 0,
            missed: 0,
            unfinished: 0,
            wal_bytes_per_run: 0.0,
            pg_cpu_us_per_run: None,
            engine_cpu_us_per_run: 0.0,
            claim_ms_p50: claim,
            claim_ms_max: claim,
            runs_table_mb: mb,
            live_runs: 0,
            dead_runs: 0,
            runs_deleted: deleted,
            autovacuums: 0,
        }
    }

    #[test]
    fn the_second_half_is_judged_and_growth_before_it_is_not() {
        let mut xs: Vec<_> = (0..6)
            .map(|k| interval(60.0 * k as f64, 50.0 * (k + 1) as f64, 1.0, (k >= 4) as i64))
            .collect();
        xs.extend((6..12).map(|k| interval(60.0 * k as f64, 400.0, 2.0, 500)));
        let f = flatness(&xs);
        assert_eq!(f.steady_from_s, Some(360.0));
        assert_eq!(
            (f.runs_table_mb_first, f.runs_table_mb_last),
            (400.0, 400.0)
        );
        assert!(f.flat, "growth before the second half is not judged: {f:?}");
    }

    #[test]
    fn a_table_growing_past_a_tenth_is_not_flat() {
        let xs: Vec<_> = (0..12)
            .map(|k| interval(60.0 * k as f64, 100.0 + 5.0 * k as f64, 2.0, 500))
            .collect();
        let f = flatness(&xs);
        assert_eq!(
            (f.runs_table_mb_first, f.runs_table_mb_last),
            (135.0, 150.0)
        );
        assert!(!f.flat);
    }

    #[test]
    fn a_claim_slowing_by_more_than_half_and_noise_is_not_flat() {
        let slower = |claim: f64| {
            let mut xs: Vec<_> = (0..9)
                .map(|k| interval(60.0 * k as f64, 100.0, 4.0, 500))
                .collect();
            xs.extend((9..12).map(|k| interval(60.0 * k as f64, 100.0, claim, 500)));
            flatness(&xs).flat
        };
        assert!(!slower(7.1));
        assert!(slower(6.9));
    }

    #[test]
    fn a_second_half_without_deletes_or_too_short_is_not_judged() {
        let mut xs: Vec<_> = (0..12)
            .map(|k| interval(60.0 * k as f64, 100.0, 2.0, 10))
            .collect();
        xs[10].runs_deleted = 0;
        let f = flatness(&xs);
        assert_eq!(f.steady_from_s, None);
        assert!(!f.flat);
        let short: Vec<_> = (0..10)
            .map(|k| interval(60.0 * k as f64, 100.0, 2.0, 10))
            .collect();
        assert!(!flatness(&short).flat, "five intervals in the second half");
    }
}

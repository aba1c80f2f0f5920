//! `/tenants/{tenant}/stats`: runs by final state, success rate, duration and lateness
//! percentiles over time buckets, for a tenant or one task.

use std::collections::BTreeMap;

use actix_web::{get, web};
use chrono::{DateTime, Utc};
use mthpt_engine::task::TaskId;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::at;
use super::auth::Caller;
use super::error::{ApiResult, Problem};
use crate::service::Services;
use crate::service::stats::{self, Bucket, Percentiles};

pub fn routes(cfg: &mut utoipa_actix_web::service_config::ServiceConfig<'_>) {
    cfg.service(get_stats);
}

/// The range and bucket size.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatsQuery {
    /// Runs scheduled at or after (RFC 3339).
    pub from: DateTime<Utc>,
    /// Runs scheduled before (RFC 3339; default now).
    pub to: Option<DateTime<Utc>>,
    /// Bucket length in seconds (at least 60; default 3600). At most 1000 buckets.
    pub bucket_seconds: Option<i64>,
    /// Only this task's runs.
    pub task: Option<i64>,
}

/// p50/p95/p99 in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
pub struct PercentilesBody {
    pub p50: i64,
    pub p95: i64,
    pub p99: i64,
}

impl From<Percentiles> for PercentilesBody {
    fn from(p: Percentiles) -> Self {
        Self {
            p50: p.p50,
            p95: p.p95,
            p99: p.p99,
        }
    }
}

/// The figures of one bucket.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BucketBody {
    pub start: DateTime<Utc>,
    /// Finished runs scheduled in the bucket.
    pub runs: u64,
    /// Final state → runs.
    pub by_state: BTreeMap<String, u64>,
    /// Succeeded / (succeeded + failed + timed_out + lost); absent when none of those.
    pub success_rate: Option<f64>,
    /// From start to finish.
    pub duration_ms: Option<PercentilesBody>,
    /// From due to start.
    pub lateness_ms: Option<PercentilesBody>,
    /// True when part of the bucket is older than the tenant's rollup watermark: its runs
    /// are counted from per-minute rollups (counts and success rate stay exact) and its
    /// duration and lateness percentiles come from log-spaced histograms, within 6 % or 1 ms.
    /// A rolled-up minute counts in the bucket holding its start.
    pub approximate: bool,
}

impl From<Bucket> for BucketBody {
    fn from(b: Bucket) -> Self {
        Self {
            start: at(b.start),
            runs: b.runs,
            by_state: b
                .by_state
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            success_rate: b.success_rate,
            duration_ms: b.duration_ms.map(Into::into),
            lateness_ms: b.lateness_ms.map(Into::into),
            approximate: b.approximate,
        }
    }
}

/// Statistics over a range.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct StatsBody {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub bucket_seconds: i64,
    pub task_id: Option<i64>,
    pub total: BucketBody,
    pub buckets: Vec<BucketBody>,
}

/// Statistics of a tenant's (or a task's) finished runs, bucketed by scheduled time.
#[utoipa::path(tag = "stats", params(("tenant" = String, Path), StatsQuery), responses(
    (status = 200, body = StatsBody),
    (status = 404, body = Problem, content_type = "application/problem+json"),
    (status = 422, body = Problem, content_type = "application/problem+json"),
))]
#[get("/tenants/{tenant}/stats")]
async fn get_stats(
    services: web::Data<Services>,
    caller: Caller,
    tenant: web::Path<String>,
    query: web::Query<StatsQuery>,
) -> ApiResult<web::Json<StatsBody>> {
    let from = query.from.timestamp_millis();
    let to = query
        .to
        .map_or_else(|| services.now(), |t| t.timestamp_millis());
    let bucket_ms = query.bucket_seconds.unwrap_or(3600).saturating_mul(1000);
    let s = stats::stats(
        &services,
        &caller,
        &tenant,
        query.task.map(TaskId),
        from,
        to,
        bucket_ms,
    )
    .await?;
    Ok(web::Json(StatsBody {
        from: at(s.from),
        to: at(s.to),
        bucket_seconds: s.bucket_ms / 1000,
        task_id: s.task_id.map(|t| t.0),
        total: s.total.into(),
        buckets: s.buckets.into_iter().map(Into::into).collect(),
    }))
}

//! Per-tenant quotas: how much of the cluster one tenant may use, so one busy tenant slows
//! only itself.
//!
//! Operators set a tenant's [`TenantQuotas`]; `None` means unlimited. Four quotas:
//!
//! | Quota | Limits | Where it is enforced |
//! |---|---|---|
//! | `max_concurrent_runs` | runs claimed or running at once | the claim: a tenant at its quota gets no share of a claim |
//! | `max_fires_per_second` | fires per second, a token bucket holding `fire_burst` tokens (default: the rate) | the claim takes a token per run it claims; a manual trigger is refused while the bucket is empty |
//! | `max_tasks` | tasks of the tenant | creating a task (API and task-file apply) |
//! | `max_waiting_runs` | runs due and not yet claimed | manual triggers |
//!
//! The bucket ([`FireBucket`]) is kept on the tenant's row (`fire_tokens`, `fire_tokens_at`),
//! so every engine node and console process takes from the same one: a claim locks the rows of
//! the rate-limited tenants it serves (skipping a row another claim holds: that tenant waits
//! for the next claim) and writes back what it took.
//!
//! A refusal is a [`QuotaExceeded`]: the quota's name and its value. Runs held back at the claim
//! are not refused: they wait, and the watchdog raises the quota's alarm once per episode when
//! they wait long.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::validate::FieldError;

/// The largest value a quota may have (keeps the bucket arithmetic far from overflow).
pub const MAX_QUOTA: i64 = 1_000_000_000;

/// A tenant's quotas; `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, sqlx::FromRow)]
pub struct TenantQuotas {
    /// Runs claimed or running at once.
    pub max_concurrent_runs: Option<i64>,
    /// The refill rate of the tenant's bucket of fires, per second.
    pub max_fires_per_second: Option<i64>,
    /// How many tokens the bucket holds: fires that may happen at once after a quiet spell.
    /// Only with a rate; `None`: the rate (one second's worth).
    pub fire_burst: Option<i64>,
    /// Tasks the tenant may have.
    pub max_tasks: Option<i64>,
    /// Runs due and not yet claimed.
    pub max_waiting_runs: Option<i64>,
}

impl TenantQuotas {
    /// Checks every quota is a positive integer up to [`MAX_QUOTA`], and that a burst comes
    /// with a rate.
    pub fn validate(&self) -> Result<(), FieldError> {
        for (field, value) in [
            ("max_concurrent_runs", self.max_concurrent_runs),
            ("max_fires_per_second", self.max_fires_per_second),
            ("fire_burst", self.fire_burst),
            ("max_tasks", self.max_tasks),
            ("max_waiting_runs", self.max_waiting_runs),
        ] {
            if let Some(v) = value
                && !(1..=MAX_QUOTA).contains(&v)
            {
                return Err(FieldError::new(
                    field,
                    format!(
                        "must be a positive integer up to {MAX_QUOTA} (or null: unlimited), not {v}"
                    ),
                ));
            }
        }
        if self.fire_burst.is_some() && self.max_fires_per_second.is_none() {
            return Err(FieldError::new(
                "fire_burst",
                "needs max_fires_per_second (a burst without a rate limits nothing)",
            ));
        }
        Ok(())
    }

    /// The bucket's size: the burst, or one second's worth of fires.
    pub fn burst(&self) -> Option<i64> {
        self.max_fires_per_second
            .map(|rate| self.fire_burst.unwrap_or(rate))
    }
}

/// What a tenant uses now, against its quotas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantUsage {
    /// Its tasks.
    pub tasks: i64,
    /// Its runs due and not yet claimed (pending, `due_at <= now`).
    pub waiting_runs: i64,
    /// Its runs claimed or running.
    pub running_runs: i64,
}

/// Names a quota (in problems, metrics labels and alarms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quota {
    MaxConcurrentRuns,
    MaxFiresPerSecond,
    MaxTasks,
    MaxWaitingRuns,
}

impl Quota {
    /// Every quota, in a stable order.
    pub const ALL: [Quota; 4] = [
        Quota::MaxConcurrentRuns,
        Quota::MaxFiresPerSecond,
        Quota::MaxTasks,
        Quota::MaxWaitingRuns,
    ];

    /// The quota's name as the API, metrics and alarms spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Quota::MaxConcurrentRuns => "max_concurrent_runs",
            Quota::MaxFiresPerSecond => "max_fires_per_second",
            Quota::MaxTasks => "max_tasks",
            Quota::MaxWaitingRuns => "max_waiting_runs",
        }
    }

    /// This quota's value in `quotas`.
    pub fn limit(self, quotas: &TenantQuotas) -> Option<i64> {
        match self {
            Quota::MaxConcurrentRuns => quotas.max_concurrent_runs,
            Quota::MaxFiresPerSecond => quotas.max_fires_per_second,
            Quota::MaxTasks => quotas.max_tasks,
            Quota::MaxWaitingRuns => quotas.max_waiting_runs,
        }
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal: the change would go beyond `quota`, whose value is `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the tenant's quota {quota} ({limit}) is reached")]
pub struct QuotaExceeded {
    pub quota: Quota,
    pub limit: i64,
    /// For the rate quota: how long until a fire is allowed again, in milliseconds.
    pub retry_after_ms: Option<i64>,
}

/// Whether one more task fits `quotas` when the tenant has `tasks`.
pub fn check_new_task(quotas: &TenantQuotas, tasks: i64) -> Result<(), QuotaExceeded> {
    at_most(Quota::MaxTasks, quotas, tasks)
}

/// Whether one more waiting run fits `quotas` when the tenant has `waiting` runs waiting.
pub fn check_new_waiting_run(quotas: &TenantQuotas, waiting: i64) -> Result<(), QuotaExceeded> {
    at_most(Quota::MaxWaitingRuns, quotas, waiting)
}

fn at_most(quota: Quota, quotas: &TenantQuotas, used: i64) -> Result<(), QuotaExceeded> {
    match quota.limit(quotas) {
        Some(limit) if used >= limit => Err(QuotaExceeded {
            quota,
            limit,
            retry_after_ms: None,
        }),
        _ => Ok(()),
    }
}

/// A token bucket of fires for one tenant: it holds up to `burst` tokens and gains `rate` per
/// second; each fire takes one. Time is an argument (epoch milliseconds), so it is stepped in
/// tests. It is stored on the tenant's row ([`FireBucket::stored`], [`FireBucket::state`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FireBucket {
    /// Tokens held at `at` (fractional: refills are continuous).
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: i64,
}

impl FireBucket {
    /// A full bucket for `quotas` at `now`.
    pub fn full(quotas: &TenantQuotas, now: i64) -> Self {
        Self {
            tokens: quotas.burst().unwrap_or(0) as f64,
            at: now,
        }
    }

    /// The bucket as stored on the tenant's row: `tokens` held at `at`, or full at `now` when
    /// nothing was taken since the rate was set (both `None`).
    pub fn stored(quotas: &TenantQuotas, tokens: Option<f64>, at: Option<i64>, now: i64) -> Self {
        match (tokens, at) {
            (Some(tokens), Some(at)) if tokens.is_finite() => Self {
                tokens: tokens.max(0.0),
                at,
            },
            _ => Self::full(quotas, now),
        }
    }

    /// What to store on the tenant's row: the tokens held and when.
    pub fn state(&self) -> (f64, i64) {
        (self.tokens, self.at)
    }

    /// The tokens the bucket holds at `now` (refilled since it was last used, up to the burst).
    pub fn available(&self, quotas: &TenantQuotas, now: i64) -> f64 {
        let (Some(rate), Some(burst)) = (quotas.max_fires_per_second, quotas.burst()) else {
            return f64::INFINITY;
        };
        let elapsed = (now - self.at).max(0) as f64 / 1000.0;
        (self.tokens + elapsed * rate as f64).min(burst as f64)
    }

    /// Takes up to `want` tokens at `now` and returns how many it took (`want` when unlimited).
    pub fn take(&mut self, quotas: &TenantQuotas, now: i64, want: i64) -> i64 {
        let available = self.available(quotas, now);
        if available.is_infinite() {
            return want;
        }
        let taken = (available.floor() as i64).clamp(0, want.max(0));
        self.tokens = available - taken as f64;
        self.at = now.max(self.at);
        taken
    }

    /// Takes one token for one fire at `now`, or says how long until one is available.
    pub fn take_one(&mut self, quotas: &TenantQuotas, now: i64) -> Result<(), QuotaExceeded> {
        self.has_one(quotas, now)?;
        self.take(quotas, now, 1);
        Ok(())
    }

    /// Whether the bucket holds a whole token at `now` (taking none), or how long until it does.
    pub fn has_one(&self, quotas: &TenantQuotas, now: i64) -> Result<(), QuotaExceeded> {
        self.has_one_after(quotas, now, 0)
    }

    /// Whether a whole token is left at `now` once `queued` fires already waiting have taken
    /// theirs (taking none), or how long until one is.
    pub fn has_one_after(
        &self,
        quotas: &TenantQuotas,
        now: i64,
        queued: i64,
    ) -> Result<(), QuotaExceeded> {
        let left = self.available(quotas, now) - queued.max(0) as f64;
        if left >= 1.0 {
            return Ok(());
        }
        let rate = quotas.max_fires_per_second.unwrap_or(1).max(1);
        let missing = 1.0 - left;
        let wait_ms = (missing * 1000.0 / rate as f64).ceil() as i64;
        Err(QuotaExceeded {
            quota: Quota::MaxFiresPerSecond,
            limit: rate,
            retry_after_ms: Some(wait_ms.max(1)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_790_000_000_000;

    fn quotas() -> TenantQuotas {
        TenantQuotas {
            max_concurrent_runs: Some(5),
            max_fires_per_second: Some(2),
            fire_burst: Some(4),
            max_tasks: Some(3),
            max_waiting_runs: Some(10),
        }
    }

    #[test]
    fn quotas_must_be_positive_and_burst_needs_a_rate() {
        assert_eq!(TenantQuotas::default().validate(), Ok(()));
        assert_eq!(quotas().validate(), Ok(()));
        let zero = TenantQuotas {
            max_tasks: Some(0),
            ..TenantQuotas::default()
        };
        assert_eq!(zero.validate().unwrap_err().field, "max_tasks");
        let burst_alone = TenantQuotas {
            fire_burst: Some(3),
            ..TenantQuotas::default()
        };
        assert_eq!(burst_alone.validate().unwrap_err().field, "fire_burst");
    }

    #[test]
    fn unlimited_tenant_may_start_all_it_wants() {
        let q = TenantQuotas::default();
        let mut bucket = FireBucket::full(&q, T0);
        assert_eq!(bucket.take(&q, T0, 50), 50);
        assert_eq!(check_new_task(&q, i64::MAX - 1), Ok(()));
    }

    #[test]
    fn bucket_allows_a_burst_then_refills_at_the_rate() {
        let q = quotas();
        let mut bucket = FireBucket::full(&q, T0);
        assert_eq!(bucket.take(&q, T0, 10), 4);
        assert_eq!(bucket.take(&q, T0, 10), 0);
        // Half a second at 2 per second: one token.
        assert_eq!(bucket.take(&q, T0 + 500, 10), 1);
        // A long quiet spell refills only up to the burst.
        assert_eq!(bucket.take(&q, T0 + 60_000, 10), 4);
    }

    #[test]
    fn one_fire_beyond_the_rate_says_when_to_retry() {
        let q = TenantQuotas {
            max_fires_per_second: Some(1),
            ..TenantQuotas::default()
        };
        let mut bucket = FireBucket::full(&q, T0);
        assert_eq!(bucket.take_one(&q, T0), Ok(()));
        let refused = bucket.take_one(&q, T0 + 250).unwrap_err();
        assert_eq!(refused.quota, Quota::MaxFiresPerSecond);
        assert_eq!(refused.limit, 1);
        assert_eq!(refused.retry_after_ms, Some(750));
        assert_eq!(bucket.take_one(&q, T0 + 1_000), Ok(()));
    }

    #[test]
    fn task_and_waiting_quotas_refuse_at_the_limit() {
        let q = quotas();
        assert_eq!(check_new_task(&q, 2), Ok(()));
        let refused = check_new_task(&q, 3).unwrap_err();
        assert_eq!((refused.quota, refused.limit), (Quota::MaxTasks, 3));
        assert_eq!(check_new_waiting_run(&q, 9), Ok(()));
        assert_eq!(
            check_new_waiting_run(&q, 10).unwrap_err().quota,
            Quota::MaxWaitingRuns
        );
    }
}

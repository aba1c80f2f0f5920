//! Injectable time.
//!
//! Every schedule, lease, retry and timeout decision reads the time from a [`Clock`], so tests can
//! step time instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, TimeZone, Utc};

/// A source of "now", in UTC milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant in milliseconds since 1970-01-01T00:00:00Z.
    fn now_ms(&self) -> i64;

    /// The current instant in microseconds since the epoch: timers that must wake on a given
    /// millisecond, not up to one after it, read it (by default `now_ms` × 1,000).
    fn now_us(&self) -> i64 {
        self.now_ms().saturating_mul(1_000)
    }

    /// The current instant as a chrono value.
    fn now(&self) -> DateTime<Utc> {
        ms_to_datetime(self.now_ms())
    }
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        Utc::now().timestamp_millis()
    }

    fn now_us(&self) -> i64 {
        Utc::now().timestamp_micros()
    }
}

/// A clock that only moves when told to. Cloning shares the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now_ms: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self::at_ms(start.timestamp_millis())
    }

    /// A clock standing at `ms` milliseconds since the epoch.
    pub fn at_ms(ms: i64) -> Self {
        Self {
            now_ms: Arc::new(AtomicI64::new(ms)),
        }
    }

    /// Moves the clock forward (or backward, with a negative value) by `ms` milliseconds.
    pub fn advance_ms(&self, ms: i64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `ms` milliseconds since the epoch.
    pub fn set_ms(&self, ms: i64) {
        self.now_ms.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Waits until `clock` reads `at_ms`, to the microsecond: yielding to other tasks for up to
/// [`SPIN_LIMIT`] (tokio's timer wakes on whole milliseconds, so a timer set a little early and
/// this wait put a send on its millisecond), then, for a clock that does not move on its own,
/// sleeping a millisecond at a time. Returns at once when `at_ms` is past.
pub async fn reach(clock: &dyn Clock, at_ms: i64) {
    let at_us = at_ms.saturating_mul(1_000);
    let spin_until = std::time::Instant::now() + SPIN_LIMIT;
    while clock.now_us() < at_us {
        if std::time::Instant::now() < spin_until {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
}

/// How long [`reach`] yields before it sleeps instead.
pub const SPIN_LIMIT: std::time::Duration = std::time::Duration::from_millis(6);

/// Converts epoch milliseconds to a UTC instant, saturating at chrono's representable range.
pub fn ms_to_datetime(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::at_ms(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        let shared = clock.clone();
        shared.advance_ms(250);
        assert_eq!(clock.now_ms(), 1_250);
        clock.set_ms(10);
        assert_eq!(shared.now_ms(), 10);
    }

    #[tokio::test]
    async fn reach_returns_once_the_wall_clock_reads_the_millisecond() {
        let clock = SystemClock;
        let at = clock.now_ms() + 3;
        reach(&clock, at).await;
        let now_us = clock.now_us();
        assert!(
            now_us >= at * 1_000,
            "returned {} µs early",
            at * 1_000 - now_us
        );
        // A time already past returns at once.
        let started = std::time::Instant::now();
        reach(&clock, at - 1_000).await;
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
    }

    #[tokio::test]
    async fn reach_waits_for_a_manual_clock_past_its_spin_and_follows_it() {
        let clock = ManualClock::at_ms(1_000);
        let waiting = tokio::spawn({
            let clock = clock.clone();
            async move { reach(&clock, 1_005).await }
        });
        // Well past the spin: still waiting, the clock has not moved.
        tokio::time::sleep(SPIN_LIMIT * 4).await;
        assert!(
            !waiting.is_finished(),
            "returned before the clock read 1,005"
        );
        clock.advance_ms(5);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("reach follows the clock")
            .expect("the wait ends");
    }
}

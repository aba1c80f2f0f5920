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
}

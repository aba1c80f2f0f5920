//! Waiting on a condition with a deadline.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(20);

/// A condition did not hold within its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOut {
    /// The deadline that passed.
    pub after: Duration,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the condition did not hold within {:?}", self.after)
    }
}

impl std::error::Error for TimedOut {}

/// Polls `check` every 20 ms until it returns true; [`TimedOut`] once `timeout` has passed.
///
/// ```ignore
/// wait_until(Duration::from_secs(10), || async { runs(&store).await.len() == 3 })
///     .await
///     .expect("three runs");
/// ```
pub async fn wait_until<F, Fut>(timeout: Duration, mut check: F) -> Result<(), TimedOut>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(timeout, || {
        let held = check();
        async move { held.await.then_some(()) }
    })
    .await
}

/// Polls `check` every 20 ms until it returns a value; [`TimedOut`] once `timeout` has passed.
pub async fn wait_for<T, F, Fut>(timeout: Duration, mut check: F) -> Result<T, TimedOut>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(TimedOut { after: timeout });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// [`wait_until`] for code outside a runtime (a `Drop`, a blocking test): sleeps the thread
/// between polls.
pub fn wait_until_blocking(
    timeout: Duration,
    mut check: impl FnMut() -> bool,
) -> Result<(), TimedOut> {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(TimedOut { after: timeout });
        }
        std::thread::sleep(POLL);
    }
}

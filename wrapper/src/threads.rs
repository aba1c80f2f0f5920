//! OS threads for blocking handlers: one thread per running run, reused once the run is over.
//!
//! Each running run has a thread to itself, as with a fresh `std::thread::spawn`, but a thread
//! whose run finished waits a while for the next run instead of exiting. Creating and tearing
//! down a thread (stack mapping, guard page, unmapping) costs far more than handing a job to a
//! waiting one, and under bursts of runs that cost lands on the ack path.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Idle threads waiting for a run.
#[derive(Debug)]
pub(crate) struct ThreadCache {
    idle: Mutex<Vec<(u64, mpsc::Sender<Job>)>>,
    next_id: AtomicU64,
    keep_alive: Duration,
}

impl ThreadCache {
    pub(crate) fn new(keep_alive: Duration) -> Self {
        Self {
            idle: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            keep_alive,
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<(u64, mpsc::Sender<Job>)>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Number of threads waiting for work.
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.idle().len()
    }

    /// Runs `job` on a thread of its own: an idle one if there is one, else a new one. Returns
    /// once the job is handed over; fails only if no thread can be created.
    pub(crate) fn run(self: &Arc<Self>, job: Job) -> std::io::Result<()> {
        let mut job = job;
        loop {
            let Some((_, sender)) = self.idle().pop() else {
                break;
            };
            match sender.send(job) {
                Ok(()) => return Ok(()),
                // That thread has just exited; take the job back and try the next one.
                Err(mpsc::SendError(returned)) => job = returned,
            }
        }
        let cache = self.clone();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        std::thread::Builder::new()
            .name("mthpt-run".to_owned())
            .spawn(move || cache.work(id, job))
            .map(|_| ())
    }

    fn work(self: Arc<Self>, id: u64, first: Job) {
        let (sender, receiver) = mpsc::channel::<Job>();
        let mut next = Some(first);
        while let Some(job) = next.take() {
            // Jobs catch their own panics; this keeps the thread usable whatever happens.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
            self.idle().push((id, sender.clone()));
            next = match receiver.recv_timeout(self.keep_alive) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => {
                    let mut idle = self.idle();
                    match idle.iter().position(|(i, _)| *i == id) {
                        Some(pos) => {
                            // Still listed: nobody can hand us a job any more. Leave.
                            idle.remove(pos);
                            None
                        }
                        None => {
                            // A caller took us off the list and is sending a job right now.
                            drop(idle);
                            receiver.recv().ok()
                        }
                    }
                }
                Err(RecvTimeoutError::Disconnected) => None,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Barrier;

    #[test]
    fn concurrent_jobs_each_get_their_own_thread() -> std::io::Result<()> {
        let cache = Arc::new(ThreadCache::new(Duration::from_secs(5)));
        let barrier = Arc::new(Barrier::new(9));
        let ids = Arc::new(Mutex::new(HashSet::new()));
        for _ in 0..8 {
            let (barrier, ids) = (barrier.clone(), ids.clone());
            cache.run(Box::new(move || {
                ids.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(std::thread::current().id());
                // All eight must run at once for the barrier to open.
                barrier.wait();
            }))?;
        }
        barrier.wait();
        assert_eq!(ids.lock().unwrap_or_else(PoisonError::into_inner).len(), 8);
        Ok(())
    }

    #[test]
    fn finished_threads_are_reused_then_retire() -> std::io::Result<()> {
        let cache = Arc::new(ThreadCache::new(Duration::from_millis(100)));
        let (tx, rx) = mpsc::channel();
        let first = tx.clone();
        cache.run(Box::new(move || {
            let _ = first.send(std::thread::current().id());
        }))?;
        let a = rx.recv_timeout(Duration::from_secs(5)).ok();
        // Wait until the thread is back in the idle list.
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while cache.idle_count() == 0 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        cache.run(Box::new(move || {
            let _ = tx.send(std::thread::current().id());
        }))?;
        let b = rx.recv_timeout(Duration::from_secs(5)).ok();
        assert!(a.is_some() && a == b, "the idle thread took the second job");
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while cache.idle_count() > 0 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            cache.idle_count(),
            0,
            "idle threads leave after the keep-alive"
        );
        Ok(())
    }
}

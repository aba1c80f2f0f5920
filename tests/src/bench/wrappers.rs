//! The executors of a benchmark: several wrapper instances in this process, each on its own
//! port, with a no-op handler (`noop`) and a handler that sleeps like a long business job
//! (`sleep`, params `{"ms": N}`). Every execution is counted by occurrence key, so an occurrence
//! that reached executors twice shows up as a duplicate.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use mthpt_wrapper::{RunContext, Wrapper};

use super::figures::ExecutionKey;
use crate::Tenancy;

/// The no-op handler's name.
pub const NOOP: &str = "noop";
/// The sleeping handler's name.
pub const SLEEP: &str = "sleep";

/// How often each occurrence key started on an executor.
#[derive(Debug, Clone, Default)]
pub struct Executions(Arc<Mutex<HashMap<ExecutionKey, u32>>>);

impl Executions {
    fn record(&self, ctx: &RunContext) {
        let key = (
            ctx.task_id(),
            ctx.scheduled_at().timestamp_millis(),
            ctx.attempt(),
            ctx.shard_index(),
        );
        *self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_default() += 1;
    }

    /// A copy of the counts so far.
    pub fn snapshot(&self) -> HashMap<ExecutionKey, u32> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Takes the counts of occurrences scheduled before `before` off the record (a long run
    /// judges its intervals one by one and need not keep them).
    pub fn take_before(&self, before: i64) -> HashMap<ExecutionKey, u32> {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (taken, kept) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|((_, at, _, _), _)| *at < before);
        *all = kept;
        taken
    }
}

/// The running wrapper instances.
pub struct BenchWrappers {
    instances: Vec<(Wrapper, actix_web::dev::ServerHandle)>,
    pub executions: Executions,
}

impl std::fmt::Debug for BenchWrappers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BenchWrappers")
            .field("instances", &self.instances.len())
            .finish()
    }
}

impl BenchWrappers {
    /// Starts `count` instances of the tenancy's app, each taking up to `capacity` runs at
    /// once, with its result spool under `spool_root`. Instance `i` calls the engines starting
    /// with engine `i`, so result callbacks spread over the nodes.
    pub fn start(
        tenancy: &Tenancy,
        engines: &[String],
        count: usize,
        capacity: u32,
        result_linger: Option<Duration>,
        spool_root: &Path,
    ) -> anyhow::Result<Self> {
        let executions = Executions::default();
        let mut instances = Vec::with_capacity(count);
        for i in 0..count {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let url = format!("http://{}", listener.local_addr()?);
            let mut order = engines.to_vec();
            if !order.is_empty() {
                let first = i % order.len();
                order.rotate_left(first);
            }
            let noop = executions.clone();
            let sleeper = executions.clone();
            let mut builder =
                Wrapper::builder(tenancy.key.clone(), tenancy.secret.clone().into_bytes());
            if let Some(linger) = result_linger {
                builder = builder.result_linger(linger);
            }
            let wrapper = builder
                .engine_urls(order)
                .advertise_url(url)
                .instance_id(format!("bench-{i}"))
                .capacity(capacity)
                .spool_dir(spool_root.join(format!("wrapper-{i}")))
                .retry_backoff(Duration::from_millis(50), Duration::from_secs(1))
                .async_handler(NOOP, move |ctx| {
                    noop.record(&ctx);
                    async { Ok(serde_json::Value::Null) }
                })
                .blocking_handler(SLEEP, move |ctx| {
                    sleeper.record(&ctx);
                    let ms = ctx.params()["ms"].as_u64().unwrap_or(1_000);
                    ctx.sleep(Duration::from_millis(ms))?;
                    Ok(serde_json::Value::Null)
                })
                .build()
                .context("build a bench wrapper")?;
            let server = wrapper.http_server(listener)?;
            let handle = server.handle();
            tokio::spawn(server);
            instances.push((wrapper, handle));
        }
        Ok(Self {
            instances,
            executions,
        })
    }

    /// Waits until every instance is registered with an engine.
    pub async fn registered(&self, timeout: Duration) -> anyhow::Result<()> {
        crate::wait_until(timeout, "bench wrappers registered", || async {
            Ok(self.instances.iter().all(|(w, _)| w.is_registered()))
        })
        .await
    }

    /// Drains and stops every instance.
    pub async fn stop(self) {
        for (w, handle) in self.instances {
            w.shutdown(Duration::from_secs(1)).await;
            handle.stop(false).await;
        }
    }
}

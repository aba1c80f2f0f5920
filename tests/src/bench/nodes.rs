//! Engine nodes as separate processes (`mthpt engine …`), and what `/proc` says about their
//! CPU time and memory.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Engine settings the harness passes to every node (`mthpt engine` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineTuning {
    pub poll_interval_ms: i64,
    pub horizon_ms: i64,
    pub lease_ms: i64,
    pub claim_batch: i64,
    pub max_in_flight: usize,
    pub dispatch_coalesce_ms: i64,
    pub start_write_delay_ms: i64,
    pub executor_heartbeat_ms: u64,
    pub executor_timeout_ms: i64,
    pub node_timeout_ms: i64,
}

impl Default for EngineTuning {
    fn default() -> Self {
        Self {
            poll_interval_ms: 250,
            horizon_ms: 500,
            lease_ms: 2_000,
            claim_batch: 1_000,
            max_in_flight: 256,
            dispatch_coalesce_ms: 0,
            start_write_delay_ms: mthpt_engine::dispatcher::DispatchConfig::default()
                .start_write_delay_ms,
            executor_heartbeat_ms: 1_000,
            executor_timeout_ms: 4_000,
            node_timeout_ms: 5_000,
        }
    }
}

/// CPU time and peak memory of a process, from `/proc`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcSample {
    /// User plus system CPU time, in microseconds.
    pub cpu_us: u64,
    /// Peak resident set size (`VmHWM`), in KiB.
    pub peak_rss_kib: u64,
}

/// Reads the CPU time and peak RSS of process `pid`.
pub fn sample(pid: u32) -> anyhow::Result<ProcSample> {
    let cpu_us = super::cost::process_cpu_us(pid)?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let peak_rss_kib = parse_status_kib(&status, "VmHWM:").unwrap_or(0);
    Ok(ProcSample {
        cpu_us,
        peak_rss_kib,
    })
}

/// A `kB` line of `/proc/<pid>/status`.
fn parse_status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A free local TCP port (bound and released at once).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(mthpt_testkit::try_free_port()?)
}

/// A free local TCP port for a server stopped and started again on it
/// ([`mthpt_testkit::restartable_port`]).
pub fn restartable_port() -> anyhow::Result<u16> {
    Ok(mthpt_testkit::try_restartable_port()?)
}

/// One engine node process.
#[derive(Debug)]
pub struct NodeProcess {
    pub id: String,
    pub url: String,
    pub log: PathBuf,
    child: Child,
}

impl NodeProcess {
    /// Starts `mthpt engine` at `mthpt` for `database_url`, logging to `<log_dir>/<id>.log`.
    pub fn spawn(
        mthpt: &Path,
        id: &str,
        database_url: &str,
        tuning: &EngineTuning,
        log_dir: &Path,
    ) -> anyhow::Result<Self> {
        let port = free_port()?;
        let log = log_dir.join(format!("{id}.log"));
        let out = File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(mthpt)
            .arg("engine")
            .args(["--database-url", database_url])
            .args(["--groups", "default"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--node-id", id])
            .args(["--poll-interval-ms", &tuning.poll_interval_ms.to_string()])
            .args(["--horizon-ms", &tuning.horizon_ms.to_string()])
            .args(["--lease-ms", &tuning.lease_ms.to_string()])
            .args(["--claim-batch", &tuning.claim_batch.to_string()])
            .args(["--max-in-flight", &tuning.max_in_flight.to_string()])
            .args([
                "--dispatch-coalesce-ms",
                &tuning.dispatch_coalesce_ms.to_string(),
            ])
            .args([
                "--start-write-delay-ms",
                &tuning.start_write_delay_ms.to_string(),
            ])
            .args([
                "--executor-heartbeat-ms",
                &tuning.executor_heartbeat_ms.to_string(),
            ])
            .args([
                "--executor-timeout-ms",
                &tuning.executor_timeout_ms.to_string(),
            ])
            .args(["--node-timeout-ms", &tuning.node_timeout_ms.to_string()])
            .env(
                "RUST_LOG",
                std::env::var("MTHPT_BENCH_NODE_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .with_context(|| format!("start {}", mthpt.display()))?;
        Ok(Self {
            id: id.to_owned(),
            url: format!("http://127.0.0.1:{port}"),
            log,
            child,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the node answers on `/health`, failing when it exits or takes too long.
    pub async fn ready(&mut self, http: &reqwest::Client, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "engine node {} exited with {status} while starting; see {}",
                    self.id,
                    self.log.display()
                );
            }
            if let Ok(resp) = http.get(format!("{}/health", self.url)).send().await
                && resp.status().is_success()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "engine node {} did not answer within {timeout:?}; see {}",
                    self.id,
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// CPU time and peak RSS now.
    pub fn sample(&self) -> anyhow::Result<ProcSample> {
        sample(self.pid())
    }

    /// SIGKILL: the node dies at once, holding whatever it had claimed.
    pub fn kill_hard(&mut self) -> anyhow::Result<()> {
        self.child.kill().context("SIGKILL engine node")?;
        self.child.wait()?;
        Ok(())
    }

    /// SIGTERM and wait for the graceful shutdown (SIGKILL after `grace`).
    pub async fn stop(mut self, grace: Duration) -> anyhow::Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = Pid::from_raw(i32::try_from(self.pid()).context("pid out of range")?);
        kill(pid, Signal::SIGTERM).context("SIGTERM engine node")?;
        let deadline = tokio::time::Instant::now() + grace;
        while self.child.try_wait()?.is_none() {
            if tokio::time::Instant::now() >= deadline {
                eprintln!(
                    "engine node {} did not stop in {grace:?}; killing it",
                    self.id
                );
                return self.kill_hard();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        // Never leave a node running behind a failed benchmark.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Where the `mthpt` binary is by default: next to the running executable.
pub fn default_mthpt() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locate the running executable")?;
    Ok(exe.with_file_name("mthpt"))
}

/// Checks that `path` is an executable file, naming how to build it otherwise.
pub fn check_mthpt(path: &Path) -> anyhow::Result<()> {
    if !path.is_file() {
        bail!(
            "the engine binary {} does not exist: build it with `cargo build --release -p mthpt-console` \
             (it is expected next to mthpt-bench) or name it with --mthpt PATH",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_read_from_vm_hwm() {
        let status = "Name:\tmthpt\nVmPeak:\t  900 kB\nVmHWM:\t   51200 kB\nVmRSS:\t 40000 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM:"), Some(51_200));
        assert_eq!(parse_status_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample(std::process::id()).unwrap();
        assert!(s.peak_rss_kib > 0);
    }
}

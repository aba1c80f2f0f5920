//! The faults: what each kind does to the cluster, and the loop that injects a scenario's faults
//! through the measured window, each target in rotation.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use super::analysis::Fault;
use super::cluster::Cluster;
use super::handler_log::HandlerLog;
use super::postgres::OwnPostgres;
use super::{ChaosConfig, ms, now_ms, progress, sleep_until_ms};

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    EngineKill,
    EnginePause,
    WrapperKill,
    PgRestart,
    PartitionDb,
    PartitionWrapper,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::EngineKill => "engine-kill",
            FaultKind::EnginePause => "engine-pause",
            FaultKind::WrapperKill => "wrapper-kill",
            FaultKind::PgRestart => "pg-restart",
            FaultKind::PartitionDb => "partition-db",
            FaultKind::PartitionWrapper => "partition-wrapper",
        }
    }
}

/// Injects the scenario's faults through the window.
pub struct Injector<'a> {
    pub config: &'a ChaosConfig,
    pub cluster: &'a mut Cluster,
    pub pg: &'a mut OwnPostgres,
    pub http: &'a reqwest::Client,
    pub handler_log: &'a Path,
    /// Wrapper pids killed, and when.
    pub killed_wrappers: HashMap<i64, i64>,
    /// Wrapper pids cut off from every engine, and from when until when.
    pub cut_off_wrappers: HashMap<i64, Vec<(i64, i64)>>,
    /// Faults of each kind so far (the next target).
    rotation: HashMap<&'static str, usize>,
}

impl std::fmt::Debug for Injector<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injector").finish_non_exhaustive()
    }
}

impl<'a> Injector<'a> {
    /// An injector for `config`'s scenario on this cluster.
    pub fn new(
        config: &'a ChaosConfig,
        cluster: &'a mut Cluster,
        pg: &'a mut OwnPostgres,
        http: &'a reqwest::Client,
        handler_log: &'a Path,
    ) -> Self {
        Self {
            config,
            cluster,
            pg,
            http,
            handler_log,
            killed_wrappers: HashMap::new(),
            cut_off_wrappers: HashMap::new(),
            rotation: HashMap::new(),
        }
    }

    /// How long a fault of `kind` lasts, roughly.
    fn length(&self, kind: FaultKind) -> i64 {
        match kind {
            FaultKind::EnginePause | FaultKind::PartitionDb | FaultKind::PartitionWrapper => {
                ms(self.config.fault_length)
            }
            // Down, then about a second to start again.
            _ => ms(self.config.down_for) + 1_000,
        }
    }

    pub async fn inject_until(&mut self, from: i64, until: i64) -> anyhow::Result<Vec<Fault>> {
        let kinds = self.config.scenario.kinds();
        let mut faults = Vec::new();
        let mut next = from + 5_000;
        let mut k = 0;
        loop {
            let kind = kinds[k % kinds.len()];
            // Every fault ends early enough to watch the lateness after it inside the window.
            if next + self.length(kind) + ms(self.config.after_fault) > until {
                return Ok(faults);
            }
            sleep_until_ms(next).await;
            let fault = self.inject(kind).await?;
            progress(format_args!(
                "{} {} from {} to {}",
                fault.kind, fault.target, fault.start_ms, fault.end_ms
            ));
            next = (next + ms(self.config.fault_every)).max(fault.end_ms + 2_000);
            faults.push(fault);
            k += 1;
        }
    }

    fn next_target(&mut self, kind: FaultKind, of: usize) -> usize {
        let n = self.rotation.entry(kind.name()).or_default();
        let target = *n % of.max(1);
        *n += 1;
        target
    }

    async fn inject(&mut self, kind: FaultKind) -> anyhow::Result<Fault> {
        let mut fault = Fault {
            kind: kind.name().to_owned(),
            target: String::new(),
            start_ms: now_ms(),
            end_ms: 0,
            scripts_in_flight: None,
        };
        let down = self.config.down_for;
        let length = self.config.fault_length;
        match kind {
            FaultKind::EngineKill => {
                let i = self.next_target(kind, self.cluster.engines.len());
                let engine = &mut self.cluster.engines[i];
                fault.target = engine.node_id();
                engine.proc.kill9()?;
                tokio::time::sleep(down).await;
                engine.start(self.http, Duration::from_secs(60)).await?;
            }
            FaultKind::EnginePause => {
                let i = self.next_target(kind, self.cluster.engines.len());
                let engine = &self.cluster.engines[i];
                fault.target = engine.node_id();
                engine.proc.pause()?;
                tokio::time::sleep(length).await;
                engine.proc.resume()?;
            }
            FaultKind::WrapperKill => {
                let j = self.next_target(kind, self.cluster.wrappers.len());
                let wrapper = &mut self.cluster.wrappers[j];
                fault.target = wrapper.proc.name.clone();
                let pid = i64::from(wrapper.proc.pid().unwrap_or(0));
                wrapper.proc.kill9()?;
                fault.start_ms = now_ms();
                self.killed_wrappers.insert(pid, fault.start_ms);
                fault.scripts_in_flight =
                    Some(HandlerLog::read(self.handler_log)?.in_flight_on(pid));
                tokio::time::sleep(down).await;
                wrapper.proc.spawn(&[])?;
            }
            FaultKind::PgRestart => {
                fault.target = format!("postgres:{}", self.pg.port());
                self.pg.stop().await?;
                tokio::time::sleep(down).await;
                self.pg.start().await?;
            }
            FaultKind::PartitionDb => {
                let i = self.next_target(kind, self.cluster.engines.len());
                let engine = &self.cluster.engines[i];
                fault.target = format!("{}<->postgres", engine.node_id());
                engine.db_proxy.cut(self.config.cut);
                tokio::time::sleep(length).await;
                engine.db_proxy.heal();
            }
            FaultKind::PartitionWrapper => {
                let j = self.next_target(kind, self.cluster.wrappers.len());
                let wrapper = &self.cluster.wrappers[j];
                fault.target = format!("{}<->engines", wrapper.proc.name);
                wrapper.inbound.cut(self.config.cut);
                for p in &wrapper.outbound {
                    p.cut(self.config.cut);
                }
                tokio::time::sleep(length).await;
                wrapper.inbound.heal();
                for p in &wrapper.outbound {
                    p.heal();
                }
                let pid = i64::from(wrapper.proc.pid().unwrap_or(0));
                self.cut_off_wrappers
                    .entry(pid)
                    .or_default()
                    .push((fault.start_ms, now_ms()));
            }
        }
        fault.end_ms = now_ms();
        Ok(fault)
    }
}

//! The faults: what each kind does to the cluster, and the loop that injects a scenario's faults
//! through the measured window, each target in rotation.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use super::analysis::Fault;
use super::cluster::Cluster;
use super::failover::FailoverTimes;
use super::handler_log::HandlerLog;
use super::patroni::{self, PatroniCluster};
use super::{ChaosConfig, ChaosDb, ms, now_ms, progress, sleep_until_ms};

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    EngineKill,
    EnginePause,
    WrapperKill,
    PgRestart,
    PartitionDb,
    PartitionWrapper,
    /// The Patroni primary's machine dies: Patroni and PostgreSQL SIGKILLed, its links silent;
    /// it comes back after the down time and rejoins as a replica.
    PgFailover,
    /// The Patroni primary is cut off from clients, the other nodes and etcd, processes alive.
    PgPartition,
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
            FaultKind::PgFailover => "pg-failover",
            FaultKind::PgPartition => "pg-partition",
        }
    }
}

/// Injects the scenario's faults through the window.
pub struct Injector<'a> {
    pub config: &'a ChaosConfig,
    pub cluster: &'a mut Cluster,
    pub db: &'a mut ChaosDb,
    pub http: &'a reqwest::Client,
    pub handler_log: &'a Path,
    /// Wrapper pids killed, and when.
    pub killed_wrappers: HashMap<i64, i64>,
    /// Wrapper pids cut off from every engine, and from when until when.
    pub cut_off_wrappers: HashMap<i64, Vec<(i64, i64)>>,
    /// What each PostgreSQL failover looked like.
    pub failovers: Vec<FailoverTimes>,
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
        db: &'a mut ChaosDb,
        http: &'a reqwest::Client,
        handler_log: &'a Path,
    ) -> Self {
        Self {
            config,
            cluster,
            db,
            failovers: Vec::new(),
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
            // Down, then the node rejoins as a replica (a rewind, a restart: about 15 s).
            FaultKind::PgFailover => ms(self.config.down_for) + REJOIN_MS,
            FaultKind::PgPartition => ms(self.config.fault_length) + REJOIN_MS,
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
                let pg = match self.db {
                    ChaosDb::Own(pg) => pg,
                    ChaosDb::Patroni(_) => {
                        anyhow::bail!("pg-restart needs the suite's own PostgreSQL")
                    }
                };
                fault.target = format!("postgres:{}", pg.port());
                pg.stop().await?;
                tokio::time::sleep(down).await;
                pg.start().await?;
            }
            FaultKind::PgFailover | FaultKind::PgPartition => {
                let ChaosDb::Patroni(cluster) = &mut *self.db else {
                    anyhow::bail!("{} needs the Patroni cluster", kind.name());
                };
                let times = lose_primary(kind, cluster, self.config, &mut fault).await?;
                self.failovers.push(times);
            }
            FaultKind::PartitionDb => {
                let i = self.next_target(kind, self.cluster.engines.len());
                let engine = &self.cluster.engines[i];
                fault.target = format!("{}<->postgres", engine.node_id());
                let proxy = engine
                    .db_proxy
                    .as_ref()
                    .context("this engine reaches PostgreSQL without a proxy of the suite")?;
                proxy.cut(self.config.cut);
                tokio::time::sleep(length).await;
                proxy.heal();
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

/// A rewind and a restart of the old primary as a replica take about this long.
const REJOIN_MS: i64 = 15_000;

/// How long Patroni may take to promote a replica, or to bring every node back.
const PATRONI_WAIT: Duration = Duration::from_secs(90);

/// Kills (`pg-failover`) or cuts off (`pg-partition`) the Patroni primary, watches the others
/// promote a replica, brings the old primary back after the down time (or heals the cut after
/// the fault length) and waits until it runs as a replica, with a synchronous standby again.
async fn lose_primary(
    kind: FaultKind,
    cluster: &mut PatroniCluster,
    config: &ChaosConfig,
    fault: &mut super::analysis::Fault,
) -> anyhow::Result<FailoverTimes> {
    let all = cluster.all();
    let old = cluster
        .leader_seen_by(&all)
        .await
        .context("Patroni names no running primary to lose")?;
    let name = cluster.nodes[old].name.clone();
    let others: Vec<usize> = all.iter().copied().filter(|&i| i != old).collect();
    fault.start_ms = now_ms();
    let lasts = match kind {
        FaultKind::PgFailover => {
            fault.target = name.clone();
            // A dead machine neither answers nor resets: its links go silent (`--cut drop`:
            // refused, as when only its processes died).
            cluster.nodes[old].kill9();
            cluster.nodes[old].cut(config.cut);
            config.down_for
        }
        _ => {
            fault.target = format!("{name}<->all");
            cluster.nodes[old].cut(config.cut);
            config.fault_length
        }
    };
    let back_at = fault.start_ms + ms(lasts);
    // Seen by the others: the cut-off primary's own view is stale.
    let promoted = cluster
        .wait_until_seen_by(&others, "new primary", PATRONI_WAIT, |m| {
            m.iter()
                .any(|m| m.role == "leader" && m.name != name && m.state == "running")
        })
        .await;
    let (new_primary, promoted_ms) = match promoted {
        Ok(at) => {
            let leader = cluster.leader_seen_by(&others).await;
            (leader.map(|i| cluster.nodes[i].name.clone()), Some(at))
        }
        Err(e) => {
            progress(format_args!("{e:#}"));
            (None, None)
        }
    };
    progress(format_args!(
        "{} lost at {}, {} promoted {} ms later",
        name,
        fault.start_ms,
        new_primary.as_deref().unwrap_or("nothing"),
        promoted_ms.map_or(-1, |at| at - fault.start_ms)
    ));
    sleep_until_ms(back_at).await;
    cluster.nodes[old].heal();
    if kind == FaultKind::PgFailover {
        cluster.start_node(old)?;
    }
    let n = cluster.nodes.len();
    let rejoined_ms = cluster
        .wait_until_seen_by(&all, "old primary back as a replica", PATRONI_WAIT, |m| {
            patroni::healthy(m, n)
        })
        .await?;
    Ok(FailoverTimes {
        kind: kind.name().to_owned(),
        primary: name,
        lost_ms: fault.start_ms,
        new_primary,
        promoted_ms,
        rejoined_ms: Some(rejoined_ms),
    })
}

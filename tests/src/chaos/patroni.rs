//! A highly available PostgreSQL of the suite's own: one etcd member and three PostgreSQL
//! instances under Patroni, all on loopback ports, data in the run's work directory, so the
//! `pg-failover` and `pg-partition` scenarios can kill or cut off the primary and watch Patroni
//! promote a replica. The shared server of the machine is never touched.
//!
//! Every way into a node goes through a [`Proxy`] of the suite, so a node can be cut off the
//! network without iptables: clients and the other nodes' replication reach its PostgreSQL
//! through one proxy (Patroni advertises the proxy's port as the node's address), the other
//! Patronis reach its REST API through a second, and it reaches etcd through a third. The suite
//! itself watches every Patroni's REST API on its real port, as an observer outside the network.
//!
//! Everything is killed (SIGKILL) when this value is dropped: a failed or interrupted run
//! leaves no process behind.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Deserialize;
use sqlx::{Connection, PgConnection};

use super::proxy::{Cut, Proxy};
use super::{now_ms, progress};
use crate::bench::nodes::restartable_port;

/// The database, role and password the engines, the console and the suite use.
pub const DATABASE: &str = "mthpt";
pub const ROLE: &str = "mthpt";
const PASSWORD: &str = "mthpt";

/// Patroni's leader key lives this long without being renewed (seconds).
pub const TTL_S: u64 = 10;
/// Patroni's loop: how often each node looks at the cluster and renews its key (seconds).
pub const LOOP_WAIT_S: u64 = 1;
/// How long Patroni retries etcd and PostgreSQL before it gives up on them (seconds):
/// `loop_wait + 2 × retry_timeout ≤ ttl`, so a leader cut off from etcd demotes itself
/// before its key can expire and another node take over.
pub const RETRY_TIMEOUT_S: u64 = 4;

/// The Debian packages the Patroni scenarios need, with the program each provides.
const PACKAGES: [(&str, &str); 2] = [("patroni", "patroni"), ("etcd", "etcd-server")];

/// The programs the scenarios run, found on `PATH`.
#[derive(Debug, Clone)]
pub struct Programs {
    pub patroni: PathBuf,
    pub etcd: PathBuf,
}

/// Finds `patroni` and `etcd`, and checks `pg_bin` has what Patroni runs (`initdb`, `pg_ctl`,
/// `pg_rewind`), failing with the Debian packages to install when something is missing.
pub fn programs(pg_bin: &Path) -> anyhow::Result<Programs> {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for (program, package) in PACKAGES {
        match which(program) {
            Some(path) => found.push(path),
            None => missing.push(package),
        }
    }
    if !missing.is_empty() {
        bail!(
            "the PostgreSQL failover scenarios need the Debian package(s) {0}: \
             apt-get install {0} (scripts/test.sh installs them when run as root)",
            missing.join(" ")
        );
    }
    for tool in ["initdb", "pg_ctl", "pg_rewind"] {
        if !pg_bin.join(tool).is_file() {
            bail!(
                "{} has no {tool}: install Debian's postgresql or pass --pg-bin",
                pg_bin.display()
            );
        }
    }
    let etcd = found.pop().unwrap_or_default();
    let patroni = found.pop().unwrap_or_default();
    Ok(Programs { patroni, etcd })
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// One member as Patroni's `GET /cluster` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Member {
    pub name: String,
    /// `leader`, `sync_standby`, `replica`, …
    pub role: String,
    /// `running`, `streaming`, `starting`, `stopped`, …
    pub state: String,
}

impl Member {
    fn is_running(&self) -> bool {
        matches!(self.state.as_str(), "running" | "streaming")
    }
}

#[derive(Debug, Deserialize)]
struct ClusterView {
    members: Vec<Member>,
}

/// One PostgreSQL instance under Patroni, and the proxies in front of it.
#[derive(Debug)]
pub struct Node {
    pub name: String,
    /// PostgreSQL's own port; nothing but the proxy connects to it.
    pub pg_port: u16,
    /// Patroni's REST API, watched by the suite.
    pub rest_port: u16,
    /// Clients and replicas reach this node's PostgreSQL here.
    pub pg_proxy: Proxy,
    /// The other Patronis reach this node's REST API here.
    pub rest_proxy: Proxy,
    /// This node's Patroni reaches etcd here.
    pub etcd_proxy: Proxy,
    config: PathBuf,
    data: PathBuf,
    log: PathBuf,
    patroni: Option<Child>,
}

impl Node {
    /// The address clients use for this node (its proxy).
    pub fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.pg_proxy.port)
    }

    /// Cuts every link into and out of this node.
    pub fn cut(&self, cut: Cut) {
        for p in [&self.pg_proxy, &self.rest_proxy, &self.etcd_proxy] {
            p.cut(cut);
        }
    }

    /// Heals what [`Node::cut`] cut.
    pub fn heal(&self) {
        for p in [&self.pg_proxy, &self.rest_proxy, &self.etcd_proxy] {
            p.heal();
        }
    }

    /// The postmaster's process id, from its pid file, if that process still runs this
    /// node's data directory (a stale file may name a reused pid).
    fn postmaster(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        let pid: i32 = text.lines().next()?.trim().parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let data = self.data.display().to_string();
        String::from_utf8_lossy(&cmdline)
            .contains(&data)
            .then_some(pid)
    }

    /// SIGKILL to Patroni's process group and to the postmaster's (its backends, walsenders
    /// and walreceiver, in the session Patroni started it in), as when the machine loses
    /// power: nothing is shut down, nothing is written.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.patroni.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                // Patroni was started in a process group of its own.
                let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(pid) = self.postmaster() {
            let own = nix::unistd::getpgrp();
            match nix::unistd::getpgid(Some(Pid::from_raw(pid))) {
                Ok(group) if group != own && group.as_raw() > 1 => {
                    let _ = kill(Pid::from_raw(-group.as_raw()), Signal::SIGKILL);
                }
                _ => {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
        }
    }

    /// The last `lines` lines of Patroni's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The etcd member, the three nodes, and how to start them again.
#[derive(Debug)]
pub struct PatroniCluster {
    pub nodes: Vec<Node>,
    programs: Programs,
    etcd: Option<Child>,
    /// uid and gid of `postgres` when running as root (PostgreSQL refuses to run as root).
    run_as: Option<(u32, u32)>,
    http: reqwest::Client,
}

impl Drop for PatroniCluster {
    fn drop(&mut self) {
        // Nodes first: a Patroni that loses etcd keeps retrying instead of exiting.
        for node in &mut self.nodes {
            node.kill9();
        }
        if let Some(mut etcd) = self.etcd.take() {
            let _ = etcd.kill();
            let _ = etcd.wait();
        }
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

impl PatroniCluster {
    /// Starts etcd and three Patroni nodes under `dir`, waits for a leader, a synchronous
    /// standby and a replica, and creates the role and database of the suite.
    pub async fn create(
        programs: Programs,
        pg_bin: &Path,
        dir: &Path,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let run_as = if super::postgres::running_as_root() {
            let ids = postgres_ids()?;
            let mut chown = Command::new("chown");
            chown.args(["-R", &format!("{}:{}", ids.0, ids.1)]).arg(dir);
            super::postgres::run(&mut chown).context("hand the cluster directory to postgres")?;
            Some(ids)
        } else {
            None
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()?;
        let etcd_port = restartable_port()?;
        let etcd_peer_port = restartable_port()?;
        let mut cluster = Self {
            nodes: Vec::new(),
            programs,
            etcd: None,
            run_as,
            http,
        };
        cluster.start_etcd(dir, etcd_port, etcd_peer_port)?;
        cluster.wait_for_etcd(etcd_port, timeout).await?;
        for i in 0..3 {
            let pg_port = restartable_port()?;
            let rest_port = restartable_port()?;
            let node_dir = dir.join(format!("node{i}"));
            std::fs::create_dir_all(&node_dir)?;
            let node = Node {
                name: format!("pg{i}"),
                pg_port,
                rest_port,
                pg_proxy: Proxy::start(loopback(pg_port)).await?,
                rest_proxy: Proxy::start(loopback(rest_port)).await?,
                etcd_proxy: Proxy::start(loopback(etcd_port)).await?,
                config: node_dir.join("patroni.yml"),
                data: node_dir.join("data"),
                log: dir.join(format!("patroni-{i}.log")),
                patroni: None,
            };
            std::fs::write(&node.config, config_yaml(&node, pg_bin, &node_dir))?;
            cluster.nodes.push(node);
        }
        if let Some((uid, gid)) = run_as {
            let mut chown = Command::new("chown");
            chown.args(["-R", &format!("{uid}:{gid}")]).arg(dir);
            super::postgres::run(&mut chown)?;
        }
        // The first node bootstraps alone (the others would race it for the initialize key
        // and lose), then the others clone it.
        cluster.start_node(0)?;
        cluster
            .wait_until("a leader", timeout, |m| {
                m.iter().any(|m| m.role == "leader" && m.is_running())
            })
            .await?;
        for i in 1..cluster.nodes.len() {
            cluster.start_node(i)?;
        }
        cluster.wait_healthy(timeout).await?;
        cluster.create_database().await?;
        Ok(cluster)
    }

    fn start_etcd(&mut self, dir: &Path, port: u16, peer_port: u16) -> anyhow::Result<()> {
        let log = dir.join("etcd.log");
        let out = File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let client = format!("http://127.0.0.1:{port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let child = Command::new(&self.programs.etcd)
            .arg("--name=chaos")
            .arg(format!("--data-dir={}", dir.join("etcd").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=chaos={peer}"))
            .arg("--enable-v2=false")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()
            .with_context(|| format!("start {}", self.programs.etcd.display()))?;
        self.etcd = Some(child);
        Ok(())
    }

    async fn wait_for_etcd(&mut self, port: u16, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(Ok(Some(status))) = self.etcd.as_mut().map(Child::try_wait) {
                bail!("etcd exited with {status} while starting");
            }
            let url = format!("http://127.0.0.1:{port}/health");
            if let Ok(resp) = self.http.get(url).send().await
                && resp.status().is_success()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("etcd did not answer within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts node `i`'s Patroni (again); it starts PostgreSQL itself, as a replica when
    /// another node holds the leader key (rewinding its data first if it diverged).
    pub fn start_node(&mut self, i: usize) -> anyhow::Result<()> {
        use std::os::unix::process::CommandExt;
        let node = &mut self.nodes[i];
        let out = File::options()
            .create(true)
            .append(true)
            .open(&node.log)
            .with_context(|| format!("open {}", node.log.display()))?;
        let mut c = Command::new(&self.programs.patroni);
        c.arg(&node.config)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C.UTF-8")
            .current_dir(node.config.parent().unwrap_or(Path::new("/")))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out));
        if let Some((uid, gid)) = self.run_as {
            c.uid(uid)
                .gid(gid)
                .env("HOME", node.config.parent().unwrap_or(Path::new("/")));
        }
        node.patroni = Some(c.spawn().with_context(|| {
            format!(
                "start {} for {}",
                self.programs.patroni.display(),
                node.name
            )
        })?);
        Ok(())
    }

    /// The members as the first node of `from` whose Patroni answers lists them.
    pub async fn members_seen_by(&self, from: &[usize]) -> Option<Vec<Member>> {
        for &i in from {
            let url = format!("http://127.0.0.1:{}/cluster", self.nodes[i].rest_port);
            let Ok(resp) = self.http.get(url).send().await else {
                continue;
            };
            if let Ok(view) = resp.json::<ClusterView>().await {
                return Some(view.members);
            }
        }
        None
    }

    /// Every node's index.
    pub fn all(&self) -> Vec<usize> {
        (0..self.nodes.len()).collect()
    }

    /// The index of the node `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The running leader as the nodes of `from` see it.
    pub async fn leader_seen_by(&self, from: &[usize]) -> Option<usize> {
        let members = self.members_seen_by(from).await?;
        let leader = members
            .iter()
            .find(|m| m.role == "leader" && m.is_running())?;
        self.index_of(&leader.name)
    }

    /// Polls the nodes of `from` every 100 ms until their view satisfies `ok` (as seen by
    /// the first that answers), for at most `timeout`; returns when it did (epoch ms).
    pub async fn wait_until_seen_by(
        &self,
        from: &[usize],
        what: &str,
        timeout: Duration,
        ok: impl Fn(&[Member]) -> bool,
    ) -> anyhow::Result<i64> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(members) = self.members_seen_by(from).await
                && ok(&members)
            {
                return Ok(now_ms());
            }
            if tokio::time::Instant::now() >= deadline {
                let seen = self.members_seen_by(from).await;
                let tails: Vec<String> = from
                    .iter()
                    .map(|&i| {
                        let n = &self.nodes[i];
                        format!("{} ({}):\n{}", n.name, n.log.display(), n.log_tail(8))
                    })
                    .collect();
                bail!(
                    "Patroni: no {what} within {timeout:?} (members: {seen:?})\n{}",
                    tails.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&[Member]) -> bool,
    ) -> anyhow::Result<i64> {
        self.wait_until_seen_by(&self.all(), what, timeout, ok)
            .await
    }

    /// Waits until every node runs: a leader, a synchronous standby and a replica.
    pub async fn wait_healthy(&self, timeout: Duration) -> anyhow::Result<i64> {
        let n = self.nodes.len();
        self.wait_until(
            "leader with a synchronous standby and every replica running",
            timeout,
            |m| healthy(m, n),
        )
        .await
    }

    async fn create_database(&self) -> anyhow::Result<()> {
        let leader = self
            .leader_seen_by(&self.all())
            .await
            .context("no Patroni leader to create the database on")?;
        let url = format!(
            "postgres://postgres@{}/postgres?sslmode=disable",
            self.nodes[leader].client_addr()
        );
        let mut admin = PgConnection::connect(&url)
            .await
            .context("connect to the Patroni leader")?;
        for sql in [
            format!("CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'"),
            format!("CREATE DATABASE {DATABASE} OWNER {ROLE}"),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut admin)
                .await?;
        }
        admin.close().await?;
        progress(format_args!(
            "Patroni cluster up: leader {}, PostgreSQL at {}",
            self.nodes[leader].name,
            self.hosts()
        ));
        Ok(())
    }

    /// `host:port` of every node, comma-separated, as a libpq host list has them.
    pub fn hosts(&self) -> String {
        self.nodes
            .iter()
            .map(Node::client_addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The libpq multi-host URL of the three nodes, for a client that must reach the
    /// primary wherever it is.
    pub fn url(&self) -> String {
        format!(
            "postgres://{ROLE}:{PASSWORD}@{}/{DATABASE}?target_session_attrs=read-write&sslmode=disable",
            self.hosts()
        )
    }

    /// The URL of node `i` alone.
    pub fn url_of(&self, i: usize) -> String {
        format!(
            "postgres://{ROLE}:{PASSWORD}@{}/{DATABASE}?sslmode=disable",
            self.nodes[i].client_addr()
        )
    }
}

/// Whether `members` are `n` running nodes: a leader, a synchronous standby, replicas.
pub fn healthy(members: &[Member], n: usize) -> bool {
    members.len() == n
        && members.iter().all(Member::is_running)
        && members.iter().filter(|m| m.role == "leader").count() == 1
        && members.iter().any(|m| m.role == "sync_standby")
}

/// uid and gid of user `postgres`.
fn postgres_ids() -> anyhow::Result<(u32, u32)> {
    let id = |flag: &str| -> anyhow::Result<u32> {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .context("run id")?;
        if !out.status.success() {
            bail!("no user postgres (install Debian's postgresql)");
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
    };
    Ok((id("-u")?, id("-g")?))
}

/// Patroni's configuration of `node`: loopback addresses (the proxies' ports advertised),
/// trust on 127.0.0.1, synchronous replication, timings for a fast failover.
fn config_yaml(node: &Node, pg_bin: &Path, dir: &Path) -> String {
    format!(
        r#"scope: mthpt-chaos
name: {name}
log:
  level: INFO
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest_proxy}
etcd3:
  hosts: ["127.0.0.1:{etcd_proxy}"]
  use_proxies: true
bootstrap:
  dcs:
    ttl: {TTL_S}
    loop_wait: {LOOP_WAIT_S}
    retry_timeout: {RETRY_TIMEOUT_S}
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      remove_data_directory_on_rewind_failure: true
      remove_data_directory_on_diverged_timelines: true
      parameters:
        max_connections: 300
        wal_log_hints: "on"
        wal_keep_size: 256MB
  initdb:
    - encoding: UTF8
    - auth: trust
    - no-sync
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg_proxy}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {dir}/pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: {dir}
"#,
        name = node.name,
        rest = node.rest_port,
        rest_proxy = node.rest_proxy.port,
        etcd_proxy = node.etcd_proxy.port,
        pg = node.pg_port,
        pg_proxy = node.pg_proxy.port,
        data = node.data.display(),
        bin = pg_bin.display(),
        dir = dir.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, role: &str, state: &str) -> Member {
        Member {
            name: name.to_owned(),
            role: role.to_owned(),
            state: state.to_owned(),
        }
    }

    #[test]
    fn healthy_needs_one_leader_a_sync_standby_and_every_node_running() {
        let ok = [
            member("pg0", "leader", "running"),
            member("pg1", "sync_standby", "streaming"),
            member("pg2", "replica", "running"),
        ];
        assert!(healthy(&ok, 3));
        assert!(!healthy(&ok[..2], 3), "a node missing");
        let no_sync = [
            member("pg0", "leader", "running"),
            member("pg1", "replica", "running"),
            member("pg2", "replica", "running"),
        ];
        assert!(!healthy(&no_sync, 3));
        let starting = [
            member("pg0", "leader", "running"),
            member("pg1", "sync_standby", "running"),
            member("pg2", "replica", "starting"),
        ];
        assert!(!healthy(&starting, 3));
    }

    #[test]
    fn cluster_view_reads_patronis_answer() {
        let json = r#"{"members": [{"name": "pg1", "role": "leader", "state": "running",
            "api_url": "http://127.0.0.1:1/patroni", "host": "127.0.0.1", "port": 2,
            "timeline": 2}], "scope": "x"}"#;
        let view: ClusterView = serde_json::from_str(json).unwrap();
        assert_eq!(view.members, vec![member("pg1", "leader", "running")]);
    }
}

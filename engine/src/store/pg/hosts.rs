//! Several PostgreSQL hosts in one URL, in libpq's form, and following the primary among them.
//!
//! ```text
//! postgres://user:password@h1:5432,h2:5433,[::1]:5434/db?target_session_attrs=read-write
//! ```
//!
//! Every host gets the same user, password, database and query parameters. A host without a
//! port takes the `port=` parameter's (one port for all hosts or one per host; as in libpq it
//! replaces the ports of the list), else `PGPORT` or 5432. `target_session_attrs` is
//! `read-write` (the default with several hosts: only a primary will do) or `any` (the first
//! host that answers). A URL with one host and no `target_session_attrs` is used as it is.
//!
//! How the store follows the primary:
//! 1. **Probe**: the hosts are tried in order, each with a short timeout; a host that does not
//!    answer and, for `read-write`, one whose `SHOW transaction_read_only` is `on` (a hot
//!    standby, as libpq checks) are skipped. The pool's connections go to the first one left.
//! 2. **Watch**: a task keeps the probe's connection and asks it the same question every
//!    second. When it fails or the server turned read-only, the task probes again every
//!    200 ms until a primary answers, then points the pool's new connections at it
//!    ([`PgPool::set_connect_options`]).
//! 3. **Drop stale connections**: after every probe, a pooled connection opened before it is
//!    closed instead of being handed out (`before_acquire`), and a new connection that finds
//!    its server read-only is refused (`after_connect`) and wakes the watch at once; the pool
//!    keeps trying to connect until its acquire timeout, so a transaction begun during a
//!    failover goes to the new primary once there is one.
//!
//! Work in flight when the primary goes fails with a connection error or SQLSTATE 25006 / 57P01;
//! those are [transient](super::super::StoreError::is_transient): the engine's loops try again
//! and the APIs answer 503. LISTEN reconnects through the pool when its connection breaks; a
//! listener whose server is no longer the one the pool uses (an old primary cut off but still
//! up: its connection does not break, and nothing is notified on it any more) ends with an
//! error within a second of the switch, so the engine listens again on the new server.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use tokio::sync::Notify;

use super::SESSION_SETTINGS;

/// How long one host may take to accept a connection and answer the read-only question.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Each host's time while looking for a server that was lost: rounds are tried again every
/// [`RETRY_EVERY`], and a dead host must not hold a round long after the new primary answers.
const SEARCH_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the watch asks the current primary whether it still is one.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often the watch probes the hosts while there is no primary.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// Which server a session may use (libpq's `target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetSession {
    /// The first host that answers.
    Any,
    /// The first host that accepts writes: the primary.
    ReadWrite,
}

/// What is wrong with a database URL's host list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostsError {
    #[error("host {position} of {count} in the host list is empty")]
    EmptyHost { position: usize, count: usize },
    #[error("{0:?} is not a host: use name, name:port, IPv4:port or [IPv6]:port")]
    BadHost(String),
    #[error("port {port:?} of host {host} is not a number from 1 to 65535")]
    BadPort { host: String, port: String },
    #[error(
        "port= lists {ports} ports for {hosts} hosts: give one port for every host or one per host"
    )]
    PortCount { ports: usize, hosts: usize },
    #[error(
        "target_session_attrs={0} is not supported: use read-write (the default with several hosts) or any"
    )]
    TargetSession(String),
    #[error(
        "{0}= cannot be combined with a list of hosts: write each host as host:port in the URL"
    )]
    HostParameter(String),
    #[error("host {host}: {reason}")]
    Rejected { host: String, reason: String },
    /// A URL of one host, refused as it always was.
    #[error("{0}")]
    Invalid(String),
}

/// One host of the list: its name as written with its port (for messages) and its options.
#[derive(Debug, Clone)]
pub struct Host {
    pub name: String,
    pub options: PgConnectOptions,
}

/// The hosts of a database URL and which of them a session may use.
#[derive(Debug, Clone)]
pub struct HostList {
    pub hosts: Vec<Host>,
    pub target: TargetSession,
}

impl HostList {
    /// Parses a `postgres://` URL. The error never contains the URL (nor its password).
    pub fn parse(url: &str) -> Result<Self, HostsError> {
        let single = |url: &str| match PgConnectOptions::from_str(url) {
            Ok(options) => Ok(Self::single(options)),
            Err(e) => Err(HostsError::Invalid(e.to_string())),
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return single(url);
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, host_list) = match authority.rfind('@') {
            Some(at) => authority.split_at(at + 1),
            None => ("", authority),
        };
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        let query = query.split('#').next().unwrap_or_default();

        let mut target = None;
        let mut ports = None;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "target_session_attrs" => target = Some(parse_target(value)?),
                "port" => ports = Some(value),
                _ => kept.push((key, pair)),
            }
        }
        let entries: Vec<&str> = host_list.split(',').collect();
        if entries.len() == 1 && target.is_none() {
            return single(url);
        }
        if entries.len() > 1
            && let Some((key, _)) = kept.iter().find(|(k, _)| matches!(*k, "host" | "hostaddr"))
        {
            return Err(HostsError::HostParameter((*key).to_owned()));
        }
        let ports: Vec<&str> = match ports {
            None => Vec::new(),
            Some(list) => {
                let ports: Vec<&str> = list.split(',').collect();
                if ports.len() != 1 && ports.len() != entries.len() {
                    return Err(HostsError::PortCount {
                        ports: ports.len(),
                        hosts: entries.len(),
                    });
                }
                ports
            }
        };
        let query: Vec<&str> = kept.iter().map(|(_, pair)| *pair).collect();
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };

        let mut hosts = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            if entry.is_empty() {
                return Err(HostsError::EmptyHost {
                    position: i + 1,
                    count: entries.len(),
                });
            }
            let (host, own_port) = split_host_port(entry)?;
            // As in libpq, `port=` replaces the list's ports; an empty entry means the default.
            let port = match ports.as_slice() {
                [] => own_port,
                [one] => Some(*one),
                many => Some(many[i]),
            }
            .filter(|p| !p.is_empty());
            let port = match port {
                Some(p) => match p.parse::<u16>() {
                    Ok(n) if n > 0 => format!(":{n}"),
                    _ => {
                        return Err(HostsError::BadPort {
                            host: host.to_owned(),
                            port: p.to_owned(),
                        });
                    }
                },
                None => String::new(),
            };
            let one = format!("{scheme}://{userinfo}{host}{port}{path}{query}");
            let mut options =
                PgConnectOptions::from_str(&one).map_err(|e| HostsError::Rejected {
                    host: host.to_owned(),
                    reason: e.to_string(),
                })?;
            if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                // The URL keeps the brackets; a socket address needs the bare address.
                options = options.host(v6);
            }
            hosts.push(Host {
                name: format!("{host}:{}", options.get_port()),
                options,
            });
        }
        Ok(Self {
            hosts,
            target: target.unwrap_or(TargetSession::ReadWrite),
        })
    }

    fn single(options: PgConnectOptions) -> Self {
        let name = format!("{}:{}", options.get_host(), options.get_port());
        Self {
            hosts: vec![Host { name, options }],
            target: TargetSession::Any,
        }
    }

    /// Whether the store must look for its server among the hosts and follow it (several
    /// hosts, or one that must be the primary); otherwise it connects to the one host as is.
    pub fn follows(&self) -> bool {
        self.hosts.len() > 1 || self.target == TargetSession::ReadWrite
    }

    /// Tries the hosts in order; the first that answers and, for `read-write`, accepts writes
    /// wins. Returns its index and the connection the probe opened.
    pub async fn find(&self) -> Result<(usize, PgConnection), NoServer> {
        self.find_within(PROBE_TIMEOUT).await
    }

    /// [`HostList::find`] with `timeout` for each host.
    async fn find_within(&self, timeout: Duration) -> Result<(usize, PgConnection), NoServer> {
        // All hosts at once: a dead one costs its whole timeout, which must not delay finding
        // the primary behind it. With `read-write` there is one primary, so the first that
        // answers as one is taken; with `any` the first host in the list's order that answers
        // (libpq's order), once every host before it has failed.
        let mut probes: FuturesUnordered<_> = self
            .hosts
            .iter()
            .enumerate()
            .map(|(i, host)| async move { (i, probe(host, self.target, timeout).await) })
            .collect();
        let mut outcomes: Vec<Option<Result<PgConnection, String>>> =
            self.hosts.iter().map(|_| None).collect();
        while let Some((i, outcome)) = probes.next().await {
            outcomes[i] = Some(outcome);
            let first_decided = outcomes
                .iter()
                .position(|o| !matches!(o, Some(Err(_))))
                .filter(|&first| matches!(outcomes[first], Some(Ok(_))));
            let take = match self.target {
                TargetSession::ReadWrite => matches!(outcomes[i], Some(Ok(_))).then_some(i),
                TargetSession::Any => first_decided,
            };
            if let Some(index) = take
                && let Some(Ok(conn)) = outcomes[index].take()
            {
                // The other connections made meanwhile are dropped (closed).
                return Ok((index, conn));
            }
        }
        let skipped = self
            .hosts
            .iter()
            .zip(outcomes)
            .map(|(host, outcome)| {
                let why = match outcome {
                    Some(Err(why)) => why,
                    _ => "no answer".to_owned(),
                };
                (host.name.clone(), why)
            })
            .collect();
        Err(NoServer {
            target: self.target,
            skipped,
        })
    }
}

/// No host would do; each with the reason it was skipped.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no {} PostgreSQL server among the hosts: {}", match .target {
    TargetSession::ReadWrite => "read-write",
    TargetSession::Any => "reachable",
}, .skipped.iter().map(|(h, why)| format!("{h} ({why})")).collect::<Vec<_>>().join("; "))]
pub struct NoServer {
    pub target: TargetSession,
    pub skipped: Vec<(String, String)>,
}

fn parse_target(value: &str) -> Result<TargetSession, HostsError> {
    match value {
        "read-write" => Ok(TargetSession::ReadWrite),
        "any" => Ok(TargetSession::Any),
        other => Err(HostsError::TargetSession(other.to_owned())),
    }
}

/// `name`, `name:port`, `[v6]` or `[v6]:port`; the port is checked by the caller.
fn split_host_port(entry: &str) -> Result<(&str, Option<&str>), HostsError> {
    let bad = || HostsError::BadHost(entry.to_owned());
    if entry.starts_with('[') {
        let close = entry.find(']').ok_or_else(bad)?;
        let (host, rest) = entry.split_at(close + 1);
        return match rest.strip_prefix(':') {
            Some(port) => Ok((host, Some(port))),
            None if rest.is_empty() => Ok((host, None)),
            None => Err(bad()),
        };
    }
    match entry.split_once(':') {
        Some(("", _)) => Err(bad()),
        Some((_, port)) if port.contains(':') => Err(bad()),
        Some((host, port)) => Ok((host, Some(port))),
        None => Ok((entry, None)),
    }
}

async fn probe(
    host: &Host,
    target: TargetSession,
    timeout: Duration,
) -> Result<PgConnection, String> {
    let attempt = async {
        let mut conn = PgConnection::connect_with(&host.options)
            .await
            .map_err(|e| e.to_string())?;
        if target == TargetSession::ReadWrite && is_read_only(&mut conn).await? {
            let _ = conn.close().await;
            return Err("read-only: a standby".to_owned());
        }
        Ok(conn)
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")))
}

/// libpq's read-write check: a hot standby (and a server with `default_transaction_read_only`)
/// answers `on`.
async fn is_read_only(conn: &mut PgConnection) -> Result<bool, String> {
    let value: String = sqlx::query_scalar("SHOW transaction_read_only")
        .fetch_one(conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(value == "on")
}

/// The server a following store works against, shared by the store, its pool's callbacks and
/// the watch task.
#[derive(Debug)]
pub struct Primary {
    hosts: HostList,
    current: AtomicUsize,
    state: Arc<SwitchState>,
}

/// What the pool's callbacks need. They hold this, not the [`Primary`]: the watch task holds
/// the pool and stops once the `Primary` is dropped, so callbacks holding it would keep both
/// alive for ever.
#[derive(Debug)]
struct SwitchState {
    /// When the pool was last pointed at a server: connections older than this are dropped.
    switched_at: Mutex<Instant>,
    /// Wakes the watch before its next check.
    wake: Notify,
}

impl SwitchState {
    fn since_switch(&self) -> Duration {
        self.switched_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .elapsed()
    }
}

impl Primary {
    /// Finds the server among `hosts`, opens a pool of `max_connections` to it (every session
    /// with [`SESSION_SETTINGS`]) and starts the watch that follows it.
    pub async fn connect(
        hosts: HostList,
        max_connections: u32,
    ) -> Result<(PgPool, Arc<Primary>), ConnectError> {
        let (index, conn) = hosts.find().await?;
        let state = Arc::new(SwitchState {
            switched_at: Mutex::new(Instant::now()),
            wake: Notify::new(),
        });
        let mut pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .before_acquire({
                let state = state.clone();
                move |_conn, meta| {
                    let fresh = meta.age <= state.since_switch();
                    Box::pin(async move { Ok(fresh) })
                }
            });
        if hosts.target == TargetSession::ReadWrite {
            let state = state.clone();
            pool = pool.after_connect(move |conn, _meta| {
                let state = state.clone();
                Box::pin(async move {
                    if is_read_only(conn).await.map_err(sqlx::Error::Protocol)? {
                        state.wake.notify_one();
                        return Err(sqlx::Error::Protocol(
                            "the server is read-only (a standby): not the primary".to_owned(),
                        ));
                    }
                    Ok(())
                })
            });
        }
        let pool = pool
            .connect_with(hosts.hosts[index].options.clone().options(SESSION_SETTINGS))
            .await?;
        tracing::info!(host = %hosts.hosts[index].name, "PostgreSQL server found");
        let primary = Arc::new(Primary {
            hosts,
            current: AtomicUsize::new(index),
            state,
        });
        tokio::spawn(watch(Arc::downgrade(&primary), pool.clone(), Some(conn)));
        Ok((pool, primary))
    }

    /// The current server's options, without the session timeouts (for migrations).
    pub fn options(&self) -> PgConnectOptions {
        self.current_host().options.clone()
    }

    /// When the pool was last pointed at a server (its connections older than this are
    /// dropped): a long-lived session opened before it is on a server that is no longer the one.
    pub fn switched_at(&self) -> Instant {
        *self
            .state
            .switched_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The current server as `host:port`.
    pub fn host(&self) -> &str {
        &self.current_host().name
    }

    fn current_host(&self) -> &Host {
        &self.hosts.hosts[self.current.load(Ordering::Acquire)]
    }

    /// Checks the watch's connection; when it is lost or no longer fits, probes the hosts and
    /// points the pool at the one found. Returns the connection to check next time.
    async fn check(&self, pool: &PgPool, conn: Option<PgConnection>) -> Option<PgConnection> {
        if let Some(mut conn) = conn {
            let answer = tokio::time::timeout(PROBE_TIMEOUT, is_read_only(&mut conn)).await;
            let why = match answer {
                Ok(Ok(false)) => return Some(conn),
                Ok(Ok(true)) if self.hosts.target == TargetSession::Any => return Some(conn),
                Ok(Ok(true)) => "it is read-only now".to_owned(),
                Ok(Err(e)) => e,
                Err(_) => format!("no answer within {PROBE_TIMEOUT:?}"),
            };
            tracing::warn!(host = %self.host(), reason = %why, "lost the PostgreSQL server; looking for it among the hosts");
        }
        match self.hosts.find_within(SEARCH_TIMEOUT).await {
            Ok((index, conn)) => {
                let host = &self.hosts.hosts[index];
                // The same server again (a blip of the watch's own connection, a restart):
                // the pool's connections to it stay; a broken one fails on use and is retried.
                if self.current.swap(index, Ordering::AcqRel) != index {
                    pool.set_connect_options(host.options.clone().options(SESSION_SETTINGS));
                    *self
                        .state
                        .switched_at
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Instant::now();
                }
                tracing::info!(host = %host.name, "PostgreSQL server found");
                Some(conn)
            }
            Err(e) => {
                tracing::debug!(error = %e, "still looking for the PostgreSQL server");
                None
            }
        }
    }
}

/// Follows the server until the pool is closed or the store is dropped.
async fn watch(primary: Weak<Primary>, pool: PgPool, mut conn: Option<PgConnection>) {
    let mut closed = std::pin::pin!(pool.close_event());
    while let Some(state) = primary.upgrade().map(|p| p.state.clone()) {
        let wait = if conn.is_some() {
            CHECK_EVERY
        } else {
            RETRY_EVERY
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = state.wake.notified() => {}
            () = &mut closed => break,
        }
        let Some(primary) = primary.upgrade() else {
            break;
        };
        conn = primary.check(&pool, conn.take()).await;
    }
    if let Some(conn) = conn {
        let _ = conn.close().await;
    }
}

/// Why a following store could not start.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{0}")]
    NoServer(#[from] NoServer),
    #[error("{0}")]
    Pool(#[from] sqlx::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> HostList {
        HostList::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    fn names(list: &HostList) -> Vec<&str> {
        list.hosts.iter().map(|h| h.name.as_str()).collect()
    }

    fn error(url: &str) -> HostsError {
        match HostList::parse(url) {
            Ok(list) => panic!("{url} parsed as {:?}", names(&list)),
            Err(e) => e,
        }
    }

    #[test]
    fn one_host_without_target_is_used_as_written() {
        let list = parse("postgres://u:p@db:6000/app?sslmode=disable&application_name=x");
        assert!(!list.follows());
        assert_eq!(list.target, TargetSession::Any);
        assert_eq!(names(&list), ["db:6000"]);
        let o = &list.hosts[0].options;
        assert_eq!(
            (o.get_host(), o.get_port(), o.get_username()),
            ("db", 6000, "u")
        );
        assert_eq!(o.get_database(), Some("app"));
        assert_eq!(o.get_application_name(), Some("x"));
    }

    #[test]
    fn several_hosts_keep_their_ports_in_order_and_want_the_primary() {
        let list = parse("postgres://u:p@h1:5432,h2:5433,h3:5434/db");
        assert!(list.follows());
        assert_eq!(list.target, TargetSession::ReadWrite);
        assert_eq!(names(&list), ["h1:5432", "h2:5433", "h3:5434"]);
        for host in &list.hosts {
            assert_eq!(host.options.get_database(), Some("db"));
            assert_eq!(host.options.get_username(), "u");
        }
    }

    #[test]
    fn a_host_without_a_port_takes_the_default() {
        // PGPORT, when set, is the default instead.
        if std::env::var_os("PGPORT").is_some() {
            return;
        }
        let list = parse("postgresql://u@h1,h2:7000/db?target_session_attrs=read-write");
        assert_eq!(names(&list), ["h1:5432", "h2:7000"]);
    }

    #[test]
    fn the_port_parameter_replaces_the_ports_as_in_libpq() {
        assert_eq!(
            names(&parse("postgres://u@h1,h2:7000/db?port=6000")),
            ["h1:6000", "h2:6000"]
        );
        assert_eq!(
            names(&parse("postgres://u@h1,h2/db?port=6001,6002")),
            ["h1:6001", "h2:6002"]
        );
    }

    #[test]
    fn ipv6_hosts_are_written_in_brackets() {
        let list = parse("postgres://u@[::1]:5433,[fe80::1],127.0.0.1:5434/db");
        assert_eq!(
            names(&list),
            ["[::1]:5433", "[fe80::1]:5432", "127.0.0.1:5434"]
        );
        assert_eq!(list.hosts[0].options.get_host(), "::1");
        assert_eq!(list.hosts[1].options.get_host(), "fe80::1");
    }

    #[test]
    fn percent_encoded_user_and_password_are_decoded_for_every_host() {
        let list = parse("postgres://us%40er:p%3Aa%2Fss%40@h1:1,h2:2/db%20x");
        for host in &list.hosts {
            assert_eq!(host.options.get_username(), "us@er");
            assert_eq!(host.options.get_database(), Some("db x"));
        }
        // The password has no getter; the options' own URL shows it, encoded again.
        let url = sqlx::ConnectOptions::to_url_lossy(&list.hosts[1].options);
        assert_eq!(url.password(), Some("p%3Aa%2Fss%40"));
    }

    #[test]
    fn query_parameters_apply_to_every_host_except_the_host_list_ones() {
        let list = parse(
            "postgres://u@h1:1,h2:2/db?sslmode=disable&target_session_attrs=any&application_name=node-1&options=-csearch_path%3Ds1",
        );
        assert_eq!(list.target, TargetSession::Any);
        for host in &list.hosts {
            assert_eq!(host.options.get_application_name(), Some("node-1"));
            assert_eq!(host.options.get_options(), Some("-csearch_path=s1"));
            assert!(matches!(
                host.options.get_ssl_mode(),
                sqlx::postgres::PgSslMode::Disable
            ));
        }
    }

    #[test]
    fn one_host_with_read_write_is_followed() {
        let list = parse("postgres://u@db/x?target_session_attrs=read-write");
        assert!(list.follows());
        assert_eq!(names(&list), ["db:5432"]);
        let any = parse("postgres://u@db:5/x?target_session_attrs=any");
        assert!(!any.follows());
    }

    #[test]
    fn bad_host_lists_are_named() {
        assert_eq!(
            error("postgres://u@h1,,h3/db"),
            HostsError::EmptyHost {
                position: 2,
                count: 3
            }
        );
        assert_eq!(
            error("postgres://u@h1:5432,/db"),
            HostsError::EmptyHost {
                position: 2,
                count: 2
            }
        );
        assert_eq!(
            error("postgres://u@h1,h2:port/db"),
            HostsError::BadPort {
                host: "h2".into(),
                port: "port".into()
            }
        );
        assert_eq!(
            error("postgres://u@h1,h2:70000/db"),
            HostsError::BadPort {
                host: "h2".into(),
                port: "70000".into()
            }
        );
        assert_eq!(
            error("postgres://u@h1,h2:0/db"),
            HostsError::BadPort {
                host: "h2".into(),
                port: "0".into()
            }
        );
        assert_eq!(
            error("postgres://u@h1,[::1/db"),
            HostsError::BadHost("[::1".into())
        );
        assert_eq!(
            error("postgres://u@h1,[::1]x/db"),
            HostsError::BadHost("[::1]x".into())
        );
        assert_eq!(
            error("postgres://u@h1,::1/db"),
            HostsError::BadHost("::1".into())
        );
        assert_eq!(
            error("postgres://u@h1,h2,h3/db?port=1,2"),
            HostsError::PortCount { ports: 2, hosts: 3 }
        );
        assert_eq!(
            error("postgres://u@h1,h2/db?host=h3"),
            HostsError::HostParameter("host".into())
        );
        assert_eq!(
            error("postgres://u@h1,h2/db?target_session_attrs=primary"),
            HostsError::TargetSession("primary".into())
        );
        assert_eq!(
            error("postgres://u@h1/db?target_session_attrs=standby"),
            HostsError::TargetSession("standby".into())
        );
        assert!(matches!(
            error("postgres://u@h1,h2/db%FF"),
            HostsError::Rejected { host, .. } if host == "h1"
        ));
        // One host: sqlx's own verdict, as before host lists.
        assert!(matches!(
            error("postgres://u@db:port/x"),
            HostsError::Invalid(_)
        ));
    }

    #[test]
    fn errors_never_show_the_password() {
        for url in [
            "postgres://u:s3cret@h1,,h2/db",
            "postgres://u:s3cret@h1,h2:x/db",
            "postgres://u:s3cret@h1,h2/db%FF",
            "postgres://u:s3cret@h1,h2:1,h3:2/db?port=1,2",
        ] {
            let e = error(url).to_string();
            assert!(!e.contains("s3cret"), "{e}");
        }
        let e = NoServer {
            target: TargetSession::ReadWrite,
            skipped: vec![
                ("h1:5432".into(), "connection refused".into()),
                ("h2:5433".into(), "read-only: a standby".into()),
            ],
        };
        assert_eq!(
            e.to_string(),
            "no read-write PostgreSQL server among the hosts: h1:5432 (connection refused); \
             h2:5433 (read-only: a standby)"
        );
    }
}

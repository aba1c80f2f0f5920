//! A PostgreSQL failover under an open store: a primary and a hot standby of the test's own
//! (`initdb`, `pg_basebackup -R`, on free ports of 127.0.0.1; never the shared server), the store
//! given both with the standby first. It lands on the primary; when the primary dies and the
//! standby is promoted, the same store works against the promoted server within seconds; a
//! due-signal listener left on a server the store no longer uses ends, and listening again reaches
//! the new one.
//!
//! Needs PostgreSQL's server binaries (`MTHPT_PG_BIN`, else the newest
//! `/usr/lib/postgresql/<version>/bin`); fails, never skips, without them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mthpt_engine::store::{PgStore, Store, StoreError};
use mthpt_engine::tenant::NewTenant;
use sqlx::Connection;

/// How long the store may take to work again once the standby is promoted.
const RECOVERY: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_follows_the_primary_to_a_promoted_standby() {
    let bin = bin_dir();
    // Dropped last: the servers below stop first, then their files go.
    let dir = server_dir().await;
    let mut primary = Server::init(&bin, dir.path(), "primary").await;
    primary.migrate().await;
    let standby = Server::standby_of(&primary, dir.path(), "standby").await;

    let store = connect_to_both(&standby, &primary).await;
    assert_eq!(store.server(), primary.address());
    create_tenant(&store, "before")
        .await
        .expect("write on the primary");

    primary.stop_immediately().await;
    standby.promote().await;
    let promoted = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        match create_tenant(&store, &format!("after-{attempts}")).await {
            Ok(()) => break,
            Err(e) => assert!(
                e.is_transient() || matches!(e, StoreError::Unavailable(_)),
                "a failover's error must be transient (retried, 503), not: {e:?}"
            ),
        }
        assert!(
            promoted.elapsed() < RECOVERY,
            "the store did not reach the promoted standby within {RECOVERY:?} ({attempts} attempts)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "the store wrote on the promoted standby {:?} after the promotion",
        promoted.elapsed()
    );
    assert_eq!(store.server(), standby.address());
    let (in_recovery,): (bool,) = sqlx::query_as("SELECT pg_is_in_recovery()")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert!(!in_recovery, "pooled sessions are on the promoted server");
    store
        .listen_due()
        .await
        .expect("LISTEN on the promoted server");
    store.close().await;
}

/// An old primary that is cut off but still up keeps its sessions: a due-signal listener on
/// it would hear nothing once the store writes elsewhere. It ends instead, and listening again
/// reaches the server in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_listener_on_a_server_left_behind_ends_and_listens_again_on_the_new_one() {
    let bin = bin_dir();
    let dir = server_dir().await;
    // Two servers of their own, both migrated: the first stands for a primary that is about
    // to be left behind, the second, read-only for now, for the one that takes over.
    let old = Server::init(&bin, dir.path(), "old").await;
    let new = Server::init(&bin, dir.path(), "new").await;
    old.migrate().await;
    new.migrate().await;
    new.read_only(true).await;
    let store = connect_to_both(&old, &new).await;
    assert_eq!(store.server(), old.address());
    let mut stale = store.listen_due().await.expect("LISTEN on the old server");

    // The new server takes writes, and the old one turns read-only without dropping a
    // session: a demoted primary as a client whose connection survives sees it.
    new.read_only(false).await;
    old.read_only(true).await;
    let switched = Instant::now();
    while store.server() != new.address() {
        assert!(
            switched.elapsed() < RECOVERY,
            "the store did not move to the other server within {RECOVERY:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ended = tokio::time::timeout(Duration::from_secs(5), stale.recv())
        .await
        .expect("the listener on the old server ends within seconds of the switch");
    assert!(
        matches!(ended, Err(StoreError::Unavailable(_))),
        "it ends with an error that says to listen again: {ended:?}"
    );

    let mut fresh = store.listen_due().await.expect("LISTEN on the new server");
    sqlx::query("SELECT pg_notify($1, 'default')")
        .bind(mthpt_engine::store::DUE_CHANNEL)
        .execute(store.pool())
        .await
        .expect("NOTIFY on the new server");
    let heard = tokio::time::timeout(Duration::from_secs(5), fresh.recv())
        .await
        .expect("the new listener hears the new server's signal");
    assert_eq!(heard.expect("a signal"), "default");
    // A listener holds a pooled connection: closing the pool waits for it.
    drop((stale, fresh));
    store.close().await;
}

/// A store on the host list `first,second`.
async fn connect_to_both(first: &Server, second: &Server) -> PgStore {
    let url = format!(
        "postgres://postgres@{},{}/postgres?sslmode=disable",
        first.address(),
        second.address()
    );
    PgStore::connect(&url)
        .await
        .expect("connect to the host list")
}

/// A temporary directory for the test's servers, theirs when the test runs as root.
async fn server_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    if running_as_root() {
        run(Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path()))
        .await;
    }
    dir
}

async fn create_tenant(store: &PgStore, name: &str) -> Result<(), StoreError> {
    let mut tx = store.begin().await?;
    tx.create_tenant(&NewTenant::named(name), 0).await?;
    tx.commit().await
}

/// One PostgreSQL server of this test, stopped at once when dropped.
struct Server {
    bin: PathBuf,
    data: PathBuf,
    sockets: PathBuf,
    log: PathBuf,
    port: u16,
    running: bool,
}

impl Server {
    fn new(bin: &Path, dir: &Path, name: &str) -> Self {
        Self {
            bin: bin.to_path_buf(),
            data: dir.join(name),
            sockets: dir.to_path_buf(),
            log: dir.join(format!("{name}.log")),
            port: mthpt_testkit::free_port(),
            running: false,
        }
    }

    /// A new cluster (trust authentication on 127.0.0.1, replication allowed), started.
    async fn init(bin: &Path, dir: &Path, name: &str) -> Self {
        let mut server = Self::new(bin, dir, name);
        let mut initdb = server.command("initdb");
        initdb.arg("-D").arg(&server.data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        run(&mut initdb).await;
        server.start().await;
        server
    }

    /// A hot standby of `primary` (`pg_basebackup -R`: it streams from the primary), started.
    async fn standby_of(primary: &Server, dir: &Path, name: &str) -> Self {
        let mut server = Self::new(&primary.bin, dir, name);
        let mut backup = server.command("pg_basebackup");
        backup.arg("-D").arg(&server.data).args([
            "-h",
            "127.0.0.1",
            "-p",
            &primary.port.to_string(),
            "-U",
            "postgres",
            "-R",
            "-X",
            "stream",
            "--checkpoint=fast",
            "--no-sync",
        ]);
        run(&mut backup).await;
        server.start().await;
        server
    }

    /// `host:port`, as the store names its server.
    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn url(&self) -> String {
        format!(
            "postgres://postgres@{}/postgres?sslmode=disable",
            self.address()
        )
    }

    /// Migrates the server's database to the newest schema.
    async fn migrate(&self) {
        let single = PgStore::connect(&self.url()).await.expect("connect");
        single.migrate().await.expect("migrate");
        single.close().await;
    }

    async fn start(&mut self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} \
             -c wal_level=replica -c max_wal_senders=4 -c fsync=off",
            self.port,
            self.sockets.display()
        );
        let log = self.log.display().to_string();
        run(&mut self.pg_ctl("start", &["-l", &log, "-o", &options])).await;
        self.running = true;
    }

    /// Makes every new transaction read-only, or not, without ending a session.
    async fn read_only(&self, on: bool) {
        let mut admin = sqlx::PgConnection::connect(&self.url())
            .await
            .expect("admin");
        let setting = if on {
            "ALTER SYSTEM SET default_transaction_read_only = on"
        } else {
            "ALTER SYSTEM RESET default_transaction_read_only"
        };
        for statement in [setting, "SELECT pg_reload_conf()"] {
            sqlx::query(statement)
                .execute(&mut admin)
                .await
                .expect(statement);
        }
        admin.close().await.expect("close");
    }

    /// As a crash: no shutdown checkpoint, sessions cut.
    async fn stop_immediately(&mut self) {
        run(&mut self.pg_ctl("stop", &["-m", "immediate"])).await;
        self.running = false;
    }

    /// Ends recovery: the standby becomes a primary (waits until it accepts writes).
    async fn promote(&self) {
        run(&mut self.pg_ctl("promote", &[])).await;
    }

    fn pg_ctl(&self, action: &str, extra: &[&str]) -> Command {
        let mut c = self.command("pg_ctl");
        c.arg("-D").arg(&self.data).args(["-w", "-t", "30"]);
        c.args(extra).arg(action);
        c
    }

    /// PostgreSQL refuses to run as root: commands then run as user `postgres`.
    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if running_as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.running {
            let _ = self
                .pg_ctl("stop", &["-m", "immediate"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// `MTHPT_PG_BIN`, else the newest `/usr/lib/postgresql/<version>/bin` holding `pg_ctl`.
fn bin_dir() -> PathBuf {
    if let Some(bin) = std::env::var_os("MTHPT_PG_BIN") {
        return PathBuf::from(bin);
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((version, bin))
        })
        .max();
    match newest {
        Some((_, bin)) => bin,
        None => panic!(
            "this test needs PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup): \
             install Debian's postgresql or set MTHPT_PG_BIN to their directory"
        ),
    }
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Runs `c` off the runtime's threads; panics with its output when it fails.
async fn run(c: &mut Command) {
    let shown = format!("{c:?}");
    let mut c = std::mem::replace(c, Command::new("true"));
    let out = tokio::task::spawn_blocking(move || c.stdin(Stdio::null()).output())
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("run {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed with {}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

//! A private RabbitMQ node for tests that stop and start a broker (never the shared one).
//!
//! [`RabbitNode::start`] runs `rabbitmq-server -detached` with everything of its own: node
//! name `mthpt-test-<pid>-<n>@localhost`, AMQP and distribution ports on 127.0.0.1 below the
//! ephemeral range (`mthpt_testkit::restartable_port`: free again when it starts again), data
//! and logs in a temporary directory, its own (empty) environment and plugins files, and a
//! config file that listens on its port only (so no management plugin and no clash with the
//! system broker's listeners). It waits until `rabbitmqctl await_startup` answers. The node is
//! shut down (`rabbitmqctl shutdown`) by [`RabbitNode::shutdown`] or, when a test fails first,
//! by `Drop`.
//!
//! It needs the `rabbitmq-server` and `rabbitmqctl` commands and an epmd it can register with
//! (the system broker's, or one the server starts).

use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long the node may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);

static NODES: AtomicU32 = AtomicU32::new(0);

/// A RabbitMQ node of this test's own; see the module docs.
pub struct RabbitNode {
    name: String,
    port: u16,
    dir: tempfile::TempDir,
    running: bool,
}

impl std::fmt::Debug for RabbitNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitNode")
            .field("name", &self.name)
            .field("port", &self.port)
            .finish()
    }
}

fn describe(what: &str, out: &Output) -> String {
    format!(
        "{what} exited with {}:\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

impl RabbitNode {
    /// Starts a node and waits until it serves AMQP (blocking; call it before the test's
    /// runtime work, or from `spawn_blocking`).
    pub fn start() -> Result<RabbitNode, String> {
        let n = NODES.fetch_add(1, Ordering::SeqCst);
        let name = format!("mthpt-test-{}-{n}@localhost", std::process::id());
        // Its AMQP listener closes and opens again on this port (`stop_app`, `start_app`).
        let port = mthpt_testkit::restartable_port();
        let dist_port = mthpt_testkit::restartable_port();
        let dir = tempfile::Builder::new()
            .prefix("mthpt-rabbit-")
            .tempdir()
            .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
        // The server may run as another user (Debian's scripts switch to `rabbitmq`).
        let writable = |path: &Path| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| format!("cannot open up {}: {e}", path.display()))
        };
        writable(dir.path())?;
        let write = |file: &str, text: &str| {
            std::fs::write(dir.path().join(file), text)
                .map_err(|e| format!("cannot write {file}: {e}"))
        };
        write("enabled_plugins", "")?;
        write("rabbitmq-env.conf", "")?;
        write(
            "rabbitmq.conf",
            &format!("listeners.tcp.default = 127.0.0.1:{port}\n"),
        )?;
        let path = |p: &str| dir.path().join(p).display().to_string();
        let out = Command::new("rabbitmq-server")
            .arg("-detached")
            .env("RABBITMQ_NODENAME", &name)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .env("RABBITMQ_DIST_PORT", dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", path("mnesia"))
            .env("RABBITMQ_LOG_BASE", path("log"))
            .env("RABBITMQ_PID_FILE", path("pid"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", path("enabled_plugins"))
            .env("RABBITMQ_CONF_ENV_FILE", path("rabbitmq-env.conf"))
            .env("RABBITMQ_CONFIG_FILE", path("rabbitmq.conf"))
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .output()
            .map_err(|e| format!("cannot run rabbitmq-server (is RabbitMQ installed?): {e}"))?;
        let mut node = RabbitNode {
            name,
            port,
            dir,
            running: true,
        };
        if !out.status.success() {
            node.running = false;
            return Err(describe("rabbitmq-server -detached", &out));
        }
        // The detached node registers with epmd a moment later: until then `await_startup`
        // fails at once, so it is asked again.
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let out = node.ctl(&["await_startup", "--timeout", "30"])?;
            if out.status.success() {
                return Ok(node);
            }
            if Instant::now() >= deadline {
                let log = std::fs::read_to_string(
                    node.dir
                        .path()
                        .join("log")
                        .join(format!("{}.log", node.name)),
                )
                .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                return Err(format!(
                    "{}\nlast log lines:\n{}",
                    describe("rabbitmqctl await_startup", &out),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn ctl(&self, args: &[&str]) -> Result<Output, String> {
        Command::new("rabbitmqctl")
            .arg("-n")
            .arg(&self.name)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run rabbitmqctl: {e}"))
    }

    fn ctl_ok(&self, args: &[&str]) -> Result<(), String> {
        let out = self.ctl(args)?;
        if out.status.success() {
            Ok(())
        } else {
            Err(describe(&format!("rabbitmqctl {}", args.join(" ")), &out))
        }
    }

    /// The node's name (`mthpt-test-<pid>-<n>@localhost`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its AMQP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `amqp://guest:guest@127.0.0.1:<port>/%2f`.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Stops the RabbitMQ application (`rabbitmqctl stop_app`): every connection is closed and
    /// the port stops answering; the Erlang node stays up.
    pub fn stop_app(&self) -> Result<(), String> {
        self.ctl_ok(&["stop_app"])
    }

    /// Starts the application again (`rabbitmqctl start_app`) and waits until it serves.
    pub fn start_app(&self) -> Result<(), String> {
        self.ctl_ok(&["start_app"])?;
        self.ctl_ok(&["await_startup", "--timeout", "30"])
    }

    /// Shuts the node down (also done on drop).
    pub fn shutdown(&mut self) {
        if self.running {
            self.running = false;
            if let Err(e) = self.ctl_ok(&["shutdown"]) {
                eprintln!("could not shut down test broker {}: {e}", self.name);
            }
        }
    }
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        self.shutdown();
    }
}

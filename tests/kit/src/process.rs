//! Child processes that never outlive their test.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::wait::wait_until_blocking;

/// How long a process is given to end after SIGTERM before it is killed.
const GRACE: Duration = Duration::from_secs(5);

/// Lines of the log printed when a test fails.
const TAIL: usize = 40;

/// A child process that is stopped and reaped when dropped: SIGTERM first (a wrapper ends its
/// scripts' process groups on the way out, so nothing is left orphaned), SIGKILL after a grace
/// period. If the test is panicking, the last lines of the process's log go to stderr.
#[derive(Debug)]
pub struct ChildGuard {
    name: String,
    child: Child,
    log: Option<PathBuf>,
    grace: Duration,
    /// It leads a process group of its own: what it started goes with it.
    group: bool,
}

impl ChildGuard {
    /// Guards a process already spawned.
    pub fn new(name: impl Into<String>, child: Child) -> ChildGuard {
        ChildGuard {
            name: name.into(),
            child,
            log: None,
            grace: GRACE,
            group: false,
        }
    }

    /// Spawns `command` as the leader of a new process group, which is killed with it: for a
    /// program whose own children would outlive it (chromedriver leaves its browsers running).
    pub fn spawn_group(name: impl Into<String>, command: &mut Command) -> io::Result<ChildGuard> {
        let child = command.process_group(0).spawn()?;
        let mut guard = ChildGuard::new(name, child);
        guard.group = true;
        Ok(guard)
    }

    /// Spawns `command` with stdout discarded and stderr written to `log`.
    pub fn spawn_logged(
        name: impl Into<String>,
        command: &mut Command,
        log: &Path,
    ) -> io::Result<ChildGuard> {
        let file = File::create(log)?;
        let child = command.stdout(Stdio::null()).stderr(file).spawn()?;
        Ok(ChildGuard::new(name, child).with_log(log))
    }

    /// The file the process logs to: its tail is printed when the test fails.
    pub fn with_log(mut self, log: impl Into<PathBuf>) -> ChildGuard {
        self.log = Some(log.into());
        self
    }

    /// How long the process is given after SIGTERM (zero: killed at once).
    pub fn with_grace(mut self, grace: Duration) -> ChildGuard {
        self.grace = grace;
        self
    }

    /// The name it was given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The process itself (its pipes, `try_wait`, …).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: Signal) -> nix::Result<()> {
        let pid = i32::try_from(self.child.id()).map_err(|_| nix::Error::ESRCH)?;
        kill(Pid::from_raw(pid), signal)
    }

    /// Stops it: SIGTERM, then SIGKILL if it has not ended within the grace period; reaped.
    pub fn stop(&mut self) {
        if self.is_running() && !self.grace.is_zero() && self.signal(Signal::SIGTERM).is_ok() {
            let _ = wait_until_blocking(self.grace, || !self.is_running());
        }
        self.kill();
    }

    /// Kills it with SIGKILL (and its process group, when it leads one) and reaps it.
    pub fn kill(&mut self) {
        if self.group
            && let Ok(pid) = i32::try_from(self.child.id())
        {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its log so far (empty without a log file).
    pub fn log_text(&self) -> String {
        self.log
            .as_ref()
            .and_then(|log| std::fs::read_to_string(log).ok())
            .unwrap_or_default()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log_text();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() && self.log.is_some() {
            eprintln!("---- last lines of {} ----", self.name);
            eprintln!("{}", self.log_tail(TAIL));
        }
    }
}

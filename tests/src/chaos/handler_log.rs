//! The handler every chaos task runs, and its log.
//!
//! Tasks use the wrapper's built-in `shell` handler with [`SCRIPT`]: it appends one line when it
//! starts and one when it ends to the file named by `CHAOS_LOG`, then the suite counts from that
//! file, not from the database. Lines are short and appended with `>>` (`O_APPEND`), so lines of
//! concurrent scripts never interleave. Fields, space-separated:
//!
//! ```text
//! S <run id> <task id> <scheduled_at ms> <attempt> <shard> <pid> <wrapper pid> <wall-clock ms>
//! E <run id> <task id> <scheduled_at ms> <attempt> <shard> <pid> <wrapper pid> <wall-clock ms> <exit status>
//! ```
//!
//! The wrapper pid is the script's parent when it started: the `mthpt wrapper` process that ran
//! it, which tells the suite whose death orphaned a script. A script terminated by SIGTERM
//! (cancel, deadline, or its wrapper's end) writes its end line with status 143; one killed by
//! SIGKILL writes none.

use std::collections::HashMap;
use std::path::Path;

/// The script: waits `CHAOS_SLEEP` seconds between its start and end lines.
/// `EPOCHREALTIME` (bash 5) gives the wall clock without starting a process; its decimal
/// separator follows the locale, hence both characters are removed. The wait is bash's own
/// `read -t` on a FIFO nobody writes to (opened read-write, so it never reads end-of-file), not a
/// `sleep` process: the script starts no process at all, so what the suite measures is the
/// cluster and the `shell` handler, not a burst of `sleep` starts on a small machine. `read`
/// returns above 128 on its timeout; SIGTERM interrupts it and runs the trap at once.
pub const SCRIPT: &str = r#"t=${EPOCHREALTIME//[.,]/}
id="$MTHPT_RUN_ID $MTHPT_TASK_ID $MTHPT_SCHEDULED_AT_MS $MTHPT_ATTEMPT $MTHPT_SHARD_INDEX $$ $PPID"
printf 'S %s %s\n' "$id" "$((t / 1000))" >> "$CHAOS_LOG"
finish() { t=${EPOCHREALTIME//[.,]/}; printf 'E %s %s %s\n' "$id" "$((t / 1000))" "$1" >> "$CHAOS_LOG"; exit "$1"; }
trap 'finish 143' TERM
read -r -t "$CHAOS_SLEEP" _ <> "$CHAOS_FIFO"
if [ $? -gt 128 ]; then finish 0; else finish 1; fi
"#;

/// The FIFO the scripts wait on, next to the log.
pub fn sleep_fifo(log: &Path) -> std::path::PathBuf {
    log.with_file_name("sleep.fifo")
}

/// Creates [`sleep_fifo`] for `log`.
pub fn make_sleep_fifo(log: &Path) -> anyhow::Result<()> {
    let fifo = sleep_fifo(log);
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| anyhow::anyhow!("create the FIFO {}: {e}", fifo.display()))
}

/// The task params running [`SCRIPT`] for `sleep_ms`, logging to `log`.
pub fn params(log: &Path, sleep_ms: u64) -> serde_json::Value {
    serde_json::json!({
        "script": SCRIPT,
        "env": {
            "CHAOS_LOG": log.display().to_string(),
            "CHAOS_FIFO": sleep_fifo(log).display().to_string(),
            "CHAOS_SLEEP": format!("{}.{:03}", sleep_ms / 1_000, sleep_ms % 1_000),
        },
    })
}

/// One handler start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    pub run_id: i64,
    pub task_id: i64,
    pub scheduled_at: i64,
    pub attempt: i64,
    pub shard: i64,
    pub pid: i64,
    pub wrapper_pid: i64,
    pub at: i64,
}

/// How a start ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct End {
    pub at: i64,
    pub status: i64,
}

/// The parsed log: every start, and the end of each (by run id and script pid: pids are
/// reused within minutes when `pid_max` is 32,768), plus lines that could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HandlerLog {
    pub starts: Vec<Start>,
    pub ends: HashMap<(i64, i64), End>,
    pub unreadable_lines: u64,
}

impl HandlerLog {
    /// Parses the log text.
    pub fn parse(text: &str) -> Self {
        let mut log = Self::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let numbers: Option<Vec<i64>> = fields
                .iter()
                .skip(1)
                .map(|f| f.parse::<i64>().ok())
                .collect();
            match (fields.first().copied(), numbers.as_deref()) {
                (
                    Some("S"),
                    Some(
                        &[
                            run_id,
                            task_id,
                            scheduled_at,
                            attempt,
                            shard,
                            pid,
                            wrapper_pid,
                            at,
                        ],
                    ),
                ) => {
                    log.starts.push(Start {
                        run_id,
                        task_id,
                        scheduled_at,
                        attempt,
                        shard,
                        pid,
                        wrapper_pid,
                        at,
                    });
                }
                (Some("E"), Some(&[run_id, _, _, _, _, pid, _, at, status])) => {
                    log.ends.insert((run_id, pid), End { at, status });
                }
                _ => log.unreadable_lines += 1,
            }
        }
        log
    }

    /// Reads and parses the log file (none yet: an empty log).
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Self::parse(&text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(anyhow::anyhow!(
                "read the handler log {}: {e}",
                path.display()
            )),
        }
    }

    /// How `start` ended, if its end line is in the log.
    pub fn end(&self, start: &Start) -> Option<End> {
        self.ends.get(&(start.run_id, start.pid)).copied()
    }

    /// Scripts started by the wrapper process `wrapper_pid` that have not ended.
    pub fn in_flight_on(&self, wrapper_pid: i64) -> usize {
        self.starts
            .iter()
            .filter(|s| s.wrapper_pid == wrapper_pid && self.end(s).is_none())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_and_ends_are_read_and_garbage_is_counted() {
        let log = HandlerLog::parse(
            "S 7 3 1000 1 0 500 400 1010\nE 7 3 1000 1 0 500 400 1300 0\nS 8 3\nnoise\n",
        );
        assert_eq!(log.starts.len(), 1);
        assert_eq!(log.starts[0].run_id, 7);
        assert_eq!(log.starts[0].wrapper_pid, 400);
        assert_eq!(
            log.end(&log.starts[0]),
            Some(End {
                at: 1300,
                status: 0
            })
        );
        assert_eq!(log.unreadable_lines, 2);
        assert_eq!(log.in_flight_on(400), 0);
    }

    #[test]
    fn a_reused_pid_does_not_lend_its_end_to_an_earlier_script() {
        // pid 500 ran run 7, which never ended (SIGKILLed); minutes later pid 500 ran run 9.
        let log = HandlerLog::parse(
            "S 7 3 1000 1 0 500 400 1010\nS 9 4 90000 1 0 500 401 90010\nE 9 4 90000 1 0 500 401 90200 0\n",
        );
        assert_eq!(log.end(&log.starts[0]), None);
        assert_eq!(log.end(&log.starts[1]).map(|e| e.at), Some(90_200));
        assert_eq!(log.in_flight_on(400), 1);
    }

    #[test]
    fn the_script_logs_a_start_and_an_end_with_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.log");
        make_sleep_fifo(&path).unwrap();
        let status = std::process::Command::new("bash")
            .arg("-c")
            .arg(SCRIPT)
            .env("CHAOS_LOG", &path)
            .env("CHAOS_FIFO", sleep_fifo(&path))
            .env("CHAOS_SLEEP", "0.05")
            .env("MTHPT_RUN_ID", "11")
            .env("MTHPT_TASK_ID", "2")
            .env("MTHPT_SCHEDULED_AT_MS", "5000")
            .env("MTHPT_ATTEMPT", "1")
            .env("MTHPT_SHARD_INDEX", "0")
            .status()
            .unwrap();
        assert!(status.success());
        let log = HandlerLog::read(&path).unwrap();
        assert_eq!(
            log.unreadable_lines,
            0,
            "{:?}",
            std::fs::read_to_string(&path)
        );
        let start = log.starts[0];
        assert_eq!(
            (start.run_id, start.task_id, start.scheduled_at),
            (11, 2, 5000)
        );
        assert_eq!(start.wrapper_pid, i64::from(std::process::id()));
        let end = log.end(&start).unwrap();
        assert_eq!(end.status, 0);
        assert!(end.at >= start.at + 50, "{start:?} {end:?}");
    }
}

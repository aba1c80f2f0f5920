//! The `shell` built-in handler: runs a bash script in its own process group.
//!
//! Params: either a string (the script) or an object
//! `{"script": "...", "env": {"NAME": "value"}, "cwd": "/path", "kill_grace_ms": 2000}`.
//! The script runs as `bash -c SCRIPT` (after a one-statement prefix on its first line, see below)
//! with stdin from `/dev/null` and these variables set:
//! `MTHPT_RUN_ID`, `MTHPT_TASK_ID`, `MTHPT_TASK_NAME`, `MTHPT_ATTEMPT`, `MTHPT_SHARD_INDEX`,
//! `MTHPT_SHARD_TOTAL`, `MTHPT_SCHEDULED_AT_MS`.
//! Each line of stdout and stderr becomes a log line of the run. A stdout line
//! `::mthpt-alarm <severity> <kind> <message>` (e.g. `::mthpt-alarm warning disk_full disk 91%
//! full`) also raises an alarm, as a handler's `ctx.alarm` does; one that is not valid logs why.
//! Exit status 0 is success; any other status, or death by a signal, is a retryable failure.
//!
//! The run owns its process group: on cancellation or deadline the whole group gets SIGTERM,
//! then SIGKILL after the grace period; when the script ends, whatever is left of its group is
//! terminated the same way. No process the script started outlives the run (unless it left the
//! group on purpose, with `setsid`).
//!
//! Nor does any outlive the wrapper: one guard process per wrapper (a `bash` loop in a process
//! group of its own) reads a pipe (the lifeline) whose write ends only the wrapper and scripts
//! not yet started hold. Each script's first act, before any of its own lines, is to announce its
//! group on that pipe and let go of it (the wrapper puts a short [`REGISTER`] prefix in front of
//! the script on its first line; stdin becomes `/dev/null`); the wrapper announces the group's end.
//! However the wrapper dies — even by SIGKILL — the kernel closes its end, the guard reads
//! end-of-file and SIGKILLs every group still announced. A script that had not announced itself
//! yet still holds a write end, so the guard waits for it. The guard ignores SIGTERM, so it keeps
//! watch through the grace period. The script's pid is its group id. Per run this costs one
//! `bash` start; a guard per run and a launcher doubled and tripled that, which delayed the
//! first line of scripts started together by tens of milliseconds on a small machine.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::time::Instant;

use crate::context::{MAX_LOG_LINE_BYTES, RunContext};
use crate::handler::{HandlerError, HandlerResult};
use crate::protocol::{AlarmError, AlarmSeverity, LogStream};
use crate::runtime::{join_or_abort, lock};

/// Options of the `shell` handler, set by the wrapper's operator.
#[derive(Debug, Clone)]
pub struct ShellOptions {
    /// The bash executable (default `bash`, looked up in `PATH`).
    pub bash: String,
    /// How long the process group has between SIGTERM and SIGKILL, unless the params say
    /// otherwise (default 2 s).
    pub kill_grace: Duration,
}

impl Default for ShellOptions {
    fn default() -> Self {
        Self {
            bash: "bash".to_owned(),
            kill_grace: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellParams {
    script: String,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    kill_grace_ms: Option<u64>,
}

fn parse_params(params: &Value) -> Result<ShellParams, HandlerError> {
    let parsed = match params {
        Value::String(script) => ShellParams {
            script: script.clone(),
            env: BTreeMap::new(),
            cwd: None,
            kill_grace_ms: None,
        },
        other => ShellParams::deserialize(other).map_err(|e| {
            HandlerError::fatal(format!(
                "shell params must be a script string or {{\"script\": ..., \"env\": {{}}, \"cwd\": ..., \"kill_grace_ms\": ...}}: {e}"
            ))
        })?,
    };
    if parsed.script.trim().is_empty() {
        return Err(HandlerError::fatal("shell script is empty"));
    }
    Ok(parsed)
}

/// Whether any live (not zombie) process is in group `pgid`. Asks the kernel first (signal 0,
/// which also counts zombies): an empty group, the common case, costs one system call; otherwise
/// reads `/proc` where it is available.
pub(crate) fn group_alive(pgid: i32) -> bool {
    if killpg(Pid::from_raw(pgid), None) == Err(Errno::ESRCH) {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the command name, which is in parentheses and may contain anything.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let _ppid = fields.next();
        let pgrp = fields.next().and_then(|f| f.parse::<i32>().ok());
        if pgrp == Some(pgid) && state != Some("Z") && state != Some("X") {
            return true;
        }
    }
    false
}

fn signal_group(pgid: i32, signal: Signal) {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pgid, ?signal, error = %e, "could not signal process group"),
    }
}

/// SIGTERM to the group, wait up to `grace` for it to empty, then SIGKILL.
async fn terminate_group(pgid: i32, grace: Duration) {
    if !group_alive(pgid) {
        return;
    }
    signal_group(pgid, Signal::SIGTERM);
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if !group_alive(pgid) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    signal_group(pgid, Signal::SIGKILL);
}

/// The prefix of a stdout line that raises an alarm.
pub const ALARM_PREFIX: &str = "::mthpt-alarm ";

/// An alarm line's severity, kind and message; `None` for any other line.
fn alarm_line(line: &str) -> Option<Result<(AlarmSeverity, &str, &str), AlarmError>> {
    let rest = line.strip_prefix(ALARM_PREFIX)?;
    let mut words = rest.trim_start().splitn(3, ' ');
    let severity = words.next().unwrap_or_default();
    let kind = words.next().unwrap_or_default();
    let message = words.next().unwrap_or_default().trim();
    Some(severity.parse().map(|s| (s, kind, message)))
}

async fn pump<R: AsyncRead + Unpin>(reader: R, ctx: RunContext, stream: LogStream) {
    let mut reader = BufReader::new(reader);
    let mut line: Vec<u8> = Vec::new();
    let emit = |line: &mut Vec<u8>| {
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let text = String::from_utf8_lossy(line).into_owned();
        if stream == LogStream::Stdout {
            match alarm_line(&text) {
                Some(Ok((severity, kind, message))) => {
                    if let Err(e) = ctx.alarm(severity, kind, message) {
                        ctx.log(format!("[mthpt] alarm not raised: {e}"));
                    }
                }
                Some(Err(e)) => ctx.log(format!("[mthpt] alarm not raised: {e}")),
                None => {}
            }
        }
        ctx.log_stream(stream, text);
        line.clear();
    };
    loop {
        let (consumed, newline) = {
            let Ok(buf) = reader.fill_buf().await else {
                break;
            };
            if buf.is_empty() {
                break;
            }
            let (chunk, consumed, newline) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (&buf[..i], i + 1, true),
                None => (buf, buf.len(), false),
            };
            // Keep at most one log line's worth; the rest of an overlong line is dropped.
            let room = MAX_LOG_LINE_BYTES.saturating_sub(line.len());
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            (consumed, newline)
        };
        reader.consume(consumed);
        if newline {
            emit(&mut line);
        }
    }
    if !line.is_empty() {
        emit(&mut line);
    }
}

/// The guard's script: records the groups announced on its stdin (`+<pgid>` when a script
/// starts, `-<pgid>` once its group is empty), and when end-of-file comes — every write end of
/// the pipe is closed, which happens when the wrapper dies, however it dies — SIGKILLs every group
/// still recorded. SIGTERM, SIGINT and SIGHUP are ignored so that it outlasts the wrapper.
const GUARD: &str = r#"trap '' TERM INT HUP
declare -A groups
while IFS= read -r line; do
  [[ $line =~ ^([+-])([0-9]+)$ ]] || continue
  if [[ ${BASH_REMATCH[1]} == + ]]; then groups[${BASH_REMATCH[2]}]=1; else unset "groups[${BASH_REMATCH[2]}]"; fi
done
for g in "${!groups[@]}"; do kill -KILL -- "-$g" 2>/dev/null; done"#;

/// Put in front of the script, on its first line (line numbers stay): the script's bash
/// announces its group (its own pid) on its stdin, the guard's pipe, then takes `/dev/null` as
/// stdin, before any of the script runs.
const REGISTER: &str = r#"{ printf '+%d\n' "$$" >&0 && exec </dev/null; } || exit 70; "#;

/// The wrapper's guard process and the write end of its pipe, started on the first script and
/// again whenever it is found gone.
#[derive(Debug)]
struct GuardProcess {
    child: std::process::Child,
    pipe: std::io::PipeWriter,
}

/// The guard, and the groups of scripts that have started and not ended (announced again to a
/// new guard).
#[derive(Debug, Default)]
struct Guarding {
    process: Option<GuardProcess>,
    groups: std::collections::BTreeSet<i32>,
}

/// The `shell` handler of one wrapper: its options and its guard.
#[derive(Debug)]
pub(crate) struct Shell {
    options: ShellOptions,
    guarding: std::sync::Mutex<Guarding>,
}

impl Shell {
    pub(crate) fn new(options: ShellOptions) -> Self {
        Self {
            options,
            guarding: std::sync::Mutex::default(),
        }
    }

    /// A write end of the guard's pipe for a new script, starting the guard when there is none
    /// or it is gone.
    fn lifeline(&self) -> std::io::Result<std::io::PipeWriter> {
        let mut guarding = lock(&self.guarding);
        if let Some(running) = guarding.process.as_mut()
            && matches!(running.child.try_wait(), Ok(None))
        {
            return running.pipe.try_clone();
        }
        let (reader, mut pipe) = std::io::pipe()?;
        // Both ends are close-on-exec: no other process keeps the pipe open by accident.
        let child = std::process::Command::new(&self.options.bash)
            .arg("-c")
            .arg(GUARD)
            .stdin(reader)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        if guarding.process.is_some() {
            tracing::warn!(
                groups = guarding.groups.len(),
                "the shell guard process was gone; started a new one and gave it the running scripts' groups"
            );
        }
        for pgid in &guarding.groups {
            use std::io::Write;
            writeln!(pipe, "+{pgid}")?;
        }
        let lifeline = pipe.try_clone()?;
        guarding.process = Some(GuardProcess { child, pipe });
        Ok(lifeline)
    }

    fn started(&self, pgid: i32) {
        lock(&self.guarding).groups.insert(pgid);
    }

    /// Tells the guard a group is empty, so that it never signals a later group with the
    /// same id.
    fn ended(&self, pgid: i32) {
        let mut guarding = lock(&self.guarding);
        guarding.groups.remove(&pgid);
        if let Some(running) = guarding.process.as_mut() {
            use std::io::Write;
            if let Err(e) = writeln!(running.pipe, "-{pgid}") {
                tracing::warn!(pgid, error = %e, "could not tell the shell guard a group ended");
            }
        }
    }

    /// Runs the script of `ctx`'s params.
    pub(crate) async fn run(&self, ctx: RunContext) -> HandlerResult {
        let options = &self.options;
        let params = parse_params(ctx.params())?;
        let grace = params
            .kill_grace_ms
            .map(Duration::from_millis)
            .unwrap_or(options.kill_grace);
        let lifeline = self.lifeline().map_err(|e| {
            HandlerError::retryable(format!("cannot start the shell guard process: {e}"))
        })?;
        let mut cmd = Command::new(&options.bash);
        cmd.arg("-c")
            .arg(format!("{REGISTER}{}", params.script))
            .stdin(lifeline)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .env("MTHPT_RUN_ID", ctx.run_id().to_string())
            .env("MTHPT_TASK_ID", ctx.task_id().to_string())
            .env("MTHPT_TASK_NAME", ctx.task_name())
            .env("MTHPT_ATTEMPT", ctx.attempt().to_string())
            .env("MTHPT_SHARD_INDEX", ctx.shard_index().to_string())
            .env("MTHPT_SHARD_TOTAL", ctx.shard_total().to_string())
            .env(
                "MTHPT_SCHEDULED_AT_MS",
                ctx.scheduled_at().timestamp_millis().to_string(),
            )
            .envs(&params.env);
        if let Some(cwd) = &params.cwd {
            cmd.current_dir(cwd);
        }
        let spawned = cmd.spawn();
        // The parent's copy of the lifeline goes with the command.
        drop(cmd);
        let mut child = spawned
            .map_err(|e| HandlerError::fatal(format!("cannot start {:?}: {e}", options.bash)))?;
        let Some(pgid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
            return Err(HandlerError::retryable(
                "script exited before it could be tracked",
            ));
        };
        self.started(pgid);
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(tokio::spawn(pump(out, ctx.clone(), LogStream::Stdout)));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(tokio::spawn(pump(err, ctx.clone(), LogStream::Stderr)));
        }
        let status = tokio::select! {
            status = child.wait() => status,
            reason = ctx.cancelled() => {
                tracing::info!(run_id = ctx.run_id(), pgid, ?reason, "terminating script process group");
                terminate_group(pgid, grace).await;
                child.wait().await
            }
        };
        // Whatever the script left running in its group ends with the run.
        terminate_group(pgid, grace).await;
        self.ended(pgid);
        for reader in readers {
            join_or_abort(reader, Duration::from_secs(2)).await;
        }
        let status =
            status.map_err(|e| HandlerError::retryable(format!("waiting for bash failed: {e}")))?;
        if status.success() {
            return Ok(json!({ "exit_code": 0 }));
        }
        if ctx.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Err(HandlerError::retryable(format!(
                "script exited with status {code}"
            ))),
            (None, Some(signal)) => Err(HandlerError::retryable(format!(
                "script was killed by signal {signal}"
            ))),
            (None, None) => Err(HandlerError::retryable("script ended without a status")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alarm_lines_are_read_from_their_prefix() {
        assert!(alarm_line("disk 91% full").is_none());
        assert!(alarm_line("::mthpt-alarmist").is_none());
        assert_eq!(
            alarm_line("::mthpt-alarm warning disk_full disk 91% full on /var"),
            Some(Ok((
                AlarmSeverity::Warning,
                "disk_full",
                "disk 91% full on /var"
            )))
        );
        assert!(matches!(
            alarm_line("::mthpt-alarm urgent disk_full x"),
            Some(Err(AlarmError::Severity(s))) if s == "urgent"
        ));
    }

    #[test]
    fn params_accept_a_plain_script() -> Result<(), HandlerError> {
        let p = parse_params(&json!("echo hi"))?;
        assert_eq!(p.script, "echo hi");
        Ok(())
    }

    #[test]
    fn params_refuse_unknown_fields_and_empty_scripts() {
        assert!(parse_params(&json!({"script": "x", "scirpt": "y"})).is_err());
        assert!(parse_params(&json!({"script": "  "})).is_err());
        assert!(parse_params(&json!(42)).is_err());
    }
}

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
//!
//! Starting `bash` itself costs about a millisecond of CPU, so scripts due at the same instant
//! still queued behind each other's starts. The handler therefore keeps a few `bash` processes
//! started ahead ([`ShellOptions::prestarted`]), each in a process group of its own, blocked
//! reading its stdin, a pipe only the wrapper writes to. A run takes one: the wrapper announces
//! its group to the guard, then writes the run's variables and the script in one write of at
//! most `PIPE_BUF` bytes (so it arrives whole or not at all); the waiting `bash` exports the
//! variables, takes `/dev/null` as stdin and `eval`s the script on its line 1 — `$0`, `$$`,
//! `$PPID`, `$#`, `LINENO`, `BASH_SOURCE`, error messages and the exit status are those of
//! `bash -c`. A write cut short runs nothing, and a waiting `bash` whose wrapper died reads
//! end-of-file and exits. Runs whose params set a `cwd`, name a variable bash reads or sets at
//! its own start ([`STARTUP_VARIABLES`]), or do not fit in one write start a new `bash` as
//! before; so do runs that find none waiting. The processes are started [`REFILL_DELAY`] after
//! the wrapper is built, and taken ones are replaced that long after, so that the replacements
//! do not compete with the scripts just started.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::Arc;
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
use crate::failure::{HandlerError, HandlerResult};
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
    /// How many `bash` processes are kept started and waiting for a script (default 4; 0 starts
    /// a new one for every run). Each idle one costs a few MB of memory, most of it shared.
    pub prestarted: usize,
}

impl Default for ShellOptions {
    fn default() -> Self {
        Self {
            bash: "bash".to_owned(),
            kill_grace: Duration::from_secs(2),
            prestarted: 4,
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

/// What a prestarted `bash` runs (`bash -c`, all on line 1, so that the `eval`ed script's line
/// numbers are its own): read the whole of stdin, written by [`prestarted_payload`] (`.` reads to
/// end-of-file before it runs anything; a payload cut short is a syntax error that runs
/// nothing), refuse to go on unless it set its completion mark, take `/dev/null` as stdin, and
/// `eval` the script after forgetting the variable that carried it.
const PRESTARTED: &str = r#". /dev/fd/0; [[ ${__mthpt_ok-} == 1 ]] || exit 70; unset -v __mthpt_ok; exec </dev/null; eval "unset -v __mthpt_script; $__mthpt_script""#;

/// Variables bash reads or sets itself when it starts, or will not take by assignment: a run
/// whose params name one of these (or any name starting with `BASH`) starts a new `bash`, which
/// gets them in its environment as before, instead of a prestarted one.
pub(crate) const STARTUP_VARIABLES: &[&str] = &[
    "ENV",
    "SHELLOPTS",
    "POSIXLY_CORRECT",
    "IFS",
    "PS4",
    "UID",
    "EUID",
    "PPID",
    "SHLVL",
    "PWD",
    "OLDPWD",
    "LINENO",
    "RANDOM",
    "SRANDOM",
    "SECONDS",
    "EPOCHSECONDS",
    "EPOCHREALTIME",
    "HISTCMD",
    "FUNCNAME",
    "GROUPS",
    "DIRSTACK",
    "PIPESTATUS",
    "OPTIND",
    "OPTARG",
    "OPTERR",
    "HOSTNAME",
    "HOSTTYPE",
    "MACHTYPE",
    "OSTYPE",
    "COMP_WORDBREAKS",
    "_",
];

/// The largest write a pipe takes whole (POSIX `PIPE_BUF` on Linux): a prestarted `bash`'s
/// payload never exceeds it, so it never blocks the wrapper and is never cut in two.
const PIPE_BUF: usize = 4096;

/// How long after the wrapper is built its prestarted `bash` processes are started, and after a
/// run took one its replacement.
pub(crate) const REFILL_DELAY: Duration = Duration::from_millis(100);

/// `value` in single quotes, for bash.
fn single_quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', r#"'\''"#))
}

/// Whether `name` may be exported by a prestarted `bash` with the same effect as putting it in
/// the environment of a new one.
fn assignable(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !name.starts_with("BASH")
        && !STARTUP_VARIABLES.contains(&name)
}

/// What a prestarted `bash` reads for a run with `env` (the run's variables, then the params'):
/// in one brace group, an `export` line, the script in a variable, and the completion mark.
/// `None` when the run must start a new `bash` (see the module's documentation).
fn prestarted_payload<'a>(
    env: impl IntoIterator<Item = (&'a str, &'a str)>,
    params: &ShellParams,
) -> Option<String> {
    if params.cwd.is_some() || params.script.contains('\0') {
        return None;
    }
    // One brace group: bash parses it whole before running any of it, so a prefix of it is a
    // syntax error that runs nothing.
    let mut payload = String::from("{ ");
    let mut exports = String::new();
    for (name, value) in env {
        if !assignable(name) || value.contains('\0') {
            return None;
        }
        exports.push(' ');
        exports.push_str(name);
        exports.push('=');
        exports.push_str(&single_quoted(value));
    }
    if !exports.is_empty() {
        payload.push_str("export");
        payload.push_str(&exports);
        payload.push('\n');
    }
    payload.push_str("__mthpt_script=");
    payload.push_str(&single_quoted(&params.script));
    payload.push_str("\n__mthpt_ok=1\n}\n");
    (payload.len() <= PIPE_BUF).then_some(payload)
}

/// A `bash` started ahead of its run (see [`PRESTARTED`]) and the write end of its stdin.
#[derive(Debug)]
struct Prestarted {
    child: tokio::process::Child,
    stdin: std::io::PipeWriter,
}

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

/// The `shell` handler of one wrapper: its options, its guard and its prestarted `bash`
/// processes.
#[derive(Debug)]
pub(crate) struct Shell {
    options: ShellOptions,
    guarding: std::sync::Mutex<Guarding>,
    prestarted: std::sync::Mutex<std::collections::VecDeque<Prestarted>>,
    refilling: std::sync::atomic::AtomicBool,
}

impl Shell {
    pub(crate) fn new(options: ShellOptions) -> Self {
        Self {
            options,
            guarding: std::sync::Mutex::default(),
            prestarted: std::sync::Mutex::default(),
            refilling: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The guard, started when there is none or it is gone; a new guard is given the groups of
    /// the scripts still running.
    fn guard<'a>(&self, guarding: &'a mut Guarding) -> std::io::Result<&'a mut GuardProcess> {
        let running = guarding
            .process
            .as_mut()
            .is_some_and(|p| matches!(p.child.try_wait(), Ok(None)));
        if !running {
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
            guarding.process = Some(GuardProcess { child, pipe });
        }
        guarding
            .process
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the shell guard process is missing"))
    }

    /// A write end of the guard's pipe for a new script to announce itself on.
    fn lifeline(&self) -> std::io::Result<std::io::PipeWriter> {
        let mut guarding = lock(&self.guarding);
        self.guard(&mut guarding)?.pipe.try_clone()
    }

    /// Records a group whose script announced itself.
    fn started(&self, pgid: i32) {
        lock(&self.guarding).groups.insert(pgid);
    }

    /// Records a group and announces it to the guard (for a prestarted `bash`, before it gets
    /// its script).
    fn announce(&self, pgid: i32) -> std::io::Result<()> {
        use std::io::Write;
        let mut guarding = lock(&self.guarding);
        guarding.groups.insert(pgid);
        writeln!(self.guard(&mut guarding)?.pipe, "+{pgid}")
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

    /// `bash -c CODE` for a script: `stdin` as given, stdout and stderr piped to the wrapper,
    /// in a process group of its own.
    fn script_command(&self, code: &str, stdin: impl Into<Stdio>) -> Command {
        let mut cmd = Command::new(&self.options.bash);
        cmd.arg("-c")
            .arg(code)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        cmd
    }

    /// Starts a `bash` that waits for a script.
    fn prestart(&self) -> std::io::Result<Prestarted> {
        let (reader, stdin) = std::io::pipe()?;
        let child = self.script_command(PRESTARTED, reader).spawn()?;
        Ok(Prestarted { child, stdin })
    }

    /// Brings the prestarted processes back to [`ShellOptions::prestarted`], [`REFILL_DELAY`]
    /// from now, unless that is already planned.
    pub(crate) fn refill_later(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if self.options.prestarted == 0 || self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let shell = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(REFILL_DELAY).await;
            while lock(&shell.prestarted).len() < shell.options.prestarted {
                match shell.prestart() {
                    Ok(waiting) => lock(&shell.prestarted).push_back(waiting),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not prestart bash for the shell handler");
                        break;
                    }
                }
            }
            shell.refilling.store(false, Ordering::Release);
        });
    }

    /// Hands `payload` to the longest-waiting prestarted `bash`, announced to the guard first;
    /// `None` when none is waiting or it could not take it.
    fn take_prestarted(&self, payload: &str) -> Option<(tokio::process::Child, i32)> {
        use std::io::Write;
        let mut waiting = loop {
            let mut candidate = lock(&self.prestarted).pop_front()?;
            if matches!(candidate.child.try_wait(), Ok(None)) {
                break candidate;
            }
        };
        let pgid = waiting.child.id().and_then(|id| i32::try_from(id).ok())?;
        if let Err(e) = self.announce(pgid) {
            tracing::warn!(error = %e, "cannot announce a prestarted bash to the shell guard");
            self.ended(pgid);
            return None;
        }
        // One write of at most PIPE_BUF bytes: whole or nothing. Closing the pipe lets `.` end.
        let written = waiting.stdin.write_all(payload.as_bytes());
        drop(waiting.stdin);
        if let Err(e) = written {
            tracing::warn!(pgid, error = %e, "a prestarted bash did not take its script");
            signal_group(pgid, Signal::SIGKILL);
            self.ended(pgid);
            return None;
        }
        Some((waiting.child, pgid))
    }

    /// A new `bash` running `params`' script with `env`.
    fn start_new<'a>(
        &self,
        env: impl IntoIterator<Item = (&'a str, &'a str)>,
        params: &ShellParams,
    ) -> Result<(tokio::process::Child, i32), HandlerError> {
        let lifeline = self.lifeline().map_err(|e| {
            HandlerError::retryable(format!("cannot start the shell guard process: {e}"))
        })?;
        let mut cmd = self.script_command(&format!("{REGISTER}{}", params.script), lifeline);
        cmd.envs(env);
        if let Some(cwd) = &params.cwd {
            cmd.current_dir(cwd);
        }
        let spawned = cmd.spawn();
        // The parent's copy of the lifeline goes with the command.
        drop(cmd);
        let child = spawned.map_err(|e| {
            HandlerError::fatal(format!("cannot start {:?}: {e}", self.options.bash))
        })?;
        let Some(pgid) = child.id().and_then(|id| i32::try_from(id).ok()) else {
            return Err(HandlerError::retryable(
                "script exited before it could be tracked",
            ));
        };
        self.started(pgid);
        Ok((child, pgid))
    }

    /// Runs the script of `ctx`'s params.
    pub(crate) async fn run(self: &Arc<Self>, ctx: RunContext) -> HandlerResult {
        let params = parse_params(ctx.params())?;
        let grace = params
            .kill_grace_ms
            .map(Duration::from_millis)
            .unwrap_or(self.options.kill_grace);
        let run_env = [
            ("MTHPT_RUN_ID", ctx.run_id().to_string()),
            ("MTHPT_TASK_ID", ctx.task_id().to_string()),
            ("MTHPT_TASK_NAME", ctx.task_name().to_owned()),
            ("MTHPT_ATTEMPT", ctx.attempt().to_string()),
            ("MTHPT_SHARD_INDEX", ctx.shard_index().to_string()),
            ("MTHPT_SHARD_TOTAL", ctx.shard_total().to_string()),
            (
                "MTHPT_SCHEDULED_AT_MS",
                ctx.scheduled_at().timestamp_millis().to_string(),
            ),
        ];
        let env = || {
            run_env
                .iter()
                .map(|(name, value)| (*name, value.as_str()))
                .chain(params.env.iter().map(|(n, v)| (n.as_str(), v.as_str())))
        };
        let prestarted = if self.options.prestarted == 0 {
            None
        } else {
            let taken = prestarted_payload(env(), &params)
                .and_then(|payload| self.take_prestarted(&payload));
            self.refill_later();
            taken
        };
        let (mut child, pgid) = match prestarted {
            Some(taken) => taken,
            None => self.start_new(env(), &params)?,
        };
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

    fn script(script: &str) -> ShellParams {
        ShellParams {
            script: script.to_owned(),
            env: BTreeMap::new(),
            cwd: None,
            kill_grace_ms: None,
        }
    }

    #[test]
    fn runs_a_prestarted_bash_cannot_reproduce_start_a_new_one() {
        let plain = script("echo hi");
        assert!(prestarted_payload([("APP_ENV", "prod")], &plain).is_some());
        for name in [
            "BASH_ENV",
            "IFS",
            "SHELLOPTS",
            "PS4",
            "UID",
            "A-B",
            "1A",
            "",
            "X=Y",
        ] {
            assert!(
                prestarted_payload([(name, "v")], &plain).is_none(),
                "{name:?} must start a new bash"
            );
        }
        assert!(prestarted_payload([("A", "nul\0byte")], &plain).is_none());
        assert!(prestarted_payload([], &script("echo \0")).is_none());
        let mut in_dir = script("pwd");
        in_dir.cwd = Some("/tmp".to_owned());
        assert!(prestarted_payload([], &in_dir).is_none());
        assert!(prestarted_payload([], &script(&"#".repeat(PIPE_BUF))).is_none());
    }

    /// Runs `script` with `env` on a `bash -c PRESTARTED` fed `payload` (or the payload cut
    /// short), returning its exit code and stdout.
    fn through_prestarted(payload: &str) -> std::io::Result<(Option<i32>, String)> {
        use std::io::Write;
        let mut child = std::process::Command::new("bash")
            .arg("-c")
            .arg(PRESTARTED)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(payload.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        Ok((
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    }

    #[test]
    fn a_prestarted_bash_gets_the_exact_script_and_variables() -> std::io::Result<()> {
        let tricky = "it's \"quoted\" $HOME `x` \\ and\nnew line";
        let probe = script(concat!(
            "printf '[%s]\\n' \"$TRICKY\" \"$0\" \"$#\" \"$LINENO\" \"${BASH_SOURCE[0]-}\"\n",
            "declare -p __mthpt_script __mthpt_ok >/dev/null 2>&1; echo \"leaked=$?\"\n",
            "bash -c 'printf \"[%s]\\n\" \"$TRICKY\"'\n",
            "read -r line; echo \"stdin=$?\"\n",
            "exit 7",
        ));
        let Some(payload) = prestarted_payload([("TRICKY", tricky)], &probe) else {
            panic!("a plain script and variable fit a prestarted bash");
        };
        let (code, out) = through_prestarted(&payload)?;
        assert_eq!(code, Some(7));
        let expected = format!("[{tricky}]\n[bash]\n[0]\n[1]\n[]\nleaked=1\n[{tricky}]\nstdin=1\n");
        assert_eq!(out, expected);
        Ok(())
    }

    #[test]
    fn a_payload_cut_short_runs_nothing() -> std::io::Result<()> {
        let Some(payload) = prestarted_payload([], &script("echo ran")) else {
            panic!("a plain script fits a prestarted bash");
        };
        for cut in 0..payload.len() - 1 {
            let (code, out) = through_prestarted(&payload[..cut])?;
            assert_eq!((code, out.as_str()), (Some(70), ""), "cut at {cut}");
        }
        Ok(())
    }

    #[test]
    fn params_refuse_unknown_fields_and_empty_scripts() {
        assert!(parse_params(&json!({"script": "x", "scirpt": "y"})).is_err());
        assert!(parse_params(&json!({"script": "  "})).is_err());
        assert!(parse_params(&json!(42)).is_err());
    }
}

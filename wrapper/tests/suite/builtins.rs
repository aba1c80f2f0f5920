//! Built-in handlers: `shell` (process group killed on cancel or deadline) and `http`.

use crate::common;

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use common::{EngineStandIn, TestWrapper, engine_client, eventually, post, run_request};
use mthpt_wrapper::ShellOptions;
use mthpt_wrapper::protocol::{Outcome, RunRequest, RunResult, paths};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(15);

/// Live (not zombie) processes whose process group is `pgid`, read from /proc.
fn live_members(pgid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After the command: state, ppid, pgrp.
        let (Some(state), Some(pgrp)) = (fields.first(), fields.get(2)) else {
            continue;
        };
        if pgrp.parse::<i32>().ok() == Some(pgid) && *state != "Z" && *state != "X" {
            found.push(pid);
        }
    }
    found
}

fn shell_run(run_id: i64, script: &str, pid_file: &Path) -> RunRequest {
    let mut run = run_request(run_id, "shell");
    run.params = json!({
        "script": script,
        "env": { "PID_FILE": pid_file.display().to_string() },
        "kill_grace_ms": 300
    });
    run
}

/// Waits for the script to write its pid (its process group id) to `pid_file`.
async fn read_pgid(pid_file: &Path) -> Option<i32> {
    let mut pgid = None;
    eventually(WAIT, || {
        pgid = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        pgid.is_some()
    })
    .await;
    pgid
}

// Three kinds of children: a plain sleep, a nested bash, and a subshell that ignores SIGTERM
// (so only the SIGKILL after the grace period ends it).
const FAMILY: &str = r#"
sleep 300 &
bash -c 'sleep 300; echo never' &
( trap '' TERM; sleep 300 ) &
echo $$ > "$PID_FILE"
echo "family started"
wait
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_shell_script_leaves_no_process_in_its_group() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let scratch = tempfile::tempdir()?;
    let pid_file = scratch.path().join("pgid");
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.enable_shell(ShellOptions::default())
    })?;
    let client = engine_client()?;
    let resp = post(
        &client,
        &w.url,
        paths::RUNS,
        &shell_run(1, FAMILY, &pid_file),
    )
    .await?;
    assert_eq!(resp.status.as_u16(), 202);
    let Some(pgid) = read_pgid(&pid_file).await else {
        anyhow::bail!("the script never wrote its pid");
    };
    assert!(
        eventually(WAIT, || live_members(pgid).len() >= 4).await,
        "script and its children run in group {pgid}: {:?}",
        live_members(pgid)
    );

    let cancel = post(&client, &w.url, &paths::run_cancel(1), &json!({})).await?;
    assert_eq!(cancel.status.as_u16(), 200);
    assert!(eventually(WAIT, || engine.results_for(1).len() == 1).await);
    let result = engine.results_for(1).remove(0);
    assert_eq!(result.outcome, Outcome::Cancelled);
    assert!(result.log_tail.contains(&"family started".to_owned()));
    assert_eq!(
        live_members(pgid),
        Vec::<i32>::new(),
        "group {pgid} is empty"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_deadline_kills_the_group_and_reports_timed_out() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let scratch = tempfile::tempdir()?;
    let pid_file = scratch.path().join("pgid");
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.enable_shell(ShellOptions::default())
    })?;
    let client = engine_client()?;
    let mut run = shell_run(2, FAMILY, &pid_file);
    run.deadline = Some(chrono::Utc::now() + chrono::Duration::milliseconds(1500));
    let resp = post(&client, &w.url, paths::RUNS, &run).await?;
    assert_eq!(resp.status.as_u16(), 202);
    let Some(pgid) = read_pgid(&pid_file).await else {
        anyhow::bail!("the script never wrote its pid");
    };
    assert!(eventually(WAIT, || engine.results_for(2).len() == 1).await);
    assert_eq!(engine.results_for(2)[0].outcome, Outcome::TimedOut);
    assert_eq!(
        live_members(pgid),
        Vec::<i32>::new(),
        "group {pgid} is empty"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_output_becomes_log_lines_and_the_exit_status_decides() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.enable_shell(ShellOptions::default())
    })?;
    let client = engine_client()?;
    let mut ok = run_request(3, "shell");
    ok.params = json!("echo \"run $MTHPT_RUN_ID\"; echo oops >&2; exit 0");
    let mut failing = run_request(4, "shell");
    failing.params = json!({"script": "exit 3"});
    for run in [&ok, &failing] {
        let resp = post(&client, &w.url, paths::RUNS, run).await?;
        assert_eq!(resp.status.as_u16(), 202);
    }
    assert!(eventually(WAIT, || engine.log().results.len() == 2).await);
    let done = engine.results_for(3).remove(0);
    assert_eq!(done.outcome, Outcome::Succeeded);
    assert!(done.log_tail.contains(&"run 3".to_owned()));
    // A stderr line is kept as the engine stores it when it is streamed.
    assert!(done.log_tail.contains(&"[stderr] oops".to_owned()));
    let failed = engine.results_for(4).remove(0);
    assert_eq!(failed.outcome, Outcome::FailedRetryable);
    assert!(failed.error.is_some_and(|e| e.contains("status 3")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtins_are_off_unless_enabled() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
        b.blocking_handler("own", |_| Ok(json!(null)))
    })?;
    let client = engine_client()?;
    for (run_id, handler) in [(1, "shell"), (2, "http")] {
        let resp = post(&client, &w.url, paths::RUNS, &run_request(run_id, handler)).await?;
        assert_eq!(resp.status.as_u16(), 404, "{handler}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_handler_checks_the_expected_status() -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let target = format!("http://{}", listener.local_addr()?);
    let server = HttpServer::new(|| {
        App::new()
            .route(
                "/ok",
                web::post().to(|body: String| async move {
                    HttpResponse::Ok().body(format!("got {body}"))
                }),
            )
            .route(
                "/busy",
                web::get().to(|| async { HttpResponse::ServiceUnavailable().finish() }),
            )
            .route(
                "/gone",
                web::get().to(|| async { HttpResponse::NotFound().finish() }),
            )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run();
    tokio::spawn(server);

    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| b.enable_http())?;
    let client = engine_client()?;
    let cases = [
        (
            1,
            json!({"url": format!("{target}/ok"), "method": "POST", "body": "hello"}),
        ),
        (2, json!({"url": format!("{target}/busy")})),
        (3, json!({"url": format!("{target}/gone")})),
        (
            4,
            json!({"url": format!("{target}/gone"), "expect_status": [404]}),
        ),
        (5, json!({"url": "ftp://example.invalid/x"})),
    ];
    for (run_id, params) in &cases {
        let mut run = run_request(*run_id, "http");
        run.params = params.clone();
        let resp = post(&client, &w.url, paths::RUNS, &run).await?;
        assert_eq!(resp.status.as_u16(), 202);
    }
    assert!(eventually(WAIT, || engine.log().results.len() == cases.len()).await);
    let outcome = |id| engine.results_for(id)[0].outcome;
    assert_eq!(outcome(1), Outcome::Succeeded);
    assert_eq!(
        engine.results_for(1)[0].output,
        json!({"status": 200, "body": "got hello"})
    );
    assert_eq!(outcome(2), Outcome::FailedRetryable);
    assert_eq!(outcome(3), Outcome::FailedFatal);
    assert_eq!(outcome(4), Outcome::Succeeded);
    assert_eq!(outcome(5), Outcome::FailedFatal);
    Ok(())
}

/// Tells `shell_wrapper_process` where its engine and spool are.
const CHILD_ENGINE: &str = "MTHPT_TEST_CHILD_ENGINE_URL";
const CHILD_SPOOL: &str = "MTHPT_TEST_CHILD_SPOOL";
/// Everything a script can observe of how it was started, printed one item per line.
const PROBE: &str = r#"echo "0=$0 args=$# line=$LINENO source=[${BASH_SOURCE[0]-}]"
echo "parent=$([ "$PPID" = "$TEST_PID" ] && echo wrapper || echo "other $PPID")"
echo "run=$MTHPT_RUN_ID task=$MTHPT_TASK_NAME attempt=$MTHPT_ATTEMPT shards=$MTHPT_SHARD_INDEX/$MTHPT_SHARD_TOTAL"
printf 'tricky=[%s]\n' "$TRICKY"
bash -c 'printf "exported=[%s]\n" "$TRICKY"'
declare -p __mthpt_script __mthpt_ok >/dev/null 2>&1; echo "carrier variables: $?"
read -r line; echo "stdin read status $?"
[ -p /dev/stdin ] && echo "stdin is a pipe" || echo "stdin is not a pipe"
echo "group leader: $([ "$(ps -o pgid= $$ | tr -d ' ')" = "$$" ] && echo yes || echo no)"
shopt -s extglob
case abc in @(a|x)bc) echo "extglob on line $LINENO";; esac
no_such_command_here
echo "line=$LINENO"
exit 7"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prestarted_bash_runs_a_script_as_a_new_bash_does() -> anyhow::Result<()> {
    // The same name of bash for both wrappers: it is the scripts' `$0`.
    let scratch = tempfile::tempdir()?;
    let bash = own_bash(scratch.path())?;
    let mut run = run_request(21, "shell");
    run.params = json!({
        "script": format!("echo \"pid=$$\"\n{PROBE}"),
        "env": {
            "TEST_PID": std::process::id().to_string(),
            "TRICKY": "it's \"quoted\" $HOME `id` \\ and\na new line",
        },
    });
    // What the script printed, in order of its lines, without its pid; and its pid.
    let mut seen = Vec::new();
    for prestarted in [0, 4] {
        let engine = EngineStandIn::start()?;
        let spool = tempfile::tempdir()?;
        let w = TestWrapper::start(&[&engine.url], spool.path(), |b| {
            b.enable_shell(ShellOptions {
                bash: bash.clone(),
                prestarted,
                ..ShellOptions::default()
            })
        })?;
        let mut waiting = Vec::new();
        if prestarted > 0 {
            waiting = warm_up(&engine, &w.url, 20, &bash, prestarted).await?;
        }
        let result = run_to_result(&engine, &w.url, &run).await?;
        assert_eq!(result.outcome, Outcome::FailedRetryable);
        assert!(result.error.is_some_and(|e| e.contains("status 7")));
        let pid = script_pid(&result.log_tail);
        let mut lines: Vec<String> = result
            .log_tail
            .into_iter()
            .filter(|l| !l.starts_with("pid="))
            .collect();
        // stdout and stderr are read apart, so only each stream's order is certain.
        lines.sort();
        seen.push((lines, pid, waiting));
    }
    let [(cold, _, _), (warm, warm_pid, waiting)] = &seen[..] else {
        anyhow::bail!("two runs expected");
    };
    assert!(
        warm_pid.is_some_and(|p| waiting.contains(&p)),
        "the second wrapper's script ran on a bash started before the run ({warm_pid:?} in {waiting:?})"
    );
    assert_eq!(
        cold, warm,
        "the same lines from a new and a prestarted bash"
    );
    let bash_name = format!("0={bash} args=0 line=2 source=[]");
    // A stderr line is kept as the engine stores it when it is streamed.
    let not_found = format!("[stderr] {bash}: line 13: no_such_command_here: command not found");
    for expected in [
        bash_name.as_str(),
        "parent=wrapper",
        "run=21 task=nightly-close attempt=1 shards=0/1",
        "tricky=[it's \"quoted\" $HOME `id` \\ and",
        "exported=[it's \"quoted\" $HOME `id` \\ and",
        "carrier variables: 1",
        "stdin read status 1",
        "stdin is not a pipe",
        "group leader: yes",
        "extglob on line 12",
        not_found.as_str(),
        "line=14",
    ] {
        assert!(
            cold.iter().any(|l| l == expected),
            "{expected:?} in {cold:#?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_a_prestarted_bash_cannot_take_start_a_new_one() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let scratch = tempfile::tempdir()?;
    let bash = own_bash(scratch.path())?;
    let options = ShellOptions {
        bash: bash.clone(),
        ..ShellOptions::default()
    };
    let prestarted = options.prestarted;
    let w = TestWrapper::start(&[&engine.url], spool.path(), |b| b.enable_shell(options))?;
    let waiting = warm_up(&engine, &w.url, 30, &bash, prestarted).await?;

    let mut in_dir = run_request(31, "shell");
    in_dir.params = json!({"script": "echo \"pid=$$\"; pwd", "cwd": scratch.path()});
    let mut long = run_request(32, "shell");
    long.params = json!(format!("{}\necho \"pid=$$\"; echo long", "#".repeat(5_000)));
    let mut startup_variable = run_request(33, "shell");
    startup_variable.params =
        json!({"script": "echo \"pid=$$\"; echo \"[$IFS]\"", "env": {"IFS": "x"}});
    for (run, expected) in [
        (&in_dir, scratch.path().display().to_string()),
        (&long, "long".to_owned()),
        // bash takes no IFS from its environment: a new bash has its default.
        (&startup_variable, "[ \t".to_owned()),
    ] {
        let result = run_to_result(&engine, &w.url, run).await?;
        assert_eq!(result.outcome, Outcome::Succeeded, "{result:?}");
        assert!(
            result.log_tail.contains(&expected),
            "{expected:?} in {result:?}"
        );
        let pid = script_pid(&result.log_tail);
        assert!(
            pid.is_some_and(|p| !waiting.contains(&p)),
            "run {} started a new bash ({pid:?} not in {waiting:?})",
            run.run_id
        );
    }
    Ok(())
}

/// A name for bash of this test's own (a link in `dir`), so that the test can tell its wrapper's
/// bash processes from those of other tests in this process.
fn own_bash(dir: &Path) -> anyhow::Result<String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let Some(bash) = std::env::split_paths(&path)
        .map(|d| d.join("bash"))
        .find(|b| b.is_file())
    else {
        anyhow::bail!("no bash in PATH");
    };
    let link = dir.join("own-bash");
    std::os::unix::fs::symlink(bash, &link)?;
    Ok(link.display().to_string())
}

/// Runs `run_id` (a script that exits 0) on the wrapper at `url`, whose shell handler runs
/// `bash`; the pids of its `prestarted` bash processes once all are waiting again.
async fn warm_up(
    engine: &EngineStandIn,
    url: &str,
    run_id: i64,
    bash: &str,
    prestarted: usize,
) -> anyhow::Result<Vec<i32>> {
    let mut run = run_request(run_id, "shell");
    run.params = json!("exit 0");
    run_to_result(engine, url, &run).await?;
    let ours = || {
        children_running(std::process::id(), |cmdline| {
            cmdline.starts_with(bash) && cmdline.contains(PRESTARTED_MARK)
        })
    };
    assert!(
        eventually(WAIT, || ours().len() == prestarted).await,
        "{prestarted} bash processes started ahead: {:?}",
        ours()
    );
    Ok(ours())
}

/// Posts `run` to the wrapper at `url`; its result, once `engine` has it.
async fn run_to_result(
    engine: &EngineStandIn,
    url: &str,
    run: &RunRequest,
) -> anyhow::Result<RunResult> {
    let resp = post(&engine_client()?, url, paths::RUNS, run).await?;
    assert_eq!(resp.status.as_u16(), 202);
    assert!(eventually(WAIT, || engine.results_for(run.run_id).len() == 1).await);
    Ok(engine.results_for(run.run_id).remove(0))
}

/// The pid a script printed on a line `pid=<pid>`.
fn script_pid(log_tail: &[String]) -> Option<i32> {
    log_tail
        .iter()
        .find_map(|l| l.strip_prefix("pid=")?.parse::<i32>().ok())
}

const CHILD_URL_PREFIX: &str = "wrapper-url=";

/// The wrapper process that `shell_children_die_with_a_sigkilled_wrapper` starts by running this
/// test binary again: a wrapper with the `shell` handler that serves until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the wrapper process of shell_children_die_with_a_sigkilled_wrapper, not a test"]
async fn shell_wrapper_process() -> anyhow::Result<()> {
    let engine = std::env::var(CHILD_ENGINE)?;
    let spool = std::env::var(CHILD_SPOOL)?;
    let w = TestWrapper::start(&[&engine], Path::new(&spool), |b| {
        b.enable_shell(ShellOptions::default())
    })?;
    println!("{CHILD_URL_PREFIX}{}", w.url);
    tokio::time::sleep(Duration::from_secs(600)).await;
    Ok(())
}

/// A wrapper with the `shell` handler in a process of its own (`shell_wrapper_process`), and the
/// URL it serves.
async fn spawn_shell_wrapper_process(
    engine: &EngineStandIn,
    spool: &Path,
) -> anyhow::Result<(tokio::process::Child, String)> {
    use tokio::io::{AsyncBufReadExt, BufReader};

    // The test's name in this binary: its module path without the crate's name.
    let test = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::shell_wrapper_process"),
        None => "shell_wrapper_process".to_owned(),
    };
    let mut wrapper = tokio::process::Command::new(std::env::current_exe()?)
        .args([
            test.as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENGINE, &engine.url)
        .env(CHILD_SPOOL, spool)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let Some(stdout) = wrapper.stdout.take() else {
        anyhow::bail!("the wrapper process has no stdout");
    };
    let mut lines = BufReader::new(stdout).lines();
    let url = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await? {
            // The test harness may print the test's name on the same line first.
            if let Some((_, url)) = line.split_once(CHILD_URL_PREFIX) {
                return Ok(url.trim().to_owned());
            }
        }
        anyhow::bail!("the wrapper process ended before it served")
    })
    .await??;
    Ok((wrapper, url))
}

/// Posts run `run_id` running [`FAMILY`] to the wrapper at `url`; its process group.
async fn start_family(url: &str, run_id: i64, pid_file: &Path) -> anyhow::Result<i32> {
    let client = engine_client()?;
    let resp = post(
        &client,
        url,
        paths::RUNS,
        &shell_run(run_id, FAMILY, pid_file),
    )
    .await?;
    assert_eq!(resp.status.as_u16(), 202);
    read_pgid(pid_file)
        .await
        .ok_or_else(|| anyhow::anyhow!("the script of run {run_id} never wrote its pid"))
}

/// SIGKILLs the wrapper process and checks that every group empties within a second.
async fn kill_wrapper_and_expect_empty_groups(
    mut wrapper: tokio::process::Child,
    groups: &[i32],
) -> anyhow::Result<()> {
    wrapper.start_kill()?;
    wrapper.wait().await?;
    let killed = std::time::Instant::now();
    let emptied = eventually(Duration::from_secs(1), || {
        groups.iter().all(|&g| live_members(g).is_empty())
    })
    .await;
    let left: Vec<(i32, Vec<i32>)> = groups.iter().map(|&g| (g, live_members(g))).collect();
    assert!(
        emptied,
        "groups still have members 1 s after their wrapper was SIGKILLed: {left:?}"
    );
    eprintln!(
        "groups {groups:?} empty {} ms after the wrapper was SIGKILLed",
        killed.elapsed().as_millis()
    );
    Ok(())
}

/// In the command line of a prestarted bash (and of no other process).
const PRESTARTED_MARK: &str = "__mthpt_ok";

/// Live children of `parent` whose command line (arguments joined by NUL) `matches`.
fn children_running(parent: u32, matches: impl Fn(&str) -> bool) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
            let state = fields.next()?;
            let ppid = fields.next()?.parse::<u32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            (ppid == parent && state != "Z" && matches(&String::from_utf8_lossy(&cmdline)))
                .then_some(pid)
        })
        .collect()
}

/// The wrapper's guard: the `bash` child of `wrapper` running the guard loop.
fn guard_of(wrapper: u32) -> Option<i32> {
    children_running(wrapper, |cmdline| cmdline.contains("declare -A groups"))
        .first()
        .copied()
}

/// The `bash` children of `wrapper` started ahead and waiting for a script.
fn prestarted_under(wrapper: u32) -> Vec<i32> {
    children_running(wrapper, |cmdline| cmdline.contains(PRESTARTED_MARK))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_children_die_with_a_sigkilled_wrapper() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let scratch = tempfile::tempdir()?;
    let pid_file = scratch.path().join("pgid");
    let (wrapper, url) = spawn_shell_wrapper_process(&engine, spool.path()).await?;
    let Some(wrapper_pid) = wrapper.id() else {
        anyhow::bail!("the wrapper process has no pid");
    };
    // The handler starts its bash processes with the wrapper, before any run.
    let prestarted = ShellOptions::default().prestarted;
    assert!(
        eventually(WAIT, || prestarted_under(wrapper_pid).len() == prestarted).await,
        "{prestarted} bash processes waiting under a new wrapper: {:?}",
        prestarted_under(wrapper_pid)
    );
    let first = start_family(&url, 5, &pid_file).await?;
    // The one taken is replaced; the next script runs on one of those waiting then.
    assert!(
        eventually(WAIT, || prestarted_under(wrapper_pid).len() == prestarted).await,
        "{prestarted} prestarted bash processes under the wrapper: {:?}",
        prestarted_under(wrapper_pid)
    );
    let waiting = prestarted_under(wrapper_pid);
    let second = start_family(&url, 8, &scratch.path().join("second")).await?;
    assert!(
        waiting.contains(&second),
        "the second script ran on a prestarted bash ({second} in {waiting:?})"
    );
    // Each script and its three children (the wrapper's guard is in a group of its own).
    for pgid in [first, second] {
        assert!(
            eventually(WAIT, || live_members(pgid).len() >= 4).await,
            "script and its children run in group {pgid}: {:?}",
            live_members(pgid)
        );
    }
    // The bash processes still waiting go too: each is its own group's only member.
    let mut groups = vec![first, second];
    groups.extend(waiting.iter().filter(|&&p| p != second));
    groups.extend(prestarted_under(wrapper_pid));
    groups.sort_unstable();
    groups.dedup();
    kill_wrapper_and_expect_empty_groups(wrapper, &groups).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_guard_is_replaced_and_still_covers_running_scripts() -> anyhow::Result<()> {
    let engine = EngineStandIn::start()?;
    let spool = tempfile::tempdir()?;
    let scratch = tempfile::tempdir()?;
    let (wrapper, url) = spawn_shell_wrapper_process(&engine, spool.path()).await?;
    let Some(wrapper_pid) = wrapper.id() else {
        anyhow::bail!("the wrapper process has no pid");
    };
    let first = start_family(&url, 6, &scratch.path().join("first")).await?;
    let Some(guard) = guard_of(wrapper_pid) else {
        anyhow::bail!("no guard process under wrapper {wrapper_pid}");
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(guard),
        nix::sys::signal::Signal::SIGKILL,
    )?;

    // The next script finds the guard gone and starts a new one, which learns of both groups.
    let second = start_family(&url, 7, &scratch.path().join("second")).await?;
    let replaced = eventually(WAIT, || guard_of(wrapper_pid).is_some_and(|g| g != guard)).await;
    assert!(replaced, "no new guard under wrapper {wrapper_pid}");
    kill_wrapper_and_expect_empty_groups(wrapper, &[first, second]).await
}

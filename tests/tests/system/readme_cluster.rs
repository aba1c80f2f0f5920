//! The README's "Running a cluster" section, run as written against PostgreSQL with real
//! processes: its shell block is read from README.md and each command is run in order, with
//! only the placeholders replaced (database URL, host names, ports, the printed token and the
//! secret file's place). Two engine nodes run the engine command, as on two hosts. The wrapper
//! must register, and the task the section applies must run and succeed, all through the
//! `mthpt` command and the console API; each finished run is one INFO line of the engine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mthpt_testkit::{ChildGuard, free_port};

const README: &str = include_str!("../../../README.md");

/// How long one step may take to show its effect (the whole test takes a few seconds).
const STEP: Duration = Duration::from_secs(20);

/// The `mthpt` command line (built inside this crate, as for the benchmark and chaos tests).
const MTHPT: &str = env!("CARGO_BIN_EXE_mthpt-bench-node");

/// One command of the section's shell block.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `mthpt …`, continuation lines joined.
    Mthpt(String),
    /// `export NAME=value …`
    Export(String),
    /// `curl …`
    Curl(String),
    /// `cat > FILE <<'EOF'` … `EOF`
    Write { file: String, body: String },
}

/// The shell block of the README section `title`, as steps; comments and blank lines dropped.
fn section_steps(title: &str) -> Vec<Step> {
    let start = README
        .find(&format!("### {title}\n"))
        .unwrap_or_else(|| panic!("README has no section {title:?}"));
    let rest = &README[start..];
    let block_start = rest.find("```sh\n").expect("the section has a sh block") + "```sh\n".len();
    let block_len = rest[block_start..].find("\n```").expect("the block ends");
    let mut lines = rest[block_start..block_start + block_len].lines();
    let mut steps = Vec::new();
    while let Some(line) = lines.next() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut command = line.to_owned();
        while command.ends_with('\\') {
            command.pop();
            let next = lines.next().expect("a continued line continues");
            command = format!("{} {}", command.trim_end(), next.trim());
        }
        if let Some(heredoc) = command.strip_prefix("cat > ") {
            let (file, marker) = heredoc.split_once(" <<").expect("cat > FILE <<'EOF'");
            let marker = marker.trim_matches('\'');
            let mut body = String::new();
            for l in lines.by_ref() {
                if l == marker {
                    break;
                }
                body.push_str(l);
                body.push('\n');
            }
            steps.push(Step::Write {
                file: file.to_owned(),
                body,
            });
        } else if command.starts_with("mthpt ") {
            steps.push(Step::Mthpt(command));
        } else if command.starts_with("export ") {
            steps.push(Step::Export(command));
        } else if command.starts_with("curl ") {
            steps.push(Step::Curl(command));
        } else {
            panic!("the test does not know how to run {command:?}");
        }
    }
    steps
}

/// Splits a command line into words: whitespace outside quotes separates; `'…'` is literal;
/// `$NAME` outside single quotes is replaced from `vars`.
fn words(line: &str, vars: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                if let Some(w) = word.take() {
                    out.push(w);
                }
            }
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (Some(q), c) if c == q => quote = None,
            (q, '$') if q != Some('\'') => {
                let mut name = String::new();
                while let Some(&n) = chars.peek() {
                    if n.is_ascii_alphanumeric() || n == '_' {
                        name.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                let value = vars
                    .get(&name)
                    .unwrap_or_else(|| panic!("${name} is not set in {line:?}"));
                word.get_or_insert_with(String::new).push_str(value);
            }
            (_, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    assert!(quote.is_none(), "unbalanced quotes in {line:?}");
    out.extend(word);
    out
}

/// Where the section's commands run: a fresh directory, the variables exported so far, and
/// nothing of the caller's `MTHPT_*` environment or CLI config file.
struct Shell {
    dir: PathBuf,
    vars: BTreeMap<String, String>,
}

impl Shell {
    fn command(&self, args: &[String]) -> Command {
        let mut cmd = Command::new(MTHPT);
        cmd.args(&args[1..]).current_dir(&self.dir);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("MTHPT_") {
                cmd.env_remove(name);
            }
        }
        cmd.env("XDG_CONFIG_HOME", self.dir.join("config"))
            .env("RUST_LOG", "info")
            .envs(&self.vars)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs a command to its end; it must succeed. Returns what it printed.
    fn run(&self, args: &[String]) -> String {
        let out = self.command(args).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Starts a background process (console, engine, wrapper), logging to `<dir>/<name>.log`;
    /// stopped when dropped, its log printed if the test failed.
    fn spawn(&self, name: &str, args: &[String]) -> ChildGuard {
        let log = self.dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = self
            .command(args)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        ChildGuard::new(name, child).with_log(log)
    }
}

/// Waits until something accepts connections on `port`.
async fn listening(port: u16, what: &str) {
    mthpt_tests::wait_until(STEP, what, || async {
        Ok(tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok())
    })
    .await
    .unwrap();
}

/// The value after `label` on its line of `text` (`token     mthpt_…`).
fn printed(text: &str, label: &str) -> String {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(label)
                .filter(|rest| rest.starts_with(' '))
                .map(|rest| rest.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no {label:?} line in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_cluster_section_runs_as_written() {
    let started = Instant::now();
    let steps = section_steps("Running a cluster");
    let db = mthpt_engine::testing::postgres().await;
    let dir = tempfile::tempdir().unwrap();
    let console_port = free_port();
    let engine_ports = [free_port(), free_port()];
    let wrapper_port = free_port();
    let secret = dir.path().join("ops.secret");
    let engine = |i: usize| format!("127.0.0.1:{}", engine_ports[i]);

    // The section's placeholders and what they are here; the engine's own address differs per
    // engine host, so the engine command is run once for each.
    let mut common: Vec<(String, String)> = vec![
        ("postgres://mthpt:…@db:5432/mthpt".into(), db.url()),
        ("0.0.0.0:7800".into(), format!("127.0.0.1:{console_port}")),
        (
            "http://console:7800".into(),
            format!("http://127.0.0.1:{console_port}"),
        ),
        ("/etc/mthpt/ops.secret".into(), secret.display().to_string()),
        (
            "http://engine-1:7700,http://engine-2:7700".into(),
            format!("http://{},http://{}", engine(0), engine(1)),
        ),
        ("0.0.0.0:9010".into(), format!("127.0.0.1:{wrapper_port}")),
        (
            "http://$(hostname):9010".into(),
            format!("http://127.0.0.1:{wrapper_port}"),
        ),
    ];
    let substitute = |line: &str, pairs: &[(String, String)]| {
        let mut line = line.to_owned();
        for (placeholder, value) in pairs {
            line = line.replace(placeholder, value);
        }
        for left in ["…", "$(", "0.0.0.0", "engine-1", "console:"] {
            assert!(!line.contains(left), "{left:?} left in {line:?}");
        }
        line
    };

    let mut shell = Shell {
        dir: dir.path().to_path_buf(),
        vars: BTreeMap::new(),
    };
    let mut procs: Vec<ChildGuard> = Vec::new();
    let mut ran = Vec::new();
    let mut runs_output = String::new();
    for step in &steps {
        match step {
            Step::Mthpt(line) => {
                let sub = line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                ran.push(sub.clone());
                match sub.as_str() {
                    "console" => {
                        let args = words(&substitute(line, &common), &shell.vars);
                        procs.push(shell.spawn("console", &args));
                        listening(console_port, "the console listens").await;
                    }
                    "engine" => {
                        for i in 0..engine_ports.len() {
                            let mut pairs = common.clone();
                            pairs.push(("0.0.0.0:7700".into(), engine(i)));
                            pairs.push((
                                "http://$(hostname):7700".into(),
                                format!("http://{}", engine(i)),
                            ));
                            let args = words(&substitute(line, &pairs), &shell.vars);
                            procs.push(shell.spawn(&format!("engine-{}", i + 1), &args));
                        }
                        for port in engine_ports {
                            listening(port, "an engine listens").await;
                        }
                    }
                    "wrapper" => {
                        let args = words(&substitute(line, &common), &shell.vars);
                        procs.push(shell.spawn("wrapper", &args));
                        listening(wrapper_port, "the wrapper listens").await;
                    }
                    "bootstrap" => {
                        let args = words(&substitute(line, &common), &shell.vars);
                        let out = tokio::task::block_in_place(|| shell.run(&args));
                        let token = printed(&out, "token");
                        assert!(token.starts_with("mthpt_"), "{out}");
                        common.push(("mthpt_…".into(), token));
                    }
                    "app" => {
                        let args = words(&substitute(line, &common), &shell.vars);
                        let out = tokio::task::block_in_place(|| shell.run(&args));
                        assert_eq!(printed(&out, "app"), "acme.ops", "{out}");
                        let kept = std::fs::read_to_string(&secret).unwrap();
                        assert!(kept.trim().len() >= 32, "a secret was written");
                        assert!(!out.contains(kept.trim()), "and not printed: {out}");
                        #[cfg(unix)]
                        {
                            use std::os::unix::fs::PermissionsExt;
                            let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
                            assert_eq!(mode & 0o077, 0, "only its owner may read the secret");
                        }
                    }
                    "task" if line.contains(" runs ") => {
                        // The run is asynchronous: the listing is repeated until it shows the
                        // run finished.
                        let args = words(&substitute(line, &common), &shell.vars);
                        let deadline = Instant::now() + STEP;
                        loop {
                            runs_output = tokio::task::block_in_place(|| shell.run(&args));
                            let finished = runs_output.lines().any(|l| {
                                ["succeeded", "failed", "timed_out", "lost", "cancelled"]
                                    .iter()
                                    .any(|s| l.split_whitespace().any(|w| w == *s))
                            });
                            if finished || Instant::now() > deadline {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                    _ => {
                        let args = words(&substitute(line, &common), &shell.vars);
                        tokio::task::block_in_place(|| shell.run(&args));
                    }
                }
            }
            Step::Export(line) => {
                for assignment in words(&substitute(line, &common), &shell.vars)
                    .iter()
                    .skip(1)
                {
                    let (name, value) = assignment.split_once('=').expect("NAME=value");
                    shell.vars.insert(name.to_owned(), value.to_owned());
                }
            }
            Step::Curl(line) => {
                ran.push("curl".into());
                let args = words(&substitute(line, &common), &shell.vars);
                let mut request_headers = Vec::new();
                let mut it = args.iter().skip(1);
                let mut url = None;
                while let Some(a) = it.next() {
                    match a.as_str() {
                        "-s" => {}
                        "-H" => request_headers.push(it.next().expect("-H value").clone()),
                        other if other.starts_with("http") => url = Some(other.to_owned()),
                        other => panic!("the test does not know curl's {other:?}"),
                    }
                }
                let url = url.expect("curl is given a URL");
                assert!(url.ends_with("/executors"), "{url}");
                // Registration follows the wrapper's start by a moment: ask until it shows.
                let client = reqwest::Client::new();
                let deadline = Instant::now() + STEP;
                loop {
                    let mut req = client.get(&url);
                    for h in &request_headers {
                        let (name, value) = h.split_once(": ").expect("Name: value");
                        req = req.header(name, value);
                    }
                    let res = req.send().await.unwrap();
                    assert_eq!(res.status(), 200, "{url}");
                    let answer: serde_json::Value = res.json().await.unwrap();
                    let registered = answer.as_array().into_iter().flatten().any(|e| {
                        e["state"] == "up"
                            && e["app"] == "ops"
                            && e["handlers"]
                                .as_array()
                                .is_some_and(|h| h.iter().any(|h| h == "shell"))
                    });
                    if registered {
                        break;
                    }
                    assert!(Instant::now() < deadline, "not registered: {answer}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            Step::Write { file, body } => {
                std::fs::write(dir.path().join(file), body).unwrap();
            }
        }
    }
    assert_eq!(
        ran,
        [
            "migrate",
            "bootstrap",
            "console",
            "engine",
            "tenant",
            "app",
            "wrapper",
            "curl",
            "task",
            "task",
            "task"
        ],
        "the section's commands"
    );

    // The task's run succeeded, seen through the API by `mthpt task runs`.
    let run_line = runs_output
        .lines()
        .find(|l| l.contains("manual"))
        .unwrap_or_else(|| panic!("no manual run listed:\n{runs_output}"));
    assert!(
        run_line.split_whitespace().any(|w| w == "succeeded"),
        "{runs_output}"
    );

    // Applying the same task file again changes nothing.
    let apply = words(
        "mthpt task --tenant acme apply -f ops-tasks.toml",
        &shell.vars,
    );
    let again = tokio::task::block_in_place(|| shell.run(&apply));
    assert!(again.starts_with("no changes"), "{again}");

    // The engine that took the result logged the finished run on one INFO line.
    let engine_logs: String = procs
        .iter()
        .filter(|p| p.name().starts_with("engine"))
        .map(ChildGuard::log_text)
        .collect();
    let logged = engine_logs.lines().find(|l| {
        l.contains("INFO")
            && l.contains("run finished")
            && l.contains("task=disk-usage")
            && l.contains("app=acme.ops")
            && l.contains("state=succeeded")
            && l.contains("duration_ms=")
    });
    assert!(logged.is_some(), "no finished-run line in:\n{engine_logs}");

    drop(procs);
    shell.vars.clear();
    db.cleanup().await;
    eprintln!(
        "the README's cluster section ran in {:?}",
        started.elapsed()
    );
}

#[test]
fn words_split_like_the_shell_for_the_readme_commands() {
    let vars = BTreeMap::from([("T".to_owned(), "mthpt_x".to_owned())]);
    assert_eq!(
        words(
            r#"curl -s -H "Authorization: Bearer $T" http://h/api"#,
            &vars
        ),
        [
            "curl",
            "-s",
            "-H",
            "Authorization: Bearer mthpt_x",
            "http://h/api"
        ]
    );
    assert_eq!(words("a '$T' b", &vars), ["a", "$T", "b"]);
}

#[test]
fn the_cluster_section_is_found_with_its_task_file() {
    let steps = section_steps("Running a cluster");
    let file = steps.iter().find_map(|s| match s {
        Step::Write { file, body } => Some((file.clone(), body.clone())),
        _ => None,
    });
    let (name, body) = file.expect("the section writes a task file");
    assert_eq!(name, "ops-tasks.toml");
    assert!(body.contains("handler = \"shell\""), "{body}");
    // Lines continued with a backslash are one command.
    assert!(steps.iter().any(|s| matches!(
        s,
        Step::Mthpt(l) if l.starts_with("mthpt wrapper ") && l.ends_with("--enable-shell")
    )));
}

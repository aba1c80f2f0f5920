//! `mthpt task …`: a tenant's tasks over the console API — list, get, apply a task file,
//! trigger, pause, resume, and list runs.
//!
//! The console URL, API token and tenant come from flags, else `MTHPT_URL`, `MTHPT_TOKEN`,
//! `MTHPT_TENANT`, else a TOML file (`--cli-config`, `MTHPT_CLI_CONFIG`, default
//! `~/.config/mthpt/cli.toml`) with the keys `url`, `token` and `tenant`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use crate::service::taskfile::{Format, Plan, Step, TaskFile};

/// The console a fresh `mthpt console` listens on.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7800";

#[derive(Debug, Args)]
pub struct TaskArgs {
    /// Console base URL [default: http://127.0.0.1:7800].
    #[arg(long, env = "MTHPT_URL", global = true)]
    pub url: Option<String>,
    /// API token (`mthpt_…`).
    #[arg(long, env = "MTHPT_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// The tenant whose tasks to work on.
    #[arg(long, env = "MTHPT_TENANT", global = true)]
    pub tenant: Option<String>,
    /// TOML file with `url`, `token` and `tenant` [default: ~/.config/mthpt/cli.toml].
    #[arg(long, env = "MTHPT_CLI_CONFIG", global = true)]
    pub cli_config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: TaskCommand,
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// List the tenant's tasks.
    List {
        /// Only tasks whose name contains this text.
        #[arg(long)]
        name: Option<String>,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one task (by name or id) as JSON.
    Get { task: String },
    /// Make the tenant's tasks match a TOML or JSON task file (by task name).
    Apply {
        /// The task file (`.toml` or `.json`).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Only print what would change.
        #[arg(long)]
        dry_run: bool,
        /// Also delete tasks and dependencies the file does not name.
        #[arg(long)]
        prune: bool,
    },
    /// Run a task now.
    Trigger {
        task: String,
        /// JSON parameters for this run only.
        #[arg(long)]
        params: Option<String>,
        /// Makes retrying this command safe: the same key returns the same run.
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Pause a task.
    Pause { task: String },
    /// Resume a paused task.
    Resume { task: String },
    /// List recent runs, of one task or of every task.
    Runs {
        task: Option<String>,
        /// Only runs in this state (e.g. failed).
        #[arg(long)]
        state: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum TaskCliError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        source: crate::service::taskfile::FileError,
    },
    #[error("cannot reach the console at {url}: {source}")]
    Http { url: String, source: reqwest::Error },
    #[error("the console answered {status}: {detail}")]
    Api { status: StatusCode, detail: String },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CliConfig {
    url: Option<String>,
    token: Option<String>,
    tenant: Option<String>,
}

/// Where to send requests, and as whom.
#[derive(Debug)]
struct Client {
    http: reqwest::Client,
    url: String,
    token: String,
    tenant: String,
}

fn read_config(path: Option<&Path>) -> Result<CliConfig, TaskCliError> {
    let (path, required) = match path {
        Some(p) => (p.to_path_buf(), true),
        None => match std::env::var_os("HOME") {
            Some(home) => (PathBuf::from(home).join(".config/mthpt/cli.toml"), false),
            None => return Ok(CliConfig::default()),
        },
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(CliConfig::default());
        }
        Err(source) => return Err(TaskCliError::Read { path, source }),
    };
    toml::from_str(&text).map_err(|e| TaskCliError::Usage(format!("{}: {e}", path.display())))
}

impl Client {
    fn new(args: &TaskArgs) -> Result<Client, TaskCliError> {
        let config = read_config(args.cli_config.as_deref())?;
        let url = args
            .url
            .clone()
            .or(config.url)
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        let token = args.token.clone().or(config.token).ok_or_else(|| {
            TaskCliError::Usage(
                "no API token: pass --token, set MTHPT_TOKEN or add `token` to the CLI config"
                    .into(),
            )
        })?;
        let tenant = args.tenant.clone().or(config.tenant).ok_or_else(|| {
            TaskCliError::Usage(
                "no tenant: pass --tenant, set MTHPT_TENANT or add `tenant` to the CLI config"
                    .into(),
            )
        })?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(300))
            .build()
            .map_err(|source| TaskCliError::Http {
                url: url.clone(),
                source,
            })?;
        Ok(Client {
            http,
            url: url.trim_end_matches('/').to_owned(),
            token,
            tenant,
        })
    }

    /// Sends a request under `/api/v1/tenants/{tenant}` and returns the JSON answer.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<Value, TaskCliError> {
        let url = format!("{}/api/v1/tenants/{}{path}", self.url, self.tenant);
        let mut req = self.http.request(method, &url).bearer_auth(&self.token);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(body) = body {
            req = req.json(body);
        }
        let http_err = |source| TaskCliError::Http {
            url: url.clone(),
            source,
        };
        let res = req.send().await.map_err(http_err)?;
        let status = res.status();
        let text = res.text().await.map_err(http_err)?;
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !status.is_success() {
            let mut detail = json["detail"].as_str().unwrap_or(text.as_str()).to_owned();
            if let Some(errors) = json["errors"].as_array() {
                for e in errors {
                    detail.push_str(&format!(
                        "\n  {}: {}",
                        e["field"].as_str().unwrap_or("?"),
                        e["message"].as_str().unwrap_or("?")
                    ));
                }
            }
            return Err(TaskCliError::Api { status, detail });
        }
        Ok(json)
    }

    /// The id of a task given by id or name.
    async fn task_id(&self, task: &str) -> Result<i64, TaskCliError> {
        if let Ok(id) = task.parse::<i64>() {
            return Ok(id);
        }
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/tasks?limit=500&name={}", urlencode(task));
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let page = self.call(Method::GET, &path, None, &[]).await?;
            if let Some(found) = page["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["name"] == task)
            {
                return found["id"].as_i64().ok_or_else(|| TaskCliError::Api {
                    status: StatusCode::OK,
                    detail: "a task without an id".into(),
                });
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => {
                    return Err(TaskCliError::Usage(format!(
                        "no task named {task:?} in tenant {}",
                        self.tenant
                    )));
                }
            }
        }
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs `mthpt task …`.
pub async fn run(args: TaskArgs) -> ExitCode {
    match execute(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mthpt task: {e}");
            match e {
                TaskCliError::Usage(_) | TaskCliError::Read { .. } | TaskCliError::File { .. } => {
                    ExitCode::from(2)
                }
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// Reads a task file, TOML unless its name ends in `.json`.
pub fn read_task_file(path: &Path) -> Result<TaskFile, TaskCliError> {
    let text = std::fs::read_to_string(path).map_err(|source| TaskCliError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let format = if path.extension().is_some_and(|e| e == "json") {
        Format::Json
    } else {
        Format::Toml
    };
    TaskFile::parse(&text, format).map_err(|source| TaskCliError::File {
        path: path.to_path_buf(),
        source,
    })
}

/// The plan as people read it: one line per change, then a summary.
pub fn render_plan(plan: &Plan) -> String {
    let mut out = String::new();
    for item in plan.items.iter().filter(|i| i.step != Step::Unchanged) {
        let (mark, verb) = match item.step {
            Step::Create => ('+', "create"),
            Step::Update => ('~', "update"),
            Step::Delete => ('-', "delete"),
            Step::Unchanged => ('=', "unchanged"),
        };
        out.push_str(&format!("{mark} {verb} {} {}", item.kind, item.name));
        if !item.changes.is_empty() {
            out.push_str(&format!(" ({})", item.changes.join(", ")));
        }
        out.push('\n');
    }
    if !plan.has_changes() {
        out.push_str(&format!(
            "no changes ({} unchanged)\n",
            plan.count(Step::Unchanged)
        ));
    } else {
        let tense = if plan.applied {
            ""
        } else {
            " (dry run: nothing changed)"
        };
        out.push_str(&format!(
            "{} created, {} updated, {} unchanged, {} deleted{tense}\n",
            plan.count(Step::Create),
            plan.count(Step::Update),
            plan.count(Step::Unchanged),
            plan.count(Step::Delete),
        ));
    }
    out
}

async fn execute(args: &TaskArgs) -> Result<(), TaskCliError> {
    // A task file is checked before anything is sent.
    let file = match &args.command {
        TaskCommand::Apply { file, .. } => Some(read_task_file(file)?),
        _ => None,
    };
    let client = Client::new(args)?;
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    match &args.command {
        TaskCommand::List { name, json } => {
            let mut cursor: Option<String> = None;
            loop {
                let mut path = "/tasks?limit=500".to_owned();
                if let Some(n) = name {
                    path.push_str(&format!("&name={}", urlencode(n)));
                }
                if let Some(c) = &cursor {
                    path.push_str(&format!("&cursor={c}"));
                }
                let page = client.call(Method::GET, &path, None, &[]).await?;
                for t in page["items"].as_array().into_iter().flatten() {
                    if *json {
                        println!("{t}");
                    } else {
                        println!(
                            "{:>6}  {:<32} {:<8} {}",
                            t["id"],
                            t["name"].as_str().unwrap_or(""),
                            if t["paused"] == true {
                                "paused"
                            } else {
                                "active"
                            },
                            t["schedule"]["kind"].as_str().unwrap_or("")
                        );
                    }
                }
                match page["next_cursor"].as_str() {
                    Some(c) => cursor = Some(c.to_owned()),
                    None => break,
                }
            }
        }
        TaskCommand::Get { task } => {
            let id = client.task_id(task).await?;
            println!(
                "{}",
                pretty(
                    &client
                        .call(Method::GET, &format!("/tasks/{id}"), None, &[])
                        .await?
                )
            );
        }
        TaskCommand::Apply { dry_run, prune, .. } => {
            let body =
                serde_json::to_value(&file).map_err(|e| TaskCliError::Usage(e.to_string()))?;
            let path = format!("/tasks/apply?dry_run={dry_run}&prune={prune}");
            let answer = client.call(Method::POST, &path, Some(&body), &[]).await?;
            let plan: Plan = serde_json::from_value(answer).map_err(|e| TaskCliError::Api {
                status: StatusCode::OK,
                detail: format!("unexpected plan: {e}"),
            })?;
            print!("{}", render_plan(&plan));
        }
        TaskCommand::Trigger {
            task,
            params,
            idempotency_key,
        } => {
            let id = client.task_id(task).await?;
            let body = match params {
                Some(p) => {
                    let params: Value = serde_json::from_str(p)
                        .map_err(|e| TaskCliError::Usage(format!("--params is not JSON: {e}")))?;
                    Some(serde_json::json!({ "params": params }))
                }
                None => None,
            };
            let headers: Vec<(&str, &str)> = idempotency_key
                .iter()
                .map(|k| ("Idempotency-Key", k.as_str()))
                .collect();
            let run = client
                .call(
                    Method::POST,
                    &format!("/tasks/{id}/trigger"),
                    body.as_ref(),
                    &headers,
                )
                .await?;
            println!(
                "run {} of task {} is {}",
                run["id"],
                id,
                run["state"].as_str().unwrap_or("?")
            );
        }
        TaskCommand::Pause { task } | TaskCommand::Resume { task } => {
            let id = client.task_id(task).await?;
            let verb = if matches!(args.command, TaskCommand::Pause { .. }) {
                "pause"
            } else {
                "resume"
            };
            let t = client
                .call(Method::POST, &format!("/tasks/{id}/{verb}"), None, &[])
                .await?;
            println!(
                "task {} is {}",
                t["name"].as_str().unwrap_or(task),
                if t["paused"] == true {
                    "paused"
                } else {
                    "active"
                }
            );
        }
        TaskCommand::Runs { task, state, limit } => {
            let mut path = format!("/runs?limit={limit}");
            if let Some(t) = task {
                path.push_str(&format!("&task={}", client.task_id(t).await?));
            }
            if let Some(s) = state {
                path.push_str(&format!("&state={}", urlencode(s)));
            }
            let page = client.call(Method::GET, &path, None, &[]).await?;
            for r in page["items"].as_array().into_iter().flatten() {
                println!(
                    "{:>8}  task {:<6} {:<10} {:<9} scheduled {}  finished {}",
                    r["id"],
                    r["task_id"],
                    r["state"].as_str().unwrap_or(""),
                    r["trigger"].as_str().unwrap_or(""),
                    r["scheduled_at"].as_str().unwrap_or("-"),
                    r["finished_at"].as_str().unwrap_or("-"),
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::taskfile::PlanItem;

    fn item(name: &str, step: Step) -> PlanItem {
        PlanItem {
            kind: "task".into(),
            name: name.into(),
            step,
            changes: if step == Step::Update {
                vec!["schedule".into()]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn plans_print_one_line_per_change_and_a_summary() {
        let plan = Plan {
            items: vec![
                item("a", Step::Create),
                item("b", Step::Update),
                item("c", Step::Unchanged),
            ],
            applied: false,
        };
        let text = render_plan(&plan);
        assert!(text.contains("+ create task a\n"), "{text}");
        assert!(text.contains("~ update task b (schedule)\n"), "{text}");
        assert!(!text.contains("task c"), "{text}");
        assert!(
            text.ends_with(
                "1 created, 1 updated, 1 unchanged, 0 deleted (dry run: nothing changed)\n"
            ),
            "{text}"
        );
        let same = Plan {
            items: vec![item("c", Step::Unchanged)],
            applied: true,
        };
        assert_eq!(render_plan(&same), "no changes (1 unchanged)\n");
    }

    #[test]
    fn names_are_percent_encoded_in_queries() {
        assert_eq!(urlencode("a b/ü"), "a%20b%2F%C3%BC");
    }
}

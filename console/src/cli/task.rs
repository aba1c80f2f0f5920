//! `mthpt task …`: a tenant's tasks over the console API — list, get, apply a task file,
//! trigger, pause, resume, and list runs.
//!
//! The console URL and API token come from `--url`/`--token`, `MTHPT_URL`/`MTHPT_TOKEN` or the
//! CLI config file (see [`super::client`]); the tenant from `--tenant` or `MTHPT_TENANT`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::Value;

use super::client::{ApiArgs, ApiClient, ClientError, segment};
use crate::service::taskfile::{Format, Plan, Step, TaskFile};

#[derive(Debug, Args)]
pub struct TaskArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// The tenant whose tasks to work on.
    #[arg(long, env = "MTHPT_TENANT", global = true)]
    pub tenant: Option<String>,
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
        /// Print the API's JSON, one task per line.
        #[arg(long)]
        json: bool,
    },
    /// Show one task (by name or id) as JSON.
    Get { task: String },
    /// Make the tenant's tasks match a TOML or JSON task file (by task name).
    Apply {
        /// The task file (`.toml`, or `.json`).
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
        /// At most this many, newest first.
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
    #[error(transparent)]
    Api(#[from] ClientError),
}

/// The API client and the tenant's path.
#[derive(Debug)]
struct Client {
    api: ApiClient,
    tenant: String,
}

impl Client {
    fn new(args: &TaskArgs) -> Result<Client, TaskCliError> {
        let tenant = args.tenant.clone().ok_or_else(|| {
            TaskCliError::Usage("no tenant: pass --tenant or set MTHPT_TENANT".into())
        })?;
        Ok(Client {
            api: ApiClient::from_args(&args.api)?,
            tenant,
        })
    }

    /// Calls `/api/v1/tenants/{tenant}<path>`.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, TaskCliError> {
        let path = format!("/tenants/{}{path}", segment(&self.tenant));
        Ok(self.api.call(method, &path, body).await?)
    }

    /// The id of a task given by id or name.
    async fn task_id(&self, task: &str) -> Result<i64, TaskCliError> {
        if let Ok(id) = task.parse::<i64>() {
            return Ok(id);
        }
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/tasks?limit=500&name={}", segment(task));
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let page = self.call(Method::GET, &path, None).await?;
            let found = page["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["name"] == task)
                .and_then(|t| t["id"].as_i64());
            if let Some(id) = found {
                return Ok(id);
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
                    path.push_str(&format!("&name={}", segment(n)));
                }
                if let Some(c) = &cursor {
                    path.push_str(&format!("&cursor={c}"));
                }
                let page = client.call(Method::GET, &path, None).await?;
                for t in page["items"].as_array().into_iter().flatten() {
                    if *json {
                        outln!("{t}");
                    } else {
                        outln!(
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
            outln!(
                "{}",
                pretty(
                    &client
                        .call(Method::GET, &format!("/tasks/{id}"), None)
                        .await?
                )
            );
        }
        TaskCommand::Apply { dry_run, prune, .. } => {
            let body =
                serde_json::to_value(&file).map_err(|e| TaskCliError::Usage(e.to_string()))?;
            let path = format!("/tasks/apply?dry_run={dry_run}&prune={prune}");
            let answer = client.call(Method::POST, &path, Some(&body)).await?;
            let plan: Plan = serde_json::from_value(answer).map_err(|e| {
                TaskCliError::Usage(format!("the console answered an unexpected plan: {e}"))
            })?;
            outln!("{}", render_plan(&plan).trim_end_matches('\n'));
        }
        TaskCommand::Trigger { task, params } => {
            let id = client.task_id(task).await?;
            let body = match params {
                Some(p) => {
                    let params: Value = serde_json::from_str(p)
                        .map_err(|e| TaskCliError::Usage(format!("--params is not JSON: {e}")))?;
                    Some(serde_json::json!({ "params": params }))
                }
                None => None,
            };
            let run = client
                .call(Method::POST, &format!("/tasks/{id}/trigger"), body.as_ref())
                .await?;
            outln!(
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
                .call(Method::POST, &format!("/tasks/{id}/{verb}"), None)
                .await?;
            outln!(
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
                path.push_str(&format!("&state={}", segment(s)));
            }
            let page = client.call(Method::GET, &path, None).await?;
            for r in page["items"].as_array().into_iter().flatten() {
                outln!(
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
        assert_eq!(segment("a b/ü"), "a%20b%2F%C3%BC");
    }
}

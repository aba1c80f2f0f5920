//! Admin commands over the console API: `mthpt tenant|app|user|token …`. Secrets (an app's
//! signing secret, a token, a generated password) are printed once, when created.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use super::client::{ApiArgs, ApiClient, ClientError, segment};
use crate::service::credentials::new_password;

/// Output options every admin command shares.
#[derive(Debug, Clone, Default, Args)]
pub struct Output {
    /// Print the API's JSON answer instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `mthpt tenant …`
#[derive(Debug, Args)]
pub struct TenantArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    #[command(flatten)]
    pub out: Output,
    #[command(subcommand)]
    pub command: TenantCommand,
}

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant (operators).
    Create {
        /// Short unique name (`[a-z0-9][a-z0-9_-]*`).
        name: String,
        #[arg(long)]
        display_name: Option<String>,
        /// The engine node group that schedules it [default: default].
        #[arg(long)]
        node_group: Option<String>,
        /// A host its executors may register with (repeat for more; `*.domain` for any host
        /// below a domain) [default: any host].
        #[arg(long = "executor-host", value_name = "HOST")]
        executor_hosts: Vec<String>,
    },
    /// List the tenants you can see.
    List,
    /// Show a tenant, with the hosts its executors may register with.
    Show { name: String },
    /// Replace the hosts a tenant's executors may register with (operators); no host: any.
    SetExecutorHosts {
        name: String,
        /// Host names, IP addresses or `*.domain` wildcards.
        hosts: Vec<String>,
    },
    /// Show a tenant's claim weight (its share of each claim of its node group).
    Weight { name: String },
    /// Set a tenant's claim weight (operators): 1 (the default) to 1000; a tenant of weight 3
    /// gets three runs of each claim for every one of a tenant of weight 1.
    SetWeight {
        name: String,
        /// 1 to 1000.
        #[arg(allow_negative_numbers = true)]
        weight: i64,
    },
    /// Show a tenant's quotas and its usage against them.
    Quotas { name: String },
    /// Change a tenant's quotas (operators): each given quota is set to a positive integer or
    /// `unlimited`; quotas not given stay as they are.
    SetQuotas {
        name: String,
        /// Runs claimed or running at once.
        #[arg(long, value_name = "N|unlimited", value_parser = parse_limit)]
        max_concurrent_runs: Option<Limit>,
        /// Fires per second (a token bucket).
        #[arg(long, value_name = "N|unlimited", value_parser = parse_limit)]
        max_fires_per_second: Option<Limit>,
        /// Fires the bucket holds (burst) [default: one second's worth].
        #[arg(long, value_name = "N|unlimited", value_parser = parse_limit)]
        fire_burst: Option<Limit>,
        /// Tasks the tenant may have.
        #[arg(long, value_name = "N|unlimited", value_parser = parse_limit)]
        max_tasks: Option<Limit>,
        /// Runs due and not yet claimed.
        #[arg(long, value_name = "N|unlimited", value_parser = parse_limit)]
        max_waiting_runs: Option<Limit>,
    },
}

/// A quota on the command line: a number, or `unlimited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit(pub Option<i64>);

fn parse_limit(s: &str) -> Result<Limit, String> {
    if s.eq_ignore_ascii_case("unlimited") {
        return Ok(Limit(None));
    }
    s.parse::<i64>()
        .map(|n| Limit(Some(n)))
        .map_err(|_| format!("{s:?} is neither a number nor `unlimited`"))
}

/// Prints a tenant's quotas and usage: one line per quota, `used / limit`.
fn print_quotas(out: &Output, report: &Value) {
    if out.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(report).unwrap_or_default()
        );
        return;
    }
    let q = &report["quotas"];
    let u = &report["usage"];
    let limit = |key: &str| match &q[key] {
        Value::Null => "unlimited".to_owned(),
        v => v.to_string(),
    };
    outln!("{:<22} {}", "tenant", text(report, "tenant"));
    for (quota, used) in [
        ("max_concurrent_runs", Some("running_runs")),
        ("max_fires_per_second", None),
        ("fire_burst", None),
        ("max_tasks", Some("tasks")),
        ("max_waiting_runs", Some("waiting_runs")),
    ] {
        match used {
            Some(used) => outln!("{quota:<22} {} / {}", text(u, used), limit(quota)),
            None => outln!("{quota:<22} {}", limit(quota)),
        }
    }
}

/// `mthpt app …`
#[derive(Debug, Args)]
pub struct AppArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    #[command(flatten)]
    pub out: Output,
    /// The tenant.
    #[arg(long, env = "MTHPT_TENANT", global = true)]
    pub tenant: Option<String>,
    #[command(subcommand)]
    pub command: AppCommand,
}

#[derive(Debug, Subcommand)]
pub enum AppCommand {
    /// Create an app; its signing secret is printed once (or written to --secret-file).
    Create {
        name: String,
        /// Write the secret to this file (readable by its owner only) instead of printing it;
        /// `mthpt wrapper --secret-file` reads it.
        #[arg(long, value_name = "FILE")]
        secret_file: Option<PathBuf>,
    },
    /// List the tenant's apps.
    List,
    /// Replace an app's signing secret; the new one is printed once (or written to --secret-file).
    RotateSecret {
        name: String,
        /// Write the new secret to this file (readable by its owner only) instead of printing it.
        #[arg(long, value_name = "FILE")]
        secret_file: Option<PathBuf>,
    },
    /// Delete an app (refused while tasks use it).
    Delete { name: String },
}

/// `mthpt user …`
#[derive(Debug, Args)]
pub struct UserArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    #[command(flatten)]
    pub out: Output,
    /// The tenant (none: operators).
    #[arg(long, env = "MTHPT_TENANT", global = true)]
    pub tenant: Option<String>,
    #[command(subcommand)]
    pub command: UserCommand,
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user; without MTHPT_NEW_PASSWORD a password is generated and printed once.
    Create {
        username: String,
        /// tenant_admin, tenant_operator or tenant_viewer (with --tenant); operator without.
        #[arg(long)]
        role: Option<String>,
        /// The password (read from the environment so it stays out of shell history).
        #[arg(
            long = "password-from-env",
            env = "MTHPT_NEW_PASSWORD",
            hide_env_values = true
        )]
        password: Option<String>,
    },
    /// List the tenant's users (or the operators).
    List,
}

/// `mthpt token …`
#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    #[command(flatten)]
    pub out: Output,
    /// Manage the tokens of this user id instead of your own (with --tenant for a tenant user).
    #[arg(long, global = true)]
    pub user: Option<i64>,
    /// The user's tenant.
    #[arg(long, env = "MTHPT_TENANT", global = true)]
    pub tenant: Option<String>,
    #[command(subcommand)]
    pub command: TokenCommand,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Issue a token; its value is printed once.
    Create {
        /// What it is for, e.g. `ci`.
        #[arg(long)]
        name: String,
        /// It stops working after this many days (default: until revoked).
        #[arg(long)]
        expires_in_days: Option<u32>,
        /// Limit it to this role (tenant_admin, tenant_operator, tenant_viewer; operator for
        /// operators), at most your own and the user's (default: the highest allowed).
        #[arg(long)]
        role: Option<String>,
    },
    /// List tokens (never their values).
    List,
    /// Revoke a token.
    Revoke { id: i64 },
}

fn finish(result: Result<(), ClientError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mthpt: {e}");
            match e {
                ClientError::Config(_) => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn client(api: &ApiArgs) -> Result<ApiClient, ClientError> {
    ApiClient::from_args(api)
}

fn need_tenant(tenant: &Option<String>) -> Result<String, ClientError> {
    tenant
        .as_deref()
        .map(segment)
        .ok_or_else(|| ClientError::Config("give the tenant with --tenant or MTHPT_TENANT".into()))
}

fn text(v: &Value, key: &str) -> String {
    match &v[key] {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

fn print_rows(out: &Output, answer: &Value, columns: &[&str]) {
    if out.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(answer).unwrap_or_default()
        );
        return;
    }
    outln!("{}", columns.join("\t").to_uppercase());
    for row in answer.as_array().into_iter().flatten() {
        let cells: Vec<String> = columns.iter().map(|c| text(row, c)).collect();
        outln!("{}", cells.join("\t"));
    }
}

fn print_one(out: &Output, answer: &Value, lines: &[(&str, &str)]) {
    if out.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(answer).unwrap_or_default()
        );
        return;
    }
    for (label, key) in lines {
        outln!("{label:<10} {}", text(answer, key));
    }
}

/// A tenant's allow-list of executor hosts as text: comma-separated, or `any`.
fn hosts_text(tenant: &Value) -> String {
    let hosts: Vec<&str> = tenant["executor_hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if hosts.is_empty() {
        "any".to_owned()
    } else {
        hosts.join(",")
    }
}

fn print_tenant(out: &Output, mut t: Value) {
    if !out.json {
        t["executor_hosts"] = Value::String(hosts_text(&t));
    }
    print_one(
        out,
        &t,
        &[
            ("tenant", "name"),
            ("display", "display_name"),
            ("group", "node_group"),
            ("disabled", "disabled"),
            ("executor hosts", "executor_hosts"),
        ],
    );
}

pub async fn tenant(args: TenantArgs) -> ExitCode {
    finish(
        async {
            let c = client(&args.api)?;
            match args.command {
                TenantCommand::Create {
                    name,
                    display_name,
                    node_group,
                    executor_hosts,
                } => {
                    let body = json!({
                        "name": name,
                        "display_name": display_name,
                        "node_group": node_group,
                        "executor_hosts": executor_hosts,
                    });
                    let t = c.call(Method::POST, "/tenants", Some(&body)).await?;
                    print_tenant(&args.out, t);
                }
                TenantCommand::List => {
                    let mut list = c.call(Method::GET, "/tenants", None).await?;
                    if let Some(rows) = list.as_array_mut() {
                        for row in rows {
                            row["executor_hosts"] = Value::String(hosts_text(row));
                        }
                    }
                    print_rows(
                        &args.out,
                        &list,
                        &[
                            "name",
                            "node_group",
                            "disabled",
                            "executor_hosts",
                            "display_name",
                        ],
                    );
                }
                TenantCommand::Show { name } => {
                    let t = c
                        .call(Method::GET, &format!("/tenants/{}", segment(&name)), None)
                        .await?;
                    print_tenant(&args.out, t);
                }
                TenantCommand::SetExecutorHosts { name, hosts } => {
                    let body = json!({ "executor_hosts": hosts });
                    let t = c
                        .call(
                            Method::PATCH,
                            &format!("/tenants/{}", segment(&name)),
                            Some(&body),
                        )
                        .await?;
                    print_tenant(&args.out, t);
                }
                TenantCommand::Weight { name } => {
                    let w = c
                        .call(
                            Method::GET,
                            &format!("/tenants/{}/weight", segment(&name)),
                            None,
                        )
                        .await?;
                    print_one(&args.out, &w, &[("tenant", "tenant"), ("weight", "weight")]);
                }
                TenantCommand::SetWeight { name, weight } => {
                    let w = c
                        .call(
                            Method::PUT,
                            &format!("/tenants/{}/weight", segment(&name)),
                            Some(&json!({ "weight": weight })),
                        )
                        .await?;
                    print_one(&args.out, &w, &[("tenant", "tenant"), ("weight", "weight")]);
                }
                TenantCommand::Quotas { name } => {
                    let report = c
                        .call(
                            Method::GET,
                            &format!("/tenants/{}/quotas", segment(&name)),
                            None,
                        )
                        .await?;
                    print_quotas(&args.out, &report);
                }
                TenantCommand::SetQuotas {
                    name,
                    max_concurrent_runs,
                    max_fires_per_second,
                    fire_burst,
                    max_tasks,
                    max_waiting_runs,
                } => {
                    let path = format!("/tenants/{}/quotas", segment(&name));
                    let current = c.call(Method::GET, &path, None).await?;
                    let mut body = current["quotas"].clone();
                    for (key, given) in [
                        ("max_concurrent_runs", max_concurrent_runs),
                        ("max_fires_per_second", max_fires_per_second),
                        ("fire_burst", fire_burst),
                        ("max_tasks", max_tasks),
                        ("max_waiting_runs", max_waiting_runs),
                    ] {
                        if let Some(Limit(value)) = given {
                            body[key] = json!(value);
                        }
                    }
                    let report = c.call(Method::PUT, &path, Some(&body)).await?;
                    print_quotas(&args.out, &report);
                }
            }
            Ok(())
        }
        .await,
    )
}

pub async fn app(args: AppArgs) -> ExitCode {
    finish(
        async {
            let c = client(&args.api)?;
            let base = format!("/tenants/{}/apps", need_tenant(&args.tenant)?);
            match args.command {
                AppCommand::Create { name, secret_file } => {
                    let mut file = SecretFile::open(secret_file.as_deref(), true)?;
                    let a = c
                        .call(Method::POST, &base, Some(&json!({ "name": name })))
                        .await
                        .inspect_err(|_| SecretFile::abandon(file.take()))?;
                    show_secret(&args.out, a, file)?;
                }
                AppCommand::List => {
                    let list = c.call(Method::GET, &base, None).await?;
                    print_rows(&args.out, &list, &["name", "key", "created_at"]);
                }
                AppCommand::RotateSecret { name, secret_file } => {
                    let mut file = SecretFile::open(secret_file.as_deref(), false)?;
                    let path = format!("{base}/{}/rotate-secret", segment(&name));
                    let a = c
                        .call(Method::POST, &path, None)
                        .await
                        .inspect_err(|_| SecretFile::abandon(file.take()))?;
                    show_secret(&args.out, a, file)?;
                }
                AppCommand::Delete { name } => {
                    c.call(Method::DELETE, &format!("{base}/{}", segment(&name)), None)
                        .await?;
                    if !args.out.json {
                        outln!("deleted app {name}");
                    }
                }
            }
            Ok(())
        }
        .await,
    )
}

/// Where an app's secret goes instead of the terminal: opened (owner-only) before the API is
/// asked, so a secret is never made that cannot be kept; a file that existed keeps its content
/// until the new secret is there, one that did not is removed again when the API refuses.
#[derive(Debug)]
struct SecretFile {
    path: PathBuf,
    file: std::fs::File,
    existed: bool,
}

impl SecretFile {
    /// The file to write a secret to. For a new app (`new_app`) it must not exist yet: it may
    /// hold another app's secret, which nothing could recover.
    fn open(path: Option<&Path>, new_app: bool) -> Result<Option<SecretFile>, ClientError> {
        let Some(path) = path else { return Ok(None) };
        let existed = path.exists();
        if new_app && existed {
            return Err(ClientError::Config(format!(
                "the secret file {} exists already and may hold another app's secret; name a new file, or remove it first",
                path.display()
            )));
        }
        let file = super::process::open_private(path).map_err(|e| {
            ClientError::Config(format!(
                "cannot write the secret file {}: {e}",
                path.display()
            ))
        })?;
        Ok(Some(SecretFile {
            path: path.to_path_buf(),
            file,
            existed,
        }))
    }

    /// The API refused: leave no empty file behind.
    fn abandon(file: Option<SecretFile>) {
        if let Some(f) = file
            && !f.existed
        {
            drop(f.file);
            let _ = std::fs::remove_file(&f.path);
        }
    }
}

/// Prints an app with its new secret, or writes the secret to `file` and prints where it is.
fn show_secret(out: &Output, mut app: Value, file: Option<SecretFile>) -> Result<(), ClientError> {
    let Some(SecretFile { path, mut file, .. }) = file else {
        print_one(out, &app, &[("app", "key"), ("secret", "secret")]);
        if !out.json {
            outln!("The secret is not shown again: give it to the app's wrappers now.");
        }
        return Ok(());
    };
    use std::io::Write;
    let secret = app["secret"].as_str().unwrap_or_default().to_owned();
    file.set_len(0)
        .and_then(|()| writeln!(file, "{secret}"))
        .and_then(|()| file.sync_all())
        .map_err(|e| {
            ClientError::Config(format!(
                "the app's secret could not be written to {} ({e}); rotate it with \
                 `mthpt app rotate-secret`",
                path.display()
            ))
        })?;
    if let Some(fields) = app.as_object_mut() {
        fields.remove("secret");
    }
    if out.json {
        print_one(out, &app, &[]);
    } else {
        print_one(out, &app, &[("app", "key")]);
        outln!(
            "{:<10} written to {} (readable by its owner only)",
            "secret",
            path.display()
        );
    }
    Ok(())
}

pub async fn user(args: UserArgs) -> ExitCode {
    finish(
        async {
            let c = client(&args.api)?;
            let base = match &args.tenant {
                Some(t) => format!("/tenants/{}/users", segment(t)),
                None => "/users".to_owned(),
            };
            match args.command {
                UserCommand::Create {
                    username,
                    role,
                    password,
                } => {
                    let generated = password.is_none();
                    let password = password.unwrap_or_else(new_password);
                    let body = json!({ "username": username, "password": password, "role": role });
                    let u = c.call(Method::POST, &base, Some(&body)).await?;
                    print_one(
                        &args.out,
                        &u,
                        &[("user", "username"), ("id", "id"), ("role", "role")],
                    );
                    if generated && !args.out.json {
                        outln!("password   {password}\nThe password is not shown again.");
                    }
                }
                UserCommand::List => {
                    let list = c.call(Method::GET, &base, None).await?;
                    print_rows(&args.out, &list, &["id", "username", "role", "disabled"]);
                }
            }
            Ok(())
        }
        .await,
    )
}

pub async fn token(args: TokenArgs) -> ExitCode {
    finish(
        async {
            let c = client(&args.api)?;
            let base = match (args.user, &args.tenant) {
                (None, _) => "/tokens".to_owned(),
                (Some(id), Some(t)) => format!("/tenants/{}/users/{id}/tokens", segment(t)),
                (Some(id), None) => format!("/users/{id}/tokens"),
            };
            match args.command {
                TokenCommand::Create {
                    name,
                    expires_in_days,
                    role,
                } => {
                    let expires_at = expires_in_days.map(|d| {
                        (chrono::Utc::now() + chrono::Duration::days(i64::from(d))).to_rfc3339()
                    });
                    let body = json!({ "name": name, "expires_at": expires_at, "role": role });
                    let t = c.call(Method::POST, &base, Some(&body)).await?;
                    print_one(
                        &args.out,
                        &t,
                        &[
                            ("id", "id"),
                            ("name", "name"),
                            ("role", "role"),
                            ("expires", "expires_at"),
                            ("token", "token"),
                        ],
                    );
                    if !args.out.json {
                        outln!("The token is not shown again.");
                    }
                }
                TokenCommand::List => {
                    let list = c.call(Method::GET, &base, None).await?;
                    print_rows(
                        &args.out,
                        &list,
                        &[
                            "id",
                            "name",
                            "role",
                            "expires_at",
                            "last_used_at",
                            "revoked_at",
                        ],
                    );
                }
                TokenCommand::Revoke { id } => {
                    c.call(Method::DELETE, &format!("{base}/{id}"), None)
                        .await?;
                    if !args.out.json {
                        outln!("revoked token {id}");
                    }
                }
            }
            Ok(())
        }
        .await,
    )
}

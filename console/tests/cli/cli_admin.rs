//! `mthpt tenant|app|user|token` against a running API: an operator creates a tenant, an app
//! (secret printed once), a tenant admin and a token for it; the token works from the
//! environment; refusals print the API's code and exit non-zero.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use mthpt_console::testing::spawn_app;
use mthpt_engine::store::Backend;

async fn mthpt(url: &str, token: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mthpt"));
    cmd.args(args)
        .env("MTHPT_URL", url)
        .env("MTHPT_TOKEN", token)
        .env_remove("MTHPT_TENANT")
        .env_remove("MTHPT_NEW_PASSWORD")
        .env_remove("MTHPT_CLI_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent");
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The value printed after `label` on its line.
fn field(out: &str, label: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label} in {out}"))
        .trim()
        .to_owned()
}

#[tokio::test]
async fn an_operator_sets_up_a_tenant_from_the_command_line() {
    let app = spawn_app(Backend::Sqlite).await;
    let (url, op) = (app.base_url.clone(), app.operator_token.clone());

    stdout(
        &mthpt(
            &url,
            &op,
            &["tenant", "create", "acme", "--node-group", "eu"],
        )
        .await,
    );
    let list = stdout(&mthpt(&url, &op, &["tenant", "list"]).await);
    assert!(list.lines().any(|l| l.starts_with("acme\teu")), "{list}");

    let created = stdout(&mthpt(&url, &op, &["app", "create", "--tenant", "acme", "shop"]).await);
    assert_eq!(field(&created, "app"), "acme.shop");
    let secret = field(&created, "secret");
    let stored = {
        let mut tx = app.store().begin_read().await.unwrap();
        tx.find_app_by_key("acme", "shop").await.unwrap().unwrap()
    };
    assert_eq!(stored.secret, secret);
    let apps = stdout(&mthpt(&url, &op, &["app", "list", "--tenant", "acme"]).await);
    assert!(
        apps.contains("acme.shop") && !apps.contains(&secret),
        "{apps}"
    );

    let user = stdout(
        &mthpt(
            &url,
            &op,
            &[
                "user",
                "create",
                "--tenant",
                "acme",
                "ada",
                "--role",
                "tenant_admin",
            ],
        )
        .await,
    );
    let password = field(&user, "password");
    assert!(password.len() >= 16);
    let id = field(&user, "id");
    let token_out = stdout(
        &mthpt(
            &url,
            &op,
            &[
                "token",
                "create",
                "--tenant",
                "acme",
                "--user",
                &id,
                "--name",
                "ci",
                "--expires-in-days",
                "30",
            ],
        )
        .await,
    );
    let token = field(&token_out, "token");
    assert!(token.starts_with("mthpt_"));

    // The tenant admin's token from the environment sees its tenant only, and cannot create
    // tenants: the refusal names the code and the exit status is non-zero.
    let mine = stdout(&mthpt(&url, &token, &["tenant", "list", "--json"]).await);
    let mine: serde_json::Value = serde_json::from_str(&mine).unwrap();
    assert_eq!(mine.as_array().unwrap().len(), 1);
    let refused = mthpt(&url, &token, &["tenant", "create", "evil"]).await;
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("403 forbidden"), "{err}");

    let own = stdout(&mthpt(&url, &token, &["token", "list"]).await);
    assert!(own.contains("ci"), "{own}");
    let token_id = own
        .lines()
        .nth(1)
        .unwrap()
        .split('\t')
        .next()
        .unwrap()
        .to_owned();
    stdout(&mthpt(&url, &token, &["token", "revoke", &token_id]).await);
    let after = mthpt(&url, &token, &["tenant", "list"]).await;
    assert!(String::from_utf8_lossy(&after.stderr).contains("401 unauthenticated"));
    app.stop().await;
}

#[tokio::test]
async fn an_operator_restricts_a_tenants_executor_hosts_from_the_command_line() {
    let app = spawn_app(Backend::Sqlite).await;
    let (url, op) = (app.base_url.clone(), app.operator_token.clone());

    let created = stdout(
        &mthpt(
            &url,
            &op,
            &["tenant", "create", "acme", "--executor-host", "10.0.0.5"],
        )
        .await,
    );
    assert_eq!(field(&created, "executor hosts"), "10.0.0.5", "{created}");
    let set = stdout(
        &mthpt(
            &url,
            &op,
            &[
                "tenant",
                "set-executor-hosts",
                "acme",
                "10.0.0.6",
                "*.Jobs.Example.com",
            ],
        )
        .await,
    );
    assert_eq!(
        field(&set, "executor hosts"),
        "10.0.0.6,*.jobs.example.com",
        "{set}"
    );
    let shown = stdout(&mthpt(&url, &op, &["tenant", "show", "acme"]).await);
    assert_eq!(
        field(&shown, "executor hosts"),
        "10.0.0.6,*.jobs.example.com",
        "{shown}"
    );
    let list = stdout(&mthpt(&url, &op, &["tenant", "list"]).await);
    assert!(
        list.lines()
            .any(|l| l.starts_with("acme\tdefault\tfalse\t10.0.0.6,*.jobs.example.com\t")),
        "{list}"
    );

    // A wrong entry: the API's refusal names it, and the command fails.
    let bad = mthpt(
        &url,
        &op,
        &["tenant", "set-executor-hosts", "acme", "http://x:1"],
    )
    .await;
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("executor_hosts[0]"), "{err}");

    // No host: any host again.
    let cleared = stdout(&mthpt(&url, &op, &["tenant", "set-executor-hosts", "acme"]).await);
    assert_eq!(field(&cleared, "executor hosts"), "any", "{cleared}");
    app.stop().await;
}

#[tokio::test]
async fn an_app_secret_can_go_to_an_owner_only_file_instead_of_the_terminal() {
    let app = spawn_app(Backend::Sqlite).await;
    let (url, op) = (app.base_url.clone(), app.operator_token.clone());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ops.secret");
    let file_arg = file.display().to_string();
    stdout(&mthpt(&url, &op, &["tenant", "create", "acme"]).await);

    let created = stdout(
        &mthpt(
            &url,
            &op,
            &[
                "app",
                "create",
                "--tenant",
                "acme",
                "ops",
                "--secret-file",
                &file_arg,
            ],
        )
        .await,
    );
    assert_eq!(field(&created, "app"), "acme.ops");
    let secret = ops_secret(&app).await;
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{secret}\n")
    );
    assert!(!created.contains(&secret), "not printed: {created}");
    assert!(field(&created, "secret").contains(&file_arg), "{created}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "only its owner may read it");
    }

    // A refused rotation leaves the file as it was; a rotation replaces its content.
    let refused = mthpt(
        &url,
        &op,
        &[
            "app",
            "rotate-secret",
            "--tenant",
            "acme",
            "nope",
            "--secret-file",
            &file_arg,
        ],
    )
    .await;
    assert!(!refused.status.success());
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{secret}\n")
    );
    stdout(
        &mthpt(
            &url,
            &op,
            &[
                "app",
                "rotate-secret",
                "--tenant",
                "acme",
                "ops",
                "--secret-file",
                &file_arg,
            ],
        )
        .await,
    );
    let rotated = ops_secret(&app).await;
    assert_ne!(rotated, secret);
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{rotated}\n")
    );

    // A refused creation leaves no empty file behind.
    let taken = dir.path().join("taken.secret");
    let refused = mthpt(
        &url,
        &op,
        &[
            "app",
            "create",
            "--tenant",
            "acme",
            "ops",
            "--secret-file",
            &taken.display().to_string(),
        ],
    )
    .await;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("409"));
    assert!(!taken.exists());

    // A new app's secret never overwrites a file that exists: it may be another app's.
    let refused = mthpt(
        &url,
        &op,
        &[
            "app",
            "create",
            "--tenant",
            "acme",
            "ops2",
            "--secret-file",
            &file_arg,
        ],
    )
    .await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("exists already"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{rotated}\n"),
        "ops's secret is still there"
    );
    app.stop().await;
}

async fn ops_secret(app: &mthpt_console::testing::TestApp) -> String {
    let mut tx = app.store().begin_read().await.unwrap();
    tx.find_app_by_key("acme", "ops")
        .await
        .unwrap()
        .unwrap()
        .secret
}

#[tokio::test]
async fn an_operator_sets_tenant_quotas_from_the_command_line() {
    let app = spawn_app(Backend::Sqlite).await;
    let (url, op) = (app.base_url.clone(), app.operator_token.clone());
    let acme = app.tenant("acme").await;

    let shown = stdout(&mthpt(&url, &op, &["tenant", "quotas", "acme"]).await);
    assert_eq!(field(&shown, "max_tasks"), "0 / unlimited", "{shown}");

    let set = stdout(
        &mthpt(
            &url,
            &op,
            &[
                "tenant",
                "set-quotas",
                "acme",
                "--max-tasks",
                "10",
                "--max-fires-per-second",
                "5",
            ],
        )
        .await,
    );
    assert_eq!(field(&set, "max_tasks"), "0 / 10", "{set}");
    assert_eq!(field(&set, "max_fires_per_second"), "5", "{set}");

    // Quotas not given stay; `unlimited` clears one.
    let set = stdout(
        &mthpt(
            &url,
            &op,
            &["tenant", "set-quotas", "acme", "--max-tasks", "unlimited"],
        )
        .await,
    );
    assert_eq!(field(&set, "max_tasks"), "0 / unlimited", "{set}");
    assert_eq!(field(&set, "max_fires_per_second"), "5", "{set}");

    // A tenant admin may read but not set them.
    let (_, admin) = app
        .user(Some(&acme), "ada", mthpt_engine::tenant::Role::TenantAdmin)
        .await;
    stdout(&mthpt(&url, &admin, &["tenant", "quotas", "acme"]).await);
    let refused = mthpt(
        &url,
        &admin,
        &["tenant", "set-quotas", "acme", "--max-tasks", "99"],
    )
    .await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    app.stop().await;
}

#[tokio::test]
async fn an_operator_sets_a_tenants_claim_weight_from_the_command_line() {
    let app = spawn_app(Backend::Sqlite).await;
    let (url, op) = (app.base_url.clone(), app.operator_token.clone());
    let acme = app.tenant("acme").await;

    let shown = stdout(&mthpt(&url, &op, &["tenant", "weight", "acme"]).await);
    assert_eq!(
        field(&shown, "weight"),
        "1",
        "every tenant starts at 1: {shown}"
    );

    let set = stdout(&mthpt(&url, &op, &["tenant", "set-weight", "acme", "4"]).await);
    assert_eq!(field(&set, "weight"), "4", "{set}");
    let shown = stdout(&mthpt(&url, &op, &["tenant", "weight", "acme"]).await);
    assert_eq!(field(&shown, "weight"), "4", "{shown}");

    // Out of range: the API's refusal names the field; nothing changes.
    for bad in ["0", "-3", "1001"] {
        let refused = mthpt(&url, &op, &["tenant", "set-weight", "acme", bad]).await;
        assert!(!refused.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(
            err.contains("validation_failed") && err.contains("weight:"),
            "{bad}: {err}"
        );
    }

    // A tenant admin may read it but not set it.
    let (_, admin) = app
        .user(Some(&acme), "ada", mthpt_engine::tenant::Role::TenantAdmin)
        .await;
    let read = stdout(&mthpt(&url, &admin, &["tenant", "weight", "acme"]).await);
    assert_eq!(field(&read, "weight"), "4", "{read}");
    let refused = mthpt(&url, &admin, &["tenant", "set-weight", "acme", "9"]).await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("forbidden"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let shown = stdout(&mthpt(&url, &op, &["tenant", "weight", "acme"]).await);
    assert_eq!(
        field(&shown, "weight"),
        "4",
        "refusals changed nothing: {shown}"
    );
    app.stop().await;
}

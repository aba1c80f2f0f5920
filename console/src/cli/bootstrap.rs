//! `mthpt bootstrap`: creates the first operator of a cluster database, directly in the store
//! (the API needs an operator to create anything), and prints its password and an API token
//! once. Refused when the user name exists, so running it twice changes nothing.

use std::process::ExitCode;

use clap::Args;
use mthpt_engine::clock::{Clock, SystemClock};
use mthpt_engine::store::{self, Store, redact_url};
use mthpt_engine::tenant::{NewApiToken, NewUser, Role};

use crate::service::credentials::{hash_password, new_password, new_token, token_hash};

/// Arguments of `mthpt bootstrap`.
#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// The cluster database: postgres://user@host:port/db or sqlite://path/to/file.db.
    #[arg(long, env = "MTHPT_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// The operator's user name.
    #[arg(long, env = "MTHPT_USERNAME", default_value = "admin")]
    pub username: String,
}

/// Migrates, creates the operator and its first token, and prints both secrets.
pub async fn run(args: BootstrapArgs) -> ExitCode {
    let shown = redact_url(&args.database_url);
    let store = match store::connect(&args.database_url).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mthpt bootstrap: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = create(&*store, &args.username).await;
    store.close().await;
    match outcome {
        Ok((password, token)) => {
            outln!(
                "operator  {}\npassword  {password}\ntoken     {token}\n\
                 Neither is shown again. Use the token with --token or MTHPT_TOKEN, or sign in \
                 with the password at POST /api/v1/session.",
                args.username
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mthpt bootstrap: {shown}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn create(store: &dyn Store, username: &str) -> anyhow::Result<(String, String)> {
    store.migrate().await?;
    let now = SystemClock.now_ms();
    let password = new_password();
    let token = new_token();
    // Hashed before the transaction begins (a transaction idle for long is ended by the server).
    let password_hash = hash_password(&password)?;
    let mut tx = store.begin().await?;
    if tx.find_user_by_username(username).await?.is_some() {
        anyhow::bail!("user {username:?} exists already; nothing was changed");
    }
    let user = tx
        .create_user(
            &NewUser {
                tenant_id: None,
                username: username.to_owned(),
                password_hash,
                role: Role::Operator,
            },
            now,
        )
        .await?;
    tx.create_api_token(
        &NewApiToken {
            user_id: user.id,
            name: "bootstrap".to_owned(),
            token_hash: token_hash(&token),
            expires_at: None,
            role: None,
        },
        now,
    )
    .await?;
    tx.commit().await?;
    Ok((password, token))
}

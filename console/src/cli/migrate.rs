//! `mthpt migrate`: applies the schema migrations to PostgreSQL or SQLite, idempotently.

use std::process::ExitCode;

use clap::Args;
use mthpt_engine::store::{self, redact_url};

/// Arguments of `mthpt migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The database: postgres://user@host:port/db or sqlite://path/to/file.db (created if missing).
    #[arg(long, env = "MTHPT_DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
}

/// Applies what is not applied yet and says what it did.
pub async fn run(args: MigrateArgs) -> ExitCode {
    let shown = redact_url(&args.database_url);
    let store = match store::connect(&args.database_url).await {
        Ok(store) => store,
        Err(e) => {
            eprintln!("mthpt migrate: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = store.migrate().await;
    store.close().await;
    match outcome {
        Ok(report) if report.applied.is_empty() => {
            outln!(
                "{shown}: schema is up to date at version {} ({}); nothing to apply",
                report.version,
                store.backend()
            );
            ExitCode::SUCCESS
        }
        Ok(report) => {
            for (version, description) in &report.applied {
                outln!("{shown}: applied {version:04} {description}");
            }
            outln!(
                "{shown}: schema is at version {} ({})",
                report.version,
                store.backend()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mthpt migrate: {shown}: {e}");
            ExitCode::FAILURE
        }
    }
}

//! The `mthpt` command line: one binary, one subcommand per role.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod wrapper;

/// MTHPT: a multi-tenant, highly available task scheduling platform.
#[derive(Debug, Parser)]
#[command(name = "mthpt", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `mthpt`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// A standalone executor with the built-in handlers (shell, http).
    Wrapper(wrapper::WrapperArgs),
}

/// Runs the parsed command line and returns the process exit code.
pub async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Wrapper(args) => wrapper::run(args).await,
    }
}

//! The `mthpt` command line: one binary, one subcommand per role.

/// `println!` for what a command prints for the person or script reading it: a reader that
/// went away (`mthpt task --tenant acme runs nightly | head -1`) ends the command quietly
/// (status 141), instead of the panic `println!` gives; another write error ends it with a
/// clear message.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            $crate::cli::output_failed(&e);
        }
    }};
}

pub mod admin;
pub mod bootstrap;
pub mod client;
pub mod console;
pub mod cron;
pub mod engine;
pub mod migrate;
pub mod process;
pub mod standalone;
pub mod task;
pub mod wrapper;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// MTHPT: a multi-tenant, highly available task scheduling platform.
#[derive(Debug, Parser)]
#[command(
    name = "mthpt",
    version,
    after_help = "Settings also come from MTHPT_* environment variables; each command's --help \
                  names them and shows the defaults (e.g. `mthpt engine --help`)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `mthpt`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage apps of a tenant over the API (`create` prints the signing secret once).
    App(admin::AppArgs),
    /// Create the first operator of a cluster database; prints its password and a token once.
    Bootstrap(bootstrap::BootstrapArgs),
    /// Serve the REST API (`/api/v1`, docs at `/api/docs/`) over the cluster database.
    Console(console::ConsoleArgs),
    /// Inspect Quartz cron expressions (e.g. `mthpt cron next "0 0 12 * * ?"`).
    Cron(cron::CronArgs),
    /// Run one engine node (claims, fires and follows up runs; serves wrapper callbacks).
    Engine(engine::EngineArgs),
    /// Apply database migrations (PostgreSQL or SQLite); safe to run repeatedly.
    Migrate(migrate::MigrateArgs),
    /// The quick start: engine, demo wrapper and SQLite in one process, with a demo tenant.
    Standalone(standalone::StandaloneArgs),
    /// A tenant's tasks over the console API: list, get, apply a task file, trigger, pause, resume, runs.
    Task(task::TaskArgs),
    /// Manage tenants over the API (operators create them).
    Tenant(admin::TenantArgs),
    /// Manage API tokens over the API (`create` prints the token once).
    Token(admin::TokenArgs),
    /// Manage users and their roles over the API.
    User(admin::UserArgs),
    /// A standalone executor with the built-in handlers (shell, http).
    Wrapper(wrapper::WrapperArgs),
}

/// Runs the parsed command line and returns the process exit code.
pub async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::App(args) => admin::app(args).await,
        Command::Bootstrap(args) => bootstrap::run(args).await,
        Command::Console(args) => console::run(args).await,
        Command::Cron(args) => cron::run(args),
        Command::Engine(args) => engine::run(args).await,
        Command::Migrate(args) => migrate::run(args).await,
        Command::Standalone(args) => standalone::run(args).await,
        Command::Task(args) => task::run(args).await,
        Command::Tenant(args) => admin::tenant(args).await,
        Command::Token(args) => admin::token(args).await,
        Command::User(args) => admin::user(args).await,
        Command::Wrapper(args) => wrapper::run(args).await,
    }
}

/// Ends the command after its output could not be written: quietly when the reader closed the
/// pipe, with status 141 as a shell reports a process a closed pipe ended (a script that
/// lost a token or a secret this way can tell), else with status 1 and why.
pub(crate) fn output_failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(141);
    }
    eprintln!("mthpt: cannot write the output: {e}");
    std::process::exit(1);
}

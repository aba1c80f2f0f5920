use std::process::ExitCode;

use clap::Parser;
use mthpt_console::cli::{Cli, run};

#[tokio::main]
async fn main() -> ExitCode {
    run(Cli::parse()).await
}

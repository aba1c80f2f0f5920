//! The `mthpt` command line, built inside the tests crate so that its tests (the benchmark smoke
//! test) can start engine nodes as separate processes: `mthpt-bench-node engine --database-url …`
//! behaves exactly like `mthpt engine …`.

use std::process::ExitCode;

use clap::Parser;
use mthpt_console::cli::{Cli, run};

#[tokio::main]
async fn main() -> ExitCode {
    run(Cli::parse()).await
}

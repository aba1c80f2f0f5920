//! The `mthpt` command run as a real process, in one binary (each test binary is a link):
//! `tenant|app|user|token`, `bootstrap` and `console`, `cron next`, `migrate`, `standalone` and
//! `task`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli_admin;
mod cli_console;
mod cli_cron;
mod cli_migrate;
mod cli_standalone;
mod cli_task;

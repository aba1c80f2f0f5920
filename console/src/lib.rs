//! MTHPT console: the `mthpt` command line and, later, the REST API and web UI.

pub mod cli;

//! The fault-injection suite in short: `mthpt-chaos` runs a scenario for 28–30 s against its
//! own PostgreSQL, three engine processes and two shell wrappers, with two faults 8 s apart, and
//! must find every guarantee held: no duplicate or concurrent duplicate start, no lost result, no miss, nothing stuck, no
//! missing chain child. The long runs and the other scenarios are run by hand
//! (`docs/faults.md`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// One scenario at a time (nextest runs them in a group of their own; this guards `cargo test`):
/// each starts a cluster, and two at once would starve a small machine of CPU for longer than a
/// lease.
static SERIAL: Mutex<()> = Mutex::new(());

const VIOLATIONS: &[&str] = &[
    "duplicate_starts",
    "concurrent_duplicate_starts",
    "lost_results",
    "misses",
    "stuck",
    "chain_children_missing",
];

/// Runs `mthpt-chaos --scenario scenario` for `seconds` (room for two faults, 8 s apart, each
/// followed by the 10 s its lateness is watched) with the extra arguments `extra`, and returns
/// its report.
fn chaos(scenario: &str, seconds: u32, extra: &[&str]) -> serde_json::Value {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let out = Command::new(env!("CARGO_BIN_EXE_mthpt-chaos"))
        .args(["--scenario", scenario])
        .args(["--duration", &seconds.to_string()])
        .args(["--fault-every", "8", "--drain", "8"])
        .args(extra)
        .args(["--tasks", "40"])
        // The same command line as `mthpt`, built inside this crate.
        .args(["--mthpt", env!("CARGO_BIN_EXE_mthpt-bench-node")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}), exit {}: {stderr}", out.status));
    println!("{json}");
    assert_eq!(json["scenario"], scenario);
    assert!(json["expected"].as_u64().unwrap() > 0, "{json}");
    assert!(
        !json["faults"].as_array().unwrap().is_empty(),
        "no fault was injected: {json}"
    );
    for field in VIOLATIONS {
        assert_eq!(json[field], 0, "{field}: {json}");
    }
    assert_eq!(json["violations"], 0, "{json}");
    assert!(out.status.success(), "exit {}: {json}", out.status);
    json
}

#[test]
fn engines_paused_in_turn_keep_every_guarantee() {
    // Pauses of 6 s: longer than the engines' node timeout (5 s) and lease (2 s), so the others
    // take over the paused engine's runs. Faults at 5 s and 13 s, the second ending at 19 s.
    chaos("engine-pause", 30, &["--fault-length", "6"]);
}

#[test]
fn engines_killed_in_turn_keep_every_guarantee() {
    // Down 2 s, then restarted: faults at 5 s and 13 s.
    chaos("engine-kill", 28, &[]);
}

#[test]
fn postgres_restarted_mid_load_keeps_every_guarantee() {
    chaos("pg-restart", 28, &[]);
}

//! One PostgreSQL failover in short: `mthpt-chaos --scenario pg-failover` on its own Patroni
//! cluster of three nodes, the primary's machine killed once and back 10 s later, with three
//! engines, two shell wrappers and a console node on the multi-host URL. Every guarantee must
//! hold, Patroni must promote a replica, scheduling must resume and the console answer again
//! with no server error after. Needs Debian's `patroni` and `etcd-server` (scripts/test.sh
//! installs them). The long runs and `pg-partition` are run by hand (`docs/faults.md`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn primary_lost_once_keeps_every_guarantee_and_scheduling_resumes() {
    let out = Command::new(env!("CARGO_BIN_EXE_mthpt-chaos"))
        .args(["--scenario", "pg-failover"])
        // The fault at 5 s, the node down 10 s, its rejoin, then the 10 s after it.
        .args(["--duration", "40", "--down-for", "10", "--drain", "8"])
        .args(["--tasks", "40"])
        .args(["--mthpt", env!("CARGO_BIN_EXE_mthpt-bench-node")])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}), exit {}: {stderr}", out.status));
    println!("{json}");
    assert_eq!(json["scenario"], "pg-failover");
    assert_eq!(json["database_hosts"], "multi-host");
    for field in [
        "duplicate_starts",
        "concurrent_duplicate_starts",
        "lost_results",
        "misses",
        "stuck",
        "chain_children_missing",
        "violations",
    ] {
        assert_eq!(json[field], 0, "{field}: {json}");
    }
    let failovers = json["failovers"].as_array().unwrap();
    assert_eq!(failovers.len(), 1, "{json}");
    let f = &failovers[0];
    assert!(f["new_primary"].is_string(), "no promotion: {json}");
    assert_ne!(f["new_primary"], f["primary"], "{json}");
    assert!(f["resumed_ms"].is_i64(), "scheduling never resumed: {json}");
    assert!(
        f["console_answered_ms"].is_i64(),
        "the console never answered: {json}"
    );
    assert_eq!(f["console_5xx_after"], 0, "{json}");
    assert!(out.status.success(), "exit {}: {json}", out.status);
}

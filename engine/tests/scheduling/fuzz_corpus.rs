//! Replays the cron fuzz target's corpus (`fuzz/corpus/cron/`) through the same check the fuzz
//! target runs: no panic, parsed expressions round-trip, fire times strictly increase.

#[path = "../../../fuzz/harness/cron.rs"]
#[allow(dead_code)]
mod harness;

use std::path::PathBuf;

fn corpus() -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/cron");
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus directory {} unreadable: {e}", dir.display()))
        .map(|entry| {
            let path = entry
                .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
                .path();
            let data =
                std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            (path, data)
        })
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{}: expected a corpus", dir.display());
    files
}

/// Both accepted and refused expressions are in the corpus, so the replay reaches the fire-time
/// search and its properties, not only the parser's refusals.
#[test]
fn cron_corpus_never_panics_and_fire_times_strictly_increase() {
    let files = corpus();
    let mut accepted = 0;
    for (path, data) in &files {
        match std::panic::catch_unwind(|| harness::check_cron(data)) {
            Ok(true) => accepted += 1,
            Ok(false) => {}
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                panic!("{} panicked: {message}", path.display());
            }
        }
    }
    assert!(
        accepted >= 3 && accepted + 3 <= files.len(),
        "{accepted} of {} expressions accepted; the corpus should hold both kinds",
        files.len()
    );
}

//! Replays the protocol fuzz targets' corpora (`fuzz/corpus/<target>/`) through the same checks
//! the fuzz targets run, so every input the fuzzer found interesting is checked on each test run.

#[path = "../../../fuzz/harness/protocol.rs"]
#[allow(dead_code)]
mod harness;

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
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
    assert!(
        files.len() >= 5,
        "{}: expected a corpus, found {} files",
        dir.display(),
        files.len()
    );
    files
}

/// Runs every corpus file through `check` and returns how many it accepted.
fn replay(target: &str, check: fn(&[u8]) -> bool) -> usize {
    let mut accepted = 0;
    for (path, data) in corpus(target) {
        match std::panic::catch_unwind(|| check(&data)) {
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
    accepted
}

/// Each corpus reaches both the accepting path and refusals, so a replay checks the properties
/// of accepted input and not only that refusals do not panic.
fn assert_mixed(target: &str, accepted: usize) {
    let total = corpus(target).len();
    assert!(
        accepted >= 2 && accepted + 2 <= total,
        "{target}: {accepted} of {total} inputs accepted; the corpus should hold both kinds"
    );
}

#[test]
fn signature_header_corpus_never_panics_and_accepted_headers_round_trip() {
    let accepted = replay("signature_headers", harness::check_signature_headers);
    assert_mixed("signature_headers", accepted);
}

#[test]
fn verify_request_corpus_never_panics_and_signed_requests_verify_once() {
    let accepted = replay("verify_request", harness::check_verify_request);
    assert_mixed("verify_request", accepted);
}

#[test]
fn protocol_json_corpus_never_panics_and_parsed_bodies_round_trip() {
    let accepted = replay("protocol_json", harness::check_protocol_json);
    assert_mixed("protocol_json", accepted);
}

/// The clock extremes a receiver could be handed never make the skew check overflow.
#[test]
fn timestamp_check_at_extreme_clocks_refuses_without_panicking() {
    let data = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/signature_headers/valid"),
    )
    .unwrap_or_else(|e| panic!("reading the valid corpus file: {e}"));
    let headers = harness::Request::split(&data)
        .parse_headers()
        .unwrap_or_else(|e| panic!("the valid corpus file is refused: {e}"));
    for now in [i64::MIN, i64::MAX] {
        assert!(matches!(
            headers.check_before_body(now),
            Err(mthpt_wrapper::protocol::SignatureError::Stale { .. })
        ));
    }
}

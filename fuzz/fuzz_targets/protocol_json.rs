#![no_main]
//! Fuzz target `protocol_json`: runs `check_protocol_json` from harness/protocol.rs, which the
//! corpus replay test runs too.

#[path = "../harness/protocol.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // Accepted or refused are both fine; a panic or a failed property is the finding.
    let _ = harness::check_protocol_json(data);
});

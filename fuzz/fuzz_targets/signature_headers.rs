#![no_main]
//! Fuzz target `signature_headers`: runs `check_signature_headers` from harness/protocol.rs, which the
//! corpus replay test runs too.

#[path = "../harness/protocol.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // Accepted or refused are both fine; a panic or a failed property is the finding.
    let _ = harness::check_signature_headers(data);
});

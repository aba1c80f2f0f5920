#![no_main]
//! Fuzz target `cron`: runs `check_cron` from harness/cron.rs, which the
//! corpus replay test runs too.

#[path = "../harness/cron.rs"]
#[allow(dead_code)]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // Accepted or refused are both fine; a panic or a failed property is the finding.
    let _ = harness::check_cron(data);
});

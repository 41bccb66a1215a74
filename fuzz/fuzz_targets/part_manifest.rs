//! A part's part.json: never panics; what reads writes back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../src/checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::part_manifest(data);
});

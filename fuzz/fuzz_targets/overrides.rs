//! Override files, text and JSON: never panic; parsed pairs survive a JSON write-back.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../src/checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::overrides(data);
});

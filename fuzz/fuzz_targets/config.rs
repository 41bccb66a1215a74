//! actdiff.toml configs and rules text files: never panic; errors carry 1-based positions.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../src/checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::config(data);
});

//! Bytes 0-1 choose the chunk target, bytes 2-3 cut the rest into two logs;
//! run 2's parse against run 1's must equal its plain parse.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../src/checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::parse_against(data);
});

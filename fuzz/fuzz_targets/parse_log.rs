//! Whole log files: parse, touch every field, duplicate keys, self-match (all Match or Truncated).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../src/checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::parse_log(data);
});

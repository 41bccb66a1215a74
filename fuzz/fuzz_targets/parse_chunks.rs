//! First two bytes choose the chunk target; the parallel parse must equal the serial parse.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../src/checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::parse_chunks(data);
});

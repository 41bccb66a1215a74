//! Two logs compared: --rows JSON Lines and the rank summary are well-formed and read back.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../src/checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::outputs(data);
});

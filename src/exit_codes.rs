//! The exit-status contract of `actdiff compare`, one place for CI gates to read.
//!
//! | status | meaning |
//! | --- | --- |
//! | 0 | compared; no divergence beyond tolerance |
//! | 1 | compared; a divergence, or ops or ranks present on one side only |
//! | 2 | usage or input error (missing, empty or unparseable input; bad option, rule or override file) |
//! | 3 | incomplete input (a truncated log, a header count that does not match the blocks, a value that is no number, or a rank's log missing below its run's `World size:`), unless `--allow-incomplete`; a shard log combined across layouts always (its group cannot be combined) |

/// Compared; no divergence beyond tolerance.
pub const OK: i32 = 0;
/// Compared; a divergence, or ops or ranks on one side only.
pub const DIVERGED: i32 = 1;
/// Usage or input error.
pub const INPUT_ERROR: i32 = 2;
/// Incomplete input (truncated log, header count mismatch, unreadable value), unless `--allow-incomplete`.
pub const INCOMPLETE: i32 = 3;

//! Every input case in `../shared/cases/` (see its `README.md` and
//! `expect.tsv`) as an end-to-end test of the `actdiff` binary.
//!
//! Each test runs the command its case README gives, from inside the case
//! folder (`current_dir`), with `-o` and `--rows` pointing into a fresh
//! temporary folder, and checks the exit status *and* the content the README
//! asks for: the terminal summary (stdout), warnings and errors (stderr),
//! `summary.json`, the `--rows` file (JSON Lines) and/or the HTML pages.
//!
//! Where a case shows a *kind* of fault, its test also generates variants of
//! the case files into a temporary folder: CRLF on some lines only, logs cut
//! at many byte offsets, other non-finite spellings, corrupt gzip, random
//! bytes of several sizes, a `numerics/` subfolder, gzip-compressed ranks, a
//! whitespace-only file. Cases 19 and 20 are too large to store: their logs
//! are generated here from the block template their READMEs give (case 19 at
//! a reduced size, case 20 at full size).
//!
//! Every test runs in a plain `cargo test`; none is ignored for behaviour
//! actdiff lacks. Without `../shared` every test here is reported as
//! ignored (see build.rs), never as passed.
//!
//! One module per case (`caseNN_name.rs`, named after its folder), helpers
//! in `common.rs`, over the helpers every test crate shares
//! (`tests/support/`: running the binary, reading its outputs). A new
//! case's tests go into a new module here.

#[path = "../support/mod.rs"]
mod support;

mod common;

mod case01_unequal_op_streams;
mod case02_fqn_root_class;
mod case03_collective_hash_one_side;
mod case04_nan_inf_values;
mod case05_alt_field_spellings;
mod case06_counter_drift_overrides;
mod case07_format_version_skew;
mod case08_inplace_long_inputs_odd_keys;
mod case09_rank_set_mismatch;
mod case10_empty_or_partial_dump;
mod case11_duplicate_keys_pp_offset;
mod case12_rank_grouping;
mod case13_exact_zeros;
mod case14_tolerance_rules;
mod case15_dtype_tolerance;
mod case16_subnormal_vs_zero;
mod case17_first_divergence;
mod case18_diff_colour_scale;
mod case19_huge_log_streaming;
mod case20_report_size_budget;
mod case21_low_precision_dtypes;
mod case22_gzip_input;
mod case23_crlf_line_endings;
mod case24_truncated_log;
mod case25_exit_status_contract;

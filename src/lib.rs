//! actdiff finds where two deep-learning training runs stop agreeing
//! numerically, from the per-op activation statistics that TorchTitan's
//! numerics tracer writes (`rank_N_activations.log`).
//!
//! Data flows through three stages, each in its own module and each handing
//! the next one type:
//!
//! ```text
//! log files ─► parser ─► OpTable ─► matcher ─► MatchTable ─► report (HTML pages, JSON, terminal)
//! ```
//!
//! - [`parser`]: memory-mapped logs parsed in parallel chunks into a columnar [`parser::OpTable`].
//! - [`matcher`]: the reference's four pairing passes and status rule, into a [`matcher::MatchTable`].
//! - [`report`]: paginated HTML, `summary.json`, JSON Lines rows and the terminal summary.
//! - [`run`]: finding the rank logs of a run and comparing every rank.
//! - [`logformat`]: the writer of the log text (headers, field lines, numbers), shared by
//!   [`capture`] and [`gen`].
//! - [`capture`]: the libtorch capture agent (feature `capture`).
//! - [`gen`]: a generator of realistic logs for benchmarks.

pub mod capture;
pub mod cli;
pub mod exit_codes;
pub mod gen;
pub mod layout;
pub mod logformat;
pub mod matcher;
pub mod parser;
pub mod report;
pub mod run;

//! The report stage: [`RankComparison`]s in; HTML pages, `summary.json`,
//! JSON Lines rows and the terminal summary out.
//!
//! Each rank is reported as soon as it is matched ([`write_rank`]
//! writes its pages and returns a small [`RankSummary`]); the index page and
//! `summary.json` are written last from the summaries alone
//! ([`write_index`]), so memory does not grow with the number of ranks.

/// Implements, for a typed value that carries its words (`Display`), the
/// one rule the report's typed values share: two are equal when their
/// words are, serde writes one as its words and reads words back as
/// `$read(String)`. Used by [`messages::Message`], [`reasons::Reason`] and
/// [`summary::Verdict`].
macro_rules! written_as_words {
    ($t:ident, $read:path) => {
        impl Eq for $t {}

        /// Equal when the words are (a value read back from a written
        /// file equals the one written).
        impl PartialEq for $t {
            fn eq(&self, other: &$t) -> bool {
                self.to_string() == other.to_string()
            }
        }

        /// Written as its words.
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        /// Read back as its words.
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                <String as serde::Deserialize>::deserialize(d).map($read)
            }
        }
    };
}

pub mod colour;
pub mod files;
mod folder;
pub mod html;
pub mod junit;
pub mod messages;
pub mod parquet;
mod plan;
pub mod reasons;
mod rowdata;
pub mod rows;
pub mod steps;
pub mod summary;
pub mod terminal;

use std::path::{Path, PathBuf};

use crate::matcher::MatchTable;
use crate::parser::OpTable;

pub use folder::{clear_previous, clear_previous_keeping_pages, KeptPages};
pub use plan::{rank_budget, series_step_budget, top_up, BudgetUse, PagePlan, CONTEXT_ROWS};
pub use summary::{RankSummary, RowRef, Summary};

/// Errors writing a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file of the report could not be written.
    #[error("{}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
    /// A template failed to render (a bug: templates are built in).
    #[error("template {name}: {message}")]
    Template {
        /// Template name.
        name: String,
        /// Tera's message.
        message: String,
    },
}

impl ReportError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: &Path, e: std::io::Error) -> ReportError {
        ReportError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }
}

/// One rank's inputs and matcher output, borrowed for reporting.
#[derive(Clone, Copy)]
pub struct RankComparison<'a> {
    /// Run 1's rank number.
    pub rank1: u32,
    /// Run 2's rank number (differs from `rank1` only under `--rank-map`).
    pub rank2: u32,
    /// Run 1's op table.
    pub t1: &'a OpTable,
    /// Run 2's op table.
    pub t2: &'a OpTable,
    /// The matcher's result rows.
    pub matches: &'a MatchTable,
}

/// Report settings that apply to every rank.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    /// The report folder.
    pub out_dir: PathBuf,
    /// Display name of run 1.
    pub name1: String,
    /// Display name of run 2.
    pub name2: String,
    /// Path of run 1 as given.
    pub path1: String,
    /// Path of run 2 as given.
    pub path2: String,
    /// Result rows per HTML page.
    pub page_rows: usize,
    /// Up to this many result rows per rank the pages hold every row; above
    /// it they hold only the rows that are not `match`. `None`: always every
    /// row (`--html-rows all`).
    pub html_rows: Option<usize>,
    /// Size budget of one rank's report, in bytes (estimated before
    /// writing; the comparison sets it to the rank's share of the report's
    /// budget, [`rank_budget`]): over it the pages hold only the diverging
    /// rows with [`CONTEXT_ROWS`] rows of context each, then only the
    /// diverging rows, and if that is still too much, the first ones that
    /// fit. `None`: no budget.
    pub html_budget: Option<u64>,
    /// Whether each rank gets its own files: result pages (the first with
    /// the rank's heatmap) and key index. `false` for the steps of a step series that get no
    /// full pages (all but the first diverging one, unless `--steps all`):
    /// their ranks are in the step's `summary.json` and on its index, and
    /// no rank file is written, so a series at thousands of ranks writes
    /// per-rank files for one step only and nothing links to a file that
    /// is not there.
    pub rank_files: bool,
    /// The index of the step series this report is a step of, relative to
    /// its folder (`../index.html`), for a link back; `None` for a
    /// comparison of its own.
    pub series_index: Option<String>,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            out_dir: PathBuf::from("report"),
            name1: "run1".into(),
            name2: "run2".into(),
            path1: String::new(),
            path2: String::new(),
            page_rows: DEFAULT_PAGE_ROWS,
            html_rows: Some(DEFAULT_HTML_ROWS),
            html_budget: Some(DEFAULT_HTML_BUDGET_MB << 20),
            rank_files: true,
            series_index: None,
        }
    }
}

/// Default of [`ReportOptions::page_rows`]: a page of 500 result rows
/// (about 380 KB) loads and draws in a fraction of a second in headless
/// Chromium, where 2,000 rows took several times longer (`tests/browser.rs`,
/// `large_report_sizes_and_index_load_time`; figures in
/// `docs/performance.md`).
pub const DEFAULT_PAGE_ROWS: usize = 500;

/// Default of [`ReportOptions::html_rows`].
pub const DEFAULT_HTML_ROWS: usize = 200_000;

/// Default of the report's HTML size budget (`--html-budget-mb`), in MiB:
/// the whole report folder's pages, shared out over its ranks
/// ([`rank_budget`]).
pub const DEFAULT_HTML_BUDGET_MB: u64 = 256;

/// What the report stage tells a progress display, from the threads that
/// write pages.
pub trait PageProgress: Sync {
    /// A rank's pages are planned: `pages` more to write.
    fn planned(&self, pages: u64);
    /// One page was written.
    fn written(&self);
}

/// No progress display.
impl PageProgress for () {
    fn planned(&self, _: u64) {}
    fn written(&self) {}
}

/// Writes the result pages of `rc` into `opts.out_dir` and summarises it.
pub fn write_rank(
    rc: &RankComparison<'_>,
    opts: &ReportOptions,
) -> Result<RankSummary, ReportError> {
    write_rank_with_progress(rc, opts, &PagePlan::new(rc, opts), &())
}

/// [`write_rank`] with the rows `plan` shows (made by [`PagePlan::new`]
/// from the same `rc` and `opts`), telling `progress` about the pages.
pub fn write_rank_with_progress(
    rc: &RankComparison<'_>,
    opts: &ReportOptions,
    plan: &PagePlan,
    progress: &dyn PageProgress,
) -> Result<RankSummary, ReportError> {
    let mut s = RankSummary::build(rc, plan);
    (s.pages, s.key_index) = html::write_rank_pages(rc, &s, opts, plan, progress)?;
    Ok(s)
}

/// Up to this many entries in `ranks`, `summary.json` is written indented
/// for reading; above it, compact ([`summary_json`]).
pub const SUMMARY_INDENTED_RANKS: usize = 64;

/// The bytes of `summary.json`: indented up to [`SUMMARY_INDENTED_RANKS`]
/// rank entries, compact (no whitespace) above: the same JSON, about 40 %
/// smaller, which at thousands of ranks (a step series holds each rank
/// once per step, and each step's report its own) keeps the report folder
/// near its budget.
pub fn summary_json(summary: &Summary) -> Vec<u8> {
    if summary.ranks.len() > SUMMARY_INDENTED_RANKS {
        serde_json::to_vec(summary).expect("summary serialises")
    } else {
        serde_json::to_vec_pretty(summary).expect("summary serialises")
    }
}

/// Writes `index.html` and `summary.json` for the whole comparison.
pub fn write_index(summary: &Summary, opts: &ReportOptions) -> Result<(), ReportError> {
    let path = opts.out_dir.join(files::SUMMARY);
    let json = summary_json(summary);
    std::fs::write(&path, json).map_err(|e| ReportError::io(&path, e))?;
    html::write_index(summary, opts)
}

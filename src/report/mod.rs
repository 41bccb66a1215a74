//! The report stage: [`RankComparison`]s in; HTML pages, `summary.json`,
//! JSON Lines rows and the terminal summary out.
//!
//! Each rank is reported as soon as it is matched ([`RankReport::write`]
//! writes its pages and returns a small [`RankSummary`]); the index page and
//! `summary.json` are written last from the summaries alone
//! ([`write_index`]), so memory does not grow with the number of ranks.

pub mod html;
pub mod junit;
pub mod rows;
pub mod summary;
pub mod terminal;

use std::path::{Path, PathBuf};

use crate::matcher::MatchTable;
use crate::parser::OpTable;

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
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            out_dir: PathBuf::from("report"),
            name1: "run1".into(),
            name2: "run2".into(),
            path1: String::new(),
            path2: String::new(),
            page_rows: 2000,
        }
    }
}

/// Writes one rank's HTML pages and returns its summary.
pub struct RankReport;

impl RankReport {
    /// Writes the result pages of `rc` into `opts.out_dir` and summarises it.
    pub fn write(
        rc: &RankComparison<'_>,
        opts: &ReportOptions,
    ) -> Result<RankSummary, ReportError> {
        let mut s = RankSummary::build(rc, opts);
        s.pages = html::write_rank_pages(rc, &s, opts)?;
        Ok(s)
    }
}

/// Writes `index.html` and `summary.json` for the whole comparison.
pub fn write_index(summary: &Summary, opts: &ReportOptions) -> Result<(), ReportError> {
    let path = opts.out_dir.join("summary.json");
    let json = serde_json::to_vec_pretty(summary).expect("summary serialises");
    std::fs::write(&path, json).map_err(|e| ReportError::io(&path, e))?;
    html::write_index(summary, opts)
}

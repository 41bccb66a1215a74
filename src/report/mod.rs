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
pub mod html;
pub mod junit;
pub mod messages;
pub mod parquet;
pub mod reasons;
mod rowdata;
pub mod rows;
pub mod steps;
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
    /// Whether each rank gets its own files: result pages, overview page
    /// and key index. `false` for the steps of a step series that get no
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

/// Matching rows shown before and after each diverging row when the size
/// budget leaves no room for every row.
pub const CONTEXT_ROWS: usize = 2;

/// What a rank's report costs besides its result rows, in bytes: its
/// overview page (the heatmap: 16 KB for a 2-layer model of 300 ops) and a
/// result page's own markup (about 2 KB), with headroom; the stylesheet
/// and script are one file each per folder.
const RANK_FIXED_BYTES: u64 = 24_000;

/// One rank's share of a report-wide HTML budget of `budget` bytes over
/// `ranks` ranks: what [`ReportOptions::html_budget`] is set to for each
/// rank (at least what a rank costs besides its rows).
pub fn rank_budget(budget: u64, ranks: usize) -> u64 {
    (budget / ranks.max(1) as u64).max(RANK_FIXED_BYTES)
}

/// Each step's share of a report-wide HTML budget (`None`: no budget) over
/// the `steps` steps of a step series, as [`rank_budget`] shares a step's
/// among its ranks: so the budget holds for the whole series' folder with
/// `--steps all`, and the first diverging step's pages (the only full ones
/// otherwise) are those `--steps all` writes for it.
pub fn series_step_budget(budget: Option<u64>, steps: usize) -> Option<u64> {
    budget.map(|b| b / steps.max(1) as u64)
}

/// Result rows `rows` (ascending) with up to [`CONTEXT_ROWS`] neighbours
/// each, of `total` rows, ascending without repeats.
fn with_context(rows: &[u32], total: usize) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::with_capacity(rows.len() * (2 * CONTEXT_ROWS + 1));
    for &r in rows {
        let lo = (r as usize).saturating_sub(CONTEXT_ROWS) as u32;
        let hi = ((r as usize + CONTEXT_ROWS).min(total.saturating_sub(1))) as u32;
        let start = out.last().map_or(lo, |&l| lo.max(l + 1));
        out.extend(start..=hi);
    }
    out
}

/// Estimated HTML bytes of one result row: both sides' texts, plus markup.
fn row_html_estimate(rc: &RankComparison<'_>, index: usize) -> u64 {
    let r = &rc.matches.rows[index];
    let side = |t: &OpTable, row: Option<usize>| -> u64 {
        // Every column field once, the key twice (it is shown and anchored).
        row.map_or(0, |i| t.column_text_len(i) + t.key(i).len() as u64)
    };
    side(rc.t1, r.r1()) + side(rc.t2, r.r2()) + 420
}

/// Which result rows of a rank the HTML pages hold, and on which page.
#[derive(Clone, Debug)]
pub struct PagePlan {
    /// Result row indexes shown, ascending; `None` when every row is shown.
    shown: Option<Vec<u32>>,
    /// Result rows of the rank.
    total: usize,
    /// Rows per page.
    pub page_rows: usize,
    /// Diverging rows before the budget cut, when it cut.
    cut: Option<usize>,
}

impl PagePlan {
    /// Every row when the rank has at most `opts.html_rows` rows (or it is
    /// `None`), else only the rows that are not `match`; then, if the
    /// estimated HTML exceeds `opts.html_budget`, the diverging rows with
    /// their context, else only the diverging rows, and if still over, the
    /// first of them that fit.
    /// Without [`ReportOptions::rank_files`], no row is shown (there are
    /// no pages).
    pub fn new(rc: &RankComparison<'_>, opts: &ReportOptions) -> PagePlan {
        let m = rc.matches;
        let total = m.rows.len();
        if !opts.rank_files {
            return PagePlan {
                shown: Some(Vec::new()),
                total,
                page_rows: opts.page_rows.max(1),
                cut: None,
            };
        }
        let diverging = || -> Vec<u32> {
            m.rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.status != crate::matcher::Status::Match)
                .map(|(i, _)| i as u32)
                .collect()
        };
        let mut shown = match opts.html_rows {
            Some(limit) if total > limit => Some(diverging()),
            _ => None,
        };
        let mut cut = None;
        if let Some(budget) = opts.html_budget {
            // Leave a tenth for the index, the key index and estimate
            // error, and what the rank costs besides its rows.
            let budget = (budget / 10 * 9).saturating_sub(RANK_FIXED_BYTES);
            let over = |rows: &mut dyn Iterator<Item = usize>| -> Option<usize> {
                let mut sum = 0u64;
                for (k, i) in rows.enumerate() {
                    sum += row_html_estimate(rc, i);
                    if sum > budget {
                        return Some(k);
                    }
                }
                None
            };
            if shown.is_none() && over(&mut (0..total)).is_some() {
                let d = diverging();
                let c = with_context(&d, total);
                shown = Some(if over(&mut c.iter().map(|i| *i as usize)).is_none() {
                    c
                } else {
                    d
                });
            }
            if let Some(s) = shown.as_mut() {
                if let Some(k) = over(&mut s.iter().map(|i| *i as usize)) {
                    cut = Some(s.len());
                    s.truncate(k);
                }
            }
        }
        PagePlan {
            shown,
            total,
            page_rows: opts.page_rows.max(1),
            cut,
        }
    }
    /// When the size budget cut the diverging rows: how many there were.
    pub fn cut_from(&self) -> Option<usize> {
        self.cut
    }
    /// Whether only the non-`match` rows are shown.
    pub fn is_filtered(&self) -> bool {
        self.shown.is_some()
    }
    /// Number of rows shown.
    pub fn len(&self) -> usize {
        self.shown.as_ref().map_or(self.total, |s| s.len())
    }
    /// Whether no row is shown.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Result row index of the `k`-th shown row.
    pub fn row(&self, k: usize) -> usize {
        self.shown.as_ref().map_or(k, |s| s[k] as usize)
    }
    /// Number of pages (at least one).
    pub fn pages(&self) -> usize {
        self.len().div_ceil(self.page_rows).max(1)
    }
    /// The page (0-based) holding result row `index`, if it is shown.
    pub fn page_of(&self, index: usize) -> Option<usize> {
        match &self.shown {
            None => (index < self.total).then_some(index / self.page_rows),
            Some(s) => s
                .binary_search(&(index as u32))
                .ok()
                .map(|k| k / self.page_rows),
        }
    }
}

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
    write_rank_with_progress(rc, opts, &())
}

/// [`write_rank`], telling `progress` about the pages.
pub fn write_rank_with_progress(
    rc: &RankComparison<'_>,
    opts: &ReportOptions,
    progress: &dyn PageProgress,
) -> Result<RankSummary, ReportError> {
    let plan = PagePlan::new(rc, opts);
    let mut s = RankSummary::build(rc, &plan);
    s.pages = html::write_rank_pages(rc, &s, opts, &plan, progress)?;
    Ok(s)
}

/// Removes the report files ([`files::is_report_file`]) a previous comparison left
/// in `dir`, and those in its `step_S` folders (a previous step series'
/// reports; a folder left empty goes too), so that pages of ranks, pages
/// or steps this run does not write never sit beside its report as if
/// they belonged to it. Other files are left alone. Returns how many were
/// removed.
pub fn clear_previous(dir: &Path) -> Result<usize, ReportError> {
    let mut n = 0;
    let entries = std::fs::read_dir(dir).map_err(|e| ReportError::io(dir, e))?;
    for e in entries {
        let e = e.map_err(|e| ReportError::io(dir, e))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let kind = e.file_type();
        if kind.as_ref().is_ok_and(|t| t.is_file()) && files::is_report_file(name) {
            std::fs::remove_file(e.path()).map_err(|err| ReportError::io(&e.path(), err))?;
            n += 1;
        } else if kind.is_ok_and(|t| t.is_dir()) && files::step_of_dir_name(name).is_some() {
            n += clear_previous(&e.path())?;
            let _ = std::fs::remove_dir(e.path()); // only when empty
        }
    }
    Ok(n)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::{match_tables, MatchOptions};
    use crate::parser::parse_bytes;

    fn log(hashes: &[&str]) -> OpTable {
        let mut s = format!("Total captured activations: {}\n", hashes.len());
        for (i, h) in hashes.iter().enumerate() {
            s.push_str(&format!("[m/op_{i}_mm]\n  Output hash: {h}\n\n"));
        }
        parse_bytes(s.into_bytes(), "t.log")
    }

    #[test]
    fn page_plan_shows_only_diverging_rows_above_the_threshold() {
        let a = log(&["1", "2", "3", "4", "5"]);
        let b = log(&["1", "9", "3", "9", "5"]);
        let m = match_tables(&a, &b, &MatchOptions::default());
        let rc = RankComparison {
            rank1: 0,
            rank2: 0,
            t1: &a,
            t2: &b,
            matches: &m,
        };
        let plan = |html_rows: Option<usize>, page_rows: usize, budget: Option<u64>| {
            let o = ReportOptions {
                html_rows,
                page_rows,
                html_budget: budget,
                ..Default::default()
            };
            PagePlan::new(&rc, &o)
        };
        let all = plan(Some(5), 2, None);
        assert!(!all.is_filtered());
        assert_eq!((all.len(), all.pages()), (5, 3));
        assert_eq!(all.page_of(4), Some(2));
        let some = plan(Some(4), 1, None);
        assert!(some.is_filtered());
        assert_eq!((some.len(), some.pages()), (2, 2));
        assert_eq!((some.row(0), some.row(1)), (1, 3));
        assert_eq!(some.page_of(3), Some(1));
        assert_eq!(some.page_of(2), None, "a match row is not shown");
        assert!(!plan(None, 1, None).is_filtered());
        // A budget that fits one row estimate: diverging rows only, cut to the first.
        let one = row_html_estimate(&rc, 1);
        // (the plan keeps a tenth of the budget for the index)
        let budget = |rows: u64| (rows + RANK_FIXED_BYTES) * 10 / 9 + 10;
        let tight = plan(None, 1, Some(budget(one + 10)));
        assert!(tight.is_filtered());
        assert_eq!((tight.len(), tight.cut_from()), (1, Some(2)));
        assert_eq!(tight.row(0), 1);
        let roomy = plan(None, 1, Some(budget(10 * one)));
        assert!(!roomy.is_filtered());
        assert_eq!(roomy.cut_from(), None);

        let dir = tempfile::tempdir().unwrap();
        let opts = ReportOptions {
            out_dir: dir.path().to_path_buf(),
            page_rows: 1,
            html_rows: Some(4),
            ..Default::default()
        };
        let s = write_rank(&rc, &opts).unwrap();
        assert!(s.html_filtered);
        assert_eq!(s.html_rows, 2);
        assert_eq!(s.pages.len(), 2);
        assert_eq!(
            s.first_divergence.as_ref().unwrap().page,
            "rank0-page1.html"
        );
        let page2 = std::fs::read_to_string(dir.path().join("rank0-page2.html")).unwrap();
        assert!(page2.contains("rank0-row3"));
        assert!(page2.contains("showing 2 diverging rows of 5; all rows: --html-rows all"));
        assert!(!page2.contains("rank0-row2\""), "match rows are left out");
    }

    /// Over the budget, the diverging rows keep [`CONTEXT_ROWS`] rows of
    /// context each when that fits; a report-wide budget is shared out.
    #[test]
    fn budget_keeps_context_around_diverging_rows() {
        let h: Vec<String> = (0..12).map(|i| (i + 1).to_string()).collect();
        let mut h2 = h.clone();
        h2[6] = "99".into();
        h2[11] = "98".into();
        let a = log(&h.iter().map(String::as_str).collect::<Vec<_>>());
        let b = log(&h2.iter().map(String::as_str).collect::<Vec<_>>());
        let m = match_tables(&a, &b, &MatchOptions::default());
        let rc = RankComparison {
            rank1: 0,
            rank2: 0,
            t1: &a,
            t2: &b,
            matches: &m,
        };
        let one = row_html_estimate(&rc, 0);
        let plan = |rows: u64| {
            let o = ReportOptions {
                html_budget: Some((rows * one + RANK_FIXED_BYTES) * 10 / 9 + 10),
                ..Default::default()
            };
            PagePlan::new(&rc, &o)
        };
        let c = plan(9);
        assert!(c.is_filtered());
        let shown: Vec<usize> = (0..c.len()).map(|k| c.row(k)).collect();
        assert_eq!(
            shown,
            vec![4, 5, 6, 7, 8, 9, 10, 11],
            "two rows each side, clipped at the end"
        );
        let d = plan(3);
        assert_eq!(
            (0..d.len()).map(|k| d.row(k)).collect::<Vec<_>>(),
            vec![6, 11]
        );
        assert!(!plan(14).is_filtered(), "every row fits");
        assert_eq!(with_context(&[0, 1, 9], 10), vec![0, 1, 2, 3, 7, 8, 9]);
        assert_eq!(rank_budget(256 << 20, 4096), 65_536);
        assert_eq!(rank_budget(1 << 20, 4096), RANK_FIXED_BYTES);
    }
}

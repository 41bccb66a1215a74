//! Result pages, `rank{N}-page{k}.html`: tera renders each page's frame
//! (header, counts, first divergence and cause, excluded ops, filters, the
//! heads of the Forward, Backward and Optimizer section tables, the colour
//! rules); the rows come from
//! `rowdata.rs` as JSON, written where the template has its
//! `<!--actdiff:rows-->` marker, and the page script draws them.

use rayon::prelude::*;
use serde::Serialize;

use super::parts::{
    cause_link, excluded, row_link, shown_note, status_counts, CauseLink, Excluded, RowLink,
    StatusCount,
};
use super::{engine, keys, overview};
use crate::matcher::Counts;
use crate::report::colour::{Colour, Palette};
use crate::report::summary::PageRef;
use crate::report::{
    files, rowdata, PagePlan, PageProgress, RankComparison, RankSummary, ReportError, ReportOptions,
};

/// Everything a result page shows.
#[derive(Serialize)]
struct PageCtx<'a> {
    name1: &'a str,
    name2: &'a str,
    rank: u32,
    rank2: u32,
    page: usize,
    pages: usize,
    first_row: usize,
    end_row: usize,
    total_rows: usize,
    /// Rows on all pages of the rank (fewer than `total_rows` when only the
    /// diverging rows are shown).
    shown_rows: usize,
    /// Only the diverging rows (with their context) are shown.
    filtered: bool,
    /// What the rows shown are: `diverging rows`, or `rows` when they
    /// include the diverging rows' context.
    shown_what: &'static str,
    /// "showing 31,880 diverging rows of 3,264,458; ..." when the pages hold only diverging rows.
    shown_note: String,
    prev: String,
    next: String,
    first_page: String,
    last_page: String,
    counts: Vec<StatusCount>,
    page_counts: Vec<StatusCount>,
    first_divergence: Option<RowLink<'a>>,
    first_cause: Option<CauseLink<'a>>,
    excluded: Vec<Excluded<'a>>,
    /// The two runs' excluded-ops lists differ.
    excluded_differ: bool,
    /// Colour classes `x1`, `x2`, ... of the page's differing cells.
    palette: Vec<Colour>,
    /// Forward, Backward, then Optimizer.
    sections: [Section; 3],
    /// The data columns of a side ([`rowdata::COLUMNS`]).
    columns: &'static [&'static str],
    /// Location's position among them.
    loc_column: usize,
}

/// A collapsible section of a result page.
#[derive(Serialize)]
struct Section {
    id: &'static str,
    title: &'static str,
    /// Rows of the section on this page.
    rows: usize,
}

/// Writes the pages' stylesheet and script ([`files::STYLESHEET`],
/// [`files::PAGE_SCRIPT`]) into `dir` unless they are there: through a
/// temporary file and a rename, so ranks written in parallel never see half
/// a file.
fn write_assets(dir: &std::path::Path) -> Result<(), ReportError> {
    for name in [files::STYLESHEET, files::PAGE_SCRIPT] {
        let path = dir.join(name);
        if path.is_file() {
            continue;
        }
        let text = engine::static_text(name).expect("a built-in template");
        let tmp = dir.join(format!(
            ".{name}.{}.{:?}.tmp",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&tmp, text).map_err(|e| ReportError::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| ReportError::io(&path, e))?;
    }
    Ok(())
}

/// Writes the result pages of one rank; returns the pages written.
///
/// Rows `[k·page_rows, (k+1)·page_rows)` go to page `k`
/// ([`files::page`]`(rank, k)`); a rank without rows still gets one empty
/// page. Pages are rendered in parallel, each from a context holding only
/// its own rows. Without [`ReportOptions::rank_files`] nothing is written
/// and no page is returned.
pub fn write_rank_pages(
    rc: &RankComparison<'_>,
    s: &RankSummary,
    opts: &ReportOptions,
    plan: &PagePlan,
    progress: &dyn PageProgress,
) -> Result<Vec<PageRef>, ReportError> {
    if !opts.rank_files {
        return Ok(Vec::new());
    }
    engine::engine()?;
    write_assets(&opts.out_dir)?;
    let n = plan.len();
    let per = plan.page_rows;
    let pages = plan.pages();
    let refs: Vec<PageRef> = (0..pages)
        .map(|k| PageRef {
            file: files::page(rc.rank1, k),
            first_row: k * per,
            end_row: ((k + 1) * per).min(n),
        })
        .collect();
    progress.planned(refs.len() as u64);
    let (pages, extra) = rayon::join(
        || {
            refs.par_iter().enumerate().try_for_each(|(k, p)| {
                write_page(rc, s, opts, plan, &refs, k, p)?;
                progress.written();
                Ok::<(), ReportError>(())
            })
        },
        || overview::write(rc, plan, opts).and_then(|()| keys::write(rc, plan, opts)),
    );
    pages?;
    extra?;
    Ok(refs)
}

fn write_page(
    rc: &RankComparison<'_>,
    s: &RankSummary,
    opts: &ReportOptions,
    plan: &PagePlan,
    refs: &[PageRef],
    k: usize,
    p: &PageRef,
) -> Result<(), ReportError> {
    // The page's rows by phase, then their JSON (which also picks the
    // colour classes the page's <style> defines).
    // Forward, backward, optimizer ([`crate::parser::Phase::ALL`] order): run 1's row's
    // phase, else run 2's.
    let mut by_phase: [Vec<usize>; 3] = Default::default();
    let mut pc = Counts::default();
    for index in (p.first_row..p.end_row).map(|k| plan.row(k)) {
        let row = &rc.matches.rows[index];
        pc.add(row.status);
        let phase = match row.sides().first() {
            (0, i) => rc.t1.phase_kind(i),
            (_, j) => rc.t2.phase_kind(j),
        };
        by_phase[phase as usize].push(index);
    }
    let [forward, backward, optimizer] = &by_phase;
    let mut palette = Palette::default();
    let mut json = Vec::with_capacity((p.end_row - p.first_row) * 600 + 64);
    rowdata::write_page_json(
        &mut json,
        rc,
        [forward, backward, optimizer],
        (&opts.name1, &opts.name2),
        &mut palette,
    );
    let file = |i: usize| refs.get(i).map(|r| r.file.clone()).unwrap_or_default();
    let excl = vec![
        excluded(
            &opts.name1,
            String::new(),
            &s.run1.excluded_ops,
            &[&s.run2.excluded_ops],
        ),
        excluded(
            &opts.name2,
            String::new(),
            &s.run2.excluded_ops,
            &[&s.run1.excluded_ops],
        ),
    ];
    let ctx = PageCtx {
        name1: &opts.name1,
        name2: &opts.name2,
        rank: rc.rank1,
        rank2: rc.rank2,
        page: k + 1,
        pages: refs.len(),
        first_row: p.first_row,
        end_row: p.end_row,
        total_rows: rc.matches.rows.len(),
        shown_rows: plan.len(),
        filtered: plan.is_filtered(),
        shown_what: if plan.len() as u64 > s.counts.total() - s.counts.matched {
            "rows"
        } else {
            "diverging rows"
        },
        shown_note: shown_note(s),
        prev: if k > 0 { file(k - 1) } else { String::new() },
        next: file(k + 1),
        first_page: file(0),
        last_page: file(refs.len() - 1),
        counts: status_counts(&s.counts, &opts.name1, &opts.name2),
        page_counts: status_counts(&pc, &opts.name1, &opts.name2),
        first_divergence: s.first_divergence.as_ref().map(row_link),
        first_cause: cause_link(&s.root_causes),
        excluded_differ: excl.iter().any(|e| !e.only.is_empty()),
        excluded: excl,
        palette: palette.rules(),
        columns: &rowdata::COLUMNS,
        loc_column: rowdata::C_LOC,
        sections: [
            Section {
                id: "forward",
                title: "Forward",
                rows: forward.len(),
            },
            Section {
                id: "backward",
                title: "Backward",
                rows: backward.len(),
            },
            Section {
                id: "optimizer",
                title: "Optimizer",
                rows: optimizer.len(),
            },
        ],
    };
    let page = engine::render("page.html", &ctx)?;
    drop(ctx);
    // The rows' JSON goes where the template has the marker: all log text
    // in the rendered page is escaped (no `<!--`), so the marker is ours.
    let Some((head, tail)) = page.split_once(ROWS_MARKER) else {
        return Err(ReportError::Template {
            name: "page.html".into(),
            message: format!("no {ROWS_MARKER} marker"),
        });
    };
    engine::write_parts(
        &opts.out_dir.join(&p.file),
        &[head.as_bytes(), &json, tail.as_bytes()],
    )
}

/// Where a rendered `page.html` takes its rows' JSON.
const ROWS_MARKER: &str = "<!--actdiff:rows-->";

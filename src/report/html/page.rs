//! Result pages, `rank{N}-page{k}.html`, written by a byte writer (no
//! template engine per rank): each page's frame (header, counts, first
//! divergence and cause, on the first page the rank's heatmap
//! (`heatmap.rs`), excluded ops, filters, the heads of the Forward,
//! Backward and Optimizer section tables, the colour rules) from the
//! pieces in `markup.rs`, then its rows as JSON from `rowdata.rs`, which
//! the page script draws.

use std::fmt::Write;

use rayon::prelude::*;

use super::engine::Esc;
use super::markup::{self, Pager};
use super::parts::{
    cause_link, excluded, row_link, shown_note, status_counts, CauseLink, Excluded, RowLink,
    StatusCount,
};
use super::{engine, heatmap, keys};
use crate::matcher::Counts;
use crate::report::colour::{Colour, Palette};
use crate::report::summary::{KeyIndex, PageRef};
use crate::report::{
    files, rowdata, PagePlan, PageProgress, RankComparison, RankSummary, ReportError, ReportOptions,
};

/// A collapsible section of a result page: Forward, Backward or Optimizer.
struct Section {
    id: &'static str,
    title: &'static str,
    /// Rows of the section on this page.
    rows: usize,
}

/// Everything a result page's frame shows (its rows are JSON the page
/// script draws).
struct Frame<'a> {
    name1: &'a str,
    name2: &'a str,
    rank: u32,
    rank2: u32,
    pager: Pager<'a>,
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
    counts: Vec<StatusCount>,
    page_counts: Vec<StatusCount>,
    first_divergence: Option<RowLink<'a>>,
    first_cause: Option<CauseLink<'a>>,
    excluded: [Excluded<'a>; 2],
    /// Colour classes `x1`, `x2`, ... of the page's differing cells.
    palette: Vec<Colour>,
    /// Forward, Backward, then Optimizer.
    sections: [Section; 3],
    /// The rank's heatmap (its markers included) on its first page, else "".
    heatmap: &'a str,
}

/// Writes the pages' stylesheet and script ([`files::STYLESHEET`],
/// [`files::PAGE_SCRIPT`]) into `dir` unless they are there: through a
/// temporary file and a rename, so ranks written in parallel never see half
/// a file.
fn write_assets(dir: &std::path::Path) -> Result<(), ReportError> {
    // Written in this order, each by a rename: the script there means the
    // stylesheet is too (one file check per rank, not two).
    if dir.join(files::PAGE_SCRIPT).is_file() {
        return Ok(());
    }
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

/// Writes the result pages of one rank; returns the pages written and
/// the rank's key index ([`KeyIndex`]), which the index writer writes.
///
/// Rows `[k·page_rows, (k+1)·page_rows)` go to page `k`
/// ([`files::page`]`(rank, k)`); a rank without rows still gets one empty
/// page. The first page also holds the rank's heatmap. Pages are rendered
/// in parallel, each from a context holding only its own rows. Without
/// [`ReportOptions::rank_files`] nothing is written and no page or key
/// index is returned.
pub fn write_rank_pages(
    rc: &RankComparison<'_>,
    s: &RankSummary,
    opts: &ReportOptions,
    plan: &PagePlan,
    progress: &dyn PageProgress,
) -> Result<(Vec<PageRef>, KeyIndex), ReportError> {
    if !opts.rank_files {
        return Ok((Vec::new(), KeyIndex::default()));
    }
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
    let heat = heatmap::render(rc, plan);
    let (pages, key_index) = rayon::join(
        || {
            refs.par_iter().enumerate().try_for_each(|(k, p)| {
                let heat = if k == 0 { heat.as_str() } else { "" };
                write_page(rc, s, opts, plan, (&refs, k, p), heat)?;
                progress.written();
                Ok::<(), ReportError>(())
            })
        },
        || keys::line(rc, plan),
    );
    pages?;
    Ok((refs, KeyIndex(Some(key_index))))
}

/// Writes page `k` of `refs`, `p`, with `heat` (the rank's heatmap, or "")
/// under its first divergence and cause.
fn write_page(
    rc: &RankComparison<'_>,
    s: &RankSummary,
    opts: &ReportOptions,
    plan: &PagePlan,
    (refs, k, p): (&[PageRef], usize, &PageRef),
    heat: &str,
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
    let file = |i: usize| refs.get(i).map_or("", |r| r.file.as_str());
    let frame = Frame {
        name1: &opts.name1,
        name2: &opts.name2,
        rank: rc.rank1,
        rank2: rc.rank2,
        pager: Pager {
            page: k + 1,
            pages: refs.len(),
            prev: if k > 0 { file(k - 1) } else { "" },
            next: file(k + 1),
            first: file(0),
            last: file(refs.len() - 1),
        },
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
        counts: status_counts(&s.counts, &opts.name1, &opts.name2),
        page_counts: status_counts(&pc, &opts.name1, &opts.name2),
        first_divergence: s.first_divergence.as_ref().map(row_link),
        first_cause: cause_link(&s.root_causes),
        excluded: [
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
        ],
        palette: palette.rules(),
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
        heatmap: heat,
    };
    engine::write_parts(
        &opts.out_dir.join(&p.file),
        &[head(&frame).as_bytes(), &json, TAIL.as_bytes()],
    )
}

/// The end of a result page, after its rows' JSON.
const TAIL: &str = "</script>\n<script src=\"report.js\"></script>\n</body>\n</html>\n";

/// A result page up to its rows' JSON: the header, counts, first
/// divergence and cause, the heatmap (first page), excluded ops, filters, the section tables' heads
/// (which the page script fills), the colour rules, and the start of the
/// `<script>` element that holds the rows. Every log text and run name is
/// escaped ([`escape`]); the colour rules are built from numbers only.
fn head(f: &Frame<'_>) -> String {
    let mut o = String::with_capacity(8192);
    let (n1, n2) = (Esc(f.name1), Esc(f.name2));
    let (page, pages) = (f.pager.page, f.pager.pages);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"color-scheme\" content=\"light dark\">\n\
         <title>Numerics Comparison: {n1} vs {n2} · rank {rank} · page {page} of {pages}</title>\n\
         <link rel=stylesheet href=\"report.css\">\n",
        rank = f.rank,
    );
    if !f.palette.is_empty() {
        o.push_str(
            "<style>\n/* Colours of differing cells, computed by actdiff from each cell's relative difference. */\n",
        );
        for (i, c) in f.palette.iter().enumerate() {
            let _ = writeln!(
                o,
                "table.res tbody > tr > td.x{}{{color:{};background:{} }}",
                i + 1,
                c.light,
                c.bg
            );
        }
        o.push_str("@media (prefers-color-scheme: dark) {\n");
        for (i, c) in f.palette.iter().enumerate() {
            let _ = writeln!(
                o,
                "table.res tbody > tr > td.x{}{{color:{} }}",
                i + 1,
                c.dark
            );
        }
        o.push_str("}\n</style>\n");
    }
    let _ = write!(
        o,
        "\n</head>\n<body class=page>\n<header class=top>\n\
         <h1>Numerics Comparison: {n1} vs {n2}</h1>\n<div class=sub>rank {}",
        f.rank
    );
    if f.rank2 != f.rank {
        let _ = write!(o, " <span class=mut>({n2} rank {})</span>", f.rank2);
    }
    let _ = write!(o, " · page {page} of {pages} · ");
    if f.filtered {
        if f.end_row > f.first_row {
            let _ = write!(
                o,
                "{} {}–{} of the {} shown",
                f.shown_what,
                f.first_row + 1,
                f.end_row,
                f.shown_rows
            );
        } else {
            o.push_str("no diverging rows");
        }
        let _ = write!(o, " ({} rows in all)", f.total_rows);
    } else if f.total_rows > 0 {
        let _ = write!(
            o,
            "rows {}–{} of {}",
            f.first_row,
            f.end_row - 1,
            f.total_rows
        );
    } else {
        o.push_str("no rows");
    }
    if !f.shown_note.is_empty() {
        let _ = write!(o, " · <b class=banner>{}</b>", Esc(&f.shown_note));
    }
    o.push_str("</div>\n");
    markup::pager(&mut o, &f.pager, false);
    let _ = writeln!(
        o,
        "\n</header>\n<div class=summary><span class=mut>rank {}:</span>",
        f.rank
    );
    for c in &f.counts {
        let _ = writeln!(
            o,
            "<span class=\"cnt {}\">{} {}</span>",
            c.st,
            c.n,
            Esc(&c.label)
        );
    }
    o.push_str("</div>\n<div class=fd><span class=fdlabel>First divergence:</span> ");
    match &f.first_divergence {
        Some(r) => markup::row_link(&mut o, r, f.name1, f.name2),
        None => o.push_str("<span class=mut>none</span>"),
    }
    o.push_str("</div>\n");
    if let Some(c) = &f.first_cause {
        o.push_str("<div class=fd><span class=fdlabel>First cause:</span> ");
        markup::cause_link(&mut o, c, f.name1, f.name2);
        o.push_str("</div>\n");
    }
    if f.pager.page > 1 {
        // File names and anchors are made of numbers: nothing to escape.
        let _ = writeln!(
            o,
            "<div class=fd><span class=fdlabel>Heatmap:</span> <a href=\"{}#heat-{}\">on page 1</a></div>",
            f.pager.first, f.rank
        );
    }
    o.push_str(f.heatmap);
    excluded_and_filters(&mut o, f);
    sections(&mut o, f);
    o.push('\n');
    markup::pager(&mut o, &f.pager, true);
    o.push_str("\n<template id=badges>");
    for c in &f.counts {
        markup::badge(&mut o, c.st, f.name1, f.name2);
    }
    o.push_str("</template>\n<script type=\"application/json\" id=rows>");
    o
}

/// A result page's excluded ops (open when the runs' sets differ) and its
/// filters: a checkbox per status with the page's count, the key regex.
fn excluded_and_filters(o: &mut String, f: &Frame<'_>) {
    let differ = f.excluded.iter().any(|e| !e.only.is_empty());
    let _ = writeln!(
        o,
        "\n<details class=excluded{}><summary>Excluded ops dispatched{}</summary>",
        if differ { " open" } else { "" },
        if differ {
            " <b class=exonly>· the two runs' sets differ</b>"
        } else {
            ""
        }
    );
    for e in &f.excluded {
        markup::excluded(o, e);
        o.push('\n');
    }
    o.push_str("</details>\n<div class=filters id=filters>\n");
    for c in &f.page_counts {
        let _ = writeln!(
            o,
            "<label class=\"cnt {st}\"><input type=checkbox checked data-st=\"{st}\"> show {} <span class=mut>({})</span></label>",
            Esc(&c.label),
            c.n,
            st = c.st,
        );
    }
    o.push_str(
        "<input type=text id=re class=re placeholder=\"filter keys by regex (case-insensitive), e.g. layers\\.0.*mul\" autocomplete=off spellcheck=false>\n\
         <span id=re-status class=mut></span>\n</div>\n\
         <noscript><p class=banner>The rows of this page are drawn by its script: allow JavaScript for this file, or read summary.json or actdiff's --rows output.</p></noscript>\n",
    );
}

/// A result page's Forward, Backward and Optimizer sections: each a
/// collapsible table head the page script fills with the section's rows,
/// or a line saying the page has none.
fn sections(o: &mut String, f: &Frame<'_>) {
    for sec in &f.sections {
        let _ = writeln!(
            o,
            "\n<details open class=section id=\"{}\"><summary><h2>{} <span class=mut>({} rows on this page)</span></h2></summary>",
            sec.id, sec.title, sec.rows
        );
        if sec.rows > 0 {
            // The page script draws the rows (`rowdata.rs`): one <tbody>
            // per result, row 1 = key (with match chip, status badge and
            // notes) and run 1's side, row 2 = run 2's side; each side its
            // label, then the cells of `rowdata::COLUMNS`.
            let _ = write!(
                o,
                "<table class=res data-cols={} data-loc={}>\n<thead><tr><th>Op key · match</th><th>Side</th>",
                rowdata::COLUMNS.len(),
                rowdata::C_LOC
            );
            for c in rowdata::COLUMNS {
                let _ = write!(o, "<th>{}</th>", Esc(c));
            }
            o.push_str("</tr></thead></table>\n");
        } else {
            let _ = writeln!(
                o,
                "<p class=mut>No {} rows on this page.</p>",
                sec.title.to_lowercase()
            );
        }
        o.push_str("</details>\n");
    }
}

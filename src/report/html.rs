//! HTML pages (tera templates in `templates/`, embedded at build time).
//!
//! Every rank gets one or more result pages (`rank{N}-page{k}.html`,
//! [`ReportOptions::page_rows`] result rows each), an overview fragment
//! (`rank{N}-overview.html`: an inline-SVG heatmap of layers × op type, see
//! [`overview_file`]) and a key index (`rank{N}-keys.js`, see
//! [`keys_file`]); the comparison gets an `index.html` that embeds each
//! rank's overview, lists its origins and entries, and searches a rank's
//! keys (loading its key index only when the search box is used). Pages are
//! self-contained (inline CSS and JS, no network) so they work from
//! `file://`.
//!
//! Result pages: tera renders each page's frame (header, counts, first
//! divergence and cause, excluded ops, filters, the two section tables'
//! heads, the colour rules); the rows come from `rowdata.rs` as JSON,
//! written where the template has its `<!--actdiff:rows-->` marker, and the
//! page script draws them. Rendering two million rows through tera ran at
//! about 60 MB/s on two cores; serialising them runs at about 270 MB/s.
//!
//! Escaping: all log text (keys, locations, shapes, hashes, producers, run
//! names, op names) reaches the tera-rendered parts only through `{{ }}`
//! expressions with autoescape on (every template name ends in `.html`).
//! The one `| safe` is the index embedding an overview fragment, which was
//! itself rendered that way from `overview.html`. In a page's row JSON every
//! `<` is written `\u003c`, so no log text can end its `<script>` element,
//! and the page script escapes every string it puts into markup
//! (`tests/browser.rs` checks hostile keys, locations and run names). The
//! key search reads keys from `rank{N}-keys.js`, where they are JSON
//! strings passed to a function, and shows them with `textContent`. The
//! colour rules in a page's `<style>` are built from numbers only.
//!
//! Cells: a differing cell gets a colour class (below); a value holding NaN
//! or Inf gets `nf`, and a difference involving one `nfx` (the NaN/Inf
//! side) and `nfd` (the other), never a class of the finite scale. Each row
//! shows its notes ([`crate::matcher::notes::row_notes`]; root cause, dtype
//! and shape changes and non-gating rows as chips) and the tolerance or rule
//! that judged it (the key cell's title; a chip on diverging rows judged by
//! a rule or a per-dtype default).
//!
//! Memory: a page is built from its own rows only, each row serialised and
//! dropped in turn, so memory is bounded by the page size (times the rayon
//! threads writing pages at once), not by the number of rows.
//!
//! Size: a 500-row page of generated logs is about 350 KB, a 2,000-row one
//! (`--page-rows 2000`) 1.3–1.7 MB. Differing cells
//! are coloured through classes (`x1`, `x2`, ...) whose rules each page
//! defines in its `<style>`, one per distinct colour, computed with
//! [`super::colour::diff_colour`] (dark theme, the reference's scale) and
//! [`super::colour::light_colour`];
//! the relative difference is the title of run 2's cell (the page script
//! shows it on run 1's too).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::OnceLock;

use rayon::prelude::*;
use serde::Serialize;
use tera::{Context, Tera};

use super::colour::{diff_scale, Colour, Palette};
use super::rowdata;
use super::summary::{page_file, CausesSummary, PageRef, RowRef, SideSummary};
use super::{PagePlan, RankComparison, RankSummary, ReportError, ReportOptions, Summary};
use crate::matcher::cause::CauseKind;
use crate::matcher::compare::{compare_hashes, stat_diffs};
use crate::matcher::{Counts, MatchRow, Status, Tolerance};
use crate::parser::Field;

/// The built-in templates: (name, text). Names ending in `.html` are
/// autoescaped; the CSS and JS are static text included by the pages.
const TEMPLATES: [(&str, &str); 7] = [
    ("report.css", include_str!("../../templates/report.css")),
    ("report.js", include_str!("../../templates/report.js")),
    ("macros.html", include_str!("../../templates/macros.html")),
    ("page.html", include_str!("../../templates/page.html")),
    ("index.html", include_str!("../../templates/index.html")),
    (
        "overview.html",
        include_str!("../../templates/overview.html"),
    ),
    ("index.js", include_str!("../../templates/index.js")),
];

/// Parse warnings listed per side on the index (the rest are counted).
const INDEX_WARNINGS: usize = 5;

/// Duplicate keys listed per side on the index.
const INDEX_DUPLICATES: usize = 5;

/// HTML escaping for text and quoted attribute values: `& < > " '`.
/// (Tera's default also escapes `/`, which only bloats keys and paths.)
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The error text of `e` and all its sources.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let m = s.to_string();
        if !msg.contains(&m) {
            msg.push_str(": ");
            msg.push_str(&m);
        }
        src = s.source();
    }
    msg
}

/// The template engine with the built-in templates, built once.
fn engine() -> Result<&'static Tera, ReportError> {
    static ENGINE: OnceLock<Result<Tera, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut t = Tera::default();
            t.autoescape_on(vec![".html"]);
            t.set_escape_fn(escape);
            t.add_raw_templates(TEMPLATES.to_vec())
                .map_err(|e| error_chain(&e))?;
            Ok(t)
        })
        .as_ref()
        .map_err(|m| ReportError::Template {
            name: "templates/".into(),
            message: m.clone(),
        })
}

/// Builds the template engine now (it is otherwise built on first use), so
/// that a caller can do it on a spare thread while logs are parsed. Errors
/// are kept and returned by the first report written.
pub fn prepare() {
    let _ = engine();
}

/// Renders template `name` with `ctx` into the file `path`.
fn render_file(name: &str, ctx: &Context, path: &Path) -> Result<(), ReportError> {
    let tera = engine()?;
    let file = File::create(path).map_err(|e| ReportError::io(path, e))?;
    let mut w = BufWriter::with_capacity(1 << 16, file);
    if let Err(e) = tera.render_to(name, ctx, &mut w) {
        if let tera::ErrorKind::Io(_) = e.kind {
            return Err(ReportError::Io {
                path: path.to_path_buf(),
                message: error_chain(&e),
            });
        }
        return Err(ReportError::Template {
            name: name.into(),
            message: error_chain(&e),
        });
    }
    w.flush().map_err(|e| ReportError::io(path, e))
}

/// One status class, with its label and count.
#[derive(Serialize)]
struct StatusCount {
    st: &'static str,
    label: String,
    n: u64,
}

fn status_counts(c: &Counts, name1: &str, name2: &str) -> Vec<StatusCount> {
    let sc = |st: Status, label: String, n: u64| StatusCount {
        st: st.as_str(),
        label,
        n,
    };
    vec![
        sc(Status::Match, "match".into(), c.matched),
        sc(Status::Diff, "diff".into(), c.diff),
        sc(Status::Only1, format!("only in {name1}"), c.only1),
        sc(Status::Only2, format!("only in {name2}"), c.only2),
        sc(Status::Missing, "missing".into(), c.missing),
        sc(Status::Truncated, "truncated".into(), c.truncated),
    ]
}

/// A link to a result row (first divergence).
#[derive(Serialize)]
struct RowLink<'a> {
    href: String,
    key1: &'a str,
    /// Run 2's key when it differs from the first one shown ("" otherwise).
    key2: &'a str,
    st: &'static str,
    chip: &'static str,
    sg: &'static str,
    line1: Option<u64>,
    line2: Option<u64>,
    phase: &'a str,
    index: usize,
}

fn row_link(r: &RowRef) -> RowLink<'_> {
    let strategy = match r.strategy {
        Some("override") => crate::matcher::Strategy::Override,
        Some("exact") => crate::matcher::Strategy::Exact,
        Some("fuzzy") => crate::matcher::Strategy::Fuzzy,
        Some("stats") => crate::matcher::Strategy::Stats,
        _ => crate::matcher::Strategy::None,
    };
    let key1 = r.key();
    let key2 = match (&r.key1, &r.key2) {
        (Some(a), Some(b)) if a != b => b.as_str(),
        _ => "",
    };
    RowLink {
        href: if r.page.is_empty() {
            String::new()
        } else {
            format!("{}#{}", r.page, r.anchor)
        },
        key1,
        key2,
        st: r.status.as_str(),
        chip: strategy.chip(),
        sg: r.strategy.unwrap_or("none"),
        line1: r.line1,
        line2: r.line2,
        phase: &r.phase,
        index: r.index,
    }
}

/// Where a rank's divergence starts or enters.
#[derive(Serialize)]
struct CauseLink<'a> {
    /// The first origin or entry, if any.
    row: Option<RowLink<'a>>,
    /// `origin`, `entry`, `entry via collective`.
    kind: &'static str,
    /// Diverging rows whose chain leads back to it.
    inherited: u64,
    /// Origins and entries in the rank.
    count: u64,
    /// The divergence only enters through unsynced collectives: the ranks
    /// with causes of their own (comma-separated).
    via_collectives: String,
}

fn cause_link(c: &CausesSummary) -> Option<CauseLink<'_>> {
    let ranks = || {
        let r: Vec<String> = c.see_ranks.iter().map(u32::to_string).collect();
        r.join(", ")
    };
    match &c.first_cause {
        Some(f) => Some(CauseLink {
            row: Some(row_link(&f.row)),
            kind: f.kind.as_str(),
            inherited: f.inherited,
            count: c.cause_count,
            via_collectives: String::new(),
        }),
        None if c.via_collective_only => Some(CauseLink {
            row: None,
            kind: "",
            inherited: 0,
            count: 0,
            via_collectives: if c.see_ranks.is_empty() {
                "another rank".into()
            } else {
                format!("rank {}", ranks())
            },
        }),
        None => None,
    }
}

/// One excluded op of one side.
#[derive(Serialize)]
struct ExOp<'a> {
    op: &'a str,
    /// The other run's list (of a rank this list applies to) lacks it.
    only: bool,
}

/// Excluded ops of one side, for chips.
#[derive(Serialize)]
struct Excluded<'a> {
    name: &'a str,
    /// Ranks this list applies to ("" on a rank page).
    ranks: String,
    recorded: bool,
    ops: Vec<ExOp<'a>>,
    /// The ops only in this run's list, comma-separated ("" when none).
    only: String,
}

/// The excluded ops of one side; `others` are the other run's lists of the
/// same ranks (an op missing from any recorded one is marked).
fn excluded<'a>(
    name: &'a str,
    ranks: String,
    ops: &'a Option<Vec<String>>,
    others: &[&Option<Vec<String>>],
) -> Excluded<'a> {
    let recorded = ops.is_some();
    let list = ops.as_deref().unwrap_or(&[]);
    let ops: Vec<ExOp<'a>> = list
        .iter()
        .map(|op| ExOp {
            op,
            only: others
                .iter()
                .any(|o| o.as_ref().is_some_and(|l| !l.contains(op))),
        })
        .collect();
    let only: Vec<&str> = ops.iter().filter(|o| o.only).map(|o| o.op).collect();
    Excluded {
        name,
        ranks,
        recorded,
        only: only.join(", "),
        ops,
    }
}

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
    /// Only the diverging rows are shown.
    filtered: bool,
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
    /// Forward, then Backward.
    sections: [Section; 2],
}

/// A collapsible section of a result page.
#[derive(Serialize)]
struct Section {
    id: &'static str,
    title: &'static str,
    /// Rows of the section on this page.
    rows: usize,
}

/// `1234567` → `1,234,567`.
fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::with_capacity(d.len() + d.len() / 3);
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The plain statement of what the pages hold when they hold only the
/// rows that are not `match`; empty when they hold every row.
fn shown_note(s: &RankSummary) -> String {
    if let Some(n) = s.html_cut_from {
        // Plain digits on purpose: "100000 differing ops; detailed: first K".
        return format!(
            "{n} differing ops; detailed: first {} (HTML size budget, --html-budget-mb); every row: summary.json and --rows",
            s.html_rows
        );
    }
    if !s.html_filtered {
        return String::new();
    }
    format!(
        "showing {} diverging rows of {}; all rows: --html-rows all",
        thousands(s.html_rows as u64),
        thousands(s.counts.total())
    )
}

/// Writes the result pages of one rank; returns the pages written.
///
/// Rows `[k·page_rows, (k+1)·page_rows)` go to page `k`
/// ([`page_file`]`(rank, k)`); a rank without rows still gets one empty
/// page. Pages are rendered in parallel, each from a context holding only
/// its own rows.
pub fn write_rank_pages(
    rc: &RankComparison<'_>,
    s: &RankSummary,
    opts: &ReportOptions,
    plan: &PagePlan,
    progress: &dyn super::PageProgress,
) -> Result<Vec<PageRef>, ReportError> {
    engine()?;
    let n = plan.len();
    let per = plan.page_rows;
    let pages = plan.pages();
    let refs: Vec<PageRef> = (0..pages)
        .map(|k| PageRef {
            file: page_file(rc.rank1, k),
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
        || write_overview(rc, plan, opts).and_then(|()| write_keys(rc, plan, opts)),
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
    let mut forward = Vec::new();
    let mut backward = Vec::new();
    let mut pc = Counts::default();
    for index in (p.first_row..p.end_row).map(|k| plan.row(k)) {
        let row = &rc.matches.rows[index];
        pc.add(row.status);
        let bwd = match (row.r1(), row.r2()) {
            (Some(i), _) => rc.t1.is_backward(i),
            (None, Some(j)) => rc.t2.is_backward(j),
            _ => false,
        };
        if bwd {
            backward.push(index);
        } else {
            forward.push(index);
        }
    }
    let mut palette = Palette::default();
    let mut json = Vec::with_capacity((p.end_row - p.first_row) * 600 + 64);
    rowdata::write_page_json(
        &mut json,
        rc,
        [&forward, &backward],
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
        ],
    };
    let context = Context::from_serialize(&ctx).map_err(|e| ReportError::Template {
        name: "page.html".into(),
        message: error_chain(&e),
    })?;
    drop(ctx);
    let page = engine()?
        .render("page.html", &context)
        .map_err(|e| ReportError::Template {
            name: "page.html".into(),
            message: error_chain(&e),
        })?;
    // The rows' JSON goes where the template has the marker: all log text
    // in the rendered page is escaped (no `<!--`), so the marker is ours.
    let Some((head, tail)) = page.split_once(ROWS_MARKER) else {
        return Err(ReportError::Template {
            name: "page.html".into(),
            message: format!("no {ROWS_MARKER} marker"),
        });
    };
    write_parts(
        &opts.out_dir.join(&p.file),
        &[head.as_bytes(), &json, tail.as_bytes()],
    )
}

/// Where a rendered `page.html` takes its rows' JSON.
const ROWS_MARKER: &str = "<!--actdiff:rows-->";

/// Writes `parts`, in order, into the file `path`.
fn write_parts(path: &Path, parts: &[&[u8]]) -> Result<(), ReportError> {
    let mut file = File::create(path).map_err(|e| ReportError::io(path, e))?;
    for part in parts {
        file.write_all(part).map_err(|e| ReportError::io(path, e))?;
    }
    Ok(())
}

/// Most op types drawn as rows of a rank's heatmap; the rest share one
/// row ("other ops").
const HEAT_OPS: usize = 24;

/// Most layer columns of a heatmap; more layers are binned.
const HEAT_LAYERS: usize = 64;

/// Side of a heatmap cell, and its pitch.
const HEAT_CELL: usize = 11;
const HEAT_PITCH: usize = 12;

/// File name of rank `rank`'s overview fragment (the heatmap the index embeds).
pub fn overview_file(rank: u32) -> String {
    format!("rank{rank}-overview.html")
}

/// File name of rank `rank`'s key index (loaded by the index's search box).
pub fn keys_file(rank: u32) -> String {
    format!("rank{rank}-keys.js")
}

/// What one heatmap cell aggregates.
#[derive(Clone, Default)]
struct HeatAgg {
    rows: u64,
    diverging: u64,
    /// Largest relative difference of a paired diverging row (-1: none).
    worst: f64,
    /// A diverging row holds NaN or Inf.
    nonfinite: bool,
    /// Origins and entries in the cell.
    causes: u64,
    /// First origin or entry.
    first_cause: Option<usize>,
    /// First diverging row.
    first_div: Option<usize>,
}

/// One drawn cell.
#[derive(Serialize)]
struct HeatCell {
    x: usize,
    y: usize,
    /// `h0` (all rows agree), `h1`..`h8` (worst relative difference),
    /// `hn` (NaN or Inf), `ho` (one-sided or missing rows only); ` o` added
    /// when the cell holds an origin or entry.
    cls: String,
    title: String,
    href: String,
}

#[derive(Serialize)]
struct HeatLabel {
    x: usize,
    y: usize,
    t: String,
}

/// The heatmap of one rank.
#[derive(Serialize)]
struct OverviewCtx {
    rank: u32,
    width: usize,
    height: usize,
    cell: usize,
    cells: Vec<HeatCell>,
    ylabels: Vec<HeatLabel>,
    xlabels: Vec<HeatLabel>,
    /// Rows drawn, diverging rows.
    rows: u64,
    diverging: u64,
    /// "layers 0–3 per column" when binned ("" otherwise).
    binned: String,
}

/// The relative difference of a paired row: the largest of its Output
/// hash's and stats' (as the page colours them).
fn row_rel_diff(rc: &RankComparison<'_>, row: &MatchRow) -> Option<f64> {
    let (i, j) = (row.r1()?, row.r2()?);
    let (a, b) = (
        rc.t1.field(i, Field::OutputHash),
        rc.t2.field(j, Field::OutputHash),
    );
    let mut worst = None::<f64>;
    if a != b {
        worst = compare_hashes(a, b, Tolerance::REFERENCE, true).intensity;
    }
    for rd in stat_diffs(rc.t1, i, rc.t2, j).into_iter().skip(1).flatten() {
        worst = Some(worst.map_or(rd, |w| w.max(rd)));
    }
    worst
}

/// The heatmap colour class of a worst relative difference.
fn heat_class(a: &HeatAgg) -> String {
    let mut c = if a.diverging == 0 {
        "h0".to_string()
    } else if a.nonfinite {
        "hn".to_string()
    } else if a.worst < 0.0 {
        "ho".to_string()
    } else {
        format!("h{}", 1 + (diff_scale(a.worst) * 7.0).round() as u32)
    };
    if a.causes > 0 {
        c.push_str(" o");
    }
    c
}

/// Writes rank `rc`'s overview fragment: an inline SVG heatmap, layers
/// (`layers.N` in the key; rows without one in the first column) × op type
/// (from [`crate::matcher::keys::module_and_op`]), each cell coloured by the
/// worst relative difference of its rows, cells with an origin or entry
/// outlined, each diverging cell linking to its first origin or entry, else
/// its first diverging row. The index embeds it (see [`write_index`]).
fn write_overview(
    rc: &RankComparison<'_>,
    plan: &PagePlan,
    opts: &ReportOptions,
) -> Result<(), ReportError> {
    use crate::matcher::cause::CauseKind as K;
    let m = rc.matches;
    // Op types in first-seen order, and each row's (layer, op type).
    let mut op_ids: ahash::AHashMap<&[u8], u32> = ahash::AHashMap::new();
    let mut op_names: Vec<&[u8]> = Vec::new();
    let mut op_counts: Vec<u64> = Vec::new();
    let mut max_layer: Option<u64> = None;
    // Each row's layer and op type, from the tables (read from the keys at
    // parse time); op types numbered in result-row order of first sight.
    const NO_LAYER: u32 = u32::MAX;
    const UNSEEN: u32 = u32::MAX;
    let mut seen: [Vec<u32>; 2] = [
        vec![UNSEEN; rc.t1.op_types()],
        vec![UNSEEN; rc.t2.op_types()],
    ];
    let mut at: Vec<(u32, u32)> = Vec::with_capacity(m.rows.len());
    for row in &m.rows {
        let (t, side, r) = match (row.r1(), row.r2()) {
            (Some(i), _) => (rc.t1, 0, i),
            (None, Some(j)) => (rc.t2, 1, j),
            _ => {
                // Not a row of either run (never built by the matcher).
                let n = op_names.len() as u32;
                let id = *op_ids.entry(&[]).or_insert(n);
                if id == n {
                    op_names.push(&[]);
                    op_counts.push(0);
                }
                op_counts[id as usize] += 1;
                at.push((NO_LAYER, id));
                continue;
            }
        };
        let layer = t.layer(r);
        if let Some(l) = layer {
            let l = u64::from(l);
            max_layer = Some(max_layer.map_or(l, |x| x.max(l)));
        }
        let ty = t.op_type(r) as usize;
        if seen[side][ty] == UNSEEN {
            let op = t.op_name(ty as u32);
            let n = op_names.len() as u32;
            seen[side][ty] = *op_ids.entry(op).or_insert(n);
            if seen[side][ty] == n {
                op_names.push(op);
                op_counts.push(0);
            }
        }
        let id = seen[side][ty];
        op_counts[id as usize] += 1;
        at.push((layer.unwrap_or(NO_LAYER), id));
    }
    // Rows: the most frequent op types (in first-seen order), then "other ops".
    let mut by_count: Vec<usize> = (0..op_names.len()).collect();
    by_count.sort_by(|a, b| op_counts[*b].cmp(&op_counts[*a]).then(a.cmp(b)));
    let mut kept: Vec<usize> = by_count.iter().copied().take(HEAT_OPS).collect();
    kept.sort_unstable();
    let other = op_names.len() > HEAT_OPS;
    let mut ylab: Vec<String> = kept
        .iter()
        .map(|i| {
            let n = String::from_utf8_lossy(op_names[*i]);
            if n.is_empty() {
                "(no op)".to_string()
            } else {
                n.into_owned()
            }
        })
        .collect();
    if other {
        ylab.push("other ops".into());
    }
    let mut yof = vec![ylab.len().saturating_sub(1); op_names.len()];
    for (y, i) in kept.iter().enumerate() {
        yof[*i] = y;
    }
    // Columns: "·" (no layer), then layers, binned to at most HEAT_LAYERS.
    let layers = max_layer.map_or(0, |l| l as usize + 1);
    let bin = layers.div_ceil(HEAT_LAYERS).max(1);
    let ncols = 1 + layers.div_ceil(bin);
    let nrows = ylab.len().max(1);
    let mut agg = vec![HeatAgg::default(); ncols * nrows];
    let (mut total, mut diverging) = (0u64, 0u64);
    for (index, (row, (layer, op))) in m.rows.iter().zip(&at).enumerate() {
        let x = if *layer == NO_LAYER {
            0
        } else {
            1 + *layer as usize / bin
        };
        let y = yof[*op as usize];
        let a = &mut agg[y * ncols + x];
        a.rows += 1;
        total += 1;
        if a.rows == 1 {
            a.worst = -1.0;
        }
        if !row.status.is_divergence() {
            continue;
        }
        diverging += 1;
        a.diverging += 1;
        a.first_div.get_or_insert(index);
        if matches!(
            m.cause_kinds.get(index).copied().flatten(),
            Some(K::Origin | K::Entry | K::ViaCollective)
        ) {
            a.causes += 1;
            a.first_cause.get_or_insert(index);
        }
        if row.has(crate::matcher::ROW_NONFINITE1) || row.has(crate::matcher::ROW_NONFINITE2) {
            a.nonfinite = true;
        }
        if let Some(rd) = row_rel_diff(rc, row) {
            a.worst = a.worst.max(if rd.is_nan() { 1.0 } else { rd });
        } else if row.status == Status::Diff {
            a.worst = a.worst.max(0.0);
        }
    }
    let label_w = 8 + 7 * ylab
        .iter()
        .map(|l| l.chars().count().min(24))
        .max()
        .unwrap_or(4);
    let top = 16;
    let col_label = |x: usize| -> String {
        if x == 0 {
            "·".into()
        } else if bin == 1 {
            (x - 1).to_string()
        } else {
            format!("{}–{}", (x - 1) * bin, ((x * bin).min(layers)) - 1)
        }
    };
    let mut cells = Vec::new();
    for y in 0..nrows {
        for x in 0..ncols {
            let a = &agg[y * ncols + x];
            if a.rows == 0 {
                continue;
            }
            let what = if x == 0 {
                "no layer".to_string()
            } else if bin == 1 {
                format!("layers.{}", x - 1)
            } else {
                format!("layers {}", col_label(x))
            };
            let op = ylab.get(y).map(String::as_str).unwrap_or("");
            let mut title = if a.diverging == 0 {
                format!(
                    "{what} · {op}: {} row{} agree{}",
                    a.rows,
                    if a.rows == 1 { "" } else { "s" },
                    if a.rows == 1 { "s" } else { "" }
                )
            } else {
                format!("{what} · {op}: {} of {} rows diverge", a.diverging, a.rows)
            };
            if a.nonfinite {
                title.push_str(" · NaN/Inf");
            } else if a.worst > 0.0 {
                title.push_str(&format!(" · worst rel. diff {:.1e}", a.worst));
            }
            if a.causes > 0 {
                title.push_str(&format!(
                    " · {} origin{}/entr{}",
                    a.causes,
                    if a.causes == 1 { "" } else { "s" },
                    if a.causes == 1 { "y" } else { "ies" }
                ));
            }
            let href = a
                .first_cause
                .or(a.first_div)
                .and_then(|i| {
                    plan.page_of(i).map(|p| {
                        format!(
                            "{}#{}",
                            page_file(rc.rank1, p),
                            super::summary::anchor(rc.rank1, i)
                        )
                    })
                })
                .unwrap_or_default();
            cells.push(HeatCell {
                x: label_w + x * HEAT_PITCH,
                y: top + y * HEAT_PITCH,
                cls: heat_class(a),
                title,
                href,
            });
        }
    }
    let ylabels = ylab
        .iter()
        .enumerate()
        .map(|(y, t)| HeatLabel {
            x: label_w - 4,
            y: top + y * HEAT_PITCH + HEAT_CELL - 2,
            t: if t.chars().count() > 24 {
                t.chars().take(23).chain(['…']).collect()
            } else {
                t.clone()
            },
        })
        .collect();
    // Column labels: every column whose label fits beside the previous one.
    let mut xlabels = Vec::new();
    let mut free = 0;
    for x in 0..ncols {
        let t = col_label(x);
        let cx = label_w + x * HEAT_PITCH + HEAT_CELL / 2;
        let w = 7 * t.chars().count();
        if cx >= free + w / 2 {
            free = cx + w / 2 + 4;
            xlabels.push(HeatLabel {
                x: cx,
                y: top - 4,
                t,
            });
        }
    }
    let ctx = OverviewCtx {
        rank: rc.rank1,
        width: label_w + ncols * HEAT_PITCH + 4,
        height: top + nrows * HEAT_PITCH + 2,
        cell: HEAT_CELL,
        cells,
        ylabels,
        xlabels,
        rows: total,
        diverging,
        binned: if bin > 1 {
            format!("{bin} layers per column")
        } else {
            String::new()
        },
    };
    let context = Context::from_serialize(&ctx).map_err(|e| ReportError::Template {
        name: "overview.html".into(),
        message: error_chain(&e),
    })?;
    render_file(
        "overview.html",
        &context,
        &opts.out_dir.join(overview_file(rc.rank1)),
    )
}

/// Writes rank `rc`'s key index, `rank{N}-keys.js`, which the index's
/// search box loads (a `<script src>`, so it works from `file://`) when a
/// person searches that rank. It calls `actdiffKeys({...})` with:
/// `rank`; `per` (rows per page); `rows` (`null` when the pages hold every
/// row, else the result row index of each row shown); `keys`, one line per
/// key of each shown row in page order, front-coded: `P:SUFFIX` starts the
/// next row (its key is the first `P` characters of the previous key, then
/// `SUFFIX`), `P;SUFFIX` is another key of the same row (run 2's, when it
/// differs). The keys are JSON strings, so no log text can end the script.
fn write_keys(
    rc: &RankComparison<'_>,
    plan: &PagePlan,
    opts: &ReportOptions,
) -> Result<(), ReportError> {
    let path = opts.out_dir.join(keys_file(rc.rank1));
    let mut keys = String::with_capacity(plan.len() * 24);
    let mut prev: Vec<u8> = Vec::new();
    let mut push = |key: &[u8], sep: char, keys: &mut String| {
        let common = prev.iter().zip(key).take_while(|(a, b)| a == b).count();
        // Cut at a character boundary of the key.
        let mut p = common;
        while p > 0 && p < key.len() && (key[p] & 0xC0) == 0x80 {
            p -= 1;
        }
        let shared = String::from_utf8_lossy(&key[..p]).encode_utf16().count();
        keys.push_str(&shared.to_string());
        keys.push(sep);
        keys.push_str(&String::from_utf8_lossy(&key[p..]));
        keys.push('\n');
        prev.clear();
        prev.extend_from_slice(key);
    };
    for k in 0..plan.len() {
        let row = &rc.matches.rows[plan.row(k)];
        match (row.r1(), row.r2()) {
            (Some(i), Some(j)) => {
                push(rc.t1.key(i), ':', &mut keys);
                if rc.t1.key(i) != rc.t2.key(j) {
                    push(rc.t2.key(j), ';', &mut keys);
                }
            }
            (Some(i), None) => push(rc.t1.key(i), ':', &mut keys),
            (None, Some(j)) => push(rc.t2.key(j), ':', &mut keys),
            _ => push(b"", ':', &mut keys),
        }
    }
    let rows = if plan.is_filtered() {
        serde_json::Value::from((0..plan.len()).map(|k| plan.row(k)).collect::<Vec<_>>())
    } else {
        serde_json::Value::Null
    };
    let data = serde_json::json!({
        "rank": rc.rank1,
        "per": plan.page_rows,
        "rows": rows,
        "keys": keys,
    });
    let file = File::create(&path).map_err(|e| ReportError::io(&path, e))?;
    let mut w = BufWriter::with_capacity(1 << 16, file);
    let io = |e| ReportError::io(&path, e);
    w.write_all(b"actdiffKeys(").map_err(io)?;
    serde_json::to_writer(&mut w, &data).map_err(|e| ReportError::io(&path, e.into()))?;
    w.write_all(b");\n").map_err(io)?;
    w.flush().map_err(io)
}

/// A page link on the index.
#[derive(Serialize)]
struct PageLink<'a> {
    file: &'a str,
    n: usize,
    first: usize,
    end: usize,
    /// The link's title: the rows the page holds.
    title: String,
}

/// One rank's line in the index table, and its section below it.
#[derive(Serialize, Default)]
struct RankRow<'a> {
    rank: u32,
    rank2: u32,
    /// "" for a compared rank; `only1` / `only2` for a rank one run lacks.
    only: &'static str,
    /// Why a rank both runs have was not compared ("" otherwise).
    failed: String,
    entries1: usize,
    entries2: usize,
    counts: Vec<u64>,
    diverged: bool,
    incomplete: bool,
    first_divergence: Option<RowLink<'a>>,
    first_cause: Option<CauseLink<'a>>,
    pages: Vec<PageLink<'a>>,
    /// "showing 31,880 diverging rows of 3,264,458; ..." when filtered.
    shown_note: String,
    /// Origins and entries, in dispatch order.
    causes: Vec<CauseRow<'a>>,
    /// Origins and entries not listed.
    more_causes: u64,
    /// The rank's overview fragment (heatmap), rendered with the pages.
    overview: String,
    /// The rank's key index exists (the search box can load it).
    keys: bool,
    /// The rank has a section below the table (heatmap or causes).
    detail: bool,
}

/// An origin or entry in a rank's table on the index.
#[derive(Serialize)]
struct CauseRow<'a> {
    kind: &'static str,
    /// Badge classes.
    cls: &'static str,
    row: RowLink<'a>,
    /// 0-based positions of the differing inputs, comma-separated.
    inputs: String,
    inherited: u64,
    /// The first inherited rows' keys, ` → `-separated.
    chain: String,
}

fn cause_rows(c: &CausesSummary) -> Vec<CauseRow<'_>> {
    c.causes
        .iter()
        .map(|e| CauseRow {
            kind: e.kind.as_str(),
            cls: match e.kind {
                CauseKind::Origin => "cause",
                _ => "entry",
            },
            row: row_link(&e.row),
            inputs: e
                .inputs
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            inherited: e.inherited,
            chain: e.chain.join(" → "),
        })
        .collect()
}

/// Input warnings of one side of one rank.
#[derive(Serialize)]
struct SideWarnings<'a> {
    rank: u32,
    name: &'a str,
    path: &'a str,
    /// Plain-text problems (incomplete, one-sided fields, duplicate keys, counts).
    items: Vec<String>,
    /// The first few parse warnings, `file:line:col: message`.
    warnings: &'a [String],
    /// Stored warnings not listed.
    more: usize,
}

fn side_warnings<'a>(rank: u32, name: &'a str, s: &'a SideSummary) -> Option<SideWarnings<'a>> {
    let mut items: Vec<String> = s
        .incomplete
        .iter()
        .map(|r| format!("incomplete: {r}"))
        .collect();
    if !s.one_sided_fields.is_empty() {
        items.push(format!(
            "fields only in this log: {}",
            s.one_sided_fields.join(", ")
        ));
    }
    if !s.duplicate_keys.is_empty() {
        let n = s.duplicate_keys.len();
        let listed: Vec<String> = s
            .duplicate_keys
            .iter()
            .take(INDEX_DUPLICATES)
            .map(|(k, lines)| {
                let l: Vec<String> = lines.iter().map(u64::to_string).collect();
                format!("{k} (lines {})", l.join(", "))
            })
            .collect();
        items.push(format!(
            "{n} duplicate key{}: {}{}",
            if n == 1 { "" } else { "s" },
            listed.join("; "),
            if n > INDEX_DUPLICATES { "; …" } else { "" }
        ));
    }
    // Counts by kind; the kinds already listed above are skipped.
    for (kind, label, n) in &s.warning_counts {
        if matches!(
            kind.as_str(),
            "Truncated" | "CountMismatch" | "DuplicateKey"
        ) {
            continue;
        }
        let what = kind_words(kind);
        if label.is_empty() || label.eq_ignore_ascii_case(&what) {
            items.push(format!("{n} × {what}"));
        } else {
            items.push(format!("{n} × {what}: {label}"));
        }
    }
    if items.is_empty() && s.warnings.is_empty() {
        return None;
    }
    let shown = s.warnings.len().min(INDEX_WARNINGS);
    Some(SideWarnings {
        rank,
        name,
        path: &s.path,
        items,
        warnings: &s.warnings[..shown],
        more: s.warnings.len() - shown,
    })
}

/// `UnknownField` → `unknown field`.
fn kind_words(kind: &str) -> String {
    let mut out = String::with_capacity(kind.len() + 4);
    for (i, c) in kind.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push(' ');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// An unused override pair.
#[derive(Serialize)]
struct Unused<'a> {
    rank: u32,
    key1: &'a str,
    key2: &'a str,
}

/// Everything the index shows.
#[derive(Serialize)]
struct IndexCtx<'a> {
    name1: &'a str,
    name2: &'a str,
    path1: &'a str,
    path2: &'a str,
    tool: &'a str,
    exit_status: i32,
    verdict: &'a [String],
    counts: Vec<StatusCount>,
    /// Columns of the rank table after the rank number.
    rest_cols: usize,
    /// Some rank has a key index: show the search box.
    searchable: bool,
    /// The rank the search box starts on (the first diverging one).
    search_rank: u32,
    /// Compared ranks and ranks of one run only, by rank number.
    ranks: Vec<RankRow<'a>>,
    ranks_only1: &'a [u32],
    ranks_only2: &'a [u32],
    excluded: Vec<Excluded<'a>>,
    warnings: Vec<SideWarnings<'a>>,
    unused: Vec<Unused<'a>>,
}

/// `0, 1, 2, 5` → `0–2, 5`.
fn rank_list(ranks: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}–{}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    out.join(", ")
}

/// Groups the ranks of one side by their excluded-ops list; `other` is the
/// other run's side.
fn excluded_groups<'a>(
    name: &'a str,
    ranks: &'a [RankSummary],
    side: fn(&RankSummary) -> &SideSummary,
    other: fn(&RankSummary) -> &SideSummary,
) -> Vec<Excluded<'a>> {
    let mut groups: Vec<(&'a Option<Vec<String>>, Vec<&'a RankSummary>)> = Vec::new();
    for r in ranks {
        let ops = &side(r).excluded_ops;
        match groups.iter_mut().find(|(o, _)| *o == ops) {
            Some((_, rs)) => rs.push(r),
            None => groups.push((ops, vec![r])),
        }
    }
    let single = groups.len() == 1;
    groups
        .into_iter()
        .map(|(ops, rs)| {
            let label = if single && rs.len() == ranks.len() {
                if rs.len() == 1 {
                    String::new()
                } else {
                    "all ranks".into()
                }
            } else {
                let numbers: Vec<u32> = rs.iter().map(|r| r.rank).collect();
                format!(
                    "rank{} {}",
                    if rs.len() > 1 { "s" } else { "" },
                    rank_list(&numbers)
                )
            };
            let others: Vec<&Option<Vec<String>>> =
                rs.iter().map(|r| &other(r).excluded_ops).collect();
            excluded(name, label, ops, &others)
        })
        .collect()
}

/// Writes `index.html`: the verdict, counts per status, one table line per
/// rank (with its first diverging row and page links), excluded ops, input
/// warnings, one-sided ranks and unused overrides.
pub fn write_index(summary: &Summary, opts: &ReportOptions) -> Result<(), ReportError> {
    let (n1, n2) = (summary.name1.as_str(), summary.name2.as_str());
    let mut ranks: Vec<RankRow> = summary
        .ranks
        .iter()
        .map(|r| {
            let overview = std::fs::read_to_string(opts.out_dir.join(overview_file(r.rank)))
                .unwrap_or_default();
            let causes = cause_rows(&r.root_causes);
            let listed = r
                .root_causes
                .causes
                .iter()
                .filter(|c| c.kind != CauseKind::ViaCollective)
                .count() as u64;
            RankRow {
                rank: r.rank,
                rank2: r.rank2,
                only: "",
                failed: String::new(),
                entries1: r.run1.entries,
                entries2: r.run2.entries,
                counts: status_counts(&r.counts, n1, n2)
                    .iter()
                    .map(|c| c.n)
                    .collect(),
                diverged: r.diverged(),
                incomplete: r.incomplete(),
                first_divergence: r.first_divergence.as_ref().map(row_link),
                first_cause: cause_link(&r.root_causes),
                shown_note: shown_note(r),
                pages: r
                    .pages
                    .iter()
                    .enumerate()
                    .map(|(k, p)| PageLink {
                        file: &p.file,
                        n: k + 1,
                        first: p.first_row + 1,
                        end: p.end_row,
                        // Pages of diverging rows only hold rows k–j of
                        // the rows shown, not result rows k–j.
                        title: if r.html_filtered {
                            format!(
                                "diverging rows {}–{} of the {} shown",
                                p.first_row + 1,
                                p.end_row,
                                r.html_rows
                            )
                        } else {
                            format!("rows {}–{}", p.first_row, p.end_row.saturating_sub(1))
                        },
                    })
                    .collect(),
                more_causes: r.root_causes.cause_count.saturating_sub(listed),
                detail: !causes.is_empty() || !overview.is_empty(),
                causes,
                overview,
                keys: opts.out_dir.join(keys_file(r.rank)).is_file(),
            }
        })
        .collect();
    // Ranks of one run only, in the table too, in rank-number order.
    for (only, list) in [
        ("only1", &summary.ranks_only1),
        ("only2", &summary.ranks_only2),
    ] {
        ranks.extend(list.iter().map(|&rank| RankRow {
            rank,
            rank2: rank,
            only,
            ..RankRow::default()
        }));
    }
    // Ranks that could not be compared, with why.
    ranks.extend(summary.ranks_failed.iter().map(|f| RankRow {
        rank: f.rank,
        rank2: f.rank,
        failed: f.errors.join("; "),
        ..RankRow::default()
    }));
    ranks.sort_by_key(|r| r.rank);
    let search_rank = ranks
        .iter()
        .find(|r| r.keys && r.diverged)
        .or_else(|| ranks.iter().find(|r| r.keys))
        .map(|r| r.rank);
    let mut excl = excluded_groups(n1, &summary.ranks, |r| &r.run1, |r| &r.run2);
    excl.extend(excluded_groups(
        n2,
        &summary.ranks,
        |r| &r.run2,
        |r| &r.run1,
    ));
    let mut warnings = Vec::new();
    let mut unused = Vec::new();
    for r in &summary.ranks {
        warnings.extend(side_warnings(r.rank, n1, &r.run1));
        warnings.extend(side_warnings(r.rank2, n2, &r.run2));
        unused.extend(r.unused_overrides.iter().map(|(a, b)| Unused {
            rank: r.rank,
            key1: a,
            key2: b,
        }));
    }
    let ctx = IndexCtx {
        name1: n1,
        name2: n2,
        path1: &summary.path1,
        path2: &summary.path2,
        tool: &summary.tool,
        exit_status: summary.exit_status,
        verdict: &summary.verdict,
        counts: status_counts(&summary.counts, n1, n2),
        rest_cols: status_counts(&summary.counts, n1, n2).len() + 3,
        searchable: search_rank.is_some(),
        search_rank: search_rank.unwrap_or(0),
        ranks,
        ranks_only1: &summary.ranks_only1,
        ranks_only2: &summary.ranks_only2,
        excluded: excl,
        warnings,
        unused,
    };
    let context = Context::from_serialize(&ctx).map_err(|e| ReportError::Template {
        name: "index.html".into(),
        message: error_chain(&e),
    })?;
    render_file("index.html", &context, &opts.out_dir.join("index.html"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::{match_tables, MatchOptions, MatchTable};
    use crate::parser::{parse_bytes, OpTable};
    use crate::report::colour::{diff_colour, light_colour};
    use serde_json::json;

    const LOG1: &str = "Total captured activations: 5
Excluded ops dispatched: t, view
================================================================================

[<script>alert(1)</script>/op_0_mm]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 1.000000e+00
  Min: -1.000000e+00
  Max: 1.000000e+00
  Mean: 0.000000e+00
  Output hash: 4.000000e+00
  Input hashes: 2.000000e+00, 3.000000e+00
  Input producers: <none>/op_0_embedding;
  Location: \"quotes\"</td>.py:1

[layers.0/op_0_add]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 2.000000e+00
  Min: -1.000000e+00
  Max: 1.000000e+00
  Mean: 5.000000e-01
  Output hash: 5.000000e+00
  Input hashes: 4.000000e+00
  Input producers: <script>alert(1)</script>/op_0_mm
  Location: model.py:2

[layers.0/op_1_mul]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 3.000000e+00
  Output hash: 6.000000e+00
  Location: model.py:3

[layers.1/op_0_only_a]
  Output hash: 7.000000e+00
  Location: model.py:4

[layers.0/op_2_mm]
  Output hash: 8.000000e+00
  Location: model.py:5
  Phase: backward

";

    const LOG2: &str = "Total captured activations: 5
Excluded ops dispatched: (none)
================================================================================

[<script>alert(1)</script>/op_0_mm]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 1.000000e+00
  Min: -1.000000e+00
  Max: 1.000000e+00
  Mean: 0.000000e+00
  Output hash: 4.000000e+00
  Input hashes: 2.000000e+00, 3.000000e+00
  Input producers: <none>/op_0_embedding;
  Location: \"quotes\"</td>.py:1

[layers.0/op_0_add]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 2.000100e+00
  Min: -1.000000e+00
  Max: 1.000000e+00
  Mean: 5.000000e-01
  Output hash: 5.000100e+00
  Input hashes: 4.000000e+00
  Input producers: <script>alert(1)</script>/op_0_mm
  Location: model.py:2

[layers.0/op_7_mul]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 3.000000e+00
  Output hash: 6.000000e+00
  Location: model.py:3

[layers.0/op_2_mm]
  Output hash: 8.000000e+00
  Location: model.py:5
  Phase: backward

[layers.2/op_0_only_b]
  Output hash: 9.000000e+00
  Location: model.py:6

";

    struct Fixture {
        t1: OpTable,
        t2: OpTable,
        m: MatchTable,
    }

    fn fixture(log1: &str, log2: &str) -> Fixture {
        let t1 = parse_bytes(log1.as_bytes().to_vec(), "a/rank_0_activations.log");
        let t2 = parse_bytes(log2.as_bytes().to_vec(), "b/rank_0_activations.log");
        let m = match_tables(&t1, &t2, &MatchOptions::default());
        Fixture { t1, t2, m }
    }

    fn rc(f: &Fixture) -> RankComparison<'_> {
        RankComparison {
            rank1: 0,
            rank2: 0,
            t1: &f.t1,
            t2: &f.t2,
            matches: &f.m,
        }
    }

    fn options(dir: &Path, page_rows: usize) -> ReportOptions {
        ReportOptions {
            out_dir: dir.to_path_buf(),
            name1: "run<A>".into(),
            name2: "run_B".into(),
            path1: "a/".into(),
            path2: "b/".into(),
            page_rows,
            html_rows: Some(crate::report::DEFAULT_HTML_ROWS),
            ..ReportOptions::default()
        }
    }

    fn read(dir: &Path, file: &str) -> String {
        std::fs::read_to_string(dir.join(file)).unwrap()
    }

    /// The JSON rows a page carries for its script: `{"n", "forward",
    /// "backward"}`.
    fn page_rows(html: &str) -> serde_json::Value {
        let open = "<script type=\"application/json\" id=rows>";
        let a = html.find(open).expect("the page carries its rows") + open.len();
        let b = a + html[a..].find("</script>").unwrap();
        serde_json::from_str(&html[a..b]).expect("the rows are JSON")
    }

    /// The ids of a page's rows, forward then backward.
    fn row_ids(rows: &serde_json::Value) -> Vec<String> {
        ["forward", "backward"]
            .iter()
            .flat_map(|s| rows[s].as_array().unwrap())
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    }

    /// Writes the fixture's pages and index; returns the summary.
    fn write_all(f: &Fixture, opts: &ReportOptions) -> Summary {
        let rc = rc(f);
        let s = crate::report::RankReport::write(&rc, opts).unwrap();
        let groups = Summary::group_ranks(std::slice::from_ref(&s));
        let summary = Summary {
            schema_version: super::super::summary::SCHEMA_VERSION,
            tool: "actdiff test".into(),
            name1: opts.name1.clone(),
            name2: opts.name2.clone(),
            path1: opts.path1.clone(),
            path2: opts.path2.clone(),
            counts: s.counts,
            ranks: vec![s],
            ranks_only1: vec![3],
            ranks_only2: vec![],
            ranks_failed: vec![],
            groups,
            exit_status: 1,
            verdict: vec!["rank 0 diverges at <script>".into()],
        };
        write_index(&summary, opts).unwrap();
        summary
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(3_264_458), "3,264,458");
    }

    #[test]
    fn rank_pages_rows_chips_colours_escaping() {
        let f = fixture(LOG1, LOG2);
        let dir = tempfile::tempdir().unwrap();
        let opts = options(dir.path(), 2000);
        let summary = write_all(&f, &opts);
        let pages = &summary.ranks[0].pages;
        assert_eq!(
            pages,
            &vec![PageRef {
                file: "rank0-page1.html".into(),
                first_row: 0,
                end_row: f.m.rows.len(),
            }]
        );
        let html = read(dir.path(), "rank0-page1.html");
        let data = page_rows(&html);
        assert_eq!(data["n"], json!(["run<A>", "run_B"]));
        // Every result row once, with its anchor id, in result order within
        // its section; the backward row in the Backward section.
        let rows = &f.m.rows;
        let bwd_row = rows
            .iter()
            .position(|r| r.r1().is_some_and(|i| f.t1.is_backward(i)))
            .unwrap();
        let mut ids: Vec<String> = (0..rows.len())
            .filter(|i| *i != bwd_row)
            .map(|i| format!("rank0-row{i}"))
            .collect();
        ids.push(format!("rank0-row{bwd_row}"));
        assert_eq!(row_ids(&data), ids);
        assert_eq!(data["backward"].as_array().unwrap().len(), 1);
        let all: Vec<&serde_json::Value> = ["forward", "backward"]
            .iter()
            .flat_map(|s| data[s].as_array().unwrap())
            .collect();
        let by_key = |k: &str| {
            *all.iter()
                .find(|r| r["k1"] == k)
                .unwrap_or_else(|| panic!("no row {k}"))
        };
        // A one-sided row has no cells on its missing side.
        let only2 = all.iter().find(|r| r["st"] == "only2").unwrap();
        assert_eq!(only2["s"][0], json!(null));
        assert_eq!(only2["s"][1].as_array().unwrap().len(), 9);
        assert!(only2.get("chip").is_none(), "no match chip when unpaired");
        assert!(all.iter().any(|r| r["st"] == "only1"));
        assert!(all.iter().any(|r| r["st"] == "match"));
        assert!(all
            .iter()
            .any(|r| r["chip"] == "same op key" && r["sg"] == "exact"));
        assert!(html.contains("Numerics Comparison: run&lt;A&gt; vs run_B"));
        assert!(html.contains("page 1 of 1"));
        assert!(html.contains("href=\"index.html\""));
        // The differing Output hash and L2 norm cells are coloured on both
        // sides, the relative difference in run 2's title, the colours in the
        // page's rules.
        let add = by_key("layers.0/op_0_add");
        assert_eq!(add["st"], "diff");
        assert_eq!(add["s"][0][0], json!({"t": "5.000000e+00", "x": 1}));
        assert_eq!(
            add["s"][1][0],
            json!({"t": "5.000100e+00", "x": 1, "d": "rel. diff 2.00e-5"})
        );
        assert_eq!(
            add["s"][1][5],
            json!({"t": "2.000100e+00", "x": 2, "d": "rel. diff 5.00e-5"}),
            "L2 norm differs too"
        );
        let (c, bg) = diff_colour(2e-5);
        let light = light_colour(2e-5);
        assert!(html.contains(&format!(".x1{{color:{light};background:{bg} }}")));
        assert!(html.contains(&format!(".x1{{color:{c} }}")));
        // Fuzzy pair: both keys, and its chip.
        let fuzzy = by_key("layers.0/op_1_mul");
        assert_eq!(fuzzy["k2"], "layers.0/op_7_mul");
        assert_eq!(
            (&fuzzy["chip"], &fuzzy["sg"]),
            (&json!("fuzzy op key"), &json!("fuzzy"))
        );
        // Producers as tooltips; absent fields as absent, never zeros.
        let first = by_key("<script>alert(1)</script>/op_0_mm");
        assert_eq!(
            first["s"][0][1],
            json!({"v": [{"h": "2.000000e+00", "p": "<none>/op_0_embedding"}, {"h": "3.000000e+00"}]})
        );
        assert_eq!(first["s"][0][2], "\"quotes\"</td>.py:1");
        assert!(all
            .iter()
            .flat_map(|r| r["s"].as_array().unwrap())
            .filter_map(|s| s.as_array())
            .flatten()
            .any(|c| *c == json!({"m": true, "k": "m"})));
        // Escaping: log text never appears raw; in the JSON every `<` is
        // `\u003c`, so nothing can end the data's script element.
        assert!(!html.contains("<script>alert"));
        assert!(html.contains("\\u003cscript>alert(1)\\u003c/script>/op_0_mm"));
        assert!(!html.contains("<none>"));
        assert!(!html.contains("</td>.py"));
        assert_eq!(
            html.matches("<script").count(),
            2,
            "the page's data and its own script"
        );
        assert_eq!(html.matches("</script").count(), 2);
        // Each row names the tolerance that judged it: in the key cell's
        // title, and as a chip on diverging rows judged by a rule.
        assert_eq!(first["title"], "lines 5 / 5 · default: hashes rel <= 1e-8");
        assert!(
            all.iter().all(|r| r.get("tol").is_none()),
            "the default is in the title only"
        );
        // Root cause: the add's inputs agree but its output differs.
        assert_eq!(add["notes"], json!([["nt origin", "origin"]]));
        assert!(html.contains("First cause:</span> <b class=\"bd cause\">origin</b>"));
        // Excluded-op chips.
        // Excluded-op chips: run 1's ops are missing from run 2's list.
        assert!(
            html.contains("<span class=\"xchip xo\" title=\"only in run&lt;A&gt;\">view</span>")
        );
        assert!(html.contains("<span class=xchip>(none)</span>"));
        assert!(html.contains("the two runs' sets differ"));
        assert!(html.contains("only in run&lt;A&gt;: t, view"));
        // The overview fragment and the key index are written with the pages.
        let overview = read(dir.path(), "rank0-overview.html");
        assert!(overview.contains("<svg class=heat"));
        assert!(overview.contains("href=\"rank0-page1.html#rank0-row1\""));
        assert!(!overview.contains("<script"));
        assert!(overview.contains("&lt;script&gt;") || !overview.contains("script"));
        let keys = read(dir.path(), "rank0-keys.js");
        assert!(keys.starts_with("actdiffKeys({"));
        // Keys are JSON strings in a script file of their own.
        assert!(keys.contains("\"keys\":\"0:<script>alert(1)</script>/op_0_mm\\n"));
        assert!(
            keys.contains(";layers.0/op_7_mul") || keys.contains(";7_mul"),
            "{keys}"
        );
    }

    #[test]
    fn pagination() {
        let f = fixture(LOG1, LOG2);
        assert_eq!(f.m.rows.len(), 6);
        let dir = tempfile::tempdir().unwrap();
        let opts = options(dir.path(), 2);
        // Drop the last row so there are 5: 2 + 2 + 1.
        let mut m = f.m.clone();
        m.rows.truncate(5);
        let f = Fixture { m, ..f };
        let rc = rc(&f);
        let s = crate::report::RankReport::write(&rc, &opts).unwrap();
        let pages = s.pages.clone();
        let firsts: Vec<(usize, usize)> = pages.iter().map(|p| (p.first_row, p.end_row)).collect();
        assert_eq!(firsts, vec![(0, 2), (2, 4), (4, 5)]);
        let p1 = read(dir.path(), "rank0-page1.html");
        let p2 = read(dir.path(), "rank0-page2.html");
        let p3 = read(dir.path(), "rank0-page3.html");
        assert!(p1.contains("page 1 of 3"));
        assert!(p1.contains("href=\"rank0-page2.html\" rel=next"));
        assert!(!p1.contains("rel=prev"));
        assert!(p2.contains("href=\"rank0-page1.html\" rel=prev"));
        assert!(p2.contains("href=\"rank0-page3.html\" rel=next"));
        assert!(p3.contains("href=\"rank0-page2.html\" rel=prev"));
        assert!(!p3.contains("rel=next"));
        assert_eq!(row_ids(&page_rows(&p1)), ["rank0-row0", "rank0-row1"]);
        assert_eq!(row_ids(&page_rows(&p2)), ["rank0-row2", "rank0-row3"]);
        assert_eq!(row_ids(&page_rows(&p3)), ["rank0-row4"]);
    }

    #[test]
    fn empty_rank_gets_one_page() {
        let f = fixture("", "");
        let dir = tempfile::tempdir().unwrap();
        let opts = options(dir.path(), 2000);
        let rc = rc(&f);
        let s = crate::report::RankReport::write(&rc, &opts).unwrap();
        let pages = s.pages.clone();
        assert_eq!(
            pages,
            vec![PageRef {
                file: "rank0-page1.html".into(),
                first_row: 0,
                end_row: 0
            }]
        );
        let html = read(dir.path(), "rank0-page1.html");
        assert!(html.contains("no rows"));
        assert!(row_ids(&page_rows(&html)).is_empty());
        assert!(!html.contains("<table class=res>"), "no empty tables");
    }

    #[test]
    fn index_page() {
        let f = fixture(LOG1, LOG2);
        let dir = tempfile::tempdir().unwrap();
        let opts = options(dir.path(), 2);
        let summary = write_all(&f, &opts);
        let html = read(dir.path(), "index.html");
        let fd = summary.ranks[0].first_divergence.as_ref().unwrap();
        assert!(html.contains(&format!("href=\"{}#{}\"", fd.page, fd.anchor)));
        assert!(html.contains("Numerics Comparison: run&lt;A&gt; vs run_B"));
        assert!(html.contains("exit status 1"));
        assert!(html.contains("rank 0 diverges at &lt;script&gt;"));
        assert!(html.contains("<b class=\"bd cause\">origin</b>"));
        // The index's own script (the key search) is its only one; no log
        // text is in it.
        assert_eq!(html.matches("<script").count(), 1);
        assert!(!html.contains("<script>alert"));
        assert!(html.contains("id=find-key"));
        for k in 1..=3 {
            assert!(html.contains(&format!("href=\"rank0-page{k}.html\"")));
        }
        assert!(html.contains("ranks only in run&lt;A&gt;: 3"));
        assert!(html.contains(
            "<span class=\"xchip xo\" title=\"only in run&lt;A&gt;\">t</span><span class=\"xchip xo\" title=\"only in run&lt;A&gt;\">view</span>"
        ));
        // The one-sided rank 3 is in the rank table, after rank 0.
        let table = &html[html.find("<table class=ranks>").unwrap()..];
        let table = &table[..table.find("</table>").unwrap()];
        assert!(table.contains("<td class=rk>3 <b class=\"bd only1\">only in run&lt;A&gt;</b>"));
        assert!(table.find("<td class=rk>0").unwrap() < table.find("<td class=rk>3").unwrap());
        // Rank 0's section: heatmap and origins/entries, linking to rows.
        assert!(html.contains("<section class=\"panel rankd\" id=\"rank-0\">"));
        assert!(html.contains("<svg class=heat"));
        assert!(html.contains("<table class=causes>"));
        assert!(html.contains("<span class=xchip>(none)</span>"));
        // The first divergence comes before the excluded ops and warnings.
        assert!(html.find(&fd.anchor).unwrap() < html.find("Excluded ops dispatched").unwrap());
        assert!(html.contains("exit status"));
    }

    #[test]
    fn index_not_recorded_and_warnings() {
        let log =
            "[x/op_0_mm]\n  Output hash: 1.0\n  Call type: foo\n\n[x/op_0_mm]\n  Output hash: 1.0";
        let f = fixture(log, log);
        let dir = tempfile::tempdir().unwrap();
        let opts = options(dir.path(), 2000);
        write_all(&f, &opts);
        let html = read(dir.path(), "index.html");
        assert!(html.contains("not recorded"));
        assert!(html.contains("1 duplicate key: x/op_0_mm (lines 1, 5)"));
        assert!(html.contains("1 × unknown field: Call type"));
        assert!(html.contains("incomplete"));
    }

    /// 2,000 rows of typical data stay well under 2 MB.
    #[test]
    fn page_size_is_bounded() {
        let mut a = String::from("Total captured activations: 2000\n");
        let mut b = a.clone();
        for i in 0..2000 {
            let block = |h: f64| {
                format!(
                    "[layers.{l}.feed_forward.w{w}/op_{i}_mm]\n  Shape: torch.Size([2, 64, 256]), Dtype: torch.float32\n  L2 norm: 1.810183e+02\n  Min: -2.287835e+00\n  Max: 2.287835e+00\n  Mean: 2.222862e-03\n  Output hash: {h:.6e}\n  Input hashes: 2.553141e+04, 1.337287e+02\n  Input producers: layers.{l}.attention_norm/op_{i}_mul;\n  Location: llama3/model.py:152\n\n",
                    l = i / 100,
                    w = i % 3
                )
            };
            a.push_str(&block(2.663224e4));
            b.push_str(&block(if i % 2 == 0 { 2.663224e4 } else { 2.663225e4 }));
        }
        let f = fixture(&a, &b);
        let dir = tempfile::tempdir().unwrap();
        let opts = options(dir.path(), 2000);
        let rc = rc(&f);
        let t0 = std::time::Instant::now();
        crate::report::RankReport::write(&rc, &opts).unwrap();
        let size = std::fs::metadata(dir.path().join("rank0-page1.html"))
            .unwrap()
            .len();
        eprintln!("2000-row page: {size} bytes in {:?}", t0.elapsed());
        assert!(size < 2_000_000, "{size} bytes");
    }
}

//! HTML pages (tera templates in `templates/`, embedded at build time).
//!
//! Every rank gets one or more result pages (`rank{N}-page{k}.html`,
//! [`ReportOptions::page_rows`] result rows each) and the comparison gets an
//! `index.html`. Pages are self-contained (inline CSS and JS, no network) so
//! they work from `file://`.
//!
//! Escaping: all log text (keys, locations, shapes, hashes, producers, run
//! names, op names) reaches the page only through tera `{{ }}` expressions
//! with autoescape on (every template name ends in `.html`), never through
//! `| safe`. No log text is ever placed inside a `<script>` element: the
//! filter script reads the key text from the DOM. The colour rules in a
//! page's `<style>` are built here from numbers only.
//!
//! Memory: a page's tera context is built from the page's rows only and
//! rendered straight into a buffered file, so memory is bounded by the page
//! size (times the rayon threads rendering pages at once), not by the number
//! of rows.
//!
//! Size: a 2,000-row page of real logs is 1.3–1.8 MB. Differing cells are
//! coloured through classes (`x1`, `x2`, ...) whose rules each page defines
//! in its `<style>`, one per distinct colour, computed here with
//! [`diff_colour`] (dark theme, the reference's scale) and [`light_colour`];
//! the relative difference is the title of run 2's cell (the page script
//! shows it on run 1's too). Cell end tags are implied (valid HTML5).

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::OnceLock;

use rayon::prelude::*;
use serde::Serialize;
use tera::{Context, Tera};

use super::summary::{page_file, CausesSummary, PageRef, RowRef, SideSummary};
use super::{PagePlan, RankComparison, RankSummary, ReportError, ReportOptions, Summary};
use crate::matcher::cause::CauseKind;
use crate::matcher::compare::{compare_hashes, split_tokens, stat_diffs};
use crate::matcher::{
    Counts, MatchRow, Status, Tolerance, ROW_IGNORED, ROW_NONFINITE1, ROW_NONFINITE2, ROW_UNSYNCED,
};
use crate::parser::{Field, OpTable};

/// The built-in templates: (name, text). Names ending in `.html` are
/// autoescaped; the CSS and JS are static text included by the pages.
const TEMPLATES: [(&str, &str); 5] = [
    ("report.css", include_str!("../../templates/report.css")),
    ("report.js", include_str!("../../templates/report.js")),
    ("macros.html", include_str!("../../templates/macros.html")),
    ("page.html", include_str!("../../templates/page.html")),
    ("index.html", include_str!("../../templates/index.html")),
];

/// A displayed cell longer than this (in bytes) is clipped to about three
/// lines and expands on click.
const CLIP_LEN: usize = 64;

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

/// Position of a relative difference on the report's colour scale:
/// `clamp((log10(rd) + 8) / 7, 0, 1)`; 0 at or below 1e-8, 1 at or above
/// 0.1; NaN counts as a full difference.
pub fn diff_scale(rd: f64) -> f64 {
    if rd.is_nan() {
        return 1.0;
    }
    if rd <= 1e-8 {
        return 0.0;
    }
    ((rd.log10() + 8.0) / 7.0).clamp(0.0, 1.0)
}

/// The integer colour components of one position on the colour scale.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Shade {
    /// Dark-theme text: `rgb(r,g,g)`.
    r: u8,
    g: u8,
    /// Background alpha in thousandths.
    alpha: u16,
    /// Light-theme text: `rgb(lr,lg,lg)`.
    lr: u8,
    lg: u8,
}

impl Shade {
    fn of(rd: f64) -> Shade {
        let t = diff_scale(rd);
        Shade {
            r: (220.0 + 28.0 * t).round() as u8,
            g: (220.0 - 140.0 * t).round() as u8,
            alpha: (150.0 * t).round() as u16,
            lr: (51.0 + 149.0 * t).round() as u8,
            lg: (51.0 - 21.0 * t).round() as u8,
        }
    }
    fn dark(self) -> String {
        format!("rgb({},{},{})", self.r, self.g, self.g)
    }
    fn background(self) -> String {
        format!(
            "rgba(248,80,80,{}.{:03})",
            self.alpha / 1000,
            self.alpha % 1000
        )
    }
    fn light(self) -> String {
        format!("rgb({},{},{})", self.lr, self.lg, self.lg)
    }
}

/// The colours of a differing cell, as the reference report: text from
/// `rgb(220,220,220)` to `rgb(248,80,80)` and background
/// `rgba(248,80,80, 0.15·t)`, where `t` is [`diff_scale`]`(rd)`.
/// Returns `(color, background)` as CSS values.
pub fn diff_colour(rd: f64) -> (String, String) {
    let s = Shade::of(rd);
    (s.dark(), s.background())
}

/// Text colour of a differing cell in the light theme (the reference's
/// colours are for a dark background): from `rgb(51,51,51)` to
/// `rgb(200,30,30)`.
pub fn light_colour(rd: f64) -> String {
    Shade::of(rd).light()
}

/// One colour class of a page: `.x{n}` with the colours [`diff_colour`]
/// and [`light_colour`] give its cells.
#[derive(Serialize)]
struct Colour {
    /// Text colour on the dark theme (the reference's scale).
    dark: String,
    /// Background (both themes).
    bg: String,
    /// Text colour on the light theme.
    light: String,
}

/// The colour classes used on one page. A differing cell names its class
/// (`x3`) instead of repeating an inline `style` (most cells of a diverging
/// page are coloured); the page's `<style>` holds one rule per distinct
/// colour, computed here, so every cell shows exactly its own colour.
#[derive(Default)]
struct Palette {
    ids: ahash::AHashMap<Shade, u32>,
}

impl Palette {
    /// The class number (from 1) of a cell with relative difference `rd`.
    fn class(&mut self, rd: f64) -> u32 {
        let n = self.ids.len() as u32 + 1;
        *self.ids.entry(Shade::of(rd)).or_insert(n)
    }
    /// The rules, for classes 1, 2, ...
    fn rules(self) -> Vec<Colour> {
        let mut v: Vec<(u32, Shade)> = self.ids.into_iter().map(|(s, i)| (i, s)).collect();
        v.sort_by_key(|(i, _)| *i);
        v.into_iter()
            .map(|(_, s)| Colour {
                dark: s.dark(),
                bg: s.background(),
                light: s.light(),
            })
            .collect()
    }
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
        sc(Status::Truncated, "truncated".into(), c.truncated),
    ]
}

/// One input hash value and the key of the op that produced it ("" when
/// unknown).
#[derive(Serialize)]
struct HashVal<'a> {
    h: Cow<'a, str>,
    p: Cow<'a, str>,
}

/// One data cell of one side. Most cells are [`Cell::Plain`] and render as
/// `<td>text`, which keeps the per-cell template work small.
#[derive(Serialize)]
#[serde(untagged)]
enum Cell<'a> {
    /// A present field, not coloured, not clipped, without producers.
    Plain(Cow<'a, str>),
    /// Anything else.
    Rich(Box<Rich<'a>>),
}

/// A cell with attributes or structure.
#[derive(Serialize, Default)]
struct Rich<'a> {
    /// Text (unused when `v` is set).
    t: Cow<'a, str>,
    /// Input hash values with their producers (Input hashes only).
    v: Vec<HashVal<'a>>,
    /// The field is absent: show "—".
    m: bool,
    /// Clip to about three lines.
    c: bool,
    /// Colour class `x{n}` of a differing cell; 0 when not coloured.
    x: u32,
    /// Title of a differing cell (run 2's side only; "" otherwise).
    d: String,
}

impl<'a> Cell<'a> {
    /// A field's cell: absent, clipped or plain.
    fn text(b: &'a [u8]) -> Cell<'a> {
        if b.is_empty() {
            Cell::Rich(Box::new(Rich {
                m: true,
                ..Rich::default()
            }))
        } else if b.len() > CLIP_LEN {
            Cell::Rich(Box::new(Rich {
                t: String::from_utf8_lossy(b),
                c: true,
                ..Rich::default()
            }))
        } else {
            Cell::Plain(String::from_utf8_lossy(b))
        }
    }
    /// The Input hashes cell: each value with its producer, when any is known.
    fn inputs(hashes: &'a [u8], producers: &'a [u8]) -> Cell<'a> {
        if hashes.is_empty()
            || producers
                .iter()
                .all(|b| *b == b';' || b.is_ascii_whitespace())
        {
            return Cell::text(hashes);
        }
        let mut prod = producers.split(|b| *b == b';');
        let v = split_tokens(hashes)
            .map(|h| HashVal {
                h: String::from_utf8_lossy(h),
                p: String::from_utf8_lossy(prod.next().map(|p| p.trim_ascii()).unwrap_or_default()),
            })
            .collect();
        Cell::Rich(Box::new(Rich {
            v,
            c: hashes.len() > CLIP_LEN,
            ..Rich::default()
        }))
    }
    /// Colours the cell with class `x` (and `title`, if not empty).
    fn colour(&mut self, x: u32, title: String) {
        let rich = match self {
            Cell::Rich(r) => r,
            Cell::Plain(t) => {
                *self = Cell::Rich(Box::new(Rich {
                    t: std::mem::take(t),
                    ..Rich::default()
                }));
                match self {
                    Cell::Rich(r) => r,
                    Cell::Plain(_) => unreachable!(),
                }
            }
        };
        rich.x = x;
        rich.d = title;
    }
}

/// Indices of the cells of a side, in column order.
const C_OUT: usize = 0;
const C_IN: usize = 1;
const C_SHAPE: usize = 3;
const C_L2: usize = 5;

/// The nine data cells of one side: Output hash, Input hashes, Location,
/// Shape, Phase, L2 norm, Min, Max, Mean.
fn side_cells(t: &OpTable, r: usize) -> Vec<Cell<'_>> {
    vec![
        Cell::text(t.field(r, Field::OutputHash)),
        Cell::inputs(
            t.field(r, Field::InputHashes),
            t.field(r, Field::InputProducers),
        ),
        Cell::text(t.field(r, Field::Location)),
        Cell::text(t.field(r, Field::Shape)),
        Cell::Plain(t.phase(r)),
        Cell::text(t.field(r, Field::L2Norm)),
        Cell::text(t.field(r, Field::Min)),
        Cell::text(t.field(r, Field::Max)),
        Cell::text(t.field(r, Field::Mean)),
    ]
}

/// One result row: a `<tbody>` of two table rows.
#[derive(Serialize)]
struct PairCtx<'a> {
    /// Anchor id.
    id: String,
    /// Status class.
    st: &'static str,
    /// Match-method chip text ("" when unpaired).
    chip: &'static str,
    /// Strategy class.
    sg: &'static str,
    /// The key shown first (run 1's, else run 2's).
    k1: Cow<'a, str>,
    /// Run 2's key when it differs from run 1's ("" otherwise).
    k2: Cow<'a, str>,
    /// Log line numbers of the blocks (`lines 12 / 14`).
    lines: String,
    /// Notes shown as chips: (class, text), e.g. `("origin", "origin")`.
    notes: Vec<(&'static str, String)>,
    /// The cells of run 1's and run 2's side (`null` for a missing side).
    s: [Option<Vec<Cell<'a>>>; 2],
}

/// Chips for what the row's status alone does not tell: where a divergence
/// starts or enters (root cause), rows that do not gate the exit status, and
/// values non-finite in one run only. Inherited divergence, the common case,
/// gets none.
fn row_notes(
    rc: &RankComparison<'_>,
    index: usize,
    row: &MatchRow,
    (name1, name2): (&str, &str),
) -> Vec<(&'static str, String)> {
    let mut notes = Vec::new();
    match rc.matches.cause_kinds.get(index).copied().flatten() {
        Some(CauseKind::Origin) => notes.push(("origin", "origin".to_string())),
        Some(CauseKind::Entry) => notes.push(("entry", "entry".to_string())),
        Some(CauseKind::ViaCollective) => notes.push(("entry", "entry via collective".to_string())),
        _ => {}
    }
    if row.has(ROW_UNSYNCED) {
        notes.push(("quiet", "unsynced collective: not gating".to_string()));
    }
    if row.has(ROW_IGNORED) {
        notes.push(("quiet", "ignored: not gating".to_string()));
    }
    match (row.has(ROW_NONFINITE1), row.has(ROW_NONFINITE2)) {
        (true, false) => notes.push(("nonfinite", format!("non-finite in {name1}"))),
        (false, true) => notes.push(("nonfinite", format!("non-finite in {name2}"))),
        _ => {}
    }
    notes
}

fn pair_ctx<'a>(
    rc: &RankComparison<'a>,
    index: usize,
    row: &MatchRow,
    palette: &mut Palette,
    names: (&str, &str),
) -> PairCtx<'a> {
    let (t1, t2) = (rc.t1, rc.t2);
    let mut a = row.r1().map(|i| side_cells(t1, i));
    let mut b = row.r2().map(|j| side_cells(t2, j));
    if let (Some(i), Some(j), Some(sa), Some(sb)) = (row.r1(), row.r2(), a.as_mut(), b.as_mut()) {
        let mut mark = |col: usize, rd: f64| {
            // The title goes on run 2's cell only (the page script copies it
            // to run 1's on hover): most cells of a diverging page are
            // coloured, and this keeps 2,000-row pages under 2 MB.
            let x = palette.class(rd);
            sa[col].colour(x, String::new());
            sb[col].colour(x, format!("rel. diff {rd:.2e}"));
        };
        for (col, field) in [(C_OUT, Field::OutputHash), (C_IN, Field::InputHashes)] {
            let (x, y) = (t1.field(i, field), t2.field(j, field));
            if x != y {
                if let Some(rd) = compare_hashes(x, y, Tolerance::REFERENCE, true).intensity {
                    mark(col, rd);
                }
            }
        }
        for (k, rd) in stat_diffs(t1, i, t2, j).into_iter().enumerate() {
            if let Some(rd) = rd {
                mark(if k == 0 { C_SHAPE } else { C_L2 + k - 1 }, rd);
            }
        }
    }
    let k1 = match (row.r1(), row.r2()) {
        (Some(i), _) => t1.key_str(i),
        (None, Some(j)) => t2.key_str(j),
        _ => Cow::Borrowed(""),
    };
    let k2 = match (row.r1(), row.r2()) {
        (Some(i), Some(j)) if t1.key(i) != t2.key(j) => t2.key_str(j),
        _ => Cow::Borrowed(""),
    };
    let lines = match (row.r1(), row.r2()) {
        (Some(i), Some(j)) => format!("lines {} / {}", t1.line(i), t2.line(j)),
        (Some(i), None) => format!("line {}", t1.line(i)),
        (None, Some(j)) => format!("line {}", t2.line(j)),
        _ => String::new(),
    };
    PairCtx {
        id: super::summary::anchor(rc.rank1, index),
        notes: row_notes(rc, index, row, names),
        st: row.status.as_str(),
        chip: row.strategy.chip(),
        sg: row.strategy.as_str().unwrap_or("none"),
        k1,
        k2,
        lines,
        s: [a, b],
    }
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
        href: format!("{}#{}", r.page, r.anchor),
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

/// Excluded ops of one side, for chips.
#[derive(Serialize)]
struct Excluded<'a> {
    name: &'a str,
    /// Ranks this list applies to ("" on a rank page).
    ranks: String,
    recorded: bool,
    ops: &'a [String],
}

fn excluded<'a>(name: &'a str, ranks: String, ops: &'a Option<Vec<String>>) -> Excluded<'a> {
    Excluded {
        name,
        ranks,
        recorded: ops.is_some(),
        ops: ops.as_deref().unwrap_or(&[]),
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
    /// Colour classes `x1`, `x2`, ... of the page's differing cells.
    palette: Vec<Colour>,
    /// Forward, then Backward.
    sections: [Section<'a>; 2],
}

/// A collapsible section of a result page.
#[derive(Serialize)]
struct Section<'a> {
    id: &'static str,
    title: &'static str,
    rows: Vec<PairCtx<'a>>,
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
    refs.par_iter()
        .enumerate()
        .try_for_each(|(k, p)| write_page(rc, s, opts, plan, &refs, k, p))?;
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
    let mut forward = Vec::new();
    let mut backward = Vec::new();
    let mut pc = Counts::default();
    let mut palette = Palette::default();
    for (index, row) in (p.first_row..p.end_row)
        .map(|k| plan.row(k))
        .map(|i| (i, &rc.matches.rows[i]))
    {
        pc.add(row.status);
        let bwd = match (row.r1(), row.r2()) {
            (Some(i), _) => rc.t1.is_backward(i),
            (None, Some(j)) => rc.t2.is_backward(j),
            _ => false,
        };
        let pair = pair_ctx(rc, index, row, &mut palette, (&opts.name1, &opts.name2));
        if bwd {
            backward.push(pair);
        } else {
            forward.push(pair);
        }
    }
    let file = |i: usize| refs.get(i).map(|r| r.file.clone()).unwrap_or_default();
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
        shown_note: shown_note(s),
        prev: if k > 0 { file(k - 1) } else { String::new() },
        next: file(k + 1),
        first_page: file(0),
        last_page: file(refs.len() - 1),
        counts: status_counts(&s.counts, &opts.name1, &opts.name2),
        page_counts: status_counts(&pc, &opts.name1, &opts.name2),
        first_divergence: s.first_divergence.as_ref().map(row_link),
        first_cause: cause_link(&s.root_causes),
        excluded: vec![
            excluded(&opts.name1, String::new(), &s.run1.excluded_ops),
            excluded(&opts.name2, String::new(), &s.run2.excluded_ops),
        ],
        palette: palette.rules(),
        sections: [
            Section {
                id: "forward",
                title: "Forward",
                rows: forward,
            },
            Section {
                id: "backward",
                title: "Backward",
                rows: backward,
            },
        ],
    };
    let context = Context::from_serialize(&ctx).map_err(|e| ReportError::Template {
        name: "page.html".into(),
        message: error_chain(&e),
    })?;
    drop(ctx);
    render_file("page.html", &context, &opts.out_dir.join(&p.file))
}

/// A page link on the index.
#[derive(Serialize)]
struct PageLink<'a> {
    file: &'a str,
    n: usize,
    first: usize,
    end: usize,
}

/// One rank's line in the index table.
#[derive(Serialize)]
struct RankRow<'a> {
    rank: u32,
    rank2: u32,
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

/// Groups the ranks of one side by their excluded-ops list.
fn excluded_groups<'a>(
    name: &'a str,
    ranks: &'a [RankSummary],
    side: fn(&RankSummary) -> &SideSummary,
) -> Vec<Excluded<'a>> {
    let mut groups: Vec<(&'a Option<Vec<String>>, Vec<u32>)> = Vec::new();
    for r in ranks {
        let ops = &side(r).excluded_ops;
        match groups.iter_mut().find(|(o, _)| *o == ops) {
            Some((_, rs)) => rs.push(r.rank),
            None => groups.push((ops, vec![r.rank])),
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
                format!(
                    "rank{} {}",
                    if rs.len() > 1 { "s" } else { "" },
                    rank_list(&rs)
                )
            };
            excluded(name, label, ops)
        })
        .collect()
}

/// Writes `index.html`: the verdict, counts per status, one table line per
/// rank (with its first diverging row and page links), excluded ops, input
/// warnings, one-sided ranks and unused overrides.
pub fn write_index(summary: &Summary, opts: &ReportOptions) -> Result<(), ReportError> {
    let (n1, n2) = (summary.name1.as_str(), summary.name2.as_str());
    let ranks = summary
        .ranks
        .iter()
        .map(|r| RankRow {
            rank: r.rank,
            rank2: r.rank2,
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
                })
                .collect(),
        })
        .collect();
    let mut excl = excluded_groups(n1, &summary.ranks, |r| &r.run1);
    excl.extend(excluded_groups(n2, &summary.ranks, |r| &r.run2));
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
    use crate::parser::parse_bytes;

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
        }
    }

    fn read(dir: &Path, file: &str) -> String {
        std::fs::read_to_string(dir.join(file)).unwrap()
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
    fn colour_scale() {
        let grey = (
            "rgb(220,220,220)".to_string(),
            "rgba(248,80,80,0.000)".to_string(),
        );
        let red = (
            "rgb(248,80,80)".to_string(),
            "rgba(248,80,80,0.150)".to_string(),
        );
        assert_eq!(diff_colour(0.0), grey);
        assert_eq!(diff_colour(1e-8), grey);
        assert_eq!(diff_colour(-1.0), grey);
        assert_eq!(diff_colour(0.1), red);
        assert_eq!(diff_colour(1.0), red);
        assert_eq!(diff_colour(f64::NAN), red);
        assert_eq!(diff_colour(f64::INFINITY), red);
        // 1e-4: t = 4/7.
        let t: f64 = 4.0 / 7.0;
        let g = (220.0 - 140.0 * t).round() as u8;
        let r = (220.0 + 28.0 * t).round() as u8;
        assert_eq!(
            diff_colour(1e-4),
            (
                format!("rgb({r},{g},{g})"),
                format!("rgba(248,80,80,{:.3})", 0.15 * t)
            )
        );
        assert!((diff_scale(1e-4) - t).abs() < 1e-12);
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
        // One <tbody> per result row, each with its anchor, two <tr> each.
        for i in 0..f.m.rows.len() {
            let anchor = format!("<tbody id=rank0-row{i} ");
            assert!(html.contains(&anchor), "anchor {i}");
        }
        assert_eq!(html.matches("<tbody id=").count(), f.m.rows.len());
        assert_eq!(html.matches("<tr>").count(), 2 * f.m.rows.len() + 2);
        assert!(html.contains("<tr><td>run_B<td colspan=9 class=ms>—</tbody>"));
        assert!(html.contains("Numerics Comparison: run&lt;A&gt; vs run_B"));
        assert!(html.contains("page 1 of 1"));
        assert!(html.contains("href=\"index.html\""));
        assert!(html.contains("<i class=exact>same op key</i>"));
        assert!(html.contains("<i class=fuzzy>fuzzy op key</i>"));
        assert!(html.contains("<b class=diff>diff</b>"));
        assert!(html.contains("<b class=match>match</b>"));
        assert!(html.contains("<b class=only1>only run&lt;A&gt;</b>"));
        assert!(html.contains("<b class=only2>only run_B</b>"));
        // Sections: the backward row is in the Backward section.
        let bwd = html.find("id=\"backward\"").unwrap();
        let rows = &f.m.rows;
        let row = rows
            .iter()
            .position(|r| r.r1().is_some_and(|i| f.t1.is_backward(i)))
            .unwrap();
        assert!(html.find(&format!("id=rank0-row{row} ")).unwrap() > bwd);
        // The differing Output hash and L2 norm cells are coloured on both
        // sides, the relative difference in run 2's title, the colours in the
        // page's rules.
        assert!(html.contains("<td class=x1>5.000000e+00<td>"));
        let cell = "<td class=x1 title=\"rel. diff 2.00e-5\">5.000100e+00<td>";
        assert!(html.contains(cell));
        let l2 = "<td class=x2 title=\"rel. diff 5.00e-5\">2.000100e+00<td>";
        assert!(html.contains(l2), "L2 norm differs too");
        let (c, bg) = diff_colour(2e-5);
        let light = light_colour(2e-5);
        assert!(html.contains(&format!(".x1{{color:{light};background:{bg} }}")));
        assert!(html.contains(&format!(".x1{{color:{c} }}")));
        // Fuzzy pair: both keys shown.
        assert!(html.contains("<span class=kt>layers.0/op_1_mul</span>"));
        assert!(html.contains("<span class=kt>layers.0/op_7_mul</span>"));
        // Producers as tooltips; absent fields as dashes, never zeros.
        assert!(html.contains(
            "<span title=\"produced by &lt;none&gt;/op_0_embedding\">2.000000e+00</span>, 3.000000e+00"
        ));
        assert!(html.contains("<td class=m>—<td>"));
        // Escaping: log text never appears raw.
        assert!(!html.contains("<script>alert"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;/op_0_mm"));
        assert!(!html.contains("\"quotes\"</td>"));
        assert!(html.contains("&quot;quotes&quot;&lt;/td&gt;.py:1"));
        assert!(!html.contains("<none>"));
        assert!(html.contains("&lt;none&gt;"));
        assert_eq!(
            html.matches("<script").count(),
            1,
            "only the page's own script"
        );
        assert_eq!(html.matches("</script").count(), 1);
        // Root cause: the add's inputs agree but its output differs.
        assert!(html.contains("<i class=\"nt origin\">origin</i>"));
        assert!(html.contains("First cause:</span> <b class=\"bd cause\">origin</b>"));
        // Excluded-op chips.
        assert!(html.contains("<span class=xchip>view</span>"));
        assert!(html.contains("<span class=xchip>(none)</span>"));
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
        assert!(p2.contains("id=rank0-row2 ") && p2.contains("id=rank0-row3 "));
        assert!(!p2.contains("id=rank0-row1 ") && !p2.contains("id=rank0-row4 "));
        assert_eq!(p3.matches("<tbody id=").count(), 1);
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
        assert!(!html.contains("<tbody id="));
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
        assert!(!html.contains("<script"));
        for k in 1..=3 {
            assert!(html.contains(&format!("href=\"rank0-page{k}.html\"")));
        }
        assert!(html.contains("ranks only in run&lt;A&gt;: 3"));
        assert!(html.contains("<span class=xchip>t</span><span class=xchip>view</span>"));
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

    /// Rendering speed on 100,000 rows (half of them differing):
    /// `cargo test --release --lib report::html -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn throughput() {
        let (mut a, mut b) = (String::new(), String::new());
        let n = 100_000;
        for i in 0..n {
            let block = |h: f64| {
                format!(
                    "[layers.{l}.feed_forward.w{w}/op_{i}_mm]\n  Shape: torch.Size([2, 64, 256]), Dtype: torch.float32\n  L2 norm: 1.810183e+02\n  Min: -2.287835e+00\n  Max: 2.287835e+00\n  Mean: {h:.6e}\n  Output hash: {h:.6e}\n  Input hashes: 2.553141e+04, 1.337287e+02\n  Input producers: layers.{l}.attention_norm/op_{i}_mul;\n  Location: llama3/model.py:152\n\n",
                    l = i / 100,
                    w = i % 3
                )
            };
            a.push_str(&block(2.663224e4));
            b.push_str(&block(if i % 2 == 0 {
                2.663224e4
            } else {
                2.663225e4 + i as f64
            }));
        }
        let f = fixture(&a, &b);
        let dir = tempfile::tempdir().unwrap();
        let opts = options(dir.path(), 2000);
        let rc = rc(&f);
        // Process CPU time (Linux), less sensitive to other load than wall time.
        let cpu = || -> f64 {
            let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
            let after = stat.rsplit(')').next().unwrap_or("");
            let f: Vec<f64> = after
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0.0))
                .collect();
            f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)
        };
        let (t0, c0) = (std::time::Instant::now(), cpu());
        let pages = crate::report::RankReport::write(&rc, &opts).unwrap().pages;
        let (el, c) = (t0.elapsed(), (cpu() - c0) / 100.0);
        eprintln!(
            "{n} rows, {} pages in {el:?} ({c:.2} s CPU): {:.0} rows/s, {:.0} rows per CPU second",
            pages.len(),
            n as f64 / el.as_secs_f64(),
            n as f64 / c
        );
    }
}

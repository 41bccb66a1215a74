//! A rank's heatmap: an inline-SVG figure of layers × op type, at the top
//! of the rank's first result page (between [`HEATMAP_START`] and
//! [`HEATMAP_END`]), which the index embeds, cut out of that page. One is
//! drawn per rank, so by a byte writer ([`render`]), not a template: at
//! 256 ranks of 300 ops, tera spent a third of the whole compare's
//! instructions on these figures. (It used to be a page of its own,
//! `rank{N}-overview.html`: one file more per rank, which at thousands of
//! ranks cost more in file creation than its bytes.)

use std::fmt::Write as _;

use super::engine;
use crate::matcher::cause::CauseKind;
use crate::matcher::compare::worst_difference;
use crate::matcher::{MatchRow, Sides, Status};
use crate::report::colour::diff_scale;
use crate::report::{files, PagePlan, RankComparison};

/// Most op types drawn as rows of a rank's heatmap; the rest share one
/// row ("other ops").
const HEAT_OPS: usize = 24;

/// Most layer columns of a heatmap; more layers are binned.
const HEAT_LAYERS: usize = 64;

/// Side of a heatmap cell, and its pitch.
const HEAT_CELL: usize = 11;
const HEAT_PITCH: usize = 12;

/// Where the heatmap starts in a rank's first result page ([`render`]).
pub(super) const HEATMAP_START: &str = "<!--actdiff:heatmap-->";

/// Where it ends.
pub(super) const HEATMAP_END: &str = "<!--/actdiff:heatmap-->";

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

/// One drawn cell: where it is, what it aggregates, its row label and
/// column, and the result row it links to (page, row), if that row is on
/// a page. Its class, title and link are written by [`render`].
struct HeatCell<'a> {
    x: usize,
    y: usize,
    agg: &'a HeatAgg,
    op: &'a str,
    column: usize,
    link: Option<(usize, usize)>,
}

struct HeatLabel {
    x: usize,
    y: usize,
    t: String,
}

/// The heatmap of one rank.
struct HeatmapCtx<'a> {
    rank: u32,
    width: usize,
    height: usize,
    cell: usize,
    cols: Columns,
    cells: Vec<HeatCell<'a>>,
    ylabels: Vec<HeatLabel>,
    xlabels: Vec<HeatLabel>,
    /// Rows drawn, diverging rows.
    rows: u64,
    diverging: u64,
    /// "layers 0–3 per column" when binned ("" otherwise).
    binned: String,
}

/// The relative difference of a paired row, result row `index`: its
/// worst difference ([`worst_difference`], under the tolerance that judged
/// it), the one rule root cause's largest difference uses too.
fn row_rel_diff(rc: &RankComparison<'_>, index: usize, row: &MatchRow) -> Option<f64> {
    let Sides::Both(i, j) = row.sides() else {
        return None;
    };
    let m = rc.matches;
    let opts = m.row_policy(rc.t1, rc.t2, index).opts;
    worst_difference(rc.t1, i, rc.t2, j, &opts, m.compared).map(|w| w.rel)
}

/// Writes the heatmap colour class of a cell: `h0` (all rows agree),
/// `h1`..`h8` (worst relative difference), `hn` (NaN or Inf), `ho`
/// (one-sided or missing rows only); ` o` added when the cell holds an
/// origin or entry.
fn heat_class(o: &mut String, a: &HeatAgg) {
    if a.diverging == 0 {
        o.push_str("h0");
    } else if a.nonfinite {
        o.push_str("hn");
    } else if a.worst < 0.0 {
        o.push_str("ho");
    } else {
        let _ = write!(o, "h{}", 1 + (diff_scale(a.worst) * 7.0).round() as u32);
    }
    if a.causes > 0 {
        o.push_str(" o");
    }
}

/// Where each result row sits in the heatmap, before binning.
struct RowPlaces<'t> {
    /// Each result row's (layer or [`NO_LAYER`], op type id).
    at: Vec<(u32, u32)>,
    /// Op type names by id, in result-row order of first sight.
    op_names: Vec<&'t [u8]>,
    /// Result rows per op type id.
    op_counts: Vec<u64>,
    /// The highest layer ([`crate::parser::OpTable::layer`]) of any row.
    max_layer: Option<u64>,
}

/// A row whose key names no layer.
const NO_LAYER: u32 = u32::MAX;

/// Each row's layer and op type, from the tables (read from the keys at
/// parse time); op types numbered in result-row order of first sight
/// (the two runs' op type tables are merged by name).
fn row_places<'t>(rc: &RankComparison<'t>) -> RowPlaces<'t> {
    const UNSEEN: u32 = u32::MAX;
    let mut p = RowPlaces {
        at: Vec::with_capacity(rc.matches.rows.len()),
        op_names: Vec::new(),
        op_counts: Vec::new(),
        max_layer: None,
    };
    let mut op_ids: ahash::AHashMap<&[u8], u32> = ahash::AHashMap::new();
    let mut seen: [Vec<u32>; 2] = [
        vec![UNSEEN; rc.t1.op_types()],
        vec![UNSEEN; rc.t2.op_types()],
    ];
    let mut id_of = |op: &'t [u8], p: &mut RowPlaces<'t>| -> u32 {
        let n = p.op_names.len() as u32;
        let id = *op_ids.entry(op).or_insert(n);
        if id == n {
            p.op_names.push(op);
            p.op_counts.push(0);
        }
        id
    };
    for row in &rc.matches.rows {
        let (side, r) = row.sides().first();
        let t = if side == 0 { rc.t1 } else { rc.t2 };
        let layer = t.layer(r);
        if let Some(l) = layer {
            let l = u64::from(l);
            p.max_layer = Some(p.max_layer.map_or(l, |x| x.max(l)));
        }
        let ty = t.op_type(r) as usize;
        if seen[side][ty] == UNSEEN {
            seen[side][ty] = id_of(t.op_name(ty as u32), &mut p);
        }
        let id = seen[side][ty];
        p.op_counts[id as usize] += 1;
        p.at.push((layer.unwrap_or(NO_LAYER), id));
    }
    p
}

/// The heatmap's rows: the [`HEAT_OPS`] most frequent op types (in
/// first-seen order), then "other ops" when there are more. Returns the
/// row labels and, per op type id, its row.
fn op_rows(p: &RowPlaces<'_>) -> (Vec<String>, Vec<usize>) {
    let n = p.op_names.len();
    let mut by_count: Vec<usize> = (0..n).collect();
    by_count.sort_by(|a, b| p.op_counts[*b].cmp(&p.op_counts[*a]).then(a.cmp(b)));
    let mut kept: Vec<usize> = by_count.iter().copied().take(HEAT_OPS).collect();
    kept.sort_unstable();
    let mut labels: Vec<String> = kept
        .iter()
        .map(|i| {
            let n = String::from_utf8_lossy(p.op_names[*i]);
            if n.is_empty() {
                "(no op)".to_string()
            } else {
                n.into_owned()
            }
        })
        .collect();
    if n > HEAT_OPS {
        labels.push("other ops".into());
    }
    let mut row_of = vec![labels.len().saturating_sub(1); n];
    for (y, i) in kept.iter().enumerate() {
        row_of[*i] = y;
    }
    (labels, row_of)
}

/// The heatmap's columns: "·" (no layer), then layers, binned to at most
/// [`HEAT_LAYERS`].
#[derive(Clone, Copy)]
struct Columns {
    /// Layers (the highest layer + 1).
    layers: usize,
    /// Layers per column.
    bin: usize,
    /// Columns, the no-layer one included.
    n: usize,
}

impl Columns {
    fn new(max_layer: Option<u64>) -> Columns {
        let layers = max_layer.map_or(0, |l| l as usize + 1);
        let bin = layers.div_ceil(HEAT_LAYERS).max(1);
        Columns {
            layers,
            bin,
            n: 1 + layers.div_ceil(bin),
        }
    }
    /// The column of a row's layer.
    fn of(&self, layer: u32) -> usize {
        if layer == NO_LAYER {
            0
        } else {
            1 + layer as usize / self.bin
        }
    }
    /// Column `x`'s label: `·`, `3`, or `0–3` when binned.
    fn label(&self, x: usize) -> String {
        if x == 0 {
            "·".into()
        } else if self.bin == 1 {
            (x - 1).to_string()
        } else {
            format!(
                "{}–{}",
                (x - 1) * self.bin,
                ((x * self.bin).min(self.layers)) - 1
            )
        }
    }
    /// Writes what column `x` holds, for a cell's title.
    fn what(&self, o: &mut String, x: usize) {
        if x == 0 {
            o.push_str("no layer");
        } else if self.bin == 1 {
            let _ = write!(o, "layer {}", x - 1);
        } else {
            let _ = write!(o, "layers {}", self.label(x));
        }
    }
}

/// The cells' aggregates, row-major (`y * cols.n + x`), and the rows drawn
/// and diverging in all.
fn aggregate(
    rc: &RankComparison<'_>,
    places: &RowPlaces<'_>,
    row_of: &[usize],
    cols: Columns,
    nrows: usize,
) -> (Vec<HeatAgg>, u64, u64) {
    let m = rc.matches;
    let mut agg = vec![HeatAgg::default(); cols.n * nrows];
    let (mut total, mut diverging) = (0u64, 0u64);
    for (index, (row, (layer, op))) in m.rows.iter().zip(&places.at).enumerate() {
        let a = &mut agg[row_of[*op as usize] * cols.n + cols.of(*layer)];
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
            Some(
                CauseKind::Origin
                    | CauseKind::Entry
                    | CauseKind::OneSided
                    | CauseKind::ViaCollective
            )
        ) {
            a.causes += 1;
            a.first_cause.get_or_insert(index);
        }
        if row.has(crate::matcher::ROW_NONFINITE1) || row.has(crate::matcher::ROW_NONFINITE2) {
            a.nonfinite = true;
        }
        if let Some(rd) = row_rel_diff(rc, index, row) {
            a.worst = a.worst.max(rd);
        } else if row.status == Status::Diff {
            a.worst = a.worst.max(0.0);
        }
    }
    (agg, total, diverging)
}

/// Writes a cell's title, escaped: where it is (column `x`, row label
/// `op`), how many of its rows diverge, the worst difference and its
/// origins and entries.
fn cell_title(o: &mut String, a: &HeatAgg, cols: Columns, x: usize, op: &str) {
    cols.what(o, x);
    let _ = write!(o, " · {}: ", engine::Esc(op));
    if a.diverging == 0 {
        let _ = write!(
            o,
            "{} row{} agree{}",
            a.rows,
            if a.rows == 1 { "" } else { "s" },
            if a.rows == 1 { "s" } else { "" }
        );
    } else {
        let _ = write!(o, "{} of {} rows diverge", a.diverging, a.rows);
    }
    if a.nonfinite {
        o.push_str(" · NaN/Inf");
    } else if a.worst > 0.0 {
        let _ = write!(o, " · worst rel. diff {:.1e}", a.worst);
    }
    if a.causes > 0 {
        let _ = write!(
            o,
            " · {} origin{}/entr{}",
            a.causes,
            if a.causes == 1 { "" } else { "s" },
            if a.causes == 1 { "y" } else { "ies" }
        );
    }
}

/// Where the heatmap's cells start: after the row labels, below the
/// column labels.
#[derive(Clone, Copy)]
struct Origin {
    left: usize,
    top: usize,
}

/// The drawn cells: every cell with rows, linking to its first origin or
/// entry, else its first diverging row, when that row is on a page.
fn cells<'a>(
    plan: &PagePlan,
    agg: &'a [HeatAgg],
    cols: Columns,
    labels: &'a [String],
    at: Origin,
) -> Vec<HeatCell<'a>> {
    let nrows = labels.len().max(1);
    let mut cells = Vec::new();
    for y in 0..nrows {
        for x in 0..cols.n {
            let a = &agg[y * cols.n + x];
            if a.rows == 0 {
                continue;
            }
            let op = labels.get(y).map(String::as_str).unwrap_or("");
            let link = a
                .first_cause
                .or(a.first_div)
                .and_then(|i| plan.page_of(i).map(|p| (p, i)));
            cells.push(HeatCell {
                x: at.left + x * HEAT_PITCH,
                y: at.top + y * HEAT_PITCH,
                agg: a,
                op,
                column: x,
                link,
            });
        }
    }
    cells
}

/// Row labels, cut to 24 characters.
fn row_labels(labels: &[String], at: Origin) -> Vec<HeatLabel> {
    labels
        .iter()
        .enumerate()
        .map(|(y, t)| HeatLabel {
            x: at.left - 4,
            y: at.top + y * HEAT_PITCH + HEAT_CELL - 2,
            t: if t.chars().count() > 24 {
                t.chars().take(23).chain(['…']).collect()
            } else {
                t.clone()
            },
        })
        .collect()
}

/// Column labels: every column whose label fits beside the previous one.
fn column_labels(cols: Columns, at: Origin) -> Vec<HeatLabel> {
    let cx = |x: usize| at.left + x * HEAT_PITCH + HEAT_CELL / 2;
    let width = |t: &str| 7 * t.chars().count();
    let label = |x: usize| HeatLabel {
        x: cx(x),
        y: at.top - 4,
        t: cols.label(x),
    };
    // The layer columns are labelled at one stride, the smallest at which
    // the widest label does not touch the next: evenly spaced layers,
    // never `8 9 _ 11` where a wider label left out one in between.
    let widest = (1..cols.n)
        .map(|x| width(&cols.label(x)))
        .max()
        .unwrap_or(0);
    let stride = (widest + 4).div_ceil(HEAT_PITCH).max(1);
    let layers: Vec<HeatLabel> = (1..cols.n).step_by(stride).map(label).collect();
    // The no-layer column's `·` where it does not touch the first layer's.
    let dot = label(0);
    let clear = layers
        .first()
        .is_none_or(|l| dot.x + width(&dot.t) / 2 + 2 <= l.x - width(&l.t) / 2);
    clear.then_some(dot).into_iter().chain(layers).collect()
}

/// Rank `rc`'s heatmap, the figure between [`HEATMAP_START`] and
/// [`HEATMAP_END`] (both included) that its first result page shows and
/// the index embeds: an inline SVG of layers
/// ([`crate::parser::OpTable::layer`]: `layers.N`, `blocks.N`, any repeated
/// block list; rows without one in the first column) × op type
/// (from [`crate::matcher::keys::module_and_op`]), each cell coloured by the
/// worst relative difference of its rows, cells with an origin or entry
/// outlined, each diverging cell linking to its first origin or entry, else
/// its first diverging row on the pages `plan` holds (see
/// [`super::write_index`]).
pub(super) fn render(rc: &RankComparison<'_>, plan: &PagePlan) -> String {
    let places = row_places(rc);
    let (labels, row_of) = op_rows(&places);
    let cols = Columns::new(places.max_layer);
    let nrows = labels.len().max(1);
    let (agg, rows, diverging) = aggregate(rc, &places, &row_of, cols, nrows);
    let label_w = 8 + 7 * labels
        .iter()
        .map(|l| l.chars().count().min(24))
        .max()
        .unwrap_or(4);
    let at = Origin {
        left: label_w,
        top: 16,
    };
    let ctx = HeatmapCtx {
        rank: rc.rank1,
        width: label_w + cols.n * HEAT_PITCH + 4,
        height: at.top + nrows * HEAT_PITCH + 2,
        cell: HEAT_CELL,
        cols,
        cells: cells(plan, &agg, cols, &labels, at),
        ylabels: row_labels(&labels, at),
        xlabels: column_labels(cols, at),
        rows,
        diverging,
        binned: if cols.bin > 1 {
            format!("{} layers per column", cols.bin)
        } else {
            String::new()
        },
    };
    figure(&ctx)
}

/// The heatmap of `ctx`: an SVG figure with its caption between
/// [`HEATMAP_START`] and [`HEATMAP_END`], every text HTML-escaped as the
/// templates' text is ([`engine::escape`]).
fn figure(ctx: &HeatmapCtx<'_>) -> String {
    let esc = engine::Esc;
    let mut o = String::with_capacity(256 + ctx.cells.len() * 160);
    // `write!` into a String cannot fail.
    let _ = write!(
        o,
        "{HEATMAP_START}\n<figure class=heatmap id=\"heat-{rank}\"><svg class=heat xmlns=\"http://www.w3.org/2000/svg\" \
         width={w} height={h} viewBox=\"0 0 {w} {h}\" role=img \
         aria-label=\"rank {rank}: worst relative difference per layer and op type\">\n",
        rank = ctx.rank,
        w = ctx.width,
        h = ctx.height,
    );
    for (class, labels) in [("xl", &ctx.xlabels), ("yl", &ctx.ylabels)] {
        for l in labels {
            let _ = write!(
                o,
                "<text class={class} x={} y={}>{}</text>",
                l.x,
                l.y,
                esc(&l.t)
            );
        }
        o.push('\n');
    }
    for c in &ctx.cells {
        // Page files and anchors are made of numbers: nothing to escape.
        if let Some((page, index)) = c.link {
            let _ = write!(
                o,
                "<a href=\"{}#{}\">",
                files::page(ctx.rank, page),
                files::anchor(ctx.rank, index)
            );
        }
        let _ = write!(
            o,
            "<rect x={} y={} width={cell} height={cell} class=\"",
            c.x,
            c.y,
            cell = ctx.cell,
        );
        heat_class(&mut o, c.agg);
        o.push_str("\"><title>");
        cell_title(&mut o, c.agg, ctx.cols, c.column, c.op);
        o.push_str("</title></rect>");
        if c.link.is_some() {
            o.push_str("</a>");
        }
        o.push('\n');
    }
    let binned = if ctx.binned.is_empty() {
        String::new()
    } else {
        format!(" ({})", esc(&ctx.binned))
    };
    let _ = write!(
        o,
        "</svg>\n<figcaption class=mut>rank {rank}: {d} of {r} rows diverge · columns: layers{binned}, \
         “·” = no layer in the key · rows: op types · colour: worst relative difference · \
         outlined: origin or entry · click a cell to open its first origin/entry or diverging row\n\
         <span class=legend><i class=h0></i>agree <i class=h1></i>≤1e-8 <i class=h3></i>1e-6 \
         <i class=h5></i>1e-4 <i class=h7></i>1e-2 <i class=h8></i>≥0.1 <i class=hn></i>NaN/Inf \
         <i class=ho></i>one-sided</span></figcaption></figure>\n{HEATMAP_END}\n",
        rank = ctx.rank,
        d = ctx.diverging,
        r = ctx.rows,
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layer labels are evenly spaced and never touch: 12 layers
    /// (two-digit labels) every other layer, not `8 9 _ 11`; the `·` of the
    /// no-layer column where it fits.
    #[test]
    fn layer_labels_are_evenly_spaced_and_do_not_touch() {
        let at = Origin { left: 40, top: 16 };
        for (max_layer, first, step) in [
            (Some(11), "0", 2),
            (Some(5), "0", 1),
            (Some(199), "0–3", 0),
            (None, "", 0),
        ] {
            let cols = Columns::new(max_layer);
            let labels = column_labels(cols, at);
            let texts: Vec<&str> = labels.iter().map(|l| l.t.as_str()).collect();
            let layers: Vec<&HeatLabel> = labels.iter().filter(|l| l.t != "·").collect();
            if max_layer.is_none() {
                assert_eq!(texts, ["·"]);
                continue;
            }
            assert_eq!(layers[0].t, first, "{texts:?}");
            let gaps: Vec<usize> = layers.windows(2).map(|w| w[1].x - w[0].x).collect();
            assert!(gaps.windows(2).all(|g| g[0] == g[1]), "{texts:?}: {gaps:?}");
            for w in labels.windows(2) {
                let right = w[0].x + 7 * w[0].t.chars().count() / 2;
                let left = w[1].x - 7 * w[1].t.chars().count() / 2;
                assert!(right < left, "{texts:?}: {} touches {}", w[0].t, w[1].t);
            }
            if step > 0 {
                let numbers: Vec<usize> = layers.iter().map(|l| l.t.parse().unwrap()).collect();
                assert!(numbers.windows(2).all(|n| n[1] - n[0] == step), "{texts:?}");
                assert_eq!(texts[0], "·", "{texts:?}");
            }
            if max_layer == Some(11) {
                assert!(texts.contains(&"10"), "{texts:?}");
            }
        }
    }
}

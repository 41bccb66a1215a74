//! The index page of a step-series comparison (`templates/steps.html`):
//! the verdict, the two runs' loss curves, and a step × rank strip whose
//! cells link to each step's own report; a diverging cell is shaded by its
//! largest gating relative difference ([`gate_shade`]). At many ranks the
//! strip shows blocks of ranks, and every rank's row is in parts loaded on
//! demand (the single-step index's `ranks-K.js` machinery,
//! `templates/ranks.js`).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::engine;
use super::index::INDEX_FULL_RANKS;
use crate::report::reasons::Reason;
use crate::report::steps::{StepResult, StepSeries};
use crate::report::{files, RankSummary, ReportError, Summary};

/// The most rows of the series index's strip above [`INDEX_FULL_RANKS`]
/// ranks: the ranks are drawn in blocks of consecutive ranks, this many
/// blocks at most.
pub const STRIP_BLOCKS: usize = 64;

/// A verdict line of the index: its words, and the report it names
/// (`(report: step_5/index.html)`, a link here: trial 22 L2), else "".
#[derive(Serialize)]
struct VerdictLine {
    text: String,
    report: String,
}

impl VerdictLine {
    fn of(v: &Reason) -> VerdictLine {
        if let Reason::FirstDivergingStep { report, .. } = v {
            // The sentence without its "(report: …)": the page links it.
            let mut bare = v.clone();
            if let Reason::FirstDivergingStep { report, .. } = &mut bare {
                report.clear();
            }
            return VerdictLine {
                text: bare.to_string(),
                report: report.clone(),
            };
        }
        VerdictLine {
            text: v.to_string(),
            report: String::new(),
        }
    }
}

#[derive(Serialize)]
struct View<'a> {
    name1: &'a str,
    name2: &'a str,
    verdict: Vec<VerdictLine>,
    steps: Vec<StepHead>,
    /// One row per rank, or (above [`INDEX_FULL_RANKS`] ranks) per block
    /// of consecutive ranks.
    rows: Vec<StripRow>,
    /// Ranks per row when the strip is drawn in blocks; 0 when one row is
    /// one rank.
    block: usize,
    /// Compared ranks.
    ranks: usize,
    /// The strip of every rank in parts ([`files::rank_table`]) when the
    /// strip is drawn in blocks: file names and each part's first rank.
    parts: Vec<String>,
    starts: Vec<u32>,
    loss_svg: String,
    results: Vec<ResultLine>,
    /// Steps compared.
    compared: usize,
    /// What the pages leave out ([`super::left_out_note`]; "" when
    /// nothing).
    left_out: String,
    /// The series' exit status.
    exit_status: i32,
    /// The steps `--steps` left out ("" when none).
    not_selected: String,
    /// The series' warnings (its steps' too, each with its step), at most
    /// [`INDEX_WARNINGS`]; the rest counted.
    warnings: Vec<String>,
    more_warnings: usize,
}

/// The most warnings the series index lists (all are in `summary.json`).
const INDEX_WARNINGS: usize = 50;

#[derive(Serialize)]
struct StepHead {
    step: u64,
    first: bool,
    /// For a step one run only has: `only in <run>` (its column is grey,
    /// not compared); "" for a compared step.
    only: String,
}

#[derive(Serialize)]
struct StripRow {
    /// The row's label: `7`, or a block's ranks `64–127`.
    label: String,
    /// Its first rank (a block's label shows that rank in the strip of
    /// every rank).
    rank: u32,
    cells: Vec<Cell>,
}

#[derive(Serialize)]
struct Cell {
    step: u64,
    /// `gate`, `soft`, `ok` or `none`.
    class: &'static str,
    /// A diverging cell's background (numbers only), "" otherwise.
    style: String,
    title: String,
    /// The rank's first divergence on its page in the step's folder when
    /// the step has the rank's pages (the first diverging step), else the
    /// step's report ("" for a step one run only has: none).
    link: String,
}

/// A cell's state, worst last: not compared, agrees, differs without
/// gating, gating rows.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum State {
    None,
    Ok,
    Soft,
    Gate,
}

impl State {
    fn of(r: Option<&RankSummary>) -> State {
        match r {
            None => State::None,
            Some(r) if r.first_divergence.is_some() => State::Gate,
            Some(r) if r.counts.diverging() > 0 => State::Soft,
            Some(_) => State::Ok,
        }
    }
    fn class(self) -> &'static str {
        match self {
            State::None => "none",
            State::Ok => "ok",
            State::Soft => "soft",
            State::Gate => "gate",
        }
    }
}

/// The words of one rank's cell at one step.
fn cell_title(r: Option<&RankSummary>) -> String {
    match (State::of(r), r) {
        (State::Gate, Some(r)) => {
            let c = &r.root_causes;
            let largest = match (c.largest_rel_diff, c.largest_diff_field) {
                (Some(d), Some(f)) => format!("; largest relative difference {d:.1e} ({f})"),
                _ if c.digests_only => {
                    "; only their digests differ, below every printed digit".to_string()
                }
                _ => String::new(),
            };
            let n = r.counts.gating;
            format!("{n} gating row{}{largest}", if n == 1 { "" } else { "s" })
        }
        (State::Soft, Some(r)) => {
            let n = r.counts.diverging();
            format!(
                "{n} row{} differ{}, none gating",
                if n == 1 { "" } else { "s" },
                if n == 1 { "s" } else { "" }
            )
        }
        (State::Ok, _) => "agrees".to_string(),
        _ => "not compared".to_string(),
    }
}

/// The link of every cell of step `step`: the step's own report.
fn step_link(step: u64) -> String {
    format!("{}{step}/{}", files::STEP_DIR_PREFIX, files::INDEX)
}

/// One rank's cell at one step (`only`: the step is one run's only, in
/// these words; not compared and no report).
fn rank_cell(step: u64, r: Option<&RankSummary>, only: Option<&str>) -> Cell {
    if let Some(words) = only {
        return one_sided_cell(step, words);
    }
    let state = State::of(r);
    Cell {
        step,
        class: state.class(),
        style: match (state, r) {
            (State::Gate, Some(r)) => gate_shade(rank_difference(r)),
            _ => String::new(),
        },
        title: cell_title(r),
        link: r.and_then(rank_link).unwrap_or_else(|| step_link(step)),
    }
}

/// Where a rank's cell leads when the step has the rank's pages (trial
/// 29: every cell led to the step's index): its first divergence, else
/// its first page; `None` without pages. Links are the series' (already
/// inside `step_S/`).
fn rank_link(r: &RankSummary) -> Option<String> {
    if let Some(f) = r.first_divergence.as_ref().filter(|f| !f.page.is_empty()) {
        return Some(format!("{}#{}", f.page, f.anchor));
    }
    r.pages.first().map(|p| p.file.clone())
}

/// The cell of a step one run only has (`words`: `only in A`): grey, not
/// compared, no report to link.
fn one_sided_cell(step: u64, words: &str) -> Cell {
    Cell {
        step,
        class: State::None.class(),
        style: String::new(),
        title: format!("{words}: not compared"),
        link: String::new(),
    }
}

/// A block's cell at one step (`cells`: its ranks' summaries there): the
/// worst of its ranks' cells, a gating one shaded by the largest
/// difference of any of them, and how many ranks are in each state
/// (`only`: the step is one run's only, in these words).
fn block_cell(step: u64, cells: &[Option<&RankSummary>], only: Option<&str>) -> Cell {
    if let Some(words) = only {
        return one_sided_cell(step, words);
    }
    let mut n = [0usize; 4];
    let mut worst = State::None;
    let mut largest: Option<f64> = None;
    let mut unnumbered = false;
    for r in cells {
        let st = State::of(*r);
        n[st as usize] += 1;
        worst = worst.max(st);
        if let (State::Gate, Some(r)) = (st, r) {
            match rank_difference(r) {
                Some(d) => largest = Some(largest.map_or(d, |l: f64| l.max(d))),
                None => unnumbered = true,
            }
        }
    }
    let mut said = Vec::new();
    for (st, words) in [
        (State::Gate, "with gating rows"),
        (State::Soft, "differ without gating"),
        (State::Ok, "agree"),
        (State::None, "not compared"),
    ] {
        if n[st as usize] > 0 {
            said.push(format!("{} {words}", n[st as usize]));
        }
    }
    let mut title = said.join(", ");
    if let Some(d) = largest {
        title.push_str(&format!("; largest relative difference {d:.1e}"));
    }
    Cell {
        step,
        class: worst.class(),
        style: if worst == State::Gate {
            gate_shade(if unnumbered { None } else { largest })
        } else {
            String::new()
        },
        title,
        link: step_link(step),
    }
}

/// One rank's row of the strip of every rank (a line of a
/// [`files::rank_table`] part, drawn by `templates/steps.html`): `r` its
/// rank, `c` one cell per step, `[class letter (g, s, o, n), title,
/// background, link]` (`o` and `n` without title and background: "agrees",
/// "not compared"; the link, where the rank has pages at that step (the
/// first diverging step), to its first divergence or first page, as
/// [`rank_cell`]'s: without it, the step's report).
#[derive(Serialize)]
struct StripLine {
    r: u32,
    c: Vec<Vec<String>>,
}

fn strip_line(rank: u32, cells: &[Option<&RankSummary>]) -> StripLine {
    StripLine {
        r: rank,
        c: cells
            .iter()
            .map(|r| match State::of(*r) {
                State::Gate => vec![
                    "g".into(),
                    cell_title(*r),
                    r.map(|r| gate_shade(r.root_causes.largest_rel_diff))
                        .unwrap_or_default()
                        .trim_start_matches("background:")
                        .to_string(),
                ],
                State::Soft => vec!["s".into(), cell_title(*r)],
                State::Ok => vec!["o".into()],
                State::None => vec!["n".into()],
            })
            .zip(cells)
            .map(|(mut c, r)| {
                if let Some(link) = r.and_then(rank_link) {
                    c.resize(3, String::new());
                    c.push(link);
                }
                c
            })
            .collect(),
    }
}

/// The largest gating relative difference of rank summary `r` to shade
/// its cell by: none for differences without a number (a one-sided row:
/// darkest), zero when only digests differ (below every printed digit:
/// lightest).
fn rank_difference(r: &RankSummary) -> Option<f64> {
    let c = &r.root_causes;
    c.largest_rel_diff.or(c.digests_only.then_some(0.0))
}

/// The background of a diverging cell of largest gating relative
/// difference `rd` (`None`: not a number, e.g. a one-sided row): on the
/// report's colour scale ([`crate::report::colour::diff_scale`], 1e-8 to
/// 1e-1 and above), from light red to dark red; dark red without a number.
pub fn gate_shade(rd: Option<f64>) -> String {
    let t = rd.map_or(1.0, crate::report::colour::diff_scale);
    let mix = |light: f64, dark: f64| (light + (dark - light) * t).round() as u8;
    format!(
        "background:rgb({},{},{})",
        mix(250.0, 150.0),
        mix(190.0, 0.0),
        mix(190.0, 0.0)
    )
}

/// Writes the series index of `s` (a [`Summary`] with its
/// [`StepSeries`]) to `path`. Up to `INDEX_FULL_RANKS` (64) compared ranks
/// its strip has one row per rank; above, one row per block of
/// consecutive ranks (at most `STRIP_BLOCKS` (64) rows, each cell the worst
/// of its ranks'), and the strip of every rank in parts
/// ([`files::rank_table`], beside `path`) that the page loads on demand
/// and searches by rank, as the single-step index does its rank table: the
/// page's size does not grow with the rank count.
///
/// # Errors
/// [`ReportError`] when the page cannot be rendered or written.
pub fn write_steps_index(s: &Summary, path: &Path) -> Result<(), ReportError> {
    let empty = StepSeries::default();
    let series = s.series.as_ref().unwrap_or(&empty);
    let mut ranks: Vec<u32> = s.ranks.iter().map(|r| r.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    // The strip's columns: the compared steps and the steps one run only
    // has (grey: a run stopped early by its baseline check has fewer).
    let mut only: HashMap<u64, String> = HashMap::new();
    for (steps, name) in [
        (&series.steps_only1, &s.name1),
        (&series.steps_only2, &s.name2),
    ] {
        for st in steps {
            only.insert(*st, format!("only in {name}"));
        }
    }
    let mut columns: Vec<u64> = series.steps.iter().chain(only.keys()).copied().collect();
    columns.sort_unstable();
    columns.dedup();
    let only_at = |st: &u64| only.get(st).map(String::as_str);
    let at: HashMap<(u32, u64), &RankSummary> = s
        .ranks
        .iter()
        .filter_map(|r| Some(((r.rank, r.step?), r)))
        .collect();
    // Each rank's summary at each step, by rank.
    let grid: Vec<Vec<Option<&RankSummary>>> = ranks
        .iter()
        .map(|rank| {
            columns
                .iter()
                .map(|st| at.get(&(*rank, *st)).copied())
                .collect()
        })
        .collect();
    let (rows, block, parts, starts) = if ranks.len() <= INDEX_FULL_RANKS {
        let rows = ranks
            .iter()
            .zip(&grid)
            .map(|(rank, cells)| StripRow {
                label: rank.to_string(),
                rank: *rank,
                cells: columns
                    .iter()
                    .zip(cells)
                    .map(|(st, r)| rank_cell(*st, *r, only_at(st)))
                    .collect(),
            })
            .collect();
        (rows, 0, Vec::new(), Vec::new())
    } else {
        let block = ranks.len().div_ceil(STRIP_BLOCKS);
        let rows = ranks
            .chunks(block)
            .zip(grid.chunks(block))
            .map(|(rs, cells)| StripRow {
                label: format!("{}–{}", rs[0], rs[rs.len() - 1]),
                rank: rs[0],
                cells: columns
                    .iter()
                    .enumerate()
                    .map(|(k, st)| {
                        let column: Vec<Option<&RankSummary>> =
                            cells.iter().map(|c| c[k]).collect();
                        block_cell(*st, &column, only_at(st))
                    })
                    .collect(),
            })
            .collect();
        let lines: Vec<(u32, StripLine)> = ranks
            .iter()
            .zip(&grid)
            .map(|(rank, cells)| (*rank, strip_line(*rank, cells)))
            .collect();
        let dir = path.parent().unwrap_or(Path::new("."));
        let (parts, starts) = super::index::write_table_parts(&lines, dir)?;
        (rows, block, parts, starts)
    };
    let view = View {
        name1: &s.name1,
        name2: &s.name2,
        verdict: s.verdict.iter().map(VerdictLine::of).collect(),
        steps: columns
            .iter()
            .map(|st| StepHead {
                step: *st,
                first: Some(*st) == series.first_diverging_step,
                only: only_at(st).unwrap_or_default().to_string(),
            })
            .collect(),
        rows,
        block,
        ranks: ranks.len(),
        parts,
        starts,
        loss_svg: loss_svg(series),
        results: result_lines(&series.step_results),
        compared: series.step_results.len(),
        left_out: super::left_out_note(&s.ranks),
        exit_status: s.exit_status,
        not_selected: crate::report::steps::not_selected_note(series).unwrap_or_default(),
        warnings: s
            .warnings
            .iter()
            .take(INDEX_WARNINGS)
            .map(ToString::to_string)
            .collect(),
        more_warnings: s.warnings.len().saturating_sub(INDEX_WARNINGS),
    };
    engine::render_file("steps.html", &view, path)
}

/// A line of the index's list of steps: one step, or a run of agreeing
/// steps folded into one line.
#[derive(Serialize)]
struct ResultLine {
    /// "step 5", or "steps 1–149".
    label: String,
    /// The (first) step's report.
    report: String,
    /// Its verdict, or, for a folded run, "each agrees (N steps; …)".
    verdict: String,
}

/// At least this many consecutive agreeing steps are one line of the
/// index's list (trial 30: 149 lines of "no divergence" before the first
/// diverging step of a 200-step series).
const FOLD_AGREEING: usize = 3;

/// The index's list of steps: each step that does not agree on a line of
/// its own, runs of [`FOLD_AGREEING`] or more agreeing steps folded.
fn result_lines(results: &[StepResult]) -> Vec<ResultLine> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < results.len() {
        let agrees = |r: &StepResult| r.exit_status == crate::exit_codes::OK;
        let mut j = i;
        while j < results.len() && agrees(&results[j]) {
            j += 1;
        }
        if j - i >= FOLD_AGREEING {
            let (a, b) = (&results[i], &results[j - 1]);
            out.push(ResultLine {
                label: format!("steps {}–{}", a.step, b.step),
                report: a.report.clone(),
                verdict: format!(
                    "each agrees ({} steps; each step's own report: step_S/index.html)",
                    j - i
                ),
            });
            i = j;
            continue;
        }
        let r = &results[i];
        out.push(ResultLine {
            label: format!("step {}", r.step),
            report: r.report.clone(),
            verdict: crate::report::reasons::join(&r.verdict, "; "),
        });
        i += 1;
    }
    out
}

/// The two runs' loss curves over the compared steps as inline SVG (only
/// numbers, no text from the logs), the first diverging step marked;
/// empty when no loss was recorded.
pub fn loss_svg(series: &StepSeries) -> String {
    // The compared steps' losses and those of the steps one run only has,
    // in step order.
    let all_losses = series
        .step_results
        .iter()
        .map(|r| (r.step, (r.loss1, r.loss2)))
        .chain(
            series
                .one_sided_losses
                .iter()
                .map(|l| (l.step, (l.loss1, l.loss2))),
        )
        .collect::<std::collections::BTreeMap<u64, (Option<f64>, Option<f64>)>>();
    let pts = |second: bool| -> Vec<(u64, f64)> {
        all_losses
            .iter()
            .filter_map(|(s, l)| {
                let v = if second { l.1 } else { l.0 };
                v.filter(|x| x.is_finite()).map(|x| (*s, x))
            })
            .collect()
    };
    let (l1, l2) = (pts(false), pts(true));
    // NaN and Inf losses are marked above the plot, each run on its own
    // line (trial 65 F3: a run that blew up was drawn up to its last
    // finite loss, without a word).
    let nonfinite = |second: bool| -> Vec<(u64, f64)> {
        all_losses
            .iter()
            .filter_map(|(s, l)| {
                let v = if second { l.1 } else { l.0 };
                v.filter(|x| !x.is_finite()).map(|x| (*s, x))
            })
            .collect()
    };
    let (n1, n2) = (nonfinite(false), nonfinite(true));
    let all: Vec<&(u64, f64)> = l1.iter().chain(&l2).collect();
    if all.is_empty() {
        return String::new();
    }
    // The plot area, with room on the left for the loss labels and below
    // for the step labels and the caption.
    let (w, hgt) = (640.0, 220.0);
    let (left, right, top, bottom) = (84.0, 16.0, 18.0, 44.0);
    let steps_drawn = || {
        all.iter()
            .map(|p| p.0)
            .chain(n1.iter().chain(&n2).map(|p| p.0))
    };
    let smin = steps_drawn().min().unwrap_or(0);
    let smax = steps_drawn().max().unwrap_or(0);
    let lmin = all.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let lmax = all.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let scale = |v: f64, lo: f64, hi: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    let x = |s: f64| left + (w - left - right) * scale(s, smin as f64, smax as f64);
    // A loss that falls by a factor of 10 or more is drawn on a log
    // scale (trial 30: from 20.7 to 0.04 on a linear axis, a 5 %
    // difference at 0.1 could not be seen).
    let log = lmin > 0.0 && lmax >= 10.0 * lmin;
    let f = |v: f64| if log { v.log10() } else { v };
    let y = |l: f64| hgt - bottom - (hgt - top - bottom) * scale(f(l), f(lmin), f(lmax));
    let line = |p: &[(u64, f64)]| {
        p.iter()
            .map(|(s, l)| format!("{:.1},{:.1}", x(*s as f64), y(*l)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut svg =
        format!("<svg class=loss width={w} height={hgt} role=img aria-label='loss per step'>");
    // Axes: loss at the top and bottom of its range on the left, steps
    // below (the first, the last and up to four between, whole steps).
    let (x0, y0) = (left, hgt - bottom);
    let _ = write!(
        svg,
        "<line class=axis x1={x0:.1} x2={x0:.1} y1={top:.1} y2={y0:.1} /><line class=axis x1={x0:.1} x2={:.1} y1={y0:.1} y2={y0:.1} />",
        w - right
    );
    let mut loss_ticks = vec![lmin];
    if lmax > lmin {
        loss_ticks.push(lmax);
    }
    for l in loss_ticks {
        let _ = write!(
            svg,
            "<text x={:.1} y={:.1} text-anchor=end class=mut>{}</text>",
            x0 - 4.0,
            y(l) + 4.0,
            loss_label(l)
        );
    }
    let span = smax - smin;
    let every = span.div_ceil(5).max(1);
    let mut steps: Vec<u64> = (smin..=smax).step_by(every as usize).collect();
    if steps.last() != Some(&smax) {
        if steps.len() > 1 && smax - steps[steps.len() - 1] < every / 2 {
            steps.pop();
        }
        steps.push(smax);
    }
    for st in steps {
        let _ = write!(
            svg,
            "<text x={:.1} y={:.1} text-anchor=middle class=mut>{st}</text>",
            x(st as f64),
            y0 + 14.0
        );
    }
    if let Some(f) = series.first_diverging_step {
        let fx = x(f as f64);
        // The label beside the mark, on the side with room (a mark at the
        // last step had its label clipped by the picture's edge).
        let (tx, anchor) = if fx > w / 2.0 {
            (fx - 4.0, "end")
        } else {
            (fx + 4.0, "start")
        };
        let _ = write!(
            svg,
            "<line x1={fx:.1} x2={fx:.1} y1=0 y2={y0:.1} class=mark /><text x={tx:.1} y=12 text-anchor={anchor} class=mut>step {f}</text>"
        );
    }
    let _ = write!(
        svg,
        "<polyline class=l1 points='{}' /><polyline class=l2 points='{}' />",
        line(&l1),
        line(&l2)
    );
    for (points, class, dy) in [(&n1, "n1", 0.0), (&n2, "n2", 10.0)] {
        for (st, l) in points.iter() {
            let word = if l.is_nan() { "NaN" } else { "Inf" };
            let _ = write!(
                svg,
                "<text x={:.1} y={:.1} text-anchor=middle class={class}>{word}</text>",
                x(*st as f64),
                top + 2.0 + dy
            );
        }
    }
    let _ = write!(
        svg,
        "<text x={x0:.1} y={} class=mut>loss (left{}) per step (below); run 1 blue, run 2 orange dashed{}</text></svg>",
        hgt - 8.0,
        if log { ", log scale" } else { "" },
        if n1.is_empty() && n2.is_empty() {
            ""
        } else {
            "; NaN or Inf at the top: a non-finite loss"
        }
    );
    svg
}

/// A loss as an axis label: six decimals in [1e-3, 1e5), else in
/// scientific notation (trial 65 F3: `7328674304.000000`).
fn loss_label(l: f64) -> String {
    if l == 0.0 || (1e-3..1e5).contains(&l.abs()) {
        format!("{l:.6}")
    } else {
        format!("{l:.4e}")
    }
}

//! The index page of a step-series comparison (`templates/steps.html`):
//! the verdict, the two runs' loss curves, and a step × rank strip whose
//! cells link to each step's own report; a diverging cell is shaded by its
//! largest gating relative difference ([`gate_shade`]).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::engine;
use crate::report::reasons::Reason;
use crate::report::steps::{StepResult, StepSeries};
use crate::report::{files, ReportError, Summary};

#[derive(Serialize)]
struct View<'a> {
    name1: &'a str,
    name2: &'a str,
    verdict: &'a [Reason],
    steps: Vec<StepHead>,
    rows: Vec<RankRow>,
    loss_svg: String,
    results: &'a [StepResult],
}

#[derive(Serialize)]
struct StepHead {
    step: u64,
    first: bool,
}

#[derive(Serialize)]
struct RankRow {
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
    link: String,
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
/// [`StepSeries`]) to `path`.
///
/// # Errors
/// [`ReportError`] when the page cannot be rendered or written.
pub fn write_steps_index(s: &Summary, path: &Path) -> Result<(), ReportError> {
    let empty = StepSeries::default();
    let series = s.series.as_ref().unwrap_or(&empty);
    let mut ranks: Vec<u32> = s.ranks.iter().map(|r| r.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let rows = ranks
        .iter()
        .map(|rank| RankRow {
            rank: *rank,
            cells: series
                .steps
                .iter()
                .map(|st| {
                    let r = s
                        .ranks
                        .iter()
                        .find(|r| r.rank == *rank && r.step == Some(*st));
                    let mut style = String::new();
                    let (class, title) = match r {
                        None => ("none", "not compared".to_string()),
                        Some(r) if r.first_divergence.is_some() => {
                            let c = &r.root_causes;
                            style = gate_shade(c.largest_rel_diff);
                            let largest = match (c.largest_rel_diff, c.largest_diff_field) {
                                (Some(d), Some(f)) => {
                                    format!("; largest relative difference {d:.1e} ({f})")
                                }
                                _ => String::new(),
                            };
                            ("gate", format!("{} gating rows{largest}", r.counts.gating))
                        }
                        Some(r) if r.counts.diverging() > 0 => (
                            "soft",
                            format!("{} rows differ, none gating", r.counts.diverging()),
                        ),
                        Some(_) => ("ok", "agrees".to_string()),
                    };
                    Cell {
                        step: *st,
                        class,
                        style,
                        title,
                        link: format!("step_{st}/{}", files::INDEX),
                    }
                })
                .collect(),
        })
        .collect();
    let view = View {
        name1: &s.name1,
        name2: &s.name2,
        verdict: &s.verdict,
        steps: series
            .steps
            .iter()
            .map(|st| StepHead {
                step: *st,
                first: Some(*st) == series.first_diverging_step,
            })
            .collect(),
        rows,
        loss_svg: loss_svg(series),
        results: &series.step_results,
    };
    engine::render_file("steps.html", &view, path)
}

/// The two runs' loss curves over the compared steps as inline SVG (only
/// numbers, no text from the logs), the first diverging step marked;
/// empty when no loss was recorded.
pub fn loss_svg(series: &StepSeries) -> String {
    let pts = |f: fn(&StepResult) -> Option<f64>| -> Vec<(u64, f64)> {
        series
            .step_results
            .iter()
            .filter_map(|r| f(r).filter(|x| x.is_finite()).map(|x| (r.step, x)))
            .collect()
    };
    let (l1, l2) = (pts(|r| r.loss1), pts(|r| r.loss2));
    let all: Vec<&(u64, f64)> = l1.iter().chain(&l2).collect();
    if all.is_empty() {
        return String::new();
    }
    let (w, hgt, pad) = (640.0, 200.0, 30.0);
    let smin = all.iter().map(|p| p.0).min().unwrap_or(0) as f64;
    let smax = all.iter().map(|p| p.0).max().unwrap_or(0) as f64;
    let lmin = all.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let lmax = all.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let scale = |v: f64, lo: f64, hi: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    let x = |s: f64| pad + (w - 2.0 * pad) * scale(s, smin, smax);
    let y = |l: f64| hgt - pad - (hgt - 2.0 * pad) * scale(l, lmin, lmax);
    let line = |p: &[(u64, f64)]| {
        p.iter()
            .map(|(s, l)| format!("{:.1},{:.1}", x(*s as f64), y(*l)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut svg =
        format!("<svg class=loss width={w} height={hgt} role=img aria-label='loss per step'>");
    if let Some(f) = series.first_diverging_step {
        let fx = x(f as f64);
        let _ = write!(
            svg,
            "<line x1={fx:.1} x2={fx:.1} y1=0 y2={hgt} class=mark /><text x={fx:.1} y=12 class=mut>step {f}</text>"
        );
    }
    let _ = write!(
        svg,
        "<polyline class=l1 points='{}' /><polyline class=l2 points='{}' />",
        line(&l1),
        line(&l2)
    );
    let _ = write!(
        svg,
        "<text x={pad} y={} class=mut>loss {lmin:.6} … {lmax:.6}; run 1 blue, run 2 orange</text></svg>",
        hgt - 8.0
    );
    svg
}

//! The short terminal summary: per rank, counts and the first diverging op;
//! then the verdict and where the report is. Above
//! [`GROUPED_ABOVE_RANKS`] ranks it stays short as the index does: the
//! lines of one rank per group for the first groups (diverging, largest
//! first), then the first groups, each on one line.

use std::fmt::Write;

use super::summary::{RankSummary, Summary, GROUPED_ABOVE_RANKS};
use crate::matcher::cause::CauseKind;

fn pct(a: u64, b: usize) -> String {
    if b == 0 {
        "0%".into()
    } else {
        // Never "100%" for part of the rows: 264 of 265 is 99.6%.
        let p = 100.0 * a as f64 / b as f64;
        if a as usize != b && p >= 99.5 {
            format!("{p:.1}%")
        } else {
            format!("{p:.0}%")
        }
    }
}

/// One rank's lines: its first cause, its counts, its first divergences,
/// then the rest it has (bitwise identity, largest difference, shapes,
/// incomplete logs).
fn rank_lines(out: &mut String, s: &Summary, r: &RankSummary) {
    let rank = if r.rank == r.rank2 {
        format!("rank {}", r.rank)
    } else {
        format!("rank {} vs {}", r.rank, r.rank2)
    };
    cause_lines(out, s, r, &rank);
    count_lines(out, s, r, &rank);
    first_lines(out, s, r);
    detail_lines(out, s, r);
}

/// The rank's causes after the first, named (at most three, in dispatch
/// order; "…" when there are more): `: b/op_0_mm (origin), …`. A rank's
/// other causes were only counted here, and a reader took "1 more cause"
/// for the whole story (new-user trial 14). When they are all one-sided
/// ops of one name in one run (one per parameter: a `zero_grad` between
/// micro-batches leaves out every gradient accumulation `add_`), they are
/// said as one group:
/// `, all add_ ops only in A: a/op_14_add_, …` (trial 26 F6).
fn more_causes(s: &Summary, r: &RankSummary, more: u64) -> String {
    let rc = &r.root_causes;
    let first = rc.first_cause.as_ref().map(|f| f.row.index);
    let rest: Vec<&super::summary::CauseRef> = rc
        .causes
        .iter()
        .filter(|c| Some(c.row.index) != first && c.cause.kind != CauseKind::ViaCollective)
        .collect();
    let names = (s.name1.as_str(), s.name2.as_str());
    // The cause's own op: the one-sided op for a one-sided cause.
    let own = |c: &super::summary::CauseRef| -> (String, String) {
        let key = c.one_sided.first().unwrap_or(&c.row).key().to_string();
        let op = crate::parser::key::module_and_op(key.as_bytes()).1.to_vec();
        (key, String::from_utf8_lossy(&op).into_owned())
    };
    let group = |c: &super::summary::CauseRef| (c.cause.kind, own(c).1, c.only_in_words(names));
    let rest_part = if more as usize > rest.len().min(3) {
        ", …"
    } else {
        ""
    };
    if rest.len() >= 3
        && rest[0].cause.kind == CauseKind::OneSided
        && rest.iter().all(|c| group(c) == group(rest[0]))
    {
        let (_, op, only) = group(rest[0]);
        let keys: Vec<String> = rest.iter().take(3).map(|c| own(c).0).collect();
        return format!(", all {op} ops {only}: {}{rest_part}", keys.join(", "));
    }
    let named: Vec<String> = rest
        .iter()
        .take(3)
        .map(|c| format!("{} ({})", c.subject(names), c.cause.kind.as_str()))
        .collect();
    if named.is_empty() {
        return String::new();
    }
    format!(": {}{rest_part}", named.join(", "))
}

/// The rank's first cause and what traces back to it, or the collective
/// its change arrives through.
fn cause_lines(out: &mut String, s: &Summary, r: &RankSummary, rank: &str) {
    let rc = &r.root_causes;
    if let (Some(f), crate::logformat::CaptureLevel::Modules) = (&rc.first_cause, r.run1.level) {
        // A module-level log records no inputs: no record traces back to
        // another, so counting causes would count the differing records.
        let _ = writeln!(
            out,
            "{rank}: first differing record: {} (log line {}), 1 of {} gating records; re-capture this step at level=\"ops\" to find the op and its cause",
            f.subject((&s.name1, &s.name2)),
            f.row.line1.or(f.row.line2).unwrap_or(0),
            r.counts.gating,
        );
    } else if let Some(f) = &rc.first_cause {
        let more = rc.cause_count.saturating_sub(1);
        let _ = writeln!(
            out,
            "{rank}: first {}: {} (log line {}{}){}{}",
            f.cause.kind.as_str(),
            f.subject((&s.name1, &s.name2)),
            match f.one_sided.first() {
                Some(o) => f.row.line_beside(o.status),
                None => f.row.line1,
            }
            .unwrap_or(0),
            // Where in the training code: the cause's own op (the
            // one-sided op, for a one-sided cause; trial 26 F7: a changed
            // clipping limit was `<none>/op_10_mul` with no source line).
            f.one_sided.first().unwrap_or(&f.row).at_location(),
            if f.cause.print_limited {
                " (within print precision)"
            } else {
                ""
            },
            if more > 0 {
                format!(
                    ", {more} more cause{}{}",
                    if more == 1 { "" } else { "s" },
                    more_causes(s, r, more)
                )
            } else {
                String::new()
            }
        );
        if let Some(w) = super::reasons::optimizer_only_words(r) {
            let _ = writeln!(out, "  {w}");
        }
        if f.cause.kind == CauseKind::Entry {
            if let Some(w) = super::reasons::entry_caveats(r) {
                let _ = writeln!(
                    out,
                    "  its differing input has no captured producer that diverges; {w}"
                );
            }
        }
        let _ = writeln!(
            out,
            "  {}{}",
            match f.cause.inherited {
                // The cause is the only diverging row of its chain.
                0 => "no other diverging row traces back to it".to_string(),
                n => format!(
                    "{n} diverging row{} back to it ({} below print precision, {} through uncaptured ops)",
                    if n == 1 { " traces" } else { "s trace" },
                    f.cause.below_print,
                    f.cause.untraced,
                ),
            },
            if f.cause.reads > 0 && f.cause.kind == CauseKind::OneSided {
                format!("; {} more fed by the same one-sided op", f.cause.reads)
            } else if f.cause.reads > 0 {
                format!("; {} more read the same changed input", f.cause.reads)
            } else {
                String::new()
            }
        );
    } else if rc.via_collective_only {
        let via = rc.causes.iter().find_map(|c| c.collective.as_ref()).map_or(
            "a collective".to_string(),
            |c| {
                format!(
                    "the {} ({})",
                    super::summary::collective_words(c.key()),
                    c.key()
                )
            },
        );
        let own = if r.run1.level == crate::logformat::CaptureLevel::Modules {
            "its forward outputs and its own gradients (recorded before the gradient collective) match, only its parameters after the optimizer differ"
        } else {
            "its own forward matches"
        };
        let _ = writeln!(
            out,
            "{rank}: {own}; the change arrives through {via}; see {}",
            if rc.see_ranks.is_empty() {
                "the other ranks".to_string()
            } else {
                crate::report::summary::see_rank_word(&rc.see_ranks, rc.see_ranks_total)
            }
        );
    }
}

/// The rank's counts per status and how many ops of each run paired.
fn count_lines(out: &mut String, s: &Summary, r: &RankSummary, rank: &str) {
    let c = &r.counts;
    let _ = write!(
        out,
        "{rank}: {} ops vs {} ops: {} match, {} diff, {} only in {}, {} only in {}",
        r.run1.entries, r.run2.entries, c.matched, c.diff, c.only1, s.name1, c.only2, s.name2
    );
    if c.missing > 0 {
        let _ = write!(out, ", {} missing (Output hash in one run only)", c.missing);
    }
    if c.truncated > 0 {
        let _ = write!(out, ", {} truncated (no verdict)", c.truncated);
    }
    if c.fused > 0 {
        let modules = r.run1.level == crate::logformat::CaptureLevel::Modules;
        let what = super::reasons::compiled_away_words(c.fused, modules, "the compiler");
        let _ = write!(out, " ({what}, not gating)");
    }
    if c.recomputed > 0 {
        let what = super::reasons::recomputed_words(c.recomputed);
        let _ = write!(out, " ({what}, not gating)");
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "  paired {}/{} {} ops ({}), {}/{} {} ops ({})",
        r.run1.paired,
        r.run1.entries,
        s.name1,
        pct(r.run1.paired, r.run1.entries),
        r.run2.paired,
        r.run2.entries,
        s.name2,
        pct(r.run2.paired, r.run2.entries)
    );
}

/// The rank's first divergence, overall, per phase, and its first
/// non-finite rows.
fn first_lines(out: &mut String, s: &Summary, r: &RankSummary) {
    let rc = &r.root_causes;
    if let Some(f) = &r.first_divergence {
        let keys = match (&f.key1, &f.key2) {
            (Some(a), Some(b)) if a != b => format!("{a} <-> {b}"),
            (Some(a), _) => a.clone(),
            (None, Some(b)) => b.clone(),
            _ => String::new(),
        };
        let line = match (f.line1, f.line2) {
            (Some(a), Some(b)) => format!("log lines {a}/{b}"),
            (Some(a), None) => format!("log line {a} of {}", s.name1),
            (None, Some(b)) => format!("log line {b} of {}", s.name2),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  first divergence: {keys} ({}{}, {}, {line}, row {})",
            f.status.as_str(),
            f.strategy
                .as_str()
                .map(|x| format!(" by {x} key"))
                .unwrap_or_default(),
            f.phase,
            f.index
        );
    }
    for line in phase_lines(rc) {
        let _ = writeln!(out, "  {line}");
    }
    // Only where finiteness differs between the runs: a row non-finite in
    // both (a causal mask's `masked_fill` with `-inf`) is no news.
    for (name, f) in [
        (&s.name1, &rc.first_nonfinite_only1),
        (&s.name2, &rc.first_nonfinite_only2),
    ] {
        if let Some(f) = f {
            let _ = writeln!(
                out,
                "  first non-finite: {name} {} (finite in the other run)",
                f.key()
            );
        }
    }
}

/// Bitwise identity, the first non-gating difference, the largest
/// difference, shape mismatches and incomplete logs.
fn detail_lines(out: &mut String, s: &Summary, r: &RankSummary) {
    let rc = &r.root_causes;
    if let Some(b) = &r.bitwise {
        if b.all {
            let _ = writeln!(
                out,
                "  bitwise identical: every paired row ({})",
                b.identical
            );
        } else {
            let _ = writeln!(
                out,
                "  bitwise identical: {} of {} paired rows with digests",
                b.identical, b.with_digests
            );
        }
    }
    if let Some(f) = &r.first_nongating_difference {
        let _ = writeln!(
            out,
            "  first non-gating difference: {} ({})",
            f.key(),
            f.status.as_str()
        );
    }
    if let (Some(f), Some(d)) = (&rc.largest_diff, rc.largest_rel_diff) {
        // A count of output tensors that differs is no relative difference.
        let what = match f.output_tensors {
            Some([a, b]) => format!("output tensors: {a} in {} and {b} in {}", s.name1, s.name2),
            None => format!("{}, rel {d:.3e}", rc.largest_diff_field.unwrap_or("value")),
        };
        let _ = writeln!(out, "  largest diff: {} ({what})", f.key());
    }
    if let Some(m) = &r.shape_mismatches {
        let _ = writeln!(out, "  {}", m.describe());
    }
    if let Some(o) = &r.one_sided_ops {
        let _ = writeln!(out, "  {}", o.describe(&s.name1, &s.name2));
    }
    if let Some(d) = &r.dtype_changes {
        let _ = writeln!(out, "  {}", d.describe());
    }
    for (side, name) in [(&r.run1, &s.name1), (&r.run2, &s.name2)] {
        for i in &side.incomplete {
            let _ = writeln!(out, "  {name} ({}): {i}", side.path);
        }
    }
}

/// Rank groups whose first rank's lines are printed above
/// [`GROUPED_ABOVE_RANKS`] ranks.
const TERMINAL_GROUP_RANKS: usize = 8;

/// Rank groups listed, one line each, above [`GROUPED_ABOVE_RANKS`] ranks.
const TERMINAL_GROUPS: usize = 20;

/// Lines of ranks that could not be compared, one per count of input
/// errors (the ranks of further lines are counted).
const TERMINAL_FAILED_RANKS: usize = 50;

/// Renders the terminal summary of `s`; `report` is the index page path.
pub fn render(s: &Summary, report: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "actdiff: {} ({}) vs {} ({})",
        s.name1, s.path1, s.name2, s.path2
    );
    for l in s.layout_lines() {
        let _ = writeln!(out, "{l}");
    }
    if let Some(h) = Summary::headline(&s.ranks, &s.name1, &s.name2) {
        let _ = writeln!(out, "{h}");
    }
    let grouped = s.ranks.len() > GROUPED_ABOVE_RANKS;
    let order = Summary::groups_by_weight(&s.ranks, &s.groups);
    if grouped {
        let shown = order.len().min(TERMINAL_GROUP_RANKS);
        let _ = writeln!(
            out,
            "{} ranks in {} groups by verdict: the first rank of the {}{} listed (every rank: summary.json, the index)",
            s.ranks.len(),
            s.groups.len(),
            if shown < order.len() { "first " } else { "" },
            if shown == 1 {
                "group".to_string()
            } else {
                format!("{shown} groups")
            }
        );
        for (r, _) in &order[..shown] {
            rank_lines(&mut out, s, r);
        }
    } else {
        for r in &s.ranks {
            rank_lines(&mut out, s, r);
        }
    }
    for (name, only) in [(&s.name1, &s.ranks_only1), (&s.name2, &s.ranks_only2)] {
        if only.is_empty() {
        } else if grouped || only.len() > GROUPED_ABOVE_RANKS {
            let _ = writeln!(
                out,
                "ranks only in {name}: {}",
                super::summary::rank_word(only)
            );
        } else {
            let _ = writeln!(out, "ranks only in {name}: {only:?}");
        }
    }
    // Their errors are printed on stderr (a problem of many ranks once):
    // counted here, ranks of as many errors on one line.
    let mut by_count: Vec<(usize, Vec<u32>)> = Vec::new();
    for f in &s.ranks_failed {
        match by_count.iter_mut().find(|(n, _)| *n == f.errors.len()) {
            Some((_, ranks)) => ranks.push(f.rank),
            None => by_count.push((f.errors.len(), vec![f.rank])),
        }
    }
    let listed = by_count.len().min(TERMINAL_FAILED_RANKS);
    let unlisted: usize = by_count[listed..].iter().map(|(_, r)| r.len()).sum();
    for (n, mut ranks) in by_count.into_iter().take(listed) {
        ranks.sort_unstable();
        let _ = writeln!(
            out,
            "{}: not compared: input error ({})",
            super::summary::rank_word(&ranks),
            super::reasons::on_stderr_each(n, ranks.len()),
        );
    }
    if unlisted > 0 {
        let _ = writeln!(out, "… {unlisted} more ranks not compared (summary.json)");
    }
    if grouped {
        for (_, g) in order.iter().take(TERMINAL_GROUPS) {
            let _ = writeln!(out, "{}", g.describe_short());
        }
        if order.len() > TERMINAL_GROUPS {
            let left = &order[TERMINAL_GROUPS..];
            let _ = writeln!(
                out,
                "… and {} more groups ({} ranks): summary.json `groups`, the index",
                left.len(),
                left.iter().map(|(_, g)| g.ranks.len()).sum::<usize>()
            );
        }
    } else if s.ranks.len() > 1 {
        for g in &s.groups {
            let _ = writeln!(out, "{}", g.describe());
        }
    }
    if s.ranks.len() > 1 {
        let c = &s.counts;
        let _ = writeln!(
            out,
            "all ranks: {} match, {} diff, {} only in {}, {} only in {}",
            c.matched, c.diff, c.only1, s.name1, c.only2, s.name2
        );
    }
    closing_lines(&mut out, s, report);
    out
}

/// The terminal summary's last lines, for one step and for a step series
/// alike: the verdict's lines, what the HTML pages leave out, and the
/// report's folder with the exit status.
pub(crate) fn closing_lines(out: &mut String, s: &Summary, report: &str) {
    closing_lines_of(out, s, &s.verdict, report);
}

/// [`closing_lines`] with the verdict lines `verdict` (a step series says
/// its answer first, not among them).
pub(crate) fn closing_lines_of(
    out: &mut String,
    s: &Summary,
    verdict: &[super::reasons::Reason],
    report: &str,
) {
    for v in verdict {
        let _ = writeln!(out, "{}", v.terminal_line());
    }
    let left_out = super::html::left_out_note(&s.ranks);
    if !left_out.is_empty() {
        let _ = writeln!(out, "{left_out}");
    }
    let _ = writeln!(out, "report: {report} (exit status {})", s.exit_status);
}

/// A rank's first divergence per phase, one line each
/// (`first divergence (optimizer): <none>/op_9_lerp_ (parameter 2.weight;
/// at optim/adamw.py:254)`, the source line last when the block has one;
/// a row whose outputs agree says `only its inputs differ; its outputs
/// agree`),
/// for the phases that have one: said for each rank of a single-step
/// compare, and for a step series' first diverging (step, rank).
pub(super) fn phase_lines(rc: &super::summary::CausesSummary) -> Vec<String> {
    let mut lines = Vec::new();
    for (phase, f) in [
        ("forward", &rc.first_divergence_forward),
        ("backward", &rc.first_divergence_backward),
        ("optimizer", &rc.first_divergence_optimizer),
    ] {
        if let Some(f) = f {
            let mut words: Vec<String> = f.parameter_words().into_iter().collect();
            // Its outputs agree: only an input differs (trial 24 F4: a
            // BatchNorm backward passed the running statistics read as
            // "the gradients diverge").
            if f.only_inputs_differ {
                words.push("only its inputs differ; its outputs agree".into());
            }
            // Where in the training code (trial 26 F7).
            words.extend(f.location.iter().map(|l| format!("at {l}")));
            let words = if words.is_empty() {
                String::new()
            } else {
                format!(" ({})", words.join("; "))
            };
            lines.push(format!("first divergence ({phase}): {}{words}", f.key()));
        }
    }
    lines
}

//! The short terminal summary: per rank, counts and the first diverging op;
//! then the verdict and where the report is.

use std::fmt::Write;

use super::summary::{RankSummary, Summary};

fn pct(a: u64, b: usize) -> String {
    if b == 0 {
        "0%".into()
    } else {
        format!("{:.0}%", 100.0 * a as f64 / b as f64)
    }
}

fn rank_lines(out: &mut String, s: &Summary, r: &RankSummary) {
    let rank = if r.rank == r.rank2 {
        format!("rank {}", r.rank)
    } else {
        format!("rank {} vs {}", r.rank, r.rank2)
    };
    let c = &r.counts;
    let _ = write!(
        out,
        "{rank}: {} ops vs {} ops: {} match, {} diff, {} only in {}, {} only in {}",
        r.run1.entries, r.run2.entries, c.matched, c.diff, c.only1, s.name1, c.only2, s.name2
    );
    if c.truncated > 0 {
        let _ = write!(out, ", {} truncated (no verdict)", c.truncated);
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
    if let Some(f) = &r.first_divergence {
        let keys = match (&f.key1, &f.key2) {
            (Some(a), Some(b)) if a != b => format!("{a} <-> {b}"),
            (Some(a), _) => a.clone(),
            (None, Some(b)) => b.clone(),
            _ => String::new(),
        };
        let line = match (f.line1, f.line2) {
            (Some(a), Some(b)) => format!("lines {a}/{b}"),
            (Some(a), None) => format!("line {a} of {}", s.name1),
            (None, Some(b)) => format!("line {b} of {}", s.name2),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  first divergence: {keys} ({}{}, {}, {line}, row {})",
            f.status.as_str(),
            f.strategy
                .map(|x| format!(" by {x} key"))
                .unwrap_or_default(),
            f.phase,
            f.index
        );
    }
}

/// Renders the terminal summary of `s`; `report` is the index page path.
pub fn render(s: &Summary, report: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "actdiff: {} ({}) vs {} ({})",
        s.name1, s.path1, s.name2, s.path2
    );
    for r in &s.ranks {
        rank_lines(&mut out, s, r);
    }
    if !s.ranks_only1.is_empty() {
        let _ = writeln!(out, "ranks only in {}: {:?}", s.name1, s.ranks_only1);
    }
    if !s.ranks_only2.is_empty() {
        let _ = writeln!(out, "ranks only in {}: {:?}", s.name2, s.ranks_only2);
    }
    if s.ranks.len() > 1 {
        let c = &s.counts;
        let _ = writeln!(
            out,
            "all ranks: {} match, {} diff, {} only in {}, {} only in {}",
            c.matched, c.diff, c.only1, s.name1, c.only2, s.name2
        );
    }
    for v in &s.verdict {
        let _ = writeln!(out, "{v}");
    }
    let _ = writeln!(out, "report: {report} (exit status {})", s.exit_status);
    out
}

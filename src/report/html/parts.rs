//! The pieces result pages and the index share: status counts, links to a
//! result row and to a rank's first cause, excluded-op chips, and the note
//! saying which rows the pages hold.

use serde::Serialize;

use crate::matcher::cause::CauseKind;
use crate::matcher::{Counts, Status};
use crate::report::summary::{CausesSummary, RowRef};
use crate::report::RankSummary;

/// One status class, with its label and count.
#[derive(Serialize)]
pub(super) struct StatusCount {
    pub(super) st: &'static str,
    pub(super) label: String,
    pub(super) n: u64,
}

pub(super) fn status_counts(c: &Counts, name1: &str, name2: &str) -> Vec<StatusCount> {
    let sc = |st: Status, label: String, n: u64| StatusCount {
        st: st.as_str(),
        label,
        n,
    };
    vec![
        sc(Status::Match, Status::Match.as_str().into(), c.matched),
        sc(Status::Diff, Status::Diff.as_str().into(), c.diff),
        sc(Status::Only1, format!("only in {name1}"), c.only1),
        sc(Status::Only2, format!("only in {name2}"), c.only2),
        sc(Status::Missing, Status::Missing.as_str().into(), c.missing),
        sc(
            Status::Truncated,
            Status::Truncated.as_str().into(),
            c.truncated,
        ),
    ]
}

/// A link to a result row (first divergence).
#[derive(Serialize)]
pub(super) struct RowLink<'a> {
    pub(super) href: String,
    pub(super) key1: &'a str,
    /// Run 2's key when it differs from the first one shown ("" otherwise).
    pub(super) key2: &'a str,
    pub(super) st: &'static str,
    pub(super) chip: &'static str,
    pub(super) sg: &'static str,
    pub(super) line1: Option<u64>,
    pub(super) line2: Option<u64>,
    pub(super) phase: &'a str,
    pub(super) index: usize,
}

pub(super) fn row_link(r: &RowRef) -> RowLink<'_> {
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
        chip: r.strategy.chip(),
        sg: r.strategy.as_str().unwrap_or("none"),
        line1: r.line1,
        line2: r.line2,
        phase: &r.phase,
        index: r.index,
    }
}

/// Where a rank's divergence starts or enters.
#[derive(Serialize)]
pub(super) struct CauseLink<'a> {
    /// The first origin or entry, if any.
    pub(super) row: Option<RowLink<'a>>,
    /// `origin`, `entry`, `one-sided op`, `entry via collective`.
    pub(super) kind: &'static str,
    /// For a one-sided cause: the earliest op of one run only that feeds
    /// the row (the cause itself).
    pub(super) fed_by: Option<RowLink<'a>>,
    /// For a one-sided cause: the op the other run ran in its place
    /// ([`crate::report::summary::CauseRef::in_its_place`]).
    pub(super) in_its_place: Option<RowLink<'a>>,
    /// Diverging rows whose chain leads back to it.
    pub(super) inherited: u64,
    /// Origins and entries in the rank (at `level=modules`, its
    /// differing records).
    pub(super) count: u64,
    /// What `count` counts, in words: `origins/entries`, `differing
    /// records`.
    pub(super) counted: &'static str,
    /// The divergence only enters through unsynced collectives: the ranks
    /// with causes of their own (comma-separated).
    pub(super) via_collectives: String,
}

pub(super) fn cause_link(c: &CausesSummary) -> Option<CauseLink<'_>> {
    match &c.first_cause {
        Some(f) => Some(CauseLink {
            row: Some(row_link(&f.row)),
            kind: f.cause.kind.as_str(),
            fed_by: f.one_sided.first().map(row_link),
            in_its_place: f.in_its_place.as_ref().map(row_link),
            inherited: f.cause.inherited,
            count: match f.cause.kind {
                CauseKind::Record => c.kinds.record,
                _ => c.cause_count,
            },
            counted: match f.cause.kind {
                CauseKind::Record => "differing records",
                _ => "origins/entries",
            },
            via_collectives: String::new(),
        }),
        None if c.via_collective_only => Some(CauseLink {
            row: None,
            kind: "",
            fed_by: None,
            in_its_place: None,
            inherited: 0,
            count: 0,
            counted: "",
            via_collectives: if c.see_ranks.is_empty() {
                "another rank".into()
            } else {
                crate::report::summary::see_rank_word(&c.see_ranks, c.see_ranks_total)
            },
        }),
        None => None,
    }
}

/// One excluded op of one side.
#[derive(Serialize)]
pub(super) struct ExOp<'a> {
    pub(super) op: &'a str,
    /// The other run's list (of a rank this list applies to) lacks it.
    pub(super) only: bool,
}

/// Excluded ops of one side, for chips.
#[derive(Serialize)]
pub(super) struct Excluded<'a> {
    pub(super) name: &'a str,
    /// Ranks this list applies to ("" on a rank page).
    pub(super) ranks: String,
    pub(super) recorded: bool,
    pub(super) ops: Vec<ExOp<'a>>,
    /// The ops only in this run's list, comma-separated ("" when none).
    pub(super) only: String,
}

/// The excluded ops of one side; `others` are the other run's lists of the
/// same ranks (an op missing from any recorded one is marked).
pub(super) fn excluded<'a>(
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

/// `1234567` → `1,234,567`.
pub(super) fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::with_capacity(d.len() + d.len() / 3);
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The plain statement of what the pages hold when they hold only the
/// rows that are not `match`; empty when they hold every row.
pub(super) fn shown_note(s: &RankSummary) -> String {
    if let Some(n) = s.html_cut_from {
        // Plain digits on purpose: "100000 differing ops; detailed: first K".
        return format!(
            "{n} differing ops; detailed: first {} (HTML size budget, --html-budget-mb); every row: --rows (JSON Lines or Parquet)",
            s.html_rows
        );
    }
    if !s.html_filtered {
        return String::new();
    }
    if s.html_rows as u64 > s.counts.total() - s.counts.matched {
        return format!(
            "showing {} rows of {}: the diverging ones with {} rows of context each (HTML size budget, --html-budget-mb); all rows: --html-rows all",
            thousands(s.html_rows as u64),
            thousands(s.counts.total()),
            crate::report::CONTEXT_ROWS
        );
    }
    if s.counts.total() == s.counts.matched {
        return format!(
            "every row matches: none of the {} shown; all rows: --html-rows all",
            thousands(s.counts.total())
        );
    }
    let n = s.html_rows as u64;
    format!(
        "showing {} diverging row{} of {}; all rows: --html-rows all",
        thousands(n),
        if n == 1 { "" } else { "s" },
        thousands(s.counts.total())
    )
}

/// The index's banner when some rank's pages leave rows out ("" when none
/// does): how many, and how to get every row. The terminal summary says it
/// too, so that a report cut by its size budget never reads as complete.
///
/// Counted over the ranks that have pages (a step series' steps without
/// pages are not counted).
pub fn left_out_note(ranks: &[RankSummary]) -> String {
    let with_pages = ranks.iter().filter(|r| !r.pages.is_empty()).count();
    let filtered = || {
        ranks
            .iter()
            .filter(|r| r.html_filtered && !r.pages.is_empty())
    };
    let all_match = filtered()
        .filter(|r| r.counts.total() == r.counts.matched)
        .count();
    let differ = filtered().count() - all_match;
    if differ + all_match == 0 {
        return String::new();
    }
    let context = filtered()
        .filter(|r| r.html_rows as u64 > r.counts.total() - r.counts.matched)
        .count();
    let cut = ranks.iter().filter(|r| r.html_cut_from.is_some()).count();
    let mut how = Vec::new();
    if context > 0 {
        how.push(format!(
            "{context} with {} rows of context each",
            crate::report::CONTEXT_ROWS
        ));
    }
    if cut > 0 {
        how.push(format!("{cut} only the first of them"));
    }
    let ranks_word = |n: usize| if n == 1 { "rank" } else { "ranks" };
    let mut what = Vec::new();
    if differ > 0 {
        what.push(format!(
            "The pages of {differ} of {with_pages} {} hold only their diverging rows{}",
            ranks_word(with_pages),
            if how.is_empty() {
                String::new()
            } else {
                format!(" ({})", how.join("; "))
            }
        ));
    }
    if all_match > 0 {
        what.push(format!(
            "{} {all_match} {} whose rows all match hold none of them",
            if differ > 0 {
                "those of the"
            } else {
                "The pages of the"
            },
            ranks_word(all_match),
        ));
    }
    format!(
        "{}, because of the report's size budget (--html-budget-mb) or --html-rows: every row on the pages with --html-rows all, every row machine-readable with --rows (JSON Lines or Parquet); summary.json is complete.",
        what.join(", and ")
    )
}

//! `summary.json`: per rank, entries per side, counts per status and pass,
//! the first diverging row, coverage, excluded ops and input warnings.
//! The schema is documented in `docs/summary-schema.md`.

use serde::Serialize;

use super::{files, PagePlan, RankComparison};
use crate::matcher::cause::CauseKind;
use crate::matcher::{Counts, MatchRow, Status, StrategyCounts};
use crate::parser::{duplicate_keys, Field, OpTable, WarningKind};

/// Version of the `summary.json` layout; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// A pointer to one result row.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RowRef {
    /// 0-based index in the rank's result rows.
    pub index: usize,
    /// Run 1's raw key, if the row has a run-1 side.
    pub key1: Option<String>,
    /// Run 2's raw key, if the row has a run-2 side.
    pub key2: Option<String>,
    /// The row's status.
    pub status: Status,
    /// The pass that paired it (`null` when unpaired).
    pub strategy: Option<&'static str>,
    /// 1-based line of the block in run 1's log.
    pub line1: Option<u64>,
    /// 1-based line of the block in run 2's log.
    pub line2: Option<u64>,
    /// Phase of the row (run 1's, else run 2's).
    pub phase: String,
    /// Report page holding the row, relative to the report folder (empty
    /// when the pages hold only diverging rows and this one matches).
    pub page: String,
    /// The row's anchor on that page (`rank0-row12`).
    pub anchor: String,
}

impl RowRef {
    /// Describes row `index` of `rc`.
    pub fn new(rc: &RankComparison<'_>, index: usize, plan: &PagePlan) -> RowRef {
        let r: &MatchRow = &rc.matches.rows[index];
        RowRef {
            index,
            key1: r.r1().map(|i| rc.t1.key_str(i).into_owned()),
            key2: r.r2().map(|i| rc.t2.key_str(i).into_owned()),
            status: r.status,
            strategy: r.strategy.as_str(),
            line1: r.r1().map(|i| rc.t1.line(i)),
            line2: r.r2().map(|i| rc.t2.line(i)),
            phase: match (r.r1(), r.r2()) {
                (Some(i), _) => rc.t1.phase(i).into_owned(),
                (None, Some(j)) => rc.t2.phase(j).into_owned(),
                _ => "forward".into(),
            },
            page: plan
                .page_of(index)
                .map(|p| files::page(rc.rank1, p))
                .unwrap_or_default(),
            anchor: files::anchor(rc.rank1, index),
        }
    }
    /// The key to show: run 1's, else run 2's.
    pub fn key(&self) -> &str {
        self.key1.as_deref().or(self.key2.as_deref()).unwrap_or("")
    }
}

/// One side of a rank.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SideSummary {
    /// The log file.
    pub path: String,
    /// Op blocks parsed.
    pub entries: usize,
    /// Op count declared by the header, if any.
    pub declared: Option<u64>,
    /// `Excluded ops dispatched`, sorted; `null` when the header line is absent.
    pub excluded_ops: Option<Vec<String>>,
    /// Rows of this side that were paired.
    pub paired: u64,
    /// Blocks cut short by the end of the file.
    pub truncated_blocks: usize,
    /// Fields present in this log but in no block of the other side's log.
    pub one_sided_fields: Vec<&'static str>,
    /// Keys that occur more than once, with their 1-based lines.
    pub duplicate_keys: Vec<(String, Vec<u64>)>,
    /// Parse warnings (at most 100 stored per file), `file:line:col: message`.
    pub warnings: Vec<String>,
    /// Every warning counted by kind and label.
    pub warning_counts: Vec<(WarningKind, String, u64)>,
    /// Why this side is incomplete (truncated block, header count mismatch); empty when complete.
    pub incomplete: Vec<String>,
}

impl SideSummary {
    fn build(t: &OpTable, paired: u64, other: &OpTable) -> SideSummary {
        let path = t.path().display().to_string();
        let mut incomplete = Vec::new();
        if let Some(n) = t.header().total {
            if n != t.len() as u64 {
                incomplete.push(format!("declares {n} ops, parsed {}", t.len()));
            }
        }
        if t.truncated_rows() > 0 {
            // The parser's own words: a missing final newline, or a count
            // header whose last block lacks its empty line.
            let why = t
                .warnings()
                .iter()
                .find(|w| w.kind == WarningKind::Truncated)
                .map_or("last block possibly truncated", |w| w.message.as_str());
            incomplete.push(why.to_string());
        }
        SideSummary {
            entries: t.len(),
            declared: t.header().total,
            excluded_ops: t.header().excluded.clone(),
            paired,
            truncated_blocks: t.truncated_rows(),
            one_sided_fields: t
                .schema()
                .minus(other.schema())
                .into_iter()
                .map(|f| f.label())
                .collect(),
            duplicate_keys: duplicate_keys(t).to_vec(),
            warnings: t
                .warnings()
                .iter()
                .map(|w| format!("{path}:{}:{}: {}", w.line, w.column, w.message))
                .collect(),
            warning_counts: t.warning_counts().to_vec(),
            incomplete,
            path,
        }
    }
    /// Whether any warning of `kind` was counted.
    pub fn has_warning(&self, kind: WarningKind) -> bool {
        self.warning_counts.iter().any(|(x, _, _)| *x == kind)
    }
}

/// Page of a rank's report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PageRef {
    /// File name, relative to the report folder.
    pub file: String,
    /// Position of the page's first row among the rows shown (equal to its
    /// result row index unless the pages hold only diverging rows).
    pub first_row: usize,
    /// One past the position of the page's last row among the rows shown.
    pub end_row: usize,
}

/// Summary of one rank pair.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RankSummary {
    /// Run 1's rank number.
    pub rank: u32,
    /// Run 2's rank number (differs only under `--rank-map`).
    pub rank2: u32,
    /// Run 1's side.
    pub run1: SideSummary,
    /// Run 2's side.
    pub run2: SideSummary,
    /// Result rows per status.
    pub counts: Counts,
    /// Rows paired per pass.
    pub strategy_counts: StrategyCounts,
    /// The first `diff`, `only1` or `only2` row in run-1 dispatch order.
    pub first_divergence: Option<RowRef>,
    /// Override pairs that paired nothing: `[run1 key, run2 key]`.
    pub unused_overrides: Vec<(String, String)>,
    /// Where the divergence starts (origins and entries) and non-finite values.
    pub root_causes: CausesSummary,
    /// Paired rows whose Shape dims differ, and their most common pattern.
    pub shape_mismatches: Option<ShapeMismatches>,
    /// The HTML pages of this rank.
    pub pages: Vec<PageRef>,
    /// Result rows the pages hold.
    pub html_rows: usize,
    /// Whether the pages hold only the rows that are not `match` (the rank
    /// has more rows than `--html-rows`, or all rows exceed the size budget).
    pub html_filtered: bool,
    /// When the size budget cut the diverging rows too: how many there were
    /// (the pages hold the first `html_rows` of them).
    pub html_cut_from: Option<usize>,
}

/// Paired rows whose dims differ ("3 of 3 shape mismatches share dim0 6 vs 5").
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ShapeMismatches {
    /// Paired rows whose dims differ.
    pub count: u64,
    /// The most common difference (`dim0 6 vs 5`).
    pub common: String,
    /// Rows sharing it.
    pub common_count: u64,
}

impl ShapeMismatches {
    fn build(rc: &RankComparison<'_>) -> Option<ShapeMismatches> {
        // The matcher flagged the pairs whose Shape texts differ.
        let diffs: Vec<String> = rc
            .matches
            .rows
            .iter()
            .filter(|r| r.has(crate::matcher::ROW_SHAPE_TEXT_DIFF))
            .filter_map(|r| {
                let (a, b) = (r.r1()?, r.r2()?);
                let (s1, s2) = (rc.t1.field(a, Field::Shape), rc.t2.field(b, Field::Shape));
                (s1 != s2)
                    .then(|| crate::matcher::notes::dims_difference(s1, s2))
                    .flatten()
            })
            .collect();
        let count = diffs.len() as u64;
        let mut by: std::collections::BTreeMap<String, u64> = Default::default();
        for d in diffs {
            *by.entry(d).or_insert(0) += 1;
        }
        let (common, common_count) = by
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))?;
        Some(ShapeMismatches {
            count,
            common,
            common_count,
        })
    }
    /// `3 of 3 shape mismatches share dim0 6 vs 5`.
    pub fn describe(&self) -> String {
        format!(
            "{} of {} shape mismatches share {}",
            self.common_count, self.count, self.common
        )
    }
}

/// An origin or entry of a rank, for `summary.json` and the report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CauseRef {
    /// The row.
    pub row: RowRef,
    /// `origin`, `entry` or `via_collective`.
    pub kind: CauseKind,
    /// 0-based positions of the differing inputs.
    pub inputs: Vec<usize>,
    /// Number of inherited rows whose chain leads back here.
    pub inherited: u64,
    /// Keys of the first inherited rows, in dispatch order.
    pub chain: Vec<String>,
}

/// A rank both runs have that could not be compared.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FailedRank {
    /// Run 1's rank number.
    pub rank: u32,
    /// Why (`file:line:col: message`).
    pub errors: Vec<String>,
}

/// Root-cause findings of one rank (see `matcher::cause`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CausesSummary {
    /// The first origin or entry: the op to look at first.
    pub first_cause: Option<CauseRef>,
    /// Origins, entries and entries via collective, in dispatch order (at most 50 here).
    pub causes: Vec<CauseRef>,
    /// Number of origins and entries.
    pub cause_count: u64,
    /// The rank's divergence only enters through unsynced collectives.
    pub via_collective_only: bool,
    /// For such a rank: the ranks with origins or entries of their own.
    pub see_ranks: Vec<u32>,
    /// First gating divergence in the forward phase (tolerance-aware).
    pub first_divergence_forward: Option<RowRef>,
    /// First gating divergence in the backward phase (tolerance-aware).
    pub first_divergence_backward: Option<RowRef>,
    /// First row whose run-1 values hold NaN or Inf.
    pub first_nonfinite1: Option<RowRef>,
    /// First row whose run-2 values hold NaN or Inf.
    pub first_nonfinite2: Option<RowRef>,
    /// First paired row non-finite on one side only.
    pub first_nonfinite_one_sided: Option<RowRef>,
    /// The `diff` row with the largest finite relative difference.
    pub largest_diff: Option<RowRef>,
    /// That difference.
    pub largest_rel_diff: Option<f64>,
}

impl CausesSummary {
    fn build(rc: &RankComparison<'_>, plan: &PagePlan) -> CausesSummary {
        let c = &rc.matches.causes;
        let r = |i: usize| RowRef::new(rc, i, plan);
        let cref = |e: &crate::matcher::cause::CauseEntry| CauseRef {
            row: r(e.index),
            kind: e.kind,
            inputs: e.inputs.clone(),
            inherited: e.inherited,
            chain: e.chain.iter().map(|i| r(*i).key().to_string()).collect(),
        };
        CausesSummary {
            first_cause: c
                .first_cause
                .and_then(|i| c.causes.iter().find(|e| e.index == i))
                .map(cref),
            causes: c.causes.iter().take(50).map(cref).collect(),
            cause_count: c.cause_count,
            via_collective_only: c.via_collective_only,
            see_ranks: Vec::new(),
            first_divergence_forward: rc.matches.first_gating(rc.t1, rc.t2, false).map(r),
            first_divergence_backward: rc.matches.first_gating(rc.t1, rc.t2, true).map(r),
            first_nonfinite1: c.first_nonfinite1.map(r),
            first_nonfinite2: c.first_nonfinite2.map(r),
            first_nonfinite_one_sided: c.first_nonfinite_one_sided.map(r),
            largest_diff: c.largest_diff.map(|(i, _)| r(i)),
            largest_rel_diff: c.largest_diff.map(|(_, d)| d),
        }
    }
}

impl RankSummary {
    /// Summarises one rank (pages are filled in by the HTML writer).
    pub fn build(rc: &RankComparison<'_>, plan: &PagePlan) -> RankSummary {
        let c = rc.matches.counts();
        let paired = c.matched + c.diff + c.missing + c.truncated;
        RankSummary {
            rank: rc.rank1,
            rank2: rc.rank2,
            run1: SideSummary::build(rc.t1, paired, rc.t2),
            run2: SideSummary::build(rc.t2, paired, rc.t1),
            counts: c,
            strategy_counts: rc.matches.strategy_counts(),
            first_divergence: rc
                .matches
                .first_divergence()
                .map(|i| RowRef::new(rc, i, plan)),
            unused_overrides: rc.matches.unused_overrides.clone(),
            root_causes: CausesSummary::build(rc, plan),
            shape_mismatches: ShapeMismatches::build(rc),
            pages: Vec::new(),
            html_rows: plan.len(),
            html_filtered: plan.is_filtered(),
            html_cut_from: plan.cut_from(),
        }
    }
    /// Whether this rank has anything but `match` rows.
    pub fn diverged(&self) -> bool {
        self.counts.diverging() > 0
    }
    /// Whether this rank has rows that gate the exit status.
    pub fn gates(&self) -> bool {
        self.counts.gating > 0
    }
    /// Whether either side is incomplete (truncated or count mismatch).
    pub fn incomplete(&self) -> bool {
        !self.run1.incomplete.is_empty() || !self.run2.incomplete.is_empty()
    }
}

/// The whole comparison, as written to `summary.json`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// Layout version of this file ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// `actdiff` and its version.
    pub tool: String,
    /// Display name of run 1.
    pub name1: String,
    /// Display name of run 2.
    pub name2: String,
    /// Path of run 1 as given.
    pub path1: String,
    /// Path of run 2 as given.
    pub path2: String,
    /// Counts over all ranks.
    pub counts: Counts,
    /// Compared ranks, in run-1 rank order.
    pub ranks: Vec<RankSummary>,
    /// Ranks present in run 1 only.
    pub ranks_only1: Vec<u32>,
    /// Ranks present in run 2 only.
    pub ranks_only2: Vec<u32>,
    /// Ranks in both runs that could not be compared (an input error), with
    /// the errors; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub ranks_failed: Vec<FailedRank>,
    /// Every input error of the comparison (those of `ranks_failed`
    /// included), each naming its file; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub input_errors: Vec<String>,
    /// Ranks that behave alike: same first divergence and counts.
    pub groups: Vec<RankGroup>,
    /// The exit status `actdiff compare` returns for this comparison.
    pub exit_status: i32,
    /// One line per reason for the exit status.
    pub verdict: Vec<String>,
}

/// Ranks whose comparisons look the same.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RankGroup {
    /// The ranks, ascending.
    pub ranks: Vec<u32>,
    /// Non-`match` rows per rank.
    pub diverging: u64,
    /// Key of the first diverging row (the same in every rank of the group).
    pub first_divergence: Option<String>,
}

impl RankGroup {
    /// `ranks {1,3}: first divergence layers.1.attention/op_0_softmax (1 differing op)`.
    pub fn describe(&self) -> String {
        let ranks: Vec<String> = self.ranks.iter().map(|r| r.to_string()).collect();
        match &self.first_divergence {
            None => format!("ranks {{{}}}: all matched", ranks.join(",")),
            Some(k) => format!(
                "ranks {{{}}}: first divergence {k} ({} differing op{})",
                ranks.join(","),
                self.diverging,
                if self.diverging == 1 { "" } else { "s" }
            ),
        }
    }
}

impl Summary {
    /// Groups ranks with the same first divergence and counts, in rank order.
    pub fn group_ranks(ranks: &[RankSummary]) -> Vec<RankGroup> {
        let mut groups: Vec<(String, RankGroup)> = Vec::new();
        for r in ranks {
            let first = r.first_divergence.as_ref().map(|f| f.key().to_string());
            let sig = format!("{first:?}|{:?}", r.counts);
            match groups.iter_mut().find(|(s, _)| *s == sig) {
                Some((_, g)) => g.ranks.push(r.rank),
                None => groups.push((
                    sig,
                    RankGroup {
                        ranks: vec![r.rank],
                        diverging: r.counts.diverging(),
                        first_divergence: first,
                    },
                )),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    /// Points ranks whose divergence only enters via collectives at the
    /// ranks that have origins or entries of their own.
    pub fn link_collective_ranks(ranks: &mut [RankSummary]) {
        let with_causes: Vec<u32> = ranks
            .iter()
            .filter(|r| r.root_causes.cause_count > 0)
            .map(|r| r.rank)
            .collect();
        for r in ranks.iter_mut() {
            if r.root_causes.via_collective_only {
                r.root_causes.see_ranks = with_causes.clone();
            }
        }
    }
    /// Counts over all ranks.
    pub fn total_counts(ranks: &[RankSummary]) -> Counts {
        let mut c = Counts::default();
        for r in ranks {
            c.merge(&r.counts);
        }
        c
    }
}

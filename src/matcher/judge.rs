//! Judging: the pairing the passes made ([`super::passes`]) into result
//! rows, each with its [`Status`], `ROW_*` flags and tolerance source, in
//! the reference's order (every run-1 row in file order, then the `only2`
//! rows in run-2 file order); and the tally of those rows.

use rayon::prelude::*;

use super::passes::Pairing;
use super::{
    compare, Counts, MatchRow, Policy, RowPolicy, Source, Status, Strategy, NO_ROW, ROW_BITWISE,
    ROW_DIGEST_ONLY, ROW_IGNORED, ROW_NONFINITE1, ROW_NONFINITE2, ROW_OUT_DIFF, ROW_SAME_TEXT,
    ROW_SHAPE_TEXT_DIFF, ROW_UNSYNCED,
};
use crate::parser::{FieldSet, OpTable, Phase};

/// How pairs and one-sided rows are judged: each row's settings
/// ([`Policy::for_sides`]) and the fields compared. [`judge_rows`] judges
/// every row with it; the value re-pairing ([`super::repair`]) judges the
/// candidate pairs of a group with the same rule.
pub(super) struct Judge<'a> {
    settings: Settings<'a>,
    compared: FieldSet,
}

impl<'a> Judge<'a> {
    /// The judge of `t1` against `t2` under `policy`, on the `compared` fields.
    pub(super) fn new(
        t1: &'a OpTable,
        t2: &'a OpTable,
        policy: &'a Policy,
        compared: FieldSet,
    ) -> Judge<'a> {
        Judge {
            settings: Settings::new(t1, t2, policy),
            compared,
        }
    }

    /// The result row of run 1's row `r1` paired with run 2's row `r2` by
    /// `strategy`: its status, flags and tolerance source.
    pub(super) fn pair(&self, r1: usize, r2: usize, strategy: Strategy) -> MatchRow {
        let [t1, t2] = self.settings.t;
        let rp = self.settings.pair(r1, r2);
        let (status, flags) = judge_pair(t1, r1, t2, r2, &rp, self.compared);
        MatchRow {
            row1: r1 as u32,
            row2: r2 as u32,
            status,
            strategy,
            flags,
            source: rp.source,
        }
    }

    /// The result row of side `s`'s (0: run 1, 1: run 2) unpaired row `r`.
    fn one_sided(&self, s: usize, r: usize) -> MatchRow {
        let rp = self.settings.one_sided(s, r);
        let t = self.settings.t[s];
        let (row1, row2, status, nonfinite) = if s == 0 {
            (r as u32, NO_ROW, Status::Only1, ROW_NONFINITE1)
        } else {
            (NO_ROW, r as u32, Status::Only2, ROW_NONFINITE2)
        };
        MatchRow {
            row1,
            row2,
            status,
            strategy: Strategy::None,
            flags: row_flags(&rp) | nonfinite_flag(t, r, nonfinite),
            source: rp.source,
        }
    }
}

/// The result rows of a pairing, judged by `judge`. Pairs are judged in
/// parallel; the order is kept by the indexed collect. Each row's settings
/// are [`Policy::for_sides`]' (looked up once per op type when no rule or
/// per-dtype default can tell rows of one op apart).
pub(super) fn judge_rows(judge: &Judge<'_>, p: &Pairing) -> Vec<MatchRow> {
    let n2 = p.pair2.len();
    let mut rows: Vec<MatchRow> = (0..p.pair1.len())
        .into_par_iter()
        .with_min_len(4096)
        .map(|r1| match p.pair1[r1] {
            NO_ROW => judge.one_sided(0, r1),
            r2 => judge.pair(r1, r2 as usize, p.strat1[r1]),
        })
        .collect();
    rows.extend(
        (0..n2)
            .filter(|r| p.pair2[*r] == NO_ROW)
            .map(|r2| judge.one_sided(1, r2)),
    );
    rows
}

/// Rows per status, and rows judged by each rule of `policy` (by rule
/// index), then by each per-dtype default a config wrote (at
/// `rules.len()` + its index, [`Policy::dtype_origins`]).
pub(super) fn tally(rows: &[MatchRow], policy: &Policy) -> (Counts, Vec<u64>) {
    let rules = policy.rules.len();
    let mut counts = Counts::default();
    let mut rule_hits = vec![0u64; rules + policy.dtype_origins.len()];
    for r in rows {
        counts.add_row(r);
        match r.source {
            Source::Rule(i) => rule_hits[i as usize] += 1,
            Source::Dtype(i) if (i as usize) < policy.dtype_origins.len() => {
                rule_hits[rules + i as usize] += 1
            }
            _ => {}
        }
    }
    (counts, rule_hits)
}

/// The status and flags of a pair judged under `rp`: `truncated` when a
/// block is cut short, `missing` when the Output hash is in one run only,
/// else `match` or `diff` on the compared fields, and with digests on both
/// sides, the digests' verdict.
fn judge_pair(
    t1: &OpTable,
    r1: usize,
    t2: &OpTable,
    r2: usize,
    rp: &RowPolicy,
    compared: FieldSet,
) -> (Status, u16) {
    let mut flags = row_flags(rp)
        | nonfinite_flag(t1, r1, ROW_NONFINITE1)
        | nonfinite_flag(t2, r2, ROW_NONFINITE2);
    let v = compare::judge_pair(t1, r1, t2, r2, &rp.opts, compared);
    if v.output_differs {
        flags |= ROW_OUT_DIFF;
    }
    if v.shape_text_differs {
        flags |= ROW_SHAPE_TEXT_DIFF;
    }
    if v.same_text {
        flags |= ROW_SAME_TEXT;
    }
    // With digests on both sides: identical digests are a bitwise match;
    // differing ones are a `diff` under `--bitwise`, and when every printed
    // value agrees (only the digests can tell).
    let mut agrees = v.agrees;
    if let Some(same) = compare::bitwise_identical(t1, r1, t2, r2) {
        if same {
            flags |= ROW_BITWISE;
        } else if rp.opts.is_bitwise() {
            agrees = false;
            flags |= ROW_OUT_DIFF;
        } else if agrees && compare::printed_equal(t1, r1, t2, r2) {
            agrees = false;
            flags |= ROW_DIGEST_ONLY | ROW_OUT_DIFF;
        }
        if !same && rp.opts.is_bitwise() && compare::printed_equal(t1, r1, t2, r2) {
            flags |= ROW_DIGEST_ONLY;
        }
    }
    let status = if t1.is_truncated(r1) || t2.is_truncated(r2) {
        Status::Truncated
    } else if v.output_missing {
        Status::Missing
    } else if agrees {
        Status::Match
    } else {
        Status::Diff
    };
    (status, flags)
}

/// The flags a row's settings give it: ignored, unsynced collective.
fn row_flags(rp: &RowPolicy) -> u16 {
    (if rp.ignored { ROW_IGNORED } else { 0 }) | (if rp.unsynced { ROW_UNSYNCED } else { 0 })
}

/// `flag` when row `r`'s stats or Output hash hold a NaN or an infinity.
fn nonfinite_flag(t: &OpTable, r: usize, flag: u16) -> u16 {
    if compare::non_finite(t, r) {
        flag
    } else {
        0
    }
}

/// Each row's settings, as [`Policy::for_sides`] resolves them. Without
/// rules or per-dtype defaults a row's settings depend on its op alone, so
/// they are looked up once per op type of each table.
struct Settings<'a> {
    t: [&'a OpTable; 2],
    policy: &'a Policy,
    /// No rules and no per-dtype defaults: the op decides.
    op_only: bool,
    /// Per side, the settings of each op type (empty unless `op_only`).
    by_op: [Vec<RowPolicy>; 2],
}

impl<'a> Settings<'a> {
    fn new(t1: &'a OpTable, t2: &'a OpTable, policy: &'a Policy) -> Settings<'a> {
        let op_only = policy.rules.is_empty() && policy.dtype.is_empty();
        let by_op = |t: &OpTable| -> Vec<RowPolicy> {
            if !op_only {
                return Vec::new();
            }
            (0..t.op_types() as u32)
                .map(|id| policy.for_row(&[], t.op_name(id), Phase::Forward, ""))
                .collect()
        };
        Settings {
            t: [t1, t2],
            policy,
            op_only,
            by_op: [by_op(t1), by_op(t2)],
        }
    }

    /// The settings of side `s`'s (0: run 1, 1: run 2) row `r` alone
    /// ([`Policy::for_table_row`]).
    fn one_sided(&self, s: usize, r: usize) -> RowPolicy {
        let t = self.t[s];
        match self.by_op[s].get(t.op_type(r) as usize) {
            Some(rp) => *rp,
            None => self.policy.for_table_row(t, r),
        }
    }

    /// The settings of a pair ([`Policy::for_pair`]: run 1's row's unless
    /// per-dtype defaults apply, which they cannot when the op decides).
    fn pair(&self, r1: usize, r2: usize) -> RowPolicy {
        if self.op_only {
            self.one_sided(0, r1)
        } else {
            self.policy.for_pair(self.t[0], r1, self.t[1], r2)
        }
    }
}

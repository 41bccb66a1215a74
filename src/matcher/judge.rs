//! Judging: the pairing the passes made ([`super::passes`]) into result
//! rows, each with its [`Status`], `ROW_*` flags and tolerance source, in
//! the reference's order (every run-1 row in file order, then the `only2`
//! rows in run-2 file order); and the tally of those rows.

use rayon::prelude::*;

use super::passes::Pairing;
use super::{
    compare, CompiledAway, Counts, MatchRow, Policy, RowPolicy, Source, Status, Strategy, NO_ROW,
    ROW_BITWISE, ROW_DIGEST_ONLY, ROW_FUSED, ROW_IGNORED, ROW_NONFINITE1, ROW_NONFINITE2,
    ROW_OUT_DIFF, ROW_SAME_TEXT, ROW_SHAPE_TEXT_DIFF, ROW_STATS_DIFF, ROW_UNSYNCED,
};
use crate::parser::{Field, FieldSet, OpTable, Phase};

/// How pairs and one-sided rows are judged: each row's settings
/// ([`Policy::for_sides`]) and the fields compared. [`judge_rows`] judges
/// every row with it; the value re-pairing ([`super::repair`]) judges the
/// candidate pairs of a group with the same rule.
pub(super) struct Judge<'a> {
    settings: Settings<'a>,
    compared: FieldSet,
    /// Which of side 0's / side 1's one-sided rows the other run's compiled
    /// code left unrecorded ([`super::compiled_away`]): [`ROW_FUSED`].
    away: [CompiledAway; 2],
    /// Whether the other run (of side 0's, of side 1's rows) has rows in
    /// the optimizer phase: its optimizer step ran eagerly, so an
    /// optimizer-phase row only this side has was not fused away.
    other_optimizer: [bool; 2],
}

impl<'a> Judge<'a> {
    /// The judge of `t1` against `t2` under `policy`, on the `compared` fields.
    pub(super) fn new(
        t1: &'a OpTable,
        t2: &'a OpTable,
        policy: &'a Policy,
        compared: FieldSet,
    ) -> Judge<'a> {
        let away = [super::compiled_away(t1, t2), super::compiled_away(t2, t1)];
        let optimizer = |t: &OpTable| (0..t.len()).any(|r| t.phase_kind(r) == Phase::Optimizer);
        let other_optimizer = [
            away[0] == CompiledAway::Ops && optimizer(t2),
            away[1] == CompiledAway::Ops && optimizer(t1),
        ];
        Judge {
            settings: Settings::new(t1, t2, policy),
            compared,
            away,
            other_optimizer,
        }
    }

    /// [`ROW_FUSED`] when side `s`'s one-sided row `r` is one the other
    /// run's compiled code left unrecorded, else 0. An optimizer-phase row
    /// is not, when the other run records optimizer-phase rows (its
    /// optimizer step ran eagerly: `torch.compile(model)` compiles the
    /// model, not `optimizer.step()`); a new user's trial found a change
    /// made after the optimizer step excused as fused away.
    fn compiled_away(&self, s: usize, r: usize) -> u16 {
        let [this, other] = [self.settings.t[s], self.settings.t[1 - s]];
        match self.away[s] {
            CompiledAway::Ops
                if self.other_optimizer[s] && this.phase_kind(r) == Phase::Optimizer =>
            {
                0
            }
            CompiledAway::Ops => ROW_FUSED,
            CompiledAway::ModuleOutputs if super::compiled_module_output(this, r, other) => {
                ROW_FUSED
            }
            _ => 0,
        }
    }

    /// The result row of run 1's row `r1` paired with run 2's row `r2` by
    /// `strategy`: its status, flags and tolerance source.
    pub(super) fn pair(&self, r1: usize, r2: usize, strategy: Strategy) -> MatchRow {
        let [t1, t2] = self.settings.t;
        let rp = self.settings.pair(r1, r2);
        let (status, flags) = pair_status(t1, r1, t2, r2, &rp, self.compared);
        MatchRow {
            row1: r1 as u32,
            row2: r2 as u32,
            status,
            strategy,
            flags,
            source: rp.source,
        }
    }

    /// Hints the CPU to bring the blocks of run 1's row `r1` and of its
    /// partner `r2` (or [`NO_ROW`]) into cache.
    fn prefetch(&self, r1: usize, r2: u32) {
        let [t1, t2] = self.settings.t;
        t1.prefetch_block(r1);
        if r2 != NO_ROW {
            t2.prefetch_block(r2 as usize);
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
            flags: row_flags(&rp) | nonfinite_flag(t, r, nonfinite) | self.compiled_away(s, r),
            source: rp.source,
        }
    }
}

/// How many rows ahead [`judge_rows`] asks for the blocks it will read
/// (each row's two blocks are read from memory in irregular strides that
/// defeat the hardware prefetcher).
const PREFETCH_AHEAD: usize = 8;

/// The result rows of a pairing, judged by `judge`. A one-sided row is
/// [`ROW_FUSED`] when the other run's compiled code left it unrecorded
/// ([`super::compiled_away`]). Pairs are judged in
/// parallel; the order is kept by the indexed collect. Each row's settings
/// are [`Policy::for_sides`]' (looked up once per op type when no rule or
/// per-dtype default can tell rows of one op apart).
pub(super) fn judge_rows(judge: &Judge<'_>, p: &Pairing) -> Vec<MatchRow> {
    let n2 = p.pair2.len();
    let mut rows: Vec<MatchRow> = (0..p.pair1.len())
        .into_par_iter()
        .with_min_len(4096)
        .map(|r1| {
            if let Some(&r2) = p.pair1.get(r1 + PREFETCH_AHEAD) {
                judge.prefetch(r1 + PREFETCH_AHEAD, r2);
            }
            match p.pair1[r1] {
                NO_ROW => judge.one_sided(0, r1),
                r2 => judge.pair(r1, r2 as usize, p.strat1[r1]),
            }
        })
        .collect();
    rows.extend(
        (0..n2)
            .filter(|r| p.pair2[*r] == NO_ROW)
            .map(|r2| judge.one_sided(1, r2)),
    );
    rows
}

/// Flags [`ROW_FUSED`] the one-sided rows of a run compiled by a fusing
/// backend whose value one of the other run's fused-away rows has: the
/// same Shape text, and the Output hash, L2 norm, Min, Max and Mean (those
/// both rows print) agreeing under the compiled row's tolerance
/// ([`Policy::for_sides`]; inductor's `addmm` that computes eager's `mm`
/// and its accumulation `add` in one kernel holds that `add`'s result, to
/// float rounding). The value both runs computed agrees, so the row is no
/// divergence; it is shown, never gating, never a cause. Only runs where
/// one side's rows are fused away ([`super::CompiledAway::Ops`]) are read.
pub(super) fn mark_fused_results(
    rows: &mut [MatchRow],
    t1: &OpTable,
    t2: &OpTable,
    policy: &Policy,
) {
    use ahash::AHashMap;
    let ops = |this, other| super::compiled_away(this, other) == CompiledAway::Ops;
    // The compiled side `s`: its one-sided rows are the candidates; the
    // other side's fused-away rows hold the values.
    let s = match (ops(t1, t2), ops(t2, t1)) {
        (true, false) => 1,
        (false, true) => 0,
        _ => return,
    };
    let (t, other) = if s == 0 { (t1, t2) } else { (t2, t1) };
    // The other side's fused-away rows, by Shape text.
    let mut fused: AHashMap<&[u8], Vec<usize>> = AHashMap::new();
    for m in rows.iter().filter(|m| m.has(ROW_FUSED)) {
        if let Some(r) = m.only_in(1 - s) {
            fused
                .entry(other.field(r, Field::Shape))
                .or_default()
                .push(r);
        }
    }
    if fused.is_empty() {
        return;
    }
    const VALUES: [Field; 5] = [
        Field::OutputHash,
        Field::L2Norm,
        Field::Min,
        Field::Max,
        Field::Mean,
    ];
    let agree = |r: usize, o: usize, tol: &super::Tolerance| {
        !t.field(r, Field::OutputHash).is_empty()
            && VALUES.iter().all(|f| {
                let (a, b) = (t.field(r, *f), other.field(o, *f));
                if a.is_empty() || b.is_empty() {
                    return *f != Field::OutputHash;
                }
                use crate::parser::value::token_number as num;
                a == b || matches!((num(a), num(b)), (Some(x), Some(y)) if tol.agrees(x, y))
            })
    };
    for m in rows.iter_mut().filter(|m| !m.has(ROW_FUSED)) {
        let Some(r) = m.only_in(s) else {
            continue;
        };
        let tol = policy.for_sides(t1, t2, m.sides()).opts.hash;
        let found = fused
            .get(t.field(r, Field::Shape))
            .is_some_and(|cands| cands.iter().any(|o| agree(r, *o, &tol)));
        if found {
            m.flags |= ROW_FUSED;
        }
    }
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
            Source::Dtype(i) | Source::Carried(i) if (i as usize) < policy.dtype_origins.len() => {
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
/// sides, the digests' verdict: equal digests (and Shape text) are a match
/// whatever the statistics say, since the tensors are bitwise equal and a
/// statistic that differs only tells how it was computed (a combined
/// shard's L2 norm, a device's summation order); differing digests are a
/// `diff` when every printed value agrees (only the digests tell) or when
/// the statistics differ beyond the tolerance (the hash, an L1 norm, may
/// not see a change whose signs cancel).
fn pair_status(
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
    let v = compare::judge_values(t1, r1, t2, r2, &rp.opts, compared);
    if v.output_differs {
        flags |= ROW_OUT_DIFF;
    }
    if v.shape_text_differs {
        flags |= ROW_SHAPE_TEXT_DIFF;
    }
    if v.same_text {
        flags |= ROW_SAME_TEXT;
    }
    // Whether the statistics differ beyond the row's tolerance (read only
    // where a rule below asks).
    let stats_differ = || {
        let tol = rp.opts.stats.unwrap_or(rp.opts.hash);
        !compare::stats_agree(t1, r1, t2, r2, tol, rp.opts.nan_equal)
    };
    // With digests on both sides: identical digests are a bitwise match;
    // differing ones are a `diff` under `--bitwise`, and when every printed
    // value agrees (only the digests can tell).
    let mut agrees = v.agrees;
    if let Some(same) = compare::bitwise_identical(t1, r1, t2, r2) {
        // Under --nan-is-diff, bitwise-identical values that hold NaN
        // differ as their printed values do (trial 65 F1: the flag was
        // ignored at full precision).
        if same && (rp.opts.nan_equal || v.agrees) {
            flags |= ROW_BITWISE;
            if !v.shape_text_differs {
                agrees = true;
                flags &= !ROW_OUT_DIFF;
            }
        } else if rp.opts.is_bitwise() {
            agrees = false;
            flags |= ROW_OUT_DIFF;
        } else if agrees && compare::printed_equal(t1, r1, t2, r2) {
            // Only the digests tell: a difference no printed value shows,
            // at full precision. At the reference's tolerance that is a
            // `diff` (digests promise identity); under a looser one it is
            // within it (trial 22 H1: under --layouts such a row gated and
            // was named the cause, while rows 1e-7 off passed).
            flags |= ROW_DIGEST_ONLY;
            if !rp.opts.is_loosened() {
                agrees = false;
                flags |= ROW_OUT_DIFF;
            }
        } else if agrees && stats_differ() {
            // The digests say the tensors differ and the statistics see it
            // beyond the tolerance, while the Output hash (an L1 norm) moved
            // less: a change whose signs cancel in the sum (new-user trial
            // 14: a parameter updated with a doubled learning rate, its min
            // 2e-2 off, its hash 7e-9). Not a match.
            agrees = false;
            flags |= ROW_OUT_DIFF;
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
    // A pair whose output seems to agree: do its statistics see a change
    // the hash cannot (root cause reads it; a pair of the same text never
    // pays for it)?
    if matches!(status, Status::Diff | Status::Match)
        && flags & (ROW_OUT_DIFF | ROW_SAME_TEXT | ROW_BITWISE) == 0
        && stats_differ()
    {
        flags |= ROW_STATS_DIFF;
    }
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
    /// ([`Policy::for_side_row`]).
    fn one_sided(&self, s: usize, r: usize) -> RowPolicy {
        let t = self.t[s];
        match self.by_op[s].get(t.op_type(r) as usize) {
            Some(rp) => *rp,
            None => self.policy.for_side_row(t, r, Some(s as u8 + 1)),
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

#[cfg(test)]
mod tests {
    use crate::matcher::notes::row_notes;
    use crate::matcher::{match_tables, MatchOptions, MatchTable, Status, ROW_FUSED};
    use crate::parser::{parse_bytes, OpTable};

    /// A log with `header` lines after the count and the given blocks.
    fn log(header: &str, blocks: &[(&str, &str)]) -> OpTable {
        let mut s = format!("Total captured activations: {}\n{header}", blocks.len());
        s.push_str(&"=".repeat(80));
        s.push_str("\n\n");
        for (k, body) in blocks {
            s.push_str(&format!("[{k}]\n"));
            for l in body.lines() {
                s.push_str(&format!("  {l}\n"));
            }
            s.push('\n');
        }
        let t = parse_bytes(s.into_bytes(), "t.log");
        assert!(t.warnings().is_empty(), "{:?}", t.warnings());
        t
    }

    /// An eager step: the norm and the residual add are ops of their own;
    /// the output projection's input differs.
    fn eager(header: &str) -> OpTable {
        log(
            header,
            &[
                ("layers.0.wq/op_0_mm", "Output hash: 1.0\nInput hashes: 5.0"),
                (
                    "layers.0.norm/op_0_mul",
                    "Output hash: 2.0\nInput hashes: 1.0",
                ),
                ("layers.0/op_0_add", "Output hash: 3.0\nInput hashes: 2.0"),
                (
                    "layers.0.wo/op_0_mm",
                    "Output hash: 4.0\nInput hashes: 3.0\nInput producers: layers.0/op_0_add",
                ),
            ],
        )
    }

    /// The same step compiled: the norm and the add fused into one kernel
    /// (no op), an extern kernel of its own, and a different input to the
    /// output projection.
    fn compiled(header: &str) -> OpTable {
        log(
            header,
            &[
                ("layers.0.wq/op_0_mm", "Output hash: 1.0\nInput hashes: 5.0"),
                ("layers.0.wo/op_0_mm", "Output hash: 4.5\nInput hashes: 3.5"),
                ("layers.0/op_0_addmm", "Output hash: 6.0"),
            ],
        )
    }

    fn rows_of(m: &MatchTable, s: Status) -> Vec<usize> {
        (0..m.rows.len())
            .filter(|&i| m.rows[i].status == s)
            .collect()
    }

    /// A tied embedding/head's backward, eager: the head's weight-gradient
    /// `mm`, its input-gradient `mm`, and the accumulation `add` of the
    /// tied weight's two gradients. `changed` alters the accumulated value
    /// (of both runs' `add`, eager, and `addmm`, compiled).
    fn tied_eager(accumulated: &str) -> OpTable {
        log(
            "",
            &[
                ("head/op_0_mm", "Shape: torch.Size([64, 96]), Dtype: torch.float32\nOutput hash: 1.0"),
                ("head/op_1_mm", "Shape: torch.Size([96, 32]), Dtype: torch.float32\nOutput hash: 2.0\nPhase: backward"),
                ("head/op_2_mm", "Shape: torch.Size([64, 32]), Dtype: torch.float32\nOutput hash: 3.0\nPhase: backward"),
                (
                    "emb/op_0_add",
                    &format!("Shape: torch.Size([96, 32]), Dtype: torch.float32\nOutput hash: {accumulated}\nPhase: backward"),
                ),
            ],
        )
    }

    /// The same compiled by inductor: the weight-gradient `mm` and the
    /// accumulation fused into one `addmm` (which shifts the head's later
    /// `mm` to `op_1`).
    fn tied_compiled(accumulated: &str) -> OpTable {
        log(
            "Compiled: inductor\n",
            &[
                ("head/op_0_mm", "Shape: torch.Size([64, 96]), Dtype: torch.float32\nOutput hash: 1.0"),
                ("head/op_1_mm", "Shape: torch.Size([64, 32]), Dtype: torch.float32\nOutput hash: 3.0\nPhase: backward"),
                (
                    "head/op_2_addmm",
                    &format!("Shape: torch.Size([96, 32]), Dtype: torch.float32\nOutput hash: {accumulated}\nPhase: backward"),
                ),
            ],
        )
    }

    /// A new user's trial: a weight-tied model, eager against inductor,
    /// the same math, exited 1 naming a false cause. The exact pass paired
    /// eager's weight-gradient `mm` with compiled's input-gradient `mm`
    /// (counters shifted by the fusion; Shapes differ, and the drift
    /// release wanted a same-Shape candidate on both sides, but the
    /// compiled run has none: inductor fused it); and the compiled `addmm`
    /// holding eager's accumulated value gated as one-sided. Now the pair
    /// is released (a row the other run may have fused away needs no
    /// candidate), the `mm`s pair by Shape, and the `addmm` whose value a
    /// fused-away eager row has is shown, not gating. Another value gates.
    #[test]
    fn a_fused_kernel_holding_a_fused_away_value_does_not_gate() {
        let (a, b) = (tied_eager("5.0"), tied_compiled("5.0"));
        let m = match_tables(&a, &b, &MatchOptions::default());
        let c = m.counts();
        assert_eq!((c.matched, c.diff, c.only1, c.only2), (2, 0, 2, 1), "{c:?}");
        assert_eq!((c.fused, c.gating), (3, 0), "{c:?}");
        let i = rows_of(&m, Status::Only2)[0];
        let notes = row_notes(&a, &b, &m, i, ("eager", "compiled"));
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("a fused kernel of compiled's compiler (inductor)")),
            "{notes:?}"
        );
        // The accumulated gradient differs at float rounding (full
        // precision's 17 digits): within the tolerance, still excused.
        let m = match_tables(
            &a,
            &tied_compiled("5.00000000000001"),
            &MatchOptions::default(),
        );
        assert_eq!((m.counts().fused, m.counts().gating), (3, 0));
        // The accumulated gradient differs: the compiled kernel gates.
        let m = match_tables(&a, &tied_compiled("5.5"), &MatchOptions::default());
        assert_eq!((m.counts().fused, m.counts().gating), (2, 1));
        // Without a compiled run nothing is excused: the eager run has
        // more backward `mm`s of the head, so the one without a same-Shape
        // partner is its own (only1, gating), and the `mm`s pair by Shape.
        let plain = log("", &[("head/op_0_mm", "Shape: torch.Size([64, 96]), Dtype: torch.float32\nOutput hash: 1.0"),
            ("head/op_1_mm", "Shape: torch.Size([64, 32]), Dtype: torch.float32\nOutput hash: 3.0\nPhase: backward")]);
        let m = match_tables(&a, &plain, &MatchOptions::default());
        let c = m.counts();
        assert_eq!((c.diff, c.fused, c.only1, c.gating), (0, 0, 2, 2), "{c:?}");
    }

    /// A change made after the optimizer step in the eager run (a weight
    /// decay by hand), against an inductor run: the optimizer step is not
    /// compiled (the compiled run records optimizer-phase rows), so the
    /// eager run's extra optimizer-phase rows gate; a new user's trial saw
    /// them excused as fused away. Against a compiled run without
    /// optimizer-phase rows (a compiled optimizer step) they are excused.
    #[test]
    fn optimizer_rows_are_not_fused_away_when_the_compiled_run_has_optimizer_rows() {
        let step = "Output hash: 1.0\nInput hashes: 5.0";
        let fwd = ("w/op_0_mm", "Output hash: 9.0");
        let bwd = ("w/op_1_mm", "Output hash: 8.0\nPhase: backward");
        let eager = log(
            "",
            &[
                fwd,
                bwd,
                ("<none>/op_0_add_", step),
                ("<none>/op_1_mul_", "Output hash: 0.9"),
            ],
        );
        let compiled = log(
            "Compiled: inductor\n",
            &[fwd, bwd, ("<none>/op_0_add_", step)],
        );
        let m = match_tables(&eager, &compiled, &MatchOptions::default());
        assert_eq!(
            (m.counts().only1, m.counts().fused, m.counts().gating),
            (1, 0, 1)
        );
        let compiled_step = log("Compiled: inductor\n", &[fwd, bwd]);
        let m = match_tables(&eager, &compiled_step, &MatchOptions::default());
        assert_eq!(
            (m.counts().only1, m.counts().fused, m.counts().gating),
            (2, 2, 0)
        );
    }

    #[test]
    fn ops_fused_away_by_run2s_compiler_are_shown_counted_not_gating() {
        let (a, b) = (eager(""), compiled("Compiled: inductor\n"));
        let m = match_tables(&a, &b, &MatchOptions::default());
        let only1 = rows_of(&m, Status::Only1);
        assert_eq!(only1, vec![1, 2]);
        for &i in &only1 {
            assert!(m.rows[i].has(ROW_FUSED) && !m.rows[i].gates(), "row {i}");
            assert_eq!(m.cause_kinds.get(i).copied().flatten(), None);
            let notes = row_notes(&a, &b, &m, i, ("eager", "compiled"));
            assert!(
                notes.contains(
                    &"fused away by compiled's compiler (inductor): shown, not gating".to_string()
                ),
                "{notes:?}"
            );
        }
        // Run 1 is not compiled: run 2's extern kernel still gates.
        let only2 = rows_of(&m, Status::Only2);
        assert_eq!(only2.len(), 1);
        assert!(!m.rows[only2[0]].has(ROW_FUSED) && m.rows[only2[0]].gates());
        let c = m.counts();
        assert_eq!((c.only1, c.only2, c.diff), (2, 1, 1));
        assert_eq!((c.fused, c.gating, c.unsynced, c.ignored), (2, 2, 0, 0));
        // The projection whose input came from the fused add is a cause of
        // its own, never one of the fused rows.
        assert_eq!(m.causes.first_cause, Some(3));
        assert!(m
            .causes
            .causes
            .iter()
            .all(|x| !m.rows[x.index].has(ROW_FUSED)));
        assert_eq!(m.first_divergence(), Some(3));
        assert_eq!(m.first_nongating(), Some(1));
    }

    #[test]
    fn without_a_fusing_compiler_on_the_other_side_one_sided_rows_gate() {
        for (h1, h2) in [
            ("", ""),
            ("", "Compiled: aot_eager\n"),
            ("", "Compiled: eager\n"),
            ("Compiled: inductor\n", "Compiled: inductor\n"),
        ] {
            let (a, b) = (eager(h1), compiled(h2));
            let m = match_tables(&a, &b, &MatchOptions::default());
            let c = m.counts();
            assert_eq!((c.only1, c.fused, c.gating), (2, 0, 4), "{h1:?} {h2:?}");
            assert!(m.rows.iter().all(|r| !r.has(ROW_FUSED)));
            assert_eq!(m.first_divergence(), Some(1));
        }
    }

    #[test]
    fn ops_fused_away_by_run1s_compiler_are_the_only2_rows() {
        // Run 1 compiled by an unknown backend (taken to fuse), run 2 eager.
        let (a, b) = (compiled("Compiled: my_backend\n"), eager(""));
        let m = match_tables(&a, &b, &MatchOptions::default());
        let c = m.counts();
        assert_eq!((c.only1, c.only2, c.fused, c.gating), (1, 2, 2, 2));
        for i in rows_of(&m, Status::Only2) {
            assert!(m.rows[i].has(ROW_FUSED) && !m.rows[i].gates());
            let notes = row_notes(&a, &b, &m, i, ("c", "e"));
            assert!(
                notes
                    .iter()
                    .any(|n| n.starts_with("fused away by c's compiler (my_backend)")),
                "{notes:?}"
            );
        }
        assert!(rows_of(&m, Status::Only1)
            .iter()
            .all(|&i| m.rows[i].gates() && !m.rows[i].has(ROW_FUSED)));
    }
    /// A module-level step: `fc`'s output, its weight's gradient and the
    /// weight after the optimizer, and (eager only) an output of `act`.
    fn module_level(header: &str, outputs: bool, grad: &str) -> OpTable {
        let mut blocks = vec![];
        if outputs {
            blocks.push(("fc/op_0_output", "Output hash: 1.0"));
            blocks.push(("act/op_0_output", "Output hash: 2.0"));
        }
        blocks.push(("fc/op_1_weight_grad", grad));
        blocks.push(("fc/op_2_weight", "Output hash: 4.0"));
        log(&format!("Level: modules\n{header}"), &blocks)
    }

    #[test]
    fn module_outputs_a_compiled_module_level_run_did_not_record_do_not_gate() {
        // Any backend: module hooks run in no compiled code, fusing or not.
        for backend in ["aot_eager", "inductor", "eager"] {
            let compiled = format!("Compiled: {backend}\n");
            let (a, b) = (
                module_level("", true, "Output hash: 3.0"),
                module_level(&compiled, false, "Output hash: 3.5"),
            );
            let m = match_tables(&a, &b, &MatchOptions::default());
            let only1 = rows_of(&m, Status::Only1);
            assert_eq!(only1, vec![0, 1], "{backend}");
            for &i in &only1 {
                assert!(
                    m.rows[i].has(ROW_FUSED) && !m.rows[i].gates(),
                    "{backend} row {i}"
                );
                let notes = row_notes(&a, &b, &m, i, ("eager", "compiled"));
                let want = format!(
                    "not recorded by compiled: its forward ran compiled ({backend}), where module hooks do not run: shown, not gating"
                );
                assert!(notes.contains(&want), "{notes:?}");
            }
            // The gradient that differs still gates, and is the first divergence.
            let c = m.counts();
            assert_eq!((c.fused, c.gating, c.diff), (2, 1, 1), "{backend}");
            assert_eq!(m.first_divergence(), Some(2), "{backend}");
        }
        // Not compiled: the outputs only in run 1 gate.
        let (a, b) = (
            module_level("", true, "Output hash: 3.0"),
            module_level("", false, "Output hash: 3.0"),
        );
        let m = match_tables(&a, &b, &MatchOptions::default());
        assert_eq!((m.counts().fused, m.counts().gating), (0, 2));
        // With `Compiled modules: fc`, only fc's output (and those inside
        // it) is not recorded; act's, only in run 1, gates.
        let (a, b) = (
            module_level("", true, "Output hash: 3.0"),
            module_level(
                "Compiled: torch.compile\nCompiled modules: fc\n",
                false,
                "Output hash: 3.0",
            ),
        );
        let m = match_tables(&a, &b, &MatchOptions::default());
        assert_eq!(rows_of(&m, Status::Only1), vec![0, 1]);
        assert!(m.rows[0].has(ROW_FUSED) && !m.rows[0].gates());
        assert!(!m.rows[1].has(ROW_FUSED) && m.rows[1].gates());
        assert_eq!(m.first_divergence(), Some(1));
        for (list, fused) in [
            ("<none>", 2),
            ("fc, act", 2),
            ("f", 0),
            ("act.x", 0),
            ("a", 0),
        ] {
            let b = module_level(
                &format!("Compiled: torch.compile\nCompiled modules: {list}\n"),
                false,
                "Output hash: 3.0",
            );
            let m = match_tables(&a, &b, &MatchOptions::default());
            assert_eq!(m.counts().fused, fused, "{list}");
        }
        // A compiled run's one-sided gradient or parameter record gates.
        let (a, b) = (
            module_level("Compiled: inductor\n", false, "Output hash: 3.0"),
            log(
                "Level: modules\n",
                &[("fc/op_2_weight", "Output hash: 4.0")],
            ),
        );
        let m = match_tables(&a, &b, &MatchOptions::default());
        assert_eq!(rows_of(&m, Status::Only1), vec![0]);
        assert!(m.rows[0].gates() && !m.rows[0].has(ROW_FUSED));
    }
}

//! Comparing the values of two paired rows: relative differences, hash-list
//! comparison under a tolerance, per-stat differences, and a pair's verdict
//! on its values ([`judge_values`]: whether it agrees, whether the output
//! differs or is in one run only). The row's status is chosen from that
//! verdict by the judging step (`judge.rs`), which adds `truncated`,
//! `missing` and the digests' verdict.
//!
//! With [`CompareOptions::default`] this reproduces the reference
//! comparator's `_hash_intensity`, `_compute_diffs` and status rule
//! (`shared/spec/matching.md`), with its two infinity defects fixed: equal
//! infinities are equal, and an infinity against anything else is a full
//! (1.0) difference, never NaN. A malformed number (`2.55.3141e+04`) is not
//! compared, where the reference calls it a full difference. The values are
//! read by [`crate::parser::value`].

use crate::parser::value::{is_unreadable, token_list};
pub use crate::parser::value::{split_tokens, token_number};
use crate::parser::{trim, Field, FieldSet, OpTable};

/// The floor of the reference's denominator, `max(|a|, |b|, 1e-30)`.
pub const DENOM_FLOOR: f64 = 1e-30;

/// A tolerance: two numbers agree when their relative difference is at most
/// `rtol` **or** their absolute difference is at most `atol` (with `both`:
/// **and**).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tolerance {
    /// Relative tolerance, on `|a - b| / max(|a|, |b|, 1e-30)`.
    pub rtol: f64,
    /// Absolute tolerance, on `|a - b|`.
    pub atol: f64,
    /// Both bounds must hold (a rules file's `rel <= X and abs <= Y`);
    /// `false`, the reference's form and the default: either one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub both: bool,
}

impl Tolerance {
    /// The reference's fixed hash threshold: relative 1e-8, no absolute term.
    pub const REFERENCE: Tolerance = Tolerance {
        rtol: 1e-8,
        atol: 0.0,
        both: false,
    };
    /// Whether `a` and `b` agree. Equal values (including `0` and `-0`, and
    /// equal infinities) always agree; NaN never agrees here (callers decide
    /// NaN against NaN).
    pub fn agrees(&self, a: f64, b: f64) -> bool {
        if a == b {
            return true;
        }
        match rel_diff(a, b) {
            Some(rd) => {
                let (rel, abs) = (rd <= self.rtol, (a - b).abs() <= self.atol);
                if self.both {
                    rel && abs
                } else {
                    rel || abs
                }
            }
            None => false,
        }
    }
}

/// How two rows are judged. The default is the reference's rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompareOptions {
    /// Tolerance on the Output hash and Input hashes values.
    pub hash: Tolerance,
    /// Tolerance on L2 norm, Min, Max, Mean (and L1 norm) when they gate the
    /// status; `None` (the reference) shows them without gating.
    pub stats: Option<Tolerance>,
    /// Whether `nan` against `nan` agrees (the reference: yes).
    pub nan_equal: bool,
    /// Whether differing Input hashes make a row `diff` (the reference: yes).
    pub gate_inputs: bool,
    /// Whether a Shape line that differs only in its dtype leaves the
    /// output agreeing: a pair of two dtypes judged under a per-dtype
    /// default (`--dtype-tolerance`, `[dtype.X]`: a dtype change expected,
    /// an autocast run against a float32 one; the dtype note still says
    /// it). The reference: no.
    pub dtype_free: bool,
}

impl CompareOptions {
    /// Whether every difference counts (`--bitwise`: rtol 0, atol 0).
    pub fn is_bitwise(&self) -> bool {
        self.hash.rtol == 0.0 && self.hash.atol == 0.0
    }
    /// Whether the hash tolerance is looser than the reference's (a
    /// `--rtol` above 1e-8, an `--atol` above the smallest normal float32:
    /// `--layouts`, a rule, a per-dtype default): a difference only the
    /// digests see, every printed value equal, is then within it.
    pub fn is_loosened(&self) -> bool {
        self.hash.rtol > Tolerance::REFERENCE.rtol || self.hash.atol > super::policy::F32_MIN_NORMAL
    }
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            hash: Tolerance::REFERENCE,
            stats: None,
            nan_equal: true,
            gate_inputs: true,
            dtype_free: false,
        }
    }
}

/// The reference's relative difference `|a - b| / max(|a|, |b|, 1e-30)`,
/// `None` when either side is NaN. Fixed: equal infinities give 0, an
/// infinity against anything else gives 1.0.
pub fn rel_diff(a: f64, b: f64) -> Option<f64> {
    if a.is_nan() || b.is_nan() {
        return None;
    }
    if a.is_infinite() || b.is_infinite() {
        return Some(if a == b { 0.0 } else { 1.0 });
    }
    Some((a - b).abs() / a.abs().max(b.abs()).max(DENOM_FLOOR))
}

/// Result of comparing two hash lists.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HashCmp {
    /// Whether every position agrees under the tolerance.
    pub agrees: bool,
    /// The reference's "hash intensity": the largest position-wise relative
    /// difference (1.0 for a one-sided, length, NaN or text mismatch);
    /// `None` when both lists are empty.
    pub intensity: Option<f64>,
    /// 0-based position of the first disagreeing value, if any.
    pub first_bad: Option<usize>,
    /// Number of values on each side.
    pub lens: (usize, usize),
}

/// Compares two comma-separated hash lists position by position.
///
/// Reference (`_hash_intensity`): both empty → none; one empty → 1.0;
/// identical text → 0; different lengths → 1.0; `nan` on one side only →
/// 1.0; else the largest relative difference. Unlike the reference (1.0), a
/// position that does not read on one side ([`crate::parser::value::Token::Unreadable`],
/// a malformed number) is not compared: it agrees and adds 0.
pub fn compare_hashes(a: &[u8], b: &[u8], tol: Tolerance, nan_equal: bool) -> HashCmp {
    let (a, b) = (trim(a), trim(b));
    if a.is_empty() && b.is_empty() {
        return HashCmp {
            agrees: true,
            intensity: None,
            first_bad: None,
            lens: (0, 0),
        };
    }
    if a.is_empty() || b.is_empty() {
        let lens = (
            if a.is_empty() {
                0
            } else {
                split_tokens(a).count()
            },
            if b.is_empty() {
                0
            } else {
                split_tokens(b).count()
            },
        );
        return HashCmp {
            agrees: false,
            intensity: Some(1.0),
            first_bad: Some(0),
            lens,
        };
    }
    if a == b && (nan_equal || !contains_nan(a)) {
        let n = if memchr::memchr(b'[', a).is_none() {
            memchr::memchr_iter(b',', a).count() + 1
        } else {
            split_tokens(a).count()
        };
        return HashCmp {
            agrees: true,
            intensity: Some(0.0),
            first_bad: None,
            lens: (n, n),
        };
    }
    let mut worst = 0.0f64;
    let mut first_bad = None;
    let (mut na, mut nb) = (0usize, 0usize);
    let mut ia = split_tokens(a);
    let mut ib = split_tokens(b);
    loop {
        let (ta, tb) = (ia.next(), ib.next());
        match (ta, tb) {
            (None, None) => break,
            (Some(_), None) => {
                na += 1;
                first_bad.get_or_insert(na - 1);
                worst = worst.max(1.0);
            }
            (None, Some(_)) => {
                nb += 1;
                first_bad.get_or_insert(nb - 1);
                worst = worst.max(1.0);
            }
            (Some(ta), Some(tb)) => {
                na += 1;
                nb += 1;
                let (rd, ok) = compare_token(ta, tb, tol, nan_equal);
                worst = worst.max(rd);
                if !ok {
                    first_bad.get_or_insert(na - 1);
                }
            }
        }
    }
    if na != nb {
        worst = worst.max(1.0);
    }
    HashCmp {
        agrees: first_bad.is_none(),
        intensity: Some(worst),
        first_bad,
        lens: (na, nb),
    }
}

/// Whether a value list (`1.0, nan`) holds a NaN.
pub fn contains_nan(list: &[u8]) -> bool {
    split_tokens(list).any(|t| token_number(t).is_some_and(f64::is_nan))
}

/// Compares one token pair: (relative difference for the intensity, agrees).
pub(super) fn compare_token(ta: &[u8], tb: &[u8], tol: Tolerance, nan_equal: bool) -> (f64, bool) {
    match (token_list(ta), token_list(tb)) {
        (Some(la), Some(lb)) => {
            let c = compare_hashes(la, lb, tol, nan_equal);
            return (c.intensity.unwrap_or(0.0), c.agrees);
        }
        (None, None) => {}
        _ => return (1.0, false),
    }
    match (token_number(ta), token_number(tb)) {
        (Some(x), Some(y)) => {
            if x.is_nan() || y.is_nan() {
                if x.is_nan() && y.is_nan() && nan_equal {
                    (0.0, true)
                } else {
                    (1.0, false)
                }
            } else {
                let rd = rel_diff(x, y).unwrap_or(1.0);
                (rd, tol.agrees(x, y))
            }
        }
        // A side that does not read (a malformed number, which the parser
        // warned about with its line and column): not compared, so never a
        // difference and never an origin. (The reference: 1.0 unless the
        // texts are equal.)
        _ => (0.0, true),
    }
}

/// Per-stat differences of two rows, as the reference's `_compute_diffs`:
/// for Shape, L2 norm, Min, Max, Mean present on both sides with different
/// text, the relative difference, or 1.0 when either side does not parse as
/// a number (Shape) or is NaN; a malformed number is not compared (`None`;
/// the reference: 1.0). Indexed like [`Field::DIFF_STATS`].
pub fn stat_diffs(t1: &OpTable, r1: usize, t2: &OpTable, r2: usize) -> [Option<f64>; 5] {
    Field::DIFF_STATS.map(|f| field_diff(t1, r1, t2, r2, f))
}

/// The relative difference of one field of a pair, as the report shows it
/// (rows JSONL, result pages, heatmap, Parquet): `None` when the field is
/// absent on a side or its texts are equal; else for a hash list (Output
/// hash, Input hashes) the reference's hash intensity at its threshold
/// ([`compare_hashes`] with [`Tolerance::REFERENCE`]), for Shape 1.0, and
/// for a stat the [`rel_diff`] of its values (1.0 when a side is NaN or
/// not a number; `None` for a malformed number, warned at parse).
pub fn field_diff(t1: &OpTable, r1: usize, t2: &OpTable, r2: usize, f: Field) -> Option<f64> {
    let (a, b) = (t1.field(r1, f), t2.field(r2, f));
    if a.is_empty() || b.is_empty() || a == b {
        return None;
    }
    match f {
        Field::OutputHash | Field::InputHashes => {
            compare_hashes(a, b, Tolerance::REFERENCE, true).intensity
        }
        Field::Shape => Some(1.0),
        _ => match (token_number(a), token_number(b)) {
            (Some(x), Some(y)) => Some(rel_diff(x, y).unwrap_or(1.0)),
            _ if is_unreadable(a) || is_unreadable(b) => None,
            _ => Some(1.0),
        },
    }
}

/// A paired row's worst difference ([`worst_difference`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorstDiff {
    /// The field it is in (`Output hash`, `Input hashes`, or a stat when
    /// stats gate).
    pub field: Field,
    /// Its relative difference (finite, above 0).
    pub rel: f64,
}

/// A paired row's worst difference: the largest finite relative difference
/// (above 0) among the fields that gate the row under `opts` and disagree
/// under it: the Output hash, the Input hashes when they gate (each only
/// when in `compared`; their [`compare_hashes`] intensity), and L2 norm,
/// Min, Max, Mean when stats gate (their [`rel_diff`]). On a tie the first
/// of that order wins. `None` when no gating field disagrees by a finite
/// amount (a NaN against a number is not a finite difference).
///
/// The one rule for "how far apart is this row": root cause's largest
/// difference of a rank and its heatmap's colours both use it.
pub fn worst_difference(
    t1: &OpTable,
    r1: usize,
    t2: &OpTable,
    r2: usize,
    opts: &CompareOptions,
    compared: FieldSet,
) -> Option<WorstDiff> {
    let mut worst: Option<WorstDiff> = None;
    let mut consider = |field: Field, rel: f64| {
        if rel.is_finite() && rel > 0.0 && worst.is_none_or(|w| rel > w.rel) {
            worst = Some(WorstDiff { field, rel });
        }
    };
    let hashes: &[Field] = if opts.gate_inputs {
        &[Field::OutputHash, Field::InputHashes]
    } else {
        &[Field::OutputHash]
    };
    for &f in hashes {
        if !compared.contains(f) {
            continue;
        }
        let c = compare_hashes(t1.field(r1, f), t2.field(r2, f), opts.hash, opts.nan_equal);
        if !c.agrees {
            consider(f, c.intensity.unwrap_or(0.0));
        }
    }
    // The stats gate under their tolerance, or, where the digests say the
    // tensors differ, under the hash's (the judge's rule for a change whose
    // signs cancel in the Output hash): their difference is then the row's
    // (trial 22 M5: such rows had no number and the step strip shaded
    // them darkest).
    let stats = opts
        .stats
        .or_else(|| (bitwise_identical(t1, r1, t2, r2) == Some(false)).then_some(opts.hash));
    if let Some(tol) = stats {
        for f in [Field::L2Norm, Field::Min, Field::Max, Field::Mean] {
            let (a, b) = (t1.field(r1, f), t2.field(r2, f));
            if a.is_empty() || b.is_empty() || a == b {
                continue;
            }
            if let (Some(x), Some(y)) = (token_number(a), token_number(b)) {
                if !tol.agrees(x, y) {
                    consider(f, rel_diff(x, y).unwrap_or(0.0));
                }
            }
        }
    }
    worst
}

/// Whether the stats present on both sides agree under `tol` (NaN against
/// NaN per `nan_equal`; equal text always agrees).
pub fn stats_agree(
    t1: &OpTable,
    r1: usize,
    t2: &OpTable,
    r2: usize,
    tol: Tolerance,
    nan_equal: bool,
) -> bool {
    [
        Field::L1Norm,
        Field::L2Norm,
        Field::Min,
        Field::Max,
        Field::Mean,
    ]
    .iter()
    .filter(|f| {
        **f != Field::L1Norm
            || (t1.schema().contains(Field::L1Norm) && t2.schema().contains(Field::L1Norm))
    })
    .all(|f| {
        let (a, b) = (t1.field(r1, *f), t2.field(r2, *f));
        if a.is_empty() || b.is_empty() {
            return true;
        }
        let (_, ok) = compare_token(a, b, tol, nan_equal);
        ok
    })
}

/// Whether the hash lists in `field` (Output hash or Input hashes) of two
/// paired rows agree under `opts`.
pub fn hashes_agree(
    t1: &OpTable,
    r1: usize,
    t2: &OpTable,
    r2: usize,
    field: Field,
    opts: &CompareOptions,
) -> bool {
    compare_hashes(
        t1.field(r1, field),
        t2.field(r2, field),
        opts.hash,
        opts.nan_equal,
    )
    .agrees
}

/// The verdict on a pair of rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairVerdict {
    /// Everything compared agrees.
    pub agrees: bool,
    /// The output itself differs: Shape text, or Output hash beyond tolerance.
    pub output_differs: bool,
    /// The Output hash is present on one side only (and the Shape agrees).
    pub output_missing: bool,
    /// Both Shape texts are present and differ (compared or not).
    pub shape_text_differs: bool,
    /// Every printed value ([`Field::PRINTED`]) is the same text on both
    /// sides, each present on both or on neither.
    pub same_text: bool,
}

/// Judges a pair: the Shape text must be equal, the Output hash and Input
/// hashes must agree under `opts.hash`, and, when `opts.stats` is set, the
/// stats under it. Fields outside `compared` (ones a log never records) are
/// not compared. With the defaults and full schemas this is the reference's
/// status rule.
///
/// The printed values are read once; when they are the same text on both
/// sides (most pairs of runs that agree), NaN agrees with NaN and the stats
/// do not gate, every comparison above agrees without reading a number.
pub fn judge_values(
    t1: &OpTable,
    r1: usize,
    t2: &OpTable,
    r2: usize,
    opts: &CompareOptions,
    compared: crate::parser::FieldSet,
) -> PairVerdict {
    let agree = PairVerdict {
        agrees: true,
        output_differs: false,
        output_missing: false,
        shape_text_differs: false,
        same_text: true,
    };
    // Field lines that are the same bytes (most pairs of runs that agree):
    // every field is the same text, decided by one compare of the blocks
    // without looking a field up.
    if opts.nan_equal && opts.stats.is_none() && t1.block_fields(r1) == t2.block_fields(r2) {
        return agree;
    }
    let (x, y) = (
        t1.fields_of(r1, Field::PRINTED),
        t2.fields_of(r2, Field::PRINTED),
    );
    let same_text = x == y;
    if same_text && opts.nan_equal && opts.stats.is_none() {
        return agree;
    }
    let (s1, s2) = (x[0], y[0]);
    let shape_text_differs = s1 != s2 && !s1.is_empty() && !s2.is_empty();
    let shape_differs = compared.contains(Field::Shape)
        && s1 != s2
        && !(opts.dtype_free
            && crate::logformat::read_shape(s1).same_size(&crate::logformat::read_shape(s2)));
    let has_out = compared.contains(Field::OutputHash);
    let output_missing = has_out && t1.has(r1, Field::OutputHash) != t2.has(r2, Field::OutputHash);
    let output_differs =
        shape_differs || (has_out && !hashes_agree(t1, r1, t2, r2, Field::OutputHash, opts));
    let agrees = !output_differs
        && (!compared.contains(Field::InputHashes)
            || !opts.gate_inputs
            || hashes_agree(t1, r1, t2, r2, Field::InputHashes, opts))
        && opts
            .stats
            .is_none_or(|tol| stats_agree(t1, r1, t2, r2, tol, opts.nan_equal));
    PairVerdict {
        agrees,
        output_differs,
        output_missing: output_missing && !shape_differs,
        shape_text_differs,
        same_text,
    }
}

/// Positions (0-based) where two rows' digest lists in `field` differ, or
/// `None` when either row has no such line. A malformed digest (warned at
/// parse with its line and column) equals only the same text on the other
/// side: a log compared with itself agrees everywhere.
pub fn digest_differences(
    t1: &OpTable,
    r1: usize,
    t2: &OpTable,
    r2: usize,
    field: Field,
) -> Option<Vec<usize>> {
    if !t1.has(r1, field) || !t2.has(r2, field) {
        return None;
    }
    let (text1, text2) = (t1.field(r1, field), t2.field(r2, field));
    if text1 == text2 {
        return Some(Vec::new());
    }
    let a: Vec<Option<u64>> = t1.digests(r1, field).collect();
    let b: Vec<Option<u64>> = t2.digests(r2, field).collect();
    Some(
        (0..a.len().max(b.len()))
            .filter(|&i| match (a.get(i), b.get(i)) {
                (Some(Some(x)), Some(Some(y))) => x != y,
                (Some(_), Some(_)) => digest_text(text1, i) != digest_text(text2, i),
                _ => true,
            })
            .collect(),
    )
}

/// The `i`-th value of a digest list, trimmed.
fn digest_text(list: &[u8], i: usize) -> Option<&[u8]> {
    list.split(|b| *b == b',').nth(i).map(<[u8]>::trim_ascii)
}

/// Whether two rows are bitwise identical by their digests: `None` when
/// either row has no `Output digest:` line, else whether every Output
/// digest and Input digest (when both have them) is equal.
pub fn bitwise_identical(t1: &OpTable, r1: usize, t2: &OpTable, r2: usize) -> Option<bool> {
    let out = digest_differences(t1, r1, t2, r2, Field::OutputDigest)?;
    let inputs = digest_differences(t1, r1, t2, r2, Field::InputDigests).unwrap_or_default();
    Some(out.is_empty() && inputs.is_empty())
}

/// Whether every printed value two rows both have is the same text (Shape,
/// hashes, stats).
pub fn printed_equal(t1: &OpTable, r1: usize, t2: &OpTable, r2: usize) -> bool {
    [
        Field::Shape,
        Field::OutputHash,
        Field::InputHashes,
        Field::L1Norm,
        Field::L2Norm,
        Field::Min,
        Field::Max,
        Field::Mean,
    ]
    .iter()
    .all(|f| t1.field(r1, *f) == t2.field(r2, *f))
}

/// Whether a row's stats or Output hash hold a NaN or an infinity.
pub fn non_finite(t: &OpTable, r: usize) -> bool {
    if !t.maybe_nonfinite(r) {
        return false; // no `n`/`N` in any of these values (checked at parse)
    }
    let has_l1 = t.schema().contains(Field::L1Norm);
    Field::NONFINITE
        .iter()
        .filter(|f| has_l1 || **f != Field::L1Norm)
        .any(|f| holds_nonfinite(t.field(r, *f)))
}

/// Whether a field's text holds a NaN or an infinity (any of its values).
pub fn holds_nonfinite(v: &[u8]) -> bool {
    // `%.6e` numbers hold no `n`/`N`; only then look closer.
    memchr::memchr2(b'n', b'N', v).is_some()
        && split_tokens(v).any(|tok| token_number(tok).is_some_and(|x| !x.is_finite()))
}

/// 0-based positions where two hash lists disagree under `tol` (a length
/// mismatch makes every position past the shorter list disagree).
pub fn differing_positions(a: &[u8], b: &[u8], tol: Tolerance, nan_equal: bool) -> Vec<usize> {
    let (a, b) = (trim(a), trim(b));
    if a == b && (nan_equal || !contains_nan(a)) {
        return Vec::new();
    }
    let ta: Vec<&[u8]> = if a.is_empty() {
        vec![]
    } else {
        split_tokens(a).collect()
    };
    let tb: Vec<&[u8]> = if b.is_empty() {
        vec![]
    } else {
        split_tokens(b).collect()
    };
    (0..ta.len().max(tb.len()))
        .filter(|&i| match (ta.get(i), tb.get(i)) {
            (Some(x), Some(y)) => !compare_token(x, y, tol, nan_equal).1,
            _ => true,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_field_lines_agree_and_the_rest_is_judged_field_by_field() {
        // Row 0 of each: the same field lines under other keys (the fast
        // path); row 1: NaN Output hashes; row 2: only the Location (not a
        // printed value) differs; row 3: the Output hash differs.
        let log = |key: &str, loc: &str, out3: &str| {
            let block = |k: &str, out: &str, loc: &str| {
                format!("[{k}]\n  Shape: torch.Size([2]), Dtype: torch.float32\n  L2 norm: 1.000000e+00\n  Output hash: {out}\n  Input hashes: 2.000000e+00\n  Location: {loc}\n\n")
            };
            let text = [
                block(&format!("{key}/op_0_mm"), "3.000000e+00", "m.py:1"),
                block("b/op_0_add", "nan", "m.py:2"),
                block("c/op_0_mul", "4.000000e+00", loc),
                block("d/op_0_mul", out3, "m.py:4"),
            ]
            .concat();
            crate::parser::parse_bytes(text.into_bytes(), "rank_0_activations.log")
        };
        let (t1, t2) = (
            log("a", "m.py:3", "5.000000e+00"),
            log("z", "x.py:9", "6.000000e+00"),
        );
        let all = t1.schema();
        let judge = |r: usize, opts: &CompareOptions| judge_values(&t1, r, &t2, r, opts, all);
        let reference = CompareOptions::default();
        for r in [0, 1, 2] {
            let v = judge(r, &reference);
            assert!(v.agrees && v.same_text, "row {r}: {v:?}");
        }
        assert!(!judge(3, &reference).agrees);
        assert!(!judge(3, &reference).same_text);
        // NaN against NaN is a difference under --nan-is-diff: equal bytes
        // do not decide then.
        let nan_is_diff = CompareOptions {
            nan_equal: false,
            ..reference
        };
        assert!(!judge(1, &nan_is_diff).agrees);
        assert!(judge(1, &nan_is_diff).same_text);
    }

    fn cmp(a: &str, b: &str) -> HashCmp {
        compare_hashes(a.as_bytes(), b.as_bytes(), Tolerance::REFERENCE, true)
    }

    #[test]
    fn reference_hash_intensity() {
        assert_eq!(cmp("", "").intensity, None);
        assert!(cmp("", "").agrees);
        assert_eq!(cmp("1.0", "").intensity, Some(1.0));
        assert_eq!(cmp("1.0, 2.0", "1.0, 2.0").intensity, Some(0.0));
        assert_eq!(cmp("1.0, 2.0", "1.0").intensity, Some(1.0));
        assert!(!cmp("1.0, 2.0", "1.0").agrees);
        assert!(cmp("nan, 1.0", "nan, 1.0").agrees);
        assert!(cmp("nan", "NaN").agrees);
        assert_eq!(cmp("nan", "1.0").intensity, Some(1.0));
        // Unlike the reference (1.0): a value that does not read is not
        // compared.
        assert!(cmp("abc", "abd").agrees);
        assert_eq!(cmp("abc", "abd").intensity, Some(0.0));
        assert!(cmp("2.55.3141e+04", "2.553141e+04").agrees);
        assert!(!cmp("2.55.3141e+04, 1.0", "2.553141e+04, 2.0").agrees);
        assert_eq!(
            cmp("2.55.3141e+04, 1.0", "2.553141e+04, 2.0").first_bad,
            Some(1)
        );
        let c = cmp("1.000000e+00, 2.000000e+00", "1.000000e+00, 2.000001e+00");
        assert!(!c.agrees);
        assert_eq!(c.first_bad, Some(1));
        assert!((c.intensity.unwrap() - 5e-7).abs() < 1e-12);
        assert!(cmp("1.0", "1.000000001").agrees, "rd 1e-9 is within 1e-8");
    }

    #[test]
    fn infinities_fixed() {
        // The reference computes NaN here and silently skips it; actdiff does not.
        assert!(!cmp("inf", "1.0").agrees);
        assert_eq!(cmp("inf", "1.0").intensity, Some(1.0));
        assert!(!cmp("inf", "-inf").agrees);
        assert!(cmp("inf", "Infinity").agrees);
        assert_eq!(rel_diff(f64::INFINITY, f64::INFINITY), Some(0.0));
        assert_eq!(rel_diff(f64::INFINITY, 3.0), Some(1.0));
    }

    #[test]
    fn zeros_and_nan_settings() {
        assert!(cmp("-0.000000e+00", "0.000000e+00").agrees);
        assert_eq!(rel_diff(-0.0, 0.0), Some(0.0));
        let strict = compare_hashes(b"nan", b"nan", Tolerance::REFERENCE, false);
        assert!(!strict.agrees);
    }

    #[test]
    fn second_writer_spellings() {
        assert!(cmp("6.400000e+01, inf", "self=64.0, mat2=\"Infinity\"").agrees);
        assert!(cmp("nan", "<root>=\"NaN\"").agrees);
        let c = cmp("<root>=\"NaN\"", "<root>=[1.25e+01, 3735928559]");
        assert!(!c.agrees);
        assert_eq!(c.lens, (1, 1), "a tuple is one value");
        assert!(cmp("[1.0, 2.0]", "x=[1.0, 2.0]").agrees);
    }

    #[test]
    fn tolerance_or_rule() {
        let t = Tolerance {
            rtol: 1e-4,
            atol: 1e-3,
            both: false,
        };
        assert!(t.agrees(1.0, 1.00005));
        assert!(t.agrees(0.0, 0.0009));
        assert!(!t.agrees(1.0, 1.01));
        assert!(!t.agrees(f64::NAN, f64::NAN));
        // `rel <= 1e-4 and abs <= 1e-3`: each alone is not enough.
        let t = Tolerance { both: true, ..t };
        assert!(t.agrees(1.0, 1.00005), "both hold");
        assert!(!t.agrees(0.0, 0.0009), "abs holds, rel does not");
        assert!(!t.agrees(100.0, 100.005), "rel holds, abs does not");
        assert!(t.agrees(0.0, -0.0));
    }

    /// A row whose digests differ and whose stats differ beyond the hash's
    /// tolerance while its Output hash agrees (the judge's rule for a
    /// change whose signs cancel) has its stats' difference as its worst,
    /// though the stats do not gate by default (trial 22 M5: no number, so
    /// the step strip shaded the smallest change darkest). With equal
    /// digests the stats are not looked at.
    #[test]
    fn differing_digests_make_the_stats_difference_the_rows() {
        let log = |mean: &str, digest: &str| {
            let text = format!(
                "[m/op_0_mul]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  L2 norm: 1.5e+00\n  Min: -1.0e+00\n  Max: 1.0e+00\n  Mean: {mean}\n  Output hash: 3.0e+00\n  Input hashes: 2.0e+00\n  Output digest: {digest}\n  Input digests: 00000000000000bb\n\n"
            );
            crate::parser::parse_bytes(text.into_bytes(), "rank_0_activations.log")
        };
        let (a, b) = (
            log("1.0e-03", "00000000000000aa"),
            log("1.1e-03", "00000000000000cc"),
        );
        let all = a.schema();
        let w = worst_difference(&a, 0, &b, 0, &CompareOptions::default(), all).unwrap();
        assert_eq!(w.field, Field::Mean);
        assert!((w.rel - 0.1 / 1.1).abs() < 1e-9, "{}", w.rel);
        let c = log("1.1e-03", "00000000000000aa");
        assert!(worst_difference(&a, 0, &c, 0, &CompareOptions::default(), all).is_none());
    }
}

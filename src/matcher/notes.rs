//! Row notes: short, specific explanations of why a row looks the way it
//! does ("input 731 of 1200 differs (rel 1.0e-6)", "dtype bfloat16 →
//! float8_e4m3fn", "non-finite in run1 only"), computed on demand for the
//! rows a report shows. Each note has a [`NoteKind`], which the report
//! reads to place it (a chip or the row's text), never its wording.

use super::cause::CauseKind;
use super::compare::{compare_hashes, compare_token, split_tokens, token_number};
use super::policy::dtype_of;
use super::{
    MatchTable, Sides, Status, ROW_FUSED, ROW_IGNORED, ROW_NONFINITE1, ROW_NONFINITE2,
    ROW_RECOMPUTED, ROW_UNSYNCED,
};
use crate::parser::{Field, OpTable};
use NoteKind as K;

/// The dims of a Shape text (`torch.Size([2, 64]), Dtype: ...` → `[2, 64]`).
pub fn dims_of(shape: &[u8]) -> Option<Vec<i64>> {
    crate::logformat::read_shape(shape).dims()
}

/// How two shapes differ, position by position (`dim0 6 vs 5`), or `None`
/// when the dims are equal or unreadable.
pub fn dims_difference(s1: &[u8], s2: &[u8]) -> Option<String> {
    let (a, b) = (dims_of(s1)?, dims_of(s2)?);
    if a == b {
        return None;
    }
    if a.len() != b.len() {
        return Some(format!("rank {} vs {}", a.len(), b.len()));
    }
    let d: Vec<String> = a
        .iter()
        .zip(&b)
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, (x, y))| format!("dim{i} {x} vs {y}"))
        .collect();
    Some(d.join(", "))
}

/// Whether one value is zero and the other a float32 subnormal. Equal
/// texts are equal values: not read (reading every shown row's stats cost
/// more than the rest of its notes).
fn is_subnormal_vs_zero(a: &[u8], b: &[u8]) -> bool {
    if a == b {
        return false;
    }
    match (token_number(a), token_number(b)) {
        (Some(x), Some(y)) => {
            (x == 0.0 && y != 0.0 && y.abs() < f32::MIN_POSITIVE as f64)
                || (y == 0.0 && x != 0.0 && x.abs() < f32::MIN_POSITIVE as f64)
        }
        _ => false,
    }
}

/// What a row note says: the report places notes by kind (see
/// `report/rowdata.rs`), so rewording a note never moves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoteKind {
    /// A one-sided row's position in its run (`only in a: op 3 of 9 there`).
    OnlyIn,
    /// An unsynced collective: shown, not gating.
    Unsynced,
    /// An ignored op: shown, not gating.
    Ignored,
    /// A one-sided row whose op the other run's compiler fused away: shown,
    /// not gating.
    Fused,
    /// A one-sided row that is its run's activation checkpointing
    /// recomputation: shown, not gating.
    Recomputed,
    /// NaN or Inf in one run or both.
    NonFinite,
    /// The exact pass paired keys that differ in their root model class.
    KeyNormalised,
    /// A block cut short by the end of its file: no verdict.
    Truncated,
    /// Both rows' digests are equal.
    Bitwise,
    /// The digests differ while every printed value agrees.
    DigestsDiffer,
    /// The row's root-cause class ([`CauseKind::as_str`]).
    Cause(CauseKind),
    /// The row's cause is within print precision.
    PrintLimited,
    /// Later rows read the same differing input (an entry's count).
    SameInput,
    /// A one-sided cause's op of one run only (`fed by K (only in b)`).
    FedBy,
    /// The two rows' dtypes differ (`dtype bfloat16 → float8_e4m3fn`).
    Dtype,
    /// The two rows' dims differ.
    Shape,
    /// The Output hash is in one run only.
    HashMissing,
    /// The hash lists have different lengths.
    HashCount,
    /// Which value of a hash list differs first, and by how much.
    ValueDiffers,
    /// A subnormal against zero in a stat.
    Subnormal,
    /// The keys differ only in the layer index: a `--layer-offset` hint.
    LayerIndex,
    /// The value re-pairing made this pair ([`super::repair`]).
    Repaired,
}

/// One row note: its kind and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// What it says.
    pub kind: NoteKind,
    /// How it says it (rows JSONL, the result pages).
    pub text: String,
}

/// The texts of the notes of one result row ([`row_notes_with_kind`]).
pub fn row_notes(
    t1: &OpTable,
    t2: &OpTable,
    m: &MatchTable,
    index: usize,
    names: (&str, &str),
) -> Vec<String> {
    row_notes_with_kind(t1, t2, m, index, names)
        .into_iter()
        .map(|n| n.text)
        .collect()
}

/// Notes for one result row, with their kinds. `names` are the two runs'
/// display names. The notes come in a fixed order: how the row stands
/// (one-sided, unsynced, ignored, fused, non-finite), then for a pair how it
/// was paired and judged, its root cause, its Shape, its hash lists, its
/// stats and its keys.
pub fn row_notes_with_kind(
    t1: &OpTable,
    t2: &OpTable,
    m: &MatchTable,
    index: usize,
    names: (&str, &str),
) -> Vec<Note> {
    let row = NoteRow {
        t1,
        t2,
        m,
        index,
        names,
    };
    let mut out = Notes(Vec::new());
    let (r1, r2) = row.standing_notes(&mut out);
    let (Some(r1), Some(r2)) = (r1, r2) else {
        return out.0;
    };
    row.pairing_notes(r1, r2, &mut out);
    row.cause_notes(&mut out);
    row.shape_notes(r1, r2, &mut out);
    row.hash_notes(r1, r2, &mut out);
    for f in [Field::Min, Field::Max, Field::Mean, Field::L2Norm] {
        if is_subnormal_vs_zero(t1.field(r1, f), t2.field(r2, f)) {
            out.push(K::Subnormal, format!("subnormal vs zero in {}", f.label()));
        }
    }
    row.layer_index_note(r1, r2, &mut out);
    out.0
}

/// One result row whose notes are being made.
struct NoteRow<'a> {
    t1: &'a OpTable,
    t2: &'a OpTable,
    m: &'a MatchTable,
    index: usize,
    /// The two runs' display names.
    names: (&'a str, &'a str),
}

impl NoteRow<'_> {
    /// How the row stands, paired or not: one-sided (with its position),
    /// unsynced, ignored, fused away, recomputed, non-finite. Returns its table rows.
    fn standing_notes(&self, out: &mut Notes) -> (Option<usize>, Option<usize>) {
        let (t1, t2) = (self.t1, self.t2);
        let row = &self.m.rows[self.index];
        let (n1, n2) = self.names;
        let (r1, r2) = match row.sides() {
            Sides::Both(r1, r2) => (Some(r1), Some(r2)),
            Sides::Only1(a) => {
                let text = format!("only in {n1}: op {} of {} there", a + 1, t1.len());
                out.push(K::OnlyIn, text);
                (Some(a), None)
            }
            Sides::Only2(b) => {
                let text = format!("only in {n2}: op {} of {} there", b + 1, t2.len());
                out.push(K::OnlyIn, text);
                (None, Some(b))
            }
        };
        if row.has(ROW_UNSYNCED) {
            out.push(K::Unsynced, "unsynced collective: shown, not gating");
        }
        if row.has(ROW_IGNORED) {
            out.push(K::Ignored, "ignored: shown, not gating");
        }
        if row.has(ROW_FUSED) {
            // The run without the row is the one that compiled, unless the
            // row is a fused kernel's result in the compiled run
            // (`judge::mark_fused_results`).
            let (by, t) = if r1.is_some() { (n2, t2) } else { (n1, t1) };
            let (own, own_t) = if r1.is_some() { (n1, t1) } else { (n2, t2) };
            let h = t.header();
            let backend = h.compiled.as_ref().map_or("", |b| b.name());
            let own_backend = own_t.header().compiled.as_ref().map(|b| b.name());
            let text = if let (Some(b), true) = (own_backend, backend.is_empty()) {
                format!(
                    "a fused kernel of {own}'s compiler ({b}): its result is the value of an op \
                     {by} has and {own} fused away (same Shape and Output hash): shown, not gating"
                )
            } else if h.level == crate::logformat::CaptureLevel::Modules {
                format!(
                    "not recorded by {by}: its forward ran compiled ({backend}), where module \
                     hooks do not run: shown, not gating"
                )
            } else {
                format!("fused away by {by}'s compiler ({backend}): shown, not gating")
            };
            out.push(K::Fused, text);
        }
        if row.has(ROW_RECOMPUTED) {
            let (by, t, r) = match (r1, r2) {
                (Some(r), _) => (n1, t1, r),
                (None, Some(r)) => (n2, t2, r),
                (None, None) => unreachable!("a recomputed row is one-sided"),
            };
            let text = if super::recompute::is_communication(t, r) {
                format!(
                    "gathered again in backward by {by}'s parallel layout (FSDP2's \
                     reshard_after_forward; a repeat of a forward op): shown, not gating"
                )
            } else {
                format!(
                    "recomputed in backward by {by}'s activation checkpointing (a repeat of a \
                     forward op): shown, not gating"
                )
            };
            out.push(K::Recomputed, text);
        }
        match (row.has(ROW_NONFINITE1), row.has(ROW_NONFINITE2)) {
            (true, true) => out.push(K::NonFinite, "non-finite in both runs"),
            (true, false) => out.push(K::NonFinite, format!("non-finite in {n1} only")),
            (false, true) => out.push(K::NonFinite, format!("non-finite in {n2} only")),
            _ => {}
        }
        (r1, r2)
    }

    /// How the pair was made and judged: a normalised key, a value
    /// re-pairing, a truncated block, bitwise identity, digests that differ
    /// under agreeing values.
    fn pairing_notes(&self, r1: usize, r2: usize, out: &mut Notes) {
        let (t1, t2, m, index) = (self.t1, self.t2, self.m, self.index);
        let row = &m.rows[index];
        if row.strategy == super::Strategy::Exact && t1.key(r1) != t2.key(r2) {
            out.push(
                K::KeyNormalised,
                "key normalised: root model class stripped",
            );
        }
        if m.repaired.binary_search(&(index as u32)).is_ok() {
            out.push(K::Repaired, "re-paired by value");
        }
        if m.relinked.binary_search(&(index as u32)).is_ok() {
            out.push(K::Repaired, "re-paired by the ops that read it");
        }
        if row.status == Status::Truncated {
            let side = if t1.is_truncated(r1) {
                self.names.0
            } else {
                self.names.1
            };
            out.push(K::Truncated, format!("{side} block truncated: no verdict"));
        }
        if row.has(super::ROW_BITWISE) {
            out.push(K::Bitwise, "bitwise identical");
        }
        if row.has(super::ROW_DIGEST_ONLY) {
            out.push(
                K::DigestsDiffer,
                if row.status == super::Status::Match {
                    "digests differ while every printed value agrees: within the tolerance"
                } else {
                    "digests differ while every printed value agrees"
                },
            );
        }
    }

    /// The row's root-cause class and, when the row is a listed cause, what
    /// follows from it: print-limited, the one-sided op feeding it, the
    /// rows grouped under it.
    fn cause_notes(&self, out: &mut Notes) {
        let (t1, t2, m, index) = (self.t1, self.t2, self.m, self.index);
        let (n1, n2) = self.names;
        if let Some(c) = m.cause_kinds.get(index).copied().flatten() {
            out.push(K::Cause(c), c.as_str());
        }
        let listed = &m.causes.causes;
        let Ok(k) = listed.binary_search_by_key(&index, |c| c.index) else {
            return;
        };
        let c = &listed[k];
        if c.print_limited {
            out.push(
                K::PrintLimited,
                "within print precision: the first difference the log shows",
            );
        }
        if let Some(&o) = c.one_sided.first() {
            let (key, name) = match m.rows[o].sides() {
                Sides::Only1(a) => (t1.key_str(a), n1),
                Sides::Only2(b) | Sides::Both(_, b) => (t2.key_str(b), n2),
            };
            out.push(K::FedBy, format!("fed by {key} (only in {name})"));
        }
        let plural = if c.reads == 1 { "" } else { "s" };
        if c.reads > 0 && c.kind == CauseKind::OneSided {
            out.push(
                K::SameInput,
                format!("{} more row{plural} fed by the same one-sided op", c.reads),
            );
        } else if c.reads > 0 {
            out.push(
                K::SameInput,
                format!("{} more row{plural} read the same differing input", c.reads),
            );
        }
    }

    /// How the two Shapes differ: dtype, then dims.
    fn shape_notes(&self, r1: usize, r2: usize, out: &mut Notes) {
        let (s1, s2) = (
            self.t1.field(r1, Field::Shape),
            self.t2.field(r2, Field::Shape),
        );
        if s1.is_empty() || s2.is_empty() || s1 == s2 {
            return;
        }
        let (d1, d2) = (dtype_of(s1), dtype_of(s2));
        if d1 != d2 {
            out.push(K::Dtype, format!("dtype {d1} → {d2}"));
        }
        if let (Some(d), Some(a), Some(b)) = (dims_difference(s1, s2), dims_of(s1), dims_of(s2)) {
            out.push(K::Shape, format!("shape {a:?} → {b:?} ({d})"));
        }
    }

    /// The hash lists: an Output hash in one run only, lists of different
    /// lengths, and which value of a list differs first, under the row's
    /// tolerance.
    fn hash_notes(&self, r1: usize, r2: usize, out: &mut Notes) {
        let (t1, t2, m, index) = (self.t1, self.t2, self.m, self.index);
        let (n1, n2) = self.names;
        let (o1, o2) = (
            t1.field(r1, Field::OutputHash),
            t2.field(r2, Field::OutputHash),
        );
        match (o1.is_empty(), o2.is_empty()) {
            (false, true) => out.push(K::HashMissing, format!("output hash missing in {n2}")),
            (true, false) => out.push(K::HashMissing, format!("output hash missing in {n1}")),
            _ => {}
        }
        for (f, what) in [(Field::OutputHash, "output"), (Field::InputHashes, "input")] {
            let (a, b) = (t1.field(r1, f), t2.field(r2, f));
            if a.is_empty() || b.is_empty() || a == b {
                continue;
            }
            // The row's tolerance, resolved as for its verdict.
            let tol = m.row_policy(t1, t2, index).opts.hash;
            let c = compare_hashes(a, b, tol, true);
            let Some(p) = c.first_bad else {
                continue;
            };
            if c.lens.0 != c.lens.1 {
                let text = format!("{what} hash count {} vs {}", c.lens.0, c.lens.1);
                out.push(K::HashCount, text);
            } else if c.lens.0 > 1 {
                out.push(K::ValueDiffers, values_differ(what, a, b, tol, p, c.lens.0));
            }
        }
    }

    /// A fuzzy or stats pair whose keys differ only in the layer index: a
    /// `--layer-offset` hint.
    fn layer_index_note(&self, r1: usize, r2: usize, out: &mut Notes) {
        let (t1, t2) = (self.t1, self.t2);
        let strategy = self.m.rows[self.index].strategy;
        let (k1, k2) = (t1.key(r1), t2.key(r2));
        if k1 == k2 || !matches!(strategy, super::Strategy::Fuzzy | super::Strategy::Stats) {
            return;
        }
        let (Some((p1, l1)), Some((p2, l2))) = (
            t1.layer_lists().layer_of_key(k1),
            t2.layer_lists().layer_of_key(k2),
        ) else {
            return;
        };
        let rest = |k: &[u8], p: usize| {
            let t = &k[p..];
            let n = t.iter().take_while(|b| b.is_ascii_digit()).count();
            (k[..p].to_vec(), t[n..].to_vec())
        };
        if l1 != l2 && rest(k1, p1) == rest(k2, p2) {
            out.push(K::LayerIndex, format!(
                "keys differ only in the layer index ({l1} vs {l2}): try --layer-offset run2:RANK={}",
                l1 as i64 - l2 as i64
            ));
        }
    }
}

/// Which values of two hash lists of `n` values each differ under `tol`
/// (the first at `first`): "input 2 of 3 differs (rel 1.1e-1)"; several:
/// "inputs 0 and 2 of 3 differ (largest rel 1.1e-1, input 2)", so that a
/// note never names one small difference and hides a larger one (trial 13
/// F5: a `topk` whose indices changed read "output 0 of 2 differs"). At
/// most four positions are listed ("inputs 0, 2, 5, 9, … (7 of 1200)").
fn values_differ(
    what: &str,
    a: &[u8],
    b: &[u8],
    tol: super::Tolerance,
    first: usize,
    n: usize,
) -> String {
    let rel = |ta: &[u8], tb: &[u8]| match (token_number(ta), token_number(tb)) {
        (Some(x), Some(y)) => super::compare::rel_diff(x, y),
        _ => None,
    };
    let mut bad = Vec::new();
    let mut largest: Option<(f64, usize)> = None;
    for (i, (ta, tb)) in split_tokens(a).zip(split_tokens(b)).enumerate().skip(first) {
        if compare_token(ta, tb, tol, true).1 {
            continue;
        }
        bad.push(i);
        if let Some(d) = rel(ta, tb) {
            if largest.is_none_or(|(l, _)| d > l) {
                largest = Some((d, i));
            }
        }
    }
    if bad.len() <= 1 {
        let rd = largest
            .map(|(d, _)| format!(" (rel {d:.1e})"))
            .unwrap_or_default();
        return format!("{what} {first} of {n} differs{rd}");
    }
    let shown: Vec<String> = bad.iter().take(4).map(usize::to_string).collect();
    let list = if bad.len() > 4 {
        format!("{}, … ({} of {n})", shown.join(", "), bad.len())
    } else {
        let (last, rest) = shown.split_last().expect("two or more");
        format!("{} and {last} of {n}", rest.join(", "))
    };
    let rd = largest
        .map(|(d, i)| format!(" (largest rel {d:.1e}, {what} {i})"))
        .unwrap_or_default();
    format!("{what}s {list} differ{rd}")
}

/// The notes of a row as they are made.
struct Notes(Vec<Note>);

impl Notes {
    fn push(&mut self, kind: NoteKind, text: impl Into<String>) {
        self.0.push(Note {
            kind,
            text: text.into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_subnormals() {
        assert_eq!(
            dims_of(b"torch.Size([6, 64]), Dtype: torch.bfloat16"),
            Some(vec![6, 64])
        );
        assert_eq!(
            dims_of(b"torch.Size([]), Dtype: torch.float32"),
            Some(vec![])
        );
        assert!(is_subnormal_vs_zero(b"1.401298e-45", b"0.000000e+00"));
        assert!(!is_subnormal_vs_zero(b"1.0e-3", b"0.000000e+00"));
    }
}

//! Step 1 of root cause: each `diff` row's differing inputs. Input hashes
//! are compared position by position under the row's tolerance (or, where
//! both runs record digests, exactly), and each differing input becomes a
//! [`Link`]: its value on both sides and the producer keys both runs name
//! for it, which the next step ([`super::producers`]) looks up.

use rayon::prelude::*;

use super::super::compare::{
    differing_positions, rel_diff, split_tokens, token_number, CompareOptions,
};
use super::super::{MatchRow, ROW_STATS_DIFF, ROW_UNSYNCED};
use super::print::print_explains;
use crate::logformat::Precision;
use crate::parser::{Field, OpTable};

/// One input of a `diff` row, as root cause follows it.
pub(super) struct Link<'a> {
    /// Run 1's producer key for it (`Input producers`; maybe empty).
    pub(super) prod: &'a [u8],
    /// Run 2's producer key for it (maybe empty).
    pub(super) prod2: &'a [u8],
    /// Its run-1 value (Input hashes).
    pub(super) value: &'a [u8],
    /// Its run-2 value.
    pub(super) value2: &'a [u8],
    /// A difference the digests see while the printed hashes agree within
    /// the row's tolerance: it counts only where the producer's row
    /// diverges ([`super::classify`]).
    pub(super) soft: bool,
}

/// A `diff` row's inputs, found before the producers are looked up.
pub(super) struct Pending<'a> {
    /// Result row index.
    pub(super) i: usize,
    /// 0-based positions of the differing inputs.
    pub(super) bad: Vec<usize>,
    /// Per differing input; when none differs, per input where print
    /// rounding may explain the output, or where a hash blind to a change
    /// may hide a differing input (some row of the rank has
    /// [`ROW_STATS_DIFF`], see [`super::classify`]) and no digests on both
    /// sides say the inputs are bitwise equal.
    pub(super) links: Vec<Link<'a>>,
    /// When no input differs: whether print rounding explains the output.
    pub(super) explained: bool,
}

/// The largest position-wise relative difference ([`rel_diff`]) of two
/// hash lists; infinite where a value does not read, or the lists differ
/// in length.
fn largest_rel(a: &[u8], b: &[u8]) -> f64 {
    if split_tokens(a).count() != split_tokens(b).count() {
        return f64::INFINITY;
    }
    split_tokens(a)
        .zip(split_tokens(b))
        .map(|(x, y)| match (token_number(x), token_number(y)) {
            (Some(x), Some(y)) => rel_diff(x, y).unwrap_or(f64::INFINITY),
            _ => f64::INFINITY,
        })
        .fold(0.0, f64::max)
}

/// Row `r`'s `Input producers` keys, one per input (trimmed; empty where
/// the producer is not known).
pub(super) fn producer_keys(t: &OpTable, r: usize) -> Vec<&[u8]> {
    t.field(r, Field::InputProducers)
        .split(|b| *b == b';')
        .map(crate::parser::trim)
        .collect()
}

/// Step 1: the inputs of every `diff` row in `diff_rows` (result row,
/// run-1 row, run-2 row) that is not an unsynced collective, in parallel
/// (rows are independent), in `diff_rows` order. Digests on both sides
/// decide exactly (one the printed hashes put within the tolerance is a
/// [`Link::soft`] one); else the printed hashes under the row's tolerance, and
/// print rounding may explain an output difference
/// ([`Pending::explained`]).
pub(super) fn differing_inputs<'a>(
    t1: &'a OpTable,
    t2: &'a OpTable,
    rows: &[MatchRow],
    diff_rows: &[(usize, usize, usize)],
    opts: &(dyn Fn(usize) -> CompareOptions + Sync),
    prec: Precision,
) -> Vec<Pending<'a>> {
    // Inputs that agree are linked to their producers only when some row's
    // hash is blind to a change its statistics see (the only use of such
    // links, besides print rounding's).
    let blind = rows.iter().any(|r| r.has(ROW_STATS_DIFF));
    let pending: Vec<Option<Pending>> = diff_rows
        .par_iter()
        .map(|&(i, r1, r2)| {
            if rows[i].has(ROW_UNSYNCED) {
                return None;
            }
            let o = opts(i);
            let (in1, in2) = (
                t1.field(r1, Field::InputHashes),
                t2.field(r2, Field::InputHashes),
            );
            let (bad, exact) = match (
                super::super::compare::digest_differences(t1, r1, t2, r2, Field::InputDigests),
                t1.has(r1, Field::OutputDigest) && t2.has(r2, Field::OutputDigest),
            ) {
                (Some(d), true) => (d, true),
                _ => (differing_positions(in1, in2, o.hash, o.nan_equal), false),
            };
            let explained = !exact && bad.is_empty() && print_explains(t1, r1, t2, r2, &o, prec);
            // The positions whose digests differ while their printed
            // hashes agree within the row's tolerance (trial 27 F2: TP=2's
            // norm input, rel 4.5e-10 off under rtol 1e-4, made the norm
            // an entry, not the origin its own output's change is).
            // Such an input agrees only where the row's output moved more
            // than it did: an output that differs less than its input
            // carries the input's difference on (trial 28: a residual add
            // whose input was 4.3e-10 off and whose Output hash was 9.7e-11
            // off was named an origin with "inputs agree"). Printed hashes
            // that are equal say nothing of how far the values are apart
            // (an L1 norm blind to the change: trial 69, a stale buffer of
            // fractions that sum to 1 read as "inputs agree"): such an
            // input differs.
            let within = if exact && !bad.is_empty() {
                let beyond = differing_positions(in1, in2, o.hash, o.nan_equal);
                let out = largest_rel(
                    t1.field(r1, Field::OutputHash),
                    t2.field(r2, Field::OutputHash),
                );
                bad.iter()
                    .filter(|p| !beyond.contains(p))
                    .filter(|&&p| {
                        let (a, b) = (
                            split_tokens(in1).nth(p).unwrap_or_default(),
                            split_tokens(in2).nth(p).unwrap_or_default(),
                        );
                        let input = largest_rel(a, b);
                        input > 0.0 && out > input
                    })
                    .copied()
                    .collect()
            } else {
                Vec::new()
            };
            let producers = producer_keys(t1, r1);
            let producers2 = producer_keys(t2, r2);
            let inputs: Vec<&[u8]> = split_tokens(in1).collect();
            let inputs2: Vec<&[u8]> = split_tokens(in2).collect();
            let at = |v: &[&'a [u8]], p: usize| v.get(p).copied().unwrap_or(&[]);
            let link = |p: usize| Link {
                prod: at(&producers, p),
                prod2: at(&producers2, p),
                value: at(&inputs, p),
                value2: at(&inputs2, p),
                soft: within.contains(&p),
            };
            let links = if explained || (blind && bad.is_empty() && !exact) {
                (0..inputs.len()).map(link).collect()
            } else {
                bad.iter().map(|&p| link(p)).collect()
            };
            Some(Pending {
                i,
                bad,
                links,
                explained,
            })
        })
        .collect();
    pending.into_iter().flatten().collect()
}

//! Print rounding: how far apart two true values can be and still print as
//! the same text, and whether that explains a row whose inputs agree as
//! printed ([`print_explains`]). Root cause asks this before it calls such a
//! row an origin: a log printed with 7 significant digits hides sub-print
//! input differences that an op can amplify.

use super::super::compare::{split_tokens, token_number, CompareOptions};
use crate::logformat::Precision;
use crate::parser::{Field, OpTable};

/// How much larger than the sum of its inputs' relative print uncertainty
/// an op's output difference may be and still be explained by them. A
/// product or a linear map changes by at most the sum of its inputs'
/// relative changes; the factor leaves room for the conditioning of
/// reductions and non-linear ops (`pow` doubles it). On the bundled real
/// captures, outputs explained by print rounding reach 0.3 of the bound at
/// most, while the injected changes are 24 to 10^6 times above it.
pub const PRINT_AMPLIFICATION: f64 = 4.0;

/// Ops whose output is a sum of their inputs' terms: a sub-print absolute
/// change of an input changes the output by as much, absolutely, which is a
/// large relative change when the terms cancel.
fn is_additive(op: &[u8]) -> bool {
    let op = op.strip_suffix(b"_").unwrap_or(op);
    let op = op.strip_prefix(b"_foreach_").unwrap_or(op);
    matches!(
        op,
        b"add"
            | b"sub"
            | b"rsub"
            | b"sum"
            | b"mean"
            | b"cumsum"
            | b"lerp"
            | b"addcmul"
            | b"addcdiv"
    )
}

/// Whether print rounding can explain a paired row whose inputs agree: its
/// output (Output hash values; without an Output hash difference, the
/// gating L2 norm, Min and Max) differs by no more than
/// [`PRINT_AMPLIFICATION`] times the sum of the inputs' relative
/// uncertainty (one printed unit each, or their difference where they
/// differ within tolerance), or for additive ops the sum of their absolute
/// uncertainty, after taking off the half unit each printed output may be
/// off by.
pub fn print_explains(
    t1: &OpTable,
    r1: usize,
    t2: &OpTable,
    r2: usize,
    opts: &CompareOptions,
    prec: Precision,
) -> bool {
    if t1.field(r1, Field::Shape) != t2.field(r2, Field::Shape) {
        return false;
    }
    let (mut rel_u, mut abs_u) = (0.0f64, 0.0f64);
    let (i1, i2) = (
        t1.field(r1, Field::InputHashes),
        t2.field(r2, Field::InputHashes),
    );
    if !i1.is_empty() && !i2.is_empty() {
        for (a, b) in split_tokens(i1).zip(split_tokens(i2)) {
            let (Some(x), Some(y)) = (token_number(a), token_number(b)) else {
                continue;
            };
            if !x.is_finite() || !y.is_finite() {
                continue;
            }
            let m = x.abs().max(y.abs());
            let u = prec.ulp(x).max(prec.ulp(y)).max((x - y).abs());
            abs_u += u;
            if m > 0.0 {
                rel_u += u / m;
            }
        }
    }
    let additive = is_additive(t1.op_name(t1.op_type(r1)));
    let within = |a: &[u8], b: &[u8]| -> bool {
        match (token_number(a), token_number(b)) {
            (Some(x), Some(y)) if x == y => true,
            (Some(x), Some(y)) if x.is_finite() && y.is_finite() => {
                let m = x.abs().max(y.abs());
                let d = ((x - y).abs() - (prec.ulp(x) + prec.ulp(y)) / 2.0).max(0.0);
                let mut allowed = PRINT_AMPLIFICATION * rel_u * m;
                if additive {
                    allowed = allowed.max(PRINT_AMPLIFICATION * abs_u);
                }
                d <= allowed
            }
            _ => a == b,
        }
    };
    let (o1, o2) = (
        t1.field(r1, Field::OutputHash),
        t2.field(r2, Field::OutputHash),
    );
    if o1 != o2 {
        let n1 = split_tokens(o1).count();
        if o1.is_empty() || o2.is_empty() || n1 != split_tokens(o2).count() {
            return false;
        }
        return split_tokens(o1)
            .zip(split_tokens(o2))
            .all(|(a, b)| within(a, b));
    }
    if opts.stats.is_none() {
        return true;
    }
    [Field::L2Norm, Field::Min, Field::Max]
        .iter()
        .all(|f| within(t1.field(r1, *f), t2.field(r2, *f)))
}

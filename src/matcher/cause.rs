//! Root cause: where a divergence starts, where it enters from outside the
//! captured ops, and which rows only carry it on.
//!
//! Every `diff` row is classified by comparing its Input hashes across the
//! two runs, position by position under the row's tolerance, and following
//! run 1's `Input producers` links (or, where a link is empty, the earlier
//! row whose Output hash has the input's value):
//!
//! - [`CauseKind::Origin`]: every input agrees, and the output differs by
//!   more than print rounding of the inputs can explain (see
//!   [`print_explains`]): the divergence starts here.
//! - [`CauseKind::BelowPrint`]: every input agrees as printed, and the
//!   output differs by no more than a sub-print difference of those inputs
//!   could produce: the row carries on a difference the log's digits hide.
//!   It is attributed to the nearest diverging row upstream (a producer
//!   that diverges, else the latest diverging row before it).
//! - [`CauseKind::Entry`]: a differing input has no captured producer and
//!   nothing diverges before the row: the divergence enters here (data
//!   batch, parameter, optimizer state). Later rows that read the same
//!   differing input (the same Input hash values on both sides) are grouped
//!   under it: one changed parameter is one cause.
//! - [`CauseKind::OneSided`]: no captured diverging producer, and a
//!   differing input is produced, in one run's own `Input producers`, by an
//!   op of that run only (`only1` / `only2`), such as a dropout that one
//!   run applies: that op is the cause. It is followed back through that
//!   run's one-sided producers to the earliest one-sided op of the chain
//!   (the dropout's `bernoulli_`), named in [`CauseEntry::one_sided`].
//!   Later rows fed by the same one-sided op are grouped under it.
//! - [`CauseKind::Inherited`]: a differing input comes from a captured
//!   diverging row.
//! - [`CauseKind::Untraced`]: a differing input has no captured producer
//!   (an op below `min_numel`, an excluded view) while an earlier row
//!   already diverges: attributed to the latest diverging row before it.
//! - [`CauseKind::ViaCollective`]: the difference arrives through an
//!   unsynced collective (from another rank): a differing input comes from
//!   one, or the only earlier divergence is one.
//! - [`CauseKind::Unsynced`]: the row is itself an unsynced collective.
//!
//! The causes a rank reports are its origins, its entries (one per changed
//! input), its one-sided ops and its entries via collective; every other
//! diverging row is counted under the cause it traces back to.

use ahash::AHashMap;
use rayon::prelude::*;
use serde::Serialize;

use super::compare::{
    compare_hashes, differing_positions, rel_diff, split_tokens, token_number, CompareOptions,
};
use super::{
    Counts, MatchRow, Sides, Status, ROW_NONFINITE1, ROW_NONFINITE2, ROW_OUT_DIFF, ROW_UNSYNCED,
};
use crate::parser::{Field, FieldSet, OpTable};

/// How a diverging row came to diverge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
pub enum CauseKind {
    /// Inputs agree, output diverges beyond print rounding: the divergence starts here.
    Origin,
    /// A differing input has no captured producer and nothing diverges
    /// earlier: the divergence enters here.
    Entry,
    /// A differing input is produced by an op of one run only (in that
    /// run's own `Input producers`): the one-sided op is the cause
    /// ([`CauseEntry::one_sided`]).
    OneSided,
    /// Differing inputs come from captured diverging rows.
    Inherited,
    /// Inputs agree as printed; the output difference is within what
    /// sub-print input differences can produce.
    BelowPrint,
    /// A differing input has no captured producer, after an earlier divergence.
    Untraced,
    /// The difference arrives through an unsynced collective.
    ViaCollective,
    /// The row is an unsynced collective (never a cause).
    Unsynced,
}

impl CauseKind {
    /// Every kind, in declaration order (the Parquet `cause` column's
    /// dictionary order).
    pub const ALL: [CauseKind; 8] = [
        CauseKind::Origin,
        CauseKind::Entry,
        CauseKind::OneSided,
        CauseKind::Inherited,
        CauseKind::BelowPrint,
        CauseKind::Untraced,
        CauseKind::ViaCollective,
        CauseKind::Unsynced,
    ];

    /// The name in `summary.json`, `--rows` and Parquet (the serde name:
    /// `origin`, `one_sided`, `inherited_below_print`, ...).
    pub const fn json_name(self) -> &'static str {
        match self {
            CauseKind::Origin => "origin",
            CauseKind::Entry => "entry",
            CauseKind::OneSided => "one_sided",
            CauseKind::Inherited => "inherited",
            CauseKind::BelowPrint => "inherited_below_print",
            CauseKind::Untraced => "inherited_untraced",
            CauseKind::ViaCollective => "via_collective",
            CauseKind::Unsynced => "unsynced",
        }
    }

    /// Name for text output.
    pub fn as_str(self) -> &'static str {
        match self {
            CauseKind::Origin => "origin",
            CauseKind::Entry => "entry",
            CauseKind::OneSided => "one-sided op",
            CauseKind::Inherited => "inherited",
            CauseKind::BelowPrint => "inherited below print precision",
            CauseKind::Untraced => "inherited through an uncaptured op",
            CauseKind::ViaCollective => "entry via collective",
            CauseKind::Unsynced => "unsynced collective",
        }
    }
    /// Whether the row carries on a divergence that started elsewhere.
    pub fn is_inherited(self) -> bool {
        matches!(
            self,
            CauseKind::Inherited | CauseKind::BelowPrint | CauseKind::Untraced
        )
    }
}

/// The precision a log prints its numbers with, for the print-rounding
/// reasoning of root cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrintPrecision {
    /// `significant_digits` significant digits (the reference tracer's
    /// `%.6e`: 7).
    Digits(u32),
    /// Every float as the shortest text that round-trips in float64: only
    /// float64 rounding is hidden.
    Full,
}

impl PrintPrecision {
    /// The reference tracer's `%.6e`.
    pub const REFERENCE: PrintPrecision = PrintPrecision::Digits(7);

    /// The precision of a table's log.
    pub fn of(t: &OpTable) -> PrintPrecision {
        match t.precision() {
            crate::parser::Precision::Full => PrintPrecision::Full,
            crate::parser::Precision::Printed { significant_digits } => {
                PrintPrecision::Digits(significant_digits)
            }
        }
    }

    /// The coarser of two precisions (what two logs can be compared at).
    pub fn coarser(self, o: PrintPrecision) -> PrintPrecision {
        match (self, o) {
            (PrintPrecision::Full, x) | (x, PrintPrecision::Full) => x,
            (PrintPrecision::Digits(a), PrintPrecision::Digits(b)) => {
                PrintPrecision::Digits(a.min(b))
            }
        }
    }

    /// One unit in the last printed place of `v` (absolute): the widest
    /// gap between two true values that print as the same text.
    pub fn ulp(self, v: f64) -> f64 {
        let a = v.abs();
        if a == 0.0 || !a.is_finite() {
            return 0.0;
        }
        match self {
            PrintPrecision::Full => a * f64::EPSILON,
            PrintPrecision::Digits(d) => {
                10f64.powi(a.log10().floor() as i32 - (d.max(1) as i32 - 1))
            }
        }
    }
}

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
    prec: PrintPrecision,
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

/// One cause (origin, entry or entry via collective), with what follows from it.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct CauseEntry {
    /// Result row index.
    #[serde(skip)]
    pub index: usize,
    /// Origin, entry or entry via collective.
    pub kind: CauseKind,
    /// 0-based positions of the differing inputs (at most 16 listed).
    pub inputs: Vec<usize>,
    /// Rows counted under this cause that carry its divergence on
    /// (inherited, below print precision, through an uncaptured op).
    pub inherited: u64,
    /// Of those, rows inherited below print precision.
    pub below_print: u64,
    /// Of those, rows whose differing input has no captured producer.
    pub untraced: u64,
    /// Other rows that read the same differing input (an entry), are fed
    /// by the same one-sided op (a one-sided cause), or receive a
    /// difference through the same collective (an entry via collective).
    pub reads: u64,
    /// An origin whose output difference print rounding could explain, with
    /// nothing diverging before it: the first difference the log shows,
    /// but 7 printed digits cannot tell whether it starts here.
    pub print_limited: bool,
    /// For an entry via collective: the nearest unsynced collective before
    /// it (result row index).
    #[serde(skip)]
    pub collective: Option<usize>,
    /// For a one-sided cause: the ops of one run only that feed the row
    /// (result row indexes of `only1` or `only2` rows, all of one run),
    /// from the earliest one-sided op of the chain (the cause) to the one
    /// that produced the row's differing input; at most
    /// [`MAX_ONE_SIDED_CHAIN`]. Empty for every other kind.
    #[serde(skip)]
    pub one_sided: Vec<usize>,
    /// The first few rows counted under it (result indexes), in dispatch order.
    #[serde(skip)]
    pub chain: Vec<usize>,
}

/// Diverging rows of a rank per [`CauseKind`] (every row counted; causes
/// grouped in [`RootCauses::causes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct KindCounts {
    /// Origins.
    pub origin: u64,
    /// Entries, grouped ones included.
    pub entry: u64,
    /// Rows fed by an op of one run only, grouped ones included.
    #[serde(default)]
    pub one_sided: u64,
    /// Inherited through captured producers.
    pub inherited: u64,
    /// Inherited below print precision.
    pub inherited_below_print: u64,
    /// Inherited through an uncaptured op.
    pub inherited_untraced: u64,
    /// Entries via collective, grouped ones included.
    pub via_collective: u64,
    /// Unsynced collectives.
    pub unsynced: u64,
}

/// The largest gating difference of a rank.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LargestDiff {
    /// Result row index.
    pub index: usize,
    /// The field (`Output hash`, `Input hashes`, or a stat when stats gate).
    pub field: &'static str,
    /// Its relative difference.
    pub rel: f64,
}

/// Root-cause analysis of one rank.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RootCauses {
    /// Causes (origins, entries grouped by the input they read, one-sided
    /// ops, entries via collective), in dispatch order (at most 1,000
    /// listed).
    pub causes: Vec<CauseEntry>,
    /// Number of origins, entries and one-sided ops (grouped; not via
    /// collective).
    pub cause_count: u64,
    /// The first origin, entry or one-sided op: the op to look at.
    pub first_cause: Option<usize>,
    /// Whether the rank's divergence only arrives through unsynced collectives.
    pub via_collective_only: bool,
    /// Diverging `diff` rows per kind.
    pub kinds: KindCounts,
    /// First row whose run-1 stats or Output hash hold NaN or Inf.
    pub first_nonfinite1: Option<usize>,
    /// First row whose run-2 stats or Output hash hold NaN or Inf.
    pub first_nonfinite2: Option<usize>,
    /// First paired row non-finite on one side only.
    pub first_nonfinite_one_sided: Option<usize>,
    /// The gating `diff` row with the largest finite relative difference in
    /// a field that gates under its tolerance.
    pub largest_diff: Option<LargestDiff>,
}

const MAX_LISTED: usize = 1000;
const MAX_CHAIN: usize = 8;
/// The most one-sided ops a one-sided cause's chain visits and lists
/// ([`CauseEntry::one_sided`]).
pub const MAX_ONE_SIDED_CHAIN: usize = 32;

/// One input of a `diff` row, as root cause follows it.
struct Link<'a> {
    /// Run 1's producer key for it (`Input producers`; maybe empty).
    prod: &'a [u8],
    /// Run 2's producer key for it (maybe empty).
    prod2: &'a [u8],
    /// Its run-1 value (Input hashes).
    value: &'a [u8],
    /// Its run-2 value.
    value2: &'a [u8],
}

/// A `diff` row's inputs, found before the producers are looked up.
struct Pending<'a> {
    /// Result row index.
    i: usize,
    /// 0-based positions of the differing inputs.
    bad: Vec<usize>,
    /// Per differing input (or, when none differs, per input).
    links: Vec<Link<'a>>,
    /// When no input differs: whether print rounding explains the output.
    explained: bool,
}

/// Occurrences (result row indexes, ascending) of the keys and values that
/// some diverging row asks about.
struct Producers<'a> {
    by_key: AHashMap<&'a [u8], Vec<usize>>,
    by_value: AHashMap<&'a [u8], Vec<usize>>,
}
impl<'a> Producers<'a> {
    /// Scans run 1 once, recording only the keys and Output hash values that
    /// are asked about (memory stays proportional to the diverging rows).
    fn scan(t1: &'a OpTable, rows: &[MatchRow], pending: &[Pending<'a>]) -> Producers<'a> {
        let mut by_key: AHashMap<&[u8], Vec<usize>> = AHashMap::new();
        let mut by_value: AHashMap<&[u8], Vec<usize>> = AHashMap::new();
        for p in pending {
            for l in &p.links {
                if !l.prod.is_empty() {
                    by_key.entry(l.prod).or_default();
                } else if !l.value.is_empty() {
                    by_value.entry(l.value).or_default();
                }
            }
        }
        // Lookups in parallel (read-only maps), hits recorded in row order.
        if !by_key.is_empty() {
            // A row's key is read only when its hash (computed at parse) is
            // one of the producers'.
            let hasher = crate::parser::key::hasher();
            let hashes: ahash::AHashSet<u64> = by_key
                .keys()
                .map(|k| crate::parser::key::key_hash(&hasher, k))
                .collect();
            let hits: Vec<(usize, &[u8])> = rows
                .par_iter()
                .enumerate()
                .with_min_len(8192)
                .filter_map(|(i, row)| {
                    let r1 = row.r1()?;
                    if !hashes.contains(&t1.key_hash(r1)) {
                        return None;
                    }
                    let k = t1.key(r1);
                    by_key.contains_key(k).then_some((i, k))
                })
                .collect();
            for (i, k) in hits {
                if let Some(v) = by_key.get_mut(k) {
                    v.push(i);
                }
            }
        }
        if !by_value.is_empty() {
            let hits: Vec<(usize, &[u8])> = rows
                .par_iter()
                .enumerate()
                .with_min_len(8192)
                .flat_map_iter(|(i, row)| {
                    let out = row
                        .r1()
                        .map_or(&[][..], |r1| t1.field(r1, Field::OutputHash));
                    // One output (the usual case): the field is the token.
                    let single = memchr::memchr(b',', out).is_none();
                    let one = single.then_some(out).into_iter();
                    let many = (!single).then(|| split_tokens(out)).into_iter().flatten();
                    one.chain(many)
                        .filter(|t| !t.is_empty() && by_value.contains_key(t))
                        .map(move |t| (i, t))
                })
                .collect();
            for (i, t) in hits {
                if let Some(v) = by_value.get_mut(t) {
                    v.push(i);
                }
            }
        }
        Producers { by_key, by_value }
    }

    /// The latest row before `i` with key `prod` (or, when `prod` is empty,
    /// whose Output hash holds `value`).
    fn before(&self, i: usize, prod: &[u8], value: &[u8]) -> Option<usize> {
        let occ = if prod.is_empty() {
            self.by_value.get(value)?
        } else {
            self.by_key.get(prod)?
        };
        let k = occ.partition_point(|&j| j < i);
        (k > 0).then(|| occ[k - 1])
    }
}

/// Row `r`'s `Input producers` keys, one per input (trimmed; empty where
/// the producer is not known).
fn producer_keys(t: &OpTable, r: usize) -> Vec<&[u8]> {
    t.field(r, Field::InputProducers)
        .split(|b| *b == b';')
        .map(crate::parser::trim)
        .collect()
}

/// The ops of one run that the other run lacks (its `only1` or `only2`
/// rows), looked up as the producers named in that run's own `Input
/// producers` ([`CauseKind::OneSided`]).
struct OneSidedOps<'a> {
    t: &'a OpTable,
    /// Result row index of each one-sided row of this run, by table row.
    only: AHashMap<usize, usize>,
    /// Table rows (ascending) of each key looked up so far.
    by_key: AHashMap<&'a [u8], Vec<usize>>,
    /// Chains found so far, by their last one-sided row ([`Self::chain`]).
    chains: AHashMap<usize, Vec<usize>>,
}

impl<'a> OneSidedOps<'a> {
    /// Run `side`'s (0: run 1, 1: run 2) one-sided rows among `rows`.
    fn new(t: &'a OpTable, rows: &[MatchRow], side: usize) -> OneSidedOps<'a> {
        let only = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match (r.sides(), side) {
                (Sides::Only1(a), 0) => Some((a, i)),
                (Sides::Only2(b), 1) => Some((b, i)),
                _ => None,
            })
            .collect();
        OneSidedOps {
            t,
            only,
            by_key: AHashMap::new(),
            chains: AHashMap::new(),
        }
    }

    /// Records the rows of the keys not looked up yet, in one scan of the
    /// table (a row's key is read only when its hash is one of theirs).
    fn look_up(&mut self, keys: impl IntoIterator<Item = &'a [u8]>) {
        if self.only.is_empty() {
            return;
        }
        let new: ahash::AHashSet<&[u8]> = keys
            .into_iter()
            .filter(|k| !k.is_empty() && !self.by_key.contains_key(k))
            .collect();
        if new.is_empty() {
            return;
        }
        let hasher = crate::parser::key::hasher();
        let hashes: ahash::AHashSet<u64> = new
            .iter()
            .map(|k| crate::parser::key::key_hash(&hasher, k))
            .collect();
        let t = self.t;
        let hits: Vec<(usize, &[u8])> = (0..t.len())
            .into_par_iter()
            .with_min_len(8192)
            .filter_map(|r| {
                if !hashes.contains(&t.key_hash(r)) {
                    return None;
                }
                new.contains(t.key(r)).then(|| (r, t.key(r)))
            })
            .collect();
        for k in new {
            self.by_key.entry(k).or_default();
        }
        for (r, k) in hits {
            if let Some(v) = self.by_key.get_mut(k) {
                v.push(r);
            }
        }
    }

    /// The one-sided row that produced an input of table row `r` under
    /// producer key `key`: the latest row before `r` with that key (looked
    /// up before), when it is one-sided.
    fn producer(&self, r: usize, key: &[u8]) -> Option<usize> {
        let occ = self.by_key.get(key)?;
        let k = occ.partition_point(|&j| j < r);
        let p = occ[k.checked_sub(1)?];
        self.only.contains_key(&p).then_some(p)
    }

    /// From one-sided row `start` back through its run's one-sided
    /// producers (breadth first, at most [`MAX_ONE_SIDED_CHAIN`] rows): the
    /// table rows from the earliest one-sided op reached to `start`, each
    /// producing an input of the next.
    fn chain(&mut self, start: usize) -> Vec<usize> {
        if let Some(c) = self.chains.get(&start) {
            return c.clone();
        }
        let t = self.t;
        // Row -> the row it feeds (the one it was reached from).
        let mut feeds: AHashMap<usize, usize> = AHashMap::new();
        let mut level = vec![start];
        while !level.is_empty() && feeds.len() + 1 < MAX_ONE_SIDED_CHAIN {
            let asked: Vec<(usize, Vec<&'a [u8]>)> =
                level.iter().map(|&r| (r, producer_keys(t, r))).collect();
            self.look_up(asked.iter().flat_map(|(_, k)| k.iter().copied()));
            let mut next = Vec::new();
            for (r, keys) in &asked {
                for k in keys {
                    let Some(p) = self.producer(*r, k) else {
                        continue;
                    };
                    if p != start
                        && !feeds.contains_key(&p)
                        && feeds.len() + 1 < MAX_ONE_SIDED_CHAIN
                    {
                        feeds.insert(p, *r);
                        next.push(p);
                    }
                }
            }
            level = next;
        }
        let mut row = feeds.keys().copied().min().map_or(start, |m| m.min(start));
        let mut chain = vec![row];
        while let Some(&n) = feeds.get(&row) {
            chain.push(n);
            row = n;
        }
        self.chains.insert(start, chain.clone());
        chain
    }
}

/// For each pending `diff` row with differing inputs: whether a differing
/// input is produced, in run 1's or run 2's own `Input producers`, by an op
/// of that run only. If so, the chain of that run's one-sided ops feeding
/// it ([`OneSidedOps::chain`]) as result row indexes, earliest first. The
/// inputs are tried in position order, run 1's producer before run 2's.
fn one_sided_sources<'a>(
    t1: &'a OpTable,
    t2: &'a OpTable,
    rows: &[MatchRow],
    pending: &[Pending<'a>],
) -> Vec<Option<Vec<usize>>> {
    let mut sides = [OneSidedOps::new(t1, rows, 0), OneSidedOps::new(t2, rows, 1)];
    if sides.iter().all(|s| s.only.is_empty()) {
        return pending.iter().map(|_| None).collect();
    }
    let asks = |p: &Pending<'a>| !p.bad.is_empty();
    let keys1: Vec<&[u8]> = pending
        .iter()
        .filter(|p| asks(p))
        .flat_map(|p| p.links.iter().map(|l| l.prod))
        .collect();
    let keys2: Vec<&[u8]> = pending
        .iter()
        .filter(|p| asks(p))
        .flat_map(|p| p.links.iter().map(|l| l.prod2))
        .collect();
    sides[0].look_up(keys1);
    sides[1].look_up(keys2);
    pending
        .iter()
        .map(|p| {
            if !asks(p) {
                return None;
            }
            let (r1, r2) = (rows[p.i].r1()?, rows[p.i].r2()?);
            let (s, o) = p.links.iter().find_map(|l| {
                [(0, r1, l.prod), (1, r2, l.prod2)]
                    .into_iter()
                    .find_map(|(s, r, k)| Some((s, sides[s].producer(r, k)?)))
            })?;
            let side = &mut sides[s];
            let chain = side.chain(o);
            Some(chain.iter().map(|r| side.only[r]).collect())
        })
        .collect()
}

/// Where an untraced or below-print row's divergence comes from: the latest
/// diverging row before it, preferring the rank's own divergence to an
/// unsynced collective.
enum Upstream {
    /// The cause (result row index) of an earlier diverging row.
    Root(usize),
    /// Only an unsynced collective diverges before it.
    Collective,
    /// Nothing diverges before it.
    Nothing,
}

/// Classifies the diverging result rows `rows` (see the module doc), of
/// which `counts` are the tally, judged on the `compared` fields. `opts`
/// gives each result row's resolved settings
/// ([`super::MatchTable::row_policy`]). The classes are indexed like
/// `rows`; the first `t1.len()` rows are run 1's rows in order.
/// Memory beyond the result is proportional to the `diff` rows: run 1 is
/// scanned once for just the producers they ask about.
pub fn analyse<'a>(
    t1: &'a OpTable,
    t2: &'a OpTable,
    rows: &[MatchRow],
    counts: &Counts,
    compared: FieldSet,
    opts: &(dyn Fn(usize) -> CompareOptions + Sync),
) -> (Vec<Option<CauseKind>>, RootCauses) {
    let mut rc = RootCauses::default();
    let n = rows.len();
    for (i, row) in rows.iter().enumerate() {
        if row.has(ROW_NONFINITE1) && rc.first_nonfinite1.is_none() {
            rc.first_nonfinite1 = Some(i);
        }
        if row.has(ROW_NONFINITE2) && rc.first_nonfinite2.is_none() {
            rc.first_nonfinite2 = Some(i);
        }
        if matches!(row.sides(), Sides::Both(..))
            && row.has(ROW_NONFINITE1) != row.has(ROW_NONFINITE2)
            && rc.first_nonfinite_one_sided.is_none()
        {
            rc.first_nonfinite_one_sided = Some(i);
        }
    }
    if counts.diff == 0 {
        return (Vec::new(), rc);
    }
    let prec = PrintPrecision::of(t1).coarser(PrintPrecision::of(t2));
    let mut kinds: Vec<Option<CauseKind>> = vec![None; n];
    // Phase 1: every diff row's differing inputs (in parallel: rows are independent).
    let diff_rows: Vec<(usize, usize, usize)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.status == Status::Diff)
        .filter_map(|(i, r)| Some((i, r.r1()?, r.r2()?)))
        .collect();
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
            // Digests on both sides decide exactly; else the printed hashes
            // under the row's tolerance, and print rounding may explain.
            let (bad, exact) = match (
                super::compare::digest_differences(t1, r1, t2, r2, Field::InputDigests),
                t1.has(r1, Field::OutputDigest) && t2.has(r2, Field::OutputDigest),
            ) {
                (Some(d), true) => (d, true),
                _ => (differing_positions(in1, in2, o.hash, o.nan_equal), false),
            };
            let explained = !exact && bad.is_empty() && print_explains(t1, r1, t2, r2, &o, prec);
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
            };
            let links = if explained {
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
    let pending: Vec<Pending> = pending.into_iter().flatten().collect();
    // Phase 2: the producers those rows ask about, in one scan of run 1,
    // and the differing inputs that ops of one run only produce.
    let prods = Producers::scan(t1, rows, &pending);
    let sources = one_sided_sources(t1, t2, rows, &pending);
    // Unsynced collectives (any status) and the diverging ones, ascending.
    let unsynced: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.has(ROW_UNSYNCED))
        .map(|(i, _)| i)
        .collect();
    let unsynced_div: Vec<usize> = unsynced
        .iter()
        .copied()
        .filter(|&i| rows[i].status.is_divergence())
        .collect();
    let before = |v: &[usize], i: usize| -> Option<usize> {
        let k = v.partition_point(|&j| j < i);
        (k > 0).then(|| v[k - 1])
    };
    // Phase 3: classify in dispatch order (an inherited row needs the root
    // of its producer, which comes earlier).
    let mut root: AHashMap<usize, usize> = AHashMap::new();
    let mut cause_slot: AHashMap<usize, usize> = AHashMap::new();
    // Differing external inputs (run-1 value, run-2 value) -> the entry that read them first.
    let mut read_by: AHashMap<(&[u8], &[u8]), usize> = AHashMap::new();
    // Collective row -> the entry via collective it first fed.
    let mut via_cause: AHashMap<usize, usize> = AHashMap::new();
    // Earliest one-sided op (result row) -> the one-sided cause it first fed.
    let mut fed_by: AHashMap<usize, usize> = AHashMap::new();
    let mut last_own: Option<usize> = None;
    let mut pend = pending.into_iter().zip(sources).peekable();
    for &(i, _, _) in &diff_rows {
        let upstream = |last_own: Option<usize>| match last_own {
            Some(j) => Upstream::Root(j),
            None if before(&unsynced_div, i).is_some() => Upstream::Collective,
            None => Upstream::Nothing,
        };
        let mut limited = false;
        let mut one_sided = Vec::new();
        // (kind, cause row it counts under, differing inputs)
        let (kind, under, bad): (CauseKind, Option<usize>, Vec<usize>) = match pend
            .next_if(|(p, _)| p.i == i)
        {
            None => (CauseKind::Unsynced, None, Vec::new()),
            Some((p, _)) if p.bad.is_empty() && !p.explained => (CauseKind::Origin, None, p.bad),
            Some((p, _)) if p.bad.is_empty() => {
                // Explained by print rounding: a diverging producer, else
                // the latest diverging row before it.
                let producer = p.links.iter().find_map(|l| {
                    let j = prods.before(i, l.prod, l.value)?;
                    root.get(&j).copied()
                });
                match producer.map(Upstream::Root).unwrap_or(upstream(last_own)) {
                    Upstream::Root(r) => (CauseKind::BelowPrint, Some(r), p.bad),
                    Upstream::Collective => (CauseKind::ViaCollective, None, p.bad),
                    Upstream::Nothing => {
                        limited = true;
                        (CauseKind::Origin, None, p.bad)
                    }
                }
            }
            Some((p, source)) => {
                let (mut untraced, mut inherited_from, mut via) = (false, None, false);
                let mut read = None;
                for l in &p.links {
                    match prods.before(i, l.prod, l.value) {
                        Some(j) if rows[j].has(ROW_UNSYNCED) => via = true,
                        Some(j)
                            if rows[j].status == Status::Diff
                                && rows[j].has(ROW_OUT_DIFF)
                                && root.contains_key(&j) =>
                        {
                            inherited_from.get_or_insert(root[&j]);
                        }
                        // No captured producer, or the producer's output
                        // agrees and the value changed outside the capture.
                        _ => {
                            untraced = true;
                            if let Some(&c) = read_by.get(&(l.value, l.value2)) {
                                read.get_or_insert(c);
                            }
                        }
                    }
                }
                if let Some(r) = inherited_from {
                    (CauseKind::Inherited, Some(r), p.bad)
                } else if let Some(chain) = source {
                    // An op of one run only feeds a differing input: one
                    // cause per earliest one-sided op.
                    let under = fed_by.get(&chain[0]).copied();
                    if under.is_none() {
                        fed_by.insert(chain[0], i);
                        one_sided = chain;
                    }
                    (CauseKind::OneSided, under, p.bad)
                } else if let Some(c) = read {
                    (CauseKind::Entry, Some(c), p.bad)
                } else if via && !untraced {
                    (CauseKind::ViaCollective, None, p.bad)
                } else {
                    match upstream(last_own) {
                        Upstream::Root(r) => (CauseKind::Untraced, Some(r), p.bad),
                        Upstream::Collective => (CauseKind::ViaCollective, None, p.bad),
                        Upstream::Nothing => {
                            for l in &p.links {
                                read_by.entry((l.value, l.value2)).or_insert(i);
                            }
                            (CauseKind::Entry, None, p.bad)
                        }
                    }
                }
            }
        };
        // Entries via collective group by the nearest collective before them.
        let (under, collective) = if kind == CauseKind::ViaCollective && under.is_none() {
            let c = before(&unsynced, i);
            match c.and_then(|c| via_cause.get(&c).copied()) {
                Some(v) => (Some(v), c),
                None => {
                    if let Some(c) = c {
                        via_cause.insert(c, i);
                    }
                    (None, c)
                }
            }
        } else {
            (under, None)
        };
        match kind {
            CauseKind::Origin => rc.kinds.origin += 1,
            CauseKind::Entry => rc.kinds.entry += 1,
            CauseKind::OneSided => rc.kinds.one_sided += 1,
            CauseKind::Inherited => rc.kinds.inherited += 1,
            CauseKind::BelowPrint => rc.kinds.inherited_below_print += 1,
            CauseKind::Untraced => rc.kinds.inherited_untraced += 1,
            CauseKind::ViaCollective => rc.kinds.via_collective += 1,
            CauseKind::Unsynced => rc.kinds.unsynced += 1,
        }
        kinds[i] = Some(kind);
        if kind == CauseKind::Unsynced {
            continue;
        }
        match under {
            None => {
                // A new cause.
                root.insert(i, i);
                if rc.causes.len() < MAX_LISTED {
                    cause_slot.insert(i, rc.causes.len());
                    rc.causes.push(CauseEntry {
                        index: i,
                        kind,
                        inputs: bad.into_iter().take(16).collect(),
                        inherited: 0,
                        below_print: 0,
                        untraced: 0,
                        reads: 0,
                        print_limited: limited,
                        collective,
                        chain: Vec::new(),
                        one_sided,
                    });
                }
                if kind != CauseKind::ViaCollective {
                    rc.cause_count += 1;
                    rc.first_cause.get_or_insert(i);
                }
            }
            Some(r) => {
                root.insert(i, r);
                if let Some(&s) = cause_slot.get(&r) {
                    let c = &mut rc.causes[s];
                    match kind {
                        CauseKind::Entry | CauseKind::OneSided | CauseKind::ViaCollective => {
                            c.reads += 1
                        }
                        _ => {
                            c.inherited += 1;
                            if kind == CauseKind::BelowPrint {
                                c.below_print += 1;
                            } else if kind == CauseKind::Untraced {
                                c.untraced += 1;
                            }
                        }
                    }
                    if c.chain.len() < MAX_CHAIN {
                        c.chain.push(i);
                    }
                }
            }
        }
        if rows[i].has(ROW_OUT_DIFF) || kind != CauseKind::BelowPrint {
            last_own = Some(root[&i]);
        }
    }
    rc.largest_diff = largest_gating(t1, t2, rows, compared, &diff_rows, opts);
    rc.via_collective_only =
        rc.cause_count == 0 && rc.causes.iter().any(|c| c.kind == CauseKind::ViaCollective);
    (kinds, rc)
}

/// The largest finite relative difference, over the gating `diff` rows
/// with finite values, in a field that gates under the row's tolerance and
/// disagrees under it: the Output hash, the Input hashes (when they gate),
/// and L2 norm, Min, Max, Mean when stats gate.
fn largest_gating(
    t1: &OpTable,
    t2: &OpTable,
    rows: &[MatchRow],
    compared: FieldSet,
    diff_rows: &[(usize, usize, usize)],
    opts: &(dyn Fn(usize) -> CompareOptions + Sync),
) -> Option<LargestDiff> {
    let mut best: Option<LargestDiff> = None;
    for &(i, r1, r2) in diff_rows {
        let row = &rows[i];
        if !row.gates() || row.has(ROW_NONFINITE1) || row.has(ROW_NONFINITE2) {
            continue;
        }
        let o = opts(i);
        let mut consider = |field: &'static str, rel: f64| {
            if rel.is_finite() && rel > 0.0 && best.is_none_or(|b| rel > b.rel) {
                best = Some(LargestDiff {
                    index: i,
                    field,
                    rel,
                });
            }
        };
        let mut hashes = vec![Field::OutputHash];
        if o.gate_inputs {
            hashes.push(Field::InputHashes);
        }
        for f in hashes {
            if !compared.contains(f) {
                continue;
            }
            let c = compare_hashes(t1.field(r1, f), t2.field(r2, f), o.hash, o.nan_equal);
            if !c.agrees {
                consider(f.label(), c.intensity.unwrap_or(0.0));
            }
        }
        if let Some(tol) = o.stats {
            for f in [Field::L2Norm, Field::Min, Field::Max, Field::Mean] {
                let (a, b) = (t1.field(r1, f), t2.field(r2, f));
                if a.is_empty() || b.is_empty() || a == b {
                    continue;
                }
                if let (Some(x), Some(y)) = (token_number(a), token_number(b)) {
                    if !tol.agrees(x, y) {
                        consider(f.label(), rel_diff(x, y).unwrap_or(0.0));
                    }
                }
            }
        }
    }
    best
}

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
//!   [`print_explains`]): the divergence starts here. An input whose hash
//!   agrees but whose captured producer is a `diff` row whose statistics
//!   differ while its Output hash agrees ([`super::ROW_STATS_DIFF`]: a
//!   softmax's L1 norm is its row count) differs all the same: the row is
//!   [`CauseKind::Inherited`] from it.
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
//!   Later rows fed by the same one-sided op are grouped under it. When
//!   that earliest op repeats an op the other run runs in that module too
//!   (the same fuzzy key) and reads a diverging row, it is one more
//!   iteration of a loop the other run ran fewer times (an MoE expert only
//!   one run's routing reached): the row is [`CauseKind::Inherited`] from
//!   that row.
//! - [`CauseKind::Inherited`]: a differing input comes from a captured
//!   diverging row.
//! - [`CauseKind::Untraced`]: a differing input has no captured producer
//!   (an op below `min_numel`, an excluded view) while an earlier row
//!   already diverges: attributed to the latest diverging row before it.
//! - [`CauseKind::ViaCollective`]: the difference arrives through an
//!   unsynced collective (from another rank): a differing input comes from
//!   one, or the only earlier divergence is one, or (the optimizer phase,
//!   nothing diverging before it) a differing input with no captured
//!   producer comes after one of the backward phase that agrees (DDP's
//!   gradient all-reduce).
//! - [`CauseKind::Unsynced`]: the row is itself an unsynced collective.
//! - [`CauseKind::Record`]: a differing record of a module-level capture
//!   (`Level: modules`), which records no inputs: nothing tells where its
//!   difference starts. The first is the rank's one cause; every later one
//!   is counted under it, as neither inherited nor read.
//!
//! The causes a rank reports are its origins, its entries (one per changed
//! input), its one-sided ops and its entries via collective; every other
//! diverging row is counted under the cause it traces back to.
//!
//! The analysis runs in four named steps, each in its own module:
//!
//! ```text
//! diff rows ─ inputs.rs: differing_inputs (Input hashes under tolerance) ─▶ Pending
//! Pending ─── producers.rs: Producers::scan, one_sided_sources ───────────▶ producers
//! each row ── classify.rs: classify (the one place a row gets its kind) ──▶ Class
//! Class ───── tally.rs: Tally::record (grouped under causes, counted) ────▶ RootCauses
//! ```
//!
//! Print rounding ([`print_explains`]) lives in `print.rs`.

mod classify;
mod inputs;
mod print;
mod producers;
mod tally;

use serde::Serialize;

use super::compare::{worst_difference, CompareOptions};
use super::{Counts, MatchRow, Sides, Status, ROW_NONFINITE1, ROW_NONFINITE2, ROW_UNSYNCED};
use crate::parser::{FieldSet, OpTable};

pub use print::{print_explains, PRINT_AMPLIFICATION};

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
    /// A differing record of a module-level log (no inputs recorded: not
    /// known to start or to carry on a divergence).
    Record,
}

impl CauseKind {
    /// Every kind, in declaration order (the Parquet `cause` column's
    /// dictionary order).
    pub const ALL: [CauseKind; 9] = [
        CauseKind::Origin,
        CauseKind::Entry,
        CauseKind::OneSided,
        CauseKind::Inherited,
        CauseKind::BelowPrint,
        CauseKind::Untraced,
        CauseKind::ViaCollective,
        CauseKind::Unsynced,
        CauseKind::Record,
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
            CauseKind::Record => "record",
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
            CauseKind::Record => "differing record",
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
    /// For a one-sided cause: the other run's one-sided op at the same
    /// place (the same module FQN and op counter, another op), the op that run ran instead (result row index); `None` when
    /// it has none (an op added or removed, not replaced).
    #[serde(skip)]
    pub in_its_place: Option<usize>,
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
    /// Differing records of a module-level log.
    #[serde(default)]
    pub record: u64,
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
    first_nonfinite(rows, &mut rc);
    if counts.diff == 0 {
        return (Vec::new(), rc);
    }
    let prec = t1.precision().coarser(t2.precision());
    // (result row, run-1 row, run-2 row) of every paired `diff` row.
    let diff_rows: Vec<(usize, usize, usize)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.status == Status::Diff)
        .filter_map(|(i, r)| Some((i, r.r1()?, r.r2()?)))
        .collect();
    // Step 1: every diff row's differing inputs.
    let pending = inputs::differing_inputs(t1, t2, rows, &diff_rows, opts, prec);
    // Step 2: the producers those rows ask about, in one scan of run 1,
    // and the differing inputs that ops of one run only produce.
    let sources = producers::one_sided_sources(t1, t2, rows, &pending);
    let heads = producers::head_producers(t1, t2, rows, &sources);
    let more: Vec<producers::HeadInput> = heads.values().flatten().copied().collect();
    let prods = producers::Producers::scan(t1, rows, &pending, &more);
    let ev = classify::Evidence {
        prods: &prods,
        rows,
        t1,
        heads: &heads,
    };
    // Steps 3 and 4: classify in dispatch order, and tally.
    let mut tally = tally::Tally::new(rows, rc);
    let mut pend = pending.into_iter().zip(sources).peekable();
    // The collectives captured before they completed in the backward
    // phase (DDP's gradient all-reduce runs from autograd's hooks), in
    // result order.
    let backward_unsynced: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.has(ROW_UNSYNCED) && r.r1().is_some_and(|a| t1.is_backward(a)))
        .map(|(i, _)| i)
        .collect();
    let records = t1.header().level == crate::logformat::CaptureLevel::Modules;
    let recomputed = super::recompute::paired_repeats(t1, t2, rows, &diff_rows);
    for &(i, r1, _) in &diff_rows {
        let inputs = pend.next_if(|(p, _)| p.i == i);
        // Activation checkpointing's recomputation of a diverging forward
        // pair, in both runs: counted under that pair's cause.
        if let Some(root) = recomputed.get(&i).and_then(|&j| tally.root_of(j)) {
            tally.record(rows, i, classify::Class::recomputed(root), Vec::new(), &[]);
            continue;
        }
        if records {
            let first = tally.first_cause();
            tally.record(rows, i, classify::Class::record(first), Vec::new(), &[]);
            continue;
        }
        let gradient_collective = t1.phase_kind(r1) == crate::logformat::Phase::Optimizer
            && tally::latest_before(&backward_unsynced, i).is_some();
        let class = classify::classify(
            i,
            inputs.as_ref().map(|(p, s)| (p, s.as_deref())),
            &ev,
            &tally,
            gradient_collective,
        );
        match inputs {
            // An origin lists no differing input (its soft ones agreed).
            Some((p, _)) if class.kind == CauseKind::Origin => {
                tally.record(rows, i, class, Vec::new(), &p.links)
            }
            Some((p, _)) => tally.record(rows, i, class, p.bad, &p.links),
            None => tally.record(rows, i, class, Vec::new(), &[]),
        }
    }
    let (kinds, mut rc) = tally.finish();
    let places = OneSidedPlaces::new(t1, t2, rows, &rc.causes);
    for c in &mut rc.causes {
        if let Some(&op) = c.one_sided.first() {
            c.in_its_place = places.in_its_place(t1, t2, rows, op);
        }
    }
    rc.largest_diff = largest_gating(t1, t2, rows, compared, &diff_rows, opts);
    rc.via_collective_only =
        rc.cause_count == 0 && rc.causes.iter().any(|c| c.kind == CauseKind::ViaCollective);
    (kinds, rc)
}

/// The place of a one-sided op in its run's dispatch: its key without the
/// root class, up to and with its op counter (`b0/op_3_` of
/// `b0/op_3_relu_`), and its side (1 or 2). `None` for a key without an
/// op counter.
fn one_sided_place<'t>(
    t1: &'t OpTable,
    t2: &'t OpTable,
    row: &MatchRow,
) -> Option<(u8, &'t [u8], &'t [u8])> {
    let (side, key) = match row.sides() {
        Sides::Only1(a) => (1, t1.key(a)),
        Sides::Only2(b) => (2, t2.key(b)),
        Sides::Both(..) => return None,
    };
    let key = crate::parser::key::strip_root_class(key);
    let (_, op) = crate::parser::key::module_and_op(key);
    if op.is_empty() {
        return None;
    }
    let cut = key.len() - op.len();
    Some((side, &key[..cut], op))
}

/// The one-sided ops of each run by place ([`one_sided_place`]), built
/// only when a one-sided cause asks (most ranks have none).
struct OneSidedPlaces<'t> {
    /// (side, place) → the first result row there.
    by_place: ahash::AHashMap<(u8, &'t [u8]), usize>,
}

impl<'t> OneSidedPlaces<'t> {
    fn new(t1: &'t OpTable, t2: &'t OpTable, rows: &[MatchRow], causes: &[CauseEntry]) -> Self {
        let mut by_place = ahash::AHashMap::new();
        if causes.iter().any(|c| !c.one_sided.is_empty()) {
            for (i, r) in rows.iter().enumerate() {
                if let Some((side, place, _)) = one_sided_place(t1, t2, r) {
                    by_place.entry((side, place)).or_insert(i);
                }
            }
        }
        OneSidedPlaces { by_place }
    }

    /// [`CauseEntry::in_its_place`] of one-sided op `op` (a result row):
    /// the other run's one-sided op at the same module FQN and op counter
    /// whose op differs (trial 24 F5: B's `b0/op_3_leaky_relu_` where A
    /// ran `b0/op_3_relu_`).
    fn in_its_place(
        &self,
        t1: &'t OpTable,
        t2: &'t OpTable,
        rows: &[MatchRow],
        op: usize,
    ) -> Option<usize> {
        let (side, place, name) = one_sided_place(t1, t2, &rows[op])?;
        let other = *self.by_place.get(&(3 - side, place))?;
        let (_, _, other_name) = one_sided_place(t1, t2, &rows[other])?;
        (other_name != name).then_some(other)
    }
}

/// Records in `rc` the first rows that hold NaN or Inf: in run 1, in run
/// 2, and on one side only of a pair.
fn first_nonfinite(rows: &[MatchRow], rc: &mut RootCauses) {
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
}

/// The largest difference of a rank: over the gating `diff` rows with
/// finite values, the row whose [`worst_difference`] is largest (the
/// earliest on a tie).
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
        let Some(w) = worst_difference(t1, r1, t2, r2, &opts(i), compared) else {
            continue;
        };
        if best.is_none_or(|b| w.rel > b.rel) {
            best = Some(LargestDiff {
                index: i,
                field: w.field.label(),
                rel: w.rel,
            });
        }
    }
    best
}

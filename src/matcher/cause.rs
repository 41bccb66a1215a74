//! Root cause: where a divergence starts, and where it enters from outside
//! the captured ops.
//!
//! Every `diff` row is classified by comparing its Input hashes across the
//! two runs, position by position under the row's tolerance, and following
//! run 1's `Input producers` links:
//!
//! - [`CauseKind::Origin`]: every input agrees, yet the output diverges.
//! - [`CauseKind::Entry`]: a differing input has no captured producer (data
//!   loader, parameter, optimizer state, an excluded or small op).
//! - [`CauseKind::Inherited`]: every differing input comes from a captured
//!   diverging row.
//! - [`CauseKind::ViaCollective`]: a differing input comes from an unsynced
//!   collective (the divergence arrives from another rank).
//! - [`CauseKind::Unsynced`]: the row is itself an unsynced collective.

use ahash::AHashMap;
use serde::Serialize;

use super::compare::{compare_hashes, differing_positions, split_tokens, stat_diffs};
use super::{
    MatchTable, Policy, Status, ROW_NONFINITE1, ROW_NONFINITE2, ROW_OUT_DIFF, ROW_UNSYNCED,
};
use crate::parser::{Field, OpTable};

/// How a diverging row came to diverge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CauseKind {
    /// Inputs agree, output diverges: the divergence starts here.
    Origin,
    /// A differing input has no captured producer: the divergence enters here.
    Entry,
    /// Differing inputs come from captured diverging rows.
    Inherited,
    /// A differing input comes from an unsynced collective.
    ViaCollective,
    /// The row is an unsynced collective (never a cause).
    Unsynced,
}

impl CauseKind {
    /// Name for text output.
    pub fn as_str(self) -> &'static str {
        match self {
            CauseKind::Origin => "origin",
            CauseKind::Entry => "entry",
            CauseKind::Inherited => "inherited",
            CauseKind::ViaCollective => "entry via collective",
            CauseKind::Unsynced => "unsynced collective",
        }
    }
}

/// One origin or entry, with what follows from it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CauseEntry {
    /// Result row index.
    pub index: usize,
    /// Origin, entry or entry via collective.
    pub kind: CauseKind,
    /// 0-based positions of the differing inputs (at most 16 listed).
    pub inputs: Vec<usize>,
    /// Rows classified `inherited` whose chain leads back to this row.
    pub inherited: u64,
    /// The first few of those rows (result indexes), in dispatch order.
    pub chain: Vec<usize>,
}

/// Root-cause analysis of one rank.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RootCauses {
    /// Origins, entries and entries via collective, in dispatch order (at most 1,000 listed).
    pub causes: Vec<CauseEntry>,
    /// Total number of origins and entries (not via collective).
    pub cause_count: u64,
    /// The first origin or entry: the op to look at.
    pub first_cause: Option<usize>,
    /// Whether the rank's divergence only enters through unsynced collectives.
    pub via_collective_only: bool,
    /// First row whose run-1 stats or Output hash hold NaN or Inf.
    pub first_nonfinite1: Option<usize>,
    /// First row whose run-2 stats or Output hash hold NaN or Inf.
    pub first_nonfinite2: Option<usize>,
    /// First paired row non-finite on one side only.
    pub first_nonfinite_one_sided: Option<usize>,
    /// The paired `diff` row with the largest finite relative difference, and that difference.
    pub largest_diff: Option<(usize, f64)>,
}

const MAX_LISTED: usize = 1000;
const MAX_CHAIN: usize = 8;

/// Classifies the diverging rows of `m` (see the module doc). Rows of the
/// result are indexed like `m.rows`; the first `t1.len()` rows are run 1's
/// rows in order.
pub fn analyse(
    t1: &OpTable,
    t2: &OpTable,
    m: &MatchTable,
    policy: &Policy,
) -> (Vec<Option<CauseKind>>, RootCauses) {
    let mut rc = RootCauses::default();
    let n = m.rows.len();
    let mut kinds: Vec<Option<CauseKind>> = vec![None; n];
    let mut root: Vec<u32> = vec![u32::MAX; n];
    let mut key_row: AHashMap<&[u8], usize> = AHashMap::new();
    // Run-1 Output hash token → latest row: links an input to its producer
    // through uncaptured value-preserving ops (views, excluded ops) when the
    // producer list is empty.
    let mut value_row: AHashMap<&[u8], usize> = AHashMap::new();
    let analyse_causes = m.counts().diff > 0;
    let mut cause_slot: AHashMap<usize, usize> = AHashMap::new();
    let mut largest: Option<(usize, f64)> = None;
    let mut any_diverging = false;
    let mut any_cause = false;
    for (i, row) in m.rows.iter().enumerate() {
        if row.has(ROW_NONFINITE1) && rc.first_nonfinite1.is_none() {
            rc.first_nonfinite1 = Some(i);
        }
        if row.has(ROW_NONFINITE2) && rc.first_nonfinite2.is_none() {
            rc.first_nonfinite2 = Some(i);
        }
        let (Some(r1), Some(r2)) = (row.r1(), row.r2()) else {
            if let Some(r1) = row.r1() {
                if analyse_causes {
                    remember(t1, &mut key_row, &mut value_row, r1, i);
                }
            }
            continue;
        };
        if row.has(ROW_NONFINITE1) != row.has(ROW_NONFINITE2)
            && rc.first_nonfinite_one_sided.is_none()
        {
            rc.first_nonfinite_one_sided = Some(i);
        }
        if row.status == Status::Diff && analyse_causes {
            any_diverging = true;
            let rp = policy.for_table_row(t1, r1).opts;
            let (kind, bad) = if row.has(ROW_UNSYNCED) {
                (CauseKind::Unsynced, Vec::new())
            } else {
                let bad = differing_positions(
                    t1.field(r1, Field::InputHashes),
                    t2.field(r2, Field::InputHashes),
                    rp.hash,
                    rp.nan_equal,
                );
                let kind = if bad.is_empty() {
                    CauseKind::Origin
                } else {
                    let producers: Vec<&[u8]> = t1
                        .field(r1, Field::InputProducers)
                        .split(|b| *b == b';')
                        .map(crate::parser::line::trim)
                        .collect();
                    let inputs: Vec<&[u8]> =
                        split_tokens(t1.field(r1, Field::InputHashes)).collect();
                    let (mut fresh, mut inherited_from, mut via) = (false, None, false);
                    for &p in &bad {
                        let prod = producers.get(p).copied().unwrap_or(&[]);
                        let by_key = (!prod.is_empty()).then(|| key_row.get(prod)).flatten();
                        let by_value = || {
                            inputs
                                .get(p)
                                .filter(|v| prod.is_empty() && !v.is_empty())
                                .and_then(|v| value_row.get(v))
                        };
                        match by_key.or_else(by_value) {
                            None => fresh = true,
                            Some(&j) => {
                                let pj = &m.rows[j];
                                if pj.has(ROW_UNSYNCED) {
                                    via = true;
                                } else if pj.status == Status::Diff && pj.has(ROW_OUT_DIFF) {
                                    inherited_from.get_or_insert(j);
                                } else {
                                    // The producer's output agrees: the value changed
                                    // between producer and consumer, outside the capture.
                                    fresh = true;
                                }
                            }
                        }
                    }
                    if fresh {
                        CauseKind::Entry
                    } else if let Some(j) = inherited_from {
                        root[i] = root[j];
                        CauseKind::Inherited
                    } else if via {
                        CauseKind::ViaCollective
                    } else {
                        CauseKind::Entry
                    }
                };
                (kind, bad)
            };
            match kind {
                CauseKind::Origin | CauseKind::Entry | CauseKind::ViaCollective => {
                    root[i] = i as u32;
                    push_cause(
                        &mut rc,
                        i,
                        kind,
                        bad.into_iter().take(16).collect(),
                        &mut cause_slot,
                    );
                    if kind != CauseKind::ViaCollective {
                        rc.cause_count += 1;
                        any_cause = true;
                        if rc.first_cause.is_none() {
                            rc.first_cause = Some(i);
                        }
                    }
                }
                CauseKind::Inherited => {
                    let r = root[i] as usize;
                    if let Some(&s) = cause_slot.get(&r) {
                        let c = &mut rc.causes[s];
                        c.inherited += 1;
                        if c.chain.len() < MAX_CHAIN {
                            c.chain.push(i);
                        }
                    }
                }
                CauseKind::Unsynced => {}
            }
            kinds[i] = Some(kind);
            if !row.has(ROW_NONFINITE1) && !row.has(ROW_NONFINITE2) {
                let out = compare_hashes(
                    t1.field(r1, Field::OutputHash),
                    t2.field(r2, Field::OutputHash),
                    rp.hash,
                    rp.nan_equal,
                )
                .intensity
                .unwrap_or(0.0);
                let worst = stat_diffs(t1, r1, t2, r2)
                    .iter()
                    .skip(1)
                    .flatten()
                    .fold(out, |a, b| a.max(*b));
                if worst.is_finite() && largest.is_none_or(|(_, w)| worst > w) {
                    largest = Some((i, worst));
                }
            }
        }
        if analyse_causes {
            remember(t1, &mut key_row, &mut value_row, r1, i);
        }
    }
    rc.largest_diff = largest;
    rc.via_collective_only =
        any_diverging && !any_cause && rc.causes.iter().any(|c| c.kind == CauseKind::ViaCollective);
    (kinds, rc)
}

/// Records run-1 row `r1` (result row `i`) as a possible producer, by key and by output value.
fn remember<'a>(
    t1: &'a OpTable,
    key_row: &mut AHashMap<&'a [u8], usize>,
    value_row: &mut AHashMap<&'a [u8], usize>,
    r1: usize,
    i: usize,
) {
    key_row.insert(t1.key(r1), i);
    for tok in split_tokens(t1.field(r1, Field::OutputHash)) {
        if !tok.is_empty() {
            value_row.insert(tok, i);
        }
    }
}

fn push_cause(
    rc: &mut RootCauses,
    i: usize,
    kind: CauseKind,
    inputs: Vec<usize>,
    slot: &mut AHashMap<usize, usize>,
) {
    if rc.causes.len() < MAX_LISTED {
        slot.insert(i, rc.causes.len());
        rc.causes.push(CauseEntry {
            index: i,
            kind,
            inputs,
            inherited: 0,
            chain: Vec::new(),
        });
    }
}

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
use rayon::prelude::*;
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

/// A `diff` row's differing inputs, found before the producers are looked up.
struct Pending<'a> {
    /// Result row index.
    i: usize,
    /// 0-based positions of the differing inputs.
    bad: Vec<usize>,
    /// Per differing input: its producer key (maybe empty) and its run-1 value.
    links: Vec<(&'a [u8], &'a [u8])>,
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
    fn scan(t1: &'a OpTable, m: &MatchTable, pending: &[Pending<'a>]) -> Producers<'a> {
        let mut by_key: AHashMap<&[u8], Vec<usize>> = AHashMap::new();
        let mut by_value: AHashMap<&[u8], Vec<usize>> = AHashMap::new();
        for p in pending {
            for (prod, value) in &p.links {
                if !prod.is_empty() {
                    by_key.entry(prod).or_default();
                } else if !value.is_empty() {
                    by_value.entry(value).or_default();
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
            let hits: Vec<(usize, &[u8])> = m
                .rows
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
            let hits: Vec<(usize, &[u8])> = m
                .rows
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

/// Classifies the diverging rows of `m` (see the module doc). Rows of the
/// result are indexed like `m.rows`; the first `t1.len()` rows are run 1's
/// rows in order. Memory beyond the result is proportional to the `diff`
/// rows: run 1 is scanned once for just the producers they ask about.
pub fn analyse(
    t1: &OpTable,
    t2: &OpTable,
    m: &MatchTable,
    policy: &Policy,
) -> (Vec<Option<CauseKind>>, RootCauses) {
    let mut rc = RootCauses::default();
    let n = m.rows.len();
    for (i, row) in m.rows.iter().enumerate() {
        if row.has(ROW_NONFINITE1) && rc.first_nonfinite1.is_none() {
            rc.first_nonfinite1 = Some(i);
        }
        if row.has(ROW_NONFINITE2) && rc.first_nonfinite2.is_none() {
            rc.first_nonfinite2 = Some(i);
        }
        if row.r1().is_some()
            && row.r2().is_some()
            && row.has(ROW_NONFINITE1) != row.has(ROW_NONFINITE2)
            && rc.first_nonfinite_one_sided.is_none()
        {
            rc.first_nonfinite_one_sided = Some(i);
        }
    }
    if m.counts().diff == 0 {
        return (Vec::new(), rc);
    }
    let mut kinds: Vec<Option<CauseKind>> = vec![None; n];
    // Phase 1: every diff row's differing inputs (in parallel: rows are independent).
    let diff_rows: Vec<(usize, usize, usize)> = m
        .rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.status == Status::Diff)
        .filter_map(|(i, r)| Some((i, r.r1()?, r.r2()?)))
        .collect();
    let pending: Vec<Option<Pending>> = diff_rows
        .par_iter()
        .map(|&(i, r1, r2)| {
            if m.rows[i].has(ROW_UNSYNCED) {
                return None;
            }
            let opts = policy.for_table_row(t1, r1).opts;
            let bad = differing_positions(
                t1.field(r1, Field::InputHashes),
                t2.field(r2, Field::InputHashes),
                opts.hash,
                opts.nan_equal,
            );
            let producers: Vec<&[u8]> = t1
                .field(r1, Field::InputProducers)
                .split(|b| *b == b';')
                .map(crate::parser::trim)
                .collect();
            let inputs: Vec<&[u8]> = split_tokens(t1.field(r1, Field::InputHashes)).collect();
            let links = bad
                .iter()
                .map(|&p| {
                    (
                        producers.get(p).copied().unwrap_or(&[]),
                        inputs.get(p).copied().unwrap_or(&[]),
                    )
                })
                .collect();
            Some(Pending { i, bad, links })
        })
        .collect();
    let pending: Vec<Pending> = pending.into_iter().flatten().collect();
    // Phase 2: the producers those rows ask about, in one scan of run 1.
    let prods = Producers::scan(t1, m, &pending);
    // Phase 3: classify in dispatch order (an inherited row needs the root
    // of its producer, which comes earlier).
    let mut root: AHashMap<usize, usize> = AHashMap::new();
    let mut cause_slot: AHashMap<usize, usize> = AHashMap::new();
    let mut largest: Option<(usize, f64)> = None;
    let mut any_cause = false;
    let mut pend = pending.into_iter().peekable();
    for &(i, r1, r2) in &diff_rows {
        let row = &m.rows[i];
        let (kind, bad) = match pend.next_if(|p| p.i == i) {
            None => (CauseKind::Unsynced, Vec::new()),
            Some(p) if p.bad.is_empty() => (CauseKind::Origin, p.bad),
            Some(p) => {
                let (mut fresh, mut inherited_from, mut via) = (false, None, false);
                for (prod, value) in &p.links {
                    match prods.before(i, prod, value) {
                        None => fresh = true,
                        Some(j) => {
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
                let kind = if fresh {
                    CauseKind::Entry
                } else if let Some(j) = inherited_from {
                    let r = root.get(&j).copied().unwrap_or(j);
                    root.insert(i, r);
                    CauseKind::Inherited
                } else if via {
                    CauseKind::ViaCollective
                } else {
                    CauseKind::Entry
                };
                (kind, p.bad)
            }
        };
        match kind {
            CauseKind::Origin | CauseKind::Entry | CauseKind::ViaCollective => {
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
                let r = root[&i];
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
        if !row.has(ROW_NONFINITE1) && !row.has(ROW_NONFINITE2) && !row.has(ROW_UNSYNCED) {
            let opts = policy.for_table_row(t1, r1).opts;
            let out = compare_hashes(
                t1.field(r1, Field::OutputHash),
                t2.field(r2, Field::OutputHash),
                opts.hash,
                opts.nan_equal,
            )
            .intensity
            .unwrap_or(0.0);
            let worst = stat_diffs(t1, r1, t2, r2)
                .iter()
                .skip(1)
                .flatten()
                .fold(out, |a, b| a.max(*b));
            if worst.is_finite() && worst > 0.0 && largest.is_none_or(|(_, w)| worst > w) {
                largest = Some((i, worst));
            }
        }
    }
    rc.largest_diff = largest;
    rc.via_collective_only =
        !any_cause && rc.causes.iter().any(|c| c.kind == CauseKind::ViaCollective);
    (kinds, rc)
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

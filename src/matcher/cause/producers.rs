//! Step 2 of root cause: who produced each differing input. Run 1 is
//! scanned once for just the producer keys and Output hash values the
//! `diff` rows ask about ([`Producers`]), so memory stays proportional to
//! the diverging rows; and each run's own `Input producers` are followed to
//! the ops of that run only that feed a differing input
//! ([`one_sided_sources`]).

use ahash::AHashMap;
use rayon::prelude::*;

use super::super::compare::split_tokens;
use super::super::{MatchRow, Sides, ROW_FUSED, ROW_RECOMPUTED};
use super::inputs::{producer_keys, Pending};
use super::MAX_ONE_SIDED_CHAIN;
use crate::parser::{Field, OpTable};

/// How many rows ahead the scan of run 1's Output hashes asks for the
/// block it will read.
const PREFETCH_AHEAD: usize = 8;

/// Occurrences (result row indexes, ascending) of the keys and values that
/// some diverging row asks about.
pub(super) struct Producers<'a> {
    by_key: AHashMap<&'a [u8], Vec<usize>>,
    by_value: AHashMap<&'a [u8], Vec<usize>>,
}
impl<'a> Producers<'a> {
    /// Scans run 1 once, recording only the keys and Output hash values that
    /// are asked about (memory stays proportional to the diverging rows).
    /// Also recorded: the (key, value) inputs in `more` (those of the
    /// one-sided ops that start a chain, [`head_producers`]), by key, or
    /// by value where no key is named.
    pub(super) fn scan(
        t1: &'a OpTable,
        rows: &[MatchRow],
        pending: &[Pending<'a>],
        more: &[HeadInput<'a>],
    ) -> Producers<'a> {
        let mut by_key: AHashMap<&[u8], Vec<usize>> = AHashMap::new();
        let mut by_value: AHashMap<&[u8], Vec<usize>> = AHashMap::new();
        for &HeadInput {
            key: k, value: v, ..
        } in more
        {
            if !k.is_empty() {
                by_key.entry(k).or_default();
            } else if !v.is_empty() {
                by_value.entry(v).or_default();
            }
        }
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
                    if let Some(r1) = rows.get(i + PREFETCH_AHEAD).and_then(MatchRow::r1) {
                        t1.prefetch_block(r1);
                    }
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
    pub(super) fn before(&self, i: usize, prod: &[u8], value: &[u8]) -> Option<usize> {
        let occ = if prod.is_empty() {
            self.by_value.get(value)?
        } else {
            self.by_key.get(prod)?
        };
        let k = occ.partition_point(|&j| j < i);
        (k > 0).then(|| occ[k - 1])
    }
}

/// One input of a one-sided op that starts a chain.
#[derive(Clone, Copy)]
pub(super) struct HeadInput<'a> {
    /// For a head of run 1: its `Input producers` key (maybe empty), looked
    /// up in run 1 ([`Producers`]).
    pub(super) key: &'a [u8],
    /// For a head of run 1: its Input hashes value, looked up in run 1
    /// where no key is named.
    pub(super) value: &'a [u8],
    /// For a head of run 2: the result row of its producer, found in run
    /// 2's own log (by key, else by value) and mapped to its pair.
    pub(super) row: Option<usize>,
}

/// How far back in run 2's log a head's producer is looked for.
const MAX_LOOK_BACK: usize = 1 << 16;

/// The inputs of the one-sided ops that start a chain, by result row
/// ([`head_producers`]).
pub(super) type Heads<'a> = AHashMap<usize, Vec<HeadInput<'a>>>;

/// The inputs of the one-sided op that starts each chain of `sources`
/// (the earliest, `chain[0]`), read in its own run's log: (result row of
/// the head, (`Input producers` key, Input hashes value) per input). Only
/// heads whose op the other run also runs in that module (the same fuzzy
/// key: one more iteration of a loop the other run runs fewer times, such
/// as an MoE expert only one run's routing reached) are listed; an op the
/// other run never runs there (a dropout one run adds) is a change of its
/// own.
pub(super) fn head_producers<'a>(
    t1: &'a OpTable,
    t2: &'a OpTable,
    rows: &[MatchRow],
    sources: &[Option<Vec<usize>>],
) -> Heads<'a> {
    let mut heads: Vec<usize> = sources
        .iter()
        .flatten()
        .filter_map(|c| c.first().copied())
        .collect();
    heads.sort_unstable();
    heads.dedup();
    let side = |h: usize| match rows[h].sides() {
        Sides::Only1(r) => Some((0, r)),
        Sides::Only2(r) => Some((1, r)),
        Sides::Both(..) => None,
    };
    let tables = [t1, t2];
    // Per side, the fuzzy keys of the other side's rows of the heads' op
    // names (one scan of each other table, only when it has heads).
    let mut fuzzy_in_other: [ahash::AHashSet<Vec<u8>>; 2] = Default::default();
    for s in 0..2 {
        let names: ahash::AHashSet<&[u8]> = heads
            .iter()
            .filter_map(|&h| side(h))
            .filter(|&(hs, _)| hs == s)
            .map(|(_, r)| tables[s].op_name(tables[s].op_type(r)))
            .collect();
        if names.is_empty() {
            continue;
        }
        let o = tables[1 - s];
        let ids: ahash::AHashSet<u32> = (0..o.op_types() as u32)
            .filter(|&id| names.contains(o.op_name(id)))
            .collect();
        fuzzy_in_other[s] = (0..o.len())
            .filter(|&r| ids.contains(&o.op_type(r)))
            .map(|r| super::super::keys::fuzzy_key(o.key(r)))
            .collect();
    }
    // Run 2's rows by their result row, for heads of run 2 only.
    let result_of: AHashMap<usize, usize> =
        if heads.iter().any(|&h| side(h).is_some_and(|(s, _)| s == 1)) {
            rows.iter()
                .enumerate()
                .filter_map(|(i, row)| Some((row.r2()?, i)))
                .collect()
        } else {
            AHashMap::new()
        };
    // A head of run 2: its producer in run 2's own log (the latest row
    // before it with the key, or whose Output hash has the value; run 1's
    // rows of that key or value may be another op, or hold other values),
    // as a result row.
    let in_run2 = |r: usize, k: &[u8], v: &[u8]| -> Option<usize> {
        let from = r.saturating_sub(MAX_LOOK_BACK);
        let j = (from..r).rev().find(|&j| {
            if !k.is_empty() {
                t2.key(j) == k
            } else {
                !v.is_empty() && split_tokens(t2.field(j, Field::OutputHash)).any(|x| x == v)
            }
        })?;
        result_of.get(&j).copied()
    };
    heads
        .into_iter()
        .filter_map(|h| {
            let (s, r) = side(h)?;
            let t = tables[s];
            if !fuzzy_in_other[s].contains(&super::super::keys::fuzzy_key(t.key(r))) {
                return None;
            }
            let mut keys = producer_keys(t, r).into_iter();
            let mut values = split_tokens(t.field(r, Field::InputHashes));
            let mut inputs = Vec::new();
            loop {
                let (k, v) = match (keys.next(), values.next()) {
                    (None, None) => break,
                    (k, v) => (k.unwrap_or_default(), v.unwrap_or_default()),
                };
                inputs.push(if s == 0 {
                    HeadInput {
                        key: k,
                        value: v,
                        row: None,
                    }
                } else {
                    HeadInput {
                        key: &[],
                        value: &[],
                        row: in_run2(r, k, v),
                    }
                });
            }
            Some((h, inputs))
        })
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
    /// The one-sided rows flagged [`ROW_RECOMPUTED`] (table rows): a chain
    /// does not go back through them.
    recomputed: ahash::AHashSet<usize>,
    /// Table rows (ascending) of the one-sided rows by each value of their
    /// Output hash, built at the first look by value.
    by_value: Option<AHashMap<&'a [u8], Vec<usize>>>,
}

impl<'a> OneSidedOps<'a> {
    /// Run `side`'s (0: run 1, 1: run 2) one-sided rows among `rows`.
    fn new(t: &'a OpTable, rows: &[MatchRow], side: usize) -> OneSidedOps<'a> {
        // An op the other run's compiler fused away is no op that run
        // lacks: never a cause (trial 21 H2: eager's `native_layer_norm`,
        // fused away by inductor, was named the cause of an optimizer
        // `lerp_` it matched by an Output hash value).
        let only: AHashMap<usize, usize> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.has(ROW_FUSED))
            .filter_map(|(i, r)| match (r.sides(), side) {
                (Sides::Only1(a), 0) => Some((a, i)),
                (Sides::Only2(b), 1) => Some((b, i)),
                _ => None,
            })
            .collect();
        let recomputed = only
            .iter()
            .filter(|(_, &i)| rows[i].has(ROW_RECOMPUTED))
            .map(|(&r, _)| r)
            .collect();
        OneSidedOps {
            t,
            only,
            by_key: AHashMap::new(),
            chains: AHashMap::new(),
            recomputed,
            by_value: None,
        }
    }

    /// The one-sided row that produced an input of table row `r` whose
    /// producer the log does not name (an excluded view between them:
    /// `Input producers` empty there): the latest one-sided row before `r`
    /// with the input's `value` among its Output hash values.
    fn producer_by_value(&mut self, r: usize, value: &[u8]) -> Option<usize> {
        if value.is_empty() || self.only.is_empty() {
            return None;
        }
        let t = self.t;
        let only = &self.only;
        let index = self.by_value.get_or_insert_with(|| {
            let mut rows: Vec<usize> = only.keys().copied().collect();
            rows.sort_unstable();
            let mut m: AHashMap<&'a [u8], Vec<usize>> = AHashMap::new();
            for row in rows {
                let hash = t.field(row, crate::parser::Field::OutputHash);
                for v in hash.split(|&b| b == b',') {
                    let v = v.trim_ascii();
                    if !v.is_empty() {
                        m.entry(v).or_default().push(row);
                    }
                }
            }
            m
        });
        let occ = index.get(value.trim_ascii())?;
        let k = occ.partition_point(|&j| j < r);
        Some(occ[k.checked_sub(1)?])
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
    /// producing an input of the next. A recomputation (activation
    /// checkpointing's repeat of a forward op) is not gone back through: a
    /// batch norm recomputed in backward that updates its running
    /// statistics a second time is the op that changed them, not the
    /// recomputed convolution before it.
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
                        && !self.recomputed.contains(&p)
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
/// input is produced, in run 1's or run 2's own `Input producers` (or,
/// where these name none, by the Output hash value of the input), by an op
/// of that run only. If so, the chain of that run's one-sided ops feeding
/// it ([`OneSidedOps::chain`]) as result row indexes, earliest first. The
/// inputs are tried in position order, run 1's producer before run 2's.
pub(super) fn one_sided_sources<'a>(
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
            // A producer the log names, else (none named: an excluded view
            // between them) the one-sided op whose output has the value.
            let (s, o) = p.links.iter().find_map(|l| {
                [(0, r1, l.prod, l.value), (1, r2, l.prod2, l.value2)]
                    .into_iter()
                    .find_map(|(s, r, k, v)| {
                        let o = if k.is_empty() {
                            sides[s].producer_by_value(r, v)
                        } else {
                            sides[s].producer(r, k)
                        };
                        Some((s, o?))
                    })
            })?;
            let side = &mut sides[s];
            let chain = side.chain(o);
            Some(chain.iter().map(|r| side.only[r]).collect())
        })
        .collect()
}

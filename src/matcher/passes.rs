//! The four pairing passes (`shared/spec/matching.md`): override, exact
//! key, fuzzy key, stats, run in that order by
//! [`super::match_tables_indexed`]. Each pass is a hash-index lookup, never a
//! scan: side 1 is walked in file order and each unpaired row takes the
//! first unclaimed side-2 row with an equal pass key ([`Pairing::pass`]).
//! The exact pass without layer offsets merges the tables' sorted key
//! indexes instead ([`Pairing::pass_by_index`]), with the same result.

use std::hash::Hash;

use ahash::AHashMap;
use rayon::prelude::*;

use super::{keys, Overrides, Strategy, NO_ROW};
use crate::parser::key::KeyIndex;
use crate::parser::{Field, OpTable};

/// Pairing state across the passes: who is paired with whom, and by which pass.
pub(super) struct Pairing {
    /// Run-2 partner of each run-1 row, or [`NO_ROW`].
    pub(super) pair1: Vec<u32>,
    /// Run-1 partner of each run-2 row, or [`NO_ROW`].
    pub(super) pair2: Vec<u32>,
    /// The pass that paired each run-1 row.
    pub(super) strat1: Vec<Strategy>,
}

impl Pairing {
    pub(super) fn new(n1: usize, n2: usize) -> Pairing {
        Pairing {
            pair1: vec![NO_ROW; n1],
            pair2: vec![NO_ROW; n2],
            strat1: vec![Strategy::None; n1],
        }
    }

    /// One pass: index the unclaimed side-2 rows by `key2` (first row in
    /// file order first), then walk the unpaired side-1 rows in file order,
    /// each taking the first unclaimed side-2 row with an equal key.
    /// Returns the number of pairs made.
    pub(super) fn pass<K, F1, F2>(&mut self, strategy: Strategy, key1: F1, key2: F2) -> u64
    where
        K: Hash + Eq,
        F1: Fn(usize) -> Option<K>,
        F2: Fn(usize) -> Option<K>,
    {
        let (n1, n2) = (self.pair1.len(), self.pair2.len());
        // head[key] = first unclaimed side-2 row with that key; next[row] = the following one.
        let unclaimed = self.pair2.iter().filter(|p| **p == NO_ROW).count();
        if unclaimed == 0 {
            return 0;
        }
        let mut head: AHashMap<K, u32> = AHashMap::with_capacity(unclaimed);
        let mut next: Vec<u32> = vec![NO_ROW; n2];
        for r2 in (0..n2).rev() {
            if self.pair2[r2] != NO_ROW {
                continue;
            }
            if let Some(k) = key2(r2) {
                if let Some(old) = head.insert(k, r2 as u32) {
                    next[r2] = old;
                }
            }
        }
        if head.is_empty() {
            return 0;
        }
        let mut paired = 0;
        for r1 in 0..n1 {
            if self.pair1[r1] != NO_ROW {
                continue;
            }
            let Some(k) = key1(r1) else { continue };
            if let Some(h) = head.get_mut(&k) {
                if *h != NO_ROW {
                    let r2 = *h as usize;
                    *h = next[r2];
                    self.pair1[r1] = r2 as u32;
                    self.pair2[r2] = r1 as u32;
                    self.strat1[r1] = strategy;
                    paired += 1;
                }
            }
        }
        paired
    }
}

impl Pairing {
    /// The exact pass over the two tables' key indexes
    /// ([`OpTable::key_index`]: `(hash, row)` sorted, so the rows of one key
    /// are consecutive and in file order). A merge of the two indexes gives
    /// each run-1 row the run-2 rows of its hash; each unpaired run-1 row
    /// takes the first unclaimed one whose key is equal (`same`), so a
    /// 64-bit collision can never pair different keys. Lookups run in
    /// parallel; claims are then made in run-1 order, so the result is the
    /// sequential pass's (`shared/spec/matching.md`, pass 1).
    pub(super) fn pass_by_index(
        &mut self,
        index1: &[(u64, u32)],
        index2: &[(u64, u32)],
        same: impl Fn(usize, usize) -> bool + Sync,
    ) -> u64 {
        let n1 = self.pair1.len();
        // Merge: where each run-1 row's hash starts in index 2.
        let mut group: Vec<u32> = vec![NO_ROW; n1];
        let mut j = 0;
        for &(h, r1) in index1 {
            while j < index2.len() && index2[j].0 < h {
                j += 1;
            }
            if j < index2.len() && index2[j].0 == h {
                group[r1 as usize] = j as u32;
            }
        }
        // In parallel: each run-1 row's candidate (a position in index 2),
        // the first run-2 row of its hash with an equal key that no earlier
        // pass paired, as if this pass had claimed nothing yet.
        let (pair1, pair2) = (&self.pair1, &self.pair2);
        let candidate: Vec<u32> = (0..n1)
            .into_par_iter()
            .with_min_len(4096)
            .map(|r1| {
                let g = group[r1];
                if pair1[r1] != NO_ROW || g == NO_ROW {
                    return NO_ROW;
                }
                let h = index2[g as usize].0;
                index2[g as usize..]
                    .iter()
                    .take_while(|(h2, _)| *h2 == h)
                    .position(|(_, r2)| pair2[*r2 as usize] == NO_ROW && same(r1, *r2 as usize))
                    .map_or(NO_ROW, |k| g + k as u32)
            })
            .collect();
        drop(group);
        // In order: take the candidate, or, when an earlier row claimed it
        // (equal keys on several rows), the next unclaimed row of the hash
        // with an equal key — exactly the sequential rule.
        let mut paired = 0;
        for (r1, &k0) in candidate.iter().enumerate() {
            if k0 == NO_ROW {
                continue;
            }
            let h = index2[k0 as usize].0;
            let found = index2[k0 as usize..]
                .iter()
                .take_while(|(h2, _)| *h2 == h)
                .enumerate()
                .find(|(k, (_, r2))| {
                    self.pair2[*r2 as usize] == NO_ROW && (*k == 0 || same(r1, *r2 as usize))
                });
            if let Some((_, &(_, r2))) = found {
                self.pair1[r1] = r2;
                self.pair2[r2 as usize] = r1 as u32;
                self.strat1[r1] = Strategy::Exact;
                paired += 1;
            }
        }
        paired
    }
}

/// Pass 0: the manual override pairs (`--override`), run 1's key to run
/// 2's. Returns the number of pairs made.
pub(super) fn pass_override(
    p: &mut Pairing,
    t1: &OpTable,
    t2: &OpTable,
    overrides: &Overrides,
) -> u64 {
    if overrides.is_empty() {
        return 0;
    }
    p.pass(
        Strategy::Override,
        |r| overrides.get(t1.key(r)),
        |r| Some(t2.key(r)),
    )
}

/// Pass 1: equal keys after the root-class strip ([`keys::strip_root_class`]),
/// with each side's layer offset applied to `layers.N` (`--layer-offset`).
/// Without offsets it runs over the tables' key indexes, which are sorted by
/// that key; they are dropped when the pass is done. Returns the number of
/// pairs made.
pub(super) fn pass_exact(
    p: &mut Pairing,
    t1: &OpTable,
    t2: &OpTable,
    layer_offset: [i64; 2],
    indexes: (KeyIndex, KeyIndex),
) -> u64 {
    let [off1, off2] = layer_offset;
    if off1 == 0 && off2 == 0 {
        // The common case: the exact key is the key without its root
        // class, the key the tables' key indexes are sorted by.
        fn exact(t: &OpTable, r: usize) -> &[u8] {
            keys::strip_root_class(t.key(r))
        }
        let (index1, index2) = indexes;
        p.pass_by_index(&index1, &index2, |r1, r2| exact(t1, r1) == exact(t2, r2))
    } else {
        drop(indexes);
        fn key(t: &OpTable, r: usize, off: i64) -> Option<std::borrow::Cow<'_, [u8]>> {
            Some(keys::with_layer_offset(
                keys::strip_root_class(t.key(r)),
                off,
            ))
        }
        p.pass(Strategy::Exact, |r| key(t1, r, off1), |r| key(t2, r, off2))
    }
}

/// Whether every pair [`pass_exact`] makes between `t1` and `t2` under
/// `layer_offset` has byte-equal raw keys: with no offset, exact keys are
/// the keys without their root class, so they are when both tables' keys
/// all have the same root class ([`OpTable::root_class`]).
pub(super) fn exact_pairs_have_equal_keys(
    t1: &OpTable,
    t2: &OpTable,
    layer_offset: [i64; 2],
) -> bool {
    layer_offset == [0, 0] && t1.root_class().is_some() && t1.root_class() == t2.root_class()
}

/// The fuzzy keys ([`keys::fuzzy_key`], after the layer offset) of the rows
/// the exact pass left unpaired (usually few), on each side; the fuzzy and
/// stats passes read them.
pub(super) struct FuzzyKeys {
    side: [AHashMap<u32, Vec<u8>>; 2],
}

impl FuzzyKeys {
    /// The fuzzy keys of the rows `p` has not paired yet.
    pub(super) fn of_unpaired(
        p: &Pairing,
        t1: &OpTable,
        t2: &OpTable,
        layer_offset: [i64; 2],
    ) -> FuzzyKeys {
        let unpaired = |t: &OpTable, pair: &[u32], off: i64| -> AHashMap<u32, Vec<u8>> {
            pair.iter()
                .enumerate()
                .filter(|(_, p)| **p == NO_ROW)
                .map(|(r, _)| {
                    (
                        r as u32,
                        keys::fuzzy_key(&keys::with_layer_offset(t.key(r), off)),
                    )
                })
                .collect()
        };
        FuzzyKeys {
            side: [
                unpaired(t1, &p.pair1, layer_offset[0]),
                unpaired(t2, &p.pair2, layer_offset[1]),
            ],
        }
    }

    /// Side `s`'s (0: run 1, 1: run 2) fuzzy key of row `r`, if it was
    /// unpaired after the exact pass.
    fn get(&self, s: usize, r: usize) -> Option<&[u8]> {
        self.side[s].get(&(r as u32)).map(|v| v.as_slice())
    }
}

/// Pass 2: equal fuzzy keys (op counters removed). With `shape_tie_break`,
/// a first round pairs only fuzzy-equal rows with the same Shape text
/// (backward counter drift, cases/06), then the reference's
/// first-candidate round pairs the rest. Returns the number of pairs made.
pub(super) fn pass_fuzzy(
    p: &mut Pairing,
    t1: &OpTable,
    t2: &OpTable,
    fuzzy: &FuzzyKeys,
    shape_tie_break: bool,
) -> u64 {
    let mut paired = 0;
    if shape_tie_break {
        paired += p.pass(
            Strategy::Fuzzy,
            |r| fuzzy.get(0, r).map(|f| (f, t1.field(r, Field::Shape))),
            |r| fuzzy.get(1, r).map(|f| (f, t2.field(r, Field::Shape))),
        );
    }
    paired + p.pass(Strategy::Fuzzy, |r| fuzzy.get(0, r), |r| fuzzy.get(1, r))
}

/// Pass 3: equal (op type, Shape text, Output hash text), over the rows
/// still unpaired that had a fuzzy key. Returns the number of pairs made.
pub(super) fn pass_stats(p: &mut Pairing, t1: &OpTable, t2: &OpTable, fuzzy: &FuzzyKeys) -> u64 {
    let stats_key = |t: &OpTable, s: usize, r: usize| {
        fuzzy.get(s, r).map(|f| {
            (
                keys::op_type(f).to_vec(),
                t.field(r, Field::Shape).to_vec(),
                t.field(r, Field::OutputHash).to_vec(),
            )
        })
    };
    p.pass(
        Strategy::Stats,
        |r| stats_key(t1, 0, r),
        |r| stats_key(t2, 1, r),
    )
}

/// The override pairs whose run-1 key paired nothing (absent key or
/// target), as text, in the overrides' order.
pub(super) fn unused_overrides(
    p: &Pairing,
    t1: &OpTable,
    overrides: &Overrides,
) -> Vec<(String, String)> {
    if overrides.is_empty() {
        return Vec::new();
    }
    let used: ahash::AHashSet<&[u8]> = (0..p.pair1.len())
        .filter(|r| p.strat1[*r] == Strategy::Override)
        .map(|r| t1.key(r))
        .collect();
    overrides
        .pairs()
        .filter(|(k, _)| !used.contains(*k))
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect()
}

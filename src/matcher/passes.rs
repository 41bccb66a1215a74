//! The four pairing passes (`shared/spec/matching.md`): override, exact
//! key, fuzzy key, stats, run in that order by
//! [`super::match_tables_indexed`]. Each pass is a hash-index lookup, never a
//! scan: side 1 is walked in file order and each unpaired row takes the
//! first unclaimed side-2 row with an equal pass key ([`Pairing::pass`]).
//! The exact pass without layer offsets merges the tables' sorted key
//! indexes instead ([`Pairing::pass_by_index`]), with the same result.
//!
//! Beyond the reference: the exact, fuzzy and stats passes respect the
//! phase where both logs record one ([`PhaseRule`]: a forward row never
//! pairs with a backward or optimizer row of the same key), and with the Shape
//! tie-break [`release_drifted_pairs`] leaves exact pairs made by
//! op-counter drift to the fuzzy pass. Neither changes a golden row.

use std::hash::Hash;

use ahash::{AHashMap, AHashSet};
use rayon::prelude::*;

use super::{keys, Overrides, Strategy, NO_ROW};
use crate::parser::key::KeyIndex;
use crate::parser::{Field, OpTable};

/// Which phase a row pairs in (actdiff's rule on top of
/// `shared/spec/matching.md`): the exact, fuzzy and stats passes pair rows
/// of one phase ([`OpTable::phase_kind`]): never a backward row (`Phase:
/// backward`) with one that is not, nor a forward row with an optimizer
/// one (a root-scope `add_` added before the forward, whose fuzzy key is
/// the optimizer's step counter's, took that counter's place). The
/// rule is in force only where both logs record phases (a `Phase:` line in
/// at least one block of each): a log without any says nothing about its
/// rows' phases. A block cut short by the end of its file may have lost its
/// `Phase:` line, so its phase is unknown too. A row of unknown phase pairs
/// with either phase, as in the reference.
#[derive(Clone, Copy)]
pub(super) struct PhaseRule<'a> {
    tables: Option<[&'a OpTable; 2]>,
}

impl<'a> PhaseRule<'a> {
    /// The rule for two tables: in force when both record phases.
    pub(super) fn of(t1: &'a OpTable, t2: &'a OpTable) -> PhaseRule<'a> {
        let known = |t: &OpTable| t.schema().contains(Field::Phase);
        PhaseRule {
            tables: (known(t1) && known(t2)).then_some([t1, t2]),
        }
    }

    /// Side `s`'s (0: run 1, 1: run 2) row `r`: its phase (0 forward, 1
    /// backward, 2 optimizer: [`OpTable::phase_kind`]), or `None` when it
    /// is unknown (the rule is not in force, or the block is truncated).
    #[inline]
    pub(super) fn phase(&self, s: usize, r: usize) -> Option<u8> {
        let t = self.tables?[s];
        (!t.is_truncated(r)).then(|| match t.phase_kind(r) {
            crate::logformat::Phase::Forward => 0,
            crate::logformat::Phase::Backward => 1,
            crate::logformat::Phase::Optimizer => 2,
        })
    }

    /// Whether run 1's row `r1` and run 2's row `r2` may pair: same phase,
    /// or a phase unknown.
    #[inline]
    pub(super) fn allows(&self, r1: usize, r2: usize) -> bool {
        match (self.phase(0, r1), self.phase(1, r2)) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        }
    }
}

/// Pairing state across the passes: who is paired with whom, and by which pass.
pub(super) struct Pairing {
    /// Run-2 partner of each run-1 row, or [`NO_ROW`].
    pub(super) pair1: Vec<u32>,
    /// Run-1 partner of each run-2 row, or [`NO_ROW`].
    pub(super) pair2: Vec<u32>,
    /// The pass that paired each run-1 row.
    pub(super) strat1: Vec<Strategy>,
}

/// A row held out of every pass ([`Pairing::hold`]): not [`NO_ROW`], so
/// each pass (and the lineage re-pairing) takes it as paired;
/// [`Pairing::release_held`] makes it unpaired again before judging.
pub(super) const HELD: u32 = u32::MAX - 1;

impl Pairing {
    /// Holds run `side`'s (0 or 1) row `r` out of the passes.
    pub(super) fn hold(&mut self, side: usize, r: usize) {
        let v = if side == 0 {
            &mut self.pair1
        } else {
            &mut self.pair2
        };
        if v[r] == NO_ROW {
            v[r] = HELD;
        }
    }

    /// Makes the held rows unpaired (after the last pass).
    pub(super) fn release_held(&mut self) {
        for v in [&mut self.pair1, &mut self.pair2] {
            for x in v.iter_mut().filter(|x| **x == HELD) {
                *x = NO_ROW;
            }
        }
    }

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

    /// [`Pairing::pass`] under the phase rule: each unpaired side-1 row
    /// takes the first unclaimed side-2 row with an equal key that
    /// [`PhaseRule::allows`] (same phase, or a phase unknown). Still one
    /// hash lookup per row: side 2 is indexed by key with one candidate
    /// chain per phase, and its rows of unknown phase (at most the
    /// truncated last block) beside them. Returns the number of pairs made.
    pub(super) fn pass_phased<K, F1, F2>(
        &mut self,
        strategy: Strategy,
        phase: PhaseRule<'_>,
        key1: F1,
        key2: F2,
    ) -> u64
    where
        K: Hash + Eq,
        F1: Fn(usize) -> Option<K>,
        F2: Fn(usize) -> Option<K>,
    {
        if phase.tables.is_none() {
            return self.pass(strategy, key1, key2);
        }
        let (n1, n2) = (self.pair1.len(), self.pair2.len());
        // head[key][phase] = first unclaimed side-2 row of that key and
        // phase; next[row] = the following one; wild[key] = the unclaimed
        // rows of unknown phase in reverse file order (the first one last).
        let mut head: AHashMap<K, [u32; 3]> = AHashMap::new();
        let mut wild: AHashMap<K, Vec<u32>> = AHashMap::new();
        let mut next: Vec<u32> = vec![NO_ROW; n2];
        for r2 in (0..n2).rev() {
            if self.pair2[r2] != NO_ROW {
                continue;
            }
            let Some(k) = key2(r2) else { continue };
            match phase.phase(1, r2) {
                Some(b) => {
                    let h = head.entry(k).or_insert([NO_ROW; 3]);
                    next[r2] = h[usize::from(b)];
                    h[usize::from(b)] = r2 as u32;
                }
                None => wild.entry(k).or_default().push(r2 as u32),
            }
        }
        let mut paired = 0;
        for r1 in 0..n1 {
            if self.pair1[r1] != NO_ROW {
                continue;
            }
            let Some(k) = key1(r1) else { continue };
            let b1 = phase.phase(0, r1);
            // The first candidate in side-2 file order: a chain's head
            // (`Some(phase)`) or a row of unknown phase (`None`).
            let mut best: (u32, Option<usize>) = (NO_ROW, None);
            if let Some(h) = head.get(&k) {
                for b in [0u8, 1, 2] {
                    if b1.is_none_or(|x| x == b) && h[usize::from(b)] < best.0 {
                        best = (h[usize::from(b)], Some(usize::from(b)));
                    }
                }
            }
            if let Some(&w) = wild.get(&k).and_then(|v| v.last()) {
                if w < best.0 {
                    best = (w, None);
                }
            }
            let (r2, from) = best;
            if r2 == NO_ROW {
                continue;
            }
            match from {
                Some(b) => {
                    if let Some(h) = head.get_mut(&k) {
                        h[b] = next[r2 as usize];
                    }
                }
                None => {
                    if let Some(v) = wild.get_mut(&k) {
                        v.pop();
                    }
                }
            }
            self.pair1[r1] = r2;
            self.pair2[r2 as usize] = r1 as u32;
            self.strat1[r1] = strategy;
            paired += 1;
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
    ///
    /// Run 1's index is dropped as soon as the merge is done, before the
    /// candidates are listed (at 3.15 M rows it is 50 MB, and this pass is
    /// where the compare's heap peaks).
    ///
    /// Both walks in run-1 order read index 2 at random (it is sorted by
    /// hash), and `same` reads two key lines; so each walk asks for what
    /// it reads [`PREFETCH_AHEAD`] rows early: the index-2 entry two
    /// distances ahead, then, one distance ahead, `ahead(r1, r2)` (which
    /// prefetches the two rows' key lines). Hints only: the result is the
    /// same without them.
    ///
    /// `mark` is asked of each pair made, where `same` has just read the
    /// two rows (so what it reads near their key lines is in cache): the
    /// pairs it holds for are returned, in run-1 order (the exact pass's
    /// pairs whose Shape texts differ, [`release_drifted_pairs`]' input,
    /// found without a second walk over every pair's blocks).
    pub(super) fn pass_by_index(
        &mut self,
        index1: KeyIndex,
        index2: &[(u64, u32)],
        same: impl Fn(usize, usize) -> bool + Sync,
        mark: impl Fn(usize, usize) -> bool + Sync,
        ahead: impl Fn(usize, usize) + Sync,
    ) -> (u64, Vec<(usize, usize)>) {
        let n1 = self.pair1.len();
        // Merge: where each run-1 row's hash starts in index 2.
        let mut group: Vec<u32> = vec![NO_ROW; n1];
        let mut j = 0;
        for &(h, r1) in &index1 {
            while j < index2.len() && index2[j].0 < h {
                j += 1;
            }
            if j < index2.len() && index2[j].0 == h {
                group[r1 as usize] = j as u32;
            }
        }
        drop(index1);
        // In parallel: each run-1 row's candidate (a position in index 2),
        // the first run-2 row of its hash with an equal key that no earlier
        // pass paired, as if this pass had claimed nothing yet; with
        // `mark`'s answer for the two in its top bit (when positions leave
        // it free: below 2^31 rows, else `mark` is asked in the claims).
        let (pair1, pair2) = (&self.pair1, &self.pair2);
        let in_top_bit = index2.len() < MARKED as usize;
        let candidate: Vec<u32> = (0..n1)
            .into_par_iter()
            .with_min_len(4096)
            .map(|r1| {
                if let Some(&g) = group.get(r1 + 2 * PREFETCH_AHEAD) {
                    prefetch(index2, g as usize);
                }
                if let Some(&g) = group.get(r1 + PREFETCH_AHEAD) {
                    if let Some(&(_, r2)) = index2.get(g as usize) {
                        ahead(r1 + PREFETCH_AHEAD, r2 as usize);
                    }
                }
                let g = group[r1];
                if pair1[r1] != NO_ROW || g == NO_ROW {
                    return NO_ROW;
                }
                let h = index2[g as usize].0;
                let Some(k) = index2[g as usize..]
                    .iter()
                    .take_while(|(h2, _)| *h2 == h)
                    .position(|(_, r2)| pair2[*r2 as usize] == NO_ROW && same(r1, *r2 as usize))
                else {
                    return NO_ROW;
                };
                let k = g + k as u32;
                if in_top_bit && mark(r1, index2[k as usize].1 as usize) {
                    k | MARKED
                } else {
                    k
                }
            })
            .collect();
        drop(group);
        // In order: take the candidate, or, when an earlier row claimed it
        // (equal keys on several rows), the next unclaimed row of the hash
        // with an equal key — exactly the sequential rule.
        let mut paired = 0;
        let mut marked = Vec::new();
        let position = |k: u32| if in_top_bit { k & !MARKED } else { k };
        for (r1, &k0) in candidate.iter().enumerate() {
            if let Some(&k) = candidate.get(r1 + PREFETCH_AHEAD) {
                if k != NO_ROW {
                    prefetch(index2, position(k) as usize);
                }
            }
            if k0 == NO_ROW {
                continue;
            }
            let at = position(k0) as usize;
            let h = index2[at].0;
            let found = index2[at..]
                .iter()
                .take_while(|(h2, _)| *h2 == h)
                .enumerate()
                .find(|(k, (_, r2))| {
                    self.pair2[*r2 as usize] == NO_ROW && (*k == 0 || same(r1, *r2 as usize))
                });
            if let Some((k, &(_, r2))) = found {
                self.pair1[r1] = r2;
                self.pair2[r2 as usize] = r1 as u32;
                self.strat1[r1] = Strategy::Exact;
                paired += 1;
                let is_marked = if in_top_bit && k == 0 {
                    k0 & MARKED != 0
                } else {
                    mark(r1, r2 as usize)
                };
                if is_marked {
                    marked.push((r1, r2 as usize));
                }
            }
        }
        (paired, marked)
    }
}

/// The top bit of a candidate position in [`Pairing::pass_by_index`]:
/// `mark` held for the pair. ([`NO_ROW`], all bits set, is no candidate.)
const MARKED: u32 = 1 << 31;

/// How many rows ahead [`Pairing::pass_by_index`] asks for what it will
/// read (a memory latency is worth about that many rows of its work).
const PREFETCH_AHEAD: usize = 16;

/// Hints the CPU to bring `v[i]` into cache; nothing when `i` is out of
/// range (e.g. [`NO_ROW`]) or off x86-64.
#[inline]
fn prefetch<T>(v: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(x) = v.get(i) {
        // SAFETY: a prefetch hint never faults and reads nothing the
        // program sees; the pointer is to a live element.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                (x as *const T).cast::<i8>(),
            )
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (v, i);
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
/// with each side's layer offset applied to `layers.N` (`--layer-offset`),
/// in the same phase ([`PhaseRule`]). Without offsets it runs over the
/// tables' key indexes, which are sorted by that key; they are dropped when
/// the pass is done. Returns the number of pairs made.
pub(super) fn pass_exact(
    p: &mut Pairing,
    t1: &OpTable,
    t2: &OpTable,
    layer_offset: [i64; 2],
    indexes: (KeyIndex, KeyIndex),
) -> (u64, Option<Vec<(usize, usize)>>) {
    let phase = PhaseRule::of(t1, t2);
    let [off1, off2] = layer_offset;
    if off1 == 0 && off2 == 0 {
        // The common case: the exact key is the key without its root
        // class, the key the tables' key indexes are sorted by.
        fn exact(t: &OpTable, r: usize) -> &[u8] {
            keys::strip_root_class(t.key(r))
        }
        let (index1, index2) = indexes;
        let (paired, odd) = p.pass_by_index(
            index1,
            &index2,
            |r1, r2| exact(t1, r1) == exact(t2, r2) && phase.allows(r1, r2),
            |r1, r2| shape_texts_differ(t1, r1, t2, r2),
            |r1, r2| {
                t1.prefetch(r1);
                t2.prefetch(r2);
            },
        );
        (paired, Some(odd))
    } else {
        drop(indexes);
        // The offset shifts the layer its log's lists give the raw key;
        // the root class (never a layer) is stripped after.
        fn key(t: &OpTable, r: usize, off: i64) -> std::borrow::Cow<'_, [u8]> {
            use std::borrow::Cow;
            match keys::with_layer_offset(t.key(r), off, t.layer_lists()) {
                Cow::Borrowed(k) => Cow::Borrowed(keys::strip_root_class(k)),
                Cow::Owned(k) => Cow::Owned(keys::strip_root_class(&k).to_vec()),
            }
        }
        let paired = p.pass_phased(
            Strategy::Exact,
            phase,
            |r| Some(key(t1, r, off1)),
            |r| Some(key(t2, r, off2)),
        );
        (paired, None)
    }
}

/// Whether rows `r1` of `t1` and `r2` of `t2` both have a Shape text and
/// the texts differ: an exact pair [`release_drifted_pairs`] looks into.
fn shape_texts_differ(t1: &OpTable, r1: usize, t2: &OpTable, r2: usize) -> bool {
    let (s1, s2) = (t1.field(r1, Field::Shape), t2.field(r2, Field::Shape));
    !s1.is_empty() && !s2.is_empty() && s1 != s2
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
                        keys::fuzzy_key(&keys::with_layer_offset(t.key(r), off, t.layer_lists())),
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

/// With the Shape tie-break, before the fuzzy pass: undoes the exact pairs
/// that op-counter drift made. When one run has extra ops in a module, the
/// later `op_<N>` counters of that module are shifted, and the exact pass
/// can pair `op_3` with a run-2 `op_3` that is really another op. Such a
/// pair shows as a Shape difference. An exact pair is undone, and left to
/// the fuzzy pass (whose first round pairs by equal Shape), when its Shape
/// texts differ (both present) and each side has a row of the same fuzzy
/// key and phase ([`PhaseRule`]) with the other side's Shape: each row has
/// a candidate of its own Shape. A row that the other run's compiler may
/// have fused away ([`super::CompiledAway::Ops`]: an eager run against an
/// inductor one) needs no candidate, as long as the other row has one
/// (inductor fuses a weight gradient's `mm` with its accumulation `add`
/// into an `addmm`, which shifts the module's later `mm` counters), nor
/// does a row of the run with more rows of that fuzzy key and phase (an
/// extra op: fc2's input-gradient `mm` in a run whose fc1 trains, against
/// one whose fc1 is frozen). A genuine Shape change has no such
/// candidates and stays paired. Changes no golden row (no golden exact
/// pair has differing Shapes). `odd` are the exact pairs whose Shape
/// texts differ, when [`pass_exact`] found them (`None`: they are looked
/// for here). Returns the number of pairs undone.
pub(super) fn release_drifted_pairs<'t>(
    p: &mut Pairing,
    t1: &'t OpTable,
    t2: &'t OpTable,
    layer_offset: [i64; 2],
    odd: Option<Vec<(usize, usize)>>,
) -> u64 {
    let (pair1, strat1) = (&p.pair1, &p.strat1);
    // Exact pairs whose Shape texts differ (both present); usually none.
    let odd: Vec<(usize, usize)> = odd.unwrap_or_else(|| {
        (0..pair1.len())
            .into_par_iter()
            .with_min_len(4096)
            .filter_map(|r1| {
                if let Some(&r2) = pair1.get(r1 + PREFETCH_AHEAD) {
                    t1.prefetch(r1 + PREFETCH_AHEAD);
                    if r2 != NO_ROW {
                        t2.prefetch(r2 as usize);
                    }
                }
                if strat1[r1] != Strategy::Exact {
                    return None;
                }
                let r2 = pair1[r1] as usize;
                shape_texts_differ(t1, r1, t2, r2).then_some((r1, r2))
            })
            .collect()
    });
    if odd.is_empty() {
        return 0;
    }
    let phase = PhaseRule::of(t1, t2);
    let fuses_away = |this, other| super::compiled_away(this, other) == super::CompiledAway::Ops;
    let fused_away = [fuses_away(t1, t2), fuses_away(t2, t1)];
    let fuzzy = |t: &OpTable, r: usize, off: i64| {
        keys::fuzzy_key(&keys::with_layer_offset(t.key(r), off, t.layer_lists()))
    };
    // The fuzzy keys concerned (equal on both sides of an exact pair).
    let mut wanted: AHashMap<Vec<u8>, u32> = AHashMap::new();
    for &(r1, _) in &odd {
        let n = wanted.len() as u32;
        wanted.entry(fuzzy(t1, r1, layer_offset[0])).or_insert(n);
    }
    // Per side: (fuzzy key's number, backward, Shape text) of every row of
    // a fuzzy key concerned. Only rows of the op types concerned are keyed.
    let shapes = |t: &'t OpTable, s: usize, ops: AHashSet<u32>| {
        let wanted = &wanted;
        let rows = (0..t.len())
            .into_par_iter()
            .with_min_len(4096)
            .filter(|r| ops.contains(&t.op_type(*r)))
            .filter_map(|r| {
                let k = *wanted.get(&fuzzy(t, r, layer_offset[s]))?;
                Some((k, phase.phase(s, r), t.field(r, Field::Shape)))
            })
            .collect::<Vec<(u32, Option<u8>, &[u8])>>();
        // The rows of each (fuzzy key, phase): which run has more.
        let mut count: AHashMap<(u32, Option<u8>), u64> = AHashMap::new();
        for &(k, b, _) in &rows {
            *count.entry((k, b)).or_insert(0) += 1;
        }
        (rows.into_iter().collect::<AHashSet<_>>(), count)
    };
    let ops1 = odd.iter().map(|&(r1, _)| t1.op_type(r1)).collect();
    let ops2 = odd.iter().map(|&(_, r2)| t2.op_type(r2)).collect();
    let ((shapes1, count1), (shapes2, count2)) =
        rayon::join(|| shapes(t1, 0, ops1), || shapes(t2, 1, ops2));
    let mut released = 0;
    for (r1, r2) in odd {
        let Some(&k) = wanted.get(&fuzzy(t1, r1, layer_offset[0])) else {
            continue;
        };
        let b = phase.phase(0, r1);
        let (s1, s2) = (t1.field(r1, Field::Shape), t2.field(r2, Field::Shape));
        // Whether run 1's row has a candidate of its Shape in run 2, and
        // run 2's row one in run 1; a row the other run's compiler may
        // have fused away needs none (its op is gone from that run).
        let (c1, c2) = (shapes2.contains(&(k, b, s1)), shapes1.contains(&(k, b, s2)));
        // A row with no candidate of its Shape is an extra op of its run
        // when that run has more rows of the key and phase (fc2's
        // input-gradient `mm` of a run whose fc1 trains, against a run
        // whose fc1 is frozen and computes none): the other row has a
        // candidate, and pairs with it.
        let (n1, n2) = (
            count1.get(&(k, b)).copied().unwrap_or(0),
            count2.get(&(k, b)).copied().unwrap_or(0),
        );
        let extra1 = c2 && n1 > n2;
        let extra2 = c1 && n2 > n1;
        if (c1 || fused_away[0] || extra1) && (c2 || fused_away[1] || extra2) && (c1 || c2) {
            p.pair1[r1] = NO_ROW;
            p.pair2[r2] = NO_ROW;
            p.strat1[r1] = Strategy::None;
            released += 1;
        }
    }
    released
}

/// Undoes the exact pairs whose Input hashes differ (both present) when a
/// row of the other run with the same fuzzy key, phase and Shape read
/// exactly what one of the two rows read (the same Input hashes and Input
/// digests text): an op one run alone has (a frozen parameter's optimizer
/// update) moves the counters after it, so `op_9` is paired with another
/// parameter's `op_9` of the same Shape, while its own update, `op_8`
/// there, read the same tensors. Left to the fuzzy pass, whose first
/// round pairs same-input rows. Looked for only when the two logs have
/// different numbers of rows (an op of one run only). Returns the number
/// of pairs undone.
pub(super) fn release_input_drifted_pairs<'t>(
    p: &mut Pairing,
    t1: &'t OpTable,
    t2: &'t OpTable,
    layer_offset: [i64; 2],
) -> u64 {
    if t1.len() == t2.len() {
        return 0;
    }
    fn ins(t: &OpTable, r: usize) -> &[u8] {
        t.field(r, Field::InputHashes)
    }
    let odd: Vec<(usize, usize)> = (0..p.pair1.len())
        .filter(|&r1| p.strat1[r1] == Strategy::Exact)
        .map(|r1| (r1, p.pair1[r1] as usize))
        .filter(|&(r1, r2)| {
            let (a, b) = (ins(t1, r1), ins(t2, r2));
            !a.is_empty() && !b.is_empty() && a != b
        })
        .collect();
    if odd.is_empty() {
        return 0;
    }
    let phase = PhaseRule::of(t1, t2);
    let hasher = ahash::RandomState::with_seeds(5, 6, 7, 8);
    // A row's (fuzzy key, phase, Shape, inputs), hashed.
    let key = |t: &OpTable, s: usize, r: usize| {
        let k = keys::with_layer_offset(t.key(r), layer_offset[s], t.layer_lists());
        hasher.hash_one((
            keys::fuzzy_key_hash(&k),
            phase.phase(s, r),
            t.field(r, Field::Shape),
            ins(t, r),
            t.field(r, Field::InputDigests),
        ))
    };
    // Every row of the op types concerned, per side.
    let reads = |t: &OpTable, s: usize, ops: AHashSet<u32>| -> AHashSet<u64> {
        (0..t.len())
            .filter(|&r| ops.contains(&t.op_type(r)) && !ins(t, r).is_empty())
            .map(|r| key(t, s, r))
            .collect()
    };
    let ops1 = odd.iter().map(|&(r1, _)| t1.op_type(r1)).collect();
    let ops2 = odd.iter().map(|&(_, r2)| t2.op_type(r2)).collect();
    let (reads1, reads2) = (reads(t1, 0, ops1), reads(t2, 1, ops2));
    let mut released = 0;
    for (r1, r2) in odd {
        if reads2.contains(&key(t1, 0, r1)) || reads1.contains(&key(t2, 1, r2)) {
            p.pair1[r1] = NO_ROW;
            p.pair2[r2] = NO_ROW;
            p.strat1[r1] = Strategy::None;
            released += 1;
        }
    }
    released
}

/// Pass 2: equal fuzzy keys (op counters removed), in the same phase
/// ([`PhaseRule`]). With `shape_tie_break`, two rounds come first (the
/// reference has neither):
///
/// 1. fuzzy-equal rows with the same Shape text and the same inputs (the
///    Input hashes text, present, and the Input digests text): among
///    same-shaped candidates, the one that read the same tensors is the
///    same op (an optimizer's `add_` on each of several same-shaped
///    parameters, where one run freezes a parameter and so has one update
///    fewer: order alone would pair each later update with the wrong
///    parameter's);
/// 2. fuzzy-equal rows with the same Shape text (backward counter drift,
///    cases/06);
///
/// then the reference's first-candidate round pairs the rest. Returns the
/// number of pairs made.
pub(super) fn pass_fuzzy<'t>(
    p: &mut Pairing,
    t1: &'t OpTable,
    t2: &'t OpTable,
    fuzzy: &FuzzyKeys,
    shape_tie_break: bool,
) -> u64 {
    // Nothing pairs unless both sides have a row unpaired (the usual case
    // of runs with equal keys: every row paired by the exact pass).
    if !p.pair1.contains(&NO_ROW) || !p.pair2.contains(&NO_ROW) {
        return 0;
    }
    let phase = PhaseRule::of(t1, t2);
    let mut paired = 0;
    if shape_tie_break {
        let same_inputs = |t: &'t OpTable, s: usize, r: usize| {
            let ins = t.field(r, Field::InputHashes);
            if ins.is_empty() {
                return None;
            }
            let f = fuzzy.get(s, r)?;
            Some((
                f,
                t.field(r, Field::Shape),
                ins,
                t.field(r, Field::InputDigests),
            ))
        };
        paired += p.pass_phased(
            Strategy::Fuzzy,
            phase,
            |r| same_inputs(t1, 0, r),
            |r| same_inputs(t2, 1, r),
        );
        paired += p.pass_phased(
            Strategy::Fuzzy,
            phase,
            |r| fuzzy.get(0, r).map(|f| (f, t1.field(r, Field::Shape))),
            |r| fuzzy.get(1, r).map(|f| (f, t2.field(r, Field::Shape))),
        );
    }
    paired
        + p.pass_phased(
            Strategy::Fuzzy,
            phase,
            |r| fuzzy.get(0, r),
            |r| fuzzy.get(1, r),
        )
}

/// Pass 3: equal (op type, Shape text, Output hash text), in the same
/// phase ([`PhaseRule`]), over the rows still unpaired that had a fuzzy
/// key. Returns the number of pairs made.
///
/// A second round (actdiff's, not the reference's) pairs the rows still
/// unpaired whose op is an in-place op in one run and its functional form
/// in the other (`mul_` with `mul`) when every printed value and the
/// Output digest agree as text ([`functional_key`]): AOTAutograd
/// functionalizes a graph's in-place ops (`aot_eager` runs `x.mul_(2)` as
/// `mul`, and names no backend in the log), and a refactor may do the
/// same; the rows are one op in both runs, differing in name only. No
/// golden row changes (no golden has unpaired rows on both sides).
pub(super) fn pass_stats(p: &mut Pairing, t1: &OpTable, t2: &OpTable, fuzzy: &FuzzyKeys) -> u64 {
    if !p.pair1.contains(&NO_ROW) || !p.pair2.contains(&NO_ROW) {
        return 0;
    }
    let phase = PhaseRule::of(t1, t2);
    let stats_key = |t: &OpTable, s: usize, r: usize| {
        fuzzy.get(s, r).map(|f| {
            (
                keys::op_type(f).to_vec(),
                t.field(r, Field::Shape).to_vec(),
                t.field(r, Field::OutputHash).to_vec(),
            )
        })
    };
    let mut paired = p.pass_phased(
        Strategy::Stats,
        phase,
        |r| stats_key(t1, 0, r),
        |r| stats_key(t2, 1, r),
    );
    if p.pair1.contains(&NO_ROW) && p.pair2.contains(&NO_ROW) {
        paired += p.pass_phased(
            Strategy::Stats,
            phase,
            |r| functional_key(t1, fuzzy.get(0, r)?, r),
            |r| functional_key(t2, fuzzy.get(1, r)?, r),
        );
    }
    paired
}

/// The second round's key of row `r` (`f`: its fuzzy key): the op type
/// without a trailing `_`, then every printed value (Shape, L2 norm, Min,
/// Max, Mean, Output hash) and the Output digest, each as text. Stricter
/// than the stats pass's (op type, Shape, Output hash): the Output hash
/// is an L1 norm, blind to a sign (`h.mul_(2)` against `h * -2` hash
/// alike), and ops of different names are paired only on every value.
/// `None` without an Output hash.
fn functional_key(t: &OpTable, f: &[u8], r: usize) -> Option<Vec<u8>> {
    if t.field(r, Field::OutputHash).is_empty() {
        return None;
    }
    let op = keys::op_type(f);
    let op = op
        .strip_suffix(b"_")
        .filter(|o| !o.is_empty())
        .unwrap_or(op);
    let mut key = op.to_vec();
    for field in Field::PRINTED.iter().chain([&Field::OutputDigest]) {
        if *field != Field::InputHashes {
            key.push(0);
            key.extend_from_slice(t.field(r, *field));
        }
    }
    Some(key)
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

//! Value re-pairing: after judging, re-pairs ops of one kind that the key
//! passes paired in the wrong order (an actdiff extension over the
//! reference, on with the Shape tie-break, off under
//! `--no-shape-tie-break`).
//!
//! A compiler (inductor) may run ops of one module in another order than
//! eager mode: the backward `bmm`s of attention all have the key
//! `blocks.N.attn/op_<k>_bmm`, the same phase and the same Shape, so their
//! counters are the only thing that tells them apart, and those counters
//! differ between an eager and a compiled log. The exact and fuzzy passes
//! then pair them in file order, and every pair differs by a full relative
//! difference although each op has a partner that agrees.
//!
//! The rule (`repair_swapped_pairs`):
//!
//! - A *group* is the set of pairs (made by the exact, fuzzy or stats pass;
//!   never an `--override` pair) whose two rows have the same fuzzy key
//!   (after the layer offset), the same phase (`passes::PhaseRule`) and the same
//!   Shape text, and that have a verdict (`match` or `diff`). Only groups
//!   holding a `diff` pair are looked at, so two runs that agree cost one
//!   status check per row. A group is left as it is when more than
//!   [`MAX_GROUP`] pairs ([`MAX_OPTIMIZER_GROUP`] in the optimizer phase) have a run-1 row of its fuzzy key, phase and
//!   Shape (a log that repeats its model many times: each op's group is
//!   large, and building fuzzy keys for it is not worth it).
//! - Within a group, every run-1 row is judged against every run-2 row
//!   with the row's own settings (tolerance, rules), as the verdict does.
//!   The agreeing candidates are taken greedily by smallest value
//!   difference (the larger of the Output hash's and the L2 norm's
//!   relative differences), then augmenting paths make the number of
//!   agreeing pairs the largest any assignment gives.
//! - The new assignment is kept only when it agrees on strictly more pairs
//!   than the passes' pairing; the rows it leaves without an agreeing
//!   partner are paired in file order (each side's, as the fuzzy pass). A
//!   genuine difference keeps its row `diff`: no assignment makes it agree.
//! - A re-paired row reports the fuzzy strategy (its rows share the fuzzy
//!   key), and the note "re-paired by value".

use ahash::AHashMap;
use rayon::prelude::*;

use super::judge::Judge;
use super::passes::{Pairing, PhaseRule};
use super::{compare, keys, MatchRow, Status, Strategy, NO_ROW};
use crate::parser::{Field, OpTable};

/// The most pairs of a group that is re-paired; a larger group is left as
/// the passes paired it.
pub const MAX_GROUP: usize = 16;

/// [`MAX_GROUP`] for a group in the optimizer phase: an optimizer's
/// per-parameter loop (`foreach=False`) runs the same ops on every
/// parameter of a Shape, so its groups are as large as a model's count of
/// same-shaped parameters (LayerNorm weights and biases), and one op more
/// in one run (a logging metric under `torch.no_grad()` at root scope)
/// moves every later counter of the root scope: each parameter's update
/// paired with another's by key.
pub const MAX_OPTIMIZER_GROUP: usize = 256;

/// The largest group re-paired in phase `phase` ([`PhaseRule::phase`]).
fn max_group(phase: Option<u8>) -> usize {
    if phase == Some(2) {
        MAX_OPTIMIZER_GROUP
    } else {
        MAX_GROUP
    }
}

/// How many rows ahead the class scan asks for the block it will read.
const PREFETCH_AHEAD: usize = 8;

/// What `repair_swapped_pairs` changed.
#[derive(Debug, Default)]
pub(super) struct Repaired {
    /// The run-1 rows (result rows: run-1 rows come first, in file order)
    /// whose partner changed, sorted.
    pub(super) rows: Vec<u32>,
    /// How many of them the exact pass had paired.
    pub(super) from_exact: u64,
    /// How many of them the stats pass had paired.
    pub(super) from_stats: u64,
}

/// The group of a pair: fuzzy key, phase (`None`: unknown) and Shape text.
type GroupKey<'t> = (Vec<u8>, Option<u8>, &'t [u8]);

/// The class of a run-1 row: its fuzzy key's hash
/// ([`keys::fuzzy_key_hash`]), phase and Shape text. A group lies within
/// the class of its run-1 rows.
type Class<'t> = (u64, Option<u8>, &'t [u8]);

/// Re-pairs the groups of `rows` (judged from `p` by `judge`) that hold a
/// `diff` pair, as the module documentation says, and updates `p` and the
/// re-paired rows. Returns what changed.
pub(super) fn repair_swapped_pairs<'t>(
    p: &mut Pairing,
    rows: &mut [MatchRow],
    judge: &Judge<'_>,
    tables: [&'t OpTable; 2],
    layer_offset: [i64; 2],
) -> Repaired {
    let [t1, t2] = tables;
    let n1 = p.pair1.len();
    let movable = |r: &MatchRow| {
        matches!(r.status, Status::Match | Status::Diff)
            && matches!(
                r.strategy,
                Strategy::Exact | Strategy::Fuzzy | Strategy::Stats
            )
    };
    // The differing pairs: usually none, and then nothing else is read.
    let differing: Vec<(usize, usize)> = rows[..n1]
        .iter()
        .filter(|r| r.status == Status::Diff && movable(r))
        .filter_map(|r| Some((r.r1()?, r.r2()?)))
        .collect();
    if differing.is_empty() {
        return Repaired::default();
    }
    let phase = PhaseRule::of(t1, t2);
    let group_of = |r1: usize, r2: usize| -> Option<GroupKey<'t>> {
        let shape = t1.field(r1, Field::Shape);
        let b = phase.phase(0, r1);
        if shape != t2.field(r2, Field::Shape) || b != phase.phase(1, r2) {
            return None;
        }
        let fuzzy = |t: &OpTable, r: usize, off: i64| {
            keys::fuzzy_key(&keys::with_layer_offset(t.key(r), off, t.layer_lists()))
        };
        let f = fuzzy(t1, r1, layer_offset[0]);
        (f == fuzzy(t2, r2, layer_offset[1])).then_some((f, b, shape))
    };
    // The groups concerned, numbered.
    let mut wanted: AHashMap<GroupKey<'t>, u32> = AHashMap::new();
    for &(r1, r2) in &differing {
        if let Some(g) = group_of(r1, r2) {
            let n = wanted.len() as u32;
            wanted.entry(g).or_insert(n);
        }
    }
    if wanted.is_empty() {
        return Repaired::default();
    }
    // Every pair of a group concerned, as (group, run-1 row), in run-1 file
    // order. Building fuzzy keys is the costly part, so a run-1 row's class
    // (its fuzzy key's hash, phase and Shape) is found first: only pairs of
    // a class concerned with at most max_group pairs are keyed. (A group
    // lies within its class; a larger class, or a 64-bit collision, leaves
    // the group alone.) The classes concerned are numbered, and each row's
    // number is kept in one `u32` per run-1 row: the rows of the classes
    // concerned are often most rows, and a list of (row, class) would take
    // ten times the memory (at 3.15 M rows, 126 MB, twice while collected).
    let fuzzy_hashes = FuzzyHashes::of(t1, layer_offset[0]);
    let class = |r1: usize| {
        let shape = t1.field(r1, Field::Shape);
        (fuzzy_hashes.of_row(r1), phase.phase(0, r1), shape)
    };
    let mut classes: AHashMap<Class<'t>, u32> = AHashMap::new();
    for &(r1, _) in &differing {
        let n = classes.len() as u32;
        classes.entry(class(r1)).or_insert(n);
    }
    let mut class_of: Vec<u32> = vec![NO_ROW; n1];
    class_of
        .par_iter_mut()
        .zip(&rows[..n1])
        .with_min_len(4096)
        .for_each(|(c, r)| {
            if let Some(r1) = r.r1().filter(|_| movable(r)) {
                t1.prefetch_block(r1 + PREFETCH_AHEAD);
                *c = classes.get(&class(r1)).copied().unwrap_or(NO_ROW);
            }
        });
    let mut cap: Vec<usize> = vec![0; classes.len()];
    for (c, &n) in &classes {
        cap[n as usize] = max_group(c.1);
    }
    let mut sizes: Vec<u32> = vec![0; classes.len()];
    for &c in class_of.iter().filter(|c| **c != NO_ROW) {
        sizes[c as usize] += 1;
    }
    let members: Vec<(u32, usize)> = class_of
        .par_iter()
        .enumerate()
        .with_min_len(4096)
        .filter(|(_, c)| **c != NO_ROW && sizes[**c as usize] as usize <= cap[**c as usize])
        .filter_map(|(r1, _)| {
            let r2 = p.pair1[r1] as usize;
            Some((*wanted.get(&group_of(r1, r2)?)?, r1))
        })
        .collect();
    drop(class_of);
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); wanted.len()];
    for (g, r1) in members {
        groups[g as usize].push(r1);
    }
    drop(wanted);
    let pair1 = &p.pair1;
    let moves: Vec<Vec<(usize, usize)>> = groups
        .par_iter()
        .filter(|g| g.len() >= 2)
        .filter_map(|g| {
            let left = g.clone();
            let mut right: Vec<usize> = g.iter().map(|&r1| pair1[r1] as usize).collect();
            right.sort_unstable();
            let was = g.iter().filter(|&&r1| rows[r1].status == Status::Match);
            reassign(judge, tables, &left, &right, was.count())
        })
        .collect();
    let mut out = Repaired::default();
    for (r1, r2) in moves.into_iter().flatten() {
        if p.pair1[r1] as usize == r2 {
            continue;
        }
        match rows[r1].strategy {
            Strategy::Exact => out.from_exact += 1,
            Strategy::Stats => out.from_stats += 1,
            _ => {}
        }
        p.pair1[r1] = r2 as u32;
        p.pair2[r2] = r1 as u32;
        p.strat1[r1] = Strategy::Fuzzy;
        rows[r1] = judge.pair(r1, r2, Strategy::Fuzzy);
        out.rows.push(r1 as u32);
    }
    out.rows.sort_unstable();
    out
}

/// The fuzzy key hashes of a table's rows ([`keys::fuzzy_key_hash`] of
/// each key with its layer offset applied), computed once per module and
/// op type: a key is its module, an op counter and its op type, and the
/// fuzzy key drops the counter (an earlier `/op_<digits>_` lies within
/// the module), so rows of one module and op type share it. At 3.15 M
/// rows of a few thousand (module, op type) pairs, one lookup a row
/// instead of a key rewritten and hashed.
struct FuzzyHashes<'t> {
    t: &'t OpTable,
    offset: i64,
    /// By (module number, op type), when the table numbers its modules.
    by_module_and_op: Option<AHashMap<(u32, u32), u64>>,
}

impl<'t> FuzzyHashes<'t> {
    fn of(t: &'t OpTable, offset: i64) -> FuzzyHashes<'t> {
        let (module, op_type) = (t.row_modules(), t.row_op_types());
        let by_module_and_op = (module.len() == t.len()).then(|| {
            let mut m: AHashMap<(u32, u32), u64> = AHashMap::new();
            let mut last = None;
            for (r, (&mo, &op)) in module.iter().zip(op_type).enumerate() {
                let id = (mo, op);
                if last == Some(id) {
                    continue;
                }
                last = Some(id);
                m.entry(id).or_insert_with(|| Self::direct(t, offset, r));
            }
            m
        });
        FuzzyHashes {
            t,
            offset,
            by_module_and_op,
        }
    }

    /// The hash of row `r`'s fuzzy key, computed from its key.
    fn direct(t: &OpTable, offset: i64, r: usize) -> u64 {
        keys::fuzzy_key_hash(&keys::with_layer_offset(t.key(r), offset, t.layer_lists()))
    }

    /// The hash of row `r`'s fuzzy key.
    fn of_row(&self, r: usize) -> u64 {
        let t = self.t;
        self.by_module_and_op
            .as_ref()
            .and_then(|m| m.get(&(t.row_modules()[r], t.row_op_types()[r])).copied())
            .unwrap_or_else(|| Self::direct(t, self.offset, r))
    }
}

/// The value difference of a candidate pair: the larger of its Output
/// hash's and L2 norm's relative differences (0 where a side lacks one or
/// the texts are equal).
fn value_difference(tables: [&OpTable; 2], r1: usize, r2: usize) -> f64 {
    let [t1, t2] = tables;
    [Field::OutputHash, Field::L2Norm]
        .into_iter()
        .filter_map(|f| compare::field_diff(t1, r1, t2, r2, f))
        .fold(0.0, f64::max)
}

/// The new pairs of one group: `left` (run-1 rows) and `right` (run-2
/// rows), each in file order, of which `agreeing` pairs agree now. `None`
/// when no assignment agrees on more pairs.
fn reassign(
    judge: &Judge<'_>,
    tables: [&OpTable; 2],
    left: &[usize],
    right: &[usize],
    agreeing: usize,
) -> Option<Vec<(usize, usize)>> {
    // The agreeing candidates (i, j), by value difference, then file order.
    let mut edges: Vec<(f64, usize, usize)> = Vec::new();
    for (i, &r1) in left.iter().enumerate() {
        for (j, &r2) in right.iter().enumerate() {
            if judge.pair(r1, r2, Strategy::Fuzzy).status == Status::Match {
                edges.push((value_difference(tables, r1, r2), i, j));
            }
        }
    }
    if edges.len() <= agreeing {
        return None;
    }
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    // Greedy by smallest difference.
    let mut of_left = vec![NO_ROW; left.len()];
    let mut of_right = vec![NO_ROW; right.len()];
    for &(_, i, j) in &edges {
        if of_left[i] == NO_ROW && of_right[j] == NO_ROW {
            of_left[i] = j as u32;
            of_right[j] = i as u32;
        }
    }
    // Then augmenting paths, so that no assignment agrees on more pairs.
    let mut adjacent: Vec<Vec<usize>> = vec![Vec::new(); left.len()];
    for &(_, i, j) in &edges {
        adjacent[i].push(j);
    }
    for i in 0..left.len() {
        if of_left[i] == NO_ROW {
            let mut seen = vec![false; right.len()];
            augment(i, &adjacent, &mut seen, &mut of_left, &mut of_right);
        }
    }
    let matched = of_left.iter().filter(|j| **j != NO_ROW).count();
    if matched <= agreeing {
        return None;
    }
    // The rows left without an agreeing partner, paired in file order.
    let rest_right = (0..right.len()).filter(|j| of_right[*j] == NO_ROW);
    let rest_left: Vec<usize> = (0..left.len()).filter(|i| of_left[*i] == NO_ROW).collect();
    for (i, j) in rest_left.into_iter().zip(rest_right) {
        of_left[i] = j as u32;
    }
    Some(
        left.iter()
            .zip(&of_left)
            .map(|(&r1, &j)| (r1, right[j as usize]))
            .collect(),
    )
}

/// Kuhn's augmenting path from left vertex `i` over `adjacent` (each left
/// vertex's agreeing right vertices); whether `i` got a partner. Depth is
/// at most the group's size ([`max_group`]).
fn augment(
    i: usize,
    adjacent: &[Vec<usize>],
    seen: &mut [bool],
    of_left: &mut [u32],
    of_right: &mut [u32],
) -> bool {
    for &j in &adjacent[i] {
        if seen[j] {
            continue;
        }
        seen[j] = true;
        let holder = of_right[j];
        if holder == NO_ROW || augment(holder as usize, adjacent, seen, of_left, of_right) {
            of_left[i] = j as u32;
            of_right[j] = i as u32;
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzzy_hashes_by_module_and_op_are_those_of_each_key() {
        // Keys whose fuzzy key is easy to get wrong: an op counter inside
        // the module, root classes that differ, a layer index to shift,
        // keys without an op counter or op name, a counter without `_`.
        let keys = [
            "layers.0.attn/op_0_mm",
            "layers.0.attn/op_7_mm",
            "FSDPModel.layers.0.attn/op_9_mm",
            "layers.1.attn/op_3_mm",
            "layers.1.attn/op_3_bmm",
            "a/op_1_b/op_2_mm",
            "a/op_5_b/op_6_mm",
            "a/op_1/op_2_mm",
            "plain_key",
            "norm/op_4_",
            "blocks.3/op_1_add_",
            "FSDPModel.blocks.3/op_2_add_",
        ];
        let mut s = format!("Total captured activations: {}\n", keys.len());
        for k in keys {
            s.push_str(&format!("[{k}]\n  Output hash: 1.000000e+00\n\n"));
        }
        let t = crate::parser::parse_bytes(s.into_bytes(), "t.log");
        for offset in [0, 2, -1] {
            let h = FuzzyHashes::of(&t, offset);
            assert!(h.by_module_and_op.is_some());
            assert_eq!(t.len(), keys.len());
            for (r, key) in keys.iter().enumerate() {
                assert_eq!(
                    h.of_row(r),
                    FuzzyHashes::direct(&t, offset, r),
                    "row {r} ({key}), offset {offset}"
                );
            }
        }
        // Rows of one module and op type share the hash; others differ.
        let h = FuzzyHashes::of(&t, 0);
        assert_eq!(h.of_row(0), h.of_row(1));
        assert_eq!(h.of_row(0), h.of_row(2), "the root class is not part of it");
        assert_ne!(h.of_row(0), h.of_row(3));
        assert_ne!(h.of_row(3), h.of_row(4));
        assert_eq!(h.of_row(5), h.of_row(6));
    }
}

//! Activation checkpointing's recomputation in one run only: the one-sided
//! rows that repeat a forward op of their own run in the backward phase
//! are flagged [`ROW_RECOMPUTED`] (shown, counted, never gating, never a
//! cause). Checkpointing re-runs a block's forward inside backward; a run
//! with it has those ops (per-op level) or module outputs (module level)
//! twice, a run without it once. Their values cannot differ unseen: the
//! backward ops that read them are paired and judged.

use super::keys::{self, fuzzy_key};
use super::passes::Pairing;
use super::policy::DEFAULT_UNSYNCED_OPS;
use super::{MatchRow, ROW_RECOMPUTED};
use crate::logformat::Phase;
use crate::parser::{Field, OpTable};

/// Fewest one-sided rows of a run read as a recomputation by name alone.
const RECOMPUTED_MIN: usize = 4;

/// One run's rows flagged [`ROW_RECOMPUTED`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recomputed {
    /// The run: 0 run 1, 1 run 2.
    pub side: usize,
    /// How many rows.
    pub count: usize,
    /// The first of them (a row of that run's table) and the forward row
    /// it repeats.
    pub example: (usize, usize),
    /// They are the layout's communication (collectives, FSDP2's buffers) that
    /// repeats its forward communication by value: FSDP2 all-gathering
    /// resharded parameters again in backward (`reshard_after_forward`),
    /// not activation checkpointing.
    pub communication: bool,
}

/// Flags the one-sided rows of each run that are its recomputation, and
/// says which. A one-sided row in the backward phase is a repeat of a
/// forward op of its run when it has that op's name, Shape, Output hash
/// and Input hashes (the same value recomputed: flagged whatever else the run has; at the
/// module level, a recomputed module output), or, weaker, when the run's
/// one-sided rows number at least 4, are all in the backward phase, and
/// at least 9 in 10 of them repeat a forward op by value or by name: the
/// same fuzzy key (module and op name), or one whose module FQN ends with
/// the row's (a checkpoint wrapper's forward re-runs outside the block's
/// FQN in TorchTitan's tracer: `attention_norm/op_0_pow` repeats
/// `layers.0.attention_norm/op_0_pow`; its recomputed residual `add` is
/// filed under `layers.3.feed_forward.w2`, known by its value). Only the
/// repeats are flagged; the rest still gate. Nothing is read when no run
/// has one-sided rows.
pub(super) fn mark_recomputed(
    rows: &mut [MatchRow],
    t1: &OpTable,
    t2: &OpTable,
) -> Vec<Recomputed> {
    let mut out = Vec::new();
    for (side, t) in [(0, t1), (1, t2)] {
        // (result row, its table row) of each one-sided row of this run.
        let one_sided: Vec<(usize, usize)> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i, r.only_in(side)?)))
            .collect();
        let backward = |r: usize| t.phase_kind(r) == Phase::Backward;
        // The layout's communication is no recomputation: FSDP2
        // all-gathers a block's parameters again in backward when it
        // reshards after forward (trial 19 F6: called checkpointing's).
        // Its repeats by value are flagged on their own.
        let (communication, one_sided): (Vec<_>, Vec<_>) = one_sided
            .into_iter()
            .partition(|(_, r)| is_communication(t, *r));
        if let Some(r) = regathered(rows, t, side, &communication) {
            out.push(r);
        }
        if !one_sided.iter().any(|(_, r)| backward(*r)) {
            continue;
        }
        let mut ops = vec![false; t.op_types()];
        for (_, r) in one_sided.iter().filter(|(_, r)| backward(*r)) {
            ops[t.op_type(*r) as usize] = true;
        }
        let [by_name, by_value] = forward_ops(t, &ops);
        // (result row, table row, the forward row it repeats, by value).
        let repeats: Vec<(usize, usize, usize, bool)> = one_sided
            .iter()
            .filter(|(_, r)| backward(*r))
            .filter_map(|(i, r)| {
                let k = fuzzy_key(t.key(*r));
                match value_key(t, *r, &k).and_then(|v| by_value.get(&v)) {
                    Some(f) => Some((*i, *r, *f, true)),
                    None => by_name.get(&k).map(|f| (*i, *r, *f, false)),
                }
            })
            .collect();
        let by_name_too = one_sided.len() >= RECOMPUTED_MIN
            && one_sided.iter().all(|(_, r)| backward(*r))
            && repeats.len() * 10 >= one_sided.len() * 9;
        let flagged: Vec<_> = repeats
            .into_iter()
            .filter(|(_, r, _, by_value)| *by_value || (by_name_too && !is_random(t, *r)))
            .collect();
        let Some(&(_, first, forward, _)) = flagged.first() else {
            continue;
        };
        for (i, _, _, _) in &flagged {
            rows[*i].flags |= ROW_RECOMPUTED;
        }
        out.push(Recomputed {
            side,
            count: flagged.len(),
            example: (first, forward),
            communication: false,
        });
    }
    out
}

/// Flags the one-sided backward-phase rows of `communication` (result
/// row, row of `t`, run `side`) that repeat a forward communication op of
/// their run by value ([`value_key`]: op name, Shape, Output hash, Input hashes): a
/// parallel layout gathering the same parameters again. `None` when none.
fn regathered(
    rows: &mut [MatchRow],
    t: &OpTable,
    side: usize,
    communication: &[(usize, usize)],
) -> Option<Recomputed> {
    let backward: Vec<(usize, usize)> = communication
        .iter()
        .copied()
        .filter(|(_, r)| t.phase_kind(*r) == Phase::Backward)
        .collect();
    if backward.is_empty() {
        return None;
    }
    let mut ops = vec![false; t.op_types()];
    for (_, r) in &backward {
        ops[t.op_type(*r) as usize] = true;
    }
    let [_, by_value] = forward_ops(t, &ops);
    let flagged: Vec<(usize, usize, usize)> = backward
        .into_iter()
        .filter_map(|(i, r)| {
            let v = value_key(t, r, &fuzzy_key(t.key(r)))?;
            Some((i, r, *by_value.get(&v)?))
        })
        .collect();
    let &(_, first, forward) = flagged.first()?;
    for (i, _, _) in &flagged {
        rows[*i].flags |= ROW_RECOMPUTED;
    }
    Some(Recomputed {
        side,
        count: flagged.len(),
        example: (first, forward),
        communication: true,
    })
}

/// Ops that draw random numbers: recomputed with another value than its
/// forward op's (checkpointing with `preserve_rng_state=False`), one of
/// them gives the backward another dropout mask than the forward's, a
/// change; a repeat by name alone is not flagged.
const RANDOM_OPS: &[&[u8]] = &[
    b"bernoulli",
    b"bernoulli_",
    b"native_dropout",
    b"dropout",
    b"rand",
    b"rand_like",
    b"randn",
    b"randn_like",
    b"randint",
    b"randint_like",
    b"randperm",
    b"normal",
    b"normal_",
    b"uniform_",
    b"random_",
    b"exponential_",
    b"geometric_",
    b"cauchy_",
    b"log_normal_",
    b"multinomial",
    b"poisson",
];

/// Whether row `r` of `t` is a collective or a parallel layout's own
/// communication op ([`DEFAULT_UNSYNCED_OPS`],
/// [`crate::layout::COMMUNICATION_OPS`]: FSDP2's copy-in buffers too).
pub(crate) fn is_communication(t: &OpTable, r: usize) -> bool {
    let op = &*t.op_names[t.op_type(r) as usize];
    DEFAULT_UNSYNCED_OPS.iter().any(|o| o.as_bytes() == op)
        || crate::layout::COMMUNICATION_OPS
            .iter()
            .any(|o| o.as_bytes() == op)
}

/// Whether row `r` of `t` is an op of [`RANDOM_OPS`].
fn is_random(t: &OpTable, r: usize) -> bool {
    is_random_op(&t.op_names[t.op_type(r) as usize])
}

/// Whether `op` (an op name, `bernoulli_`) draws random numbers
/// (bernoulli, dropout, rand, normal, ...): an origin there is a seed or
/// RNG state that differs.
pub fn is_random_op(op: &[u8]) -> bool {
    RANDOM_OPS.contains(&op)
}

/// Before pairing: holds out of every pass ([`Pairing::hold`]) the
/// backward-phase rows of one run that repeat a forward row of their own
/// run by value ([`value_key`]) under the same fuzzy key (module and op
/// name), where the other run has no such repeat of that fuzzy key:
/// activation checkpointing's recomputation of a module in one run only.
/// A module whose forward runs ops itself (attention's `bmm`s) numbers
/// its recomputed ops on from its forward ones, so the recomputed
/// `op_22_bmm` of the run with checkpointing has the key of the other
/// run's backward `op_22_bmm`: paired by key, each would be judged
/// against the other's op. Held, they are left one-sided, and
/// [`mark_recomputed`] flags them. Looked for only when the two logs
/// have different numbers of backward rows. Returns how many were held.
pub(super) fn hold_one_sided_repeats(p: &mut Pairing, t1: &OpTable, t2: &OpTable) -> usize {
    let backward = |t: &OpTable| (0..t.len()).filter(|&r| t.is_backward(r)).count();
    if backward(t1) == backward(t2) {
        return 0;
    }
    let repeats = rayon::join(|| value_repeats(t1), || value_repeats(t2));
    let repeats = [repeats.0, repeats.1];
    let keys = |s: usize| {
        repeats[s]
            .iter()
            .map(|&(_, k)| k)
            .collect::<ahash::AHashSet<u64>>()
    };
    let keys = [keys(0), keys(1)];
    let mut held = 0;
    for side in 0..2 {
        for &(r, k) in &repeats[side] {
            if !keys[1 - side].contains(&k) {
                p.hold(side, r);
                held += 1;
            }
        }
    }
    held
}

/// The backward-phase rows of `t` whose fuzzy key and [`value_key`] are a
/// forward row's, with their fuzzy keys' hashes
/// ([`keys::fuzzy_key_hash`]). Rows are compared by 64-bit hashes (a
/// large log keeps one number per forward row of the op types concerned,
/// not its texts; a collision holds one row too many, shown as
/// recomputed). A first look by op type and Output hash text alone (no
/// key walked, no Shape read) leaves the rows that can repeat: only they
/// are hashed in full.
fn value_repeats(t: &OpTable) -> Vec<(usize, u64)> {
    let mut ops = vec![false; t.op_types()];
    let backward: Vec<usize> = (0..t.len())
        .filter(|&r| t.is_backward(r) && !is_communication(t, r))
        .collect();
    for &r in &backward {
        ops[t.op_type(r) as usize] = true;
    }
    if backward.is_empty() {
        return Vec::new();
    }
    let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
    // (op type, Output hash text): the cheap look.
    let quick = |r: usize| {
        let hash = t.field(r, Field::OutputHash);
        (!hash.is_empty()).then(|| hasher.hash_one((t.op_type(r), hash)))
    };
    // (fuzzy key hash, value hash): the op name is in the fuzzy key.
    let with_key = |r: usize| {
        let k = keys::fuzzy_key_hash(t.key(r));
        let value = (k, t.field(r, Field::Shape), t.field(r, Field::OutputHash));
        (k, hasher.hash_one(value))
    };
    let forward_rows: Vec<(usize, u64)> = (0..t.len())
        .filter(|&r| ops[t.op_type(r) as usize] && t.phase_kind(r) == Phase::Forward)
        .filter_map(|r| Some((r, quick(r)?)))
        .collect();
    let forward_quick: ahash::AHashSet<u64> = forward_rows.iter().map(|&(_, q)| q).collect();
    let candidates: Vec<(usize, u64)> = backward
        .into_iter()
        .filter_map(|r| Some((r, quick(r)?)))
        .filter(|(_, q)| forward_quick.contains(q))
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    let candidate_quick: ahash::AHashSet<u64> = candidates.iter().map(|&(_, q)| q).collect();
    let forward: ahash::AHashSet<u64> = forward_rows
        .into_iter()
        .filter(|(_, q)| candidate_quick.contains(q))
        .map(|(r, _)| with_key(r).1)
        .collect();
    candidates
        .into_iter()
        .filter_map(|(r, _)| {
            let (k, v) = with_key(r);
            forward.contains(&v).then_some((r, k))
        })
        .collect()
}

/// A row's op name, Shape text, Output hash text and Input hashes text,
/// joined by NULs (`k`: its fuzzy key), or `None` without an Output hash:
/// what a recomputed op reproduces, from the same inputs (trial 69 F3: a
/// backward `div` whose output equalled a forward `div`'s, from other
/// inputs, was called activation checkpointing's recomputation in runs
/// without it).
fn value_key(t: &OpTable, r: usize, k: &[u8]) -> Option<Vec<u8>> {
    let hash = t.field(r, Field::OutputHash);
    if hash.is_empty() {
        return None;
    }
    let op = &k[memchr::memchr(b'/', k).map_or(0, |s| s + 1)..];
    Some(
        [
            op,
            t.field(r, Field::Shape),
            hash,
            t.field(r, Field::InputHashes),
        ]
        .join(&0u8),
    )
}

/// The `diff` pairs of `diff_rows` (result row, run-1 row, run-2 row) in
/// the backward phase whose two rows each repeat by value ([`value_key`])
/// a forward row of their own run, those two forward rows being paired
/// with each other: each such pair's result row, to the forward pair's.
/// Activation checkpointing in both runs recomputes a block's forward in
/// backward; a change in the block shows in both, and the recomputation
/// carries the forward op's divergence, it does not start another (trial
/// 26 F6: a changed GELU was counted as two origins).
pub(super) fn paired_repeats(
    t1: &OpTable,
    t2: &OpTable,
    rows: &[MatchRow],
    diff_rows: &[(usize, usize, usize)],
) -> ahash::AHashMap<usize, usize> {
    let mut out = ahash::AHashMap::new();
    let backward: Vec<(usize, usize, usize)> = diff_rows
        .iter()
        .filter(|(_, a, b)| t1.is_backward(*a) && t2.is_backward(*b))
        .copied()
        .collect();
    if backward.is_empty() {
        return out;
    }
    // One side's forward rows with a candidate's Output hash text (looked
    // up without a copy; the rest of the value is compared only there).
    let originals = |t: &OpTable, cands: &mut dyn Iterator<Item = usize>| {
        let mut want: ahash::AHashMap<&[u8], Vec<usize>> = ahash::AHashMap::new();
        for r in cands {
            want.entry(t.field(r, Field::OutputHash))
                .or_default()
                .push(r);
        }
        want.remove(&b""[..]);
        let mut found: ahash::AHashMap<usize, usize> = ahash::AHashMap::new();
        for f in (0..t.len()).filter(|&f| t.phase_kind(f) == Phase::Forward) {
            let Some(cands) = want.get(t.field(f, Field::OutputHash)) else {
                continue;
            };
            let kf = fuzzy_key(t.key(f));
            for &r in cands {
                let same = t.op_type(r) == t.op_type(f)
                    && t.field(r, Field::Shape) == t.field(f, Field::Shape)
                    && fuzzy_key(t.key(r)) == kf;
                if same {
                    found.entry(r).or_insert(f);
                }
            }
        }
        found
    };
    let o1 = originals(t1, &mut backward.iter().map(|x| x.1));
    if o1.is_empty() {
        return out;
    }
    let o2 = originals(t2, &mut backward.iter().map(|x| x.2));
    // The forward pairs asked about: run-1 row to (result row, run-2 row).
    let asked: ahash::AHashSet<usize> = o1.values().copied().collect();
    let forward: ahash::AHashMap<usize, (usize, usize)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, m)| match m.sides() {
            super::Sides::Both(a, b) if asked.contains(&a) => Some((a, (i, b))),
            _ => None,
        })
        .collect();
    for (i, a, b) in backward {
        if let (Some(f1), Some(f2)) = (o1.get(&a), o2.get(&b)) {
            if let Some(&(j, partner)) = forward.get(f1) {
                if partner == *f2 && j < i {
                    out.insert(i, j);
                }
            }
        }
    }
    out
}

/// Forward rows of `t` of the op types `ops` holds (by op type number),
/// to the first row of each: by fuzzy key (`layers.0.attention_norm/pow`)
/// and each suffix of it at a `.` of its module FQN
/// (`0.attention_norm/pow`, `attention_norm/pow`); and by [`value_key`]
/// (op name, Shape, Output hash, Input hashes). Only the op types of the rows looked up
/// are indexed: a large log with a few one-sided rows builds small maps.
fn forward_ops(t: &OpTable, ops: &[bool]) -> [ahash::AHashMap<Vec<u8>, usize>; 2] {
    let [mut by_name, mut by_value]: [ahash::AHashMap<Vec<u8>, usize>; 2] = Default::default();
    let wanted = |r: usize| ops[t.op_type(r) as usize] && t.phase_kind(r) == Phase::Forward;
    for r in (0..t.len()).filter(|r| wanted(*r)) {
        let k = fuzzy_key(t.key(r));
        if let Some(v) = value_key(t, r, &k) {
            by_value.entry(v).or_insert(r);
        }
        let slash = memchr::memchr(b'/', &k).unwrap_or(k.len());
        for (i, _) in k[..slash].iter().enumerate().filter(|(_, b)| **b == b'.') {
            by_name.entry(k[i + 1..].to_vec()).or_insert(r);
        }
        by_name.entry(k).or_insert(r);
    }
    [by_name, by_value]
}

#[cfg(test)]
mod tests {
    use crate::matcher::{match_tables, MatchOptions, MatchTable, Status, ROW_RECOMPUTED};
    use crate::parser::parse_bytes;

    /// Forward ops `m{i}/op_0_addmm` (Output hash `{i}.0`) of `blocks`
    /// modules, then backward: a `mm` per module, before it (for the first
    /// `repeats` modules) a backward-phase repeat `m{i}/op_1_addmm` of its
    /// forward op, with the forward op's value when `same_value` (a
    /// recomputation), else another one (only the name repeats).
    fn log(blocks: usize, repeats: usize, same_value: bool) -> String {
        let mut s = String::new();
        for i in 0..blocks {
            s += &format!("[m{i}/op_0_addmm]\n  Output hash: {i}.0\n\n");
        }
        for i in (0..blocks).rev() {
            if i < repeats {
                let h = if same_value {
                    format!("{i}.0")
                } else {
                    format!("2{i}.0")
                };
                s += &format!("[m{i}/op_1_addmm]\n  Output hash: {h}\n  Phase: backward\n\n");
            }
            s += &format!("[m{i}/op_2_mm]\n  Output hash: 1{i}.0\n  Phase: backward\n\n");
        }
        s
    }

    /// A backward-phase op of one run that repeats nothing.
    const OTHER: &str = "[z/op_0_sum]\n  Output hash: 9.0\n  Phase: backward\n\n";

    fn compare(a: &str, b: &str) -> MatchTable {
        let a = parse_bytes(a.as_bytes().to_vec(), "a.log");
        let b = parse_bytes(b.as_bytes().to_vec(), "b.log");
        match_tables(&a, &b, &MatchOptions::default())
    }

    fn recomputed_gating(m: &MatchTable) -> (u64, u64) {
        (m.counts().recomputed, m.counts().gating)
    }

    /// Both runs checkpoint a block whose GELU changed: the recomputed
    /// GELU in backward diverges as the forward one does, and is counted
    /// under it, not as a second origin (trial 26 F6).
    #[test]
    fn a_recomputation_in_both_runs_is_counted_under_its_forward_op() {
        use crate::matcher::cause::CauseKind;
        let log = |gelu: &str| {
            format!(
                "[blk/op_0_mm]\n  Output hash: 1.0\n  Input hashes: 0.5\n\n\
                 [blk/op_1_gelu]\n  Output hash: {gelu}\n  Input hashes: 1.0\n\n\
                 [blk/op_2_mm]\n  Output hash: 1.0\n  Input hashes: 0.5\n  Phase: backward\n\n\
                 [blk/op_3_gelu]\n  Output hash: {gelu}\n  Input hashes: 1.0\n  Phase: backward\n\n"
            )
        };
        let m = compare(&log("2.0"), &log("2.5"));
        let kinds: Vec<Option<CauseKind>> = m.cause_kinds.clone();
        assert_eq!(kinds[1], Some(CauseKind::Origin), "{kinds:?}");
        assert_eq!(kinds[3], Some(CauseKind::Inherited), "{kinds:?}");
        assert_eq!(m.causes.causes.len(), 1);
        // Another value in backward (not a recomputation): its own origin.
        let other = log("2.0").replacen(
            "Output hash: 2.0\n  Input hashes: 1.0\n  Phase",
            "Output hash: 3.0\n  Input hashes: 1.0\n  Phase",
            1,
        );
        let m = compare(&other, &log("2.5"));
        assert_eq!(
            m.cause_kinds[3],
            Some(CauseKind::Origin),
            "{:?}",
            m.cause_kinds
        );
    }

    #[test]
    fn recomputed_rows_of_one_run_are_flagged_and_do_not_gate() {
        for repeats in [1, 5] {
            let m = compare(&log(6, 0, true), &log(6, repeats, true));
            let c = m.counts();
            assert_eq!(
                (c.only2, c.recomputed, c.gating),
                (repeats as u64, repeats as u64, 0)
            );
            assert_eq!(m.recomputed.len(), 1);
            assert_eq!((m.recomputed[0].side, m.recomputed[0].count), (1, repeats));
            assert!(m.first_divergence().is_none());
            for r in m.rows.iter().filter(|r| r.status == Status::Only2) {
                assert!(r.has(ROW_RECOMPUTED) && !r.gates());
            }
        }
        // Run 1's, the same way.
        let m = compare(&log(6, 2, true), &log(6, 0, true));
        assert_eq!((m.counts().only1, recomputed_gating(&m)), (2, (2, 0)));
        assert_eq!(m.recomputed[0].side, 0);
    }

    #[test]
    fn repeats_by_name_only_need_four_and_nine_in_ten() {
        // Four, every one a repeat: flagged.
        let m = compare(&log(6, 0, true), &log(6, 4, false));
        assert_eq!(recomputed_gating(&m), (4, 0));
        // Three: too few.
        let m = compare(&log(6, 0, true), &log(6, 3, false));
        assert_eq!(recomputed_gating(&m), (0, 3));
        // Five and one that repeats nothing: 5 of 6 is below 9 in 10.
        let m = compare(&log(6, 0, true), &(log(6, 5, false) + OTHER));
        assert_eq!(recomputed_gating(&m), (0, 6));
        // Nine and one: the nine are flagged, the other gates.
        let m = compare(&log(10, 0, true), &(log(10, 9, false) + OTHER));
        assert_eq!((m.counts().only2, recomputed_gating(&m)), (10, (9, 1)));
        let first = m.first_divergence().expect("the non-repeat gates");
        assert!(m.rows[first].status == Status::Only2 && !m.rows[first].has(ROW_RECOMPUTED));
        // A one-sided forward row among them: no reading by name.
        let m = compare(
            &log(6, 0, true),
            &("[z/op_0_sum]\n  Output hash: 9.0\n\n".to_string() + &log(6, 5, false)),
        );
        assert_eq!(recomputed_gating(&m), (0, 6));
    }

    #[test]
    fn a_recomputed_op_is_not_paired_with_the_backward_op_of_its_number() {
        // One module's forward `bmm`s (op_0, op_1), its backward `bmm`s;
        // with checkpointing, the recomputed op_0 and op_1 come first in
        // backward and number on (op_2, op_3), so the backward ops are
        // op_4 and op_5 there: op_2 is a backward op in one run and a
        // recomputed forward op in the other, of the same Shape.
        let bmm = |n: usize, h: &str, bwd: bool| {
            let phase = if bwd { "  Phase: backward\n" } else { "" };
            format!("[attn/op_{n}_bmm]\n  Shape: torch.Size([4, 8, 8]), Dtype: torch.float32\n  Output hash: {h}\n{phase}\n")
        };
        let fwd = bmm(0, "1.0", false) + &bmm(1, "2.0", false);
        let plain = |g: &str| fwd.clone() + &bmm(2, g, true) + &bmm(3, "4.0", true);
        let ckpt = |g: &str| {
            fwd.clone()
                + &bmm(2, "1.0", true)
                + &bmm(3, "2.0", true)
                + &bmm(4, g, true)
                + &bmm(5, "4.0", true)
        };
        let m = compare(&plain("3.0"), &ckpt("3.0"));
        assert_eq!((m.counts().only2, recomputed_gating(&m)), (2, (2, 0)));
        assert!(m.first_divergence().is_none());
        // A change of a backward op's value is still found, at its own op.
        let m = compare(&plain("3.0"), &ckpt("3.5"));
        assert_eq!(recomputed_gating(&m), (2, 1));
        let first = m.first_divergence().expect("the changed gradient gates");
        assert_eq!(m.rows[first].status, Status::Diff);
        // Both runs checkpointed: every row pairs by its key.
        let m = compare(&ckpt("3.0"), &ckpt("3.0"));
        assert_eq!((m.counts().only2, m.counts().gating), (0, 0));
    }

    #[test]
    fn a_one_sided_cause_is_not_traced_back_through_a_recomputation() {
        // Run 2 checkpoints conv + batch norm: the recomputed conv repeats
        // its forward value; the recomputed batch norm updates its running
        // statistics again (another value), which the batch norm's
        // backward reads. The cause is that batch norm, not the conv.
        let blk = |k: &str, h: &str, ins: &str, prods: &str, bwd: bool| {
            let phase = if bwd { "  Phase: backward\n" } else { "" };
            format!("[{k}]\n  Output hash: {h}\n  Input hashes: {ins}\n  Input producers: {prods}\n{phase}\n")
        };
        let fwd = blk("c/op_0_conv", "1.0", "0.5", "", false)
            + &blk("n/op_0_bn", "2.0", "1.0", "c/op_0_conv", false);
        let a = fwd.clone() + &blk("n/op_1_bnb", "3.0", "7.0, 2.0", ";n/op_0_bn", true);
        let b = fwd
            + &blk("c/op_1_conv", "1.0", "0.5", "", true)
            + &blk("n/op_1_bn", "2.5", "1.0", "c/op_1_conv", true)
            + &blk("n/op_2_bnb", "3.5", "7.0, 2.5", ";n/op_1_bn", true);
        let m = compare(&a, &b);
        let c = m
            .causes
            .causes
            .iter()
            .find(|c| !c.one_sided.is_empty())
            .expect("a one-sided cause");
        let b_table = parse_bytes(b.as_bytes().to_vec(), "b.log");
        let chain: Vec<String> = c
            .one_sided
            .iter()
            .map(|&i| b_table.key_str(m.rows[i].r2().unwrap()).into_owned())
            .collect();
        assert_eq!(chain, ["n/op_1_bn"], "{c:?}");
    }

    #[test]
    fn a_random_op_recomputed_with_another_value_is_not_flagged() {
        // Five recomputed ops by name (another value each, the name rule),
        // one of them a dropout mask drawn again (checkpointing with
        // `preserve_rng_state=False`): the mask differs from the forward's,
        // a change; it gates.
        let fwd = (0..5)
            .map(|i| format!("[m{i}/op_0_{}]\n  Output hash: {i}.0\n\n", op(i)))
            .collect::<String>();
        fn op(i: usize) -> &'static str {
            if i == 2 {
                "bernoulli_"
            } else {
                "addmm"
            }
        }
        let bwd = (0..5)
            .map(|i| {
                format!(
                    "[m{i}/op_1_{}]\n  Output hash: 2{i}.0\n  Phase: backward\n\n",
                    op(i)
                )
            })
            .collect::<String>();
        let m = compare(&fwd, &(fwd.clone() + &bwd));
        assert_eq!(recomputed_gating(&m), (4, 1));
        let first = m.first_divergence().expect("the mask gates");
        let b = parse_bytes((fwd + &bwd).into_bytes(), "b.log");
        assert_eq!(b.key_str(m.rows[first].r2().unwrap()), "m2/op_1_bernoulli_");
    }

    #[test]
    fn repeats_by_value_are_flagged_among_other_one_sided_rows() {
        // Two recomputed values and one backward op that repeats nothing:
        // the two are flagged, the other gates.
        let m = compare(&log(6, 0, true), &(log(6, 2, true) + OTHER));
        assert_eq!(recomputed_gating(&m), (2, 1));
    }

    #[test]
    fn a_repeat_filed_under_another_module_is_known_by_its_value() {
        // The recomputed residual add of m0 filed under m0.w2 (as
        // TorchTitan's tracer does): same op, Shape and Output hash as
        // the forward `m0/op_0_add`.
        let add = |key: &str, hash: &str, phase: &str| {
            format!("[{key}]\n  Shape: torch.Size([2]), Dtype: torch.float32\n  Output hash: {hash}\n{phase}\n")
        };
        let a = add("m0/op_0_add", "7.5", "") + &log(6, 0, true);
        let b =
            add("m0/op_0_add", "7.5", "") + &add("m0.w2/op_1_add", "7.5", "  Phase: backward\n");
        let m = compare(&a, &(b + &log(6, 0, true)));
        assert_eq!((m.counts().only2, recomputed_gating(&m)), (1, (1, 0)));
        // Another value or another Shape is no repeat.
        for b in [
            add("m0.w2/op_1_add", "7.6", "  Phase: backward\n"),
            add("m0.w2/op_1_add", "7.5", "  Phase: backward\n").replace("[2]", "[3]"),
        ] {
            let b = add("m0/op_0_add", "7.5", "") + &b + &log(6, 0, true);
            assert_eq!(recomputed_gating(&compare(&a, &b)), (0, 1));
        }
    }

    /// FSDP2 resharding after forward gathers a block's parameters again in
    /// backward: those one-sided copy-in rows repeat a forward one by value
    /// and are flagged as the layout's communication, with their own note;
    /// they were called activation checkpointing's (trial 19 F6). A
    /// communication row that repeats nothing still gates.
    #[test]
    fn parameters_gathered_again_in_backward_are_the_layouts_not_checkpointing() {
        let gather = |m: &str, n: u32, hash: &str, phase: &str| {
            format!(
                "[{m}/op_{n}_all_gather_copy_in]\n  Shape: torch.Size([16]), Dtype: torch.float32\n  Output hash: {hash}\n{phase}\n"
            )
        };
        let forward = gather("blocks.1", 0, "3.0", "") + &log(2, 0, true);
        let again = gather("head", 1, "3.0", "  Phase: backward\n");
        let (a, b) = (forward.clone() + &again, forward.clone());
        let (ta, tb) = (
            parse_bytes(a.as_bytes().to_vec(), "a.log"),
            parse_bytes(b.as_bytes().to_vec(), "b.log"),
        );
        let m = match_tables(&ta, &tb, &MatchOptions::default());
        assert_eq!((m.counts().only1, recomputed_gating(&m)), (1, (1, 0)));
        let r = &m.recomputed[0];
        assert!(r.communication && r.side == 0 && r.count == 1, "{r:?}");
        let i = m
            .rows
            .iter()
            .position(|r| r.status == Status::Only1)
            .unwrap();
        let notes = crate::matcher::notes::row_notes(&ta, &tb, &m, i, ("a", "b"));
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("gathered again in backward by a's parallel layout")),
            "{notes:?}"
        );
        assert!(
            !notes.iter().any(|n| n.contains("checkpointing")),
            "{notes:?}"
        );
        // Another value: not the same parameters, so it gates.
        let other = forward + &gather("head", 1, "4.0", "  Phase: backward\n");
        assert_eq!(recomputed_gating(&compare(&other, &b)), (0, 1));
    }
}

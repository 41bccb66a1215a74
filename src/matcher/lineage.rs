//! Lineage re-pairing: after the passes, re-pairs the ops of modules whose
//! op counters drifted by what they read and what reads them (an actdiff
//! extension over the reference, on with the Shape tie-break, off under
//! `--no-shape-tie-break`).
//!
//! Keys count ops per module (`moe/op_14_index`). When one run runs a
//! module's code path fewer times (an MoE expert that no token is routed
//! to in one run: the router's loop skips it), every later counter of that
//! module shifts, and the exact pass pairs each later op with another
//! iteration's: expert 4's `index` in run 1 with expert 5's in run 2, whose
//! values and statistics differ as a genuine change's would. Value
//! re-pairing cannot help (the runs differ), nor can Shape (every expert's
//! tokens are shaped alike). The dataflow can: expert 5's
//! `moe.experts.5.w1/op_0_addmm` is in a module whose counters did not
//! drift and is paired with its namesake, and in each run it read (`Input
//! producers`) that run's `index` of expert 5.
//!
//! The rule (`repair_by_lineage`):
//!
//! - Only when the logs have different numbers of rows. A *drifted* module
//!   has a different number of rows in the two logs; only its rows are
//!   re-paired. Rows of other modules keep the passes' pairs (or none) and
//!   are the evidence.
//! - A row of a drifted module is scored against each row of the other run
//!   with the same fuzzy key and phase, in a drifted module and still
//!   undecided: +1 for each input whose producers are known to be a pair,
//!   −1 for each whose producer is known to pair otherwise (or to be of
//!   one run only while the other's is not), except that a producer of
//!   one run only that reads the other producer's partner is an op that
//!   run inserted between them, +1 (no evidence while it is undecided),
//!   and two producers both of their run only are no evidence (the same
//!   op under another key in each run); and the same for each
//!   reader whose pair is known (+1 when the reader's partner reads the
//!   candidate at the same input).
//! - A pair's score is the sum of its two rows' scores of each other, so
//!   that the decisions do not depend on which run is run 1. In rounds,
//!   group by group in file order, a row whose best candidate scores above
//!   0, above every other candidate, and above every other row's score for
//!   that candidate, is decided paired with it; a row whose every
//!   candidate scores below 0 (or that has none) is decided one-sided. A
//!   group's decisions are read from the state before it and are evidence
//!   for the later groups and rounds; rounds stop when none is made (at
//!   most [`MAX_ROUNDS`]). A group with more than [`MAX_GROUP`] rows on a side
//!   is left as the passes paired it.
//! - Decided pairs replace the passes' pairs; a row decided one-sided loses
//!   its pair. Undecided rows keep the passes' partner when it is free,
//!   and the rest are paired with each other by fuzzy key and phase in
//!   file order (each side's, as the fuzzy pass).
//! - A re-paired row reports the fuzzy strategy, and the note "re-paired
//!   by the ops that read it".
//!
//! Changes no golden row (`tests/conformance.rs`).

use ahash::{AHashMap, AHashSet};

use super::compare::split_tokens;
use super::passes::{Pairing, HELD};
use super::{keys, Strategy, NO_ROW};
use crate::parser::{Field, OpTable, Phase};

/// A group of rows to re-pair: their fuzzy key and phase.
type GroupKey = (Vec<u8>, Phase);

/// Rounds of decisions at most.
pub const MAX_ROUNDS: usize = 32;

/// The most rows of one fuzzy key and phase, per side, that are re-paired.
pub const MAX_GROUP: usize = 256;

/// The module FQN of a key (the text before its last `/op_`), or the
/// whole key when it has none.
fn module_of(key: &[u8]) -> &[u8] {
    key.windows(4)
        .rposition(|w| w == b"/op_")
        .map_or(key, |at| &key[..at])
}

/// No producer: an input whose `Input producers` names none, or names a
/// key no earlier row has.
const NONE: u32 = u32::MAX;

/// One log, as the lineage reads it: each row's producer rows and readers,
/// in flat arrays (a row's slice is `off[r]..off[r + 1]`), built in one
/// pass over the rows with the latest row of each key so far (a producer
/// comes before its readers); an input whose producer is not named is
/// linked to the one earlier row whose Output hash has its value, if only
/// one row of the log has it.
pub(super) struct Lineage {
    in_off: Vec<u32>,
    /// Per input of each row, its producer row, or [`NONE`].
    inputs: Vec<u32>,
    rd_off: Vec<u32>,
    /// Per row, its readers: (reader row, input position).
    readers: Vec<(u32, u16)>,
}

impl Lineage {
    pub(super) fn new(t: &OpTable) -> Lineage {
        let hasher = crate::parser::key::hasher();
        // The latest row so far of each key (by its hash, as the parser
        // computed it).
        let mut latest: AHashMap<u64, u32> = AHashMap::with_capacity(t.len());
        // Each Output hash value with the one row that has it (NONE: several
        // rows have it), for inputs whose producer is not named (a view or
        // copy the capture excludes between them: `topv[rows, slot]`).
        let mut by_value: AHashMap<&[u8], u32> = AHashMap::new();
        for r in 0..t.len() {
            for v in split_tokens(t.field(r, Field::OutputHash)) {
                by_value
                    .entry(v)
                    .and_modify(|x| *x = NONE)
                    .or_insert(r as u32);
            }
        }
        let mut in_off = Vec::with_capacity(t.len() + 1);
        let mut inputs: Vec<u32> = Vec::with_capacity(t.len() * 2);
        let mut counts = vec![0u32; t.len() + 1];
        in_off.push(0);
        for r in 0..t.len() {
            let mut values = split_tokens(t.field(r, Field::InputHashes));
            for k in t
                .field(r, Field::InputProducers)
                .split(|b| *b == b';')
                .map(crate::parser::trim)
            {
                let v = values.next().unwrap_or_default();
                let p = if k.is_empty() {
                    match by_value.get(v) {
                        Some(&j) if !v.is_empty() && (j as usize) < r => j,
                        _ => NONE,
                    }
                } else {
                    let h = crate::parser::key::key_hash(&hasher, k);
                    match latest.get(&h) {
                        Some(&j) if t.key(j as usize) == k => j,
                        _ => NONE,
                    }
                };
                if p != NONE {
                    counts[p as usize] += 1;
                }
                inputs.push(p);
            }
            in_off.push(inputs.len() as u32);
            latest.insert(t.key_hash(r), r as u32);
        }
        drop((latest, by_value));
        // Readers: counted above, placed by a prefix sum.
        let mut rd_off = Vec::with_capacity(t.len() + 1);
        let mut sum = 0u32;
        for c in &counts[..t.len()] {
            rd_off.push(sum);
            sum += c;
        }
        rd_off.push(sum);
        let mut fill = rd_off.clone();
        let mut readers = vec![(0u32, 0u16); sum as usize];
        for r in 0..t.len() {
            let ins = &inputs[in_off[r] as usize..in_off[r + 1] as usize];
            for (q, &p) in ins.iter().enumerate() {
                if p != NONE {
                    let at = &mut fill[p as usize];
                    readers[*at as usize] = (r as u32, q.min(u16::MAX as usize) as u16);
                    *at += 1;
                }
            }
        }
        Lineage {
            in_off,
            inputs,
            rd_off,
            readers,
        }
    }

    /// Row `r`'s producer rows, one per input ([`NONE`] where unknown).
    fn inputs_of(&self, r: usize) -> &[u32] {
        &self.inputs[self.in_off[r] as usize..self.in_off[r + 1] as usize]
    }

    /// Row `r`'s known producer rows.
    pub(super) fn producers_of(&self, r: usize) -> impl Iterator<Item = usize> + '_ {
        self.inputs_of(r)
            .iter()
            .filter(|&&p| p != NONE)
            .map(|&p| p as usize)
    }

    /// The producer row of row `r`'s input `q`, if known.
    fn input(&self, r: usize, q: usize) -> Option<u32> {
        self.inputs_of(r).get(q).copied().filter(|&p| p != NONE)
    }

    /// Row `r`'s readers: (reader row, input position).
    fn readers_of(&self, r: usize) -> &[(u32, u16)] {
        &self.readers[self.rd_off[r] as usize..self.rd_off[r + 1] as usize]
    }
}

/// What is known of a row's partner.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Known {
    /// A drifted row not decided yet.
    Undecided,
    /// Paired with this row of the other log.
    Pair(u32),
    /// Of its own run only.
    OneSided,
}

/// Both logs' lineage and what is known of every row's partner.
struct State<'a> {
    lin: [&'a Lineage; 2],
    known: [Vec<Known>; 2],
    /// The Input hashes values of every group row, per side (read once).
    values: [AHashMap<u32, Vec<&'a [u8]>>; 2],
}

impl State<'_> {
    /// The score of pairing row `a` of side `s` with row `b` of the other
    /// side (see the module doc).
    fn score(&self, s: usize, a: usize, b: usize) -> i32 {
        let o = 1 - s;
        let (la, lb) = (self.lin[s], self.lin[o]);
        let mut score = 0;
        for (q, &pa) in la.inputs_of(a).iter().enumerate() {
            if pa == NONE {
                continue;
            }
            let pb = lb.input(b, q);
            // (No producer known on the other side: no evidence.)
            let Some(pb) = pb else { continue };
            match (self.known[s][pa as usize], self.known[o][pb as usize]) {
                (Known::Pair(x), _) if x == pb => score += 1,
                // The candidate reads an op of its run that reads the
                // partner of `a`'s producer: an op one run inserted between
                // them (trial 26 F1: `logits + bias` in one run's MoE
                // router, before its `div`) once that op is known to be of
                // its run only, the same lineage; while it is undecided
                // (it may be the other run's op of another iteration), no
                // evidence yet.
                (Known::Pair(x), Known::OneSided | Known::Undecided)
                    if lb.inputs_of(pb as usize).contains(&x) =>
                {
                    if self.known[o][pb as usize] == Known::OneSided {
                        score += 1;
                    }
                }
                (Known::Pair(_), _) => score -= 1,
                // The same, an op inserted in `a`'s run.
                (Known::OneSided, Known::Pair(y)) if la.inputs_of(pa as usize).contains(&y) => {
                    score += 1
                }
                (Known::Undecided, _) => {}
                // Both producers of no pair: the same op under another key
                // in each run (an inductor-compiled accumulation `add_`
                // under `<none>`, a module's in eager: trial 72 F1, where
                // -1 an input left the whole optimizer of its run only),
                // or two unrelated ops: no evidence.
                (Known::OneSided, Known::OneSided) => {}
                (Known::OneSided, _) => score -= 1,
            }
        }
        for &(c, q) in la.readers_of(a) {
            // A reader of one run only is no evidence: an extra op may read
            // a tensor both runs have.
            if let Known::Pair(c2) = self.known[s][c as usize] {
                match lb.input(c2 as usize, q as usize) {
                    Some(x) if x == b as u32 => score += 1,
                    // The partner reads, there, an op of its run paired
                    // with none (`x[0, 0] += 0.5` in one run only): if it
                    // read the candidate, the same lineage; if what it
                    // read is unknown (the edit's input came through
                    // `clone`, which is not captured), no evidence.
                    Some(x) if !matches!(self.known[o][x as usize], Known::Pair(_)) => {
                        let ins = lb.inputs_of(x as usize);
                        if ins.contains(&(b as u32)) {
                            score += 1;
                        } else if ins.iter().any(|&p| p != NONE) {
                            score -= 1;
                        }
                    }
                    Some(_) => score -= 1,
                    None => {}
                }
            }
        }
        score
    }
}

/// Re-pairs the rows of drifted modules by their lineage (see the module
/// doc). Returns the run-1 rows whose partner changed to another row,
/// sorted; `p`'s strategies say `Fuzzy` for them. Rows still held out of
/// the passes ([`Pairing::hold`]: activation checkpointing's recomputation
/// in one run) stay out of it, as of every pass: they are of their run
/// only (trial 28: a recomputed `pow` re-paired with the other run's
/// backward `pow`, an origin in a norm whose every value agreed).
pub(super) fn repair_by_lineage(p: &mut Pairing, t1: &OpTable, t2: &OpTable) -> Vec<u32> {
    if t1.len() == t2.len() {
        return Vec::new();
    }
    fn count(t: &OpTable) -> AHashMap<&[u8], u32> {
        let mut n: AHashMap<&[u8], u32> = AHashMap::new();
        for r in 0..t.len() {
            *n.entry(module_of(t.key(r))).or_insert(0) += 1;
        }
        n
    }
    let (n1, n2) = (count(t1), count(t2));
    let drifted: AHashSet<&[u8]> = n1
        .iter()
        .filter(|(m, &c)| n2.get(*m).is_some_and(|&c2| c2 != c))
        .map(|(m, _)| *m)
        .collect();
    if drifted.is_empty() {
        return Vec::new();
    }
    // The groups: rows of drifted modules by (fuzzy key, phase), per side.
    let tables = [t1, t2];
    let mut groups: AHashMap<GroupKey, [Vec<u32>; 2]> = AHashMap::new();
    for (s, (t, pair)) in tables.iter().zip([&p.pair1, &p.pair2]).enumerate() {
        for (r, &partner) in pair.iter().enumerate() {
            if partner != HELD && drifted.contains(module_of(t.key(r))) {
                let k = (keys::fuzzy_key(t.key(r)), t.phase_kind(r));
                groups.entry(k).or_default()[s].push(r as u32);
            }
        }
    }
    groups.retain(|_, g| g.iter().all(|v| v.len() <= MAX_GROUP));
    // A pair made across groups (the stats pass pairs other fuzzy keys) or
    // by an override stays as it is, and is evidence.
    let mut member: [AHashMap<u32, usize>; 2] = [AHashMap::new(), AHashMap::new()];
    for (i, g) in groups.values().enumerate() {
        for s in 0..2 {
            for &r in &g[s] {
                member[s].insert(r, i);
            }
        }
    }
    let mut fixed: [AHashSet<u32>; 2] = [AHashSet::new(), AHashSet::new()];
    for (&a, &i) in &member[0] {
        let b = p.pair1[a as usize];
        if b != NO_ROW
            && (p.strat1[a as usize] == Strategy::Override || member[1].get(&b) != Some(&i))
        {
            fixed[0].insert(a);
            fixed[1].insert(b);
        }
    }
    for (&b, &i) in &member[1] {
        let a = p.pair2[b as usize];
        if a != NO_ROW && member[0].get(&a) != Some(&i) {
            fixed[0].insert(a);
            fixed[1].insert(b);
        }
    }
    for g in groups.values_mut() {
        for s in 0..2 {
            g[s].retain(|r| !fixed[s].contains(r));
        }
    }
    groups.retain(|_, g| g.iter().any(|v| !v.is_empty()));
    if groups.is_empty() {
        return Vec::new();
    }
    let (l1, l2) = rayon::join(|| Lineage::new(t1), || Lineage::new(t2));
    let known = |pair: &[u32]| -> Vec<Known> {
        pair.iter()
            .map(|&x| {
                if x == NO_ROW || x == HELD {
                    Known::OneSided
                } else {
                    Known::Pair(x)
                }
            })
            .collect()
    };
    let mut st = State {
        lin: [&l1, &l2],
        known: [known(&p.pair1), known(&p.pair2)],
        values: [AHashMap::new(), AHashMap::new()],
    };
    for g in groups.values() {
        for (s, rows) in g.iter().enumerate() {
            for &r in rows {
                st.known[s][r as usize] = Known::Undecided;
                let v = split_tokens(tables[s].field(r as usize, Field::InputHashes)).collect();
                st.values[s].insert(r, v);
            }
        }
    }
    // In file order, the same whichever run is run 1: by the pair of the
    // group's first rows (either run's), the earlier first, then its key.
    let mut groups: Vec<(GroupKey, [Vec<u32>; 2])> = groups.into_iter().collect();
    groups.sort_unstable_by(|(k, g), (k2, g2)| {
        let at = |g: &[Vec<u32>; 2]| {
            let f = [g[0].first(), g[1].first()].map(|r| r.map_or(u32::MAX, |&r| r));
            (f[0].min(f[1]), f[0].max(f[1]))
        };
        (at(g), &k.0, k.1 as u8).cmp(&(at(g2), &k2.0, k2.1 as u8))
    });
    let groups: Vec<[Vec<u32>; 2]> = groups.into_iter().map(|(_, g)| g).collect();
    for _ in 0..MAX_ROUNDS {
        let mut decided = 0;
        for g in &groups {
            decided += decide(&mut st, g);
        }
        if decided == 0 {
            break;
        }
    }
    apply(p, t1, t2, &st, &groups)
}

/// One round over one group: the decisions it could make (see the module
/// doc), all read from the state before the round and made at once, so
/// that they do not depend on which run is run 1: the score of a pair is
/// the sum of its two rows' scores of each other ([`scores_of`] from
/// either side), and a pair is decided when each row is the other's one
/// best candidate, with a score above 0. Later groups see the decisions.
/// Returns how many were made.
fn decide(st: &mut State<'_>, g: &[Vec<u32>; 2]) -> usize {
    let undecided = |st: &State<'_>, s: usize| -> Vec<u32> {
        g[s].iter()
            .copied()
            .filter(|&r| st.known[s][r as usize] == Known::Undecided)
            .collect()
    };
    let u = [undecided(st, 0), undecided(st, 1)];
    if u[0].is_empty() && u[1].is_empty() {
        return 0;
    }
    // score[i][j]: run 1's u[0][i] with run 2's u[1][j], both ways.
    let mut score: Vec<Vec<i32>> = u[0].iter().map(|&a| scores_of(st, 0, a, &u[1])).collect();
    for (j, &b) in u[1].iter().enumerate() {
        for (i, v) in scores_of(st, 1, b, &u[0]).into_iter().enumerate() {
            score[i][j] += v;
        }
    }
    // The one best (unique maximum) of a row of scores, if any.
    fn best(v: impl Iterator<Item = i32>) -> Option<(usize, i32, bool)> {
        let mut top: Option<(usize, i32, bool)> = None;
        for (i, x) in v.enumerate() {
            top = match top {
                Some((_, t, _)) if x == t => top.map(|(at, t, _)| (at, t, false)),
                Some((_, t, _)) if x < t => top,
                _ => Some((i, x, true)),
            };
        }
        top
    }
    let row_best: Vec<_> = (0..u[0].len())
        .map(|i| best(score[i].iter().copied()))
        .collect();
    let col_best: Vec<_> = (0..u[1].len())
        .map(|j| best(score.iter().map(|r| r[j])))
        .collect();
    // No candidate, or every one below 0: of its own run only; except the
    // one row of its fuzzy key and phase in each run, left undecided to
    // pair as the passes pair it (trial 72 F1: the one `_foreach_norm` of
    // each run's clipping, whose gradients' producers have other keys
    // under inductor, was of its run only, and the step "diverged").
    let lone = g[0].len() == 1 && g[1].len() == 1;
    let one_sided = |best: Option<(usize, i32, bool)>| !lone && best.is_none_or(|(_, v, _)| v < 0);
    let mut made = 0;
    for (i, &a) in u[0].iter().enumerate() {
        if one_sided(row_best[i]) {
            st.known[0][a as usize] = Known::OneSided;
            made += 1;
        } else if let Some((j, v, true)) = row_best[i] {
            if v > 0 && col_best[j] == Some((i, v, true)) {
                let b = u[1][j];
                st.known[0][a as usize] = Known::Pair(b);
                st.known[1][b as usize] = Known::Pair(a);
                made += 2;
            }
        }
    }
    for (j, &b) in u[1].iter().enumerate() {
        if one_sided(col_best[j]) {
            st.known[1][b as usize] = Known::OneSided;
            made += 1;
        }
    }
    made
}

/// The score of row `a` of side `s` against each of `cands` (rows of the
/// other side): [`State::score`] plus [`same_values`].
fn scores_of(st: &State<'_>, s: usize, a: u32, cands: &[u32]) -> Vec<i32> {
    let mut scores: Vec<i32> = cands
        .iter()
        .map(|&b| st.score(s, a as usize, b as usize))
        .collect();
    same_values(st, s, a, cands, &mut scores);
    scores
}

/// Adds to each candidate's score 1 for every input it reads with the very
/// value (Input hashes text) row `a` of side `s` reads there, when no other
/// candidate reads that value there: the same tensor (an optimizer's update
/// of one parameter reads that parameter, equal in both runs until they
/// part, while every parameter's `lerp_` reads the same zeros at step 1).
fn same_values(st: &State<'_>, s: usize, a: u32, cands: &[u32], scores: &mut [i32]) {
    let o = 1 - s;
    let values = |side: usize, r: u32| st.values[side].get(&r).map_or(&[][..], |v| v.as_slice());
    let mine = values(s, a);
    if mine.is_empty() || cands.is_empty() {
        return;
    }
    for (q, v) in mine.iter().enumerate() {
        if v.is_empty() {
            continue;
        }
        let mut hit = None;
        let mut n = 0;
        for (i, &b) in cands.iter().enumerate() {
            if values(o, b).get(q) == Some(v) {
                hit = Some(i);
                n += 1;
            }
        }
        if let (Some(i), 1) = (hit, n) {
            scores[i] += 1;
        }
    }
}

/// Writes the decisions into `p`; undecided rows keep a free partner of
/// the passes, the rest are paired in file order. Returns the run-1 rows
/// whose partner changed to another row, sorted.
fn apply(
    p: &mut Pairing,
    t1: &OpTable,
    t2: &OpTable,
    st: &State<'_>,
    groups: &[[Vec<u32>; 2]],
) -> Vec<u32> {
    let before = p.pair1.clone();
    let mut loose: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    // Unpair every row of the groups, then pair the decided ones.
    for g in groups {
        for &a in &g[0] {
            let b = p.pair1[a as usize];
            if b != NO_ROW {
                p.pair2[b as usize] = NO_ROW;
            }
            p.pair1[a as usize] = NO_ROW;
        }
        for &b in &g[1] {
            let a = p.pair2[b as usize];
            if a != NO_ROW {
                p.pair1[a as usize] = NO_ROW;
            }
            p.pair2[b as usize] = NO_ROW;
        }
    }
    for g in groups {
        for &a in &g[0] {
            if let Known::Pair(b) = st.known[0][a as usize] {
                p.pair1[a as usize] = b;
                p.pair2[b as usize] = a;
            }
        }
    }
    // Undecided rows: the passes' partner when it is undecided too and
    // free; else loose.
    for g in groups {
        for &a in &g[0] {
            if st.known[0][a as usize] != Known::Undecided {
                continue;
            }
            let b = before[a as usize];
            if b != NO_ROW
                && st.known[1][b as usize] == Known::Undecided
                && p.pair2[b as usize] == NO_ROW
            {
                p.pair1[a as usize] = b;
                p.pair2[b as usize] = a;
            } else {
                loose[0].push(a);
            }
        }
        for &b in &g[1] {
            if st.known[1][b as usize] == Known::Undecided && p.pair2[b as usize] == NO_ROW {
                loose[1].push(b);
            }
        }
    }
    let phase_key =
        |t: &OpTable, r: u32| (keys::fuzzy_key(t.key(r as usize)), t.phase_kind(r as usize));
    for l in &mut loose {
        l.sort_unstable();
    }
    for &a in &loose[0] {
        let k = phase_key(t1, a);
        if let Some(&b) = loose[1]
            .iter()
            .find(|&&b| p.pair2[b as usize] == NO_ROW && phase_key(t2, b) == k)
        {
            p.pair1[a as usize] = b;
            p.pair2[b as usize] = a;
        }
    }
    // Strategies, and the rows whose partner changed.
    let mut changed = Vec::new();
    for g in groups {
        for &a in &g[0] {
            let (old, new) = (before[a as usize], p.pair1[a as usize]);
            if new == NO_ROW {
                p.strat1[a as usize] = Strategy::None;
            } else if old != new {
                p.strat1[a as usize] = Strategy::Fuzzy;
                changed.push(a);
            }
        }
    }
    // (A group's rows were paired only within their group: every other
    // pair is outside the groups and kept.)
    changed.sort_unstable();
    changed
}

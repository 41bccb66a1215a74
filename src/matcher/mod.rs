//! The matcher stage: two [`OpTable`]s of one rank in, a [`MatchTable`] out.
//!
//! Rows are paired in the reference comparator's four passes (override,
//! exact key, fuzzy key, stats; `shared/spec/matching.md`), each a hash-index
//! lookup, never a scan: within a pass, side 1 is walked in file order and
//! each unpaired row takes the first unclaimed side-2 row with an equal pass
//! key. Each pair then gets a [`Status`] from [`compare::judge_pair`].
//!
//! ```
//! use actdiff::{parser, matcher};
//! let a = parser::parse_bytes(b"[x/op_0_mm]\n  Output hash: 1.0\n".to_vec(), "a.log");
//! let b = parser::parse_bytes(b"[x/op_0_mm]\n  Output hash: 2.0\n".to_vec(), "b.log");
//! let m = matcher::match_tables(&a, &b, &matcher::MatchOptions::default());
//! assert_eq!(m.counts().diff, 1);
//! ```

pub mod cause;
pub mod compare;
pub mod keys;
pub mod notes;
pub mod overrides;
pub mod policy;

use std::hash::Hash;

use ahash::AHashMap;
use rayon::prelude::*;

use crate::parser::{Field, OpTable};
pub use compare::{CompareOptions, Tolerance};
pub use overrides::Overrides;
pub use policy::{Policy, RowPolicy, Source};

/// Marker for "no row".
pub const NO_ROW: u32 = u32::MAX;

/// The verdict on one result row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Paired and agreeing.
    Match,
    /// Paired and differing (Shape text, or hashes beyond tolerance).
    Diff,
    /// Only in run 1 (reference: `eager_only`).
    Only1,
    /// Only in run 2 (reference: `traced_only`).
    Only2,
    /// Paired, but one side's block was cut short by the end of its file: no verdict.
    Truncated,
    /// Paired, but the Output hash is present in one run only (the other
    /// log records it elsewhere): not a numeric difference, still a divergence.
    /// The reference calls this `diff`.
    Missing,
}

impl Status {
    /// The name used in JSON and the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Match => "match",
            Status::Diff => "diff",
            Status::Only1 => "only1",
            Status::Only2 => "only2",
            Status::Truncated => "truncated",
            Status::Missing => "missing",
        }
    }
    /// The reference comparator's name (`eager_only`, `traced_only`; a
    /// one-sided Output hash is a `diff` there).
    pub fn reference_name(self) -> &'static str {
        match self {
            Status::Only1 => "eager_only",
            Status::Only2 => "traced_only",
            Status::Missing => "diff",
            s => s.as_str(),
        }
    }
    /// Whether the row is a divergence: `diff`, `missing`, `only1` or `only2`.
    pub fn is_divergence(self) -> bool {
        matches!(
            self,
            Status::Diff | Status::Missing | Status::Only1 | Status::Only2
        )
    }
}

/// Which pass paired a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Not paired.
    None,
    /// Pass 0: a manual override pair.
    Override,
    /// Pass 1: equal key after the root-class strip.
    Exact,
    /// Pass 2: equal fuzzy key (op counters removed).
    Fuzzy,
    /// Pass 3: equal (op type, Shape text, Output hash text).
    Stats,
}

impl Strategy {
    /// The name used in JSON (`null` for [`Strategy::None`]).
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            Strategy::None => None,
            Strategy::Override => Some("override"),
            Strategy::Exact => Some("exact"),
            Strategy::Fuzzy => Some("fuzzy"),
            Strategy::Stats => Some("stats"),
        }
    }
    /// The report's chip text, as the reference's HTML.
    pub fn chip(self) -> &'static str {
        match self {
            Strategy::None => "",
            Strategy::Override => "manual override",
            Strategy::Exact => "same op key",
            Strategy::Fuzzy => "fuzzy op key",
            Strategy::Stats => "stats",
        }
    }
}

/// Row flag: ignored by `--ignore-op` or a rule; shown, never gating.
pub const ROW_IGNORED: u8 = 1;
/// Row flag: output of an asynchronous collective captured before it completed.
pub const ROW_UNSYNCED: u8 = 2;
/// Row flag: run 1's stats or Output hash hold NaN or Inf.
pub const ROW_NONFINITE1: u8 = 4;
/// Row flag: run 2's stats or Output hash hold NaN or Inf.
pub const ROW_NONFINITE2: u8 = 8;
/// Row flag: the output itself differs (Shape text or Output hash beyond tolerance).
pub const ROW_OUT_DIFF: u8 = 16;
/// Row flag: a pair whose Shape texts differ (both present), whether or not
/// Shape is compared.
pub const ROW_SHAPE_TEXT_DIFF: u8 = 32;

/// One result row: a pair, or a row of one side only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchRow {
    /// Row in run 1's table, or [`NO_ROW`].
    pub row1: u32,
    /// Row in run 2's table, or [`NO_ROW`].
    pub row2: u32,
    /// The verdict.
    pub status: Status,
    /// The pass that paired it.
    pub strategy: Strategy,
    /// `ROW_*` flags.
    pub flags: u8,
    /// Where the row's tolerance came from.
    pub source: Source,
}

impl MatchRow {
    /// Whether the row counts against the exit status: a divergence
    /// (`diff`, `missing`, `only1` or `only2`) that is neither ignored nor an
    /// unsynced collective.
    pub fn gates(&self) -> bool {
        self.status.is_divergence() && self.flags & (ROW_IGNORED | ROW_UNSYNCED) == 0
    }
    /// Whether a `ROW_*` flag is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
    /// Run 1's row index, if any.
    pub fn r1(&self) -> Option<usize> {
        (self.row1 != NO_ROW).then_some(self.row1 as usize)
    }
    /// Run 2's row index, if any.
    pub fn r2(&self) -> Option<usize> {
        (self.row2 != NO_ROW).then_some(self.row2 as usize)
    }
}

/// Result rows per status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Paired and agreeing.
    #[serde(rename = "match")]
    pub matched: u64,
    /// Paired and differing.
    pub diff: u64,
    /// Only in run 1.
    pub only1: u64,
    /// Only in run 2.
    pub only2: u64,
    /// Paired with a truncated block (no verdict).
    pub truncated: u64,
    /// Paired, Output hash in one run only.
    pub missing: u64,
    /// Diverging rows that gate the exit status.
    pub gating: u64,
    /// Diverging rows not gating because they are ignored.
    pub ignored: u64,
    /// Diverging rows not gating because they are unsynced collectives.
    pub unsynced: u64,
}

impl Counts {
    /// Adds one result row, with its gating class.
    pub fn add_row(&mut self, r: &MatchRow) {
        self.add(r.status);
        if r.gates() {
            self.gating += 1;
        } else if r.status.is_divergence() {
            if r.has(ROW_IGNORED) {
                self.ignored += 1;
            } else {
                self.unsynced += 1;
            }
        }
    }
    /// Adds one row of `s`.
    pub fn add(&mut self, s: Status) {
        match s {
            Status::Match => self.matched += 1,
            Status::Diff => self.diff += 1,
            Status::Only1 => self.only1 += 1,
            Status::Only2 => self.only2 += 1,
            Status::Truncated => self.truncated += 1,
            Status::Missing => self.missing += 1,
        }
    }
    /// Adds another set of counts.
    pub fn merge(&mut self, o: &Counts) {
        self.matched += o.matched;
        self.diff += o.diff;
        self.only1 += o.only1;
        self.only2 += o.only2;
        self.truncated += o.truncated;
        self.missing += o.missing;
        self.gating += o.gating;
        self.ignored += o.ignored;
        self.unsynced += o.unsynced;
    }
    /// All rows.
    pub fn total(&self) -> u64 {
        self.matched + self.diff + self.only1 + self.only2 + self.truncated + self.missing
    }
    /// Rows that diverge: `diff`, `missing`, `only1`, `only2`.
    pub fn diverging(&self) -> u64 {
        self.diff + self.missing + self.only1 + self.only2
    }
}

/// Rows paired by each pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StrategyCounts {
    /// Pass 0.
    #[serde(rename = "override")]
    pub overridden: u64,
    /// Pass 1.
    pub exact: u64,
    /// Pass 2.
    pub fuzzy: u64,
    /// Pass 3.
    pub stats: u64,
}

/// What the matcher needs besides the two tables.
#[derive(Clone, Debug)]
pub struct MatchOptions {
    /// Manual pairs (pass 0).
    pub overrides: Overrides,
    /// How rows are judged: tolerances, rules, ignored and unsynced ops.
    pub policy: Policy,
    /// In the fuzzy pass, prefer a candidate with the same Shape text over
    /// the first one (backward counter drift, cases/06). On by default; it
    /// changes no golden row. Off (`--no-shape-tie-break`) is the
    /// reference's first-candidate rule exactly.
    pub shape_tie_break: bool,
    /// Per side, a layer-index offset added to `layers.N` in keys before the
    /// exact and fuzzy passes (pipeline stages, `--layer-offset`).
    pub layer_offset: [i64; 2],
}

impl Default for MatchOptions {
    fn default() -> Self {
        MatchOptions {
            overrides: Overrides::default(),
            policy: Policy::default(),
            shape_tie_break: true,
            layer_offset: [0, 0],
        }
    }
}

/// The matcher's output for one rank: result rows in the reference's order —
/// every run-1 row in file order (paired or `only1`), then the `only2` rows
/// in run-2 file order.
#[derive(Clone, Debug, Default)]
pub struct MatchTable {
    /// The result rows.
    pub rows: Vec<MatchRow>,
    counts: Counts,
    strategies: StrategyCounts,
    /// Side-1 keys of override pairs that paired nothing (absent key or target).
    pub unused_overrides: Vec<(String, String)>,
    /// Rows judged by each rule of the policy, by rule index.
    pub rule_hits: Vec<u64>,
    /// Root cause class of each `diff` row (indexed like `rows`).
    pub cause_kinds: Vec<Option<cause::CauseKind>>,
    /// Origins, entries, first non-finite rows, largest difference.
    pub causes: cause::RootCauses,
    /// The policy the rows were judged under (for notes and the report).
    pub policy: Policy,
    /// Fields compared: those present in both logs' schemas (a field one
    /// log never records is not compared, and says so in a warning).
    pub compared: crate::parser::FieldSet,
}

impl MatchTable {
    /// Rows per status.
    pub fn counts(&self) -> Counts {
        self.counts
    }
    /// Rows paired per pass.
    pub fn strategy_counts(&self) -> StrategyCounts {
        self.strategies
    }
    /// Index of the first row that gates (see [`MatchRow::gates`]): the
    /// first divergence, in result order (run-1 dispatch order, then the
    /// run-2-only rows).
    pub fn first_divergence(&self) -> Option<usize> {
        self.rows.iter().position(|r| r.gates())
    }
    /// Index of the first diverging row that does not gate (an unsynced
    /// collective or an ignored op), in result order.
    pub fn first_nongating(&self) -> Option<usize> {
        self.rows
            .iter()
            .position(|r| r.status.is_divergence() && !r.gates())
    }
    /// The settings that judged result row `i`: for a pair, the pair's
    /// ([`Policy::for_pair`]: run 1's row's, or the looser per-dtype default
    /// when the dtypes differ); for a one-sided row, its side's row's. The
    /// verdict, root cause and row notes all read them from here.
    pub fn row_policy(&self, t1: &OpTable, t2: &OpTable, i: usize) -> RowPolicy {
        let r = &self.rows[i];
        match (r.r1(), r.r2()) {
            (Some(a), Some(b)) => self.policy.for_pair(t1, a, t2, b),
            (Some(a), None) => self.policy.for_table_row(t1, a),
            (None, Some(b)) => self.policy.for_table_row(t2, b),
            (None, None) => RowPolicy {
                opts: self.policy.default,
                source: Source::Default,
                ignored: false,
                unsynced: false,
            },
        }
    }
    /// Index of the first gating row (see [`MatchRow::gates`]) of the given
    /// phase (run 1's row's, else run 2's: [`OpTable::phase_kind`]), in
    /// result order.
    pub fn first_gating(
        &self,
        t1: &OpTable,
        t2: &OpTable,
        phase: crate::parser::Phase,
    ) -> Option<usize> {
        self.rows.iter().position(|r| {
            r.gates()
                && match (r.r1(), r.r2()) {
                    (Some(a), _) => t1.phase_kind(a) == phase,
                    (None, Some(b)) => t2.phase_kind(b) == phase,
                    _ => false,
                }
        })
    }
}

/// Pairing state across the passes: who is paired with whom, and by which pass.
struct Pairing {
    /// Run-2 partner of each run-1 row, or [`NO_ROW`].
    pair1: Vec<u32>,
    /// Run-1 partner of each run-2 row, or [`NO_ROW`].
    pair2: Vec<u32>,
    /// The pass that paired each run-1 row.
    strat1: Vec<Strategy>,
}

impl Pairing {
    fn new(n1: usize, n2: usize) -> Pairing {
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
    fn pass<K, F1, F2>(&mut self, strategy: Strategy, key1: F1, key2: F2) -> u64
    where
        K: Hash + Eq,
        F1: Fn(usize) -> Option<K>,
        F2: Fn(usize) -> Option<K>,
    {
        self.pass_with::<K, F1, F2, ahash::RandomState>(strategy, key1, key2)
    }

    /// [`Pairing::pass`] with a chosen hasher.
    fn pass_with<K, F1, F2, S>(&mut self, strategy: Strategy, key1: F1, key2: F2) -> u64
    where
        K: Hash + Eq,
        F1: Fn(usize) -> Option<K>,
        F2: Fn(usize) -> Option<K>,
        S: std::hash::BuildHasher + Default,
    {
        let (n1, n2) = (self.pair1.len(), self.pair2.len());
        // head[key] = first unclaimed side-2 row with that key; next[row] = the following one.
        let unclaimed = self.pair2.iter().filter(|p| **p == NO_ROW).count();
        if unclaimed == 0 {
            return 0;
        }
        let mut head: std::collections::HashMap<K, u32, S> =
            std::collections::HashMap::with_capacity_and_hasher(unclaimed, S::default());
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
    fn pass_by_index(
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

/// Pairs and judges the rows of two logs of one rank.
///
/// Reference: `match_entries` in TorchTitan's `compare_numerics.py`; with
/// default options the pairs, order, statuses and strategies are identical
/// to it (checked against every `shared/testdata/*/golden.json`).
pub fn match_tables(t1: &OpTable, t2: &OpTable, opts: &MatchOptions) -> MatchTable {
    let indexes = rayon::join(|| t1.key_index(), || t2.key_index());
    match_tables_indexed(t1, t2, opts, indexes)
}

/// [`match_tables`] with the two tables' key indexes
/// ([`OpTable::key_index`]) already built (the duplicate-key check needs
/// them too); they are dropped as soon as the exact-key pass is done.
pub fn match_tables_indexed(
    t1: &OpTable,
    t2: &OpTable,
    opts: &MatchOptions,
    indexes: (crate::parser::key::KeyIndex, crate::parser::key::KeyIndex),
) -> MatchTable {
    let (n1, n2) = (t1.len(), t2.len());
    let mut p = Pairing::new(n1, n2);
    let mut sc = StrategyCounts::default();
    let [off1, off2] = opts.layer_offset;

    if !opts.overrides.is_empty() {
        sc.overridden = p.pass(
            Strategy::Override,
            |r| opts.overrides.get(t1.key(r)),
            |r| Some(t2.key(r)),
        );
    }
    sc.exact = if off1 == 0 && off2 == 0 {
        // The common case: the exact key is the key without its root
        // class, the key the tables' key indexes are sorted by.
        fn exact(t: &OpTable, r: usize) -> &[u8] {
            keys::strip_root_class(t.key(r))
        }
        let (index1, index2) = indexes;
        p.pass_by_index(&index1, &index2, |r1, r2| exact(t1, r1) == exact(t2, r2))
    } else {
        drop(indexes);
        p.pass(
            Strategy::Exact,
            |r| {
                Some(keys::with_layer_offset(
                    keys::strip_root_class(t1.key(r)),
                    off1,
                ))
            },
            |r| {
                Some(keys::with_layer_offset(
                    keys::strip_root_class(t2.key(r)),
                    off2,
                ))
            },
        )
    };
    // Fuzzy keys only for the rows the exact pass left unpaired (usually few).
    let unpaired_fuzzy = |t: &OpTable, pair: &[u32], off: i64| -> AHashMap<u32, Vec<u8>> {
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
    let fuzzy1 = unpaired_fuzzy(t1, &p.pair1, off1);
    let fuzzy2 = unpaired_fuzzy(t2, &p.pair2, off2);
    fn fz(m: &AHashMap<u32, Vec<u8>>, r: usize) -> Option<&[u8]> {
        m.get(&(r as u32)).map(|v| v.as_slice())
    }
    if opts.shape_tie_break {
        // Among fuzzy-equal candidates, prefer one with the same Shape text.
        sc.fuzzy = p.pass(
            Strategy::Fuzzy,
            |r| fz(&fuzzy1, r).map(|f| (f, t1.field(r, Field::Shape))),
            |r| fz(&fuzzy2, r).map(|f| (f, t2.field(r, Field::Shape))),
        );
    }
    sc.fuzzy += p.pass(Strategy::Fuzzy, |r| fz(&fuzzy1, r), |r| fz(&fuzzy2, r));
    let stats_key = |t: &'_ OpTable, m: &AHashMap<u32, Vec<u8>>, r: usize| {
        fz(m, r).map(|f| {
            (
                keys::op_type(f).to_vec(),
                t.field(r, Field::Shape).to_vec(),
                t.field(r, Field::OutputHash).to_vec(),
            )
        })
    };
    sc.stats = p.pass(
        Strategy::Stats,
        |r| stats_key(t1, &fuzzy1, r),
        |r| stats_key(t2, &fuzzy2, r),
    );

    // Judge rows in parallel; order is kept by the indexed collect. A field
    // that one log never records is not compared (old writers, cases/07).
    let compared = t1.schema().intersect(t2.schema());
    let policy = &opts.policy;
    // Without rules or per-dtype defaults a row's settings depend on its op
    // alone: look them up once per op type of each table.
    let op_only = policy.rules.is_empty() && policy.dtype.is_empty();
    let by_op = |t: &OpTable| -> Vec<RowPolicy> {
        if !op_only {
            return Vec::new();
        }
        (0..t.op_types() as u32)
            .map(|id| policy.for_row(&[], t.op_name(id), crate::parser::Phase::Forward, ""))
            .collect()
    };
    let (by_op1, by_op2) = (by_op(t1), by_op(t2));
    let judge = |t: &OpTable, r: usize, by_op: &[RowPolicy]| match by_op.get(t.op_type(r) as usize)
    {
        Some(rp) if op_only => *rp,
        _ => policy.for_table_row(t, r),
    };
    let flags_of = |rp: &RowPolicy| {
        (if rp.ignored { ROW_IGNORED } else { 0 }) | (if rp.unsynced { ROW_UNSYNCED } else { 0 })
    };
    let mut rows: Vec<MatchRow> = (0..n1)
        .into_par_iter()
        .with_min_len(4096)
        .map(|r1| {
            let nonfinite1 = if compare::non_finite(t1, r1) {
                ROW_NONFINITE1
            } else {
                0
            };
            let r2 = p.pair1[r1];
            if r2 == NO_ROW {
                let rp = judge(t1, r1, &by_op1);
                let flags = flags_of(&rp) | nonfinite1;
                return MatchRow {
                    row1: r1 as u32,
                    row2: NO_ROW,
                    status: Status::Only1,
                    strategy: Strategy::None,
                    flags,
                    source: rp.source,
                };
            }
            let r2u = r2 as usize;
            // `for_pair` is run 1's row's settings unless per-dtype
            // defaults apply.
            let rp = if op_only {
                judge(t1, r1, &by_op1)
            } else {
                policy.for_pair(t1, r1, t2, r2u)
            };
            let mut flags = flags_of(&rp) | nonfinite1;
            if compare::non_finite(t2, r2u) {
                flags |= ROW_NONFINITE2;
            }
            let v = compare::judge_pair(t1, r1, t2, r2u, &rp.opts, compared);
            if v.output_differs {
                flags |= ROW_OUT_DIFF;
            }
            if v.shape_text_differs {
                flags |= ROW_SHAPE_TEXT_DIFF;
            }
            let status = if t1.is_truncated(r1) || t2.is_truncated(r2u) {
                Status::Truncated
            } else if v.output_missing {
                Status::Missing
            } else if v.agrees {
                Status::Match
            } else {
                Status::Diff
            };
            MatchRow {
                row1: r1 as u32,
                row2: r2,
                status,
                strategy: p.strat1[r1],
                flags,
                source: rp.source,
            }
        })
        .collect();
    rows.extend((0..n2).filter(|r| p.pair2[*r] == NO_ROW).map(|r2| {
        let rp = judge(t2, r2, &by_op2);
        let mut flags = flags_of(&rp);
        if compare::non_finite(t2, r2) {
            flags |= ROW_NONFINITE2;
        }
        MatchRow {
            row1: NO_ROW,
            row2: r2 as u32,
            status: Status::Only2,
            strategy: Strategy::None,
            flags,
            source: rp.source,
        }
    }));
    let mut counts = Counts::default();
    let mut rule_hits = vec![0u64; policy.rules.len()];
    for r in &rows {
        counts.add_row(r);
        if let Source::Rule(i) = r.source {
            rule_hits[i as usize] += 1;
        }
    }
    let mut unused = Vec::new();
    if !opts.overrides.is_empty() {
        let used: ahash::AHashSet<&[u8]> = (0..n1)
            .filter(|r| p.strat1[*r] == Strategy::Override)
            .map(|r| t1.key(r))
            .collect();
        for (k, v) in opts.overrides.pairs() {
            if !used.contains(k) {
                unused.push((
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                ));
            }
        }
    }
    let mut m = MatchTable {
        rows,
        counts,
        strategies: sc,
        unused_overrides: unused,
        rule_hits,
        cause_kinds: Vec::new(),
        causes: Default::default(),
        policy: opts.policy.clone(),
        compared,
    };
    // Root cause reads each row's settings from the same resolution as its
    // verdict (run 1's row's settings, or the pair's per-dtype default).
    let opts_of = |i: usize| m.row_policy(t1, t2, i).opts;
    let (kinds, causes) = cause::analyse(t1, t2, &m, &opts_of);
    m.cause_kinds = kinds;
    m.causes = causes;
    m
}

#[cfg(test)]
mod tests;

//! The matcher stage: two [`OpTable`]s of one rank in, a [`MatchTable`] out.
//!
//! Rows are paired in the reference comparator's four passes (override,
//! exact key, fuzzy key, stats; `shared/spec/matching.md`), each a hash-index
//! lookup, never a scan: within a pass, side 1 is walked in file order and
//! each unpaired row takes the first unclaimed side-2 row with an equal pass
//! key. Each pair then gets a [`Status`] in `judge` (`pair_status`: truncated,
//! missing, or match/diff from [`compare::judge_values`], the values' verdict).
//!
//! actdiff adds three rules the reference lacks, none of which changes a
//! golden row: the stats pass's second round pairs an in-place op with its
//! functional form (`mul_` with `mul`, same Shape and Output hash:
//! `passes::pass_stats`); where both logs record phases, the exact, fuzzy and stats
//! passes never pair a backward row with a forward one (`passes::PhaseRule`;
//! a row of unknown phase pairs as in the reference); and with the Shape
//! tie-break ([`MatchOptions::shape_tie_break`]), exact pairs that op-counter
//! drift made (differing Shapes, each side with a same-Shape candidate of
//! the same fuzzy key) are left to the fuzzy pass, the rows of modules
//! whose row counts differ (a loop one run ran fewer times) are re-paired
//! by their dataflow ([`lineage`]), and after judging, ops
//! of one fuzzy key, phase and Shape that the passes paired in the wrong
//! order (a compiler's reordering) are re-paired by value where that makes
//! more pairs agree ([`repair`]).
//!
//! [`match_tables_indexed`] runs the steps in order, each in the module
//! that owns it:
//!
//! ```text
//! OpTable ×2 ─ passes.rs: pass_override → pass_exact (→ release_drifted_pairs)
//!                          → pass_fuzzy → pass_stats
//!              (→ lineage.rs: repair_by_lineage) ────────────────────────────────▶ Pairing
//! Pairing ──── judge.rs: judge_rows (status, flags, tolerance source)
//!              (→ repair.rs: repair_swapped_pairs)
//!              → recompute.rs: mark_recomputed, tally ───────────────────────────▶ [MatchRow]
//! [MatchRow] ─ cause/: analyse (inputs → producers → classify → tally) ──────▶ MatchTable
//! ```
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
mod judge;
pub mod keys;
pub mod lineage;
mod names;
pub mod notes;
pub mod overrides;
mod passes;
pub mod policy;
pub mod recompute;
pub mod repair;

use crate::parser::{Field, OpTable};
pub use compare::{CompareOptions, Tolerance};
pub use overrides::Overrides;
use passes::Pairing;
pub use policy::{Policy, RowPolicy, Source};

/// Marker for "no row".
pub const NO_ROW: u32 = u32::MAX;

/// The verdict on one result row. Its name ([`Status::as_str`]) is what
/// JSON (serde), Parquet, JUnit, the pages and the terminal write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
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
    /// Every status, in declaration order (the Parquet `status` column's
    /// dictionary order).
    pub const ALL: [Status; 6] = [
        Status::Match,
        Status::Diff,
        Status::Only1,
        Status::Only2,
        Status::Truncated,
        Status::Missing,
    ];
    /// The name used in JSON and the report: the one place it is spelled.
    pub const fn as_str(self) -> &'static str {
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

/// Which pass paired a row. Its name ([`Strategy::as_str`], `null` when
/// unpaired) is what JSON (serde), Parquet and the pages write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(into = "Option<&'static str>", try_from = "Option<String>")]
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
    /// Every pass, in pass order (the Parquet `pass` column's dictionary
    /// order); not [`Strategy::None`].
    pub const PASSES: [Strategy; 4] = [
        Strategy::Override,
        Strategy::Exact,
        Strategy::Fuzzy,
        Strategy::Stats,
    ];
    /// The name used in JSON (`null` for [`Strategy::None`]): the one place
    /// it is spelled.
    pub const fn as_str(self) -> Option<&'static str> {
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
pub const ROW_IGNORED: u16 = 1;
/// Row flag: output of an asynchronous collective captured before it completed.
pub const ROW_UNSYNCED: u16 = 2;
/// Row flag: run 1's stats or Output hash hold NaN or Inf.
pub const ROW_NONFINITE1: u16 = 4;
/// Row flag: run 2's stats or Output hash hold NaN or Inf.
pub const ROW_NONFINITE2: u16 = 8;
/// Row flag: the output itself differs (Shape text or Output hash beyond tolerance).
pub const ROW_OUT_DIFF: u16 = 16;
/// Row flag: a pair whose Shape texts differ (both present), whether or not
/// Shape is compared.
pub const ROW_SHAPE_TEXT_DIFF: u16 = 32;

/// Row flag: both rows have digests and they are all equal: bitwise identical.
pub const ROW_BITWISE: u16 = 64;
/// Row flag: the digests differ while every printed value agrees (a `diff`
/// only the digests show).
pub const ROW_DIGEST_ONLY: u16 = 128;
/// Row flag: a pair whose printed values ([`crate::parser::Field::PRINTED`]:
/// Shape, L2 norm, Min, Max, Mean, Output hash, Input hashes) are the same
/// text on both sides, each present on both or on neither. Its relative
/// differences are all 0 without reading a number (`--rows`).
pub const ROW_SAME_TEXT: u16 = 256;
/// Row flag: a row of one run only (`only1` or `only2`) that the other
/// run's compiled code left unrecorded ([`compiled_away`]): an op its
/// compiler fused away, or at `level=modules` a module output its compiled
/// forward ran without hooks. Shown, never gating, never a cause.
pub const ROW_FUSED: u16 = 512;
/// Row flag: a row of one run only that repeats a forward op of its run in
/// the backward phase: activation checkpointing's recomputation, in that
/// run only ([`recompute`]). Shown, never gating, never a cause.
pub const ROW_RECOMPUTED: u16 = 1024;
/// Row flag: a `diff` or `match` pair whose Output hash agrees while its
/// output's printed statistics (L1/L2 norm, min, max, mean) differ beyond
/// the row's tolerance: the hash cannot see the change (a softmax's L1
/// norm is its row count whatever its values; an Adam moment's mean moved
/// by 1e-6 where its hash moved by less than 1e-8). Root cause reads such
/// a row's output as differing ([`cause`]); the status is the reference's.
pub const ROW_STATS_DIFF: u16 = 2048;

/// Which one-sided rows of a run the other run's compiled code can leave
/// unrecorded ([`compiled_away`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompiledAway {
    /// None: every one-sided row is a divergence.
    Nothing,
    /// Every op: the other run's compiler fuses ops into generated kernels
    /// that dispatch none (per-op level).
    Ops,
    /// Module outputs (op `output`): the other run is a module-level
    /// capture whose forward ran compiled, where module hooks do not run
    /// (any backend): the outputs of the modules its `Compiled modules:`
    /// line names and of the modules inside them
    /// ([`compiled_module_output`]), or of any module without that line.
    /// Its gradients and parameters are recorded.
    ModuleOutputs,
}

/// Which one-sided rows of `this` table's run can be missing from the run
/// of `other` because of `other`'s compiled code: at `level=modules`, module
/// outputs when `other`'s header says `Compiled:` (any backend); at the op
/// level, every op when `other`'s header names a backend that fuses and
/// `this` one's does not name the same one.
pub fn compiled_away(this: &OpTable, other: &OpTable) -> CompiledAway {
    let h = other.header();
    match &h.compiled {
        Some(_) if h.level == crate::logformat::CaptureLevel::Modules => {
            CompiledAway::ModuleOutputs
        }
        Some(b) if b.fuses() && this.header().compiled.as_ref() != Some(b) => CompiledAway::Ops,
        _ => CompiledAway::Nothing,
    }
}

/// Whether row `r` of `this` table is a module output (`{fqn}/op_N_output`)
/// of a module that ran compiled in the run of `other` (a module-level
/// log with a `Compiled:` line): its module is one that `other`'s
/// `Compiled modules:` line names or lies inside one (`<none>`: every
/// module), or that line is absent.
pub fn compiled_module_output(this: &OpTable, r: usize, other: &OpTable) -> bool {
    if this.op_name(this.op_type(r)) != MODULE_OUTPUT_OP {
        return false;
    }
    let Some(compiled) = &other.header().compiled_modules else {
        return true;
    };
    let (module, _) = crate::parser::key::module_and_op(this.key(r));
    compiled.iter().any(|c| {
        let c = c.as_bytes();
        c == crate::logformat::ROOT_MODULE.as_bytes()
            || module == c
            || (module.len() > c.len() && module.starts_with(c) && module[c.len()] == b'.')
    })
}

/// The op name of a module-level capture's forward-output records
/// (`{fqn}/op_N_output`; python/actdiff_capture/modules.py).
pub const MODULE_OUTPUT_OP: &[u8] = b"output";

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
    pub flags: u16,
    /// Where the row's tolerance came from.
    pub source: Source,
}

impl MatchRow {
    /// Whether the row counts against the exit status: a divergence
    /// (`diff`, `missing`, `only1` or `only2`) that is neither ignored, nor
    /// an unsynced collective, nor an op the other run's compiler fused away,
    /// nor a recomputation of activation checkpointing in one run only.
    pub fn gates(&self) -> bool {
        self.status.is_divergence()
            && self.flags & (ROW_IGNORED | ROW_UNSYNCED | ROW_FUSED | ROW_RECOMPUTED) == 0
    }
    /// Whether a `ROW_*` flag is set.
    pub fn has(&self, flag: u16) -> bool {
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
    /// Side `side`'s (0: run 1, 1: run 2) table row when the row is of
    /// that run only (`only1`, `only2`), else `None`.
    pub fn only_in(&self, side: usize) -> Option<usize> {
        match (self.sides(), side) {
            (Sides::Only1(r), 0) | (Sides::Only2(r), 1) => Some(r),
            _ => None,
        }
    }
    /// The row's sides: a pair, or a row of one run only. The matcher
    /// never builds a row with neither side; such a row (built by hand)
    /// reads as [`Sides::Only2`] of [`NO_ROW`].
    pub fn sides(&self) -> Sides {
        if self.row1 == NO_ROW {
            Sides::Only2(self.row2 as usize)
        } else if self.row2 == NO_ROW {
            Sides::Only1(self.row1 as usize)
        } else {
            Sides::Both(self.row1 as usize, self.row2 as usize)
        }
    }
}

/// The sides of a result row ([`MatchRow::sides`]): row indexes in run 1's
/// and run 2's tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sides {
    /// A pair: run 1's row, run 2's row.
    Both(usize, usize),
    /// A row of run 1 only (`only1`).
    Only1(usize),
    /// A row of run 2 only (`only2`).
    Only2(usize),
}

impl Sides {
    /// The row shown for the result row: run 1's (side 0) when there is
    /// one, else run 2's (side 1), as `(side, row)`.
    pub fn first(self) -> (usize, usize) {
        match self {
            Sides::Both(a, _) | Sides::Only1(a) => (0, a),
            Sides::Only2(b) => (1, b),
        }
    }
}

/// Result rows per status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// Rows of one run only (`only1`, `only2`) not gating because the
    /// other run's compiler fused their op away ([`ROW_FUSED`]).
    #[serde(default)]
    pub fused: u64,
    /// Rows of one run only not gating because they are that run's
    /// activation checkpointing recomputation ([`ROW_RECOMPUTED`]).
    #[serde(default)]
    pub recomputed: u64,
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
            } else if r.has(ROW_FUSED) {
                self.fused += 1;
            } else if r.has(ROW_RECOMPUTED) {
                self.recomputed += 1;
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
        self.fused += o.fused;
        self.recomputed += o.recomputed;
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// the first one (backward counter drift, cases/06), and first undo
    /// the exact pairs whose Shapes differ while each side has a
    /// same-Shape candidate of the same fuzzy key (counters shifted by
    /// ops of one run only). On by default; it changes no golden row. Off
    /// (`--no-shape-tie-break`) is the reference's first-candidate rule
    /// exactly (the phase rule still applies). With it, too, the groups of
    /// pairs of one fuzzy key, phase and Shape that hold a `diff` are
    /// re-paired by value where that makes more pairs agree
    /// ([`repair`]: ops a compiler reordered).
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
    /// Rows judged by each rule of the policy, by rule index, then by each
    /// per-dtype default a config wrote ([`Policy::dtype_origins`]).
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
    /// Whether every pair of the exact pass ([`Strategy::Exact`]) has
    /// byte-equal raw keys, known without reading them: no layer offset,
    /// and every key of both tables has the same root class
    /// ([`OpTable::root_class`]). `--rows` reads only run 1's key of such
    /// a pair.
    pub exact_keys_equal: bool,
    /// The result rows (run-1 rows, by index) whose pair the value
    /// re-pairing made ([`repair`]), sorted; empty without it.
    pub repaired: Vec<u32>,
    /// The result rows (run-1 rows, by index) whose pair the lineage
    /// re-pairing made ([`lineage`]: a module whose op counters drifted),
    /// sorted; empty without it.
    pub relinked: Vec<u32>,
    /// The runs whose one-sided rows are activation checkpointing's
    /// recomputation ([`ROW_RECOMPUTED`]), at most one entry per run.
    pub recomputed: Vec<recompute::Recomputed>,
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
    /// When both logs have digests: (paired rows bitwise identical, paired
    /// rows with digests on both sides); `None` without digests.
    pub fn bitwise_counts(&self, t1: &OpTable, t2: &OpTable) -> Option<(u64, u64)> {
        if !t1.has_digests() || !t2.has_digests() {
            return None;
        }
        let same = self.rows.iter().filter(|r| r.has(ROW_BITWISE)).count() as u64;
        let with = self
            .rows
            .iter()
            .filter(|r| match r.sides() {
                Sides::Both(a, b) => {
                    t1.has(a, Field::OutputDigest) && t2.has(b, Field::OutputDigest)
                }
                Sides::Only1(_) | Sides::Only2(_) => false,
            })
            .count() as u64;
        Some((same, with))
    }
    /// Index of the first row that gates (see [`MatchRow::gates`]): the
    /// first divergence, in result order (run-1 dispatch order, then the
    /// run-2-only rows).
    pub fn first_divergence(&self) -> Option<usize> {
        self.rows.iter().position(|r| r.gates())
    }
    /// Index of the first diverging row that does not gate (an unsynced
    /// collective, an ignored op or an op fused away), in result order.
    pub fn first_nongating(&self) -> Option<usize> {
        self.rows
            .iter()
            .position(|r| r.status.is_divergence() && !r.gates())
    }
    /// The settings that judged result row `i` ([`Policy::for_sides`]: for
    /// a pair, run 1's row's, or run 2's dtype's per-dtype default when the
    /// dtypes differ and no rule judged run 1's row ([`Policy::for_pair`]);
    /// for a one-sided row, its side's row's). The verdict
    /// resolves them the same way; root cause and row notes read them from
    /// here.
    pub fn row_policy(&self, t1: &OpTable, t2: &OpTable, i: usize) -> RowPolicy {
        self.policy.for_sides(t1, t2, self.rows[i].sides())
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
                && match r.sides() {
                    Sides::Both(a, _) | Sides::Only1(a) => t1.phase_kind(a) == phase,
                    Sides::Only2(b) => t2.phase_kind(b) == phase,
                }
        })
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
    // Pairing: the four passes, in order.
    let mut p = Pairing::new(t1.len(), t2.len());
    let overridden = passes::pass_override(&mut p, t1, t2, &opts.overrides);
    if opts.shape_tie_break {
        recompute::hold_one_sided_repeats(&mut p, t1, t2);
    }
    let (mut exact, odd) = passes::pass_exact(&mut p, t1, t2, opts.layer_offset, indexes);
    if opts.shape_tie_break {
        exact -= passes::release_drifted_pairs(&mut p, t1, t2, opts.layer_offset, odd);
        exact -= passes::release_input_drifted_pairs(&mut p, t1, t2, opts.layer_offset);
    }
    let fuzzy_keys = passes::FuzzyKeys::of_unpaired(&p, t1, t2, opts.layer_offset);
    let fuzzy = passes::pass_fuzzy(&mut p, t1, t2, &fuzzy_keys, opts.shape_tie_break);
    let stats = passes::pass_stats(&mut p, t1, t2, &fuzzy_keys);
    drop(fuzzy_keys);
    let relinked = if opts.shape_tie_break {
        lineage::repair_by_lineage(&mut p, t1, t2)
    } else {
        Vec::new()
    };
    p.release_held();
    let mut strategies = StrategyCounts {
        overridden,
        exact,
        fuzzy,
        stats,
    };
    if !relinked.is_empty() {
        let n = |s: Strategy| p.strat1.iter().filter(|&&x| x == s).count() as u64;
        strategies = StrategyCounts {
            overridden: n(Strategy::Override),
            exact: n(Strategy::Exact),
            fuzzy: n(Strategy::Fuzzy),
            stats: n(Strategy::Stats),
        };
    }
    let unused_overrides = passes::unused_overrides(&p, t1, &opts.overrides);

    // Judging. A field that one log never records is not compared (old
    // writers, cases/07).
    let compared = t1.schema().intersect(t2.schema());
    let policy = opts.policy.for_rank(t1, t2);
    let judge = judge::Judge::new(t1, t2, &policy, compared);
    let mut rows = judge::judge_rows(&judge, &p);
    let mut repaired = Vec::new();
    if opts.shape_tie_break {
        let r =
            repair::repair_swapped_pairs(&mut p, &mut rows, &judge, [t1, t2], opts.layer_offset);
        strategies.exact -= r.from_exact;
        strategies.stats -= r.from_stats;
        strategies.fuzzy += r.from_exact + r.from_stats;
        repaired = r.rows;
    }
    drop((judge, p));
    judge::mark_fused_results(&mut rows, t1, t2, &policy);
    let recomputed = recompute::mark_recomputed(&mut rows, t1, t2);
    let (counts, rule_hits) = judge::tally(&rows, &policy);

    // Root cause, with each row's settings resolved as for its verdict.
    let opts_of = |i: usize| policy.for_sides(t1, t2, rows[i].sides()).opts;
    let (cause_kinds, causes) = cause::analyse(t1, t2, &rows, &counts, compared, &opts_of);

    MatchTable {
        rows,
        counts,
        strategies,
        unused_overrides,
        rule_hits,
        cause_kinds,
        causes,
        policy,
        compared,
        exact_keys_equal: passes::exact_pairs_have_equal_keys(t1, t2, opts.layer_offset),
        repaired,
        relinked,
        recomputed,
    }
}

#[cfg(test)]
mod tests;

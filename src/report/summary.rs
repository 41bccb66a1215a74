//! `summary.json`: per rank, entries per side, counts per status and pass,
//! the first diverging row, coverage, excluded ops and input warnings.
//! The schema is documented in `docs/json-schema.md`.

use serde::{Deserialize, Serialize};

use super::messages::{Message, UnreadableValue};
use super::{files, PagePlan, RankComparison};
use crate::matcher::cause::CauseEntry;
#[cfg(doc)]
use crate::matcher::cause::RootCauses;
use crate::matcher::{
    Counts, MatchRow, Status, Strategy, StrategyCounts, ROW_NONFINITE1, ROW_NONFINITE2,
};
use crate::parser::{duplicate_keys, Field, OpTable, Phase, WarningKind};

mod verdict;
pub use verdict::{
    collective_words, rank_ranges, rank_word, see_rank_word, RankGroup, Verdict,
    GROUPED_ABOVE_RANKS, SEE_RANKS_MAX,
};

/// Version of the `summary.json` layout; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// A pointer to one result row.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RowRef {
    /// 0-based index in the rank's result rows.
    pub index: usize,
    /// Run 1's raw key, if the row has a run-1 side.
    pub key1: Option<String>,
    /// Run 2's raw key, if the row has a run-2 side.
    pub key2: Option<String>,
    /// The row's status.
    pub status: Status,
    /// The pass that paired it (`null` when unpaired).
    pub strategy: Strategy,
    /// 1-based line of the block in run 1's log.
    pub line1: Option<u64>,
    /// 1-based line of the block in run 2's log.
    pub line2: Option<u64>,
    /// Phase of the row (run 1's, else run 2's).
    pub phase: String,
    /// Report page holding the row, relative to the report folder (empty
    /// when the pages hold only diverging rows and this one matches).
    pub page: String,
    /// The row's anchor on that page (`rank0-row12`).
    pub anchor: String,
    /// The parameters an optimizer-step op reads or writes, from its
    /// `Parameters:` line (run 1's side, else run 2's), `, `-joined FQNs;
    /// absent for a row without the line (the capture agent writes it for
    /// the ops inside `optimizer.step()`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub parameters: Option<String>,
    /// Of `parameters`, those whose outputs differ between the runs, when
    /// that is fewer than all (a foreach or fused op's list of which one
    /// parameter's update changed): its `Output parameters:` line's
    /// entries at the Output hash values that differ under the row's
    /// tolerance, `, `-joined; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub parameters_changed: Option<String>,
    /// A `diff` pair whose outputs agree under its tolerance (Shape,
    /// Output hash and statistics) while an input differs: a backward op
    /// passed a tensor it does not read in training (BatchNorm's running
    /// statistics, trial 24 F4) differs so. False when the two Output
    /// digests differ (the output is another tensor). Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub only_inputs_differ: bool,
    /// The block's `Location:` line (run 1's side, else run 2's): the
    /// source line that called the op (`train.py:164`); absent without
    /// one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub location: Option<String>,
    /// The block's `Input parameters:` line (run 1's side, else run 2's):
    /// the parameter FQN at each input, `;`-separated, empty entries where
    /// an input is none; absent without the line (the capture agent
    /// writes it for ops outside the optimizer step that read one).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub input_parameters: Option<String>,
    /// A pair whose Output hash lists have different lengths: how many
    /// output tensors each run's op or module returned (`[2, 1]`: HF's
    /// eager attention returns its weights too, sdpa returns `None`);
    /// absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output_tensors: Option<[u32; 2]>,
    /// A `diff` pair that would agree if NaN equalled NaN: its values are
    /// NaN in both runs, which `--nan-is-diff` counts as a difference, and
    /// nothing else differs (trial 65 F1). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nan_against_nan: bool,
    /// For a pair: the inputs whose producer is a captured op in one run
    /// and none in the other (`Input producers` entries, empty on one
    /// side), as `(input, run 1's producer key, run 2's)`, "" where none,
    /// in input order: an op that read another buffer, or a stale one
    /// (trial 69 F1: an `out=` op that wrote another buffer). Omitted when
    /// none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub producers_one_sided: Vec<(usize, String, String)>,
    /// For a pair whose Shape dims differ: each run's dims (`[64, 32]`,
    /// `[2048]`): a tensor held in another layout in one run (a parameter
    /// FSDP1 flattens, FSDP2 or tensor parallelism shards, trial 71), or
    /// another batch or sequence length. Omitted otherwise (a dtype alone
    /// that differs is [`DtypeChanges`]').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shapes: Option<[String; 2]>,
}

impl RowRef {
    /// Describes row `index` of `rc`.
    pub fn new(rc: &RankComparison<'_>, index: usize, plan: &PagePlan) -> RowRef {
        let r: &MatchRow = &rc.matches.rows[index];
        // The side whose block describes the row: run 1's, else run 2's.
        let (t, row) = match r.sides().first() {
            (0, i) => (rc.t1, i),
            (_, j) => (rc.t2, j),
        };
        let text = |s: String| Some(s).filter(|s| !s.is_empty());
        RowRef {
            index,
            key1: r.r1().map(|i| rc.t1.key_str(i).into_owned()),
            key2: r.r2().map(|i| rc.t2.key_str(i).into_owned()),
            status: r.status,
            strategy: r.strategy,
            line1: r.r1().map(|i| rc.t1.line(i)),
            line2: r.r2().map(|i| rc.t2.line(i)),
            phase: t.phase(row).into_owned(),
            page: plan
                .page_of(index)
                .map(|p| files::page(rc.rank1, p))
                .unwrap_or_default(),
            anchor: files::anchor(rc.rank1, index),
            parameters: text(t.parameters(row).into_owned()),
            parameters_changed: changed_parameters(rc, index),
            only_inputs_differ: r.status == crate::matcher::Status::Diff
                && !r.has(crate::matcher::ROW_OUT_DIFF)
                && !r.has(crate::matcher::ROW_STATS_DIFF)
                && !r.has(crate::matcher::ROW_DIGEST_ONLY)
                && !output_digests_differ(rc, r),
            location: text(
                String::from_utf8_lossy(t.trailing_field(row, crate::parser::Field::Location))
                    .into_owned(),
            ),
            input_parameters: text(t.input_parameters(row).into_owned()),
            output_tensors: output_tensors(rc, r),
            nan_against_nan: nan_against_nan(rc, index),
            producers_one_sided: producers_one_sided(rc, r),
            shapes: shapes(rc, r),
        }
    }
    /// "; it returned 2 output tensors in A and 1 in B" for a pair whose
    /// output counts differ ([`RowRef::output_tensors`]), else empty.
    pub fn output_tensors_words(&self, name1: &str, name2: &str) -> String {
        match self.output_tensors {
            Some([a, b]) => format!(
                "; it returned {a} output tensor{} in {name1} and {b} in {name2}",
                if a == 1 { "" } else { "s" }
            ),
            None => String::new(),
        }
    }
    /// `; input 0 is the output of `m/op_3_div` in A and of no captured op
    /// in B` for each of `inputs` (the differing ones) whose producer is
    /// captured in one run only ([`RowRef::producers_one_sided`]), else
    /// empty.
    pub fn producers_words(&self, inputs: &[usize], name1: &str, name2: &str) -> String {
        let mut w = String::new();
        for (i, p1, p2) in &self.producers_one_sided {
            if !inputs.contains(i) {
                continue;
            }
            let (key, with, without) = if p1.is_empty() {
                (p2, name2, name1)
            } else {
                (p1, name1, name2)
            };
            w.push_str(&format!(
                "; input {i} is the output of `{key}` in {with} and of no captured op in {without} (another tensor read, such as a buffer an `out=` op did not write)"
            ));
        }
        w
    }
    /// `, at LOCATION` for a row with a `Location:` line
    /// ([`RowRef::location`]), else empty: said after a cause's log line.
    pub fn at_location(&self) -> String {
        self.location
            .as_deref()
            .map(|l| format!(", at {l}"))
            .unwrap_or_default()
    }
    /// The key to show: run 1's, else run 2's.
    pub fn key(&self) -> &str {
        self.key1.as_deref().or(self.key2.as_deref()).unwrap_or("")
    }
    /// The key in the numbering of the run a one-sided row of `status`
    /// belongs to: run 2's beside an `only2` row (its ops are numbered in
    /// run 2's log, where an extra op shifts the numbers: trial 21 named
    /// "`blocks.1/op_30_mul` (an op only in bug2, feeding
    /// `blocks.1/op_30_mul`)", bug2's extra op and run 1's key of the row
    /// it feeds), else [`RowRef::key`].
    pub fn key_beside(&self, status: crate::matcher::Status) -> &str {
        match (status, self.key2.as_deref()) {
            (crate::matcher::Status::Only2, Some(k)) => k,
            _ => self.key(),
        }
    }
    /// The log line of [`RowRef::key_beside`]'s row.
    pub fn line_beside(&self, status: crate::matcher::Status) -> Option<u64> {
        self.place_beside(status).map(|(_, line)| line)
    }
    /// The run (1 or 2) and log line of [`RowRef::key_beside`]'s row.
    pub fn place_beside(&self, status: crate::matcher::Status) -> Option<(u8, u64)> {
        match (status, self.line1, self.line2) {
            (crate::matcher::Status::Only2, _, Some(l)) | (_, None, Some(l)) => Some((2, l)),
            (_, Some(l), _) => Some((1, l)),
            (_, None, None) => None,
        }
    }
    /// The row's parameters in words, `parameter 2.weight` or
    /// `parameters 2.weight, 2.bias` (at most [`PARAMETERS_SHOWN`] names,
    /// then `and N more`), or those whose outputs differ when fewer
    /// (`parameter l1.bias, 1 of the op's 6`); `None` without a
    /// `Parameters:` line.
    pub fn parameter_words(&self) -> Option<String> {
        let p = self.parameters.as_deref()?;
        let all: Vec<&str> = p.split(", ").collect();
        Some(match self.parameters_changed.as_deref() {
            Some(c) => {
                let changed: Vec<&str> = c.split(", ").collect();
                format!(
                    "{}, {} of the op's {}",
                    parameter_words(&changed),
                    changed.len(),
                    all.len()
                )
            }
            None => parameter_words(&all),
        })
    }
    /// For an in-place op (its name ends with `_`) whose first input is a
    /// parameter ([`RowRef::input_parameters`]): that parameter's FQN.
    pub fn in_place_parameter(&self) -> Option<&str> {
        if !self.op().ends_with(b"_") {
            return None;
        }
        let first = self.input_parameters.as_deref()?.split(';').next()?.trim();
        (!first.is_empty()).then_some(first)
    }
    /// "its shape differs (`[64, 32] → [2048]`: ...)" for a pair
    /// whose dims differ ([`RowRef::shapes`]), else `None`.
    pub fn shape_words(&self) -> Option<String> {
        let [a, b] = self.shapes.as_ref()?;
        Some(format!(
            "its shape differs ({a} → {b}: a tensor held in another layout in one run, flattened or sharded by FSDP or tensor parallelism, or another batch or sequence length)"
        ))
    }
    /// Whether the row's op draws random numbers
    /// ([`crate::matcher::recompute::is_random_op`]: dropout, bernoulli,
    /// rand, normal, ...).
    pub fn is_random_op(&self) -> bool {
        crate::matcher::recompute::is_random_op(self.op())
    }
    /// The op name of the row's key (`mm` of `layers.0/op_3_mm`, as
    /// [`crate::parser::key::module_and_op`] splits it; empty for a key
    /// without an `/op_<n>_` segment).
    pub fn op(&self) -> &[u8] {
        crate::parser::key::module_and_op(self.key().as_bytes()).1
    }
    /// The parameters to name for this row: those whose outputs differ
    /// when known, else all of its `Parameters:` line.
    pub fn named_parameters(&self) -> Option<&str> {
        self.parameters_changed
            .as_deref()
            .or(self.parameters.as_deref())
    }
}

/// Pair `r`'s Output hash counts, when they differ (trial 28: a module
/// returning one tensor more in one run was said to differ by a relative
/// 1.0, with no word of why).
fn output_tensors(rc: &RankComparison<'_>, r: &MatchRow) -> Option<[u32; 2]> {
    use crate::parser::{value::split_tokens, Field::OutputHash};
    let (a, b) = (r.r1()?, r.r2()?);
    let n = |t: &OpTable, i: usize| split_tokens(t.field(i, OutputHash)).count() as u32;
    let counts = [n(rc.t1, a), n(rc.t2, b)];
    (counts[0] != counts[1] && counts[0] > 0 && counts[1] > 0).then_some(counts)
}

/// At `level=modules`, the run-1 row of the first divergence when it is a
/// pair; `None` for a per-op log, no divergence or a one-sided one.
fn modules_first_pair(rc: &RankComparison<'_>) -> Option<usize> {
    if rc.t1.header().level != crate::logformat::CaptureLevel::Modules {
        return None;
    }
    match rc.matches.rows[rc.matches.first_divergence()?].sides() {
        crate::matcher::Sides::Both(a, _) => Some(a),
        _ => None,
    }
}

/// [`RowRef::producers_one_sided`] of result row `r`.
fn producers_one_sided(rc: &RankComparison<'_>, r: &MatchRow) -> Vec<(usize, String, String)> {
    let (Some(a), Some(b)) = (r.r1(), r.r2()) else {
        return Vec::new();
    };
    let keys = |t: &OpTable, i: usize| -> Vec<String> {
        let f = t.field(i, Field::InputProducers);
        if f.is_empty() {
            return Vec::new();
        }
        f.split(|c| *c == b';')
            .map(|k| String::from_utf8_lossy(crate::parser::trim(k)).into_owned())
            .collect()
    };
    let (k1, k2) = (keys(rc.t1, a), keys(rc.t2, b));
    if k1.len() != k2.len() {
        return Vec::new();
    }
    k1.into_iter()
        .zip(k2)
        .enumerate()
        .filter(|(_, (x, y))| x.is_empty() != y.is_empty())
        .map(|(i, (x, y))| (i, x, y))
        .collect()
}

/// [`RankSummary::first_divergence_buffer`]. One pass over a
/// module-level rank's rows (few); false at once for a per-op log.
fn first_divergence_buffer(rc: &RankComparison<'_>) -> bool {
    let t = rc.t1;
    let update = |r: usize| t.phase_kind(r) == Phase::Optimizer;
    modules_first_pair(rc).is_some_and(|a| {
        update(a)
            && t.parameters(a).is_empty()
            && (0..t.len()).any(|r| update(r) && !t.parameters(r).is_empty())
    })
}

/// [`RankSummary::first_divergence_after_update`]: false at once for a
/// per-op log.
fn first_divergence_after_update(rc: &RankComparison<'_>) -> bool {
    let t = rc.t1;
    modules_first_pair(rc).is_some_and(|a| {
        t.phase_kind(a) == Phase::Forward && (0..a).any(|r| t.phase_kind(r) == Phase::Optimizer)
    })
}

/// At `level=modules`, whether a matching pair before the optimizer step
/// (a forward output or a gradient) is equal only within the tolerance:
/// with digests on both sides, not bitwise identical; without, its Output
/// hash texts differ. Adam's update divides each gradient by its own
/// running scale, so such differences can reach the parameters as a
/// difference beyond the tolerance (trial 63: eager against inductor read
/// as "the update itself differs"). False for a per-op log (one pass over
/// a module-level rank's rows, which are few).
fn inexact_before_optimizer(rc: &RankComparison<'_>) -> bool {
    use crate::parser::Field::OutputHash;
    if rc.t1.header().level != crate::logformat::CaptureLevel::Modules {
        return false;
    }
    let digests = rc.t1.has_digests() && rc.t2.has_digests();
    rc.matches.rows.iter().any(|r| {
        if r.status != Status::Match {
            return false;
        }
        let (Some(a), Some(b)) = (r.r1(), r.r2()) else {
            return false;
        };
        rc.t1.phase_kind(a) != Phase::Optimizer
            && if digests {
                !r.has(crate::matcher::ROW_BITWISE)
            } else {
                rc.t1.field(a, OutputHash) != rc.t2.field(b, OutputHash)
            }
    })
}

/// Whether pair `r`'s two Output digests are both there and differ: its
/// output is not the same tensor, whatever its hash and statistics say
/// (trial 28: a loss gradient moved to another class column, same sum and
/// norms, was said to have outputs that agree).
fn output_digests_differ(rc: &RankComparison<'_>, r: &MatchRow) -> bool {
    use crate::parser::Field::OutputDigest;
    match (r.r1(), r.r2()) {
        (Some(a), Some(b)) => {
            let (d1, d2) = (rc.t1.field(a, OutputDigest), rc.t2.field(b, OutputDigest));
            !d1.is_empty() && !d2.is_empty() && d1 != d2
        }
        _ => false,
    }
}

/// Of row `index`'s parameters, those whose outputs differ
/// ([`RowRef::parameters_changed`]): both sides' `Output parameters:`
/// entries at the Output hash values that differ under the row's
/// tolerance. `None` without the line on both sides, when no value
/// differs, or when every parameter's does.
fn changed_parameters(rc: &RankComparison<'_>, index: usize) -> Option<String> {
    let crate::matcher::Sides::Both(i, j) = rc.matches.rows[index].sides() else {
        return None;
    };
    let label = crate::logformat::OUTPUT_PARAMETERS_LABEL;
    let (e1, e2) = (rc.t1.extra_field(i, label), rc.t2.extra_field(j, label));
    if e1.is_empty() || e1 != e2 {
        return None;
    }
    let opts = rc.matches.row_policy(rc.t1, rc.t2, index).opts;
    let differ = crate::matcher::compare::differing_positions(
        rc.t1.field(i, Field::OutputHash),
        rc.t2.field(j, Field::OutputHash),
        opts.hash,
        opts.nan_equal,
    );
    let entries: Vec<&[u8]> = e1
        .split(|b| *b == b';')
        .map(crate::logformat::trim)
        .collect();
    // `differ` is ascending; the sets keep a fused op over thousands of
    // parameters linear.
    let mut names: Vec<&[u8]> = Vec::new();
    let mut named: ahash::AHashSet<&[u8]> = ahash::AHashSet::new();
    let mut all: ahash::AHashSet<&[u8]> = ahash::AHashSet::new();
    for (k, e) in entries.iter().enumerate() {
        let differs = differ.binary_search(&k).is_ok();
        for n in e.split(|b| *b == b',').map(crate::logformat::trim) {
            all.insert(n);
            if differs && named.insert(n) {
                names.push(n);
            }
        }
    }
    if names.is_empty() || names.len() == all.len() || differ.iter().any(|&k| k >= entries.len()) {
        return None;
    }
    let names: Vec<String> = names
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    Some(names.join(", "))
}

/// At most this many parameter names are written in a sentence
/// ([`parameter_words`]); `summary.json` keeps every name.
pub const PARAMETERS_SHOWN: usize = 4;

/// `names` in words: `parameter a`, `parameters a, b and c`, or the first
/// [`PARAMETERS_SHOWN`] then `and N more`.
pub fn parameter_words(names: &[&str]) -> String {
    let noun = if names.len() == 1 {
        "parameter"
    } else {
        "parameters"
    };
    let list = if names.len() > PARAMETERS_SHOWN {
        format!(
            "{} and {} more",
            names[..PARAMETERS_SHOWN].join(", "),
            names.len() - PARAMETERS_SHOWN
        )
    } else {
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => names.join(""),
        }
    };
    format!("{noun} {list}")
}

/// One side of a rank.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SideSummary {
    /// The log file.
    pub path: String,
    /// Op blocks parsed.
    pub entries: usize,
    /// The header's `Step: S`, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub step: Option<u64>,
    /// The header's `Level: modules` (absent for a per-op log).
    #[serde(
        default,
        skip_serializing_if = "crate::logformat::CaptureLevel::is_ops"
    )]
    pub level: crate::logformat::CaptureLevel,
    /// The header's `Loss: x` (the step's training loss), if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub loss: Option<f64>,
    /// At `level=modules`, a fingerprint (16 hex digits) of the records
    /// after the optimizer step, their keys and Output hash texts: the
    /// ranks of a data-parallel job hold equal ones (replicas); absent for
    /// a per-op log ([`parameters_fingerprint`]).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub parameters: Option<String>,
    /// At `level=modules`: the parameters are shards whose gradient
    /// records hold the whole parameter (FSDP: each rank updates its shard
    /// with the reduce-scattered gradient of every rank;
    /// [`parameters_sharded`]). Omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub parameters_sharded: bool,
    /// The header's `Capture filter:` (`min_numel=1000, ...`), if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub capture_filter: Option<String>,
    /// The header's `Ops below min numel: N`: ops not captured because
    /// every floating-point result was smaller than `min_numel`, if said.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub below_min_numel: Option<u64>,
    /// The header's `World size: N`: the processes of the distributed run,
    /// if said (a rank below it that the run lacks is a missing log:
    /// incomplete input).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub world_size: Option<u32>,
    /// The header's `RNG state:`: digests of torch's random number
    /// generators' state when the step was armed and when it ended
    /// (`{"start": "<16 hex>", "end": "<16 hex>"}`), if said.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rng_state: Option<crate::logformat::RngState>,
    /// Op count declared by the header, if any.
    pub declared: Option<u64>,
    /// `Excluded ops dispatched`, sorted; `null` when the header line is absent.
    pub excluded_ops: Option<Vec<String>>,
    /// `Compiled: <backend>`: the `torch.compile` backend the header
    /// names; `null` when the line is absent.
    #[serde(default)]
    pub compiled: Option<String>,
    /// Rows of this side that were paired.
    pub paired: u64,
    /// Blocks cut short by the end of the file.
    pub truncated_blocks: usize,
    /// Fields present in this log but in no block of the other side's log.
    #[serde(deserialize_with = "statics::field_labels")]
    pub one_sided_fields: Vec<statics::Name>,
    /// Keys that occur more than once, with their 1-based lines.
    pub duplicate_keys: Vec<(String, Vec<u64>)>,
    /// Parse warnings (at most 100 stored per file), each written as
    /// `file:line:col: message` ([`Message::ParseWarning`]).
    pub warnings: Vec<Message>,
    /// Every warning counted by kind and label.
    pub warning_counts: Vec<(WarningKind, String, u64)>,
    /// Why this side is incomplete (header count mismatch, truncated
    /// block, unreadable values, cut gzip data: [`Message::CountMismatch`]
    /// ...); empty when complete.
    pub incomplete: Vec<Message>,
}

/// Why a log with values that are no number (or no 16-digit digest) is
/// incomplete: they are not compared, so the run must not pass on them.
/// Names the count and the first at its `file:line:column`; `None` when
/// every value reads.
fn unreadable_values(t: &OpTable, path: &str) -> Option<Message> {
    let unreadable = |k: WarningKind| {
        matches!(
            k,
            WarningKind::MalformedNumber
                | WarningKind::MalformedDigest
                | WarningKind::UnreadableStatLine
        )
    };
    let count: u64 = t
        .warning_counts()
        .iter()
        .filter(|(k, _, _)| unreadable(*k))
        .map(|(_, _, n)| n)
        .sum();
    if count == 0 {
        return None;
    }
    let first = t
        .warnings()
        .iter()
        .find(|w| unreadable(w.kind))
        .map(|w| UnreadableValue {
            path: path.to_string(),
            line: w.line,
            column: w.column,
            message: w.message.clone(),
        });
    Some(Message::UnreadableValues { count, first })
}

/// [`SideSummary::parameters`] of `t`: FNV-1a over the key and Output
/// hash text of each optimizer-phase record, in log order; `None` unless
/// `t` is a module-level log with such records.
pub fn parameters_fingerprint(t: &OpTable) -> Option<String> {
    if t.header().level != crate::logformat::CaptureLevel::Modules {
        return None;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes.iter().chain(&[0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    let mut any = false;
    for r in (0..t.len()).filter(|&r| t.phase_kind(r) == crate::logformat::Phase::Optimizer) {
        eat(t.key(r));
        eat(t.field(r, crate::parser::Field::OutputHash));
        any = true;
    }
    any.then(|| format!("{h:016x}"))
}

/// [`SideSummary::parameters_sharded`] of `t`: a module-level log with a
/// parameter whose record after the optimizer (`{fqn}/op_M_{name}`) has
/// fewer rows (dim 0) than its gradient's (`{fqn}/op_N_{name}_grad`) and
/// the same other dims: under FSDP2 the agent records each rank's own
/// gradient of the whole parameter and the rank's shard of the parameter
/// (dim 0 split across the data-parallel ranks; an empty shard has 0
/// rows). A sparse gradient (`nn.Embedding(sparse=True)`) is recorded as
/// its coalesced values, `[nnz, dim]` with nnz at most the parameter's
/// rows: it is never read as a shard.
pub fn parameters_sharded(t: &OpTable) -> bool {
    use crate::logformat::Phase;
    if t.header().level != crate::logformat::CaptureLevel::Modules {
        return false;
    }
    // (module FQN, role) of a key `fqn/op_N_role`.
    let split = |k: &[u8]| -> Option<(Vec<u8>, Vec<u8>)> {
        let at = k.windows(4).rposition(|w| w == b"/op_")?;
        let rest = &k[at + 4..];
        let role = &rest[rest.iter().position(|&b| b == b'_')? + 1..];
        Some((k[..at].to_vec(), role.to_vec()))
    };
    let dims = |r: usize| crate::logformat::read_shape(t.field(r, Field::Shape)).dims();
    let mut grads = ahash::AHashMap::new();
    for r in (0..t.len()).filter(|&r| t.phase_kind(r) == Phase::Backward) {
        if let Some((fqn, role)) = split(t.key(r)) {
            if let Some(name) = role.strip_suffix(b"_grad") {
                grads.insert((fqn, name.to_vec()), dims(r));
            }
        }
    }
    (0..t.len())
        .filter(|&r| t.phase_kind(r) == Phase::Optimizer)
        .any(|r| {
            split(t.key(r))
                .and_then(|k| grads.get(&k))
                .is_some_and(|g| match (g, dims(r)) {
                    (Some(g), Some(p)) => {
                        !g.is_empty() && g.len() == p.len() && p[0] < g[0] && g[1..] == p[1..]
                    }
                    _ => false,
                })
        })
}

/// Why the log `t` is incomplete, one message a reason (empty: it is
/// complete): a header op count other than the blocks parsed, a last block
/// cut short, values that are no number, gzip data cut short. Each such
/// log makes a compare exit 3 ([`crate::exit_codes::INCOMPLETE`]).
pub fn incomplete_of(t: &OpTable) -> Vec<Message> {
    let path = t.path().display().to_string();
    let mut incomplete = Vec::new();
    if let Some(n) = t.header().total {
        if n != t.len() as u64 {
            incomplete.push(Message::CountMismatch {
                declared: n,
                parsed: t.len(),
            });
        }
    }
    let truncated = |gzip: bool| {
        t.warnings().iter().find(move |w| {
            w.kind == WarningKind::Truncated && (w.label == crate::parser::GZIP_CUT_LABEL) == gzip
        })
    };
    // The parser's own words: a missing final newline, or a count header
    // whose last block lacks its empty line.
    let why = truncated(false).map(|w| w.message.clone());
    if t.truncated_rows() > 0 && (why.is_some() || !t.gzip_cut()) {
        incomplete.push(Message::TruncatedLog { why });
    }
    if let Some(why) = unreadable_values(t, &path) {
        incomplete.push(why);
    }
    if t.gzip_cut() {
        incomplete.push(Message::GzipCut {
            why: truncated(true).map(|w| w.message.clone()),
        });
    }
    incomplete
}

impl SideSummary {
    /// Adds to [`SideSummary::incomplete`] the Shape values of run `side`
    /// (0 or 1) that do not read as a shape and a dtype
    /// ([`crate::logformat::ShapeText::reads`]), among the pairs whose
    /// Shape texts differ (the only ones whose Shape decides anything; a
    /// parse-time check of every block would cost every compare): counted
    /// with the values that are no number, the first named at its file,
    /// line and column (trial 19 F5: `torch.Size([4, 1x6]), Dtype: ???`
    /// was the first origin, with no warning, exit 1).
    fn with_unreadable_shapes(mut self, rc: &RankComparison<'_>, side: usize) -> SideSummary {
        use crate::matcher::ROW_SHAPE_TEXT_DIFF;
        let t = if side == 0 { rc.t1 } else { rc.t2 };
        let mut bad = rc
            .matches
            .rows
            .iter()
            .filter(|r| r.has(ROW_SHAPE_TEXT_DIFF))
            .filter_map(|r| if side == 0 { r.r1() } else { r.r2() })
            .filter(|&r| !crate::logformat::read_shape(t.field(r, Field::Shape)).reads());
        let Some(first) = bad.next() else {
            return self;
        };
        let count = 1 + bad.count() as u64;
        let (block, text) = (t.block(first), t.field(first, Field::Shape));
        let at = text.as_ptr() as usize - block.as_ptr() as usize;
        let before = &block[..at];
        let line = t.line(first) + memchr::memchr_iter(b'\n', before).count() as u64;
        let column = (at - memchr::memrchr(b'\n', before).map_or(0, |n| n + 1)) as u64 + 1;
        let first = UnreadableValue {
            path: self.path.clone(),
            line,
            column,
            message: format!(
                "Shape value `{}` does not read as a shape and a dtype (`torch.Size([2, 64]), Dtype: torch.float32`)",
                String::from_utf8_lossy(text)
            ),
        };
        match self
            .incomplete
            .iter_mut()
            .find(|m| matches!(m, Message::UnreadableValues { .. }))
        {
            Some(Message::UnreadableValues { count: n, first: f }) => {
                *n += count;
                if f.as_ref().is_none_or(|f| f.line > line) {
                    *f = Some(first);
                }
            }
            _ => self.incomplete.push(Message::UnreadableValues {
                count,
                first: Some(first),
            }),
        }
        self
    }

    fn build(t: &OpTable, paired: u64, other: &OpTable) -> SideSummary {
        let path = t.path().display().to_string();
        let incomplete = incomplete_of(t);
        SideSummary {
            entries: t.len(),
            step: t.header().step,
            level: t.header().level,
            loss: t.header().loss,
            parameters: parameters_fingerprint(t),
            parameters_sharded: parameters_sharded(t),
            capture_filter: t.header().filter.clone(),
            below_min_numel: t.header().below_min_numel,
            world_size: t.header().world_size,
            rng_state: t.header().rng,
            declared: t.header().total,
            excluded_ops: t.header().excluded.clone(),
            compiled: t.header().compiled.as_ref().map(|b| b.name().to_string()),
            paired,
            truncated_blocks: t.truncated_rows(),
            one_sided_fields: t
                .schema()
                .minus(other.schema())
                .into_iter()
                .map(|f| f.label())
                .collect(),
            duplicate_keys: duplicate_keys(t).to_vec(),
            warnings: t
                .warnings()
                .iter()
                .map(|w| Message::ParseWarning {
                    path: path.clone(),
                    line: w.line,
                    column: w.column,
                    message: w.message.clone(),
                })
                .collect(),
            warning_counts: t.warning_counts().to_vec(),
            incomplete,
            path,
        }
    }
    /// Whether any warning of `kind` was counted.
    pub fn has_warning(&self, kind: WarningKind) -> bool {
        self.warning_counts.iter().any(|(x, _, _)| *x == kind)
    }
}

/// Page of a rank's report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PageRef {
    /// File name, relative to the report folder.
    pub file: String,
    /// Position of the page's first row among the rows shown (equal to its
    /// result row index unless the pages hold only diverging rows).
    pub first_row: usize,
    /// One past the position of the page's last row among the rows shown.
    pub end_row: usize,
}

/// Summary of one rank pair.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RankSummary {
    /// The training step compared, in a step-series comparison (the
    /// logs' `step_S` folder); absent for a single-step comparison.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub step: Option<u64>,
    /// Run 1's rank number.
    pub rank: u32,
    /// Run 2's rank number (differs only under `--rank-map`).
    pub rank2: u32,
    /// Run 1's side.
    pub run1: SideSummary,
    /// Run 2's side.
    pub run2: SideSummary,
    /// Result rows per status.
    pub counts: Counts,
    /// Rows paired per pass.
    pub strategy_counts: StrategyCounts,
    /// The first row that gates (makes the exit status 1), in run-1
    /// dispatch order: a `diff`, `missing`, `only1` or `only2` row that is
    /// neither ignored nor an unsynced collective.
    pub first_divergence: Option<RowRef>,
    /// The first diverging row that does not gate (an unsynced collective,
    /// an ignored op or an op fused away), if any.
    pub first_nongating_difference: Option<RowRef>,
    /// When both logs have digests: how many paired rows are bitwise
    /// identical; absent without digests.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bitwise: Option<BitwiseCounts>,
    /// At `level=modules`: a paired record before the optimizer step (a
    /// forward output or a gradient) matches only within the tolerance,
    /// not exactly (its digests differ, or without digests its Output hash
    /// texts): what the optimizer may magnify.
    /// Omitted when false, and always false for a per-op log.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub inexact_before_optimizer: bool,
    /// At `level=modules`: the first divergence is a persistent buffer's
    /// record as the step left it (an optimizer-phase record without the
    /// `Parameters:` line the log's parameter records carry), which a
    /// module's forward updates (BatchNorm's running statistics), not the
    /// optimizer (trial 68: a changed momentum read as "the update itself
    /// differs"). Omitted when false, and always false for a per-op log
    /// or one whose parameter records name no parameter.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub first_divergence_buffer: bool,
    /// At `level=modules`: the first divergence is a forward record that
    /// comes after a record of the step's optimizer (an evaluation
    /// forward after the update: trial 68, a forgotten `model.eval()` read
    /// as "from step 2's batch"). Omitted when false, and always false for
    /// a per-op log.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub first_divergence_after_update: bool,
    /// At `level=modules`: the update alone changed
    /// ([`RankSummary::update_changed_alone`]), for readers of
    /// `summary.json` (the capture agent's `baseline=` check says it as
    /// the series does: trial 70 F4). Omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub update_alone: bool,
    /// Forward-phase pairs re-paired by value (out of their order in the
    /// logs: [`crate::matcher::MatchTable::repaired`]). At `level=modules`
    /// such pairs are the same module outputs in another order: two
    /// micro-batches swapped (trial 72 F2: "every forward record agrees"
    /// while the forward agreed only so). Omitted when 0.
    #[serde(skip_serializing_if = "u64_is_zero", default)]
    pub forward_repaired: u64,
    /// Every gating row is in the forward phase, and the rank's backward
    /// rows (gradients) are paired and agree, its optimizer rows too: the
    /// difference does not reach training (trial 72 F3: an attention mask
    /// dropped, or a padding id changed, where the loss ignores those
    /// positions, read as any divergence). Omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub forward_only: bool,
    /// Override pairs that paired nothing: `[run1 key, run2 key]`.
    pub unused_overrides: Vec<(String, String)>,
    /// Where the divergence starts (origins and entries) and non-finite values.
    pub root_causes: CausesSummary,
    /// Paired rows whose Shape dims differ, and their most common pattern.
    pub shape_mismatches: Option<ShapeMismatches>,
    /// Paired rows whose dtype differs, and the most common change
    /// (absent when none does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype_changes: Option<DtypeChanges>,
    /// Module-level logs whose first module records another number of
    /// forward outputs a step in each run ([`ForwardPasses`]); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_passes: Option<ForwardPasses>,
    /// Rows only one run has that look like DDP's gradient scaling
    /// ([`GradientScaling`]); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient_scaling: Option<GradientScaling>,
    /// When every paired row agrees and only ops of one run gate: those
    /// ops by name ([`OneSidedOps`]); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_sided_ops: Option<OneSidedOps>,
    /// The HTML pages of this rank.
    pub pages: Vec<PageRef>,
    /// Result rows the pages hold.
    pub html_rows: usize,
    /// Whether the pages hold only the rows that are not `match` (the rank
    /// has more rows than `--html-rows`, or all rows exceed the size budget).
    pub html_filtered: bool,
    /// When the size budget cut the diverging rows too: how many there were
    /// (the pages hold the first `html_rows` of them).
    pub html_cut_from: Option<usize>,
    /// The rank's key index, written with its pages into its key-index file
    /// ([`super::files::keys`]) by the index writer; not in `summary.json`.
    #[serde(skip)]
    pub key_index: KeyIndex,
}

/// A rank's key index: one `actdiffKeys({...});` line of its key-index
/// file ([`super::files::keys`]), made with its pages
/// ([`super::html::write_rank_pages`]) or, in a merge, read from its
/// part's file. Carried to the index writer, which writes the file of each
/// block of [`super::files::KEYS_PER_FILE`] ranks: the file is not written
/// per rank, since at thousands of ranks creating a file costs more than
/// writing its bytes. What the summary says does not depend on it: any two
/// are equal, so a summary read back from `summary.json` equals the one
/// written.
#[derive(Clone, Debug, Default)]
pub struct KeyIndex(pub Option<String>);

/// Always equal (see [`KeyIndex`]).
impl PartialEq for KeyIndex {
    fn eq(&self, _: &KeyIndex) -> bool {
        true
    }
}

impl RankSummary {
    /// The summary as a compare without result pages writes it (a later
    /// step of a step series, [`super::ReportOptions::rank_files`] off):
    /// no pages, no row shown, every row reference without its page.
    pub fn drop_pages(&mut self) {
        self.pages.clear();
        self.html_rows = 0;
        self.html_filtered = true;
        self.html_cut_from = None;
        self.key_index = KeyIndex::default();
        let c = &mut self.root_causes;
        let causes = c.first_cause.iter_mut().chain(c.causes.iter_mut());
        let cause_rows = causes.flat_map(|c| {
            std::iter::once(&mut c.row)
                .chain(c.collective.iter_mut())
                .chain(c.one_sided.iter_mut())
        });
        let rows = [
            &mut self.first_divergence,
            &mut self.first_nongating_difference,
            &mut c.first_divergence_forward,
            &mut c.first_divergence_backward,
            &mut c.first_divergence_optimizer,
            &mut c.first_nonfinite1,
            &mut c.first_nonfinite2,
            &mut c.first_nonfinite_one_sided,
            &mut c.first_nonfinite_only1,
            &mut c.first_nonfinite_only2,
            &mut c.first_nan_both,
            &mut c.largest_diff,
        ]
        .into_iter()
        .flat_map(|r| r.iter_mut());
        for r in rows.chain(cause_rows) {
            r.page.clear();
        }
    }
}

/// Bitwise identity of a rank's paired rows, by their digests.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct BitwiseCounts {
    /// Paired rows whose digests are all equal.
    pub identical: u64,
    /// Paired rows with digests on both sides.
    pub with_digests: u64,
    /// Every paired row is bitwise identical.
    pub all: bool,
}

/// Paired rows whose dims differ ("3 of 3 shape mismatches share dim0 6 vs 5").
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ShapeMismatches {
    /// Paired rows whose dims differ.
    pub count: u64,
    /// The most common difference (`dim0 6 vs 5`).
    pub common: String,
    /// Rows sharing it.
    pub common_count: u64,
}

/// Whether a count is 0 (a field omitted from `summary.json` when so).
fn u64_is_zero(x: &u64) -> bool {
    *x == 0
}

/// [`RankSummary::forward_repaired`]: the forward-phase pairs that the
/// matcher re-paired by value.
fn forward_repaired(rc: &RankComparison<'_>) -> u64 {
    rc.matches
        .repaired
        .iter()
        .filter(|&&i| {
            let r = &rc.matches.rows[i as usize];
            r.r1()
                .is_some_and(|a| rc.t1.phase_kind(a) == Phase::Forward)
        })
        .count() as u64
}

/// [`RankSummary::forward_only`]: some row gates, every gating row is in
/// the forward phase, and some backward row is paired (every backward and
/// optimizer row then agrees, or it would gate).
fn forward_only(rc: &RankComparison<'_>) -> bool {
    let phase = |r: &MatchRow| match r.sides() {
        crate::matcher::Sides::Both(a, _) | crate::matcher::Sides::Only1(a) => rc.t1.phase_kind(a),
        crate::matcher::Sides::Only2(b) => rc.t2.phase_kind(b),
    };
    let (mut gating, mut backward) = (false, false);
    for r in &rc.matches.rows {
        let p = phase(r);
        if r.gates() {
            if p != Phase::Forward {
                return false;
            }
            gating = true;
        } else if p == Phase::Backward && r.r1().is_some() && r.r2().is_some() {
            backward = true;
        }
    }
    gating && backward
}

/// [`RowRef::shapes`]: the dims of both sides of pair `r` when they
/// differ (`None` for an unpaired row, equal or unreadable dims).
fn shapes(rc: &RankComparison<'_>, r: &MatchRow) -> Option<[String; 2]> {
    if !r.has(crate::matcher::ROW_SHAPE_TEXT_DIFF) {
        return None;
    }
    let (a, b) = (r.r1()?, r.r2()?);
    let dims = |t: &OpTable, row: usize| crate::matcher::notes::dims_of(t.field(row, Field::Shape));
    let (d1, d2) = (dims(rc.t1, a)?, dims(rc.t2, b)?);
    let show = |d: Vec<i64>| {
        let d: Vec<String> = d.iter().map(|x| x.to_string()).collect();
        format!("[{}]", d.join(", "))
    };
    (d1 != d2).then(|| [show(d1), show(d2)])
}

/// How the Shape lines of each paired row whose Shape texts differ
/// differ, as `how` words them (`None`: not in that way), and the most
/// common wording: (rows, that wording, its rows); `None` when no row does.
fn shape_differences(
    rc: &RankComparison<'_>,
    how: impl Fn(&[u8], &[u8]) -> Option<String>,
) -> Option<(u64, String, u64)> {
    // The matcher flagged the pairs whose Shape texts differ.
    let diffs: Vec<String> = rc
        .matches
        .rows
        .iter()
        .filter(|r| r.has(crate::matcher::ROW_SHAPE_TEXT_DIFF))
        .filter_map(|r| {
            let (a, b) = (r.r1()?, r.r2()?);
            let (s1, s2) = (rc.t1.field(a, Field::Shape), rc.t2.field(b, Field::Shape));
            (s1 != s2).then(|| how(s1, s2)).flatten()
        })
        .collect();
    let count = diffs.len() as u64;
    let mut by: std::collections::BTreeMap<String, u64> = Default::default();
    for d in diffs {
        *by.entry(d).or_insert(0) += 1;
    }
    let (common, common_count) = by
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))?;
    Some((count, common, common_count))
}

/// Paired rows whose dtype differs ("dtype changed in 57 paired rows:
/// bfloat16 → float32"): autocast on in one run only, a lower-precision
/// kernel. Said beside the cause, which an input's dtype change makes an
/// entry.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DtypeChanges {
    /// Paired rows whose dtypes differ.
    pub count: u64,
    /// The most common change (`bfloat16 → float32`).
    pub common: String,
    /// Rows with it.
    pub common_count: u64,
}

/// Module-level logs whose first recorded module has another number of
/// forward-output records in each run: the runs split the step into
/// other numbers of forward passes (micro-batches of gradient
/// accumulation), so each gradient record of the run of more passes is a
/// partial sum, paired by position with the other run's (trial 65 F2: a
/// step accumulated over two micro-batches, its parameters bitwise equal
/// after the optimizer step, read "diverges first at
/// `final/op_1_bias_grad`" with no word why).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ForwardPasses {
    /// The module (FQN as its records' keys give it).
    pub module: String,
    /// Its forward-output records in run 1's and run 2's log.
    pub counts: [u64; 2],
    /// The largest finite relative difference of a paired parameter record
    /// after the optimizer step that differs (`diff`), in any field; absent
    /// when none differs (trial 66: "the parameters ... differ too" read
    /// as a change where they differed by 4e-11, the micro-batches' sums).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimizer_rel: Option<f64>,
}

impl ForwardPasses {
    fn build(rc: &RankComparison<'_>) -> Option<ForwardPasses> {
        if rc.t1.header().level != crate::logformat::CaptureLevel::Modules {
            return None;
        }
        let output = |t: &crate::parser::OpTable, r: usize| {
            t.phase_kind(r) == crate::logformat::Phase::Forward
                && t.op_name(t.op_type(r)) == crate::matcher::MODULE_OUTPUT_OP
        };
        let first = (0..rc.t1.len()).find(|&r| output(rc.t1, r))?;
        let module = crate::parser::key::module_and_op(rc.t1.key(first)).0;
        let count = |t: &crate::parser::OpTable| {
            (0..t.len())
                .filter(|&r| {
                    output(t, r) && crate::parser::key::module_and_op(t.key(r)).0 == module
                })
                .count() as u64
        };
        let counts = [count(rc.t1), count(rc.t2)];
        if counts[0] == counts[1] || counts[1] == 0 {
            return None;
        }
        let optimizer_rel = (0..rc.matches.rows.len())
            .filter_map(|i| {
                let m = &rc.matches.rows[i];
                let crate::matcher::Sides::Both(a, b) = m.sides() else {
                    return None;
                };
                if m.status != crate::matcher::Status::Diff
                    || rc.t1.phase_kind(a) != crate::logformat::Phase::Optimizer
                {
                    return None;
                }
                let opts = rc.matches.row_policy(rc.t1, rc.t2, i).opts;
                crate::matcher::compare::worst_difference(
                    rc.t1,
                    a,
                    rc.t2,
                    b,
                    &opts,
                    rc.matches.compared,
                )
                .map(|w| w.rel)
            })
            .reduce(f64::max);
        Some(ForwardPasses {
            module: String::from_utf8_lossy(module).into_owned(),
            counts,
            optimizer_rel,
        })
    }

    /// `A records 1 forward output of `emb` a step and B 2: ...`.
    pub fn describe(&self, name1: &str, name2: &str) -> String {
        let [a, b] = self.counts;
        format!(
            "{name1} records {a} forward output{} of `{}` a step and {name2} {b}: the runs split the step into other numbers of forward passes (micro-batches of gradient accumulation), so a gradient record of the run of more passes is a partial sum, paired by position with the other run's",
            if a == 1 { "" } else { "s" },
            self.module
        )
    }
}

/// A rank whose only differences are rows one run alone has, every one
/// a backward `mul` or `div` (in place or not) or a collective, in the
/// run of more ranks
/// (its `World size:` above the other's, or the other's absent): most
/// likely DDP dividing each gradient by the world size before its
/// all-reduce, which a one-process run (or FSDP2, whose layout ops are
/// left out) does not (trial 27 F3: "diverges first at `head/op_4_mul`
/// (only in ddp)" with every paired row bitwise identical, and no word
/// why).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GradientScaling {
    /// The run (1 or 2) that has the rows.
    pub side: u8,
    /// How many scaling rows (backward `mul`/`div`).
    pub rows: u64,
    /// How many collectives among that run's other one-sided rows (DDP's
    /// `allreduce_` of a bucket).
    #[serde(default)]
    pub collectives: u64,
    /// That run's `World size:`.
    pub world_size: u32,
}

/// A rank whose paired rows all agree while ops of one run only gate
/// (eager against sdpa attention: the runs ran other ops in the same
/// place, and every op both ran agrees): the gating one-sided ops of each
/// run, by op name, most frequent first (trial 28 W1: the verdict named
/// a mask helper, and the sdpa kernel nowhere).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct OneSidedOps {
    /// Run 1's gating one-sided rows: (op name, count), at most
    /// [`ONE_SIDED_OP_NAMES`], and how many rows in all. At
    /// `level="modules"`, the record's module FQN and role (`tok output`).
    pub only1: (Vec<(String, u64)>, u64),
    /// Run 2's, the same way.
    pub only2: (Vec<(String, u64)>, u64),
    /// Module-level records, not ops (trial 70 F2: an evaluation pass in
    /// one run only): built only when every one-sided record is a forward
    /// output.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub records: bool,
}

/// Op names [`OneSidedOps`] lists per run.
pub const ONE_SIDED_OP_NAMES: usize = 4;

impl OneSidedOps {
    fn build(rc: &RankComparison<'_>) -> Option<OneSidedOps> {
        let c = rc.matches.counts();
        if c.diff + c.missing + c.truncated > 0 || c.only1 + c.only2 == 0 {
            return None;
        }
        let records = rc.t1.header().level == crate::logformat::CaptureLevel::Modules;
        let mut names: [ahash::AHashMap<std::borrow::Cow<'_, [u8]>, u64>; 2] = Default::default();
        for r in rc.matches.rows.iter().filter(|r| r.gates()) {
            let (side, t, row) = match r.sides() {
                crate::matcher::Sides::Only1(a) => (0, rc.t1, a),
                crate::matcher::Sides::Only2(b) => (1, rc.t2, b),
                crate::matcher::Sides::Both(..) => continue,
            };
            let name = if records {
                // (Only forward outputs: a parameter record of one run only,
                // an edit after the optimizer recorded again, says its own
                // words.)
                let (module, role) = crate::parser::key::module_and_op(t.key(row));
                if role != b"output" || t.phase_kind(row) != crate::parser::Phase::Forward {
                    return None;
                }
                std::borrow::Cow::Owned([module, b" ", role].concat())
            } else {
                std::borrow::Cow::Borrowed(t.op_name(t.op_type(row)))
            };
            *names[side].entry(name).or_insert(0) += 1;
        }
        let list = |m: &ahash::AHashMap<std::borrow::Cow<'_, [u8]>, u64>| {
            let mut v: Vec<(String, u64)> = m
                .iter()
                .map(|(n, c)| (String::from_utf8_lossy(n).into_owned(), *c))
                .collect();
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let total = v.iter().map(|x| x.1).sum();
            v.truncate(ONE_SIDED_OP_NAMES);
            (v, total)
        };
        let [n1, n2] = &names;
        (!n1.is_empty() || !n2.is_empty()).then(|| OneSidedOps {
            only1: list(n1),
            only2: list(n2),
            records,
        })
    }
    /// `every paired row agrees; the runs ran other ops: only in A (36)
    /// bmm ×8, _softmax ×4, …; only in B (12)
    /// _scaled_dot_product_flash_attention_for_cpu ×2, …`; for
    /// module-level records, `every paired record agrees; the runs
    /// recorded other module calls: only in b (25): tok output ×4, …`.
    pub fn describe(&self, name1: &str, name2: &str) -> String {
        let side = |(v, total): &(Vec<(String, u64)>, u64), name: &str| {
            if *total == 0 {
                return None;
            }
            let listed: u64 = v.iter().map(|x| x.1).sum();
            let ops: Vec<String> = v.iter().map(|(n, c)| format!("{n} ×{c}")).collect();
            Some(format!(
                "only in {name} ({total}): {}{}",
                ops.join(", "),
                if listed < *total { ", …" } else { "" }
            ))
        };
        let sides: Vec<String> = [side(&self.only1, name1), side(&self.only2, name2)]
            .into_iter()
            .flatten()
            .collect();
        if self.records {
            format!(
                "every paired record agrees; the runs recorded other module calls: {} (an evaluation pass, or a module called more often, in one run)",
                sides.join("; ")
            )
        } else {
            format!(
                "every paired row agrees; the runs ran other ops: {}",
                sides.join("; ")
            )
        }
    }
}

/// The ops [`GradientScaling`] takes for a gradient's scaling.
const SCALING_OPS: [&[u8]; 4] = [b"mul", b"mul_", b"div", b"div_"];

impl GradientScaling {
    fn build(rc: &RankComparison<'_>) -> Option<GradientScaling> {
        let c = rc.matches.counts();
        if c.diff + c.missing + c.truncated > 0 || (c.only1 > 0) == (c.only2 > 0) {
            return None;
        }
        let (side, t) = if c.only1 > 0 { (1, rc.t1) } else { (2, rc.t2) };
        // A run of several ranks: DDP scales in any layout the other run
        // has (one process, or FSDP2 over as many ranks, trial 71 F7,
        // whose reduce-scatter divides on its own).
        let world_size = t.header().world_size?;
        if world_size <= 1 {
            return None;
        }
        let (mut rows, mut collectives) = (0, 0);
        for r in &rc.matches.rows {
            let row = match r.sides() {
                crate::matcher::Sides::Only1(a) if side == 1 => a,
                crate::matcher::Sides::Only2(b) if side == 2 => b,
                _ => continue,
            };
            if crate::matcher::recompute::is_communication(t, row) {
                collectives += 1;
                continue;
            }
            let op = t.op_name(t.op_type(row));
            if !t.is_backward(row) || !SCALING_OPS.contains(&op) {
                return None;
            }
            rows += 1;
        }
        (rows > 0).then_some(GradientScaling {
            side,
            rows,
            collectives,
            world_size,
        })
    }
    /// `; the rows only in ddp are 15 backward mul or div ops and 1
    /// collective of its 2 ranks, and every paired row agrees: DDP scaling
    /// each gradient by the world size before its all-reduce?
    /// (--ignore-op mul leaves them out of the verdict)`, `name` that
    /// run's display name.
    pub fn words(&self, name: &str) -> String {
        let ops = |n: u64, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let collectives = match self.collectives {
            0 => String::new(),
            n => format!(" and {}", ops(n, "collective")),
        };
        format!(
            "; the rows only in {name} are {}{collectives} of its {} ranks, and every paired row agrees: DDP scaling each gradient by the world size before its all-reduce? (--ignore-op mul leaves them out of the verdict)",
            ops(self.rows, "backward mul or div op"),
            self.world_size
        )
    }
}

impl DtypeChanges {
    fn build(rc: &RankComparison<'_>) -> Option<DtypeChanges> {
        use crate::matcher::policy::dtype_of;
        let (count, common, common_count) = shape_differences(rc, |s1, s2| {
            let (d1, d2) = (dtype_of(s1), dtype_of(s2));
            (d1 != d2).then(|| format!("{d1} → {d2}"))
        })?;
        Some(DtypeChanges {
            count,
            common,
            common_count,
        })
    }
    /// `dtype changed in 57 paired rows: bfloat16 → float32`, or `…, 50 of
    /// them bfloat16 → float32` when they differ.
    pub fn describe(&self) -> String {
        let rows = format!(
            "dtype changed in {} paired row{}",
            self.count,
            if self.count == 1 { "" } else { "s" }
        );
        if self.common_count == self.count {
            format!("{rows}: {}", self.common)
        } else {
            format!("{rows}, {} of them {}", self.common_count, self.common)
        }
    }
}

impl ShapeMismatches {
    fn build(rc: &RankComparison<'_>) -> Option<ShapeMismatches> {
        let (count, common, common_count) =
            shape_differences(rc, crate::matcher::notes::dims_difference)?;
        Some(ShapeMismatches {
            count,
            common,
            common_count,
        })
    }
    /// `3 of 3 shape mismatches share dim0 6 vs 5`.
    pub fn describe(&self) -> String {
        format!(
            "{} of {} shape mismatches share {}",
            self.common_count, self.count, self.common
        )
    }
}

/// A cause of a rank, the matcher's [`CauseEntry`], with its result rows
/// as [`RowRef`]s, for `summary.json` and the report. In `summary.json` the
/// entry's fields stand between `row` and `collective`; its row indexes
/// are not written: `index`, `collective` and `one_sided` are read back
/// from the rows here, and the entry's `chain` is left empty (the chain is
/// [`CauseRef::chain`]'s keys), so a summary reads back equal.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(from = "CauseRefRead")]
pub struct CauseRef {
    /// The row ([`CauseEntry::index`]).
    pub row: RowRef,
    /// The matcher's cause: its kind, inputs and counts.
    #[serde(flatten)]
    pub cause: CauseEntry,
    /// [`CauseEntry::collective`]'s row.
    pub collective: Option<RowRef>,
    /// The keys of [`CauseEntry::chain`]'s rows.
    pub chain: Vec<String>,
    /// [`CauseEntry::one_sided`]'s rows (`[]` for other kinds).
    #[serde(default)]
    pub one_sided: Vec<RowRef>,
    /// [`CauseEntry::in_its_place`]'s row: the op the other run ran where
    /// the one-sided cause's op is (absent when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_its_place: Option<RowRef>,
}

/// [`CauseRef`] as `summary.json` holds it, before the entry's row indexes
/// are restored from its rows.
#[derive(Deserialize)]
struct CauseRefRead {
    row: RowRef,
    #[serde(flatten)]
    cause: CauseEntry,
    collective: Option<RowRef>,
    chain: Vec<String>,
    #[serde(default)]
    one_sided: Vec<RowRef>,
    #[serde(default)]
    in_its_place: Option<RowRef>,
}

impl From<CauseRefRead> for CauseRef {
    fn from(c: CauseRefRead) -> CauseRef {
        CauseRef::new(
            c.row,
            c.cause,
            c.collective,
            c.chain,
            c.one_sided,
            c.in_its_place,
        )
    }
}

impl CauseRef {
    /// The entry `cause` with its rows: its row indexes set from them (its
    /// `chain` emptied: the chain is `chain`'s keys).
    fn new(
        row: RowRef,
        cause: CauseEntry,
        collective: Option<RowRef>,
        chain: Vec<String>,
        one_sided: Vec<RowRef>,
        in_its_place: Option<RowRef>,
    ) -> CauseRef {
        let cause = CauseEntry {
            index: row.index,
            collective: collective.as_ref().map(|r| r.index),
            one_sided: one_sided.iter().map(|r| r.index).collect(),
            in_its_place: in_its_place.as_ref().map(|r| r.index),
            chain: Vec::new(),
            ..cause
        };
        CauseRef {
            row,
            cause,
            collective,
            chain,
            one_sided,
            in_its_place,
        }
    }
}

impl CauseRef {
    /// The cause in words, for the terminal, JUnit and the verdict: the
    /// row's key, or for a one-sided cause ``K… (only in NAME) feeds ROW``
    /// (`K` the earliest one-sided op, `…` when more one-sided ops follow
    /// it; `names` are run 1's and run 2's display names), with
    /// ``; OTHER ran P in its place`` inside the brackets when the other
    /// run has a one-sided op `P` at `K`'s place
    /// ([`CauseRef::in_its_place`]).
    pub fn subject(&self, names: (&str, &str)) -> String {
        let Some(first) = self.one_sided.first() else {
            return self.row.key().to_string();
        };
        format!(
            "{}{} ({}) feeds {}",
            first.key(),
            if self.one_sided.len() > 1 { "…" } else { "" },
            self.only_in_words(names),
            self.row.key_beside(first.status)
        )
    }

    /// For a one-sided cause: ``only in NAME`` (the run of its earliest
    /// one-sided op), then ``; OTHER ran `P` in its place`` when the other
    /// run ran op `P` there ([`CauseRef::in_its_place`], trial 24 F5);
    /// empty for other causes.
    pub fn only_in_words(&self, names: (&str, &str)) -> String {
        let Some(first) = self.one_sided.first() else {
            return String::new();
        };
        let (this, other) = if first.status == crate::matcher::Status::Only1 {
            names
        } else {
            (names.1, names.0)
        };
        match &self.in_its_place {
            Some(p) => format!("only in {this}; {other} ran {} in its place", p.key()),
            None => format!("only in {this}"),
        }
    }
}

/// A rank both runs have that could not be compared.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FailedRank {
    /// Run 1's rank number.
    pub rank: u32,
    /// In a step series, the step at which it could not be compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Why (`file:line:col: message`).
    pub errors: Vec<Message>,
}

/// Root-cause findings of one rank: the matcher's [`RootCauses`] with its
/// rows as [`RowRef`]s (at most 50 causes), and the first rows per phase
/// and per non-finite side.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CausesSummary {
    /// The first origin, entry or one-sided op: the op to look at first.
    pub first_cause: Option<CauseRef>,
    /// Origins, entries, one-sided ops and entries via collective, in
    /// dispatch order (at most 50 here).
    pub causes: Vec<CauseRef>,
    /// [`RootCauses::cause_count`].
    pub cause_count: u64,
    /// [`RootCauses::kinds`].
    pub kinds: crate::matcher::cause::KindCounts,
    /// [`RootCauses::via_collective_only`].
    pub via_collective_only: bool,
    /// For such a rank: the ranks with origins or entries of their own (at
    /// module level: the replicas whose forward or backward records differ),
    /// ascending, at most the first
    /// [`SEE_RANKS_MAX`] (16).
    pub see_ranks: Vec<u32>,
    /// How many ranks `see_ranks` would list uncut (0 when it is empty).
    #[serde(default)]
    pub see_ranks_total: u64,
    /// With `--layouts`, when a combined run's replicas differ: the first
    /// replicated result that differs on one of its ranks. A combined row
    /// keeps the group's first rank's replica, so a change on another
    /// rank's replica shows downstream, where shards meet, as an origin
    /// whose inputs agree: the headline names it beside the first cause.
    /// Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_differ: Option<crate::layout::ReplicaMismatch>,
    /// The first gating row only run 2 has that comes before the first
    /// divergence in run 2's own order (result order puts run 2's
    /// one-sided rows after run 1's rows, as the reference does, so such a
    /// row is never the first divergence): at `level=modules`, a module
    /// only run 2 runs before the first differing record. Absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_only2_before: Option<RowRef>,
    /// First gating divergence in the forward phase (tolerance-aware).
    pub first_divergence_forward: Option<RowRef>,
    /// First gating divergence in the backward phase (tolerance-aware).
    pub first_divergence_backward: Option<RowRef>,
    /// First gating divergence in the optimizer step (rows after the last
    /// backward op without a Phase line; tolerance-aware).
    pub first_divergence_optimizer: Option<RowRef>,
    /// First row whose run-1 values hold NaN or Inf.
    pub first_nonfinite1: Option<RowRef>,
    /// First row whose run-2 values hold NaN or Inf.
    pub first_nonfinite2: Option<RowRef>,
    /// First paired row non-finite on one side only.
    pub first_nonfinite_one_sided: Option<RowRef>,
    /// First paired row whose run-1 values hold NaN or Inf while run 2's
    /// are finite: what the terminal reports as run 1's first non-finite
    /// op (a row non-finite in both runs, like a causal mask's
    /// `masked_fill` with `-inf`, is no news).
    #[serde(default)]
    pub first_nonfinite_only1: Option<RowRef>,
    /// First paired row whose run-2 values hold NaN or Inf while run 1's
    /// are finite.
    #[serde(default)]
    pub first_nonfinite_only2: Option<RowRef>,
    /// First paired row whose values hold NaN in both runs (their Output
    /// hash or statistics), not a collective's, in a step whose loss (its
    /// last forward row) or last row is NaN in both: from there on NaN
    /// agrees with NaN, so a change cannot show in those values (trial 66:
    /// two runs that both blew up passed without a word). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_nan_both: Option<RowRef>,
    /// The gating `diff` row with the largest finite relative difference in
    /// a field that gates under its tolerance.
    pub largest_diff: Option<RowRef>,
    /// That field (`Output hash`, `Input hashes`, or a stat when stats gate).
    #[serde(deserialize_with = "statics::field_label")]
    pub largest_diff_field: Option<statics::Name>,
    /// That difference.
    pub largest_rel_diff: Option<f64>,
    /// Every gating row is a pair whose digests alone differ (every
    /// printed value equal: a difference below the printed digits), so
    /// the rank has no relative difference to show: the step strip shades
    /// it lightest, not darkest (trial 22 M5). Omitted when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub digests_only: bool,
}

/// Whether row `index` of `rc` is a `diff` pair judged with NaN unequal
/// to NaN (`--nan-is-diff`) that agrees when NaN equals NaN, digests
/// included: its only difference is NaN against NaN
/// ([`RowRef::nan_against_nan`]).
fn nan_against_nan(rc: &RankComparison<'_>, index: usize) -> bool {
    let row = &rc.matches.rows[index];
    let crate::matcher::Sides::Both(i, j) = row.sides() else {
        return false;
    };
    let mut opts = rc.matches.row_policy(rc.t1, rc.t2, index).opts;
    if row.status != crate::matcher::Status::Diff || opts.nan_equal {
        return false;
    }
    opts.nan_equal = true;
    use crate::matcher::compare;
    compare::judge_values(rc.t1, i, rc.t2, j, &opts, rc.matches.compared).agrees
        && compare::bitwise_identical(rc.t1, i, rc.t2, j) != Some(false)
}

/// The first paired row whose values hold NaN on both sides
/// ([`CausesSummary::first_nan_both`]), when the step went NaN in both
/// runs: its last forward row (the loss) or its last row (the optimizer's
/// last update) holds NaN on both sides. A collective's NaN alone (an
/// all-gather's buffer hashed before it was filled, as TorchTitan's FSDP
/// logs print) is not that, and is never the row named: a row the policy
/// calls unsynced, or a collective or layout communication op by the one
/// list the matcher tells them by (`recompute::is_communication`).
fn first_nan_both(rc: &RankComparison<'_>) -> Option<usize> {
    use crate::matcher::compare::contains_nan;
    use crate::matcher::{Sides, ROW_UNSYNCED};
    let rows = &rc.matches.rows;
    let nan = |t: &OpTable, r: usize| {
        [
            Field::OutputHash,
            Field::L2Norm,
            Field::Min,
            Field::Max,
            Field::Mean,
        ]
        .iter()
        .any(|f| contains_nan(t.field(r, *f)))
    };
    let both = |i: usize| {
        let m = &rows[i];
        m.has(ROW_NONFINITE1)
            && m.has(ROW_NONFINITE2)
            && matches!(m.sides(), Sides::Both(a, b) if nan(rc.t1, a) && nan(rc.t2, b))
    };
    let last_forward = rows.iter().rposition(
        |m| matches!(m.sides(), Sides::Both(a, _) if rc.t1.phase_kind(a) == Phase::Forward),
    );
    let went_nan = last_forward.is_some_and(both) || (!rows.is_empty() && both(rows.len() - 1));
    if !went_nan {
        return None;
    }
    let collective = |i: usize| match rows[i].sides() {
        Sides::Both(a, _) => {
            rows[i].has(ROW_UNSYNCED) || crate::matcher::recompute::is_communication(rc.t1, a)
        }
        _ => true,
    };
    (0..rows.len()).find(|&i| both(i) && !collective(i))
}

/// The first paired row with flag `this` (a side's values hold NaN or
/// Inf) but not `other` (the other side's are finite).
fn first_nonfinite_only(rows: &[MatchRow], this: u16, other: u16) -> Option<usize> {
    rows.iter().position(|r| {
        matches!(r.sides(), crate::matcher::Sides::Both(..)) && r.has(this) && !r.has(other)
    })
}

/// [`CausesSummary::first_only2_before`] (a result row index): the gating
/// `only2` row with the lowest run-2 row below the first divergence's
/// run-2 row, when the first divergence is a pair.
fn first_only2_before(rows: &[MatchRow]) -> Option<usize> {
    use crate::matcher::Sides;
    let first = rows.iter().position(|r| r.gates())?;
    let Sides::Both(_, at) = rows[first].sides() else {
        return None;
    };
    rows.iter()
        .enumerate()
        .filter(|(_, r)| r.gates())
        .filter_map(|(i, r)| match r.sides() {
            Sides::Only2(b) if b < at => Some((b, i)),
            _ => None,
        })
        .min()
        .map(|(_, i)| i)
}

impl CausesSummary {
    fn build(rc: &RankComparison<'_>, plan: &PagePlan) -> CausesSummary {
        let c = &rc.matches.causes;
        let r = |i: usize| RowRef::new(rc, i, plan);
        let cref = |e: &CauseEntry| {
            CauseRef::new(
                r(e.index),
                e.clone(),
                e.collective.map(r),
                e.chain.iter().map(|i| r(*i).key().to_string()).collect(),
                e.one_sided.iter().map(|i| r(*i)).collect(),
                e.in_its_place.map(r),
            )
        };
        CausesSummary {
            first_cause: c
                .first_cause
                .and_then(|i| c.causes.iter().find(|e| e.index == i))
                .map(cref),
            causes: c.causes.iter().take(50).map(cref).collect(),
            cause_count: c.cause_count,
            kinds: c.kinds,
            via_collective_only: c.via_collective_only,
            see_ranks: Vec::new(),
            see_ranks_total: 0,
            replicas_differ: None,
            first_only2_before: first_only2_before(&rc.matches.rows).map(r),
            first_divergence_forward: rc.matches.first_gating(rc.t1, rc.t2, Phase::Forward).map(r),
            first_divergence_backward: rc
                .matches
                .first_gating(rc.t1, rc.t2, Phase::Backward)
                .map(r),
            first_divergence_optimizer: rc
                .matches
                .first_gating(rc.t1, rc.t2, Phase::Optimizer)
                .map(r),
            first_nonfinite1: c.first_nonfinite1.map(r),
            first_nonfinite2: c.first_nonfinite2.map(r),
            first_nonfinite_one_sided: c.first_nonfinite_one_sided.map(r),
            first_nonfinite_only1: first_nonfinite_only(
                &rc.matches.rows,
                ROW_NONFINITE1,
                ROW_NONFINITE2,
            )
            .map(r),
            first_nonfinite_only2: first_nonfinite_only(
                &rc.matches.rows,
                ROW_NONFINITE2,
                ROW_NONFINITE1,
            )
            .map(r),
            first_nan_both: first_nan_both(rc).map(r),
            largest_diff: c.largest_diff.map(|d| r(d.index)),
            largest_diff_field: c.largest_diff.map(|d| d.field),
            largest_rel_diff: c.largest_diff.map(|d| d.rel),
            digests_only: {
                let mut gating = rc.matches.rows.iter().filter(|r| r.gates()).peekable();
                gating.peek().is_some() && gating.all(|r| r.has(crate::matcher::ROW_DIGEST_ONLY))
            },
        }
    }
}

impl RankSummary {
    /// Summarises one rank (pages are filled in by the HTML writer).
    pub fn build(rc: &RankComparison<'_>, plan: &PagePlan) -> RankSummary {
        let c = rc.matches.counts();
        let paired = c.matched + c.diff + c.missing + c.truncated;
        let mut r = RankSummary {
            step: None,
            rank: rc.rank1,
            rank2: rc.rank2,
            run1: SideSummary::build(rc.t1, paired, rc.t2).with_unreadable_shapes(rc, 0),
            run2: SideSummary::build(rc.t2, paired, rc.t1).with_unreadable_shapes(rc, 1),
            counts: c,
            strategy_counts: rc.matches.strategy_counts(),
            first_divergence: rc
                .matches
                .first_divergence()
                .map(|i| RowRef::new(rc, i, plan)),
            first_nongating_difference: rc
                .matches
                .first_nongating()
                .map(|i| RowRef::new(rc, i, plan)),
            bitwise: rc
                .matches
                .bitwise_counts(rc.t1, rc.t2)
                .map(|(identical, with_digests)| BitwiseCounts {
                    identical,
                    with_digests,
                    all: identical == with_digests && identical == paired,
                }),
            inexact_before_optimizer: inexact_before_optimizer(rc),
            first_divergence_buffer: first_divergence_buffer(rc),
            first_divergence_after_update: first_divergence_after_update(rc),
            unused_overrides: rc.matches.unused_overrides.clone(),
            root_causes: CausesSummary::build(rc, plan),
            shape_mismatches: ShapeMismatches::build(rc),
            dtype_changes: DtypeChanges::build(rc),
            forward_passes: ForwardPasses::build(rc),
            gradient_scaling: GradientScaling::build(rc),
            one_sided_ops: OneSidedOps::build(rc),
            pages: Vec::new(),
            html_rows: plan.len(),
            html_filtered: plan.is_filtered(),
            html_cut_from: plan.cut_from(),
            key_index: KeyIndex::default(),
            update_alone: false,
            forward_repaired: forward_repaired(rc),
            forward_only: forward_only(rc),
        };
        r.update_alone = r.update_changed_alone();
        r
    }

    /// Whether a module-level rank's first divergence at its step is in
    /// the optimizer step, a record both runs have, with no gating
    /// divergence in that step's forward or backward before it: its
    /// update alone changed.
    ///
    /// A forward or backward record that differs after it (a second
    /// optimizer's backward through the updated model, a GAN's generator
    /// after its discriminator's update: trial 67) is a consequence, not a
    /// cause.
    pub fn update_changed_alone(&self) -> bool {
        let c = &self.root_causes;
        let Some(first) = self.first_divergence.as_ref() else {
            return false;
        };
        let at = |f: &RowRef| f.line2.or(f.line1);
        let before = |f: &Option<RowRef>| {
            f.as_ref()
                .is_some_and(|f| at(f).is_none() || at(f) < at(first))
        };
        self.run1.level == crate::logformat::CaptureLevel::Modules
            && first.phase == "optimizer"
            && first.status == crate::matcher::Status::Diff
            && !before(&c.first_divergence_forward)
            && !before(&c.first_divergence_backward)
            && !self.first_divergence_buffer
    }
    /// Whether this rank has anything but `match` rows.
    pub fn diverged(&self) -> bool {
        self.counts.diverging() > 0
    }
    /// Whether this rank has rows that gate the exit status.
    pub fn gates(&self) -> bool {
        self.counts.gating > 0
    }
    /// Whether either side is incomplete (truncated or count mismatch).
    pub fn incomplete(&self) -> bool {
        !self.run1.incomplete.is_empty() || !self.run2.incomplete.is_empty()
    }
}

/// The whole comparison, as written to `summary.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// Layout version of this file ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// `actdiff` and its version.
    pub tool: String,
    /// Display name of run 1.
    pub name1: String,
    /// Display name of run 2.
    pub name2: String,
    /// Path of run 1 as given.
    pub path1: String,
    /// Path of run 2 as given.
    pub path2: String,
    /// Counts over all ranks.
    pub counts: Counts,
    /// Compared ranks, in run-1 rank order.
    pub ranks: Vec<RankSummary>,
    /// Ranks present in run 1 only.
    pub ranks_only1: Vec<u32>,
    /// Ranks present in run 2 only.
    pub ranks_only2: Vec<u32>,
    /// Ranks in both runs that could not be compared (an input error), with
    /// the errors; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub ranks_failed: Vec<FailedRank>,
    /// Every input error of the comparison (those of `ranks_failed`
    /// included), each naming its file; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub input_errors: Vec<Message>,
    /// Every warning of the comparison, as printed on stderr: options,
    /// rules and config `[dtype.X]` sections that did nothing, and each
    /// rank's (its logs' input warnings in one line each, one-sided
    /// fields, layer offsets, unused overrides); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub warnings: Vec<Message>,
    /// Ranks that behave alike: same first divergence and counts.
    pub groups: Vec<RankGroup>,
    /// The exit status `actdiff compare` returns for this comparison.
    pub exit_status: i32,
    /// The reasons for the exit status, one line each.
    pub verdict: Vec<super::reasons::Reason>,
    /// A step-series comparison's step facts (`steps`,
    /// `first_diverging_step`, ...: [`super::steps::StepSeries`]), at the
    /// top level of the document; absent for a single-step comparison.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub series: Option<super::steps::StepSeries>,
    /// The runs whose tensor-parallel shards were combined into whole
    /// tensors before comparing ([`crate::layout::Combined`]: which ranks
    /// make each logical rank, replicas that differ); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layouts: Vec<crate::layout::Combined>,
}

impl Summary {
    /// What was combined across parallel layouts ([`Self::layouts`]), one
    /// line each ([`crate::layout::Combined::lines`]), for the terminal,
    /// the index and JUnit.
    pub fn layout_lines(&self) -> Vec<String> {
        self.layouts
            .iter()
            .flat_map(|l| {
                l.lines(if l.side == 1 {
                    &self.name1
                } else {
                    &self.name2
                })
            })
            .collect()
    }
}

/// Reading back the `&'static str` fields of a serialised summary (`actdiff
/// merge` reads the parts' [`RankSummary`] lists): the texts are mapped to
/// the program's own names, and an unknown one is an error.
pub mod statics {
    use serde::{de::Error, Deserialize, Deserializer};

    use crate::parser::Field;

    /// A name the program owns (`&'static str`; an alias, so that serde's
    /// derive does not ask the input to live forever).
    pub type Name = &'static str;

    /// One field label, or `null`.
    pub fn field_label<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'static str>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| {
            Field::ALL
                .iter()
                .map(|f| f.label())
                .find(|l| *l == s)
                .ok_or_else(|| D::Error::custom(format!("unknown field `{s}`")))
        })
        .transpose()
    }

    /// Field labels (`L2 norm`, `Output hash`, ...).
    pub fn field_labels<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<&'static str>, D::Error> {
        let v: Vec<String> = Vec::deserialize(d)?;
        v.into_iter()
            .map(|s| {
                Field::ALL
                    .iter()
                    .map(|f| f.label())
                    .find(|l| *l == s)
                    .ok_or_else(|| D::Error::custom(format!("unknown field `{s}`")))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::parse_bytes;

    /// A log declaring 3 ops, holding 2, one value no number and the last
    /// block without its final newline.
    const LOG: &str = "Total captured activations: 3
================================================================================

[a/op_0_mm]
  Shape: torch.Size([2]), Dtype: torch.float32
  L2 norm: x1.0
  Output hash: 4.000000e+00

[a/op_1_add]
  Shape: torch.Size([2]), Dtype: torch.float32
  Output hash: 5.000000e+00";

    #[test]
    fn a_sides_problems_are_typed_and_written_as_before() {
        let t = parse_bytes(LOG.as_bytes().to_vec(), "r/rank_0_activations.log");
        let s = SideSummary::build(&t, 2, &t);
        assert!(matches!(
            s.incomplete[0],
            Message::CountMismatch {
                declared: 3,
                parsed: 2
            }
        ));
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["incomplete"],
            serde_json::json!([
                "declares 3 ops, parsed 2",
                "last block ends without newline (possibly truncated)",
                "1 unreadable value; the first at r/rank_0_activations.log:6:12: L2 norm value `x1.0` is not a number; it is not compared"
            ])
        );
        assert_eq!(
            v["warnings"][1],
            "r/rank_0_activations.log:11:28: last block ends without newline (possibly truncated)"
        );
        // Read back (as `actdiff merge` reads a part's summaries), each is
        // its text and writes the same JSON.
        let back: SideSummary = serde_json::from_value(v.clone()).unwrap();
        assert!(back
            .incomplete
            .iter()
            .chain(&back.warnings)
            .all(|m| matches!(m, Message::Read(_))));
        assert_eq!(back, s);
        assert_eq!(serde_json::to_value(&back).unwrap(), v);
    }

    /// A module-level log of one parameter: its gradient's and its own
    /// (after the optimizer) dims.
    fn module_log(grad: &str, param: &str) -> OpTable {
        let block = |key: &str, dims: &str, phase: &str| {
            format!("[{key}]\n  Shape: torch.Size([{dims}]), Dtype: torch.float32\n  Output hash: 1.0\n{phase}\n")
        };
        let log = format!(
            "Total captured activations: 2\nLevel: modules\n{}\n\n{}\n{}",
            "=".repeat(80),
            block("emb/op_0_weight_grad", grad, "  Phase: backward\n"),
            block("emb/op_1_weight", param, ""),
        );
        parse_bytes(log.into_bytes(), "r/rank_0_activations.log")
    }

    #[test]
    fn a_shard_has_fewer_rows_than_its_gradient_and_a_sparse_gradient_is_no_shard() {
        // FSDP2: the rank's shard of dim 0, an empty shard included.
        assert!(parameters_sharded(&module_log("128, 64", "64, 64")));
        assert!(parameters_sharded(&module_log("128, 64", "0, 64")));
        // The same dims: not sharded.
        assert!(!parameters_sharded(&module_log("128, 64", "128, 64")));
        // nn.Embedding(sparse=True): the gradient's coalesced values, 5 of
        // the 100 rows.
        assert!(!parameters_sharded(&module_log("5, 8", "100, 8")));
        // Other dims differ: not a dim-0 shard.
        assert!(!parameters_sharded(&module_log("128, 64", "64, 32")));
    }

    /// A one-sided op of run 2 names the row it feeds by run 2's key and
    /// line: an op only in run 2 shifts run 2's numbers (trial 21: "an op
    /// only in bug2, feeding `blocks.1/op_30_mul`", run 1's key beside
    /// bug2's own `blocks.1/op_30_mul`).
    #[test]
    fn a_one_sided_run_2_op_feeds_a_row_named_in_run_2s_numbering() {
        let row = |v: serde_json::Value| -> RowRef { serde_json::from_value(v).unwrap() };
        let fed = row(serde_json::json!({
            "index": 66, "key1": "blocks.1/op_30_mul", "key2": "blocks.1/op_31_mul",
            "status": "diff", "strategy": "fuzzy", "line1": 882, "line2": 896,
            "phase": "backward", "page": "p.html", "anchor": "a"
        }));
        let only2 = row(serde_json::json!({
            "index": 130, "key1": null, "key2": "blocks.1/op_30_mul", "status": "only2",
            "strategy": null, "line1": null, "line2": 882, "phase": "backward",
            "page": "p.html", "anchor": "a"
        }));
        use crate::matcher::Status;
        assert_eq!(fed.key_beside(Status::Only2), "blocks.1/op_31_mul");
        assert_eq!(fed.line_beside(Status::Only2), Some(896));
        assert_eq!(fed.key_beside(Status::Only1), "blocks.1/op_30_mul");
        assert_eq!(fed.line_beside(Status::Only1), Some(882));
        let cause = CauseRef {
            row: fed,
            cause: serde_json::from_value(serde_json::json!({
                "kind": "one_sided", "inputs": [0], "inherited": 0, "below_print": 0,
                "untraced": 0, "reads": 0, "print_limited": false
            }))
            .unwrap(),
            collective: None,
            chain: Vec::new(),
            one_sided: vec![only2],
            in_its_place: None,
        };
        assert_eq!(
            cause.subject(("ref", "bug2")),
            "blocks.1/op_30_mul (only in bug2) feeds blocks.1/op_31_mul"
        );
    }
}

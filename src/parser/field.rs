//! The field vocabulary of an op block: which fields a block has, how each
//! is spelled in a log (once, in [`Field::label`]), and which rule of the
//! reference reader decides that a line sets it. A leaf module: the line
//! classifier ([`super::line`]), the table ([`super::table`]) and the
//! stages after the parser all take their field names from here.

/// One field of an op block, in the writer's order. `Key` is the text in the
/// block's `[...]` header line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// `[<module_fqn>/op_<seq>_<op_name>]`
    Key = 0,
    /// `Shape: torch.Size([...]), Dtype: torch.<dtype>` — the whole text after `Shape: `.
    Shape,
    /// `L1 norm:` (older writers only).
    L1Norm,
    /// `L2 norm:` (float64 reduction).
    L2Norm,
    /// `Min:` (float32).
    Min,
    /// `Max:` (float32).
    Max,
    /// `Mean:` (float64).
    Mean,
    /// `Output hash:` comma-separated L1 norms, one per tensor output.
    OutputHash,
    /// `Input hashes:` comma-separated L1 norms of the inputs, before the op ran.
    InputHashes,
    /// `Output digest:` comma-separated 64-bit digests of the outputs'
    /// contents (16 hex digits each), aligned with the Output hash values.
    /// Written by actdiff's capture agent; the reference ignores the line.
    OutputDigest,
    /// `Input digests:` comma-separated 64-bit digests of the inputs'
    /// contents, aligned with the Input hashes values (capture agent only).
    InputDigests,
    /// `Input producers:` `;`-separated keys, positionally aligned with the input hashes.
    InputProducers,
    /// `Location: <file>:<line>`.
    Location,
    /// `Phase:`; absent means `forward` (or `optimizer` after the step's
    /// last backward op, see [`crate::parser::Phase`]).
    Phase,
}

/// Number of [`Field`] variants.
pub const N_FIELDS: usize = 14;

impl Field {
    /// Every field, in the writer's order.
    pub const ALL: [Field; N_FIELDS] = [
        Field::Key,
        Field::Shape,
        Field::L1Norm,
        Field::L2Norm,
        Field::Min,
        Field::Max,
        Field::Mean,
        Field::OutputHash,
        Field::InputHashes,
        Field::OutputDigest,
        Field::InputDigests,
        Field::InputProducers,
        Field::Location,
        Field::Phase,
    ];

    /// The five per-stat columns the reference compares for display
    /// (`_compute_diffs`), with their reference names.
    pub const DIFF_STATS: [Field; 5] = [
        Field::Shape,
        Field::L2Norm,
        Field::Min,
        Field::Max,
        Field::Mean,
    ];

    /// The printed values of an op that the comparison reads: the
    /// [`Field::DIFF_STATS`], then the Output hash and the Input hashes
    /// (the order of `--rows`' difference columns).
    pub const PRINTED: [Field; 7] = [
        Field::Shape,
        Field::L2Norm,
        Field::Min,
        Field::Max,
        Field::Mean,
        Field::OutputHash,
        Field::InputHashes,
    ];

    /// The fields whose values can hold a NaN or an infinity that matters
    /// (the stats and the Output hash): what the parser's
    /// [`crate::parser::FLAG_MAYBE_NONFINITE`] and the matcher's non-finite
    /// check look at.
    pub const NONFINITE: [Field; 6] = [
        Field::L1Norm,
        Field::L2Norm,
        Field::Min,
        Field::Max,
        Field::Mean,
        Field::OutputHash,
    ];

    /// The fields whose values are numbers (Python `float()` syntax, one
    /// value, or a comma-separated list for the hashes): the ones a
    /// malformed number is reported for.
    pub const NUMERIC: [Field; 7] = [
        Field::L1Norm,
        Field::L2Norm,
        Field::Min,
        Field::Max,
        Field::Mean,
        Field::OutputHash,
        Field::InputHashes,
    ];

    /// The digest fields (lists of 16-hex-digit values).
    pub const DIGESTS: [Field; 2] = [Field::OutputDigest, Field::InputDigests];

    /// The label as it appears in a log, without its colon (`L2 norm`,
    /// `Output hash`, ...). The one place a field's label is spelled: the
    /// parser and the writers use it. (The capture agent's extra `NaN count`
    /// and `Inf count` lines are no fields: their labels are spelled in
    /// `capture/record.rs` and `parser/line.rs`.)
    pub const fn label(self) -> &'static str {
        match self {
            Field::Key => "Key",
            Field::Shape => "Shape",
            Field::L1Norm => "L1 norm",
            Field::L2Norm => "L2 norm",
            Field::Min => "Min",
            Field::Max => "Max",
            Field::Mean => "Mean",
            Field::OutputHash => "Output hash",
            Field::InputHashes => "Input hashes",
            Field::OutputDigest => "Output digest",
            Field::InputDigests => "Input digests",
            Field::InputProducers => "Input producers",
            Field::Location => "Location",
            Field::Phase => "Phase",
        }
    }

    /// Whether a value of this field is a number list ([`Field::NUMERIC`]).
    #[inline]
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            Field::L1Norm
                | Field::L2Norm
                | Field::Min
                | Field::Max
                | Field::Mean
                | Field::OutputHash
                | Field::InputHashes
        )
    }

    /// Whether this field is a digest list ([`Field::DIGESTS`]).
    #[inline]
    pub fn is_digest(self) -> bool {
        matches!(self, Field::OutputDigest | Field::InputDigests)
    }

    pub(crate) const fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// Fields a line sets by the reference's stat rule: leading whitespace, the
/// label, `:`, whitespace, a value (`\s+(Shape|L1 norm|...):\s+(.+)`).
pub(crate) const STAT_FIELDS: [Field; 6] = [
    Field::Shape,
    Field::L1Norm,
    Field::L2Norm,
    Field::Min,
    Field::Max,
    Field::Mean,
];

/// Labels that set a field wherever `<label>:` occurs in a line, in the
/// reference's order of checks (the first that occurs wins), then the
/// accepted second spelling, then actdiff's own capture lines (which the
/// reference ignores, so they come last: a line the reference reads as one
/// of its fields is read so here too).
pub(crate) const CONTAINS_LABELS: [(&str, Field); 8] = [
    (Field::Location.label(), Field::Location),
    (Field::Phase.label(), Field::Phase),
    (Field::OutputHash.label(), Field::OutputHash),
    (Field::InputHashes.label(), Field::InputHashes),
    (Field::InputProducers.label(), Field::InputProducers),
    // PyTorch debug-mode tensor-hash dump spelling (see cases/05).
    ("Output hashes", Field::OutputHash),
    (Field::OutputDigest.label(), Field::OutputDigest),
    (Field::InputDigests.label(), Field::InputDigests),
];

/// A set of [`Field`]s, as a bit mask. Used for a log's schema: which fields
/// occur in at least one of its blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldSet(u16);

impl FieldSet {
    /// Adds `f`.
    pub fn insert(&mut self, f: Field) {
        self.0 |= f.bit();
    }
    /// Whether `f` is in the set.
    pub fn contains(self, f: Field) -> bool {
        self.0 & f.bit() != 0
    }
    /// The union of two sets.
    pub fn union(self, other: FieldSet) -> FieldSet {
        FieldSet(self.0 | other.0)
    }
    /// Fields in both sets.
    pub fn intersect(self, other: FieldSet) -> FieldSet {
        FieldSet(self.0 & other.0)
    }
    /// Fields in `self` but not in `other`, in writer order.
    pub fn minus(self, other: FieldSet) -> Vec<Field> {
        Field::ALL
            .iter()
            .copied()
            .filter(|f| self.contains(*f) && !other.contains(*f))
            .collect()
    }
}

/// How many significant digits a log prints its floats with (the
/// `Precision:` header line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Precision {
    /// The reference tracer's `%.6e`: 7 significant digits (no
    /// `Precision:` line).
    Printed {
        /// Significant digits printed (7 for `%.6e`).
        significant_digits: u32,
    },
    /// `Precision: full`: every float is the shortest text that round-trips
    /// in float64 (at most 17 significant digits), so a parsed value is the
    /// value the writer had.
    Full,
}

impl Default for Precision {
    fn default() -> Self {
        Precision::Printed {
            significant_digits: 7,
        }
    }
}

/// A step's phase, as actdiff reads it (`Phase:` line, or its position).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No `Phase:` line, before the step's last backward op (the
    /// reference's default for every op without the line).
    Forward,
    /// `Phase: backward`.
    Backward,
    /// No `Phase:` line, after the step's last backward op (the optimizer
    /// step). Only in logs that have backward ops.
    Optimizer,
}

impl Phase {
    /// Every phase, in step order.
    pub const ALL: [Phase; 3] = [Phase::Forward, Phase::Backward, Phase::Optimizer];

    /// `forward`, `backward` or `optimizer`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

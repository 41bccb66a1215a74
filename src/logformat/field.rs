//! The field vocabulary of an op block: which fields a block has, how each
//! is spelled in a log (once, in [`Field::label`]), which rule of the
//! reference reader decides that a line sets it, the phase a `Phase:` line
//! names ([`Phase`]), and the labels of the block lines that are no fields
//! ([`EXTRA_LABELS`]). A leaf module: the writers ([`super::stat_line`] and
//! the other line functions take a [`Field`]), the parser's line classifier
//! ([`crate::parser::line`]) and table, and the stages after the parser all
//! take their field names from here.

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
    /// last backward op, see [`Phase`]).
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
    /// parser and the writers ([`super::stat_line`] and the other line
    /// functions) use it. (The lines of a block that are no fields, such as
    /// the capture agent's `NaN count`, have their labels in
    /// [`EXTRA_LABELS`].)
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

/// The label of the capture agent's line with the number of NaN elements
/// of the primary output (written only when it is not zero). No field: the
/// reference comparator ignores it (it contains none of its labels);
/// actdiff's parser knows it ([`EXTRA_LABELS`]).
pub const NAN_COUNT_LABEL: &str = "NaN count";
/// The label of the capture agent's line with the number of +inf/-inf
/// elements of the primary output (written only when it is not zero).
pub const INF_COUNT_LABEL: &str = "Inf count";
/// The label of a block's line giving the layout of the tensor its stats
/// describe: its placement tokens and its whole-tensor (global) shape
/// (`Layout: tp:S(1) [64, 64]`); see [`crate::layout`].
pub const LAYOUT_LABEL: &str = "Layout";
/// The label of a block's line of placement tokens, one per output hash.
pub const OUTPUT_LAYOUTS_LABEL: &str = "Output layouts";
/// The label of a block's line of placement tokens, one per input hash.
pub const INPUT_LAYOUTS_LABEL: &str = "Input layouts";

/// The label of the capture agent's line naming the parameters an
/// optimizer-step op reads or writes (the parameter, its gradient, its
/// optimizer state, or a value computed from them), by their FQN in the
/// model, `, `-joined in the optimizer's order
/// (`Parameters: layers.0.wq.weight, layers.0.wk.weight`): a per-op
/// optimizer row's key (`<none>/op_12_lerp_`) names no module.
pub const PARAMETERS_LABEL: &str = "Parameters";
/// The label of the capture agent's line naming, for an optimizer-step op
/// whose outputs update different parameters (a foreach or fused op's
/// list), the parameters of each `Output hash` value: one `, `-joined
/// entry per value, `; `-separated (`Output parameters: 0.weight; 0.bias`).
pub const OUTPUT_PARAMETERS_LABEL: &str = "Output parameters";
/// The label of the capture agent's line naming, for an op outside the
/// optimizer step that reads a parameter (its tensor or a view of it: a
/// forward `mm` reading `weight.t()`), the parameter's FQN at each such
/// input, `;`-separated and aligned with `Input hashes` as `Input
/// producers` is (empty where an input is no parameter:
/// `Input parameters: ;blocks.1.fc1.lora_A`). Written only when some
/// input is one.
pub const INPUT_PARAMETERS_LABEL: &str = "Input parameters";

/// The labels of the lines a block may hold that are no [`Field`]s: known,
/// not compared, and ignored by the reference comparator (they contain none
/// of its labels). The parser reads a line that starts with one of them
/// and a `:` as such a line.
pub const EXTRA_LABELS: [&str; 8] = [
    NAN_COUNT_LABEL,
    INF_COUNT_LABEL,
    LAYOUT_LABEL,
    OUTPUT_LAYOUTS_LABEL,
    INPUT_LAYOUTS_LABEL,
    PARAMETERS_LABEL,
    OUTPUT_PARAMETERS_LABEL,
    INPUT_PARAMETERS_LABEL,
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
    /// The set of the fields whose [`Field`] numbers are the set bits of
    /// `bits` (bit `i`: field number `i`).
    pub(crate) fn from_bits(bits: u16) -> FieldSet {
        FieldSet(bits)
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

/// A step's phase, as actdiff reads it (`Phase:` line, or its position),
/// and as a writer gives it ([`super::phase_line`]: only
/// [`Phase::Backward`] writes a line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No `Phase:` line, before the step's last backward op (the
    /// reference's default for every op without the line).
    #[default]
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

    /// The phase a `Phase:` line's (trimmed) value names, if it names one.
    #[inline]
    pub fn from_name(v: &[u8]) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str().as_bytes() == v)
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

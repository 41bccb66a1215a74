//! The log format's vocabulary (`shared/spec/log-format.md`, actdiff's
//! additions in docs/log-format.md), and its one writer: every writer of
//! log text (the capture agent [`crate::capture`], the benchmark log
//! generator [`crate::gen`], the layout combiner [`crate::layout`]) writes
//! through the functions here, and the parser ([`crate::parser`]) reads
//! with the same vocabulary.
//!
//! - [`field`]: the fields of a block ([`Field`], its labels and field
//!   sets), [`Phase`], and the labels of a block's lines that are no fields
//!   (the capture agent's `NaN count:` and `Inf count:`, the layout lines);
//! - [`header`]: the header lines, written from [`HeaderNotes`] and read
//!   into [`Header`];
//! - [`shape`]: the Shape field's text (`torch.Size([...]), Dtype: ...`),
//!   written and read;
//! - [`number`]: number formatting; [`Precision`]: how floats are printed;
//! - the line writers below, each taking the [`Field`] it writes.
//!
//! Adding a field or a header line is a change here (plus its tests): the
//! parser and the writers take labels and values from this module.
//!
//! ```text
//! Total captured activations: 2          write_header
//! Excluded ops dispatched: t, view
//! Compiled: inductor                     (a compiled run only: CompileBackend)
//! Level: modules                         (a module-level capture only)
//! Step: 5                                (a step of a step series only)
//! Loss: 2.3125                           (when the training loop gave it)
//! Precision: full                        (Precision::Full only)
//! Mesh: dp=2 tp=2                        (a run with DTensors only: Mesh)
//! Coords: dp=0 tp=1
//! ========…(80)
//!
//! [layers.0.wq/op_0_mm]                  key_line
//!   Shape: torch.Size([2, 4]), Dtype: torch.float32     shape_line
//!   L2 norm: 1.810183e+02                 stat_line (Min, Max, Mean alike)
//!   Output hash: 2.663224e+04             list_line
//!   Input hashes: 2.553141e+04, 1.337287e+02
//!   Output digest: 0123456789abcdef      digest_line
//!   Input digests: …, …
//!   Input producers: a/op_0_x;           producers_line
//!   Location: llama3/model.py:152        text_line
//!   Phase: backward                      phase_line
//!   Layout: tp:S(1) [2, 8]               layout_lines (DTensor runs only)
//!   Output layouts: tp:S(1)
//!   Input layouts: R; tp:S(0)
//!   NaN count: 3                         count_lines (capture agent only)
//!
//! ```

pub mod field;
pub mod header;
pub mod number;
pub mod shape;

pub use field::{
    Field, FieldSet, Phase, EXTRA_LABELS, INF_COUNT_LABEL, INPUT_LAYOUTS_LABEL,
    INPUT_PARAMETERS_LABEL, LAYOUT_LABEL, NAN_COUNT_LABEL, N_FIELDS, OUTPUT_LAYOUTS_LABEL,
    OUTPUT_PARAMETERS_LABEL, PARAMETERS_LABEL,
};
pub use header::{
    compiled_line, filter_min_numel, is_count_line, write_header, BackendName, CaptureLevel,
    CompileBackend, Header, HeaderNotes, HeaderProblem, Mesh, RngState, BELOW_MIN_NUMEL_LABEL,
    COMPILED_LABEL, COORDS_LABEL, EXCLUDED_LABEL, FILTER_LABEL, LEVEL_LABEL, LOSS_LABEL,
    MESH_LABEL, PRECISION_LABEL, RNG_LABEL, ROOT_MODULE, STEP_LABEL, TOTAL_LABELS,
    WORLD_SIZE_LABEL,
};
pub use number::{fmt_e, fmt_e6, fmt_full, push_u64};
pub use shape::{push_shape, read_shape, shape_line, ShapeText};

/// How floats are printed in a log: written by the line functions
/// ([`Precision::push`]), read from the `Precision:` header line
/// ([`Header::precision`]), and reasoned about by root cause (how far two
/// true values may be apart and print alike: [`Precision::ulp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Precision {
    /// `%.{significant_digits - 1}e`; the reference tracer's `%.6e` is
    /// [`Precision::PRINTED`] (7 digits, no `Precision:` line).
    Printed {
        /// Significant digits printed (7 for `%.6e`).
        significant_digits: u32,
    },
    /// `Precision: full`: every float is the shortest text that round-trips
    /// in float64 (at most 17 significant digits, [`fmt_full`]), so a parsed
    /// value is the value the writer had.
    Full,
}

impl Default for Precision {
    /// The reference's [`Precision::PRINTED`].
    fn default() -> Self {
        Precision::PRINTED
    }
}

impl Precision {
    /// The reference tracer's `%.6e`: 7 significant digits.
    pub const PRINTED: Precision = Precision::Printed {
        significant_digits: 7,
    };

    /// Appends `x` in this precision.
    #[inline]
    pub fn push(self, out: &mut Vec<u8>, x: f64) {
        match self {
            Precision::Printed {
                significant_digits: 7,
            } => fmt_e6(out, x),
            Precision::Printed { significant_digits } => fmt_e(out, x, significant_digits),
            Precision::Full => fmt_full(out, x),
        }
    }

    /// The coarser of two precisions (what two logs can be compared at).
    pub fn coarser(self, o: Precision) -> Precision {
        match (self, o) {
            (Precision::Full, x) | (x, Precision::Full) => x,
            (
                Precision::Printed {
                    significant_digits: a,
                },
                Precision::Printed {
                    significant_digits: b,
                },
            ) => Precision::Printed {
                significant_digits: a.min(b),
            },
        }
    }

    /// One unit in the last printed place of `v` (absolute): the widest
    /// gap between two true values that print as the same text.
    pub fn ulp(self, v: f64) -> f64 {
        let a = v.abs();
        if a == 0.0 || !a.is_finite() {
            return 0.0;
        }
        match self {
            Precision::Full => a * f64::EPSILON,
            Precision::Printed { significant_digits } => {
                10f64.powi(a.log10().floor() as i32 - (significant_digits.max(1) as i32 - 1))
            }
        }
    }
}

/// Python's `\s` on bytes (without `\n`, which never occurs inside a
/// line): the whitespace the reference reader trims and splits at.
///
/// One shift and one test against a mask of the bytes below 64 (the parse
/// calls it several times a line; a `match` over the ranges compiled to a
/// chain of compares).
#[inline]
pub fn is_py_space(b: u8) -> bool {
    /// Bit `b` set for each whitespace byte `b`: `\t`, `\x0b`, `\x0c`,
    /// `\r`, `\x1c` to `\x1f`, space.
    const SPACES: u64 =
        (1 << b'\t') | (1 << 0x0b) | (1 << 0x0c) | (1 << b'\r') | (0xf << 0x1c) | (1 << b' ');
    b < 64 && (SPACES >> b) & 1 != 0
}

/// Trims Python whitespace ([`is_py_space`]) from both ends.
#[inline(always)]
pub fn trim(s: &[u8]) -> &[u8] {
    let mut a = 0;
    let mut b = s.len();
    while a < b && is_py_space(s[a]) {
        a += 1;
    }
    while b > a && is_py_space(s[b - 1]) {
        b -= 1;
    }
    &s[a..b]
}

/// The trimmed value of line `t` if it starts with `label` and a `:`.
#[inline]
pub fn labelled<'a>(t: &'a [u8], label: &str) -> Option<&'a [u8]> {
    t.strip_prefix(label.as_bytes())
        .and_then(|r| r.strip_prefix(b":"))
        .map(trim)
}

/// Log text quoted in a message: at most [`EXCERPT_CHARS`] characters
/// (then `…` and the full length), invalid UTF-8 replaced, control
/// characters escaped (`\u{1b}`), so a warning is one printable line
/// whatever the log holds.
pub fn quote(b: &[u8]) -> String {
    let text = String::from_utf8_lossy(&b[..b.len().min(EXCERPT_CHARS * 4)]);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == EXCERPT_CHARS {
            out.push_str(&format!("… ({} bytes)", b.len()));
            return out;
        }
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    if b.len() > EXCERPT_CHARS * 4 {
        out.push_str(&format!("… ({} bytes)", b.len()));
    }
    out
}

/// Most characters of log text [`quote`]d in one message.
pub const EXCERPT_CHARS: usize = 120;

/// A block's layout lines (a run with DTensors): placement tokens as the
/// capture agent writes them ([`crate::layout::Placement`] reads them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockLayout {
    /// `Layout:` the stats tensor's tokens and global shape
    /// (`tp:S(1) [64, 64]`); `None`: no line (no stats, or a plain tensor).
    pub stats: Option<String>,
    /// `Output layouts:` one token per output hash (`-` a plain tensor).
    pub outputs: Vec<String>,
    /// `Input layouts:` one token per input hash.
    pub inputs: Vec<String>,
}

/// Appends a block's layout lines: `Layout:`, `Output layouts:`, `Input
/// layouts:` (`; `-joined), each only when it has a value.
pub fn layout_lines(out: &mut Vec<u8>, l: &BlockLayout) {
    if let Some(s) = &l.stats {
        labelled_line(out, LAYOUT_LABEL, s.as_bytes());
    }
    for (label, v) in [
        (OUTPUT_LAYOUTS_LABEL, &l.outputs),
        (INPUT_LAYOUTS_LABEL, &l.inputs),
    ] {
        if !v.is_empty() {
            labelled_line(out, label, v.join("; ").as_bytes());
        }
    }
}

/// Appends `  <label>: <text>` and a newline: a block line, labelled by a
/// [`Field`]'s label or one of [`EXTRA_LABELS`].
#[inline]
fn labelled_line(out: &mut Vec<u8>, label: &str, text: &[u8]) {
    out.extend_from_slice(b"  ");
    out.extend_from_slice(label.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(text);
    out.push(b'\n');
}

/// Appends `[key]` and a newline (`key` as given: callers clean it).
pub fn key_line(out: &mut Vec<u8>, key: &[u8]) {
    out.push(b'[');
    out.extend_from_slice(key);
    out.extend_from_slice(b"]\n");
}

/// Appends `  <label>: <x>` and a newline (a stat: `L2 norm`, `Min`, `Max`,
/// `Mean`, `L1 norm`).
#[inline]
pub fn stat_line(out: &mut Vec<u8>, field: Field, x: f64, precision: Precision) {
    out.extend_from_slice(b"  ");
    out.extend_from_slice(field.label().as_bytes());
    out.extend_from_slice(b": ");
    precision.push(out, x);
    out.push(b'\n');
}

/// Appends `  <label>: v0, v1, ...` and a newline (`Output hash`,
/// `Input hashes`); nothing for an empty list.
pub fn list_line(out: &mut Vec<u8>, field: Field, vals: &[f64], precision: Precision) {
    if vals.is_empty() {
        return;
    }
    out.extend_from_slice(b"  ");
    out.extend_from_slice(field.label().as_bytes());
    out.extend_from_slice(b": ");
    for (i, v) in vals.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        precision.push(out, *v);
    }
    out.push(b'\n');
}

/// Appends `  <label>: <16 hex digits>, ...` and a newline (`Output digest`,
/// `Input digests`); nothing for an empty list.
pub fn digest_line(out: &mut Vec<u8>, field: Field, digests: &[u64]) {
    if digests.is_empty() {
        return;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(b"  ");
    out.extend_from_slice(field.label().as_bytes());
    out.extend_from_slice(b": ");
    for (i, d) in digests.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        for k in (0..16).rev() {
            out.push(HEX[((d >> (4 * k)) & 0xf) as usize]);
        }
    }
    out.push(b'\n');
}

/// Appends `  <label>: <text>` and a newline (`Location`; any field whose
/// value is text as given).
pub fn text_line(out: &mut Vec<u8>, field: Field, text: &[u8]) {
    labelled_line(out, field.label(), text);
}

/// Appends the `  Phase: backward` line for [`Phase::Backward`]; nothing
/// for the other phases (a reader takes a block without the line as
/// forward, or as optimizer after the step's last backward op).
pub fn phase_line(out: &mut Vec<u8>, phase: Phase) {
    if phase == Phase::Backward {
        text_line(out, Field::Phase, phase.as_str().as_bytes());
    }
}

/// Appends `  Parameters: a.weight, b.bias` and a newline
/// ([`PARAMETERS_LABEL`]); nothing for an empty list.
pub fn parameters_line(out: &mut Vec<u8>, names: &str) {
    if !names.is_empty() {
        labelled_line(out, PARAMETERS_LABEL, names.as_bytes());
    }
}

/// Appends `  Output parameters: a; b, c` and a newline
/// ([`OUTPUT_PARAMETERS_LABEL`]): one entry per Output hash value; nothing
/// for an empty list.
pub fn output_parameters_line(out: &mut Vec<u8>, entries: &[String]) {
    if !entries.is_empty() {
        labelled_line(out, OUTPUT_PARAMETERS_LABEL, entries.join("; ").as_bytes());
    }
}

/// Appends `  Input parameters: ;a.weight` and a newline
/// ([`INPUT_PARAMETERS_LABEL`]): one entry per input, `;`-separated;
/// nothing when every entry is empty.
pub fn input_parameters_line(out: &mut Vec<u8>, names: &[String]) {
    if names.iter().any(|n| !n.is_empty()) {
        labelled_line(out, INPUT_PARAMETERS_LABEL, names.join(";").as_bytes());
    }
}

/// Appends `  Input producers: k0;k1;...` and a newline: `n` producers,
/// `;`-separated, each written by `producer(out, i)` (nothing for an input
/// without a captured producer). Callers decide whether the line is
/// written (the reference writes it when its text is not empty).
pub fn producers_line(out: &mut Vec<u8>, n: usize, mut producer: impl FnMut(&mut Vec<u8>, usize)) {
    out.extend_from_slice(b"  ");
    out.extend_from_slice(Field::InputProducers.label().as_bytes());
    out.extend_from_slice(b": ");
    for i in 0..n {
        if i > 0 {
            out.push(b';');
        }
        producer(out, i);
    }
    out.push(b'\n');
}

/// Appends the capture agent's `  NaN count: n` and `  Inf count: n`
/// lines (the primary output's NaN and ±inf elements), each only when its
/// count is not zero.
pub fn count_lines(out: &mut Vec<u8>, nan: u64, inf: u64) {
    for (label, n) in [(NAN_COUNT_LABEL, nan), (INF_COUNT_LABEL, inf)] {
        if n > 0 {
            let mut v = Vec::new();
            push_u64(&mut v, n);
            labelled_line(out, label, &v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn py_space_is_pythons_bytes_whitespace_less_newline() {
        // Python: `bytes([b]).isspace()` or `re.match(rb"\s", ...)` on
        // str-decoded lines: \t \n \x0b \x0c \r \x1c-\x1f and space.
        for b in 0..=255u8 {
            let want = matches!(b, b' ' | b'\t' | b'\r' | 0x0b | 0x0c | 0x1c..=0x1f);
            assert_eq!(is_py_space(b), want, "byte {b:#04x}");
        }
    }

    #[test]
    fn header_lines_in_order() {
        let mut v = Vec::new();
        let notes = HeaderNotes {
            excluded: Some(vec!["view".into(), "t".into(), "view".into()]),
            compiled: CompileBackend::from_name("inductor"),
            compiled_modules: Some(vec!["a".into(), "b.c".into()]),
            level: CaptureLevel::Modules,
            step: Some(12),
            loss: Some(2.3125),
            rng: Some(RngState {
                start: 0x1f2e3d4c5b6a7980,
                end: 0x0a,
            }),
            world_size: Some(8),
            mesh: Some(Mesh::parse("dp=2 tp=4", "dp=1 tp=3").unwrap()),
            filter: Some("min_numel=1000".into()),
            below_min_numel: Some(5),
        };
        write_header(&mut v, 3, &notes, Precision::Full);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            format!(
                "Total captured activations: 3\nExcluded ops dispatched: t, view\nCapture filter: min_numel=1000\nOps below min numel: 5\nCompiled: inductor\nCompiled modules: a, b.c\nLevel: modules\nStep: 12\nLoss: 2.3125e+00\nRNG state: start=1f2e3d4c5b6a7980 end=000000000000000a\nPrecision: full\nWorld size: 8\nMesh: dp=2 tp=4\nCoords: dp=1 tp=3\n{}\n\n",
                "=".repeat(80)
            )
        );
        let mut v = Vec::new();
        write_header(&mut v, 0, &HeaderNotes::default(), Precision::PRINTED);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            format!("Total captured activations: 0\n{}\n\n", "=".repeat(80))
        );
    }

    #[test]
    fn compile_backends() {
        assert_eq!(
            CompileBackend::from_name(" inductor "),
            Some(CompileBackend::Inductor)
        );
        assert_eq!(
            CompileBackend::from_name("aot_eager"),
            Some(CompileBackend::AotEager)
        );
        let other = CompileBackend::from_name("cudagraphs").unwrap();
        assert_eq!(other.name(), "cudagraphs");
        assert!(matches!(other, CompileBackend::Other(_)));
        assert!(other.fuses() && CompileBackend::Inductor.fuses());
        assert!(!CompileBackend::AotEager.fuses() && !CompileBackend::Eager.fuses());
        for bad in ["", "  ", "a\nb", "x\ry", "t\u{7}"] {
            assert_eq!(CompileBackend::from_name(bad), None, "{bad:?}");
        }
        let mut v = Vec::new();
        compiled_line(&mut v, &other);
        assert_eq!(v, b"Compiled: cudagraphs\n");
    }

    #[test]
    fn lines() {
        let mut v = Vec::new();
        digest_line(&mut v, Field::OutputDigest, &[0xab, u64::MAX]);
        list_line(&mut v, Field::InputHashes, &[1.5, -0.0], Precision::Full);
        list_line(&mut v, Field::InputHashes, &[], Precision::Full);
        digest_line(&mut v, Field::InputDigests, &[]);
        shape_line(&mut v, &[], "bfloat16");
        stat_line(&mut v, Field::Min, 0.1, Precision::PRINTED);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            "  Output digest: 00000000000000ab, ffffffffffffffff\n  Input hashes: 1.5e+00, -0e+00\n  Shape: torch.Size([]), Dtype: torch.bfloat16\n  Min: 1.000000e-01\n"
        );
        let mut v = Vec::new();
        producers_line(&mut v, 3, |out, i| {
            if i != 1 {
                out.extend_from_slice(format!("m/op_{i}_x").as_bytes());
            }
        });
        phase_line(&mut v, Phase::Forward);
        phase_line(&mut v, Phase::Optimizer);
        phase_line(&mut v, Phase::Backward);
        text_line(&mut v, Field::Location, b"a.py:3");
        count_lines(&mut v, 0, 0);
        count_lines(&mut v, 2, 0);
        count_lines(&mut v, 0, 1);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            "  Input producers: m/op_0_x;;m/op_2_x\n  Phase: backward\n  Location: a.py:3\n  NaN count: 2\n  Inf count: 1\n"
        );
    }

    #[test]
    fn precision_writes_and_compares() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for x in [
            0.1,
            -2.5e-300,
            123456789.0,
            9.9999995,
            f64::NAN,
            -0.0,
            f64::INFINITY,
            5e-324,
        ] {
            Precision::PRINTED.push(&mut a, x);
            fmt_e(&mut b, x, 7);
            a.push(b' ');
            b.push(b' ');
        }
        assert_eq!(String::from_utf8(a), String::from_utf8(b));
        let mut v = Vec::new();
        Precision::Printed {
            significant_digits: 3,
        }
        .push(&mut v, 1234.5);
        assert_eq!(v, b"1.23e+03");
        let p3 = Precision::Printed {
            significant_digits: 3,
        };
        assert_eq!(Precision::Full.coarser(p3), p3);
        assert_eq!(Precision::PRINTED.coarser(p3), p3);
        assert_eq!(Precision::Full.coarser(Precision::Full), Precision::Full);
        assert_eq!(Precision::PRINTED.ulp(250.0), 1e-4);
        assert_eq!(Precision::PRINTED.ulp(0.0), 0.0);
        assert_eq!(Precision::default(), Precision::PRINTED);
    }
}

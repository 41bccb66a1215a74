//! The one writer of the activation-log text (`shared/spec/log-format.md`),
//! used by the capture agent ([`crate::capture`]) and the benchmark log
//! generator ([`crate::gen`]): the header, the field lines of a block, and
//! number formatting ([`number`]). The parser ([`crate::parser`]) reads what
//! this writes.
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
//!   Input producers: a/op_0_x;           text_line (Location, Phase alike)
//!   Layout: tp:S(1) [2, 8]               layout_lines (DTensor runs only)
//!   Output layouts: tp:S(1)
//!   Input layouts: R; tp:S(0)
//!
//! ```

pub mod number;

pub use number::{fmt_e6, fmt_full, push_u64};

/// How floats are printed in a log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// The reference's `%.6e` (7 significant digits): no header line.
    #[default]
    Printed,
    /// The shortest text that round-trips in float64 ([`fmt_full`]): the
    /// header says `Precision: full`.
    Full,
}

impl Precision {
    /// Appends `x` in this precision.
    #[inline]
    pub fn push(self, out: &mut Vec<u8>, x: f64) {
        match self {
            Precision::Printed => fmt_e6(out, x),
            Precision::Full => fmt_full(out, x),
        }
    }
}

/// The header line of a full-precision log (docs/log-format.md,
/// "Full-precision logs and digests").
pub const PRECISION_FULL_LINE: &str = "Precision: full";

/// The label of the header line that names the `torch.compile` backend a
/// run's model went through (`Compiled: inductor`). The reference
/// comparator ignores it (a line before the first block that is no label
/// of its own).
pub const COMPILED_LABEL: &str = "Compiled";

/// The `torch.compile` backend of a compiled run (the `Compiled:` header
/// line). A backend that fuses ops into generated kernels dispatches no op
/// for them, so the capture never sees them: a run compiled by one lacks
/// rows an eager run has ([`CompileBackend::fuses`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CompileBackend {
    /// `inductor`: TorchInductor, the default backend; fuses pointwise
    /// ops, norms and reductions into generated kernels.
    Inductor,
    /// `aot_eager`: AOTAutograd tracing run by eager kernels; fuses nothing.
    AotEager,
    /// `eager`: Dynamo's graph run by eager kernels; fuses nothing.
    Eager,
    /// Any other backend, by its name.
    Other(BackendName),
}

/// The name of a backend that [`CompileBackend`] has no variant for: one
/// line of text, trimmed, non-empty, without control characters (so it
/// always writes as one header line).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BackendName(String);

impl BackendName {
    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl CompileBackend {
    /// The backend of `name` (trimmed; `inductor`, `aot_eager`, `eager`, or
    /// any other name kept as text). `None` for an empty name or one with
    /// control characters (a line break would end the header line).
    pub fn from_name(name: &str) -> Option<CompileBackend> {
        let name = name.trim();
        if name.is_empty() || name.chars().any(char::is_control) {
            return None;
        }
        Some(match name {
            "inductor" => CompileBackend::Inductor,
            "aot_eager" => CompileBackend::AotEager,
            "eager" => CompileBackend::Eager,
            other => CompileBackend::Other(BackendName(other.to_string())),
        })
    }

    /// The backend's name, as `torch.compile(backend=...)` spells it.
    pub fn name(&self) -> &str {
        match self {
            CompileBackend::Inductor => "inductor",
            CompileBackend::AotEager => "aot_eager",
            CompileBackend::Eager => "eager",
            CompileBackend::Other(n) => n.as_str(),
        }
    }

    /// Whether the backend fuses ops away (they dispatch no op the capture
    /// can see): every backend except `aot_eager` and `eager`, which run
    /// each op with its eager kernel. An unknown backend is taken to fuse.
    pub fn fuses(&self) -> bool {
        !matches!(self, CompileBackend::AotEager | CompileBackend::Eager)
    }
}

impl std::fmt::Display for CompileBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Appends the header line `Compiled: <backend>` and a newline.
pub fn compiled_line(out: &mut Vec<u8>, backend: &CompileBackend) {
    out.extend_from_slice(COMPILED_LABEL.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(backend.name().as_bytes());
    out.push(b'\n');
}

/// The label of the header line that names the training step a log
/// captured (`Step: 5`, 1-based), written by a capture of a step series
/// (`capture_steps=` an iterable) into `step_5/rank_N_activations.log`.
/// The reference comparator ignores it (a line before the first block).
pub const STEP_LABEL: &str = "Step";

/// The label of the header line with the training loss of the captured
/// step (`Loss: 2.3125`, float64 text that round-trips), when the training
/// loop passed it (`prof.step(loss=...)`). Ignored by the reference.
pub const LOSS_LABEL: &str = "Loss";

/// The label of the header line of a module-level capture
/// (`Level: modules`): its blocks are module outputs, parameter gradients
/// and parameters after the optimizer step, not ops. A per-op log (the
/// reference's) has no such line. Ignored by the reference comparator.
pub const LEVEL_LABEL: &str = "Level";

/// What a log's blocks are: ops (the reference's, the default) or modules
/// (`Level: modules`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureLevel {
    /// One block per ATen op (no header line).
    #[default]
    Ops,
    /// One block per module forward output, parameter gradient and
    /// parameter after the optimizer step (`Level: modules`).
    Modules,
}

impl CaptureLevel {
    /// The level's name in the header line and the capture agent's
    /// `level=` (`ops`, `modules`).
    pub fn name(self) -> &'static str {
        match self {
            CaptureLevel::Ops => "ops",
            CaptureLevel::Modules => "modules",
        }
    }

    /// Whether this is the per-op level (the default).
    pub fn is_ops(&self) -> bool {
        *self == CaptureLevel::Ops
    }

    /// The level of `name` (trimmed), if known.
    pub fn from_name(name: &str) -> Option<CaptureLevel> {
        match name.trim() {
            "ops" => Some(CaptureLevel::Ops),
            "modules" => Some(CaptureLevel::Modules),
            _ => None,
        }
    }
}

/// What a log's header states beside its op count: every header line a
/// writer may add, in one place. The parser reads the same lines into
/// `parser::Header`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeaderNotes {
    /// The `Excluded ops dispatched:` line (sorted, deduplicated when
    /// written; `None`: no line).
    pub excluded: Option<Vec<String>>,
    /// `Compiled: <backend>` (`None`: an eager run, no line).
    pub compiled: Option<CompileBackend>,
    /// `Level: modules` ([`CaptureLevel::Ops`]: no line).
    pub level: CaptureLevel,
    /// `Step: S`, the 1-based training step (`None`: no line).
    pub step: Option<u64>,
    /// `Loss: x`, the step's training loss (`None`: no line).
    pub loss: Option<f64>,
    /// `Mesh:` and `Coords:`, the device mesh of a run with DTensors
    /// (`None`: no lines).
    pub mesh: Option<Mesh>,
}

/// The label of the header line naming a run's device mesh: its dimensions
/// and their sizes, outermost first (`Mesh: dp=2 tp=2`).
pub const MESH_LABEL: &str = "Mesh";
/// The label of the header line giving this rank's coordinate on each mesh
/// dimension (`Coords: dp=0 tp=1`).
pub const COORDS_LABEL: &str = "Coords";
/// The label of a block's line giving the layout of the tensor its stats
/// describe: its placement tokens and its whole-tensor (global) shape
/// (`Layout: tp:S(1) [64, 64]`); see [`crate::layout`].
pub const LAYOUT_LABEL: &str = "Layout";
/// The label of a block's line of placement tokens, one per output hash.
pub const OUTPUT_LAYOUTS_LABEL: &str = "Output layouts";
/// The label of a block's line of placement tokens, one per input hash.
pub const INPUT_LAYOUTS_LABEL: &str = "Input layouts";

/// A run's device mesh as its header states it (`Mesh:` and `Coords:`):
/// the dimensions' names and sizes, outermost first, and this rank's
/// coordinate on each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mesh {
    /// `(name, size)` per mesh dimension.
    pub dims: Vec<(String, u32)>,
    /// This rank's coordinate per dimension, aligned with `dims`.
    pub coords: Vec<u32>,
}

impl Mesh {
    /// Reads `Mesh:` and `Coords:` values (`dp=2 tp=2`, `dp=0 tp=1`): the
    /// same names in the same order, sizes ≥ 1, coordinates below them.
    /// Errors name what is wrong.
    pub fn parse(mesh: &str, coords: &str) -> Result<Mesh, String> {
        fn pairs(s: &str, what: &str) -> Result<Vec<(String, u32)>, String> {
            s.split_whitespace()
                .map(|p| {
                    let (n, v) = p
                        .split_once('=')
                        .ok_or_else(|| format!("{what} `{p}` is not NAME=NUMBER"))?;
                    let v: u32 = v
                        .parse()
                        .map_err(|_| format!("{what} `{p}` is not NAME=NUMBER"))?;
                    if n.is_empty() {
                        return Err(format!("{what} `{p}` has no name"));
                    }
                    Ok((n.to_string(), v))
                })
                .collect()
        }
        let dims = pairs(mesh, "mesh dimension")?;
        let c = pairs(coords, "coordinate")?;
        if dims.is_empty() {
            return Err("no mesh dimension".into());
        }
        if c.len() != dims.len() || c.iter().zip(&dims).any(|(a, b)| a.0 != b.0) {
            return Err(format!(
                "coordinates `{coords}` do not name the mesh dimensions `{mesh}` in order"
            ));
        }
        if let Some((n, s)) = dims.iter().find(|d| d.1 == 0) {
            return Err(format!("mesh dimension {n}={s} is empty"));
        }
        if let Some(((n, v), (_, s))) = c.iter().zip(&dims).find(|((_, v), (_, s))| v >= s) {
            return Err(format!(
                "coordinate {n}={v} is outside the mesh ({n} has {s})"
            ));
        }
        Ok(Mesh {
            dims,
            coords: c.into_iter().map(|(_, v)| v).collect(),
        })
    }

    /// The `Mesh:` value (`dp=2 tp=2`).
    pub fn dims_text(&self) -> String {
        let v: Vec<String> = self.dims.iter().map(|(n, s)| format!("{n}={s}")).collect();
        v.join(" ")
    }

    /// The `Coords:` value (`dp=0 tp=1`).
    pub fn coords_text(&self) -> String {
        let v: Vec<String> = self
            .dims
            .iter()
            .zip(&self.coords)
            .map(|((n, _), c)| format!("{n}={c}"))
            .collect();
        v.join(" ")
    }
}

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
        text_line(out, LAYOUT_LABEL, s.as_bytes());
    }
    for (label, v) in [
        (OUTPUT_LAYOUTS_LABEL, &l.outputs),
        (INPUT_LAYOUTS_LABEL, &l.inputs),
    ] {
        if !v.is_empty() {
            text_line(out, label, v.join("; ").as_bytes());
        }
    }
}

/// Appends the header: `Total captured activations: N`, then the lines of
/// `notes` in this order: `Excluded ops dispatched:` (`, `-joined, `(none)`
/// when empty), `Compiled: <backend>` ([`compiled_line`]), `Level:
/// modules` (a module-level capture only), `Step: S`,
/// `Loss: x` (shortest round-trip text, [`fmt_full`]); `Precision: full`
/// for [`Precision::Full`]; 80 `=` and an empty line.
pub fn write_header(out: &mut Vec<u8>, count: u64, notes: &HeaderNotes, precision: Precision) {
    out.extend_from_slice(b"Total captured activations: ");
    push_u64(out, count);
    out.push(b'\n');
    if let Some(ex) = &notes.excluded {
        let mut ops: Vec<&str> = ex.iter().map(|s| s.as_str()).collect();
        ops.sort_unstable();
        ops.dedup();
        out.extend_from_slice(b"Excluded ops dispatched: ");
        if ops.is_empty() {
            out.extend_from_slice(b"(none)");
        } else {
            out.extend_from_slice(ops.join(", ").as_bytes());
        }
        out.push(b'\n');
    }
    if let Some(backend) = &notes.compiled {
        compiled_line(out, backend);
    }
    if notes.level != CaptureLevel::Ops {
        out.extend_from_slice(LEVEL_LABEL.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(notes.level.name().as_bytes());
        out.push(b'\n');
    }
    if let Some(step) = notes.step {
        out.extend_from_slice(STEP_LABEL.as_bytes());
        out.extend_from_slice(b": ");
        push_u64(out, step);
        out.push(b'\n');
    }
    if let Some(loss) = notes.loss {
        out.extend_from_slice(LOSS_LABEL.as_bytes());
        out.extend_from_slice(b": ");
        fmt_full(out, loss);
        out.push(b'\n');
    }
    if precision == Precision::Full {
        out.extend_from_slice(PRECISION_FULL_LINE.as_bytes());
        out.push(b'\n');
    }
    if let Some(m) = &notes.mesh {
        for (label, v) in [(MESH_LABEL, m.dims_text()), (COORDS_LABEL, m.coords_text())] {
            out.extend_from_slice(label.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.push(b'\n');
        }
    }
    out.extend_from_slice(&[b'='; 80]);
    out.extend_from_slice(b"\n\n");
}

/// Appends `[key]` and a newline (`key` as given: callers clean it).
pub fn key_line(out: &mut Vec<u8>, key: &[u8]) {
    out.push(b'[');
    out.extend_from_slice(key);
    out.extend_from_slice(b"]\n");
}

/// Appends `torch.Size([d0, d1, ...]), Dtype: torch.<dtype>` (no label).
pub fn push_shape(out: &mut Vec<u8>, shape: &[i64], dtype: &str) {
    out.extend_from_slice(b"torch.Size([");
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        if *d < 0 {
            out.push(b'-');
        }
        push_u64(out, d.unsigned_abs());
    }
    out.extend_from_slice(b"]), Dtype: torch.");
    out.extend_from_slice(dtype.as_bytes());
}

/// Appends `  Shape: torch.Size([...]), Dtype: torch.<dtype>` and a newline.
pub fn shape_line(out: &mut Vec<u8>, shape: &[i64], dtype: &str) {
    out.extend_from_slice(b"  Shape: ");
    push_shape(out, shape, dtype);
    out.push(b'\n');
}

/// Appends `  <label>: <x>` and a newline.
#[inline]
pub fn stat_line(out: &mut Vec<u8>, label: &str, x: f64, precision: Precision) {
    out.extend_from_slice(b"  ");
    out.extend_from_slice(label.as_bytes());
    out.extend_from_slice(b": ");
    precision.push(out, x);
    out.push(b'\n');
}

/// Appends `  <label>: v0, v1, ...` and a newline (`Output hash`,
/// `Input hashes`); nothing for an empty list.
pub fn list_line(out: &mut Vec<u8>, label: &str, vals: &[f64], precision: Precision) {
    if vals.is_empty() {
        return;
    }
    out.extend_from_slice(b"  ");
    out.extend_from_slice(label.as_bytes());
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
pub fn digest_line(out: &mut Vec<u8>, label: &str, digests: &[u64]) {
    if digests.is_empty() {
        return;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(b"  ");
    out.extend_from_slice(label.as_bytes());
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

/// Appends `  <label>: <text>` and a newline (`Location`, `Phase`, counts).
pub fn text_line(out: &mut Vec<u8>, label: &str, text: &[u8]) {
    out.extend_from_slice(b"  ");
    out.extend_from_slice(label.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(text);
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_in_order() {
        let mut v = Vec::new();
        let notes = HeaderNotes {
            excluded: Some(vec!["view".into(), "t".into(), "view".into()]),
            compiled: CompileBackend::from_name("inductor"),
            level: CaptureLevel::Modules,
            step: Some(12),
            loss: Some(2.3125),
            mesh: Some(Mesh::parse("dp=2 tp=4", "dp=1 tp=3").unwrap()),
        };
        write_header(&mut v, 3, &notes, Precision::Full);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            format!(
                "Total captured activations: 3\nExcluded ops dispatched: t, view\nCompiled: inductor\nLevel: modules\nStep: 12\nLoss: 2.3125e+00\nPrecision: full\nMesh: dp=2 tp=4\nCoords: dp=1 tp=3\n{}\n\n",
                "=".repeat(80)
            )
        );
        let mut v = Vec::new();
        write_header(&mut v, 0, &HeaderNotes::default(), Precision::Printed);
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
        digest_line(&mut v, "Output digest", &[0xab, u64::MAX]);
        list_line(&mut v, "Input hashes", &[1.5, -0.0], Precision::Full);
        list_line(&mut v, "Input hashes", &[], Precision::Full);
        digest_line(&mut v, "Input digests", &[]);
        shape_line(&mut v, &[], "bfloat16");
        stat_line(&mut v, "Min", 0.1, Precision::Printed);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            "  Output digest: 00000000000000ab, ffffffffffffffff\n  Input hashes: 1.5e+00, -0e+00\n  Shape: torch.Size([]), Dtype: torch.bfloat16\n  Min: 1.000000e-01\n"
        );
    }
}

//! The header of a log: the lines before its first block. Each line's
//! label, its value's type, how it is written ([`write_header`], from
//! [`HeaderNotes`]) and how it is read ([`Header::read_line`], into
//! [`Header`]) live here, so a new header line is a change in this file
//! (plus its tests); the parser turns a [`HeaderProblem`] into a warning.

use super::number::{fmt_full, push_u64};
use super::{labelled, quote, trim, Precision};

/// The labels of the header line that gives a log's op count: the
/// reference tracer's, then a second writer's (`Total captured tensor hash
/// ops: N`, read alike). A log whose first line is one was written by a
/// tracer ([`is_count_line`]).
pub const TOTAL_LABELS: [&str; 2] = [
    "Total captured activations",
    "Total captured tensor hash ops",
];

/// The label of the header line listing the ops the tracer saw dispatched
/// but did not capture (`Excluded ops dispatched: t, view`).
pub const EXCLUDED_LABEL: &str = "Excluded ops dispatched";
/// The value of an `Excluded ops dispatched:` line that lists no op.
const NO_EXCLUDED: &str = "(none)";

/// The label of the header line giving what a per-op capture leaves out
/// by its settings (`Capture filter: min_numel=1000`, then `, op_filter=`
/// and `, excluded_ops=` when set): two logs whose filters differ number
/// their ops differently, so a compare refuses them. Ignored by the
/// reference comparator (a line before the first block).
pub const FILTER_LABEL: &str = "Capture filter";

/// The label of the header line counting the ops of a per-op capture not
/// captured because every floating-point result was smaller than
/// `min_numel` elements (`Ops below min numel: 57`): a difference can
/// enter through one of them unseen.
pub const BELOW_MIN_NUMEL_LABEL: &str = "Ops below min numel";

/// The label of the header line of a full-precision log (`Precision:
/// full`; docs/log-format.md, "Full-precision logs and digests").
pub const PRECISION_LABEL: &str = "Precision";
/// The value of the `Precision:` line of [`Precision::Full`].
const PRECISION_FULL: &str = "full";

/// The label of the header line that names the `torch.compile` backend a
/// run's model went through (`Compiled: inductor`). The reference
/// comparator ignores it (a line before the first block that is no label
/// of its own).
pub const COMPILED_LABEL: &str = "Compiled";

/// The label of the header line of a module-level capture naming the
/// modules whose forward ran compiled, so that their outputs (and those of
/// the modules inside them) have no block (`Compiled modules: blocks.0,
/// blocks.1`; `<none>`: the model's whole forward).
pub const COMPILED_MODULES_LABEL: &str = "Compiled modules";

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
    header_line(out, COMPILED_LABEL, backend.name().as_bytes());
}

/// The label of the header line that names the training step a log
/// captured (`Step: 5`, 1-based), written by a capture of a step series
/// (`capture_steps=` an iterable) into `step_5/rank_N_activations.log`.
/// The reference comparator ignores it (a line before the first block).
pub const STEP_LABEL: &str = "Step";

/// The label of the header line with the number of processes of a
/// distributed run (`World size: 8`, `torch.distributed`'s world size),
/// written by the capture agent when the process group is initialized: a
/// run whose logs declare it and lack a rank's log is incomplete (a rank
/// that crashed before writing). Ignored by the reference comparator.
pub const WORLD_SIZE_LABEL: &str = "World size";

/// The label of the header line with the training loss of the captured
/// step (`Loss: 2.3125`, float64 text that round-trips), when the training
/// loop passed it (`prof.step(loss=...)`). Ignored by the reference.
pub const LOSS_LABEL: &str = "Loss";

/// The label of the header line with digests of torch's random number
/// generators' state when the captured step was armed and when it ended
/// (`RNG state: start=1f2e3d4c5b6a7980 end=0a1b2c3d4e5f6071`, [`RngState`]),
/// written by the capture agent at both levels. Ignored by the reference.
pub const RNG_LABEL: &str = "RNG state";

/// Digests (64-bit, written as 16 hex digits) of torch's random number
/// generators' state (the CPU generator's, and the current CUDA
/// device's when CUDA is initialised) at two moments of a captured step:
/// when the capture was armed (after the previous step's `prof.step()`,
/// or when the profiler was made) and when the step's log was written
/// (its `prof.step()`). Two runs with equal starts draw the same numbers
/// for the same random ops; a step with `start != end` drew random numbers
/// (dropout, an init, a sampler on torch's generator).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RngState {
    /// The digest when the step was armed.
    #[serde(with = "hex_u64")]
    pub start: u64,
    /// The digest when the step's log was written.
    #[serde(with = "hex_u64")]
    pub end: u64,
}

impl RngState {
    /// Whether the step drew random numbers from torch's generators.
    pub fn draws(&self) -> bool {
        self.start != self.end
    }

    /// The `RNG state:` value (`start=<16 hex> end=<16 hex>`).
    pub fn text(&self) -> String {
        format!("start={:016x} end={:016x}", self.start, self.end)
    }

    /// Reads an `RNG state:` value: `start=` and `end=`, each 16 hex
    /// digits, in this order.
    pub fn parse(v: &str) -> Option<RngState> {
        let mut it = v.split_whitespace();
        let hex = |p: Option<&str>, name: &str| -> Option<u64> {
            let d = p?.strip_prefix(name)?.strip_prefix('=')?;
            (d.len() == 16)
                .then(|| u64::from_str_radix(d, 16).ok())
                .flatten()
        };
        let start = hex(it.next(), "start")?;
        let end = hex(it.next(), "end")?;
        it.next().is_none().then_some(RngState { start, end })
    }
}

/// Serde of a `u64` as 16 hex digits (a JSON number would lose bits).
mod hex_u64 {
    pub fn serialize<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:016x}"))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let t: String = serde::Deserialize::deserialize(d)?;
        u64::from_str_radix(&t, 16).map_err(serde::de::Error::custom)
    }
}

/// The name of the root module in keys (`<none>/op_0_output`) and in the
/// `Compiled modules:` line, where it means the whole forward ran
/// compiled; written there as `<none> (the whole model)` so that the line
/// does not read as "no module compiled" (trial 63). The reader drops a
/// parenthesised note after a name.
pub const ROOT_MODULE: &str = "<none>";

/// The label of the header line of a module-level capture
/// (`Level: modules`): its blocks are module outputs, parameter gradients,
/// parameters after the optimizer step and persistent buffers, not ops. A per-op log (the
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
    /// One block per module forward output, parameter gradient,
    /// parameter after the optimizer step and persistent buffer
    /// (`Level: modules`).
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
/// writer may add, in one place. The parser reads the same lines into a
/// [`Header`] ([`Header::read_line`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeaderNotes {
    /// The `Excluded ops dispatched:` line (sorted, deduplicated when
    /// written; `None`: no line).
    pub excluded: Option<Vec<String>>,
    /// `Compiled: <backend>` (`None`: an eager run, no line).
    pub compiled: Option<CompileBackend>,
    /// `Compiled modules: a, b` (module-level captures; `None`: no line).
    pub compiled_modules: Option<Vec<String>>,
    /// `Level: modules` ([`CaptureLevel::Ops`]: no line).
    pub level: CaptureLevel,
    /// `Step: S`, the 1-based training step (`None`: no line).
    pub step: Option<u64>,
    /// `Loss: x`, the step's training loss (`None`: no line).
    pub loss: Option<f64>,
    /// `RNG state: start=… end=…` (`None`: no line).
    pub rng: Option<RngState>,
    /// `World size: N`, the processes of a distributed run (`None`: no
    /// line).
    pub world_size: Option<u32>,
    /// `Mesh:` and `Coords:`, the device mesh of a run with DTensors
    /// (`None`: no lines).
    pub mesh: Option<Mesh>,
    /// `Capture filter: min_numel=1000, ...` (`None`: no line).
    pub filter: Option<String>,
    /// `Ops below min numel: N` (`None`: no line).
    pub below_min_numel: Option<u64>,
}

/// The label of the header line naming a run's device mesh: its dimensions
/// and their sizes, outermost first (`Mesh: dp=2 tp=2`).
pub const MESH_LABEL: &str = "Mesh";
/// The label of the header line giving this rank's coordinate on each mesh
/// dimension (`Coords: dp=0 tp=1`).
pub const COORDS_LABEL: &str = "Coords";
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

/// Appends the header line `<label>: <value>` and a newline.
fn header_line(out: &mut Vec<u8>, label: &str, value: &[u8]) {
    out.extend_from_slice(label.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.push(b'\n');
}

/// Appends the header: `Total captured activations: N`, then the lines of
/// `notes` in this order: `Excluded ops dispatched:` (`, `-joined, `(none)`
/// when empty), `Capture filter:`, `Ops below min numel:`, `Compiled: <backend>` ([`compiled_line`]), `Compiled
/// modules:` (`, `-joined), `Level:
/// modules` (a module-level capture only), `Step: S`,
/// `Loss: x` (shortest round-trip text, [`fmt_full`]), `RNG state:
/// start=… end=…` ([`RngState::text`]); `Precision: full`
/// for [`Precision::Full`]; `Mesh:` and `Coords:`; 80 `=` and an empty
/// line.
pub fn write_header(out: &mut Vec<u8>, count: u64, notes: &HeaderNotes, precision: Precision) {
    let mut n = Vec::new();
    push_u64(&mut n, count);
    header_line(out, TOTAL_LABELS[0], &n);
    if let Some(ex) = &notes.excluded {
        let mut ops: Vec<&str> = ex.iter().map(|s| s.as_str()).collect();
        ops.sort_unstable();
        ops.dedup();
        let v = if ops.is_empty() {
            NO_EXCLUDED.to_string()
        } else {
            ops.join(", ")
        };
        header_line(out, EXCLUDED_LABEL, v.as_bytes());
    }
    if let Some(f) = &notes.filter {
        header_line(out, FILTER_LABEL, f.as_bytes());
    }
    if let Some(n) = notes.below_min_numel {
        let mut v = Vec::new();
        push_u64(&mut v, n);
        header_line(out, BELOW_MIN_NUMEL_LABEL, &v);
    }
    if let Some(backend) = &notes.compiled {
        compiled_line(out, backend);
    }
    if let Some(m) = &notes.compiled_modules {
        let names: Vec<&str> = m
            .iter()
            .map(|n| {
                if n == ROOT_MODULE {
                    "<none> (the whole model)"
                } else {
                    n.as_str()
                }
            })
            .collect();
        header_line(out, COMPILED_MODULES_LABEL, names.join(", ").as_bytes());
    }
    if notes.level != CaptureLevel::Ops {
        header_line(out, LEVEL_LABEL, notes.level.name().as_bytes());
    }
    if let Some(step) = notes.step {
        let mut v = Vec::new();
        push_u64(&mut v, step);
        header_line(out, STEP_LABEL, &v);
    }
    if let Some(loss) = notes.loss {
        let mut v = Vec::new();
        fmt_full(&mut v, loss);
        header_line(out, LOSS_LABEL, &v);
    }
    if let Some(rng) = &notes.rng {
        header_line(out, RNG_LABEL, rng.text().as_bytes());
    }
    if precision == Precision::Full {
        header_line(out, PRECISION_LABEL, PRECISION_FULL.as_bytes());
    }
    if let Some(n) = notes.world_size {
        let mut v = Vec::new();
        push_u64(&mut v, u64::from(n));
        header_line(out, WORLD_SIZE_LABEL, &v);
    }
    if let Some(m) = &notes.mesh {
        header_line(out, MESH_LABEL, m.dims_text().as_bytes());
        header_line(out, COORDS_LABEL, m.coords_text().as_bytes());
    }
    out.extend_from_slice(&[b'='; 80]);
    out.extend_from_slice(b"\n\n");
}

/// The header lines before the first block, as the parser reads them
/// ([`Header::read_line`]): what [`HeaderNotes`] writes, and the lines
/// every writer adds (the op count, the rule, the precision).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Header {
    /// `Total captured activations: N` (or a second writer's
    /// `Total captured tensor hash ops: N`); `None` when the line is absent.
    pub total: Option<u64>,
    /// `Excluded ops dispatched:` as a sorted list; `Some(vec![])` for
    /// `(none)`; `None` when the line is absent (older logs).
    pub excluded: Option<Vec<String>>,
    /// Whether the line of 80 `=` was seen.
    pub has_rule: bool,
    /// `Compiled: <backend>`: the `torch.compile` backend the run went
    /// through (an unknown name kept as text); `None` when the line is
    /// absent (an eager run, or an older writer).
    pub compiled: Option<CompileBackend>,
    /// `Compiled modules: a, b`: in a module-level capture, the modules
    /// whose forward ran compiled (`<none>`: the whole forward), their
    /// outputs and those of the modules inside them not recorded; `None`
    /// when the line is absent (then, with `Compiled:`, any module's).
    pub compiled_modules: Option<Vec<String>>,
    /// `Level: modules`: a module-level capture ([`CaptureLevel::Ops`]
    /// when the line is absent).
    pub level: CaptureLevel,
    /// `Step: S`: the 1-based training step of a step series' log
    /// (`step_S/rank_N_activations.log`); `None` when absent.
    pub step: Option<u64>,
    /// `Loss: x`: the step's training loss, when the loop gave it.
    pub loss: Option<f64>,
    /// `RNG state: start=… end=…`: digests of torch's random number
    /// generators' state when the step was armed and when it ended.
    pub rng: Option<RngState>,
    /// `World size: N`: the processes of the distributed run the log is
    /// one rank of; `None` when absent (one process, the reference's logs).
    pub world_size: Option<u32>,
    /// `Mesh:` then `Coords:`: the device mesh of a run with DTensors and
    /// this rank's place in it; `None` when absent (or unreadable: a
    /// warning says so).
    pub mesh: Option<Mesh>,
    /// The `Mesh:` value until its `Coords:` line is read.
    pub mesh_dims: Option<String>,
    /// `Precision: full` ([`Precision::Full`]); absent: the reference's
    /// `%.6e` ([`Precision::PRINTED`]).
    pub precision: Precision,
    /// `Capture filter:`'s value, trimmed; `None` when absent (the
    /// reference's logs, older captures, module-level captures).
    pub filter: Option<String>,
    /// `Ops below min numel: N`; `None` when absent.
    pub below_min_numel: Option<u64>,
}

/// A header line that does not read: the column of its value and what is
/// wrong with it, quoting the value ([`quote`]). The parser turns it into
/// a warning; the line changes nothing, or what it sets is read as absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderProblem {
    /// 1-based column (in bytes) in the line.
    pub column: u64,
    /// What is wrong.
    pub message: String,
}

impl HeaderProblem {
    /// The problem of value `v` (a slice of `line`): `message` with `{}`
    /// replaced by the quoted value, at the value's column.
    fn of_value(line: &[u8], v: &[u8], message: &str) -> HeaderProblem {
        HeaderProblem {
            column: (offset_of(line, v) + 1) as u64,
            message: message.replacen("{}", &quote(v), 1),
        }
    }
}

/// Offset of `part` (a subslice of `line`) in `line`.
fn offset_of(line: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - line.as_ptr() as usize
}

/// Whether `first_line` (a log's first line) is an op-count line
/// (`Total captured activations: N`): a tracer wrote the log.
pub fn is_count_line(first_line: &[u8]) -> bool {
    TOTAL_LABELS
        .iter()
        .any(|l| labelled(first_line, l).is_some())
}

impl Header {
    /// Reads one line before the first block (without its `\n`) into
    /// `self`: each header line's label is checked in turn, and its value
    /// read by its own step. A line that is no header line, or whose value
    /// does not read, is a [`HeaderProblem`].
    pub fn read_line(&mut self, line: &[u8]) -> Result<(), HeaderProblem> {
        let t = trim(line);
        for label in TOTAL_LABELS {
            if let Some(v) = labelled(t, label) {
                return self.read_total(label, v);
            }
        }
        if let Some(v) = labelled(t, EXCLUDED_LABEL) {
            self.excluded = Some(read_excluded(v));
            return Ok(());
        }
        if let Some(v) = labelled(t, FILTER_LABEL) {
            self.filter = Some(quote(v));
            return Ok(());
        }
        if let Some(v) = labelled(t, BELOW_MIN_NUMEL_LABEL) {
            return self.read_below_min_numel(line, v);
        }
        if let Some(v) = labelled(t, COMPILED_LABEL) {
            return self.read_compiled(line, v);
        }
        if let Some(v) = labelled(t, COMPILED_MODULES_LABEL) {
            // A name's parenthesised note (`<none> (the whole model)`)
            // is not part of it: FQNs hold no space.
            let names = v
                .split(|b| *b == b',')
                .map(|n| n.split(|b| *b == b'(').next().unwrap_or(n))
                .map(trim)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned());
            self.compiled_modules = Some(names.collect());
            return Ok(());
        }
        if let Some(v) = labelled(t, LEVEL_LABEL) {
            return self.read_level(line, v);
        }
        if let Some(v) = labelled(t, MESH_LABEL) {
            self.mesh_dims = Some(quote(v));
            return Ok(());
        }
        if let Some(v) = labelled(t, COORDS_LABEL) {
            return self.read_coords(line, v);
        }
        if let Some(v) = labelled(t, STEP_LABEL) {
            return self.read_step(line, v);
        }
        if let Some(v) = labelled(t, LOSS_LABEL) {
            return self.read_loss(line, v);
        }
        if let Some(v) = labelled(t, RNG_LABEL) {
            return self.read_rng(line, v);
        }
        if let Some(v) = labelled(t, WORLD_SIZE_LABEL) {
            return self.read_world_size(line, v);
        }
        if let Some(v) = labelled(t, PRECISION_LABEL) {
            return self.read_precision(line, v);
        }
        if t.len() >= 10 && t.iter().all(|b| *b == b'=') {
            self.has_rule = true;
            return Ok(());
        }
        Err(HeaderProblem {
            column: 1,
            message: format!(
                "line before the first block is no header line: `{}`",
                quote(&t[..t.len().min(80)])
            ),
        })
    }

    /// `Total captured activations: N` (the value `v` after `label:`).
    fn read_total(&mut self, label: &str, v: &[u8]) -> Result<(), HeaderProblem> {
        match std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            Some(n) => {
                self.total = Some(n);
                Ok(())
            }
            None => Err(HeaderProblem {
                column: (label.len() + 2) as u64,
                message: format!("op count `{}` is not an integer", quote(v)),
            }),
        }
    }

    /// `Compiled: <backend>`.
    fn read_compiled(&mut self, line: &[u8], v: &[u8]) -> Result<(), HeaderProblem> {
        match std::str::from_utf8(v)
            .ok()
            .and_then(CompileBackend::from_name)
        {
            Some(b) => {
                self.compiled = Some(b);
                Ok(())
            }
            None => Err(HeaderProblem::of_value(
                line,
                v,
                "compile backend `{}` is no name; read as not compiled",
            )),
        }
    }

    /// `Level: ops|modules`.
    fn read_level(&mut self, line: &[u8], v: &[u8]) -> Result<(), HeaderProblem> {
        match std::str::from_utf8(v)
            .ok()
            .and_then(CaptureLevel::from_name)
        {
            Some(l) => {
                self.level = l;
                Ok(())
            }
            None => Err(HeaderProblem::of_value(
                line,
                v,
                "capture level `{}` is not `ops` or `modules`; read as ops",
            )),
        }
    }

    /// `Coords: ...`, read with the `Mesh:` line before it.
    fn read_coords(&mut self, line: &[u8], v: &[u8]) -> Result<(), HeaderProblem> {
        let dims = self.mesh_dims.take().unwrap_or_default();
        match Mesh::parse(&dims, &quote(v)) {
            Ok(m) => {
                self.mesh = Some(m);
                Ok(())
            }
            Err(e) => Err(HeaderProblem::of_value(
                line,
                v,
                &format!(
                    "device mesh `{dims}` / coordinates `{{}}` do not read ({e}); read as no mesh"
                ),
            )),
        }
    }

    /// `Step: S`.
    fn read_step(&mut self, line: &[u8], v: &[u8]) -> Result<(), HeaderProblem> {
        match std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()) {
            Some(s) => {
                self.step = Some(s);
                Ok(())
            }
            None => Err(HeaderProblem::of_value(
                line,
                v,
                "step `{}` is not a whole number; read as no step",
            )),
        }
    }

    /// `RNG state: start=<16 hex> end=<16 hex>`.
    fn read_rng(&mut self, line: &[u8], v: &[u8]) -> Result<(), HeaderProblem> {
        match std::str::from_utf8(v).ok().and_then(RngState::parse) {
            Some(r) => {
                self.rng = Some(r);
                Ok(())
            }
            None => Err(HeaderProblem::of_value(
                line,
                v,
                "RNG state `{}` is not `start=<16 hex digits> end=<16 hex digits>`; read as none",
            )),
        }
    }

    /// `World size: N` (N ≥ 1).
    fn read_world_size(&mut self, line: &[u8], v: &[u8]) -> Result<(), HeaderProblem> {
        match std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
            .filter(|&n| n >= 1)
        {
            Some(n) => {
                self.world_size = Some(n);
                Ok(())
            }
            None => Err(HeaderProblem::of_value(
                line,
                v,
                "world size `{}` is not a whole number of at least 1; read as none",
            )),
        }
    }

    /// `Ops below min numel: N`.
    fn read_below_min_numel(&mut self, line: &[u8], v: &[u8]) -> Result<(), HeaderProblem> {
        match std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()) {
            Some(n) => {
                self.below_min_numel = Some(n);
                Ok(())
            }
            None => Err(HeaderProblem::of_value(
                line,
                v,
                "count of ops below min numel `{}` is not a whole number; read as none",
            )),
        }
    }

    /// `Loss: x`.
    fn read_loss(&mut self, line: &[u8], v: &[u8]) -> Result<(), HeaderProblem> {
        match std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()) {
            Some(x) => {
                self.loss = Some(x);
                Ok(())
            }
            None => Err(HeaderProblem::of_value(
                line,
                v,
                "loss `{}` is not a number; read as no loss",
            )),
        }
    }

    /// `Precision: full`.
    fn read_precision(&mut self, line: &[u8], v: &[u8]) -> Result<(), HeaderProblem> {
        if v == PRECISION_FULL.as_bytes() {
            self.precision = Precision::Full;
            return Ok(());
        }
        Err(HeaderProblem::of_value(
            line,
            v,
            "precision `{}` is not `full`; read as the reference's 7 printed digits",
        ))
    }
}

/// The `min_numel=N` of a `Capture filter:` value (`min_numel=1000,
/// op_filter=mm`), if it has one that reads.
pub fn filter_min_numel(filter: &str) -> Option<u64> {
    filter
        .split(',')
        .find_map(|part| part.trim().strip_prefix("min_numel="))
        .and_then(|v| v.trim().parse().ok())
}

/// The ops of an `Excluded ops dispatched:` value, sorted (`(none)` or
/// nothing: none).
fn read_excluded(v: &[u8]) -> Vec<String> {
    if v == NO_EXCLUDED.as_bytes() || v.is_empty() {
        return Vec::new();
    }
    let mut ops: Vec<String> = v
        .split(|b| *b == b',')
        .map(trim)
        .filter(|s| !s.is_empty())
        .map(quote)
        .collect();
    ops.sort();
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads the lines of a header as the parser does (each line trimmed of
    /// its `\n`), with the problems found.
    fn read(text: &[u8]) -> (Header, Vec<HeaderProblem>) {
        let mut h = Header::default();
        let mut problems = Vec::new();
        for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if let Err(e) = h.read_line(line) {
                problems.push(e);
            }
        }
        (h, problems)
    }

    #[test]
    fn what_is_written_reads_back() {
        let notes = HeaderNotes {
            excluded: Some(vec!["view".into(), "t".into()]),
            compiled: CompileBackend::from_name("aot_eager"),
            compiled_modules: Some(vec!["blocks.0".into(), "b c".into(), ROOT_MODULE.into()]),
            level: CaptureLevel::Modules,
            step: Some(7),
            loss: Some(0.1),
            rng: Some(RngState {
                start: u64::MAX,
                end: 0,
            }),
            world_size: Some(4),
            mesh: Some(Mesh::parse("dp=2 tp=2", "dp=1 tp=0").unwrap()),
            filter: Some("min_numel=1000, op_filter=mm".into()),
            below_min_numel: Some(57),
        };
        let mut v = Vec::new();
        write_header(&mut v, 12, &notes, Precision::Full);
        let (h, problems) = read(&v);
        assert_eq!(problems, []);
        assert_eq!(h.total, Some(12));
        assert_eq!(h.excluded, Some(vec!["t".into(), "view".into()]));
        assert_eq!(h.compiled, notes.compiled);
        assert_eq!(h.compiled_modules, notes.compiled_modules);
        // The root is written with what it means, and read back as itself.
        let text = String::from_utf8_lossy(&v).into_owned();
        assert!(
            text.contains("Compiled modules: blocks.0, b c, <none> (the whole model)\n"),
            "{text}"
        );
        assert_eq!(h.rng, notes.rng);
        assert!(text.contains("RNG state: start=ffffffffffffffff end=0000000000000000\n"));
        assert!(h.rng.unwrap().draws());
        assert_eq!(
            (h.level, h.step, h.loss),
            (CaptureLevel::Modules, Some(7), Some(0.1))
        );
        assert_eq!(h.mesh, notes.mesh);
        assert_eq!(h.world_size, Some(4));
        assert_eq!(h.precision, Precision::Full);
        assert_eq!(
            (
                h.filter.as_deref(),
                h.below_min_numel,
                filter_min_numel(h.filter.as_deref().unwrap())
            ),
            (Some("min_numel=1000, op_filter=mm"), Some(57), Some(1000))
        );
        assert!(h.has_rule);
        let mut v = Vec::new();
        write_header(
            &mut v,
            0,
            &HeaderNotes {
                excluded: Some(vec![]),
                ..HeaderNotes::default()
            },
            Precision::PRINTED,
        );
        let (h, problems) = read(&v);
        assert_eq!(problems, []);
        assert_eq!((h.total, h.excluded), (Some(0), Some(vec![])));
        assert_eq!(h.precision, Precision::PRINTED);
        assert!(is_count_line(&v));
        assert!(!is_count_line(b"Excluded ops dispatched: t"));
    }

    #[test]
    fn values_that_do_not_read_name_their_column() {
        let (h, problems) = read(
            b"Total captured activations: x\nStep:  five\nLevel: ops\nPrecision: half\nWorld size: 0\nMesh: dp=2\nCoords: tp=0\nRNG state: start=12 end=0000000000000000\nhello",
        );
        let got: Vec<(u64, &str)> = problems
            .iter()
            .map(|p| (p.column, p.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (28, "op count `x` is not an integer"),
                (8, "step `five` is not a whole number; read as no step"),
                (
                    12,
                    "precision `half` is not `full`; read as the reference's 7 printed digits"
                ),
                (
                    13,
                    "world size `0` is not a whole number of at least 1; read as none"
                ),
                (
                    9,
                    "device mesh `dp=2` / coordinates `tp=0` do not read (coordinates `tp=0` do not name the mesh dimensions `dp=2` in order); read as no mesh"
                ),
                (
                    12,
                    "RNG state `start=12 end=0000000000000000` is not `start=<16 hex digits> end=<16 hex digits>`; read as none"
                ),
                (1, "line before the first block is no header line: `hello`"),
            ]
        );
        assert_eq!((h.total, h.step, h.mesh, h.rng), (None, None, None, None));
        for bad in [
            "",
            "start=0000000000000001",
            "end=0000000000000001 start=0000000000000001",
            "start=000000000000000g end=0000000000000001",
            "start=0000000000000001 end=0000000000000001 x",
        ] {
            assert_eq!(RngState::parse(bad), None, "{bad:?}");
        }
        assert_eq!(h.precision, Precision::PRINTED);
    }
}

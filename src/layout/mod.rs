//! Parallel layouts: combining the shard logs of a tensor-parallel run into
//! whole-tensor logs, so that runs of different layouts (TP=2 against TP=1,
//! or TP=4) pair and compare op by op with the usual machinery. It sits
//! between the parser (it reads [`OpTable`]s) and the matcher (it writes
//! logs the matcher compares), and owns the layout vocabulary of the log
//! (`shared/spec` + `docs/log-format.md`, "Layouts"):
//!
//! - header `Mesh: dp=2 tp=2` and `Coords: dp=0 tp=1` ([`Mesh`]);
//! - block `Layout: tp:S(1) [64, 64] at [0, 32]` (the stats tensor's
//!   placement, whole shape and, for a shard, where it starts), `Output layouts:` and `Input layouts:` (one
//!   [`Placement`] token per hash).
//!
//! How ranks combine ([`combine`]): the mesh dimensions on which some
//! forward op's result is sharded or a pending sum are the *combined*
//! dimensions (tensor parallelism; FSDP shards parameters, not
//! activations, so its dimension stays); the ranks that differ only there
//! form one logical rank, numbered by their other coordinates. Per op, the
//! shards' statistics add up exactly: L2 norm as a root of summed squares,
//! min and max, mean weighted by element counts, L1 hashes summed, and
//! digests combined (the capture digests a shard over one mesh dimension by
//! its elements' whole-tensor index, [`crate::capture::digest`], so
//! `--bitwise` crosses layouts). Replicated results must agree across the group: a replica that differs
//! is a finding ([`ReplicaMismatch`]) naming its rank. A pending sum
//! (`Partial`) or a result the capture could not follow (`?`) keeps its
//! key but no values: paired, never a difference. The layout's own
//! communication (all-reduce, wait) is left out, its consumers' producer
//! links pointing through it, and keys are renumbered as a run without
//! that communication would number them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::logformat::{Mesh, INPUT_LAYOUTS_LABEL, LAYOUT_LABEL, OUTPUT_LAYOUTS_LABEL};
use crate::parser::OpTable;

/// Ops of a layout's own communication, left out of a combined log: they
/// have no counterpart in a run of another layout.
pub const COMMUNICATION_OPS: &[&str] = &[
    "all_reduce",
    "all_reduce_",
    "allreduce_",
    "all_gather_into_tensor",
    "_allgather_base_",
    "reduce_scatter_tensor",
    "_reduce_scatter_base_",
    "all_to_all_single",
    "broadcast_",
    "wait_tensor",
    "_wrap_tensor_autograd",
    // FSDP2's own buffers around its all-gather and reduce-scatter
    "all_gather_copy_in",
    "split_with_sizes_copy",
    "chunk_cat",
];

/// `--layouts`' relative tolerance: summation order across parallel
/// layouts differed by at most 9.7e-7 relative on the measured model
/// (docs/capture.md, "Tolerance"); 1e-4 leaves headroom for larger models.
pub const LAYOUT_RTOL: f64 = 1e-4;
/// `--layouts`' absolute tolerance.
pub const LAYOUT_ATOL: f64 = 1e-6;

/// Communication ops that leave each rank a shard of their result.
const SCATTER_OPS: &[&str] = &["reduce_scatter_tensor", "_reduce_scatter_base_"];

/// Where one tensor of a block lives, as a layout token says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// `-`: a plain tensor: on a combined group, a replica.
    Plain,
    /// `R`: a DTensor replicated on every mesh dimension.
    Replicate,
    /// `tp:S(1)`, `dp:S(0) tp:S(1)`: `(mesh dimension, tensor dimension)`
    /// per sharded mesh dimension.
    Shard(Vec<(String, usize)>),
    /// `tp:P`: a pending sum over these mesh dimensions: no whole-tensor
    /// value.
    Partial(Vec<String>),
    /// `?`: a result the capture could not follow from a shard.
    Unknown,
}

impl Placement {
    /// Reads a token. Errors say what does not read.
    pub fn parse(tok: &str) -> Result<Placement, String> {
        match tok.trim() {
            "-" => return Ok(Placement::Plain),
            "R" => return Ok(Placement::Replicate),
            "?" => return Ok(Placement::Unknown),
            _ => {}
        }
        let mut shards = Vec::new();
        let mut partial = Vec::new();
        for part in tok.split_whitespace() {
            let (dim, p) = part
                .split_once(':')
                .ok_or_else(|| format!("layout `{part}` is not MESH_DIM:PLACEMENT"))?;
            match p {
                "R" => {}
                "P" => partial.push(dim.to_string()),
                _ => {
                    let d = p
                        .strip_prefix("S(")
                        .and_then(|r| r.strip_suffix(')'))
                        .and_then(|d| d.parse().ok())
                        .ok_or_else(|| format!("placement `{p}` is not R, P or S(dim)"))?;
                    shards.push((dim.to_string(), d));
                }
            }
        }
        Ok(if !partial.is_empty() {
            Placement::Partial(partial)
        } else if shards.is_empty() {
            Placement::Replicate
        } else {
            Placement::Shard(shards)
        })
    }

    /// A replica on every rank of a group (plain or `R`).
    pub fn is_replica(&self) -> bool {
        matches!(self, Placement::Plain | Placement::Replicate)
    }

    /// Whether every rank of a group combined over `combined` holds the
    /// same tensor: a replica, or a shard over mesh dimensions that are not
    /// combined (an FSDP parameter's or gradient's `dp:S(0)` in a group of
    /// `tp` ranks: each such rank holds the same dp shard, compared as it is
    /// with the other run's same dp rank).
    pub fn is_same_over(&self, combined: &[String]) -> bool {
        match self {
            Placement::Plain | Placement::Replicate => true,
            Placement::Shard(s) => s.iter().all(|(d, _)| !combined.contains(d)),
            Placement::Partial(_) | Placement::Unknown => false,
        }
    }
}

/// A block's layout lines, read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowLayout {
    /// `Layout:` the stats tensor's placement and whole shape.
    pub stats: Option<(Placement, Vec<i64>)>,
    /// `Layout: … at [0, 32]`: where the stats tensor (a shard over one
    /// mesh dimension) starts in the whole tensor, per dimension; `None`
    /// when the line does not say.
    pub offset: Option<Vec<i64>>,
    /// `Output layouts:` one per output hash (empty: all plain).
    pub outputs: Vec<Placement>,
    /// `Input layouts:` one per input hash (empty: all plain).
    pub inputs: Vec<Placement>,
}

/// The value of `label:` on a trimmed line, if the line has that label.
fn labelled<'a>(line: &'a str, label: &str) -> Option<&'a str> {
    line.strip_prefix(label)?.strip_prefix(':').map(str::trim)
}

/// Reads the layout lines of a block's text. Errors say what does not read.
pub fn row_layout(block: &[u8]) -> Result<RowLayout, String> {
    let mut r = RowLayout::default();
    let text = String::from_utf8_lossy(block);
    let list = |v: &str| -> Result<Vec<Placement>, String> {
        v.split(';').map(Placement::parse).collect()
    };
    for line in text.lines().map(str::trim) {
        if let Some(v) = labelled(line, LAYOUT_LABEL) {
            let sizes = |t: &str, what: &str| {
                t.trim_end_matches(']')
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse::<i64>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| format!("layout `{v}`: the {what} is not a list of sizes"))
            };
            let (whole, offset) = match v.split_once("] at [") {
                Some((w, o)) => (w, Some(sizes(o, "offset")?)),
                None => (v, None),
            };
            let (tok, shape) = whole
                .rsplit_once('[')
                .ok_or_else(|| format!("layout `{v}` has no [shape]"))?;
            r.stats = Some((Placement::parse(tok)?, sizes(shape, "shape")?));
            r.offset = offset;
        } else if let Some(v) = labelled(line, OUTPUT_LAYOUTS_LABEL) {
            r.outputs = list(v)?;
        } else if let Some(v) = labelled(line, INPUT_LAYOUTS_LABEL) {
            r.inputs = list(v)?;
        }
    }
    Ok(r)
}

/// A logical rank of a combined run: the ranks it holds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CombinedRank {
    /// Its rank number in the combined run (row-major over the coordinates
    /// that were not combined; 0 when every dimension was).
    pub rank: u32,
    /// Those coordinates (`dp 0`), or the empty string.
    pub name: String,
    /// The ranks combined, in shard order.
    pub ranks: Vec<u32>,
}

/// A replicated result that differs on one rank of a combined group.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReplicaMismatch {
    /// The rank whose replica differs.
    pub rank: u32,
    /// The group's first rank, whose value was kept.
    pub against: u32,
    /// The op's key.
    pub key: String,
    /// `rank`'s log.
    pub path: PathBuf,
    /// The block's line in that log.
    pub line: u64,
    /// The field that differs (`L2 norm`, `Output hash`, `Input hashes`...).
    pub field: String,
}

/// What combining one run did.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Combined {
    /// 1 or 2.
    pub side: u8,
    /// The run's mesh (`dp=2 tp=2`).
    pub mesh: String,
    /// The combined mesh dimensions with their sizes (`tp=2`).
    pub combined: String,
    /// The mesh dimensions (with their sizes, `dp=2`) over which the
    /// optimizer's parameter shards were combined (FSDP alone: each rank's
    /// optimizer rows hold whole parameters); empty when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parameters: String,
    /// Why the optimizer's parameter shards were not combined though they
    /// are sharded (the ranks' optimizer steps ran different ops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_refused: Option<String>,
    /// The logical ranks.
    pub ranks: Vec<CombinedRank>,
    /// Where the combined logs were written.
    pub dir: PathBuf,
    /// Replicas that differ (the first per rank and key, at most
    /// [`MISMATCHES_KEPT`]).
    pub mismatches: Vec<ReplicaMismatch>,
    /// Every replica difference found.
    pub mismatch_count: u64,
    /// Ops whose result has no whole-tensor value (a pending sum, a result
    /// not followed): kept without values.
    pub not_comparable: u64,
    /// Communication ops of the layout left out ([`COMMUNICATION_OPS`]).
    pub communication_left_out: u64,
    /// The combined keys of the ops without a whole-tensor value (not in
    /// `summary.json`: the comparison shows them, not gating).
    #[serde(skip)]
    pub not_comparable_keys: Vec<String>,
    /// The combined keys of ops compared without their Input hashes (an
    /// input with no whole-tensor value): their inputs do not gate.
    #[serde(skip)]
    pub inputs_unknown_keys: Vec<String>,
}

impl Combined {
    /// `ranks 0–1 combined as tp=2 (dp 0)`, one clause per logical rank.
    pub fn describe(&self) -> Vec<String> {
        self.ranks
            .iter()
            .map(|g| {
                let span = match (g.ranks.first(), g.ranks.last()) {
                    (Some(a), Some(b))
                        if g.ranks.len() > 1 && b - a + 1 == g.ranks.len() as u32 =>
                    {
                        format!("ranks {a}–{b}")
                    }
                    _ if g.ranks.len() == 1 => format!("rank {}", g.ranks[0]),
                    _ => format!(
                        "ranks {}",
                        g.ranks
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                if self.combined.is_empty() {
                    // Nothing combined: the rank as it is, its communication left out.
                    return format!("{span} ({}) as rank {}", g.name, g.rank);
                }
                let name = if g.name.is_empty() {
                    String::new()
                } else {
                    format!(", {}", g.name)
                };
                format!(
                    "{span} combined as {}{name} (rank {})",
                    self.combined, g.rank
                )
            })
            .collect()
    }
}

impl Combined {
    /// What was combined, for the terminal, the index and JUnit: one line
    /// per logical rank (`name: ranks 0–1 combined as tp=2 (rank 0)`),
    /// then what was left out or kept without values, then each replica
    /// that differs. `name` is the run's display name.
    pub fn lines(&self, name: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .describe()
            .into_iter()
            .map(|d| format!("{name}: {d}"))
            .collect();
        let mut notes = vec![format!(
            "{} communication op{} of the layout left out",
            self.communication_left_out,
            if self.communication_left_out == 1 {
                ""
            } else {
                "s"
            }
        )];
        if let Some(why) = &self.parameters_refused {
            notes.push(format!(
                "the optimizer's parameter shards not combined (its rows compare shard against whole): the ranks' optimizer steps ran different ops: {why}"
            ));
        }
        if !self.parameters.is_empty() {
            notes.push(format!(
                "the optimizer's parameter shards combined over {} (each rank's optimizer rows hold whole parameters)",
                self.parameters
            ));
        }
        if self.not_comparable > 0 {
            notes.push(format!(
                "{} op{} without a whole-tensor value (a pending sum or a result not followed: paired, not compared)",
                self.not_comparable,
                if self.not_comparable == 1 { "" } else { "s" }
            ));
        }
        v.push(format!(
            "{name}: {}; combined logs in {}",
            notes.join("; "),
            self.dir.display()
        ));
        const SHOWN: usize = 3;
        for m in self.mismatches.iter().take(SHOWN) {
            v.push(format!(
                "{name}: rank {}'s replica of `{}` differs from rank {}'s ({}; {}:{})",
                m.rank,
                m.key,
                m.against,
                m.field,
                m.path.display(),
                m.line
            ));
        }
        let shown = self.mismatches.len().min(SHOWN) as u64;
        if self.mismatch_count > shown {
            v.push(format!(
                "{name}: … {} more replica values differ (summary.json lists the first {})",
                self.mismatch_count - shown,
                self.mismatches.len()
            ));
        }
        v
    }
}

/// The replica mismatches listed in a [`Combined`] at most.
pub const MISMATCHES_KEPT: usize = 20;

/// The mesh every log declares, when they all declare the same dimensions
/// (`None` when none declares one). Errors name the log that differs.
pub fn mesh_of(logs: &[(u32, OpTable)]) -> Result<Option<Mesh>, String> {
    let mut first: Option<(&Path, &Mesh)> = None;
    for (_, t) in logs {
        match (&t.header().mesh, first) {
            (Some(m), None) => first = Some((t.path(), m)),
            (Some(m), Some((p, f))) if m.dims != f.dims => {
                return Err(format!(
                    "{}: mesh `{}` differs from `{}` in {}",
                    t.path().display(),
                    m.dims_text(),
                    f.dims_text(),
                    p.display()
                ))
            }
            (None, Some((p, f))) => {
                return Err(format!(
                    "{}: no `Mesh:` header line, while {} declares `{}`",
                    t.path().display(),
                    p.display(),
                    f.dims_text()
                ))
            }
            _ => {}
        }
    }
    if first.is_some() {
        if let Some((_, t)) = logs.iter().find(|(_, t)| t.header().mesh.is_none()) {
            return Err(format!("{}: no `Mesh:` header line", t.path().display()));
        }
    }
    Ok(first.map(|(_, m)| m.clone()))
}

/// The stats placements of the rows of `t` in `phase` that have a
/// `Layout:` line. Errors name a layout line that does not read (file and
/// line).
fn stats_placements(t: &OpTable, phase: crate::parser::Phase) -> Result<Vec<Placement>, String> {
    let mut out = Vec::new();
    for row in 0..t.len() {
        if t.phase_kind(row) != phase || !t.block(row).windows(8).any(|w| w == b"Layout: ") {
            continue;
        }
        let l = row_layout(t.block(row))
            .map_err(|e| format!("{}:{}: {e}", t.path().display(), t.line(row)))?;
        out.extend(l.stats.map(|(p, _)| p));
    }
    Ok(out)
}

/// The dimensions of `mesh` that `seen` holds, in mesh order.
fn in_mesh_order(mesh: &Mesh, seen: &BTreeSet<String>) -> Vec<String> {
    mesh.dims
        .iter()
        .map(|(d, _)| d.clone())
        .filter(|d| seen.contains(d))
        .collect()
}

/// The mesh dimensions on which some forward op's stats tensor is sharded
/// or a pending sum, in mesh order. Errors name a layout line that does not
/// read (file and line).
pub fn sharding_dims(logs: &[(u32, OpTable)], mesh: &Mesh) -> Result<Vec<String>, String> {
    let mut seen = BTreeSet::new();
    for (_, t) in logs {
        for p in stats_placements(t, crate::parser::Phase::Forward)? {
            match p {
                Placement::Shard(s) => seen.extend(s.into_iter().map(|(d, _)| d)),
                Placement::Partial(dims) => seen.extend(dims),
                _ => {}
            }
        }
        if !seen.is_empty() {
            break; // every rank runs the same program
        }
    }
    Ok(in_mesh_order(mesh, &seen))
}

/// The mesh dimensions on which some optimizer-phase op's stats tensor is
/// sharded: FSDP's, whose optimizer updates each rank's shard of every
/// parameter. Errors name a layout line that does not read.
pub fn parameter_dims(logs: &[(u32, OpTable)], mesh: &Mesh) -> Result<Vec<String>, String> {
    let mut seen = BTreeSet::new();
    if let Some((_, t)) = logs.first() {
        for p in stats_placements(t, crate::parser::Phase::Optimizer)? {
            if let Placement::Shard(s) = p {
                seen.extend(s.into_iter().map(|(d, _)| d));
            }
        }
    }
    Ok(in_mesh_order(mesh, &seen))
}

/// The op name of a key (`a.b/op_3_all_reduce` → `all_reduce`).
fn op_name(key: &str) -> &str {
    let tail = key.rsplit_once('/').map_or(key, |(_, t)| t);
    tail.strip_prefix("op_")
        .and_then(|r| r.split_once('_'))
        .map_or(tail, |(_, n)| n)
}

/// The module part of a key (`a.b/op_3_mm` → `a.b`).
fn module_of(key: &str) -> &str {
    key.rsplit_once('/').map_or("", |(m, _)| m)
}

/// Sizes and dtype of a `Shape` value (`torch.Size([2, 3]), Dtype:
/// torch.float32`).
fn shape_of(text: &str) -> Option<(Vec<i64>, String)> {
    let inner = text.strip_prefix("torch.Size([")?;
    let (dims, rest) = inner.split_once("])")?;
    let dims = dims
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect::<Option<Vec<i64>>>()?;
    let dtype = rest
        .split_once("torch.")
        .map(|(_, d)| d.trim().to_string())?;
    Some((dims, dtype))
}

/// Whether `p` is a shard over exactly the combined dimensions (then the
/// group holds the whole tensor).
fn whole_over(p: &Placement, combined: &[String]) -> bool {
    match p {
        Placement::Shard(s) => {
            s.iter().all(|(d, _)| combined.contains(d))
                && combined.iter().all(|c| s.iter().any(|(d, _)| d == c))
        }
        _ => false,
    }
}

/// Combines one run's rank logs (all declaring `mesh`) over the `combined`
/// mesh dimensions into `out_dir/rank_N_activations.log`, one per logical
/// rank. Errors (a group whose ranks record different ops, an unreadable
/// layout line, a log that cannot be written) name the file and line.
pub fn combine(
    side: u8,
    logs: &[(u32, OpTable)],
    mesh: &Mesh,
    combined: &[String],
    out_dir: &Path,
) -> Result<Combined, String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let is_combined = |d: &str| combined.iter().any(|c| c == d);
    // FSDP alone (nothing combined): each rank keeps its own forward and
    // backward, and its optimizer rows are combined from every rank's
    // shard of the parameters, so that they compare with a run of whole
    // parameters (DDP, one process; trial 19 F2: every update "differed",
    // shard against whole). With tensor parallelism too, a parameter may
    // be sharded over some of the dimensions and replicated over others:
    // not combined (docs/capture.md).
    let param_dims = if combined.is_empty() {
        parameter_dims(logs, mesh)?
    } else {
        Vec::new()
    };
    let param_tables: Vec<(u32, &OpTable)> = if param_dims.is_empty() {
        Vec::new()
    } else {
        let mut v: Vec<(Vec<u32>, usize)> = logs
            .iter()
            .enumerate()
            .map(|(i, (_, t))| {
                let m = t.header().mesh.as_ref().expect("mesh_of checked");
                (m.coords.clone(), i)
            })
            .collect();
        if v.len() as u32
            != mesh
                .dims
                .iter()
                .filter(|(d, _)| param_dims.contains(d))
                .map(|(_, s)| *s)
                .product::<u32>()
            || mesh
                .dims
                .iter()
                .any(|(d, size)| *size > 1 && !param_dims.contains(d))
        {
            // Other dimensions beside FSDP's (HSDP's replicas): its groups
            // are not built here; the optimizer rows stay shards.
            v.clear();
        }
        v.sort();
        v.iter().map(|(_, i)| (logs[*i].0, &logs[*i].1)).collect()
    };
    // Ranks whose optimizer steps ran different ops (a shard below
    // min_numel on one rank only) keep their shards, and the layout's
    // lines say why.
    let mut parameters_refused = None;
    let param_tables = match group::parameter_rows_agree(&param_tables) {
        Ok(()) => param_tables,
        Err(e) => {
            parameters_refused = Some(e);
            Vec::new()
        }
    };
    // Group by the coordinates not combined; order members by the others.
    let mut groups: std::collections::BTreeMap<Vec<u32>, Vec<(Vec<u32>, usize)>> =
        Default::default();
    for (i, (_, t)) in logs.iter().enumerate() {
        let m = t.header().mesh.as_ref().expect("mesh_of checked");
        let (mut other, mut inner) = (Vec::new(), Vec::new());
        for ((d, _), c) in m.dims.iter().zip(&m.coords) {
            if is_combined(d) {
                inner.push(*c);
            } else {
                other.push(*c);
            }
        }
        groups.entry(other).or_default().push((inner, i));
    }
    let group_size: u32 = mesh
        .dims
        .iter()
        .filter(|(d, _)| is_combined(d))
        .map(|(_, s)| *s)
        .product();
    let mut out = Combined {
        side,
        mesh: mesh.dims_text(),
        combined: mesh
            .dims
            .iter()
            .filter(|(d, _)| is_combined(d))
            .map(|(d, s)| format!("{d}={s}"))
            .collect::<Vec<_>>()
            .join(" "),
        parameters: String::new(),
        parameters_refused: None,
        ranks: Vec::new(),
        dir: out_dir.to_path_buf(),
        mismatches: Vec::new(),
        mismatch_count: 0,
        not_comparable: 0,
        communication_left_out: 0,
        not_comparable_keys: Vec::new(),
        inputs_unknown_keys: Vec::new(),
    };
    let other_dims: Vec<&(String, u32)> =
        mesh.dims.iter().filter(|(d, _)| !is_combined(d)).collect();
    for (other, mut members) in groups {
        members.sort();
        let member_ranks: Vec<u32> = members.iter().map(|(_, i)| logs[*i].0).collect();
        if members.len() as u32 != group_size {
            return Err(format!(
                "run {side}: ranks {member_ranks:?} hold {} of the {group_size} shards of {}; a log is missing",
                members.len(),
                out.combined
            ));
        }
        let rank = other
            .iter()
            .zip(&other_dims)
            .fold(0u32, |acc, (c, (_, s))| acc * s + c);
        let name = other
            .iter()
            .zip(&other_dims)
            .map(|(c, (d, _))| format!("{d} {c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let tables: Vec<(u32, &OpTable)> = members
            .iter()
            .map(|(_, i)| (logs[*i].0, &logs[*i].1))
            .collect();
        let mut g = group::Group::new(&tables, combined, &mut out)?;
        if !param_tables.is_empty() {
            g = g.with_parameters(&param_tables, &param_dims);
        }
        let text = g.combine()?;
        let path = out_dir.join(format!("rank_{rank}_activations.log"));
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        out.ranks.push(CombinedRank {
            rank,
            name,
            ranks: member_ranks,
        });
    }
    out.parameters_refused = parameters_refused;
    if !param_tables.is_empty() {
        out.parameters = mesh
            .dims
            .iter()
            .filter(|(d, _)| param_dims.contains(d))
            .map(|(d, s)| format!("{d}={s}"))
            .collect::<Vec<_>>()
            .join(" ");
    }
    out.ranks.sort_by_key(|g| g.rank);
    Ok(out)
}

mod group;

#[cfg(test)]
mod tests;

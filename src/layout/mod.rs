//! Parallel layouts: combining the shard logs of a tensor-parallel run into
//! whole-tensor logs, so that runs of different layouts (TP=2 against TP=1,
//! or TP=4) pair and compare op by op with the usual machinery. It sits
//! between the parser (it reads [`OpTable`]s) and the matcher (it writes
//! logs the matcher compares), and owns the layout vocabulary of the log
//! (`shared/spec` + `docs/log-format.md`, "Layouts"):
//!
//! - header `Mesh: dp=2 tp=2` and `Coords: dp=0 tp=1` ([`Mesh`]);
//! - block `Layout: tp:S(1) [64, 64]` (the stats tensor's placement and
//!   whole shape), `Output layouts:` and `Input layouts:` (one
//!   [`Placement`] token per hash).
//!
//! How ranks combine ([`combine`]): the mesh dimensions on which some
//! forward op's result is sharded or a pending sum are the *combined*
//! dimensions (tensor parallelism; FSDP shards parameters, not
//! activations, so its dimension stays); the ranks that differ only there
//! form one logical rank, numbered by their other coordinates. Per op, the
//! shards' statistics add up exactly: L2 norm as a root of summed squares,
//! min and max, mean weighted by element counts, L1 hashes summed.
//! Replicated results must agree across the group: a replica that differs
//! is a finding ([`ReplicaMismatch`]) naming its rank. A pending sum
//! (`Partial`) or a result the capture could not follow (`?`) keeps its
//! key but no values: paired, never a difference. The layout's own
//! communication (all-reduce, wait) is left out, its consumers' producer
//! links pointing through it, and keys are renumbered as a run without
//! that communication would number them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::capture::record::{write_block, write_header, Moments, Phase, Record, Stats};
use crate::logformat::{
    HeaderNotes, Mesh, Precision, INPUT_LAYOUTS_LABEL, LAYOUT_LABEL, OUTPUT_LAYOUTS_LABEL,
};
use crate::parser::{Field, OpTable};

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
];

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
    /// `tp:P`: a pending sum over a mesh dimension: no whole-tensor value.
    Partial,
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
        let mut partial = false;
        for part in tok.split_whitespace() {
            let (dim, p) = part
                .split_once(':')
                .ok_or_else(|| format!("layout `{part}` is not MESH_DIM:PLACEMENT"))?;
            match p {
                "R" => {}
                "P" => partial = true,
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
        Ok(if partial {
            Placement::Partial
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
}

/// A block's layout lines, read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowLayout {
    /// `Layout:` the stats tensor's placement and whole shape.
    pub stats: Option<(Placement, Vec<i64>)>,
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
            let (tok, shape) = v
                .rsplit_once('[')
                .ok_or_else(|| format!("layout `{v}` has no [shape]"))?;
            let shape = shape
                .trim_end_matches(']')
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<i64>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| format!("layout `{v}`: the shape is not a list of sizes"))?;
            r.stats = Some((Placement::parse(tok)?, shape));
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
                    _ => format!(
                        "ranks {}",
                        g.ranks
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
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

/// The mesh dimensions on which some forward op's stats tensor is sharded
/// or a pending sum, in mesh order. Errors name a layout line that does not
/// read (file and line).
pub fn sharding_dims(logs: &[(u32, OpTable)], mesh: &Mesh) -> Result<Vec<String>, String> {
    let mut seen = BTreeSet::new();
    for (_, t) in logs {
        for row in 0..t.len() {
            if t.is_backward(row) || !t.block(row).windows(8).any(|w| w == b"Layout: ") {
                continue;
            }
            let l = row_layout(t.block(row))
                .map_err(|e| format!("{}:{}: {e}", t.path().display(), t.line(row)))?;
            match l.stats {
                Some((Placement::Shard(s), _)) => seen.extend(s.into_iter().map(|(d, _)| d)),
                Some((Placement::Partial, _)) => {
                    seen.extend(mesh.dims.iter().map(|(d, _)| d.clone()));
                }
                _ => {}
            }
        }
        if !seen.is_empty() {
            break; // every rank runs the same program
        }
    }
    Ok(mesh
        .dims
        .iter()
        .map(|(d, _)| d.clone())
        .filter(|d| seen.contains(d))
        .collect())
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

fn num(t: &OpTable, row: usize, f: Field) -> Option<f64> {
    let s = t.text(row, f);
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    s.parse().ok()
}

fn nums(t: &OpTable, row: usize, f: Field) -> Vec<f64> {
    t.text(row, f)
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or(f64::NAN))
        .collect()
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
        ranks: Vec::new(),
        dir: out_dir.to_path_buf(),
        mismatches: Vec::new(),
        mismatch_count: 0,
        not_comparable: 0,
        communication_left_out: 0,
        not_comparable_keys: Vec::new(),
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
        let text = combine_group(&tables, combined, &mut out)?;
        let path = out_dir.join(format!("rank_{rank}_activations.log"));
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        out.ranks.push(CombinedRank {
            rank,
            name,
            ranks: member_ranks,
        });
    }
    out.ranks.sort_by_key(|g| g.rank);
    Ok(out)
}

/// One group's combined log text.
fn combine_group(
    tables: &[(u32, &OpTable)],
    combined: &[String],
    out: &mut Combined,
) -> Result<Vec<u8>, String> {
    let (r0, t0) = tables[0];
    for (r, t) in &tables[1..] {
        let n = t.len().min(t0.len());
        if let Some(row) = (0..n).find(|&i| t.key(i) != t0.key(i)) {
            return Err(format!(
                "{}:{}: rank {r} records `{}` where rank {r0} records `{}` ({}:{}); the shards cannot be combined (compare rank by rank with --no-combine)",
                t.path().display(),
                t.line(row),
                t.key_str(row),
                t0.key_str(row),
                t0.path().display(),
                t0.line(row)
            ));
        }
        if t.len() != t0.len() {
            return Err(format!(
                "{}: rank {r} records {} ops, rank {r0} {} ({}); the shards cannot be combined (compare rank by rank with --no-combine)",
                t.path().display(),
                t.len(),
                t0.len(),
                t0.path().display()
            ));
        }
    }
    let precision = t0.precision();
    // Replicas must agree: field `f` of row `row` on every rank.
    let check_row = |row: usize,
                     f: Field,
                     key: &str,
                     flagged: &mut BTreeSet<(u32, String)>,
                     out: &mut Combined| {
        let v0 = t0.field(row, f);
        for (r, t) in &tables[1..] {
            if t.field(row, f) != v0 {
                out.mismatch_count += 1;
                if flagged.insert((*r, key.to_string())) && out.mismatches.len() < MISMATCHES_KEPT {
                    out.mismatches.push(ReplicaMismatch {
                        rank: *r,
                        against: r0,
                        key: key.to_string(),
                        path: t.path().to_path_buf(),
                        line: t.line(row),
                        field: f.label().to_string(),
                    });
                }
            }
        }
    };
    // Kept pending sums: (record index, rank 0's output hash text), and
    // their combined input hashes.
    let mut pending: std::collections::HashMap<String, usize> = Default::default();
    let mut pending_inputs: std::collections::HashMap<usize, Vec<f64>> = Default::default();
    let mut pending_shapes: std::collections::HashMap<usize, Vec<i64>> = Default::default();
    let mut pending_keys: std::collections::HashMap<String, usize> = Default::default();
    let mut filled: BTreeSet<usize> = BTreeSet::new();
    let mut unfilled: BTreeSet<usize> = BTreeSet::new();
    // Communication rows linked to a pending sum: key -> record index.
    // Communication rows linked to a pending sum: key -> (record index,
    // whether a reduce-scatter left each rank a shard of the sum).
    let mut comm_link: std::collections::HashMap<String, (usize, bool)> = Default::default();
    // Keys renumbered without the left-out communication.
    let mut seq: std::collections::HashMap<String, u32> = Default::default();
    let mut renamed: std::collections::HashMap<String, String> = Default::default();
    let mut records: Vec<Record> = Vec::with_capacity(t0.len());
    let mut flagged: BTreeSet<(u32, String)> = BTreeSet::new();
    for row in 0..t0.len() {
        let key = t0.key_str(row).into_owned();
        let check =
            |f: Field, key: &str, flagged: &mut BTreeSet<(u32, String)>, out: &mut Combined| {
                check_row(row, f, key, flagged, out)
            };
        let producers: Vec<String> = {
            let p = t0.text(row, Field::InputProducers);
            if p.is_empty() {
                Vec::new()
            } else {
                p.split(';').map(|s| s.trim().to_string()).collect()
            }
        };
        let map_producer = |p: &String, renamed: &std::collections::HashMap<String, String>| {
            renamed.get(p).cloned().unwrap_or_else(|| p.clone())
        };
        let layout = row_layout(t0.block(row))
            .map_err(|e| format!("{}:{}: {e}", t0.path().display(), t0.line(row)))?;
        // A pending sum's own preparation before its reduction (the masking
        // of a vocabulary-parallel embedding's partial result): reads the
        // sum, writes no whole-tensor value; part of the communication.
        let is_communication = COMMUNICATION_OPS.contains(&op_name(&key));
        let prepares_sum = !is_communication
            && !layout.outputs.is_empty()
            && layout
                .outputs
                .iter()
                .all(|p| matches!(p, Placement::Partial | Placement::Unknown))
            && producers
                .iter()
                .any(|p| pending_keys.contains_key(p) || comm_link.contains_key(p));
        if prepares_sum || is_communication {
            out.communication_left_out += 1;
            // The reduction of a pending sum recorded before: the whole
            // tensor that op computes in another layout. A chain (all_reduce,
            // then the wrapper and wait that complete it) follows the values
            // on: the last holds the reduced value (an asynchronous
            // all_reduce's own output is recorded before it completed).
            let input = t0.text(row, Field::InputHashes);
            let linked = pending
                .get(input.as_ref())
                .map(|&i| (i, false))
                .or_else(|| producers.iter().find_map(|p| comm_link.get(p)).copied())
                .or_else(|| {
                    producers
                        .iter()
                        .find_map(|p| pending_keys.get(p))
                        .map(|&i| (i, false))
                });
            if let Some((idx, scattered)) = linked {
                // A reduce-scatter leaves each rank a shard of the sum.
                let scattered = scattered || SCATTER_OPS.contains(&op_name(&key));
                comm_link.insert(key.clone(), (idx, scattered));
                // A later op of the chain may read it without a producer link.
                if prepares_sum {
                    pending.insert(t0.text(row, Field::OutputHash).into_owned(), idx);
                }
            }
            if let Some((idx, scattered)) = linked.filter(|_| !prepares_sum) {
                let scattered = scattered || SCATTER_OPS.contains(&op_name(&key));
                if let Some((dims, dtype)) = shape_of(&t0.text(row, Field::Shape)) {
                    let n: i64 = dims.iter().product::<i64>()
                        * if scattered { tables.len() as i64 } else { 1 };
                    let whole = pending_shapes
                        .get(&idx)
                        .filter(|w| w.iter().product::<i64>() == n)
                        .cloned()
                        .or_else(|| (!scattered).then_some(dims));
                    if let Some(shape) = whole {
                        let r = &mut records[idx];
                        let (moments, hashes) = if scattered {
                            let outs: Vec<Vec<f64>> = tables
                                .iter()
                                .map(|(_, t)| nums(t, row, Field::OutputHash))
                                .collect();
                            let sums = (0..outs[0].len())
                                .map(|j| {
                                    outs.iter()
                                        .map(|v| v.get(j).copied().unwrap_or(f64::NAN))
                                        .sum()
                                })
                                .collect();
                            (combined_moments(tables, row), sums)
                        } else {
                            (moments(t0, row, None), nums(t0, row, Field::OutputHash))
                        };
                        r.stats = Some(Stats {
                            shape,
                            dtype,
                            moments,
                        });
                        r.output_hashes = hashes;
                        if let Some(ins) = pending_inputs.get(&idx) {
                            r.input_hashes = ins.clone();
                        }
                        if filled.insert(idx) {
                            out.not_comparable -= 1;
                        }
                    }
                }
            }
            // Its consumers' producer: the op whose pending sum it reduces,
            // else what it read.
            let through = match linked {
                Some((idx, _)) => records[idx].key.clone(),
                None => producers
                    .iter()
                    .find(|p| !p.is_empty())
                    .map(|p| map_producer(p, &renamed))
                    .unwrap_or_default(),
            };
            renamed.insert(key, through);
            continue;
        }
        let module = module_of(&key).to_string();
        let n = seq.entry(module.clone()).or_insert(0);
        let new_key = format!("{module}/op_{n}_{}", op_name(&key));
        *n += 1;
        renamed.insert(key.clone(), new_key.clone());

        let stats_place = layout.stats.as_ref().map(|(p, _)| p.clone());
        let out_place = |j: usize| layout.outputs.get(j).cloned().unwrap_or(Placement::Plain);
        let in_place = |j: usize| layout.inputs.get(j).cloned().unwrap_or(Placement::Plain);

        let mut rec = Record {
            key: new_key,
            location: Some(t0.text(row, Field::Location).into_owned()).filter(|s| !s.is_empty()),
            phase: if t0.is_backward(row) {
                Phase::Backward
            } else {
                Phase::Forward
            },
            input_producers: producers
                .iter()
                .map(|p| map_producer(p, &renamed))
                .collect(),
            ..Default::default()
        };
        let mut comparable = true;
        // Stats.
        if t0.has(row, Field::Shape) {
            let shape = shape_of(&t0.text(row, Field::Shape));
            match (stats_place.unwrap_or(Placement::Plain), shape) {
                (p, Some((dims, dtype))) if p.is_replica() => {
                    for f in [
                        Field::Shape,
                        Field::L2Norm,
                        Field::Min,
                        Field::Max,
                        Field::Mean,
                    ] {
                        check(f, &key, &mut flagged, out);
                    }
                    rec.stats = Some(Stats {
                        shape: dims,
                        dtype,
                        moments: moments(t0, row, None),
                    });
                }
                (p, Some((_, dtype))) if whole_over(&p, combined) => {
                    let whole = layout
                        .stats
                        .as_ref()
                        .map(|(_, s)| s.clone())
                        .unwrap_or_default();
                    rec.stats = Some(Stats {
                        shape: whole,
                        dtype,
                        moments: combined_moments(tables, row),
                    });
                }
                _ => comparable = false,
            }
        }
        // Output hashes.
        let outs: Vec<Vec<f64>> = tables
            .iter()
            .map(|(_, t)| nums(t, row, Field::OutputHash))
            .collect();
        let mut hashes = Vec::with_capacity(outs[0].len());
        let mut replica_outs = true;
        for j in 0..outs[0].len() {
            let p = out_place(j);
            replica_outs &= p.is_replica();
            if p.is_replica() {
                hashes.push(outs[0][j]);
            } else if whole_over(&p, combined) {
                hashes.push(
                    outs.iter()
                        .map(|v| v.get(j).copied().unwrap_or(f64::NAN))
                        .sum(),
                );
            } else {
                comparable = false;
            }
        }
        if replica_outs {
            check(Field::OutputHash, &key, &mut flagged, out);
        }
        if comparable {
            rec.output_hashes = hashes;
        }
        // Input hashes (a replicated input that differs is found here too).
        let ins: Vec<Vec<f64>> = tables
            .iter()
            .map(|(_, t)| nums(t, row, Field::InputHashes))
            .collect();
        let mut in_hashes = Vec::with_capacity(ins[0].len());
        let mut in_ok = true;
        let mut replica_ins = true;
        for j in 0..ins[0].len() {
            let p = in_place(j);
            replica_ins &= p.is_replica();
            if p.is_replica() {
                in_hashes.push(ins[0][j]);
            } else if whole_over(&p, combined) {
                in_hashes.push(
                    ins.iter()
                        .map(|v| v.get(j).copied().unwrap_or(f64::NAN))
                        .sum(),
                );
            } else {
                in_ok = false;
            }
        }
        if replica_ins {
            check(Field::InputHashes, &key, &mut flagged, out);
        }
        if in_ok && comparable {
            rec.input_hashes = in_hashes.clone();
        }
        // Digests combine only for replicas (a shard's digest indexes its
        // own elements).
        if comparable && replica_outs && replica_ins && stats_place_is_replica(&layout) {
            rec.output_digests = t0.digests(row, Field::OutputDigest).flatten().collect();
            rec.input_digests = t0.digests(row, Field::InputDigests).flatten().collect();
        }
        if !comparable {
            out.not_comparable += 1;
            unfilled.insert(records.len());
            let partial = matches!(layout.stats, Some((Placement::Partial, _)))
                || layout.outputs.contains(&Placement::Partial);
            if partial && in_ok {
                pending.insert(t0.text(row, Field::OutputHash).into_owned(), records.len());
                pending_keys.insert(key.clone(), records.len());
                pending_inputs.insert(records.len(), in_hashes);
                if let Some((_, whole)) = &layout.stats {
                    pending_shapes.insert(records.len(), whole.clone());
                }
            }
            rec.stats = None;
            rec.output_hashes.clear();
            rec.input_hashes.clear();
        }
        records.push(rec);
    }
    for (i, r) in records.iter().enumerate() {
        if unfilled.contains(&i) && !filled.contains(&i) {
            out.not_comparable_keys.push(r.key.clone());
        }
    }
    let h = t0.header();
    let notes = HeaderNotes {
        excluded: h.excluded.clone(),
        compiled: h.compiled.clone(),
        level: h.level,
        step: h.step,
        loss: h.loss,
        mesh: None,
    };
    let mut text = Vec::with_capacity(t0.bytes().len());
    let prec = match precision {
        crate::parser::Precision::Full => Precision::Full,
        _ => Precision::Printed,
    };
    write_header(&mut text, records.len() as u64, &notes, prec);
    for r in &records {
        write_block(&mut text, r, prec);
    }
    Ok(text)
}

fn stats_place_is_replica(l: &RowLayout) -> bool {
    l.stats.as_ref().is_none_or(|(p, _)| p.is_replica())
}

/// One table's moments of row `row` (`None` without an L2 norm line).
fn moments(t: &OpTable, row: usize, _: Option<()>) -> Option<Moments> {
    Some(Moments {
        l2: num(t, row, Field::L2Norm)?,
        min: num(t, row, Field::Min).unwrap_or(f64::NAN),
        max: num(t, row, Field::Max).unwrap_or(f64::NAN),
        mean: num(t, row, Field::Mean).unwrap_or(f64::NAN),
        nan_count: 0,
        inf_count: 0,
    })
}

/// The whole tensor's moments from its shards': L2 = √Σ L2ᵢ², min and
/// max, mean = Σ meanᵢ·nᵢ / Σ nᵢ (nᵢ each shard's element count).
fn combined_moments(tables: &[(u32, &OpTable)], row: usize) -> Option<Moments> {
    let mut acc = (0.0f64, f64::INFINITY, f64::NEG_INFINITY, 0.0f64, 0.0f64);
    let mut nan = false;
    for (_, t) in tables {
        let m = moments(t, row, None)?;
        let n: f64 = shape_of(&t.text(row, Field::Shape))
            .map(|(d, _)| d.iter().product::<i64>() as f64)
            .unwrap_or(0.0);
        nan |= m.min.is_nan() || m.max.is_nan();
        acc.0 += m.l2 * m.l2;
        acc.1 = acc.1.min(m.min);
        acc.2 = acc.2.max(m.max);
        acc.3 += m.mean * n;
        acc.4 += n;
    }
    Some(Moments {
        l2: acc.0.sqrt(),
        min: if nan { f64::NAN } else { acc.1 },
        max: if nan { f64::NAN } else { acc.2 },
        mean: if acc.4 > 0.0 { acc.3 / acc.4 } else { f64::NAN },
        nan_count: 0,
        inf_count: 0,
    })
}

#[cfg(test)]
mod tests;

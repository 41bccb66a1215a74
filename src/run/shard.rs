//! Sharded runs: `--shard K/N` (which ranks part K of N compares) and the
//! part manifest (`part.json`) that `actdiff merge` reads back.
//!
//! The split is a pure function of the inputs: the rank units of the two
//! runs (a rank pair by its run-1 rank, a rank of one run only) and their
//! log sizes in bytes, so every task of a job array computes the same split
//! on its own, with nothing shared but the inputs. Units are assigned
//! greedily, largest first (longest-processing-time order), each to the part
//! with the fewest bytes so far; ties go by rank number and then by the
//! lowest part index. Nothing random, no hash seeds, no clock.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{RankPlan, RunInput};
use crate::report::messages::Message;
use crate::report::RankSummary;

/// File name of a part's manifest inside its folder.
pub const MANIFEST: &str = crate::report::files::PART_MANIFEST;

/// `format` value of a part manifest.
pub const FORMAT: &str = "actdiff-part";

/// Layout version of `part.json`. Version 2 records the input paths
/// absolute ([`recorded_path`]), so a merge run from any folder finds them;
/// version 1 recorded them as given, relative to where the part's compare
/// ran. A merge reads both ([`OLDEST_VERSION`]..=`VERSION`).
pub const VERSION: u32 = 2;

/// The oldest `part.json` layout a merge reads: version 1, whose relative
/// input paths hold only from the folder its compare ran in.
pub const OLDEST_VERSION: u32 = 1;

/// `path` as a part records it: absolute, its folder resolved (symbolic
/// links and `..` followed, [`std::fs::canonicalize`]) and its own name
/// kept, so that two parts compared from different folders record one
/// spelling of the same file, and a merge run from another folder (a
/// Slurm or Kubernetes job starting elsewhere) finds it. A folder that
/// cannot be resolved (it is gone) is made absolute as written.
pub fn recorded_path(path: &Path) -> PathBuf {
    let canon = |p: &Path| {
        let p = if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        };
        std::fs::canonicalize(p).ok()
    };
    let resolved = match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => canon(dir).map(|d| d.join(name)),
        _ => canon(path),
    };
    resolved
        .or_else(|| std::path::absolute(path).ok())
        .unwrap_or_else(|| path.to_path_buf())
}

/// Part `index` (0-based, as Slurm array task ids and Kubernetes completion
/// indexes count) of `count` parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based part number, `< count`.
    pub index: u32,
    /// Number of parts, at least 1.
    pub count: u32,
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// `--shard` as given: `K/N`, `auto` or `auto/N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardSpec {
    /// `K/N`.
    Fixed(Shard),
    /// `auto` (`None`) or `auto/N`: K (and N) from the scheduler's environment.
    Auto(Option<u32>),
}

impl std::str::FromStr for ShardSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: expected K/N (0 <= K < N, e.g. 2/8), auto or auto/N");
        let count = |n: &str| -> Result<u32, String> {
            match n.trim().parse::<u32>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(bad()),
            }
        };
        let s = s.trim();
        if s.eq_ignore_ascii_case("auto") {
            return Ok(ShardSpec::Auto(None));
        }
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let n = count(n)?;
        if k.trim().eq_ignore_ascii_case("auto") {
            return Ok(ShardSpec::Auto(Some(n)));
        }
        let k: u32 = k.trim().parse().map_err(|_| bad())?;
        if k >= n {
            return Err(format!(
                "`{s}`: part {k} of {n} does not exist (K counts from 0)"
            ));
        }
        Ok(ShardSpec::Fixed(Shard { index: k, count: n }))
    }
}

/// Environment variable giving the number of parts for `--shard auto` in a
/// Kubernetes Indexed Job (Kubernetes exposes the completion index, not the
/// completion count, to the pod).
pub const COUNT_ENV: &str = "ACTDIFF_SHARD_COUNT";

impl ShardSpec {
    /// The part to compare. `auto` reads, in this order:
    /// - Slurm: `SLURM_ARRAY_TASK_ID` with `SLURM_ARRAY_TASK_COUNT`,
    ///   `SLURM_ARRAY_TASK_MIN` (K = (id - min) / step, so `--array=1-4`
    ///   or `--array=0-6:2` work) and `SLURM_ARRAY_TASK_STEP`;
    /// - Kubernetes: `JOB_COMPLETION_INDEX` as K, N from `auto/N` or
    ///   [`COUNT_ENV`].
    ///
    /// An `auto/N` that disagrees with Slurm's count is an error, and so is
    /// an environment without either scheduler's variables.
    pub fn resolve(self, env: &dyn Fn(&str) -> Option<String>) -> Result<Shard, String> {
        let given = match self {
            ShardSpec::Fixed(s) => return Ok(s),
            ShardSpec::Auto(n) => n,
        };
        let num = |name: &str| -> Result<Option<u64>, String> {
            match env(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| format!("--shard auto: {name}={v} is not a number")),
            }
        };
        let part = |k: u64, n: u64, from: &str| -> Result<Shard, String> {
            if n == 0 || n > u32::MAX as u64 || k >= n {
                return Err(format!(
                    "--shard auto: {from} gives part {k} of {n}, which does not exist"
                ));
            }
            Ok(Shard {
                index: k as u32,
                count: n as u32,
            })
        };
        if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
            let count = num("SLURM_ARRAY_TASK_COUNT")?.ok_or(
                "--shard auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not (Slurm 21.08 or later sets it)",
            )?;
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let step = num("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
            if id < min || (id - min) % step != 0 {
                return Err(format!(
                    "--shard auto: SLURM_ARRAY_TASK_ID={id} is not on the array's range (min {min}, step {step}); use a contiguous --array such as 0-{}",
                    count.saturating_sub(1)
                ));
            }
            if let Some(n) = given {
                if n as u64 != count {
                    return Err(format!(
                        "--shard auto/{n}: the Slurm array has {count} tasks (SLURM_ARRAY_TASK_COUNT)"
                    ));
                }
            }
            return part((id - min) / step, count, "the Slurm array");
        }
        if let Some(k) = num("JOB_COMPLETION_INDEX")? {
            let from_env = num(COUNT_ENV)?;
            let n = match (given, from_env) {
                (Some(n), Some(e)) if n as u64 != e => {
                    return Err(format!("--shard auto/{n} disagrees with {COUNT_ENV}={e}"))
                }
                (Some(n), _) => n as u64,
                (None, Some(e)) => e,
                (None, None) => {
                    return Err(format!(
                        "--shard auto: JOB_COMPLETION_INDEX={k} is set, but the number of parts is not: give --shard auto/N or set {COUNT_ENV} (the Job's completions)"
                    ))
                }
            };
            return part(k, n, "JOB_COMPLETION_INDEX");
        }
        Err("--shard auto: neither SLURM_ARRAY_TASK_ID (a Slurm job array) nor JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) is set; give --shard K/N".into())
    }
}

/// One unit of the split: what a part compares or lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Unit {
    /// A rank pair, by its run-1 rank.
    Pair(u32),
    /// A rank only run 1 has.
    Only1(u32),
    /// A rank only run 2 has.
    Only2(u32),
}

/// Assigns each of `units` (with its weight: log bytes) to one of `count`
/// parts: largest first, each to the part with the fewest bytes so far
/// (then the fewest units, then the lowest index). Ties between equal
/// weights go by the unit (rank number). Returns the part of each unit.
pub fn split<U: Ord>(units: &[(U, u64)], count: u32) -> Vec<u32> {
    let count = count.max(1) as usize;
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by(|&a, &b| {
        units[b]
            .1
            .cmp(&units[a].1)
            .then(units[a].0.cmp(&units[b].0))
    });
    let mut load = vec![(0u64, 0usize); count];
    let mut part = vec![0u32; units.len()];
    for i in order {
        let p = (0..count)
            .min_by_key(|&p| (load[p].0, load[p].1, p))
            .expect("at least one part");
        load[p].0 += units[i].1;
        load[p].1 += 1;
        part[i] = p as u32;
    }
    part
}

/// The units of a rank plan with their weights (both logs' bytes for a pair,
/// the one log's for a one-sided rank), in plan order. `size` gives a log's
/// size in bytes.
pub fn units_of(plan: &RankPlan, size: &dyn Fn(&Path) -> u64) -> Vec<(Unit, u64)> {
    let mut v: Vec<(Unit, u64)> = plan
        .pairs
        .iter()
        .map(|(a, pa, _, pb)| (Unit::Pair(*a), size(pa) + size(pb)))
        .collect();
    v.extend(plan.only1.iter().map(|r| (Unit::Only1(*r), 0)));
    v.extend(plan.only2.iter().map(|r| (Unit::Only2(*r), 0)));
    v
}

/// The units of `plan` that part `shard` holds, in plan order.
pub fn units_of_part(plan: &RankPlan, shard: Shard, size: &dyn Fn(&Path) -> u64) -> Vec<Unit> {
    units_by_part(plan, shard.count, size)
        .into_iter()
        .nth(shard.index as usize)
        .unwrap_or_default()
}

/// The units of `plan` of each of `count` parts, in plan order: one split
/// for all parts (what [`units_of_part`] gives each part), for checking
/// every part of a merge at once.
pub fn units_by_part(plan: &RankPlan, count: u32, size: &dyn Fn(&Path) -> u64) -> Vec<Vec<Unit>> {
    let units = units_of(plan, size);
    let parts = split(&units, count);
    let mut by_part = vec![Vec::new(); count.max(1) as usize];
    for ((u, _), p) in units.iter().zip(parts) {
        by_part[p as usize].push(*u);
    }
    by_part
}

/// The units of each step of a step series for each of `count` parts: one
/// split over every (step, unit) of the series, so that a series of many
/// steps of one rank spreads over the parts as well as one step of many
/// ranks does. `steps` gives each step's rank plan and log sizes (as
/// [`Inputs::sizes`] records them). Returns, per step (in the order of
/// `steps`), the units of each part, in plan order.
pub fn series_units_by_part(steps: &[(u64, RankPlan, Inputs)], count: u32) -> Vec<Vec<Vec<Unit>>> {
    let mut units: Vec<((u64, Unit), u64)> = Vec::new();
    let mut per_step: Vec<Vec<Unit>> = Vec::with_capacity(steps.len());
    for (step, plan, inputs) in steps {
        let sizes = inputs.sizes();
        let u = units_of(plan, &Inputs::size_of(&sizes));
        per_step.push(u.iter().map(|(u, _)| *u).collect());
        units.extend(u.into_iter().map(|(u, w)| ((*step, u), w)));
    }
    let mut parts = split(&units, count).into_iter();
    per_step
        .into_iter()
        .map(|us| {
            let mut by_part = vec![Vec::new(); count.max(1) as usize];
            for u in us {
                let p = parts.next().expect("one part per unit");
                by_part[p as usize].push(u);
            }
            by_part
        })
        .collect()
}

/// Keeps in `plan` only the units part `shard` holds.
pub fn restrict(plan: &RankPlan, units: &[Unit]) -> RankPlan {
    let held: ahash::AHashSet<Unit> = units.iter().copied().collect();
    RankPlan {
        pairs: plan
            .pairs
            .iter()
            .filter(|(a, ..)| held.contains(&Unit::Pair(*a)))
            .cloned()
            .collect(),
        only1: plan
            .only1
            .iter()
            .filter(|r| held.contains(&Unit::Only1(**r)))
            .copied()
            .collect(),
        only2: plan
            .only2
            .iter()
            .filter(|r| held.contains(&Unit::Only2(**r)))
            .copied()
            .collect(),
    }
}

/// One log of an input run, as recorded in a manifest.
#[derive(Clone, Debug, Eq, Serialize, Deserialize)]
pub struct LogInput {
    /// Rank number.
    pub rank: u32,
    /// The file, absolute ([`recorded_path`]; as found, relative to the
    /// compare's folder, in a version-1 `part.json`).
    pub file: PathBuf,
    /// Its size in bytes when the part was compared.
    pub bytes: u64,
    /// Its modification time when the part was compared, in whole seconds
    /// since the Unix epoch ([`modified_secs`]); absent in older parts.
    /// A log written again between parts keeps its size (7 printed digits
    /// print alike), not its time (trial 21 H3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified: Option<u64>,
}

/// Equal logs: the same rank, file and size, and the same modification
/// time where both parts recorded one.
impl PartialEq for LogInput {
    fn eq(&self, o: &LogInput) -> bool {
        self.rank == o.rank
            && self.file == o.file
            && self.bytes == o.bytes
            && (self.modified.is_none() || o.modified.is_none() || self.modified == o.modified)
    }
}

/// The modification time of `meta`'s file in whole seconds since the Unix
/// epoch, if the system gives one.
pub fn modified_secs(meta: &std::fs::Metadata) -> Option<u64> {
    meta.modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .map(|d| d.as_secs())
}

/// One input run, as recorded in a manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The path given, absolute ([`recorded_path`]; as given, relative to
    /// the compare's folder, in a version-1 `part.json`).
    pub path: PathBuf,
    /// Whether it is a folder.
    pub is_dir: bool,
    /// Its logs, by rank.
    pub logs: Vec<LogInput>,
}

impl RunRecord {
    /// Records `r`, with the sizes of its logs (0 for a log that cannot be read).
    /// Paths are recorded absolute ([`recorded_path`]).
    pub fn of(r: &RunInput) -> RunRecord {
        RunRecord {
            path: recorded_path(&r.path),
            is_dir: r.is_dir,
            logs: r
                .ranks
                .iter()
                .map(|(rank, file)| {
                    let meta = std::fs::metadata(file).ok();
                    LogInput {
                        rank: *rank,
                        file: recorded_path(file),
                        bytes: meta.as_ref().map_or(0, |m| m.len()),
                        modified: meta.as_ref().and_then(modified_secs),
                    }
                })
                .collect(),
        }
    }
    /// The run as [`RunInput`] again (for recomputing the split).
    pub fn input(&self) -> RunInput {
        RunInput {
            path: self.path.clone(),
            ranks: self.logs.iter().map(|l| (l.rank, l.file.clone())).collect(),
            is_dir: self.is_dir,
        }
    }
}

/// Both input runs; `None` for a run that could not be found (its error is
/// in [`RunLevel::input_errors`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inputs {
    /// Run 1.
    pub run1: Option<RunRecord>,
    /// Run 2.
    pub run2: Option<RunRecord>,
}

impl Inputs {
    /// A version-1 part's inputs (paths as given, relative to the folder
    /// its compare ran in) as version 2 records them ([`recorded_path`]),
    /// read from this process's folder, where a merge looks for them: so
    /// that a version-1 part and a version-2 part of the same files agree
    /// (a mix was refused as "different inputs: run1 is /tmp/g1 in one and
    /// g1 in the other").
    fn resolve_from_here(&mut self) {
        for r in [&mut self.run1, &mut self.run2].into_iter().flatten() {
            r.path = recorded_path(&r.path);
            for l in &mut r.logs {
                l.file = recorded_path(&l.file);
            }
        }
    }

    /// Every recorded log's size in bytes, by path (run 1's record first
    /// when both runs list one file): the weights of the split.
    pub fn sizes(&self) -> ahash::AHashMap<&Path, u64> {
        let mut sizes = ahash::AHashMap::new();
        for r in [&self.run1, &self.run2].into_iter().flatten() {
            for l in &r.logs {
                sizes.entry(l.file.as_path()).or_insert(l.bytes);
            }
        }
        sizes
    }

    /// The size in bytes of the log at `path` as recorded: `path` as
    /// recorded, or as found by a compare (relative to its folder: looked
    /// up by its [`recorded_path`]); 0 for a log not recorded.
    pub fn size_of<'a>(sizes: &'a ahash::AHashMap<&Path, u64>) -> impl Fn(&Path) -> u64 + 'a {
        move |p: &Path| match sizes.get(p) {
            Some(b) => *b,
            None => sizes.get(recorded_path(p).as_path()).copied().unwrap_or(0),
        }
    }
}

/// Whether a part's compare finished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum PartStatus {
    /// Written when the part starts: a part still in this state was
    /// interrupted (or is still running).
    Running,
    /// Every rank of the part was compared (some may have input errors:
    /// those are in the rank results, as in a single compare).
    Done,
    /// The compare stopped (e.g. its folder could not be written).
    Failed {
        /// Why.
        message: String,
    },
}

/// One rank's result as the run-level outputs need it: its summary (absent
/// when it could not be compared), errors, warnings, rule hits and which
/// `--ignore-op` names its logs have.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankResult {
    /// Run-1 rank.
    pub rank: u32,
    /// Rows judged by each rule, by rule index, then by each config
    /// per-dtype default ([`RunLevel::dtype_sections`]).
    pub rule_hits: Vec<u64>,
    /// Per `--ignore-op`: whether either log of the rank has that op.
    pub ignore_seen: Vec<bool>,
    /// The summary, when the rank was compared.
    pub summary: Option<RankSummary>,
    /// Input errors, naming the file.
    pub errors: Vec<Message>,
    /// Warnings.
    pub warnings: Vec<Message>,
}

/// Run metadata the run-level outputs need besides the rank results (the
/// same in every part of a run).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunLevel {
    /// Display names and paths of the runs.
    pub name1: String,
    /// Display name of run 2.
    pub name2: String,
    /// Run 1's path as given.
    pub path1: String,
    /// Run 2's path as given.
    pub path2: String,
    /// `--allow-incomplete`.
    pub allow_incomplete: bool,
    /// `--strict`.
    pub strict: bool,
    /// `--rank-map` pairs.
    pub rank_map: Vec<(u32, u32)>,
    /// `--layer-offset` values (side, rank, offset).
    pub layer_offsets: Vec<(u8, Option<u32>, i64)>,
    /// `--ignore-op` names.
    pub ignore_ops: Vec<String>,
    /// Each rule as named in a "matched no row" message: (origin, key source).
    pub rules: Vec<(String, String)>,
    /// Each per-dtype default a config wrote, as named in a "judged no
    /// row" message (`actdiff.toml [dtype.bfloat16]`).
    #[serde(default)]
    pub dtype_sections: Vec<String>,
    /// All rank pairs of the run (run-1 rank, run-2 rank), in plan order.
    pub pairs: Vec<(u32, u32)>,
    /// Ranks only run 1 has.
    pub only1: Vec<u32>,
    /// Ranks only run 2 has.
    pub only2: Vec<u32>,
    /// Errors finding the runs' logs.
    pub input_errors: Vec<Message>,
    /// Warnings finding them (a rank's capture that did not finish).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Message>,
}

/// `part.json`: what a part of a sharded compare holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// `actdiff` and its version.
    pub tool: String,
    /// Which part.
    pub shard: Shard,
    /// Whether its compare finished.
    pub status: PartStatus,
    /// The input runs with their logs' sizes (the split depends on them).
    pub inputs: Inputs,
    /// The command-line options that affect results, as JSON (every option
    /// of `actdiff compare` but the output ones), with the size and FNV-1a
    /// digest of each rules, config and override file.
    pub options: serde_json::Value,
    /// The units (ranks) this part holds.
    pub units: Vec<Unit>,
    /// The `--rows` file this part writes (made absolute), if any: the merge
    /// requires every part or none to have one, and the next part run into
    /// this folder removes it (see [`remove_previous_rows`]).
    #[serde(default)]
    pub rows: Option<PathBuf>,
    /// Run metadata for the run-level outputs.
    pub run: RunLevel,
    /// The results of this part's ranks (empty until done).
    pub results: Vec<RankResult>,
}

impl Manifest {
    /// The manifest of a part that failed before it read any input (a bad
    /// option or option file): status failed with `message`, no inputs, no
    /// ranks. The merge names it and skips its consistency checks.
    pub fn failed(shard: Shard, options: serde_json::Value, message: String) -> Manifest {
        Manifest {
            format: FORMAT.into(),
            version: VERSION,
            tool: format!("actdiff {}", env!("CARGO_PKG_VERSION")),
            shard,
            status: PartStatus::Failed { message },
            inputs: Inputs {
                run1: None,
                run2: None,
            },
            options,
            units: Vec::new(),
            rows: None,
            run: RunLevel::default(),
            results: Vec::new(),
        }
    }
    /// Writes `dir/part.json` (through a temporary file and a rename, so a
    /// reader never sees half a manifest).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(".part.json.tmp");
        let json = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, dir.join(MANIFEST))
    }
    /// Reads `dir/part.json`. Errors name `dir`: no such file or folder, a
    /// file, a folder without `part.json` (not a part), or the manifest's
    /// own error ([`Manifest::from_bytes`]).
    pub fn read(dir: &Path) -> Result<Manifest, String> {
        if !dir.exists() {
            return Err(format!("{}: no such file or folder", dir.display()));
        }
        if !dir.is_dir() {
            return Err(format!(
                "{}: not a part of a sharded compare (a file; a part is the folder `actdiff compare --shard` wrote)",
                dir.display()
            ));
        }
        let path = dir.join(MANIFEST);
        let bytes = std::fs::read(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "{}: not a part of a sharded compare (no {MANIFEST}; was it written by `actdiff compare --shard`?)",
                    dir.display()
                )
            } else {
                format!("{}: {e}", path.display())
            }
        })?;
        Manifest::from_bytes(&bytes, &path)
    }

    /// Reads a manifest's bytes (`path` names it in errors: line and column
    /// for malformed JSON, the format and version when they are not this
    /// actdiff's).
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Manifest, String> {
        let v: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| format!("{}:{}:{}: {e}", path.display(), e.line(), e.column()))?;
        if v["format"] != FORMAT {
            return Err(format!("{}: not an actdiff part manifest", path.display()));
        }
        let readable = v["version"]
            .as_u64()
            .is_some_and(|n| (OLDEST_VERSION as u64..=VERSION as u64).contains(&n));
        if !readable {
            return Err(format!(
                "{}: part manifest version {} (this actdiff reads versions {OLDEST_VERSION} to {VERSION}; compare the part again with this actdiff)",
                path.display(),
                v["version"]
            ));
        }
        let mut m: Manifest =
            serde_json::from_value(v).map_err(|e| format!("{}: {e}", path.display()))?;
        if m.version < 2 {
            m.inputs.resolve_from_here();
        }
        Ok(m)
    }
}

/// Removes the `--rows` file that an earlier part in `dir` recorded in its
/// `part.json`, and only that file, so that a glob over the parts' rows
/// never reads a stale one. Nothing to do without an earlier part.
pub fn remove_previous_rows(dir: &Path) -> Result<(), String> {
    let Some(rows) = Manifest::read(dir).ok().and_then(|m| m.rows) else {
        return Ok(());
    };
    match std::fs::remove_file(&rows) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!(
            "{}: cannot remove the rows file of the earlier part in {}: {e}",
            rows.display(),
            dir.display()
        )),
    }
}

/// A 64-bit FNV-1a digest of `bytes` (to tell rules, config and override
/// files apart in a manifest; not a security measure).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `{"bytes": N, "fnv1a": "hex"}` of a file, or `{"error": ...}`.
pub fn file_record(path: &Path) -> serde_json::Value {
    match std::fs::read(path) {
        Ok(b) => serde_json::json!({"bytes": b.len(), "fnv1a": format!("{:016x}", fnv1a(&b))}),
        Err(e) => serde_json::json!({"error": e.to_string()}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn shard_specs_parse() {
        assert_eq!(
            "2/8".parse::<ShardSpec>(),
            Ok(ShardSpec::Fixed(Shard { index: 2, count: 8 }))
        );
        assert_eq!("auto".parse::<ShardSpec>(), Ok(ShardSpec::Auto(None)));
        assert_eq!("auto/4".parse::<ShardSpec>(), Ok(ShardSpec::Auto(Some(4))));
        for bad in ["8/8", "1/0", "x/2", "3", "-1/2", "auto/0"] {
            assert!(bad.parse::<ShardSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn auto_reads_slurm_and_kubernetes() {
        let auto = ShardSpec::Auto(None);
        let s = |k, n| Ok(Shard { index: k, count: n });
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        assert_eq!(auto.resolve(&env(&slurm)), s(2, 4));
        // --array=1-4: ids 1..4 are parts 0..3.
        let offset = [
            ("SLURM_ARRAY_TASK_ID", "4"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
        ];
        assert_eq!(auto.resolve(&env(&offset)), s(3, 4));
        // --array=0-6:2
        let step = [
            ("SLURM_ARRAY_TASK_ID", "6"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
        ];
        assert_eq!(auto.resolve(&env(&step)), s(3, 4));
        assert!(ShardSpec::Auto(Some(8)).resolve(&env(&slurm)).is_err());
        assert!(auto
            .resolve(&env(&[("SLURM_ARRAY_TASK_ID", "2")]))
            .unwrap_err()
            .contains("SLURM_ARRAY_TASK_COUNT"));
        let k8s = [("JOB_COMPLETION_INDEX", "1")];
        assert_eq!(ShardSpec::Auto(Some(3)).resolve(&env(&k8s)), s(1, 3));
        assert!(auto.resolve(&env(&k8s)).unwrap_err().contains(COUNT_ENV));
        let k8s_env = [("JOB_COMPLETION_INDEX", "1"), (COUNT_ENV, "2")];
        assert_eq!(auto.resolve(&env(&k8s_env)), s(1, 2));
        assert!(ShardSpec::Auto(Some(3)).resolve(&env(&k8s_env)).is_err());
        assert!(
            ShardSpec::Auto(Some(1)).resolve(&env(&k8s)).is_err(),
            "index 1 of 1"
        );
        assert!(auto.resolve(&env(&[])).unwrap_err().contains("K/N"));
    }

    #[test]
    fn split_balances_bytes_and_is_deterministic() {
        let units: Vec<(Unit, u64)> = [(0, 100), (1, 90), (2, 10), (3, 10), (4, 80), (5, 0)]
            .iter()
            .map(|(r, b)| (Unit::Pair(*r), *b))
            .collect();
        let p = split(&units, 2);
        assert_eq!(p, split(&units, 2));
        let load = |k: u32| -> u64 {
            units
                .iter()
                .zip(&p)
                .filter(|(_, x)| **x == k)
                .map(|(u, _)| u.1)
                .sum()
        };
        // 100 | 90 -> 90+80 | 100+10+10 -> totals 170 / 120 is what LPT gives.
        assert_eq!((load(0), load(1)), (120, 170));
        // Every unit in exactly one part; more parts than units leaves some empty.
        let p = split(&units, 10);
        let mut seen = p.clone();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), units.len());
        assert!(split(&units, 1).iter().all(|x| *x == 0));
    }

    #[test]
    fn digest_is_fnv1a() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
    }
}

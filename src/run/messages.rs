//! Building the warnings and input errors of a compare, and the problems
//! of a merge with its parts,
//! ([`crate::report::messages::Message`], where their words are) from the
//! parsed logs, the match and the run-level facts. The pipeline collects
//! them per rank ([`super::pipeline`]'s `compare_rank`) and per run
//! (`compare_runs`, [`super::pipeline::assemble`]); they stay values in
//! [`super::shard::RankResult`] and [`super::outputs::RunMeta`] and become
//! text where they are written.

use crate::matcher::{self, MatchTable};
use crate::parser::{self, duplicate_keys, source::binary_at, Field, OpTable};

pub use crate::report::messages::{
    join, ChangedLog, InputsDifference, LogNow, LogWarning, Message, PartName, Side,
};

use std::path::{Path, PathBuf};

use super::merge::ReadPart;
use super::shard::{self, Inputs, Manifest, PartStatus, RankResult, RunLevel};
use crate::report::files;

/// Most warning lines printed per log; the rest are counted in one line.
pub const WARNING_LINES: usize = 20;

/// The warnings of one log, one per kind of warning (and per unknown field
/// label), each at its first occurrence's line and column; at most
/// [`WARNING_LINES`], then a count of the rest.
///
/// A binary file with no ops has none: its error ([`check_usable`]) says
/// it is binary, and warnings about the text of its "lines" are noise.
pub fn log_warnings(t: &OpTable, side: Side) -> Vec<Message> {
    use parser::WarningKind as K;
    let mut out = Vec::new();
    if t.is_empty() && binary_at(t.bytes()).is_some() {
        return out;
    }
    let path = t.path().display().to_string();
    let counts = t.warning_counts();
    for (kind, label, n) in counts.iter().take(WARNING_LINES) {
        let first = t
            .warnings()
            .iter()
            .find(|w| w.kind == *kind && w.label == *label);
        let (label, count) = (label.clone(), *n);
        let what = match (kind, first) {
            (K::UnknownField, _) => LogWarning::UnknownField { label, count },
            (_, Some(w)) => LogWarning::Said {
                message: w.message.clone(),
                count,
            },
            // Past the warnings kept with their positions.
            (_, None) => LogWarning::Uncounted { label, count },
        };
        out.push(Message::LogWarning {
            path: path.clone(),
            at: first.map(|w| (w.line, w.column)),
            side,
            what,
        });
    }
    if counts.len() > WARNING_LINES {
        out.push(Message::MoreLogWarnings {
            path,
            side,
            count: counts[WARNING_LINES..].iter().map(|c| c.2).sum(),
            kinds: counts.len() - WARNING_LINES,
        });
    }
    out
}

/// The warning for a log of step folder `step` (a step series' compare)
/// whose `Step:` header names another step.
pub fn step_header_mismatch(step: Option<u64>, t: &OpTable) -> Option<Message> {
    let (folder, header) = (step?, t.header().step?);
    (folder != header).then(|| Message::StepHeaderMismatch {
        path: t.path().display().to_string(),
        folder,
        header,
    })
}

/// The warning for two logs whose `Step:` lines name different steps,
/// outside a step series (whose folders pair steps by number and whose
/// logs [`step_header_mismatch`] checks against their folder).
pub fn steps_differ(t1: &OpTable, t2: &OpTable) -> Option<Message> {
    let (s1, s2) = (t1.header().step?, t2.header().step?);
    (s1 != s2).then(|| Message::StepsDiffer {
        run1: (t1.path().display().to_string(), s1),
        run2: (t2.path().display().to_string(), s2),
    })
}

/// The warning that the rows only one run has at this rank are activation
/// checkpointing's recomputation ([`crate::matcher::recompute`], which
/// flags them not gating): one per run that has them.
pub fn recomputed_ops(rank: u32, m: &MatchTable, t1: &OpTable, t2: &OpTable) -> Vec<Message> {
    m.recomputed
        .iter()
        .map(|r| {
            let (side, t) = if r.side == 0 {
                ("run1", t1)
            } else {
                ("run2", t2)
            };
            let key = |row: usize| String::from_utf8_lossy(t.key(row)).into_owned();
            Message::RecomputedOps {
                rank,
                side,
                count: r.count,
                example: Box::new((key(r.example.0), key(r.example.1))),
                communication: r.communication,
            }
        })
        .collect()
}

/// The warning that runs of different parallel layouts, one of them
/// combined from its shards, were compared at the reference's tolerance
/// (no `--layouts`, `--rtol`/`--atol`, rule, per-dtype tolerance or
/// `--bitwise`) and some row gates: most likely float rounding, which
/// `--layouts` separates from a change. `None` otherwise.
pub fn layouts_at_reference_tolerance(
    cfg: &super::pipeline::CompareConfig,
    c: &super::pipeline::Compared,
) -> Option<Message> {
    let policy = &cfg.matching.policy;
    let combined: Vec<String> = c
        .meta
        .layouts
        .iter()
        .filter(|l| !l.combined.is_empty())
        .map(|l| {
            if l.side == 1 {
                cfg.report.name1.clone()
            } else {
                cfg.report.name2.clone()
            }
        })
        .collect();
    let reference = policy.default.hash == matcher::Tolerance::REFERENCE
        && policy.default.stats.is_none()
        && policy.rules.is_empty()
        && policy.dtype.is_empty();
    let gating = c.ranks.iter().any(|r| r.counts.gating > 0);
    let digests = !c.ranks.is_empty() && c.ranks.iter().all(|r| r.bitwise.is_some());
    (reference && gating && !combined.is_empty()).then_some(Message::LayoutsAtReferenceTolerance {
        runs: combined,
        digests,
    })
}

/// The warning that two `level="modules"` runs of different rank counts
/// differ in Shape ([`Message::ModulesAcrossLayouts`]). `None` otherwise.
pub fn modules_across_layouts(
    cfg: &super::pipeline::CompareConfig,
    c: &super::pipeline::Compared,
) -> Option<Message> {
    let modules = |l: crate::logformat::CaptureLevel| l == crate::logformat::CaptureLevel::Modules;
    let both = c.ranks.len() + c.meta.ranks_failed.len();
    let n1 = both + c.meta.ranks_only1.len();
    let n2 = both + c.meta.ranks_only2.len();
    let shapes = c
        .ranks
        .iter()
        .any(|r| modules(r.run1.level) && modules(r.run2.level) && r.shape_mismatches.is_some());
    (n1 != n2 && shapes).then(|| Message::ModulesAcrossLayouts {
        runs: [
            (cfg.report.name1.clone(), n1),
            (cfg.report.name2.clone(), n2),
        ],
    })
}

/// The warning that the runs' logs declare different world sizes
/// ([`Message::WorldSizesDiffer`]), unless shards were combined across
/// parallel layouts (TP=2 against TP=1: compared as whole tensors).
/// `None` otherwise.
pub fn world_sizes_differ(
    cfg: &super::pipeline::CompareConfig,
    c: &super::pipeline::Compared,
) -> Option<Message> {
    if c.meta.layouts.iter().any(|l| !l.combined.is_empty()) {
        return None;
    }
    let w1 = c.ranks.iter().find_map(|r| r.run1.world_size)?;
    let w2 = c.ranks.iter().find_map(|r| r.run2.world_size)?;
    (w1 != w2).then(|| Message::WorldSizesDiffer {
        runs: [
            (cfg.report.name1.clone(), w1),
            (cfg.report.name2.clone(), w2),
        ],
    })
}

/// The warning when `run1` and `run2` name one file or folder (symbolic
/// links and `.`/`..` resolved): a compare of a run with itself passes
/// whatever the run holds, a typo a CI gate would not see.
pub fn same_run(run1: &Path, run2: &Path) -> Option<Message> {
    let canon = |p: &Path| std::fs::canonicalize(p).ok();
    let c1 = canon(run1)?;
    (Some(&c1) == canon(run2).as_ref()).then(|| Message::SameRun {
        path: run1.display().to_string(),
    })
}

/// A warning for each side whose first unreadable value is a Shape
/// (found when the rank's summary is built, among the pairs whose Shape
/// texts differ, after the parse warnings were said): on stderr as the
/// parse's are (trial 25: exit 3 with nothing on stderr under `-q`).
pub fn unreadable_shapes(s: &crate::report::RankSummary) -> Vec<Message> {
    [(&s.run1, "run1"), (&s.run2, "run2")]
        .into_iter()
        .filter_map(|(side, name)| {
            side.incomplete.iter().find_map(|m| match m {
                Message::UnreadableValues { first: Some(u), .. }
                    if u.message.starts_with("Shape value") =>
                {
                    Some(Message::LogWarning {
                        path: u.path.clone(),
                        at: Some((u.line, u.column)),
                        side: name,
                        what: crate::report::messages::LogWarning::Said {
                            message: u.message.clone(),
                            count: 1,
                        },
                    })
                }
                _ => None,
            })
        })
        .collect()
}

/// The error for the log of a rank only one run has, read as any log
/// is ([`check_usable`], [`crate::report::summary::incomplete_of`]):
/// `None` when it is a complete, usable log. One-sided logs were never
/// read, so an empty or cut one passed as an ordinary one-sided rank.
pub fn one_sided_log(rank: u32, path: &Path, side: Side) -> Option<Message> {
    let why: Vec<Message> = match crate::parser::parse_path(path) {
        Err(e) => vec![Message::Text(e.to_string())],
        Ok(t) => match check_usable(&t, side, true) {
            Err(m) => vec![m],
            Ok(()) => crate::report::summary::incomplete_of(&t),
        },
    };
    (!why.is_empty()).then(|| Message::OneSidedLog {
        path: path.display().to_string(),
        side,
        rank,
        why,
    })
}

/// Checks that a parsed log can be compared: not empty, has ops, has some
/// comparable field, and (without `allow_duplicates`) no duplicate key.
pub fn check_usable(t: &OpTable, side: Side, allow_duplicates: bool) -> Result<(), Message> {
    let path = t.path().display().to_string();
    if t.bytes().is_empty() {
        return Err(Message::EmptyLog { path, side });
    }
    if t.is_empty() {
        let header_only = t.header().total.is_some();
        return Err(Message::NoOps {
            path,
            side,
            header_only,
            binary_at: binary_at(t.bytes()),
        });
    }
    let comparable = Field::ALL[1..]
        .iter()
        .filter(|f| !matches!(f, Field::Location | Field::InputProducers | Field::Phase))
        .any(|f| t.schema().contains(*f));
    if !comparable {
        let line = t.line(0);
        return Err(Message::NoComparableFields { path, line, side });
    }
    if !allow_duplicates {
        if let Some((key, lines)) = duplicate_keys(t).first() {
            return Err(Message::DuplicateKey {
                path,
                side,
                key: key.clone(),
                lines: lines.clone(),
            });
        }
    }
    Ok(())
}

/// The error for logs of two capture levels (`Level: modules` against a
/// per-op log). A log with no block (empty, not a log: its own error says
/// so) has no level to compare.
pub fn level_mismatch(t1: &OpTable, t2: &OpTable) -> Option<Message> {
    if t1.is_empty() || t2.is_empty() {
        return None;
    }
    let (l1, l2) = (t1.header().level, t2.header().level);
    (l1 != l2).then(|| Message::LevelMismatch {
        run1: (t1.path().display().to_string(), l1.name()),
        run2: (t2.path().display().to_string(), l2.name()),
    })
}

/// The error for per-op logs captured with different filters (both with a
/// `Capture filter:` line, the values differ). A log without the line (the
/// reference's, an older capture's) is not checked.
pub fn filter_mismatch(t1: &OpTable, t2: &OpTable) -> Option<Message> {
    let (f1, f2) = (t1.header().filter.as_ref()?, t2.header().filter.as_ref()?);
    (f1 != f2).then(|| Message::FilterMismatch {
        run1: (t1.path().display().to_string(), f1.clone()),
        run2: (t2.path().display().to_string(), f2.clone()),
    })
}

/// The warning for fields that only one log of a rank has (they are not
/// compared), if there are any. Fields a cut-short log lacks are not
/// named: the rows it lost may have held them (its incomplete input says
/// so).
pub fn one_sided_fields(rank: u32, t1: &OpTable, t2: &OpTable) -> Option<Message> {
    let cut = |t: &OpTable| {
        t.truncated_rows() > 0 || t.header().total.is_some_and(|n| n != t.len() as u64)
    };
    let only = |a: &OpTable, b: &OpTable| {
        if cut(b) {
            Vec::new()
        } else {
            a.schema().minus(b.schema())
        }
    };
    let (run1, run2) = (only(t1, t2), only(t2, t1));
    (!run1.is_empty() || !run2.is_empty()).then(|| Message::OneSidedFields {
        rank,
        run1: run1.into_iter().collect(),
        run2: run2.into_iter().collect(),
    })
}

/// [`Message::WrapperPrefix`] when every module FQN of one log of rank
/// `rank` (but the root's, `<none>`) is `module` or starts with `module.`
/// and no module of the other log's is: one key read per module, not per
/// row.
pub fn wrapper_prefix(rank: u32, t1: &OpTable, t2: &OpTable) -> Option<Message> {
    // (any module under `module`, every module under it)
    let look = |t: &OpTable| {
        let mut seen: Vec<bool> = Vec::new();
        let (mut any, mut all) = (false, true);
        for (r, &m) in t.row_modules().iter().enumerate() {
            let m = m as usize;
            if m >= seen.len() {
                seen.resize(m + 1, false);
            }
            if std::mem::replace(&mut seen[m], true) {
                continue;
            }
            let module = crate::parser::key::module_and_op(t.key(r)).0;
            if module == b"<none>" {
                continue;
            }
            let under = module == b"module" || module.starts_with(b"module.");
            any |= under;
            all &= under;
        }
        (any, any && all)
    };
    let ((any1, all1), (any2, all2)) = (look(t1), look(t2));
    let side = match (all1, all2) {
        (true, false) if !any2 => "run1",
        (false, true) if !any1 => "run2",
        _ => return None,
    };
    Some(Message::WrapperPrefix { rank, side })
}

/// The warning that one log is full precision and the other printed with
/// 7 digits (run 1's `t1` tells which), so values are compared to
/// print precision, the default tolerances' rtol raised to `rtol`.
pub fn mixed_precision(rank: u32, t1: &OpTable, rtol: f64) -> Message {
    let full = if t1.precision() == parser::Precision::Full {
        "run1"
    } else {
        "run2"
    };
    Message::MixedPrecision { rank, full, rtol }
}

/// The input error of `--bitwise` on a full-precision log and a printed
/// one (run 1's `t1` tells which is full).
pub fn bitwise_mixed_precision(rank: u32, t1: &OpTable) -> Message {
    let full = if t1.precision() == parser::Precision::Full {
        "run1"
    } else {
        "run2"
    };
    Message::BitwiseMixedPrecision { rank, full }
}

/// A warning for each side whose negative `--layer-offset` would number
/// some of its layers below 0: those keys are compared as they are
/// ([`matcher::keys::with_layer_offset`]), which a user who gave the offset
/// (often to the wrong run) does not expect.
pub fn negative_layers(rank: u32, offsets: [i64; 2], tables: [&OpTable; 2]) -> Vec<Message> {
    let mut warnings = Vec::new();
    for (i, (offset, t)) in offsets.into_iter().zip(tables).enumerate() {
        if offset >= 0 {
            continue;
        }
        let below: Vec<u32> = (0..t.len())
            .filter_map(|r| t.layer(r))
            .filter(|l| i64::from(*l) + offset < 0)
            .collect();
        let (Some(lo), Some(hi)) = (below.iter().min(), below.iter().max()) else {
            continue;
        };
        warnings.push(Message::NegativeLayers {
            rank,
            side: i + 1,
            offset,
            layers: (*lo, *hi),
            ops: below.len(),
        });
    }
    warnings
}

/// With `--rules-exhaustive`, the error for the first row no rule judged.
pub fn unjudged(rank: u32, m: &MatchTable, t1: &OpTable, t2: &OpTable) -> Option<Message> {
    let r = m
        .rows
        .iter()
        .find(|r| !matches!(r.source, matcher::Source::Rule(_)))?;
    let key = match r.sides().first() {
        (0, a) => t1.key_str(a).into_owned(),
        (_, b) => t2.key_str(b).into_owned(),
    };
    Some(Message::Unjudged { rank, key })
}

/// Warnings for options that name ranks or ops no compared log has (they
/// did nothing).
pub fn unused_options(run: &RunLevel, done: &[RankResult]) -> Vec<Message> {
    let mut warnings = Vec::new();
    for &(rank1, rank2) in &run.rank_map {
        if !run.pairs.contains(&(rank1, rank2)) {
            warnings.push(Message::UnusedRankMap { rank1, rank2 });
        }
    }
    for &(side, rank, offset) in &run.layer_offsets {
        if let Some(r) = rank {
            let present = run
                .pairs
                .iter()
                .any(|(x, y)| if side == 1 { *x == r } else { *y == r });
            if !present {
                warnings.push(Message::UnusedLayerOffset {
                    side,
                    rank: r,
                    offset,
                });
            }
        }
    }
    for (i, op) in run.ignore_ops.iter().enumerate() {
        if !done.is_empty() && !done.iter().any(|d| d.ignore_seen.get(i) == Some(&true)) {
            warnings.push(Message::UnusedIgnoreOp { op: op.clone() });
        }
    }
    warnings
}

/// Rules, and per-dtype defaults a config wrote, that judged no row of any
/// rank: warnings, or with `--strict` errors (`strict` set on each).
pub fn unused_rules(run: &RunLevel, done: &[RankResult]) -> Vec<Message> {
    if done.is_empty() {
        return Vec::new();
    }
    let mut hits = vec![0u64; run.rules.len() + run.dtype_sections.len()];
    for d in done {
        for (h, x) in hits.iter_mut().zip(&d.rule_hits) {
            *h += x;
        }
    }
    let strict = run.strict;
    let rules = run
        .rules
        .iter()
        .map(|(origin, key_src)| Message::UnusedRule {
            origin: origin.clone(),
            key_src: key_src.clone(),
            strict,
        });
    // A config's `[dtype.X]` that judged no row: often a misspelt dtype
    // (`bfloat17`), which would otherwise leave those rows at the global
    // default without a word.
    let dtypes = run
        .dtype_sections
        .iter()
        .map(|origin| Message::UnusedDtype {
            origin: origin.clone(),
            strict,
        });
    rules
        .chain(dtypes)
        .zip(&hits)
        .filter(|(_, h)| **h == 0)
        .map(|(m, _)| m)
        .collect()
}

/// `part 2/4 (parts/p2)`: part `m` named by its folder `dir`.
pub fn part_name(m: &Manifest, dir: &Path) -> PartName {
    PartName {
        shard: m.shard,
        dir: dir.display().to_string(),
    }
}

/// Parts whose compare did not finish or failed, and parts written by
/// another version.
pub fn status_problems(read: &[ReadPart]) -> Vec<Message> {
    let tool = format!("actdiff {}", env!("CARGO_PKG_VERSION"));
    let mut problems = Vec::new();
    for p in read {
        let m = &p.manifest;
        match &m.status {
            PartStatus::Done => {}
            PartStatus::Running => problems.push(Message::PartUnfinished {
                part: p.name.clone(),
            }),
            PartStatus::Failed { message } => problems.push(Message::PartFailed {
                part: p.name.clone(),
                message: message.clone(),
            }),
        }
        if m.tool != tool {
            problems.push(Message::PartVersion {
                part: p.name.clone(),
                tool: m.tool.clone(),
                this: tool.clone(),
            });
        }
    }
    problems
}

/// Top-level keys whose values differ between two JSON objects.
fn differing_keys(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return vec!["(options)".into()];
    };
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The first difference between two parts' recorded inputs.
fn inputs_difference(a: &Inputs, b: &Inputs) -> InputsDifference {
    for (side, x, y) in [("run1", &a.run1, &b.run1), ("run2", &a.run2, &b.run2)] {
        match (x, y) {
            (Some(x), Some(y)) if x != y => {
                if x.path != y.path {
                    return InputsDifference::Folder {
                        side,
                        first: x.path.display().to_string(),
                        other: y.path.display().to_string(),
                    };
                }
                for l in &x.logs {
                    match y.logs.iter().find(|m| m.rank == l.rank) {
                        None => return InputsDifference::RankInOne { side, rank: l.rank },
                        Some(m) if m != l && m.file == l.file && m.bytes == l.bytes => {
                            return InputsDifference::RankLogRewritten {
                                side,
                                rank: l.rank,
                                file: l.file.display().to_string(),
                            }
                        }
                        Some(m) if m != l => {
                            return InputsDifference::RankLog {
                                side,
                                rank: l.rank,
                                first: (l.file.display().to_string(), l.bytes),
                                other: (m.file.display().to_string(), m.bytes),
                            }
                        }
                        _ => {}
                    }
                }
                return InputsDifference::Logs { side };
            }
            (Some(_), None) | (None, Some(_)) => return InputsDifference::FoundByOne { side },
            _ => {}
        }
    }
    InputsDifference::Other
}

/// Sound parts that disagree with `first`: another split, other inputs,
/// other options; rows written by some parts only or to one file; logs
/// changed since the parts compared them.
pub fn agreement_problems(first: &ReadPart, sound: &[&ReadPart]) -> Vec<Message> {
    let mut problems = Vec::new();
    let f = &first.manifest;
    for p in sound.iter().skip(1) {
        let m = &p.manifest;
        let (first, other) = (first.name.clone(), p.name.clone());
        if m.shard.count != f.shard.count {
            problems.push(Message::PartsOfOtherSplits {
                first: first.clone(),
                other: other.clone(),
            });
        }
        if m.inputs != f.inputs {
            problems.push(Message::PartsOfOtherInputs {
                first,
                other,
                difference: Box::new(inputs_difference(&f.inputs, &m.inputs)),
                relative: f.version < 2 || m.version < 2,
            });
        } else if m.options != f.options || m.run != f.run {
            problems.push(Message::PartsOfOtherOptions {
                first,
                other,
                keys: differing_keys(&f.options, &m.options),
            });
        }
    }
    problems.extend(rows_disagree(sound));
    problems.extend(rows_shared(sound));
    if !sound.is_empty() {
        problems.extend(logs_changed(first));
    }
    problems
}

/// Parts given twice and parts missing among the `count` of the split.
pub fn coverage_problems(count: u32, read: &[ReadPart]) -> Vec<Message> {
    let mut problems = Vec::new();
    let mut by_index: Vec<Option<&str>> = vec![None; count as usize];
    for p in read {
        let shard = p.manifest.shard;
        let Some(slot) = by_index.get_mut(shard.index as usize) else {
            continue;
        };
        match slot {
            Some(other) => problems.push(Message::PartGivenTwice {
                shard,
                first: other.to_string(),
                second: p.name.dir.clone(),
            }),
            None => *slot = Some(&p.name.dir),
        }
    }
    let missing: Vec<u32> = (0..count)
        .filter(|k| by_index[*k as usize].is_none())
        .collect();
    if !missing.is_empty() {
        problems.push(Message::PartsMissing {
            missing,
            count,
            given: read
                .iter()
                .map(|p| (p.manifest.shard, p.name.dir.clone()))
                .collect(),
        });
    }
    problems
}

/// Parts that do not hold the units the split gives them: `split`, or the
/// split of `first`'s recorded inputs (every part has the count of the
/// first).
pub fn split_problems(
    first: &Manifest,
    split: Option<Vec<Vec<shard::Unit>>>,
    read: &[ReadPart],
) -> Vec<Message> {
    let by_part = split.unwrap_or_else(|| {
        let runs = (first.inputs.run1.as_ref(), first.inputs.run2.as_ref());
        let plan = match runs {
            (Some(a), Some(b)) => super::plan(&a.input(), &b.input(), &first.run.rank_map, None),
            _ => super::RankPlan::default(),
        };
        let sizes = first.inputs.sizes();
        let size = |p: &Path| sizes.get(p).copied().unwrap_or(0);
        shard::units_by_part(&plan, first.shard.count, &size)
    });
    let mut problems = Vec::new();
    for p in read {
        let m = &p.manifest;
        let want = by_part
            .get(m.shard.index as usize)
            .cloned()
            .unwrap_or_default();
        let held: Vec<u32> = m.results.iter().map(|r| r.rank).collect();
        let split: Vec<u32> = want
            .iter()
            .filter_map(|u| match u {
                shard::Unit::Pair(a) => Some(*a),
                _ => None,
            })
            .collect();
        if m.units != want || held != split {
            problems.push(Message::PartUnits {
                part: p.name.clone(),
                held,
                split,
            });
        }
    }
    problems
}

/// Parts with a `--rows` file and parts without one cannot be merged: the
/// rows read by glob would miss some ranks. One problem naming both sets.
fn rows_disagree(parts: &[&ReadPart]) -> Option<Message> {
    let (with, without): (Vec<&&ReadPart>, Vec<&&ReadPart>) =
        parts.iter().partition(|p| p.manifest.rows.is_some());
    if with.is_empty() || without.is_empty() {
        return None;
    }
    let names = |v: &[&&ReadPart]| v.iter().map(|p| p.name.clone()).collect();
    Some(Message::RowsInSomeParts {
        with: names(&with),
        without: names(&without),
    })
}

/// Parts that wrote their rows to the same file (a relative `--rows
/// rows.parquet` run from one folder): each overwrote the one before, so
/// the file holds the last part's ranks only. One problem per file.
fn rows_shared(parts: &[&ReadPart]) -> Vec<Message> {
    let mut by_file: std::collections::BTreeMap<&PathBuf, Vec<PartName>> = Default::default();
    for p in parts {
        if let Some(rows) = &p.manifest.rows {
            by_file.entry(rows).or_default().push(p.name.clone());
        }
    }
    by_file
        .into_iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|(file, parts)| Message::RowsSharedByParts {
            parts,
            file: file.display().to_string(),
        })
        .collect()
}

/// The logs recorded in part `p` whose size is not the recorded one (or
/// that are gone): the parts compared other bytes than are there now, so a
/// merge could pass with parts of an older run.
fn logs_changed(p: &ReadPart) -> Option<Message> {
    let m = &p.manifest;
    let logs: Vec<ChangedLog> = [&m.inputs.run1, &m.inputs.run2]
        .into_iter()
        .flatten()
        .flat_map(|r| &r.logs)
        .filter_map(|l| {
            let now = match std::fs::metadata(&l.file) {
                Ok(meta) if meta.len() == l.bytes => {
                    let now = crate::run::shard::modified_secs(&meta);
                    match (l.modified, now) {
                        (Some(then), Some(now)) if then != now => LogNow::Rewritten,
                        _ => return None,
                    }
                }
                Ok(meta) => LogNow::Bytes(meta.len()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => LogNow::Missing,
                Err(e) => LogNow::Unreadable(e.to_string()),
            };
            Some(ChangedLog {
                file: l.file.display().to_string(),
                recorded: l.bytes,
                now,
            })
        })
        .collect();
    // A version-1 part recorded its paths as given, relative to the folder
    // its compare ran in (read from the merge's folder, `Manifest::read`).
    let relative = m.version < 2 && logs.iter().any(|l| l.now == LogNow::Missing);
    (!logs.is_empty()).then(|| Message::LogsChanged {
        part: p.name.clone(),
        logs,
        relative,
    })
}

/// The report files part `p`'s ranks need that its folder lacks: each
/// compared rank's result pages (as its summary lists them) and key index
/// (the file of its block of ranks, or in a part an earlier actdiff wrote,
/// its own `rank{N}-keys.js`).
/// A rank without pages (a step of a series without full pages,
/// [`crate::report::ReportOptions::rank_files`]) has neither.
pub fn missing_files(p: &ReadPart) -> Option<Message> {
    let files: Vec<String> = p
        .manifest
        .results
        .iter()
        .filter_map(|r| r.summary.as_ref())
        .flat_map(|s| {
            let legacy = p.dir.join(files::legacy_keys(s.rank));
            let own = if s.pages.is_empty() || legacy.is_file() {
                Vec::new()
            } else {
                vec![files::keys(s.rank)]
            };
            s.pages.iter().map(|p| p.file.clone()).chain(own)
        })
        .filter(|f| !p.dir.join(f).is_file())
        .fold(Vec::new(), |mut v: Vec<String>, f| {
            // A key-index file holds several ranks': named once.
            if !v.contains(&f) {
                v.push(f);
            }
            v
        });
    (!files.is_empty()).then(|| Message::PartFilesMissing {
        part: p.name.clone(),
        files,
    })
}

/// Step `step`'s merge problem `m` as the series' problem where it is
/// one: parts whose run is another folder at this step (`a/step_3`
/// against `c/step_3`) are parts of another series, said once for every
/// step by the runs' folders (`a` against `c`) through [`at_steps`].
pub fn series_problem(step: u64, m: Message) -> Message {
    let Message::PartsOfOtherInputs {
        first,
        other,
        difference,
        relative,
    } = m
    else {
        return m;
    };
    let step_dir = format!("{}{step}", files::STEP_DIR_PREFIX);
    let run_of = |p: &str| {
        let p = Path::new(p);
        (p.file_name()? == step_dir.as_str())
            .then(|| p.parent().map(|d| d.display().to_string()))?
    };
    let difference = match *difference {
        InputsDifference::Folder {
            side,
            first: f,
            other: o,
        } => match (run_of(&f), run_of(&o)) {
            (Some(first), Some(other)) => InputsDifference::Folder { side, first, other },
            _ => InputsDifference::Folder {
                side,
                first: f,
                other: o,
            },
        },
        d => d,
    };
    Message::PartsOfOtherInputs {
        first,
        other,
        difference: Box::new(difference),
        relative,
    }
}

/// A step series' problems, each said once with the steps it concerns
/// ([`Message::AtSteps`]), in the order they first occur: `(step,
/// problem)` pairs in step order. A problem that names each step's own
/// logs (a level or filter mismatch) is one problem of every step it occurs at, said
/// with `step_*` in its paths (trial 64: a level mismatch said once a
/// step).
pub fn at_steps(problems: Vec<(u64, Message)>) -> Vec<Message> {
    // (steps, the problem as its first step says it, as any step says it)
    let mut said: Vec<(Vec<u64>, Message, Option<Message>)> = Vec::new();
    for (step, m) in problems {
        let general = any_step(step, &m);
        let same = |(_, x, g): &&mut (Vec<u64>, Message, Option<Message>)| match (g, &general) {
            (Some(g), Some(general)) => g == general,
            _ => *x == m,
        };
        match said.iter_mut().find(same) {
            Some((steps, _, _)) => {
                if !steps.contains(&step) {
                    steps.push(step);
                }
            }
            None => said.push((vec![step], m, general)),
        }
    }
    said.into_iter()
        .map(|(mut steps, m, general)| {
            steps.sort_unstable();
            let m = match general {
                Some(g) if steps.len() > 1 => g,
                _ => m,
            };
            Message::AtSteps {
                steps,
                message: Box::new(m),
            }
        })
        .collect()
}

/// `m`, an input error of step `step` that names that step's logs (logs
/// of two capture levels or filters), with the step's folder in each path
/// as `step_*`; `None` for any other problem.
fn any_step(step: u64, m: &Message) -> Option<Message> {
    let step_dir = format!("{}{step}", files::STEP_DIR_PREFIX);
    let any = format!("{}*", files::STEP_DIR_PREFIX);
    let path = |p: &str| -> String {
        Path::new(p)
            .components()
            .map(|c| match c.as_os_str().to_str() {
                Some(name) if name == step_dir => any.as_str().into(),
                _ => c.as_os_str().to_owned(),
            })
            .collect::<std::path::PathBuf>()
            .display()
            .to_string()
    };
    match m {
        Message::LevelMismatch { run1, run2 } => Some(Message::LevelMismatch {
            run1: (path(&run1.0), run1.1),
            run2: (path(&run2.0), run2.1),
        }),
        Message::FilterMismatch { run1, run2 } => Some(Message::FilterMismatch {
            run1: (path(&run1.0), run1.1.clone()),
            run2: (path(&run2.0), run2.1.clone()),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_of_several_steps_is_said_once_with_them() {
        let missing = Message::PartsMissing {
            missing: vec![1],
            count: 2,
            given: vec![(shard::Shard { index: 0, count: 2 }, "p0".into())],
        };
        let files = |step: u64| Message::PartFilesMissing {
            part: PartName {
                shard: shard::Shard { index: 0, count: 2 },
                dir: "p0".into(),
            },
            files: vec![format!("x{step}")],
        };
        let said = at_steps(vec![
            (1, missing.clone()),
            (2, missing.clone()),
            (2, files(2)),
            (3, files(3)),
            (4, missing.clone()),
        ]);
        let words: Vec<String> = said.iter().map(|m| m.to_string()).collect();
        assert_eq!(
            words,
            [
                format!("steps 1-2, 4: {missing}"),
                format!("step 2: {}", files(2)),
                format!("step 3: {}", files(3)),
            ]
        );
    }

    #[test]
    fn logs_of_two_levels_at_several_steps_are_one_problem_with_its_steps() {
        let level = |step: u64, rank: u64| Message::LevelMismatch {
            run1: (
                format!("a/step_{step}/rank_{rank}_activations.log"),
                "modules",
            ),
            run2: (format!("b/step_{step}/rank_{rank}_activations.log"), "ops"),
        };
        let filter = Message::FilterMismatch {
            run1: (
                "a/step_2/rank_0_activations.log".into(),
                "min_numel=1".into(),
            ),
            run2: (
                "b/step_2/rank_0_activations.log".into(),
                "min_numel=2".into(),
            ),
        };
        let said = at_steps(vec![
            (1, level(1, 0)),
            (1, level(1, 1)),
            (2, level(2, 0)),
            (2, filter.clone()),
            (2, level(2, 1)),
            (3, level(3, 0)),
            (5, level(5, 1)),
        ]);
        let words: Vec<String> = said.iter().map(|m| m.to_string()).collect();
        let any = |rank: u64| {
            format!("a/step_*/rank_{rank}_activations.log is a level=modules capture and b/step_*/rank_{rank}_activations.log a level=ops one: capture both runs at one level")
        };
        assert_eq!(
            words,
            [
                format!("steps 1-3: {}", any(0)),
                format!("steps 1-2, 5: {}", any(1)),
                // One step: said with its own paths.
                format!("step 2: {filter}"),
            ]
        );
    }
}

//! The warnings and input errors of a compare as typed values: what
//! happened and where (the file, its line and column), built here from
//! the parsed logs, the match and the run-level facts. The pipeline
//! collects them per rank ([`super::pipeline`]'s `compare_rank`) and per
//! run (`compare_runs`, [`super::pipeline::assemble`]); they become text
//! (`Display`, the words below) where a rank's results leave the
//! pipeline: into [`super::shard::RankResult`] (a part's `part.json`) and
//! [`super::outputs::RunMeta`], which the terminal, `summary.json`, JUnit
//! and the index write as they are.
//!
//! The words are the program's interface (tests and users read them): a
//! new message is a variant here with its words in [`Message`]'s `Display`.

use std::fmt;

use crate::matcher::{self, MatchTable};
use crate::parser::{self, duplicate_keys, Field, OpTable};

use super::shard::{RankResult, RunLevel};

/// Which run a message is about: `run1` or `run2`.
pub type Side = &'static str;

/// A warning or an input error.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// Words another stage made: a log or run that could not be read (the
    /// parser's, the discovery's), a report that could not be written.
    Text(String),
    /// A file that could not be written or read, and why (`path: error`).
    File {
        /// The file.
        path: String,
        /// The system's or writer's words.
        error: String,
    },
    /// A log of 0 bytes (an input error).
    EmptyLog {
        /// The log.
        path: String,
        /// Its run.
        side: Side,
    },
    /// A log with no op block (an input error).
    NoOps {
        /// The log.
        path: String,
        /// Its run.
        side: Side,
        /// It has a header (an op count), so is a log without ops rather
        /// than maybe no activation log at all.
        header_only: bool,
    },
    /// A log without any field that can be compared (an input error).
    NoComparableFields {
        /// The log.
        path: String,
        /// Its first block's line.
        line: u64,
        /// Its run.
        side: Side,
    },
    /// A key that occurs more than once, without `--allow-duplicates` (an
    /// input error).
    DuplicateKey {
        /// The log.
        path: String,
        /// Its run.
        side: Side,
        /// The key.
        key: String,
        /// Its 1-based lines.
        lines: Vec<u64>,
    },
    /// Logs of two capture levels (an input error): their blocks are
    /// different things, so no row would pair.
    LevelMismatch {
        /// Run 1's log and its level.
        run1: (String, &'static str),
        /// Run 2's log and its level.
        run2: (String, &'static str),
    },
    /// Both logs of a rank without ops (an input error).
    NothingCompared {
        /// Run 1's log.
        path1: String,
        /// Run 2's log.
        path2: String,
    },
    /// With `--rules-exhaustive`, the first row no rule judged (an input
    /// error).
    Unjudged {
        /// Run 1's rank.
        rank: u32,
        /// The row's key.
        key: String,
    },
    /// One kind of a log's parse warnings, at its first occurrence.
    LogWarning {
        /// The log, with the first occurrence's line and column when kept.
        path: String,
        /// `(line, column)` of the first occurrence, when kept.
        at: Option<(u64, u64)>,
        /// Its run.
        side: Side,
        /// What was counted.
        what: LogWarning,
    },
    /// The kinds of a log's parse warnings past [`WARNING_LINES`], counted.
    MoreLogWarnings {
        /// The log.
        path: String,
        /// Its run.
        side: Side,
        /// Warnings of those kinds.
        count: u64,
        /// Kinds (and labels) left out.
        kinds: usize,
    },
    /// Fields only one log of a rank has: not compared.
    OneSidedFields {
        /// Run 1's rank.
        rank: u32,
        /// Run 1's fields that run 2's log lacks.
        run1: Vec<Field>,
        /// Run 2's fields that run 1's log lacks.
        run2: Vec<Field>,
    },
    /// One log full precision, the other printed with 7 digits: compared
    /// to print precision.
    MixedPrecision {
        /// Run 1's rank.
        rank: u32,
        /// The run whose log is full precision.
        full: Side,
        /// The rtol the default tolerances are raised to.
        rtol: f64,
    },
    /// A negative `--layer-offset` that would number layers below 0.
    NegativeLayers {
        /// Run 1's rank.
        rank: u32,
        /// The run (1 or 2).
        side: usize,
        /// The offset.
        offset: i64,
        /// The lowest and highest layer concerned.
        layers: (u32, u32),
        /// Ops of those layers, which keep their keys.
        ops: usize,
    },
    /// An override pair that paired nothing.
    UnusedOverride {
        /// Run 1's rank.
        rank: u32,
        /// The override's run-1 key.
        key1: String,
        /// The override's run-2 key.
        key2: String,
    },
    /// A `--rank-map` pair that is no pair of these runs.
    UnusedRankMap {
        /// Run 1's rank.
        rank1: u32,
        /// Run 2's rank.
        rank2: u32,
    },
    /// A `--layer-offset` for a rank no pair has.
    UnusedLayerOffset {
        /// The run (1 or 2).
        side: u8,
        /// The rank.
        rank: u32,
        /// The offset.
        offset: i64,
    },
    /// An `--ignore-op` no log has.
    UnusedIgnoreOp {
        /// The op name.
        op: String,
    },
    /// A rule that judged no row (an input error with `--strict`).
    UnusedRule {
        /// Where the rule was given.
        origin: String,
        /// Its key pattern as given.
        key_src: String,
        /// `--strict`: an error.
        strict: bool,
    },
    /// A config's `[dtype.X]` section that judged no row (an input error
    /// with `--strict`).
    UnusedDtype {
        /// The section.
        origin: String,
        /// `--strict`: an error.
        strict: bool,
    },
}

/// What one line of a log's parse warnings counts ([`Message::LogWarning`]).
#[derive(Clone, Debug, PartialEq)]
pub enum LogWarning {
    /// Lines of an unknown field label, ignored.
    UnknownField {
        /// The label.
        label: String,
        /// How many.
        count: u64,
    },
    /// The parser's message, `count` times (1: said once).
    Said {
        /// The first occurrence's message.
        message: String,
        /// How many.
        count: u64,
    },
    /// Warnings past those kept with their positions.
    Uncounted {
        /// Their label.
        label: String,
        /// How many.
        count: u64,
    },
}

impl fmt::Display for LogWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogWarning::UnknownField { label, count } => {
                write!(f, "{count} unknown field line(s) `{label}` ignored")
            }
            LogWarning::Said { message, count } if *count > 1 => {
                write!(f, "{message} ({count} times)")
            }
            LogWarning::Said { message, .. } => f.write_str(message),
            LogWarning::Uncounted { label, count } => {
                write!(f, "{count} more warning(s) of kind `{label}`")
            }
        }
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::Text(s) => f.write_str(s),
            Message::File { path, error } => write!(f, "{path}: {error}"),
            Message::EmptyLog { path, side } => write!(f, "{path}: {side} is empty (0 bytes)"),
            Message::NoOps {
                path,
                side,
                header_only: true,
            } => write!(f, "{path}:1:1: {side} has no ops (header only)"),
            Message::NoOps { path, side, .. } => write!(
                f,
                "{path}:1:1: {side}: no op blocks parsed; is this an activation log?"
            ),
            Message::NoComparableFields { path, line, side } => write!(
                f,
                "{path}:{line}:1: {side}: no comparable fields (no Shape, stats or hashes in any block)"
            ),
            Message::DuplicateKey {
                path,
                side,
                key,
                lines,
            } => {
                let l: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
                write!(
                    f,
                    "{path}:{}:1: {side}: duplicate key {key} at lines {} (use --allow-duplicates to keep both and pair by occurrence)",
                    lines[0],
                    l.join(" and ")
                )
            }
            Message::LevelMismatch { run1, run2 } => write!(
                f,
                "{} is a level={} capture and {} a level={} one: capture both runs at one level",
                run1.0, run1.1, run2.0, run2.1
            ),
            Message::NothingCompared { path1, path2 } => write!(
                f,
                "nothing compared: run1 has no ops and run2 has no ops ({path1}, {path2})"
            ),
            Message::Unjudged { rank, key } => {
                write!(f, "rank {rank}: no rule matches {key} (--rules-exhaustive)")
            }
            Message::LogWarning {
                path,
                at,
                side,
                what,
            } => match at {
                Some((line, column)) => write!(f, "{path}:{line}:{column}: {side}: {what}"),
                None => write!(f, "{path}: {side}: {what}"),
            },
            Message::MoreLogWarnings {
                path,
                side,
                count,
                kinds,
            } => write!(
                f,
                "{path}: {side}: {count} more warning(s) of {kinds} other kind(s) or label(s) (is this an activation log?)"
            ),
            Message::OneSidedFields { rank, run1, run2 } => {
                let names = |v: &[Field]| {
                    let s: Vec<&str> = v.iter().map(|f| f.label()).collect();
                    if s.is_empty() {
                        "none".to_string()
                    } else {
                        s.join(", ")
                    }
                };
                write!(
                    f,
                    "rank {rank}: fields not on both sides are not compared: run1-only: {}; run2-only: {}",
                    names(run1),
                    names(run2)
                )
            }
            Message::MixedPrecision { rank, full, rtol } => write!(
                f,
                "rank {rank}: {full} is a full-precision log and the other is printed with 7 digits: values are compared to print precision (the default tolerances' rtol raised to {rtol:e}); capture both runs at one precision for a bitwise check"
            ),
            Message::NegativeLayers {
                rank,
                side,
                offset,
                layers: (lo, hi),
                ops,
            } => {
                let layers = if lo == hi {
                    format!("layer {lo}")
                } else {
                    format!("layers {lo}–{hi}")
                };
                write!(
                    f,
                    "rank {rank}: --layer-offset run{side}={offset} would number run{side}'s {layers} below 0; {their} {ops} op{s} keep their keys as they are",
                    their = if *ops == 1 { "its" } else { "their" },
                    s = if *ops == 1 { "" } else { "s" },
                )
            }
            Message::UnusedOverride { rank, key1, key2 } => write!(
                f,
                "rank {rank}: unused override `{key1}, {key2}` (no run1 row `{key1}` paired with a run2 row `{key2}`)"
            ),
            Message::UnusedRankMap { rank1: a, rank2: b } => write!(
                f,
                "--rank-map {a}:{b} compared nothing (run1 rank {a} with run2 rank {b} is not a pair of these runs)"
            ),
            Message::UnusedLayerOffset { side, rank, offset } => write!(
                f,
                "--layer-offset run{side}:{rank}={offset} applies to no compared rank (run{side} has no rank {rank} in a pair)"
            ),
            Message::UnusedIgnoreOp { op } => {
                write!(f, "--ignore-op {op}: no op of that name in any log")
            }
            Message::UnusedRule {
                origin,
                key_src,
                strict,
            } => {
                write!(f, "rule {origin} `{key_src}` matched no row")?;
                strict_suffix(f, *strict)
            }
            Message::UnusedDtype { origin, strict } => {
                write!(f, "{origin} judged no row (no row has that dtype in its Shape line, or a rule judged each that does)")?;
                strict_suffix(f, *strict)
            }
        }
    }
}

/// ` (--strict)` after a message that `--strict` made an error.
fn strict_suffix(f: &mut fmt::Formatter<'_>, strict: bool) -> fmt::Result {
    if strict {
        f.write_str(" (--strict)")
    } else {
        Ok(())
    }
}

impl From<String> for Message {
    fn from(s: String) -> Message {
        Message::Text(s)
    }
}

/// Messages as the text written ([`RankResult`], [`super::outputs::RunMeta`]).
pub fn texts(v: impl IntoIterator<Item = Message>) -> Vec<String> {
    v.into_iter().map(|m| m.to_string()).collect()
}

/// Most warning lines printed per log; the rest are counted in one line.
pub const WARNING_LINES: usize = 20;

/// The warnings of one log, one per kind of warning (and per unknown field
/// label), each at its first occurrence's line and column; at most
/// [`WARNING_LINES`], then a count of the rest.
pub fn log_warnings(t: &OpTable, side: Side) -> Vec<Message> {
    use parser::WarningKind as K;
    let mut out = Vec::new();
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
/// per-op log).
pub fn level_mismatch(t1: &OpTable, t2: &OpTable) -> Option<Message> {
    let (l1, l2) = (t1.header().level, t2.header().level);
    (l1 != l2).then(|| Message::LevelMismatch {
        run1: (t1.path().display().to_string(), l1.name()),
        run2: (t2.path().display().to_string(), l2.name()),
    })
}

/// The warning for fields that only one log of a rank has (they are not
/// compared), if there are any.
pub fn one_sided_fields(rank: u32, t1: &OpTable, t2: &OpTable) -> Option<Message> {
    let run1 = t1.schema().minus(t2.schema());
    let run2 = t2.schema().minus(t1.schema());
    (!run1.is_empty() || !run2.is_empty()).then(|| Message::OneSidedFields {
        rank,
        run1: run1.into_iter().collect(),
        run2: run2.into_iter().collect(),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_the_ones_written() {
        let m = Message::NegativeLayers {
            rank: 0,
            side: 2,
            offset: -4,
            layers: (0, 3),
            ops: 1,
        };
        assert_eq!(
            m.to_string(),
            "rank 0: --layer-offset run2=-4 would number run2's layers 0–3 below 0; its 1 op keep their keys as they are"
        );
        let m = Message::UnusedRule {
            origin: "--rules:1".into(),
            key_src: "x".into(),
            strict: true,
        };
        assert_eq!(
            m.to_string(),
            "rule --rules:1 `x` matched no row (--strict)"
        );
        let w = Message::LogWarning {
            path: "a.log".into(),
            at: Some((3, 7)),
            side: "run1",
            what: LogWarning::Said {
                message: "bad".into(),
                count: 2,
            },
        };
        assert_eq!(w.to_string(), "a.log:3:7: run1: bad (2 times)");
        assert_eq!(
            Message::OneSidedFields {
                rank: 1,
                run1: vec![Field::Shape],
                run2: vec![],
            }
            .to_string(),
            "rank 1: fields not on both sides are not compared: run1-only: Shape; run2-only: none"
        );
    }
}

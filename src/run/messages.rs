//! Building the warnings and input errors of a compare
//! ([`crate::report::messages::Message`], where their words are) from the
//! parsed logs, the match and the run-level facts. The pipeline collects
//! them per rank ([`super::pipeline`]'s `compare_rank`) and per run
//! (`compare_runs`, [`super::pipeline::assemble`]); they stay values in
//! [`super::shard::RankResult`] and [`super::outputs::RunMeta`] and become
//! text where they are written.

use crate::matcher::{self, MatchTable};
use crate::parser::{self, duplicate_keys, Field, OpTable};

pub use crate::report::messages::{join, LogWarning, Message, Side};

use super::shard::{RankResult, RunLevel};

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

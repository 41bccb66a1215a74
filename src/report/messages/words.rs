//! The words of each [`Message`], by kind: the logs' problems
//! ([`Message::fmt_input`]), the options' ([`Message::fmt_options`]), a
//! step series' and a merge's.

use std::fmt;

use super::{fmt_steps, named, Message};
use crate::parser::Field;

/// Said after a merge problem that may be only a version-1 part's paths
/// read from the wrong folder.
const OLDER_PART: &str = " (its part.json is from an older actdiff, which recorded the paths relative to the folder its compare ran in: merge from that folder, or compare the parts again with this actdiff)";

impl Message {
    /// The words of a log's or a run's problems ([`Message::File`] ...).
    pub(super) fn fmt_input(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::File { path, error } => write!(f, "{path}: {error}"),
            Message::EmptyLog { path, side } => write!(f, "{path}: {side} is empty (0 bytes)"),
            Message::RecomputedOps {
                rank,
                side,
                count,
                example,
                communication,
            } => {
                let (what, why, after) = if *communication {
                    (
                        "communication",
                        "a parallel layout gathering the same parameters again (FSDP2's reshard_after_forward)",
                        "",
                    )
                } else {
                    (
                        "ops",
                        "activation checkpointing's recomputation",
                        " (the backward ops that read the recomputed values are compared)",
                    )
                };
                write!(
                    f,
                    "rank {rank}: {count} row{} only {side} has repeat{} its forward {what} in the backward phase (`{}` repeats `{}`): {why} in {side} only; shown, not gating{after}",
                    if *count == 1 { "" } else { "s" },
                    if *count == 1 { "s" } else { "" },
                    example.0,
                    example.1
                )
            }
            Message::StepHeaderMismatch {
                path,
                folder,
                header,
            } => write!(
                f,
                "{path}: its header says Step: {header}, and it is in the folder of step {folder}: compared as step {folder} (was the folder renamed or the log copied?)"
            ),
            Message::StepsDiffer { run1, run2 } => write!(
                f,
                "{} is step {} and {} is step {} (their Step: lines): different steps of training are compared, whose parameters differ by the updates between them; compare the same step of both runs",
                run1.0, run1.1, run2.0, run2.1
            ),
            Message::UnfinishedCapture {
                path,
                beside_log: false,
            } => write!(
                f,
                "{path}: a capture that did not finish (its process stopped before it wrote the rank's log): that rank has no log here"
            ),
            Message::UnfinishedCapture {
                path,
                beside_log: true,
            } => write!(
                f,
                "{path}: a capture that did not finish (its process stopped before it wrote the rank's log): the rank's log beside it is an earlier capture's, not this one's"
            ),
            Message::SameRun { path } => write!(
                f,
                "run1 and run2 are the same: {path}; every row matches itself, so this compare shows nothing about two runs"
            ),
            Message::NoOps {
                path,
                side,
                binary_at: Some(at),
                ..
            } => write!(
                f,
                "{path}: {side}: no op blocks parsed: binary data (a NUL byte at byte {at}), not an activation log"
            ),
            Message::NoOps {
                path,
                side,
                header_only: true,
                ..
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
            Message::FilterMismatch { run1, run2 } => write!(
                f,
                "{} was captured with `{}` and {} with `{}`: their ops are numbered differently, so no op would pair with its own; capture both runs with the same min_numel, op_filter and excluded_ops",
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
            Message::ParseWarning {
                path,
                line,
                column,
                message,
            } => write!(f, "{path}:{line}:{column}: {message}"),
            Message::CountMismatch { declared, parsed } => {
                write!(f, "declares {declared} ops, parsed {parsed}")
            }
            Message::TruncatedLog { why } => {
                f.write_str(why.as_deref().unwrap_or("last block possibly truncated"))
            }
            Message::ShardLogIncomplete {
                path,
                side,
                rank,
                why,
            } => write!(
                f,
                "{path}: {side} rank {rank}'s log is incomplete ({}): its shards cannot be combined with its group's, so the runs were not compared, even with --allow-incomplete (re-capture that run)",
                super::join(why, "; ")
            ),
            Message::OneSidedLog {
                path,
                side,
                rank,
                why,
            } => {
                // The unusable log's reasons name it; the incomplete one's
                // do not.
                if self.is_incomplete_input() {
                    write!(f, "rank {rank} is only in {side}, and its log {path} is incomplete: ")?;
                } else {
                    write!(f, "rank {rank} is only in {side}, and its log cannot be used: ")?;
                }
                f.write_str(&super::join(why, "; "))
            }
            Message::UnreadableValues { count, first } => {
                let what = if *count == 1 { "value" } else { "values" };
                match first {
                    Some(w) => write!(
                        f,
                        "{count} unreadable {what}; the first at {}:{}:{}: {}",
                        w.path, w.line, w.column, w.message
                    ),
                    None => write!(f, "{count} unreadable {what}, not compared"),
                }
            }
            Message::GzipCut { why } => f.write_str(why.as_deref().unwrap_or("gzip data cut short")),
            Message::MoreLogWarnings {
                path,
                side,
                count,
                kinds,
            } => write!(
                f,
                "{path}: {side}: {count} more warning(s) of {kinds} other kind(s) or label(s) (is this an activation log?)"
            ),
            Message::WrapperPrefix { rank, side } => write!(
                f,
                "rank {rank}: every module FQN of the {side} log starts with `module.` and none of the other's does: that run's profiler was given a DistributedDataParallel (or DataParallel) wrapper, so its keys pair with the other run's by value at best; capture both runs with the model itself (Profiler(ddp_model.module, ...))"
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
            _ => unreachable!("fmt_input is called for its own variants"),
        }
    }

    /// The words of the options' problems and unused options
    /// ([`Message::UnusedRule`] ...).
    pub(super) fn fmt_options(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::BitwiseMixedPrecision { rank, full } => write!(
                f,
                "rank {rank}: --bitwise needs both logs at full precision, and only {full} is (the other is printed with 7 digits, so no value can be shown bitwise equal): capture both runs with precision=\"full\", or compare without --bitwise (to print precision)"
            ),
            Message::BitwisePrinted => f.write_str(
                "--bitwise on logs printed with 7 digits (the reference's %.6e): the printed values are compared, so a difference below the 7th digit prints alike and is not seen; capture both runs with precision=\"full\" for a bitwise check"
            ),
            Message::LayoutsAtReferenceTolerance { runs, digests } => write!(
                f,
                "{} combined from shards into whole tensors and compared at the reference's tolerance (relative 1e-8): across parallel layouts a row-parallel sum adds in another order, and shard statistics printed with 7 digits combine to values that differ in the last digit, so rows can differ where the tensors agree; compare across layouts with --layouts (rtol 1e-4, atol 1e-6), and {}",
                runs.join(" and "),
                // Both runs already at full precision (trial 27 F5: the
                // advice to capture so was given to such runs).
                if *digests {
                    "--bitwise shows which rows are bitwise equal (both runs have digests)"
                } else {
                    "capture both runs with precision=\"full\" to see which rows are bitwise equal (--bitwise)"
                }
            ),
            Message::WorldSizesDiffer { runs: [(n1, w1), (n2, w2)] } => write!(
                f,
                "{n1} and {n2} ran with different world sizes ({w1} and {w2} ranks): with data parallelism each gradient is averaged over the world size (DDP's backward mul or div by it), so gradients, and everything after them, differ by design; compare runs of one world size"
            ),
            Message::ModulesAcrossLayouts { runs: [(n1, r1), (n2, r2)] } => write!(
                f,
                "{n1} ({r1} rank{}) and {n2} ({r2} rank{}) are level=modules captures whose records differ in Shape: if their parallel layouts differ (TP=2 against TP=1), module outputs and parameters are shards in one and whole in the other, which a module-level log cannot combine; compare such runs with level=\"ops\" captures (their shards are combined), and level=\"modules\" captures within one layout",
                if *r1 == 1 { "" } else { "s" },
                if *r2 == 1 { "" } else { "s" }
            ),
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
            _ => unreachable!("fmt_options is called for its own variants"),
        }
    }
}

impl Message {
    /// The words of a step series' messages ([`Message::AtStep`] ...).
    pub(super) fn fmt_step(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::AtStep { step, message } => write!(f, "step {step}: {message}"),
            Message::AtSteps { steps, message } if steps.len() == 1 => {
                write!(f, "step {}: {message}", steps[0])
            }
            Message::AtSteps { steps, message } => {
                write!(f, "steps {}: {message}", fmt_steps(steps))
            }
            Message::StepWithoutPages { step } => write!(
                f,
                "{STEP_WITHOUT_PAGES} (its ranks' counts and verdicts are here and in summary.json): only the first diverging step of a step series gets full result pages; `actdiff compare RUN1 RUN2 --steps {step}` (or `--steps all`) gives this step's pages"
            ),
            Message::UnfinishedStep { path } => write!(
                f,
                "{path}: no rank_N_activations.log in it (a step the capture schedule named but the job never reached, or a capture that did not finish): not a step of the run"
            ),
            Message::LogsBesideSteps { path, count } => write!(
                f,
                "{path}: {count} rank log{} directly in the folder {} ignored: it holds step_S folders, compared as a step series; move {} into a folder of {} own to compare {}",
                if *count == 1 { "" } else { "s" },
                if *count == 1 { "is" } else { "are" },
                if *count == 1 { "it" } else { "them" },
                if *count == 1 { "its" } else { "their" },
                if *count == 1 { "it" } else { "them" },
            ),
            Message::StepsInNeither { steps } => {
                let one = matches!(steps.as_slice(), [(a, b)] if a == b);
                let word = if one { "step" } else { "steps" };
                let ranges: Vec<String> = steps
                    .iter()
                    .map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
                    .collect();
                write!(f, "--steps: {word} {} in neither run", ranges.join(", "))
            }
            Message::StepsNotCaptured { steps, present } => {
                let one = matches!(steps.as_slice(), [(a, b)] if a == b);
                let ranges: Vec<String> = steps
                    .iter()
                    .map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
                    .collect();
                write!(
                    f,
                    "--steps names {} {}, which neither run has (their steps: {}): not compared, so nothing says {}",
                    if one { "step" } else { "steps" },
                    ranges.join(", "),
                    super::fmt_steps(present),
                    if one { "it agrees" } else { "they agree" }
                )
            }
            Message::NoStep { selected: None } => {
                f.write_str("nothing compared: no step is in both runs")
            }
            Message::NoStep {
                selected: Some((s1, s2)),
            } => write!(
                f,
                "nothing compared: --steps selects no step both runs have (run1 steps {}, run2 steps {})",
                fmt_steps(s1),
                fmt_steps(s2)
            ),
            Message::NotASeries { run1, run2 } => write!(
                f,
                "--steps: {run1} and {run2} hold no step_S folders (a step series); drop --steps to compare one step"
            ),
            // Not a step series' message: said by `Display`.
            _ => Ok(()),
        }
    }
}

impl Message {
    /// The words of a merge's problems with its parts ([`Message::NoParts`] ...).
    pub(super) fn fmt_merge(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::NoParts => {
                f.write_str("no parts given: actdiff merge PART_DIR... -o REPORT_DIR")
            }
            Message::PartIsReport { dir } => write!(
                f,
                "{dir}: the report folder (-o) is one of the parts; merge into another folder"
            ),
            Message::PartTwice { dir, first } => {
                write!(f, "{dir}: given twice (as {first} and {dir})")
            }
            Message::PartUnfinished { part } => write!(
                f,
                "{part}: its compare did not finish (interrupted, or still running)"
            ),
            Message::SeriesPartUnfinished { dir, started: true } => write!(
                f,
                "{dir}: a part of a step series whose compare did not finish (interrupted, or still running): it holds step folders but no series-part.json"
            ),
            Message::SeriesPartUnfinished { dir, started: false } => write!(
                f,
                "{dir}: an empty folder: a part whose compare has not run yet (or could not write here)"
            ),
            Message::PartFailed { part, message } => {
                write!(f, "{part}: its compare failed: {message}")
            }
            Message::PartVersion { part, tool, this } => write!(
                f,
                "{part}: written by {tool}, this is {this}; compare and merge with one version"
            ),
            Message::PartsOfOtherSplits { first, other } => write!(
                f,
                "{first} and {other}: parts of different splits ({} and {} parts)",
                first.shard.count, other.shard.count
            ),
            Message::PartsOfOtherInputs {
                first,
                other,
                difference,
                relative,
            } => {
                write!(f, "{first} and {other}: different inputs: {difference}")?;
                if *relative {
                    f.write_str(OLDER_PART)?;
                }
                Ok(())
            }
            Message::PartsOfOtherOptions { first, other, keys } => {
                write!(f, "{first} and {other}: different options: ")?;
                if keys.is_empty() {
                    f.write_str("run metadata")
                } else {
                    f.write_str(&keys.join(", "))
                }
            }
            Message::RowsInSomeParts { with, without } => write!(
                f,
                "parts with and without --rows: {} wrote rows, {} did not; run every part with --rows or none",
                named(with),
                named(without)
            ),
            Message::RowsSharedByParts { parts, file } => write!(
                f,
                "{} all wrote their rows to {file}: each part overwrote the one before, so it holds one part's ranks only; give each part its own file (--rows PART_DIR/rows.parquet)",
                named(parts)
            ),
            Message::LogsChanged {
                part,
                logs,
                relative,
            } => {
                write!(
                    f,
                    "the logs changed since {part} compared them: {}",
                    named(logs)
                )?;
                if *relative {
                    f.write_str(OLDER_PART)?;
                }
                Ok(())
            }
            Message::PartGivenTwice {
                shard,
                first,
                second,
            } => write!(f, "part {shard} given twice: {first} and {second}"),
            Message::PartsMissing {
                missing,
                count,
                given,
            } => {
                let missing: Vec<String> =
                    missing.iter().map(|k| format!("{k}/{count}")).collect();
                let given: Vec<String> = given
                    .iter()
                    .map(|(shard, dir)| format!("{shard} = {dir}"))
                    .collect();
                write!(
                    f,
                    "part{} {} missing: a merge needs all {count} parts (given: {})",
                    if missing.len() == 1 { "" } else { "s" },
                    missing.join(", "),
                    given.join(", ")
                )
            }
            Message::PartUnits { part, held, split } => write!(
                f,
                "{part}: holds ranks [{}], but the split of these inputs gives it [{}]",
                named(held),
                named(split)
            ),
            Message::StepFoldersAsParts { dirs, parts } => write!(
                f,
                "{}: step folders of the parts of a sharded step series; merge the parts themselves ({})",
                named(dirs),
                named(parts)
            ),
            Message::PartFilesMissing { part, files } => write!(
                f,
                "{part}: missing {} of its ranks' report files: {}",
                files.len(),
                named(files)
            ),
            Message::PartOfOneStep { dir } => write!(
                f,
                "{dir}: a part of a one-step compare (it has part.json, no series-part.json), merged with parts of a step series: merge the parts of one `actdiff compare --shard K/N`"
            ),
            Message::NotASeriesPart { file, error } => write!(
                f,
                "{file}: not a part of a sharded step series ({error}); merge the parts of one `actdiff compare --shard K/N` of two step series"
            ),
            Message::PartsOfOtherSeries { .. } => self.fmt_other_series(f),
            // Not a merge's problem: said by `Display`.
            _ => Ok(()),
        }
    }

    /// The words of [`Message::PartsOfOtherSeries`]: only what differs,
    /// each as the two parts record it.
    fn fmt_other_series(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Message::PartsOfOtherSeries {
            first,
            other,
            steps,
            only1,
            only2,
            counts,
        } = self
        else {
            return Ok(());
        };
        // Only what differs, each as the two parts record it.
        let mut differ: Vec<String> = Vec::new();
        for (what, pair) in [
            ("steps compared", steps),
            ("steps only in run 1", only1),
            ("steps only in run 2", only2),
        ] {
            let (a, b) = &**pair;
            if a != b {
                differ.push(format!("{what} {} against {}", fmt_steps(a), fmt_steps(b)));
            }
        }
        if counts.0 != counts.1 {
            differ.push(format!("{} parts against {}", counts.0, counts.1));
        }
        write!(
            f,
            "{first} and {other}: parts of different step series or splits: {}",
            differ.join("; ")
        )
    }
}

/// How [`Message::StepWithoutPages`] begins.
const STEP_WITHOUT_PAGES: &str = "this step has no result pages";

/// ` (--strict)` after a message that `--strict` made an error.
fn strict_suffix(f: &mut fmt::Formatter<'_>, strict: bool) -> fmt::Result {
    if strict {
        f.write_str(" (--strict)")
    } else {
        Ok(())
    }
}

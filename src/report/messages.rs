//! The warnings and input errors of a compare as typed values: what
//! happened and where (the file, its line and column). The compare builds
//! them ([`crate::run::messages`], from the parsed logs, the match and the
//! run-level facts) and collects them per rank and per run; a rank's
//! results (`part.json`), the run's metadata and the [`super::Summary`]
//! hold them as values. They become text only where they are written: the
//! terminal and stderr, `summary.json` and `part.json` (serde writes a
//! message as its text), JUnit and the index.
//!
//! The words are the program's interface (tests and users read them): a
//! new message is a variant here with its words in [`Message`]'s `Display`,
//! the one place a message's words are made. A message read back from a
//! written file (`part.json`, `summary.json`) is [`Message::Read`], its
//! text; two messages are equal when their words are.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::parser::Field;

/// Which run a message is about: `run1` or `run2`.
pub type Side = &'static str;

/// A warning or an input error.
#[derive(Clone, Debug)]
pub enum Message {
    /// A message read back from a written file (`part.json`,
    /// `summary.json`): its text.
    Read(String),
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
    /// The kinds of a log's parse warnings past the most printed per log
    /// (`run::messages::WARNING_LINES`), counted.
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
    /// `--bitwise` on a full-precision log and a printed one: no value can
    /// be shown bitwise equal (an input error).
    BitwiseMixedPrecision {
        /// Run 1's rank.
        rank: u32,
        /// The run whose log is full precision.
        full: Side,
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
    /// A message of one step of a step series (`step S: ...`).
    AtStep {
        /// The step.
        step: u64,
        /// The step's message.
        message: Box<Message>,
    },
    /// A step compared without result pages (not the series' first
    /// diverging one); said on the step's own index only
    /// ([`Message::is_step_without_pages`]).
    StepWithoutPages {
        /// The step.
        step: u64,
    },
    /// A step folder without rank logs: not a step of the run.
    UnfinishedStep {
        /// The folder.
        path: String,
    },
    /// `--steps` named steps neither run has.
    StepsInNeither {
        /// Those steps, ascending.
        steps: Vec<u64>,
    },
    /// No step compared (an input error): both runs have none in common,
    /// or (`Some`: each run's steps) `--steps` selects none both have.
    NoStep {
        /// With `--steps`: run 1's steps and run 2's.
        selected: Option<(Vec<u64>, Vec<u64>)>,
    },
    /// `--steps` on two runs that are no step series (an input error).
    NotASeries {
        /// Run 1's folder.
        run1: String,
        /// Run 2's folder.
        run2: String,
    },
    /// `actdiff merge` without parts.
    NoParts,
    /// A merge's report folder given as one of its parts.
    PartIsReport {
        /// The folder.
        dir: String,
    },
    /// A part's folder given twice (under two spellings).
    PartTwice {
        /// The folder as given the second time.
        dir: String,
        /// As given the first time.
        first: String,
    },
    /// A part whose compare did not finish.
    PartUnfinished {
        /// The part (`part 2/4 (parts/p2)`).
        part: String,
    },
    /// A part whose compare failed.
    PartFailed {
        /// The part.
        part: String,
        /// Why, as its `part.json` says.
        message: String,
    },
    /// A part another version of the program wrote.
    PartVersion {
        /// The part.
        part: String,
        /// The version that wrote it (`actdiff 0.1.0`).
        tool: String,
        /// This one.
        this: String,
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
            Message::Read(s) | Message::Text(s) => f.write_str(s),
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
            Message::BitwiseMixedPrecision { rank, full } => write!(
                f,
                "rank {rank}: --bitwise needs both logs at full precision, and only {full} is (the other is printed with 7 digits, so no value can be shown bitwise equal): capture both runs with precision=\"full\", or compare without --bitwise (to print precision)"
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
            Message::AtStep { .. }
            | Message::StepWithoutPages { .. }
            | Message::UnfinishedStep { .. }
            | Message::StepsInNeither { .. }
            | Message::NoStep { .. }
            | Message::NotASeries { .. } => self.fmt_step(f),
            Message::NoParts
            | Message::PartIsReport { .. }
            | Message::PartTwice { .. }
            | Message::PartUnfinished { .. }
            | Message::PartFailed { .. }
            | Message::PartVersion { .. } => self.fmt_merge(f),
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

impl Message {
    /// The words of a step series' messages ([`Message::AtStep`] ...).
    fn fmt_step(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
    Message::AtStep { step, message } => write!(f, "step {step}: {message}"),
            Message::StepWithoutPages { step } => write!(
                f,
                "{STEP_WITHOUT_PAGES} (its ranks' counts and verdicts are here and in summary.json): only the first diverging step of a step series gets full result pages; `actdiff compare RUN1 RUN2 --steps {step}` (or `--steps all`) gives this step's"
            ),
            Message::UnfinishedStep { path } => write!(
                f,
                "{path}: no rank_N_activations.log in it (a step the capture schedule named but the job never reached, or a capture that did not finish): not a step of the run"
            ),
            Message::StepsInNeither { steps } => {
                write!(f, "--steps: step {} in neither run", fmt_steps(steps))
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
    fn fmt_merge(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
            Message::PartFailed { part, message } => {
                write!(f, "{part}: its compare failed: {message}")
            }
            Message::PartVersion { part, tool, this } => write!(
                f,
                "{part}: written by {tool}, this is {this}; compare and merge with one version"
            ),
            // Not a merge's problem: said by `Display`.
            _ => Ok(()),
        }
    }
}

/// How [`Message::StepWithoutPages`] begins.
const STEP_WITHOUT_PAGES: &str = "this step has no result pages";

impl Message {
    /// A [`Message::StepWithoutPages`], also as read back from a step's
    /// written summary.
    pub fn is_step_without_pages(&self) -> bool {
        match self {
            Message::StepWithoutPages { .. } => true,
            Message::Read(s) => s.starts_with(STEP_WITHOUT_PAGES),
            _ => false,
        }
    }
}

/// Ascending steps in words: runs of consecutive steps as ranges
/// (`1-3, 7`); `none` for no step.
pub fn fmt_steps(steps: &[u64]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        let mut j = i;
        while j + 1 < steps.len() && steps[j + 1] == steps[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", steps[i], steps[j])
        } else {
            steps[i].to_string()
        });
        i = j + 1;
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(", ")
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

/// Two messages are equal when their words are (a message read back from a
/// written file equals the one written).
impl Eq for Message {}

/// Two messages are equal when their words are.
impl PartialEq for Message {
    fn eq(&self, other: &Message) -> bool {
        self.to_string() == other.to_string()
    }
}

/// A message is written as its text.
impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A message is read back as its text ([`Message::Read`]).
impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Message, D::Error> {
        String::deserialize(d).map(Message::Read)
    }
}

/// Messages joined with `sep`, as one line of text.
pub fn join(v: &[Message], sep: &str) -> String {
    let t: Vec<String> = v.iter().map(|m| m.to_string()).collect();
    t.join(sep)
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

    #[test]
    fn written_as_its_words_and_read_back_as_them() {
        let m = Message::AtStep {
            step: 3,
            message: Box::new(Message::UnusedIgnoreOp { op: "add".into() }),
        };
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(
            json,
            r#""step 3: --ignore-op add: no op of that name in any log""#
        );
        let back: Message = serde_json::from_str(&json).unwrap();
        assert!(matches!(back, Message::Read(_)));
        assert_eq!(back, m);
        assert!(
            Message::Read(Message::StepWithoutPages { step: 2 }.to_string())
                .is_step_without_pages()
        );
    }
}

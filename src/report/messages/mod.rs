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

use crate::parser::Field;
use crate::run::shard::Shard;

mod parts;
mod words;

use parts::named;
pub use parts::*;

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
        /// The byte offset (from 0) of a NUL byte near its start: binary
        /// data, not text (an activation log never holds one).
        binary_at: Option<u64>,
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
    /// Per-op logs whose `Capture filter:` lines differ (an input error):
    /// `min_numel`, `op_filter` or `excluded_ops` left out other ops, so
    /// the per-module op numbers of their keys differ and rows would pair
    /// with other ops.
    FilterMismatch {
        /// Run 1's log and its filter.
        run1: (String, String),
        /// Run 2's log and its filter.
        run2: (String, String),
    },
    /// Rows only one run has at a rank repeat that run's forward ops in
    /// the backward phase: activation checkpointing's recomputation in one
    /// run only, flagged not gating by [`crate::matcher::recompute`] (a
    /// warning saying why those one-sided rows do not gate).
    RecomputedOps {
        /// Run 1's rank.
        rank: u32,
        /// The run that has them.
        side: Side,
        /// How many rows.
        count: usize,
        /// One of them (its key) and the forward op it repeats (boxed: a
        /// message stays small).
        example: Box<(String, String)>,
        /// They are a parallel layout's communication gathering the same
        /// parameters again (FSDP2's `reshard_after_forward`), not
        /// activation checkpointing's recomputation.
        communication: bool,
    },
    /// A log in a step folder whose `Step:` header names another step (a
    /// warning: the folder decides which step it is compared as).
    StepHeaderMismatch {
        /// The log.
        path: String,
        /// The folder's step (`step_S`).
        folder: u64,
        /// The header's.
        header: u64,
    },
    /// Two logs compared whose `Step:` headers name different steps (run
    /// 1's step 3 against run 2's step 4: usually a slip of the paths).
    StepsDiffer {
        /// Run 1's log and its step.
        run1: (String, u64),
        /// Run 2's log and its step.
        run2: (String, u64),
    },
    /// A rank's capture that did not finish: the agent's temporary file is
    /// there (a warning). Without its log the rank is missing there; with
    /// it (`beside_log`), the log is an earlier capture's.
    UnfinishedCapture {
        /// The temporary file.
        path: String,
        /// The rank's log is there too.
        beside_log: bool,
    },
    /// Run 1 and run 2 are one file or folder (a warning): every row
    /// matches itself, so a pass says nothing.
    SameRun {
        /// The path, as run 1 spells it.
        path: String,
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
    /// One of a log's stored parse warnings, at its line and column (a
    /// side's `warnings` in `summary.json`).
    ParseWarning {
        /// The log.
        path: String,
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
        /// The parser's words.
        message: String,
    },
    /// A log whose header declares another op count than it holds: the
    /// side is incomplete.
    CountMismatch {
        /// The header's op count.
        declared: u64,
        /// Op blocks parsed.
        parsed: usize,
    },
    /// A log whose last block was cut short (not by a cut gzip stream): the
    /// side is incomplete.
    TruncatedLog {
        /// The parser's words when it said why (a missing final newline, a
        /// last block without its empty line).
        why: Option<String>,
    },
    /// A shard log of a run whose shards are combined (`--layouts`) is
    /// incomplete: its group cannot be combined, so nothing is compared
    /// (incomplete input: exit 3, `--allow-incomplete` or not).
    ShardLogIncomplete {
        /// The log.
        path: String,
        /// Its run.
        side: Side,
        /// Its rank.
        rank: u32,
        /// Why it is incomplete ([`Message::CountMismatch`],
        /// [`Message::TruncatedLog`], ...: `report::summary::incomplete_of`).
        why: Vec<Message>,
    },
    /// A rank present in one run only whose log cannot be read, or is
    /// incomplete: an input error (exit 2), or incomplete input (exit 3)
    /// when every reason is one (trial 25: an empty, binary, cut or
    /// dangling log of a one-sided rank was reported as an ordinary
    /// one-sided rank, exit 1, never read).
    OneSidedLog {
        /// The log.
        path: String,
        /// Its run.
        side: Side,
        /// Its rank.
        rank: u32,
        /// Why ([`Message::EmptyLog`], [`Message::NoOps`], a parse error;
        /// [`Message::CountMismatch`], [`Message::TruncatedLog`], ...).
        why: Vec<Message>,
    },
    /// Values that are no number (or no 16-digit digest): not compared,
    /// so the side is incomplete.
    UnreadableValues {
        /// How many.
        count: u64,
        /// The first: its log, line, column and the parser's words, when
        /// kept.
        first: Option<UnreadableValue>,
    },
    /// A gzip log whose compressed data is cut short: the side is
    /// incomplete.
    GzipCut {
        /// The parser's words, when it said them.
        why: Option<String>,
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
    /// Every module FQN of one log of a rank starts with `module.` and
    /// none of the other's does: a DDP (or DataParallel) wrapper given to
    /// that run's profiler, whose keys pair with the other's by value at
    /// best (new-user trial 70 F3).
    WrapperPrefix {
        /// Run 1's rank.
        rank: u32,
        /// The run whose log has the prefix.
        side: Side,
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
    /// `--bitwise` on logs both printed with 7 digits: the printed values
    /// are compared, so a difference below the 7th digit is not seen (a
    /// warning, said once per run).
    BitwisePrinted,
    /// A run's shards were combined into whole tensors (another parallel
    /// layout than the other run's) and the compare, at the reference's
    /// tolerance, found gating rows: whole-tensor values combined from
    /// shards differ at float rounding where the tensors agree (a
    /// row-parallel sum adds in another order; 7-digit shard statistics).
    /// A warning pointing at `--layouts`.
    LayoutsAtReferenceTolerance {
        /// The combined runs' display names.
        runs: Vec<String>,
        /// Both runs' logs have digests (full precision) on every rank:
        /// `--bitwise` tells bitwise-equal rows now, no re-capture needed.
        digests: bool,
    },
    /// Two `level="modules"` runs of different rank counts whose records
    /// differ in Shape: most likely two parallel layouts (TP=2 against
    /// TP=1), whose module outputs and parameters are shards in one run
    /// and whole in the other; a module-level log says no layout, so the
    /// shards are not combined (trial 18 H2).
    ModulesAcrossLayouts {
        /// Each run's display name and rank count.
        runs: [(String, usize); 2],
    },
    /// The two runs' logs declare different world sizes (`World size:`),
    /// and no shards were combined across layouts: with data parallelism
    /// each gradient is averaged over the world size, so the runs differ
    /// by design from the backward on (trial 29: 4 ranks against 2 named
    /// DDP's gradient `mul` an origin, the world sizes nowhere).
    WorldSizesDiffer {
        /// Each run's display name and world size.
        runs: [(String, u32); 2],
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
    /// A step series' folder that also holds rank logs directly (an
    /// earlier single-step capture into the same folder): they are not
    /// compared.
    LogsBesideSteps {
        /// The folder.
        path: String,
        /// The rank logs directly in it.
        count: usize,
    },
    /// `--steps` named steps neither run has.
    StepsInNeither {
        /// Those steps as inclusive ranges, ascending (a range may be
        /// long: `--steps 1-99999999999`).
        steps: Vec<(u64, u64)>,
    },
    /// `--steps` named steps neither run has outside their schedule: a
    /// step given alone, or steps before the runs' first or after their
    /// last (an input error: a gate asked about steps no run reached).
    StepsNotCaptured {
        /// Those steps as inclusive ranges, ascending.
        steps: Vec<(u64, u64)>,
        /// The steps either run has.
        present: Vec<u64>,
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
        part: PartName,
    },
    /// A folder given as a part of a step series that holds no record of
    /// one yet: its compare did not finish (`started`: its step folders
    /// only) or has not started (empty).
    SeriesPartUnfinished {
        /// The folder.
        dir: String,
        /// It holds step folders.
        started: bool,
    },
    /// A part whose compare failed.
    PartFailed {
        /// The part.
        part: PartName,
        /// Why, as its `part.json` says.
        message: String,
    },
    /// A part another version of the program wrote.
    PartVersion {
        /// The part.
        part: PartName,
        /// The version that wrote it (`actdiff 0.1.0`).
        tool: String,
        /// This one.
        this: String,
    },
    /// Two parts of different splits (their part counts differ).
    PartsOfOtherSplits {
        /// The first sound part.
        first: PartName,
        /// The part that differs from it.
        other: PartName,
    },
    /// Two parts that compared other inputs.
    PartsOfOtherInputs {
        /// The first sound part.
        first: PartName,
        /// The part that differs from it.
        other: PartName,
        /// The first difference found (boxed: a message stays small).
        difference: Box<InputsDifference>,
        /// One of them is from an older actdiff (`part.json` version 1,
        /// paths relative to the folder its compare ran in, read from the
        /// merge's): the difference may be only that.
        relative: bool,
    },
    /// Two parts of the same inputs run with other options (or other run
    /// metadata).
    PartsOfOtherOptions {
        /// The first sound part.
        first: PartName,
        /// The part that differs from it.
        other: PartName,
        /// The options that differ, sorted; empty when only the run
        /// metadata does.
        keys: Vec<String>,
    },
    /// Parts with a `--rows` file and parts without one.
    RowsInSomeParts {
        /// The parts that wrote rows.
        with: Vec<PartName>,
        /// The parts that did not.
        without: Vec<PartName>,
    },
    /// Parts that wrote their rows to one file, each overwriting the one
    /// before.
    RowsSharedByParts {
        /// Those parts.
        parts: Vec<PartName>,
        /// The file.
        file: String,
    },
    /// Logs whose size changed (or that are gone) since the parts compared
    /// them.
    LogsChanged {
        /// The part whose records are checked (the first sound one).
        part: PartName,
        /// The logs that changed.
        logs: Vec<ChangedLog>,
        /// The part is from an older actdiff (`part.json` version 1) that
        /// recorded relative paths, and some of them are now missing: they
        /// hold only from the folder its compare ran in.
        relative: bool,
    },
    /// One part of the split given in two folders.
    PartGivenTwice {
        /// The part.
        shard: Shard,
        /// The folder given first.
        first: String,
        /// The other.
        second: String,
    },
    /// Parts of the split not given.
    PartsMissing {
        /// The missing parts' indexes, ascending.
        missing: Vec<u32>,
        /// How many parts the split has.
        count: u32,
        /// The parts given, with their folders.
        given: Vec<(Shard, String)>,
    },
    /// A part that does not hold the ranks the split gives it.
    PartUnits {
        /// The part.
        part: PartName,
        /// The ranks it holds.
        held: Vec<u32>,
        /// The ranks the split gives it.
        split: Vec<u32>,
    },
    /// Step folders (`PART/step_S`) of the parts of a sharded step series
    /// given to a merge as parts: the series' parts are what merges.
    StepFoldersAsParts {
        /// The step folders given.
        dirs: Vec<String>,
        /// The parts they belong to, in order, once each.
        parts: Vec<String>,
    },
    /// A part folder lacking report files its ranks' report needs.
    PartFilesMissing {
        /// The part.
        part: PartName,
        /// The files, relative to its folder.
        files: Vec<String>,
    },
    /// A part of a one-step compare (a `part.json`, no `series-part.json`)
    /// given to a merge with parts of a step series.
    PartOfOneStep {
        /// The part's folder, as given.
        dir: String,
    },
    /// A folder given to a merge of step-series parts without a readable
    /// `series-part.json`.
    NotASeriesPart {
        /// Its `series-part.json`.
        file: String,
        /// Why it does not read.
        error: String,
    },
    /// Two parts of different step series or splits.
    PartsOfOtherSeries {
        /// The first part's folder.
        first: String,
        /// The other part's folder.
        other: String,
        /// The steps each records (boxed, as the next two: a message
        /// stays small).
        steps: Box<(Vec<u64>, Vec<u64>)>,
        /// The steps only run 1 has, as each records them.
        only1: Box<(Vec<u64>, Vec<u64>)>,
        /// The steps only run 2 has, as each records them.
        only2: Box<(Vec<u64>, Vec<u64>)>,
        /// The part count each records.
        counts: (u32, u32),
    },
    /// A message that holds for several steps of a step series, said once
    /// (`steps 1-3, 5: ...`; `step 3: ...` for one).
    AtSteps {
        /// The steps, ascending.
        steps: Vec<u64>,
        /// The message.
        message: Box<Message>,
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

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::Read(s) | Message::Text(s) => f.write_str(s),
            Message::File { .. }
            | Message::EmptyLog { .. }
            | Message::NoOps { .. }
            | Message::NoComparableFields { .. }
            | Message::DuplicateKey { .. }
            | Message::LevelMismatch { .. }
            | Message::FilterMismatch { .. }
            | Message::NothingCompared { .. }
            | Message::SameRun { .. }
            | Message::UnfinishedCapture { .. }
            | Message::StepHeaderMismatch { .. }
            | Message::StepsDiffer { .. }
            | Message::RecomputedOps { .. }
            | Message::Unjudged { .. }
            | Message::LogWarning { .. }
            | Message::ParseWarning { .. }
            | Message::CountMismatch { .. }
            | Message::TruncatedLog { .. }
            | Message::ShardLogIncomplete { .. }
            | Message::OneSidedLog { .. }
            | Message::UnreadableValues { .. }
            | Message::GzipCut { .. }
            | Message::MoreLogWarnings { .. }
            | Message::OneSidedFields { .. }
            | Message::WrapperPrefix { .. } => self.fmt_input(f),
            Message::BitwiseMixedPrecision { .. }
            | Message::BitwisePrinted
            | Message::LayoutsAtReferenceTolerance { .. }
            | Message::ModulesAcrossLayouts { .. }
            | Message::WorldSizesDiffer { .. }
            | Message::MixedPrecision { .. }
            | Message::NegativeLayers { .. }
            | Message::UnusedOverride { .. }
            | Message::UnusedRankMap { .. }
            | Message::UnusedLayerOffset { .. }
            | Message::UnusedIgnoreOp { .. }
            | Message::UnusedRule { .. }
            | Message::UnusedDtype { .. } => self.fmt_options(f),
            Message::AtStep { .. }
            | Message::StepWithoutPages { .. }
            | Message::UnfinishedStep { .. }
            | Message::LogsBesideSteps { .. }
            | Message::StepsInNeither { .. }
            | Message::StepsNotCaptured { .. }
            | Message::NoStep { .. }
            | Message::NotASeries { .. }
            | Message::AtSteps { .. } => self.fmt_step(f),
            Message::NoParts
            | Message::PartIsReport { .. }
            | Message::PartTwice { .. }
            | Message::PartUnfinished { .. }
            | Message::SeriesPartUnfinished { .. }
            | Message::PartFailed { .. }
            | Message::PartVersion { .. }
            | Message::PartsOfOtherSplits { .. }
            | Message::PartsOfOtherInputs { .. }
            | Message::PartsOfOtherOptions { .. }
            | Message::RowsInSomeParts { .. }
            | Message::RowsSharedByParts { .. }
            | Message::LogsChanged { .. }
            | Message::PartGivenTwice { .. }
            | Message::PartsMissing { .. }
            | Message::PartUnits { .. }
            | Message::StepFoldersAsParts { .. }
            | Message::PartFilesMissing { .. }
            | Message::NotASeriesPart { .. }
            | Message::PartOfOneStep { .. }
            | Message::PartsOfOtherSeries { .. } => self.fmt_merge(f),
        }
    }
}

impl Message {
    /// A [`Message::StepWithoutPages`]. (The series joins its steps'
    /// summaries as the compare or merge made them, never read back, so the
    /// variant is all there is to look at.)
    pub fn is_step_without_pages(&self) -> bool {
        matches!(self, Message::StepWithoutPages { .. })
    }

    /// An error that stops a comparison because its input is incomplete,
    /// not unreadable ([`Message::ShardLogIncomplete`]): exit 3
    /// ([`crate::exit_codes::INCOMPLETE`]) rather than 2 when every error
    /// is one.
    pub fn is_incomplete_input(&self) -> bool {
        match self {
            Message::ShardLogIncomplete { .. } => true,
            Message::OneSidedLog { why, .. } => why.iter().all(|w| {
                matches!(
                    w,
                    Message::CountMismatch { .. }
                        | Message::TruncatedLog { .. }
                        | Message::UnreadableValues { .. }
                        | Message::GzipCut { .. }
                )
            }),
            _ => false,
        }
    }
}

/// Ascending steps in words: runs of consecutive steps as ranges
/// (`1-3, 7`); `none` for no step.
pub fn fmt_steps(steps: &[u64]) -> String {
    fmt_steps_at_most(steps, usize::MAX)
}

/// Consecutive runs of ascending `steps`, each a step or a range (`1-9`).
fn step_runs(steps: &[u64]) -> Vec<(u64, u64)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        let mut j = i;
        while j + 1 < steps.len() && steps[j + 1] == steps[j] + 1 {
            j += 1;
        }
        runs.push((steps[i], steps[j]));
        i = j + 1;
    }
    runs
}

/// How many parts (a step or a range) [`fmt_steps`] writes for `steps`.
pub fn step_parts(steps: &[u64]) -> usize {
    step_runs(steps).len()
}

/// [`fmt_steps`] naming at most `parts` parts, then counting the steps
/// left: "1-9, 11-19 and 40 more steps".
pub fn fmt_steps_at_most(steps: &[u64], parts: usize) -> String {
    let runs = step_runs(steps);
    if runs.is_empty() {
        return "none".to_string();
    }
    let part = |&(a, b): &(u64, u64)| {
        if b > a {
            format!("{a}-{b}")
        } else {
            a.to_string()
        }
    };
    let shown: Vec<String> = runs.iter().take(parts).map(part).collect();
    let rest: u64 = runs.iter().skip(parts).map(|(a, b)| b - a + 1).sum();
    if rest == 0 {
        shown.join(", ")
    } else {
        format!(
            "{} and {rest} more step{}",
            shown.join(", "),
            if rest == 1 { "" } else { "s" }
        )
    }
}

/// The lines `messages` print as on stderr, one per message, except that
/// messages alike on several ranks (the same words but for the rank: its
/// number, `rank N`, and its log's name, `rank_N_activations.log`) are one
/// line naming the ranks and the log as `rank_*_activations.log`:
/// `ranks 0–4095: a/rank_*_activations.log:1:1: run1: no ... header line`.
/// So a problem every rank of a large job has is one line, not thousands
/// (`summary.json` keeps every message). In the order each line's first
/// message comes.
pub fn lines_by_rank(messages: &[Message]) -> Vec<String> {
    // (generic words, ranks, the first message's own words)
    let mut lines: Vec<(Option<String>, Vec<u32>, String)> = Vec::new();
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for m in messages {
        let text = m.to_string();
        match any_rank(&text) {
            Some((rank, generic)) => match at.get(&generic) {
                Some(&i) => {
                    if !lines[i].1.contains(&rank) {
                        lines[i].1.push(rank);
                    }
                }
                None => {
                    at.insert(generic.clone(), lines.len());
                    lines.push((Some(generic), vec![rank], text));
                }
            },
            None => lines.push((None, Vec::new(), text)),
        }
    }
    lines
        .into_iter()
        .map(|(generic, mut ranks, text)| match generic {
            Some(generic) if ranks.len() > 1 => {
                ranks.sort_unstable();
                // `rank *: ...` opens with the rank it now names, also
                // behind a step prefix (`steps 1-8: rank *: ...`).
                let words = match generic.strip_prefix("rank *: ") {
                    Some(w) => w.to_string(),
                    None => match generic.find(": rank *: ") {
                        Some(at) if generic.starts_with("step") => {
                            format!(
                                "{}: {}",
                                &generic[..at],
                                &generic[at + ": rank *: ".len()..]
                            )
                        }
                        _ => generic.clone(),
                    },
                };
                format!("{}: {words}", crate::report::summary::rank_word(&ranks))
            }
            _ => text,
        })
        .collect()
}

/// `text` with its rank made generic (`rank N` → `rank *`,
/// `rank_N_` → `rank_*_`) and that rank; `None` when it names no rank, or
/// more than one.
fn any_rank(text: &str) -> Option<(u32, String)> {
    let mut rank: Option<u32> = None;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("rank") {
        out.push_str(&rest[..i + 4]);
        rest = &rest[i + 4..];
        let Some(sep) = rest.chars().next().filter(|c| *c == ' ' || *c == '_') else {
            continue;
        };
        let digits = rest[1..].bytes().take_while(u8::is_ascii_digit).count();
        let after = rest[1 + digits..].chars().next();
        // `rank_3_…` of a log's name; `rank 3` as a word (not `rank 3.5`).
        let whole = match sep {
            '_' => after == Some('_'),
            _ => {
                !matches!(after, Some(c) if c == '.' && rest[2 + digits..].starts_with(|c: char| c.is_ascii_digit()))
            }
        };
        if digits == 0 || !whole {
            continue;
        }
        let n: u32 = rest[1..1 + digits].parse().ok()?;
        if rank.is_some_and(|r| r != n) {
            return None;
        }
        rank = Some(n);
        out.push(sep);
        out.push('*');
        rest = &rest[1 + digits..];
    }
    out.push_str(rest);
    rank.map(|r| (r, out))
}

impl From<String> for Message {
    fn from(s: String) -> Message {
        Message::Text(s)
    }
}

written_as_words!(Message, Message::Read);

/// Messages joined with `sep`, as one line of text.
pub fn join(v: &[Message], sep: &str) -> String {
    let t: Vec<String> = v.iter().map(|m| m.to_string()).collect();
    t.join(sep)
}

#[cfg(test)]
mod tests;

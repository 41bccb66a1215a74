//! Why a comparison's exit status is what it is, as typed values: the
//! verdict lines of `summary.json` (`verdict`), the terminal, the index and
//! JUnit. The run-level outputs build them (`run::outputs`'s `verdict` for
//! one step, [`super::steps::verdict`] for a step series) with the data
//! their words need; code that branches on a reason matches its variant.
//!
//! As [`super::messages::Message`], a reason's words are made in one
//! place, its `Display`; serde writes a reason as its words and reads them
//! back as [`Reason::Read`]; two reasons are equal when their words are.

use std::fmt;

use super::messages::{self, fmt_steps, fmt_steps_at_most, step_parts, Message, Side};
use super::steps::RankStep;
use super::summary::RankSummary;

/// An origin's words when the logs have no digests: its inputs' hashes
/// agree, which a reordering of the same values (a permuted batch, two
/// swapped tokens) leaves unchanged ([`Reason::ComparedWithoutDigests`]
/// says so among the verdict lines: [`origin_by_hashes`]).
pub const ORIGIN_BY_HASHES: &str = "its inputs' hashes agree, the output differs";

/// Whether rank `r`'s first cause is an origin found without digests (its
/// inputs' hashes agree): not a random op's (its draw, not its inputs,
/// differs). Such a verdict says what hashes cannot see (trial 28: two
/// swapped tokens named the position add an origin; trial 64: a permuted
/// batch named the loss, and a step series said nothing of it).
pub fn origin_by_hashes(r: &RankSummary) -> bool {
    r.bitwise.is_none()
        && r.root_causes.first_cause.as_ref().is_some_and(|f| {
            f.cause.kind == crate::matcher::cause::CauseKind::Origin && !f.row.is_random_op()
        })
}

/// What a comparison without digests cannot see, beside "no divergence".
pub const HASHES_BLIND_TO_ORDER_SHORT: &str = "a reordering of the same values (a permuted batch, swapped tokens), a change of sign that keeps every magnitude, or a change below the printed digits is not seen";

/// What two runs' `RNG state:` lines say of a step's random state
/// ([`Reason::UnseenBefore`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepRandom {
    /// The runs start the step in different states, and it draws random
    /// numbers.
    StartsDiffer,
    /// They start it alike and end it in different states: they draw
    /// random numbers differently within it (a reseed, another number of
    /// draws; trial 67).
    DrawsDiffer,
    /// They start and end it alike, or it draws none: not randomness
    /// (trial 64).
    Alike,
}

impl StepRandom {
    /// The random state of a step as two logs' `RNG state:` lines say it;
    /// `None` when either log has none (TorchTitan's tracer writes none).
    pub fn of(
        run1: Option<crate::logformat::RngState>,
        run2: Option<crate::logformat::RngState>,
    ) -> Option<StepRandom> {
        match (run1, run2) {
            (Some(a), Some(b)) if a.start != b.start => Some(if a.draws() || b.draws() {
                StepRandom::StartsDiffer
            } else {
                StepRandom::Alike
            }),
            (Some(a), Some(b)) if a.end != b.end => Some(StepRandom::DrawsDiffer),
            (Some(_), Some(_)) => Some(StepRandom::Alike),
            _ => None,
        }
    }

    /// What a random op whose inputs agree and whose output differs tells,
    /// under this state (trial 70 F1: a changed dropout probability was
    /// called a differing seed while both logs' RNG state lines were
    /// equal); `None` (no `RNG state:` lines): a seed or state.
    pub fn random_op_words(random: Option<StepRandom>) -> &'static str {
        match random {
            None => "inputs agree, the output differs: a random op, so the runs' RNG seed or state differs",
            Some(StepRandom::StartsDiffer) => {
                "inputs agree, the output differs: a random op, and the runs start the step in different random states (another seed, or other draws before the step)"
            }
            Some(StepRandom::DrawsDiffer) => {
                "inputs agree, the output differs: a random op, and the runs start the step in the same random state but draw differently within it (a reseed, another number of random ops before this one: dropout off in a module left in eval mode in one run)"
            }
            Some(StepRandom::Alike) => {
                "inputs agree, the output differs: a random op, but the runs' random states agree at the step's start and end (the RNG state lines), so not the seed: the op's own arguments differ (a dropout probability, a distribution's parameters)"
            }
        }
    }
}

/// One reason for a comparison's exit status (one verdict line).
#[derive(Clone, Debug)]
pub enum Reason {
    /// A reason read back from a written `summary.json`: its words.
    Read(String),
    /// Input errors (exit 2), joined on one line.
    InputError {
        /// The errors.
        errors: Vec<Message>,
    },
    /// No rank is in both runs (exit 2).
    NoRankInBoth,
    /// A side of a rank is incomplete (exit 3, or 1 with
    /// `--allow-incomplete`).
    Incomplete {
        /// Run 1's rank.
        rank: u32,
        /// The side.
        side: Side,
        /// Its log.
        path: String,
        /// Why ([`crate::report::summary::SideSummary::incomplete`]).
        why: Message,
    },
    /// Runs of different parallel layouts compared at the reference's
    /// tolerance, whose every gating row is a `diff` within `--layouts`'
    /// relative tolerance: summation order is the likely cause (still
    /// exit 1: the rows differ as asked).
    LayoutRounding {
        /// The largest relative difference of a gating row, over the ranks.
        largest: f64,
    },
    /// Replicated results that differ across the ranks a run's shards were
    /// combined from (exit 1).
    ReplicasDiffer {
        /// The run's display name.
        name: String,
        /// How many values differ.
        count: u64,
        /// The first.
        first: Box<crate::layout::ReplicaMismatch>,
    },
    /// Rows that are not `match`: a divergence when some gate (exit 1).
    Diverged {
        /// Whether some of them gate.
        gating: bool,
        /// `diff` rows.
        diff: u64,
        /// `missing` rows.
        missing: u64,
        /// `only1` rows.
        only1: u64,
        /// `only2` rows.
        only2: u64,
        /// The runs' display names.
        names: (String, String),
    },
    /// Ignored differences (shown, not gating).
    Ignored {
        /// How many.
        count: u64,
    },
    /// Unsynced collective rows that differ (shown, not gating).
    Unsynced {
        /// How many.
        count: u64,
    },
    /// Rows of one run only that the other run's compiled code left
    /// unrecorded (shown, not gating): ops its compiler fused away, or at
    /// `level=modules` module outputs of its compiled forward.
    Fused {
        /// How many.
        count: u64,
        /// The backends the headers name (`inductor`); empty: the compiler
        /// is not named.
        compilers: Vec<String>,
        /// Whether the runs are module-level captures (the rows are module
        /// outputs, not ops).
        modules: bool,
    },
    /// Rows of one run only that are its activation checkpointing's
    /// recomputation (shown, not gating).
    Recomputed {
        /// How many.
        count: u64,
    },
    /// Ranks only one run has (exit 1).
    RanksOnOneSide {
        /// Ranks only run 1 has.
        only1: Vec<u32>,
        /// Ranks only run 2 has.
        only2: Vec<u32>,
        /// The runs' display names.
        names: (String, String),
    },
    /// A run whose logs declare a world size lacks the logs of ranks
    /// below it that the other run has: a rank crashed or its log was not
    /// copied (incomplete input: exit 3, or 1 with `--allow-incomplete`).
    RanksMissing {
        /// The run's display name.
        name: String,
        /// The ranks it lacks.
        ranks: Vec<u32>,
        /// Its logs' `World size:`.
        world_size: u32,
    },
    /// Nothing diverges (exit 0).
    NoDivergence {
        /// Rows that match.
        matched: u64,
    },
    /// A module-level step series whose first diverging step diverges
    /// first, on every rank that diverges there, at a persistent buffer
    /// as the step left it (BatchNorm's running statistics): its forward
    /// outputs, gradients and parameters agree, and a module's forward,
    /// not the optimizer, updates the buffer (trial 68).
    BufferOnly {
        /// The first diverging step.
        step: u64,
        /// The buffer's record (run 2's key).
        key: String,
    },
    /// A module-level step series whose first diverging step diverges
    /// first, on every rank that diverges there, at a forward record after
    /// the step's optimizer records (an evaluation forward after the
    /// update; trial 68: a forgotten `model.eval()` read as "from step 2's
    /// batch").
    EvalAfterUpdate {
        /// The first diverging step.
        step: u64,
        /// The first differing record (run 2's key).
        key: String,
    },
    /// A module-level series diverges first in a forward record right
    /// after a step whose records agree: a change between the two that
    /// the level does not record ([`crate::report::steps`]'s
    /// `unseen_before`).
    UnseenBefore {
        /// The first diverging step.
        step: u64,
        /// The step before it, which agrees.
        previous: u64,
        /// What the logs' `RNG state:` lines say of that step's random
        /// state; `None` unknown (no such lines).
        random: Option<StepRandom>,
    },
    /// A step series whose first diverging step comes after steps that
    /// neither run captured (a sparse schedule): the runs may part there
    /// first (trial 32: steps 1, 3, 5 captured, a learning rate changed at
    /// step 2, and "step 3 diverges first" alone).
    UncapturedBefore {
        /// The first diverging step.
        step: u64,
        /// The first and last step before it that neither run captured,
        /// after the last step either run has.
        from: u64,
        /// See `from`.
        to: u64,
    },
    /// A step series at `level="modules"`: the first diverging step's
    /// forward outputs and gradients agree, and its parameters differ
    /// after the optimizer step: the update itself changed (trial 30 F5:
    /// gradient clipping at one step got only "the first differing
    /// record").
    UpdateOnly {
        /// The first diverging step.
        step: u64,
        /// Some forward output or gradient of a diverging rank at that
        /// step agrees only within the tolerance, not exactly
        /// ([`RankSummary::inexact_before_optimizer`]): the optimizer may
        /// magnify it (trial 63: eager against inductor).
        inexact: bool,
        /// Modules ran compiled in a run: their forward outputs are not
        /// recorded, so "agree" covers only the others.
        compiled: bool,
        /// Every diverging rank's logs at that step have digests: without
        /// them "agree" is the hashes' and printed digits' word, blind to a
        /// reordered batch (trial 64: a permuted batch at default precision
        /// read as "the update itself differs").
        digests: bool,
        /// Every diverging rank's first differing record has other dims
        /// in the two runs: that record's run-2 key and the dims
        /// ([`crate::report::summary::RowRef::shapes`]). One run records
        /// each rank's shard of the parameters (FSDP2, tensor
        /// parallelism), the other whole ones (trial 71 F2: read as "the
        /// update itself differs" where every value agreed).
        shapes: Option<(String, [String; 2])>,
    },
    /// A step series at `level="modules"`: at the first diverging step
    /// some ranks differ only after the optimizer step while others
    /// differ before it, in their forward or gradients: the change most
    /// likely reached the first through the gradient all-reduce (a rank's
    /// gradient records are its own, before it). Trial 29 F6: under DDP
    /// the verdict read as if every rank diverged on its own.
    UpdateThroughCollective {
        /// The first diverging step.
        step: u64,
        /// The ranks that differ only after the optimizer step.
        ranks: Vec<u32>,
        /// The ranks that differ before it.
        from: Vec<u32>,
    },
    /// Beside an agreeing verdict: the logs left ops out by `min_numel`
    /// (the header's `Ops below min numel: N`), which were therefore not
    /// compared ([`not_captured`]; trial 24 F2: a small model's changed
    /// BatchNorm momentum exited 0 with 7 ops captured and 22 left out,
    /// and only the capture process had said so).
    NotCaptured {
        /// The most ops one log left out.
        below: u64,
        /// That log's captured ops.
        captured: u64,
        /// `min_numel=1000 elements`, or `min_numel` when unknown.
        limit: String,
    },
    /// Beside an agreeing verdict: some rank's logs have no digests, so its
    /// rows were compared by their L1-norm hashes and printed statistics
    /// alone, which a reordering of the same values does not change
    /// ([`compared_without_digests`]; trial 63: the hint that only
    /// `precision="full"` sees a reordered batch was said under an origin,
    /// never under "no divergence").
    ComparedWithoutDigests {
        /// Ranks (rank-step units of a series) compared without digests.
        ranks: u64,
        /// Ranks compared.
        of: u64,
        /// The run whose logs lack digests when only one run's do (its
        /// name), `None` when both runs' lack them (trial 64: "the logs of
        /// every rank have no digests" where run 1's had them).
        lacking: Option<String>,
    },
    /// A step series: where it diverges first ("the runs agree through
    /// step 4; step 5 diverges first ...").
    FirstDivergingStep {
        /// The steps before it that agree (compared, exit status 0),
        /// ascending: "from step 1 through step 4" when they are every
        /// step from the first to the last, else listed ("at steps 1-2,
        /// 4": step 3 is one run's only, or could not be compared).
        agree: Vec<u64>,
        /// Every step in `agree` is bitwise identical: each paired row has
        /// digests on both sides, and they are equal ("the runs are
        /// bitwise identical from step 1 through step 4").
        agree_bitwise: bool,
        /// Steps before it that `--steps` left out (not compared).
        not_selected_before: usize,
        /// Steps before it that could not be judged (input errors,
        /// incomplete input, one run lacks them): the runs may part first
        /// there.
        not_compared_before: Vec<u64>,
        /// The step.
        step: u64,
        /// Where the step diverges first, as its headline says it.
        headline: Option<String>,
        /// The step's report index, relative to the series' report; empty
        /// where the sentence is shown beside a link to it (the HTML
        /// index), so that it does not say the path.
        report: String,
    },
    /// A step series: steps after the first diverging one whose input is
    /// incomplete (ranks missing, logs cut): they cannot change where the
    /// runs part, so the series exits 1, not 3.
    IncompleteAfterDivergence {
        /// The first diverging step.
        first: u64,
        /// The steps after it with incomplete input, ascending.
        steps: Vec<u64>,
    },
    /// A step series: each rank's first diverging step.
    StepsPerRank {
        /// The ranks and steps.
        ranks: Vec<RankStep>,
        /// Every compared rank, ascending (those missing from `ranks` agree
        /// throughout).
        compared: Vec<u32>,
    },
    /// A step series: steps only one run has (exit 1).
    StepsOnlyIn {
        /// That run's display name.
        name: String,
        /// The steps.
        steps: Vec<u64>,
    },
    /// A step series: a step with an input error or incomplete input, with
    /// its own reasons.
    AtStep {
        /// The step.
        step: u64,
        /// Its reasons.
        reasons: Vec<Reason>,
    },
    /// A step series with digests: the first step whose paired rows are
    /// not all bitwise identical, where it comes before the first
    /// diverging step (or none diverges): within the tolerance it
    /// agrees, bitwise it does not (shown, not gating).
    NotBitwiseFrom {
        /// The step.
        step: u64,
        /// Its paired rows with equal digests, over its ranks.
        identical: u64,
        /// Its paired rows with digests on both sides.
        with_digests: u64,
        /// Its paired rows that differ and do not gate (unsynced
        /// collectives, ignored or fused-away ops): where these are all the
        /// rows not bitwise identical, the line says so, not "within the
        /// tolerance" (which `--bitwise` would contradict).
        nongating: u64,
    },
    /// A step series: the first step that agrees while the losses the
    /// loop recorded (`prof.step(loss=...)`) differ beyond a relative
    /// [`LOSS_RTOL`] (shown, not gating): a loss computed outside the
    /// captured ops, or one whose difference is within the compare's
    /// tolerance (the line does not say which).
    LossesDiffer {
        /// The step.
        step: u64,
        /// Run 1's loss.
        loss1: f64,
        /// Run 2's loss.
        loss2: f64,
    },
    /// A step series: the first (step, rank) where one run's values hold
    /// NaN or Inf and the other's are finite (trial 65 F3: only a
    /// single-step compare said it).
    FirstNonFinite {
        /// The step.
        step: u64,
        /// Run 1's rank.
        rank: u32,
        /// The run whose values are non-finite (its display name).
        name: String,
        /// Its first such row's key.
        key: String,
    },
    /// The first paired row (of the lowest rank, in a series of the first
    /// step) whose values are NaN in both runs and agree, NaN with NaN:
    /// what changes after it cannot be seen in those values (trial 66: two
    /// runs that both blew up passed "bitwise identical", without a word).
    NanInBoth {
        /// The step (a series), `None` for one step.
        step: Option<u64>,
        /// Run 1's rank.
        rank: u32,
        /// The row's key.
        key: String,
    },
    /// A step series: from this step on both runs recorded a NaN or Inf
    /// loss, and the step agrees: NaN agrees with NaN, so what changes
    /// after both runs went non-finite is not seen (trial 65 F1).
    NonFiniteLossesAgree {
        /// The first such step.
        step: u64,
    },
    /// A step series where every step both runs have agrees, and one run
    /// has steps the other lacks (exit 1, as [`Reason::StepsOnlyIn`]
    /// gates): what the common steps say, and how to compare only them
    /// (trial 30 F3: runs of different schedules, or a job killed early,
    /// had no verdict sentence at all).
    CommonStepsAgree {
        /// The steps both runs have, ascending.
        steps: Vec<u64>,
        /// Rows that match over them.
        matched: u64,
        /// Every matching row of them is bitwise identical.
        bitwise: bool,
    },
    /// A step series where nothing diverges (exit 0).
    NoDivergenceOverSteps {
        /// Steps compared.
        steps: usize,
        /// Rows that match over them.
        matched: u64,
        /// Steps the runs have that `--steps` left out (not compared).
        not_selected: usize,
        /// Every matching row of every step is bitwise identical (both
        /// logs' digests equal): said, as a single step's summary says it
        /// (trial 20 F6).
        bitwise: bool,
    },
}

/// The most parts (a step or a range of steps) a list of steps names in a
/// verdict line before it counts the rest ("1-9, 11-19, … and 1,800 more
/// steps": trial 30, a line of 10,804 characters at 2,000 steps).
pub const STEP_LIST_PARTS: usize = 12;

/// [`Reason::NanInBoth`] for the first of `ranks` (in their order: by
/// step, then rank, in a series) whose first row NaN in both runs agrees
/// (NaN with NaN); `None` when none has one.
pub fn nan_in_both(ranks: &[RankSummary]) -> Option<Reason> {
    ranks
        .iter()
        .filter_map(|r| {
            let row = r.root_causes.first_nan_both.as_ref()?;
            (row.status == crate::matcher::Status::Match).then_some((r.step, r.rank, row))
        })
        .min_by_key(|(step, rank, _)| (*step, *rank))
        .map(|(step, rank, row)| Reason::NanInBoth {
            step,
            rank,
            key: row.key().to_string(),
        })
}

/// The words for a first cause whose only difference is NaN against NaN
/// ([`crate::report::summary::RowRef::nan_against_nan`]).
pub const NAN_AGAINST_NAN: &str = "its values are NaN in both runs and nothing else differs there: --nan-is-diff counts NaN against NaN as a difference (without it, NaN agrees with NaN)";

/// The relative difference of two recorded losses beyond which
/// [`Reason::LossesDiffer`] is said (float32 noise is about 1e-7).
pub const LOSS_RTOL: f64 = 1e-6;

/// `""` for one, `"s"` for more.
fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Ranks in words: `[0, 3]`, or `none`.
pub fn fmt_ranks(r: &[u32]) -> String {
    if r.is_empty() {
        return "none".into();
    }
    let v: Vec<String> = r.iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(", "))
}

/// What [`Reason::InputError`]'s errors are called: `incomplete input`
/// when every one is ([`Message::is_incomplete_input`]), else `input
/// error`.
fn input_error_words(errors: &[Message]) -> &'static str {
    if errors.iter().all(Message::is_incomplete_input) {
        "incomplete input"
    } else {
        "input error"
    }
}

/// `1 error, printed on stderr` (`3 errors, ...`): how the terminal
/// summary counts the input errors it does not repeat.
pub fn on_stderr(count: usize) -> String {
    on_stderr_each(count, 1)
}

/// [`on_stderr`] for `ranks` ranks of `count` errors each: `1 error each,
/// printed on stderr` for more than one.
pub fn on_stderr_each(count: usize, ranks: usize) -> String {
    let s = if count == 1 { "" } else { "s" };
    let each = if ranks > 1 { " each" } else { "" };
    format!("{count} error{s}{each}, printed on stderr")
}

impl Reason {
    /// Whether this reason is part of a step series' answer to "which
    /// step, then which op" (the first diverging step, what came before
    /// it, the update-only sentences, "the common steps agree"): the
    /// terminal summary prints these first, before its line per step.
    pub fn answers_which_step(&self) -> bool {
        matches!(
            self,
            Reason::FirstDivergingStep { .. }
                | Reason::UnseenBefore { .. }
                | Reason::UncapturedBefore { .. }
                | Reason::UpdateOnly { .. }
                | Reason::BufferOnly { .. }
                | Reason::EvalAfterUpdate { .. }
                | Reason::UpdateThroughCollective { .. }
                | Reason::CommonStepsAgree { .. }
        )
    }

    /// The reason as the terminal summary (stdout) says it: its words,
    /// but an input error's messages, printed once each on stderr
    /// (`error: ...`), only counted ([`on_stderr`]), there and in a
    /// step's reasons. `summary.json`, the index and JUnit keep them.
    pub fn terminal_line(&self) -> String {
        match self {
            Reason::InputError { errors } => {
                format!("{}: {}", input_error_words(errors), on_stderr(errors.len()))
            }
            Reason::AtStep { step, reasons } => {
                let said: Vec<String> = reasons.iter().map(Reason::terminal_line).collect();
                format!("step {step}: {}", said.join("; "))
            }
            r => r.to_string(),
        }
    }
}

/// The verdict lines of rows that differ without gating, from the total
/// counts `c` of `ranks` (a compare's ranks, or every step and rank of a
/// series): ignored ops, unsynced collectives, rows the other run's
/// compiled code left unrecorded, rows of activation checkpointing's
/// recomputation in one run. Empty when there are none.
pub fn not_gating(c: &crate::matcher::Counts, ranks: &[RankSummary]) -> Vec<Reason> {
    let mut out = Vec::new();
    if c.ignored > 0 {
        out.push(Reason::Ignored { count: c.ignored });
    }
    if c.unsynced > 0 {
        out.push(Reason::Unsynced { count: c.unsynced });
    }
    if c.fused > 0 {
        out.push(Reason::Fused {
            count: c.fused,
            compilers: fusing_compilers(ranks),
            modules: module_level(ranks),
        });
    }
    if c.recomputed > 0 {
        out.push(Reason::Recomputed {
            count: c.recomputed,
        });
    }
    out
}

/// Whether the ranks' logs are module-level captures (run 1's header of the
/// first rank says `Level: modules`).
fn module_level(ranks: &[RankSummary]) -> bool {
    ranks
        .first()
        .is_some_and(|r| r.run1.level == crate::logformat::CaptureLevel::Modules)
}

/// The compilers that left rows unrecorded, as the verdict names them: the
/// distinct backends the headers of the ranks with such rows name
/// (`inductor`; any backend at `level=modules`, fusing ones only at the op
/// level); empty when none is named ([`Reason::Fused`] then says `the
/// compiler`).
fn fusing_compilers(ranks: &[RankSummary]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in ranks.iter().filter(|r| r.counts.fused > 0) {
        for side in [&r.run1, &r.run2] {
            if let Some(b) = side.compiled.as_deref() {
                let modules = side.level == crate::logformat::CaptureLevel::Modules;
                let fuses = modules
                    || crate::logformat::CompileBackend::from_name(b).is_some_and(|b| b.fuses());
                if fuses && !names.iter().any(|n| n == b) {
                    names.push(b.to_string());
                }
            }
        }
    }
    names
}

/// The words for `count` rows of one run only that the other run's
/// compiled code left unrecorded, `by` naming the compiler (`inductor`, `the
/// compiler`): `2 ops fused away by inductor`, or with `modules` (module-level
/// captures) `2 module outputs not recorded in compiled code (inductor:
/// module hooks do not run there)`. The verdict, the terminal and JUnit say
/// it in these words.
pub fn compiled_away_words(count: u64, modules: bool, by: &str) -> String {
    if modules {
        format!(
            "{count} module output{} not recorded in compiled code ({by}: module hooks do not run there)",
            plural(count)
        )
    } else {
        format!("{count} op{} fused away by {by}", plural(count))
    }
}

/// The words for `count` rows of one run only that repeat its forward ops
/// in backward ([`crate::matcher::ROW_RECOMPUTED`]: activation
/// checkpointing's recomputation, or a parallel layout gathering the same
/// parameters again): `6 rows recomputed in backward in one run only
/// (activation checkpointing, or parameters gathered again)`. The
/// verdict, the terminal and JUnit say it in these words; the rows' notes
/// and the warning say which.
pub fn recomputed_words(count: u64) -> String {
    format!(
        "{count} row{} recomputed in backward in one run only, by activation checkpointing or a layout gathering parameters again",
        plural(count)
    )
}

/// An entry cause's differing inputs in words, by 0-based position in
/// the op's `Input hashes` (the rows' notes count the same way): `a
/// differing input: input 2`, `differing inputs: 0 and 2`, at most four
/// positions (`differing inputs: 0, 1, 2, 3, …`); `a differing input`
/// when none is listed (trial 19 L4: the headline did not say which).
/// `parameters` is the row's `Input parameters:` line
/// ([`crate::report::summary::RowRef::input_parameters`]): a shown input
/// that is a parameter is named (`a differing input: input 1, the
/// parameter blocks.1.fc1.lora_A`; with several, `; input 2 is the
/// parameter w` each; trial 26 F5).
pub fn differing_input_words(inputs: &[usize], parameters: Option<&str>) -> String {
    let shown: Vec<String> = inputs.iter().take(4).map(usize::to_string).collect();
    let names: Vec<&str> = parameters
        .map(|p| p.split(';').collect())
        .unwrap_or_default();
    let name = |q: usize| names.get(q).map(|n| n.trim()).filter(|n| !n.is_empty());
    let mut w = match shown.as_slice() {
        [] => "a differing input".to_string(),
        [one] => format!("a differing input: input {one}"),
        _ if inputs.len() > 4 => format!("differing inputs: {}, …", shown.join(", ")),
        [rest @ .., last] => format!("differing inputs: {} and {last}", rest.join(", ")),
    };
    match inputs {
        [one] => {
            if let Some(n) = name(*one) {
                w.push_str(&format!(", the parameter {n}"));
            }
        }
        _ => {
            for &q in inputs.iter().take(4) {
                if let Some(n) = name(q) {
                    w.push_str(&format!("; input {q} is the parameter {n}"));
                }
            }
        }
    }
    w
}

/// What the logs' `RNG state:` header lines (digests of torch's random
/// number generators' state when the step was armed and when it ended,
/// [`crate::logformat::RngState`]) say about randomness in a rank's step,
/// for a first differing record at `level=modules`, where no op is
/// recorded (trial 63: a dropout seed changed was not named as
/// randomness). Randomness is named only when `after_agreeing` (records
/// before the first differing one agree: the batch and the parameters
/// they read are the same; trial 64: a step after a diverged one, or a
/// resumed job's, differs from its first record, an embedding that draws
/// nothing, and was blamed on dropout): the runs start the step with
/// different states and it draws random numbers, or they start alike and
/// end differently (they draw differently). Neither run drawing any rules
/// randomness out, wherever the record is. `None` when a log lacks the
/// line, or nothing can be said.
pub fn random_state_words(r: &RankSummary, after_agreeing: bool) -> Option<String> {
    let (a, b) = (r.run1.rng_state?, r.run2.rng_state?);
    let draws = a.draws() || b.draws();
    let step = r.run1.step.or(r.run2.step);
    let this = match step {
        Some(s) => format!("step {s}"),
        None => "the step".to_string(),
    };
    if !draws && a.start != b.start {
        // Trial 71 F8: another torch.manual_seed was "not randomness".
        return Some(format!("no random numbers are drawn from torch's generators in {this}, but the runs start it in different random states (the logs' `RNG state:`): they were seeded differently or drew differently before it, so parameters initialised or data drawn from another seed may differ"));
    }
    if !draws {
        return Some(format!("no random numbers are drawn from torch's generators in {this} (the logs' `RNG state:`): not randomness"));
    }
    if !after_agreeing {
        return None;
    }
    if a.start != b.start {
        Some(format!("the records before it agree, and the runs' random state (torch's generators, the logs' `RNG state:`) differs when {this} starts and the step draws random numbers: most likely a random op (dropout) in this module draws differently; seed both runs alike (or capture at level=\"ops\", which names the random op)"))
    } else if a.end != b.end {
        Some(format!("the records before it agree, and the runs start {this} with the same random state (the logs' `RNG state:`) and end it with different ones: they draw random numbers differently (another number of random ops, such as dropout off in a module left in eval mode in one run, or a compiled random op with its own generator), most likely first in this module; capture at level=\"ops\" to name it"))
    } else {
        None
    }
}

/// What an entry cause (a differing input with no captured producer) may
/// come from that the logs left out, for the headline and the terminal:
/// ops below `min_numel` ([`below_min_numel_words`]) and ops a compiler
/// fused into generated kernels ([`fused_entry_words`]), and casts when
/// paired rows' dtypes differ ([`cast_entry_words`]), joined by `; `.
/// `None` when none applies.
pub fn entry_caveats(r: &RankSummary) -> Option<String> {
    let parts: Vec<String> = [
        below_min_numel_words(r),
        fused_entry_words(r),
        cast_entry_words(r),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// An entry beside paired rows whose dtypes differ (autocast or mixed
/// precision in one run): `dtype changed in 11 paired rows: float32 →
/// bfloat16, and a cast (_to_copy) is an op the capture leaves out, so
/// its inputs may be casts` (trial 24 F3: "differing inputs: 0, 1 and 2"
/// read as changed data or weights). `None` without dtype changes.
pub fn cast_entry_words(r: &RankSummary) -> Option<String> {
    let d = r.dtype_changes.as_ref()?;
    Some(format!(
        "{}, and a cast (_to_copy) is an op the capture leaves out, so its inputs may be casts (autocast or mixed precision in one run)",
        d.describe()
    ))
}

/// Why a rank has several causes when only its optimizer step differs
/// (no gating row in the forward or backward phase, more than one
/// cause): `the forward and backward agree; only the optimizer step
/// differs, whose updates are computed apart, so one changed setting (a
/// learning rate, weight decay, clipping) is a cause in each`, then the
/// parameters whose updates differ when the causes' rows name them
/// (`Parameters:` lines: `; the updates of parameters 2.weight and 2.bias
/// differ`). `None` otherwise. Said under the terminal's cause line.
pub fn optimizer_only_words(r: &RankSummary) -> Option<String> {
    let c = &r.root_causes;
    let only = c.cause_count > 1
        && c.first_divergence_forward.is_none()
        && c.first_divergence_backward.is_none()
        && c.first_divergence_optimizer.is_some();
    only.then(|| {
        let mut w = "the forward and backward agree; only the optimizer step differs, whose updates are computed apart, so one changed setting (a learning rate, weight decay, clipping) is a cause in each".to_string();
        let mut names: Vec<&str> = Vec::new();
        for p in c.causes.iter().filter_map(|e| e.row.named_parameters()) {
            for n in p.split(", ") {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        if !names.is_empty() {
            let more = if c.cause_count > c.causes.len() as u64 {
                " (of the first causes)"
            } else {
                ""
            };
            w.push_str(&format!(
                "; the updates of {}{more} differ",
                crate::report::summary::parameter_words(&names)
            ));
        }
        w
    })
}

/// The words for a per-op rank where a log names a compiler that fuses
/// ops (`Compiled: inductor`): `inductor fuses ops into generated kernels
/// that dispatch none, so they were not captured: it may come from one
/// (a capture without torch.compile records them)`. `None` at the module
/// level or without such a compiler.
pub fn fused_entry_words(r: &RankSummary) -> Option<String> {
    if r.run1.level == crate::logformat::CaptureLevel::Modules {
        return None;
    }
    let mut names: Vec<&str> = Vec::new();
    for b in [&r.run1, &r.run2]
        .iter()
        .filter_map(|s| s.compiled.as_deref())
    {
        let fuses = crate::logformat::CompileBackend::from_name(b).is_some_and(|b| b.fuses());
        if fuses && !names.contains(&b) {
            names.push(b);
        }
    }
    if names.is_empty() {
        return None;
    }
    Some(format!(
        "{} fuse{} ops into generated kernels that dispatch none, so they were not captured, and it may come from one: a capture without torch.compile records them",
        names.join(" and "),
        if names.len() == 1 { "s" } else { "" }
    ))
}

/// [`Reason::NotCaptured`] for ranks whose logs left ops out by
/// `min_numel`: the log that left out the most; `None` when no log says
/// it left any out.
pub fn not_captured(ranks: &[RankSummary]) -> Option<Reason> {
    let (below, side) = ranks
        .iter()
        .flat_map(|r| [&r.run1, &r.run2])
        .filter_map(|s| Some((s.below_min_numel?, s)))
        .max_by_key(|(n, _)| *n)?;
    (below > 0).then(|| Reason::NotCaptured {
        below,
        captured: side.entries as u64,
        limit: min_numel_limit(ranks),
    })
}

/// [`Reason::ComparedWithoutDigests`] when some rank paired rows and its
/// logs lack digests (`bitwise` absent); `None` when every rank's have them.
pub fn compared_without_digests(
    ranks: &[RankSummary],
    (name1, name2): (&str, &str),
) -> Option<Reason> {
    let has_digests = |s: &crate::report::summary::SideSummary| {
        s.one_sided_fields
            .contains(&crate::parser::Field::OutputDigest.label())
    };
    let compared = ranks.iter().filter(|r| r.run1.paired > 0);
    let (mut without, mut of) = (0u64, 0u64);
    // Which run lacks them: 1, 2, or 3 (both, or it varies).
    let mut lacking = 0u8;
    for r in compared {
        of += 1;
        if r.bitwise.is_some() {
            continue;
        }
        without += 1;
        lacking |= match (has_digests(&r.run1), has_digests(&r.run2)) {
            (true, false) => 2,
            (false, true) => 1,
            _ => 3,
        };
    }
    (without > 0).then(|| Reason::ComparedWithoutDigests {
        ranks: without,
        of,
        lacking: match lacking {
            1 => Some(name1.to_string()),
            2 => Some(name2.to_string()),
            _ => None,
        },
    })
}

/// `min_numel=1000 elements` from the ranks' `Capture filter:` lines,
/// else `min_numel`.
fn min_numel_limit(ranks: &[RankSummary]) -> String {
    ranks
        .iter()
        .flat_map(|r| [&r.run1, &r.run2])
        .find_map(|s| crate::logformat::filter_min_numel(s.capture_filter.as_deref()?))
        .map_or("min_numel".to_string(), |n| {
            format!("min_numel={n} elements")
        })
}

/// The words for a rank whose logs left ops out by `min_numel` (the
/// header's `Ops below min numel: N`, the larger of the two runs'), said
/// where an input's difference has no captured producer (an entry cause):
/// `57 ops smaller than min_numel=1000 elements were not captured: it may
/// come from one (min_numel=0 captures every op)`. `None` when neither
/// log says it left any out.
pub fn below_min_numel_words(r: &RankSummary) -> Option<String> {
    let (s1, s2) = (&r.run1, &r.run2);
    let below = s1
        .below_min_numel
        .unwrap_or(0)
        .max(s2.below_min_numel.unwrap_or(0));
    if below == 0 {
        return None;
    }
    let limit = min_numel_limit(std::slice::from_ref(r));
    Some(format!(
        "{below} op{} smaller than {limit} {} not captured: it may come from one (min_numel=0 captures every op)",
        plural(below),
        if below == 1 { "was" } else { "were" }
    ))
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Read(s) => f.write_str(s),
            Reason::InputError { errors } => write!(
                f,
                "{}: {}",
                input_error_words(errors),
                messages::join(errors, "; ")
            ),
            Reason::NoRankInBoth => f.write_str("nothing compared: no rank is present in both runs"),
            Reason::Incomplete {
                rank,
                side,
                path,
                why,
            } => write!(f, "incomplete input: rank {rank} {side} ({path}) {why}"),
            Reason::LayoutRounding { largest } => write!(
                f,
                "every gating row differs by at most rel {largest:.1e}, within --layouts' tolerance (rtol {:e}): runs of different parallel layouts add in another order, so this is likely rounding; compare with --layouts to tell it from a change",
                crate::layout::LAYOUT_RTOL
            ),
            Reason::ReplicasDiffer { name, count, first } => write!(
                f,
                "replicas differ in {name}: {count} value{} of replicated results differ across the ranks combined; first rank {} at `{}` ({}, line {}) against rank {}",
                plural(*count),
                first.rank,
                first.key,
                first.field,
                first.line,
                first.against
            ),
            Reason::Diverged {
                gating,
                diff,
                missing,
                only1,
                only2,
                names: (name1, name2),
            } => {
                // Rows that differ but do not gate (ignored ops, unsynced
                // collectives, ops fused away) are not a divergence.
                let what = if *gating {
                    "diverged"
                } else {
                    "differences, none gating"
                };
                write!(f, "{what}: {diff} diff, ")?;
                if *missing > 0 {
                    write!(f, "{missing} missing, ")?;
                }
                write!(f, "{only1} only in {name1}, {only2} only in {name2}")
            }
            Reason::Ignored { count } => write!(
                f,
                "{count} ignored difference{} (shown, not gating)",
                plural(*count)
            ),
            Reason::Unsynced { count } => write!(
                f,
                "{count} unsynced collective row{} (shown, not gating)",
                if *count == 1 { " differs" } else { "s differ" }
            ),
            Reason::Fused {
                count,
                compilers,
                modules,
            } => {
                let by = if compilers.is_empty() {
                    "the compiler".to_string()
                } else {
                    compilers.join(", ")
                };
                let what = compiled_away_words(*count, *modules, &by);
                write!(f, "{what} (rows only in one run; shown, not gating)")
            }
            Reason::Recomputed { count } => {
                write!(f, "{} (shown, not gating)", recomputed_words(*count))
            }
            Reason::RanksOnOneSide {
                only1,
                only2,
                names: (name1, name2),
            } => write!(
                f,
                "ranks on one side only: {} only in {name1}, {} only in {name2}",
                fmt_ranks(only1),
                fmt_ranks(only2)
            ),
            Reason::RanksMissing {
                name,
                ranks,
                world_size,
            } => write!(
                f,
                "incomplete input: {name} has no log of rank{} {}, though its logs say `World size: {world_size}`: a rank that crashed, or a log not copied?",
                plural(ranks.len() as u64),
                ranks
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Reason::NoDivergence { matched } => {
                write!(f, "no divergence beyond tolerance: {matched} rows match")
            }
            Reason::UnseenBefore {
                step,
                previous,
                random,
            } => {
                let state = match random {
                    Some(StepRandom::StartsDiffer) => format!("from step {step}'s batch, or from its random state, which differs between the runs when the step starts (the logs' `RNG state:`; dropout draws differently)"),
                    Some(StepRandom::DrawsDiffer) => format!("from step {step}'s batch, or from its random draws: the runs start the step in the same random state and end it in different ones (the logs' `RNG state:`), so they draw random numbers differently within it (a reseed inside the step, dropout drawn another number of times, or off in a module left in eval mode)"),
                    Some(StepRandom::Alike) => format!("from step {step}'s batch (not from its random state: the logs' `RNG state:` lines start and end the step alike, or it draws nothing)"),
                    None => format!("from step {step}'s batch or random state"),
                };
                write!(
                    f,
                    "step {previous}'s records agree, its parameters after the optimizer step included, and step {step} first differs in its forward: from a change to the forward computation at step {step} (a setting or code path such as a temperature, an activation or a scale; an op inside a module is not recorded at level=\"modules\"), {state}, or from a change to the parameters after step {previous}'s records that level=\"modules\" does not see (through `.data` after optimizer.step()); re-capture steps {previous} and {step} at level=\"ops\" to tell"
                )
            }
            Reason::UpdateThroughCollective { step, ranks, from } => {
                let one = ranks.len() == 1;
                write!(
                    f,
                    "at step {step}, {} {} only after the optimizer step ({} forward outputs and gradients agree) while {} {} before it: most likely {} gradients reaching {} through the gradient all-reduce or reduce-scatter (a rank's gradient records at level=\"modules\" are its own, before it)",
                    crate::report::summary::rank_word(ranks),
                    if one { "differs" } else { "differ" },
                    if one { "its" } else { "their" },
                    crate::report::summary::rank_word(from),
                    if from.len() == 1 { "differs" } else { "differ" },
                    if from.len() == 1 { "its" } else { "their" },
                    if one { "it" } else { "them" }
                )
            }
            Reason::UncapturedBefore { step, from, to } => {
                if from == to {
                    write!(f, "step {from}, before step {step}, was captured in neither run: the runs may part there first; capture it to tell")
                } else {
                    write!(f, "steps {from}-{to}, before step {step}, were captured in neither run: the runs may part there first; capture them to tell")
                }
            }
            Reason::EvalAfterUpdate { step, key } => write!(
                f,
                "step {step}'s training forward, gradients and parameters after the optimizer step agree, and a forward after the optimizer step differs first (`{key}`, an evaluation pass): a module in training mode in one run and in eval mode in the other (BatchNorm, Dropout: a forgotten model.eval()), or another evaluation batch; re-capture step {step} at level=\"ops\" to name the op"
            ),
            Reason::BufferOnly { step, key } => write!(
                f,
                "step {step}'s forward outputs, gradients and parameters after the optimizer step agree, and a persistent buffer differs as the step left it (`{key}`): a module's forward updates it, not the optimizer (BatchNorm's running statistics: its momentum, or a forward in training mode in one run and in eval mode in the other); re-capture step {step} at level=\"ops\" to name the op"
            ),
            Reason::UpdateOnly {
                step,
                shapes: Some((key, [a, b])),
                ..
            } => write!(
                f,
                "step {step}'s forward outputs and gradients agree, and its parameters after the optimizer step have other shapes (`{key}`: {a} → {b}): one run records each rank's shard of a parameter (FSDP, tensor parallelism) and the other whole parameters, which level=\"modules\" does not combine, so their values are not compared; capture both runs at level=\"ops\" and compare them with --layouts, which combines FSDP2's parameter shards"
            ),
            Reason::UpdateOnly {
                step,
                inexact,
                compiled,
                digests,
                shapes: None,
            } => {
                let outputs = if *compiled {
                    "forward outputs (of the modules that did not run compiled: the others' are not recorded)"
                } else {
                    "forward outputs"
                };
                let within = if !*digests {
                    " by their hashes and printed statistics (the logs have no digests: a reordering of the same values, such as a permuted batch, is not seen),"
                } else if *inexact {
                    " within the tolerance, not exactly,"
                } else {
                    ","
                };
                write!(
                    f,
                    "step {step}'s {outputs} and gradients agree{within} and its parameters differ after the optimizer step: "
                )?;
                if !*digests {
                    f.write_str("either the batch was reordered, or the optimizer magnifies differences below the printed digits (Adam's update divides each gradient by its own running scale), or the update itself differs")?;
                } else if *inexact {
                    write!(f, "either the optimizer magnifies the gradients' small differences (Adam's update divides each gradient by its own running scale, so a gradient near zero that differs in its last digits moves its parameter by another step; compare with --bitwise to see them), or the update itself differs")?;
                } else {
                    f.write_str("the update itself differs")?;
                }
                write!(
                    f,
                    " (the learning rate or its schedule, gradient clipping, weight decay, the optimizer's state or settings, a loss scale); "
                )?;
                if !*digests {
                    f.write_str("capture both runs with precision=\"full\" to tell, and ")?;
                }
                write!(f, "re-capture step {step} at level=\"ops\" to name the op")
            }
            Reason::ComparedWithoutDigests { ranks, of, lacking } => {
                let which = if let Some(run) = lacking {
                    if ranks == of {
                        format!("{run}'s logs have")
                    } else {
                        format!("{run}'s logs of {ranks} of {of} ranks have")
                    }
                } else if ranks == of {
                    if *of == 1 {
                        "the logs have".to_string()
                    } else {
                        "the logs of every rank have".to_string()
                    }
                } else {
                    format!("the logs of {ranks} of {of} ranks have")
                };
                write!(
                    f,
                    "{which} no digests, so rows were judged by their hashes (L1 norms), as the reference judges them, with the printed statistics shown but not judged: {HASHES_BLIND_TO_ORDER_SHORT}; give --rtol/--atol to judge the statistics too, or capture both runs with precision=\"full\" to compare digests (bitwise)"
                )
            }
            Reason::NotCaptured {
                below,
                captured,
                limit,
            } => write!(
                f,
                "but {below} op{} smaller than {limit} {} not captured in a log that captured {captured}, so {} not compared (min_numel=0 captures every op)",
                plural(*below),
                if *below == 1 { "was" } else { "were" },
                if *below == 1 { "it was" } else { "they were" }
            ),
            Reason::FirstDivergingStep {
                agree,
                agree_bitwise,
                not_selected_before,
                not_compared_before,
                step,
                headline,
                report,
            } => {
                let agree_words = if *agree_bitwise {
                    "are bitwise identical"
                } else {
                    "agree"
                };
                match agree.as_slice() {
                    [] => {}
                    [a] => write!(f, "the runs {agree_words} at step {a}; ")?,
                    [a, .., b] if b - a + 1 == agree.len() as u64 => {
                        write!(f, "the runs {agree_words} from step {a} through step {b}; ")?
                    }
                    _ => write!(
                        f,
                        "the runs {agree_words} at steps {}; ",
                        messages::fmt_steps(agree)
                    )?,
                }
                write!(f, "step {step} diverges first")?;
                if *not_selected_before > 0 {
                    let n = *not_selected_before as u64;
                    write!(
                        f,
                        " of the steps compared ({n} earlier step{} left out by --steps)",
                        plural(n)
                    )?;
                }
                if !not_compared_before.is_empty() {
                    let n = not_compared_before.len() as u64;
                    write!(
                        f,
                        " of the steps judged (step{} {} before it could not be compared, so the runs may part there first)",
                        plural(n),
                        messages::fmt_steps(not_compared_before)
                    )?;
                }
                if let Some(h) = headline {
                    write!(f, ": {}", h.trim_end_matches('.'))?;
                }
                if report.is_empty() {
                    return Ok(());
                }
                write!(f, " (report: {report})")
            }
            Reason::IncompleteAfterDivergence { first, steps } => write!(
                f,
                "step{} {} after step {first}, where the runs part, {} incomplete input, which does not change the first diverging step (a rank that stopped capturing at the divergence, on_divergence=\"stop-capturing\", writes no later logs)",
                plural(steps.len() as u64),
                messages::fmt_steps(steps),
                if steps.len() == 1 { "has" } else { "have" }
            ),
            Reason::StepsPerRank { ranks, compared } => {
                f.write_str(&crate::report::steps::rank_steps_sentence(ranks, compared))
            }
            Reason::StepsOnlyIn { name, steps } => {
                write!(
                    f,
                    "steps only in {name}: {}",
                    fmt_steps_at_most(steps, STEP_LIST_PARTS)
                )
            }
            Reason::CommonStepsAgree {
                steps,
                matched,
                bitwise,
            } => {
                let n = steps.len() as u64;
                write!(
                    f,
                    "the runs agree in every step both have ({n} step{}: {}): {matched} rows match",
                    plural(n),
                    fmt_steps_at_most(steps, STEP_LIST_PARTS)
                )?;
                if *bitwise {
                    f.write_str(", every one bitwise identical")?;
                }
                f.write_str("; the steps only one run has gate (exit status 1)")?;
                if step_parts(steps) <= STEP_LIST_PARTS {
                    write!(
                        f,
                        ": --steps {} compares only the steps both have",
                        fmt_steps(steps).replace(", ", ",")
                    )?;
                } else {
                    // Too long a list to paste (trial 32: no advice at all).
                    f.write_str(": --steps with the steps both have (summary.json's `steps`) compares only those")?;
                }
                Ok(())
            }
            Reason::AtStep { step, reasons } => {
                write!(f, "step {step}: {}", join(reasons, "; "))
            }
            Reason::NotBitwiseFrom {
                step,
                identical,
                with_digests,
                nongating,
            } => {
                write!(
                    f,
                    "step {step} is the first step not bitwise identical ({identical} of {with_digests} paired rows with digests are); "
                )?;
                let kinds = "unsynced collectives, ignored or fused-away ops";
                if *nongating == 0 {
                    write!(f, "it agrees within the tolerance (--bitwise gates on it; shown, not gating)")
                } else if *nongating >= with_digests.saturating_sub(*identical) {
                    match nongating {
                        1 => write!(f, "the row that differs does not gate ({kinds}; shown, not gating)"),
                        n => write!(f, "the {n} rows that differ do not gate ({kinds}; shown, not gating)"),
                    }
                } else {
                    let does = if *nongating == 1 { "does" } else { "do" };
                    write!(
                        f,
                        "{nongating} of them {does} not gate ({kinds}), the rest agree within the tolerance (--bitwise gates on them; shown, not gating)"
                    )
                }
            }
            Reason::FirstNonFinite { step, rank, name, key } => write!(
                f,
                "{name}'s values are first non-finite (NaN or Inf) at step {step}, rank {rank}, at `{key}` (finite in the other run)"
            ),
            Reason::NanInBoth { step, rank, key } => write!(
                f,
                "both runs' values are NaN from `{key}` on (rank {rank}{}): NaN agrees with NaN (the reference's rule), so a change made after that cannot be seen in those values; --nan-is-diff counts NaN against NaN as a difference",
                step.map(|s| format!(", step {s}")).unwrap_or_default()
            ),
            Reason::NonFiniteLossesAgree { step } => write!(
                f,
                "both runs recorded a NaN or Inf loss from step {step} on, and step {step} agrees: NaN agrees with NaN (the reference's rule), so a change made after both runs went non-finite cannot be seen in their NaN values; --nan-is-diff counts NaN against NaN as a difference"
            ),
            Reason::LossesDiffer { step, loss1, loss2 } => write!(
                f,
                "the recorded losses differ at step {step} ({loss1} vs {loss2}) although every captured row of that step agrees within the tolerance (shown, not gating)"
            ),
            Reason::NoDivergenceOverSteps {
                steps,
                matched,
                not_selected,
                bitwise,
            } => {
                write!(
                    f,
                    "no divergence beyond tolerance over {steps} step{}",
                    plural(*steps as u64)
                )?;
                if *not_selected > 0 {
                    let n = *not_selected as u64;
                    write!(f, " ({n} more step{} left out by --steps)", plural(n))?;
                }
                write!(f, ": {matched} rows match")?;
                if *bitwise {
                    f.write_str(", every one bitwise identical")?;
                }
                Ok(())
            }
        }
    }
}

/// Reasons joined with `sep`, as one line of text.
pub fn join(v: &[Reason], sep: &str) -> String {
    let t: Vec<String> = v.iter().map(|r| r.to_string()).collect();
    t.join(sep)
}

written_as_words!(Reason, Reason::Read);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_says_which_inputs_differ() {
        assert_eq!(differing_input_words(&[], None), "a differing input");
        assert_eq!(
            differing_input_words(&[2], None),
            "a differing input: input 2"
        );
        assert_eq!(
            differing_input_words(&[0, 2], None),
            "differing inputs: 0 and 2"
        );
        // Inputs that are parameters are named (their `Input parameters:`
        // line), the others not.
        assert_eq!(
            differing_input_words(&[1], Some(";blocks.1.fc1.lora_A")),
            "a differing input: input 1, the parameter blocks.1.fc1.lora_A"
        );
        assert_eq!(
            differing_input_words(&[0], Some(";blocks.1.fc1.lora_A")),
            "a differing input: input 0"
        );
        assert_eq!(
            differing_input_words(&[0, 1, 2], Some(";w;b")),
            "differing inputs: 0, 1 and 2; input 1 is the parameter w; input 2 is the parameter b"
        );
        assert_eq!(
            differing_input_words(&[0, 1, 2, 3, 7], None),
            "differing inputs: 0, 1, 2, 3, …"
        );
    }

    fn names() -> (String, String) {
        ("A".into(), "B".into())
    }

    /// Each reason has the words the verdict lines had as text.
    #[test]
    fn reasons_have_the_words_of_the_verdict_lines() {
        let cases = [
            (
                Reason::InputError {
                    errors: vec![Message::NoParts, Message::Text("x".into())],
                },
                "input error: no parts given: actdiff merge PART_DIR... -o REPORT_DIR; x",
            ),
            (
                Reason::NoRankInBoth,
                "nothing compared: no rank is present in both runs",
            ),
            (
                Reason::Incomplete {
                    rank: 2,
                    side: "run2",
                    path: "b/rank_2_activations.log".into(),
                    why: Message::CountMismatch {
                        declared: 5,
                        parsed: 4,
                    },
                },
                "incomplete input: rank 2 run2 (b/rank_2_activations.log) declares 5 ops, parsed 4",
            ),
            (
                Reason::ReplicasDiffer {
                    name: "B".into(),
                    count: 1,
                    first: Box::new(crate::layout::ReplicaMismatch {
                        rank: 3,
                        against: 2,
                        key: "m/op_1_mm".into(),
                        path: "b/rank_3_activations.log".into(),
                        line: 40,
                        field: "L2 norm".into(),
                    }),
                },
                "replicas differ in B: 1 value of replicated results differ across the ranks combined; first rank 3 at `m/op_1_mm` (L2 norm, line 40) against rank 2",
            ),
            (
                Reason::Diverged {
                    gating: true,
                    diff: 3,
                    missing: 1,
                    only1: 0,
                    only2: 2,
                    names: names(),
                },
                "diverged: 3 diff, 1 missing, 0 only in A, 2 only in B",
            ),
            (
                Reason::Diverged {
                    gating: false,
                    diff: 1,
                    missing: 0,
                    only1: 0,
                    only2: 0,
                    names: names(),
                },
                "differences, none gating: 1 diff, 0 only in A, 0 only in B",
            ),
            (
                Reason::Ignored { count: 1 },
                "1 ignored difference (shown, not gating)",
            ),
            (
                Reason::Unsynced { count: 2 },
                "2 unsynced collective rows differ (shown, not gating)",
            ),
            (
                Reason::Unsynced { count: 1 },
                "1 unsynced collective row differs (shown, not gating)",
            ),
            (
                Reason::Fused {
                    count: 2,
                    compilers: vec![],
                    modules: false,
                },
                "2 ops fused away by the compiler (rows only in one run; shown, not gating)",
            ),
            (
                Reason::Fused {
                    count: 1,
                    compilers: vec!["inductor".into()],
                    modules: false,
                },
                "1 op fused away by inductor (rows only in one run; shown, not gating)",
            ),
            (
                Reason::Fused {
                    count: 3,
                    compilers: vec!["aot_eager".into()],
                    modules: true,
                },
                "3 module outputs not recorded in compiled code (aot_eager: module hooks do not run there) (rows only in one run; shown, not gating)",
            ),
            (
                Reason::RanksOnOneSide {
                    only1: vec![],
                    only2: vec![4, 5],
                    names: names(),
                },
                "ranks on one side only: none only in A, [4, 5] only in B",
            ),
            (
                Reason::RanksMissing {
                    name: "A".into(),
                    ranks: vec![1],
                    world_size: 2,
                },
                "incomplete input: A has no log of rank 1, though its logs say `World size: 2`: a rank that crashed, or a log not copied?",
            ),
            (
                Reason::NoDivergence { matched: 7 },
                "no divergence beyond tolerance: 7 rows match",
            ),
        ];
        for (r, words) in cases {
            assert_eq!(r.to_string(), words);
        }
    }

    /// A step series' reasons have the words of its verdict lines.
    #[test]
    fn step_reasons_have_the_words_of_the_verdict_lines() {
        let cases = [
            (
                Reason::FirstDivergingStep {
                    agree: vec![3],
                    agree_bitwise: false,
                    not_selected_before: 0,
                    not_compared_before: vec![],
                    step: 4,
                    headline: Some("rank 1 diverges first at `x`.".into()),
                    report: "step_4/index.html".into(),
                },
                "the runs agree at step 3; step 4 diverges first: rank 1 diverges first at `x` (report: step_4/index.html)",
            ),
            (
                Reason::StepsPerRank {
                    ranks: vec![RankStep { rank: 0, step: 4 }, RankStep { rank: 1, step: 3 }],
                    compared: vec![0, 1],
                },
                "first diverging step per rank: rank 0 at step 4, rank 1 at step 3",
            ),
            (
                Reason::StepsOnlyIn {
                    name: "A".into(),
                    steps: vec![6, 7],
                },
                "steps only in A: 6-7",
            ),
            (
                Reason::AtStep {
                    step: 2,
                    reasons: vec![Reason::NoRankInBoth, Reason::NoDivergence { matched: 0 }],
                },
                "step 2: nothing compared: no rank is present in both runs; no divergence beyond tolerance: 0 rows match",
            ),
            (
                Reason::NotBitwiseFrom {
                    step: 1,
                    identical: 10,
                    with_digests: 12,
                    nongating: 0,
                },
                "step 1 is the first step not bitwise identical (10 of 12 paired rows with digests are); it agrees within the tolerance (--bitwise gates on it; shown, not gating)",
            ),
            (
                Reason::NotBitwiseFrom {
                    step: 1,
                    identical: 797,
                    with_digests: 798,
                    nongating: 1,
                },
                "step 1 is the first step not bitwise identical (797 of 798 paired rows with digests are); the row that differs does not gate (unsynced collectives, ignored or fused-away ops; shown, not gating)",
            ),
            (
                Reason::NotBitwiseFrom {
                    step: 1,
                    identical: 9,
                    with_digests: 12,
                    nongating: 1,
                },
                "step 1 is the first step not bitwise identical (9 of 12 paired rows with digests are); 1 of them does not gate (unsynced collectives, ignored or fused-away ops), the rest agree within the tolerance (--bitwise gates on them; shown, not gating)",
            ),
            (
                Reason::FirstNonFinite {
                    step: 4,
                    rank: 1,
                    name: "B".into(),
                    key: "ln/op_0_output".into(),
                },
                "B's values are first non-finite (NaN or Inf) at step 4, rank 1, at `ln/op_0_output` (finite in the other run)",
            ),
            (
                Reason::NanInBoth {
                    step: Some(4),
                    rank: 0,
                    key: "ln/op_0_output".into(),
                },
                "both runs' values are NaN from `ln/op_0_output` on (rank 0, step 4): NaN agrees with NaN (the reference's rule), so a change made after that cannot be seen in those values; --nan-is-diff counts NaN against NaN as a difference",
            ),
            (
                Reason::NonFiniteLossesAgree { step: 4 },
                "both runs recorded a NaN or Inf loss from step 4 on, and step 4 agrees: NaN agrees with NaN (the reference's rule), so a change made after both runs went non-finite cannot be seen in their NaN values; --nan-is-diff counts NaN against NaN as a difference",
            ),
            (
                Reason::LossesDiffer {
                    step: 4,
                    loss1: 1.25,
                    loss2: 2.25,
                },
                "the recorded losses differ at step 4 (1.25 vs 2.25) although every captured row of that step agrees within the tolerance (shown, not gating)",
            ),
            (
                Reason::UpdateThroughCollective {
                    step: 4,
                    ranks: vec![0, 1, 3],
                    from: vec![2],
                },
                "at step 4, ranks 0, 1 and 3 differ only after the optimizer step (their forward outputs and gradients agree) while rank 2 differs before it: most likely its gradients reaching them through the gradient all-reduce or reduce-scatter (a rank's gradient records at level=\"modules\" are its own, before it)",
            ),
            (
                Reason::UncapturedBefore {
                    step: 3,
                    from: 2,
                    to: 2,
                },
                "step 2, before step 3, was captured in neither run: the runs may part there first; capture it to tell",
            ),
            (
                Reason::UncapturedBefore {
                    step: 300,
                    from: 201,
                    to: 299,
                },
                "steps 201-299, before step 300, were captured in neither run: the runs may part there first; capture them to tell",
            ),
            (
                Reason::UpdateOnly {
                    step: 30,
                    inexact: false,
                    compiled: false,
                    digests: true,
                    shapes: None,
                },
                "step 30's forward outputs and gradients agree, and its parameters differ after the optimizer step: the update itself differs (the learning rate or its schedule, gradient clipping, weight decay, the optimizer's state or settings, a loss scale); re-capture step 30 at level=\"ops\" to name the op",
            ),
            (
                Reason::UpdateOnly {
                    step: 2,
                    inexact: true,
                    compiled: true,
                    digests: true,
                    shapes: None,
                },
                "step 2's forward outputs (of the modules that did not run compiled: the others' are not recorded) and gradients agree within the tolerance, not exactly, and its parameters differ after the optimizer step: either the optimizer magnifies the gradients' small differences (Adam's update divides each gradient by its own running scale, so a gradient near zero that differs in its last digits moves its parameter by another step; compare with --bitwise to see them), or the update itself differs (the learning rate or its schedule, gradient clipping, weight decay, the optimizer's state or settings, a loss scale); re-capture step 2 at level=\"ops\" to name the op",
            ),
            (
                Reason::UpdateOnly {
                    step: 1,
                    inexact: false,
                    compiled: false,
                    digests: true,
                    shapes: Some(("tok/op_2_weight".into(), ["[64, 32]".into(), "[32, 32]".into()])),
                },
                "step 1's forward outputs and gradients agree, and its parameters after the optimizer step have other shapes (`tok/op_2_weight`: [64, 32] → [32, 32]): one run records each rank's shard of a parameter (FSDP, tensor parallelism) and the other whole parameters, which level=\"modules\" does not combine, so their values are not compared; capture both runs at level=\"ops\" and compare them with --layouts, which combines FSDP2's parameter shards",
            ),
            (
                Reason::StepsOnlyIn {
                    name: "dense".into(),
                    steps: (1..=2000).filter(|s| s % 100 != 0).collect(),
                },
                "steps only in dense: 1-99, 101-199, 201-299, 301-399, 401-499, 501-599, 601-699, 701-799, 801-899, 901-999, 1001-1099, 1101-1199 and 792 more steps",
            ),
            (
                Reason::CommonStepsAgree {
                    steps: vec![10, 20, 21, 22, 50],
                    matched: 69,
                    bitwise: true,
                },
                "the runs agree in every step both have (5 steps: 10, 20-22, 50): 69 rows match, every one bitwise identical; the steps only one run has gate (exit status 1): --steps 10,20-22,50 compares only the steps both have",
            ),
            (
                Reason::CommonStepsAgree {
                    steps: (1..=40).map(|s| 2 * s).collect(),
                    matched: 9,
                    bitwise: false,
                },
                "the runs agree in every step both have (40 steps: 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24 and 28 more steps): 9 rows match; the steps only one run has gate (exit status 1): --steps with the steps both have (summary.json's `steps`) compares only those",
            ),
            (
                Reason::NoDivergenceOverSteps {
                    steps: 1,
                    matched: 9,
                    not_selected: 0,
                    bitwise: false,
                },
                "no divergence beyond tolerance over 1 step: 9 rows match",
            ),
            (
                Reason::NoDivergenceOverSteps {
                    steps: 1,
                    matched: 9,
                    not_selected: 5,
                    bitwise: true,
                },
                "no divergence beyond tolerance over 1 step (5 more steps left out by --steps): 9 rows match, every one bitwise identical",
            ),
            (
                Reason::FirstDivergingStep {
                    agree: vec![],
                    agree_bitwise: false,
                    not_selected_before: 4,
                    not_compared_before: vec![],
                    step: 5,
                    headline: None,
                    report: "step_5/index.html".into(),
                },
                "step 5 diverges first of the steps compared (4 earlier steps left out by --steps) (report: step_5/index.html)",
            ),
            (
                Reason::FirstDivergingStep {
                    agree: vec![1, 2, 3, 4],
                    agree_bitwise: false,
                    not_selected_before: 0,
                    not_compared_before: vec![5],
                    step: 6,
                    headline: None,
                    report: "step_6/index.html".into(),
                },
                "the runs agree from step 1 through step 4; step 6 diverges first of the steps judged (step 5 before it could not be compared, so the runs may part there first) (report: step_6/index.html)",
            ),
        ];
        for (r, words) in cases {
            assert_eq!(r.to_string(), words);
        }
    }

    /// Written as its words and read back as them, equal to the reason
    /// written.
    #[test]
    fn written_as_its_words_and_read_back_as_them() {
        let v = vec![
            Reason::Ignored { count: 2 },
            Reason::StepsOnlyIn {
                name: "A".into(),
                steps: vec![1],
            },
        ];
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(
            json,
            r#"["2 ignored differences (shown, not gating)","steps only in A: 1"]"#
        );
        let back: Vec<Reason> = serde_json::from_str(&json).unwrap();
        assert!(matches!(back[0], Reason::Read(_)));
        assert_eq!(back, v);
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
    }
}

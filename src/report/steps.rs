//! The outputs of a step-series comparison (two dump folders of `step_S/`
//! folders, compared by `run::steps`): the step facts of `summary.json`
//! ([`StepSeries`]), the verdict sentence that opens the terminal and the
//! index ("the runs agree through step 4; step 5 diverges first ..."), the
//! series index page (a step × rank strip and the two loss curves) and the
//! terminal summary. Each step's own report is an ordinary one, in
//! `step_S/`.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::reasons::Reason;
use super::summary::{RankSummary, Summary};
use super::{files, ReportError, ReportOptions};
use crate::exit_codes;

/// The step facts of a step-series `summary.json`, at its top level.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StepSeries {
    /// The steps compared (both runs have them), ascending.
    pub steps: Vec<u64>,
    /// Steps only run 1 has (each gates, as a rank only one run has).
    pub steps_only1: Vec<u64>,
    /// Steps only run 2 has.
    pub steps_only2: Vec<u64>,
    /// Steps either run has that `--steps` left out (not compared; the
    /// verdict covers the compared steps only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps_not_selected: Vec<u64>,
    /// Compared steps that could not be judged in full (an input error or
    /// incomplete input, and no gating row found): nothing is known of
    /// whether they agree. One that comes before `first_diverging_step`
    /// may be where the runs part first: the verdict says so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps_not_compared: Vec<u64>,
    /// The first step, in step order, with a gating row on some rank;
    /// `null` when every compared step agrees (or could not be judged:
    /// `steps_not_compared`).
    pub first_diverging_step: Option<u64>,
    /// Each rank's own first diverging step (ranks that never diverge are
    /// absent), by run-1 rank.
    pub first_diverging_step_by_rank: Vec<RankStep>,
    /// One entry per compared step: its report, counts and verdict.
    pub step_results: Vec<StepResult>,
    /// The recorded losses of the steps one run only has (the loss curves
    /// draw them: a run a baseline check stopped early against the whole
    /// baseline); absent when none was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub one_sided_losses: Vec<StepLoss>,
}

/// The loss a run recorded at a step only it has (the lowest rank's
/// `Loss:` header line).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct StepLoss {
    /// The step.
    pub step: u64,
    /// Run 1's loss (`None`: run 1 lacks the step, or recorded none).
    pub loss1: Option<f64>,
    /// Run 2's loss.
    pub loss2: Option<f64>,
}

/// A rank's first diverging step.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RankStep {
    /// Run 1's rank number.
    pub rank: u32,
    /// The step.
    pub step: u64,
}

/// One compared step of a series.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StepResult {
    /// The step number.
    pub step: u64,
    /// Its report's index page, relative to the series' report folder
    /// (`step_5/index.html`).
    pub report: String,
    /// The step's exit status alone.
    pub exit_status: i32,
    /// Gating rows over its ranks.
    pub gating: u64,
    /// Result rows over its ranks that are not `match`.
    pub diverging: u64,
    /// Its first diverging rank, if any.
    pub first_rank: Option<u32>,
    /// Where it diverges first, as the step's headline says it ("rank 1
    /// diverges first at `…`"); absent when it agrees.
    pub headline: Option<String>,
    /// Run 1's and run 2's loss at this step (the logs' `Loss:` header,
    /// the lowest rank that has one), when recorded.
    pub loss1: Option<f64>,
    /// Run 2's loss.
    pub loss2: Option<f64>,
    /// The step's reasons for its exit status (its verdict lines).
    pub verdict: Vec<Reason>,
    /// Paired rows over its ranks that differ (`diff`): in a step that
    /// agrees, rows that do not gate (unsynced collectives, ignored or
    /// fused-away ops).
    #[serde(default)]
    pub diff: u64,
    /// Its paired rows with equal digests and with digests on both sides,
    /// over its ranks (`[identical, with_digests]`); absent when no rank's
    /// logs have digests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bitwise: Option<[u64; 2]>,
    /// Ranks only run 1 has at this step (each gates).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks_only1: Vec<u32>,
    /// Ranks only run 2 has at this step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks_only2: Vec<u32>,
}

impl StepResult {
    /// The result of step `step` from its comparison's summary, its report
    /// in folder `dir` (relative to the series' report folder).
    pub fn of(step: u64, dir: &str, s: &Summary) -> StepResult {
        let loss = |side: fn(&RankSummary) -> Option<f64>| s.ranks.iter().find_map(side);
        StepResult {
            step,
            report: format!("{dir}/{}", files::INDEX),
            exit_status: s.exit_status,
            gating: s.counts.gating,
            diverging: s.counts.diverging(),
            diff: s.counts.diff,
            first_rank: s
                .ranks
                .iter()
                .find(|r| r.first_divergence.is_some())
                .map(|r| r.rank)
                .or_else(|| s.ranks_only1.iter().chain(&s.ranks_only2).min().copied()),
            headline: step_headline(s),
            loss1: loss(|r| r.run1.loss),
            loss2: loss(|r| r.run2.loss),
            verdict: s.verdict.clone(),
            bitwise: s
                .ranks
                .iter()
                .filter_map(|r| r.bitwise)
                .map(|b| [b.identical, b.with_digests])
                .reduce(|a, b| [a[0] + b[0], a[1] + b[1]]),
            ranks_only1: s.ranks_only1.clone(),
            ranks_only2: s.ranks_only2.clone(),
        }
    }
}

/// Where step `s` diverges first: the ranks one run lacks at this step
/// (they gate, as a rank only one run has), then the step's headline
/// ([`Summary::headline`]); `None` when it agrees.
fn step_headline(s: &Summary) -> Option<String> {
    let mut parts: Vec<String> = [(&s.ranks_only1, &s.name1), (&s.ranks_only2, &s.name2)]
        .into_iter()
        .filter(|(only, _)| !only.is_empty())
        .map(|(only, name)| format!("{} only in {name}", crate::report::summary::rank_word(only)))
        .collect();
    parts.extend(Summary::headline(&s.ranks, &s.name1, &s.name2));
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Prefixes every report link of `r` (its pages and the `page` of each
/// row it refers to) with `dir/`, so that links in a series' summary lead
/// into the step's folder.
pub fn rebase_links(r: &mut RankSummary, dir: &str) {
    for p in &mut r.pages {
        p.file = format!("{dir}/{}", p.file);
    }
    // Rows are referred to from many places (first divergence, causes,
    // per-phase firsts, non-finite values): every object with a `page` and
    // an `anchor` is one, wherever the summary grows another.
    let mut v = serde_json::to_value(&*r).expect("a rank summary serialises");
    rebase_value(&mut v, dir);
    *r = serde_json::from_value(v).expect("a rebased rank summary reads back");
}

fn rebase_value(v: &mut serde_json::Value, dir: &str) {
    match v {
        serde_json::Value::Object(m) => {
            if m.contains_key("anchor") {
                if let Some(serde_json::Value::String(p)) = m.get_mut("page") {
                    if !p.is_empty() {
                        *p = format!("{dir}/{p}");
                    }
                }
            }
            for (k, x) in m.iter_mut() {
                if k != "pages" {
                    rebase_value(x, dir);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| rebase_value(x, dir)),
        _ => {}
    }
}

/// The series' reasons for its exit status (its verdict lines): first
/// the sentence that answers "which step, then which op", then why the
/// exit status is what it is.
pub fn verdict(s: &Summary, series: &StepSeries) -> Vec<Reason> {
    let mut lines = Vec::new();
    if !s.input_errors.is_empty() {
        lines.push(Reason::InputError {
            errors: s.input_errors.clone(),
        });
    }
    lines.extend(first_step_sentence(series));
    lines.extend(uncaptured_before(series));
    lines.extend(common_steps_agree(s, series));
    match eval_after_update(s, series) {
        Some(eval) => lines.push(eval),
        None => lines.extend(unseen_before(s, series)),
    }
    lines.extend(update_only(s, series));
    lines.extend(buffer_only(s, series));
    if !series.first_diverging_step_by_rank.is_empty() && s.ranks.iter().any(|r| r.rank != 0) {
        let mut compared: Vec<u32> = s.ranks.iter().map(|r| r.rank).collect();
        compared.sort_unstable();
        compared.dedup();
        lines.push(Reason::StepsPerRank {
            ranks: series.first_diverging_step_by_rank.clone(),
            compared,
        });
    }
    for (name, steps) in [
        (&s.name1, &series.steps_only1),
        (&s.name2, &series.steps_only2),
    ] {
        if !steps.is_empty() {
            lines.push(Reason::StepsOnlyIn {
                name: name.clone(),
                steps: steps.clone(),
            });
        }
    }
    // Steps with an input error or incomplete input, judged or not (under
    // --allow-incomplete a cut log's lost rows are one-sided and gate:
    // the step says why). A step not compared for input errors alone is
    // left to the steps line ("4 not compared: steps 1-4") and the
    // errors' own lines on stderr (trial 17 L4: three lines a step).
    let errors_only = |r: &StepResult| {
        series.steps_not_compared.contains(&r.step)
            && r.verdict
                .iter()
                .all(|v| matches!(v, Reason::InputError { .. }))
    };
    let bad = series
        .step_results
        .iter()
        .filter(|r| {
            r.exit_status == exit_codes::INPUT_ERROR
                || r.exit_status == exit_codes::INCOMPLETE
                || r.verdict
                    .iter()
                    .any(|v| matches!(v, Reason::Incomplete { .. } | Reason::RanksMissing { .. }))
        })
        .filter(|r| !errors_only(r))
        .map(|r| Reason::AtStep {
            step: r.step,
            // A step not compared did not diverge: the rows a cut log lost
            // are one-sided there (trial 65: "incomplete input ...;
            // diverged: 0 diff, 31 only in a").
            reasons: r
                .verdict
                .iter()
                .filter(|v| {
                    !(series.steps_not_compared.contains(&r.step)
                        && matches!(v, Reason::Diverged { .. }))
                })
                .cloned()
                .collect(),
        });
    lines.extend(bad);
    if let Some(first) = series.first_diverging_step {
        let after: Vec<u64> = series
            .step_results
            .iter()
            .filter(|r| r.step > first && r.exit_status == exit_codes::INCOMPLETE)
            .map(|r| r.step)
            .collect();
        if !after.is_empty() {
            lines.push(Reason::IncompleteAfterDivergence {
                first,
                steps: after,
            });
        }
    }
    lines.extend(super::reasons::not_gating(&s.counts, &s.ranks));
    lines.extend(not_bitwise_from(series));
    lines.extend(losses_differ(series));
    lines.extend(first_nonfinite(s));
    // Where both runs' values turn NaN, or (without such a row) their
    // recorded losses.
    match super::reasons::nan_in_both(&s.ranks) {
        Some(nan) => lines.push(nan),
        None => lines.extend(nonfinite_losses_agree(series)),
    }
    if s.exit_status == exit_codes::OK {
        lines.push(Reason::NoDivergenceOverSteps {
            steps: series.steps.len(),
            matched: s.counts.matched,
            not_selected: series.steps_not_selected.len(),
            bitwise: all_bitwise(s, series),
        });
        lines.extend(super::reasons::not_captured(&s.ranks));
    }
    // Agreeing, or a first diverging step named by an origin whose inputs'
    // hashes agree: what hashes cannot see (trial 64).
    let first = series.first_diverging_step;
    let by_hashes = s
        .ranks
        .iter()
        .any(|r| r.step.is_some() && r.step == first && super::reasons::origin_by_hashes(r));
    if s.exit_status == exit_codes::OK || by_hashes {
        lines.extend(super::reasons::compared_without_digests(
            &s.ranks,
            (&s.name1, &s.name2),
        ));
    }
    lines
}

/// Every matching row of every compared step is bitwise identical: each
/// step's digests all equal, and as many as the rows that match.
fn all_bitwise(s: &Summary, series: &StepSeries) -> bool {
    let identical: u64 = series
        .step_results
        .iter()
        .map(|r| match r.bitwise {
            Some([same, all]) if same == all => same,
            _ => 0,
        })
        .sum();
    s.counts.matched > 0 && identical == s.counts.matched
}

/// [`Reason::CommonStepsAgree`]: no step diverges, every compared step
/// agrees, and one run has steps the other lacks (which gate).
fn common_steps_agree(s: &Summary, series: &StepSeries) -> Option<Reason> {
    let one_sided = !series.steps_only1.is_empty() || !series.steps_only2.is_empty();
    let all_agree = series
        .step_results
        .iter()
        .all(|r| r.exit_status == exit_codes::OK);
    (one_sided
        && all_agree
        && series.first_diverging_step.is_none()
        && !series.step_results.is_empty()
        && s.input_errors.is_empty())
    .then(|| Reason::CommonStepsAgree {
        steps: series.step_results.iter().map(|r| r.step).collect(),
        matched: s.counts.matched,
        bitwise: all_bitwise(s, series),
    })
}

/// The first step not bitwise identical ([`Reason::NotBitwiseFrom`]),
/// when it comes before the first diverging step, or no step diverges.
fn not_bitwise_from(series: &StepSeries) -> Option<Reason> {
    let r = series
        .step_results
        .iter()
        .find(|r| r.bitwise.is_some_and(|[same, all]| same < all))?;
    let [identical, with_digests] = r.bitwise?;
    (r.exit_status == exit_codes::OK && series.first_diverging_step.is_none_or(|f| r.step < f))
        .then_some(Reason::NotBitwiseFrom {
            step: r.step,
            identical,
            with_digests,
            nongating: r.diff,
        })
}

/// The first step that agrees while its recorded losses differ beyond
/// [`super::reasons::LOSS_RTOL`] ([`Reason::LossesDiffer`]).
fn losses_differ(series: &StepSeries) -> Option<Reason> {
    series.step_results.iter().find_map(|r| {
        let (a, b) = (r.loss1?, r.loss2?);
        // One NaN against a number differs; two NaNs do not.
        let differ = match crate::matcher::compare::rel_diff(a, b) {
            Some(rel) => rel > super::reasons::LOSS_RTOL,
            None => a.is_nan() != b.is_nan(),
        };
        (r.exit_status == exit_codes::OK && differ).then_some(Reason::LossesDiffer {
            step: r.step,
            loss1: a,
            loss2: b,
        })
    })
}

/// The first (step, rank), in that order, where one run's values hold NaN
/// or Inf and the other's are finite ([`Reason::FirstNonFinite`]; run 1's
/// first on a tie).
fn first_nonfinite(s: &Summary) -> Option<Reason> {
    s.ranks
        .iter()
        .filter_map(|r| {
            let c = &r.root_causes;
            let (name, row) = match (&c.first_nonfinite_only1, &c.first_nonfinite_only2) {
                (Some(a), Some(b)) if b.index < a.index => (&s.name2, b),
                (Some(a), _) => (&s.name1, a),
                (None, Some(b)) => (&s.name2, b),
                (None, None) => return None,
            };
            Some((r.step?, r.rank, name, row))
        })
        .min_by_key(|(step, rank, _, _)| (*step, *rank))
        .map(|(step, rank, name, row)| Reason::FirstNonFinite {
            step,
            rank,
            name: name.clone(),
            key: row.key().to_string(),
        })
}

/// The first agreeing step from which both runs' recorded losses are NaN
/// or Inf ([`Reason::NonFiniteLossesAgree`]).
fn nonfinite_losses_agree(series: &StepSeries) -> Option<Reason> {
    let nonfinite = |r: &StepResult| {
        r.loss1.is_some_and(|l| !l.is_finite()) && r.loss2.is_some_and(|l| !l.is_finite())
    };
    series
        .step_results
        .iter()
        .find(|r| nonfinite(r) && r.exit_status == exit_codes::OK)
        .map(|r| Reason::NonFiniteLossesAgree { step: r.step })
}

/// Up to this many ranks with a first diverging step, the verdict names
/// each ("rank 0 at step 6, rank 1 at step 5"); above it, it groups them
/// by step ([`rank_steps_sentence`]).
pub const RANK_STEPS_LISTED: usize = 8;

/// The most step groups [`rank_steps_sentence`] names; the rest are
/// counted ("and 2 more steps (40 ranks)").
const RANK_STEP_GROUPS: usize = 3;

/// Each rank's first diverging step in one sentence, of any length of
/// `by_rank` (`ranks`: every compared rank, ascending). Up to
/// [`RANK_STEPS_LISTED`] ranks, one by one: "first diverging step per
/// rank: rank 0 at step 6, rank 1 at step 5"; above, ranks grouped by
/// their first diverging step in step order, at most `RANK_STEP_GROUPS` (3)
/// groups named, as compact rank lists: "first diverging step per rank:
/// ranks 0–13, 15–17, … (1900 ranks) at step 1; ranks 14 and 18 at step 2;
/// and 1 more step (3 ranks); ranks 20–47 agree in every step compared".
pub fn rank_steps_sentence(by_rank: &[RankStep], ranks: &[u32]) -> String {
    let head = "first diverging step per rank: ";
    if by_rank.len() <= RANK_STEPS_LISTED {
        let per: Vec<String> = by_rank
            .iter()
            .map(|r| format!("rank {} at step {}", r.rank, r.step))
            .collect();
        return format!("{head}{}", per.join(", "));
    }
    let mut groups: std::collections::BTreeMap<u64, Vec<u32>> = Default::default();
    for r in by_rank {
        groups.entry(r.step).or_default().push(r.rank);
    }
    let mut parts: Vec<String> = Vec::new();
    for (step, g) in groups.iter_mut().take(RANK_STEP_GROUPS) {
        g.sort_unstable();
        parts.push(format!(
            "{} at step {step}",
            crate::report::summary::rank_word(g)
        ));
    }
    if groups.len() > RANK_STEP_GROUPS {
        let more = groups.len() - RANK_STEP_GROUPS;
        let n: usize = groups.values().skip(RANK_STEP_GROUPS).map(Vec::len).sum();
        parts.push(format!(
            "and {more} more step{} ({n} rank{})",
            if more == 1 { "" } else { "s" },
            if n == 1 { "" } else { "s" }
        ));
    }
    let diverging: std::collections::HashSet<u32> = by_rank.iter().map(|r| r.rank).collect();
    let agree: Vec<u32> = ranks
        .iter()
        .copied()
        .filter(|r| !diverging.contains(r))
        .collect();
    if !agree.is_empty() {
        parts.push(format!(
            "{} agree{} in every step compared",
            crate::report::summary::rank_word(&agree),
            if agree.len() == 1 { "s" } else { "" }
        ));
    }
    format!("{head}{}", parts.join("; "))
}

/// "the runs agree through step 4; step 5 diverges first: rank 1 diverges
/// first at `…/op_0_mm` (a differing input)" ([`Reason::FirstDivergingStep`]),
/// or `None` when every step agrees.
pub fn first_step_sentence(series: &StepSeries) -> Option<Reason> {
    let first = series.first_diverging_step?;
    let agreeing: Vec<&StepResult> = series
        .step_results
        .iter()
        .filter(|r| r.step < first && r.exit_status == exit_codes::OK)
        .collect();
    // Trial 20 F6, trial 28: "are these runs bitwise equal up to the step
    // where they part?" was asked and not answered.
    let agree_bitwise = !agreeing.is_empty()
        && agreeing.iter().all(|r| {
            matches!(r.bitwise, Some([same, with]) if same == with && with > 0) && r.diff == 0
        });
    let agree: Vec<u64> = agreeing.iter().map(|r| r.step).collect();
    let r = series.step_results.iter().find(|r| r.step == first)?;
    Some(Reason::FirstDivergingStep {
        agree,
        agree_bitwise,
        not_selected_before: series
            .steps_not_selected
            .iter()
            .filter(|s| **s < first)
            .count(),
        // Steps before it not judged: their comparison failed, or one run
        // lacks them (a capture that did not finish).
        not_compared_before: {
            let mut v: Vec<u64> = series
                .steps_not_compared
                .iter()
                .chain(&series.steps_only1)
                .chain(&series.steps_only2)
                .copied()
                .filter(|s| *s < first)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        },
        step: first,
        headline: r.headline.clone(),
        report: r.report.clone(),
    })
}

/// [`Reason::UncapturedBefore`]: the steps right before the first
/// diverging step that neither run has (after the last step either run
/// has, compared, left out by `--steps` or not), or `None`.
fn uncaptured_before(series: &StepSeries) -> Option<Reason> {
    let step = series.first_diverging_step?;
    let last = series
        .steps
        .iter()
        .chain(&series.steps_only1)
        .chain(&series.steps_only2)
        .chain(&series.steps_not_selected)
        .chain(&series.steps_not_compared)
        .copied()
        .filter(|s| *s < step)
        .max()
        .unwrap_or(0);
    (step > last + 1).then_some(Reason::UncapturedBefore {
        step,
        from: last + 1,
        to: step - 1,
    })
}

/// [`Reason::UnseenBefore`]: a module-level series whose first diverging
/// step first differs in a forward record, right after a compared step
/// that agrees, parameters after its optimizer included. What changed
/// them in between (a `.data` edit after `optimizer.step()`, trial 24
/// F1) is not recorded at that level, and "agree through step 3" then
/// hid a change made in step 3. `None` otherwise.
fn unseen_before(s: &Summary, series: &StepSeries) -> Option<Reason> {
    let step = series.first_diverging_step?;
    let previous = step.checked_sub(1)?;
    let agreed = series
        .step_results
        .iter()
        .any(|r| r.step == previous && r.exit_status == exit_codes::OK);
    let mut forward_first = s.ranks.iter().filter(|r| {
        r.step == Some(step)
            && r.run1.level == crate::logformat::CaptureLevel::Modules
            && r.first_divergence.as_ref().is_some_and(|f| {
                // (A record of one run only is no change to a value both
                // runs recorded: an evaluation pass in one run, trial 70
                // F2; the one-sided records' words say it.)
                f.phase == "forward"
                    && !f.nan_against_nan
                    && !matches!(
                        f.status,
                        crate::matcher::Status::Only1 | crate::matcher::Status::Only2
                    )
            })
    });
    let first = forward_first.next()?;
    // The random state as the first such rank's logs say it.
    use crate::report::reasons::StepRandom;
    let random = StepRandom::of(first.run1.rng_state, first.run2.rng_state);
    agreed.then_some(Reason::UnseenBefore {
        step,
        previous,
        random,
    })
}

/// The first diverging step and the first differing record (run 2's key)
/// of its first rank, when every rank that diverges at that step has
/// `this`; `None` otherwise.
fn at_first_step_all(
    s: &Summary,
    series: &StepSeries,
    this: fn(&RankSummary) -> bool,
) -> Option<(u64, String)> {
    let first = series.first_diverging_step?;
    let mut key = None;
    for r in s
        .ranks
        .iter()
        .filter(|r| r.step == Some(first) && r.first_divergence.is_some())
    {
        if !this(r) {
            return None;
        }
        key.get_or_insert_with(|| r.first_divergence.as_ref().and_then(|f| f.key2.clone()));
    }
    Some((first, key.flatten()?))
}

/// At `level="modules"`: [`Reason::EvalAfterUpdate`] when every rank
/// that diverges at the first diverging step diverges first at a forward
/// record after the step's optimizer records
/// ([`RankSummary::first_divergence_after_update`]), named by the first
/// such rank's record; `None` otherwise.
fn eval_after_update(s: &Summary, series: &StepSeries) -> Option<Reason> {
    let (step, key) = at_first_step_all(s, series, |r| r.first_divergence_after_update)?;
    Some(Reason::EvalAfterUpdate { step, key })
}

/// At `level="modules"`: [`Reason::BufferOnly`] when every rank that
/// diverges at the first diverging step diverges first at a persistent
/// buffer's record ([`RankSummary::first_divergence_buffer`]), named by
/// the first such rank's record; `None` otherwise.
fn buffer_only(s: &Summary, series: &StepSeries) -> Option<Reason> {
    let (step, key) = at_first_step_all(s, series, |r| r.first_divergence_buffer)?;
    Some(Reason::BufferOnly { step, key })
}

/// At `level="modules"`: [`Reason::UpdateOnly`] when every rank that
/// diverges at the first diverging step has its update alone changed
/// ([`RankSummary::update_changed_alone`]); [`Reason::UpdateThroughCollective`] for the
/// earliest step where ranks first diverge with their update alone
/// changed while others diverge before the optimizer step there, or
/// diverged at an earlier step (DDP: one rank's change reaches the others
/// through the gradient all-reduce). `None` otherwise.
fn update_only(s: &Summary, series: &StepSeries) -> Option<Reason> {
    let first = series.first_diverging_step?;
    // The module-level ranks that diverge, by step, and whether their
    // update alone changed: one pass over the series' ranks (R × S
    // entries), not one per step.
    let mut by_step: std::collections::BTreeMap<u64, Vec<(u32, bool)>> = Default::default();
    for r in &s.ranks {
        if r.run1.level != crate::logformat::CaptureLevel::Modules || r.first_divergence.is_none() {
            continue;
        }
        if let Some(step) = r.step {
            by_step
                .entry(step)
                .or_default()
                .push((r.rank, r.update_changed_alone()));
        }
    }
    if by_step.get(&first)?.iter().all(|&(_, alone)| alone) {
        let at_first: Vec<&RankSummary> = s
            .ranks
            .iter()
            .filter(|r| {
                r.step == Some(first)
                    && r.first_divergence.is_some()
                    && r.run1.level == crate::logformat::CaptureLevel::Modules
            })
            .collect();
        let (mut inexact, mut compiled, mut digests) = (false, false, true);
        for r in &at_first {
            inexact |= r.inexact_before_optimizer;
            compiled |= r.run1.compiled.is_some() || r.run2.compiled.is_some();
            digests &= r.bitwise.is_some();
        }
        // The first rank's first differing record (run 2's key) and its
        // dims, when every rank's has other dims in the two runs.
        let shapes = at_first
            .iter()
            .map(|r| {
                let f = r.first_divergence.as_ref()?;
                Some((f.key2.clone().or(f.key1.clone())?, f.shapes.clone()?))
            })
            .collect::<Option<Vec<_>>>()
            .and_then(|v| v.into_iter().next());
        return Some(Reason::UpdateOnly {
            step: first,
            inexact,
            compiled,
            digests,
            shapes,
        });
    }
    let first_of: std::collections::HashMap<u32, u64> = series
        .first_diverging_step_by_rank
        .iter()
        .map(|x| (x.rank, x.step))
        .collect();
    by_step.iter().find_map(|(&step, at)| {
        let mut ranks: Vec<u32> = at
            .iter()
            .filter(|&&(rank, alone)| alone && first_of.get(&rank) == Some(&step))
            .map(|&(rank, _)| rank)
            .collect();
        let mut from: Vec<u32> = at
            .iter()
            .filter(|&&(_, alone)| !alone)
            .map(|&(rank, _)| rank)
            .collect();
        ranks.sort_unstable();
        from.sort_unstable();
        from.dedup();
        (!ranks.is_empty() && !from.is_empty()).then_some(Reason::UpdateThroughCollective {
            step,
            ranks,
            from,
        })
    })
}

/// "5 steps left out by --steps (1-2, 4-6)", or `None` when `--steps` left
/// none out: said by the terminal and the series index.
pub fn not_selected_note(series: &StepSeries) -> Option<String> {
    let aside = &series.steps_not_selected;
    (!aside.is_empty()).then(|| {
        format!(
            "{} step{} left out by --steps ({})",
            aside.len(),
            if aside.len() == 1 { "" } else { "s" },
            crate::report::messages::fmt_steps(aside)
        )
    })
}

/// The terminal summary of a series: the runs, the first-step sentence,
/// one line per step that does not agree (at most 20), the other verdict
/// lines, and where the report is.
pub fn render_terminal(s: &Summary, report: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "actdiff: {} ({}) vs {} ({}), step series",
        s.name1, s.path1, s.name2, s.path2
    );
    for l in s.layout_lines() {
        let _ = writeln!(out, "{l}");
    }
    let Some(series) = &s.series else {
        return out;
    };
    // The answer first ("the runs agree through step 4; step 5 diverges
    // first ..."), as the index opens (trial 20 F4: it came after a line
    // per step); the other verdict lines close the summary.
    let (answer, rest): (Vec<&Reason>, Vec<&Reason>) =
        s.verdict.iter().partition(|v| v.answers_which_step());
    for v in answer {
        let _ = writeln!(out, "{}", v.terminal_line());
    }
    let shown: Vec<&StepResult> = series
        .step_results
        .iter()
        .filter(|r| r.exit_status != exit_codes::OK)
        .collect();
    let agree = series.step_results.len() - shown.len();
    // Steps that could not be judged (input errors, incomplete input):
    // neither agreeing nor diverging.
    let not_compared = |r: &StepResult| series.steps_not_compared.contains(&r.step);
    let refused = &series.steps_not_compared;
    let compared = series.step_results.len() - refused.len();
    let kinds: Vec<bool> = shown
        .iter()
        .filter(|r| not_compared(r))
        .map(|r| r.exit_status == exit_codes::INCOMPLETE)
        .collect();
    let refused_why = match (kinds.iter().any(|&k| k), kinds.iter().all(|&k| k)) {
        (true, true) => "incomplete input",
        (true, false) => "input errors or incomplete input",
        (false, _) => "input errors",
    };
    let _ = writeln!(
        out,
        "{compared} step{} compared ({agree} agree){}{}",
        if compared == 1 { "" } else { "s" },
        if refused.is_empty() {
            String::new()
        } else {
            format!(
                "; {} not compared: step{} {} ({}, on stderr)",
                refused.len(),
                if refused.len() == 1 { "" } else { "s" },
                crate::report::messages::fmt_steps(refused),
                refused_why
            )
        },
        not_selected_note(series)
            .map(|n| format!("; {n}"))
            .unwrap_or_default()
    );
    // The steps not compared are named on the line above; each with its
    // kind only when the kinds are mixed.
    let mixed = refused_why == "input errors or incomplete input";
    for r in shown.iter().filter(|r| mixed || !not_compared(r)).take(20) {
        if not_compared(r) {
            let why = if r.exit_status == exit_codes::INCOMPLETE {
                "incomplete input"
            } else {
                "input error"
            };
            let _ = writeln!(out, "  step {}: not compared ({why})", r.step);
            continue;
        }
        let _ = writeln!(
            out,
            "  step {}: {} gating of {} diverging row{}{}",
            r.step,
            r.gating,
            r.diverging,
            if r.diverging == 1 { "" } else { "s" },
            r.headline
                .as_ref()
                .map(|h| format!("; {h}"))
                .unwrap_or_default()
        );
    }
    if shown.len() > 20 {
        let _ = writeln!(
            out,
            "  … {} more steps differ (summary.json)",
            shown.len() - 20
        );
    }
    // The first diverging step's first gating rank, in the words of a
    // single-step compare: its first divergence per phase and, when only
    // its optimizer step differs, why it has several causes (trial 14).
    // A rank that only receives the change through a collective is the
    // headline's second clause, not its subject: the rank the headline
    // names first (trial 20 F3: rank 0's lines under "rank 1 diverges
    // first").
    let first = series.first_diverging_step.and_then(|step| {
        let gating = || {
            s.ranks
                .iter()
                .filter(move |r| r.step == Some(step) && r.gates())
        };
        gating()
            .filter(|r| !r.root_causes.via_collective_only)
            .min_by_key(|r| r.rank)
            .or_else(|| gating().min_by_key(|r| r.rank))
    });
    if let Some(r) = first {
        let at = format!("step {} rank {}", r.step.unwrap_or(0), r.rank);
        let lines = super::terminal::phase_lines(&r.root_causes);
        for line in lines
            .into_iter()
            .chain(super::reasons::optimizer_only_words(r))
        {
            let _ = writeln!(out, "{at}: {line}");
        }
    }
    // A dtype change (an autocast run against a float32 one) is said once,
    // at the first (step, rank) that has one: per rank it is a detail line
    // of a single-step compare, which a series does not print.
    let changed: Vec<&RankSummary> = s
        .ranks
        .iter()
        .filter(|r| r.dtype_changes.is_some())
        .collect();
    if let Some(r) = changed.first() {
        let more = changed.len() - 1;
        let _ = writeln!(
            out,
            "step {} rank {}: {}{}",
            r.step.unwrap_or(0),
            r.rank,
            r.dtype_changes
                .as_ref()
                .map(|d| d.describe())
                .unwrap_or_default(),
            if more > 0 {
                format!(
                    " (and in {more} more (step, rank) unit{})",
                    if more == 1 { "" } else { "s" }
                )
            } else {
                String::new()
            }
        );
    }
    let rest: Vec<Reason> = rest.into_iter().cloned().collect();
    super::terminal::closing_lines_of(&mut out, s, &rest, report);
    out
}

/// Writes the series' `summary.json` and `index.html` into the report
/// folder (which exists).
///
/// # Errors
/// [`ReportError`] when a file cannot be written.
pub fn write_index(s: &Summary, opts: &ReportOptions) -> Result<(), ReportError> {
    let json = super::summary_json(s);
    let path = opts.out_dir.join(files::SUMMARY);
    std::fs::write(&path, json).map_err(|e| ReportError::io(&path, e))?;
    super::html::write_steps_index(s, &opts.out_dir.join(files::INDEX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(step: u64, status: i32, headline: Option<&str>) -> StepResult {
        StepResult {
            step,
            report: format!("step_{step}/index.html"),
            exit_status: status,
            gating: u64::from(status != 0),
            diverging: u64::from(status != 0),
            diff: 0,
            first_rank: None,
            headline: headline.map(str::to_string),
            loss1: Some(step as f64),
            loss2: Some(step as f64 + 0.5),
            verdict: vec![],
            bitwise: None,
            ranks_only1: vec![],
            ranks_only2: vec![],
        }
    }

    #[test]
    fn the_sentence_names_the_agreeing_steps_and_the_first_diverging_one() {
        let mut s = StepSeries {
            steps: vec![1, 2, 3, 4, 5],
            first_diverging_step: Some(5),
            step_results: (1..=5)
                .map(|i| {
                    result(
                        i,
                        if i == 5 { 1 } else { 0 },
                        (i == 5)
                            .then_some("rank 1 diverges first at `a/op_0_mm` (a differing input)"),
                    )
                })
                .collect(),
            ..StepSeries::default()
        };
        assert_eq!(
            first_step_sentence(&s).unwrap().to_string(),
            "the runs agree from step 1 through step 4; step 5 diverges first: rank 1 diverges first at `a/op_0_mm` (a differing input) (report: step_5/index.html)"
        );
        // Every row of steps 1-4 has equal digests: they are bitwise
        // identical, and the sentence says so (trial 20 F6, trial 28).
        for r in &mut s.step_results[..4] {
            r.bitwise = Some([12, 12]);
        }
        assert_eq!(
            first_step_sentence(&s).unwrap().to_string(),
            "the runs are bitwise identical from step 1 through step 4; step 5 diverges first: rank 1 diverges first at `a/op_0_mm` (a differing input) (report: step_5/index.html)"
        );
        // One row of step 2 within tolerance, not bitwise: "agree".
        s.step_results[1].bitwise = Some([11, 12]);
        assert!(first_step_sentence(&s)
            .unwrap()
            .to_string()
            .starts_with("the runs agree from step 1 through step 4;"));
        for r in &mut s.step_results {
            r.bitwise = None;
        }
        s.first_diverging_step = Some(1);
        assert!(matches!(
            first_step_sentence(&s),
            Some(Reason::FirstDivergingStep {
                ref agree,
                step: 1,
                ..
            }) if agree.is_empty()
        ));
        assert_eq!(
            first_step_sentence(&s).unwrap().to_string(),
            "step 1 diverges first (report: step_1/index.html)"
        );
        // A step that could not be compared (exit 2), and one only a run
        // has (not among the results), do not agree: the agreeing steps
        // are listed, not spanned.
        s.first_diverging_step = Some(5);
        s.step_results[1].exit_status = 2;
        assert!(first_step_sentence(&s)
            .unwrap()
            .to_string()
            .starts_with("the runs agree at steps 1, 3-4; step 5 diverges first"));
        s.step_results.remove(1);
        s.step_results[0].exit_status = 0;
        assert!(first_step_sentence(&s)
            .unwrap()
            .to_string()
            .starts_with("the runs agree at steps 1, 3-4; step 5 diverges first"));
        s.first_diverging_step = None;
        assert_eq!(first_step_sentence(&s), None);
    }

    /// A step that agrees within the tolerance but not bitwise is named
    /// when it comes before the first diverging step; a step that agrees
    /// while its recorded losses differ is named (trial 6: a loss that
    /// parted from step 4 with every row agreeing gave no word).
    #[test]
    fn a_step_not_bitwise_and_losses_that_differ_are_said() {
        let mut s = StepSeries {
            steps: vec![1, 2, 3],
            first_diverging_step: Some(3),
            step_results: (1..=3)
                .map(|i| result(i, if i == 3 { 1 } else { 0 }, None))
                .collect(),
            ..StepSeries::default()
        };
        for r in &mut s.step_results {
            r.loss2 = r.loss1;
            r.bitwise = Some([12, 12]);
        }
        assert_eq!(not_bitwise_from(&s), None);
        assert_eq!(losses_differ(&s), None);
        s.step_results[2].bitwise = Some([3, 12]);
        assert_eq!(not_bitwise_from(&s), None, "the diverging step itself");
        s.step_results[1].bitwise = Some([10, 12]);
        assert!(matches!(
            not_bitwise_from(&s),
            Some(Reason::NotBitwiseFrom {
                step: 2,
                identical: 10,
                with_digests: 12,
                nongating: 0
            })
        ));
        // Losses: float32 noise is not said; a difference at a diverging
        // step is explained by it.
        s.step_results[0].loss2 = Some(1.0 + 1e-8);
        s.step_results[2].loss2 = Some(9.0);
        assert_eq!(losses_differ(&s), None);
        s.step_results[1].loss2 = Some(3.0);
        assert!(matches!(
            losses_differ(&s),
            Some(Reason::LossesDiffer { step: 2, loss1, loss2 }) if loss1 == 2.0 && loss2 == 3.0
        ));
    }

    #[test]
    fn the_per_rank_steps_are_one_sentence_at_any_rank_count() {
        let few = [RankStep { rank: 0, step: 6 }, RankStep { rank: 1, step: 5 }];
        assert_eq!(
            rank_steps_sentence(&few, &[0, 1]),
            "first diverging step per rank: rank 0 at step 6, rank 1 at step 5"
        );
        // 4,096 ranks: most at step 1, every 7th at step 2, a few later,
        // the last 96 never.
        let by_rank: Vec<RankStep> = (0..4000u32)
            .map(|rank| RankStep {
                rank,
                step: match rank {
                    r if r % 7 == 3 => 2,
                    r if r >= 3990 => 3 + u64::from(r % 3),
                    _ => 1,
                },
            })
            .collect();
        let ranks: Vec<u32> = (0..4096).collect();
        let s = rank_steps_sentence(&by_rank, &ranks);
        assert!(s.len() < 400, "{} bytes: {s}", s.len());
        assert!(
            s.starts_with("first diverging step per rank: ranks 0–2, 4–9, "),
            "{s}"
        );
        assert!(s.contains(" at step 1; ranks 3, 10, 17, "), "{s}");
        assert!(s.contains("(571 ranks) at step 2; "), "{s}");
        assert!(s.contains("at step 3; and 2 more steps ("), "{s}");
        assert!(
            s.ends_with("; ranks 4000–4095 agree in every step compared"),
            "{s}"
        );
    }

    #[test]
    fn loss_curves_only_with_losses() {
        let mut s = StepSeries {
            steps: vec![1, 2],
            first_diverging_step: Some(2),
            step_results: vec![result(1, 0, None), result(2, 1, None)],
            ..StepSeries::default()
        };
        let svg = crate::report::html::loss_svg(&s);
        assert!(
            svg.contains("<polyline class=l1") && svg.contains("step 2"),
            "{svg}"
        );
        // The mark is at the last step, the right edge: its label ends
        // left of it, inside the picture.
        assert!(
            svg.contains("<text x=620.0 y=12 text-anchor=end class=mut>step 2</text>"),
            "{svg}"
        );
        s.first_diverging_step = Some(1);
        let svg = crate::report::html::loss_svg(&s);
        assert!(
            svg.contains("<text x=88.0 y=12 text-anchor=start class=mut>step 1</text>"),
            "{svg}"
        );
        // Axes: the steps below, the losses' range on the left (trial 10:
        // the plot had neither).
        for tick in [
            "<text x=84.0 y=190.0 text-anchor=middle class=mut>1</text>",
            "<text x=624.0 y=190.0 text-anchor=middle class=mut>2</text>",
            "text-anchor=end class=mut>1.000000</text>",
            "text-anchor=end class=mut>2.500000</text>",
        ] {
            assert!(svg.contains(tick), "{tick} in {svg}");
        }
        assert!(!svg.contains("log scale"), "{svg}");
        // A loss that falls by 10 or more is drawn on a log scale (trial
        // 30): 100, 10, 1 are evenly spaced, 10 at mid height.
        s.step_results.push(result(3, 1, None));
        for (r, l) in s.step_results.iter_mut().zip([100.0, 10.0, 1.0]) {
            r.loss1 = Some(l);
            r.loss2 = Some(l);
        }
        let svg = crate::report::html::loss_svg(&s);
        assert!(svg.contains("loss (left, log scale)"), "{svg}");
        assert!(
            svg.contains("<polyline class=l1 points='84.0,18.0 354.0,97.0 624.0,176.0' />"),
            "{svg}"
        );
        for r in &mut s.step_results {
            r.loss1 = None;
            r.loss2 = None;
        }
        assert_eq!(crate::report::html::loss_svg(&s), "");
        // A run that blows up: its NaN loss is marked at the top, large
        // losses are labelled in scientific notation (trial 65 F3).
        for (r, (a, b)) in
            s.step_results
                .iter_mut()
                .zip([(1.0, 1.0), (1.5, 7.3e9), (1.25, f64::NAN)])
        {
            r.loss1 = Some(a);
            r.loss2 = Some(b);
        }
        let svg = crate::report::html::loss_svg(&s);
        assert!(
            svg.contains("<text x=624.0 y=30.0 text-anchor=middle class=n2>NaN</text>"),
            "{svg}"
        );
        assert!(svg.contains("class=mut>7.3000e9</text>"), "{svg}");
        assert!(
            svg.contains("; NaN or Inf at the top: a non-finite loss"),
            "{svg}"
        );
        assert!(!svg.contains("class=n1>"), "{svg}");
    }

    #[test]
    fn rebase_prefixes_row_pages_but_not_empty_ones() {
        let mut v = serde_json::json!({
            "pages": [{"file": "rank_0_p1.html"}],
            "first_divergence": {"page": "rank_0_p1.html", "anchor": "rank0-row3"},
            "root_causes": {"causes": [{"row": {"page": "", "anchor": "x"}}]},
        });
        rebase_value(&mut v, "step_3");
        assert_eq!(v["first_divergence"]["page"], "step_3/rank_0_p1.html");
        assert_eq!(v["root_causes"]["causes"][0]["row"]["page"], "");
        assert_eq!(
            v["pages"][0]["file"], "rank_0_p1.html",
            "pages are rebased by rebase_links itself"
        );
    }
}

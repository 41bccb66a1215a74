//! A rank's verdict in words, the groups of ranks that share one, and the
//! opening sentence of the index and the terminal ([`Summary::headline`]),
//! from the rank summaries alone.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{CauseRef, RankSummary, RowRef, Summary};
use crate::matcher::cause::CauseKind;
use crate::matcher::{Counts, Status};

/// Ranks with the same verdict: the same first cause, or the same
/// collective their change arrives through, or the same first divergence.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RankGroup {
    /// The ranks, ascending.
    pub ranks: Vec<u32>,
    /// Non-`match` rows: the most of any rank of the group.
    pub diverging: u64,
    /// Key of the first gating row of the group's first rank.
    pub first_divergence: Option<String>,
    /// The verdict the ranks share; in `summary.json` its words (`first
    /// entry tok_embeddings/op_2_embedding`, `receive the change through
    /// the gradient reduce-scatter`, `no divergence`).
    pub verdict: Verdict,
}

/// What a rank's verdict says ([`RankSummary::verdict`]), with the data
/// its words need; the words are its `Display`, made where written.
/// Written as its words and read back as them ([`Verdict::Read`]); two
/// verdicts are equal when their words are (ranks that diverge alike share
/// one: [`Summary::group_ranks`]).
#[derive(Clone, Debug, Default)]
pub enum Verdict {
    /// Its first cause (an origin, an entry, a one-sided op).
    Cause(Box<CauseRef>),
    /// Its change only arrives through a collective: that collective's
    /// key, when a cause names one.
    ViaCollective(Option<String>),
    /// A first gating row, without a cause: its key.
    Divergence(String),
    /// Nothing gates.
    #[default]
    None,
    /// A verdict read back from a written `summary.json`: its words.
    Read(String),
}

impl Verdict {
    /// With [`Verdict::ViaCollective`], the collective in words: `the
    /// gradient reduce-scatter`, `a collective`.
    pub fn via(&self) -> Option<String> {
        match self {
            Verdict::ViaCollective(key) => {
                Some(key.as_deref().map_or("a collective".to_string(), |k| {
                    format!("the {}", collective_words(k))
                }))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Cause(c) => write!(
                f,
                "first {} {}",
                c.cause.kind.as_str(),
                c.subject(("run 1", "run 2"))
            ),
            Verdict::ViaCollective(_) => write!(
                f,
                "receive the change through {}",
                self.via().unwrap_or_default()
            ),
            Verdict::Divergence(key) => write!(f, "first divergence {key}"),
            Verdict::None => f.write_str("no divergence"),
            Verdict::Read(s) => f.write_str(s),
        }
    }
}

written_as_words!(Verdict, Verdict::Read);

impl RankGroup {
    /// `ranks {1,3}: first divergence layers.1.attention/op_0_softmax (1 differing op)`.
    pub fn describe(&self) -> String {
        let ranks: Vec<String> = self.ranks.iter().map(|r| r.to_string()).collect();
        self.describe_as(&format!("ranks {{{}}}", ranks.join(",")))
    }

    /// [`RankGroup::describe`] with the ranks short, for thousands of
    /// ranks: `412 ranks (0, 20, 33–35, …): first divergence …`, at most
    /// eight runs of ranks.
    pub fn describe_short(&self) -> String {
        let parts = rank_ranges(&self.ranks, 2);
        self.describe_as(&format!(
            "{} rank{} ({}{})",
            self.ranks.len(),
            if self.ranks.len() == 1 { "" } else { "s" },
            parts[..parts.len().min(8)].join(", "),
            if parts.len() > 8 { ", …" } else { "" }
        ))
    }

    /// What the group's ranks share, after `ranks` (how they are named).
    fn describe_as(&self, ranks: &str) -> String {
        match &self.first_divergence {
            None if self.diverging == 0 => format!("{ranks}: all matched"),
            // Differences shown but not gating (an unsynced collective, a
            // fused-away op, an ignore rule).
            None => format!(
                "{ranks}: no gating difference ({} row{} shown, not gating)",
                self.diverging,
                if self.diverging == 1 { "" } else { "s" }
            ),
            Some(k) => format!(
                "{ranks}: first divergence {k} ({} differing op{}){}",
                self.diverging,
                if self.diverging == 1 { "" } else { "s" },
                if let Verdict::ViaCollective(_) = self.verdict {
                    format!(": {}", self.verdict)
                } else {
                    String::new()
                }
            ),
        }
    }
}

/// What a collective carries, in words: `gradient reduce-scatter` for
/// `_reduce_scatter_base_`, `parameter all-gather` for `_allgather_base_`.
pub fn collective_words(key: &str) -> String {
    let op =
        crate::matcher::keys::op_type(&crate::matcher::keys::fuzzy_key(key.as_bytes())).to_vec();
    let op = String::from_utf8_lossy(&op).to_lowercase();
    if op.contains("reduce_scatter") {
        "gradient reduce-scatter".into()
    } else if op.contains("allgather") || op.contains("all_gather") {
        "parameter all-gather".into()
    } else if op.contains("all_reduce") || op.contains("allreduce") {
        "all-reduce".into()
    } else {
        format!("collective {op}")
    }
}

impl RankSummary {
    /// The rank's verdict, the same for ranks that diverge alike: its
    /// first cause (`first entry K`), the collective its change arrives
    /// through, its first gating row, or `no divergence`.
    pub fn verdict(&self) -> Verdict {
        let rc = &self.root_causes;
        if let Some(c) = &rc.first_cause {
            return Verdict::Cause(Box::new(c.clone()));
        }
        if rc.via_collective_only {
            let key = rc
                .causes
                .iter()
                .find_map(|c| c.collective.as_ref())
                .map(|c| c.key().to_string());
            return Verdict::ViaCollective(key);
        }
        match &self.first_divergence {
            Some(f) => Verdict::Divergence(f.key().to_string()),
            None => Verdict::None,
        }
    }
}

/// A first divergence's status in words for the headline: `only in base`,
/// `differs`, `Output hash in one run only`, `truncated`.
fn status_words(status: Status, name1: &str, name2: &str) -> String {
    match status {
        Status::Only1 => format!("only in {name1}"),
        Status::Only2 => format!("only in {name2}"),
        Status::Missing => "Output hash in one run only".into(),
        Status::Truncated => "truncated".into(),
        _ => "differs".into(),
    }
}

/// [`status_words`] of a first divergence `f`, then for an optimizer-step
/// op only one run has, [`one_sided_update`]'s words: `only in a: it
/// updates parameter D.0.weight, and b ran no such op`.
fn first_status_words(r: &RankSummary, f: &RowRef, name1: &str, name2: &str) -> String {
    let words = status_words(f.status, name1, name2);
    match one_sided_update(r, f, name1, name2) {
        Some(u) => format!("{words}: {u}"),
        None => words,
    }
}

/// For an optimizer-step op `f` only one run has, with a `Parameters:`
/// line: the parameters it updates and that the other run ran no such op,
/// `it updates parameter D.0.weight, and b ran no such op` (trial 67 F5:
/// one run skipped an optimizer's `step()`, and the sentence named a
/// one-sided momentum `mul_` alone). `None` for other rows, for an
/// in-place edit of a parameter, which says its own words, and for a
/// module-level record (of rank `r`), which is no op.
fn one_sided_update(r: &RankSummary, f: &RowRef, name1: &str, name2: &str) -> Option<String> {
    if r.run1.level == crate::logformat::CaptureLevel::Modules {
        return None;
    }
    let other = match f.status {
        Status::Only1 => name2,
        Status::Only2 => name1,
        _ => return None,
    };
    if f.phase != "optimizer" || f.in_place_parameter().is_some() {
        return None;
    }
    Some(format!(
        "it updates {}, and {other} ran no such op",
        f.parameter_words()?
    ))
}

/// Ascending ranks as parts: each run of at least `min_run` consecutive
/// ranks as a range `8–11`, every other rank alone (`[0, 1, 2, 5]` with
/// `min_run` 2 → `0–2`, `5`).
pub fn rank_ranges(v: &[u32], min_run: usize) -> Vec<String> {
    let mut s: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j].wrapping_add(1) {
            j += 1;
        }
        if j + 1 - i >= min_run.max(2) {
            s.push(format!("{}–{}", v[i], v[j]));
        } else {
            s.extend(v[i..=j].iter().map(u32::to_string));
        }
        i = j + 1;
    }
    s
}

/// The most parts a rank list names before it counts the rest.
const RANK_LIST_PARTS: usize = 6;

/// The most clauses the opening sentence holds; further rank groups are
/// counted ("and N more groups (M ranks)").
const HEADLINE_CLAUSES: usize = 3;

/// Ascending ranks in words: `0, 2 and 5`; three or more consecutive ranks
/// as a range `8–11`; beyond [`RANK_LIST_PARTS`] parts, the first ones and
/// the count (`0, 2, 4, 6, 8, … (2048 ranks)`), so that a list stays short
/// at any rank count.
fn and_list(v: &[u32]) -> String {
    let s = rank_ranges(v, 3);
    match s.len() {
        0 => String::new(),
        1 => s[0].clone(),
        n if n > RANK_LIST_PARTS => format!(
            "{}, … ({} ranks)",
            s[..RANK_LIST_PARTS - 1].join(", "),
            v.len()
        ),
        n => format!("{} and {}", s[..n - 1].join(", "), s[n - 1]),
    }
}

/// At most this many ranks are listed in a rank's
/// [`CausesSummary::see_ranks`](crate::report::summary::CausesSummary::see_ranks):
/// every collective-only rank would otherwise carry the whole list of ranks
/// with causes, and `summary.json` would grow with the square of the rank
/// count.
pub const SEE_RANKS_MAX: usize = 16;

/// The first [`SEE_RANKS_MAX`] of ascending `ranks`.
fn see_list(ranks: &[u32]) -> Vec<u32> {
    ranks[..ranks.len().min(SEE_RANKS_MAX)].to_vec()
}

/// `see` (the first ranks of `total`, ascending) in words, as [`rank_word`]
/// does, with `…` and the count when `see` is only the first of them: `rank
/// 1`, `ranks 0–15, … (4095 ranks)`.
pub fn see_rank_word(see: &[u32], total: u64) -> String {
    if total as usize <= see.len() {
        return rank_word(see);
    }
    format!(
        "ranks {}, … ({total} ranks)",
        rank_ranges(see, 3).join(", ")
    )
}

/// Ascending ranks with their word: `rank 3`, `ranks 0, 2 and 5`, `ranks
/// 0–13, 15–17, … (1900 ranks)` (at most `RANK_LIST_PARTS` (6) parts).
pub fn rank_word(v: &[u32]) -> String {
    format!(
        "{} {}",
        if v.len() == 1 { "rank" } else { "ranks" },
        and_list(v)
    )
}

/// Above this many compared ranks, the index and the terminal list rank
/// groups ([`Summary::groups_by_weight`]), not every rank, so that their
/// size follows what differs, not the rank count.
pub const GROUPED_ABOVE_RANKS: usize = 64;

impl Summary {
    /// Each group of `groups` (from [`Summary::group_ranks`] of `ranks`)
    /// with its first rank, in the order the index and the terminal list
    /// them when there are many ranks: groups with a gating difference
    /// first, then those with differences shown but not gating, then those
    /// that agree; the largest first within each, then by first rank.
    pub fn groups_by_weight<'r, 'g>(
        ranks: &'r [RankSummary],
        groups: &'g [RankGroup],
    ) -> Vec<(&'r RankSummary, &'g RankGroup)> {
        let by_rank: ahash::AHashMap<u32, &RankSummary> =
            ranks.iter().map(|r| (r.rank, r)).collect();
        let mut order: Vec<(&RankSummary, &RankGroup)> = groups
            .iter()
            .filter_map(|g| Some((*by_rank.get(g.ranks.first()?)?, g)))
            .collect();
        order.sort_by_key(|(r, g)| {
            (
                g.first_divergence.is_none(),
                !r.diverged(),
                std::cmp::Reverse(g.ranks.len()),
            )
        });
        order
    }

    /// Groups ranks by verdict ([`RankSummary::verdict`]), in rank order.
    ///
    /// Verdicts are equal when their words are; each rank's words are made
    /// once and looked up in a hash map, so grouping thousands of ranks into
    /// hundreds of groups costs one pass (it compared every rank with every
    /// group, two strings made per comparison, before).
    pub fn group_ranks(ranks: &[RankSummary]) -> Vec<RankGroup> {
        let mut groups: Vec<RankGroup> = Vec::new();
        let mut by_words: ahash::AHashMap<String, usize> = ahash::AHashMap::new();
        for r in ranks {
            let verdict = r.verdict();
            match by_words.entry(verdict.to_string()) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    let g = &mut groups[*e.get()];
                    g.ranks.push(r.rank);
                    g.diverging = g.diverging.max(r.counts.diverging());
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(groups.len());
                    groups.push(RankGroup {
                        ranks: vec![r.rank],
                        diverging: r.counts.diverging(),
                        first_divergence: r.first_divergence.as_ref().map(|f| f.key().to_string()),
                        verdict,
                    });
                }
            }
        }
        groups
    }

    /// The one sentence the index and the terminal open with, from the rank
    /// summaries alone: where the run diverges first and how the other ranks
    /// get it, e.g. "rank 1 diverges first at `tok_embeddings/op_2_embedding`
    /// (a differing input), and ranks 0, 2 and 3 receive that change through
    /// the gradient reduce-scatter." `None` when no rank has a gating row.
    ///
    /// A rank's "first" is its first divergence
    /// ([`RankSummary::first_divergence`], the terminal's `first divergence:`
    /// line and the index's first diverging row): the first gating row in
    /// result order, a one-sided row (`only1`, `only2`) included, since an
    /// op one run lacks is a difference between the runs. When that row is
    /// not the rank's first cause (an op only in one run before the first
    /// origin), the sentence names both: "rank 0 diverges first at
    /// `tok/op_0_embedding` (only in base; first cause `qkv/op_0_mm`,
    /// inputs agree, the output differs)".
    pub fn headline(ranks: &[RankSummary], name1: &str, name2: &str) -> Option<String> {
        let groups = Summary::group_ranks(ranks);
        let what = |r: &RankSummary| -> Option<String> {
            let c = r.root_causes.first_cause.as_ref()?;
            // A one-sided cause is named by its op, the row it feeds after.
            let (cause_key, cause) = match c.one_sided.first() {
                Some(first) if c.cause.kind == CauseKind::OneSided => {
                    let run = if first.status == crate::matcher::Status::Only1 {
                        name1
                    } else {
                        name2
                    };
                    let mut w = format!(
                        "an op only in {run}, feeding `{}`",
                        c.row.key_beside(first.status)
                    );
                    // An in-place op on a parameter (an edit after the
                    // optimizer step, trial 29) names it; an update of
                    // parameters the other run did not run names them.
                    if let Some(p) = first.in_place_parameter() {
                        w.push_str(&format!("; it changes the parameter {p} in place"));
                    } else if let Some(u) = one_sided_update(r, first, name1, name2) {
                        w.push_str(&format!("; {u}"));
                    } else if first.is_random_op() {
                        // A random op one run alone ran (trial 70: a model
                        // left in eval mode after an evaluation pass).
                        let other = if run == name1 { name2 } else { name1 };
                        w.push_str(&format!(
                            "; a random op that {other} did not run (dropout off in a module left in eval mode there?)"
                        ));
                    }
                    // The op the other run ran there (trial 24 F5).
                    if let Some(p) = &c.in_its_place {
                        let other = if run == name1 { name2 } else { name1 };
                        w.push_str(&format!("; {other} ran `{}` in its place", p.key()));
                    }
                    (first.key(), w)
                }
                _ => (
                    c.row.key(),
                    match c.cause.kind {
                        // A module-level log records no inputs: its first
                        // differing record is all that is known.
                        _ if r.run1.level == crate::logformat::CaptureLevel::Modules => {
                            let mut w = format!(
                                "the first differing record{}{}; inputs are not recorded at level=modules",
                                // The root's records are `<none>`'s (trial
                                // 72 F4: the model's output, unnamed).
                                if c.row.key().starts_with("<none>/") { ", the model's own (`<none>` is the model given to the profiler)" } else { "" },
                                c.row.output_tensors_words(name1, name2)
                            );
                            // Modules that ran compiled record no output,
                            // and their gradients come in the compiled
                            // backward's order (trial 21: `inp`'s gradient
                            // first under torch.compile(model)).
                            // Another number of forward passes a step
                            // (gradient accumulation in one run): what the
                            // parameters after the optimizer step say.
                            if let Some(p) = &r.forward_passes {
                                w.push_str("; ");
                                w.push_str(&p.describe(name1, name2));
                                if r.root_causes.first_divergence_optimizer.is_none() {
                                    w.push_str("; the parameters after the optimizer step agree");
                                } else {
                                    w.push_str(
                                        "; the parameters after the optimizer step differ too",
                                    );
                                    // By how much: float rounding of the
                                    // micro-batches' sums, or more.
                                    if let Some(rel) = p.optimizer_rel {
                                        w.push_str(&format!(", by at most a relative {rel:.1e}"));
                                        if rel < 1e-6 {
                                            w.push_str(" (float rounding: the micro-batches' gradients summed in another order; a looser --rtol reads them as agreeing)");
                                        }
                                    }
                                }
                            }
                            // Records of another dtype (autocast in one
                            // run) differ by their precision (trial 65 F6:
                            // said only on the terminal's last line).
                            if let Some(d) = &r.dtype_changes {
                                w.push_str(&format!(
                                    "; {} (autocast or mixed precision in one run): the records differ by their precision",
                                    d.describe()
                                ));
                            }
                            if r.run1.compiled.is_some() || r.run2.compiled.is_some() {
                                w.push_str("; modules ran compiled: their outputs are not recorded and their gradients come in the compiled backward's order, so re-capture this step at level=\"ops\" to find where it starts");
                            } else if c.row.phase == "backward"
                                && r.root_causes.first_divergence_forward.is_none()
                            {
                                // Every forward record agrees and a
                                // gradient differs first (trial 26 F4: a
                                // LoRA adapter initialised differently,
                                // its partner B = 0, read as another
                                // parameter's gradient).
                                if r.forward_repaired > 0 {
                                    // Agreeing only out of order (trial
                                    // 72 F2: two micro-batches swapped).
                                    w.push_str(&format!(
                                        "; every forward record agrees only with {} of them paired out of their order (re-paired by value, `fuzzy`): the same forward computations in another order, so most likely the micro-batches or the batch's samples were reordered, and the gradients differ by the order they are summed in",
                                        r.forward_repaired
                                    ));
                                } else {
                                    w.push_str("; every forward record agrees: a change to the loss (the batch's targets or labels, the loss function) or the backward, or a parameter changed before this step that the module outputs do not show (a LoRA B initialised to 0; level=modules records parameters only after the optimizer step), so re-capture this step at level=\"ops\" to tell");
                                }
                            }
                            // What the RNG state says of randomness,
                            // before the optimizer (trial 63).
                            if c.row.phase != "optimizer" {
                                if let Some(rw) =
                                    crate::report::reasons::random_state_words(r, c.row.index > 0)
                                {
                                    w.push_str("; ");
                                    w.push_str(&rw);
                                }
                            }
                            // A module only run 2 runs before it (after run
                            // 1's rows in result order).
                            if let Some(o) = &r.root_causes.first_only2_before {
                                w.push_str(&format!(
                                    "; before it, `{}` is only in {name2}",
                                    o.key()
                                ));
                            }
                            w
                        }
                        CauseKind::Entry => {
                            let mut which = crate::report::reasons::differing_input_words(
                                &c.cause.inputs,
                                c.row.input_parameters.as_deref(),
                            );
                            which.push_str(&c.row.producers_words(&c.cause.inputs, name1, name2));
                            match crate::report::reasons::entry_caveats(r) {
                                Some(w) => format!("{which}; {w}"),
                                None => which,
                            }
                        }
                        // A random op whose inputs agree: its draw differs
                        // (trial 19 L2: a reseeded dropout was named, not
                        // what it is).
                        CauseKind::Origin if c.row.is_random_op() => {
                            use crate::report::reasons::StepRandom;
                            StepRandom::random_op_words(StepRandom::of(
                                r.run1.rng_state,
                                r.run2.rng_state,
                            ))
                            .to_string()
                        }
                        // Without digests, "agree" is the hashes' word:
                        // an L1 norm cannot see a reordering (trial 28: two
                        // swapped tokens named the position add, with
                        // "inputs agree").
                        CauseKind::Origin if r.bitwise.is_none() => {
                            crate::report::reasons::ORIGIN_BY_HASHES.to_string()
                        }
                        CauseKind::Origin => "inputs agree, the output differs".to_string(),
                        _ => c.cause.kind.as_str().to_string(),
                    },
                ),
            };
            // Only NaN against NaN differs there (trial 65 F1: two
            // identical runs that both went NaN, compared with
            // --nan-is-diff, were blamed on a change to the forward).
            let cause = if c.row.nan_against_nan {
                crate::report::reasons::NAN_AGAINST_NAN.to_string()
            } else {
                cause
            };
            // Every paired row agrees and only ops of one run gate (a
            // clipping threshold never reached runs its norm ops in one
            // run only; trial 66: a series' headline named the extra op
            // alone, and every step "diverged").
            let cause = match &r.one_sided_ops {
                Some(o) => format!("{cause}; {}", o.describe(name1, name2)),
                None => cause,
            };
            // An optimizer-step op names the parameters it updates.
            let cause = match c.row.parameter_words() {
                Some(w) => format!("{cause}; {w}"),
                None => cause,
            };
            // Dims that differ say more than its values (trial 71 F4:
            // FSDP1's flattened parameter read as "the output differs").
            let cause = match c.row.shape_words() {
                Some(w) => format!("{cause}; {w}"),
                None => cause,
            };
            // The forward alone differs (trial 72 F3: padding positions
            // a mask or the loss ignores).
            let cause = if r.forward_only {
                format!("{cause}; every gradient and optimizer {} agrees, so this difference does not reach training (positions that a mask or the loss ignores, such as padding?)", if r.run1.level == crate::logformat::CaptureLevel::Modules { "record" } else { "row" })
            } else {
                cause
            };
            // A combined run's replica that differs on another rank: the
            // change may start there, not where the shards meet.
            let cause = match &r.root_causes.replicas_differ {
                Some(m) => format!(
                    "{cause}; but rank {}'s replica of `{}` differs from rank {}'s, which the combined run kept: the change may start there",
                    m.rank, m.key, m.against
                ),
                None => cause,
            };
            // The sentence names the first divergence; a cause elsewhere
            // (a one-sided op feeding that very row included) follows it.
            let one_sided = cause_key != c.row.key();
            Some(match &r.first_divergence {
                Some(f) if one_sided && f.index == c.row.index => format!(
                    "`{}` ({}; first cause `{cause_key}`, an op only in {} that feeds it)",
                    f.key(),
                    first_status_words(r, f, name1, name2),
                    if c.one_sided
                        .first()
                        .is_some_and(|o| o.status == Status::Only1)
                    {
                        name1
                    } else {
                        name2
                    },
                ),
                Some(f) if f.index != c.row.index && f.key() != cause_key => format!(
                    "`{}` ({}; first cause `{cause_key}`, {cause})",
                    f.key(),
                    first_status_words(r, f, name1, name2),
                ),
                _ => format!("`{cause_key}` ({cause})"),
            })
        };
        // Clauses with the number of ranks each speaks for.
        let mut parts: Vec<(usize, String)> = Vec::new();
        let mut via: Vec<(Vec<u32>, String)> = Vec::new();
        let mut other: Vec<(usize, String)> = Vec::new();
        for g in &groups {
            let Some(first) = ranks.iter().find(|r| r.rank == g.ranks[0]) else {
                continue;
            };
            if !first.gates() {
                continue;
            }
            // `ranks 0 and 3 diverge first at …`
            let first_at = |w: String| {
                let verb = if g.ranks.len() == 1 {
                    "diverges"
                } else {
                    "diverge"
                };
                (
                    g.ranks.len(),
                    format!("{} {verb} first at {w}", rank_word(&g.ranks)),
                )
            };
            if let Some(w) = what(first) {
                parts.push(first_at(w));
            } else if let Some(v) = g.verdict.via() {
                via.push((g.ranks.clone(), format!("through {v}")));
            } else if let Some(f) = &first.first_divergence {
                // A row only one run has, where the other run's log is
                // incomplete: most likely past its end (trial 18 M4: a cut
                // log read as "diverges first at `2/op_4_mul` (only in a)").
                let cut = |s: &crate::report::summary::SideSummary, name: &str| {
                    if s.incomplete.is_empty() {
                        String::new()
                    } else {
                        format!("; {name}'s log is incomplete: cut short?")
                    }
                };
                // DDP's gradient scaling against a run without it.
                let scaling = |name: &str| {
                    first
                        .gradient_scaling
                        .as_ref()
                        .map(|g| g.words(name))
                        .unwrap_or_default()
                };
                // An in-place op on a parameter names it (trial 29).
                let param = f
                    .in_place_parameter()
                    .map(|p| format!("; it changes the parameter {p} in place"))
                    .unwrap_or_default();
                // Every paired row agrees: only ops of one run gate (trial
                // 66: a clipping threshold never reached).
                let others = first
                    .one_sided_ops
                    .as_ref()
                    .map(|o| format!("; {}", o.describe(name1, name2)))
                    .unwrap_or_default();
                // (Not beside a cut log's lost rows, DDP's scaling, whose
                // words say it, or an in-place edit of a parameter.)
                let tail = |cut: String, scaling: String| {
                    if cut.is_empty() && scaling.is_empty() && param.is_empty() {
                        others.clone()
                    } else {
                        format!("{cut}{scaling}")
                    }
                };
                let only = match f.status {
                    Status::Only1 => format!(
                        " ({}{param}{})",
                        first_status_words(first, f, name1, name2),
                        tail(cut(&first.run2, name2), scaling(name1))
                    ),
                    Status::Only2 => format!(
                        " ({}{param}{})",
                        first_status_words(first, f, name1, name2),
                        tail(cut(&first.run1, name1), scaling(name2))
                    ),
                    _ => String::new(),
                };
                other.push(first_at(format!("`{}`{only}", f.key())));
            }
        }
        let had_cause = !parts.is_empty();
        parts.extend(other);
        parts.extend(via.into_iter().map(|(r, v)| {
            (
                r.len(),
                format!(
                    "{} {} {} {v}",
                    rank_word(&r),
                    if r.len() == 1 { "receives" } else { "receive" },
                    if had_cause { "that change" } else { "a change" }
                ),
            )
        }));
        let mut rest = None;
        if parts.len() > HEADLINE_CLAUSES {
            // The first clause (where the run diverges first), then the
            // largest groups, in sentence order; the others counted.
            let mut by_size: Vec<usize> = (1..parts.len()).collect();
            by_size.sort_by_key(|&i| std::cmp::Reverse(parts[i].0));
            let mut keep: Vec<usize> = std::iter::once(0)
                .chain(by_size.into_iter().take(HEADLINE_CLAUSES - 1))
                .collect();
            keep.sort_unstable();
            let left: Vec<&(usize, String)> = (0..parts.len())
                .filter(|i| !keep.contains(i))
                .map(|i| &parts[i])
                .collect();
            let ranks: usize = left.iter().map(|p| p.0).sum();
            // Groups without a gating difference are in no clause: said
            // apart, so that the counts add up (trial 18 L1: "276 more
            // groups (964 ranks)" of 280 groups, 39 agreeing ranks unsaid).
            let spoken: usize = parts.iter().map(|p| p.0).sum();
            let all: usize = groups.iter().map(|g| g.ranks.len()).sum();
            let quiet = all.saturating_sub(spoken);
            rest = Some(format!(
                "{} more group{} that diverge{} ({ranks} rank{}; summary.json `groups`){}",
                left.len(),
                if left.len() == 1 { "" } else { "s" },
                if left.len() == 1 { "s" } else { "" },
                if ranks == 1 { "" } else { "s" },
                match quiet {
                    0 => String::new(),
                    1 => "; 1 rank does not".to_string(),
                    n => format!("; {n} ranks do not"),
                }
            ));
            parts = keep.into_iter().map(|i| parts[i].clone()).collect();
        }
        let mut parts: Vec<String> = parts.into_iter().map(|p| p.1).collect();
        parts.extend(rest);
        match parts.len() {
            0 => None,
            1 => Some(format!("{}.", parts[0])),
            n => Some(format!(
                "{}, and {}.",
                parts[..n - 1].join(", "),
                parts[n - 1]
            )),
        }
    }

    /// Module-level ranks whose records differ only after the optimizer
    /// step (forward outputs and gradients agree) while another rank's
    /// forward or backward records differ, and that hold that rank's
    /// parameters after the optimizer in both runs (equal
    /// [`SideSummary::parameters`](crate::report::summary::SideSummary::parameters): data-parallel replicas, whose update
    /// is the shared one): their change arrives through the gradient
    /// collective (DDP's all-reduce), which a module-level log does not
    /// record, since its gradient records are each rank's own, read as
    /// backward accumulates them. They are marked as receiving it
    /// ([`CausesSummary::via_collective_only`](crate::report::summary::CausesSummary::via_collective_only), no cause of their own). A
    /// rank alone, every rank optimizer-only (a learning rate changed
    /// everywhere), ranks that are no replicas (no gradient collective)
    /// and a rank whose update in run 2 is not its replica's (a change of
    /// its own, such as its learning rate) keep their first differing
    /// record. Under FSDP
    /// ([`SideSummary::parameters_sharded`](crate::report::summary::SideSummary::parameters_sharded)
    /// on both sides of both ranks) there are no replicas: each rank's
    /// shard is updated with every rank's gradient, so an optimizer-only
    /// rank is linked to the sharded ranks with a change of their own (a
    /// change of its own optimizer cannot be told apart there).
    pub fn link_optimizer_only_ranks(ranks: &mut [RankSummary]) {
        use crate::logformat::CaptureLevel;
        use std::collections::HashMap;
        let fingerprint = |r: &RankSummary| match (&r.run1.parameters, &r.run2.parameters) {
            (Some(a), Some(b)) => Some((a.clone(), b.clone())),
            _ => None,
        };
        // The ranks with forward or backward differences of their own, by
        // their (run 1, run 2) fingerprints: one pass, then one lookup per
        // optimizer-only rank (not every pair of ranks).
        let sharded = |r: &RankSummary| r.run1.parameters_sharded && r.run2.parameters_sharded;
        let mut with_own: HashMap<(String, String), Vec<u32>> = HashMap::new();
        let mut with_own_sharded: Vec<u32> = Vec::new();
        for r in ranks
            .iter()
            .filter(|r| r.run1.level == CaptureLevel::Modules)
        {
            let rc = &r.root_causes;
            if rc.first_divergence_forward.is_some() || rc.first_divergence_backward.is_some() {
                if let Some(f) = fingerprint(r) {
                    with_own.entry(f).or_default().push(r.rank);
                }
                if sharded(r) {
                    with_own_sharded.push(r.rank);
                }
            }
        }
        if with_own.is_empty() && with_own_sharded.is_empty() {
            return;
        }
        for r in ranks.iter_mut() {
            let rc = &r.root_causes;
            let optimizer_only = r.run1.level == CaptureLevel::Modules
                && rc.first_divergence_optimizer.is_some()
                && rc.first_divergence_forward.is_none()
                && rc.first_divergence_backward.is_none()
                && rc
                    .first_cause
                    .as_ref()
                    .is_some_and(|c| c.cause.kind == crate::matcher::cause::CauseKind::Record);
            if !optimizer_only {
                continue;
            }
            // Replicas (DDP: one update), or FSDP shards on both sides (each
            // rank's shard updated with every rank's reduce-scattered
            // gradient).
            let replica_of = match fingerprint(r).and_then(|f| with_own.get(&f)) {
                Some(v) => v,
                None if sharded(r) && !with_own_sharded.is_empty() => &with_own_sharded,
                None => continue,
            };
            let (see, total) = (see_list(replica_of), replica_of.len() as u64);
            let rc = &mut r.root_causes;
            rc.first_cause = None;
            rc.cause_count = 0;
            rc.via_collective_only = true;
            rc.see_ranks = see;
            rc.see_ranks_total = total;
        }
    }

    /// Points ranks whose divergence only arrives through collectives at the
    /// ranks that have origins or entries of their own.
    pub fn link_collective_ranks(ranks: &mut [RankSummary]) {
        let with_causes: Vec<u32> = ranks
            .iter()
            .filter(|r| r.root_causes.cause_count > 0 && !r.root_causes.via_collective_only)
            .map(|r| r.rank)
            .collect();
        let see = see_list(&with_causes);
        for r in ranks.iter_mut() {
            if r.root_causes.via_collective_only {
                r.root_causes.see_ranks = see.clone();
                r.root_causes.see_ranks_total = with_causes.len() as u64;
            }
        }
    }
    /// Counts over all ranks.
    pub fn total_counts(ranks: &[RankSummary]) -> Counts {
        let mut c = Counts::default();
        for r in ranks {
            c.merge(&r.counts);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::{and_list, RankGroup};

    #[test]
    fn a_group_with_only_non_gating_rows_is_not_all_matched() {
        let g = |diverging| RankGroup {
            ranks: vec![0, 1],
            diverging,
            first_divergence: None,
            verdict: super::Verdict::None,
        };
        assert_eq!(g(0).describe(), "ranks {0,1}: all matched");
        assert_eq!(
            g(1).describe(),
            "ranks {0,1}: no gating difference (1 row shown, not gating)"
        );
    }

    #[test]
    fn rank_lists_stay_short_at_any_rank_count() {
        assert_eq!(and_list(&[]), "");
        assert_eq!(and_list(&[3]), "3");
        assert_eq!(and_list(&[0, 2, 3]), "0, 2 and 3");
        assert_eq!(and_list(&[0, 1, 2, 3, 7]), "0–3 and 7");
        let all: Vec<u32> = (0..4096).collect();
        assert_eq!(and_list(&all), "0–4095");
        let even: Vec<u32> = (0..4096).step_by(2).collect();
        assert_eq!(and_list(&even), "0, 2, 4, 6, 8, … (2048 ranks)");
    }
}

//! Step series: two dump folders whose logs sit in `step_S/` folders (the
//! capture agent's `capture_steps=`), compared step by step with the
//! single-step machinery ([`super::pipeline::compare_layouts`] per step, into the step's
//! own report folder `OUT/step_S/`), then joined into one answer: the first
//! step, in step order, where some rank has a gating row, each rank's own
//! first diverging step, and one exit status over every step.
//!
//! Steps are paired by number; a step one run lacks is listed like a rank
//! one run lacks (and gates like one). Only the first diverging step gets
//! full result pages; the other steps' reports hold their summaries and
//! no rows, unless `--steps all`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use serde::{Deserialize, Serialize};

use super::outputs::{prepare_report_folder, RunMeta, RunOutputs, Terminal};
use super::pipeline::{compare_layouts, CompareConfig, Compared, ShardPart};
use super::shard::{self, Shard};
use crate::exit_codes;
use crate::matcher::MatchTable;
use crate::parser::OpTable;
use crate::report::messages::Message;
use crate::report::steps::{RankStep, StepLoss, StepResult, StepSeries};
use crate::report::summary::FailedRank;
use crate::report::summary::SCHEMA_VERSION;
use crate::report::RankComparison;
use crate::report::{self, files, RankSummary, ReportOptions, Summary};

pub use crate::report::files::{step_of_dir_name, STEP_DIR_PREFIX};
pub use keep::KeepTables;
use keep::{Kept, KeptRank};
pub use part::{compare_part, is_series_part, merge_series, SeriesPart, SERIES_PART};

mod keep;
mod part;

/// The `step_S` folders directly in `path` that hold a rank log, sorted
/// by step; empty when `path` is no folder or holds none (a single-step
/// dump). Step folders without a rank log are [`unfinished_step_folders`].
pub fn step_folders(path: &Path) -> Vec<(u64, PathBuf)> {
    scan(path)
        .into_iter()
        .filter(|s| s.2)
        .map(|s| (s.0, s.1))
        .collect()
}

/// The `step_S` folders in `path` without any `rank_N_activations.log`: a
/// step a capture schedule named but the job never reached (or a capture
/// that did not finish). They are not steps of the run.
pub fn unfinished_step_folders(path: &Path) -> Vec<PathBuf> {
    scan(path)
        .into_iter()
        .filter(|s| !s.2)
        .map(|s| s.1)
        .collect()
}

/// The warning for a step series' folder `path` that also holds rank
/// logs directly (`rank_N_activations.log` beside its `step_S/`
/// folders): a step series compares its step folders only, so those
/// logs are named as ignored. `None` when it holds none.
pub fn logs_beside_steps(path: &Path) -> Option<Message> {
    let count = std::fs::read_dir(path)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(super::rank_of_file_name)
                .is_some()
        })
        .count();
    (count > 0).then(|| Message::LogsBesideSteps {
        path: path.display().to_string(),
        count,
    })
}

/// The error for a run folder with two folders of one step (`step_03`
/// and `step_3`): which one is the step's is anyone's guess, and a
/// compare took `step_3` and dropped the other silently (trial 25: a
/// diverging `step_03` beside an agreeing `step_3` exited 0). `None`
/// when every step has one folder.
fn two_folders_of_a_step(path: &Path) -> Option<String> {
    let steps = scan(path);
    let pair = steps.windows(2).find(|w| w[0].0 == w[1].0)?;
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    Some(format!(
        "{}: step {} has two folders, {} and {}; keep one",
        path.display(),
        pair[0].0,
        name(&pair[0].1),
        name(&pair[1].1)
    ))
}

/// `(step, folder, holds a rank log or cannot be read)` of every `step_S`
/// folder, by step.
fn scan(path: &Path) -> Vec<(u64, PathBuf, bool)> {
    let Ok(dir) = std::fs::read_dir(path) else {
        return Vec::new();
    };
    let mut steps: Vec<(u64, PathBuf, bool)> = dir
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let s = step_of_dir_name(e.file_name().to_str()?)?;
            // A folder that cannot be read is a step of the run: its
            // compare says why its logs cannot be read (an input error),
            // where skipping it as unfinished passed the series without it.
            let has_log = std::fs::read_dir(e.path()).map_or(true, |d| {
                d.filter_map(|f| f.ok()).any(|f| {
                    f.file_name()
                        .to_str()
                        .and_then(super::rank_of_file_name)
                        .is_some()
                })
            });
            Some((s, e.path(), has_log))
        })
        .collect();
    steps.sort();
    steps
}

/// `--steps`: which steps of two step series are compared, and which get
/// full result pages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StepSelection {
    /// Every step; full pages for the first diverging step only.
    #[default]
    First,
    /// `all`: every step, each with full pages.
    All,
    /// `3,5-9`: these steps only (inclusive ranges); full pages for the
    /// first diverging one.
    Only(Vec<(u64, u64)>),
}

impl StepSelection {
    /// Parses `all` or a comma-separated list of steps and inclusive ranges
    /// (`3,5-9`). Errors name the part that is no step or range.
    pub fn parse(s: &str) -> Result<StepSelection, String> {
        let s = s.trim();
        if s == "all" {
            return Ok(StepSelection::All);
        }
        let mut ranges = Vec::new();
        for part in s.split(',').map(str::trim) {
            let num = |t: &str| t.trim().parse::<u64>().ok();
            let range = match part.split_once('-') {
                Some((a, b)) => num(a).zip(num(b)).filter(|(a, b)| a <= b),
                None => num(part).map(|a| (a, a)),
            };
            match range {
                Some(r) => ranges.push(r),
                None => {
                    return Err(format!(
                        "--steps `{s}`: `{part}` is no step or range (expected `all` or a list such as 3,5-9)"
                    ))
                }
            }
        }
        Ok(StepSelection::Only(ranges))
    }

    /// Whether step `s` is compared.
    pub fn includes(&self, s: u64) -> bool {
        match self {
            StepSelection::Only(r) => r.iter().any(|(a, b)| (*a..=*b).contains(&s)),
            _ => true,
        }
    }
}

/// Whether `compare RUN1 RUN2` is a step-series compare: either run holds
/// `step_S` folders. Both must; one alone is an input error, returned here.
pub fn is_series(cfg: &CompareConfig) -> Result<bool, String> {
    for run in [&cfg.run1, &cfg.run2] {
        if let Some(e) = two_folders_of_a_step(run) {
            return Err(e);
        }
    }
    let (s1, s2) = (step_folders(&cfg.run1), step_folders(&cfg.run2));
    match (s1.is_empty(), s2.is_empty()) {
        (true, true) => Ok(false),
        (false, false) => Ok(true),
        (one, _) => {
            let (with, without) = if one {
                (&cfg.run2, &cfg.run1)
            } else {
                (&cfg.run1, &cfg.run2)
            };
            // A path that is not there is that, not a run without steps.
            if let Err(e) = super::RunInput::discover(without) {
                if matches!(e, super::RunError::Missing { .. }) {
                    return Err(e.to_string());
                }
            }
            Err(format!(
                "{} holds step_S folders (a step series) and {} does not: compare two step series, or one step folder of each",
                with.display(),
                without.display()
            ))
        }
    }
}

/// One compared step, as [`compare_steps`] keeps it.
struct StepDone {
    step: u64,
    summary: Summary,
    /// What the step's summary was made from (the first diverging step's
    /// report is written again from it, with full pages).
    meta: RunMeta,
}

/// Where step `s`'s `--rows` rows go before the series joins them: a
/// hidden file of the step's report folder, of the `--rows` file's format.
fn step_rows(cfg: &CompareConfig, s: u64, rows: &Path) -> PathBuf {
    let name = if report::parquet::is_parquet_path(rows) {
        ".rows-step.parquet"
    } else {
        ".rows-step.jsonl"
    };
    cfg.report
        .out_dir
        .join(format!("{STEP_DIR_PREFIX}{s}"))
        .join(name)
}

/// Joins the steps' `--rows` files (in step order) into the `--rows` file:
/// JSON Lines concatenated, Parquet files read back and written as one.
fn join_step_rows(cfg: &CompareConfig, steps: &[u64]) -> Result<(), String> {
    let Some(rows) = &cfg.rows else {
        return Ok(());
    };
    let parts: Vec<PathBuf> = steps
        .iter()
        .map(|s| step_rows(cfg, *s, rows))
        .filter(|p| p.is_file())
        .collect();
    if report::parquet::is_parquet_path(rows) {
        let r = report::parquet::concat(&parts, rows);
        for p in &parts {
            let _ = std::fs::remove_file(p);
        }
        r
    } else {
        super::pipeline::join_rows(rows, &parts)
    }
}

/// The config of step `s`: the runs' step folders and the report folder
/// `OUT/step_S`; `pages` false leaves the step's pages without rows (its
/// summary is complete). Its `--rows` rows carry the step and go to
/// [`step_rows`], joined by the series.
fn step_config(
    cfg: &CompareConfig,
    s: u64,
    (p1, p2): (&Path, &Path),
    pages: bool,
    kept: Option<&Arc<Kept>>,
) -> CompareConfig {
    let mut c = cfg.clone();
    c.keep = kept.map(|k| KeepTables {
        step: s,
        html_rows: cfg.report.html_rows,
        html_budget: cfg.report.html_budget,
        kept: k.clone(),
    });
    c.run1 = p1.to_path_buf();
    c.run2 = p2.to_path_buf();
    c.quiet = true;
    c.step = Some(s);
    c.rows = cfg.rows.as_ref().map(|r| step_rows(cfg, s, r));
    c.report.out_dir = cfg.report.out_dir.join(format!("{STEP_DIR_PREFIX}{s}"));
    c.report.series_index = Some(format!("../{}", files::INDEX));
    c.report.path1 = p1.display().to_string();
    c.report.path2 = p2.display().to_string();
    if !pages {
        c.report.html_rows = Some(0);
        c.report.html_budget = Some(0);
        c.report.rank_files = false;
    }
    c
}

/// Compares one step into `OUT/step_S/` and writes that step's own
/// `summary.json` and `index.html` (a complete single-step report; for a
/// part of a sharded series, its `part.json` only). With `kept`, offers
/// its ranks' tables there.
fn compare_step(
    cfg: &CompareConfig,
    s: u64,
    paths: (&Path, &Path),
    pages: bool,
    kept: Option<&Arc<Kept>>,
) -> StepDone {
    let c = step_config(cfg, s, paths, pages, kept);
    let mut compared = match compare_layouts(&c) {
        Ok(x) => x,
        // The runs' layouts differ and a run's shards cannot be combined at
        // this step: its shard logs against the other run's whole tensors
        // would differ in every sharded op (trial 18 H1: the step "diverged
        // first at `fc1/op_0_addmm`", a rank "only in" the TP=2 run). The
        // step is not compared; the error says why.
        Err(e) => {
            let mut meta = super::outputs::RunMeta {
                report: c.report.clone(),
                errors: vec![e],
                allow_incomplete: c.allow_incomplete,
                ..Default::default()
            };
            if let Err(e) = super::outputs::prepare_report_folder(&meta.report) {
                meta.errors.push(Message::Text(e.to_string()));
            }
            Compared {
                meta,
                ranks: Vec::new(),
                part: None,
            }
        }
    };
    if !pages && compared.ranks.iter().any(|r| r.counts.diverging() > 0) {
        // Said on the step's own index, not again by the series.
        compared
            .meta
            .warnings
            .push(Message::StepWithoutPages { step: s });
    }
    // A part's step is a part (its part.json): no index or summary.json
    // that would read as a whole report of that step.
    let (meta, summary) = if c.shard.is_some() {
        let summary = super::outputs::summarise(&compared.meta, compared.ranks);
        (compared.meta, summary)
    } else {
        super::outputs::finish_step(compared.meta, compared.ranks)
    };
    StepDone {
        step: s,
        summary,
        meta,
    }
}

/// Writes the full pages of step `d` (compared without rows in its pages)
/// from its ranks' kept tables, then its `summary.json` and `index.html`
/// again: what comparing it again with full pages gives.
fn write_full_pages(d: StepDone, kept: Vec<KeptRank>) -> StepDone {
    let StepDone {
        step,
        summary,
        mut meta,
    } = d;
    meta.warnings.retain(|w| !w.is_step_without_pages());
    fn rc(k: &KeptRank) -> RankComparison<'_> {
        let (t1, t2, matches) = &k.tables;
        RankComparison {
            rank1: k.rank1,
            rank2: k.rank2,
            t1,
            t2,
            matches,
        }
    }
    // Each rank's equal share, then what the others left to those it cut
    // (as a compare shares its budget).
    let plans: Vec<report::PagePlan> = kept
        .par_iter()
        .map(|k| report::PagePlan::new(&rc(k), &k.report))
        .collect();
    let uses: Vec<Option<report::BudgetUse>> =
        plans.iter().map(|p| p.budget_use().cloned()).collect();
    let share = kept.first().and_then(|k| k.report.html_budget).unwrap_or(0);
    let given = report::top_up(share.saturating_mul(kept.len() as u64), &uses);
    let written: Vec<(u32, Result<RankSummary, report::ReportError>)> = kept
        .par_iter()
        .zip(plans)
        .zip(given)
        .map(|((k, plan), more)| {
            let rc = rc(k);
            let s = match more {
                Some(b) => {
                    let opts = ReportOptions {
                        html_budget: Some(b),
                        ..k.report.clone()
                    };
                    report::write_rank(&rc, &opts)
                }
                None => report::write_rank_with_progress(&rc, &k.report, &plan, &()),
            };
            (k.rank1, s)
        })
        .collect();
    drop(kept);
    let mut ranks = summary.ranks;
    for (rank, r) in written {
        let i = ranks.iter().position(|s| s.rank == rank);
        match (r, i) {
            (Ok(s), Some(i)) => ranks[i] = s,
            (Ok(_), None) => {}
            (Err(e), i) => {
                let e = Message::Text(e.to_string());
                if let Some(i) = i {
                    ranks.remove(i);
                }
                meta.errors.push(e.clone());
                meta.ranks_failed.push(FailedRank {
                    rank,
                    step: None,
                    errors: vec![e],
                });
            }
        }
    }
    let (meta, summary) = super::outputs::finish_step(meta, ranks);
    StepDone {
        step,
        summary,
        meta,
    }
}

/// The parts of the inclusive `ranges` that hold none of the `present`
/// steps, as inclusive ranges, ascending: `1-99999999999` over steps 1-8
/// is `9-99999999999` (the steps are not listed one by one).
fn absent_ranges(ranges: &[(u64, u64)], present: &BTreeSet<u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &(a, b) in ranges {
        let mut from = Some(a);
        for &s in present.range(a..=b) {
            if let Some(f) = from.filter(|f| s > *f) {
                out.push((f, s - 1));
            }
            from = s.checked_add(1);
        }
        if let Some(f) = from.filter(|f| *f <= b) {
            out.push((f, b));
        }
    }
    out.sort_unstable();
    // Overlapping or touching ranges (`--steps 5-9,7-12`) as one.
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in out {
        match merged.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// The losses recorded at the steps one run only has (`only`: run 1's,
/// run 2's; `s1`, `s2`: each run's step folders): the lowest rank's
/// `Loss:` header line, read without parsing a block; steps without one
/// are left out.
fn one_sided_losses(
    only: &(Vec<u64>, Vec<u64>),
    s1: &BTreeMap<u64, PathBuf>,
    s2: &BTreeMap<u64, PathBuf>,
) -> Vec<StepLoss> {
    let loss = |dir: &PathBuf| -> Option<f64> {
        let input = super::RunInput::discover(dir).ok()?;
        let (_, log) = input.ranks.first()?;
        crate::parser::read_header(log).ok()?.loss
    };
    let mut out: Vec<StepLoss> = Vec::new();
    for (steps, folders, first) in [(&only.0, s1, true), (&only.1, s2, false)] {
        for step in steps {
            if let Some(l) = folders.get(step).and_then(loss) {
                out.push(StepLoss {
                    step: *step,
                    loss1: first.then_some(l),
                    loss2: (!first).then_some(l),
                });
            }
        }
    }
    out.sort_by_key(|l| l.step);
    out
}

/// Inclusive step ranges, ascending.
type StepRanges = Vec<(u64, u64)>;

/// The steps `ranges` name that are not in `present`: (those between the
/// first and last present step that a range of several steps names, those
/// named alone or outside that span), each as merged inclusive ranges.
fn split_absent(ranges: &[(u64, u64)], present: &BTreeSet<u64>) -> (StepRanges, StepRanges) {
    let (Some(&lo), Some(&hi)) = (present.first(), present.last()) else {
        return (absent_ranges(ranges, present), Vec::new());
    };
    let mut inside = Vec::new();
    let mut refused = Vec::new();
    for (a, b) in absent_ranges(ranges, present) {
        if a < lo {
            refused.push((a, b.min(lo - 1)));
        }
        if b > hi {
            refused.push((a.max(hi + 1), b));
        }
        let (a, b) = (a.max(lo), b.min(hi));
        if a > b {
            continue;
        }
        // Within the span: refused where a step of it was named alone.
        let mut alone: Vec<(u64, u64)> = ranges
            .iter()
            .filter(|(x, y)| x == y && (a..=b).contains(x))
            .copied()
            .collect();
        alone.sort_unstable();
        alone.dedup();
        if alone.is_empty() {
            inside.push((a, b));
        } else {
            refused.extend(alone.iter().copied());
            let mut from = a;
            for &(s, _) in &alone {
                if s > from {
                    inside.push((from, s - 1));
                }
                from = from.max(s + 1);
            }
            if from <= b {
                inside.push((from, b));
            }
        }
    }
    refused.sort_unstable();
    refused.dedup();
    (inside, refused)
}

/// The steps of two step series that a compare pairs: the steps both runs
/// have (and `--steps` includes), the steps one run lacks, the warnings
/// about step folders without logs, and what to say if nothing pairs.
struct StepPairs {
    both: Vec<(u64, PathBuf, PathBuf)>,
    only: (Vec<u64>, Vec<u64>),
    /// The losses recorded at the steps of `only` ([`one_sided_losses`]).
    only_losses: Vec<StepLoss>,
    /// Steps either run has that `--steps` leaves out.
    not_selected: Vec<u64>,
    warnings: Vec<Message>,
    /// Input errors: steps `--steps` names that no run reached
    /// ([`Message::StepsNotCaptured`]).
    errors: Vec<Message>,
    no_step: Message,
}

impl StepPairs {
    fn of(cfg: &CompareConfig, sel: &StepSelection) -> StepPairs {
        let s1: BTreeMap<u64, PathBuf> = step_folders(&cfg.run1).into_iter().collect();
        let s2: BTreeMap<u64, PathBuf> = step_folders(&cfg.run2).into_iter().collect();
        let mut warnings: Vec<Message> = [&cfg.run1, &cfg.run2]
            .iter()
            .flat_map(|r| unfinished_step_folders(r))
            .map(|p| Message::UnfinishedStep {
                path: p.display().to_string(),
            })
            .collect();
        warnings.extend(
            [&cfg.run1, &cfg.run2]
                .iter()
                .filter_map(|r| logs_beside_steps(r)),
        );
        warnings.extend(super::messages::same_run(&cfg.run1, &cfg.run2));
        let mut no_step = Message::NoStep { selected: None };
        let mut errors = Vec::new();
        if let StepSelection::Only(ranges) = sel {
            let present: BTreeSet<u64> = s1.keys().chain(s2.keys()).copied().collect();
            // Steps absent between the runs' first and last (a range over a
            // schedule of every 10th step) are a warning; a step named alone,
            // or steps outside that span (a run stopped early), an error:
            // the gate asked about them (trial 19 F3: `--steps 1-3,9` on
            // runs of steps 1-6 passed, exit 0).
            let (absent, refused) = split_absent(ranges, &present);
            if !absent.is_empty() {
                warnings.push(Message::StepsInNeither { steps: absent });
            }
            if !refused.is_empty() && !present.is_empty() {
                errors.push(Message::StepsNotCaptured {
                    steps: refused,
                    present: present.iter().copied().collect(),
                });
            }
            let keys = |m: &BTreeMap<u64, PathBuf>| m.keys().copied().collect::<Vec<_>>();
            no_step = Message::NoStep {
                selected: Some((keys(&s1), keys(&s2))),
            };
        }
        let only = |a: &BTreeMap<u64, PathBuf>, b: &BTreeMap<u64, PathBuf>| -> Vec<u64> {
            a.keys()
                .filter(|s| !b.contains_key(s) && sel.includes(**s))
                .copied()
                .collect()
        };
        let only = (only(&s1, &s2), only(&s2, &s1));
        let only_losses = one_sided_losses(&only, &s1, &s2);
        let both = s1
            .iter()
            .filter(|(s, _)| sel.includes(**s))
            .filter_map(|(s, p1)| s2.get(s).map(|p2| (*s, p1.clone(), p2.clone())))
            .collect();
        let mut not_selected: Vec<u64> = s1
            .keys()
            .chain(s2.keys())
            .filter(|s| !sel.includes(**s))
            .copied()
            .collect();
        not_selected.sort_unstable();
        not_selected.dedup();
        StepPairs {
            both,
            only,
            only_losses,
            not_selected,
            warnings,
            errors,
            no_step,
        }
    }
}

/// Compares `steps` (in parallel, on `cfg.jobs` threads; each step's ranks
/// in parallel inside it, on one pool: a run of S steps × R ranks keeps
/// every core busy even with one rank, like S × R ranks of one step), then
/// writes the first diverging one's full pages unless `all_pages`: from
/// its kept tables ([`Kept`]) when `keep`, else by comparing it again.
/// `part_of` gives a step's part settings (a sharded series) or `None`.
fn compare_all(
    cfg: &CompareConfig,
    steps: &[(u64, PathBuf, PathBuf)],
    all_pages: bool,
    part_of: &(dyn Fn(u64) -> Option<ShardPart> + Sync),
    quiet: bool,
    keep: bool,
) -> Result<Vec<StepDone>, String> {
    let kept = (keep && !all_pages).then(|| Arc::new(Kept::default()));
    let progress = Progress::new(steps.len() as u64, quiet);
    let mut inner = CompareConfig {
        jobs: None,
        ..cfg.clone()
    };
    // The report's HTML budget is the series': shared by its steps, each
    // step's share by its ranks, whether every step gets pages or only
    // the first diverging one (whose pages are then those `--steps all`
    // writes for it, and cost what the same rows as ranks would).
    inner.report.html_budget = report::series_step_budget(cfg.report.html_budget, steps.len());
    let with_part = |c: &CompareConfig, s: u64| CompareConfig {
        shard: part_of(s),
        ..c.clone()
    };
    let work = || -> Vec<StepDone> {
        steps
            .par_iter()
            .map(|(s, p1, p2)| {
                let c = with_part(&inner, *s);
                let d = compare_step(&c, *s, (p1, p2), all_pages, kept.as_ref());
                if let Some(k) = &kept {
                    k.step_done(*s, diverges(&d.summary));
                }
                progress.inc();
                d
            })
            .collect()
    };
    let pool = match cfg.jobs {
        Some(n) => match rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build()
        {
            Ok(pool) => Some(pool),
            Err(_) => return Err(format!("cannot start {n} worker threads")),
        },
        None => None,
    };
    let mut done = match &pool {
        Some(pool) => pool.install(work),
        None => work(),
    };
    progress.finish();
    let first = done.iter().find(|d| diverges(&d.summary)).map(|d| d.step);
    if let (Some(f), false) = (first, all_pages) {
        let i = done.iter().position(|d| d.step == f).expect("compared");
        let n = done[i].summary.ranks.len();
        match kept.as_ref().and_then(|k| k.take(f, n)) {
            Some(tables) => {
                let d = done.remove(i);
                let write = || write_full_pages(d, tables);
                let d = match &pool {
                    Some(pool) => pool.install(write),
                    None => write(),
                };
                done.insert(i, d);
            }
            None => {
                // The first diverging step again, with its full pages.
                let (_, p1, p2) = steps.iter().find(|(s, ..)| *s == f).expect("compared");
                let again = CompareConfig {
                    jobs: cfg.jobs,
                    ..inner.clone()
                };
                done[i] = compare_step(&with_part(&again, f), f, (p1, p2), true, None);
            }
        }
    }
    Ok(done)
}

/// `actdiff compare` on two step series: every step both runs have (and
/// `sel` includes) compared in step order, then the series' outputs:
/// `OUT/summary.json` (a [`Summary`] whose ranks carry their step, with
/// the [`StepSeries`] fields), `OUT/index.html` (the step × rank strip and
/// the loss curves), JUnit (one case per step and rank) and the terminal.
/// Returns the exit status over every step. With `--shard`, see
/// [`compare_part`].
pub fn compare_steps(cfg: &CompareConfig, sel: &StepSelection, outs: &RunOutputs) -> i32 {
    if let Err(e) = prepare_report_folder(&cfg.report) {
        let errors = vec![Message::Text(e.to_string())];
        return super::outputs::input_error(cfg.report.clone(), errors, outs);
    }
    let pairs = StepPairs::of(cfg, sel);
    let all_pages = *sel == StepSelection::All;
    let quiet = cfg.quiet || outs.terminal != Terminal::Text;
    let done = match compare_all(cfg, &pairs.both, all_pages, &|_| None, quiet, true) {
        Ok(d) => d,
        Err(e) => {
            let errors = vec![Message::Text(e)];
            return super::outputs::input_error(cfg.report.clone(), errors, outs);
        }
    };
    let first = done.iter().find(|d| diverges(&d.summary)).map(|d| d.step);
    let compared: Vec<u64> = done.iter().map(|d| d.step).collect();
    let rows = join_step_rows(cfg, &compared);
    let mut summary = join(
        &cfg.report,
        done,
        (
            pairs.only.0,
            pairs.only.1,
            pairs.not_selected,
            pairs.only_losses,
        ),
        first,
        pairs.warnings,
        pairs.no_step,
    );
    let mut errors = pairs.errors;
    if let Err(e) = rows {
        errors.push(Message::Text(e));
    }
    if !errors.is_empty() {
        summary.input_errors.extend(errors);
        summary.exit_status = exit_codes::INPUT_ERROR;
        summary.verdict = report::steps::verdict(
            &summary,
            summary.series.as_ref().expect("a step series' summary"),
        );
    }
    write_outputs(&cfg.report, summary, outs)
}

/// The folder above a step folder's path, as text (`A/step_3` → `A`).
fn parent(path: &str) -> String {
    Path::new(path)
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| path.to_string())
}

/// Whether a step's comparison has a gating row on some rank.
fn diverges(s: &Summary) -> bool {
    s.ranks.iter().any(|r| judged_divergence(s, r))
        || !s.ranks_only1.is_empty()
        || !s.ranks_only2.is_empty()
}

/// Whether rank `r` of step summary `s` diverges: it has a gating row, and
/// its logs are complete or judged anyway (`--allow-incomplete`). The rows
/// past a truncated log's end are not compared (the step exits 3), so they
/// name no first diverging step: a truncated log at step 3 was said to be
/// the series' first divergence, "only in A", where the runs part at 5.
fn judged_divergence(s: &Summary, r: &RankSummary) -> bool {
    r.first_divergence.is_some() && !(r.incomplete() && s.exit_status == exit_codes::INCOMPLETE)
}

/// The series' [`Summary`]: every step's ranks (each with its step, its
/// page links under `step_S/`), counts over every step, the step facts
/// and one exit status over every step.
fn join(
    opts: &ReportOptions,
    done: Vec<StepDone>,
    (steps_only1, steps_only2, steps_not_selected, one_sided_losses): (
        Vec<u64>,
        Vec<u64>,
        Vec<u64>,
        Vec<StepLoss>,
    ),
    first: Option<u64>,
    mut warnings: Vec<Message>,
    no_step: Message,
) -> Summary {
    let mut ranks = Vec::new();
    let mut results = Vec::new();
    let mut errors = Vec::new();
    let mut rank_first: BTreeMap<u32, u64> = BTreeMap::new();
    let (mut only1, mut only2) = (Vec::new(), Vec::new());
    let mut failed: Vec<FailedRank> = Vec::new();
    let mut groups = Vec::new();
    let mut status = exit_codes::OK;
    // Each step's warnings, said once with the steps they concern.
    let mut step_warnings: Vec<(u64, Message)> = Vec::new();
    let mut step_errors: Vec<(u64, Message)> = Vec::new();
    let mut not_compared = Vec::new();
    // What was combined across layouts: the first diverging step's, else
    // the first step's that combined any (the terminal's lines; trial 22
    // L2: a series said none of them).
    let mut layouts: Vec<crate::layout::Combined> = Vec::new();
    for d in done {
        let dir = format!("{STEP_DIR_PREFIX}{}", d.step);
        let s = d.summary;
        if !s.layouts.is_empty() && (layouts.is_empty() || first == Some(d.step)) {
            layouts = s.layouts.clone();
        }
        let failed_input = matches!(
            s.exit_status,
            exit_codes::INPUT_ERROR | exit_codes::INCOMPLETE
        );
        if failed_input && !diverges(&s) {
            not_compared.push(d.step);
        }
        results.push(StepResult::of(d.step, &dir, &s));
        // Incomplete input after the first diverging step cannot change
        // the answer (the runs part there): the series diverges, exit 1,
        // not 3 (trial 29: a rank that stopped capturing at the divergence,
        // on_divergence="stop-capturing", has no later logs).
        let after_first = first.is_some_and(|f| d.step > f);
        status = worse(
            status,
            if after_first && s.exit_status == exit_codes::INCOMPLETE {
                exit_codes::DIVERGED
            } else {
                s.exit_status
            },
        );
        step_errors.extend(s.input_errors.iter().map(|e| (d.step, e.clone())));
        step_warnings.extend(
            s.warnings
                .iter()
                .filter(|w| !w.is_step_without_pages())
                .map(|w| (d.step, w.clone())),
        );
        only1.extend(s.ranks_only1.iter().copied());
        only2.extend(s.ranks_only2.iter().copied());
        failed.extend(s.ranks_failed.iter().map(|f| FailedRank {
            step: Some(d.step),
            ..f.clone()
        }));
        // A rank one run lacks at this step diverges here, as a rank only
        // one run has gates a compare.
        for &rank in s.ranks_only1.iter().chain(&s.ranks_only2) {
            rank_first.entry(rank).or_insert(d.step);
        }
        if Some(d.step) == first {
            groups = s.groups.clone();
        }
        let judged: Vec<bool> = s.ranks.iter().map(|r| judged_divergence(&s, r)).collect();
        for (mut r, judged) in s.ranks.into_iter().zip(judged) {
            if judged {
                rank_first.entry(r.rank).or_insert(d.step);
            }
            r.step = Some(d.step);
            report::steps::rebase_links(&mut r, &dir);
            ranks.push(r);
        }
    }
    warnings.extend(super::messages::at_steps(step_warnings));
    // An error of many steps is said once with them (trial 64: four
    // identical lines, one a step, for `--bitwise` on mixed precisions).
    errors.extend(super::messages::at_steps(step_errors));
    only1.sort_unstable();
    only1.dedup();
    only2.sort_unstable();
    only2.dedup();
    if !steps_only1.is_empty() || !steps_only2.is_empty() {
        status = worse(status, exit_codes::DIVERGED);
    }
    let counts = Summary::total_counts(&ranks);
    let series = StepSeries {
        steps: results.iter().map(|r| r.step).collect(),
        steps_only1,
        steps_only2,
        steps_not_selected,
        steps_not_compared: not_compared,
        first_diverging_step: first,
        first_diverging_step_by_rank: rank_first
            .into_iter()
            .map(|(rank, step)| RankStep { rank, step })
            .collect(),
        step_results: results,
        one_sided_losses,
    };
    let mut s = Summary {
        schema_version: SCHEMA_VERSION,
        tool: format!("actdiff {}", env!("CARGO_PKG_VERSION")),
        name1: opts.name1.clone(),
        name2: opts.name2.clone(),
        path1: opts.path1.clone(),
        path2: opts.path2.clone(),
        counts,
        ranks,
        ranks_only1: only1,
        ranks_only2: only2,
        ranks_failed: failed,
        input_errors: errors,
        warnings,
        groups,
        exit_status: status,
        verdict: Vec::new(),
        series: None,
        layouts,
    };
    if series.steps.is_empty() && s.input_errors.is_empty() {
        s.input_errors.push(no_step);
        s.exit_status = exit_codes::INPUT_ERROR;
    }
    s.verdict = report::steps::verdict(&s, &series);
    s.series = Some(series);
    s
}

/// The worse of two exit statuses: input error (2) over incomplete (3)
/// over diverged (1) over OK (0).
fn worse(a: i32, b: i32) -> i32 {
    let rank = |s: i32| match s {
        exit_codes::OK => 0,
        exit_codes::DIVERGED => 1,
        exit_codes::INCOMPLETE => 2,
        _ => 3,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

/// Writes the series' `summary.json`, `index.html`, JUnit and terminal
/// summary; returns the exit status.
fn write_outputs(opts: &ReportOptions, mut summary: Summary, outs: &RunOutputs) -> i32 {
    if let Err(e) = report::steps::write_index(&summary, opts) {
        let error = Message::Text(e.to_string());
        summary.input_errors.push(error.clone());
        summary.exit_status = exit_codes::INPUT_ERROR;
        summary.verdict.insert(
            0,
            crate::report::reasons::Reason::InputError {
                errors: vec![error],
            },
        );
        let _ = std::fs::remove_file(opts.out_dir.join(files::INDEX));
        let _ = std::fs::remove_file(opts.out_dir.join(files::SUMMARY));
    }
    for w in report::messages::lines_by_rank(&summary.warnings) {
        eprintln!("warning: {w}");
    }
    for e in report::messages::lines_by_rank(&summary.input_errors) {
        eprintln!("error: {e}");
    }
    super::outputs::junit_and_terminal(
        &summary,
        &opts.out_dir,
        outs,
        report::steps::render_terminal,
    )
}

/// A progress bar over steps (hidden when quiet or not a terminal).
struct Progress(Option<indicatif::ProgressBar>);

impl Progress {
    fn new(len: u64, hidden: bool) -> Progress {
        if hidden || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return Progress(None);
        }
        let bar = indicatif::ProgressBar::new(len);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} steps {msg}")
        {
            bar.set_style(style);
        }
        Progress(Some(bar))
    }
    fn inc(&self) {
        if let Some(b) = &self.0 {
            b.inc(1);
        }
    }
    fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests;

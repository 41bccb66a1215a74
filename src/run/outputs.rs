//! The run-level outputs of a comparison: the exit status and its verdict
//! lines, `summary.json`, `index.html`, the `--junit` file, the terminal
//! summary and the input errors and warnings on stderr — all computed from
//! the per-rank summaries ([`RankSummary`]) and the run's metadata
//! ([`RunMeta`]) only, never from the op tables, so that `compare` (after
//! its ranks) and a merge of a sharded run's parts produce them alike.
//!
//! They always agree: every output is written from one [`Summary`], and a
//! failure to write the report folder is itself an input error that the
//! JUnit file, the terminal and the exit status then show.

use std::path::PathBuf;

use crate::exit_codes;
use crate::report::messages::{self, Message, Side};
use crate::report::reasons::{self, fmt_ranks, Reason};
use crate::report::summary::{FailedRank, SideSummary, SCHEMA_VERSION};
use crate::report::{self, files, junit, terminal, RankSummary, ReportOptions, Summary};

/// What a run is, beside its rank summaries.
#[derive(Clone, Debug, Default)]
pub struct RunMeta {
    /// The report folder, the runs' display names and paths.
    pub report: ReportOptions,
    /// Ranks only run 1 has.
    pub ranks_only1: Vec<u32>,
    /// Ranks only run 2 has.
    pub ranks_only2: Vec<u32>,
    /// Ranks both runs have that could not be compared, with why.
    pub ranks_failed: Vec<FailedRank>,
    /// Every input error (each naming its file), those of
    /// [`RunMeta::ranks_failed`] included.
    pub errors: Vec<Message>,
    /// Warnings for stderr.
    pub warnings: Vec<Message>,
    /// `--allow-incomplete`: incomplete input is a divergence (1), not 3.
    pub allow_incomplete: bool,
    /// The runs whose shards were combined ([`super::layouts`]).
    pub layouts: Vec<crate::layout::Combined>,
}

/// What the terminal shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Terminal {
    /// The text summary.
    #[default]
    Text,
    /// The `summary.json` document.
    Json,
    /// Nothing on stdout (`--quiet`).
    Quiet,
}

/// Which run-level outputs to write beside `index.html` and `summary.json`.
#[derive(Clone, Debug, Default)]
pub struct RunOutputs {
    /// `--junit FILE`.
    pub junit: Option<PathBuf>,
    /// stdout.
    pub terminal: Terminal,
}

/// The summary of the whole comparison: ranks linked across collectives,
/// grouped, counted, and the exit status with its verdict lines.
pub fn summarise(meta: &RunMeta, mut ranks: Vec<RankSummary>) -> Summary {
    // A combined run whose replicas differ: every rank with a cause names
    // the first such replica beside it (the combined rows kept another
    // rank's value).
    if let Some(m) = meta.layouts.iter().find_map(|l| l.mismatches.first()) {
        for r in ranks
            .iter_mut()
            .filter(|r| r.root_causes.first_cause.is_some())
        {
            r.root_causes.replicas_differ = Some(m.clone());
        }
    }
    Summary::link_optimizer_only_ranks(&mut ranks);
    Summary::link_collective_ranks(&mut ranks);
    let (exit_status, verdict) = verdict(meta, &ranks);
    Summary {
        schema_version: SCHEMA_VERSION,
        tool: format!("actdiff {}", env!("CARGO_PKG_VERSION")),
        name1: meta.report.name1.clone(),
        name2: meta.report.name2.clone(),
        path1: meta.report.path1.clone(),
        path2: meta.report.path2.clone(),
        counts: Summary::total_counts(&ranks),
        ranks_only1: meta.ranks_only1.clone(),
        ranks_only2: meta.ranks_only2.clone(),
        ranks_failed: meta.ranks_failed.clone(),
        input_errors: meta.errors.clone(),
        warnings: meta.warnings.clone(),
        groups: Summary::group_ranks(&ranks),
        ranks,
        exit_status,
        verdict,
        series: None,
        layouts: meta.layouts.clone(),
    }
}

/// Writes every run-level output and returns the exit status: warnings and
/// errors on stderr, `summary.json` and `index.html` into the report
/// folder (which must exist), the JUnit file, then the terminal summary.
pub fn finish(meta: RunMeta, ranks: Vec<RankSummary>, outs: &RunOutputs) -> i32 {
    let (meta, summary) = write_reports(meta, ranks);
    print_outputs(&meta, &summary, outs)
}

/// [`finish`] for one step of a step series: writes the step's
/// `summary.json` and `index.html` and returns its [`Summary`], with the
/// [`RunMeta`] it was made from (a step series writes its first diverging
/// step's report again from it, with full pages); nothing on stderr or
/// stdout (the series prints its warnings and errors once).
pub fn finish_step(meta: RunMeta, ranks: Vec<RankSummary>) -> (RunMeta, Summary) {
    write_reports(meta, ranks)
}

/// Summarises and writes `summary.json` and `index.html`; a failure to
/// write them is one more input error, in the summary returned.
fn write_reports(mut meta: RunMeta, ranks: Vec<RankSummary>) -> (RunMeta, Summary) {
    let mut summary = summarise(&meta, ranks);
    // Without a report folder (`-o` names a file, or it could not be made)
    // there is nowhere to write: the error that says so is the one to see.
    let folder = meta.report.out_dir.is_dir() || meta.errors.is_empty();
    let written = if folder {
        report::write_index(&summary, &meta.report)
    } else {
        Ok(())
    };
    if let Err(e) = written {
        meta.errors.push(Message::Text(e.to_string()));
        summary = summarise(&meta, summary.ranks);
        // No summary.json or index.html may claim the verdict written
        // before the failure.
        let out = &meta.report.out_dir;
        let _ = std::fs::remove_file(out.join(files::INDEX));
        let json = report::summary_json(&summary);
        if std::fs::write(out.join(files::SUMMARY), json).is_err() {
            let _ = std::fs::remove_file(out.join(files::SUMMARY));
        }
    }
    (meta, summary)
}

/// Prints the warnings and errors, writes the JUnit file and the terminal
/// summary; returns the exit status.
fn print_outputs(meta: &RunMeta, summary: &Summary, outs: &RunOutputs) -> i32 {
    for w in report::messages::lines_by_rank(&meta.warnings) {
        eprintln!("warning: {w}");
    }
    for e in report::messages::lines_by_rank(&meta.errors) {
        eprintln!("error: {e}");
    }
    if summary.ranks.is_empty() && meta.errors.is_empty() {
        eprintln!(
            "error: nothing compared: no rank is in both runs (run1 ranks {}, run2 ranks {}); pair ranks of other numbers with --rank-map A:B",
            fmt_ranks(&meta.ranks_only1),
            fmt_ranks(&meta.ranks_only2)
        );
    }
    junit_and_terminal(summary, &meta.report.out_dir, outs, terminal::render)
}

/// Writes `summary`'s JUnit file (`--junit`) and its terminal output: the
/// JSON document, or the text `render` makes of it and the path of
/// `out_dir`'s index ("not written" when absent). Returns the exit status.
/// A JUnit file that cannot be written is an input error: said on stderr
/// (`--junit FILE: why`), and the summary the terminal shows and
/// `out_dir`'s `summary.json` (rewritten) say so, with exit status 2
/// (trial 25 #6: summary.json kept "diverged", exit 1, while the run
/// exited 2). Shared by a comparison and a step series (`super::steps`).
pub(super) fn junit_and_terminal(
    summary: &Summary,
    out_dir: &std::path::Path,
    outs: &RunOutputs,
    render: fn(&Summary, &str) -> String,
) -> i32 {
    let failed;
    let mut summary = summary;
    if let Some(j) = &outs.junit {
        let res = std::fs::File::create(j)
            .and_then(|f| junit::write_junit(summary, std::io::BufWriter::new(f)));
        if let Err(e) = res {
            let error = Message::Text(format!("--junit {}: {e}", j.display()));
            eprintln!("error: {error}");
            let mut s = summary.clone();
            s.input_errors.push(error.clone());
            s.exit_status = exit_codes::INPUT_ERROR;
            s.verdict.insert(
                0,
                crate::report::reasons::Reason::InputError {
                    errors: vec![error],
                },
            );
            let json = out_dir.join(files::SUMMARY);
            if json.is_file() && std::fs::write(&json, report::summary_json(&s)).is_err() {
                let _ = std::fs::remove_file(&json);
            }
            failed = s;
            summary = &failed;
        }
    }
    match outs.terminal {
        Terminal::Json => println!(
            "{}",
            String::from_utf8_lossy(&report::summary_json(summary))
        ),
        Terminal::Text => {
            let index = out_dir.join(files::INDEX);
            let report = if index.is_file() {
                index.display().to_string()
            } else {
                "not written".to_string()
            };
            print!("{}", render(summary, &report));
        }
        Terminal::Quiet => {}
    }
    summary.exit_status
}

/// The outputs of a comparison stopped by input errors before any rank was
/// read (a missing run, a bad option, rules, config or override file): the
/// report folder is prepared as for a comparison (its previous report
/// removed, so no stale page says otherwise) and every output says why.
pub fn input_error(report: ReportOptions, errors: Vec<Message>, outs: &RunOutputs) -> i32 {
    let mut meta = RunMeta {
        report,
        errors,
        ..RunMeta::default()
    };
    if let Err(e) = prepare_report_folder(&meta.report) {
        meta.errors.push(Message::Text(e.to_string()));
    }
    finish(meta, Vec::new(), outs)
}

/// The JUnit file of a command line the option parser rejected (before
/// even the report folder is known): one `<error>` case, `input`, with
/// `message`.
/// The error for an output file (`--junit`, `--rows`) that is one of the
/// runs' logs: a run given as that file, or a rank log in a run's folder
/// (or a step folder of it). Writing it would destroy the input (trial
/// 25: `--junit a.log --rows b.log` overwrote both logs, exit 1, no
/// word). `None` for a path that does not exist yet or is no input.
pub fn output_overwrites_input(
    option: &str,
    out: &std::path::Path,
    runs: [&std::path::Path; 2],
) -> Option<String> {
    let o = std::fs::canonicalize(out).ok()?;
    let is_log_name = o
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(super::rank_of_file_name)
        .is_some();
    runs.iter().find_map(|r| {
        let c = std::fs::canonicalize(r).ok()?;
        let inside = o.parent().is_some_and(|p| {
            p == c || (p.parent() == Some(c.as_path()) && p.file_name().and_then(|n| n.to_str()).and_then(files::step_of_dir_name).is_some())
        });
        (o == c || (inside && is_log_name)).then(|| {
            format!(
                "{option} {}: that file is a log of the run {}; writing it would overwrite the input",
                out.display(),
                r.display()
            )
        })
    })
}

/// The error for an output file (`--junit`, `--rows`) that names a file
/// of the report in `report_dir` (`-o`) or in one of its step folders: a
/// report file ([`files::is_report_file`]) or a part's manifest
/// ([`files::is_part_manifest`]). The report would remove it or write
/// over it, or it the report's (trial 62: `--rows r/rank0-page3.html`
/// left a page of JSON Lines linked from the index). `None` otherwise,
/// and while the folder does not exist.
pub fn output_in_report(
    option: &str,
    out: &std::path::Path,
    report_dir: &std::path::Path,
) -> Option<String> {
    let name = out.file_name()?.to_str()?;
    if !(files::is_report_file(name) || files::is_part_manifest(name)) {
        return None;
    }
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let (p, r) = (
        std::fs::canonicalize(parent).ok()?,
        std::fs::canonicalize(report_dir).ok()?,
    );
    let in_step = || {
        p.parent() == Some(r.as_path())
            && p.file_name()
                .and_then(|n| n.to_str())
                .and_then(files::step_of_dir_name)
                .is_some()
    };
    (p == r || in_step()).then(|| {
        format!(
            "{option} {}: that is a file of the report in {} (-o); give the report folder or this file another name",
            out.display(),
            report_dir.display()
        )
    })
}

pub fn usage_error_junit(path: &std::path::Path, message: &str) -> std::io::Result<()> {
    error_junit(path, vec![Message::Text(message.to_string())])
}

/// A JUnit file saying that nothing was compared because of `errors` (one
/// `<error>` case, `input`, as for any input error): for a command line
/// the option parser rejected, and for a merge that refused its parts.
pub fn error_junit(path: &std::path::Path, errors: Vec<Message>) -> std::io::Result<()> {
    let meta = RunMeta {
        report: ReportOptions {
            name1: "run1".into(),
            name2: "run2".into(),
            ..ReportOptions::default()
        },
        errors,
        ..RunMeta::default()
    };
    let summary = summarise(&meta, Vec::new());
    junit::write_junit(
        &summary,
        std::io::BufWriter::new(std::fs::File::create(path)?),
    )
}

/// A part of a sharded compare (`--shard`) stopped by input errors before
/// any rank was read (a bad option, rules, config or override file): its
/// folder is cleared of report files and of the rows file an earlier part
/// there recorded, and its `part.json` says failed with the errors, so the
/// merge names it. Errors go to stderr; returns exit 2.
pub fn part_input_error(
    report: &ReportOptions,
    shard: super::shard::Shard,
    options: serde_json::Value,
    mut errors: Vec<Message>,
) -> i32 {
    use super::shard::{self, Manifest};
    let out = &report.out_dir;
    if let Err(e) = shard::remove_previous_rows(out) {
        errors.push(Message::Text(e));
    }
    match prepare_report_folder(report) {
        Err(e) => errors.push(Message::Text(e.to_string())),
        Ok(()) => {
            // An earlier part of a step series in this folder would
            // otherwise still say it compared its steps.
            let _ = std::fs::remove_file(out.join(super::steps::SERIES_PART));
            let m = Manifest::failed(shard, options, messages::join(&errors, "; "));
            if let Err(e) = m.write(out) {
                errors.push(Message::File {
                    path: out.join(shard::MANIFEST).display().to_string(),
                    error: e.to_string(),
                });
            }
        }
    }
    for e in &errors {
        eprintln!("error: part {shard}: {e}");
    }
    exit_codes::INPUT_ERROR
}

/// Creates the report folder and removes the report files a previous
/// comparison left there (see [`report::clear_previous`]).
pub fn prepare_report_folder(report: &ReportOptions) -> Result<(), report::ReportError> {
    create_report_folder(report)?;
    report::clear_previous(&report.out_dir)?;
    Ok(())
}

/// [`prepare_report_folder`] for a comparison that writes result pages:
/// the previous report's result pages stay for it to write over (see
/// [`report::clear_previous_keeping_pages`]); the caller removes those it
/// did not write with [`report::KeptPages::remove_unwritten`].
pub fn prepare_report_folder_keeping_pages(
    report: &ReportOptions,
) -> Result<report::KeptPages, report::ReportError> {
    create_report_folder(report)?;
    report::clear_previous_keeping_pages(&report.out_dir)
}

/// Creates the report folder (`-o`); an error when it names a file.
fn create_report_folder(report: &ReportOptions) -> Result<(), report::ReportError> {
    let out = &report.out_dir;
    if out.exists() && !out.is_dir() {
        return Err(report::ReportError::Io {
            path: out.to_path_buf(),
            message: "exists and is not a folder; -o names the report folder".into(),
        });
    }
    std::fs::create_dir_all(out).map_err(|e| report::ReportError::Io {
        path: out.to_path_buf(),
        message: format!("cannot create the report folder (-o): {e}"),
    })
}

/// The exit status and its reasons, one verdict line each, by the
/// contract in [`crate::exit_codes`]: input errors (2) before incomplete
/// input (3) before divergence (1).
fn verdict(meta: &RunMeta, ranks: &[RankSummary]) -> (i32, Vec<Reason>) {
    let names = || (meta.report.name1.clone(), meta.report.name2.clone());
    let (only1, only2) = (&meta.ranks_only1, &meta.ranks_only2);
    let errors = &meta.errors;
    let mut reasons = Vec::new();
    let mut status = exit_codes::OK;
    if !errors.is_empty() {
        reasons.push(Reason::InputError {
            errors: errors.clone(),
        });
        // Stopped by incomplete input alone (a shard log cut short): 3,
        // with --allow-incomplete too, as nothing was judged.
        status = if errors.iter().all(Message::is_incomplete_input) {
            exit_codes::INCOMPLETE
        } else {
            exit_codes::INPUT_ERROR
        };
    }
    if ranks.is_empty() && errors.is_empty() {
        reasons.push(Reason::NoRankInBoth);
        status = exit_codes::INPUT_ERROR;
    }
    let incomplete: Vec<Reason> = ranks
        .iter()
        .flat_map(|r| {
            let side = |s: &SideSummary, side: Side| {
                s.incomplete
                    .iter()
                    .map(|why| Reason::Incomplete {
                        rank: r.rank,
                        side,
                        path: s.path.clone(),
                        why: why.clone(),
                    })
                    .collect::<Vec<_>>()
            };
            let mut v = side(&r.run1, "run1");
            v.extend(side(&r.run2, "run2"));
            v
        })
        .collect();
    if !incomplete.is_empty() {
        reasons.extend(incomplete);
        if status == exit_codes::OK {
            // Never a pass on incomplete input: 3, or 1 when it is allowed.
            status = if meta.allow_incomplete {
                exit_codes::DIVERGED
            } else {
                exit_codes::INCOMPLETE
            };
        }
    }
    // A rank one run lacks below the world size its logs declare: a
    // missing log, not a run of fewer ranks (trial 18 L5: a crashed DDP
    // rank read as a divergence, exit 1).
    let (name1, name2) = names();
    for (name, lacking, world) in [
        (name1, only2, ranks.iter().find_map(|r| r.run1.world_size)),
        (name2, only1, ranks.iter().find_map(|r| r.run2.world_size)),
    ] {
        let Some(world_size) = world else { continue };
        let missing: Vec<u32> = lacking
            .iter()
            .copied()
            .filter(|&r| r < world_size)
            .collect();
        if !missing.is_empty() {
            reasons.push(Reason::RanksMissing {
                name,
                ranks: missing,
                world_size,
            });
            if status == exit_codes::OK {
                status = if meta.allow_incomplete {
                    exit_codes::DIVERGED
                } else {
                    exit_codes::INCOMPLETE
                };
            }
        }
    }
    // Layouts compared at the reference's tolerance whose every gating row
    // is a `diff` within --layouts' tolerance: said beside the divergence
    // (trial 18 M3: identical TP=1 and TP=2 runs read as a real change).
    let at_reference = meta
        .warnings
        .iter()
        .any(|w| matches!(w, Message::LayoutsAtReferenceTolerance { .. }));
    let gating: Vec<&RankSummary> = ranks.iter().filter(|r| r.counts.gating > 0).collect();
    if at_reference && !gating.is_empty() {
        let largest = gating
            .iter()
            .map(|r| {
                let c = &r.counts;
                match r.root_causes.largest_rel_diff {
                    Some(rel) if c.only1 + c.only2 + c.missing + c.truncated == 0 => rel,
                    _ => f64::INFINITY,
                }
            })
            .fold(0.0, f64::max);
        if largest <= crate::layout::LAYOUT_RTOL {
            reasons.push(Reason::LayoutRounding { largest });
        }
    }
    for l in &meta.layouts {
        if l.mismatch_count > 0 {
            let (name1, name2) = names();
            reasons.push(Reason::ReplicasDiffer {
                name: if l.side == 1 { name1 } else { name2 },
                count: l.mismatch_count,
                first: Box::new(l.mismatches[0].clone()),
            });
            if status == exit_codes::OK {
                status = exit_codes::DIVERGED;
            }
        }
    }
    let c = Summary::total_counts(ranks);
    if c.diverging() > 0 {
        reasons.push(Reason::Diverged {
            gating: c.gating > 0,
            diff: c.diff,
            missing: c.missing,
            only1: c.only1,
            only2: c.only2,
            names: names(),
        });
    }
    reasons.extend(reasons::not_gating(&c, ranks));
    if !only1.is_empty() || !only2.is_empty() {
        reasons.push(Reason::RanksOnOneSide {
            only1: only1.clone(),
            only2: only2.clone(),
            names: names(),
        });
    }
    if status == exit_codes::OK && (c.gating > 0 || !only1.is_empty() || !only2.is_empty()) {
        status = exit_codes::DIVERGED;
    }
    reasons.extend(reasons::nan_in_both(ranks));
    if status == exit_codes::OK {
        reasons.push(Reason::NoDivergence { matched: c.matched });
        reasons.extend(reasons::not_captured(ranks));
    }
    if status == exit_codes::OK || ranks.iter().any(reasons::origin_by_hashes) {
        reasons.extend(reasons::compared_without_digests(
            ranks,
            (&meta.report.name1, &meta.report.name2),
        ));
    }
    (status, reasons)
}

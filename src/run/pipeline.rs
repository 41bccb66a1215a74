//! The compare pipeline: for every rank pair, parse both logs, match them and
//! write the rank's report pages, ranks in parallel on a rayon pool; then the
//! index, `summary.json`, the `--rows` file and the exit status.
//!
//! Input problems of one rank (an empty log, a log without ops, duplicate
//! keys) are collected as errors and never abort the other ranks.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;

use super::shard::{self, RankResult, RunLevel};
use super::{plan, RunInput};
use crate::exit_codes;
use crate::matcher::{self, MatchOptions};
use crate::parser::{self, duplicate_keys, Field, OpTable};
use crate::report::{self, RankComparison, RankReport, RankSummary, ReportOptions, Summary};

/// Everything `actdiff compare` needs, already parsed from the command line.
#[derive(Clone, Debug, Default)]
pub struct CompareConfig {
    /// Run 1: a log file or a folder of rank logs.
    pub run1: PathBuf,
    /// Run 2: a log file or a folder of rank logs.
    pub run2: PathBuf,
    /// Report folder, names, page size.
    pub report: ReportOptions,
    /// Overrides and tolerances.
    pub matching: MatchOptions,
    /// Where to write every result row as JSON Lines, if anywhere.
    pub rows: Option<PathBuf>,
    /// `(run-1 rank, run-2 rank)` pairs that replace pairing by number.
    pub rank_map: Vec<(u32, u32)>,
    /// Exit 1 instead of 3 on truncated logs and header count mismatches.
    pub allow_incomplete: bool,
    /// Keep duplicate keys (paired by occurrence) instead of exiting 2.
    pub allow_duplicates: bool,
    /// Worker threads (`None`: one per core).
    pub jobs: Option<usize>,
    /// No progress bars.
    pub quiet: bool,
    /// Rules that judged no row are an error (exit 2), not a warning.
    pub strict: bool,
    /// Layer-index offsets: (side 1 or 2, rank or all ranks, offset).
    pub layer_offsets: Vec<(u8, Option<u32>, i64)>,
    /// Read `L1 norm` as the Output hash where a block has none.
    pub l1_as_hash: bool,
    /// Compare one part of the ranks (`--shard`) and write it as a part.
    pub shard: Option<ShardPart>,
}

/// One part of a sharded compare: which, and the options recorded in its
/// manifest (see [`shard::Manifest::options`]).
#[derive(Clone, Debug)]
pub struct ShardPart {
    /// The part.
    pub shard: shard::Shard,
    /// The command-line options that affect results, as JSON.
    pub options: serde_json::Value,
}

/// Parses `--layer-offset` values `SIDE[:RANK]=OFFSET`, e.g. `run2:1=4`
/// (run 2's rank 1 numbers its layers from global layer 4) or `run1=-4`.
pub fn parse_layer_offsets(values: &[String]) -> Result<Vec<(u8, Option<u32>, i64)>, String> {
    values
        .iter()
        .map(|v| {
            let bad =
                || format!("--layer-offset `{v}`: expected SIDE[:RANK]=OFFSET, e.g. run2:1=4");
            let (lhs, off) = v.split_once('=').ok_or_else(bad)?;
            let off: i64 = off.trim().parse().map_err(|_| bad())?;
            let (side, rank) = match lhs.split_once(':') {
                Some((s, r)) => (s, Some(r.trim().parse::<u32>().map_err(|_| bad())?)),
                None => (lhs, None),
            };
            let side = match side.trim() {
                "run1" | "1" => 1,
                "run2" | "2" => 2,
                _ => return Err(bad()),
            };
            Ok((side, rank, off))
        })
        .collect()
}

/// What a comparison produced.
#[derive(Debug)]
pub struct Outcome {
    /// The summary written to `summary.json` (also when some ranks failed).
    pub summary: Summary,
    /// Input errors, one message per problem, naming the file.
    pub errors: Vec<String>,
    /// Warnings for stderr.
    pub warnings: Vec<String>,
    /// For a part of a sharded compare: which, and the units it holds (its
    /// summary covers those ranks only and is not written).
    pub part: Option<(shard::Shard, Vec<shard::Unit>)>,
}

impl Outcome {
    /// The exit status (see [`crate::exit_codes`]).
    pub fn exit_status(&self) -> i32 {
        self.summary.exit_status
    }
}

/// Errors that stop the whole comparison before any rank is compared.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The report folder could not be written.
    #[error(transparent)]
    Report(#[from] report::ReportError),
    /// The worker pool could not start.
    #[error("cannot start {0} worker threads")]
    Pool(usize),
}

/// Checks that a parsed log can be compared: not empty, has ops, has some
/// comparable field. `side` is `run1` or `run2`.
fn check_usable(t: &OpTable, side: &str, allow_duplicates: bool) -> Result<(), String> {
    let path = t.path().display();
    if t.bytes().is_empty() {
        return Err(format!("{path}: {side} is empty (0 bytes)"));
    }
    if t.is_empty() {
        let what = if t.header().total.is_some() {
            format!("{side} has no ops (header only)")
        } else {
            format!("{side}: no op blocks parsed; is this an activation log?")
        };
        return Err(format!("{path}:1:1: {what}"));
    }
    let comparable = Field::ALL[1..]
        .iter()
        .filter(|f| !matches!(f, Field::Location | Field::InputProducers | Field::Phase))
        .any(|f| t.schema().contains(*f));
    if !comparable {
        return Err(format!(
            "{path}:{}:1: {side}: no comparable fields (no Shape, stats or hashes in any block)",
            t.line(0)
        ));
    }
    if !allow_duplicates {
        if let Some((k, lines)) = duplicate_keys(t).first() {
            let l: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
            return Err(format!(
                "{path}:{}:1: {side}: duplicate key {k} at lines {} (use --allow-duplicates to keep both and pair by occurrence)",
                lines[0],
                l.join(" and ")
            ));
        }
    }
    Ok(())
}

fn parse_side(path: &Path, progress: &Progress) -> Result<OpTable, String> {
    parser::parse_path_progress(path, &|n| progress.bytes.inc(n)).map_err(|e| e.to_string())
}

/// Progress bars on stderr (drawn only when stderr is a terminal): bytes
/// parsed over all logs, and ranks compared.
struct Progress {
    multi: MultiProgress,
    bytes: ProgressBar,
    ranks: ProgressBar,
    pages: ProgressBar,
}

impl report::PageProgress for Progress {
    fn planned(&self, pages: u64) {
        self.pages.inc_length(pages);
    }
    fn written(&self) {
        self.pages.inc(1);
    }
}

impl Progress {
    fn new(quiet: bool, total_bytes: u64, ranks: u64) -> Progress {
        let multi = if quiet {
            MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
        } else {
            MultiProgress::new()
        };
        let bytes = multi.add(ProgressBar::new(total_bytes));
        bytes.set_style(
            ProgressStyle::with_template(
                "{spinner} parsed {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} eta {eta}",
            )
            .expect("valid template"),
        );
        let bar = multi.add(ProgressBar::new(ranks));
        bar.set_style(
            ProgressStyle::with_template("{spinner} ranks {pos}/{len} {msg} {wide_bar} eta {eta}")
                .expect("valid template"),
        );
        let pages = multi.add(ProgressBar::new(0));
        pages.set_style(
            ProgressStyle::with_template("{spinner} pages {pos}/{len} {per_sec} eta {eta}")
                .expect("valid template"),
        );
        for b in [&bytes, &bar, &pages] {
            b.enable_steady_tick(std::time::Duration::from_millis(120));
        }
        Progress {
            multi,
            bytes,
            ranks: bar,
            pages,
        }
    }
    fn stage(&self, rank: u32, what: &str) {
        self.ranks.set_message(format!("(rank {rank}: {what})"));
    }
    fn finish(&self) {
        self.bytes.finish_and_clear();
        self.ranks.finish_and_clear();
        self.pages.finish_and_clear();
        let _ = self.multi.clear();
    }
}

/// Returns the heap's free memory to the operating system. The parallel
/// parse builds partial tables on worker threads and joins them into one,
/// and matching builds key indexes it then drops; glibc keeps such freed
/// memory in its per-thread arenas, where it would count towards the peak
/// resident heap of the rest of the run. A few milliseconds.
fn return_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap pages; it has no
    // preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Per-stage wall times on stderr when `ACTDIFF_TIMINGS` is set (for
/// benchmarks), each with the process's anonymous memory (heap and stacks,
/// `RssAnon` of /proc/self/status on Linux) at the end of the stage.
struct Timer {
    /// The rank timed; `None`: the whole comparison.
    rank: Option<u32>,
    on: bool,
    last: std::cell::Cell<std::time::Instant>,
}

impl Timer {
    fn new(rank: u32) -> Timer {
        Timer::of(Some(rank))
    }
    fn of(rank: Option<u32>) -> Timer {
        Timer {
            rank,
            on: std::env::var_os("ACTDIFF_TIMINGS").is_some(),
            last: std::cell::Cell::new(std::time::Instant::now()),
        }
    }
    fn lap(&self, stage: &str) {
        if self.on {
            let now = std::time::Instant::now();
            let anon = std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| {
                    let l = s.lines().find(|l| l.starts_with("RssAnon:"))?;
                    l.split_whitespace().nth(1)?.parse::<u64>().ok()
                })
                .map(|kb| format!(" (RssAnon {} MB)", kb / 1024))
                .unwrap_or_default();
            let what = self.rank.map_or(String::new(), |r| format!("rank {r} "));
            eprintln!(
                "timing: {what}{stage} {:.3} s{anon}",
                (now - self.last.get()).as_secs_f64()
            );
            self.last.set(now);
        }
    }
}

struct RankDone {
    result: RankResult,
    rows_tmp: Option<PathBuf>,
}

/// Where `--rows` goes: JSON Lines (per-rank temporary files, joined in
/// rank order at the end) or one Parquet file written as ranks finish.
enum RowsOut {
    None,
    Jsonl,
    Parquet(report::parquet::ParquetRows),
}

/// Most warning lines printed per log; the rest are counted in one line.
const WARNING_LINES: usize = 20;

/// The warnings of one log, one line per kind of warning (and per unknown
/// field label), each at its first occurrence's line and column; at most
/// [`WARNING_LINES`] lines, then a count of the rest.
fn warnings_of(t: &OpTable, side: &str) -> Vec<String> {
    use parser::WarningKind as K;
    let mut out = Vec::new();
    let path = t.path().display();
    let counts = t.warning_counts();
    for (kind, label, n) in counts.iter().take(WARNING_LINES) {
        let first = t
            .warnings()
            .iter()
            .find(|w| w.kind == *kind && w.label == *label);
        let at = first
            .map(|w| format!("{path}:{}:{}", w.line, w.column))
            .unwrap_or_else(|| path.to_string());
        let what = match (kind, first) {
            (K::UnknownField, _) => format!("{n} unknown field line(s) `{label}` ignored"),
            (_, Some(w)) if *n > 1 => format!("{} ({n} times)", w.message),
            (_, Some(w)) => w.message.clone(),
            // Past the warnings kept with their positions.
            (_, None) => format!("{n} more warning(s) of kind `{label}`"),
        };
        out.push(format!("{at}: {side}: {what}"));
    }
    if counts.len() > WARNING_LINES {
        let rest: u64 = counts[WARNING_LINES..].iter().map(|c| c.2).sum();
        out.push(format!(
            "{path}: {side}: {rest} more warning(s) of {} other kind(s) or label(s) (is this an activation log?)",
            counts.len() - WARNING_LINES
        ));
    }
    out
}

fn compare_rank(
    rank1: u32,
    p1: &Path,
    rank2: u32,
    p2: &Path,
    cfg: &CompareConfig,
    progress: &Progress,
    rows_out: &RowsOut,
) -> RankDone {
    let mut rows_tmp = None;
    let result = compare_rank_result(rank1, p1, rank2, p2, cfg, progress, rows_out, &mut rows_tmp);
    RankDone { result, rows_tmp }
}

#[allow(clippy::too_many_arguments)]
fn compare_rank_result(
    rank1: u32,
    p1: &Path,
    rank2: u32,
    p2: &Path,
    cfg: &CompareConfig,
    progress: &Progress,
    rows_out: &RowsOut,
    rows_tmp: &mut Option<PathBuf>,
) -> RankResult {
    let mut done = RankResult {
        rank: rank1,
        ..Default::default()
    };
    let timer = Timer::new(rank1);
    progress.stage(rank1, "parsing");
    let (t1, t2) = rayon::join(|| parse_side(p1, progress), || parse_side(p2, progress));
    return_free_memory();
    timer.lap("parse");
    progress.stage(rank1, "matching");
    let (mut t1, mut t2) = match (t1, t2) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            done.errors.extend(a.err());
            done.errors.extend(b.err());
            return done;
        }
    };
    done.ignore_seen = cfg
        .matching
        .policy
        .ignore_ops
        .iter()
        .map(|op| {
            [&t1, &t2]
                .iter()
                .any(|t| (0..t.op_types() as u32).any(|id| t.op_name(id) == op.as_bytes()))
        })
        .collect();
    if cfg.l1_as_hash {
        t1.use_l1_as_output_hash();
        t2.use_l1_as_output_hash();
    }
    if t1.is_empty() && t2.is_empty() {
        done.errors.push(format!(
            "nothing compared: run1 has no ops and run2 has no ops ({}, {})",
            t1.path().display(),
            t2.path().display()
        ));
        return done;
    }
    // The key indexes serve the duplicate-key check here and the exact-key
    // pass of matching, which drops them.
    let indexes = rayon::join(|| t1.key_index(), || t2.key_index());
    parser::duplicate_keys_from(&t1, &indexes.0);
    parser::duplicate_keys_from(&t2, &indexes.1);
    for (t, side) in [(&t1, "run1"), (&t2, "run2")] {
        if let Err(e) = check_usable(t, side, cfg.allow_duplicates) {
            done.errors.push(e);
        }
        done.warnings.extend(warnings_of(t, side));
    }
    if !done.errors.is_empty() {
        return done;
    }
    timer.lap("checks");
    let one1 = t1.schema().minus(t2.schema());
    let one2 = t2.schema().minus(t1.schema());
    if !one1.is_empty() || !one2.is_empty() {
        let names = |v: &[Field]| {
            let s: Vec<&str> = v.iter().map(|f| f.label()).collect();
            if s.is_empty() {
                "none".to_string()
            } else {
                s.join(", ")
            }
        };
        done.warnings.push(format!(
            "rank {rank1}: fields not on both sides are not compared: run1-only: {}; run2-only: {}",
            names(&one1),
            names(&one2)
        ));
    }
    let offset = |side: u8, rank: u32| {
        cfg.layer_offsets
            .iter()
            .filter(|(s, r, _)| *s == side && r.is_none_or(|r| r == rank))
            .map(|(_, _, o)| *o)
            .next_back()
            .unwrap_or(0)
    };
    let layer_offset = [offset(1, rank1), offset(2, rank2)];
    let m = if layer_offset != cfg.matching.layer_offset {
        let opts = MatchOptions {
            layer_offset,
            ..cfg.matching.clone()
        };
        matcher::match_tables_indexed(&t1, &t2, &opts, indexes)
    } else {
        matcher::match_tables_indexed(&t1, &t2, &cfg.matching, indexes)
    };
    timer.lap("match");
    return_free_memory();
    done.rule_hits = m.rule_hits.clone();
    if cfg.matching.policy.exhaustive {
        if let Some(r) = m
            .rows
            .iter()
            .find(|r| !matches!(r.source, matcher::Source::Rule(_)))
        {
            let key = match (r.r1(), r.r2()) {
                (Some(a), _) => t1.key_str(a).into_owned(),
                (None, Some(b)) => t2.key_str(b).into_owned(),
                _ => String::new(),
            };
            done.errors.push(format!(
                "rank {rank1}: no rule matches {key} (--rules-exhaustive)"
            ));
        }
    }
    for (k, v) in &m.unused_overrides {
        done.warnings.push(format!(
            "rank {rank1}: unused override `{k}, {v}` (no run1 row `{k}` paired with a run2 row `{v}`)"
        ));
    }
    let rc = RankComparison {
        rank1,
        rank2,
        t1: &t1,
        t2: &t2,
        matches: &m,
    };
    progress.stage(rank1, "writing pages");
    match RankReport::write_with_progress(&rc, &cfg.report, progress) {
        Ok(s) => done.summary = Some(s),
        Err(e) => done.errors.push(e.to_string()),
    }
    timer.lap("report");
    if let RowsOut::Parquet(w) = rows_out {
        if let Err(e) = w.write_rank(&rc) {
            done.errors.push(format!("{}: {e}", w.path().display()));
        }
    }
    if let RowsOut::Jsonl = rows_out {
        let tmp = cfg
            .report
            .out_dir
            .join(format!(".rows-rank{rank1}.jsonl.tmp"));
        let res = File::create(&tmp).and_then(|f| {
            let mut w = BufWriter::new(f);
            report::rows::write_rows(&rc, (&cfg.report.name1, &cfg.report.name2), &mut w)?;
            w.flush()
        });
        match res {
            Ok(()) => *rows_tmp = Some(tmp),
            Err(e) => done.errors.push(format!("{}: {e}", tmp.display())),
        }
    }
    done
}

/// Default display name of a run: the folder name, or for a single
/// `rank_N_activations.log` file, the name of the folder holding it.
pub fn default_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    if super::rank_of_file_name(&name).is_some() {
        if let Some(parent) = path.parent().and_then(|p| p.file_name()) {
            return parent.to_string_lossy().into_owned();
        }
    }
    name
}

/// Compares two runs end to end and writes the report; with
/// [`CompareConfig::shard`], compares one part of the ranks and writes the
/// part (its ranks' pages and `part.json`) instead of the index.
///
/// Errors: only problems that stop everything (the report folder
/// unwritable, the worker pool). A run path missing, a folder without logs
/// and per-rank input errors are in [`Outcome::errors`] and make the exit
/// status 2.
pub fn compare_runs(cfg: &CompareConfig) -> Result<Outcome, PipelineError> {
    // A run that cannot be found is an input error, still reported in
    // summary.json and on stdout like any other.
    let mut input_errors = Vec::new();
    let (in1, in2) = (RunInput::discover(&cfg.run1), RunInput::discover(&cfg.run2));
    let full_plan = match (&in1, &in2) {
        (Ok(in1), Ok(in2)) => plan(in1, in2, &cfg.rank_map),
        _ => super::RankPlan::default(),
    };
    let inputs = shard::Inputs {
        run1: in1.as_ref().ok().map(shard::RunRecord::of),
        run2: in2.as_ref().ok().map(shard::RunRecord::of),
    };
    input_errors.extend(in1.err().map(|e| e.to_string()));
    input_errors.extend(in2.err().map(|e| e.to_string()));
    let run = RunLevel {
        name1: cfg.report.name1.clone(),
        name2: cfg.report.name2.clone(),
        path1: cfg.report.path1.clone(),
        path2: cfg.report.path2.clone(),
        allow_incomplete: cfg.allow_incomplete,
        strict: cfg.strict,
        rank_map: cfg.rank_map.clone(),
        layer_offsets: cfg.layer_offsets.clone(),
        ignore_ops: cfg.matching.policy.ignore_ops.clone(),
        rules: cfg
            .matching
            .policy
            .rules
            .iter()
            .map(|r| (r.origin.to_string(), r.key_src.clone()))
            .collect(),
        pairs: full_plan
            .pairs
            .iter()
            .map(|(a, _, b, _)| (*a, *b))
            .collect(),
        only1: full_plan.only1.clone(),
        only2: full_plan.only2.clone(),
        input_errors,
    };
    // The part's share of the ranks: the split depends on the recorded log
    // sizes only, so every part (and the merge) computes the same one.
    let (plan, mut manifest) = match &cfg.shard {
        None => (full_plan, None),
        Some(part) => {
            let size = |p: &Path| {
                [&inputs.run1, &inputs.run2]
                    .iter()
                    .find_map(|r| r.as_ref()?.size_of(p))
                    .unwrap_or(0)
            };
            let units = shard::units_of_part(&full_plan, part.shard, &size);
            let m = shard::Manifest {
                format: shard::FORMAT.into(),
                version: shard::VERSION,
                tool: format!("actdiff {}", env!("CARGO_PKG_VERSION")),
                shard: part.shard,
                status: shard::PartStatus::Running,
                inputs: inputs.clone(),
                options: part.options.clone(),
                units: units.clone(),
                run: run.clone(),
                results: Vec::new(),
            };
            (shard::restrict(&full_plan, &units), Some(m))
        }
    };
    let out = &cfg.report.out_dir;
    std::fs::create_dir_all(out).map_err(|e| report::ReportError::Io {
        path: out.to_path_buf(),
        message: format!("cannot create the report folder (-o): {e}"),
    })?;
    // A previous comparison's pages (of ranks or pages this one may not
    // write) must not look like part of this report.
    report::clear_previous(out)?;
    if let Some(m) = &manifest {
        m.write(out)
            .map_err(|e| report::ReportError::io(&out.join(shard::MANIFEST), e))?;
    }

    let total_bytes: u64 = plan
        .pairs
        .iter()
        .flat_map(|(_, a, _, b)| [a, b])
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let progress = Progress::new(cfg.quiet, total_bytes, plan.pairs.len() as u64);
    let rows_out = match &cfg.rows {
        Some(p) if report::parquet::is_parquet_path(p) => {
            match report::parquet::ParquetRows::create(p) {
                Ok(w) => RowsOut::Parquet(w),
                Err(e) => {
                    return Err(PipelineError::Report(report::ReportError::Io {
                        path: p.clone(),
                        message: e.to_string(),
                    }))
                }
            }
        }
        Some(_) => RowsOut::Jsonl,
        None => RowsOut::None,
    };
    // Parse the built-in templates while the logs are parsed (about 0.1 s
    // of one core; the first report waits for it if it is not done).
    std::thread::spawn(report::html::prepare);
    let work = || -> Vec<RankDone> {
        plan.pairs
            .par_iter()
            .map(|(a, pa, b, pb)| {
                let d = compare_rank(*a, pa, *b, pb, cfg, &progress, &rows_out);
                progress.ranks.inc(1);
                d
            })
            .collect()
    };
    let done = match cfg.jobs {
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build()
            .map_err(|_| PipelineError::Pool(n))?
            .install(work),
        None => work(),
    };
    progress.finish();

    let mut rows_errors = Vec::new();
    let mut results = Vec::with_capacity(done.len());
    let mut rows_tmp = Vec::new();
    for d in done {
        rows_tmp.extend(d.rows_tmp);
        results.push(d.result);
    }
    match (&cfg.rows, rows_out) {
        (Some(rows), RowsOut::Jsonl) => {
            let res = File::create(rows).and_then(|f| {
                let mut w = BufWriter::new(f);
                for tmp in &rows_tmp {
                    std::io::copy(&mut File::open(tmp)?, &mut w)?;
                }
                w.flush()
            });
            for tmp in &rows_tmp {
                let _ = std::fs::remove_file(tmp);
            }
            if let Err(e) = res {
                rows_errors.push(format!("{}: {e}", rows.display()));
            }
        }
        (Some(rows), RowsOut::Parquet(w)) => {
            if let Err(e) = w.finish() {
                rows_errors.push(format!("{}: {e}", rows.display()));
            }
        }
        _ => {}
    }

    if let Some(mut m) = manifest.take() {
        // A part: its results go to part.json; the run-level outputs are
        // the merge's. Errors writing its rows file belong to its ranks.
        if let Some(first) = results.first_mut() {
            first.errors.extend(rows_errors.iter().cloned());
        }
        let sub = RunLevel {
            pairs: plan.pairs.iter().map(|(a, _, b, _)| (*a, *b)).collect(),
            only1: plan.only1.clone(),
            only2: plan.only2.clone(),
            ..run.clone()
        };
        let outcome = run_outputs(&sub, results.clone(), rows_errors);
        m.results = results;
        m.status = shard::PartStatus::Done;
        m.write(out)
            .map_err(|e| report::ReportError::io(&out.join(shard::MANIFEST), e))?;
        return Ok(Outcome {
            part: Some((m.shard, m.units)),
            ..outcome
        });
    }
    let outcome = run_outputs(&run, results, rows_errors);
    let timer = Timer::of(None);
    report::write_index(&outcome.summary, &cfg.report)?;
    timer.lap("index");
    Ok(outcome)
}

/// The run-level outputs from the per-rank results and the run metadata
/// alone (never the op tables): the [`Summary`] (counts, rank groups,
/// collective links, exit status and verdict), the input errors and the
/// warnings. `actdiff compare` and `actdiff merge` both call this, so a
/// merged report is the one a single compare writes. `more_errors` (e.g.
/// the `--rows` file could not be written) come last.
pub fn run_outputs(run: &RunLevel, results: Vec<RankResult>, more_errors: Vec<String>) -> Outcome {
    let mut errors = run.input_errors.clone();
    let mut warnings = Vec::new();
    // Options that name ranks or ops no log has do nothing: say so.
    for (a, b) in &run.rank_map {
        if !run.pairs.iter().any(|(x, y)| x == a && y == b) {
            warnings.push(format!(
                "--rank-map {a}:{b} compared nothing (run1 rank {a} with run2 rank {b} is not a pair of these runs)"
            ));
        }
    }
    for (side, rank, offset) in &run.layer_offsets {
        if let Some(r) = rank {
            let present = run
                .pairs
                .iter()
                .any(|(x, y)| if *side == 1 { x == r } else { y == r });
            if !present {
                warnings.push(format!(
                    "--layer-offset run{side}:{r}={offset} applies to no compared rank (run{side} has no rank {r} in a pair)"
                ));
            }
        }
    }
    for (i, op) in run.ignore_ops.iter().enumerate() {
        if !results.is_empty() && !results.iter().any(|d| d.ignore_seen.get(i) == Some(&true)) {
            warnings.push(format!("--ignore-op {op}: no op of that name in any log"));
        }
    }
    let mut ranks = Vec::new();
    let mut hits = vec![0u64; run.rules.len()];
    for d in &results {
        for (h, x) in hits.iter_mut().zip(&d.rule_hits) {
            *h += x;
        }
    }
    if !results.is_empty() {
        for ((origin, key_src), h) in run.rules.iter().zip(&hits) {
            if *h == 0 {
                let msg = format!("rule {origin} `{key_src}` matched no row");
                if run.strict {
                    errors.push(format!("{msg} (--strict)"));
                } else {
                    warnings.push(msg);
                }
            }
        }
    }
    let mut ranks_failed = Vec::new();
    for d in results {
        if d.summary.is_none() && !d.errors.is_empty() {
            ranks_failed.push(report::summary::FailedRank {
                rank: d.rank,
                errors: d.errors.clone(),
            });
        }
        errors.extend(d.errors);
        warnings.extend(d.warnings);
        ranks.extend(d.summary);
    }
    errors.extend(more_errors);

    Summary::link_collective_ranks(&mut ranks);
    let counts = Summary::total_counts(&ranks);
    let (exit_status, verdict) = verdict(&ranks, &run.only1, &run.only2, &errors, run);
    let summary = Summary {
        schema_version: report::summary::SCHEMA_VERSION,
        tool: format!("actdiff {}", env!("CARGO_PKG_VERSION")),
        name1: run.name1.clone(),
        name2: run.name2.clone(),
        path1: run.path1.clone(),
        path2: run.path2.clone(),
        counts,
        ranks_only1: run.only1.clone(),
        ranks_only2: run.only2.clone(),
        ranks_failed,
        groups: Summary::group_ranks(&ranks),
        ranks,
        exit_status,
        verdict,
    };
    Outcome {
        summary,
        errors,
        warnings,
        part: None,
    }
}

/// The exit status and one line per reason, by the contract in
/// [`crate::exit_codes`]: input errors (2) before incomplete input (3)
/// before divergence (1).
fn verdict(
    ranks: &[RankSummary],
    only1: &[u32],
    only2: &[u32],
    errors: &[String],
    run: &RunLevel,
) -> (i32, Vec<String>) {
    let mut lines = Vec::new();
    let mut status = exit_codes::OK;
    if !errors.is_empty() {
        lines.push(format!("input error: {}", errors.join("; ")));
        status = exit_codes::INPUT_ERROR;
    }
    if ranks.is_empty() && errors.is_empty() {
        lines.push("nothing compared: no rank is present in both runs".into());
        status = exit_codes::INPUT_ERROR;
    }
    let incomplete: Vec<String> = ranks
        .iter()
        .flat_map(|r| {
            let side = |s: &report::summary::SideSummary, n: &str| {
                s.incomplete
                    .iter()
                    .map(|x| format!("rank {} {n} ({}) {x}", r.rank, s.path))
                    .collect::<Vec<_>>()
            };
            let mut v = side(&r.run1, "run1");
            v.extend(side(&r.run2, "run2"));
            v
        })
        .collect();
    if !incomplete.is_empty() {
        for i in &incomplete {
            lines.push(format!("incomplete input: {i}"));
        }
        if status == exit_codes::OK {
            // Never a pass on incomplete input: 3, or 1 when it is allowed.
            status = if run.allow_incomplete {
                exit_codes::DIVERGED
            } else {
                exit_codes::INCOMPLETE
            };
        }
    }
    let c = Summary::total_counts(ranks);
    if c.diverging() > 0 {
        let missing = if c.missing > 0 {
            format!("{} missing, ", c.missing)
        } else {
            String::new()
        };
        // Rows that differ but do not gate (ignored ops, unsynced
        // collectives) are not a divergence of the run.
        let what = if c.gating > 0 {
            "diverged"
        } else {
            "differences, none gating"
        };
        lines.push(format!(
            "{what}: {} diff, {missing}{} only in {}, {} only in {}",
            c.diff, c.only1, run.name1, c.only2, run.name2
        ));
    }
    if c.ignored > 0 {
        lines.push(format!(
            "{} ignored difference{} (shown, not gating)",
            c.ignored,
            if c.ignored == 1 { "" } else { "s" }
        ));
    }
    if c.unsynced > 0 {
        lines.push(format!(
            "{} unsynced collective row{} differ (shown, not gating)",
            c.unsynced,
            if c.unsynced == 1 { "" } else { "s" }
        ));
    }
    if !only1.is_empty() || !only2.is_empty() {
        lines.push(format!(
            "ranks on one side only: {} only in {}, {} only in {}",
            fmt_ranks(only1),
            run.name1,
            fmt_ranks(only2),
            run.name2
        ));
    }
    if status == exit_codes::OK && (c.gating > 0 || !only1.is_empty() || !only2.is_empty()) {
        status = exit_codes::DIVERGED;
    }
    if status == exit_codes::OK {
        lines.push(format!(
            "no divergence beyond tolerance: {} rows match",
            c.matched
        ));
    }
    (status, lines)
}

fn fmt_ranks(r: &[u32]) -> String {
    if r.is_empty() {
        return "none".into();
    }
    let v: Vec<String> = r.iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(", "))
}

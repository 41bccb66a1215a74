//! The compare pipeline: for every rank pair, parse both logs, match them and
//! write the rank's report pages and `--rows` part, ranks in parallel on a
//! rayon pool; then the `--rows` file. The run-level outputs (index,
//! `summary.json`, JUnit, terminal, exit status) are [`super::outputs`]'s,
//! from the rank summaries alone.
//!
//! Input problems of one rank (an empty log, a log without ops, duplicate
//! keys) are collected as errors and never abort the other ranks.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::messages::{self, Message};
use super::outputs::{finish, prepare_report_folder_keeping_pages, RunMeta, RunOutputs};
use super::progress::Progress;
use super::shard::{self, RankResult, RunLevel};
use super::timer::Timer;
use super::{plan, RankPlan, RunInput};
use crate::matcher::{self, MatchOptions, MatchTable};
use crate::parser::{self, OpTable};
use crate::report::summary::FailedRank;
use crate::report::{self, RankComparison, RankSummary, ReportOptions};

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
    /// `--ranks`: the run-1 ranks compared, as inclusive ranges (`None`:
    /// every rank); the others of either run are left out.
    pub ranks: Option<Vec<(u32, u32)>>,
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
    /// `--steps`: which steps of two step series (`None`: not given).
    pub steps: Option<super::steps::StepSelection>,
    /// `--no-combine`: compare the shard logs of runs of different
    /// parallel layouts rank by rank ([`super::layouts`]).
    pub no_combine: bool,
    /// The training step this compare is of, in a step series
    /// ([`super::steps`]): its `--rows` rows carry it.
    pub step: Option<u64>,
    /// In a step series: where each rank's tables are offered once its
    /// pages are written, so that the first diverging step's full pages
    /// need no second compare ([`super::steps::KeepTables`]).
    pub keep: Option<super::steps::KeepTables>,
}

/// One part of a sharded compare: which, and the options recorded in its
/// manifest (see [`shard::Manifest::options`]).
#[derive(Clone, Debug)]
pub struct ShardPart {
    /// The part.
    pub shard: shard::Shard,
    /// The command-line options that affect results, as JSON.
    pub options: serde_json::Value,
    /// The units this part holds when a step series chose them
    /// ([`shard::series_units_by_part`]); `None`: the part's share of this
    /// compare's own split ([`shard::units_of_part`]).
    pub units: Option<Vec<shard::Unit>>,
}

/// Where `--rows` goes: JSON Lines (per-rank temporary files, joined in
/// rank order at the end) or one Parquet file written as ranks finish.
enum RowsOut {
    None,
    Jsonl,
    Parquet(report::parquet::ParquetRows),
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

fn parse_side(
    path: &Path,
    reference: Option<&OpTable>,
    progress: &Progress,
) -> Result<OpTable, String> {
    parser::parse_path_against(path, reference, &|n| progress.bytes.inc(n))
        .map_err(|e| e.to_string())
}

/// Returns the heap's free memory to the operating system after a rank
/// whose two logs hold `log_bytes` bytes. The parallel parse builds
/// partial tables on worker threads and joins them into one, and matching
/// builds key indexes it then drops; glibc keeps such freed memory in its
/// per-thread arenas, where it would count towards the peak resident heap
/// of the rest of the run. A few milliseconds, and a system call per free
/// page: below [`TRIM_ABOVE_LOG_BYTES`] the little freed memory is reused
/// by the next rank instead (at 4,096 ranks of 300 ops, trimming after
/// every rank cost 161,000 `madvise` calls).
fn return_free_memory(log_bytes: usize) {
    if log_bytes < TRIM_ABOVE_LOG_BYTES {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap pages; it has no
    // preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The size of a rank's two logs from which [`return_free_memory`] trims.
const TRIM_ABOVE_LOG_BYTES: usize = 64 << 20;

struct RankDone {
    rank: u32,
    rule_hits: Vec<u64>,
    /// Per `--ignore-op`: whether either log of the rank has that op.
    ignore_seen: Vec<bool>,
    summary: Option<RankSummary>,
    errors: Vec<Message>,
    warnings: Vec<Message>,
    rows_tmp: Option<PathBuf>,
    /// How its pages used its share of the HTML budget
    /// ([`report::top_up`]).
    budget_use: Option<report::BudgetUse>,
}

/// Parses both logs of a rank pair, each in parallel chunks: run 1's,
/// then run 2's against it (its blocks that are run 1's byte for byte
/// are copied, [`parser::parse_path_against`]); the errors of either.
/// Under `ACTDIFF_TIMINGS`, the two laps (of rank `rank`) on stderr.
fn parse_pair(
    rank: u32,
    p1: &Path,
    p2: &Path,
    progress: &Progress,
) -> Result<(OpTable, OpTable), Vec<Message>> {
    let timer = Timer::new(rank);
    let t1 = parse_side(p1, None, progress);
    timer.lap("parse run1");
    let mut t2 = parse_side(p2, t1.as_ref().ok(), progress);
    timer.lap("parse run2");
    let mut t1 = t1;
    for t in [&mut t1, &mut t2].into_iter().flat_map(|t| t.as_mut().ok()) {
        t.drop_reference_columns();
    }
    let bytes = |t: &Result<OpTable, String>| t.as_ref().map_or(0, |t| t.bytes().len());
    return_free_memory(bytes(&t1) + bytes(&t2));
    match (t1, t2) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (a, b) => Err(a
            .err()
            .into_iter()
            .chain(b.err())
            .map(Message::Text)
            .collect()),
    }
}

/// Per `--ignore-op`: whether either log has an op of that name.
fn ignore_ops_seen(cfg: &CompareConfig, t1: &OpTable, t2: &OpTable) -> Vec<bool> {
    cfg.matching
        .policy
        .ignore_ops
        .iter()
        .map(|op| {
            [t1, t2]
                .iter()
                .any(|t| (0..t.op_types() as u32).any(|id| t.op_name(id) == op.as_bytes()))
        })
        .collect()
}

/// The `--layer-offset` of run 1's rank `rank1` and run 2's rank `rank2`
/// (the last value given for a side and rank wins; 0 when none is).
fn layer_offsets(cfg: &CompareConfig, rank1: u32, rank2: u32) -> [i64; 2] {
    let offset = |side: u8, rank: u32| {
        cfg.layer_offsets
            .iter()
            .filter(|(s, r, _)| *s == side && r.is_none_or(|r| r == rank))
            .map(|(_, _, o)| *o)
            .next_back()
            .unwrap_or(0)
    };
    [offset(1, rank1), offset(2, rank2)]
}

/// Matches a rank pair, with the `--layer-offset` of its two ranks
/// ([`layer_offsets`]).
fn match_pair(
    t1: &OpTable,
    t2: &OpTable,
    indexes: (parser::key::KeyIndex, parser::key::KeyIndex),
    layer_offset: [i64; 2],
    cfg: &CompareConfig,
) -> MatchTable {
    let print_floor = mixed_precision(t1, t2) && !cfg.matching.policy.default.is_bitwise();
    if layer_offset != cfg.matching.layer_offset || print_floor {
        let mut opts = MatchOptions {
            layer_offset,
            ..cfg.matching.clone()
        };
        if print_floor {
            let d = &mut opts.policy.default;
            d.hash.rtol = d.hash.rtol.max(PRINT_RTOL);
            if let Some(s) = &mut d.stats {
                s.rtol = s.rtol.max(PRINT_RTOL);
            }
        }
        matcher::match_tables_indexed(t1, t2, &opts, indexes)
    } else {
        matcher::match_tables_indexed(t1, t2, &cfg.matching, indexes)
    }
}

/// The largest relative difference that printing a value with 7
/// significant digits (`%.6e`) makes: half a unit of the 7th digit.
pub(super) const PRINT_RTOL: f64 = 5.000_001e-7;

/// Whether one log is full precision and the other printed with the
/// reference's 7 digits: values then agree when print rounding explains
/// their difference (the default tolerances' rtol is raised to
/// [`PRINT_RTOL`]; `--bitwise` and explicit rules are left as given).
pub(super) fn mixed_precision(t1: &OpTable, t2: &OpTable) -> bool {
    t1.precision() != t2.precision()
}

/// Writes the rank's result rows as JSON Lines into a temporary file of
/// the report folder (joined into the `--rows` file after every rank).
fn write_rows_tmp(rc: &RankComparison<'_>, cfg: &CompareConfig) -> Result<PathBuf, Message> {
    let tmp = cfg
        .report
        .out_dir
        .join(format!(".rows-rank{}.jsonl.tmp", rc.rank1));
    File::create(&tmp)
        .and_then(|f| {
            let mut w = BufWriter::new(f);
            let names = (cfg.report.name1.as_str(), cfg.report.name2.as_str());
            report::rows::write_rows(rc, names, cfg.step, &mut w)?;
            w.flush()
        })
        .map(|()| tmp.clone())
        .map_err(|e| Message::File {
            path: tmp.display().to_string(),
            error: e.to_string(),
        })
}

/// One rank pair end to end: parse, check, match, write its pages (and its
/// `--rows` part). Problems are collected in the result, never raised.
fn compare_rank(
    rank1: u32,
    p1: &Path,
    rank2: u32,
    p2: &Path,
    cfg: &CompareConfig,
    progress: &Progress,
    rows_out: &RowsOut,
) -> RankDone {
    let mut done = RankDone {
        rank: rank1,
        rule_hits: Vec::new(),
        ignore_seen: Vec::new(),
        summary: None,
        errors: Vec::new(),
        warnings: Vec::new(),
        rows_tmp: None,
        budget_use: None,
    };
    let timer = Timer::new(rank1);
    progress.stage(rank1, "parsing");
    let parsed = parse_pair(rank1, p1, p2, progress);
    timer.lap("parse");
    progress.stage(rank1, "matching");
    let (mut t1, mut t2) = match parsed {
        Ok(t) => t,
        Err(e) => {
            done.errors = e;
            return done;
        }
    };
    done.ignore_seen = ignore_ops_seen(cfg, &t1, &t2);
    if cfg.l1_as_hash {
        t1.use_l1_as_output_hash();
        t2.use_l1_as_output_hash();
    }
    if t1.is_empty() && t2.is_empty() {
        done.errors.push(Message::NothingCompared {
            path1: t1.path().display().to_string(),
            path2: t2.path().display().to_string(),
        });
        return done;
    }
    // The key indexes serve the duplicate-key check here and the exact-key
    // pass of matching, which drops them.
    let indexes = rayon::join(|| t1.key_index(), || t2.key_index());
    parser::duplicate_keys_from(&t1, &indexes.0);
    parser::duplicate_keys_from(&t2, &indexes.1);
    for (t, side) in [(&t1, "run1"), (&t2, "run2")] {
        if let Err(e) = messages::check_usable(t, side, cfg.allow_duplicates) {
            done.errors.push(e);
        }
        done.warnings.extend(messages::log_warnings(t, side));
    }
    done.errors.extend(messages::level_mismatch(&t1, &t2));
    done.errors.extend(messages::filter_mismatch(&t1, &t2));
    if mixed_precision(&t1, &t2) && cfg.matching.policy.default.is_bitwise() {
        done.errors
            .push(messages::bitwise_mixed_precision(rank1, &t1));
    } else if cfg.matching.policy.default.is_bitwise() && t1.precision() != parser::Precision::Full
    {
        done.warnings.push(Message::BitwisePrinted);
    }
    if !done.errors.is_empty() {
        return done;
    }
    timer.lap("checks");
    done.warnings
        .extend(messages::one_sided_fields(rank1, &t1, &t2));
    done.warnings
        .extend(messages::wrapper_prefix(rank1, &t1, &t2));
    done.warnings.extend(
        [&t1, &t2]
            .into_iter()
            .filter_map(|t| messages::step_header_mismatch(cfg.step, t)),
    );
    if cfg.step.is_none() {
        done.warnings.extend(messages::steps_differ(&t1, &t2));
    }
    done.warnings.extend(
        mixed_precision(&t1, &t2).then(|| messages::mixed_precision(rank1, &t1, PRINT_RTOL)),
    );
    let offsets = layer_offsets(cfg, rank1, rank2);
    done.warnings
        .extend(messages::negative_layers(rank1, offsets, [&t1, &t2]));
    let m = match_pair(&t1, &t2, indexes, offsets, cfg);
    timer.lap("match");
    done.warnings
        .extend(messages::recomputed_ops(rank1, &m, &t1, &t2));
    return_free_memory(t1.bytes().len() + t2.bytes().len());
    done.rule_hits = m.rule_hits.clone();
    if cfg.matching.policy.exhaustive {
        done.errors.extend(messages::unjudged(rank1, &m, &t1, &t2));
    }
    for (k, v) in &m.unused_overrides {
        done.warnings.push(Message::UnusedOverride {
            rank: rank1,
            key1: k.clone(),
            key2: v.clone(),
        });
    }
    let rc = RankComparison {
        rank1,
        rank2,
        t1: &t1,
        t2: &t2,
        matches: &m,
    };
    progress.stage(rank1, "writing pages");
    let plan = report::PagePlan::new(&rc, &cfg.report);
    done.budget_use = plan.budget_use().cloned();
    // Pages and Parquet rows side by side: each fills the other's gaps.
    let (pages, parquet) = rayon::join(
        || report::write_rank_with_progress(&rc, &cfg.report, &plan, progress),
        || match rows_out {
            RowsOut::Parquet(w) => w.write_rank(&rc, cfg.step).map_err(|e| Message::File {
                path: w.path().display().to_string(),
                error: e.to_string(),
            }),
            _ => Ok(()),
        },
    );
    match pages {
        Ok(s) => {
            done.warnings.extend(messages::unreadable_shapes(&s));
            done.summary = Some(s);
        }
        Err(e) => done.errors.push(Message::Text(e.to_string())),
    }
    done.errors.extend(parquet.err());
    timer.lap("report");
    if let RowsOut::Jsonl = rows_out {
        match write_rows_tmp(&rc, cfg) {
            Ok(tmp) => done.rows_tmp = Some(tmp),
            Err(e) => done.errors.push(e),
        }
    }
    if let (Some(k), Some(_)) = (&cfg.keep, &done.summary) {
        k.offer(rank1, rank2, (t1, t2, m), &cfg.report);
    }
    done
}

/// Finds both runs' logs and pairs their ranks; a run that cannot be found
/// is an input error (and no rank is compared). Also returns the runs as a
/// part's manifest records them (with their logs' sizes).
pub(super) fn discover(
    cfg: &CompareConfig,
    errors: &mut Vec<Message>,
) -> (RankPlan, shard::Inputs) {
    let (in1, in2) = (RunInput::discover(&cfg.run1), RunInput::discover(&cfg.run2));
    let inputs = shard::Inputs {
        run1: in1.as_ref().ok().map(shard::RunRecord::of),
        run2: in2.as_ref().ok().map(shard::RunRecord::of),
    };
    let p = match (in1, in2) {
        (Ok(in1), Ok(in2)) => {
            let p = plan(&in1, &in2, &cfg.rank_map, cfg.ranks.as_deref());
            // A one-sided rank's log is read too: its problems are the
            // run's input errors (or incomplete input).
            for (only, input, side) in [(&p.only1, &in1, "run1"), (&p.only2, &in2, "run2")] {
                for (rank, path) in input.ranks.iter().filter(|(r, _)| only.contains(r)) {
                    errors.extend(messages::one_sided_log(*rank, path, side));
                }
            }
            p
        }
        (a, b) => {
            errors.extend(a.err().map(|e| Message::Text(e.to_string())));
            errors.extend(b.err().map(|e| Message::Text(e.to_string())));
            RankPlan::default()
        }
    };
    (p, inputs)
}

/// Compares every rank pair of `plan`, in parallel on `cfg.jobs` threads.
fn compare_ranks(
    pairs: &[(u32, PathBuf, u32, PathBuf)],
    cfg: &CompareConfig,
    rows_out: &RowsOut,
    budgets: Option<&[u64]>,
) -> Result<Vec<RankDone>, String> {
    let total_bytes: u64 = pairs
        .iter()
        .flat_map(|(_, a, _, b)| [a, b])
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let progress = Progress::new(cfg.quiet, total_bytes, pairs.len() as u64);
    // Parse the built-in templates while the logs are parsed (about 0.1 s
    // of one core; the first report waits for it if it is not done).
    std::thread::spawn(report::html::prepare);
    let work = || -> Vec<RankDone> {
        pairs
            .par_iter()
            .enumerate()
            .map(|(i, (a, pa, b, pb))| {
                let own;
                let cfg = match budgets {
                    Some(budgets) => {
                        let mut c = cfg.clone();
                        c.report.html_budget = Some(budgets[i]);
                        own = c;
                        &own
                    }
                    None => cfg,
                };
                let d = compare_rank(*a, pa, *b, pb, cfg, &progress, rows_out);
                progress.ranks.inc(1);
                d
            })
            .collect()
    };
    let done = match cfg.jobs {
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build()
            .map_err(|_| format!("cannot start {n} worker threads"))?
            .install(work),
        None => work(),
    };
    progress.finish();
    Ok(done)
}

/// Gives the ranks whose pages the HTML budget cut what the other ranks
/// left of it ([`report::top_up`]): those given more are compared again
/// (pages only: no rows, no kept tables) and their new summaries replace
/// the first ones. `done` is in `pairs` order; `cfg` gave each rank its
/// equal share. A rank whose second compare fails keeps its first pages
/// and gets the error.
fn top_up_pages(
    pairs: &[(u32, PathBuf, u32, PathBuf)],
    cfg: &CompareConfig,
    done: &mut [RankDone],
) {
    let Some(share) = cfg.report.html_budget else {
        return;
    };
    let uses: Vec<Option<report::BudgetUse>> = done.iter().map(|d| d.budget_use.clone()).collect();
    let given = report::top_up(share.saturating_mul(done.len() as u64), &uses);
    let (again, budgets): (Vec<usize>, Vec<u64>) = given
        .iter()
        .enumerate()
        .filter_map(|(i, b)| Some((i, (*b)?)))
        .unzip();
    if again.is_empty() {
        return;
    }
    let sub: Vec<_> = again.iter().map(|&i| pairs[i].clone()).collect();
    // Quiet: the progress display finished with the first compare.
    let cfg = CompareConfig {
        keep: None,
        quiet: true,
        ..cfg.clone()
    };
    match compare_ranks(&sub, &cfg, &RowsOut::None, Some(&budgets)) {
        Ok(redone) => {
            for (i, r) in again.into_iter().zip(redone) {
                match r.summary {
                    Some(s) => done[i].summary = Some(s),
                    None => done[i].errors.extend(r.errors),
                }
            }
        }
        Err(e) => {
            if let Some(&i) = again.first() {
                done[i].errors.push(Message::Text(e));
            }
        }
    }
}

/// The run's metadata for [`super::outputs::finish`] from the per-rank
/// results and the run-level facts alone (never the op tables): one-sided
/// and failed ranks, every input error and warning, in the order a single
/// compare gives them. `actdiff compare` and `actdiff merge` both build
/// their [`RunMeta`] here. `errors` are the errors found before any rank
/// (after [`RunLevel::input_errors`]); `more_errors` come last (the
/// `--rows` file).
pub fn assemble(
    run: &RunLevel,
    report: ReportOptions,
    errors: Vec<Message>,
    results: Vec<RankResult>,
    more_errors: Vec<Message>,
) -> Compared {
    let mut meta = RunMeta {
        report,
        allow_incomplete: run.allow_incomplete,
        ranks_only1: run.only1.clone(),
        ranks_only2: run.only2.clone(),
        errors: run.input_errors.iter().cloned().chain(errors).collect(),
        ..RunMeta::default()
    };
    meta.warnings = run.warnings.clone();
    meta.warnings
        .extend(messages::unused_options(run, &results));
    for m in messages::unused_rules(run, &results) {
        if run.strict {
            meta.errors.push(m);
        } else {
            meta.warnings.push(m);
        }
    }
    let mut ranks = Vec::new();
    for d in results {
        if d.summary.is_none() && !d.errors.is_empty() {
            meta.ranks_failed.push(FailedRank {
                rank: d.rank,
                step: None,
                errors: d.errors.clone(),
            });
        }
        meta.errors.extend(d.errors);
        for w in d.warnings {
            // Said once for the run, not once per rank.
            if !matches!(w, Message::BitwisePrinted)
                || !meta
                    .warnings
                    .iter()
                    .any(|m| matches!(m, Message::BitwisePrinted))
            {
                meta.warnings.push(w);
            }
        }
        ranks.extend(d.summary);
    }
    meta.errors.extend(more_errors);
    Compared {
        meta,
        ranks,
        part: None,
    }
}

/// Joins the ranks' (or a step series' steps') `--rows` JSON Lines parts
/// into the `--rows` file, in the order given, and removes them.
pub(super) fn join_rows(rows: &Path, parts: &[PathBuf]) -> Result<(), String> {
    let res = File::create(rows).and_then(|f| {
        let mut w = BufWriter::new(f);
        for tmp in parts {
            std::io::copy(&mut File::open(tmp)?, &mut w)?;
        }
        w.flush()
    });
    for tmp in parts {
        let _ = std::fs::remove_file(tmp);
    }
    res.map_err(|e| format!("{}: {e}", rows.display()))
}

/// A compared run: the summaries of the ranks compared, and the rest of
/// what the run-level outputs need ([`super::outputs::finish`]).
#[derive(Debug)]
pub struct Compared {
    /// Names, paths, one-sided and failed ranks, errors, warnings.
    pub meta: RunMeta,
    /// The compared ranks, in run-1 rank order.
    pub ranks: Vec<RankSummary>,
    /// For a part of a sharded compare (`--shard`): which, and the units it
    /// holds; `meta` and `ranks` then cover this part only, and the part's
    /// `part.json` is written instead of the run-level outputs.
    pub part: Option<(shard::Shard, Vec<shard::Unit>)>,
}

/// The run-level facts of a compare that its parts share.
fn run_level(cfg: &CompareConfig, plan: &RankPlan, input_errors: Vec<Message>) -> RunLevel {
    RunLevel {
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
        dtype_sections: cfg.matching.policy.dtype_origins.clone(),
        pairs: plan.pairs.iter().map(|(a, _, b, _)| (*a, *b)).collect(),
        only1: plan.only1.clone(),
        only2: plan.only2.clone(),
        input_errors,
        warnings: [&cfg.run1, &cfg.run2]
            .into_iter()
            .flat_map(|r| super::unfinished_captures(r))
            .map(|(p, beside_log)| Message::UnfinishedCapture {
                path: p.display().to_string(),
                beside_log,
            })
            .collect(),
    }
}

/// A part's share of the ranks (`--shard`), and its manifest (status
/// running): the split depends on the recorded log sizes only, so every
/// part (and the merge) computes the same one.
fn part_plan(
    cfg: &CompareConfig,
    part: &ShardPart,
    full_plan: &RankPlan,
    inputs: shard::Inputs,
    run: &RunLevel,
) -> (RankPlan, shard::Manifest) {
    let sizes = inputs.sizes();
    let units = match &part.units {
        Some(u) => u.clone(),
        None => shard::units_of_part(full_plan, part.shard, &shard::Inputs::size_of(&sizes)),
    };
    let m = shard::Manifest {
        format: shard::FORMAT.into(),
        version: shard::VERSION,
        tool: format!("actdiff {}", env!("CARGO_PKG_VERSION")),
        shard: part.shard,
        status: shard::PartStatus::Running,
        inputs,
        options: part.options.clone(),
        units: units.clone(),
        rows: cfg
            .rows
            .as_ref()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
        run: run.clone(),
        results: Vec::new(),
    };
    (shard::restrict(full_plan, &units), m)
}

/// A part's own view of the run: its ranks' pairs and one-sided ranks.
/// The options that name ranks, ops or rules are judged over the whole
/// run: `--rank-map` and `--layer-offset` by the part (the plan is
/// known), the rest by the merge (it needs every rank's results).
fn part_view(run: &RunLevel, plan: &RankPlan) -> RunLevel {
    RunLevel {
        pairs: plan.pairs.iter().map(|(a, _, b, _)| (*a, *b)).collect(),
        only1: plan.only1.clone(),
        only2: plan.only2.clone(),
        rank_map: Vec::new(),
        layer_offsets: Vec::new(),
        ignore_ops: Vec::new(),
        rules: Vec::new(),
        dtype_sections: Vec::new(),
        ..run.clone()
    }
}

/// Where `--rows` goes; a Parquet file that cannot be created is an error
/// in `errors` (and no rows are written).
fn open_rows(cfg: &CompareConfig, errors: &mut Vec<Message>) -> RowsOut {
    match &cfg.rows {
        Some(p) if report::parquet::is_parquet_path(p) => {
            match report::parquet::ParquetRows::create(p) {
                Ok(w) => RowsOut::Parquet(w),
                Err(e) => {
                    errors.push(Message::File {
                        path: p.display().to_string(),
                        error: e.to_string(),
                    });
                    RowsOut::None
                }
            }
        }
        Some(_) => RowsOut::Jsonl,
        None => RowsOut::None,
    }
}

/// Finishes the `--rows` file: joins the ranks' JSON Lines parts
/// (`rows_tmp`), or closes the Parquet file; the error, if any.
fn finish_rows(cfg: &CompareConfig, rows_out: RowsOut, rows_tmp: &[PathBuf]) -> Option<Message> {
    match (&cfg.rows, rows_out) {
        (Some(rows), RowsOut::Jsonl) => join_rows(rows, rows_tmp).err().map(Message::Text),
        (Some(rows), RowsOut::Parquet(w)) => w.finish().err().map(|e| Message::File {
            path: rows.display().to_string(),
            error: e.to_string(),
        }),
        _ => None,
    }
}

/// The error for a part's `part.json` that could not be written.
fn manifest_error(cfg: &CompareConfig, e: impl std::fmt::Display) -> Message {
    Message::File {
        path: cfg
            .report
            .out_dir
            .join(shard::MANIFEST)
            .display()
            .to_string(),
        error: e.to_string(),
    }
}

/// Compares two runs and writes every rank's pages (and the `--rows`
/// file); the run-level outputs are [`super::outputs::finish`]'s. With
/// [`CompareConfig::shard`], compares the part's ranks only and writes its
/// `part.json` (see [`shard::Manifest`]).
///
/// Never fails: a run that cannot be found, a report folder that cannot be
/// written, a rank whose logs are unusable are input errors in
/// [`RunMeta::errors`] (the exit status 2), the other ranks compared.
pub fn compare_runs(cfg: &CompareConfig) -> Compared {
    let mut input_errors = Vec::new();
    let (full_plan, inputs) = discover(cfg, &mut input_errors);
    let run = run_level(cfg, &full_plan, input_errors);
    let (plan, mut manifest) = match &cfg.shard {
        None => (full_plan, None),
        Some(part) => {
            let (plan, m) = part_plan(cfg, part, &full_plan, inputs, &run);
            (plan, Some(m))
        }
    };
    let view = match &manifest {
        None => run.clone(),
        Some(_) => part_view(&run, &plan),
    };
    let is_part = manifest.is_some();
    // `assemble` over `view`, with a part's whole-run option warnings first.
    let assemble_view = |errors: Vec<Message>, results, more_errors: Vec<Message>| {
        let mut c = assemble(&view, cfg.report.clone(), errors, results, more_errors);
        if !is_part {
            return c;
        }
        let mut warnings = messages::unused_options(&run, &[]);
        warnings.append(&mut c.meta.warnings);
        c.meta.warnings = warnings;
        c
    };
    let mut errors: Vec<Message> = Vec::new();
    if is_part {
        if let Err(e) = shard::remove_previous_rows(&cfg.report.out_dir) {
            errors.push(Message::Text(e));
        }
    }
    // A previous comparison's pages (of ranks or pages this one may not
    // write) must not look like part of this report: its index and summary
    // go now, its result pages once this one's are written (those it
    // wrote over stay).
    let kept = match prepare_report_folder_keeping_pages(&cfg.report) {
        Ok(k) => k,
        Err(e) => {
            errors.push(Message::Text(e.to_string()));
            let message = messages::join(&errors, "; ");
            let mut c = assemble_view(errors, Vec::new(), Vec::new());
            if let Some(mut m) = manifest {
                // No earlier part's "done" may stay in the folder.
                m.status = shard::PartStatus::Failed { message };
                if m.write(&cfg.report.out_dir).is_err() {
                    let _ = std::fs::remove_file(cfg.report.out_dir.join(shard::MANIFEST));
                }
                c.part = Some((m.shard, m.units));
            }
            return c;
        }
    };
    if let Some(m) = &manifest {
        if let Err(e) = m.write(&cfg.report.out_dir) {
            errors.push(manifest_error(cfg, e));
        }
    }
    let rows_out = open_rows(cfg, &mut errors);
    // The HTML budget is the report's: each rank gets its share, over
    // every rank of the run (so the parts of a sharded compare share it).
    let mut rank_cfg = cfg.clone();
    rank_cfg.report.html_budget = cfg
        .report
        .html_budget
        .map(|b| report::rank_budget(b, run.pairs.len()));
    if let Some(k) = &mut rank_cfg.keep {
        k.share_budget(run.pairs.len());
    }
    let done = match compare_ranks(&plan.pairs, &rank_cfg, &rows_out, None) {
        Ok(mut d) => {
            top_up_pages(&plan.pairs, &rank_cfg, &mut d);
            d
        }
        Err(e) => {
            errors.push(Message::Text(e));
            Vec::new()
        }
    };
    let mut results = Vec::with_capacity(done.len());
    let mut rows_tmp = Vec::new();
    for d in done {
        rows_tmp.extend(d.rows_tmp);
        results.push(RankResult {
            rank: d.rank,
            rule_hits: d.rule_hits,
            ignore_seen: d.ignore_seen,
            summary: d.summary,
            errors: d.errors,
            warnings: d.warnings,
        });
    }
    let mut more_errors: Vec<Message> = finish_rows(cfg, rows_out, &rows_tmp).into_iter().collect();
    if let Err(e) = kept.remove_unwritten(results.iter().filter_map(|r| r.summary.as_ref())) {
        more_errors.push(Message::Text(e.to_string()));
    }
    let Some(mut m) = manifest.take() else {
        return assemble(&run, cfg.report.clone(), errors, results, more_errors);
    };
    // A part: its results go to part.json, the run-level outputs are the
    // merge's. A part that could not do its work (a run not found, its
    // folder, its rows file, the worker pool) is a failed part, which the
    // merge names, and exits 2 (a run not found made a part "done" with
    // nothing compared, exit 0: green in a job array).
    let failed: Vec<Message> = run
        .input_errors
        .iter()
        .chain(&errors)
        .chain(&more_errors)
        .cloned()
        .collect();
    // The part's key indexes, which the merge reads back by rank (its
    // index writes them again by blocks of the whole run's ranks).
    let summaries = results.iter().filter_map(|r| r.summary.as_ref());
    let failed = match report::html::write_keys_files(summaries, &cfg.report.out_dir) {
        Ok(()) => failed,
        Err(e) => failed
            .into_iter()
            .chain([Message::Text(e.to_string())])
            .collect(),
    };
    m.results = results.clone();
    m.status = if failed.is_empty() {
        shard::PartStatus::Done
    } else {
        shard::PartStatus::Failed {
            message: messages::join(&failed, "; "),
        }
    };
    if let Err(e) = m.write(&cfg.report.out_dir) {
        errors.push(manifest_error(cfg, e));
    }
    let mut c = assemble_view(errors, results, more_errors);
    c.part = Some((m.shard, m.units));
    c
}

/// [`compare_runs`] after combining the shards of runs of different
/// parallel layouts ([`super::layouts::prepare`]); the combination is in
/// the result's `meta.layouts`. Errors: logs that cannot be combined
/// ([`super::layouts::prepare`]).
pub fn compare_layouts(cfg: &CompareConfig) -> Result<Compared, Message> {
    let prepared = super::layouts::prepare(cfg, cfg.no_combine)?;
    let mut c = compare_runs(&prepared.cfg);
    c.meta.layouts = prepared.combined;
    c.meta
        .warnings
        .extend(messages::layouts_at_reference_tolerance(cfg, &c));
    c.meta
        .warnings
        .extend(messages::modules_across_layouts(cfg, &c));
    c.meta
        .warnings
        .extend(messages::world_sizes_differ(cfg, &c));
    Ok(c)
}

/// `actdiff compare`: [`compare_layouts`], then every run-level output
/// ([`super::outputs::finish`]); returns the exit status.
pub fn compare(cfg: &CompareConfig, outs: &RunOutputs) -> i32 {
    match super::steps::is_series(cfg) {
        Ok(true) => {
            let sel = cfg.steps.clone().unwrap_or_default();
            return super::steps::compare_steps(cfg, &sel, outs);
        }
        Ok(false) if cfg.steps.is_some() => {
            let e = Message::NotASeries {
                run1: cfg.run1.display().to_string(),
                run2: cfg.run2.display().to_string(),
            };
            return super::outputs::input_error(cfg.report.clone(), vec![e], outs);
        }
        Ok(false) => {}
        Err(e) => {
            return super::outputs::input_error(cfg.report.clone(), vec![Message::Text(e)], outs)
        }
    }
    let mut c = match compare_layouts(cfg) {
        Ok(c) => c,
        Err(e) => return super::outputs::input_error(cfg.report.clone(), vec![e], outs),
    };
    if let Some(w) = messages::same_run(&cfg.run1, &cfg.run2) {
        c.meta.warnings.insert(0, w);
    }
    let timer = Timer::of(None);
    let status = finish(c.meta, c.ranks, outs);
    timer.lap("index");
    status
}

mod names;
pub use names::{default_name, default_names};

#[cfg(test)]
mod tests;

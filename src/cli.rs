//! The command line: options parsed with clap and turned into the stages'
//! settings (a bad option or option file is an input error every run-level
//! output reports); the stages wired together. What an option means lives
//! in its stage (tolerances in `matcher::policy`, names in `run`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::exit_codes;
use crate::matcher::compare::Tolerance;
use crate::matcher::policy::{self, Policy, F32_MIN_NORMAL};
use crate::matcher::{MatchOptions, Overrides};
use crate::report::messages::Message;
use crate::report::ReportOptions;
use crate::run::{self, CompareConfig, RunOutputs, Terminal};

/// Find where two deep-learning training runs stop agreeing numerically.
#[derive(Parser, Debug)]
#[command(name = "actdiff", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Compare two runs (log files or folders of rank_N_activations.log) and write a report.
    Compare(Box<CompareArgs>),
    /// Write two runs of realistic generated logs (benchmarks, reproducible from a seed).
    Gen(GenArgs),
    /// Join the parts of a sharded compare (`compare --shard`) into one report.
    Merge(MergeArgs),
}

/// `actdiff merge` options.
#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The part folders (the `-o` of each `actdiff compare --shard K/N`), all N of them.
    #[arg(required = true, value_name = "PART_DIR")]
    pub parts: Vec<PathBuf>,
    /// Report folder (index.html, result pages, summary.json).
    #[arg(short = 'o', long = "out", default_value = "report")]
    pub out: PathBuf,
    /// Write JUnit XML (one test case per rank; in a step series per step
    /// and rank) to this file.
    #[arg(long, value_name = "FILE.xml")]
    pub junit: Option<PathBuf>,
    /// Terminal output: a text summary, or the summary.json document on stdout.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// No terminal summary (errors and warnings still go to stderr).
    #[arg(short, long)]
    pub quiet: bool,
}

/// `actdiff gen` options.
#[derive(Args, Debug)]
pub struct GenArgs {
    /// Folder of run 1 (created).
    pub dir1: PathBuf,
    /// Folder of run 2 (created).
    pub dir2: PathBuf,
    /// Op blocks per rank log (about 340 bytes each: 3,150,000 ≈ 1 GiB).
    #[arg(long, default_value_t = 100_000)]
    pub ops: u64,
    /// Ranks (one log per rank in each run).
    #[arg(long, default_value_t = 1)]
    pub ranks: u32,
    /// Seed; the same arguments give the same bytes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Fraction of each rank's rows perturbed in run 2.
    #[arg(long, default_value_t = 0.01)]
    pub perturb: f64,
    /// Exact number of perturbed rows per rank (overrides --perturb).
    #[arg(long)]
    pub perturb_count: Option<u64>,
    /// Write two step series of this many steps (step_S/ folders with a
    /// `Step: S` header line) instead of one step.
    #[arg(long)]
    pub steps: Option<u64>,
    /// With --steps: run 2 equals run 1 before this step and is perturbed
    /// from it on (default: every step perturbed).
    #[arg(long, requires = "steps")]
    pub diverge_at: Option<u64>,
}

fn gen(a: GenArgs) -> i32 {
    let opts = crate::gen::GenOptions {
        ops: a.ops,
        ranks: a.ranks,
        seed: a.seed,
        perturb: a.perturb,
        perturb_count: a.perturb_count,
        step: None,
    };
    for dir in [&a.dir1, &a.dir2] {
        let n = crate::gen::stale_logs(dir, a.ranks, a.steps);
        if n > 0 {
            eprintln!(
                "warning: {} holds {n} rank logs or step folders this generation does not write: they stay beside its own, and a compare reads them; give an empty folder",
                dir.display()
            );
        }
    }
    let t = std::time::Instant::now();
    let res = match a.steps {
        Some(n) => crate::gen::generate_steps(&a.dir1, &a.dir2, &opts, n, a.diverge_at),
        None => crate::gen::generate(&a.dir1, &a.dir2, &opts),
    };
    match res {
        Ok(s) => {
            let secs = t.elapsed().as_secs_f64();
            println!(
                "files {} ops {} bytes {} perturbed {} seconds {:.2} MB/s {:.0}",
                s.files,
                s.ops,
                s.bytes,
                s.perturbed,
                secs,
                s.bytes as f64 / 1e6 / secs.max(1e-9)
            );
            if s.perturbed == 0 && a.perturb > 0.0 && a.perturb_count.is_none() {
                eprintln!(
                    "warning: no row perturbed: --perturb {} of {} ops a rank rounds down to 0 rows (run 2 equals run 1); --perturb-count N perturbs N rows a rank",
                    a.perturb, a.ops
                );
            }
            exit_codes::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit_codes::INPUT_ERROR
        }
    }
}

/// `actdiff compare` options. Serialised (less the output options, marked
/// `skip`) into a part's manifest as the options that affect results.
#[derive(Args, Debug, serde::Serialize)]
pub struct CompareArgs {
    /// Run 1 (the baseline): a rank_N_activations.log file, a folder of
    /// them, or a step series (a folder of step_S folders).
    pub run1: PathBuf,
    /// Run 2: as run 1.
    pub run2: PathBuf,
    /// Step series only: `3,5-9` compares these steps; `all` gives every
    /// step full result pages (default: every step compared, full pages
    /// for the first diverging step only).
    #[arg(long, value_name = "all|LIST")]
    pub steps: Option<String>,
    /// Report folder (index.html, result pages, summary.json).
    #[arg(short = 'o', long = "out", default_value = "report")]
    #[serde(skip)]
    pub out: PathBuf,
    /// Compare part K of N of the ranks (K from 0) and write it as a part
    /// for `actdiff merge`; `auto` takes K and N from a Slurm job array
    /// (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT), `auto/N` or `auto`
    /// with ACTDIFF_SHARD_COUNT=N from a Kubernetes Indexed Job
    /// (JOB_COMPLETION_INDEX). A part exits 0 once written, whatever it
    /// found: the merge gives the verdict.
    #[arg(long, value_name = "K/N|auto[/N]")]
    #[serde(skip)]
    pub shard: Option<run::shard::ShardSpec>,
    /// Display name of run 1 (default: its folder name).
    #[arg(long)]
    pub name1: Option<String>,
    /// Display name of run 2 (default: its folder name).
    #[arg(long)]
    pub name2: Option<String>,
    /// Manual pairs, one `run1 key, run2 key` per line (or a JSON object).
    #[arg(long = "override", value_name = "PAIRS")]
    pub overrides: Option<PathBuf>,
    /// Write every result row to this file: JSON Lines, or Parquet when the
    /// name ends in `.parquet`.
    #[arg(long, value_name = "ROWS.jsonl")]
    #[serde(skip)]
    pub rows: Option<PathBuf>,
    /// Compare run-1 rank A with run-2 rank B (`A:B`, repeatable or comma-separated).
    #[arg(long = "rank-map", value_name = "A:B")]
    pub rank_map: Vec<String>,
    /// Compare only these run-1 ranks (`0`, `0,2-5`) and the run-2 ranks
    /// they pair with; the other ranks of either run are left out, neither
    /// compared nor one-sided: one process against a data-parallel run
    /// (`--ranks 0`). Not with `--shard`.
    #[arg(long, value_name = "LIST")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<String>,
    /// Compare truncated logs and logs whose header count does not match
    /// instead of exit 3: the rows are compared and shown, and the exit
    /// status is 1 (never 0: the input is incomplete) or 2.
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Keep keys that occur twice in one log (paired by occurrence) instead of exit 2.
    #[arg(long)]
    pub allow_duplicates: bool,
    /// Compare the shard logs of a tensor-parallel run rank by rank, even
    /// against a run of another layout (default: the shards of runs whose
    /// `Mesh:` headers differ are combined into whole tensors first).
    #[arg(long)]
    pub no_combine: bool,
    /// Up to this many result rows per rank the pages hold every row; above
    /// it only the rows that are not `match` (`all`: always every row).
    #[arg(long, value_name = "N|all", default_value = "200000")]
    pub html_rows: HtmlRows,
    /// Size budget of the report's HTML pages in MiB, shared out over the
    /// ranks (0: none). Over a rank's share its pages hold the diverging
    /// rows with two rows of context each, then only the diverging rows,
    /// then the first of them that fit. Each rank's first page, with
    /// its heatmap (about 24 KB), and the index (up to about 25 KB a rank up to 64
    /// ranks, under 2 MB above) are written whatever the budget: a budget
    /// below that leaves no rows on the pages and is exceeded. Default:
    /// 256, and none with `--html-rows all`.
    #[arg(long, value_name = "MB")]
    pub html_budget_mb: Option<u64>,
    /// Result rows per HTML page.
    #[arg(long, default_value_t = crate::report::DEFAULT_PAGE_ROWS as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub page_rows: u64,
    /// Worker threads, 1 to 1024 (default: one per core).
    #[arg(short = 'j', long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    #[serde(skip)]
    pub jobs: Option<u16>,
    /// No progress bars and no terminal summary (errors and warnings still go to stderr).
    #[arg(short, long)]
    #[serde(skip)]
    pub quiet: bool,
    /// Relative tolerance on hashes and stats (setting it makes the stats gate too).
    #[arg(long, value_name = "X")]
    pub rtol: Option<f64>,
    /// Absolute tolerance on hashes and stats (setting it makes the stats gate too).
    #[arg(long, value_name = "Y")]
    pub atol: Option<f64>,
    /// Every difference counts: rtol 0, atol 0, stats gate.
    #[arg(long, conflicts_with_all = ["rtol", "atol"])]
    pub bitwise: bool,
    /// The tolerance that separates summation order across parallel
    /// layouts (TP=2 against TP=1): rtol 1e-4, atol 1e-6.
    #[arg(long, conflicts_with_all = ["rtol", "atol", "bitwise"])]
    pub layouts: bool,
    /// NaN against NaN is a difference (default: equal, as in the reference).
    #[arg(long)]
    pub nan_is_diff: bool,
    /// Looser default tolerances for low-precision dtypes (bfloat16 rel 1e-2, float16 rel 1e-3, float8 rel 1.25e-1).
    #[arg(long)]
    pub dtype_tolerance: bool,
    /// Show rows of this op name but never let them gate (repeatable).
    #[arg(long = "ignore-op", value_name = "OP")]
    pub ignore_ops: Vec<String>,
    /// Ordered tolerance rules, one `<key regex> rel <= X or abs <= Y` per line.
    #[arg(long, value_name = "RULES.txt")]
    pub rules: Option<PathBuf>,
    /// Every row must match a rule (exit 2 naming the first that does not).
    #[arg(long)]
    pub rules_exhaustive: bool,
    /// Config file with rules (default: ./actdiff.toml when present).
    #[arg(long, value_name = "actdiff.toml")]
    pub config: Option<PathBuf>,
    /// Rules that match no row are an error (exit 2) instead of a warning.
    #[arg(long)]
    pub strict: bool,
    /// Terminal output: a text summary, or the summary.json document on stdout.
    #[arg(long, value_enum, default_value = "text")]
    #[serde(skip)]
    pub format: Format,
    /// Add OFFSET to `layers.N` in one side's keys before pairing: `run2:1=4`
    /// (run 2's rank 1 is a pipeline stage starting at layer 4) or `run2=4` (all ranks).
    #[arg(long = "layer-offset", value_name = "SIDE[:RANK]=OFFSET")]
    pub layer_offsets: Vec<String>,
    /// Pair fuzzy-key candidates strictly in file order, as the reference
    /// does, instead of preferring one with the same Shape (and inputs), and keep every
    /// exact pair (none is left to the fuzzy pass for counter drift).
    #[arg(long)]
    pub no_shape_tie_break: bool,
    /// Read an old writer's `L1 norm` as the Output hash where a block has none.
    #[arg(long)]
    pub l1_equals_hash: bool,
    /// Write JUnit XML (one test case per rank; in a step series per step
    /// and rank) to this file.
    #[arg(long, value_name = "FILE.xml")]
    #[serde(skip)]
    pub junit: Option<PathBuf>,
}

/// `--html-rows`: a row count, or `all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HtmlRows(pub Option<usize>);

impl std::str::FromStr for HtmlRows {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("all") {
            return Ok(HtmlRows(None));
        }
        s.replace('_', "")
            .parse::<usize>()
            .map(|n| HtmlRows(Some(n)))
            .map_err(|_| format!("`{s}`: expected a row count or `all`"))
    }
}

/// Terminal output formats.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Human-readable summary.
    Text,
    /// The versioned JSON document also written to summary.json.
    Json,
}

/// The HTML size budget in bytes from `--html-budget-mb` (`0`: none) and
/// `--html-rows`: unset, it is the default budget, except with
/// `--html-rows all`, which asks for every row.
fn html_budget(html_rows: Option<usize>, mb: Option<u64>) -> Option<u64> {
    match (mb, html_rows) {
        (Some(0), _) | (None, None) => None,
        (Some(mb), _) => Some(mb << 20),
        (None, Some(_)) => Some(crate::report::DEFAULT_HTML_BUDGET_MB << 20),
    }
}

/// Builds the tolerance policy from the config file, rules file and flags.
fn build_policy(a: &CompareArgs) -> Result<Policy, String> {
    let config = a.config.clone().or_else(|| {
        let p = PathBuf::from("actdiff.toml");
        let found = p.is_file();
        if found && !a.quiet {
            // Found, not asked for: say so, since it can change the verdict.
            eprintln!("note: using rules from ./actdiff.toml (--config to choose another)");
        }
        found.then_some(p)
    });
    let mut p = match &config {
        Some(c) => Policy::read_toml(c).map_err(|e| e.to_string())?,
        None => Policy::default(),
    };
    if let Some(r) = &a.rules {
        let text = std::fs::read_to_string(r).map_err(|e| format!("{}: {e}", r.display()))?;
        let mut rules =
            policy::parse_rules_text(&text, &r.display().to_string()).map_err(|e| e.to_string())?;
        rules.append(&mut p.rules);
        p.rules = rules;
    }
    if a.bitwise {
        p.default.hash = Tolerance {
            rtol: 0.0,
            atol: 0.0,
            both: false,
        };
        p.default.stats = Some(p.default.hash);
    } else if a.rtol.is_some() || a.atol.is_some() || a.layouts {
        let (rtol, atol) = if a.layouts {
            (
                Some(crate::layout::LAYOUT_RTOL),
                Some(crate::layout::LAYOUT_ATOL),
            )
        } else {
            (a.rtol, a.atol)
        };
        for (name, v) in [("--rtol", rtol), ("--atol", atol)] {
            if let Some(v) = v {
                // As in a config's `rtol`/`atol` (`Policy::from_toml`).
                if !v.is_finite() || v < 0.0 {
                    return Err(format!(
                        "{name} {v}: tolerances must be finite, non-negative numbers"
                    ));
                }
            }
        }
        p.default.hash = Tolerance {
            rtol: rtol.unwrap_or(Tolerance::REFERENCE.rtol),
            atol: atol.unwrap_or(F32_MIN_NORMAL),
            both: false,
        };
        p.default.stats = Some(p.default.hash);
    }
    if a.nan_is_diff {
        p.default.nan_equal = false;
    }
    if a.dtype_tolerance {
        let given = (a.rtol.is_some() || a.atol.is_some()) && !a.bitwise;
        let floor = given.then_some(p.default.hash);
        policy::add_dtype_defaults(&mut p, floor);
    }
    p.ignore_ops.extend(a.ignore_ops.iter().cloned());
    p.exhaustive = a.rules_exhaustive;
    Ok(p)
}

/// The `--junit FILE` (or `--junit=FILE`) of a command line clap could
/// not parse, if it has one.
fn junit_arg(args: impl Iterator<Item = std::ffi::OsString>) -> Option<PathBuf> {
    let args: Vec<std::ffi::OsString> = args.collect();
    let compare = args.iter().skip(1).any(|a| a == "compare");
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        if a == "--junit" {
            return it.next().filter(|_| compare).map(PathBuf::from);
        }
        if let Some(v) = a.to_str().and_then(|s| s.strip_prefix("--junit=")) {
            return compare.then(|| PathBuf::from(v));
        }
    }
    None
}

/// Runs the command line and returns the exit status.
pub fn main() -> i32 {
    run_from(std::env::args_os())
}

/// Runs `actdiff` with the command line `args` (the program name first),
/// as the binary does; returns its exit status. The capture agent's
/// `baseline=` check runs `compare` through it, in process.
pub fn run_from<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            if !e.use_stderr() {
                return exit_codes::OK;
            }
            // A CI job asked for JUnit: it gets one saying why, not none.
            if let Some(j) = junit_arg(args.iter().cloned()) {
                let msg = e.to_string();
                let first = msg
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("error: ");
                if let Err(err) = run::outputs::usage_error_junit(&j, first) {
                    eprintln!("error: {}: {err}", j.display());
                }
            }
            return exit_codes::INPUT_ERROR;
        }
    };
    match cli.command {
        Command::Compare(a) => compare(*a),
        Command::Gen(a) => gen(a),
        Command::Merge(a) => merge(a),
    }
}

/// The options of `a` that affect results, for a part's manifest: every
/// option but the output ones, and the size and digest of each rules,
/// config and override file (the `./actdiff.toml` found too).
fn result_options(a: &CompareArgs) -> serde_json::Value {
    let mut v = serde_json::to_value(a).expect("options serialise");
    let config = a
        .config
        .clone()
        .or_else(|| Some(PathBuf::from("actdiff.toml")).filter(|p| p.is_file()));
    let mut files = serde_json::Map::new();
    for p in [config.as_ref(), a.rules.as_ref(), a.overrides.as_ref()]
        .into_iter()
        .flatten()
    {
        files.insert(p.display().to_string(), run::shard::file_record(p));
    }
    v["files"] = serde_json::Value::Object(files);
    v
}

fn terminal(format: Format, quiet: bool) -> Terminal {
    match format {
        Format::Json => Terminal::Json,
        Format::Text if quiet => Terminal::Quiet,
        Format::Text => Terminal::Text,
    }
}

/// `actdiff merge`: the parts checked, then the run-level outputs exactly
/// as `actdiff compare` writes them ([`run::merge::merge`]).
fn merge(a: MergeArgs) -> i32 {
    if let Some(e) = a
        .junit
        .as_deref()
        .and_then(|j| run::outputs::output_in_report("--junit", j, &a.out))
    {
        eprintln!("error: {e}");
        return exit_codes::INPUT_ERROR;
    }
    let outs = RunOutputs {
        junit: a.junit.clone(),
        terminal: terminal(a.format, a.quiet),
    };
    run::merge::merge(&a.parts, &a.out, &outs)
}

/// A part of a sharded compare: its ranks' problems on stderr, one line on
/// stdout; exit 0 once `part.json` says done (the verdict is the merge's),
/// 2 when the part failed.
fn part_done(c: run::Compared, part: run::shard::Shard, units: usize, quiet: bool) -> i32 {
    for w in &c.meta.warnings {
        eprintln!("warning: part {part}: {w}");
    }
    // Each once: a run not found is both the run's and the part's error.
    let mut said: Vec<String> = Vec::new();
    for e in &c.meta.errors {
        let e = e.to_string();
        if !said.contains(&e) {
            eprintln!("error: part {part}: {e}");
            said.push(e);
        }
    }
    let dir = &c.meta.report.out_dir;
    let done = run::shard::Manifest::read(dir)
        .map(|m| m.status == run::shard::PartStatus::Done)
        .unwrap_or(false);
    if !quiet {
        let n: u64 = c.ranks.iter().map(|r| r.counts.total()).sum();
        let d: u64 = c.ranks.iter().map(|r| r.counts.diverging()).sum();
        println!(
            "part {part}: {} rank(s) compared ({n} rows, {d} diverging), {units} unit(s); written to {}; the verdict is `actdiff merge`'s",
            c.ranks.len(),
            dir.join(run::shard::MANIFEST).display()
        );
    }
    if done {
        exit_codes::OK
    } else {
        exit_codes::INPUT_ERROR
    }
}

/// The report settings of `a` (names default to the run folders', see
/// [`run::pipeline::default_names`]).
fn report_options(a: &CompareArgs) -> ReportOptions {
    let (default1, default2) = run::pipeline::default_names(&a.run1, &a.run2);
    ReportOptions {
        out_dir: a.out.clone(),
        name1: a.name1.clone().unwrap_or(default1),
        name2: a.name2.clone().unwrap_or(default2),
        path1: a.run1.display().to_string(),
        path2: a.run2.display().to_string(),
        page_rows: a.page_rows as usize,
        html_rows: a.html_rows.0,
        html_budget: html_budget(a.html_rows.0, a.html_budget_mb),
        rank_files: true,
        series_index: None,
    }
}

/// The matching settings of `a`: overrides (warning about skipped lines),
/// the tolerance policy, the shape tie-break.
fn match_options(a: &CompareArgs) -> Result<MatchOptions, String> {
    let mut matching = MatchOptions::default();
    if let Some(p) = &a.overrides {
        let o = Overrides::read(p).map_err(|e| e.to_string())?;
        for (line, text) in &o.skipped {
            eprintln!(
                "warning: {}:{line}:1: override line without a comma skipped: `{text}`",
                p.display()
            );
        }
        matching.overrides = o;
    }
    matching.policy = build_policy(a)?;
    matching.shape_tie_break = !a.no_shape_tie_break;
    Ok(matching)
}

/// The whole configuration of `actdiff compare` (of part `shard` with
/// `--shard`); an error names the option or file at fault.
fn compare_config(a: &CompareArgs, shard: Option<run::ShardPart>) -> Result<CompareConfig, String> {
    let matching = match_options(a)?;
    let layer_offsets = run::pipeline::parse_layer_offsets(&a.layer_offsets)?;
    let rank_map = run::parse_rank_map(&a.rank_map).map_err(|e| e.to_string())?;
    let ranks = match &a.ranks {
        Some(_) if shard.is_some() => {
            return Err("--ranks cannot be given with --shard: a part's ranks are the split's (compare every rank, or --ranks without parts)".into())
        }
        Some(list) => Some(run::parse_rank_list(list)?),
        None => None,
    };
    let steps = match &a.steps {
        Some(s) => Some(run::steps::StepSelection::parse(s)?),
        None => None,
    };
    Ok(CompareConfig {
        steps,
        shard,
        report: report_options(a),
        run1: a.run1.clone(),
        run2: a.run2.clone(),
        matching,
        rows: a.rows.clone(),
        rank_map,
        ranks,
        allow_incomplete: a.allow_incomplete,
        allow_duplicates: a.allow_duplicates,
        no_combine: a.no_combine,
        step: None,
        keep: None,
        jobs: a.jobs.map(usize::from),
        quiet: a.quiet,
        strict: a.strict,
        layer_offsets,
        l1_as_hash: a.l1_equals_hash,
    })
}

fn compare(a: CompareArgs) -> i32 {
    // Before anything is written: no output may overwrite an input.
    // Nor a file of the report.
    for (option, out) in [("--junit", &a.junit), ("--rows", &a.rows)] {
        let runs = [a.run1.as_path(), a.run2.as_path()];
        if let Some(e) = out.as_deref().and_then(|o| {
            run::outputs::output_overwrites_input(option, o, runs)
                .or_else(|| run::outputs::output_in_report(option, o, &a.out))
        }) {
            eprintln!("error: {e}");
            return exit_codes::INPUT_ERROR;
        }
    }
    if let Some(spec) = a.shard {
        return compare_part(&a, spec);
    }
    let outs = RunOutputs {
        junit: a.junit.clone(),
        terminal: terminal(a.format, a.quiet),
    };
    match compare_config(&a, None) {
        Ok(cfg) => run::compare(&cfg, &outs),
        // A bad option or option file: no rank is read, and every output
        // (report folder, JUnit, terminal) says why.
        Err(e) => run::outputs::input_error(report_options(&a), vec![Message::Text(e)], &outs),
    }
}

/// `actdiff compare --shard`: one part. Any failure once the part is known
/// is a failed part (its `part.json` says why, for the merge to name); a
/// part that is not known (a bad `--shard auto` environment) writes nothing.
fn compare_part(a: &CompareArgs, spec: run::shard::ShardSpec) -> i32 {
    let shard = match spec.resolve(&|k| std::env::var(k).ok()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return exit_codes::INPUT_ERROR;
        }
    };
    let part = run::ShardPart {
        shard,
        options: result_options(a),
        units: None,
    };
    let cfg = if a.junit.is_some() {
        Err(
            "--junit with --shard: JUnit is the merge's (actdiff merge PART_DIR... --junit FILE)"
                .into(),
        )
    } else {
        compare_config(a, Some(part.clone()))
    };
    match cfg {
        Ok(cfg) => {
            match run::steps::is_series(&cfg) {
                Ok(true) => {
                    let sel = cfg.steps.clone().unwrap_or_default();
                    return run::steps::compare_part(&cfg, &sel, a.quiet);
                }
                // As `compare` without --shard refuses it.
                Ok(false) if cfg.steps.is_some() => {
                    let e = Message::NotASeries {
                        run1: cfg.run1.display().to_string(),
                        run2: cfg.run2.display().to_string(),
                    };
                    return run::outputs::part_input_error(
                        &report_options(a),
                        shard,
                        part.options,
                        vec![e],
                    );
                }
                Ok(false) => {}
                Err(e) => {
                    return run::outputs::part_input_error(
                        &report_options(a),
                        shard,
                        part.options,
                        vec![Message::Text(e)],
                    )
                }
            }
            let c = run::compare_runs(&cfg);
            let units = c.part.as_ref().map_or(0, |(_, u)| u.len());
            part_done(c, shard, units, a.quiet)
        }
        Err(e) => {
            let errors = vec![Message::Text(e)];
            run::outputs::part_input_error(&report_options(a), shard, part.options, errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::html_budget;

    #[test]
    fn html_rows_all_lifts_the_default_budget_only() {
        let default = Some(crate::report::DEFAULT_HTML_BUDGET_MB << 20);
        assert_eq!(html_budget(Some(200_000), None), default);
        assert_eq!(html_budget(None, None), None, "--html-rows all: every row");
        assert_eq!(
            html_budget(None, Some(19)),
            Some(19 << 20),
            "an explicit budget stays"
        );
        assert_eq!(html_budget(Some(10), Some(0)), None);
        assert_eq!(html_budget(Some(10), Some(5)), Some(5 << 20));
    }
}

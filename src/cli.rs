//! The command line: options parsed with clap, the stages wired together,
//! errors turned into messages and exit statuses. No logic of its own.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::exit_codes;
use crate::matcher::compare::Tolerance;
use crate::matcher::policy::{self, Policy, F32_MIN_NORMAL};
use crate::matcher::{MatchOptions, Overrides};
use crate::report::{junit, terminal, ReportOptions};
use crate::run::{self, CompareConfig};

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
}

fn gen(a: GenArgs) -> i32 {
    let opts = crate::gen::GenOptions {
        ops: a.ops,
        ranks: a.ranks,
        seed: a.seed,
        perturb: a.perturb,
        perturb_count: a.perturb_count,
    };
    let t = std::time::Instant::now();
    match crate::gen::generate(&a.dir1, &a.dir2, &opts) {
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
            exit_codes::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit_codes::INPUT_ERROR
        }
    }
}

/// `actdiff compare` options.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Run 1 (the baseline): a rank_N_activations.log file, or a folder of them.
    pub run1: PathBuf,
    /// Run 2: a rank_N_activations.log file, or a folder of them.
    pub run2: PathBuf,
    /// Report folder (index.html, result pages, summary.json).
    #[arg(short = 'o', long = "out", default_value = "report")]
    pub out: PathBuf,
    /// Display name of run 1 (default: its folder name).
    #[arg(long)]
    pub name1: Option<String>,
    /// Display name of run 2 (default: its folder name).
    #[arg(long)]
    pub name2: Option<String>,
    /// Manual pairs, one `run1 key, run2 key` per line (or a JSON object).
    #[arg(long = "override", value_name = "PAIRS")]
    pub overrides: Option<PathBuf>,
    /// Write every result row as JSON Lines to this file.
    #[arg(long, value_name = "ROWS.jsonl")]
    pub rows: Option<PathBuf>,
    /// Compare run-1 rank A with run-2 rank B (`A:B`, repeatable or comma-separated).
    #[arg(long = "rank-map", value_name = "A:B")]
    pub rank_map: Vec<String>,
    /// Compare truncated logs and logs whose header count does not match
    /// instead of exit 3: the rows are compared and shown, and the exit
    /// status is 1 (never 0: the input is incomplete) or 2.
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Keep keys that occur twice in one log (paired by occurrence) instead of exit 2.
    #[arg(long)]
    pub allow_duplicates: bool,
    /// Up to this many result rows per rank the pages hold every row; above
    /// it only the rows that are not `match` (`all`: always every row).
    #[arg(long, value_name = "N|all", default_value = "200000")]
    pub html_rows: HtmlRows,
    /// Size budget of each rank's HTML pages in MiB (0: none). Over it the
    /// pages hold only the diverging rows, then the first of them that fit.
    /// Default: 256, and none with `--html-rows all`.
    #[arg(long, value_name = "MB")]
    pub html_budget_mb: Option<u64>,
    /// Result rows per HTML page.
    #[arg(long, default_value_t = crate::report::DEFAULT_PAGE_ROWS as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub page_rows: u64,
    /// Worker threads, 1 to 1024 (default: one per core).
    #[arg(short = 'j', long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub jobs: Option<u16>,
    /// No progress bars and no terminal summary (errors and warnings still go to stderr).
    #[arg(short, long)]
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
    pub format: Format,
    /// Add OFFSET to `layers.N` in one side's keys before pairing: `run2:1=4`
    /// (run 2's rank 1 is a pipeline stage starting at layer 4) or `run2=4` (all ranks).
    #[arg(long = "layer-offset", value_name = "SIDE[:RANK]=OFFSET")]
    pub layer_offsets: Vec<String>,
    /// Pair fuzzy-key candidates strictly in file order, as the reference
    /// does, instead of preferring one with the same Shape.
    #[arg(long)]
    pub no_shape_tie_break: bool,
    /// Read an old writer's `L1 norm` as the Output hash where a block has none.
    #[arg(long)]
    pub l1_equals_hash: bool,
    /// Write JUnit XML (one test case per rank) to this file.
    #[arg(long, value_name = "FILE.xml")]
    pub junit: Option<PathBuf>,
}

/// `--html-rows`: a row count, or `all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// Builds the tolerance policy from the config file, rules file and flags.
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
    } else if a.rtol.is_some() || a.atol.is_some() {
        for (name, v) in [("--rtol", a.rtol), ("--atol", a.atol)] {
            if let Some(v) = v {
                if v.is_nan() || v < 0.0 {
                    return Err(format!(
                        "{name} {v}: tolerances must be non-negative numbers"
                    ));
                }
            }
        }
        p.default.hash = Tolerance {
            rtol: a.rtol.unwrap_or(Tolerance::REFERENCE.rtol),
            atol: a.atol.unwrap_or(F32_MIN_NORMAL),
            both: false,
        };
        p.default.stats = Some(p.default.hash);
    }
    if a.nan_is_diff {
        p.default.nan_equal = false;
    }
    if a.dtype_tolerance {
        for (d, rtol) in [
            ("bfloat16", 1e-2),
            ("float16", 1e-3),
            ("float8_e4m3fn", 1.25e-1),
            ("float8_e5m2", 2.5e-1),
        ] {
            if !p.dtype.iter().any(|(n, _)| n == d) {
                p.dtype.push((
                    d.to_string(),
                    Tolerance {
                        rtol,
                        atol: F32_MIN_NORMAL,
                        both: false,
                    },
                ));
            }
        }
    }
    p.ignore_ops.extend(a.ignore_ops.iter().cloned());
    p.exhaustive = a.rules_exhaustive;
    Ok(p)
}

/// Runs the command line and returns the exit status.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit_codes::INPUT_ERROR
            } else {
                exit_codes::OK
            };
        }
    };
    match cli.command {
        Command::Compare(a) => compare(*a),
        Command::Gen(a) => gen(a),
    }
}

fn compare(a: CompareArgs) -> i32 {
    let mut matching = MatchOptions::default();
    if let Some(p) = &a.overrides {
        match Overrides::read(p) {
            Ok(o) => {
                for (line, text) in &o.skipped {
                    eprintln!(
                        "warning: {}:{line}:1: override line without a comma skipped: `{text}`",
                        p.display()
                    );
                }
                matching.overrides = o;
            }
            Err(e) => {
                eprintln!("error: {e}");
                return exit_codes::INPUT_ERROR;
            }
        }
    }
    matching.policy = match build_policy(&a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return exit_codes::INPUT_ERROR;
        }
    };
    matching.shape_tie_break = !a.no_shape_tie_break;
    let layer_offsets = match run::pipeline::parse_layer_offsets(&a.layer_offsets) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return exit_codes::INPUT_ERROR;
        }
    };
    let rank_map = match run::parse_rank_map(&a.rank_map) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return exit_codes::INPUT_ERROR;
        }
    };
    let cfg = CompareConfig {
        report: ReportOptions {
            out_dir: a.out.clone(),
            name1: a
                .name1
                .unwrap_or_else(|| run::pipeline::default_name(&a.run1)),
            name2: a
                .name2
                .unwrap_or_else(|| run::pipeline::default_name(&a.run2)),
            path1: a.run1.display().to_string(),
            path2: a.run2.display().to_string(),
            page_rows: a.page_rows as usize,
            html_rows: a.html_rows.0,
            html_budget: html_budget(a.html_rows.0, a.html_budget_mb),
        },
        run1: a.run1,
        run2: a.run2,
        matching,
        rows: a.rows,
        rank_map,
        allow_incomplete: a.allow_incomplete,
        allow_duplicates: a.allow_duplicates,
        jobs: a.jobs.map(usize::from),
        quiet: a.quiet,
        strict: a.strict,
        layer_offsets,
        l1_as_hash: a.l1_equals_hash,
    };
    match run::compare_runs(&cfg) {
        Ok(outcome) => {
            for w in &outcome.warnings {
                eprintln!("warning: {w}");
            }
            for e in &outcome.errors {
                eprintln!("error: {e}");
            }
            if let Some(j) = &a.junit {
                let res = std::fs::File::create(j)
                    .and_then(|f| junit::write_junit(&outcome.summary, std::io::BufWriter::new(f)));
                if let Err(e) = res {
                    eprintln!("error: {}: {e}", j.display());
                    return exit_codes::INPUT_ERROR;
                }
            }
            match a.format {
                Format::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&outcome.summary).expect("summary serialises")
                ),
                Format::Text if !a.quiet => {
                    let index = cfg.report.out_dir.join("index.html");
                    print!(
                        "{}",
                        terminal::render(&outcome.summary, &index.display().to_string())
                    );
                }
                Format::Text => {}
            }
            outcome.exit_status()
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit_codes::INPUT_ERROR
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

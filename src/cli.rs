//! The command line: options parsed with clap, the stages wired together,
//! errors turned into messages and exit statuses. No logic of its own.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::exit_codes;
use crate::matcher::{MatchOptions, Overrides};
use crate::report::{terminal, ReportOptions};
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
    Compare(CompareArgs),
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
    /// Treat truncated logs and header count mismatches as a divergence (exit 1), not exit 3.
    #[arg(long)]
    pub allow_incomplete: bool,
    /// Keep keys that occur twice in one log (paired by occurrence) instead of exit 2.
    #[arg(long)]
    pub allow_duplicates: bool,
    /// Result rows per HTML page.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub page_rows: u64,
    /// Worker threads (default: one per core).
    #[arg(short = 'j', long)]
    pub jobs: Option<usize>,
    /// No progress bars and no terminal summary (errors and warnings still go to stderr).
    #[arg(short, long)]
    pub quiet: bool,
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
        Command::Compare(a) => compare(a),
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
        },
        run1: a.run1,
        run2: a.run2,
        matching,
        rows: a.rows,
        rank_map,
        allow_incomplete: a.allow_incomplete,
        allow_duplicates: a.allow_duplicates,
        jobs: a.jobs,
        quiet: a.quiet,
    };
    match run::compare_runs(&cfg) {
        Ok(outcome) => {
            for w in &outcome.warnings {
                eprintln!("warning: {w}");
            }
            for e in &outcome.errors {
                eprintln!("error: {e}");
            }
            if !a.quiet {
                let index = cfg.report.out_dir.join("index.html");
                print!(
                    "{}",
                    terminal::render(&outcome.summary, &index.display().to_string())
                );
            }
            outcome.exit_status()
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit_codes::INPUT_ERROR
        }
    }
}

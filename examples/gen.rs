//! Writes two runs of generated activation logs (see `actdiff::gen`).
//!
//! ```text
//! cargo run --release --example gen -- DIR1 DIR2 [--ops N] [--ranks R] [--seed S]
//!     [--perturb FRACTION] [--perturb-count N]
//! ```
//!
//! Prints one line: files, ops, bytes, perturbed rows, seconds and MB/s.

use std::path::PathBuf;
use std::time::Instant;

use actdiff::gen::{generate, GenOptions};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Write two runs of generated activation logs")]
struct Args {
    /// Folder of run 1 (created).
    dir1: PathBuf,
    /// Folder of run 2 (created).
    dir2: PathBuf,
    /// Op blocks per rank log.
    #[arg(long, default_value_t = 100_000)]
    ops: u64,
    /// Ranks (one log per rank in each run).
    #[arg(long, default_value_t = 1)]
    ranks: u32,
    /// Seed; the same arguments give the same bytes.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Fraction of each rank's rows perturbed in run 2.
    #[arg(long, default_value_t = 0.01)]
    perturb: f64,
    /// Exact number of perturbed rows per rank (overrides --perturb).
    #[arg(long)]
    perturb_count: Option<u64>,
}

fn main() -> std::io::Result<()> {
    let a = Args::parse();
    let opts = GenOptions {
        ops: a.ops,
        ranks: a.ranks,
        seed: a.seed,
        perturb: a.perturb,
        perturb_count: a.perturb_count,
    };
    let t = Instant::now();
    let s = generate(&a.dir1, &a.dir2, &opts)?;
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
    Ok(())
}

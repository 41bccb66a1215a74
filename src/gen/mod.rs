//! A deterministic generator of realistic activation logs, for benchmarks and
//! large-file tests.
//!
//! The logs follow `shared/spec/log-format.md` byte for byte: the header
//! (`Total captured activations: N`, `Excluded ops dispatched: ...`, 80 `=`,
//! an empty line), then one block per op of a Llama-style decoder training
//! loop, step after step: forward (`tok_embeddings`, per layer
//! `attention_norm`, `attention.wq/wk/wv`, `attention.inner_attention`,
//! `attention.wo`, `ffn_norm`, `feed_forward.w1/w2/w3`, then `norm`, `output`
//! and the loss), backward (`Phase: backward`, layers in reverse) and the
//! optimizer step (`<none>/op_N__fused_adamw_` with one input hash per
//! parameter and state tensor). With more than one rank the FSDP collectives
//! (`all_gather_copy_in`, `_allgather_base_`, `_reduce_scatter_base_`, whose
//! stats are `nan`) are dispatched too. Keys carry per-module op counters,
//! blocks carry `Input producers` links to earlier keys, in-place ops such as
//! `add_` have hash-only blocks, and a few stats are `inf`, `-inf`, `nan`,
//! `0` or `-0`. Blocks average about 300 bytes, as in real logs, so 1 GiB is
//! about 3.4 million ops.
//!
//! Run 2 of a rank is byte-identical to run 1 except in the perturbed rows,
//! whose first finite `Output hash` value (or, for a block without one, the
//! first finite `Input hashes` value) and `L2 norm` are multiplied by
//! `1 + 1e-4`. Matching the two runs therefore pairs every row by its exact
//! key and finds exactly the perturbed rows `diff`.
//!
//! ```no_run
//! use actdiff::gen::{generate, GenOptions};
//! let opts = GenOptions { ops: 1_000_000, ranks: 2, seed: 7, perturb: 0.01, perturb_count: None, step: None };
//! let stats = generate("a".as_ref(), "b".as_ref(), &opts).unwrap();
//! println!("{} files, {} bytes, {} rows differ", stats.files, stats.bytes, stats.perturbed);
//! ```

use std::io::{self, Write};
use std::path::Path;

use rayon::prelude::*;

use crate::logformat::{self as lf, push_u64, write_header, Field, HeaderNotes, Precision};

mod program;
use program::{Kind, Program};

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenOptions {
    /// Op blocks per rank log (the header count).
    pub ops: u64,
    /// Number of ranks; each gets `rank_{r}_activations.log` in both runs.
    pub ranks: u32,
    /// Seed of every random choice; the same options give the same bytes.
    pub seed: u64,
    /// Fraction (0 to 1) of each rank's rows that are perturbed in run 2;
    /// rounded to the nearest row count.
    pub perturb: f64,
    /// Exact number of perturbed rows per rank; overrides `perturb`.
    pub perturb_count: Option<u64>,
    /// The `Step: S` header line of a step series' log (`None`: no line).
    pub step: Option<u64>,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            ops: 100_000,
            ranks: 1,
            seed: 0,
            perturb: 0.01,
            perturb_count: None,
            step: None,
        }
    }
}

impl GenOptions {
    /// Rows of each rank that differ between run 1 and run 2: `perturb_count`,
    /// or `perturb × ops` rounded, at most `ops`.
    pub fn perturbed_rows(&self) -> u64 {
        let n = match self.perturb_count {
            Some(n) => n,
            None => (self.perturb.clamp(0.0, 1.0) * self.ops as f64).round() as u64,
        };
        n.min(self.ops)
    }

    fn validate(&self) -> io::Result<()> {
        if self.perturb_count.is_none() && !(0.0..=1.0).contains(&self.perturb) {
            return Err(invalid(format!(
                "perturb must be a fraction between 0 and 1, got {}",
                self.perturb
            )));
        }
        Ok(())
    }
}

/// What was written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GenStats {
    /// Files written.
    pub files: u32,
    /// Op blocks written, summed over the files.
    pub ops: u64,
    /// Bytes written, summed over the files.
    pub bytes: u64,
    /// Rows that differ between run 1 and run 2 (the `diff` rows a compare
    /// finds), summed over the ranks (not over the two runs).
    pub perturbed: u64,
}

/// The file name of rank `rank`'s log: `rank_{rank}_activations.log`.
pub fn log_file_name(rank: u32) -> String {
    format!("rank_{rank}_activations.log")
}

/// How many rank logs (`rank_N_activations.log`) and step folders
/// (`step_S`) `dir` holds that a generation of `ranks` ranks (and with
/// `steps`, that many step folders) does not write again (0 when `dir`
/// does not exist): they stay beside the new files, and a compare reads
/// them.
pub fn stale_logs(dir: &Path, ranks: u32, steps: Option<u64>) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let stale = |name: &str| match (
        crate::run::rank_of_file_name(name),
        crate::report::files::step_of_dir_name(name),
    ) {
        (Some(r), _) => steps.is_some() || r >= ranks || name != log_file_name(r),
        (None, Some(s)) => steps.is_none_or(|n| s == 0 || s > n),
        (None, None) => false,
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(stale))
        .count()
}

/// Writes `dir1/rank_{r}_activations.log` (run 1) and
/// `dir2/rank_{r}_activations.log` (run 2) for every rank, creating the
/// folders, in parallel on the current rayon pool.
///
/// Errors: I/O errors, `ranks == 0`, `dir1 == dir2`, or a `perturb` outside
/// 0..=1 (`InvalidInput`).
pub fn generate(dir1: &Path, dir2: &Path, opts: &GenOptions) -> io::Result<GenStats> {
    opts.validate()?;
    if opts.ranks == 0 {
        return Err(invalid("ranks must be at least 1".into()));
    }
    if dir1 == dir2 {
        return Err(invalid(format!(
            "the two run folders are the same: {}",
            dir1.display()
        )));
    }
    std::fs::create_dir_all(dir1).map_err(|e| with_path(e, dir1))?;
    std::fs::create_dir_all(dir2).map_err(|e| with_path(e, dir2))?;
    let jobs: Vec<(u32, u8)> = (0..opts.ranks).flat_map(|r| [(r, 1u8), (r, 2u8)]).collect();
    let results: Vec<io::Result<GenStats>> = jobs
        .par_iter()
        .map(|&(rank, run)| {
            let dir = if run == 1 { dir1 } else { dir2 };
            let path = dir.join(log_file_name(rank));
            let file = std::fs::File::create(&path).map_err(|e| with_path(e, &path))?;
            let mut w = io::BufWriter::with_capacity(1 << 20, file);
            let s = write_log(&mut w, opts, rank, run).map_err(|e| with_path(e, &path))?;
            w.flush().map_err(|e| with_path(e, &path))?;
            Ok(s)
        })
        .collect();
    let mut total = GenStats::default();
    for (r, &(_, run)) in results.into_iter().zip(&jobs) {
        let s = r?;
        total.files += s.files;
        total.ops += s.ops;
        total.bytes += s.bytes;
        if run == 2 {
            total.perturbed += s.perturbed;
        }
    }
    Ok(total)
}

/// Writes two step series of `steps` steps: `dir1/step_S/` and
/// `dir2/step_S/` as [`generate`] writes them, with the seed `opts.seed +
/// S` and a `Step: S` header line. Run 2 is perturbed (as `opts` says)
/// from step `diverge_at` on and equal to run 1 before it (`None`: every
/// step perturbed). Returns the totals over every step.
///
/// Errors: as [`generate`]'s, and `steps` of 0.
pub fn generate_steps(
    dir1: &Path,
    dir2: &Path,
    opts: &GenOptions,
    steps: u64,
    diverge_at: Option<u64>,
) -> io::Result<GenStats> {
    if steps == 0 {
        return Err(invalid("steps must be at least 1".into()));
    }
    let mut total = GenStats::default();
    for s in 1..=steps {
        let mut o = opts.clone();
        o.seed = opts.seed.wrapping_add(s);
        o.step = Some(s);
        if diverge_at.is_some_and(|d| s < d) {
            o.perturb_count = Some(0);
        }
        let name = format!("step_{s}");
        let st = generate(&dir1.join(&name), &dir2.join(&name), &o)?;
        total.files += st.files;
        total.ops += st.ops;
        total.bytes += st.bytes;
        total.perturbed += st.perturbed;
    }
    Ok(total)
}

/// Writes rank `rank`'s log of run `run` (1 or 2) to `w`. Run 1 and run 2
/// of the same options and rank differ only in the perturbed rows.
/// `GenStats::perturbed` is the same for both runs.
///
/// Errors: I/O errors from `w`, `run` not 1 or 2, or a `perturb` outside
/// 0..=1 (`InvalidInput`).
pub fn write_log(
    w: &mut impl Write,
    opts: &GenOptions,
    rank: u32,
    run: u8,
) -> io::Result<GenStats> {
    opts.validate()?;
    if run != 1 && run != 2 {
        return Err(invalid(format!("run must be 1 or 2, got {run}")));
    }
    let mut g = Generator::new(opts, rank, run == 2);
    let mut buf: Vec<u8> = Vec::with_capacity(FLUSH_AT + (64 << 10));
    let mut bytes = 0u64;

    let notes = HeaderNotes {
        excluded: Some(EXCLUDED.iter().map(|s| s.to_string()).collect()),
        step: opts.step,
        ..HeaderNotes::default()
    };
    write_header(&mut buf, opts.ops, &notes, Precision::PRINTED);

    for _ in 0..opts.ops {
        g.block(&mut buf);
        if buf.len() >= FLUSH_AT {
            w.write_all(&buf)?;
            bytes += buf.len() as u64;
            buf.clear();
        }
    }
    w.write_all(&buf)?;
    bytes += buf.len() as u64;
    Ok(GenStats {
        files: 1,
        ops: opts.ops,
        bytes,
        perturbed: g.perturb_total,
    })
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

const FLUSH_AT: usize = 1 << 20;

/// The header's `Excluded ops dispatched` (TorchTitan's default excluded ops
/// that a Llama step dispatches).
const EXCLUDED: &[&str] = &[
    "_to_copy",
    "_unsafe_view",
    "as_strided",
    "clone",
    "detach",
    "expand",
    "ones_like",
    "slice",
    "t",
    "transpose",
    "view",
    "view_as_complex",
    "view_as_real",
];

/// Relative change of a perturbed value in run 2.
const PERTURB_FACTOR: f64 = 1.0 + 1e-4;

/// Decoder layers of the generated model.
const N_LAYERS: usize = 32;

// ---------------------------------------------------------------------------
// PRNG

/// splitmix64: small, fast, and good enough for test data.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut r = Rng(seed);
        r.next_u64();
        r
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform in [0, n) (n > 0), by multiply-high.
    fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

fn mix(a: u64, b: u64) -> u64 {
    let mut r = Rng(a ^ b.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    r.next_u64()
}

// ---------------------------------------------------------------------------
// The generator

struct Generator {
    prog: Program,
    /// Values and choices shared by both runs.
    rng: Rng,
    /// Selection of the perturbed rows (Knuth's algorithm S: exact count).
    sel: Rng,
    run2: bool,
    perturb_left: u64,
    perturb_total: u64,
    rows_left: u64,
    /// Next position in the step program.
    pc: usize,
    /// Per-module op counters.
    seq: Vec<u64>,
    /// Per program op: the counter and first output hash it got in the current step.
    last_seq: Vec<u64>,
    last_hash: Vec<f64>,
    /// Scratch: this block's values.
    out_hashes: Vec<f64>,
    in_hashes: Vec<f64>,
}

impl Generator {
    fn new(opts: &GenOptions, rank: u32, run2: bool) -> Generator {
        let prog = Program::new(opts.ranks > 1);
        let n_mod = prog.modules.len();
        let n_ops = prog.ops.len();
        let base = mix(opts.seed, rank as u64 + 1);
        let k = opts.perturbed_rows();
        Generator {
            prog,
            rng: Rng::new(base),
            sel: Rng::new(mix(base, 0x5E1E_C7ED)),
            run2,
            perturb_left: k,
            perturb_total: k,
            rows_left: opts.ops,
            pc: 0,
            seq: vec![0; n_mod],
            last_seq: vec![0; n_ops],
            last_hash: vec![1.0; n_ops],
            out_hashes: Vec::with_capacity(4),
            in_hashes: Vec::with_capacity(2048),
        }
    }

    /// A hash (an L1 norm): positive, around `10^(mag + 4)`.
    fn hash(&mut self, mag: f64) -> f64 {
        let u = self.rng.f64();
        10f64.powf(mag + 3.0 + 2.0 * u)
    }

    /// Writes the next block: which op, whether it is perturbed, its
    /// values, then its text. Every draw comes in the same order in both
    /// runs, so they differ in the perturbed rows only.
    fn block(&mut self, out: &mut Vec<u8>) {
        let perturb = self.select_perturbed();
        let (idx, seq) = self.next_op();
        let mut stats = self.draw_stats(idx);
        self.draw_hashes(idx);
        if perturb {
            stats.l2 *= PERTURB_FACTOR;
            if let Some(h) = self.out_hashes.iter_mut().find(|h| h.is_finite()) {
                *h *= PERTURB_FACTOR;
            } else if let Some(h) = self.in_hashes.iter_mut().find(|h| h.is_finite()) {
                *h *= PERTURB_FACTOR;
            }
        }
        self.write_block(out, idx, seq, &stats);
    }

    /// Whether the next row is perturbed in run 2 (false in run 1). The
    /// selection comes first, from its own stream: run 1 and run 2 draw the
    /// same values either way.
    fn select_perturbed(&mut self) -> bool {
        let perturbed = self.perturb_left > 0
            && (self.perturb_left >= self.rows_left
                || self.sel.below(self.rows_left) < self.perturb_left);
        if perturbed {
            self.perturb_left -= 1;
        }
        self.rows_left -= 1;
        perturbed && self.run2
    }

    /// The next op of the step program and its module's op counter.
    fn next_op(&mut self) -> (usize, u64) {
        let idx = self.pc;
        self.pc += 1;
        if self.pc == self.prog.ops.len() {
            self.pc = 0;
        }
        let module = self.prog.ops[idx].module as usize;
        let seq = self.seq[module];
        self.seq[module] += 1;
        self.last_seq[idx] = seq;
        (idx, seq)
    }

    /// The stats of op `idx`: around its magnitude, with a rare `inf`,
    /// `-inf`, `-0` or `0`, and all `nan` for a collective.
    fn draw_stats(&mut self, idx: usize) -> Moments {
        let op = &self.prog.ops[idx];
        let (kind, mag, positive) = (op.kind, op.mag, op.positive);
        let u = self.rng.next_u64();
        let scale = 10f64.powf(mag + (u >> 11) as f64 * (2.0 / (1u64 << 53) as f64) - 1.0);
        let rare = u & 0xFFFF;
        let r = &mut self.rng;
        let mut l2 = scale * (8.0 + 40.0 * r.f64());
        let mut min = -scale * (0.5 + 4.0 * r.f64());
        let mut max = scale * (0.5 + 4.0 * r.f64());
        let mut mean = scale * 1e-3 * (r.f64() - 0.5);
        if positive {
            min = scale * 1e-6 * r.f64();
            mean = scale * (0.5 + r.f64());
        }
        match rare {
            0 => {
                max = f64::INFINITY;
                l2 = f64::INFINITY;
            }
            1 => {
                min = f64::NEG_INFINITY;
                l2 = f64::INFINITY;
            }
            2..=9 => mean = -0.0,
            10..=20 => min = 0.0,
            _ => {}
        }
        if kind == Kind::NanStats {
            l2 = f64::NAN;
            min = f64::NAN;
            max = f64::NAN;
            mean = f64::NAN;
        }
        Moments { l2, min, max, mean }
    }

    /// The Output hash and Input hashes of op `idx` (into `out_hashes`,
    /// `in_hashes`): inputs take their producer's last output hash, and
    /// the op's first output hash is remembered for its consumers.
    fn draw_hashes(&mut self, idx: usize) {
        let (kind, mag, n_out) = {
            let op = &self.prog.ops[idx];
            (op.kind, op.mag, op.n_out)
        };
        self.out_hashes.clear();
        match kind {
            Kind::NanStats => self.out_hashes.push(f64::NAN),
            Kind::CopyIn => {
                let h = self.hash(mag);
                self.out_hashes.push(h);
                self.out_hashes.push(f64::NAN);
            }
            Kind::AdamW => {}
            _ => {
                for _ in 0..n_out {
                    let h = self.hash(mag);
                    self.out_hashes.push(h);
                }
            }
        }
        self.in_hashes.clear();
        let n_in = self.prog.ops[idx].inputs.len();
        for i in 0..n_in {
            let h = match self.prog.ops[idx].inputs[i] {
                // The collective's output buffer, uninitialised before it runs.
                _ if kind == Kind::NanStats && i == 0 => f64::NAN,
                Some(p) => self.last_hash[p as usize],
                None if kind == Kind::AdamW => {
                    // params ~1e3, grads ~1e-1, exp_avg ~1e-2, exp_avg_sq ~1e-6, steps 2.0
                    let n = n_in / 4;
                    match i / n.max(1) {
                        0 => self.hash(-1.0),
                        1 => self.hash(-5.0),
                        2 => self.hash(-6.0),
                        3 => self.hash(-10.0),
                        _ => 2.0,
                    }
                }
                None => self.hash(mag),
            };
            self.in_hashes.push(h);
        }
        if kind == Kind::HashOnly {
            // An in-place update: the output is the input, slightly moved.
            if let (Some(o), Some(&i)) = (self.out_hashes.first_mut(), self.in_hashes.first()) {
                *o = i * (1.0 + 1e-3 * self.rng.f64());
            }
        }
        let first_out = self.out_hashes.first().copied().unwrap_or(1.0);
        self.last_hash[idx] = if first_out.is_nan() {
            self.in_hashes
                .iter()
                .copied()
                .find(|h| h.is_finite())
                .unwrap_or(1.0)
        } else {
            first_out
        };
    }

    /// The text of op `idx`'s block (its key's counter `seq`), through
    /// [`crate::logformat`]: key, Shape and stats, hashes, producers, then
    /// the op's Location and Phase lines and the empty line.
    fn write_block(&self, out: &mut Vec<u8>, idx: usize, seq: u64, m: &Moments) {
        let op = &self.prog.ops[idx];
        let kind = op.kind;
        let mut key = Vec::with_capacity(64);
        write_key(
            &mut key,
            &self.prog.modules[op.module as usize],
            seq,
            op.name,
        );
        lf::key_line(out, &key);
        if !matches!(kind, Kind::HashOnly | Kind::AdamW) {
            out.extend_from_slice(&op.shape);
            lf::stat_line(out, Field::L2Norm, m.l2, Precision::PRINTED);
            lf::stat_line(out, Field::Min, m.min, Precision::PRINTED);
            lf::stat_line(out, Field::Max, m.max, Precision::PRINTED);
            lf::stat_line(out, Field::Mean, m.mean, Precision::PRINTED);
        }
        lf::list_line(out, Field::OutputHash, &self.out_hashes, Precision::PRINTED);
        lf::list_line(out, Field::InputHashes, &self.in_hashes, Precision::PRINTED);
        let linked = op.inputs.iter().any(|p| p.is_some());
        if kind != Kind::HashOnly && (linked || op.inputs.len() > 1) {
            lf::producers_line(out, op.inputs.len(), |out, i| {
                if let Some(p) = op.inputs[i] {
                    let pop = &self.prog.ops[p as usize];
                    write_key(
                        out,
                        &self.prog.modules[pop.module as usize],
                        self.last_seq[p as usize],
                        pop.name,
                    );
                }
            });
        }
        out.extend_from_slice(&op.tail);
    }
}

/// The stats of one block.
struct Moments {
    l2: f64,
    min: f64,
    max: f64,
    mean: f64,
}

fn write_key(out: &mut Vec<u8>, module: &[u8], seq: u64, name: &str) {
    out.extend_from_slice(module);
    out.extend_from_slice(b"/op_");
    push_u64(out, seq);
    out.push(b'_');
    out.extend_from_slice(name.as_bytes());
}

#[cfg(test)]
mod tests;

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

use crate::logformat::{self as lf, push_u64, write_header, Field, HeaderNotes, Phase, Precision};

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
// The op program of one training step

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Shape and stats lines, hashes, producers.
    Stats,
    /// FSDP collective: stats `nan`, output hash `nan`.
    NanStats,
    /// `all_gather_copy_in`: finite stats, output hashes `x, nan`.
    CopyIn,
    /// In-place op returning nothing: Output hash, Input hashes, Location only.
    HashOnly,
    /// `_fused_adamw_`: Input hashes and producers only, one per tensor.
    AdamW,
}

/// One op of the step program.
struct Op {
    module: u32,
    name: &'static str,
    kind: Kind,
    /// The whole `  Shape: ...\n` line (empty for hash-only kinds).
    shape: Vec<u8>,
    n_out: u8,
    /// Producer program index per input; `None` = from outside the captured ops.
    inputs: Vec<Option<u32>>,
    /// `  Location: ...\n`, `  Phase: backward\n` when backward, and the empty line.
    tail: Vec<u8>,
    /// Typical magnitude (log10) of the values.
    mag: f64,
    /// Min is non-negative (pow, rsqrt).
    positive: bool,
}

struct Program {
    modules: Vec<Vec<u8>>,
    ops: Vec<Op>,
}

/// A tensor's sizes and dtype, written as its Shape line through
/// [`lf::shape_line`].
type Shape = (&'static [i64], &'static str);

/// The shape argument of ops that write no Shape line (hash-only kinds).
const NO_SHAPE: Shape = (&[], "");

const SH_ACT: Shape = (&[1, 2048, 4096], "float32");
const SH_STAT: Shape = (&[1, 2048, 1], "float32");
const SH_MM: Shape = (&[2048, 4096], "float32");
const SH_MM_KV: Shape = (&[2048, 1024], "float32");
const SH_FFN: Shape = (&[1, 2048, 14336], "float32");
const SH_MM_FFN: Shape = (&[2048, 14336], "float32");
const SH_ATTN: Shape = (&[1, 32, 2048, 128], "bfloat16");
const SH_W: Shape = (&[4096, 4096], "float32");
const SH_W_KV: Shape = (&[1024, 4096], "float32");
const SH_W1: Shape = (&[14336, 4096], "float32");
const SH_W2: Shape = (&[4096, 14336], "float32");
const SH_LOGITS: Shape = (&[2048, 128256], "float32");
const SH_EMB: Shape = (&[128256, 4096], "float32");
const SH_FLAT: Shape = (&[218103808], "bfloat16");
const SH_FLAT_SHARD: Shape = (&[27262976], "float32");

struct Builder {
    modules: Vec<Vec<u8>>,
    ops: Vec<Op>,
    backward: bool,
}

impl Builder {
    fn module(&mut self, name: &str) -> u32 {
        if let Some(i) = self.modules.iter().position(|m| m == name.as_bytes()) {
            return i as u32;
        }
        self.modules.push(name.as_bytes().to_vec());
        (self.modules.len() - 1) as u32
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        module: u32,
        name: &'static str,
        kind: Kind,
        shape: Shape,
        n_out: u8,
        inputs: &[Option<u32>],
        loc: &str,
        mag: f64,
    ) -> Option<u32> {
        let mut tail = Vec::new();
        lf::text_line(&mut tail, Field::Location, loc.as_bytes());
        lf::phase_line(
            &mut tail,
            if self.backward {
                Phase::Backward
            } else {
                Phase::Forward
            },
        );
        tail.push(b'\n');
        let positive = matches!(name, "pow" | "rsqrt" | "mean" | "sqrt");
        // `mm` reads its inputs, and its output is read, through views, which
        // are excluded ops: as in real logs, those links are lost.
        let inputs: Vec<Option<u32>> = inputs
            .iter()
            .map(|p| p.filter(|&p| name != "mm" && self.ops[p as usize].name != "mm"))
            .collect();
        self.ops.push(Op {
            module,
            name,
            kind,
            shape: if matches!(kind, Kind::HashOnly | Kind::AdamW) {
                Vec::new()
            } else {
                let mut line = Vec::new();
                lf::shape_line(&mut line, shape.0, shape.1);
                line
            },
            n_out,
            inputs,
            tail,
            mag,
            positive,
        });
        Some((self.ops.len() - 1) as u32)
    }

    fn stats(
        &mut self,
        module: u32,
        name: &'static str,
        shape: Shape,
        inputs: &[Option<u32>],
        loc: &str,
        mag: f64,
    ) -> Option<u32> {
        self.push(module, name, Kind::Stats, shape, 1, inputs, loc, mag)
    }

    /// RMSNorm forward: pow, mean, add_ (eps, in place), rsqrt, mul, mul.
    fn norm_fwd(&mut self, module: u32, x: Option<u32>, line: u32) -> Option<u32> {
        let loc = format!("llama3/model.py:{line}");
        let p = self.stats(module, "pow", SH_ACT, &[x], &loc, 0.5);
        let m = self.stats(module, "mean", SH_STAT, &[p], &loc, 0.0);
        self.push(module, "add_", Kind::HashOnly, NO_SHAPE, 1, &[m], &loc, 0.0);
        let r = self.stats(module, "rsqrt", SH_STAT, &[m], &loc, 0.0);
        let y = self.stats(module, "mul", SH_ACT, &[x, r], &loc, 0.3);
        self.stats(module, "mul", SH_ACT, &[y, None], &loc, 0.3)
    }

    /// RMSNorm backward: ten pointwise ops.
    fn norm_bwd(&mut self, module: u32, g: Option<u32>, line: u32) -> Option<u32> {
        let loc = format!("llama3/model.py:{line}");
        let a = self.stats(module, "mul", SH_ACT, &[g, None], &loc, -2.0);
        let b = self.stats(module, "mul", SH_ACT, &[a, None], &loc, -2.0);
        let c = self.stats(module, "mul", SH_ACT, &[a, None], &loc, -2.0);
        let d = self.stats(module, "mul", SH_ACT, &[c, None], &loc, -2.5);
        let e = self.stats(module, "sum", SH_STAT, &[d], &loc, -3.0);
        let f = self.stats(module, "div", SH_STAT, &[e, None], &loc, -3.0);
        let h = self.stats(module, "pow", SH_STAT, &[None, None], &loc, 0.0);
        let i = self.stats(module, "mul", SH_ACT, &[f, h], &loc, -3.0);
        let j = self.stats(module, "mul", SH_ACT, &[i, None], &loc, -3.0);
        self.stats(module, "add", SH_ACT, &[b, j], &loc, -2.0)
    }

    /// Linear backward: grad input mm, grad weight mm, and (`accumulate`) an
    /// add into an existing gradient.
    #[allow(clippy::too_many_arguments)]
    fn linear_bwd(
        &mut self,
        module: u32,
        g: Option<u32>,
        act: Shape,
        w: Shape,
        line: u32,
        accumulate: Option<Option<u32>>,
    ) -> Option<u32> {
        let loc = format!("llama3/model.py:{line}");
        let gi = self.stats(module, "mm", act, &[g, None], &loc, -2.0);
        self.stats(module, "mm", w, &[None, None], &loc, -1.5);
        match accumulate {
            Some(other) => self.stats(module, "add", act, &[other, gi], &loc, -2.0),
            None => gi,
        }
    }

    fn fsdp_gather(&mut self, module: u32) {
        let c = self.push(
            module,
            "all_gather_copy_in",
            Kind::CopyIn,
            SH_FLAT_SHARD,
            2,
            &[None, None],
            "_fully_shard/_fsdp_collectives.py:380",
            1.0,
        );
        self.push(
            module,
            "_allgather_base_",
            Kind::NanStats,
            SH_FLAT,
            1,
            &[c, c],
            "distributed/distributed_c10d.py:5421",
            1.0,
        );
    }

    fn fsdp_scatter(&mut self, module: u32) {
        self.push(
            module,
            "_reduce_scatter_base_",
            Kind::NanStats,
            SH_FLAT_SHARD,
            1,
            &[None, None],
            "_fully_shard/_fsdp_param_group.py:1169",
            -1.0,
        );
    }
}

impl Program {
    /// One training step of a Llama-3-8B-shaped decoder: forward, backward,
    /// optimizer. With `fsdp`, the FSDP2 collectives too.
    fn new(fsdp: bool) -> Program {
        let mut b = Builder {
            modules: Vec::new(),
            ops: Vec::new(),
            backward: false,
        };
        let none = b.module("<none>");
        let emb = b.module("tok_embeddings");
        let (layers, lsm) = b.forward(fsdp, emb, none);
        b.backward = true;
        b.backward_pass(fsdp, emb, none, &layers, lsm);
        // Optimizer step: not backward.
        b.backward = false;
        b.optimizer(none);
        Program {
            modules: b.modules,
            ops: b.ops,
        }
    }
}

/// The modules of one decoder layer and the forward ops its backward reads.
struct Layer {
    top: u32,
    attn_norm: u32,
    wq: u32,
    wk: u32,
    wv: u32,
    inner: u32,
    wo: u32,
    ffn_norm: u32,
    ff: u32,
    w1: u32,
    w2: u32,
    w3: u32,
    flash: Option<u32>,
    ff_mul: Option<u32>,
    silu: Option<u32>,
    w1_out: Option<u32>,
    w3_out: Option<u32>,
}

impl Builder {
    /// The forward pass: embedding, the layers, the final norm, the output
    /// projection and the loss's log-softmax (returned with the layers).
    fn forward(&mut self, fsdp: bool, emb: u32, none: u32) -> (Vec<Layer>, Option<u32>) {
        if fsdp {
            self.fsdp_gather(emb);
        }
        let mut res = self.stats(
            emb,
            "embedding",
            SH_ACT,
            &[None, None],
            "llama3/model.py:192",
            0.0,
        );
        let mut layers = Vec::with_capacity(N_LAYERS);
        for i in 0..N_LAYERS {
            let (l, r) = self.layer_forward(i, res, fsdp);
            res = r;
            layers.push(l);
        }
        let norm = self.module("norm");
        let output = self.module("output");
        if fsdp {
            self.fsdp_gather(norm);
        }
        let h = self.norm_fwd(norm, res, 195);
        let logits = self.stats(
            output,
            "mm",
            SH_LOGITS,
            &[h, None],
            "llama3/model.py:196",
            2.0,
        );
        let lsm = self.stats(
            none,
            "_log_softmax",
            SH_LOGITS,
            &[logits],
            "components/loss.py:27",
            3.0,
        );
        (layers, lsm)
    }

    /// Layer `i`'s forward from the residual stream `res`; returns the layer
    /// and the new residual.
    fn layer_forward(&mut self, i: usize, res: Option<u32>, fsdp: bool) -> (Layer, Option<u32>) {
        let mut res = res;
        let p = format!("layers.{i}");
        let mut l = Layer {
            top: self.module(&p),
            attn_norm: self.module(&format!("{p}.attention_norm")),
            wq: self.module(&format!("{p}.attention.wq")),
            wk: self.module(&format!("{p}.attention.wk")),
            wv: self.module(&format!("{p}.attention.wv")),
            inner: self.module(&format!("{p}.attention.inner_attention")),
            wo: self.module(&format!("{p}.attention.wo")),
            ffn_norm: self.module(&format!("{p}.ffn_norm")),
            ff: self.module(&format!("{p}.feed_forward")),
            w1: self.module(&format!("{p}.feed_forward.w1")),
            w2: self.module(&format!("{p}.feed_forward.w2")),
            w3: self.module(&format!("{p}.feed_forward.w3")),
            flash: None,
            ff_mul: None,
            silu: None,
            w1_out: None,
            w3_out: None,
        };
        if fsdp {
            self.fsdp_gather(l.top);
        }
        self.norm_fwd(l.attn_norm, res, 152);
        self.stats(l.wq, "mm", SH_MM, &[None, None], "llama3/model.py:109", 1.0);
        self.stats(
            l.wk,
            "mm",
            SH_MM_KV,
            &[None, None],
            "llama3/model.py:110",
            1.0,
        );
        self.stats(
            l.wv,
            "mm",
            SH_MM_KV,
            &[None, None],
            "llama3/model.py:111",
            1.0,
        );
        l.flash = self.push(
            l.inner,
            "_scaled_dot_product_flash_attention_for_cpu",
            Kind::Stats,
            SH_ATTN,
            2,
            &[None, None, None], // through views
            "llama3/model.py:91",
            0.0,
        );
        let o = self.stats(l.wo, "mm", SH_MM, &[None, None], "llama3/model.py:124", 0.5);
        res = self.stats(l.top, "add", SH_ACT, &[res, o], "llama3/model.py:152", 0.5);
        let h = self.norm_fwd(l.ffn_norm, res, 153);
        l.w1_out = self.stats(
            l.w1,
            "mm",
            SH_MM_FFN,
            &[h, None],
            "llama3/model.py:135",
            1.0,
        );
        l.silu = self.stats(
            l.ff,
            "silu",
            SH_FFN,
            &[l.w1_out],
            "llama3/model.py:135",
            0.5,
        );
        l.w3_out = self.stats(
            l.w3,
            "mm",
            SH_MM_FFN,
            &[h, None],
            "llama3/model.py:135",
            1.0,
        );
        l.ff_mul = self.stats(
            l.ff,
            "mul",
            SH_FFN,
            &[l.silu, l.w3_out],
            "llama3/model.py:135",
            0.5,
        );
        let o = self.stats(l.w2, "mm", SH_MM, &[None, None], "llama3/model.py:135", 0.5);
        res = self.stats(l.top, "add", SH_ACT, &[res, o], "llama3/model.py:153", 0.5);
        (l, res)
    }

    /// The backward pass from the loss to the embedding, layers in reverse.
    fn backward_pass(
        &mut self,
        fsdp: bool,
        emb: u32,
        none: u32,
        layers: &[Layer],
        lsm: Option<u32>,
    ) {
        let norm = self.module("norm");
        let output = self.module("output");
        let nll = self.stats(
            none,
            "nll_loss_backward",
            SH_LOGITS,
            &[None, lsm, None, None],
            "components/loss.py:27",
            -4.0,
        );
        let g = self.stats(
            none,
            "_log_softmax_backward_data",
            SH_LOGITS,
            &[nll, lsm],
            "components/loss.py:27",
            -4.0,
        );
        let g = self.linear_bwd(output, g, SH_MM, SH_EMB, 196, None);
        if fsdp {
            self.fsdp_scatter(output);
        }
        let mut g = self.norm_bwd(norm, g, 195);
        for l in layers.iter().rev() {
            g = self.layer_backward(l, g, fsdp);
        }
        self.stats(
            emb,
            "embedding_dense_backward",
            SH_EMB,
            &[g, None],
            "llama3/model.py:192",
            -2.0,
        );
        if fsdp {
            self.fsdp_scatter(emb);
        }
    }

    /// Layer `l`'s backward from the gradient `g`; returns the gradient of
    /// its input.
    fn layer_backward(&mut self, l: &Layer, g: Option<u32>, fsdp: bool) -> Option<u32> {
        let mut g = g;
        let loc = "llama3/model.py:135";
        let gm = self.linear_bwd(l.w2, g, SH_MM, SH_W2, 135, None);
        let a = self.stats(l.ff, "mul", SH_FFN, &[gm, l.w3_out], loc, -2.5);
        let c = self.stats(l.ff, "mul", SH_FFN, &[gm, l.silu], loc, -2.5);
        let g3 = self.linear_bwd(l.w3, c, SH_MM, SH_W2, 135, None);
        let s = self.stats(l.ff, "silu_backward", SH_FFN, &[a, l.w1_out], loc, -2.5);
        let gh = self.linear_bwd(l.w1, s, SH_MM, SH_W1, 135, Some(g3));
        let gn = self.norm_bwd(l.ffn_norm, gh, 153);
        g = self.stats(l.top, "add", SH_ACT, &[g, gn], "llama3/model.py:153", -2.0);
        let go = self.linear_bwd(l.wo, g, SH_MM, SH_W, 124, None);
        let fb = self.push(
            l.inner,
            "_scaled_dot_product_flash_attention_for_cpu_backward",
            Kind::Stats,
            SH_ATTN,
            3,
            &[go, None, None, None, None, l.flash],
            "llama3/model.py:91",
            -3.0,
        );
        let gv = self.linear_bwd(l.wv, fb, SH_MM, SH_W_KV, 111, None);
        let gk = self.linear_bwd(l.wk, fb, SH_MM, SH_W_KV, 110, Some(gv));
        let gq = self.linear_bwd(l.wq, fb, SH_MM, SH_W, 109, Some(gk));
        let gn = self.norm_bwd(l.attn_norm, gq, 152);
        g = self.stats(l.top, "add", SH_ACT, &[g, gn], "llama3/model.py:152", -2.0);
        if fsdp {
            self.fsdp_scatter(l.top);
        }
        g
    }

    /// The optimizer step: grad-norm clipping and the fused AdamW.
    fn optimizer(&mut self, none: u32) {
        let n_params = 9 * N_LAYERS + 3;
        self.push(
            none,
            "_foreach_add_",
            Kind::HashOnly,
            NO_SHAPE,
            1,
            &[None],
            "optim/adam.py:526",
            0.0,
        );
        let inputs = vec![None; 4 * n_params + 4];
        self.push(
            none,
            "_fused_adamw_",
            Kind::AdamW,
            NO_SHAPE,
            0,
            &inputs,
            "optim/adam.py:880",
            0.0,
        );
        self.push(
            none,
            "add_",
            Kind::HashOnly,
            NO_SHAPE,
            1,
            &[None],
            "optim/adam.py:415",
            0.0,
        );
        let clip = self.stats(
            none,
            "norm",
            (&[], "float32"),
            &[None],
            "distributed/utils.py:305",
            0.0,
        );
        self.push(
            none,
            "mul_",
            Kind::HashOnly,
            NO_SHAPE,
            1,
            &[None, clip],
            "distributed/utils.py:339",
            0.0,
        );
    }
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

    fn block(&mut self, out: &mut Vec<u8>) {
        // Selection first, from its own stream: run 1 and run 2 draw the
        // same values either way.
        let perturbed = self.perturb_left > 0
            && (self.perturb_left >= self.rows_left
                || self.sel.below(self.rows_left) < self.perturb_left);
        if perturbed {
            self.perturb_left -= 1;
        }
        self.rows_left -= 1;
        let perturb = perturbed && self.run2;

        let idx = self.pc;
        self.pc += 1;
        if self.pc == self.prog.ops.len() {
            self.pc = 0;
        }
        let op = &self.prog.ops[idx];
        let (kind, mag, positive, n_out) = (op.kind, op.mag, op.positive, op.n_out);
        let seq = self.seq[op.module as usize];
        self.seq[op.module as usize] += 1;
        self.last_seq[idx] = seq;

        // Values, drawn in the same order in both runs.
        let u = self.rng.next_u64();
        let scale = 10f64.powf(mag + (u >> 11) as f64 * (2.0 / (1u64 << 53) as f64) - 1.0);
        let rare = u & 0xFFFF;
        let r = &mut self.rng;
        let l2 = scale * (8.0 + 40.0 * r.f64());
        let mut min = -scale * (0.5 + 4.0 * r.f64());
        let mut max = scale * (0.5 + 4.0 * r.f64());
        let mut mean = scale * 1e-3 * (r.f64() - 0.5);
        if positive {
            min = scale * 1e-6 * r.f64();
            mean = scale * (0.5 + r.f64());
        }
        let mut l2 = l2;
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

        if perturb {
            l2 *= PERTURB_FACTOR;
            if let Some(h) = self.out_hashes.iter_mut().find(|h| h.is_finite()) {
                *h *= PERTURB_FACTOR;
            } else if let Some(h) = self.in_hashes.iter_mut().find(|h| h.is_finite()) {
                *h *= PERTURB_FACTOR;
            }
        }

        // Text.
        let op = &self.prog.ops[idx];
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
            lf::stat_line(out, Field::L2Norm, l2, Precision::PRINTED);
            lf::stat_line(out, Field::Min, min, Precision::PRINTED);
            lf::stat_line(out, Field::Max, max, Precision::PRINTED);
            lf::stat_line(out, Field::Mean, mean, Precision::PRINTED);
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

fn write_key(out: &mut Vec<u8>, module: &[u8], seq: u64, name: &str) {
    out.extend_from_slice(module);
    out.extend_from_slice(b"/op_");
    push_u64(out, seq);
    out.push(b'_');
    out.extend_from_slice(name.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::{match_tables, MatchOptions, Status};
    use crate::parser::parse_bytes;

    fn log(opts: &GenOptions, rank: u32, run: u8) -> Vec<u8> {
        let mut v = Vec::new();
        let s = write_log(&mut v, opts, rank, run).unwrap();
        assert_eq!(s.bytes, v.len() as u64);
        assert_eq!(s.ops, opts.ops);
        v
    }

    fn opts(ops: u64, ranks: u32, count: Option<u64>) -> GenOptions {
        GenOptions {
            ops,
            ranks,
            seed: 11,
            perturb: 0.01,
            perturb_count: count,
            step: None,
        }
    }

    #[test]
    fn generated_log_parses_cleanly() {
        for (ops, ranks) in [(100_000, 1), (12_000, 4)] {
            let o = opts(ops, ranks, None);
            let bytes = log(&o, 0, 1);
            let avg = bytes.len() as f64 / o.ops as f64;
            assert!((250.0..400.0).contains(&avg), "{avg} bytes per block");
            let text = std::str::from_utf8(&bytes).unwrap();
            for needle in [
                "[tok_embeddings/op_",
                "[layers.31.feed_forward.w1/op_",
                "/op_0__scaled_dot_product_flash_attention_for_cpu]",
                "_fused_adamw_]\n  Input hashes: ",
                "  Phase: backward\n",
                "  Input producers: ;\n",
                "-0.000000e+00",
                "add_]\n  Output hash: ",
            ] {
                assert!(text.contains(needle), "{needle}");
            }
            if ranks == 1 {
                assert!(text.contains(": inf\n"));
                assert!(text.contains(": -inf\n"));
            } else {
                assert!(text.contains("_allgather_base_]"));
                assert!(text.contains("  Mean: nan\n"));
            }
            let t = parse_bytes(bytes, "gen.log");
            assert!(t.warnings().is_empty(), "{:?}", t.warnings());
            assert!(t.warning_counts().is_empty());
            assert_eq!(t.header().total, Some(o.ops));
            assert!(t.header().has_rule);
            assert_eq!(t.len() as u64, o.ops);
            assert!(crate::parser::duplicate_keys(&t).is_empty());
            assert!((0..t.len()).any(|r| t.is_backward(r)));
        }
    }

    #[test]
    fn same_seed_same_bytes() {
        let o = opts(6_000, 2, Some(17));
        assert_eq!(log(&o, 1, 2), log(&o, 1, 2));
        assert_eq!(log(&o, 1, 1), log(&o, 1, 1));
        assert_ne!(log(&o, 0, 1), log(&o, 1, 1));
        let mut other = o.clone();
        other.seed += 1;
        assert_ne!(log(&o, 0, 1), log(&other, 0, 1));
    }

    #[test]
    fn runs_differ_exactly_in_the_perturbed_rows() {
        for (ops, ranks, count) in [(9_000, 1, Some(37)), (5_000, 3, None), (300, 1, Some(300))] {
            let o = opts(ops, ranks, count);
            let want = o.perturbed_rows();
            for rank in 0..ranks {
                let t1 = parse_bytes(log(&o, rank, 1), "run1.log");
                let t2 = parse_bytes(log(&o, rank, 2), "run2.log");
                let m = match_tables(&t1, &t2, &MatchOptions::default());
                let c = m.counts();
                assert_eq!(c.diff, want, "ops {ops} rank {rank}");
                assert_eq!(c.matched, ops - want);
                assert_eq!((c.only1, c.only2, c.truncated), (0, 0, 0));
                assert_eq!(m.strategy_counts().exact, ops);
                assert!(m
                    .rows
                    .iter()
                    .all(|r| r.r1() == r.r2() || r.status != Status::Match));
            }
        }
    }

    #[test]
    fn perturb_fraction_and_stats() {
        let o = GenOptions {
            ops: 1000,
            perturb: 0.0125,
            ..GenOptions::default()
        };
        assert_eq!(o.perturbed_rows(), 13);
        let mut v = Vec::new();
        assert_eq!(write_log(&mut v, &o, 0, 2).unwrap().perturbed, 13);
        assert!(write_log(&mut v, &o, 0, 3).is_err());
        let bad = GenOptions {
            perturb: 1.5,
            ..GenOptions::default()
        };
        assert!(write_log(&mut v, &bad, 0, 1).is_err());
    }

    #[test]
    fn generate_writes_every_rank() {
        let dir = tempfile::tempdir().unwrap();
        let (d1, d2) = (dir.path().join("a"), dir.path().join("b"));
        let o = opts(2_000, 3, Some(5));
        let s = generate(&d1, &d2, &o).unwrap();
        assert_eq!(s.files, 6);
        assert_eq!(s.ops, 6 * 2_000);
        assert_eq!(s.perturbed, 15);
        let mut bytes = 0;
        for r in 0..3 {
            for d in [&d1, &d2] {
                bytes += std::fs::metadata(d.join(log_file_name(r))).unwrap().len();
            }
            let f = std::fs::read(d1.join(log_file_name(r))).unwrap();
            assert_eq!(f, log(&o, r, 1));
        }
        assert_eq!(bytes, s.bytes);
        assert!(generate(&d1, &d1, &o).is_err());
    }
}

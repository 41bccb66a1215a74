//! The op program of one training step of the generated model: its ops
//! in dispatch order (forward, backward, the optimizer step, and the FSDP
//! collectives with more than one rank), each with its module, kind,
//! Shape line, producers and Location, written through
//! [`crate::logformat`] once, when the program is built.

use super::N_LAYERS;
use crate::logformat::{self as lf, Field, Phase};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
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
pub(super) struct Op {
    pub(super) module: u32,
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    /// The whole `  Shape: ...\n` line (empty for hash-only kinds).
    pub(super) shape: Vec<u8>,
    pub(super) n_out: u8,
    /// Producer program index per input; `None` = from outside the captured ops.
    pub(super) inputs: Vec<Option<u32>>,
    /// `  Location: ...\n`, `  Phase: backward\n` when backward, and the empty line.
    pub(super) tail: Vec<u8>,
    /// Typical magnitude (log10) of the values.
    pub(super) mag: f64,
    /// Min is non-negative (pow, rsqrt).
    pub(super) positive: bool,
}

/// The ops of one training step, in dispatch order, and the modules
/// they name.
pub(super) struct Program {
    pub(super) modules: Vec<Vec<u8>>,
    pub(super) ops: Vec<Op>,
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
    pub(super) fn new(fsdp: bool) -> Program {
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

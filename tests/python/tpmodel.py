"""A small language model trained with tensor parallelism as a user writes
it: ``tok`` embedding, 2 pre-norm blocks (``layers.N``) of attention
(``attention.wq/wk/wv`` column-parallel, ``attention.wo`` row-parallel,
heads split across ranks) and a SwiGLU feed-forward (``feed_forward.w1/w3``
column-parallel, ``w2`` row-parallel), RMS norms replicated, ``output``
head; AdamW; CPU with gloo. Run ``python tpmodel.py DUMP`` for TP=1 (one
process, no DTensor) or ``torchrun --nproc_per_node 2 tpmodel.py DUMP`` for
TP=2. ``--eps`` changes the first norm's eps (a change made in one run);
``--perturb-rank R`` scales a replicated norm weight on rank R only;
``--precision full`` captures at full precision; ``--steps N`` trains N
steps and captures the last (``--series``: every one, in ``step_S/``);
``--token-rank R`` changes one token of rank R's last batch; ``--dp N``
shards with FSDP2 over N data-parallel ranks, ``--ddp`` wraps the model in
DistributedDataParallel instead (every rank data parallel); ``--same-batch``
gives every data-parallel rank rank 0's batches (so that FSDP2 over N ranks
trains as one process does). Deterministic for a seed (one thread)."""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, DIM, HEADS, HIDDEN, SEQ, BATCH = 96, 64, 4, 128, 16, 4


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        hd = DIM // HEADS
        # -1 heads: the local head count under tensor parallelism.
        q = self.wq(x).view(b, s, -1, hd).transpose(1, 2)
        k = self.wk(x).view(b, s, -1, hd).transpose(1, 2)
        v = self.wv(x).view(b, s, -1, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, HIDDEN, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = RMSNorm(DIM)
        self.attention = Attention()
        self.ffn_norm = RMSNorm(DIM)
        self.feed_forward = FeedForward()

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(2))
        self.norm = RMSNorm(DIM)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        h = self.tok(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def parallelize(model: Model, mesh, plan: str = "tp") -> None:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    if plan == "sp":
        # TorchTitan's Llama plan: sequence parallelism for the norms and
        # the residual stream, reduce-scatter after the row-parallel layers.
        parallelize_module(
            model,
            mesh,
            {
                "tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
                "norm": SequenceParallel(),
                "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
            },
        )
        for block in model.layers:
            parallelize_module(
                block,
                mesh,
                {
                    "attention_norm": SequenceParallel(),
                    "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                    "attention.wq": ColwiseParallel(),
                    "attention.wk": ColwiseParallel(),
                    "attention.wv": ColwiseParallel(),
                    "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
                    "ffn_norm": SequenceParallel(),
                    "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                    "feed_forward.w1": ColwiseParallel(),
                    "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
                    "feed_forward.w3": ColwiseParallel(),
                },
            )
        return
    for block in model.layers:
        parallelize_module(
            block,
            mesh,
            {
                "attention.wq": ColwiseParallel(),
                "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(),
                "attention.wo": RowwiseParallel(),
                "feed_forward.w1": ColwiseParallel(),
                "feed_forward.w3": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel(),
            },
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--eps", type=float, default=None, help="layers.0.attention_norm eps")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1, help="FSDP2 over this many data-parallel ranks (the rest tensor parallel)")
    ap.add_argument("--mp", action="store_true", help="with --dp: FSDP2's MixedPrecisionPolicy (bfloat16 parameters, float32 reduction)")
    ap.add_argument("--ddp", action="store_true", help="DistributedDataParallel over every rank (no tensor parallelism)")
    ap.add_argument("--fsdp1", action="store_true", help="FSDP1 (FullyShardedDataParallel, use_orig_params=True) over every rank, each layer its own unit")
    ap.add_argument("--plan", choices=("tp", "sp"), default="tp", help="sp: sequence parallelism too (TorchTitan's plan)")
    ap.add_argument("--series", action="store_true", help="capture every step as a step series (step_S/)")
    ap.add_argument("--level", default="ops", choices=("ops", "modules"), help="the capture level")
    ap.add_argument("--perturb-rank", type=int, default=None, help="scale layers.1.ffn_norm.weight (replicated) on this rank only")
    ap.add_argument("--same-batch", action="store_true", help="every data-parallel rank draws rank 0's batches")
    ap.add_argument("--token-rank", type=int, default=None, help="change one token of this rank's batch at the last step")
    ap.add_argument("--edit-rank", type=int, default=None, help="at the last step, this rank alone edits its shard of layers.0.feed_forward.w1.weight in place (an op of one rank)")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Model()
    if args.eps is not None:
        model.layers[0].attention_norm.eps = args.eps
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = 0
    dp_rank = 0
    if world > 1:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        if args.ddp:
            model = nn.parallel.DistributedDataParallel(model)
            dp_rank = rank
        elif args.fsdp1:
            from torch.distributed.fsdp import FullyShardedDataParallel
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy

            policy = ModuleWrapPolicy({type(model.layers[0])})
            model = FullyShardedDataParallel(model, use_orig_params=True, auto_wrap_policy=policy, device_id=torch.device("cpu"))
            dp_rank = rank
        elif args.dp > 1:
            from torch.distributed.fsdp import fully_shard

            tp = world // args.dp
            mesh = init_device_mesh("cpu", (args.dp, tp), mesh_dim_names=("dp", "tp"))
            if tp > 1:
                parallelize(model, mesh["tp"], args.plan)
            kw = {}
            if args.mp:
                from torch.distributed.fsdp import MixedPrecisionPolicy

                kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for block in model.layers:
                fully_shard(block, mesh=mesh["dp"], **kw)
            fully_shard(model, mesh=mesh["dp"], **kw)
            dp_rank = mesh["dp"].get_local_rank()
        else:
            parallelize(model, init_device_mesh("cpu", (world,), mesh_dim_names=("tp",)), args.plan)
    if args.perturb_rank is not None and args.perturb_rank == rank:
        with torch.no_grad():
            getattr(model, "module", model).layers[1].ffn_norm.weight.mul_(1.001)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # Each data-parallel rank its own batches, unless --same-batch.
    g = torch.Generator().manual_seed(1 + (0 if args.same_batch else dp_rank))
    from actdiff_capture import Profiler

    when = {"capture_steps": range(1, args.steps + 1)} if args.series else {"capture_step": args.steps}
    # The model as the code defines it, not DDP's wrapper (whose 'module.'
    # would start every key: docs/capture.md).
    # FSDP1's too: the model inside it (whose forward runs on the views of
    # FSDP1's flat parameters).
    profiled = model.module if args.ddp or args.fsdp1 else model
    with Profiler(profiled, args.dump, rank=rank, precision=args.precision, level=args.level, **when) as prof:
        for step in range(1, args.steps + 1):
            tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
            if step == args.steps and args.token_rank == rank:
                tokens[0, 3] = (tokens[0, 3] + 1) % VOCAB
            if step == args.steps and args.edit_rank == rank:
                w = getattr(model, "module", model).layers[0].feed_forward.w1.weight
                with torch.no_grad():
                    (w.to_local() if hasattr(w, "to_local") else w).add_(0.05)
            logits = model(tokens)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step(loss=loss)
            if rank == 0:
                print(f"loss {loss.item():.7f}")
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()

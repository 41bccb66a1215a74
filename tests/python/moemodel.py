"""A top-2 mixture-of-experts layer as a user writes it: ``emb``, a router
(``moe.router``, softmax, topk), six experts (``moe.experts.N.w1/w2``,
GELU) run in a Python loop that skips an expert no token is routed to,
``head``; AdamW, one thread, CPU. Which experts run depends on the batch,
so a changed token can leave an expert without tokens in one run only:
every later op counter of ``moe`` (and the optimizer's, which skips
parameters without a gradient) shifts."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, DIM, EXPERTS, HIDDEN = 50, 32, 6, 64
TOKENS = (3, 7, 11, 19)


class Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, HIDDEN)
        self.w2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return self.w2(F.gelu(self.w1(x)))


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(DIM, EXPERTS, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(EXPERTS))

    def forward(self, x):
        p = F.softmax(self.router(x), dim=-1)
        topv, topi = p.topk(2, dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = (topi == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            out.index_add_(0, rows, expert(x[rows]) * topv[rows, slot, None])
        return out


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.moe = MoE()
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        x = self.emb(tokens)
        return self.head(x + self.moe(x))


def batch(token2: int | None = None) -> torch.Tensor:
    t = torch.tensor(TOKENS)
    if token2 is not None:
        t[2] = token2
    return t


def experts_used(tokens: torch.Tensor) -> set:
    """The experts the seeded model routes ``tokens`` to."""
    torch.manual_seed(0)
    m = Model()
    with torch.no_grad():
        return set(m.moe.router(m.emb(tokens)).softmax(-1).topk(2, -1).indices.flatten().tolist())


def token_leaving_an_expert_out() -> int:
    """A third token for which the experts used are those of the default
    batch less one (an expert the default batch reaches gets no token)."""
    base = experts_used(batch())
    for t in range(VOCAB):
        used = experts_used(batch(t))
        if used < base and len(used) == len(base) - 1:
            return t
    raise AssertionError("no token leaves exactly one expert out")


def train(dump, token2: int | None = None, **prof) -> None:
    """One captured training step on ``batch(token2)``."""
    from actdiff_capture import Profiler

    torch.manual_seed(0)
    torch.set_num_threads(1)
    m = Model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    tokens = batch(token2)  # made before the step, as a data loader does
    with Profiler(m, dump, capture_step=1, min_numel=0, **prof) as p:
        loss = F.cross_entropy(m(tokens), torch.tensor([1, 2, 3, 4]))
        loss.backward()
        opt.step()
        opt.zero_grad()
        p.step()

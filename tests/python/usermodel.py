"""A model as a new user writes it, unlike the conformance kit's Llama: a
2-block pre-LN transformer whose blocks are ``blocks.N`` (attention ``attn``
with a fused ``qkv`` projection, ``mlp.fc``/``mlp.proj``), token embedding
``tok``, functional dropout (``F.dropout``: ``empty_like(x).bernoulli_(p)``
under the hood) after attention and MLP, a causal mask through
``masked_fill(-inf)``, optionally one ``torch.mm(..., out=buf)`` (a no-grad statistic), trained
with AdamW on CPU. Deterministic for a seed (one thread)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, DIM, HEADS, SEQ, BATCH = 64, 32, 2, 16, 4


class Attention(nn.Module):
    def __init__(self, dropout: float):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.out = nn.Linear(DIM, DIM)
        self.dropout = dropout

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, HEADS, d // HEADS).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // HEADS) ** 0.5
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        return F.dropout(self.out(y), self.dropout, self.training)


class Mlp(nn.Module):
    def __init__(self, dropout: float, out_buffer: bool):
        super().__init__()
        self.fc = nn.Linear(DIM, 4 * DIM)
        self.proj = nn.Linear(4 * DIM, DIM)
        self.dropout = dropout
        self.out_buffer = out_buffer

    def forward(self, x):
        h = F.gelu(self.fc(x))
        y = self.proj(h)
        if self.out_buffer:
            # A monitoring statistic into a preallocated result: mm writes
            # `buf` (fresh `torch.empty` memory) without reading it.
            with torch.no_grad():
                flat = h.detach().reshape(-1, h.shape[-1])
                buf = torch.empty(flat.shape[0], DIM)
                torch.mm(flat, self.proj.weight.detach().t(), out=buf)
                self.preact_norm = buf.norm()
        return F.dropout(y, self.dropout, self.training)


class Block(nn.Module):
    def __init__(self, dropout: float, out_buffer: bool):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.attn = Attention(dropout)
        self.ln2 = nn.LayerNorm(DIM)
        self.mlp = Mlp(dropout, out_buffer)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, dropout: float = 0.1, out_buffer: bool = False, layers: int = 2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block(dropout, out_buffer) for _ in range(layers))
        self.ln_f = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def batches(steps: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g) for _ in range(steps)]


def train(steps, profiler=None, *, dropout=0.1, out_buffer=False, compile=None, seed=0, model_hook=None):
    """Trains ``steps`` AdamW steps; ``profiler(model)`` makes the profiler
    (its ``step()`` is called after each step); ``compile``: a
    ``torch.compile`` backend name, the model compiled before the profiler is
    made. Returns the losses."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = TinyGPT(dropout, out_buffer)
    if model_hook is not None:
        model_hook(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    run = torch.compile(model, backend=compile) if compile else model
    prof = profiler(model) if profiler is not None else None
    losses = []
    for idx in batches(steps):
        logits = run(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if prof is not None:
            prof.step()
    return losses

"""A small Llama-style decoder and a seeded training loop, for the tests and
benches/capture_overhead.py: token embedding, per block RMSNorm, attention
(wq/wk/wv/wo, causal softmax(QK^T)V with explicit matmuls), RMSNorm, SwiGLU
MLP (w1/w2/w3), final norm and output projection; cross-entropy loss."""

from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        h = self.n_heads
        q = self.wq(x).view(b, s, h, d // h).transpose(1, 2)
        k = self.wk(x).view(b, s, h, d // h).transpose(1, 2)
        v = self.wv(x).view(b, s, h, d // h).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
        out = torch.matmul(F.softmax(scores, dim=-1), v)
        return self.wo(out.transpose(1, 2).reshape(b, s, d))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim: int, n_heads: int, hidden: int):
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention(dim, n_heads)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, vocab=256, dim=64, n_layers=3, n_heads=4, hidden=192):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([Block(dim, n_heads, hidden) for _ in range(n_layers)])
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.output(self.norm(h))


def batch(step: int, vocab=256, bsz=2, seq=32):
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, vocab, (bsz, seq + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def train(steps: int, profiler=None, perturb=None, optimizer=True, n_layers=3, dim=64):
    """Trains `steps` steps from seed 0 and returns (model, losses).

    `profiler(model)` makes the profiler whose `step()` is called after each
    training step (the three lines of a real loop: import, construct,
    step). `perturb(model)` runs once after step 1's update, before that
    step's `prof.step()` (so a profiler armed for step 2 does not see it)."""
    torch.manual_seed(0)
    model = Llama(n_layers=n_layers, dim=dim, hidden=3 * dim)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False) if optimizer else None
    prof = profiler(model) if profiler is not None else None
    losses = []
    for step in range(1, steps + 1):
        x, y = batch(step)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        if opt is not None:
            opt.step()
            opt.zero_grad()
        else:
            model.zero_grad()
        losses.append(loss.item())
        if step == 1 and perturb is not None:
            with torch.no_grad():
                perturb(model)
        if prof is not None:
            prof.step()
    return model, losses

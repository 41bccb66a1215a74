"""Where the module level's training thread spends its time, per step
(issue 24): wall time, the training thread's CPU time (`time.thread_time`),
`prof.step()`'s wall time, the time in the module level's hooks, and in
the methods where it waits for its statistics worker
(`ModuleRecorder._backward_done` at backward's end, `wait` (every full
wait, those inside the others included), `before_optimizer_step` (the
optimizer step pre-hook), `check_grads` and `finish` in `prof.step()`),
each the median (and mean) over the steps of the loops, their first steps
left out. Methods an agent lacks (main before branch capfast) are left out.

Usage: python benches/capture_waits.py [--steps N] [--loops K]

The loop is `capture_overhead.py`'s (the recipe-size Llama, AdamW, one
intra-op thread), `level="modules"` on every step at full precision, with
a loop of no profiler before each for the plain step.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import capture_overhead as co  # noqa: E402

import actdiff_capture  # noqa: E402
import actdiff_capture.modules as mm  # noqa: E402

WAITS = collections.Counter()  # name -> seconds, this step


def timed(name: str, f):
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            WAITS[name] += time.perf_counter() - t

    return g


# The waits (an agent without one of these methods, such as an older
# one, is measured without it) and the hooks.
for name in ("wait", "before_optimizer_step", "check_grads", "_backward_done", "finish"):
    if hasattr(mm.ModuleRecorder, name):
        setattr(mm.ModuleRecorder, name, timed(name, getattr(mm.ModuleRecorder, name)))
_output_hook, _grad_hook = mm.ModuleRecorder._output_hook, mm.ModuleRecorder._grad_hook
mm.ModuleRecorder._output_hook = lambda self, fqn: timed("hooks: outputs", _output_hook(self, fqn))
mm.ModuleRecorder._grad_hook = lambda self, fqn, pname: timed("hooks: gradients", _grad_hook(self, fqn, pname))


def loop(capture: bool, steps: int) -> list[dict]:
    torch.manual_seed(0)
    cfg = co.LEVELS_MODEL
    model = co.Llama(**cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    x, y = co.batch(1, vocab=cfg["vocab"], bsz=2, seq=64)
    kw = dict(capture_steps=range(1, steps + 1), level="modules", precision="full")
    prof = actdiff_capture.Profiler(model, tempfile.mkdtemp(), **kw) if capture else None
    out = []
    for _ in range(steps):
        WAITS.clear()
        t0, c0 = time.perf_counter(), time.thread_time()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        s0 = time.perf_counter()
        if prof is not None:
            prof.step(loss=loss)
        end = time.perf_counter()
        row = {"wall": end - t0, "cpu": time.thread_time() - c0, "prof.step": end - s0}
        row.update({k if k.startswith("hooks") else f"in {k}": v for k, v in WAITS.items()})
        out.append(row)
    return out[1:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--loops", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    rows = {"plain": [], "modules": []}
    for _ in range(a.loops):
        rows["plain"] += loop(False, a.steps)
        rows["modules"] += loop(True, a.steps)
    load = os.getloadavg()[0]
    print(f"# torch {torch.__version__}, load average {load:.1f}; ms a step over {a.loops} loops of {a.steps - 1} steps")
    for mode, rs in rows.items():
        keys = sorted({k for r in rs for k in r}, key=lambda k: (k.startswith(("in ", "hooks")), k))
        cells = []
        for k in keys:
            v = [r.get(k, 0.0) * 1e3 for r in rs]
            cells.append(f"{k} {statistics.median(v):.2f} (mean {statistics.mean(v):.2f})")
        print(f"{mode}: " + ", ".join(cells))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Capture overhead of actdiff_capture vs the reference way (Python, one
`.item()` per statistic), on CPU.

    python benches/capture_overhead.py [--quick] [--json FILE] [--tracer-dir DIR]

Needs the extension installed (scripts/capture-ci.sh, or
`pip install --no-build-isolation ./python`). The agent is timed at its
default precision and at `precision="full"` with digests (the target: at
most 25 % more overhead than the default). `--tracer-dir` names a folder
holding TorchTitan's `activation_tracer.py` (not part of this repository):
its DebugModeTracer is then timed on the same steps too.
Three measurements, medians of repeated runs:

1. stats per tensor (float32, 4K / 1M / 16M elements): the reference's
   `_compute_stats` + DebugMode's `norm_hash_fn` (five `.item()` calls) vs
   the agent's `Capture.record` (Rust: fused pass, queued for the writer
   thread) and vs the agent's libtorch path (the ops a GPU gets, read back
   once per record here);
2. per op under a dispatch mode (an `add` of two 4K tensors, 2 input hashes
   + output stats): plain, the agent's Profiler armed, and a minimal Python
   TorchDispatchMode doing the reference's statistics (a lower bound of the
   reference tracer, which also records stack traces through DebugMode);
3. end to end: one training step of the small Llama-style model of
   tests/python/llama.py (and a larger one), without capture, with the
   agent, with the Python reference mode;
4. capture levels over a training loop (issue 24): the step time of the
   testdata-size model (the recipe's shape: dim 256, 4 layers) with no
   profiler, a profiler whose schedule never comes (disarmed steps: should
   cost nothing), `level="modules"` on every step and `level="ops"` on
   every step (and at module level with the statistics on the training
   thread, ACTDIFF_CAPTURE_SYNC=1), each with `precision="full"` and
   digests; median per step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import actdiff_capture

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from llama import Llama, batch  # noqa: E402

# ---------------------------------------------------------------------------
# The reference way (TorchTitan's activation_tracer._compute_stats and
# torch.utils._debug_mode norm_hash_fn): one .item() per statistic.


def ref_hash(t: torch.Tensor) -> float:
    if not (t.is_floating_point() or t.is_complex()):
        t = t.float()
    t = t.contiguous()
    t = t.to(torch.complex128) if t.is_complex() else t.to(torch.float64)
    return t.norm(p=1).item()


def ref_stats(t: torch.Tensor) -> dict:
    t64 = t.to(dtype=torch.float64)
    return {
        "Shape": f"{t.shape}, Dtype: {t.dtype}",
        "L2 norm": f"{t64.norm(p=2).item():.6e}",
        "Min": f"{t.float().min().item():.6e}",
        "Max": f"{t.float().max().item():.6e}",
        "Mean": f"{t64.mean().item():.6e}",
    }


def timeit(fn, reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


# ---------------------------------------------------------------------------
# 1. stats per tensor


def bench_stats(quick: bool) -> list[dict]:
    out = []
    tmp = tempfile.mkdtemp()
    sizes = [(4096, 2000), (1 << 20, 30), (16 << 20, 5)]
    if quick:
        sizes = [(4096, 300), (1 << 20, 5), (16 << 20, 2)]
    for n, reps in sizes:
        t = torch.randn(n)
        ref = timeit(lambda: (ref_stats(t), ref_hash(t)), reps)
        cap = actdiff_capture.Capture(os.path.join(tmp, f"s{n}.log"))
        agent = timeit(lambda: cap.record("m", "op", False, None, 0, [t], [], [], [1]), reps)
        cap.finish()
        capd = actdiff_capture.Capture(os.path.join(tmp, f"d{n}.log"), device_path=True)

        def dev():
            capd.record("m", "op", False, None, 0, [t], [], [], [1])
            capd.flush()

        agent_dev = timeit(dev, reps)
        capd.finish()
        out.append(
            {
                "numel": n,
                "reference_us": ref * 1e6,
                "agent_us": agent * 1e6,
                "agent_libtorch_path_us": agent_dev * 1e6,
                "speedup": ref / agent,
            }
        )
    return out


# ---------------------------------------------------------------------------
# 2. per op in a dispatch mode

_EXCLUDED = actdiff_capture.EXCLUDED_OPS
_FLOATS = {torch.float32, torch.float16, torch.bfloat16}


class RefMode(TorchDispatchMode):
    """The reference tracer's statistics in Python (without DebugMode's stack
    traces and tensor-id bookkeeping: a lower bound of its cost)."""

    def __init__(self, min_numel=1000):
        super().__init__()
        self.min_numel = min_numel
        self.records = []
        self.counters = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name.split("::")[-1]
        if name in _EXCLUDED:
            return func(*args, **kwargs)
        ins = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        in_hashes = [ref_hash(a) for a in ins]
        out = func(*args, **kwargs)
        outs = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
        prim = next((o for o in outs if o.dtype in _FLOATS and o.numel() >= self.min_numel), None)
        if prim is None and not (name.endswith("_") and (ins or outs)):
            return out
        stats = ref_stats(prim) if prim is not None else {}
        seq = self.counters.get(name, 0)
        self.counters[name] = seq + 1
        self.records.append((f"<none>/op_{seq}_{name}", stats, [ref_hash(o) for o in outs], in_hashes))
        return out


class DebugModeReference:
    """The reference tracer's capture configuration on torch's own DebugMode
    (record_nn_module, record_stack_trace, record_ids, norm hashes of inputs
    and outputs, and a record hook computing the stats of captured outputs
    with one .item() per statistic); without its materialization and file
    writing."""

    def __init__(self, min_numel=1000):
        from torch.utils._debug_mode import DebugMode

        self.min_numel = min_numel
        self.dm = DebugMode(
            record_realtensor=True,
            record_faketensor=False,
            record_nn_module=True,
            record_stack_trace=True,
            record_ids=True,
        )
        self.ctxs = [
            self.dm,
            DebugMode.log_tensor_hashes(hash_fn="norm", hash_inputs=True),
            DebugMode.dispatch_hooks(record_hook=self.hook),
        ]

    def hook(self, func, types, args, kwargs, result):
        name = func._schema.name.split("::")[-1]
        if name in _EXCLUDED:
            return {}
        outs = [o for o in torch.utils._pytree.tree_leaves(result) if isinstance(o, torch.Tensor)]
        prim = next((o for o in outs if o.dtype in _FLOATS and o.numel() >= self.min_numel), None)
        rec = {"phase": "backward" if torch._C._current_autograd_node() is not None else "forward"}
        if prim is not None:
            rec["stats"] = ref_stats(prim)
        return rec

    def __enter__(self):
        for c in self.ctxs:
            c.__enter__()
        return self

    def __exit__(self, *exc):
        for c in reversed(self.ctxs):
            c.__exit__(*exc)

    def count(self):
        return sum(1 for op in self.dm.operators if getattr(op, "record", None) and op.record.get("stats"))


class AgentCtx:
    def __init__(self, model, tmp, **kw):
        self.p = actdiff_capture.Profiler(model, tmp, capture_step=1, **kw)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.p.step()  # flush and write the log

    def count(self):
        return self.p.count


class RefCtx(RefMode):
    def count(self):
        return len(self.records)


class TracerCtx:
    """TorchTitan's own DebugModeTracer (from --tracer-dir), materializing
    its captures on exit (the log writing is not timed)."""

    cls = None

    def __init__(self, model):
        self.t = self.cls(model)

    def __enter__(self):
        self.caps = self.t.__enter__()
        return self

    def __exit__(self, *exc):
        self.t.__exit__(*exc)

    def count(self):
        return len(self.caps)


MODES = {
    "agent": lambda model, tmp: AgentCtx(model, tmp),
    "agent_full": lambda model, tmp: AgentCtx(model, tmp, precision="full", digests=True),
    "reference_python": lambda model, tmp: RefCtx(),
    "reference_debugmode": lambda model, tmp: DebugModeReference(),
}


def load_tracer(tracer_dir: str) -> None:
    """Adds TorchTitan's DebugModeTracer from tracer_dir to MODES."""
    import importlib
    import logging
    import types

    sys.path.insert(0, tracer_dir)
    try:
        import torchtitan.tools.logging  # noqa: F401
    except Exception:
        for name in ("torchtitan", "torchtitan.tools"):
            mod = types.ModuleType(name)
            mod.__path__ = []
            sys.modules[name] = mod
        log_mod = types.ModuleType("torchtitan.tools.logging")
        log_mod.logger = logging.getLogger("torchtitan")
        sys.modules["torchtitan.tools.logging"] = log_mod
    TracerCtx.cls = importlib.import_module("activation_tracer").DebugModeTracer
    MODES["reference_tracer"] = lambda model, tmp: TracerCtx(model)


REFERENCES = ("reference_python", "reference_debugmode", "reference_tracer")


def bench_ops(quick: bool) -> dict:
    n_ops = 300 if quick else 2000
    x = torch.randn(4096)
    y = torch.randn(4096)
    model = torch.nn.Identity()
    tmp = tempfile.mkdtemp()

    def loop():
        for _ in range(n_ops):
            torch.add(x, y)

    reps = 3 if quick else 7
    res = {"op": "add(4096, 4096)", "plain_us": timeit(loop, reps) / n_ops * 1e6}
    for name, make in MODES.items():
        ts = []
        for _ in range(reps + 1):
            ctx = make(model, tmp)
            with ctx:
                t0 = time.perf_counter()
                loop()
                ts.append(time.perf_counter() - t0)
        res[f"{name}_us"] = statistics.median(ts[1:]) / n_ops * 1e6
        res[f"{name}_overhead_us"] = res[f"{name}_us"] - res["plain_us"]
    for name in REFERENCES:
        if f"{name}_overhead_us" in res:
            res[f"ratio_{name}"] = res[f"{name}_overhead_us"] / res["agent_overhead_us"]
    res["full_vs_default"] = res["agent_full_overhead_us"] / res["agent_overhead_us"]
    return res


# ---------------------------------------------------------------------------
# 3. end to end


def step_time(cfg: dict, mode: str | None, reps: int) -> tuple[float, int]:
    torch.manual_seed(0)
    model = Llama(**cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    x, y = batch(1, vocab=cfg["vocab"], bsz=2, seq=64)
    tmp = tempfile.mkdtemp()

    def one():
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()

    one()  # warm up
    ts = []
    count = 0
    for _ in range(reps):
        if mode is None:
            t0 = time.perf_counter()
            one()
            ts.append(time.perf_counter() - t0)
            continue
        ctx = MODES[mode](model, tmp)
        t0 = time.perf_counter()
        with ctx:
            one()
        ts.append(time.perf_counter() - t0)
        count = ctx.count()
    return statistics.median(ts), count


def bench_e2e(quick: bool) -> list[dict]:
    cfgs = [
        ("small (tests): dim 64, 3 layers, vocab 256", dict(vocab=256, dim=64, n_layers=3, n_heads=4, hidden=192)),
        ("testdata-size: dim 256, 4 layers, vocab 2000", dict(vocab=2000, dim=256, n_layers=4, n_heads=8, hidden=768)),
    ]
    reps = 3 if quick else 7
    out = []
    for name, cfg in cfgs:
        r = {"model": name}
        r["step_ms"], _ = step_time(cfg, None, reps)
        r["step_ms"] *= 1e3
        for mode in MODES:
            t, n = step_time(cfg, mode, reps)
            r[f"{mode}_ms"] = t * 1e3
            r[f"{mode}_overhead_ms"] = t * 1e3 - r["step_ms"]
            r[f"{mode}_ops"] = n
        for mode in REFERENCES:
            if f"{mode}_overhead_ms" in r:
                r[f"ratio_{mode}"] = r[f"{mode}_overhead_ms"] / r["agent_overhead_ms"]
        r["full_vs_default"] = r["agent_full_overhead_ms"] / r["agent_overhead_ms"]
        out.append(r)
    return out


# ---------------------------------------------------------------------------
# 4. capture levels over a loop of steps


def loop_step_time(cfg: dict, prof_kw: dict | None, steps: int) -> float:
    """Median step time (s) of a loop of `steps` steps (the first left out)
    with a Profiler made from `prof_kw` (None: no profiler; the key `sync`
    sets ACTDIFF_CAPTURE_SYNC: the module level's statistics on the
    training thread)."""
    prof_kw = None if prof_kw is None else dict(prof_kw)
    if prof_kw is not None and prof_kw.pop("sync", False):
        os.environ["ACTDIFF_CAPTURE_SYNC"] = "1"
    else:
        os.environ.pop("ACTDIFF_CAPTURE_SYNC", None)
    torch.manual_seed(0)
    model = Llama(**cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    x, y = batch(1, vocab=cfg["vocab"], bsz=2, seq=64)
    tmp = tempfile.mkdtemp()
    prof = None if prof_kw is None else actdiff_capture.Profiler(model, tmp, **prof_kw)
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if prof is not None:
            prof.step(loss=loss)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[1:])


LEVELS_MODEL = dict(vocab=2000, dim=256, n_layers=4, n_heads=8, hidden=768)


def level_modes(steps: int) -> dict:
    """The profilers of section 4 by name (None: no profiler), capturing
    steps 1..`steps` at full precision with digests."""
    every = range(1, steps + 1)
    full = {"precision": "full"}
    return {
        "plain": None,
        "disarmed": dict(capture_steps=[10**9], **full),
        "modules": dict(capture_steps=every, level="modules", **full),
        "modules_sync": dict(capture_steps=every, level="modules", sync=True, **full),
        "ops": dict(capture_steps=every, level="ops", **full),
    }


def bench_levels(quick: bool) -> dict:
    cfg = LEVELS_MODEL
    steps, rounds = (6, 2) if quick else (12, 7)
    runs = level_modes(steps)
    # Rounds interleave the modes, so that a slower minute of a shared box
    # weighs on all of them alike; each figure is the median over rounds.
    times: dict = {name: [] for name in runs}
    for _ in range(rounds):
        for name, kw in runs.items():
            times[name].append(loop_step_time(cfg, kw, steps) * 1e3)
    res = {"model": "testdata-size: dim 256, 4 layers, vocab 2000", "steps": steps, "rounds": rounds}
    res["plain_ms"] = statistics.median(times["plain"])
    res["plain_spread_ms"] = [min(times["plain"]), max(times["plain"])]
    for name in ("disarmed", "modules", "modules_sync", "ops"):
        t = statistics.median(times[name])
        res[f"{name}_ms"] = t
        res[f"{name}_spread_ms"] = [min(times[name]), max(times[name])]
        res[f"{name}_overhead_pct"] = 100.0 * (t - res["plain_ms"]) / res["plain_ms"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke test)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: stable numbers on a shared box)")
    ap.add_argument("--levels-only", action="store_true", help="only section 4, the capture levels over a loop")
    ap.add_argument("--tracer-dir", help="folder with TorchTitan's activation_tracer.py: time its DebugModeTracer too")
    ap.add_argument(
        "--one-loop",
        choices=sorted(level_modes(1)),
        help="only one loop of section 4 in this mode (for a profiler such as `perf record`): prints its median step time",
    )
    ap.add_argument("--steps", type=int, default=60, help="steps of --one-loop (default 60)")
    a = ap.parse_args()
    if a.tracer_dir:
        load_tracer(a.tracer_dir)
    torch.set_num_threads(a.threads)
    info = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
        "device": "cpu (no GPU measured)",
    }
    print(
        f"# torch {info['torch']}, {info['threads']} intra-op threads, {info['cpus']} CPUs, "
        f"load average {info['loadavg'][0]:.1f} / {info['loadavg'][1]:.1f} / {info['loadavg'][2]:.1f}; CPU only"
    )
    res = {"info": info}
    if a.one_loop:
        ms = loop_step_time(LEVELS_MODEL, level_modes(a.steps)[a.one_loop], a.steps) * 1e3
        print(f"{a.one_loop}: {ms:.1f} ms per step (median of {a.steps - 1} steps, the first left out)")
        return
    if a.levels_only:
        print_levels(res, a.quick)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
        return
    res["stats"] = bench_stats(a.quick)
    print("\n## stats of one float32 tensor (us per tensor, median)")
    print("| numel | reference (5 .item()) | agent Capture.record | agent libtorch path | speedup |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for r in res["stats"]:
        print(f"| {r['numel']:,} | {r['reference_us']:.1f} | {r['agent_us']:.1f} | {r['agent_libtorch_path_us']:.1f} | {r['speedup']:.1f}x |")
    res["ops"] = bench_ops(a.quick)
    r = res["ops"]
    refs = [m for m in REFERENCES if m in MODES]
    names = {"reference_python": "reference in Python", "reference_debugmode": "reference on DebugMode",
             "reference_tracer": "TorchTitan's tracer"}  # fmt: skip
    print("\n## per op under a dispatch mode (us per op, median; overhead = minus the plain op)")
    print("| op | plain | agent overhead | agent full+digests overhead | " + " | ".join(f"{names[m]} overhead" for m in refs) + " |")
    print("| --- | ---: | ---: | ---: |" + " ---: |" * len(refs))
    print(
        f"| {r['op']} | {r['plain_us']:.1f} | {r['agent_overhead_us']:.1f} "
        f"| {r['agent_full_overhead_us']:.1f} ({r['full_vs_default']:.2f}x) | "
        + " | ".join(f"{r[m + '_overhead_us']:.1f} ({r['ratio_' + m]:.1f}x)" for m in refs)
        + " |"
    )
    res["e2e"] = bench_e2e(a.quick)
    print("\n## one training step: forward, backward, AdamW (ms, median; the agent's time includes writing the log)")
    print("| model | ops (agent) | step | + agent | + agent full+digests | " + " | ".join(f"+ {names[m]}" for m in refs) + " |")
    print("| --- | ---: | ---: | ---: | ---: |" + " ---: |" * len(refs))
    for r in res["e2e"]:
        print(
            f"| {r['model']} | {r['agent_ops']} | {r['step_ms']:.1f} | {r['agent_overhead_ms']:.1f} "
            f"| {r['agent_full_overhead_ms']:.1f} ({r['full_vs_default']:.2f}x) | "
            + " | ".join(f"{r[m + '_overhead_ms']:.1f} ({r['ratio_' + m]:.1f}x)" for m in refs)
            + " |"
        )
    print_levels(res, a.quick)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


def print_levels(res: dict, quick: bool) -> None:
    res["levels"] = r = bench_levels(quick)
    print(f"\n## capture levels over a loop of {r['steps']} steps ({r['model']}; ms per step, median of {r['rounds']} interleaved loops [min-max]; full precision + digests)")
    print("| no profiler | disarmed schedule | level=modules every step | level=modules, statistics on the training thread | level=ops every step |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    def cell(name):
        lo, hi = r[f"{name}_spread_ms"]
        pct = "" if name == "plain" else f" ({r[name + '_overhead_pct']:+.1f} %)"
        return f"{r[name + '_ms']:.1f}{pct} [{lo:.1f}-{hi:.1f}]"

    print("| " + " | ".join(cell(n) for n in ("plain", "disarmed", "modules", "modules_sync", "ops")) + " |")


if __name__ == "__main__":
    main()

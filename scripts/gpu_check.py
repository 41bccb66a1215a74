#!/usr/bin/env python3
"""Times one training step of the capture recipe's model and counts the
device-to-host synchronisations in it (called by scripts/gpu-check.sh).

    python scripts/gpu_check.py --recipe-dir ../shared/capture --device cuda

For each way of running the step it prints one line: the median wall time of
the captured step (model step + capture + writing the log), the overhead
against the step with no capture, and the synchronisations counted with
torch.cuda.set_sync_debug_mode("warn") (on CUDA only). The ways:

  none       no capture
  default    actdiff_capture.ActivationCaptureProfiler, %.6e (the default)
  full       the same with precision="full" (shortest round-trip floats and
             a content digest per tensor)
  reference  the reference tracer's approach: a TorchDispatchMode that takes
             five statistics of each op's float output with one .item() each
             (L1 hash, L2 norm, min, max, mean)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe-dir", required=True, help="folder holding recipe.py and llama3/model.py")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()

    sys.path.insert(0, os.path.abspath(args.recipe_dir))
    import torch
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode

    import actdiff_capture
    from llama3.model import ModelConfig, batch, build

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=4)
    model = build(cfg, seed=0).to(dev)
    batches = [tuple(t.to(dev) for t in batch(cfg, 2, 64, seed=1000 + s)) for s in (1, 2)]

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    def train_step(step: int) -> None:
        x, y = batches[(step - 1) % 2]
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        model.zero_grad(set_to_none=True)

    class FiveItems(TorchDispatchMode):
        """The reference's way: five .item() calls per captured op."""

        def __init__(self) -> None:
            super().__init__()
            self.ops = 0
            self.values: list[tuple[float, ...]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            t = out[0] if isinstance(out, (tuple, list)) and out else out
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0:
                d = t.detach().double()
                f = t.detach().float()
                self.values.append((
                    d.abs().sum().item(),
                    d.norm().item(),
                    f.min().item(),
                    f.max().item(),
                    d.mean().item(),
                ))
                self.ops += 1
            return out

    def counted(fn) -> tuple[float, int | None]:
        """Runs fn once; returns (seconds, synchronisations or None off CUDA)."""
        sync()
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            fn()
            sync()
            dt = time.perf_counter() - t0
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        n = sum("synchroniz" in str(x.message) for x in w) if cuda else None
        return dt, n

    tmp = tempfile.mkdtemp(prefix="actdiff-gpu-check-")

    def run_none() -> None:
        train_step(2)

    def run_agent(precision: str):
        def run() -> None:
            extra = {} if precision == "default" else {"precision": precision}
            prof = actdiff_capture.ActivationCaptureProfiler(
                enabled=True, model=model, dump_dir=os.path.join(tmp, precision), capture_step=1, **extra
            )
            with prof:
                train_step(2)
                prof.step()  # writes the log of step 1
        return run

    def run_reference() -> None:
        with FiveItems():
            train_step(2)

    ways = [("none", run_none), ("default", run_agent("default")), ("full", run_agent("full")),
            ("reference", run_reference)]
    for _ in range(2):  # warm up every path (allocator, kernels, the writer)
        for _, fn in ways:
            fn()
    results = {}
    for name, fn in ways:
        times, syncs = [], []
        for _ in range(args.trials):
            dt, n = counted(fn)
            times.append(dt)
            syncs.append(n)
        results[name] = (statistics.median(times), min(times), max(times), syncs[-1])
    base = results["none"][0]
    print(f"device {dev} ({torch.cuda.get_device_name(dev) if cuda else 'cpu'}), torch {torch.__version__}, "
          f"{args.trials} trials, median (min-max)")
    for name, (med, lo, hi, n) in results.items():
        over = "" if name == "none" else f"  overhead {1e3 * (med - base):8.1f} ms"
        s = "n/a (CPU)" if n is None else str(n)
        print(f"  {name:9s} {1e3 * med:8.1f} ms ({1e3 * lo:.1f}-{1e3 * hi:.1f}){over}  syncs {s}")
    ref_over = results["reference"][0] - base
    agent_over = results["default"][0] - base
    full_over = results["full"][0] - base
    if agent_over > 0:
        print(f"  reference overhead / agent overhead: {ref_over / agent_over:.1f}x")
        print(f"  full precision + digests vs default: {100 * (full_over / agent_over - 1):+.0f} % overhead")
    return 0


if __name__ == "__main__":
    sys.exit(main())

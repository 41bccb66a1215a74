"""Helpers for the actdiff_capture tests: a naive reader of activation logs,
the shared conformance data (../shared/capture) and the recipe run in a
subprocess."""

from __future__ import annotations

import functools
import os
import pathlib
import subprocess
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEPARATOR = "=" * 80 + "\n\n"


def blocks(path):
    """(header lines, [(key, {label: value})]) of a log, parsed naively."""
    with open(path) as f:
        text = f.read()
    head, sep, body = text.partition(SEPARATOR)
    assert sep, f"{path}: no ==== line"
    out = []
    for chunk in body.split("\n\n"):
        if not chunk.strip():
            continue
        lines = chunk.split("\n")
        assert lines[0].startswith("[") and lines[0].endswith("]"), lines[0]
        fields = {}
        for line in lines[1:]:
            assert line.startswith("  "), line
            label, _, value = line[2:].partition(": ")
            fields[label] = value
        out.append((lines[0][1:-1], fields))
    return head.splitlines(), out


#: Header lines the agent writes at level='ops' beside the reference's: its
#: settings and how many ops min_numel left out (docs/log-format.md).
AGENT_HEADER_LABELS = ("Capture filter: ", "Ops below min numel: ", "RNG state: ")


def reference_header(head):
    """A log's header lines without the agent's additions
    (:data:`AGENT_HEADER_LABELS`): what the reference tracer writes."""
    return [h for h in head if not h.startswith(AGENT_HEADER_LABELS)]


def reference_stats(t: torch.Tensor):
    """(hash, moments) of a tensor as the reference tracer computes them
    (TorchTitan's `_compute_stats` and DebugMode's `norm_hash_fn`): the hash
    is the float64 L1 norm (non-floating tensors through float32 first,
    complex through complex128); moments, for a non-empty floating tensor,
    are (L2 norm, min, max, mean, NaN count, Inf count): L2 norm and mean in
    float64, min and max in float32; None otherwise."""
    h = t if (t.is_floating_point() or t.is_complex()) else t.float()
    h = h.contiguous()
    h = h.to(torch.complex128) if h.is_complex() else h.to(torch.float64)
    l1 = h.norm(p=1).item()
    if not t.is_floating_point() or t.numel() == 0:
        return l1, None
    t64 = t.to(torch.float64)
    return l1, (
        t64.norm(p=2).item(),
        t.float().min().item(),
        t.float().max().item(),
        t64.mean().item(),
        int(t.isnan().sum()),
        int(t.isinf().sum()),
    )


def reference_lines(t: torch.Tensor) -> dict:
    """A floating tensor's value fields as the reference's log prints them:
    {"L2 norm", "Min", "Max", "Mean", "Output hash"} -> "%.6e" text."""
    l1, (l2, mn, mx, mean, _, _) = reference_stats(t)
    return {
        "L2 norm": f"{l2:.6e}",
        "Min": f"{mn:.6e}",
        "Max": f"{mx:.6e}",
        "Mean": f"{mean:.6e}",
        "Output hash": f"{l1:.6e}",
    }


def split_key(key: str):
    """`fqn/op_N_name` -> (fqn, N, name)."""
    fqn, _, rest = key.rpartition("/")
    assert rest.startswith("op_"), key
    n, _, name = rest[3:].partition("_")
    return fqn, int(n), name


def shared_dir() -> pathlib.Path:
    """../shared beside the checkout, or $ACTDIFF_SHARED (as build.rs)."""
    env = os.environ.get("ACTDIFF_SHARED")
    return pathlib.Path(env) if env else ROOT.parent / "shared"


def torch_version() -> str:
    return torch.__version__.split("+")[0]


def capture_data():
    """(recipe.py, reference log folder for the installed torch) or the
    reason they are missing (the tests that need them are reported as
    skipped with it, as the Rust tests are ignored without ../shared)."""
    cap = shared_dir() / "capture"
    recipe = cap / "recipe.py"
    if not recipe.is_file():
        return None, f"../shared is absent: these tests need {recipe} (set ACTDIFF_SHARED to its folder)"
    ref = cap / "ref" / f"torch-{torch_version()}"
    if not ref.is_dir():
        have = sorted(p.name for p in (cap / "ref").iterdir()) if (cap / "ref").is_dir() else []
        return None, f"no reference logs for torch {torch_version()} in {cap / 'ref'} (have: {', '.join(have)})"
    return (recipe, ref), None


def recipe_env() -> dict:
    """The environment of a recipe run (and of the probe that replays it).

    The package these tests import comes first on PYTHONPATH. MKL_CBWR=AVX2
    (unless set already) pins MKL's matmul kernels to their AVX2 branch
    (MKL's Conditional Numerical Reproducibility): on this project's AMD EPYC
    development host it gives the same bits as MKL's default, which match
    the reference logs there, and every x86-64 host with AVX2 can run it, so
    an Intel host with AVX-512 should get those matmul bits too (not
    verified: no such host was at hand).
    PyTorch's own vectorized kernels still follow the host's ISA
    (ATEN_CPU_CAPABILITY): see `linear_probe`."""
    env = dict(os.environ)
    import actdiff_capture

    pkg = os.path.dirname(os.path.dirname(os.path.abspath(actdiff_capture.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg, env.get("PYTHONPATH")) if p)
    env.setdefault("MKL_CBWR", "AVX2")
    return env


def run_recipe(out, mode: str, *extra: str) -> pathlib.Path:
    """Runs ../shared/capture/recipe.py in its own process with
    actdiff_capture's ActivationCaptureProfiler; returns the log's path."""
    (recipe, _), why = capture_data()
    assert why is None, why
    r = subprocess.run(
        [sys.executable, str(recipe), "--mode", mode, "--out", str(out), *extra],
        capture_output=True,
        text=True,
        env=recipe_env(),
        timeout=900,
    )
    assert r.returncode == 0, f"recipe --mode {mode} {' '.join(extra)} failed:\n{r.stdout}\n{r.stderr}"
    log = pathlib.Path(out) / "rank_0_activations.log"
    assert log.is_file(), f"recipe wrote no log: {r.stdout}\n{r.stderr}"
    return log


@functools.cache
def linear_probe() -> dict:
    """{`<Linear FQN>/op_0_mm`: {field: "%.6e" text}}: the value fields of
    every nn.Linear output of the recipe's eager step 2, computed with plain
    torch and no tracer (linear_probe.py, in its own process with
    `recipe_env`): what any tracer must log for those ops on this host."""
    (recipe, _), why = capture_data()
    assert why is None, why
    r = subprocess.run(
        [sys.executable, str(pathlib.Path(__file__).with_name("linear_probe.py")), str(recipe.parent)],
        capture_output=True,
        text=True,
        env=recipe_env(),
        timeout=600,
    )
    assert r.returncode == 0, f"linear_probe.py failed:\n{r.stdout}\n{r.stderr}"
    import json

    return json.loads(r.stdout)


@functools.cache
def _runs_dir() -> pathlib.Path:
    import tempfile

    return pathlib.Path(tempfile.mkdtemp(prefix="actdiff-recipe-"))


@functools.cache
def recipe_log(mode: str, *extra: str, run: int = 0) -> pathlib.Path:
    """run_recipe once per (mode, arguments, run number) in a test session:
    another ``run`` is another process."""
    name = "-".join([mode, *extra, str(run)])
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    return run_recipe(_runs_dir() / name, mode, *extra)

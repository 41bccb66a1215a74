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
    text = open(path).read()
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


def run_recipe(out, mode: str, *extra: str) -> pathlib.Path:
    """Runs ../shared/capture/recipe.py in its own process with
    actdiff_capture's ActivationCaptureProfiler; returns the log's path."""
    (recipe, _), why = capture_data()
    assert why is None, why
    env = dict(os.environ)
    # The recipe imports the very package these tests import.
    import actdiff_capture

    pkg = os.path.dirname(os.path.dirname(os.path.abspath(actdiff_capture.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg, env.get("PYTHONPATH")) if p)
    r = subprocess.run(
        [sys.executable, str(recipe), "--mode", mode, "--out", str(out), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert r.returncode == 0, f"recipe --mode {mode} {' '.join(extra)} failed:\n{r.stdout}\n{r.stderr}"
    log = pathlib.Path(out) / "rank_0_activations.log"
    assert log.is_file(), f"recipe wrote no log: {r.stdout}\n{r.stderr}"
    return log


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

"""Prints docs/capture.md's key-count table: how many of the model's ops each
capture mode logs, and how many carry a module FQN, on ``usermodel.TinyGPT``
(dropout off, AdamW), eager, ``aot_eager`` and inductor, compiled while armed
(``capture_step=1``) and before (``capture_step=2``).

Run in a venv with torch and actdiff_capture installed::

    python tests/python/count_keys.py [OUT_DIR]
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import actdiff_capture  # noqa: E402
from logs import blocks  # noqa: E402
from test_trust import model_rows  # noqa: E402
from usermodel import train  # noqa: E402


def main() -> None:
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
    print("| mode | compiled | blocks | the model's ops | with a module FQN |")
    print("| --- | --- | --- | --- | --- |")
    for backend in (None, "aot_eager", "inductor"):
        for step in (1, 2):
            d = out / f"{backend or 'eager'}_{step}"
            train(step, profiler=lambda m: actdiff_capture.Profiler(m, d, capture_step=step), compile=backend, dropout=0.0)
            _, bl = blocks(d / "rank_0_activations.log")
            rows = model_rows(bl)
            named = sum(1 for k, _ in rows if not k.startswith("<none>/"))
            fwd = sum(1 for _, f in rows if "Phase" not in f)
            when = "–" if backend is None else ("while armed" if step == 1 else "before")
            print(f"| {backend or 'eager'} | {when} (step {step}) | {len(bl)} | {len(rows)} ({fwd}, {len(rows) - fwd}) | {named} |")


if __name__ == "__main__":
    main()

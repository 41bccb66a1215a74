"""Fixtures for the actdiff_capture tests (run by scripts/capture-ci.sh).

Needs the extension installed in the running Python (`maturin develop`) and
an `actdiff` binary: $ACTDIFF_BIN, else target/release/actdiff of this
checkout, else it is built with `cargo build --release --bin actdiff`.
"""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def actdiff_bin() -> str:
    env = os.environ.get("ACTDIFF_BIN")
    if env:
        return env
    path = ROOT / "target" / "release" / "actdiff"
    if not path.exists():
        e = dict(os.environ)
        e.pop("CARGO_TARGET_DIR", None)  # the engine, not the capture build
        subprocess.run(
            ["cargo", "build", "--release", "--bin", "actdiff"], cwd=ROOT, env=e, check=True
        )
    return str(path)

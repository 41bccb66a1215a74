#!/usr/bin/env bash
# Where the module level's overhead goes (issue 24): `perf record` of one
# training loop of benches/capture_overhead.py without a profiler and with
# `level="modules"` on every step, then the CPU samples of each thread and
# shared library, side by side, as ms per step.
#
# Usage: benches/capture_profile.sh [STEPS]     (default 60)
#
# Environment: PYTHON (a python with torch and actdiff_capture installed)
# [python3], OUT (where the perf data goes) [/tmp/actdiff-capture-profile],
# FREQ (samples per second) [1999].
#
# Samples are CPU time, so they do not depend on what else the machine runs
# as much as wall time does. Each figure is 1000 × samples / FREQ / STEPS: the
# loop's start (model, optimizer) is in both columns alike.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
OUT="${OUT:-/tmp/actdiff-capture-profile}"
FREQ="${FREQ:-1999}"
STEPS="${1:-60}"
mkdir -p "$OUT"
command -v perf >/dev/null || { echo "perf is not installed (Debian: linux-perf)" >&2; exit 2; }

for mode in plain modules; do
    perf record -q -F "$FREQ" -o "$OUT/$mode.data" \
        "$PYTHON" "$ROOT/benches/capture_overhead.py" --one-loop "$mode" --steps "$STEPS" >"$OUT/$mode.txt"
    # thread name, then the library (or "copy" for libtorch's copy kernel,
    # the clones of module outputs and parameters), one sample a line
    perf script -i "$OUT/$mode.data" -F comm,ip,sym,dso 2>/dev/null |
        awk '{ dso = $NF; sub(/.*\//, "", dso); sub(/\)$/, "", dso); sub(/^\(/, "", dso)
               thread = ($1 == "python") ? "training" : $1
               what = (index($0, "direct_copy_kernel") > 0) ? "copy (libtorch)" : dso
               print thread "\t" what }' |
        sort | uniq -c | awk -v m="$mode" '{ n = $1; sub(/^ *[0-9]+ /, ""); print m "\t" $0 "\t" n }'
done | awk -F'\t' -v f="$FREQ" -v s="$STEPS" '
    { key = $2 "\t" $3; seen[key] = 1; n[$1, key] = $4 }
    END {
        for (k in seen) {
            p = 1000 * n["plain", k] / f / s; m = 1000 * n["modules", k] / f / s
            if (p < 0.05 && m < 0.05) continue
            split(k, a, "\t")
            printf "| %s | %s | %.2f | %.2f | %+.2f |\n", a[1], a[2], p, m, m - p
        }
    }' | sort -t'|' -k6 -g -r >"$OUT/table.md"
echo "| thread | where | plain (ms a step) | modules (ms a step) | difference |"
echo "| --- | --- | ---: | ---: | ---: |"
cat "$OUT/table.md"
echo
cat "$OUT/plain.txt" "$OUT/modules.txt"

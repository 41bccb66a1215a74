#!/usr/bin/env bash
# End-to-end bench: generate two big runs, then time `wc -l` and
# `actdiff compare` on them (wall seconds, MB/s, peak RSS and peak heap),
# and `--html-rows all` (MB/s of HTML written).
#
# Usage: benches/e2e.sh            (from anywhere; see benches/README.md)
#
# Environment (defaults in brackets):
#   BENCH_DIR   where logs, reports and timings go          [/tmp/actdiff-bench]
#   OPS         ops of the single-rank log (~340 B per op)   [3150000  ≈ 1 GiB]
#   RANKS       ranks of the multi-rank runs                 [8]
#   RANK_OPS    ops per rank of the multi-rank runs          [790000   ≈ 256 MiB]
#   MANY_RANKS  ranks of the many-rank runs                  [4096]
#   MANY_OPS    ops per rank of the many-rank runs           [300]
#   PERTURB     fraction of rows perturbed in run 2          [0.01]
#   SEED        generator seed                               [1]
#   JOBS        `actdiff compare -j` (empty: one per core)   []
#   SETS        which data sets: "single multi many", ...  [single multi many]
#
# Ends with the issue-26 table: per set, actdiff's wall time as a multiple
# of `wc -l` on the same files (targets: single and multi <= 5, many <= 8).
#   REGEN       1: regenerate even if the logs exist         [0]
#   BUILD       0: skip `cargo build --release`              [1]
#   HTML_ALL    1: also time `--html-rows all` on the single set [1]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_DIR="${BENCH_DIR:-/tmp/actdiff-bench}"
OPS="${OPS:-3150000}"
RANKS="${RANKS:-8}"
RANK_OPS="${RANK_OPS:-790000}"
MANY_RANKS="${MANY_RANKS:-4096}"
MANY_OPS="${MANY_OPS:-300}"
PERTURB="${PERTURB:-0.01}"
SEED="${SEED:-1}"
JOBS="${JOBS:-}"
SETS="${SETS:-single multi many}"
REGEN="${REGEN:-0}"
BUILD="${BUILD:-1}"
HTML_ALL="${HTML_ALL:-1}"

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
ACTDIFF="$TARGET_DIR/release/actdiff"
mkdir -p "$BENCH_DIR/logs"

say() { printf '%s\n' "$*" >&2; }

# (a) Build.
if [[ "$BUILD" == 1 ]]; then
    say "== cargo build --release"
    (cd "$ROOT" && cargo build --release --bin actdiff)
fi
[[ -x "$ACTDIFF" ]] || { say "no binary at $ACTDIFF"; exit 2; }

now() { date +%s.%N; }

# run_timed NAME CMD...: runs CMD, sets WALL (s), RSS_KB (peak resident set,
# VmHWM: mapped logs included), ANON_KB (peak anonymous memory, RssAnon:
# heap and stacks, sampled about every 10 ms) and RC.
run_timed() {
    local name="$1"
    shift
    local t0 t1
    t0="$(now)"
    set +e
    "$@" >"$BENCH_DIR/logs/$name.out" 2>"$BENCH_DIR/logs/$name.err" &
    local pid=$! hwm=0 anon=0 k v rest sfd
    # Polled with shell builtins only (no process per sample, which would
    # take CPU from the run on a small machine): an fd that never has data
    # makes `read -t` a sleep.
    exec {sfd}<> <(:)
    while kill -0 "$pid" 2>/dev/null; do
        while read -r k v rest; do
            case "$k" in
                VmHWM:) ((v > hwm)) && hwm="$v" ;;
                RssAnon:) ((v > anon)) && anon="$v" ;;
            esac
        done <"/proc/$pid/status" 2>/dev/null || true
        read -r -t 0.01 -u "$sfd" _ || true
    done
    exec {sfd}<&-
    wait "$pid"
    RC=$?
    t1="$(now)"
    set -e
    RSS_KB="$hwm"
    ANON_KB="$anon"
    WALL="$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')"
}

# gen_set NAME OPS RANKS: two runs under $BENCH_DIR/NAME/{run1,run2}.
gen_set() {
    local name="$1" ops="$2" ranks="$3"
    local dir="$BENCH_DIR/$name" stamp="ops=$2 ranks=$3 seed=$SEED perturb=$PERTURB"
    if [[ "$REGEN" != 1 && -f "$dir/params" && "$(cat "$dir/params")" == "$stamp" ]]; then
        say "== $name: logs exist ($stamp)"
        return
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    local args=("$dir/run1" "$dir/run2" --ops "$ops" --ranks "$ranks" --seed "$SEED" --perturb "$PERTURB")
    say "== $name: generating $ranks rank(s) x $ops ops x 2 runs (actdiff gen)"
    local t0 t1
    t0="$(now)"
    "$ACTDIFF" gen "${args[@]}" >&2
    t1="$(now)"
    say "   generated in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s"
    echo "$stamp" >"$dir/params"
}

# diff_count REPORT_DIR: total `diff` rows in summary.json ("?" if unreadable).
diff_count() {
    python3 - "$1/summary.json" 2>/dev/null <<'EOF' || echo "?"
import json, sys
doc = json.load(open(sys.argv[1]))
def walk(x):
    if isinstance(x, dict):
        if isinstance(x.get("counts"), dict) and "diff" in x["counts"] and "rank" in x:
            yield x["counts"]["diff"]
        for v in x.values():
            yield from walk(v)
    elif isinstance(x, list):
        for v in x:
            yield from walk(v)
print(sum(walk(doc)))
EOF
}

ROWS=()
declare -A WC_WALL=() CMP_WALL=()
row() { ROWS+=("$(printf '%-8s %-18s %10.1f %9.3f %9.1f %9.1f %9.1f  %s' "$@")"); }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

for set in $SETS; do
    case "$set" in
        single) ops="$OPS" ranks=1 ;;
        multi) ops="$RANK_OPS" ranks="$RANKS" ;;
        many) ops="$MANY_OPS" ranks="$MANY_RANKS" ;;
        *) say "unknown set $set"; exit 2 ;;
    esac
    gen_set "$set" "$ops" "$ranks"
    dir="$BENCH_DIR/$set"
    files=("$dir"/run1/rank_*_activations.log "$dir"/run2/rank_*_activations.log)
    bytes="$(cat "${files[@]}" | wc -c)"
    mb="$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1e6}')"
    expect="$(awk -v o="$ops" -v r="$ranks" -v p="$PERTURB" 'BEGIN {printf "%d", r * int(o * p + 0.5)}')"

    # Warm the page cache so both tools read from memory.
    cat "${files[@]}" >/dev/null

    say "== $set: wc -l ($mb MB)"
    run_timed "$set-wc" wc -l "${files[@]}"
    WC_WALL[$set]="$WALL"
    row "$set" "wc -l" "$mb" "$WALL" "$(awk -v b="$bytes" -v w="$WALL" 'BEGIN {printf "%.1f", b / 1e6 / w}')" \
        "$(mib "$RSS_KB")" "$(mib "$ANON_KB")" "exit $RC"

    say "== $set: actdiff compare ($mb MB)"
    # The report folder is kept from one bench run to the next, as a
    # user's re-run into the same -o is: actdiff writes over its result
    # pages. A folder removed in the minutes before costs more on ext4,
    # which skips recently freed inodes (docs/performance.md, "A report
    # written over the previous one").
    report="$BENCH_DIR/report-$set"
    jobs_arg=()
    [[ -n "$JOBS" ]] && jobs_arg=(-j "$JOBS")
    # Not under ACTDIFF_TIMINGS: its six lines a rank (each reading
    # /proc/self/status) cost 0.5-0.8 s of the 4,096-rank compare's wall.
    run_timed "$set-compare" "$ACTDIFF" compare "$dir/run1" "$dir/run2" -o "$report" --quiet "${jobs_arg[@]}"
    CMP_WALL[$set]="$WALL"
    row "$set" "actdiff compare" "$mb" "$WALL" "$(awk -v b="$bytes" -v w="$WALL" 'BEGIN {printf "%.1f", b / 1e6 / w}')" \
        "$(mib "$RSS_KB")" "$(mib "$ANON_KB")" "exit $RC, diff rows $(diff_count "$report") (expected $expect)"
    if [[ "$RC" != 0 && "$RC" != 1 ]]; then
        say "actdiff compare exited $RC:"
        tail -n 20 "$BENCH_DIR/logs/$set-compare.err" >&2
    fi

done

if [[ "$HTML_ALL" == 1 && " $SETS " == *" single "* ]]; then
    # Every row on the pages: MB/s of HTML written, over the whole run
    # and over the report stage alone (ACTDIFF_TIMINGS).
    # Last, since the HTML it writes is flushed to disk for a while after.
    set=single
    dir="$BENCH_DIR/$set"
    report="$BENCH_DIR/report-$set"
    files=("$dir"/run1/rank_*_activations.log "$dir"/run2/rank_*_activations.log)
    bytes="$(cat "${files[@]}" | wc -c)"
    mb="$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1e6}')"
    jobs_arg=()
    [[ -n "$JOBS" ]] && jobs_arg=(-j "$JOBS")
    say "== $set: actdiff compare --html-rows all"
    rm -rf "$report"
    run_timed "$set-html-all" env ACTDIFF_TIMINGS=1 "$ACTDIFF" compare "$dir/run1" "$dir/run2" -o "$report" --quiet --html-rows all "${jobs_arg[@]}"
    html="$(cat "$report"/*.html | wc -c)"
    stage="$(awk '/ report / {s += $5} END {print s + 0}' "$BENCH_DIR/logs/$set-html-all.err")"
    hmb="$(awk -v b="$html" 'BEGIN {printf "%.1f", b / 1e6}')"
    row "$set" "--html-rows all" "$mb" "$WALL" "$(awk -v b="$html" -v w="$WALL" 'BEGIN {printf "%.1f", b / 1e6 / w}')" \
        "$(mib "$RSS_KB")" "$(mib "$ANON_KB")" \
        "exit $RC, HTML $hmb MB; report stage $stage s: $(awk -v b="$html" -v w="$stage" 'BEGIN {printf "%.1f", (w > 0 ? b / 1e6 / w : 0)}') MB/s of HTML"
    rm -rf "$report"
fi

echo
echo "actdiff e2e bench: $(nproc) cores, BENCH_DIR=$BENCH_DIR, timings in $BENCH_DIR/logs"
printf '%-8s %-18s %10s %9s %9s %9s %9s  %s\n' set tool MB wall_s MB/s rss_MB heap_MB notes
for r in "${ROWS[@]}"; do echo "$r"; done

echo
echo "issue 26: actdiff compare as a multiple of wc -l on the same files"
printf '%-8s %9s %9s %7s %7s\n' set wc_s actdiff_s ratio target
for set in $SETS; do
    [[ -n "${CMP_WALL[$set]:-}" ]] || continue
    case "$set" in many) target=8 ;; *) target=5 ;; esac
    awk -v s="$set" -v w="${WC_WALL[$set]}" -v a="${CMP_WALL[$set]}" -v t="$target" \
        'BEGIN {printf "%-8s %9.3f %9.3f %6.1fx %6dx\n", s, w, a, (w > 0 ? a / w : 0), t}'
done

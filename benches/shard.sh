#!/usr/bin/env bash
# Sharding and Parquet benchmarks (issue 11): prints wall seconds and peak
# RSS for
#   (a) merge: `actdiff merge` of the parts of a MERGE_RANKS-rank compare
#       (target: 1,024 ranks' parts merged in at most 2 s);
#   (b) parquet: the 2 x 1 GiB compare without and with `--rows r.parquet`,
#       REPEAT alternating pairs (target: at most +20 %);
#   (c) parts: the 8 x 256 MiB compare as one process, and as PARTS local
#       parts run side by side (-j cores/PARTS each) then merged (target:
#       parts + merge within 10 % of the single process).
# The single and multi logs are e2e.sh's (same gen arguments and folder:
# generated once, reused).
#
# Usage: benches/shard.sh                 (the full sizes: an idle machine, minutes)
#        QUICK=1 benches/shard.sh         (small sizes: checks the script works)
#
# Environment (defaults in brackets; QUICK=1 changes the sizes):
#   BENCH_DIR    logs and reports                          [/tmp/actdiff-bench]
#   OPS          ops of the single-rank log                 [3150000 ≈ 1 GiB; quick 100000]
#   RANKS        ranks of the multi-rank runs               [8]
#   RANK_OPS     ops per rank of the multi-rank runs        [790000 ≈ 256 MiB; quick 20000]
#   MERGE_RANKS  ranks of the merge benchmark               [1024; quick 64]
#   MERGE_OPS    ops per rank there                         [300]
#   MERGE_PARTS  parts of the merge benchmark               [16]
#   PARTS        parts of the local sharded run             [4]
#   REPEAT       runs per measurement (the best is kept)    [3; quick 1]
#   SETS         which of merge parquet parts               [merge parquet parts]
#   BUILD        0: skip `cargo build --release`            [1]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QUICK="${QUICK:-0}"
BENCH_DIR="${BENCH_DIR:-/tmp/actdiff-bench}"
if [[ "$QUICK" == 1 ]]; then
    BENCH_DIR="${BENCH_DIR}-quick"
    OPS="${OPS:-100000}" RANK_OPS="${RANK_OPS:-20000}" MERGE_RANKS="${MERGE_RANKS:-64}" REPEAT="${REPEAT:-1}"
fi
OPS="${OPS:-3150000}"
RANKS="${RANKS:-8}"
RANK_OPS="${RANK_OPS:-790000}"
MERGE_RANKS="${MERGE_RANKS:-1024}"
MERGE_OPS="${MERGE_OPS:-300}"
MERGE_PARTS="${MERGE_PARTS:-16}"
PARTS="${PARTS:-4}"
REPEAT="${REPEAT:-3}"
SETS="${SETS:-merge parquet parts}"
BUILD="${BUILD:-1}"
SEED=1
PERTURB=0.01

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
ACTDIFF="$TARGET_DIR/release/actdiff"
TIME=/usr/bin/time
say() { printf '%s\n' "$*" >&2; }
[[ -x "$TIME" ]] || { say "needs GNU time (/usr/bin/time: apt-get install time)"; exit 2; }
if [[ "$BUILD" == 1 ]]; then
    say "== cargo build --release"
    (cd "$ROOT" && cargo build --release --bin actdiff)
fi
[[ -x "$ACTDIFF" ]] || { say "no binary at $ACTDIFF"; exit 2; }
mkdir -p "$BENCH_DIR/logs"
cores="$(nproc)"

# gen_set NAME OPS RANKS (e2e.sh's layout and stamp: the logs are shared).
gen_set() {
    local name="$1" ops="$2" ranks="$3"
    local dir="$BENCH_DIR/$name" stamp="ops=$2 ranks=$3 seed=$SEED perturb=$PERTURB"
    if [[ -f "$dir/params" && "$(cat "$dir/params")" == "$stamp" ]]; then
        return
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    say "== $name: generating $ranks rank(s) x $ops ops x 2 runs"
    "$ACTDIFF" gen "$dir/run1" "$dir/run2" --ops "$ops" --ranks "$ranks" --seed "$SEED" --perturb "$PERTURB" >&2
    echo "$stamp" >"$dir/params"
    cat "$dir"/run1/* "$dir"/run2/* >/dev/null
}

# timed NAME CMD...: runs CMD under GNU time; sets WALL (s) and RSS_MB
# (peak resident set, mapped logs included). Exit status 0 or 1 is fine.
timed() {
    local name="$1"
    shift
    local rc=0
    "$TIME" -f '%e %M' -o "$BENCH_DIR/logs/$name.time" "$@" \
        >"$BENCH_DIR/logs/$name.out" 2>"$BENCH_DIR/logs/$name.err" || rc=$?
    if ((rc > 1)); then
        say "$name failed (exit $rc): $BENCH_DIR/logs/$name.err"
        tail -5 "$BENCH_DIR/logs/$name.err" >&2
        exit 1
    fi
    read -r WALL kb < <(tail -1 "$BENCH_DIR/logs/$name.time")
    RSS_MB=$((kb / 1024))
}

# best NAME CMD...: REPEAT runs of timed; keeps the fastest (BEST, BEST_RSS).
best() {
    BEST="" BEST_RSS=0
    for _ in $(seq "$REPEAT"); do
        timed "$@"
        if [[ -z "$BEST" ]] || awk -v a="$WALL" -v b="$BEST" 'BEGIN {exit !(a < b)}'; then
            BEST="$WALL"
        fi
        if ((RSS_MB > BEST_RSS)); then BEST_RSS="$RSS_MB"; fi
    done
}

# parts_run DIR RUN1 RUN2 N JOBS: N parts side by side, then the merge.
# Sets PARTS_WALL (first start to last part's end), MERGE_WALL, PARTS_RSS
# (the largest part's peak RSS, MB).
parts_run() {
    local dir="$1" r1="$2" r2="$3" n="$4" jobs="$5" pids=() k t0 t1
    rm -rf "$dir"
    mkdir -p "$dir/logs"
    t0="$(date +%s.%N)"
    for ((k = 0; k < n; k++)); do
        "$TIME" -f '%e %M' -o "$dir/logs/part-$k.time" \
            "$ACTDIFF" compare "$r1" "$r2" --shard "$k/$n" -o "$dir/part-$k" -q -j "$jobs" \
            >"$dir/logs/part-$k.out" 2>"$dir/logs/part-$k.err" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || { say "a part failed: $dir"; exit 1; }; done
    t1="$(date +%s.%N)"
    PARTS_WALL="$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')"
    PARTS_RSS=0
    for ((k = 0; k < n; k++)); do
        local kb
        kb="$(awk 'END {print $2}' "$dir/logs/part-$k.time")"
        if ((kb / 1024 > PARTS_RSS)); then PARTS_RSS=$((kb / 1024)); fi
    done
    timed merge-"$(basename "$dir")" "$ACTDIFF" merge "$dir"/part-* -o "$dir/report"
    MERGE_WALL="$WALL"
}

results=()
for set in $SETS; do
    case "$set" in
    merge)
        name="merge$MERGE_RANKS"
        gen_set "$name" "$MERGE_OPS" "$MERGE_RANKS"
        d="$BENCH_DIR/$name"
        say "== (a) $MERGE_PARTS parts of $MERGE_RANKS ranks, then merge"
        jobs=$(( cores / MERGE_PARTS > 0 ? cores / MERGE_PARTS : 1 ))
        parts_run "$d/sharded" "$d/run1" "$d/run2" "$MERGE_PARTS" "$jobs"
        best "merge-$MERGE_RANKS" "$ACTDIFF" merge "$d/sharded"/part-* -o "$d/merged"
        python3 - "$d/merged/summary.json" "$MERGE_RANKS" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert len(s["ranks"]) == int(sys.argv[2]), "merged report lacks ranks"
PY
        results+=("$(printf '(a) merge %5d ranks (%d parts)     %7.2f s  %6d MB   target <= 2 s' \
            "$MERGE_RANKS" "$MERGE_PARTS" "$BEST" "$BEST_RSS")")
        ;;
    parquet)
        gen_set single "$OPS" 1
        d="$BENCH_DIR/single"
        say "== (b) single-rank compare ($OPS ops per log) without and with --rows .parquet"
        # Alternating (plain, parquet) REPEAT times, the best of each kept:
        # a slower spell of the host then slows both, not one.
        plain="" pq="" plain_rss=0 pq_rss=0 ratios=()
        for _ in $(seq "$REPEAT"); do
            REPEAT=1 best plain "$ACTDIFF" compare "$d/run1" "$d/run2" -o "$d/r-plain" -q
            a="$BEST"
            if [[ -z "$plain" ]] || awk -v a="$a" -v b="$plain" 'BEGIN {exit !(a < b)}'; then plain="$a"; fi
            ((BEST_RSS > plain_rss)) && plain_rss="$BEST_RSS"
            REPEAT=1 best parquet "$ACTDIFF" compare "$d/run1" "$d/run2" -o "$d/r-parquet" -q --rows "$d/rows.parquet"
            if [[ -z "$pq" ]] || awk -v a="$BEST" -v b="$pq" 'BEGIN {exit !(a < b)}'; then pq="$BEST"; fi
            ((BEST_RSS > pq_rss)) && pq_rss="$BEST_RSS"
            ratios+=("$(awk -v a="$a" -v b="$BEST" 'BEGIN {printf "%+.1f", (b / a - 1) * 100}')")
        done
        say "   --rows overhead of each (plain, parquet) pair, %: ${ratios[*]}"
        # On a host whose speed drifts, the median pair is the steadier
        # figure; the best-of-each ratio below compares the two fastest runs.
        median="$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{v[NR] = $1} END {printf "%+.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')"
        say "   median pair: $median %"
        size="$(du -m "$d/rows.parquet" | cut -f1)"
        results+=("$(printf '(b) compare, no --rows                %7.2f s  %6d MB' "$plain" "$plain_rss")")
        results+=("$(printf '(b) compare, --rows rows.parquet       %7.2f s  %6d MB   +%s %% best/best, %s %% median pair (target <= 20 %%), file %s MB' \
            "$pq" "$pq_rss" "$(awk -v a="$plain" -v b="$pq" 'BEGIN {printf "%.1f", (b / a - 1) * 100}')" "$median" "$size")")
        ;;
    parts)
        gen_set multi "$RANK_OPS" "$RANKS"
        d="$BENCH_DIR/multi"
        say "== (c) $RANKS ranks x $RANK_OPS ops: one process, then $PARTS parts + merge"
        best single-multi "$ACTDIFF" compare "$d/run1" "$d/run2" -o "$d/r-single" -q
        single="$BEST" single_rss="$BEST_RSS"
        jobs=$(( cores / PARTS > 0 ? cores / PARTS : 1 ))
        bestp=""
        for _ in $(seq "$REPEAT"); do
            parts_run "$d/sharded" "$d/run1" "$d/run2" "$PARTS" "$jobs"
            tot="$(awk -v a="$PARTS_WALL" -v b="$MERGE_WALL" 'BEGIN {printf "%.2f", a + b}')"
            if [[ -z "$bestp" ]] || awk -v a="$tot" -v b="$bestp" 'BEGIN {exit !(a < b)}'; then
                bestp="$tot" bp="$PARTS_WALL" bm="$MERGE_WALL" brss="$PARTS_RSS"
            fi
        done
        cmp -s "$d/r-single/summary.json" "$d/sharded/report/summary.json" ||
            { say "(c): merged summary.json differs from the single compare's"; exit 1; }
        results+=("$(printf '(c) %d x %d ops, one process           %7.2f s  %6d MB' "$RANKS" "$RANK_OPS" "$single" "$single_rss")")
        results+=("$(printf '(c) %d parts (-j %d each) + merge       %7.2f s  %6d MB   parts %s s + merge %s s: %+.1f %% (target within 10 %%)' \
            "$PARTS" "$jobs" "$bestp" "$brss" "$bp" "$bm" "$(awk -v a="$single" -v b="$bestp" 'BEGIN {printf "%.1f", (b / a - 1) * 100}')")")
        ;;
    *) say "unknown set $set (merge parquet parts)"; exit 2 ;;
    esac
done
echo
echo "what                                       wall    peak RSS (largest process)"
printf '%s\n' "${results[@]}"

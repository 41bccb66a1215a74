#!/usr/bin/env bash
# Instruction-count gate (issue 26, "keep it fast"): runs `actdiff compare`
# under `valgrind --tool=callgrind` on two fixed generated pairs and checks
# the total instruction counts against the figures committed in
# benches/instructions.txt. Instruction counts do not move with the host's
# load (wall time on a shared 2-core VM moves by tens of per cent).
#
# Usage (see benches/README.md):
#   benches/instructions.sh                  measure, compare, fail on growth > 3 %
#   benches/instructions.sh --update         measure, then rewrite the figures file
#   benches/instructions.sh --compare FIGURES MEASURED
#                                            only the comparison of two figure
#                                            files (no valgrind; tests/instructions_gate.rs)
#
# Environment (defaults in brackets):
#   BUILD           0: skip `cargo test --release --no-run --test instructions_gate`
#                   (which builds the release binary the tests use)    [1]
#   RUNS            callgrind runs per case; the median is kept          [1]
#   WORK_DIR        logs, reports and callgrind files                  [/tmp/actdiff-instructions]
#   FIGURES         the committed figures                              [benches/instructions.txt]
#   MAX_GROWTH_PCT  the growth over a committed figure that fails      [3]
#
# Exit status: 0 within the limit (a drop of more than the limit prints a
# note), 1 the gate failed (a count grew too much, a case or its command
# changed, or this host's CPU-feature key differs from the figures'),
# 2 it could not measure (no valgrind, build failed, actdiff failed).
#
# Why the feature key: valgrind shows the program one of a few fixed CPU
# models (baseline, SSE3, SSE4.2, AVX, AVX2; never AVX-512), chosen by what
# the host has, and memchr and glibc's string functions pick their code by
# it. Counts measured on an AVX2 host are not comparable with counts from a
# host without AVX2, so the gate refuses to compare them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MAX_GROWTH_PCT="${MAX_GROWTH_PCT:-3}"

say() { printf '%s\n' "$*" >&2; }

# The cases: name, `actdiff gen` options, `actdiff compare` options. The
# logs are generated into NAME/a and NAME/b and compared from NAME/ with
# relative paths, so the working folder's path never enters the count.
CASES=(large many)
declare -A GEN=(
    [large]="--ops 30000 --ranks 1 --seed 5 --perturb 0.01"
    [many]="--ops 300 --ranks 64 --seed 2 --perturb 0.01"
)
COMPARE_ARGS="-o rep -q -j 1"

case_command() {
    printf 'actdiff gen a b %s; RAYON_NUM_THREADS=1 valgrind --tool=callgrind actdiff compare a b %s' \
        "${GEN[$1]}" "$COMPARE_ARGS"
}

# compare_figures FIGURES MEASURED: the gate's decision, from two files in
# the figures format (see write_figures). Prints the table and the verdict;
# returns 0 (pass) or 1 (fail).
compare_figures() {
    local figures="$1" measured="$2"
    [[ -r "$figures" ]] || { say "instructions: no figures file $figures (run benches/instructions.sh --update and commit it)"; return 1; }
    [[ -r "$measured" ]] || { say "instructions: no measured file $measured"; return 1; }
    awk -v limit="$MAX_GROWTH_PCT" -v figfile="$figures" '
        function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
        function header(line, name) { return trim(substr(line, length(name) + 2)) }
        function grouped(n,    s, neg, out) {
            s = sprintf("%.0f", n); neg = ""; out = ""
            if (substr(s, 1, 1) == "-") { neg = "-"; s = substr(s, 2) }
            while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
            return neg s out
        }
        { file = (FILENAME == figfile) ? 1 : 2 }
        /^[ \t]*(#|$)/ { next }
        {
            if ($1 == "key:")      { key[file] = header($0, "key:"); next }
            if ($1 == "rustc:")    { rustc[file] = header($0, "rustc:"); next }
            if ($1 == "valgrind:") { vg[file] = header($0, "valgrind:"); next }
            name = $1; count = $2
            cmd = $0
            for (i = 1; i <= 4; i++) sub(/^[ \t]*[^ \t]+[ \t]+/, "", cmd)
            cmd = trim(cmd)
            if (count !~ /^[0-9]+$/) { bad = bad "\n  " FILENAME ": unreadable line: " $0; next }
            if (file == 1) { fig[name] = count; figcmd[name] = cmd; figorder[++nf] = name }
            else           { mea[name] = count; meacmd[name] = cmd; meaorder[++nm] = name }
        }
        END {
            fail = 0
            if (bad != "") { print "instructions: FAILED: unreadable lines:" bad; exit 1 }
            if (key[1] == "" || key[2] == "") {
                print "instructions: FAILED: a figures file has no `key:` line (the CPU-feature key the counts were measured on)"
                exit 1
            }
            if (key[1] != key[2]) {
                print "instructions: FAILED: the committed figures were measured on a host with CPU-feature key \"" key[1] "\","
                print "  this host is \"" key[2] "\". Instruction counts depend on the CPU features valgrind shows the"
                print "  program (memchr and glibc pick their code by them), so they cannot be compared here."
                print "  Run the gate on a host of the figures'"'"' kind, or measure on this kind and commit new figures"
                print "  (benches/instructions.sh --update) if this kind is to be CI'"'"'s from now on."
                exit 1
            }
            if (rustc[1] != rustc[2] && rustc[1] != "" && rustc[2] != "")
                note = note "\nnote: the figures were built with \"" rustc[1] "\", this build with \"" rustc[2] "\"; a compiler change moves the counts."
            if (vg[1] != vg[2] && vg[1] != "" && vg[2] != "")
                note = note "\nnote: the figures were measured with " vg[1] ", this run with " vg[2] "."
            printf "%-8s %15s %15s %9s  %s\n", "case", "committed", "measured", "change", "verdict"
            for (i = 1; i <= nm; i++) {
                n = meaorder[i]
                if (!(n in fig)) {
                    printf "%-8s %15s %15s %9s  %s\n", n, "-", grouped(mea[n]), "-", "FAIL: no committed figure"
                    fail = 1; continue
                }
                pct = (mea[n] - fig[n]) * 100.0 / fig[n]
                verdict = "ok"
                if (figcmd[n] != meacmd[n]) {
                    verdict = "FAIL: the case'"'"'s command changed"
                    fail = 1
                    cmdmsg = cmdmsg "\n  " n ": committed: " figcmd[n] "\n  " n ": measured:  " meacmd[n]
                } else if (pct > limit + 0) {
                    verdict = sprintf("FAIL: grew more than %s %%", limit)
                    fail = 1
                } else if (pct < -limit) {
                    verdict = sprintf("dropped more than %s %%: please update the figure", limit)
                    dropped = 1
                }
                printf "%-8s %15s %15s %+8.2f%%  %s\n", n, grouped(fig[n]), grouped(mea[n]), pct, verdict
            }
            for (i = 1; i <= nf; i++) {
                n = figorder[i]
                if (!(n in mea)) {
                    printf "%-8s %15s %15s %9s  %s\n", n, grouped(fig[n]), "-", "-", "FAIL: committed but not measured"
                    fail = 1
                }
            }
            if (note != "") print substr(note, 2)
            if (cmdmsg != "") print "the commands differ:" cmdmsg
            if (fail) {
                print "instructions: FAILED: an instruction count grew by more than " limit " % over the committed figure"
                print "  (or a case changed). If the growth is intended, update the committed figures in the same change:"
                print "    benches/instructions.sh --update   # rewrites " figfile ", then commit it with your change"
                print "  and record the new counts in docs/performance.md."
                exit 1
            }
            if (dropped) {
                print "note: a count dropped by more than " limit " %: please update the committed figure in this change"
                print "  (benches/instructions.sh --update, then commit " figfile "), so that the gate holds the gain."
            }
            print "instructions: ok (every count within +" limit " % of the committed figure)"
        }
    ' "$figures" "$measured"
}

# feature_key: the architecture and the CPU model level valgrind will show
# the program (it hides AVX-512, so an AVX-512 host reads as avx2).
feature_key() {
    local arch flags level
    arch="$(uname -m)"
    if [[ "$arch" != x86_64 ]]; then
        echo "$arch"
        return
    fi
    flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    if [[ "$flags" == *" avx2 "* ]]; then
        level=avx2
    elif [[ "$flags" == *" avx "* ]]; then
        level=avx
    elif [[ "$flags" == *" sse4_2 "* ]]; then
        level=sse4_2
    elif [[ "$flags" == *" pni "* ]]; then
        level=sse3
    else
        level=baseline
    fi
    echo "$arch $level"
}

# build_id: the commit measured, with "+changes" when the files that make the
# binary differ from it.
build_id() {
    local id
    id="$(git -C "$ROOT" rev-parse --short=7 HEAD 2>/dev/null || echo unknown)"
    if [[ "$id" != unknown ]] && ! git -C "$ROOT" diff --quiet HEAD -- src templates build.rs Cargo.toml Cargo.lock 2>/dev/null; then
        id="$id+changes"
    fi
    echo "$id"
}

# write_figures OUT: the figures format, from MEASURED_COUNT[case].
write_figures() {
    local out="$1" date build n
    date="$(date -u +%Y-%m-%dT%H:%MZ)"
    build="$(build_id)"
    {
        echo "# Instruction counts of \`actdiff compare\` under callgrind, checked by"
        echo "# benches/instructions.sh (CI fails on growth of more than 3 %)."
        echo "# Rewrite with \`benches/instructions.sh --update\` (benches/README.md)."
        echo "# Lines: case  instructions  date (UTC)  build  command"
        echo "key: $KEY"
        echo "rustc: $RUSTC_VERSION"
        echo "valgrind: $VALGRIND_VERSION"
        for n in "${CASES[@]}"; do
            echo "$n ${MEASURED_COUNT[$n]} $date $build $(case_command "$n")"
        done
    } >"$out"
}

# --- the comparison alone ---------------------------------------------------
if [[ "${1:-}" == --compare ]]; then
    [[ $# -eq 3 ]] || { say "usage: benches/instructions.sh --compare FIGURES MEASURED"; exit 2; }
    compare_figures "$2" "$3"
    exit $?
fi

UPDATE=0
case "${1:-}" in
    "") ;;
    --update) UPDATE=1 ;;
    *) say "usage: benches/instructions.sh [--update] | --compare FIGURES MEASURED"; exit 2 ;;
esac

BUILD="${BUILD:-1}"
RUNS="${RUNS:-1}"
WORK_DIR="${WORK_DIR:-/tmp/actdiff-instructions}"
FIGURES="${FIGURES:-$ROOT/benches/instructions.txt}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
ACTDIFF="$TARGET_DIR/release/actdiff"

command -v valgrind >/dev/null 2>&1 || {
    say "instructions: valgrind not found (Debian: apt-get install valgrind)"
    exit 2
}
# The binary measured is the one `cargo test --release` (scripts/test.sh, CI's
# test step) builds and leaves at target/release/actdiff: with the
# dev-dependencies in the build, cargo unifies some dependencies' features
# (memchr, libc, getrandom, ...) differently from a plain `cargo build`, so
# the two binaries differ and so do their counts. Building one test target
# gives exactly that binary (a no-op after CI's test step) and puts it back at
# target/release/actdiff if a plain `cargo build --release` replaced it.
if [[ "$BUILD" == 1 ]]; then
    say "== cargo test --release --no-run --test instructions_gate (the release binary the tests use)"
    (cd "$ROOT" && cargo test --release --no-run --test instructions_gate) || exit 2
fi
[[ -x "$ACTDIFF" ]] || { say "instructions: no binary at $ACTDIFF"; exit 2; }
ACTDIFF="$(realpath "$ACTDIFF")"

KEY="$(feature_key)"
RUSTC_VERSION="$(rustc --version 2>/dev/null || echo unknown)"
VALGRIND_VERSION="$(valgrind --version)"
mkdir -p "$WORK_DIR"
declare -A MEASURED_COUNT
t_start=$SECONDS

for n in "${CASES[@]}"; do
    dir="$WORK_DIR/$n"
    # Generated afresh every time (well under a second): logs kept from an
    # older build's generator would not be this build's.
    rm -rf "$dir"
    mkdir -p "$dir"
    say "== $n: actdiff gen a b ${GEN[$n]}"
    # shellcheck disable=SC2086
    (cd "$dir" && "$ACTDIFF" gen a b ${GEN[$n]} >&2) || exit 2
    counts=()
    for ((r = 1; r <= RUNS; r++)); do
        out="$WORK_DIR/callgrind.$n.$r.out"
        rm -f "$out"
        say "== $n: callgrind run $r of $RUNS"
        t0=$SECONDS
        set +e
        # shellcheck disable=SC2086
        (cd "$dir" && RAYON_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$out" \
            "$ACTDIFF" compare a b $COMPARE_ARGS) >"$WORK_DIR/$n.$r.log" 2>&1
        rc=$?
        set -e
        # 1: the perturbed rows differ, as they must.
        if [[ $rc -ne 1 ]]; then
            say "instructions: actdiff compare on $n exited $rc (expected 1: the pair differs); see $WORK_DIR/$n.$r.log"
            exit 2
        fi
        c="$(awk '/^totals: [0-9]+$/ {t = $2} /^summary: [0-9]+$/ {s = $2} END {print (t != "" ? t : s)}' "$out")"
        [[ "$c" =~ ^[0-9]+$ ]] || { say "instructions: no total in $out"; exit 2; }
        say "   $c instructions ($((SECONDS - t0)) s)"
        counts+=("$c")
    done
    sorted=($(printf '%s\n' "${counts[@]}" | sort -n))
    MEASURED_COUNT[$n]="${sorted[$(((RUNS - 1) / 2))]}"
    if ((RUNS > 1)); then
        awk -v n="$n" -v lo="${sorted[0]}" -v hi="${sorted[RUNS - 1]}" -v med="${MEASURED_COUNT[$n]}" -v all="${counts[*]}" \
            'BEGIN {printf "%s: runs %s; median %s, spread (max-min)/median %.3f %%\n", n, all, med, (hi - lo) * 100 / med}'
    fi
done

MEASURED="$WORK_DIR/measured.txt"
write_figures "$MEASURED"
say "== callgrind runs took $((SECONDS - t_start)) s in all; host key \"$KEY\""

if [[ "$UPDATE" == 1 ]]; then
    if [[ -f "$FIGURES" ]]; then
        compare_figures "$FIGURES" "$MEASURED" || true
    fi
    cp "$MEASURED" "$FIGURES"
    echo "instructions: wrote $FIGURES; commit it with the change that moved the counts"
    exit 0
fi
compare_figures "$FIGURES" "$MEASURED"

#!/usr/bin/env bash
# Fills fuzz/corpus/<target>/ with seed inputs: small logs from ../shared/cases
# and testdata/, override files, rules and config files. Run from fuzz/.
# The corpus folders are gitignored; libFuzzer adds what it finds to them.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${ACTDIFF_SHARED_DIR:-../../shared}
mkdir -p corpus/parse_log corpus/parse_chunks corpus/parse_against corpus/overrides corpus/config corpus/outputs corpus/part_manifest
n=0
add_log() {
    n=$((n + 1))
    cp "$1" "corpus/parse_log/seed_$n.log"
    # parse_chunks: two bytes of chunk target (little-endian, plus 1) first.
    for t in '\x00\x00' '\x3f\x00' '\xff\x03'; do
        { printf "$t"; cat "$1"; } > "corpus/parse_chunks/seed_${n}_$(printf "$t" | od -An -tx1 | tr -d ' ')"
    done
}
if [ -d "$shared/cases" ]; then
    while IFS= read -r f; do add_log "$f"; done < <(find "$shared/cases" -name '*.log' -size -40k | sort)
    cp "$shared"/cases/06-counter-drift-overrides/overrides.* corpus/overrides/ 2>/dev/null || true
    cp "$shared"/cases/14-tolerance-rules/rules*.txt corpus/config/ 2>/dev/null || true
fi
add_log ../testdata/bug_layer2/run_A/rank_0_activations.log
add_log ../testdata/multirank_fsdp/run_B/rank_1_activations.log
# outputs: two small logs behind a two-byte cut (the first one's length).
logs=(corpus/parse_log/*.log)
for ((i = 0; i + 1 < ${#logs[@]}; i += 2)); do
    a=${logs[i]} b=${logs[i + 1]}
    len=$(wc -c <"$a")
    ((len < 65536)) || continue
    { printf "\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))"; cat "$a" "$b"; } >"corpus/outputs/seed_$i"
done
# parse_against: chunk target, a two-byte cut (the first log's length),
# then the log and a copy with one value changed (or nothing: the log
# against itself).
for a in corpus/parse_log/*.log; do
    len=$(wc -c <"$a")
    ((len < 65536)) || continue
    cut="\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))"
    { printf "\x3f\x00$cut"; cat "$a"; } >"corpus/parse_against/$(basename "$a" .log)_self"
    { printf "\x3f\x00$cut"; cat "$a"; awk 'NR == 40 { sub(/[0-9]e/, "7e") } 1' "$a"; } \
        >"corpus/parse_against/$(basename "$a" .log)_edited"
done
# part_manifest: a part.json written by `actdiff compare --shard 0/2`.
cp seeds/part.json corpus/part_manifest/
cp seeds/overrides_* corpus/overrides/
cp seeds/*.toml corpus/config/
echo "seeded: $(ls corpus/parse_log | wc -l) logs, $(ls corpus/outputs | wc -l) + $(ls corpus/parse_against | wc -l) log pairs, $(ls corpus/overrides | wc -l) override files, $(ls corpus/config | wc -l) configs, $(ls corpus/part_manifest | wc -l) manifest"

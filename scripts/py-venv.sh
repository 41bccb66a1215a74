#!/usr/bin/env bash
# The small Python venv the sharding tests use: DuckDB (reads --rows Parquet
# files, tests/shard.rs) and PyYAML (parses docs/k8s-indexed-job.yaml).
# Creates it once under ~/.cache (ACTDIFF_PY_VENV overrides) and prints its
# python. Safe to run again: it only installs what is missing.
set -euo pipefail
venv="${ACTDIFF_PY_VENV:-$HOME/.cache/actdiff-py-venv}"
if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c 'import duckdb, yaml' 2>/dev/null; then
    "$venv/bin/pip" install -q duckdb pyyaml >&2
fi
echo "$venv/bin/python"

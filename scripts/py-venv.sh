#!/usr/bin/env bash
# The small Python venv the sharding tests use: DuckDB (reads --rows Parquet
# files, tests/shard.rs) and PyYAML (parses docs/k8s-indexed-job.yaml).
# Creates it once under ~/.cache (ACTDIFF_PY_VENV overrides) and prints its
# python. Safe to run again: it only installs what is missing. Safe to run
# concurrently (tests/shard.rs runs it from tests in parallel): the set-up
# holds an exclusive flock(1) (util-linux) on a lock file beside the venv,
# so a second caller waits for the first to finish, then finds it made.
set -euo pipefail
venv="${ACTDIFF_PY_VENV:-$HOME/.cache/actdiff-py-venv}"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import duckdb, yaml' 2>/dev/null; then
    if [[ ! -x "$venv/bin/pip" ]]; then
        # No pip: a fresh folder, or one an interrupted run left half made
        # (python3 -m venv completes an existing folder in place).
        python3 -m venv "$venv" >&2
    fi
    "$venv/bin/pip" install -q duckdb pyyaml >&2
fi
echo "$venv/bin/python"

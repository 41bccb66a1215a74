#!/usr/bin/env bash
# Stops the daemons scripts/slurm-up.sh started (listed in
# $ACTDIFF_SLURM_DIR/started), by the pids in their pid files, and nothing
# else. Safe to run when nothing was started.
set -uo pipefail
dir="${ACTDIFF_SLURM_DIR:-/tmp/actdiff-slurm}"
list="$dir/started"
[[ -f "$list" ]] || exit 0
# slurmd first, then slurmctld, then munged: the reverse of the start order.
tac "$list" | while read -r name pidfile; do
    pid="$(cat "$pidfile" 2>/dev/null || true)"
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" && echo "slurm-down: stopped $name (pid $pid)" >&2
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
done
rm -f "$list"

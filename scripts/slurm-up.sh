#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests/slurm.rs (and CI):
# installs Debian's slurm-wlm and munge when missing, then starts munged
# (as the munge user), slurmctld and slurmd (as root) unless a cluster
# already answers. Needs root. Recipe: shared/notes/slurm.md.
#
# State, logs and slurm.conf live in $ACTDIFF_SLURM_DIR
# (default /tmp/actdiff-slurm); the conf is installed as
# /etc/slurm/slurm.conf unless another (not written by this script) is there.
# What this script started is listed in $ACTDIFF_SLURM_DIR/started
# (one "name pidfile" per line) for scripts/slurm-down.sh, which stops only
# those. Prints "slurm: started" or "slurm: already running" last.
set -euo pipefail
exec </dev/null
dir="${ACTDIFF_SLURM_DIR:-/tmp/actdiff-slurm}"
say() { printf 'slurm-up: %s\n' "$*" >&2; }

if [[ $(id -u) != 0 ]]; then
    say "needs root (slurmctld and slurmd run as root here)"
    exit 2
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
    ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    say "installing slurm-wlm and munge (Debian packages)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurm-wlm munge >/dev/null
fi

idle() { sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; }
if idle; then
    say "a cluster already answers (sinfo): starting nothing"
    echo "slurm: already running"
    exit 0
fi

mkdir -p "$dir"/{state,spool,log}
: >"$dir/started.new"

# munge: the key, the folders it insists on owning, then munged.
mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
[[ -f /etc/munge/munge.key ]] || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
chmod 700 /etc/munge
chmod 400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    su -s /bin/sh munge -c /usr/sbin/munged
    echo "munged /run/munge/munged.pid" >>"$dir/started.new"
    for _ in $(seq 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.1
    done
fi
munge -n | unmunge >/dev/null || { say "munged does not answer"; exit 1; }

host="$(hostname -s)"
cpus="$(nproc)"
mem_mb="$(awk '/MemTotal/ { printf "%d", $2 / 1024 * 0.8 }' /proc/meminfo)"
conf="$dir/slurm.conf"
cat >"$conf" <<CONF
# actdiff scripts/slurm-up.sh: a one-node test cluster
ClusterName=actdiff
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldLogFile=$dir/log/ctld.log
SlurmdLogFile=$dir/log/d.log
SlurmctldPidFile=$dir/ctld.pid
SlurmdPidFile=$dir/d.pid
ReturnToService=2
MaxArraySize=100001
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
mkdir -p /etc/slurm
if [[ -f /etc/slurm/slurm.conf ]] && ! grep -q '^# actdiff scripts/slurm-up.sh' /etc/slurm/slurm.conf; then
    say "/etc/slurm/slurm.conf exists and is not ours: leaving it; export SLURM_CONF=$conf to use this cluster"
else
    cp "$conf" /etc/slurm/slurm.conf
fi
export SLURM_CONF="$conf"

slurmctld -f "$conf"
echo "slurmctld $dir/ctld.pid" >>"$dir/started.new"
slurmd -f "$conf"
echo "slurmd $dir/d.pid" >>"$dir/started.new"
cat "$dir/started.new" >>"$dir/started"
rm -f "$dir/started.new"

for _ in $(seq 150); do
    idle && break
    sleep 0.2
done
if ! idle; then
    say "the node did not come up in 30 s; logs: $dir/log"
    sinfo >&2 || true
    tail -n 20 "$dir/log/ctld.log" "$dir/log/d.log" >&2 || true
    exit 1
fi
say "node $host idle ($cpus CPUs); conf $conf"
echo "slurm: started"

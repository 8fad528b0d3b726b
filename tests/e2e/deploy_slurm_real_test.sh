#!/usr/bin/env bash
# deploy/slurm/sdpa-doctor.sbatch under a real Slurm: this test starts munged, slurmctld and slurmd
# (Debian's packages; `scripts/setup.sh --test-packages` installs them) on this machine, one node,
# loopback only, every file in a temporary directory, submits the batch script with a real
# `sbatch --wait` and checks the job's exit code, which is the merge's. Exit 77 (skip) when Slurm
# is not installed or cannot start here (it needs root). Every daemon it starts is stopped on exit.
#   deploy_slurm_real_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

for tool in munged slurmctld slurmd sbatch scontrol; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/setup.sh --test-packages installs Slurm and MUNGE)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd runs jobs as their user and needs root to start here"

work=$(mktemp -d /tmp/sdpa-slurm.XXXXXX)
chmod 700 "$work"
pids=()
stop_daemons() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$work"
}
trap stop_daemons EXIT
show_logs() { # on a failure: what the daemons said
  local f
  for f in "$work"/*.log; do echo "--- $f"; tail -n 30 "$f"; done >&2
}

free_port() { # a TCP port on 127.0.0.1 that nothing listens on
  local port
  for _ in $(seq 50); do
    port=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return 0; }
  done
  return 1
}

# --- MUNGE: its own key and socket, nothing of the system's ------------------------------------
mkdir -m 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$work/munge/munge.key"
socket=$work/munge/munge.socket
munged --foreground --force --socket="$socket" --key-file="$work/munge/munge.key" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/munged.log" \
  --seed-file="$work/munge/munged.seed" >"$work/munged.out.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || { show_logs; skip "munged did not start here"; }

# --- Slurm: one node on loopback ------------------------------------------------------------------
host=$(hostname -s)
ctld_port=$(free_port) && node_port=$(free_port) || skip "no free port on 127.0.0.1"
[ "$ctld_port" != "$node_port" ] || node_port=$((ctld_port + 1))
mkdir -p "$work/state" "$work/spool"
cat >"$work/slurm.conf" <<CONF
ClusterName=sdpatest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$node_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=sdpa-node-01 NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# Slurm 24.05 and later can leave cgroups alone: the pgid tracking above needs none, and a
# container or chroot may have none mounted. Older releases autodetect (no "disabled" there).
slurm_version=$(slurmd -V | grep -Eo '[0-9]+\.[0-9]+' | head -1)
if printf '24.05\n%s\n' "$slurm_version" | sort -V -C; then
  echo "CgroupPlugin=disabled" >"$work/cgroup.conf"
fi
export SLURM_CONF=$work/slurm.conf

slurmctld -D -i -f "$work/slurm.conf" >"$work/slurmctld.out.log" 2>&1 &
pids+=($!)
slurmd -D -N sdpa-node-01 -f "$work/slurm.conf" >"$work/slurmd.out.log" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 100); do
  if scontrol show node sdpa-node-01 2>/dev/null | grep -Eq 'State=(IDLE|MIXED)'; then up=1; break; fi
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || break 2; done
  sleep 0.2
done
[ "$up" = 1 ] || { show_logs; skip "slurmctld and slurmd did not bring the node up here"; }
echo "ok: slurmctld :$ctld_port and slurmd :$node_port, node sdpa-node-01 idle"

submit() { # submit NAME [VAR=VALUE...]: sbatch --wait from its own directory; prints the exit code
  local name=$1
  shift
  mkdir -p "$work/$name"
  (cd "$work/$name" && env SDPA_DOCTOR="$build/sdpa-doctor" SDPA_DOCTOR_OUT="$work/$name/out" \
    SDPA_DOCTOR_ARGS="--probe reference --case dtype=fp32,b=1,h=1,l=16,d=16" "$@" \
    timeout 120 sbatch --wait --quiet "$src/deploy/slurm/sdpa-doctor.sbatch" \
    >"$work/$name/sbatch.log" 2>&1)
}
job_output() { cat "$work/$1"/sdpa-doctor-*.out 2>/dev/null; }

submit good
rc=$?
[ "$rc" -eq 0 ] || { job_output good; show_logs; fail "every cell passes: sbatch --wait exit $rc, expected 0"; }
# The node's name came from the real srun (SLURMD_NODENAME), not from hostname.
[ -s "$work/good/out/reports/sdpa-node-01.json" ] || { job_output good; fail "no report for sdpa-node-01"; }
[ -s "$work/good/out/fleet.json" ] && [ -s "$work/good/out/fleet.md" ] || fail "no fleet report"
job_output good | grep -q "sdpa-node-01: check exit code 0" || { job_output good; fail "the job output does not name the node's check"; }
echo "ok: a passing node: job exit code 0, reports/sdpa-node-01.json, fleet.json"

submit mismatch SDPA_DOCTOR_ARGS="--probe reference --case dtype=fp32,b=1,h=1,l=16,d=16 --tolerance fp32=0:0"
rc=$?
[ "$rc" -eq 1 ] || { job_output mismatch; show_logs; fail "a cell mismatches: sbatch --wait exit $rc, expected 1"; }
job_output mismatch | grep -q "merge exit code 1" || { job_output mismatch; fail "the merge's exit code is not the job's"; }
echo "ok: a mismatching node: job exit code 1, the merge's"

submit missing SDPA_DOCTOR_ARGS="--no-such-flag"
rc=$?
[ "$rc" -eq 2 ] || { job_output missing; show_logs; fail "the node wrote no report: sbatch --wait exit $rc, expected 2"; }
echo "ok: a node without a report: job exit code 2"

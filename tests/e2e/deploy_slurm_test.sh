#!/usr/bin/env bash
# Runs deploy/slurm/sdpa-doctor.sbatch on this machine as Slurm would, with a stand-in `srun` on
# PATH that runs the step once per fake node (SLURMD_NODENAME node-01..node-03), and a tiny case
# so each node's check takes a fraction of a second.
#   deploy_slurm_test.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1"
src="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$work/bin"
cat >"$work/bin/srun" <<'SRUN'
#!/usr/bin/env bash
# Stand-in for srun: drop the options, run the command once per node of the fake allocation.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
rc=0
for i in $(seq 1 "${SLURM_JOB_NUM_NODES:-3}"); do
  SLURMD_NODENAME=$(printf 'node-%02d' "$i") SLURM_NODEID=$((i - 1)) "$@" || rc=$?
done
exit "$rc"
SRUN
chmod +x "$work/bin/srun"

# A doctor that misbehaves on chosen nodes: FAKE_MISMATCH_NODE gets zero tolerances (its cells
# mismatch), FAKE_DEAD_NODE exits 4 without a report.
cat >"$work/bin/doctor" <<DOCTOR
#!/usr/bin/env bash
if [ "\$1" = check ] && [ "\${SLURMD_NODENAME:-}" = "\${FAKE_DEAD_NODE:-none}" ]; then exit 4; fi
if [ "\$1" = check ] && [ "\${SLURMD_NODENAME:-}" = "\${FAKE_MISMATCH_NODE:-none}" ]; then
  shift; exec "$build/sdpa-doctor" check --tolerance fp32=0:0 "\$@"
fi
exec "$build/sdpa-doctor" "\$@"
DOCTOR
chmod +x "$work/bin/doctor"

run_job() { # NAME [VAR=VALUE...]: the batch script as sbatch would start it
  local name="$1"
  shift
  (cd "$work" && env PATH="$work/bin:$PATH" SLURM_JOB_ID="$name" SLURM_JOB_NUM_NODES=3 \
    SDPA_DOCTOR="$work/bin/doctor" SDPA_DOCTOR_OUT="$work/$name" \
    SDPA_DOCTOR_ARGS="--probe reference --case dtype=fp32,b=1,h=1,l=16,d=16" "$@" \
    bash "$src/deploy/slurm/sdpa-doctor.sbatch" >"$work/$name.out" 2>&1)
}

run_job good
rc=$?
[ "$rc" -eq 0 ] || { cat "$work/good.out"; fail "all nodes pass: exit $rc, expected 0"; }
for n in node-01 node-02 node-03; do
  [ -s "$work/good/reports/$n.json" ] || fail "no report for $n"
done
# Every fake node has this machine's hostname: the merge tells them apart by report file.
grep -q 'node-02' "$work/good/fleet.json" || fail "fleet.json does not name node-02"
[ -s "$work/good/fleet.md" ] || fail "no fleet.md"
echo "ok: 3 nodes pass, exit 0"

run_job odd FAKE_MISMATCH_NODE=node-03
rc=$?
[ "$rc" -eq 1 ] || { cat "$work/odd.out"; fail "a node mismatches: exit $rc, expected 1"; }
grep -q "on 1 of 3 cpu nodes: .*node-03" "$work/odd.out" || { cat "$work/odd.out"; fail "node-03 not named"; }
echo "ok: node-03 mismatches, named, exit 1"

run_job dead FAKE_DEAD_NODE=node-02
rc=$?
[ "$rc" -eq 2 ] || { cat "$work/dead.out"; fail "a node wrote no report: exit $rc, expected 2"; }
grep -q "only 2 of 3 nodes wrote a report" "$work/dead.out" || { cat "$work/dead.out"; fail "missing report not said"; }
echo "ok: node-02 wrote no report, exit 2"

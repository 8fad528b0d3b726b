#!/usr/bin/env bash
# Benchmark: `sdpa-doctor merge` over a generated fleet of reports. Prints wall time and peak RSS.
#   bench/report/merge_fleet.sh [BUILD_DIR] [NODES] [SCALE]
# NODES reports (default 1000) are made from tests/report/golden/crash_known_issue.json, each
# result repeated SCALE times (default 20: 400 results, about the size of a quick-suite report).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-$root/build}"
nodes="${2:-1000}"
scale="${3:-20}"
doctor="$build/sdpa-doctor"
[ -x "$doctor" ] || { echo "no $doctor; build first" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 "$root/tests/report/make_fleet.py" --template "$root/tests/report/golden/crash_known_issue.json" \
  --out "$work/reports" --nodes "$nodes" --odd 7,12 --scale "$scale"
bytes=$(du -sb "$work/reports" | cut -f1)
echo "fleet: $nodes reports, $((bytes / 1024 / 1024)) MiB of JSON"

set +e
if /usr/bin/time -v true >/dev/null 2>&1; then
  /usr/bin/time -v "$doctor" merge "$work"/reports/*.json --json "$work/fleet.json" \
    >"$work/out.txt" 2>"$work/time.txt"
  rc=$?
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time.txt")
  rss_kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time.txt")
  cpu="$(sed -n 's/.*User time (seconds): //p' "$work/time.txt") s user, $(sed -n 's/.*System time (seconds): //p' "$work/time.txt") s system"
else
  # No GNU time: wall time from date, peak RSS from VmHWM read just before the process exits.
  start=$(date +%s.%N)
  "$doctor" merge "$work"/reports/*.json --json "$work/fleet.json" >"$work/out.txt" 2>/dev/null &
  pid=$!
  rss_kib=0
  while kill -0 "$pid" 2>/dev/null; do
    v=$(sed -n 's/^VmHWM: *\([0-9]*\) kB/\1/p' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$v" ] && rss_kib=$v
    sleep 0.05
  done
  wait "$pid"
  rc=$?
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  cpu="(not measured without GNU time)"
fi
set -e
grep -m1 "crashes on" "$work/out.txt" || true
echo "merge exit code: $rc (1 expected: two nodes fail)"
echo "wall: $wall"
echo "cpu: $cpu"
echo "peak RSS: $((rss_kib / 1024)) MiB"
[ "$rc" -eq 1 ]

#!/usr/bin/env bash
# The default check's wall time of two builds, run alternately so that a machine whose speed drifts
# charges both alike:
#   bench/run/interleaved_default_check.sh BASE_BUILD HEAD_BUILD [RUNS]   (RUNS default 10)
# One warm-up run each (caches, page cache), then RUNS pairs; prints each run and the medians.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
base=${1:?usage: $0 BASE_BUILD HEAD_BUILD [RUNS]}
head=${2:?usage: $0 BASE_BUILD HEAD_BUILD [RUNS]}
runs=${3:-10}
python=${SDPA_DOCTOR_PYTHON:-$here/.venv/bin/python}

one_run() { # BUILD -> "seconds exit-code cells"
  local out start end rc=0
  out=$(mktemp -d)
  start=$(date +%s.%N)
  "$1/sdpa-doctor" check -q --python "$python" --json "$out/r.json" --run-dir "$out/run" \
    >/dev/null 2>&1 || rc=$?
  end=$(date +%s.%N)
  echo "$(python3 -c "print(round($end - $start, 3))") $rc $(python3 -c \
    "import json; print(len(json.load(open('$out/r.json'))['results']))")"
  rm -rf "$out"
}

one_run "$base" >/dev/null
one_run "$head" >/dev/null
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for _ in $(seq 1 "$runs"); do
  echo "base $(one_run "$base")" | tee -a "$log"
  echo "head $(one_run "$head")" | tee -a "$log"
done
python3 - "$log" <<'PY'
import statistics, sys
times = {"base": [], "head": []}
for line in open(sys.argv[1]):
    name, seconds, _, _ = line.split()
    times[name].append(float(seconds))
b, h = statistics.median(times["base"]), statistics.median(times["head"])
print(f"base median {b:.2f} s, head median {h:.2f} s, ratio {h / b:.3f}")
PY

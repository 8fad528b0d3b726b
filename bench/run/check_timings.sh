#!/usr/bin/env bash
# Times the default `sdpa-doctor check` (quick suite, every probe) and its parts, from the
# report's timings and the journal's event times:
#   bench/run/check_timings.sh [BUILD_DIR] [extra check args...]
# Prints: the whole run; enumeration, oracle, probes, report; per worker (probe/variant) its
# start-up (spawn, library/torch import: run event -> first begin), per-case median and total;
# the oracle's share of the run; and the isolation overhead benchmark.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$here/build}
shift || true
python=${SDPA_DOCTOR_PYTHON:-$here/.venv/bin/python}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

start=$(date +%s.%N)
"$build/sdpa-doctor" check -q --json "$out/r.json" --run-dir "$out/run" --python "$python" "$@" \
  >/dev/null || true
end=$(date +%s.%N)

"$python" - "$out/r.json" "$out/run/journal.jsonl" "$start" "$end" <<'PY'
import json, sys, statistics
report = json.load(open(sys.argv[1]))
events = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
wall = (float(sys.argv[4]) - float(sys.argv[3])) * 1000
t = report["timings"]
print(f"whole run (wall)      {wall/1000:7.2f} s   exit code {report['exit_code']}, "
      f"{len(report['results'])} results")
for k in ("enumerate_ms", "oracle_ms", "probes_ms", "report_ms", "total_ms"):
    print(f"  {k[:-3]:<19} {t[k]/1000:7.2f} s")
print(f"  oracle share        {100*t['oracle_ms']/t['total_ms']:6.1f} %")
runs = {}
for e in events:
    key = (e.get("target"), e.get("probe"), e.get("variant"))
    if e["event"] == "run":
        runs[key] = {"start": e["t_ms"], "first": None, "cases": [], "end": e["t_ms"]}
    elif key in runs and e["event"] == "begin" and runs[key]["first"] is None:
        runs[key]["first"] = e["t_ms"]
    elif key in runs and e["event"] == "outcome":
        runs[key]["cases"].append(e.get("elapsed_ms", 0))
        runs[key]["end"] = e["t_ms"]
print(f"\n{'target':<7}{'probe':<10}{'variant':<34}{'start-up':>9}{'case med':>10}{'total':>9}")
for (target, probe, variant), r in runs.items():
    startup = (r["first"] - r["start"]) if r["first"] is not None else float("nan")
    med = statistics.median(r["cases"]) if r["cases"] else float("nan")
    print(f"{target:<7}{probe:<10}{variant:<34}{startup:8.0f}ms{med:8.1f}ms{(r['end']-r['start'])/1000:8.2f}s")
PY
if [ -x "$build/bench/bench_isolation_overhead" ]; then
  echo
  "$build/bench/bench_isolation_overhead" --variant ref-flash --rounds 3
fi

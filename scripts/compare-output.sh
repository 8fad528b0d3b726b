#!/usr/bin/env bash
# usage: scripts/compare-output.sh BINARY OUTDIR
# Runs a fixed set of checks (healthy, planted faults, a bad flag, a failed re-run, --fail-on none)
# and `report` over each journal, and writes their console and JSON with what varies from run to
# run masked (times, temporary paths, dates). Run it with the binaries before and after a change
# that must not change the output, then `diff -r` their *.masked.* files.
set -u
bin=$1; out=$2; mkdir -p "$out"
py=${SDPA_DOCTOR_PYTHON:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
mask() { # times, paths, revision, dates, host-specific ids
  sed -E -e "s#$out#<OUT>#g" -e 's#/tmp/[A-Za-z0-9._/-]+#<TMP>#g' \
         -e 's/started [0-9T:-]+Z/started <D>/' -e 's/\([0-9a-f]{12}\)/(<REV>)/' \
         -e 's/"(started_at|finished_at|git_revision|tool_version)": *"[^"]*"/"\1":"<M>"/g' \
         -e 's/"[a-z_]*_ms": *[0-9.e+-]+/"<MS>":0/g' \
         -e 's/"(median_ms|min_ms|max_ms|tflops|elapsed_ms|wall_ms|duration_ms|time_ms|seconds|pid)": *[0-9.e+-]+/"\1":0/g' \
         -e 's/[0-9]+(\.[0-9]+)? ?(ms|s)\b/<T>/g' \
         -e 's/[0-9]+\.[0-9]+ TFLOP\/s/<TF>/g' -e 's/ +/ /g'
}
run() { # name, env..., -- args...
  local name=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  rm -rf "$out/$name.run"
  env NO_COLOR=1 "${envs[@]}" "$bin" check --python $py --run-dir "$out/$name.run" --json "$out/$name.json" "$@" > "$out/$name.console" 2> "$out/$name.err"
  echo "exit=$?" >> "$out/$name.console"
  python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])), indent=1, sort_keys=True))' "$out/$name.json" > "$out/$name.pretty.json" 2>/dev/null
  mask < "$out/$name.pretty.json" > "$out/$name.masked.json"; mask < "$out/$name.console" > "$out/$name.masked.console"
  "$bin" report "$out/$name.run" --json "$out/$name.report.json" > "$out/$name.report.console" 2>&1; echo "exit=$?" >> "$out/$name.report.console"
  mask < "$out/$name.report.console" > "$out/$name.report.masked.console"
}
run default --
run fault_flash SDPA_DOCTOR_TEST_FAULT='variant=math,when=d>128,action=abort;variant=flash,when=causal,action=perturb' -- --probe python
run badflag -- --repeat 0
run verify_fall SDPA_DOCTOR_TEST_FAULT='variant=verify:keep-defaults,action=abort' -- --probe python --case dtype=fp32,b=1,h=2,l=16,d=32 --case dtype=bf16,b=1,h=2,l=8,d=32,causal
run failon_none SDPA_DOCTOR_TEST_FAULT='variant=math,case=*,action=perturb' -- --probe libtorch --fail-on none --no-shrink

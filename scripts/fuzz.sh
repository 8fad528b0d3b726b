#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang and runs each for a bounded time.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60 s, every target)
# Exit status: 0 when no target found anything, 1 on any crash, leak, timeout or OOM (the
# reproducer lands in $SDPA_DOCTOR_FUZZ_BUILD/findings/<target>/), 2 on a build failure.
# Environment: SDPA_DOCTOR_FUZZ_BUILD (default build-fuzz), CXX (default clang++),
# SDPA_DOCTOR_FUZZ_JOBS (parallel fuzz targets, default 1).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
shift || true
build=${SDPA_DOCTOR_FUZZ_BUILD:-$root/build-fuzz}
jobs=${SDPA_DOCTOR_FUZZ_JOBS:-1}
all_targets=(fuzz_protocol fuzz_case_spec fuzz_case_json fuzz_case_file fuzz_known_issues
             fuzz_kfd_properties fuzz_sysfs_tree fuzz_repro)
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")

declare -A dict=(
  [fuzz_protocol]=protocol.dict [fuzz_case_spec]=case_spec.dict [fuzz_case_json]=case_json.dict
  [fuzz_case_file]=case_json.dict [fuzz_known_issues]=known_issues.dict
  [fuzz_kfd_properties]=kfd_properties.dict [fuzz_sysfs_tree]=kfd_properties.dict [fuzz_repro]=repro.dict)
declare -A max_len=(
  [fuzz_protocol]=8192 [fuzz_case_spec]=512 [fuzz_case_json]=4096 [fuzz_case_file]=8192
  [fuzz_known_issues]=16384 [fuzz_kfd_properties]=8192 [fuzz_sysfs_tree]=8192 [fuzz_repro]=4096)

for t in "${targets[@]}"; do
  [[ -n ${dict[$t]:-} ]] || { echo "fuzz.sh: unknown target '$t' (${all_targets[*]})" >&2; exit 2; }
done

if [[ ! -f $build/build.ninja && ! -f $build/Makefile ]]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  CXX=${CXX:-clang++} cmake -S "$root" -B "$build" "${generator[@]}" -DSDPA_DOCTOR_FUZZ=ON \
    -DSDPA_DOCTOR_WITH_TORCH=OFF \
    -DSDPA_DOCTOR_BUILD_TESTS=OFF -DSDPA_DOCTOR_BUILD_BENCH=OFF >/dev/null || exit 2
fi
cmake --build "$build" --target "${targets[@]}" || exit 2

run_one() {
  local t=$1
  local corpus=$build/corpus/$t findings=$build/findings/$t log=$build/logs/$t.log
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  # The seeds stay read-only in the source tree; what the fuzzer learns accumulates here.
  cp -n "$root/tests/fuzz/corpus/$t/"* "$corpus/" 2>/dev/null || true
  local rc=0
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$build/fuzz/$t" "$corpus" -dict="$root/tests/fuzz/dict/${dict[$t]}" \
      -max_total_time="$seconds" -max_len="${max_len[$t]}" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$findings/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  local done_line execs
  done_line=$(grep -E '^#[0-9]+.*DONE' "$log" | tail -1 || true)
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' || true)
  if [[ $rc -ne 0 ]]; then
    echo "FAIL $t (exit $rc): see $log; reproducer in $findings/"
    grep -E 'ERROR: |runtime error:|SUMMARY:' "$log" | head -5 | sed 's/^/    /'
    return 1
  fi
  echo "ok   $t ${seconds}s execs=${execs:-?} ${done_line:-}"
}

failed=0
if [[ $jobs -le 1 ]]; then
  for t in "${targets[@]}"; do run_one "$t" || failed=1; done
else
  rm -f "$build"/logs/*.failed
  for t in "${targets[@]}"; do
    { run_one "$t" || touch "$build/logs/$t.failed"; } &
    while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n || true; done
  done
  wait
  compgen -G "$build/logs/*.failed" >/dev/null && failed=1
fi
exit $failed

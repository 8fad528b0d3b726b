#!/usr/bin/env bash
# Set up and run the whole test suite: the default build (HIP, ROCm SMI and LibTorch on AUTO) and
# a build with all three optional dependencies OFF, each with every CTest label.
#   scripts/test.sh           both builds, all tests
#   SDPA_DOCTOR_TEST_ASAN=1   also the asan preset (AddressSanitizer + UBSan)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
say() { printf '\033[1mtest:\033[0m %s\n' "$*"; }

# CI builds with warnings as errors; a user's machine does not need to.
preset=default
[ "${CI:-}" = true ] && preset=ci
SDPA_DOCTOR_PRESET=$preset scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)
status=0

say "default build: ctest"
ctest --preset "$preset" -j "$jobs" || status=1

say "minimal build (no HIP, no ROCm SMI, no LibTorch)"
SDPA_DOCTOR_SKIP_PACKAGES=1 SDPA_DOCTOR_PRESET=minimal scripts/setup.sh
ctest --preset minimal -j "$jobs" || status=1

if [ "${SDPA_DOCTOR_TEST_ASAN:-0}" = 1 ]; then
  say "asan build"
  SDPA_DOCTOR_SKIP_PACKAGES=1 SDPA_DOCTOR_PRESET=asan scripts/setup.sh
  ctest --preset asan -j "$jobs" || status=1
fi

[ $status -eq 0 ] && say "all test runs passed" || say "some tests FAILED"
exit $status

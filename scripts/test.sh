#!/usr/bin/env bash
# Set up and run the whole test suite, in four stages, each testing what it is for:
#   1. the default build (LibTorch on AUTO): every test but the `slow` ones (with
#      SDPA_DOCTOR_TEST_SLOW=1, those too: the wheel's source route, which compiles the whole doctor
#      again through pip, and the prebuilt wheel, compiled again with zig for glibc 2.28, then
#      installed into a venv, with pipx and into a bare Debian 13 chroot);
#   2. a build with LibTorch OFF (the product and these tests' binaries only): the tests labelled
#      `libtorch`, whose behaviour differs where the LibTorch plugin is not built in (the libtorch
#      probe's cells, the plugin built on first use, the install and its linkage); every other
#      test runs the same code as in stage 1;
#   3. the asan preset (AddressSanitizer + UBSan + LeakSanitizer on every library and executable
#      of ours; the tests' own code uninstrumented): every test of our own code paths (parsers,
#      runner, scheduler, kernels, readers, and the e2e tests that drive them), but not those
#      labelled `torch`, whose time goes to torch's own start-up and kernels or to the Python probe
#      (code no sanitizer of ours watches), nor `package` (cmake --install and cpack), `setup` or
#      `wheel` (scripts and recipes that no build option changes);
#   4. each libFuzzer target for a bounded time (scripts/fuzz.sh); any finding fails.
# The labels are set where each test is declared (tests/**/CMakeLists.txt, sdpa_test_labels);
# `ctest --print-labels` lists them and `ctest -N -L LABEL` the tests of one.
# The set-up installs, besides the user's packages, those the tests need (`--test-packages`: the
# distro's HIP runtime and ROCm SMI, Slurm, MUNGE). The `setup` tests check scripts and recipes
# that no build option changes (setup.sh on every distro, deploy/slurm under a real Slurm): once.
# Knobs: SDPA_DOCTOR_TEST_ASAN=0 skips stage 3; SDPA_DOCTOR_TEST_FUZZ=SECONDS per target
# (default 30, 0 skips stage 4); SDPA_DOCTOR_TEST_SLOW=1 adds the `slow` tests to stage 1.
# CI=true builds stage 1 with warnings as errors.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
# Where the distro's CMake is too old for the presets, setup.sh keeps PyPI's here.
export PATH="$here/.cache/tools/bin:$PATH"
say() { printf '\033[1mtest:\033[0m %s\n' "$*"; }

preset=default
[ "${CI:-}" = true ] && preset=ci
asan=${SDPA_DOCTOR_TEST_ASAN:-1}
fuzz_seconds=${SDPA_DOCTOR_TEST_FUZZ:-30}
[[ $fuzz_seconds =~ ^[0-9]+$ ]] || { echo "test.sh: SDPA_DOCTOR_TEST_FUZZ must be seconds" >&2; exit 2; }
jobs=$(nproc 2>/dev/null || echo 2)
status=0
failed=()
stage() { # stage NAME COMMAND...: runs it, remembers a failure, goes on
  local name=$1 start=$SECONDS
  shift
  say "$name"
  if "$@"; then say "$name: passed in $(( SECONDS - start )) s"
  else status=1; failed+=("$name"); say "$name: FAILED after $(( SECONDS - start )) s"; fi
}

# One compiler cache for every stage: the minimal build compiles most files exactly as the default
# build did (same flags; paths made relative to the checkout), so it takes them from the cache.
if command -v ccache >/dev/null || [ "${SDPA_DOCTOR_SKIP_PACKAGES:-0}" != 1 ]; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=$here CCACHE_NOHASHDIR=1
fi
werror=()
[ "$preset" = ci ] && werror=(-DSDPA_DOCTOR_WERROR=ON) # the same flags as stage 1, so the cache hits

SDPA_DOCTOR_PRESET=$preset scripts/setup.sh --test-packages
slow=(-LE '^slow$')
[ "${SDPA_DOCTOR_TEST_SLOW:-0}" = 1 ] && slow=()
stage "default build ($preset): ctest" ctest --preset "$preset" -j "$jobs" "${slow[@]}"

build_and_test() { # build_and_test PRESET TARGETS -L|-LE LABEL-REGEX [CMAKE-ARG...]
  local preset=$1 targets=$2 select=$3 labels=$4
  shift 4
  SDPA_DOCTOR_SKIP_PACKAGES=1 SDPA_DOCTOR_PRESET=$preset SDPA_DOCTOR_CMAKE_ARGS="$*" \
    SDPA_DOCTOR_BUILD_TARGETS=$targets scripts/setup.sh &&
    ctest --preset "$preset" -j "$jobs" "$select" "$labels"
}
# The minimal stage builds the product and the test binaries it runs, not every test.
stage "minimal build (no LibTorch): ctest -L libtorch" \
  build_and_test minimal "product tests-libtorch" -L '^libtorch$' "${werror[@]}"
[ "$asan" = 1 ] && stage "asan build (ASan + UBSan + LSan): ctest -LE 'torch|setup|wheel|package'" \
  build_and_test asan all -LE '^(torch|setup|wheel|package)$'
[ "$fuzz_seconds" -gt 0 ] &&
  stage "fuzz: ${fuzz_seconds} s per target" env SDPA_DOCTOR_FUZZ_JOBS="$jobs" scripts/fuzz.sh "$fuzz_seconds"

if [ $status -eq 0 ]; then say "all stages passed"; else say "FAILED: ${failed[*]}"; fi
exit $status

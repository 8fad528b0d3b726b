#!/usr/bin/env bash
# `scripts/setup.sh --dry-run` on every distro it names (an os-release fixture each): it says the
# distro and its packages and steps, exits 0 and changes nothing (run in a copy of scripts/, which
# must stay as it was); bad input is a one-line error with exit 2.
#   setup_dry_run_test.sh SOURCE_DIR
set -uo pipefail
src=$(cd "$1" && pwd)
fixtures=$src/tests/e2e/fixtures/os-release
fail() { echo "FAIL: $*" >&2; exit 1; }

# A checkout with nothing but what setup.sh reads, so anything it would create shows.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/checkout"
cp -r "$src/scripts" "$src/CMakePresets.json" "$work/checkout/"
before=$(cd "$work/checkout" && find . | sort)

# None of the caller's settings (a python, a venv, SDPA_DOCTOR_SKIP_TORCH in a chroot run, a
# compiler): the plans are a fresh machine's.
fresh=(env -u SDPA_DOCTOR_PYTHON -u VIRTUAL_ENV -u SDPA_DOCTOR_SKIP_PACKAGES -u SDPA_DOCTOR_SKIP_TORCH
  -u SDPA_DOCTOR_TORCH_INDEX -u SDPA_DOCTOR_PRESET -u SDPA_DOCTOR_CMAKE_ARGS -u CXX)
dry_run() { # dry_run FIXTURE [ARG...]: output in $out, exit code in $rc
  local fixture=$1
  shift
  out=$("${fresh[@]}" ROCM_PATH=/nonexistent SDPA_DOCTOR_OS_RELEASE="$fixtures/$fixture" \
    "$work/checkout/scripts/setup.sh" --dry-run "$@" 2>&1)
  rc=$?
}
expect() { # expect WHAT PATTERN: the last dry run's output has a line matching PATTERN
  grep -Eq -- "$2" <<<"$out" || { echo "$out"; fail "$1: no line matching '$2'"; }
}
expect_not() {
  ! grep -Eq -- "$2" <<<"$out" || { echo "$out"; fail "$1: a line matches '$2'"; }
}

for fixture in debian-12 debian-13 ubuntu-22.04 ubuntu-24.04; do
  dry_run "$fixture" --test-packages
  [ "$rc" -eq 0 ] || { echo "$out"; fail "$fixture: exit $rc, expected 0"; }
  expect "$fixture" "^setup: distro: .*; package set: "
  expect "$fixture" "^setup: packages: .*build-essential .*ninja-build"
  expect "$fixture" "^setup: packages: .* slurmctld slurmd slurm-client munge"
  expect "$fixture" "^setup: would install torch==2\.13\.0 into \.venv, from pip's configured index"
  expect "$fixture" "^setup: would install pytest==[0-9.]+ into \.venv \(the tests use it\)"
  expect "$fixture" "^setup: would configure: cmake --preset default"
  expect "$fixture" "^setup: would build: cmake --build --preset default"
  echo "ok $fixture: $(grep -m1 '^setup: distro:' <<<"$out")"

  # For the user (no --test-packages): no HIP, no ROCm, no Slurm.
  dry_run "$fixture"
  expect_not "$fixture without --test-packages" "^setup: packages: .*(hip|rocm|amdhip|slurm|munge)"
done

dry_run debian-13 --test-packages
expect "Debian 13" "^setup: packages: .* rocm-device-libs-17 "
expect_not "Debian 13 has no package rocm-device-libs" "^setup: packages: .* rocm-device-libs "
dry_run debian-12 --test-packages
expect "Debian 12" "^setup: packages: .* rocm-device-libs "
# Ubuntu 22.04's CMake is 3.22; the presets need 3.25: PyPI's, into a venv of its own.
dry_run ubuntu-22.04 --test-packages
expect "Ubuntu 22.04" "^setup: would install CMake >= 3\.25 from PyPI into \.cache/tools"
expect_not "Ubuntu 22.04 has no HIP package" "^setup: packages: .*hipcc"
# Its GCC 11 has no _Float16 in C++: g++-12, installed and used.
expect "Ubuntu 22.04" "^setup: packages: .* g\+\+-12( |$)"
expect "Ubuntu 22.04" "^setup: compiler: g\+\+-12 "
dry_run ubuntu-24.04
expect_not "Ubuntu 24.04's CMake is new enough" "PyPI into \.cache/tools"
echo "ok per-distro differences: Debian 13's rocm-device-libs-17, Ubuntu 22.04's CMake from PyPI"

# Where AMD's ROCm is installed the test packages leave out the distro's HIP and ROCm SMI.
mkdir -p "$work/rocm"
out=$("${fresh[@]}" ROCM_PATH="$work/rocm" \
  SDPA_DOCTOR_OS_RELEASE="$fixtures/ubuntu-24.04" "$work/checkout/scripts/setup.sh" --dry-run --test-packages 2>&1)
expect "ROCm in ROCM_PATH" "AMD's ROCm is in .*: no HIP or ROCm SMI package from the distro"
expect_not "ROCm in ROCM_PATH" "^setup: packages: .*(hipcc|amdhip|rocm)"
echo "ok AMD's ROCm present: no HIP or ROCm SMI package from the distro"

# A torch index given is passed to pip, and said.
out=$("${fresh[@]}" SDPA_DOCTOR_TORCH_INDEX=https://example.invalid/whl/cpu \
  SDPA_DOCTOR_OS_RELEASE="$fixtures/debian-13" "$work/checkout/scripts/setup.sh" --dry-run 2>&1)
expect "torch index" "install torch==2\.13\.0 into \.venv, from https://example\.invalid/whl/cpu"
out=$("${fresh[@]}" SDPA_DOCTOR_SKIP_TORCH=1 \
  SDPA_DOCTOR_OS_RELEASE="$fixtures/debian-13" "$work/checkout/scripts/setup.sh" --dry-run 2>&1)
expect "no torch" "^setup: torch: not installed \(SDPA_DOCTOR_SKIP_TORCH=1\)"
expect_not "no torch" "install torch"
echo "ok SDPA_DOCTOR_TORCH_INDEX and SDPA_DOCTOR_SKIP_TORCH"

# A distro it does not know: a clear error naming the way out, exit 1.
dry_run fedora-41
[ "$rc" -eq 1 ] || { echo "$out"; fail "unknown distro: exit $rc, expected 1"; }
expect "unknown distro" "^setup: error: .*not 'Fedora Linux 41.*SDPA_DOCTOR_SKIP_PACKAGES=1"
# Bad input: one line, exit 2.
dry_run debian-12 --no-such-option
[ "$rc" -eq 2 ] || { echo "$out"; fail "unknown option: exit $rc, expected 2"; }
expect "unknown option" "^setup: error: unknown argument '--no-such-option'"
out=$("${fresh[@]}" SDPA_DOCTOR_OS_RELEASE="$work/none" "$work/checkout/scripts/setup.sh" --dry-run 2>&1)
rc=$?
[ "$rc" -eq 2 ] || { echo "$out"; fail "unreadable os-release: exit $rc, expected 2"; }
expect "unreadable os-release" "^setup: error: SDPA_DOCTOR_OS_RELEASE=.* is not a readable file"
echo "ok unknown distro (exit 1), bad option and unreadable os-release (exit 2)"

after=$(cd "$work/checkout" && find . | sort)
[ "$before" = "$after" ] || { diff <(echo "$before") <(echo "$after"); fail "a dry run changed the checkout"; }
echo "ok the dry runs changed nothing"

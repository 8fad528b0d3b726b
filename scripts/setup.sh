#!/usr/bin/env bash
# Set up sdpa-doctor on Debian 12/13 or Ubuntu 22.04/24.04: system packages, a Python with torch,
# configure and build. Idempotent: run it again at any time. Runs as root, or as a user with sudo.
# It installs no HIP or ROCm package: the doctor diagnoses the ROCm you have.
#
#   scripts/setup.sh                  packages + torch + build the doctor and its workers (preset
#                                     "default", into build/; target `product`: no tests)
#   scripts/setup.sh --dry-run        say the distro, the packages and the steps; change nothing
#   scripts/setup.sh --test-packages  also the packages scripts/test.sh needs (the distro's HIP
#                                     runtime and ROCm SMI, Slurm, MUNGE), and build everything:
#                                     the tests and benchmarks too
# Environment:
#   SDPA_DOCTOR_PYTHON=/path/to/python  build against that interpreter's torch (e.g. your ROCm
#                                     torch); nothing is installed into it
#   SDPA_DOCTOR_TORCH_INDEX=URL       the index pip takes torch from (--index-url), e.g. PyTorch's
#                                     CPU or ROCm wheel index; default: pip's own configuration
#                                     (on PyPI, Linux x86_64 torch is the CUDA build, several GB)
#   SDPA_DOCTOR_SKIP_TORCH=1          no torch: the torch probes are not built and their tests skip
#   SDPA_DOCTOR_ALLOW_CUDA_TORCH=1    go on where pip would take PyPI's Linux torch (the CUDA build,
#                                     several GB); without it set-up stops before downloading
#   SDPA_DOCTOR_SKIP_PACKAGES=1       skip apt-get (packages already installed)
#   SDPA_DOCTOR_PRESET=name           another CMake preset (debug, asan, minimal, ci)
#   SDPA_DOCTOR_CMAKE_ARGS="..."      extra configure arguments
#   SDPA_DOCTOR_BUILD_TARGETS="..."   build these targets (e.g. "product tests-libtorch", "all");
#                                     default: product, or all with --test-packages
#   SDPA_DOCTOR_OS_RELEASE=FILE       detect the distro from FILE instead of /etc/os-release
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
# shellcheck source=distro-packages.sh
source "$here/scripts/distro-packages.sh"
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold="" plain=""; fi
say() { printf '%ssetup:%s %s\n' "$bold" "$plain" "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }
usage_error() { printf 'setup: error: %s (see the head of scripts/setup.sh)\n' "$*" >&2; exit 2; }

dry_run=0
test_packages=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    --test-packages) test_packages=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) usage_error "unknown argument '$arg'" ;;
  esac
done
# would DESCRIPTION: in a dry run, say what would be done and return 1 (the caller skips it)
would() { if [ "$dry_run" = 1 ]; then say "would $*"; return 1; fi; say "$*"; }
[ "$dry_run" = 1 ] && say "dry run: nothing is installed, configured or built"

preset=${SDPA_DOCTOR_PRESET:-default}
torch_version=2.13.0
tools=$here/.cache/tools # a venv for PyPI's CMake where the distro's is too old

# --- the distro --------------------------------------------------------------------------------
os_release=${SDPA_DOCTOR_OS_RELEASE:-/etc/os-release}
if [ -n "${SDPA_DOCTOR_OS_RELEASE:-}" ] && [ ! -r "$os_release" ]; then
  usage_error "SDPA_DOCTOR_OS_RELEASE=$os_release is not a readable file"
fi
distro="" distro_name="unknown (no $os_release)"
if [ -r "$os_release" ]; then
  distro=$(distro_key "$os_release")
  distro_name=$(os_release_field "$os_release" PRETTY_NAME)
fi
say "distro: ${distro_name:-unknown}${distro:+; package set: $distro}"
# Another distro's os-release (a dry run of its plan): this machine's packages say nothing of it.
foreign=0; [ -n "${SDPA_DOCTOR_OS_RELEASE:-}" ] && foreign=1

# --- system packages ---------------------------------------------------------------------------
rocm_home=${ROCM_PATH:-/opt/rocm}
packages=()
if [ -n "$distro" ]; then
  mapfile -t packages < <(distro_packages "$distro" build)
  if [ "$test_packages" = 1 ]; then
    while read -r p; do
      # AMD's ROCm already there: the tests use it, not a second HIP from the distro beside it.
      if [ -d "$rocm_home" ] && distro_is_rocm_package "$p"; then continue; fi
      packages+=("$p")
    done < <(distro_packages "$distro" test)
    [ -d "$rocm_home" ] && say "AMD's ROCm is in $rocm_home: no HIP or ROCm SMI package from the distro"
  fi
fi
if [ "${SDPA_DOCTOR_SKIP_PACKAGES:-0}" = 1 ]; then
  say "system packages: skipped (SDPA_DOCTOR_SKIP_PACKAGES=1)"
else
  [ -n "$distro" ] || die "this script knows the packages of Debian 12/13 and Ubuntu 22.04/24.04, not '${distro_name:-this system}' ($os_release): install the equivalents of scripts/distro-packages.sh by hand and set SDPA_DOCTOR_SKIP_PACKAGES=1"
  say "packages: ${packages[*]}"
  missing=()
  if [ "$foreign" = 0 ] && command -v dpkg-query >/dev/null; then
    for p in "${packages[@]}"; do
      [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
    done
    what="${missing[*]}"
  else
    missing=("${packages[@]}")
    what="those of them not installed yet"
  fi
  if [ ${#missing[@]} -eq 0 ]; then
    say "system packages already installed"
  elif would "apt-get update, then apt-get install --no-install-recommends $what"; then
    if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
      die "need root or sudo to install packages (or set SDPA_DOCTOR_SKIP_PACKAGES=1)"; fi
    "${sudo[@]}" apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null || die "apt-get install failed for: ${missing[*]}"
  fi
fi

# --- CMake -------------------------------------------------------------------------------------
version_at_least() { printf '%s\n%s\n' "$2" "$1" | sort -V -C; } # version_at_least HAVE NEED
cmake_version() { "${1:-cmake}" --version 2>/dev/null | sed -n '1s/^cmake version \([0-9.]*\).*/\1/p'; }
have_cmake=""; [ "$foreign" = 1 ] || have_cmake=$(cmake_version)
if [ -x "$tools/bin/cmake" ]; then
  export PATH="$tools/bin:$PATH"
  say "CMake $(cmake_version) from PyPI, in .cache/tools/bin"
elif { [ -n "$distro" ] && distro_cmake_too_old "$distro" && ! version_at_least "${have_cmake:-0}" "$sdpa_min_cmake"; } ||
  { [ -n "$have_cmake" ] && ! version_at_least "$have_cmake" "$sdpa_min_cmake"; }; then
  if would "install CMake >= $sdpa_min_cmake from PyPI into .cache/tools (the distro's is ${have_cmake:-older}; CMakePresets.json needs $sdpa_min_cmake)"; then
    [ -x "$tools/bin/python" ] || python3 -m venv "$tools" || die "python3 -m venv $tools failed"
    "$tools/bin/python" -m pip install -q --disable-pip-version-check "cmake>=$sdpa_min_cmake" \
      || die "pip install cmake failed"
    export PATH="$tools/bin:$PATH"
    say "CMake $(cmake_version) in .cache/tools/bin: scripts/test.sh finds it there; for ctest or cmake by hand, export PATH=\"$tools/bin:\$PATH\""
  fi
fi
# The compiler, where the distro's default is too old (CMake takes CXX at the first configure).
cxx=""; [ -z "$distro" ] || cxx=$(distro_cxx "$distro")
if [ -n "$cxx" ] && [ -z "${CXX:-}" ]; then
  export CXX=$cxx
  say "compiler: $cxx (this distro's default g++ cannot build the doctor)"
fi
if [ "$dry_run" = 0 ]; then
  for tool in cmake ninja "${CXX:-c++}"; do
    command -v "$tool" >/dev/null || die "'$tool' not found after installing packages"
  done
fi

# --- Python and torch --------------------------------------------------------------------------
# A user on a ROCm machine already has the torch that crashes: test that one, install none.
skip_torch=${SDPA_DOCTOR_SKIP_TORCH:-0}
has_torch() { "$1" -c 'import torch' >/dev/null 2>&1; }
describe_torch() { # "torch 2.13.0+cpu (CPU build)", from the interpreter's own torch.version
  "$1" -c 'import torch
v = torch.version
kind = f"ROCm {v.hip}" if getattr(v, "hip", None) else f"CUDA {v.cuda}" if v.cuda else "CPU"
print(f"torch {torch.__version__} ({kind} build)")' 2>/dev/null || echo "no torch"
}
pip_install() { # pip_install PYTHON WHAT-FOR PACKAGE... (quiet; a failure stops the set-up)
  local py=$1 why=$2
  shift 2
  "$py" -m pip install -q --disable-pip-version-check "$@" || die "pip install $* failed ($why)"
}
torch_from=(); [ -n "${SDPA_DOCTOR_TORCH_INDEX:-}" ] && torch_from=(--index-url "$SDPA_DOCTOR_TORCH_INDEX")
# check_torch_pick PYTHON: asks pip which torch it would install (a dry run: metadata only, no
# wheel) and stops the set-up before the download when it is PyPI's Linux torch, the CUDA build of
# several GB (a version with no local tag: PyTorch's own indexes tag theirs +cpu, +rocmX.Y, +cuXYZ),
# unless SDPA_DOCTOR_ALLOW_CUDA_TORCH=1. A pip that cannot say (older than 22.2, an index it cannot
# reach) stops it too: nothing known is not a small download known.
check_torch_pick() {
  local py=$1 report pick="" err
  [ "${SDPA_DOCTOR_ALLOW_CUDA_TORCH:-0}" = 1 ] && return 0
  report=$(mktemp) err=$(mktemp)
  if "$py" -m pip install --dry-run --quiet --disable-pip-version-check --no-deps --ignore-installed \
    --report "$report" "torch==$torch_version" "${torch_from[@]}" >/dev/null 2>"$err"; then
    pick=$("$py" -c 'import json, sys
for item in json.load(open(sys.argv[1])).get("install", []):
    if item.get("metadata", {}).get("name", "").lower() == "torch":
        print(item["metadata"].get("version", "?"), item.get("download_info", {}).get("url", "?"))' \
      "$report" 2>/dev/null) || pick=""
  fi
  local version=${pick%% *} url=${pick#* } pip_said
  pip_said=$(grep -v '^WARNING' "$err" | tail -n 1 | cut -c1-200) || true
  rm -f "$report" "$err"
  if [ -n "$pick" ] && [[ "$version" == *+* ]]; then
    say "torch: pip picks torch $version (${url##*/})"
    return 0
  fi
  local why
  if [ -n "$pick" ]; then
    why="pip would take torch $version from ${url%%\?*}: PyPI's Linux torch, the CUDA build (several GB with its nvidia-* packages)"
  else
    why="pip could not say which torch it would install (${pip_said:-no answer}); set-up does not download what it cannot name"
  fi
  if [ "$dry_run" = 1 ]; then
    say "would stop before downloading: $why (see SDPA_DOCTOR_TORCH_INDEX, SDPA_DOCTOR_PYTHON, SDPA_DOCTOR_SKIP_TORCH, SDPA_DOCTOR_ALLOW_CUDA_TORCH)"
    return 0
  fi
  printf 'setup: error: %s; stopped before downloading. Choose one:\n' "$why" >&2
  printf '  SDPA_DOCTOR_TORCH_INDEX=https://download.pytorch.org/whl/cpu scripts/setup.sh   (the CPU build, about 200 MB; or a ROCm index, e.g. .../whl/rocm6.4)\n' >&2
  printf '  SDPA_DOCTOR_PYTHON=/path/to/python scripts/setup.sh   (an interpreter whose torch you have: nothing installed)\n' >&2
  printf '  SDPA_DOCTOR_SKIP_TORCH=1 scripts/setup.sh   (no torch: the reference probe only)\n' >&2
  printf '  or SDPA_DOCTOR_ALLOW_CUDA_TORCH=1 to take it anyway\n' >&2
  exit 1
}
python=""
if [ -n "${SDPA_DOCTOR_PYTHON:-}" ]; then
  [ -x "$SDPA_DOCTOR_PYTHON" ] || usage_error "SDPA_DOCTOR_PYTHON=$SDPA_DOCTOR_PYTHON is not an executable"
  [ "$skip_torch" = 1 ] || has_torch "$SDPA_DOCTOR_PYTHON" ||
    usage_error "SDPA_DOCTOR_PYTHON=$SDPA_DOCTOR_PYTHON cannot import torch"
  python=$SDPA_DOCTOR_PYTHON
  say "python: $python (SDPA_DOCTOR_PYTHON), $(describe_torch "$python")"
elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ] && has_torch "$VIRTUAL_ENV/bin/python"; then
  python=$VIRTUAL_ENV/bin/python
  say "python: the active venv's, $python, $(describe_torch "$python")"
else
  python=$here/.venv/bin/python
  if [ ! -x "$python" ] && would "create .venv (python3 -m venv)"; then
    python3 -m venv "$here/.venv" || die "python3 -m venv failed (install python3-venv)"
  fi
  if [ "$skip_torch" = 1 ]; then
    say "torch: not installed (SDPA_DOCTOR_SKIP_TORCH=1): no torch for the libtorch and python probes; their tests skip"
  elif ! "$python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
    if [ -n "${SDPA_DOCTOR_TORCH_INDEX:-}" ]; then
      from="from $SDPA_DOCTOR_TORCH_INDEX (SDPA_DOCTOR_TORCH_INDEX)"
    else
      from="from pip's configured index (PyPI's is the CUDA build, several GB; set SDPA_DOCTOR_TORCH_INDEX to PyTorch's CPU index for the small CPU build)"
    fi
    if would "install torch==$torch_version into .venv, $from"; then
      check_torch_pick "$python"
      pip_install "$python" "torch" "torch==$torch_version" "${torch_from[@]}"
    elif [ -x "$python" ]; then
      check_torch_pick "$python"
    else
      say "would ask pip which torch build it picks first, and stop if it is PyPI's CUDA build"
    fi
  fi
  # report validation, deploy manifest checks, the Python probe's own tests (tests/python)
  for module in jsonschema:jsonschema yaml:pyyaml pytest:pytest==8.3.4; do
    if ! "$python" -c "import ${module%%:*}" 2>/dev/null && would "install ${module#*:} into .venv (the tests use it)"; then
      pip_install "$python" "the tests use it" "${module#*:}"
    fi
  done
  [ "$dry_run" = 1 ] || say "python: .venv, $(describe_torch "$python")"
fi

# --- configure and build -----------------------------------------------------------------------
if would "configure: cmake --preset $preset -DSDPA_DOCTOR_PYTHON=$python${SDPA_DOCTOR_CMAKE_ARGS:+ $SDPA_DOCTOR_CMAKE_ARGS}"; then
  # shellcheck disable=SC2086 # SDPA_DOCTOR_CMAKE_ARGS is split on purpose
  cmake --preset "$preset" -DSDPA_DOCTOR_PYTHON="$python" ${SDPA_DOCTOR_CMAKE_ARGS:-} \
    || die "cmake configure failed (see the messages above)"
fi
build_targets=${SDPA_DOCTOR_BUILD_TARGETS:-product}
[ -z "${SDPA_DOCTOR_BUILD_TARGETS:-}" ] && [ "$test_packages" = 1 ] && build_targets=all
# shellcheck disable=SC2206 # target names are words
targets=(--target $build_targets)
if would "build: cmake --build --preset $preset${targets[*]:+ ${targets[*]}}"; then
  cmake --build --preset "$preset" "${targets[@]}" || die "build failed"
fi
if [ "$dry_run" = 1 ]; then say "dry run done: nothing was changed"; else say "done"; fi

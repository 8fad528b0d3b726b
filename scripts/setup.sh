#!/usr/bin/env bash
# Set up sdpa-doctor on a Debian 12/13 machine: system packages, a Python with torch, configure and
# build. Idempotent: run it again at any time. Runs as root, or as a user with sudo.
#
#   scripts/setup.sh            packages + torch + build (preset "default", into build/)
#   SDPA_DOCTOR_PYTHON=/path/to/python scripts/setup.sh
#                               build against that interpreter's torch (e.g. your ROCm torch)
#   SDPA_DOCTOR_SKIP_PACKAGES=1 skip apt-get (packages already installed)
#   SDPA_DOCTOR_PRESET=name     another CMake preset (debug, asan, minimal, ci)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
say() { printf '\033[1msetup:\033[0m %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

preset=${SDPA_DOCTOR_PRESET:-default}
torch_version=2.13.0

# --- system packages ---------------------------------------------------------------------------
packages=(build-essential cmake ninja-build git pkg-config python3 python3-venv python3-pip
          hipcc libamdhip64-dev rocm-device-libs librocm-smi-dev help2man
          libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev
          libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-dev dpkg-dev file ccache)
if [ "${SDPA_DOCTOR_SKIP_PACKAGES:-0}" != 1 ]; then
  [ -r /etc/debian_version ] || die "this script installs Debian packages; /etc/debian_version is missing (install the packages listed in scripts/setup.sh by hand and set SDPA_DOCTOR_SKIP_PACKAGES=1)"
  say "Debian $(cat /etc/debian_version)"
  if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
    die "need root or sudo to install packages (or set SDPA_DOCTOR_SKIP_PACKAGES=1)"; fi
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing: ${missing[*]}"
    "${sudo[@]}" apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null || die "apt-get install failed for: ${missing[*]}"
  else
    say "system packages already installed"
  fi
fi
for tool in cmake ninja c++; do
  command -v "$tool" >/dev/null || die "'$tool' not found after installing packages"
done

# --- Python and torch --------------------------------------------------------------------------
# A user on a ROCm machine already has the torch that crashes: test that one, install none.
has_torch() { "$1" -c 'import torch' >/dev/null 2>&1; }
python=""
if [ -n "${SDPA_DOCTOR_PYTHON:-}" ]; then
  [ -x "$SDPA_DOCTOR_PYTHON" ] || die "SDPA_DOCTOR_PYTHON=$SDPA_DOCTOR_PYTHON is not an executable"
  has_torch "$SDPA_DOCTOR_PYTHON" || die "SDPA_DOCTOR_PYTHON=$SDPA_DOCTOR_PYTHON cannot import torch"
  python=$SDPA_DOCTOR_PYTHON
  say "using the torch of $python (SDPA_DOCTOR_PYTHON)"
elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ] && has_torch "$VIRTUAL_ENV/bin/python"; then
  python=$VIRTUAL_ENV/bin/python
  say "using the torch of the active venv: $python"
else
  python=$here/.venv/bin/python
  if [ ! -x "$python" ]; then
    say "creating .venv"
    python3 -m venv "$here/.venv" || die "python3 -m venv failed (install python3-venv)"
  fi
  if ! "$python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
    say "installing torch==$torch_version (CPU build) into .venv"
    "$python" -m pip install -q --disable-pip-version-check "torch==$torch_version" \
      || die "pip install torch==$torch_version failed"
  fi
  if ! "$python" -c 'import jsonschema' 2>/dev/null; then
    say "installing jsonschema into .venv (report validation in the tests)"
    "$python" -m pip install -q --disable-pip-version-check jsonschema \
      || die "pip install jsonschema failed"
  fi
  if ! "$python" -c 'import yaml' 2>/dev/null; then
    say "installing pyyaml into .venv (deploy manifest checks in the tests)"
    "$python" -m pip install -q --disable-pip-version-check pyyaml \
      || die "pip install pyyaml failed"
  fi
  say "torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null) in .venv"
fi

# --- configure and build -----------------------------------------------------------------------
say "configuring (preset $preset)"
cmake --preset "$preset" -DSDPA_DOCTOR_PYTHON="$python" ${SDPA_DOCTOR_CMAKE_ARGS:-} \
  || die "cmake configure failed (see the messages above)"
say "building"
cmake --build --preset "$preset" || die "build failed"
say "done"

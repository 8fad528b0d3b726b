#!/usr/bin/env bash
# A real-GPU smoke run: install the torch wheel that matches the GPU found (CUDA where nvidia-smi
# works, ROCm where /dev/kfd exists) into a venv, build against it, run
# `sdpa-doctor check --device cuda:0` and check the report (scripts/gpu_smoke_check.py): torch's
# backends, and the doctor's own kernels compiled at run time for the GPU (hipRTC / NVRTC).
#
#   scripts/gpu-smoke.sh                  the whole run (needs a GPU and network for pip)
#   scripts/gpu-smoke.sh --system-python  the same with the machine's own Python and torch
#                                         (SDPA_SMOKE_PYTHON, default python3): no venv, no pip,
#                                         no network; the tests are not built
#   scripts/gpu-smoke.sh --dry-run        say which GPU and wheel index would be used; change nothing
#   scripts/gpu-smoke.sh --check-only R   only check an existing report R (vendor from the GPU
#                                         found, or SDPA_SMOKE_VENDOR=nvidia|amd)
#
# Environment: SDPA_SMOKE_CUDA_INDEX (default https://download.pytorch.org/whl/cu126),
# SDPA_SMOKE_ROCM_INDEX (default https://download.pytorch.org/whl/rocm6.4), SDPA_SMOKE_VENV
# (default build/gpu-smoke-venv), SDPA_SMOKE_KFD (default /dev/kfd), SDPA_SMOKE_PYTHON (python3).
# The reference worker finds hipRTC / NVRTC where that torch keeps its libraries
# (SDPA_DOCTOR_TORCH_LIB_DIRS, set here from the torch used) and caches what they compile under
# SDPA_SMOKE_KERNEL_CACHE (default build/gpu-smoke-kernels).
# Exit: 0 the checks passed, 1 a check failed, 2 usage, 77 no GPU found (nothing to smoke).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { printf 'gpu-smoke: %s\n' "$*"; }
die() { printf 'gpu-smoke: error: %s\n' "$*" >&2; exit "${2:-1}"; }

cuda_index=${SDPA_SMOKE_CUDA_INDEX:-https://download.pytorch.org/whl/cu126}
rocm_index=${SDPA_SMOKE_ROCM_INDEX:-https://download.pytorch.org/whl/rocm6.4}
kfd=${SDPA_SMOKE_KFD:-/dev/kfd}
venv=${SDPA_SMOKE_VENV:-$here/build/gpu-smoke-venv}
python=${SDPA_SMOKE_PYTHON:-python3}

mode=run
report=
case "${1:-}" in
  "") ;;
  --system-python) mode=system ;;
  --dry-run) mode=dry ;;
  --check-only) mode=check; report=${2:-}; [ -n "$report" ] || die "--check-only needs a report" 2 ;;
  -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
  *) die "unknown argument '$1' (--system-python, --dry-run, --check-only REPORT)" 2 ;;
esac

# The vendor of the GPU found: nvidia-smi that lists a GPU wins, then a KFD device node.
vendor=${SDPA_SMOKE_VENDOR:-}
if [ -z "$vendor" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    vendor=nvidia
  elif [ -e "$kfd" ]; then
    vendor=amd
  fi
fi
case "$vendor" in
  nvidia) index=$cuda_index; gpu=$(nvidia-smi -L 2>/dev/null | head -1 || true) ;;
  amd) index=$rocm_index; gpu="AMD GPU ($kfd)" ;;
  "") [ "$mode" = check ] && die "no GPU found: set SDPA_SMOKE_VENDOR=nvidia|amd" 2
      say "no GPU found (no working nvidia-smi, no $kfd): nothing to smoke"; exit 77 ;;
  *) die "SDPA_SMOKE_VENDOR must be nvidia or amd, not '$vendor'" 2 ;;
esac

kernel_cache=${SDPA_SMOKE_KERNEL_CACHE:-$here/build/gpu-smoke-kernels}

# The report's schema is checked where the python has jsonschema (the venv always does).
check() {
  local schema=()
  if "$python" -c 'import jsonschema' 2>/dev/null; then
    schema=(--schema "$here/data/report.schema.json")
  else
    say "no jsonschema for $python: the report's schema is not checked"
  fi
  "$python" "$here/scripts/gpu_smoke_check.py" --report "$1" --vendor "$vendor" --device cuda:0 \
    "${schema[@]}" ${2:+--wall-s "$2"}
}

if [ "$mode" = check ]; then check "$report"; exit $?; fi
say "GPU: $gpu"
say "vendor: $vendor"
if [ "$mode" = system ]; then
  say "python: $python (its own torch; nothing is installed)"
else
  say "wheel index: $index"
  say "venv: $venv"
fi
if [ "$mode" = dry ]; then
  say "would run: pip install torch --index-url $index; pip install jsonschema"
  say "would run: cmake --preset default -DSDPA_DOCTOR_PYTHON=$venv/bin/python && cmake --build build"
  say "would run: build/sdpa-doctor check --device cuda:0 --json gpu.json"
  exit 0
fi

cmake_args=()
if [ "$mode" = system ]; then
  "$python" -c 'import torch' 2>/dev/null || die "$python cannot import torch (set SDPA_SMOKE_PYTHON)"
  python=$(command -v "$python")
  cmake_args=(-DSDPA_DOCTOR_BUILD_TESTS=OFF -DSDPA_DOCTOR_BUILD_BENCH=OFF)
else
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q torch --index-url "$index"
  "$venv/bin/python" -m pip install -q jsonschema
  python=$venv/bin/python
fi
say "torch: $("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "HIP", torch.version.hip)')"
# hipRTC / NVRTC as the torch under test brought them (torch/lib, PyPI's nvidia-* beside it).
SDPA_DOCTOR_TORCH_LIB_DIRS=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export SDPA_DOCTOR_TORCH_LIB_DIRS
export SDPA_DOCTOR_KERNEL_CACHE=$kernel_cache
cd "$here"
cmake --preset default -DSDPA_DOCTOR_PYTHON="$python" "${cmake_args[@]}" >/dev/null
cmake --build build -j"$(nproc)"
out=${SDPA_SMOKE_REPORT:-$here/gpu.json}
start=$SECONDS
set +e
build/sdpa-doctor check --device cuda:0 --python "$python" --json "$out"
code=$?
set -e
wall=$((SECONDS - start))
say "sdpa-doctor check exited $code after ${wall} s"
check "$out" "$wall"

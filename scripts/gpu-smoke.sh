#!/usr/bin/env bash
# A real-GPU smoke run: install the torch wheel that matches the GPU found (CUDA where nvidia-smi
# works, ROCm where /dev/kfd exists) into a venv, build against it, run
# `sdpa-doctor check --device cuda:0` and check the report (scripts/gpu_smoke_check.py).
#
#   scripts/gpu-smoke.sh                  the whole run (needs a GPU and network for pip)
#   scripts/gpu-smoke.sh --dry-run        say which GPU and wheel index would be used; change nothing
#   scripts/gpu-smoke.sh --check-only R   only check an existing report R (vendor from the GPU
#                                         found, or SDPA_SMOKE_VENDOR=nvidia|amd)
#
# Environment: SDPA_SMOKE_CUDA_INDEX (default https://download.pytorch.org/whl/cu126),
# SDPA_SMOKE_ROCM_INDEX (default https://download.pytorch.org/whl/rocm6.4), SDPA_SMOKE_VENV
# (default build/gpu-smoke-venv), SDPA_SMOKE_KFD (default /dev/kfd), SDPA_SMOKE_PYTHON (python3).
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
  --dry-run) mode=dry ;;
  --check-only) mode=check; report=${2:-}; [ -n "$report" ] || die "--check-only needs a report" 2 ;;
  -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
  *) die "unknown argument '$1' (--dry-run, --check-only REPORT)" 2 ;;
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

check() {
  "$python" "$here/scripts/gpu_smoke_check.py" --report "$1" --vendor "$vendor" --device cuda:0 \
    --schema "$here/data/report.schema.json" ${2:+--wall-s "$2"}
}

if [ "$mode" = check ]; then check "$report"; exit $?; fi
say "GPU: $gpu"
say "vendor: $vendor"
say "wheel index: $index"
say "venv: $venv"
if [ "$mode" = dry ]; then
  say "would run: pip install torch --index-url $index; pip install jsonschema"
  say "would run: cmake --preset default -DSDPA_DOCTOR_PYTHON=$venv/bin/python && cmake --build build"
  say "would run: build/sdpa-doctor check --device cuda:0 --json gpu.json"
  exit 0
fi

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q torch --index-url "$index"
"$venv/bin/python" -m pip install -q jsonschema
cd "$here"
cmake --preset default -DSDPA_DOCTOR_PYTHON="$venv/bin/python" >/dev/null
cmake --build build -j"$(nproc)"
out=${SDPA_SMOKE_REPORT:-$here/gpu.json}
start=$SECONDS
set +e
build/sdpa-doctor check --device cuda:0 --python "$venv/bin/python" --json "$out"
code=$?
set -e
wall=$((SECONDS - start))
say "sdpa-doctor check exited $code after ${wall} s"
python=$venv/bin/python check "$out" "$wall"

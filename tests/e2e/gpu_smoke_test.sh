#!/usr/bin/env bash
# scripts/gpu-smoke.sh without a GPU: the wheel choice with a fake nvidia-smi on PATH and a fake
# KFD node, the overridable index URLs, "no GPU" = exit 77, the --system-python mode installing
# nothing, and the report checks over a fixture report (a good one passes; flash all unsupported,
# a missing canary and our own kernel failing to compile fail, named).
# Usage: gpu_smoke_test.sh SOURCE_DIR PYTHON
set -euo pipefail
src=$1
py=${2:-python3}
"$py" -c "import jsonschema" 2>/dev/null || { echo "no jsonschema in $py: skipped"; exit 77; }
smoke=$src/scripts/gpu-smoke.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() { grep -qF -- "$2" <<<"$1" || fail "expected '$2' in: $1"; }

mkdir -p "$tmp/bin" "$tmp/empty"
cat >"$tmp/bin/nvidia-smi" <<'SH'
#!/bin/sh
echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)"
SH
chmod +x "$tmp/bin/nvidia-smi"
base_path=/usr/bin:/bin

out=$(PATH=$tmp/bin:$base_path SDPA_SMOKE_KFD=$tmp/none "$smoke" --dry-run)
expect "$out" "vendor: nvidia"
expect "$out" "wheel index: https://download.pytorch.org/whl/cu126"
expect "$out" "GPU: GPU 0: NVIDIA H200"
out=$(PATH=$tmp/bin:$base_path SDPA_SMOKE_CUDA_INDEX=https://mirror.example/cu128 "$smoke" --dry-run)
expect "$out" "wheel index: https://mirror.example/cu128"

touch "$tmp/kfd"
out=$(PATH=$tmp/empty:$base_path SDPA_SMOKE_KFD=$tmp/kfd "$smoke" --dry-run)
expect "$out" "vendor: amd"
expect "$out" "wheel index: https://download.pytorch.org/whl/rocm6.4"

set +e
out=$(PATH=$tmp/empty:$base_path SDPA_SMOKE_KFD=$tmp/none "$smoke" --dry-run)
code=$?
set -e
[ "$code" = 77 ] || fail "no GPU: expected exit 77, got $code: $out"
expect "$out" "no GPU found"

# The machine's own Python: nothing installed, so a Python without torch stops it at once.
set +e
out=$(PATH=$tmp/empty:$base_path SDPA_SMOKE_KFD=$tmp/none "$smoke" --system-python 2>&1)
code=$?
[ "$code" = 77 ] || fail "--system-python without a GPU: expected exit 77, got $code: $out"
out=$(PATH=$tmp/bin:$base_path SDPA_SMOKE_PYTHON=/bin/false "$smoke" --system-python 2>&1)
code=$?
set -e
[ "$code" = 1 ] || fail "--system-python without torch: expected exit 1, got $code: $out"
expect "$out" "python: /bin/false (its own torch; nothing is installed)"
expect "$out" "/bin/false cannot import torch"

fixture=$src/tests/e2e/fixtures/gpu_smoke_nvidia.json
out=$(PATH=$tmp/bin:$base_path SDPA_SMOKE_PYTHON=$py "$smoke" --check-only "$fixture")
expect "$out" "every check passed"
expect "$out" "cells on the GPU: 20"
expect "$out" "python   flash"
expect "$out" "reference ref-flash"
expect "$out" "ours on NVIDIA H200: CUDA driver 13.0"
expect "$out" "sm_90 (cubin) by NVRTC 12.6"

"$py" - "$fixture" "$tmp/bad.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["results"]:
    if c["variant"] == "flash":
        c["status"], c["reason"] = "unsupported", "No available kernel. Aborting execution."
    if c["variant"] == "math":
        c.pop("canary", None)
    if c["variant"] == "ref-flash":
        c["status"] = "error"
        c["reason"] = "our reference kernel did not compile for sm_90 (NVRTC 12.6): error: x"
[c for c in r["results"] if c["probe"] == "python"][-1]["canary"] = "failed: HIP error: invalid argument"
json.dump(r, open(sys.argv[2], "w"))
PY
set +e
out=$(PATH=$tmp/bin:$base_path SDPA_SMOKE_PYTHON=$py "$smoke" --check-only "$tmp/bad.json")
code=$?
set -e
[ "$code" = 1 ] || fail "bad report: expected exit 1, got $code: $out"
expect "$out" "FAIL every flash cell is unsupported"
expect "$out" "FAIL flash must pass on NVIDIA"
expect "$out" "FAIL canary failed after python default"
expect "$out" "FAIL no canary after 4 case(s) that ran"
expect "$out" "FAIL ref-flash failed 2 case(s) on cuda:0"
expect "$out" "our reference kernel did not compile for sm_90"
echo "gpu-smoke script checks passed"

#!/usr/bin/env bash
# scripts/setup.sh asks pip which torch it would install before installing one: PyPI's Linux torch
# (a version with no +cpu/+rocm tag: the CUDA build, several GB) stops the set-up before anything
# is downloaded, naming the three ways on, unless SDPA_DOCTOR_ALLOW_CUDA_TORCH=1; a tagged build
# installs. Run in a copy of scripts/ whose .venv/bin/python is a stand-in: its `-m pip` answers
# the dry run with the pick a test names (FAKE_TORCH_PICK="VERSION URL") and logs every other
# pip call; cmake is a stand-in too, so nothing is configured or built.
#   setup_torch_pick_test.sh SOURCE_DIR
set -uo pipefail
src=$(cd "$1" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checkout=$work/checkout
mkdir -p "$checkout/.venv/bin" "$work/bin"
cp -r "$src/scripts" "$src/CMakePresets.json" "$checkout/"
real_python=$(command -v python3) || fail "no python3"
cat >"$checkout/.venv/bin/python" <<FAKE
#!/usr/bin/env bash
# No torch here; pip is the test's.
if [ "\${1:-}" = -m ] && [ "\${2:-}" = pip ]; then
  shift 2
  printf '%s\n' "pip \$*" >>"\$FAKE_PIP_LOG"
  case " \$* " in
  *" --dry-run "*)
    [ -n "\${FAKE_PIP_FAILS:-}" ] && { echo "ERROR: \$FAKE_PIP_FAILS" >&2; exit 2; }
    report=""; prev=""
    for a in "\$@"; do [ "\$prev" = --report ] && report=\$a; prev=\$a; done
    printf '{"version":"1","install":[{"metadata":{"name":"torch","version":"%s"},"download_info":{"url":"%s"}}]}\n' \
      "\${FAKE_TORCH_PICK%% *}" "\${FAKE_TORCH_PICK#* }" >"\$report"
    ;;
  esac
  exit 0
fi
case "\${2:-}" in *"import torch"*) echo "ModuleNotFoundError: No module named 'torch'" >&2; exit 1 ;; esac
exec "$real_python" "\$@"
FAKE
printf '#!/bin/sh\n[ "$1" = --version ] && echo "cmake version 3.31.6"\nexit 0\n' >"$work/bin/cmake"
printf '#!/bin/sh\nexit 0\n' >"$work/bin/ninja"
chmod +x "$checkout/.venv/bin/python" "$work/bin/cmake" "$work/bin/ninja"

fresh=(env -u SDPA_DOCTOR_PYTHON -u VIRTUAL_ENV -u SDPA_DOCTOR_SKIP_TORCH -u SDPA_DOCTOR_TORCH_INDEX
  -u SDPA_DOCTOR_ALLOW_CUDA_TORCH -u SDPA_DOCTOR_OS_RELEASE -u SDPA_DOCTOR_CMAKE_ARGS -u FAKE_PIP_FAILS
  PATH="$work/bin:$PATH" CXX=c++ SDPA_DOCTOR_SKIP_PACKAGES=1 FAKE_PIP_LOG="$work/pip.log")
cuda_pick="2.13.0 https://files.pythonhosted.org/packages/ab/torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"
cpu_pick="2.13.0+cpu https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
setup() { # setup PICK [VAR=VALUE...] [-- ARG...]: output in $out, exit code in $rc
  local pick=$1
  shift
  local vars=() args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ "${1:-}" = -- ] && { shift; args=("$@"); }
  : >"$work/pip.log"
  out=$("${fresh[@]}" FAKE_TORCH_PICK="$pick" "${vars[@]}" "$checkout/scripts/setup.sh" "${args[@]}" 2>&1)
  rc=$?
}
expect() { grep -Eq -- "$2" <<<"$out" || { echo "$out"; fail "$1: no line matching '$2'"; }; }
installed_torch() { grep -E '^pip install ' "$work/pip.log" | grep -v -- --dry-run | grep -q 'torch=='; }

# PyPI's CUDA torch: stopped before the download, the three choices named, exit 1.
setup "$cuda_pick"
[ "$rc" -eq 1 ] || { echo "$out"; fail "CUDA pick: exit $rc, expected 1"; }
expect "CUDA pick" "^setup: error: pip would take torch 2\.13\.0 from https://files\.pythonhosted\.org/.*CUDA build.*stopped before downloading"
expect "CUDA pick" "^  SDPA_DOCTOR_TORCH_INDEX=https://download\.pytorch\.org/whl/cpu scripts/setup\.sh"
expect "CUDA pick" "^  SDPA_DOCTOR_PYTHON=/path/to/python scripts/setup\.sh"
expect "CUDA pick" "^  SDPA_DOCTOR_SKIP_TORCH=1 scripts/setup\.sh"
expect "CUDA pick" "SDPA_DOCTOR_ALLOW_CUDA_TORCH=1"
grep -q -- '--dry-run .*--report .*torch==2\.13\.0' "$work/pip.log" || { cat "$work/pip.log"; fail "no dry run asked"; }
installed_torch && { cat "$work/pip.log"; fail "CUDA pick: torch was installed"; }
echo "ok PyPI's CUDA torch stops the set-up before downloading (exit 1, three choices)"

# Told to go on: installed.
setup "$cuda_pick" SDPA_DOCTOR_ALLOW_CUDA_TORCH=1
[ "$rc" -eq 0 ] || { echo "$out"; fail "allowed CUDA pick: exit $rc"; }
installed_torch || { cat "$work/pip.log"; fail "SDPA_DOCTOR_ALLOW_CUDA_TORCH=1: torch not installed"; }
echo "ok SDPA_DOCTOR_ALLOW_CUDA_TORCH=1 goes on"

# A CPU build from the index given: the dry run asks that index, the pick is said, then installed.
setup "$cpu_pick" SDPA_DOCTOR_TORCH_INDEX=https://download.pytorch.org/whl/cpu
[ "$rc" -eq 0 ] || { echo "$out"; fail "CPU pick: exit $rc"; }
expect "CPU pick" "^setup: torch: pip picks torch 2\.13\.0\+cpu \(torch-2\.13\.0%2Bcpu-cp311"
grep -q -- '--dry-run .*torch==2\.13\.0 --index-url https://download\.pytorch\.org/whl/cpu' "$work/pip.log" ||
  { cat "$work/pip.log"; fail "the dry run did not ask the index given"; }
installed_torch || { cat "$work/pip.log"; fail "CPU pick: torch not installed"; }
setup "2.13.0+rocm6.4 https://download.pytorch.org/whl/rocm6.4/torch.whl"
[ "$rc" -eq 0 ] || { echo "$out"; fail "ROCm pick: exit $rc"; }
echo "ok a +cpu or +rocm build installs, from the index given"

# A pip that cannot say (older than 22.2: no --dry-run): stopped, with pip's words.
setup "$cpu_pick" FAKE_PIP_FAILS="no such option: --dry-run"
[ "$rc" -eq 1 ] || { echo "$out"; fail "pip without --dry-run: exit $rc, expected 1"; }
expect "pip without --dry-run" "^setup: error: pip could not say which torch it would install \(ERROR: no such option: --dry-run\)"
installed_torch && fail "pip without --dry-run: torch was installed"
echo "ok a pip that cannot name its pick stops the set-up"

# setup.sh --dry-run says it would stop, and installs nothing.
setup "$cuda_pick" -- --dry-run
[ "$rc" -eq 0 ] || { echo "$out"; fail "--dry-run: exit $rc"; }
expect "--dry-run" "^setup: would stop before downloading: pip would take torch 2\.13\.0"
installed_torch && fail "--dry-run installed torch"
echo "ok setup.sh --dry-run says it would stop"

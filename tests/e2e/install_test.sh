#!/usr/bin/env bash
# The install tree works where it lands and when moved; the .deb installs into a scratch root
# and runs from there. Usage: install_test.sh BUILD_DIR (tree|deb) [PYTHON]
# PYTHON: an interpreter with torch, whose torch the .deb's doctor builds its LibTorch plugin for.
set -euo pipefail
build=$1
mode=$2
python=${3:-}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

smoke() { # prefix: run the installed doctor from there
  local bin=$1/bin/sdpa-doctor
  [ -x "$bin" ] || fail "$bin missing"
  "$bin" --version | grep -q "sdpa-doctor" || fail "--version from $1"
  "$bin" known-issues >"$scratch/ki.txt" 2>&1 || fail "known-issues from $1: $(cat "$scratch/ki.txt")"
  grep -q "188113" "$scratch/ki.txt" || fail "shipped known issues not found from $1"
  "$bin" check --probe reference --case "dtype=fp32,b=1,h=2,l=16,d=16" --json "$scratch/r.json" \
    -q --run-dir "$scratch/run" >"$scratch/check.txt" 2>&1 || fail "check from $1: $(cat "$scratch/check.txt")"
  grep -q '"status": *"pass"' "$scratch/r.json" || fail "check from $1 did not pass"
  # The installed LibTorch plugin finds the LibTorch it was built with; the .deb ships none (no
  # package provides that LibTorch): its doctor builds one for the torch of --python on first use.
  [ -x "$1/bin/sdpa-doctor-torch-worker" ] || fail "the torch worker is not installed under $1"
  local torch_args=()
  if [ -n "$python" ] && "$python" -c "import torch" 2>/dev/null; then
    torch_args=(--python "$python")
  fi
  if [ -f "$1/lib/sdpa-doctor/sdpa-doctor-torch-plugin.so" ] || [ ${#torch_args[@]} -gt 0 ]; then
    SDPA_DOCTOR_CACHE_DIR="$scratch/cache" "$bin" check --probe libtorch --variant math \
      --case "dtype=fp32,b=1,h=2,l=16,d=16" "${torch_args[@]}" \
      --json "$scratch/t.json" -q --run-dir "$scratch/run-torch" >"$scratch/torch.txt" 2>&1 \
      || fail "libtorch check from $1: $(cat "$scratch/torch.txt"; cat "$scratch"/run-torch/*stderr.log)"
    grep -q '"status": *"pass"' "$scratch/t.json" || fail "libtorch check from $1 did not pass: $(cat "$scratch/torch.txt")"
  fi
  # The installed reference worker opens a GPU runtime only for a GPU device, and says in one
  # line what it found there (no GPU here: the HIP runtime's or the CUDA driver's answer).
  local said rc=0
  said=$("$1/bin/sdpa-doctor-ref-worker" --health-check --device cuda:0 2>&1) || rc=$?
  [ "$rc" -eq 0 ] || grep -Eq "^(cannot check cuda:0: )?no GPU device" <<<"$said" \
    || fail "installed reference worker's health check on cuda:0: $said"
  [ -f "$1/share/sdpa-doctor/sdpa_probe/__main__.py" ] || fail "python probe not installed under $1"
  [ -f "$1/share/sdpa-doctor/report.schema.json" ] || fail "schema not installed under $1"
  [ -f "$1/share/sdpa-doctor/models/llama-3-8b.json" ] || fail "model configs not installed under $1"
}

case $mode in
tree)
  cmake --install "$build" --prefix "$scratch/first" >/dev/null
  smoke "$scratch/first"
  mv "$scratch/first" "$scratch/moved"
  smoke "$scratch/moved"
  [ -f "$scratch/moved/share/bash-completion/completions/sdpa-doctor" ] || fail "no completion"
  echo "install tree: works in place and when moved"
  ;;
deb)
  (cd "$scratch" && cpack --config "$build/CPackConfig.cmake" -B "$scratch/pkg" >/dev/null) \
    || fail "cpack failed"
  deb=$(ls "$scratch"/pkg/*.deb | head -1)
  [ -n "$deb" ] || fail "no .deb produced"
  depends=$(dpkg-deb -f "$deb" Depends)
  echo "Depends: $depends"
  for lib in libfmt libspdlog; do
    echo "$depends" | grep -q "$lib" || fail ".deb does not depend on $lib"
  done
  listing=$(dpkg-deb -c "$deb")
  grep -q "usr/bin/sdpa-doctor$" <<<"$listing" || fail "binary missing from the .deb"
  dpkg -x "$deb" "$scratch/root"
  smoke "$scratch/root/usr"
  [ -f "$scratch/root/usr/share/man/man1/sdpa-doctor.1" ] || ! command -v help2man >/dev/null \
    || fail "man page missing from the .deb"
  echo ".deb: $(basename "$deb") installs and runs from a scratch root"
  ;;
esac

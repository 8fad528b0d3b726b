#!/usr/bin/env bash
# A wheel installed as a user on a GPU machine installs it: into a fresh venv that holds torch.
# Then that venv's sdpa-doctor runs all three probes with its default interpreter, and what the
# wheel installed NEEDS no ROCm library and LibTorch only in its plugin.
# Usage:
#   wheel_install_test.sh --packed SOURCE_DIR BUILD_DIR PYTHON
#       the built tree packed by scripts/pack-wheel.sh (no compile: seconds), installed into a venv
#       of PYTHON that sees PYTHON's torch; fmt and spdlog as the tree was configured
#   wheel_install_test.sh --source SOURCE_DIR
#       `pip install --no-build-isolation SOURCE_DIR` (the source route: scikit-build-core compiles
#       the whole doctor, minutes) into a venv with torch installed; fmt and spdlog built in
# The work folder is made afresh under SOURCE_DIR/.cache/wheel-test-MODE each run; the source
# route builds in SOURCE_DIR/build-wheel (pyproject.toml): both at fixed paths inside the checkout,
# so with CCACHE_BASEDIR there a rebuild takes every object from the compiler cache.
# Environment: SDPA_DOCTOR_TORCH_INDEX as for scripts/setup.sh; SDPA_DOCTOR_SKIP_TORCH=1 skips.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
mode=${1:-}
case "$mode" in
  --packed) [ $# -eq 4 ] || fail "usage: $0 --packed SOURCE_DIR BUILD_DIR PYTHON" ;;
  --source) [ $# -eq 2 ] || fail "usage: $0 --source SOURCE_DIR" ;;
  *) fail "usage: $0 --packed SOURCE_DIR BUILD_DIR PYTHON | --source SOURCE_DIR" ;;
esac
src=$(cd "$2" && pwd)
[ "${SDPA_DOCTOR_SKIP_TORCH:-0}" = 1 ] && { echo "SDPA_DOCTOR_SKIP_TORCH=1: skipped"; exit 77; }
work=$src/.cache/wheel-test-${mode#--}
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
venv=$work/venv
log=$work/log
took() { echo "$1: $(( SECONDS - $2 )) s"; }
# What the user's environment would not have: nothing of ours, no other interpreter's choice.
unset VIRTUAL_ENV SDPA_DOCTOR_PYTHON SDPA_DOCTOR_DATA_DIR PYTHONPATH
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
fmt_built_in=1

if [ "$mode" = --packed ]; then
  build=$(cd "$3" && pwd)
  python=$4
  "$python" -c 'import torch' >/dev/null 2>&1 || { echo "no torch in $python: skipped"; exit 77; }
  start=$SECONDS
  wheel=$("$src/scripts/pack-wheel.sh" "$build" "$work/dist") || fail "scripts/pack-wheel.sh $build"
  took "scripts/pack-wheel.sh ($(du -h "$wheel" | cut -f1))" "$start"
  start=$SECONDS
  "$python" -m venv "$venv" || fail "$python -m venv failed"
  # The venv holds that torch as if installed there: its site-packages on the venv's path.
  torch_site=$("$python" -W ignore -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$torch_site" >"$site/torch-under-test.pth"
  "${pip[@]}" --no-index --no-deps "$wheel" >"$log" 2>&1 || fail "pip install $wheel: $(tail -5 "$log")"
  took "venv, pip install of the wheel" "$start"
  grep -q '^SDPA_DOCTOR_WHEEL:BOOL=ON' "$build/CMakeCache.txt" || fmt_built_in=0
else
  torch_version=$(sed -n 's/^torch_version=\([0-9.]*\)$/\1/p' "$src/scripts/setup.sh")
  [ -n "$torch_version" ] || fail "no torch_version= line in scripts/setup.sh"
  start=$SECONDS
  python3 -m venv "$venv" || fail "python3 -m venv failed (install python3-venv)"
  torch_from=()
  [ -n "${SDPA_DOCTOR_TORCH_INDEX:-}" ] && torch_from=(--index-url "$SDPA_DOCTOR_TORCH_INDEX")
  "${pip[@]}" "torch==$torch_version" "${torch_from[@]}" >"$log" 2>&1 ||
    fail "pip install torch==$torch_version: $(tail -5 "$log")"
  # The build backend; CMake and Ninja are the machine's (scikit-build-core asks PyPI's only
  # where those are too old, and it cannot without build isolation).
  "${pip[@]}" "scikit-build-core>=1.0" >"$log" 2>&1 || fail "pip install scikit-build-core: $(tail -5 "$log")"
  took "venv with torch $torch_version" "$start"
  # The wheel, built once: same compiler cache as the test builds.
  if command -v ccache >/dev/null; then
    export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR=$src CCACHE_NOHASHDIR=1
  fi
  start=$SECONDS
  "${pip[@]}" --no-build-isolation "$src" >"$log" 2>&1 || fail "pip install --no-build-isolation: $(tail -40 "$log")"
  took "pip install --no-build-isolation (the wheel built and installed)" "$start"
fi

# What it installed, and where: the install prefix's layout, in the venv's prefix.
mapfile -t files < <("$venv/bin/python" - <<'PY'
import importlib.metadata as md, os, sys
for f in md.distribution("sdpa-doctor").files or []:
    p = os.path.normpath(os.path.join(sys.prefix, "lib", "python%d.%d" % sys.version_info[:2],
                                      "site-packages", str(f)))
    if os.path.isfile(p):
        print(p)
PY
)
for exe in sdpa-doctor sdpa-doctor-ref-worker sdpa-doctor-enum-worker sdpa-doctor-torch-worker; do
  [ -x "$venv/bin/$exe" ] || fail "$exe not installed in $venv/bin"
  printf '%s\n' "${files[@]}" | grep -qx "$venv/bin/$exe" || fail "$exe is not among the wheel's files"
done
[ -f "$venv/share/sdpa-doctor/sdpa_probe/__main__.py" ] || fail "the Python probe is not in $venv/share/sdpa-doctor"
linkage=(--wheel); [ "$fmt_built_in" = 1 ] || linkage=(--wheel-linked-fmt)
"$(dirname "${BASH_SOURCE[0]}")/linkage_test.sh" "${linkage[@]}" "${files[@]}"
plugin=$venv/lib/sdpa-doctor/sdpa-doctor-torch-plugin.so
[ -f "$plugin" ] || fail "the LibTorch plugin is not installed in $venv/lib/sdpa-doctor (it is built when the venv's torch is importable)"
runpath=$(LC_ALL=C readelf -d "$plugin" | sed -n 's/.*R.*PATH.*\[\(.*\)\]/\1/p')
torch_lib=$("$venv/bin/python" -W ignore -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
[ "$runpath" = "$torch_lib" ] || fail "the LibTorch plugin's RUNPATH is '$runpath', not the venv's $torch_lib"

# On the venv's PATH, as after `source venv/bin/activate`, and nothing else that imports torch
# there: the python probe must take the doctor's own environment by default.
start=$SECONDS
rc=0
env PATH="$venv/bin:/usr/bin:/bin" sdpa-doctor check --probe reference,libtorch,python \
  --case "dtype=fp32,b=1,h=2,l=16,d=16" --json "$work/r.json" -q \
  --run-dir "$work/run" --no-oracle-cache >"$work/check.txt" 2>&1 || rc=$?
took "sdpa-doctor check" "$start"
[ "$rc" -eq 0 ] || fail "check exited $rc: $(cat "$work/check.txt")"
"$venv/bin/python" - "$work/r.json" "$venv/bin" <<'PY' || fail "report: $(cat "$work/check.txt")"
import json, os, sys
report = json.load(open(sys.argv[1]))
cells = {}
for r in report["results"]:
    cells.setdefault(r["probe"], []).append(r["status"])
# On the CPU some variants are refused (unsupported); none may be skipped or fail.
for probe in ("reference", "libtorch", "python"):
    got = cells.get(probe, [])
    if "pass" not in got or any(s not in ("pass", "unsupported") for s in got):
        sys.exit(f"{probe}: cells {got}, not every one ran and passed")
runtime = report["inventory"]["runtime"]
if runtime.get("torch_plugin_origin") != "built with the doctor" or \
        not runtime.get("torch_plugin", "").startswith(os.path.dirname(sys.argv[2]) + "/lib/sdpa-doctor/"):
    sys.exit("the libtorch probe did not load the plugin the wheel installed: %s" % runtime.get("torch_plugin"))
text = json.dumps(report)
if '"python_executable": "%s/python' % sys.argv[2] not in text:
    sys.exit("the python probe did not run the venv's own interpreter")
print("check: " + ", ".join(f"{p} {s.count('pass')}/{len(s)} passed" for p, s in sorted(cells.items())))
PY
echo "wheel ($mode): installed into a fresh venv; its sdpa-doctor ran every probe"

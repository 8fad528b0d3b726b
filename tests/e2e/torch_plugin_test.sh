#!/usr/bin/env bash
# The LibTorch plugin built on first use: an install that ships no plugin (as the .deb does, or a
# doctor built for another torch) builds one against the --python's torch once, keeps it in the
# cache and loads it from there next time; the worker links no torch, the plugin does. No C++
# compiler: the libtorch cells are skipped saying why, nothing crashes, the other probes run and
# the check exits 0. A cached plugin that is garbage is seen before it is loaded and built again.
# Usage: torch_plugin_test.sh BUILD_DIR PYTHON
set -euo pipefail
build=$1
python=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "${SDPA_DOCTOR_SKIP_TORCH:-0}" = 1 ] && { echo "SDPA_DOCTOR_SKIP_TORCH=1: skipped"; exit 77; }
"$python" -c "import torch" 2>/dev/null || { echo "no torch in $python: skipped"; exit 77; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The install without the component that holds the plugin built with the doctor.
cmake --install "$build" --prefix "$scratch/prefix" --component Unspecified >/dev/null
doctor=$scratch/prefix/bin/sdpa-doctor
[ ! -e "$scratch/prefix/lib/sdpa-doctor" ] || fail "the Unspecified component holds the plugin"
[ -f "$scratch/prefix/share/sdpa-doctor/torch_plugin/torch_plugin.cpp" ] || fail "the plugin's source is not installed"
unset SDPA_DOCTOR_TORCH_PLUGIN
case_spec="dtype=fp32,b=1,h=2,l=16,d=16"
# check NAME [ENV...]: the doctor with the libtorch and reference probes, its JSON in NAME.json
check() {
  local name=$1 rc=0
  shift
  env "$@" "$doctor" check --probe libtorch,reference --python "$python" --case "$case_spec" \
    --json "$scratch/$name.json" --run-dir "$scratch/run-$name" --no-shrink \
    >"$scratch/$name.out" 2>"$scratch/$name.err" || rc=$?
  [ "$rc" -eq 0 ] || fail "$name: check exited $rc: $(cat "$scratch/$name.err")"
}
# field NAME EXPRESSION: a Python expression over the report `r`
field() { "$python" -c "import json, sys; r = json.load(open(sys.argv[1])); print($2)" "$scratch/$1.json"; }
statuses() { field "$1" "sorted({(c['probe'], c['status']) for c in r['results']})"; }

cache=$scratch/cache
start=$SECONDS
check first SDPA_DOCTOR_CACHE_DIR="$cache"
echo "first check, with the build: $(( SECONDS - start )) s"
grep -q "building the LibTorch plugin for torch" "$scratch/first.err" || fail "first use printed no progress: $(cat "$scratch/first.err")"
plugin=$(field first "r['inventory']['runtime']['torch_plugin']")
[[ "$plugin" == "$cache"/workers/torch-*.so ]] || fail "the plugin loaded is '$plugin', not one in $cache/workers"
field first "r['inventory']['runtime']['torch_plugin_origin']" | grep -q "^built now in" || fail "first use: origin"
[ "$(statuses first)" = "[('libtorch', 'pass'), ('libtorch', 'unsupported'), ('reference', 'pass')]" ] \
  || fail "first use: $(statuses first)"
torch_lib=$("$python" -W ignore -c 'import os, torch; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib")))')
needed=$(LC_ALL=C readelf -d "$plugin")
grep -q 'NEEDED.*\[libc10\.so\]' <<<"$needed" || fail "the built plugin does not NEED libc10"
grep -q "R.*PATH.*\[$torch_lib\]" <<<"$needed" || fail "the built plugin's RUNPATH is not $torch_lib"
! LC_ALL=C readelf -d "$scratch/prefix/bin/sdpa-doctor-torch-worker" | grep -Eq 'NEEDED.*\[lib(torch|torch_cpu|c10)\.so' \
  || fail "the torch worker NEEDS LibTorch"

start=$SECONDS
check again SDPA_DOCTOR_CACHE_DIR="$cache"
echo "second check, from the cache: $(( SECONDS - start )) s"
! grep -q "building the LibTorch plugin" "$scratch/again.err" || fail "the second check built again"
[ "$(field again "r['inventory']['runtime']['torch_plugin']")" = "$plugin" ] || fail "the second check loaded another plugin"
field again "r['inventory']['runtime']['torch_plugin_origin']" | grep -q "^built earlier" || fail "second use: origin"

# A torch under a folder with a comma, a space and a quote (a link to the same torch): the plugin
# is built against it and links, the linker given that torch/lib whole.
odd="$scratch/ft_c,omma and 'quote'/site"
mkdir -p "$odd"
ln -s "$(dirname "$torch_lib")" "$odd/torch"
check odd SDPA_DOCTOR_CACHE_DIR="$scratch/cache-odd" PYTHONPATH="$odd"
[ "$(statuses odd)" = "$(statuses first)" ] || fail "a torch under '$odd': $(statuses odd): $(cat "$scratch/odd.err")"
odd_plugin=$(field odd "r['inventory']['runtime']['torch_plugin']")
LC_ALL=C readelf -d "$odd_plugin" | grep -qF "[$odd/torch/lib]" \
  || fail "the plugin built under '$odd' has another RUNPATH: $(LC_ALL=C readelf -d "$odd_plugin" | grep PATH)"

# No C++ compiler: PATH holds none, CXX names none.
mkdir -p "$scratch/no-compiler"
check nocxx SDPA_DOCTOR_CACHE_DIR="$scratch/cache-nocxx" PATH="$scratch/no-compiler" CXX=
[ "$(field nocxx "[f['id'] for f in r['inventory']['findings'] if 'compiler' in f['message']]")" = "['no-cxx-compiler']" ] \
  || fail "no compiler: no one finding: $(field nocxx "r['inventory']['findings']")"
[ "$(statuses nocxx)" = "[('libtorch', 'skipped'), ('reference', 'pass')]" ] || fail "no compiler: $(statuses nocxx)"
field nocxx "{c['reason'] for c in r['results'] if c['probe'] == 'libtorch'}" | grep -q "no C++ compiler was found" \
  || fail "no compiler: the libtorch cells do not say why"

# A cached plugin that is garbage: seen before it is loaded, built again, nothing crashes.
printf 'not an ELF file\n' >"$plugin"
check garbage SDPA_DOCTOR_CACHE_DIR="$cache"
grep -q "cannot be used (not an ELF file): building it again" "$scratch/garbage.err" \
  || fail "garbage plugin: not said: $(cat "$scratch/garbage.err")"
[ "$(statuses garbage)" = "$(statuses first)" ] || fail "garbage plugin: $(statuses garbage)"
[ "$(field garbage "r['inventory']['runtime']['torch_plugin']")" = "$plugin" ] || fail "garbage plugin: another plugin loaded"
echo "LibTorch plugin: built on first use, kept and reused; no compiler is a finding; a broken plugin is built again"

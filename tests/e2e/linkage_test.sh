#!/usr/bin/env bash
# Nothing of ROCm is fixed at link time: no executable or shared library of the build tree or of
# an install NEEDS the HIP runtime, ROCm SMI or AMD SMI (the workers open them at run time), and
# only the LibTorch plugin NEEDS LibTorch (the torch worker opens it with dlopen).
#   linkage_test.sh BUILD_DIR          the build tree and its `cmake --install` into a scratch prefix
#   linkage_test.sh --wheel FILE...    the files a wheel installed (wheel_install_test.sh): the same,
#                                      and nothing NEEDS libfmt or libspdlog (they are built in)
#   linkage_test.sh --wheel-linked-fmt FILE...
#                                      the same for a wheel packed from a tree that links the
#                                      system's libfmt and libspdlog (not SDPA_DOCTOR_WHEEL)
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v readelf >/dev/null || { echo "readelf not found: skipped"; exit 77; }

rocm='^(libamdhip64|librocm_smi64|libamd_smi|libhiprtc)\.'
checked=0
torch_plugin_needs=""
# check FILE FORBIDDEN-REGEX: what FILE NEEDS (nothing, if it is no ELF file)
check() {
  local file=$1 forbidden=$2 dynamic needed
  # Not an ELF file (scripts, data, archives): nothing is loaded from it.
  dynamic=$(LC_ALL=C readelf -d "$file" 2>/dev/null) || return 0
  checked=$((checked + 1))
  needed=$(sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' <<<"$dynamic")
  if grep -Eq "$forbidden" <<<"$needed"; then
    fail "$file NEEDS $(grep -E "$forbidden" <<<"$needed" | tr '\n' ' ')(left from an older build? remove it)"
  fi
  if grep -Eq '^lib(torch|torch_cpu|c10)\.so' <<<"$needed"; then
    [ "$(basename "$file")" = sdpa-doctor-torch-plugin.so ] ||
      fail "$file NEEDS LibTorch; only sdpa-doctor-torch-plugin.so may"
    torch_plugin_needs=$needed
  fi
}

if [ "${1:-}" = --wheel ] || [ "${1:-}" = --wheel-linked-fmt ]; then
  forbidden="$rocm|^lib(fmt|spdlog)\." what="a ROCm library, libfmt or libspdlog"
  [ "$1" = --wheel ] || forbidden=$rocm what="a ROCm library"
  shift
  for file in "$@"; do check "$file" "$forbidden"; done
  [ "$checked" -ge 3 ] || fail "only $checked ELF files among the wheel's $# files"
  echo "linkage (wheel): $checked ELF files, none NEEDS $what;" \
    "LibTorch only in its plugin${torch_plugin_needs:+ ($(tr '\n' ' ' <<<"$torch_plugin_needs"))}"
  exit 0
fi

build=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
while IFS= read -r -d '' file; do
  check "$file" "$rocm"
done < <(find "$build" "$scratch/prefix" -type f ! -name '*.o' ! -name '*.a' ! -path '*/CMakeFiles/*' -print0)

# The walk saw the doctor and its workers, and reads NEEDED entries where there are some.
[ "$checked" -ge 3 ] || fail "only $checked ELF files found under $build"
for exe in sdpa-doctor sdpa-doctor-enum-worker sdpa-doctor-ref-worker; do
  [ -x "$scratch/prefix/bin/$exe" ] || fail "$exe not installed"
done
readelf -d "$build/sdpa-doctor" | grep -q '(NEEDED)' || fail "readelf shows no NEEDED entry at all"
for exe in sdpa-doctor-torch-worker; do
  [ -x "$scratch/prefix/bin/$exe" ] || fail "$exe not installed"
done
if [ -f "$build/sdpa-doctor-torch-plugin.so" ]; then
  grep -q '^libc10\.so' <<<"$torch_plugin_needs" || fail "the LibTorch plugin does not NEED libc10"
fi
echo "linkage: $checked ELF files, none NEEDS a ROCm library; LibTorch only in its plugin"

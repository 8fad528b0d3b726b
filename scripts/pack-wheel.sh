#!/usr/bin/env bash
# Packs a built tree into a wheel, with no compile: `cmake --install BUILD_DIR --strip` into a
# scratch prefix, laid out as scikit-build-core lays out `pip install .` (the whole prefix in the
# wheel's data tree, which pip installs at the environment's prefix: bin/sdpa-doctor lands on its
# PATH), the LibTorch plugin included where the tree built one.
#   scripts/pack-wheel.sh [--plat TAG] BUILD_DIR [OUT_DIR]     (OUT_DIR default: dist/)
# --plat names the wheel's platform tag (default linux_ARCH, a wheel for this machine only;
# scripts/build-wheel.sh gives manylinux_2_28_x86_64 to a tree built for glibc 2.28).
# Prints the wheel's path. A tree configured with SDPA_DOCTOR_WHEEL=ON has fmt and spdlog built in
# and so runs where they are not installed; another tree's wheel needs its machine's libfmt and
# libspdlog (tests/e2e/wheel_install_test.sh packs the test build's tree this way).
set -euo pipefail
die() { echo "pack-wheel: error: $*" >&2; exit 2; }
plat=linux_$(uname -m)
if [ "${1:-}" = --plat ]; then
  [ $# -ge 2 ] && [[ $2 =~ ^[a-z0-9_]+$ ]] || die "--plat needs a platform tag (e.g. manylinux_2_28_x86_64)"
  plat=$2
  shift 2
fi
[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: scripts/pack-wheel.sh [--plat TAG] BUILD_DIR [OUT_DIR]"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$1
out=${2:-$root/dist}
[ -f "$build/CMakeCache.txt" ] || die "$build is not a CMake build tree (no CMakeCache.txt)"
[ -x "$build/sdpa-doctor" ] || die "$build has no sdpa-doctor: build it first"
command -v python3 >/dev/null || die "python3 not found"
version=$(sed -n 's/^project(sdpa-doctor VERSION \([0-9][0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
[ -n "$version" ] || die "no version in CMakeLists.txt"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cmake --install "$build" --prefix "$stage/prefix" --strip >"$stage/install.log" 2>&1 ||
  die "cmake --install $build failed: $(tail -3 "$stage/install.log")"
mkdir -p "$out"
python3 - "$stage/prefix" "$out" "$version" "$plat" <<'PY'
import base64, hashlib, os, stat, sys, zipfile

prefix, out, version, plat = sys.argv[1:5]
name = "sdpa_doctor"
data = f"{name}-{version}.data/data"
info = f"{name}-{version}.dist-info"
tag = f"py3-none-{plat}"
wheel = os.path.join(out, f"{name}-{version}-{tag}.whl")

def digest(blob):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(blob).digest()).rstrip(b"=").decode()

record = []
with zipfile.ZipFile(wheel + ".part", "w", zipfile.ZIP_DEFLATED) as z:
    def add(arcname, blob, mode=0o644):
        entry = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
        entry.external_attr = (stat.S_IFREG | mode) << 16
        entry.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(entry, blob)
        record.append(f"{arcname},{digest(blob)},{len(blob)}")
    for top, dirs, files in os.walk(prefix):
        dirs.sort()
        for f in sorted(files):
            path = os.path.join(top, f)
            if os.path.islink(path) or not os.path.isfile(path):
                continue  # a wheel holds regular files only
            rel = os.path.relpath(path, prefix)
            mode = 0o755 if os.stat(path).st_mode & 0o111 else 0o644
            with open(path, "rb") as fh:
                add(f"{data}/{rel}", fh.read(), mode)
    add(f"{info}/METADATA", (
        "Metadata-Version: 2.1\n"
        f"Name: sdpa-doctor\nVersion: {version}\n"
        "Summary: Diagnose PyTorch SDPA backends on AMD ROCm GPUs\n"
        "Requires-Python: >=3.9\n").encode())
    add(f"{info}/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: sdpa-doctor scripts/pack-wheel.sh\n"
        f"Root-Is-Purelib: false\nTag: {tag}\n").encode())
    rows = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    z.writestr(zipfile.ZipInfo(f"{info}/RECORD", date_time=(1980, 1, 1, 0, 0, 0)), rows)
os.replace(wheel + ".part", wheel)
print(wheel)
PY

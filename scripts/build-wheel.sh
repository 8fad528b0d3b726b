#!/usr/bin/env bash
# Builds the prebuilt wheel, dist/sdpa_doctor-VERSION-py3-none-manylinux_2_28_x86_64.whl: the
# doctor, its workers, the Python probe, the data and the LibTorch plugin's source (the doctor
# builds the plugin at first use where a C++ compiler exists). `pip install` of it takes seconds
# and needs no compiler and no -dev package. Then it checks the wheel: `auditwheel show`, and
# `objdump -T` over every ELF file in it (no GLIBC_ symbol version past 2.28, no GLIBCXX_ or
# CXXABI_ past what manylinux_2_28 allows, nothing NEEDED outside that policy's libraries).
#
#   scripts/build-wheel.sh [OUT_DIR]          (default: dist/; build tree: build-wheel-zig/)
#   scripts/build-wheel.sh --check WHEEL      only the checks, of a wheel built before
#
# Toolchain: Zig's C++ driver from PyPI's `ziglang`, `zig c++ -target x86_64-linux-gnu.2.28`.
# Chosen over PyPA's manylinux_2_28 container (it needs a container daemon, which these machines
# lack: their docker client reaches none) and over building on an old distro (no such machine
# here): an unprivileged pip install, and zig ships glibc 2.28's headers and link stubs, so
# the binaries ask for nothing newer from any machine it runs on, and its libc++, libc++abi and
# libunwind are linked statically, so no libstdc++ is NEEDED at all. The LibTorch plugin, built
# later by the user's g++ against torch's libstdc++, talks to the worker over a plain C interface
# (torch_plugin.h), and every function on either side of it catches everything: no C++ exception
# or object crosses between the two C++ runtimes. No -rdynamic (CMake adds none: CMP0065), so
# the executables export nothing the plugin's libraries could bind to; no full -static, which
# would leave the torch worker unable to dlopen the plugin.
# The system's /usr/include stays out of the compile (zig searches only its own libc headers for
# a cross target): the header-only CLI11, fmt, spdlog and nlohmann-json are copied from the
# distro's -dev packages into BUILD/include (SDPA_DOCTOR_HEADERS_DIR), fmt and spdlog used
# header-only.
# Needs: python3 with venv, CMake >= 3.22, Ninja, binutils (objdump, strip), and the four -dev
# packages (installed with apt-get where missing, as root). ziglang and auditwheel are installed
# from PyPI into .cache/wheel-tools. The first build also compiles zig's libc++ (cached in zig's
# global cache, ~/.cache/zig).
# Environment: SDPA_DOCTOR_WHEEL_BUILD (build tree), SDPA_DOCTOR_JOBS (default: nproc).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { printf '\033[1mbuild-wheel:\033[0m %s\n' "$*"; }
die() { printf 'build-wheel: error: %s\n' "$*" >&2; exit 2; }
check_only=""
if [ "${1:-}" = --check ]; then
  [ $# -eq 2 ] && [ -f "$2" ] || die "usage: scripts/build-wheel.sh --check WHEEL"
  check_only=$(realpath "$2")
  set --
fi
[ $# -le 1 ] || die "usage: scripts/build-wheel.sh [OUT_DIR] | --check WHEEL"
out=$(realpath -m "${1:-$here/dist}")
build=$(realpath -m "${SDPA_DOCTOR_WHEEL_BUILD:-$here/build-wheel-zig}")
jobs=${SDPA_DOCTOR_JOBS:-$(nproc 2>/dev/null || echo 2)}
[ "$(uname -m)" = x86_64 ] || die "builds x86_64 wheels only (this machine is $(uname -m))"
plat=manylinux_2_28_x86_64
glibc_max=2.28
# What manylinux_2_28 (PEP 600, auditwheel's policy) lets a wheel NEED, and its C++ runtime's
# newest symbol versions (GCC 8's libstdc++).
allowed_needed='^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libgcc_s\.so\.1|libstdc\+\+\.so\.6|ld-linux-x86-64\.so\.2)$'
glibcxx_max=3.4.25
cxxabi_max=1.3.11
ziglang_version=0.17.1
auditwheel_version=6.8.2
start=$SECONDS

# --- tools ---------------------------------------------------------------------------------------
for tool in python3 cmake ninja objdump readelf strip; do
  command -v "$tool" >/dev/null || die "$tool not found (scripts/setup.sh installs CMake, Ninja and binutils)"
done
headers=(/usr/include/fmt/core.h /usr/include/spdlog/spdlog.h /usr/include/CLI/CLI.hpp
         /usr/include/nlohmann/json.hpp)
missing=()
for h in "${headers[@]}"; do [ -f "$h" ] || missing+=("$h"); done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null ||
    die "missing ${missing[*]}: install fmt, spdlog, CLI11 and nlohmann-json's -dev packages"
  say "installing the header packages (libfmt-dev libspdlog-dev libcli11-dev nlohmann-json3-dev)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    libfmt-dev libspdlog-dev libcli11-dev nlohmann-json3-dev >/dev/null || die "apt-get install failed"
fi
tools=$here/.cache/wheel-tools
if ! "$tools/bin/python" -c "import ziglang, auditwheel" 2>/dev/null ||
   [ "$("$tools/bin/python" -m ziglang version)" != "$ziglang_version" ]; then
  say "installing ziglang $ziglang_version and auditwheel $auditwheel_version into $tools"
  python3 -m venv "$tools" || die "python3 -m venv failed (install python3-venv)"
  "$tools/bin/python" -m pip install -q --disable-pip-version-check \
    "ziglang==$ziglang_version" "auditwheel==$auditwheel_version" || die "pip install ziglang auditwheel failed"
fi

# --- check --------------------------------------------------------------------------------------
# check_wheel: $wheel passes auditwheel show and the objdump -T cross-check, and its doctor runs.
check_wheel() {
  # Every check runs and says what it found; the wheel is refused at the end if one failed.
  local problems=()
  bad() { printf 'build-wheel: %s\n' "$*" >&2; problems+=("$*"); }
  check=$(mktemp -d)
  trap 'rm -rf "$check"' EXIT
  "$tools/bin/python" -m zipfile -e "$wheel" "$check/w" >/dev/null
  say "auditwheel show"
  "$tools/bin/auditwheel" show "$wheel" | tee "$check/show.txt"
  # manylinux_2_28 or older (a build that happens to use nothing of glibc 2.28 is manylinux_2_27).
  local tag
  tag=$(tr '\n' ' ' <"$check/show.txt" | sed -n 's/.*consistent with the following platform tag: *"\([^"]*\)".*/\1/p')
  [[ $tag =~ ^manylinux_2_([0-9]+)_x86_64$ ]] && [ "${BASH_REMATCH[1]}" -le 28 ] ||
    bad "auditwheel calls the wheel '${tag:-nothing}', not manylinux_2_28 or older"
  # auditwheel must have looked at the executables in the wheel's .data: it lists what they NEED
  # (libc, libm, ...), which the data and the Python probe do not.
  tr '\n' ' ' <"$check/show.txt" | grep -q 'libc.so.6' ||
    bad "auditwheel show names no libc.so.6: it did not inspect the executables under .data"

  version_gt() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1)" != "$2" ]; } # version_gt A B: A > B
  elves=0
  while IFS= read -r -d '' file; do
    LC_ALL=C readelf -h "$file" >/dev/null 2>&1 || continue
    elves=$((elves + 1))
    rel=${file#"$check/w/"}
    symbols=$(LC_ALL=C objdump -T "$file") || die "objdump -T $rel failed"
    newest() { { grep -o "$1[0-9.]*" <<<"$symbols" || true; } | sed "s/^$1//" | sort -uV | tail -1; }
    glibc=$(newest 'GLIBC_') glibcxx=$(newest 'GLIBCXX_') cxxabi=$(newest 'CXXABI_')
    [ -z "$glibc" ] || ! version_gt "$glibc" "$glibc_max" || bad "$rel needs GLIBC_$glibc (> $glibc_max)"
    [ -z "$glibcxx" ] || ! version_gt "$glibcxx" "$glibcxx_max" || bad "$rel needs GLIBCXX_$glibcxx (> $glibcxx_max)"
    [ -z "$cxxabi" ] || ! version_gt "$cxxabi" "$cxxabi_max" || bad "$rel needs CXXABI_$cxxabi (> $cxxabi_max)"
    needed=$(LC_ALL=C readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    while IFS= read -r lib; do
      [ -z "$lib" ] || grep -Eq "$allowed_needed" <<<"$lib" || bad "$rel NEEDS $lib, which manylinux_2_28 does not allow"
    done <<<"$needed"
    # Without -rdynamic an executable exports only what the libraries it NEEDS refer to: a handful.
    exported=$(awk '$2 == "g" && $4 != "*UND*"' <<<"$symbols" | wc -l)
    [ "$exported" -le 20 ] || bad "$rel exports $exported symbols (linked with -rdynamic?)"
    printf '  %-60s GLIBC_%s%s, NEEDS %s\n' "$rel" "${glibc:-none}" \
      "${glibcxx:+ GLIBCXX_$glibcxx}" "$(tr '\n' ' ' <<<"$needed")"
  done < <(find "$check/w" -type f -print0 | sort -z)
  [ "$elves" -ge 4 ] || bad "only $elves ELF files in the wheel (the doctor and three workers expected)"
  doctor=$(echo "$check"/w/*.data/data/bin/sdpa-doctor)
  chmod +x "$doctor" # python's zipfile does not restore modes
  "$doctor" --version >/dev/null || bad "the packed sdpa-doctor does not run here"
  [ ${#problems[@]} -eq 0 ] || die "$wheel refused: ${#problems[@]} problem(s), above"
  say "objdump -T: $elves ELF files, every symbol version within manylinux_2_28 (GLIBC <= $glibc_max)"
}

[ -z "$check_only" ] || { wheel=$check_only; check_wheel; exit 0; }

# --- the toolchain: zig behind the names CMake calls ----------------------------------------------
tc=$build/toolchain
mkdir -p "$tc" "$build/include"
# The zig binary itself (not `python -m ziglang`: no interpreter start per compile).
zig=$("$tools/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
[ -x "$zig" ] || die "no zig binary at $zig"
wrapper() { # wrapper NAME ZIG-COMMAND...
  local name=$1
  shift
  printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$zig" "$*" >"$tc/$name.tmp"
  chmod +x "$tc/$name.tmp"
  mv "$tc/$name.tmp" "$tc/$name"
}
wrapper zig-c++ c++ -target x86_64-linux-gnu.$glibc_max
wrapper zig-ar ar
wrapper zig-ranlib ranlib
# The header-only libraries, and nothing else of /usr/include; their times kept, so a rebuild
# recompiles nothing they did not change.
for dir in fmt spdlog CLI nlohmann; do
  rm -rf "$build/include/$dir"
  cp -rL --preserve=timestamps "/usr/include/$dir" "$build/include/$dir"
done

# --- configure and build --------------------------------------------------------------------------
# CMAKE_EXECUTABLE_FORMAT: CMake reads it from the compiler's own file, here a shell script.
# SDPA_DOCTOR_WITH_TORCH=OFF: the wheel holds the plugin's source, not a plugin linked to the
# build machine's torch.
say "configuring $build (zig c++ $("$zig" version), target x86_64-linux-gnu.$glibc_max)"
# The release flags given, not left to CMake's compiler detection: a tree whose first configure
# failed keeps them empty (-O0) in its cache.
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O3 -DNDEBUG" \
  -DCMAKE_CXX_COMPILER="$tc/zig-c++" -DCMAKE_AR="$tc/zig-ar" -DCMAKE_RANLIB="$tc/zig-ranlib" \
  -DCMAKE_CXX_COMPILER_LAUNCHER= -DCMAKE_EXECUTABLE_FORMAT=ELF \
  -DSDPA_DOCTOR_WHEEL=ON -DSDPA_DOCTOR_WITH_TORCH=OFF -DSDPA_DOCTOR_BUILD_TESTS=OFF \
  -DSDPA_DOCTOR_BUILD_BENCH=OFF -DSDPA_DOCTOR_HEADERS_DIR="$build/include" \
  >"$build/configure.log" 2>&1 || die "cmake configure failed: $(tail -20 "$build/configure.log")"
say "building the doctor and its workers ($jobs jobs)"
build_start=$SECONDS
nice -n 10 cmake --build "$build" --target product -j "$jobs" >"$build/build.log" 2>&1 ||
  die "build failed: $(grep -m5 -A5 'error' "$build/build.log" || tail -30 "$build/build.log")"
say "built in $(( SECONDS - build_start )) s"
if grep -q -- '-rdynamic' "$build/build.ninja" "$build"/CMakeFiles/rules.ninja 2>/dev/null; then
  die "a link line has -rdynamic: the plugin's C++ runtime could bind to ours"
fi

# --- pack ---------------------------------------------------------------------------------------
wheel=$("$here/scripts/pack-wheel.sh" --plat "$plat" "$build" "$out")
say "packed $wheel ($(du -h "$wheel" | cut -f1))"
check_wheel

say "$wheel: $(stat -c %s "$wheel") bytes, in $(( SECONDS - start )) s"
echo "$wheel"

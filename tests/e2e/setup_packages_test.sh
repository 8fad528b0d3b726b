#!/usr/bin/env bash
# Every package `scripts/setup.sh --dry-run --test-packages` names for Debian 12 and 13 exists in
# that release's real package index (main, amd64), fetched by apt into a folder of its own (no
# change to this machine's apt). Exit 77 (skip) when apt or the index cannot be had. Ubuntu's
# index is not reachable from here: its names are not checked.
#   setup_packages_test.sh SOURCE_DIR CACHE_DIR
set -uo pipefail
src=$(cd "$1" && pwd)
mkdir -p "$2" && cache=$(cd "$2" && pwd) # apt takes a relative Dir:: path from /
mirror=${SDPA_TEST_DEBIAN_MIRROR:-http://deb.debian.org/debian}
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v apt-get >/dev/null && command -v apt-cache >/dev/null || { echo "SKIP: no apt here"; exit 77; }

apt_opts() { # the options that point apt at RELEASE's own sources, lists and cache
  local dir=$cache/$1
  printf '%s\n' -o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache" -o Dir::State::status=/dev/null \
    -o APT::Architecture=amd64 -o Acquire::Languages=none
}
fetch_index() { # fetch_index RELEASE: apt-get update into $cache/RELEASE (a second run only revalidates)
  local dir=$cache/$1
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  echo "deb $mirror $1 main" >"$dir/sources.list"
  local opts
  mapfile -t opts < <(apt_opts "$1")
  timeout 300 apt-get -q "${opts[@]}" update >"$dir/update.log" 2>&1 &&
    ! grep -Eq '^(E|W): ' "$dir/update.log"
}

releases=(bookworm trixie)
declare -A fixture=([bookworm]=debian-12 [trixie]=debian-13)
# Both indexes at once: most of the time is the download.
declare -A fetcher
for r in "${releases[@]}"; do fetch_index "$r" & fetcher[$r]=$!; done
for r in "${releases[@]}"; do
  if ! wait "${fetcher[$r]}"; then
    cat "$cache/$r/update.log"
    echo "SKIP: Debian's $r package index could not be fetched from $mirror (no network?)"
    exit 77
  fi
done

for r in "${releases[@]}"; do
  out=$(env -u SDPA_DOCTOR_PYTHON -u VIRTUAL_ENV -u SDPA_DOCTOR_SKIP_PACKAGES ROCM_PATH=/nonexistent \
    SDPA_DOCTOR_OS_RELEASE="$src/tests/e2e/fixtures/os-release/${fixture[$r]}" \
    "$src/scripts/setup.sh" --dry-run --test-packages 2>&1) || { echo "$out"; fail "$r: the dry run failed"; }
  read -r -a packages <<<"$(sed -n 's/^setup: packages: //p' <<<"$out")"
  [ ${#packages[@]} -gt 10 ] || { echo "$out"; fail "$r: no package list in the dry run"; }
  mapfile -t opts < <(apt_opts "$r")
  # One look-up for all: the real packages among them, with a version (a name that only something
  # else provides has none).
  found=$(apt-cache "${opts[@]}" show --no-all-versions "${packages[@]}" 2>/dev/null | sed -n 's/^Package: //p')
  missing=()
  for p in "${packages[@]}"; do grep -qx -- "$p" <<<"$found" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] || fail "Debian $r has no package: ${missing[*]}"
  echo "ok $r: all ${#packages[@]} packages exist: ${packages[*]}"
done

#!/usr/bin/env bash
# The set-up, build and tests of this checkout on a fresh Debian release, as a user of that release
# would run them: a chroot made by debootstrap (once, kept in .cache/chroot/RELEASE), the checkout
# copied in, then `scripts/setup.sh --test-packages` and ctest. Needs root (debootstrap, mount) and
# Debian's package mirror. Not part of CI: the first run takes an hour on two cores.
#
#   scripts/test-in-chroot.sh trixie [CTEST-ARG...]     e.g. -R deploy_ -j2
#   scripts/test-in-chroot.sh bookworm
#
# Torch: no torch wheel but PyPI's multi-GB CUDA build fits Debian 13's Python 3.13, so the chroot
# is set up with SDPA_DOCTOR_SKIP_TORCH=1 (no torch for the libtorch and python probes; the tests that need
# torch skip and say so) unless SDPA_DOCTOR_TORCH_INDEX names an index to take torch from.
# Environment: SDPA_CHROOT_MIRROR (default http://deb.debian.org/debian), SDPA_CHROOT_DIR.
# /proc, /sys and /dev are mounted in the chroot only while this script runs: delete the chroot
# only when it is not running (a bind mount of /dev inside would go with it).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
say() { printf 'chroot: %s\n' "$*"; }
die() { printf 'chroot: error: %s\n' "$1" >&2; exit "${2:-1}"; } # die MESSAGE [EXIT-CODE]

[ $# -ge 1 ] || die "usage: scripts/test-in-chroot.sh RELEASE [CTEST-ARG...] (RELEASE: trixie or bookworm)" 2
release=$1
shift
case "$release" in
  trixie | bookworm) ;;
  *) die "unknown release '$release' (trixie or bookworm)" 2 ;;
esac
[ "$(id -u)" -eq 0 ] || die "needs root: debootstrap and the mounts of /proc, /sys and /dev"
mirror=${SDPA_CHROOT_MIRROR:-http://deb.debian.org/debian}
root=${SDPA_CHROOT_DIR:-$here/.cache/chroot/$release}
ready=$root/.sdpa-doctor-chroot-ready
case "$(realpath -m "$root")" in
  / | "$here") die "SDPA_CHROOT_DIR=$root would be this machine's root or the checkout itself" 2 ;;
esac

# --- the chroot, once ----------------------------------------------------------------------------
if [ ! -e "$ready" ]; then
  if ! command -v debootstrap >/dev/null; then
    say "installing debootstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
      || die "could not install debootstrap"
  fi
  say "debootstrap $release into $root (minbase, from $mirror)"
  mkdir -p "$root"
  debootstrap --variant=minbase --include=ca-certificates "$release" "$root" "$mirror" \
    || die "debootstrap failed (see $root/debootstrap/debootstrap.log)"
  # Package installs must not start daemons in the chroot (munge, slurmctld): the tests start
  # their own.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
  touch "$ready"
fi

# --- the checkout, copied in (tracked files and new ones git does not ignore) ------------------
# Build trees, the venv and caches inside the chroot stay, so a second run builds incrementally.
say "copying the checkout to $root/src"
mkdir -p "$root/src"
find "$root/src" -mindepth 1 -maxdepth 1 ! -name 'build*' ! -name .venv ! -name .cache \
  -exec rm -rf {} +
(cd "$here" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf -) | tar -xf - -C "$root/src"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# This machine's own certificate authorities (e.g. a TLS-inspecting proxy's) go in too, so pip
# reaches PyPI from inside as it does from outside.
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi

# --- mounts, undone on every way out --------------------------------------------------------------
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || say "could not unmount ${mounted[i]}"
  done
}
trap cleanup EXIT
mount_in() { # mount_in TARGET MOUNT-ARG... (one left by a killed run is taken over, and undone)
  mkdir -p "$root/$1"
  mountpoint -q "$root/$1" || mount "${@:2}" "$root/$1" || die "could not mount $root/$1"
  mounted+=("$root/$1")
}
mount_in proc -t proc proc
mount_in sys -t sysfs sysfs
mount_in dev --bind /dev
mount_in dev/pts -t devpts devpts

# --- set-up, build, tests inside -----------------------------------------------------------------
torch_env=(SDPA_DOCTOR_SKIP_TORCH=1)
[ -n "${SDPA_DOCTOR_TORCH_INDEX:-}" ] && torch_env=(SDPA_DOCTOR_TORCH_INDEX="$SDPA_DOCTOR_TORCH_INDEX")
say "scripts/setup.sh --test-packages, then ctest, in $release (${torch_env[*]})"
# One quoted argument list for the shell inside: the ctest arguments pass through unchanged.
ctest_args=""
[ $# -eq 0 ] || ctest_args=$(printf '%q ' "$@")
chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=/src \
  CCACHE_NOHASHDIR=1 CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" "${torch_env[@]}" \
  bash -c "update-ca-certificates >/dev/null && cd /src && scripts/setup.sh --test-packages && ctest --preset default --timeout 900 $ctest_args"

#!/usr/bin/env bash
# The prebuilt wheel (scripts/build-wheel.sh: manylinux_2_28, no compiler needed to install) as
# its users install it:
#   prebuilt_wheel_test.sh --build SOURCE_DIR OUT_DIR
#       scripts/build-wheel.sh into OUT_DIR (the other modes take the wheel from there)
#   prebuilt_wheel_test.sh --venv SOURCE_DIR OUT_DIR
#       pip install of the wheel into a fresh venv that holds torch (scripts/setup.sh's version,
#       installed there by pip), timed; then `sdpa-doctor check` with all three probes, the
#       LibTorch plugin built at first use (a fresh cache folder) by the machine's compiler
#   prebuilt_wheel_test.sh --pipx SOURCE_DIR OUT_DIR PYTHON
#       `pipx install` of the wheel (pipx from PyPI, in a scratch PIPX_HOME and bin folder); the
#       sdpa-doctor it puts on PATH runs the reference and python probes against PYTHON's torch
#   prebuilt_wheel_test.sh --chroot SOURCE_DIR OUT_DIR
#       a bare Debian 13: a chroot with python3 and python3-venv only (no compiler, no -dev
#       package, no torch), made once per machine by debootstrap (root) and kept in
#       $SDPA_BARE_CHROOT (default /var/cache/sdpa-doctor/chroot/trixie-bare); the wheel installed
#       into a venv there and a check run: the reference probe passes, the libtorch and python
#       probes' cells are skipped, each with its finding
# Skips (77) where what a mode needs is missing (no torch for --venv and --pipx, not root for
# --chroot).
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
mode=${1:-}
[ $# -ge 3 ] || fail "usage: $0 --build|--venv|--chroot SOURCE_DIR OUT_DIR | --pipx SOURCE_DIR OUT_DIR PYTHON"
src=$(cd "$2" && pwd)
out=$3
unset VIRTUAL_ENV SDPA_DOCTOR_PYTHON SDPA_DOCTOR_DATA_DIR PYTHONPATH
now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

if [ "$mode" = --build ]; then
  rm -f "$out"/sdpa_doctor-*.whl
  "$src/scripts/build-wheel.sh" "$out" || fail "scripts/build-wheel.sh"
  # The checks see what they must: the same wheel with one more executable in its .data, built
  # here for this machine's glibc (/bin/true: GLIBC_2.34 on Debian 12 and 13), is
  # refused, by auditwheel (which reads the executables RECORD lists under .data) and by the
  # objdump cross-check alike.
  bad=$(mktemp -d)
  trap 'rm -rf "$bad"' EXIT
  wheel=$(echo "$out"/sdpa_doctor-*.whl)
  python3 - "$wheel" "$bad/$(basename "$wheel")" /bin/true <<'PY'
import base64, hashlib, shutil, sys, zipfile
src, dst, extra = sys.argv[1:4]
blob = open(extra, "rb").read()
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    data = next(n.split("/")[0] for n in zin.namelist() if ".data/" in n)
    arc = f"{data}/data/bin/sdpa-doctor-extra"
    digest = base64.urlsafe_b64encode(hashlib.sha256(blob).digest()).rstrip(b"=").decode()
    for info in zin.infolist():
        content = zin.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            content = content.replace(f"{info.filename},,".encode(),
                                      f"{arc},sha256={digest},{len(blob)}\n{info.filename},,".encode())
        zout.writestr(info, content)
    zout.writestr(arc, blob)
PY
  glibc_true=$(objdump -T /bin/true | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  case "$glibc_true" in GLIBC_2.[3-9][0-9]*) ;; *) echo "/bin/true needs only $glibc_true: the refusal is not tested"; exit 0 ;; esac
  "$src/.cache/wheel-tools/bin/auditwheel" show "$bad"/*.whl >"$bad/show.txt" 2>&1 || true
  ! grep -q 'platform tag: "manylinux_2_28_x86_64"' <(tr '\n' ' ' <"$bad/show.txt") ||
    fail "auditwheel calls a wheel holding an executable that needs $glibc_true manylinux_2_28"
  rc=0
  "$src/scripts/build-wheel.sh" --check "$bad"/*.whl >"$bad/check.txt" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] && grep -q "sdpa-doctor-extra needs $glibc_true" "$bad/check.txt" ||
    fail "build-wheel.sh --check passed a wheel with an executable that needs $glibc_true: $(tail -5 "$bad/check.txt")"
  echo "a wheel with an executable needing $glibc_true: auditwheel and build-wheel.sh --check refuse it"
  exit 0
fi
shopt -s nullglob
wheels=("$out"/sdpa_doctor-*-py3-none-manylinux_2_28_x86_64.whl)
[ ${#wheels[@]} -eq 1 ] || fail "expected one wheel in $out, found ${#wheels[@]} (run the --build mode first)"
wheel=${wheels[0]}
work=$src/.cache/prebuilt-wheel-test-${mode#--}
rm -rf "$work"
mkdir -p "$work"
[ "$mode" = --chroot ] || trap 'rm -rf "$work"' EXIT

# check_report REPORT WANT...: each WANT is PROBE=pass (every cell passed or was refused, one
# passed) or PROBE=skipped:FINDING-ID (every cell skipped, the finding present)
check_report() {
  python3 - "$@" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
cells = {}
for r in report["results"]:
    cells.setdefault(r["probe"], []).append(r["status"])
findings = {f.get("id") for f in report.get("findings", [])}
for want in sys.argv[2:]:
    probe, how = want.split("=", 1)
    got = cells.get(probe, [])
    if how == "pass":
        if "pass" not in got or any(s not in ("pass", "unsupported") for s in got):
            sys.exit(f"{probe}: cells {got}, not every one ran and passed")
    else:
        finding = how.split(":", 1)[1]
        if not got or any(s != "skipped" for s in got):
            sys.exit(f"{probe}: cells {got}, not all skipped")
        if finding not in findings:
            sys.exit(f"{probe}: no {finding} finding among {sorted(findings)}")
        print(f"{probe}: skipped, said by {finding}")
print("report: " + ", ".join(f"{p} {s.count('pass')}/{len(s)} passed, {s.count('skipped')} skipped"
                             for p, s in sorted(cells.items())))
PY
}
case_args=(--case "dtype=fp32,b=1,h=2,l=16,d=16" -q --no-oracle-cache)

case "$mode" in
--venv)
  torch_version=$(sed -n 's/^torch_version=\([0-9.]*\)$/\1/p' "$src/scripts/setup.sh")
  [ -n "$torch_version" ] || fail "no torch_version= line in scripts/setup.sh"
  command -v c++ >/dev/null || command -v g++ >/dev/null || { echo "no C++ compiler for the plugin: skipped"; exit 77; }
  python3 -m venv "$work/venv" || fail "python3 -m venv failed"
  torch_from=()
  [ -n "${SDPA_DOCTOR_TORCH_INDEX:-}" ] && torch_from=(--index-url "$SDPA_DOCTOR_TORCH_INDEX")
  "$work/venv/bin/python" -m pip install -q "torch==$torch_version" "${torch_from[@]}" >"$work/log" 2>&1 ||
    { echo "torch==$torch_version not installable here: skipped ($(tail -1 "$work/log"))"; exit 77; }
  t=$(now)
  "$work/venv/bin/python" -m pip install -q --no-index --no-deps "$wheel" >"$work/log" 2>&1 ||
    fail "pip install $wheel: $(tail -5 "$work/log")"
  echo "pip install of $(basename "$wheel") ($(du -h "$wheel" | cut -f1)): $(secs "$t") s"
  [ -x "$work/venv/bin/sdpa-doctor" ] || fail "no sdpa-doctor in the venv's bin/"
  t=$(now)
  rc=0
  # The venv's PATH as after activating it; a cache folder of its own: the plugin's first use.
  env PATH="$work/venv/bin:/usr/bin:/bin" XDG_CACHE_HOME="$work/cache" SDPA_DOCTOR_CACHE_DIR= \
    sdpa-doctor check --probe reference,libtorch,python "${case_args[@]}" --json "$work/r.json" \
    --run-dir "$work/run" >"$work/check.txt" 2>&1 || rc=$?
  echo "sdpa-doctor check (the LibTorch plugin built at first use): $(secs "$t") s"
  [ "$rc" -eq 0 ] || fail "check exited $rc: $(tail -30 "$work/check.txt")"
  check_report "$work/r.json" reference=pass libtorch=pass python=pass || fail "$(cat "$work/check.txt")"
  python3 - "$work/r.json" "$work/cache" <<'PY' || fail "the plugin"
import json, sys
runtime = json.load(open(sys.argv[1]))["inventory"]["runtime"]
plugin, origin = runtime.get("torch_plugin", ""), runtime.get("torch_plugin_origin", "")
if not plugin.startswith(sys.argv[2] + "/"):
    sys.exit(f"the plugin {plugin!r} ({origin}) is not one built at first use in the cache")
print(f"plugin: {plugin} ({origin})")
PY
  echo "prebuilt wheel: installed into a fresh venv with torch $torch_version; every probe ran"
  ;;
--pipx)
  python=$4
  "$python" -c 'import torch' >/dev/null 2>&1 || { echo "no torch in $python: skipped"; exit 77; }
  python3 -m venv "$work/tools" && "$work/tools/bin/python" -m pip install -q pipx >"$work/log" 2>&1 ||
    { echo "pipx not installable: skipped ($(tail -1 "$work/log"))"; exit 77; }
  export PIPX_HOME=$work/pipx PIPX_BIN_DIR=$work/bin PIPX_MAN_DIR=$work/man
  t=$(now)
  "$work/tools/bin/pipx" install "$wheel" >"$work/log" 2>&1 || fail "pipx install: $(cat "$work/log")"
  echo "pipx install: $(secs "$t") s"
  [ -x "$work/bin/sdpa-doctor" ] || fail "pipx put no sdpa-doctor in $work/bin: $(cat "$work/log")"
  rc=0
  env PATH="$work/bin:/usr/bin:/bin" sdpa-doctor check --probe reference,python --python "$python" \
    "${case_args[@]}" --json "$work/r.json" --run-dir "$work/run" >"$work/check.txt" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || fail "check exited $rc: $(tail -30 "$work/check.txt")"
  check_report "$work/r.json" reference=pass python=pass || fail "$(cat "$work/check.txt")"
  echo "prebuilt wheel: pipx install works; its sdpa-doctor ran the reference and python probes"
  ;;
--chroot)
  [ "$(id -u)" -eq 0 ] || { echo "not root (debootstrap, chroot, mounts): skipped"; exit 77; }
  root=${SDPA_BARE_CHROOT:-/var/cache/sdpa-doctor/chroot/trixie-bare}
  ready=$root/.sdpa-doctor-bare-ready
  case "$(realpath -m "$root")" in /) fail "SDPA_BARE_CHROOT=$root is this machine's root" ;; esac
  if [ ! -e "$ready" ]; then
    if ! command -v debootstrap >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null ||
        { echo "debootstrap not installable: skipped"; exit 77; }
    fi
    t=$(now)
    rm -rf "$root"
    mkdir -p "$root"
    debootstrap --variant=minbase --include=python3,python3-venv trixie "$root" \
      "${SDPA_CHROOT_MIRROR:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
      { echo "debootstrap failed (no mirror?): skipped: $(tail -3 "$work/debootstrap.log")"; exit 77; }
    touch "$ready"
    echo "debootstrap of a bare Debian 13: $(secs "$t") s"
  fi
  # Bare: no compiler of any name, so the plugin cannot be built there.
  for cc in c++ g++ clang++ cc gcc; do
    [ ! -e "$root/usr/bin/$cc" ] || fail "the bare chroot has /usr/bin/$cc"
  done
  mounted=()
  cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}"; done
    rm -rf "$root/test"
    rm -rf "$work"
  }
  trap cleanup EXIT
  mount_in() { mkdir -p "$root/$1"; mountpoint -q "$root/$1" || mount "${@:2}" "$root/$1" || fail "mount $root/$1"; mounted+=("$root/$1"); }
  mount_in proc -t proc proc
  mount_in dev --bind /dev
  rm -rf "$root/test"
  mkdir -p "$root/test"
  cp "$wheel" "$root/test/"
  rc=0
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c 'set -e; cd /test; python3 -m venv venv
      s=$(date +%s%N); venv/bin/python -m pip install -q --no-index --no-deps ./*.whl
      echo "pip install in the bare chroot: $(( ($(date +%s%N) - s) / 1000000 )) ms"
      rc=0; venv/bin/sdpa-doctor check --case "dtype=fp32,b=1,h=2,l=16,d=16" --no-oracle-cache \
        --json r.json --run-dir run >check.txt 2>&1 || rc=$?; echo "check exited $rc"; exit $rc' \
    >"$work/chroot.txt" 2>&1 || rc=$?
  cat "$work/chroot.txt"
  [ "$rc" -eq 0 ] || fail "in the chroot: $(cat "$root/test/check.txt" 2>/dev/null | tail -30)"
  check_report "$root/test/r.json" reference=pass libtorch=skipped:cases-skipped \
    python=skipped:python-probe-unusable || fail "$(cat "$root/test/check.txt")"
  sed -n '1,200p' "$root/test/check.txt"
  echo "prebuilt wheel: installed into a bare Debian 13 (no compiler, no torch); the reference probe passed"
  ;;
*) fail "unknown mode $mode" ;;
esac

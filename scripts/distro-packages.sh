# The system packages of every distro scripts/setup.sh supports, in one place; sourced, not run.
#
#   os_release_field FILE KEY     -> one field of an os-release file
#   distro_key OS_RELEASE_FILE    -> bookworm | trixie | jammy | noble (empty: not supported)
#   distro_packages KEY GROUP     -> package names, one per line
#   distro_cxx KEY                -> the C++ compiler to build with, where not the default g++
#
# Groups:
#   build  what `scripts/setup.sh` installs for everyone: compiler, CMake, Ninja, the libraries,
#          GoogleTest, google-benchmark, clang with libFuzzer. No HIP or ROCm package: a ROCm
#          user has AMD's under /opt/rocm (or torch's own in torch/lib), and the doctor reports
#          on those; a second, older HIP from the distro beside them only confuses both.
#   test   what `scripts/test.sh` adds: the distro's HIP runtime and ROCm SMI, so tests run
#          against a real HIP answering "no device" (and, while the build still has optional HIP
#          and ROCm SMI parts, their -dev packages and hipcc); Slurm and MUNGE for the test that
#          runs deploy/slurm under a real slurmctld and slurmd.
#
# Debian's names are checked against the real package indexes by tests/e2e/setup_packages_test.sh.
# Ubuntu's index is not reachable from where this project is tested: its names come from reading
# the Ubuntu package pages (22.04 has no HIP or ROCm SMI packages at all; 24.04 has HIP 5.7.1
# and ROCm SMI 5.7.0 in universe), and are not checked by a test.

# The minimum CMake: CMakePresets.json is version 6.
sdpa_min_cmake=3.25

os_release_field() { # os_release_field FILE KEY -> the value, quotes removed (read, never run)
  local key value
  while IFS='=' read -r key value; do
    [ "$key" = "$2" ] || continue
    value=${value#[\"\']}
    printf '%s\n' "${value%[\"\']}"
    return 0
  done <"$1"
  return 0
}

distro_key() { # distro_key OS_RELEASE_FILE
  # Ubuntu derivatives (Mint, Pop!_OS) name the Ubuntu release they follow.
  local codename
  codename=$(os_release_field "$1" UBUNTU_CODENAME)
  [ -n "$codename" ] || codename=$(os_release_field "$1" VERSION_CODENAME)
  case "$codename" in
    bookworm | trixie | jammy | noble) echo "$codename" ;;
    *) echo "" ;;
  esac
}

# Whether the distro's own CMake is older than $sdpa_min_cmake (then setup.sh takes PyPI's).
distro_cmake_too_old() { [ "$1" = jammy ]; } # Ubuntu 22.04: CMake 3.22

# The C++ compiler where the distro's default cannot build the doctor (empty: the default g++).
# Ubuntu 22.04's GCC 11 has no _Float16 in C++, which the fp16 conversions use; its g++-12 has.
distro_cxx() { if [ "$1" = jammy ]; then echo g++-12; fi; }

distro_packages() { # distro_packages KEY GROUP
  local key=$1 group=$2
  case "$group" in
    build)
      printf '%s\n' build-essential ninja-build git pkg-config python3 python3-venv python3-pip \
        help2man libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev libgtest-dev \
        libgmock-dev libbenchmark-dev clang dpkg-dev file ccache
      distro_cmake_too_old "$key" || echo cmake
      distro_cxx "$key"
      # Ubuntu 22.04's clang 14 keeps libFuzzer in libclang-common-14-dev (a dependency of clang);
      # the split-out libclang-rt-dev came with LLVM 15.
      [ "$key" = jammy ] || echo libclang-rt-dev
      ;;
    test)
      case "$key" in
        bookworm) printf '%s\n' hipcc libamdhip64-dev rocm-device-libs librocm-smi-dev ;;
        # Debian 13 and Ubuntu 24.04 name the device libraries after their LLVM.
        trixie | noble) printf '%s\n' hipcc libamdhip64-dev rocm-device-libs-17 librocm-smi-dev ;;
        jammy) ;; # no HIP or ROCm SMI packages: those tests are not built
      esac
      printf '%s\n' slurmctld slurmd slurm-client munge
      ;;
  esac
}

# The HIP and ROCm SMI packages of the test group: left out where AMD's ROCm is installed.
distro_is_rocm_package() {
  case "$1" in
    hipcc | libamdhip64-dev | rocm-device-libs* | librocm-smi-dev) return 0 ;;
    *) return 1 ;;
  esac
}

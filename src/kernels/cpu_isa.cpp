// The one probe of CPU features (cpu_isa.hpp). GCC 12's __builtin_cpu_supports does not know
// AMX or AVX512_FP16 on every libgcc, so those come from CPUID leaf 7 directly; the tile state
// also needs the kernel's consent, asked here once per process.
#include "kernels/cpu_isa.hpp"

#include <cstdlib>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace sdpa_doctor::kernels {
namespace {

// Linux 5.16+: a process must ask for the AMX tile data state (XFEATURE_XTILEDATA, 18) before
// its first tile instruction, or that instruction kills it with SIGILL. A kernel that predates
// the call, or refuses it (a seccomp filter, a hypervisor without the state), answers non-zero:
// no AMX then, never a crash.
bool amx_permission_granted() {
#if defined(__x86_64__) && defined(__linux__)
  constexpr long k_arch_get_xcomp_perm = 0x1022;
  constexpr long k_arch_req_xcomp_perm = 0x1023;
  constexpr unsigned long k_xfeature_xtiledata = 18;
  if (syscall(SYS_arch_prctl, k_arch_req_xcomp_perm, k_xfeature_xtiledata) != 0) return false;
  unsigned long granted = 0;
  if (syscall(SYS_arch_prctl, k_arch_get_xcomp_perm, &granted) != 0) return false;
  return (granted >> k_xfeature_xtiledata) & 1u;
#else
  return false;
#endif
}

int level_rank(const std::string& name) {
  if (name == "portable") return 0;
  if (name == "avx2") return 1;
  if (name == "avx512") return 2;
  if (name == "avx512bf16") return 3;
  if (name == "amx") return 4;
  return -1;
}

CpuIsa detect() {
  CpuIsa out;
  int cap = 4;
  if (const char* forced = std::getenv("SDPA_DOCTOR_CPU_ISA"); forced && *forced) {
    out.forced = forced;
    cap = level_rank(out.forced);
    if (cap < 0) {
      out.forced_note = "unknown level (amx, avx512bf16, avx512, avx2, portable): ignored";
      cap = 4;
    }
  }
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  out.x86_64_v3 = cap >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  out.avx512 = cap >= 2 && out.x86_64_v3 && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd");
  out.avx512_bf16 = cap >= 3 && out.avx512 && __builtin_cpu_supports("avx512bf16");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    out.avx512_fp16 = out.avx512 && ((edx >> 23) & 1u);
    const bool amx = ((edx >> 22) & 1u) && ((edx >> 24) & 1u); // AMX-BF16, AMX-TILE
    out.amx_bf16 = cap >= 4 && out.avx512_bf16 && amx && amx_permission_granted();
  }
#endif
  return out;
}

} // namespace

const CpuIsa& cpu_isa() {
  static const CpuIsa isa = detect();
  return isa;
}

std::string cpu_isa_level(const CpuIsa& isa) {
  if (isa.amx_bf16) return "amx";
  if (isa.avx512_bf16) return "avx512bf16";
  if (isa.avx512) return "avx512";
  if (isa.x86_64_v3) return "avx2";
  return "portable";
}

} // namespace sdpa_doctor::kernels

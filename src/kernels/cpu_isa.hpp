// kernels/cpu_isa: what this CPU runs, asked once per process, for every kernel that picks its code
// at run time (the CPU flash paths, the portable tile product, the float64 oracle's levels). One
// definition of each level, so a function compiled for it (target("arch=x86-64-v4"), the AVX-512
// target attributes of cpu_flash_avx512.hpp) is reached only on a CPU with what it may use.
// Internal to kernels; all false off x86-64 or without GCC/Clang builtins.
#pragma once

namespace sdpa_doctor::kernels {

struct CpuIsa {
  bool x86_64_v3 = false;   // AVX2, FMA, BMI1/2 (every such CPU has AVX, F16C, LZCNT, MOVBE too)
  bool avx512 = false;      // x86-64-v4: v3 and AVX-512 F, VL, BW, DQ, CD
  bool avx512_bf16 = false; // avx512 and AVX512_BF16 (vdpbf16ps)
};

// This CPU's answer, detected on the first call (safe during static initialisation).
inline const CpuIsa& cpu_isa() {
  static const CpuIsa isa = [] {
    CpuIsa out;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    out.x86_64_v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
    out.avx512 = out.x86_64_v3 && __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd");
    out.avx512_bf16 = out.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
    return out;
  }();
  return isa;
}

} // namespace sdpa_doctor::kernels

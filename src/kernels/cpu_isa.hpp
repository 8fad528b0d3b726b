// kernels/cpu_isa: what this CPU runs, asked once per process, for every kernel that picks its code
// at run time (the CPU flash paths, the portable tile product, the float64 oracle's levels). One
// definition of each level, so a function compiled for it (target("arch=x86-64-v4"), the AVX-512
// and AMX target attributes of cpu_flash_avx512.hpp) is reached only on a CPU with what it may use.
// $SDPA_DOCTOR_CPU_ISA (amx, avx512bf16, avx512, avx2, portable) caps the answer at that level,
// for tests and for users who want to compare: a level above what the CPU has gives what it has.
// Internal to kernels; all false off x86-64 or without GCC/Clang builtins.
#pragma once

#include <string>

namespace sdpa_doctor::kernels {

struct CpuIsa {
  bool x86_64_v3 = false;   // AVX2, FMA, BMI1/2 (every such CPU has AVX, F16C, LZCNT, MOVBE too)
  bool avx512 = false;      // x86-64-v4: v3 and AVX-512 F, VL, BW, DQ, CD
  bool avx512_bf16 = false; // avx512 and AVX512_BF16 (vdpbf16ps)
  bool avx512_fp16 = false; // avx512 and AVX512_FP16 (detected only: no fp32-accumulating dot)
  // avx512_bf16, AMX-TILE and AMX-BF16 (tdpbf16ps), and Linux granted this process the tile
  // state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here): a refusal leaves it false.
  bool amx_bf16 = false;
  // $SDPA_DOCTOR_CPU_ISA as read (empty: unset), and what became of it: empty when it was
  // honoured or unset, else why not (an unknown name), for whoever prints the ISA.
  std::string forced;
  std::string forced_note;
};

// This CPU's answer, capped by $SDPA_DOCTOR_CPU_ISA, detected on the first call (safe during
// static initialisation; read the variable before any thread starts).
const CpuIsa& cpu_isa();

// The best level of `isa` by the names $SDPA_DOCTOR_CPU_ISA takes: "amx", "avx512bf16",
// "avx512", "avx2" or "portable".
std::string cpu_isa_level(const CpuIsa& isa);

} // namespace sdpa_doctor::kernels

// ref-flash on the CPU: FlashAttention-2 forward, three implementations picked per call
// (cpu_flash_path_for): AVX-512 intrinsics in fp32 (cpu_flash_avx512.cpp), the same with
// AVX512_BF16 dot products when the values are bf16-exact (cpu_flash_avx512_bf16.cpp), and
// portable loops for every other CPU and as a check on the other two (cpu_flash_portable.cpp).
// This file dispatches on what the CPU supports (cpu_isa()).
#include "kernels/cpu_flash_paths.hpp"
#include "kernels/cpu_isa.hpp"
#include "kernels/parallel_for.hpp"

namespace sdpa_doctor::kernels {

std::string_view to_string(CpuFlashPath path) {
  switch (path) {
  case CpuFlashPath::automatic: return "automatic";
  case CpuFlashPath::avx512_bf16: return "avx512-bf16";
  case CpuFlashPath::avx512_f32: return "avx512-f32";
  case CpuFlashPath::portable: return "portable";
  }
  return "portable";
}

CpuFlashPath cpu_flash_path_for(const AttnParams& p) {
#ifdef SDPA_X86_PATHS
  if (cpu_isa().avx512_bf16 && p.values_rounded_to == ElemType::bf16)
    return CpuFlashPath::avx512_bf16;
  if (cpu_isa().avx512) return CpuFlashPath::avx512_f32;
#else
  (void)p;
#endif
  return CpuFlashPath::portable;
}

std::string cpu_flash_attention(const AttnParams& p, int threads, CpuFlashPath path) {
  if (p.elem != ElemType::f32) return "the CPU kernels take f32 storage";
  if (p.hkv <= 0 || p.hq % p.hkv != 0) return "query heads must be a multiple of key/value heads";
  if (path == CpuFlashPath::automatic) path = cpu_flash_path_for(p);
  if (path == CpuFlashPath::avx512_bf16 && p.values_rounded_to != ElemType::bf16)
    return "the avx512-bf16 path needs bf16-exact values (values_rounded_to bf16)";
#ifdef SDPA_X86_PATHS
  if (path == CpuFlashPath::avx512_bf16 && !cpu_isa().avx512_bf16)
    return "this CPU has no AVX512_BF16";
  if (path == CpuFlashPath::avx512_f32 && !cpu_isa().avx512) return "this CPU has no AVX-512";
#else
  if (path != CpuFlashPath::portable) return "AVX-512 paths are built for x86-64 only";
#endif
  if (p.b == 0 || p.hq == 0 || p.lq == 0 || p.d == 0) return {};
  const int n_threads = threads > 0 ? threads : default_thread_count();
#ifdef SDPA_X86_PATHS
  if (path != CpuFlashPath::portable) {
    cpu_flash_detail::x86_flash(p, path == CpuFlashPath::avx512_bf16, n_threads);
    return {};
  }
#endif
  cpu_flash_detail::portable_flash(p, n_threads);
  return {};
}

} // namespace sdpa_doctor::kernels

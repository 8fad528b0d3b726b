// ref-flash on the CPU: FlashAttention-2 forward, five implementations picked per call
// (cpu_flash_path_for): AVX-512 intrinsics in fp32 (cpu_flash_avx512.cpp), the same with
// AVX512_BF16 dot products or AMX tiles when the values are bf16-exact (cpu_flash_avx512_bf16.cpp,
// cpu_flash_amx.cpp), and portable loops with an AVX2 or a baseline micro-kernel for every other
// CPU and as a check on the others (cpu_flash_portable.cpp). This file dispatches on what the CPU
// supports (cpu_isa(), capped by $SDPA_DOCTOR_CPU_ISA).
#include "kernels/cpu_flash_paths.hpp"
#include "kernels/cpu_isa.hpp"
#include "kernels/parallel_for.hpp"

namespace sdpa_doctor::kernels {

std::string_view to_string(CpuFlashPath path) {
  switch (path) {
  case CpuFlashPath::automatic: return "automatic";
  case CpuFlashPath::amx_bf16: return "amx-bf16";
  case CpuFlashPath::avx512_bf16: return "avx512-bf16";
  case CpuFlashPath::avx512_f32: return "avx512-f32";
  case CpuFlashPath::avx2: return "avx2";
  case CpuFlashPath::portable: return "portable";
  }
  return "portable";
}

CpuFlashPath cpu_flash_path_for(const AttnParams& p) {
  const CpuIsa& isa = cpu_isa();
  const bool bf16 = p.values_rounded_to == ElemType::bf16;
#ifdef SDPA_X86_PATHS
  if (isa.amx_bf16 && bf16) return CpuFlashPath::amx_bf16;
  if (isa.avx512_bf16 && bf16) return CpuFlashPath::avx512_bf16;
  if (isa.avx512) return CpuFlashPath::avx512_f32;
#else
  (void)bf16;
#endif
  if (isa.x86_64_v3) return CpuFlashPath::avx2;
  return CpuFlashPath::portable;
}

namespace {

// Empty when this CPU (as cpu_isa() says) runs `path`; else why not, "this CPU has no ...".
std::string missing_isa(CpuFlashPath path) {
  const CpuIsa& isa = cpu_isa();
  switch (path) {
  case CpuFlashPath::amx_bf16:
    return isa.amx_bf16 ? "" : "this CPU has no AMX-BF16 (or the kernel refused its tile state)";
  case CpuFlashPath::avx512_bf16: return isa.avx512_bf16 ? "" : "this CPU has no AVX512_BF16";
  case CpuFlashPath::avx512_f32: return isa.avx512 ? "" : "this CPU has no AVX-512";
  case CpuFlashPath::avx2: return isa.x86_64_v3 ? "" : "this CPU has no AVX2";
  default: return "";
  }
}

} // namespace

std::string cpu_flash_attention(const AttnParams& p, int threads, CpuFlashPath path) {
  if (p.elem != ElemType::f32) return "the CPU kernels take f32 storage";
  if (p.hkv <= 0 || p.hq % p.hkv != 0) return "query heads must be a multiple of key/value heads";
  if (path == CpuFlashPath::automatic) path = cpu_flash_path_for(p);
  if ((path == CpuFlashPath::avx512_bf16 || path == CpuFlashPath::amx_bf16) &&
      p.values_rounded_to != ElemType::bf16)
    return "the " + std::string(to_string(path)) +
           " path needs bf16-exact values (values_rounded_to bf16)";
  if (std::string why = missing_isa(path); !why.empty()) return why;
  if (p.b == 0 || p.hq == 0 || p.lq == 0 || p.d == 0) return {};
  const int n_threads = threads > 0 ? threads : default_thread_count();
#ifdef SDPA_X86_PATHS
  using cpu_flash_detail::X86Kind;
  switch (path) {
  case CpuFlashPath::amx_bf16: cpu_flash_detail::x86_flash(p, X86Kind::amx, n_threads); return {};
  case CpuFlashPath::avx512_bf16:
    cpu_flash_detail::x86_flash(p, X86Kind::bf16, n_threads);
    return {};
  case CpuFlashPath::avx512_f32: cpu_flash_detail::x86_flash(p, X86Kind::f32, n_threads); return {};
  default: break;
  }
#endif
  cpu_flash_detail::portable_flash(p, n_threads, path == CpuFlashPath::avx2);
  return {};
}

} // namespace sdpa_doctor::kernels

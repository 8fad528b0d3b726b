// The CPU flash paths behind cpu_flash_attention (cpu_flash.cpp: the dispatch on cpu_isa()):
// portable loops (cpu_flash_portable.cpp) with an AVX2 or a baseline micro-kernel, AVX-512 fp32
// (cpu_flash_avx512.cpp), its AVX512_BF16 products (cpu_flash_avx512_bf16.cpp) and its AMX tile
// products (cpu_flash_amx.cpp). Private to kernels; no ISA flags on any file: each AVX-512 or
// AMX function carries its own target attribute and is reached only after cpu_isa() said yes,
// so one binary still runs on CPUs without them.
#pragma once

#include "kernels/attention_core.hpp"
#include "kernels/kernels.hpp"

#include <cmath>

#if defined(__x86_64__) && defined(__GNUC__)
#define SDPA_X86_PATHS 1
#endif

namespace sdpa_doctor::kernels::cpu_flash_detail {

// Query row i of head (b, h) once its keys are done: the accumulator row `acc` (d values)
// normalised into the output row of `o_head`, and its log-sum-exp where p.lse asks for it. No
// ISA attribute: both paths share it.
inline void write_output_row(const AttnParams& p, const core::RowState& st, const float* acc,
                             int64_t b, int64_t h, int64_t i, float* o_head) {
  const float f = core::row_final_scale(st);
  float* orow = o_head + i * p.o_stride_l;
  for (int64_t e = 0; e < p.d; ++e) orow[e] = acc[e] * f;
  if (p.lse)
    p.lse[(b * p.hq + h) * p.lq + i] = core::row_lse(st, [](float x) { return std::log(x); });
}

// FlashAttention-2 forward with portable loops on n_threads threads: the tile product compiled
// for x86-64-v3 (avx2; call only when cpu_isa().x86_64_v3) or for the baseline (any CPU).
void portable_flash(const AttnParams& p, int n_threads, bool avx2);

// The portable path's tile product, shared with the backward: C[rows x cols] (+)= A[rows x
// depth] . B[depth x cols], row-major, leading dimensions in elements; rows a multiple of 8,
// cols of 32. Its register block is picked once per process from the CPU's ISA.
void portable_tile_gemm(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows,
                        int64_t cols, int64_t depth, float* c, int64_t ldc, bool accumulate);

#ifdef SDPA_X86_PATHS
// The products of the AVX-512 path: fp32 FMAs, vdpbf16ps or AMX tiles (both over bf16-exact
// values, fp32 accumulation).
enum class X86Kind { f32, bf16, amx };
// The same with AVX-512 intrinsics. Call only when cpu_isa().avx512 (bf16: .avx512_bf16; amx:
// .amx_bf16) said yes.
void x86_flash(const AttnParams& p, X86Kind kind, int threads);
#endif

} // namespace sdpa_doctor::kernels::cpu_flash_detail

// The three CPU flash paths behind cpu_flash_attention (cpu_flash.cpp: the dispatch on
// cpu_isa()): portable loops (cpu_flash_portable.cpp), AVX-512 fp32 (cpu_flash_avx512.cpp) and its
// AVX512_BF16 products (cpu_flash_avx512_bf16.cpp). Private to kernels; no ISA flags on any file:
// each AVX-512 function carries its own target attribute and is reached only after
// cpu_isa() said yes, so one binary still runs on CPUs without AVX-512.
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

// FlashAttention-2 forward with portable loops (any CPU) on n_threads threads.
void portable_flash(const AttnParams& p, int n_threads);

// The portable path's tile product, shared with the backward: C[rows x cols] (+)= A[rows x
// depth] . B[depth x cols], row-major, leading dimensions in elements; rows a multiple of 8,
// cols of 32. Its register block is picked once per process from the CPU's ISA.
void portable_tile_gemm(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows,
                        int64_t cols, int64_t depth, float* c, int64_t ldc, bool accumulate);

#ifdef SDPA_X86_PATHS
// The same with AVX-512 intrinsics; bf16: vdpbf16ps products over bf16-exact values. Call only
// when cpu_isa().avx512 (and, for bf16, cpu_isa().avx512_bf16) said yes.
void x86_flash(const AttnParams& p, bool bf16, int threads);
#endif

} // namespace sdpa_doctor::kernels::cpu_flash_detail

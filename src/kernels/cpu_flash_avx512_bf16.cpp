// ref-flash on the CPU, the AVX512_BF16 half of the AVX-512 path: K and V packed as bf16 pairs
// and the Q.K^T and P.V products with vdpbf16ps (fp32 accumulation); the loop, the softmax and
// the fp32 accumulator are cpu_flash_avx512.cpp's. Every function carries the AVX512_BF16 target
// attribute and is reached only after cpu_isa().avx512_bf16 said yes.
#include "kernels/cpu_flash_avx512.hpp"

#ifdef SDPA_X86_PATHS

namespace sdpa_doctor::kernels::cpu_flash_detail {
namespace {

SDPA_AVX512_BF16 SDPA_INLINE __m512bh as_bh(__m512i x) { return __builtin_bit_cast(__m512bh, x); }

// acc += A[6 x 2 depth2] . B[2 depth2 x 16 NV] over bf16 pairs (vdpbf16ps, fp32 accumulation):
// A rows of lda bf16 (pairs along the reduction); B as pairs, (pair e2, column c) at
// b[(e2 ldb + c) 2], so pair rows are 2 ldb bf16 apart.
template <int NV>
SDPA_AVX512_BF16 SDPA_INLINE void dot_block_bf16(const uint16_t* a, int64_t lda, const uint16_t* b,
                                                 int64_t ldb, int64_t depth2, AccBlock<NV>& acc) {
  for (int64_t e2 = 0; e2 < depth2; ++e2) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int x = 0; x < NV; ++x) bv[x] = as_bh(_mm512_loadu_si512(b + (e2 * ldb + 16 * x) * 2));
#pragma GCC unroll 6
    for (int r = 0; r < k_x_rows; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * e2, sizeof pair);
      const __m512bh av = as_bh(_mm512_set1_epi32(pair));
#pragma GCC unroll 4
      for (int x = 0; x < NV; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], av, bv[x]);
    }
  }
}

// S[6 x 16 NV] = Q . K^T over bf16 pairs: q rows of ldq bf16 (pairs along d), K pairs ldk keys
// apart, S rows k_x_tile_kv apart.
template <int NV>
SDPA_AVX512_BF16 void qk_bf16(const uint16_t* q, int64_t ldq, const uint16_t* kb, int64_t ldk,
                              int64_t d2, float* s) {
  AccBlock<NV> acc;
  zero_block<NV>(acc);
  dot_block_bf16<NV>(q, ldq, kb, ldk, d2, acc);
  store_block<NV>(acc, s, k_x_tile_kv);
}

// O[6 x 16 NV] = O * alpha + P . V over bf16 pairs: pb is P (6 x 128 bf16, pairs along the
// keys), vb the chunk's first pair of a V tile (64 x dp x 2), depth2 key pairs.
template <int NV>
SDPA_AVX512_BF16 SDPA_INLINE void pv_bf16_chunk(const uint16_t* pb, const uint16_t* vb,
                                                int64_t dp, int64_t depth2, float* o, int64_t ldo,
                                                const float* alpha) {
  AccBlock<NV> acc;
  load_scaled_block<NV>(acc, o, ldo, alpha);
  dot_block_bf16<NV>(pb, k_x_tile_kv, vb, dp, depth2, acc);
  store_block<NV>(acc, o, ldo);
}

} // namespace

// K of one bf16 tile: each key row becomes 16-pair (32-bit) groups, transposed 16 keys at a time
// so that row e2 holds pair e2 of 128 keys.
SDPA_AVX512_BF16 void pack_k_bf16(const float* k, int64_t ldk, int64_t cols, int64_t d,
                                  int64_t d2, uint16_t* kb) {
  for (int64_t e0 = 0; e0 < 2 * d2; e0 += 32) {
    const __mmask16 lo = first_lanes(d - e0), hi = first_lanes(d - e0 - 16);
    for (int64_t j0 = 0; j0 < k_x_tile_kv; j0 += 16) {
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i) {
        const float* row = k + (j0 + i) * ldk + e0;
        r[i] = j0 + i < cols
                   ? __builtin_bit_cast(__m512i,
                                        _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, row + 16),
                                                            _mm512_maskz_loadu_ps(lo, row)))
                   : _mm512_setzero_si512();
      }
      transpose16(r);
      for (int64_t c = 0; c < 16 && e0 / 2 + c < d2; ++c)
        _mm512_storeu_si512(kb + ((e0 / 2 + c) * k_x_tile_kv + j0) * 2, r[c]);
    }
  }
}

// V of one bf16 tile: rows 2 j2 and 2 j2 + 1 interleaved element by element.
SDPA_AVX512_BF16 void pack_v_bf16(const float* v, int64_t ldv, int64_t cols, int64_t d,
                                  int64_t dp, uint16_t* vb) {
  for (int64_t j2 = 0; j2 < k_x_tile_kv / 2; ++j2)
    for (int64_t c0 = 0; c0 < dp; c0 += 16) {
      const __mmask16 in_d = first_lanes(d - c0);
      __m512i half[2];
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t j = 2 * j2 + k;
        const __m512 x =
            j < cols ? _mm512_maskz_loadu_ps(in_d, v + j * ldv + c0) : _mm512_setzero_ps();
        half[k] = _mm512_cvtepu16_epi32(__builtin_bit_cast(__m256i, _mm512_cvtneps_pbh(x)));
      }
      _mm512_storeu_si512(vb + (j2 * dp + c0) * 2,
                          _mm512_or_si512(half[0], _mm512_slli_epi32(half[1], 16)));
    }
}

SDPA_AVX512_BF16 void qk_bf16_keys(int64_t nv, const uint16_t* q, int64_t ldq,
                                   const uint16_t* kb, int64_t ldk, int64_t d2, float* s) {
  switch (nv) {
  case 1: qk_bf16<1>(q, ldq, kb, ldk, d2, s); break;
  case 2: qk_bf16<2>(q, ldq, kb, ldk, d2, s); break;
  case 3: qk_bf16<3>(q, ldq, kb, ldk, d2, s); break;
  default: qk_bf16<4>(q, ldq, kb, ldk, d2, s); break;
  }
}

// P (6 x 128 fp32) rounded to bf16 (nearest even, as PyTorch's reduced-precision flash does)
// into pb, then O = O * alpha + P.V over bf16 pairs.
SDPA_AVX512_BF16 void pv_bf16(const float* p, uint16_t* pb, const uint16_t* vb, int64_t dp,
                              int64_t depth2, float* o, int64_t ldo, const float* alpha) {
  for (int64_t i = 0; i < k_x_rows * k_x_tile_kv; i += 32) {
    const __m512bh two = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + i + 16), _mm512_loadu_ps(p + i));
    _mm512_storeu_si512(pb + i, __builtin_bit_cast(__m512i, two));
  }
  int64_t c0 = 0;
  for (; c0 + 64 <= dp; c0 += 64)
    pv_bf16_chunk<4>(pb, vb + 2 * c0, dp, depth2, o + c0, ldo, alpha);
  switch ((dp - c0) / 16) {
  case 1: pv_bf16_chunk<1>(pb, vb + 2 * c0, dp, depth2, o + c0, ldo, alpha); break;
  case 2: pv_bf16_chunk<2>(pb, vb + 2 * c0, dp, depth2, o + c0, ldo, alpha); break;
  case 3: pv_bf16_chunk<3>(pb, vb + 2 * c0, dp, depth2, o + c0, ldo, alpha); break;
  default: break;
  }
}

} // namespace sdpa_doctor::kernels::cpu_flash_detail

#endif // SDPA_X86_PATHS

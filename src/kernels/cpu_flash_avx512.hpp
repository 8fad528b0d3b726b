// What the AVX-512 files of the CPU flash path share (cpu_flash_avx512.cpp: the loop and its
// fp32 products; cpu_flash_avx512_bf16.cpp: the AVX512_BF16 packing and products;
// cpu_flash_amx.cpp: the AMX tile products): the target attributes, the block geometry, a few
// inline helpers and the bf16 and AMX kernels' declarations.
// Private to kernels; x86-64 with GCC or Clang only (SDPA_X86_PATHS).
#pragma once

#include "kernels/cpu_flash_paths.hpp"

#ifdef SDPA_X86_PATHS
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define SDPA_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))
#define SDPA_AVX512_BF16                                                                          \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma,avx512bf16")))
#define SDPA_AMX                                                                                  \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma,avx512bf16,amx-tile,amx-bf16")))
#define SDPA_INLINE inline __attribute__((always_inline))

// GCC 12's AVX-512 intrinsics read _mm512_undefined_ps() and trip -W(maybe-)uninitialized (GCC
// bug 105593, fixed in 12.3): silenced for these paths only. No push/pop: the two files that
// include this header hold nothing but AVX-512 code, so it stays off to their end.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace sdpa_doctor::kernels::cpu_flash_detail {

constexpr int64_t k_x_rows = 6;      // query rows of the register block
constexpr int64_t k_x_tile_q = 96;   // query rows per work item (16 register blocks)
constexpr int64_t k_x_tile_kv = 128; // keys per tile: one softmax step, one pass over O
constexpr int64_t k_x_qk_keys = 64;     // keys per Q.K^T register block: four 16-float vectors
constexpr int64_t k_amx_rows = 32;      // query rows of an AMX block: two 16-row tiles
static_assert(k_x_tile_q % k_amx_rows == 0, "a work item is whole AMX blocks");
constexpr int64_t k_amx_kv = 512;       // keys per AMX softmax step: four packed tiles
static_assert(k_amx_kv % k_x_tile_kv == 0, "an AMX step is whole packed tiles");

// Round to nearest even; the values are bf16-exact by contract, so this only drops zeros.
inline uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

SDPA_AVX512 SDPA_INLINE __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// r[i] becomes column i of the 16 x 16 matrix of 32-bit elements whose rows were r[0..15].
SDPA_AVX512 SDPA_INLINE void transpose16(__m512i* r) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Now r[4 g + k] holds, in 128-bit lane l, rows 4g..4g+3 of column 4 l + k.
  for (int k = 0; k < 4; ++k) {
    const __m512i a = _mm512_shuffle_i32x4(r[k], r[4 + k], 0x88);
    const __m512i b = _mm512_shuffle_i32x4(r[k], r[4 + k], 0xdd);
    const __m512i c = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0x88);
    const __m512i e = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0xdd);
    t[k] = _mm512_shuffle_i32x4(a, c, 0x88);      // column k
    t[4 + k] = _mm512_shuffle_i32x4(b, e, 0x88);  // column 4 + k
    t[8 + k] = _mm512_shuffle_i32x4(a, c, 0xdd);  // column 8 + k
    t[12 + k] = _mm512_shuffle_i32x4(b, e, 0xdd); // column 12 + k
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// The accumulators of one register block: k_x_rows rows of NV 16-float vectors (NV <= 4: at most
// 24 of the 32 zmm). Passed by reference between always-inline helpers, so they stay registers.
template <int NV>
using AccBlock = __m512[k_x_rows][NV];

template <int NV>
SDPA_AVX512 SDPA_INLINE void zero_block(AccBlock<NV>& acc) {
#pragma GCC unroll 6
  for (int r = 0; r < k_x_rows; ++r)
#pragma GCC unroll 4
    for (int x = 0; x < NV; ++x) acc[r][x] = _mm512_setzero_ps();
}

// acc = the block of `out` (rows ld apart), each row scaled by its alpha[r].
template <int NV>
SDPA_AVX512 SDPA_INLINE void load_scaled_block(AccBlock<NV>& acc, const float* out, int64_t ld,
                                               const float* alpha) {
#pragma GCC unroll 6
  for (int r = 0; r < k_x_rows; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
    for (int x = 0; x < NV; ++x)
      acc[r][x] = _mm512_mul_ps(_mm512_loadu_ps(out + r * ld + 16 * x), a);
  }
}

// The block of `out` (rows ld apart) = acc.
template <int NV>
SDPA_AVX512 SDPA_INLINE void store_block(const AccBlock<NV>& acc, float* out, int64_t ld) {
#pragma GCC unroll 6
  for (int r = 0; r < k_x_rows; ++r)
#pragma GCC unroll 4
    for (int x = 0; x < NV; ++x) _mm512_storeu_ps(out + r * ld + 16 * x, acc[r][x]);
}

// ---- AVX512_BF16 (cpu_flash_avx512_bf16.cpp) ----

// K of one bf16 tile (de/2 x 128 x 2 pairs along the reduction), zeros past cols and d.
SDPA_AVX512_BF16 void pack_k_bf16(const float* k, int64_t ldk, int64_t cols, int64_t d,
                                  int64_t d2, uint16_t* kb);
// V of one bf16 tile (64 x dp x 2): rows 2 j2 and 2 j2 + 1 interleaved element by element.
SDPA_AVX512_BF16 void pack_v_bf16(const float* v, int64_t ldv, int64_t cols, int64_t d,
                                  int64_t dp, uint16_t* vb);
// S[6 x 16 nv] = Q[6 x d] . K^T over bf16 pairs, nv in 1..4: q rows of ldq bf16, K pairs ldk
// keys apart, S rows k_x_tile_kv apart.
SDPA_AVX512_BF16 void qk_bf16_keys(int64_t nv, const uint16_t* q, int64_t ldq,
                                   const uint16_t* kb, int64_t ldk, int64_t d2, float* s);
// P (6 x 128 fp32) rounded to bf16 into pb, then O = O * alpha + P.V over bf16 pairs.
SDPA_AVX512_BF16 void pv_bf16(const float* p, uint16_t* pb, const uint16_t* vb, int64_t dp,
                              int64_t depth2, float* o, int64_t ldo, const float* alpha);

// ---- AMX (cpu_flash_amx.cpp) ----

// Tiles 0-7 as 16 rows x 64 bytes, on the calling thread; release before the thread moves on.
SDPA_AMX void amx_tiles_configure();
SDPA_AMX void amx_tiles_release();
// S = Q . K^T on tiles for `blocks` blocks of 32 rows over one AMX step (up to k_amx_kv keys):
// q rows of ldq bf16; K packed as pack_k_bf16 with d2 a multiple of 16, one tile of 128 keys
// every k_tile elements from kb; keys32[b] the keys block b needs (a multiple of 32; 0: none);
// S rows k_amx_kv apart, block after block.
SDPA_AMX void qk_amx(const uint16_t* q, int64_t ldq, const uint16_t* kb, int64_t k_tile,
                     int64_t d2, int64_t blocks, const int64_t* keys32, float* s);
// O = O * alpha + P.V on tiles, for the blocks with keys: P in bf16 (rows of k_amx_kv, first
// keys32[b] columns read); V packed as pack_v_bf16, one tile every v_tile elements from vb; O
// rows of ldo floats, dp a multiple of 16.
SDPA_AMX void pv_amx(const uint16_t* pb, const uint16_t* vb, int64_t v_tile, int64_t dp,
                     int64_t blocks, const int64_t* keys32, float* o, int64_t ldo,
                     const float* alpha);

} // namespace sdpa_doctor::kernels::cpu_flash_detail

#endif // SDPA_X86_PATHS

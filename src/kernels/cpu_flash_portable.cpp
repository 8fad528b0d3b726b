// ref-flash on the CPU, portable loops: FlashAttention-2 forward for every CPU (and a check on
// the AVX-512 paths). Each work item is one (batch, head, query tile); it streams key/value tiles
// through cache-sized local buffers, keeps the online-softmax state per row and normalises once
// at the end. One register-blocked micro-kernel serves Q.K^T and P.V (fixed-size loops over
// 16-float vector values, which the compiler maps onto FMA registers): the flash takes the one
// compiled for AVX2 (the avx2 path) or for the baseline (portable); the backward's is picked once
// per process from the CPU's ISA.
#include "kernels/attention_core.hpp"
#include "kernels/cpu_flash_paths.hpp"
#include "kernels/cpu_isa.hpp"
#include "kernels/parallel_for.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

// One build serves every x86-64 machine; the hot loops are cloned per ISA level and picked at
// load time, as PyTorch's own CPU kernels dispatch on AVX2/AVX-512.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define SDPA_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SDPA_ISA_CLONES
#endif

namespace sdpa_doctor::kernels::cpu_flash_detail {
namespace {

constexpr int64_t k_block_rows = 8;  // rows of every tile are padded to this (register block)
constexpr int64_t k_block_cols = 32; // micro-kernel columns: two AVX-512 or four AVX2 vectors
constexpr int64_t k_tile_q = 64;     // query rows per work item
constexpr int64_t k_tile_kv = 64;    // keys per streamed tile (D x 64 of K^T stays in L1)

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Sixteen floats as one value: GCC and Clang keep these in vector registers (one zmm, two ymm
// or four xmm, whatever the clone's ISA), which plain float arrays do not get across the loop.
// Only memcpy moves them in and out, so no function passes one by value (no ABI question).
typedef float Vec16 __attribute__((vector_size(64), aligned(4)));
constexpr int64_t k_vecs_per_block = k_block_cols / 16;

// C[Rows x 32] (+)= A[Rows x K] . B[K x 32]; all row-major with leading dimensions in elements.
template <int64_t Rows>
inline __attribute__((always_inline)) void micro_gemm(const float* __restrict a, int64_t lda,
                                                      const float* __restrict b, int64_t ldb,
                                                      int64_t depth, float* __restrict c,
                                                      int64_t ldc, bool accumulate) {
  Vec16 acc[Rows][k_vecs_per_block];
  for (int64_t r = 0; r < Rows; ++r)
    for (int64_t x = 0; x < k_vecs_per_block; ++x)
      if (accumulate)
        std::memcpy(&acc[r][x], c + r * ldc + 16 * x, sizeof(Vec16));
      else
        acc[r][x] = Vec16{};
  for (int64_t e = 0; e < depth; ++e) {
    Vec16 brow[k_vecs_per_block];
    for (int64_t x = 0; x < k_vecs_per_block; ++x)
      std::memcpy(&brow[x], b + e * ldb + 16 * x, sizeof(Vec16));
    for (int64_t r = 0; r < Rows; ++r) {
      const float av = a[r * lda + e];
      for (int64_t x = 0; x < k_vecs_per_block; ++x) acc[r][x] += av * brow[x];
    }
  }
  for (int64_t r = 0; r < Rows; ++r)
    for (int64_t x = 0; x < k_vecs_per_block; ++x)
      std::memcpy(c + r * ldc + 16 * x, &acc[r][x], sizeof(Vec16));
}

// C[rows x cols] (+)= A[rows x depth] . B[depth x cols], rows % Rows == 0, cols % 32 == 0.
template <int64_t Rows>
inline __attribute__((always_inline)) void tile_gemm_rows(const float* a, int64_t lda,
                                                          const float* b, int64_t ldb,
                                                          int64_t rows, int64_t cols,
                                                          int64_t depth, float* c, int64_t ldc,
                                                          bool accumulate) {
  for (int64_t r0 = 0; r0 < rows; r0 += Rows)
    for (int64_t c0 = 0; c0 < cols; c0 += k_block_cols)
      micro_gemm<Rows>(a + r0 * lda, lda, b + c0, ldb, depth, c + r0 * ldc + c0, ldc, accumulate);
}

using TileGemm = void (*)(const float*, int64_t, const float*, int64_t, int64_t, int64_t, int64_t,
                          float*, int64_t, bool);

// The register block follows the register file: 8 rows x 2 vectors (16 of 32 zmm) with
// AVX-512, 4 rows (16 ymm) with AVX2 and below, so that nothing spills.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__)
__attribute__((target("arch=x86-64-v4"))) void tile_gemm_v4(const float* a, int64_t lda,
                                                            const float* b, int64_t ldb,
                                                            int64_t rows, int64_t cols,
                                                            int64_t depth, float* c, int64_t ldc,
                                                            bool accumulate) {
  tile_gemm_rows<8>(a, lda, b, ldb, rows, cols, depth, c, ldc, accumulate);
}
__attribute__((target("arch=x86-64-v3"))) void tile_gemm_v3(const float* a, int64_t lda,
                                                            const float* b, int64_t ldb,
                                                            int64_t rows, int64_t cols,
                                                            int64_t depth, float* c, int64_t ldc,
                                                            bool accumulate) {
  tile_gemm_rows<4>(a, lda, b, ldb, rows, cols, depth, c, ldc, accumulate);
}
#endif
void tile_gemm_base(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows,
                    int64_t cols, int64_t depth, float* c, int64_t ldc, bool accumulate) {
  tile_gemm_rows<4>(a, lda, b, ldb, rows, cols, depth, c, ldc, accumulate);
}

TileGemm pick_tile_gemm() {
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__)
  if (cpu_isa().avx512) return tile_gemm_v4;
  if (cpu_isa().x86_64_v3) return tile_gemm_v3;
#endif
  return tile_gemm_base;
}

const TileGemm tile_gemm = pick_tile_gemm();

// Turns one row of raw dot products into probabilities against the updated running max and
// returns the factor the row's accumulator must be scaled by. `s` holds k_tile_kv scores;
// entries already at -inf stay dropped.
// Turns one tile row of scores into probabilities against the updated running max and returns
// the factor the row's accumulator must be scaled by. `s` holds k_tile_kv scores, multiplied by
// `scale` first (1 when the caller already applied scale and mask); -inf entries stay dropped.
SDPA_ISA_CLONES float softmax_row(float* __restrict s, float scale, core::RowState& st) {
  static_assert(k_tile_kv % 16 == 0);
  // Max and sum run in 16 independent lanes (Vec16): a plain float reduction may not be
  // reordered without -ffast-math, so it would stay scalar. scale > 0, so the max of the raw
  // scores times scale is the max of the scaled ones.
  Vec16 lane_max;
  std::memcpy(&lane_max, s, sizeof lane_max);
  for (int64_t j0 = 16; j0 < k_tile_kv; j0 += 16) {
    Vec16 x;
    std::memcpy(&x, s + j0, sizeof x);
    lane_max = x > lane_max ? x : lane_max;
  }
  float tile_max = core::neg_inf();
  for (int64_t l = 0; l < 16; ++l) tile_max = std::max(tile_max, lane_max[l]);
  const float alpha = core::row_rescale(st, tile_max * scale);
  const core::RowState now = st;
  for (int64_t j = 0; j < k_tile_kv; ++j) s[j] = core::row_prob(now, s[j] * scale);
  Vec16 lane_sum{};
  for (int64_t j0 = 0; j0 < k_tile_kv; j0 += 16) {
    Vec16 x;
    std::memcpy(&x, s + j0, sizeof x);
    lane_sum += x;
  }
  float sum = 0.0f;
  for (int64_t l = 0; l < 16; ++l) sum += lane_sum[l];
  st.sum += sum;
  return alpha;
}

SDPA_ISA_CLONES void scale_row(float* __restrict x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

// K and V of every (batch, kv head) repacked once per call, shared by all query tiles and by
// the query heads of a GQA group: K transposed per tile (D x k_tile_kv) so that Q.K^T streams
// contiguous rows, V with rows padded to a whole micro-kernel width, zeros past Lkv.
struct PackedKv {
  int64_t tiles = 0; // key tiles per (batch, kv head)
  int64_t dp = 0;    // head dim padded to k_block_cols
  std::vector<float> kt;
  std::vector<float> v;
  const float* kt_tile(const AttnParams& p, int64_t bk, int64_t t) const {
    return kt.data() + ((bk * tiles + t) * p.d) * k_tile_kv;
  }
  const float* v_tile(int64_t bk, int64_t t) const {
    return v.data() + (bk * tiles + t) * k_tile_kv * dp;
  }
};

PackedKv pack_kv(const AttnParams& p, int threads) {
  PackedKv pk;
  pk.tiles = (p.lkv + k_tile_kv - 1) / k_tile_kv;
  pk.dp = round_up(p.d, k_block_cols);
  const int64_t d = p.d;
  pk.kt.assign(size_t(p.b * p.hkv * pk.tiles * d * k_tile_kv), 0.0f);
  pk.v.assign(size_t(p.b * p.hkv * pk.tiles * k_tile_kv * pk.dp), 0.0f);
  parallel_for(p.b * p.hkv * pk.tiles, threads, [&](int64_t item, int) {
    const int64_t bk = item / pk.tiles;
    const int64_t t = item % pk.tiles;
    const int64_t b = bk / p.hkv;
    const int64_t hk = bk % p.hkv;
    const float* k = static_cast<const float*>(p.k) + b * p.k_stride_b + hk * p.k_stride_h;
    const float* v = static_cast<const float*>(p.v) + b * p.v_stride_b + hk * p.v_stride_h;
    float* kt = const_cast<float*>(pk.kt_tile(p, bk, t));
    float* vt = const_cast<float*>(pk.v_tile(bk, t));
    const int64_t j0 = t * k_tile_kv;
    const int64_t cols = std::min(k_tile_kv, p.lkv - j0);
    for (int64_t j = 0; j < cols; ++j) {
      const float* krow = k + (j0 + j) * p.k_stride_l;
      for (int64_t e = 0; e < d; ++e) kt[e * k_tile_kv + j] = krow[e];
      std::copy_n(v + (j0 + j) * p.v_stride_l, d, vt + j * pk.dp);
    }
  });
  return pk;
}

struct Scratch {
  std::vector<float> q, s, o;
  std::vector<core::RowState> state;
};

void flash_item(const AttnParams& p, const PackedKv& pk, TileGemm gemm, int64_t bh, int64_t qt,
                Scratch& w) {
  const int64_t b = bh / p.hq;
  const int64_t h = bh % p.hq;
  const int64_t bk = b * p.hkv + h / (p.hq / p.hkv);
  const int64_t d = p.d;
  const int64_t dp = pk.dp;
  const int64_t i0 = qt * k_tile_q;
  const int64_t rows = std::min(k_tile_q, p.lq - i0);
  const int64_t rows_pad = round_up(rows, k_block_rows);

  const float* q = static_cast<const float*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
  float* o = static_cast<float*>(p.o) + b * p.o_stride_b + h * p.o_stride_h;
  const float* mask = p.mask_kind == MaskKind::none ? nullptr : p.mask + b * p.mask_stride_b;

  w.q.assign(size_t(rows_pad * d), 0.0f);
  w.s.resize(size_t(rows_pad * k_tile_kv));
  w.o.assign(size_t(rows_pad * dp), 0.0f);
  w.state.assign(size_t(rows_pad), core::row_start());
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(q + (i0 + r) * p.q_stride_l, d, w.q.data() + r * d);

  const int64_t last_row = i0 + rows - 1;
  for (int64_t t = 0; t < pk.tiles; ++t) {
    const int64_t j0 = t * k_tile_kv;
    // Causal tile skipping: no row of this query tile sees any key from here on.
    if (p.causal && j0 > last_row + p.causal_offset) break;
    const int64_t cols = std::min(k_tile_kv, p.lkv - j0);
    gemm(w.q.data(), d, pk.kt_tile(p, bk, t), k_tile_kv, rows_pad, k_tile_kv, d, w.s.data(),
         k_tile_kv, false);

    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      float* s = w.s.data() + r * k_tile_kv;
      const bool sees_none = p.causal && j0 > i + p.causal_offset;
      const bool sees_all = (!p.causal || j0 + k_tile_kv - 1 <= i + p.causal_offset) &&
                            cols == k_tile_kv && p.mask_kind == MaskKind::none;
      if (sees_none) {
        std::fill_n(s, k_tile_kv, 0.0f);
        continue;
      }
      float alpha;
      if (sees_all) {
        alpha = softmax_row(s, p.scale, w.state[size_t(r)]);
      } else {
        const float* mrow = mask ? mask + i * p.mask_stride_q + j0 : nullptr;
        for (int64_t j = 0; j < k_tile_kv; ++j)
          s[j] = j < cols ? core::masked_score(s[j], p.scale, p.causal, p.causal_offset,
                                               p.mask_kind, mrow ? mrow[j] : 1.0f, i, j0 + j)
                          : core::neg_inf();
        alpha = softmax_row(s, 1.0f, w.state[size_t(r)]);
      }
      if (alpha != 1.0f) scale_row(w.o.data() + r * dp, dp, alpha);
    }
    gemm(w.s.data(), k_tile_kv, pk.v_tile(bk, t), dp, rows_pad, dp, k_tile_kv, w.o.data(), dp,
         true);
  }

  for (int64_t r = 0; r < rows; ++r) {
    const core::RowState& st = w.state[size_t(r)];
    write_output_row(p, st, w.o.data() + r * dp, b, h, i0 + r, o);
  }
}

} // namespace

void portable_tile_gemm(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows,
                        int64_t cols, int64_t depth, float* c, int64_t ldc, bool accumulate) {
  tile_gemm(a, lda, b, ldb, rows, cols, depth, c, ldc, accumulate);
}

void portable_flash(const AttnParams& p, int n_threads, bool avx2) {
  TileGemm gemm = tile_gemm_base;
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__)
  if (avx2 && cpu_isa().x86_64_v3) gemm = tile_gemm_v3;
#else
  (void)avx2;
#endif
  const int64_t q_tiles = (p.lq + k_tile_q - 1) / k_tile_q;
  const PackedKv packed = pack_kv(p, n_threads);
  std::vector<Scratch> scratch(static_cast<size_t>(n_threads));
  // Last query tiles first: under causal masking they carry the most keys, so handing them out
  // first keeps the threads evenly loaded at the end.
  parallel_for(p.b * p.hq * q_tiles, n_threads, [&](int64_t item, int worker) {
    const int64_t qt = q_tiles - 1 - item / (p.b * p.hq);
    flash_item(p, packed, gemm, item % (p.b * p.hq), qt, scratch[size_t(worker)]);
  });
}

} // namespace sdpa_doctor::kernels::cpu_flash_detail

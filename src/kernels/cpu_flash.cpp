// ref-flash on the CPU: FlashAttention-2 forward. Each work item is one (batch, head, query tile);
// it streams key/value tiles through cache-sized local buffers, keeps the online-softmax state
// per row and normalises once at the end. The two products (Q.K^T and P.V) share one
// register-blocked micro-kernel whose fixed-size loops the compiler turns into FMA vectors.
#include "kernels/attention_core.hpp"
#include "kernels/kernels.hpp"
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

namespace sdpa_doctor::kernels {
namespace {

constexpr int64_t k_block_rows = 4;  // micro-kernel rows (register block)
constexpr int64_t k_block_cols = 32; // micro-kernel columns: two AVX-512 or four AVX2 vectors
constexpr int64_t k_lanes = 16;      // independent partial sums/maxima per softmax row
constexpr int64_t k_tile_q = 64;     // query rows per work item
constexpr int64_t k_tile_kv = 128;   // keys per streamed tile

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Sixteen floats as one value: GCC and Clang keep these in vector registers (one zmm, two ymm
// or four xmm, whatever the clone's ISA), which plain float arrays do not get across the loop.
// Only memcpy moves them in and out, so no function passes one by value (no ABI question).
typedef float Vec16 __attribute__((vector_size(64), aligned(4)));
constexpr int64_t k_vecs_per_block = k_block_cols / 16;

// C[4 x 32] (+)= A[4 x K] . B[K x 32]; all row-major with leading dimensions in elements.
inline __attribute__((always_inline)) void micro_gemm(const float* __restrict a, int64_t lda,
                                                      const float* __restrict b, int64_t ldb,
                                                      int64_t depth, float* __restrict c,
                                                      int64_t ldc, bool accumulate) {
  Vec16 acc[k_block_rows][k_vecs_per_block];
  for (int64_t r = 0; r < k_block_rows; ++r)
    for (int64_t x = 0; x < k_vecs_per_block; ++x)
      if (accumulate)
        std::memcpy(&acc[r][x], c + r * ldc + 16 * x, sizeof(Vec16));
      else
        acc[r][x] = Vec16{};
  for (int64_t e = 0; e < depth; ++e) {
    Vec16 brow[k_vecs_per_block];
    for (int64_t x = 0; x < k_vecs_per_block; ++x)
      std::memcpy(&brow[x], b + e * ldb + 16 * x, sizeof(Vec16));
    for (int64_t r = 0; r < k_block_rows; ++r) {
      const float av = a[r * lda + e];
      for (int64_t x = 0; x < k_vecs_per_block; ++x) acc[r][x] += av * brow[x];
    }
  }
  for (int64_t r = 0; r < k_block_rows; ++r)
    for (int64_t x = 0; x < k_vecs_per_block; ++x)
      std::memcpy(c + r * ldc + 16 * x, &acc[r][x], sizeof(Vec16));
}

// C[rows x cols] (+)= A[rows x depth] . B[depth x cols], rows % 4 == 0, cols % 32 == 0.
SDPA_ISA_CLONES void tile_gemm(const float* a, int64_t lda, const float* b, int64_t ldb,
                               int64_t rows, int64_t cols, int64_t depth, float* c, int64_t ldc,
                               bool accumulate) {
  for (int64_t r0 = 0; r0 < rows; r0 += k_block_rows)
    for (int64_t c0 = 0; c0 < cols; c0 += k_block_cols)
      micro_gemm(a + r0 * lda, lda, b + c0, ldb, depth, c + r0 * ldc + c0, ldc, accumulate);
}

// Turns one row of raw dot products into probabilities against the updated running max and
// returns the factor the row's accumulator must be scaled by. `s` holds k_tile_kv scores;
// entries already at -inf stay dropped.
SDPA_ISA_CLONES float softmax_row(float* __restrict s, core::RowState& st) {
  float lane_max[k_lanes];
  for (int64_t l = 0; l < k_lanes; ++l) lane_max[l] = core::neg_inf();
  for (int64_t j0 = 0; j0 < k_tile_kv; j0 += k_lanes)
    for (int64_t l = 0; l < k_lanes; ++l) {
      const float x = s[j0 + l];
      lane_max[l] = x > lane_max[l] ? x : lane_max[l];
    }
  float tile_max = core::neg_inf();
  for (int64_t l = 0; l < k_lanes; ++l) tile_max = std::max(tile_max, lane_max[l]);
  const float alpha = core::row_rescale(st, tile_max);
  float lane_sum[k_lanes] = {};
  for (int64_t j0 = 0; j0 < k_tile_kv; j0 += k_lanes)
    for (int64_t l = 0; l < k_lanes; ++l) {
      const float p = core::row_prob(st, s[j0 + l]);
      s[j0 + l] = p;
      lane_sum[l] += p;
    }
  float sum = 0.0f;
  for (int64_t l = 0; l < k_lanes; ++l) sum += lane_sum[l];
  st.sum += sum;
  return alpha;
}

SDPA_ISA_CLONES void scale_row(float* __restrict x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

struct Scratch {
  std::vector<float> q, kt, s, v, o;
  std::vector<core::RowState> state;
};

void flash_item(const AttnParams& p, int64_t bh, int64_t qt, Scratch& w) {
  const int64_t b = bh / p.hq;
  const int64_t h = bh % p.hq;
  const int64_t hk = h / (p.hq / p.hkv);
  const int64_t d = p.d;
  const int64_t dp = round_up(d, k_block_cols);
  const int64_t i0 = qt * k_tile_q;
  const int64_t rows = std::min(k_tile_q, p.lq - i0);
  const int64_t rows_pad = round_up(rows, k_block_rows);

  const float* q = static_cast<const float*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
  const float* k = static_cast<const float*>(p.k) + b * p.k_stride_b + hk * p.k_stride_h;
  const float* v = static_cast<const float*>(p.v) + b * p.v_stride_b + hk * p.v_stride_h;
  float* o = static_cast<float*>(p.o) + b * p.o_stride_b + h * p.o_stride_h;
  const float* mask = p.mask_kind == MaskKind::none ? nullptr : p.mask + b * p.mask_stride_b;

  w.q.assign(size_t(rows_pad * d), 0.0f);
  w.kt.resize(size_t(d * k_tile_kv));
  w.s.resize(size_t(rows_pad * k_tile_kv));
  w.v.assign(size_t(k_tile_kv * dp), 0.0f);
  w.o.assign(size_t(rows_pad * dp), 0.0f);
  w.state.assign(size_t(rows_pad), core::row_start());
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(q + (i0 + r) * p.q_stride_l, d, w.q.data() + r * d);

  const int64_t last_row = i0 + rows - 1;
  for (int64_t j0 = 0; j0 < p.lkv; j0 += k_tile_kv) {
    // Causal tile skipping: no row of this query tile sees any key from here on.
    if (p.causal && j0 > last_row + p.causal_offset) break;
    const int64_t cols = std::min(k_tile_kv, p.lkv - j0);
    for (int64_t j = 0; j < cols; ++j) {
      const float* krow = k + (j0 + j) * p.k_stride_l;
      for (int64_t e = 0; e < d; ++e) w.kt[size_t(e * k_tile_kv + j)] = krow[e];
      std::copy_n(v + (j0 + j) * p.v_stride_l, d, w.v.data() + j * dp);
    }
    for (int64_t j = cols; j < k_tile_kv; ++j) {
      for (int64_t e = 0; e < d; ++e) w.kt[size_t(e * k_tile_kv + j)] = 0.0f;
      std::fill_n(w.v.data() + j * dp, dp, 0.0f);
    }
    tile_gemm(w.q.data(), d, w.kt.data(), k_tile_kv, rows_pad, k_tile_kv, d, w.s.data(),
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
      if (sees_all) {
        scale_row(s, k_tile_kv, p.scale);
      } else {
        const float* mrow = mask ? mask + i * p.mask_stride_q + j0 : nullptr;
        for (int64_t j = 0; j < k_tile_kv; ++j)
          s[j] = j < cols ? core::masked_score(s[j], p.scale, p.causal, p.causal_offset,
                                               p.mask_kind, mrow ? mrow[j] : 1.0f, i, j0 + j)
                          : core::neg_inf();
      }
      const float alpha = softmax_row(s, w.state[size_t(r)]);
      if (alpha != 1.0f) scale_row(w.o.data() + r * dp, dp, alpha);
    }
    tile_gemm(w.s.data(), k_tile_kv, w.v.data(), dp, rows_pad, dp, k_tile_kv, w.o.data(), dp,
              true);
  }

  for (int64_t r = 0; r < rows; ++r) {
    const core::RowState& st = w.state[size_t(r)];
    const float f = core::row_final_scale(st);
    float* orow = o + (i0 + r) * p.o_stride_l;
    for (int64_t e = 0; e < d; ++e) orow[e] = w.o[size_t(r * dp + e)] * f;
    if (p.lse)
      p.lse[(b * p.hq + h) * p.lq + i0 + r] =
          core::row_lse(st, [](float x) { return std::log(x); });
  }
}

} // namespace

std::string cpu_flash_attention(const AttnParams& p, int threads) {
  if (p.elem != ElemType::f32) return "the CPU kernels take f32 storage";
  if (p.hkv <= 0 || p.hq % p.hkv != 0) return "query heads must be a multiple of key/value heads";
  if (p.b == 0 || p.hq == 0 || p.lq == 0 || p.d == 0) return {};
  const int64_t q_tiles = (p.lq + k_tile_q - 1) / k_tile_q;
  const int n_threads = threads > 0 ? threads : default_thread_count();
  std::vector<Scratch> scratch(static_cast<size_t>(n_threads));
  // Last query tiles first: under causal masking they carry the most keys, so handing them out
  // first keeps the threads evenly loaded at the end.
  parallel_for(p.b * p.hq * q_tiles, n_threads, [&](int64_t item, int worker) {
    const int64_t qt = q_tiles - 1 - item / (p.b * p.hq);
    flash_item(p, item % (p.b * p.hq), qt, scratch[size_t(worker)]);
  });
  return {};
}

} // namespace sdpa_doctor::kernels

// ref-math and ref-flash on GPUs: one source for both vendors, compiled at run time for the device
// at hand (NVRTC for sm_XX, hipRTC for gfxNNNN; kernels/rtc.hpp), over the math core the CPU
// kernels share (attention_core.hpp). q, k, v and o are stored as f32, f16 or bf16; every sum,
// softmax and product is f32. The kernels never assume a wave size: the only traffic between
// lanes (a row's max and sum) stays inside groups of 16 consecutive lanes, which wave32 and
// wave64 hardware both hold whole. Every kernel takes (AttnParams, float* scores), so the host has
// one way to launch them all; the pointers live in the AttnParams.
#include "kernels/gpu_dialect.hpp"

#include "kernels/attention_core.hpp"
#include "kernels/attn_params.hpp"
#include "kernels/gpu_launch.hpp"

// The host passes sizeof(AttnParams) as it laid the struct out: a compiler that lays it out
// otherwise would read the kernels' only argument wrong, so it must refuse to compile.
#if defined(SDPA_HOST_PARAMS_SIZE)
static_assert(sizeof(sdpa_doctor::kernels::AttnParams) == SDPA_HOST_PARAMS_SIZE,
              "AttnParams is laid out differently on the device and on the host");
#endif

namespace sdpa_doctor::kernels::gpu {

// --- storage ---------------------------------------------------------------------------------
struct F16 {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};

SDPA_DEVICE float load(const float* p, int64_t i) { return p[i]; }
SDPA_DEVICE float load(const F16* p, int64_t i) { return sdpa_half_to_float(p[i].bits); }
SDPA_DEVICE float load(const Bf16* p, int64_t i) {
  return __builtin_bit_cast(float, uint32_t(p[i].bits) << 16);
}

SDPA_DEVICE void store(float* p, int64_t i, float x) { p[i] = x; }
SDPA_DEVICE void store(F16* p, int64_t i, float x) { p[i].bits = sdpa_float_to_half(x); }
SDPA_DEVICE void store(Bf16* p, int64_t i, float x) { // round to nearest even; NaN stays NaN
  const uint32_t bits = __builtin_bit_cast(uint32_t, x);
  p[i].bits = x != x ? uint16_t((bits >> 16) | 0x40u)
                     : uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

SDPA_DEVICE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Batch, query head and key/value head of the flat (b, h) index `bh`.
struct Heads {
  int64_t b, h, hk;
};
SDPA_DEVICE Heads heads_of(const AttnParams& p, int64_t bh) {
  const int64_t b = bh / p.hq, h = bh % p.hq;
  return Heads{b, h, h / (p.hq / p.hkv)};
}

SDPA_DEVICE float mask_value(const AttnParams& p, int64_t b, int64_t i, int64_t j) {
  return p.mask_kind == MaskKind::none ? 1.0f
                                       : p.mask[b * p.mask_stride_b + i * p.mask_stride_q + j];
}

// --- ref-math: scores, softmax and P.V as three plain kernels, the scores materialised --------

// Block (row, key chunk): one thread per key. Rows are (b, h, i) flattened.
template <typename T> SDPA_DEVICE void math_scores(const AttnParams& p, float* scores) {
  const int64_t row = sdpa_block_x();
  const int64_t j = sdpa_block_y() * k_math_threads + sdpa_thread_x();
  if (j >= p.lkv) return;
  const Heads hd = heads_of(p, row / p.lq);
  const int64_t i = row % p.lq;
  const T* q = static_cast<const T*>(p.q) + hd.b * p.q_stride_b + hd.h * p.q_stride_h +
               i * p.q_stride_l;
  const T* k = static_cast<const T*>(p.k) + hd.b * p.k_stride_b + hd.hk * p.k_stride_h +
               j * p.k_stride_l;
  float dot = 0.0f;
  for (int64_t e = 0; e < p.d; ++e) dot += load(q, e) * load(k, e);
  scores[row * p.lkv + j] = core::masked_score(dot, p.scale, p.causal, p.causal_offset, p.mask_kind,
                                               mask_value(p, hd.b, i, j), i, j);
}

// Block-wide reduction through shared memory, whatever the wave size.
template <bool Max> SDPA_DEVICE float block_reduce(float* red, float x) {
  const int t = sdpa_thread_x();
  red[t] = x;
  SDPA_SYNC();
  for (int half = k_math_threads / 2; half > 0; half /= 2) {
    if (t < half) red[t] = Max ? sdpa_fmax(red[t], red[t + half]) : red[t] + red[t + half];
    SDPA_SYNC();
  }
  const float all = red[0];
  SDPA_SYNC(); // red is reused by the next reduction
  return all;
}

// One block per row, in place: scores -> probabilities (a row with no visible key -> zeros).
SDPA_DEVICE void math_softmax(const AttnParams& p, float* scores) {
  SDPA_SHARED_ARRAY(float, red);
  float* row = scores + sdpa_block_x() * p.lkv;
  const int t = sdpa_thread_x();
  float m = core::neg_inf();
  for (int64_t j = t; j < p.lkv; j += k_math_threads) m = sdpa_fmax(m, row[j]);
  core::RowState st{block_reduce<true>(red, m), 0.0f};
  float sum = 0.0f;
  for (int64_t j = t; j < p.lkv; j += k_math_threads) sum += core::row_prob(st, row[j]);
  st.sum = block_reduce<false>(red, sum);
  const float f = core::row_final_scale(st);
  for (int64_t j = t; j < p.lkv; j += k_math_threads) row[j] = core::row_prob(st, row[j]) * f;
}

// Block (row, column chunk): one thread per output element.
template <typename T> SDPA_DEVICE void math_pv(const AttnParams& p, const float* probs) {
  const int64_t row = sdpa_block_x();
  const int64_t e = sdpa_block_y() * k_pv_threads + sdpa_thread_x();
  if (e >= p.d) return;
  const Heads hd = heads_of(p, row / p.lq);
  const int64_t i = row % p.lq;
  const float* prow = probs + row * p.lkv;
  const T* v = static_cast<const T*>(p.v) + hd.b * p.v_stride_b + hd.hk * p.v_stride_h + e;
  float acc = 0.0f;
  for (int64_t j = 0; j < p.lkv; ++j) acc += prow[j] * load(v, j * p.v_stride_l);
  T* o = static_cast<T*>(p.o);
  store(o, hd.b * p.o_stride_b + hd.h * p.o_stride_h + i * p.o_stride_l + e, acc);
}

// --- ref-flash: tiles of Q, K and V in shared memory, online softmax --------------------------
// 8 row groups of 16 key lanes (gpu_launch.hpp). Thread (ty, tx) owns query rows ty*TM .. +TM-1
// of the block's BM = 8*TM, scores keys tx, tx+16, ... (TN of them) of each tile of BN = 16*TN,
// and output columns tx, tx+16, ... of its rows. The 16 lanes of a row group are consecutive, so
// a row's max and sum are reduced with four shuffles inside the group.

SDPA_DEVICE float group_max(float x) {
  for (int lanes = k_key_lanes / 2; lanes > 0; lanes /= 2)
    x = sdpa_fmax(x, sdpa_shfl_xor(x, lanes));
  return x;
}
SDPA_DEVICE float group_sum(float x) {
  for (int lanes = k_key_lanes / 2; lanes > 0; lanes /= 2) x += sdpa_shfl_xor(x, lanes);
  return x;
}

// Shared memory: Q [BM][d+1], then one [BN][d+1] tile for K and then V, then P [BM][BN]. The +1
// puts the 16 rows the key lanes read at once in 16 different banks.
template <typename T, int DMAX> SDPA_DEVICE void flash_forward(const AttnParams& p) {
  constexpr int TM = flash_tm(DMAX), TN = flash_tn(DMAX);
  constexpr int BM = flash_rows(DMAX), BN = flash_keys(DMAX);
  constexpr int DC = DMAX / k_key_lanes;
  SDPA_SHARED_ARRAY(float, smem);
  const int64_t dp = p.d + 1;
  float* q_s = smem;
  float* kv_s = q_s + BM * dp;
  float* p_s = kv_s + BN * dp;

  const int tid = sdpa_thread_x();
  const int tx = tid % k_key_lanes, ty = tid / k_key_lanes;
  const int64_t tiles = (p.lq + BM - 1) / BM;
  const Heads hd = heads_of(p, sdpa_block_x() / tiles);
  const int64_t row0 = (sdpa_block_x() % tiles) * BM;
  const T* qb = static_cast<const T*>(p.q) + hd.b * p.q_stride_b + hd.h * p.q_stride_h;
  const T* kb = static_cast<const T*>(p.k) + hd.b * p.k_stride_b + hd.hk * p.k_stride_h;
  const T* vb = static_cast<const T*>(p.v) + hd.b * p.v_stride_b + hd.hk * p.v_stride_h;

  for (int64_t x = tid; x < BM * p.d; x += k_flash_threads) {
    const int64_t r = x / p.d, e = x % p.d;
    q_s[r * dp + e] = row0 + r < p.lq ? load(qb, (row0 + r) * p.q_stride_l + e) : 0.0f;
  }
  float acc[TM][DC];
  core::RowState st[TM];
  SDPA_UNROLL for (int m = 0; m < TM; ++m) {
    st[m] = core::row_start();
    SDPA_UNROLL for (int c = 0; c < DC; ++c) acc[m][c] = 0.0f;
  }
  // Causal: keys past the block's last row (plus the alignment offset) are never visible.
  const int64_t last_row = min64(row0 + BM, p.lq) - 1;
  const int64_t kv_end = p.causal ? min64(p.lkv, last_row + p.causal_offset + 1) : p.lkv;

  for (int64_t j0 = 0; j0 < kv_end; j0 += BN) {
    SDPA_SYNC(); // Q is written; the last tile's V and P are read
    for (int64_t x = tid; x < BN * p.d; x += k_flash_threads) {
      const int64_t jj = x / p.d, e = x % p.d;
      kv_s[jj * dp + e] = j0 + jj < p.lkv ? load(kb, (j0 + jj) * p.k_stride_l + e) : 0.0f;
    }
    SDPA_SYNC();
    float s[TM][TN];
    SDPA_UNROLL for (int m = 0; m < TM; ++m)
      SDPA_UNROLL for (int n = 0; n < TN; ++n) s[m][n] = 0.0f;
    for (int64_t e = 0; e < p.d; ++e) {
      float qv[TM], kv[TN];
      SDPA_UNROLL for (int m = 0; m < TM; ++m) qv[m] = q_s[(ty * TM + m) * dp + e];
      SDPA_UNROLL for (int n = 0; n < TN; ++n) kv[n] = kv_s[(tx + n * k_key_lanes) * dp + e];
      SDPA_UNROLL for (int m = 0; m < TM; ++m)
        SDPA_UNROLL for (int n = 0; n < TN; ++n) s[m][n] += qv[m] * kv[n];
    }
    SDPA_UNROLL for (int m = 0; m < TM; ++m) {
      const int64_t i = row0 + ty * TM + m;
      float tile_max = core::neg_inf();
      SDPA_UNROLL for (int n = 0; n < TN; ++n) {
        const int64_t j = j0 + tx + n * k_key_lanes;
        s[m][n] = i < p.lq && j < p.lkv
                      ? core::masked_score(s[m][n], p.scale, p.causal, p.causal_offset,
                                           p.mask_kind, mask_value(p, hd.b, i, j), i, j)
                      : core::neg_inf();
        tile_max = sdpa_fmax(tile_max, s[m][n]);
      }
      const float alpha = core::row_rescale(st[m], group_max(tile_max));
      float sum = 0.0f;
      SDPA_UNROLL for (int n = 0; n < TN; ++n) {
        const float prob = core::row_prob(st[m], s[m][n]);
        p_s[(ty * TM + m) * BN + tx + n * k_key_lanes] = prob;
        sum += prob;
      }
      st[m].sum += group_sum(sum);
      SDPA_UNROLL for (int c = 0; c < DC; ++c) acc[m][c] *= alpha;
    }
    SDPA_SYNC(); // K is read: its tile takes V
    for (int64_t x = tid; x < BN * p.d; x += k_flash_threads) {
      const int64_t jj = x / p.d, e = x % p.d;
      kv_s[jj * dp + e] = j0 + jj < p.lkv ? load(vb, (j0 + jj) * p.v_stride_l + e) : 0.0f;
    }
    SDPA_SYNC();
    const int keys = int(min64(BN, p.lkv - j0));
    for (int jj = 0; jj < keys; ++jj) {
      float vv[DC];
      SDPA_UNROLL for (int c = 0; c < DC; ++c) {
        const int64_t e = tx + c * k_key_lanes;
        vv[c] = e < p.d ? kv_s[jj * dp + e] : 0.0f;
      }
      SDPA_UNROLL for (int m = 0; m < TM; ++m) {
        const float pm = p_s[(ty * TM + m) * BN + jj];
        SDPA_UNROLL for (int c = 0; c < DC; ++c) acc[m][c] += pm * vv[c];
      }
    }
  }

  T* o = static_cast<T*>(p.o);
  SDPA_UNROLL for (int m = 0; m < TM; ++m) {
    const int64_t i = row0 + ty * TM + m;
    if (i >= p.lq) break;
    const float f = core::row_final_scale(st[m]);
    const int64_t base = hd.b * p.o_stride_b + hd.h * p.o_stride_h + i * p.o_stride_l;
    SDPA_UNROLL for (int c = 0; c < DC; ++c) {
      const int64_t e = tx + c * k_key_lanes;
      if (e < p.d) store(o, base + e, acc[m][c] * f);
    }
    if (p.lse && tx == 0)
      p.lse[(hd.b * p.hq + hd.h) * p.lq + i] =
          core::row_lse(st[m], [](float x) { return sdpa_log(x); });
  }
}

} // namespace sdpa_doctor::kernels::gpu

// --- entry points: sdpa_<kernel>_<storage>[_d<max head dim>] -----------------------------------
// The host (gpu_run.cpp) names them the same way, one ref-flash entry per head-dim bucket.
// -DSDPA_WITH_MATH=0 or -DSDPA_WITH_FLASH=0 leaves one kernel's entries out (a shorter compile).
#ifndef SDPA_WITH_MATH
#define SDPA_WITH_MATH 1
#endif
#ifndef SDPA_WITH_FLASH
#define SDPA_WITH_FLASH 1
#endif

#if SDPA_WITH_FLASH
#define SDPA_FLASH_ENTRY(storage, T, dmax)                                                         \
  SDPA_KERNEL(sdpa_doctor::kernels::gpu::k_flash_threads)                                         \
  sdpa_flash_##storage##_d##dmax(sdpa_doctor::kernels::AttnParams p, float*) {                    \
    sdpa_doctor::kernels::gpu::flash_forward<T, dmax>(p);                                         \
  }
#define SDPA_FLASH_ENTRIES(storage, T)                                                             \
  SDPA_FLASH_ENTRY(storage, T, 64)                                                                 \
  SDPA_FLASH_ENTRY(storage, T, 128)                                                                \
  SDPA_FLASH_ENTRY(storage, T, 256)
SDPA_FLASH_ENTRIES(f32, float)
SDPA_FLASH_ENTRIES(f16, sdpa_doctor::kernels::gpu::F16)
SDPA_FLASH_ENTRIES(bf16, sdpa_doctor::kernels::gpu::Bf16)
#endif

#if SDPA_WITH_MATH
#define SDPA_MATH_ENTRIES(storage, T)                                                              \
  SDPA_KERNEL(sdpa_doctor::kernels::gpu::k_math_threads)                                          \
  sdpa_math_scores_##storage(sdpa_doctor::kernels::AttnParams p, float* scores) {                 \
    sdpa_doctor::kernels::gpu::math_scores<T>(p, scores);                                         \
  }                                                                                                \
  SDPA_KERNEL(sdpa_doctor::kernels::gpu::k_pv_threads)                                            \
  sdpa_math_pv_##storage(sdpa_doctor::kernels::AttnParams p, float* scores) {                     \
    sdpa_doctor::kernels::gpu::math_pv<T>(p, scores);                                             \
  }
SDPA_MATH_ENTRIES(f32, float)
SDPA_MATH_ENTRIES(f16, sdpa_doctor::kernels::gpu::F16)
SDPA_MATH_ENTRIES(bf16, sdpa_doctor::kernels::gpu::Bf16)

SDPA_KERNEL(sdpa_doctor::kernels::gpu::k_math_threads)
sdpa_math_softmax(sdpa_doctor::kernels::AttnParams p, float* scores) {
  sdpa_doctor::kernels::gpu::math_softmax(p, scores);
}
#endif

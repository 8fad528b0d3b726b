// ref-flash's backward on the CPU: FlashAttention-2's backward in fp32 with portable loops. The
// forward saved O and each row's log-sum-exp; here every 64 x 64 tile of (query rows, keys)
// recomputes S = Q.K^T and P = exp(S - lse) from them, dP = dO.V^T and dS = P (dP - D_i) with
// D_i = dO_i . O_i, as the GPU kernels do. Where a GPU kernel adds each tile's dQ with atomics,
// here two kinds of work item each own what they write (so the result does not depend on the
// thread count), at the price of computing S and dP twice:
//  - (batch, kv head, key tile): dV += P^T.dO and dK += dS^T.Q over every query head of the
//    group (GQA) and every query tile that sees the keys;
//  - (batch, query head, query tile): dQ += dS.K over every key tile the rows see.
// Every product is the forward's portable tile micro-kernel (portable_tile_gemm).
#include "kernels/attention_core.hpp"
#include "kernels/cpu_flash_paths.hpp"
#include "kernels/parallel_for.hpp"

#include <algorithm>
#include <vector>

namespace sdpa_doctor::kernels {
namespace {

constexpr int64_t k_tile = 64; // query rows and keys of a tile (multiples of 8 and 32)

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The operands packed once per call, zeros past every edge. Per (batch, kv head): K^T and V^T
// in tiles of 64 keys (D x 64), the B operands of S and dP; K row-major (Lkv_pad x Dp), the B
// operand of dQ. Per (batch, query head): Q and dO row-major (Lq_pad x Dp), A operands of S and
// dP and B operands of dK and dV; D_i and the lse (-inf past Lq: no gradient).
struct Packed {
  int64_t lq_pad = 0, lkv_pad = 0, dp = 0, d = 0;
  std::vector<float> kt, vt, k, q, dout, delta, lse;
  float* kt_tile(int64_t bk, int64_t j0) { return kt.data() + (bk * lkv_pad + j0) * d; }
  float* vt_tile(int64_t bk, int64_t j0) { return vt.data() + (bk * lkv_pad + j0) * d; }
  float* k_rows(int64_t bk) { return k.data() + bk * lkv_pad * dp; }
  float* q_rows(int64_t bh) { return q.data() + bh * lq_pad * dp; }
  float* dout_rows(int64_t bh) { return dout.data() + bh * lq_pad * dp; }
};

void pack_key_tile(const AttnParams& p, Packed& pk, int64_t bk, int64_t j0) {
  const int64_t b = bk / p.hkv;
  const int64_t hk = bk % p.hkv;
  const float* k = static_cast<const float*>(p.k) + b * p.k_stride_b + hk * p.k_stride_h;
  const float* v = static_cast<const float*>(p.v) + b * p.v_stride_b + hk * p.v_stride_h;
  float* kt = pk.kt_tile(bk, j0);
  float* vt = pk.vt_tile(bk, j0);
  float* kr = pk.k_rows(bk) + j0 * pk.dp;
  for (int64_t j = 0; j < std::min(k_tile, p.lkv - j0); ++j) {
    const float* krow = k + (j0 + j) * p.k_stride_l;
    const float* vrow = v + (j0 + j) * p.v_stride_l;
    for (int64_t e = 0; e < p.d; ++e) {
      kt[e * k_tile + j] = krow[e];
      vt[e * k_tile + j] = vrow[e];
    }
    std::copy_n(krow, p.d, kr + j * pk.dp);
  }
}

void pack_query_tile(const AttnParams& p, const AttnGrads& g, Packed& pk, int64_t bh,
                     int64_t i0) {
  const int64_t b = bh / p.hq;
  const int64_t h = bh % p.hq;
  const float* q = static_cast<const float*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
  const float* o = static_cast<const float*>(p.o) + b * p.o_stride_b + h * p.o_stride_h;
  const float* go = g.dout + b * p.o_stride_b + h * p.o_stride_h;
  float* qr = pk.q_rows(bh) + i0 * pk.dp;
  float* dr = pk.dout_rows(bh) + i0 * pk.dp;
  for (int64_t r = 0; r < k_tile; ++r) {
    const int64_t i = i0 + r;
    float* lse = pk.lse.data() + bh * pk.lq_pad + i;
    if (i >= p.lq) {
      *lse = core::neg_inf();
      continue;
    }
    *lse = p.lse[bh * p.lq + i];
    std::copy_n(q + i * p.q_stride_l, p.d, qr + r * pk.dp);
    std::copy_n(go + i * p.o_stride_l, p.d, dr + r * pk.dp);
    float dot = 0.0f;
    for (int64_t e = 0; e < p.d; ++e) dot += go[i * p.o_stride_l + e] * o[i * p.o_stride_l + e];
    pk.delta[size_t(bh * pk.lq_pad + i)] = dot;
  }
}

struct Scratch {
  std::vector<float> p, ds, pt, dst; // 64 x 64 tiles: P, dS and their transposes
  std::vector<float> acc_a, acc_b;   // 64 x Dp: dQ, or dK and dV
};

// Query rows [i0, i0 + 64) of head bh against keys [j0, j0 + 64) of its kv head bk: P into w.p
// and dS into w.ds, zeros where a key is dropped or past an edge.
void tile_p_ds(const AttnParams& p, Packed& pk, int64_t bh, int64_t bk, int64_t i0, int64_t j0,
               Scratch& w) {
  const float* mask =
      p.mask_kind == MaskKind::none ? nullptr : p.mask + bh / p.hq * p.mask_stride_b;
  cpu_flash_detail::portable_tile_gemm(pk.q_rows(bh) + i0 * pk.dp, pk.dp, pk.kt_tile(bk, j0),
                                       k_tile, k_tile, k_tile, p.d, w.p.data(), k_tile, false);
  cpu_flash_detail::portable_tile_gemm(pk.dout_rows(bh) + i0 * pk.dp, pk.dp, pk.vt_tile(bk, j0),
                                       k_tile, k_tile, k_tile, p.d, w.ds.data(), k_tile, false);
  const int64_t cols = std::min(k_tile, p.lkv - j0);
  for (int64_t r = 0; r < k_tile; ++r) {
    const int64_t i = i0 + r;
    float* s = w.p.data() + r * k_tile;
    float* ds = w.ds.data() + r * k_tile;
    const float lse = pk.lse[size_t(bh * pk.lq_pad + i)];
    if (lse == core::neg_inf()) { // past Lq, or nothing to attend to: no gradient
      std::fill_n(s, k_tile, 0.0f);
      std::fill_n(ds, k_tile, 0.0f);
      continue;
    }
    const float di = pk.delta[size_t(bh * pk.lq_pad + i)];
    // Every key of the tile visible: a branch-free loop that the compiler vectorises.
    if (p.mask_kind == MaskKind::none && cols == k_tile &&
        (!p.causal || j0 + k_tile - 1 <= i + p.causal_offset)) {
      for (int64_t j = 0; j < k_tile; ++j) {
        s[j] = core::exp_nonpositive(s[j] * p.scale - lse);
        ds[j] = s[j] * (ds[j] - di);
      }
      continue;
    }
    const float* mrow = mask ? mask + i * p.mask_stride_q + j0 : nullptr;
    for (int64_t j = 0; j < k_tile; ++j) {
      const float score =
          j < cols ? core::masked_score(s[j], p.scale, p.causal, p.causal_offset, p.mask_kind,
                                        mrow ? mrow[j] : 1.0f, i, j0 + j)
                   : core::neg_inf();
      s[j] = score == core::neg_inf() ? 0.0f : core::exp_nonpositive(score - lse);
      ds[j] = s[j] * (ds[j] - di);
    }
  }
}

void transpose_tile(const float* in, float* out) {
  for (int64_t r = 0; r < k_tile; ++r)
    for (int64_t j = 0; j < k_tile; ++j) out[j * k_tile + r] = in[r * k_tile + j];
}

} // namespace

std::string cpu_flash_attention_backward(const AttnParams& p, const AttnGrads& g, int threads) {
  if (p.elem != ElemType::f32) return "the CPU kernels take f32 storage";
  if (p.hkv <= 0 || p.hq % p.hkv != 0) return "query heads must be a multiple of key/value heads";
  if (!p.o || !p.lse) return "the flash backward needs the forward's output and log-sum-exp";
  if (p.b == 0 || p.hq == 0 || p.lq == 0 || p.d == 0) return {};
  const int n_threads = threads > 0 ? threads : default_thread_count();
  const int64_t group = p.hq / p.hkv;
  Packed pk;
  pk.d = p.d;
  pk.dp = round_up(p.d, 32);
  pk.lq_pad = round_up(p.lq, k_tile);
  pk.lkv_pad = round_up(std::max<int64_t>(p.lkv, 1), k_tile);
  const int64_t kv_heads = p.b * p.hkv;
  const int64_t q_heads = p.b * p.hq;
  pk.kt.assign(size_t(kv_heads * pk.lkv_pad * p.d), 0.0f);
  pk.vt.assign(pk.kt.size(), 0.0f);
  pk.k.assign(size_t(kv_heads * pk.lkv_pad * pk.dp), 0.0f);
  pk.q.assign(size_t(q_heads * pk.lq_pad * pk.dp), 0.0f);
  pk.dout.assign(pk.q.size(), 0.0f);
  pk.delta.assign(size_t(q_heads * pk.lq_pad), 0.0f);
  pk.lse.assign(pk.delta.size(), 0.0f);
  const int64_t key_tiles = pk.lkv_pad / k_tile;
  const int64_t query_tiles = pk.lq_pad / k_tile;
  std::vector<Scratch> scratch(static_cast<size_t>(n_threads));
  for (Scratch& w : scratch) {
    for (auto* t : {&w.p, &w.ds, &w.pt, &w.dst}) t->resize(size_t(k_tile * k_tile));
    w.acc_a.resize(size_t(k_tile * pk.dp));
    w.acc_b.resize(size_t(k_tile * pk.dp));
  }

  auto pack = [&](int64_t it, int) {
    if (it < kv_heads * key_tiles)
      pack_key_tile(p, pk, it / key_tiles, it % key_tiles * k_tile);
    else
      pack_query_tile(p, g, pk, (it - kv_heads * key_tiles) / query_tiles,
                      (it - kv_heads * key_tiles) % query_tiles * k_tile);
  };
  const int64_t dp = pk.dp;
  auto dkdv = [&](int64_t bk, int64_t j0, Scratch& w) {
    std::fill(w.acc_a.begin(), w.acc_a.end(), 0.0f);
    std::fill(w.acc_b.begin(), w.acc_b.end(), 0.0f);
    // Causal: rows i < j0 - offset see none of these keys; start at their tile.
    const int64_t first_row = p.causal ? std::max<int64_t>(0, j0 - p.causal_offset) : 0;
    for (int64_t bh = bk / p.hkv * p.hq + bk % p.hkv * group;
         bh < bk / p.hkv * p.hq + (bk % p.hkv + 1) * group; ++bh)
      for (int64_t i0 = first_row / k_tile * k_tile; i0 < p.lq; i0 += k_tile) {
        tile_p_ds(p, pk, bh, bk, i0, j0, w);
        transpose_tile(w.p.data(), w.pt.data());
        transpose_tile(w.ds.data(), w.dst.data());
        cpu_flash_detail::portable_tile_gemm(w.pt.data(), k_tile, pk.dout_rows(bh) + i0 * dp, dp,
                                             k_tile, dp, k_tile, w.acc_b.data(), dp, true);
        cpu_flash_detail::portable_tile_gemm(w.dst.data(), k_tile, pk.q_rows(bh) + i0 * dp, dp,
                                             k_tile, dp, k_tile, w.acc_a.data(), dp, true);
      }
    const int64_t b = bk / p.hkv;
    const int64_t hk = bk % p.hkv;
    float* dk = g.dk + b * p.k_stride_b + hk * p.k_stride_h;
    float* dv = g.dv + b * p.v_stride_b + hk * p.v_stride_h;
    for (int64_t r = 0; r < std::min(k_tile, p.lkv - j0); ++r)
      for (int64_t e = 0; e < p.d; ++e) {
        dk[(j0 + r) * p.k_stride_l + e] = w.acc_a[size_t(r * dp + e)] * p.scale;
        dv[(j0 + r) * p.v_stride_l + e] = w.acc_b[size_t(r * dp + e)];
      }
  };
  auto dq = [&](int64_t bh, int64_t i0, Scratch& w) {
    const int64_t bk = bh / p.hq * p.hkv + bh % p.hq / group;
    std::fill(w.acc_a.begin(), w.acc_a.end(), 0.0f);
    // Causal: no row of this tile sees a key past its last row's.
    const int64_t keys =
        p.causal ? std::clamp<int64_t>(i0 + k_tile + p.causal_offset, 0, p.lkv) : p.lkv;
    for (int64_t j0 = 0; j0 < keys; j0 += k_tile) {
      tile_p_ds(p, pk, bh, bk, i0, j0, w);
      cpu_flash_detail::portable_tile_gemm(w.ds.data(), k_tile, pk.k_rows(bk) + j0 * dp, dp,
                                           k_tile, dp, k_tile, w.acc_a.data(), dp, true);
    }
    const int64_t b = bh / p.hq;
    const int64_t h = bh % p.hq;
    float* out = g.dq + b * p.q_stride_b + h * p.q_stride_h;
    for (int64_t r = 0; r < std::min(k_tile, p.lq - i0); ++r)
      for (int64_t e = 0; e < p.d; ++e)
        out[(i0 + r) * p.q_stride_l + e] = w.acc_a[size_t(r * dp + e)] * p.scale;
  };
  // dK/dV items first (the first key tiles see the most rows under the causal rule), then the
  // dQ items, last query tiles first.
  auto item = [&](int64_t it, int worker) {
    Scratch& w = scratch[size_t(worker)];
    if (it < kv_heads * key_tiles) return dkdv(it / key_tiles, it % key_tiles * k_tile, w);
    it -= kv_heads * key_tiles;
    dq(it % q_heads, (query_tiles - 1 - it / q_heads) * k_tile, w);
  };
  parallel_for_two_phase(kv_heads * key_tiles + q_heads * query_tiles, pack,
                         kv_heads * key_tiles + q_heads * query_tiles, item, n_threads);
  return {};
}

} // namespace sdpa_doctor::kernels

// The float64 oracle's gradients, blocked: the same function as the row-wise backward
// (oracle_backward.cpp), with the forward oracle's packing, micro-kernel and exp (oracle_simd.hpp),
// so that a backward case of the full suite costs seconds, not minutes. The two agree to float64
// rounding: the tests hold them to 1e-12 relative.
//
// How: the blocked forward first gives each row's output O and log-sum-exp, so a tile's
// probabilities are exp(score - lse) wherever they are needed, and D_i = dO_i . O_i stands for
// sum_j P_ij dP_ij. Then two kinds of work item, each the sole writer of what it writes, so no
// item waits on another and the result does not depend on the thread count:
//  - (batch, kv head, block of 64 keys): dK and dV of those keys, summed over every query head
//    of the group (GQA) and every query block that sees them;
//  - (batch, query head, block of 64 rows): dQ of those rows over every key block they see.
// Each recomputes the tile's scores and dP = dO.V^T (the price of having no atomics); every
// product is the micro-kernel over operands packed as doubles, 64 x 64 tiles.
#include "kernels/cpu_isa.hpp"
#include "kernels/kernels.hpp"
#include "kernels/oracle_blocked.hpp"
#include "kernels/oracle_simd.hpp"
#include "kernels/parallel_for.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

namespace sdpa_doctor::kernels {
namespace {

using namespace oracle_simd;

constexpr int64_t k_tile = 64;        // query rows and keys of a tile
constexpr int64_t k_pack_rows = 1024; // rows (keys or queries) per packing work item
// Packed operands of the (batch, kv head)s in flight at once, as in the forward: bounds the extra
// memory (one kv head with its query heads is packed whatever its size).
constexpr int64_t k_pack_bytes = int64_t{64} << 20;

// The operands of the (batch, kv head)s [first, first + count) as doubles, zeros past every edge.
// Per kv head: K^T and V^T in tiles of 64 keys (D x 64 each), the B operands of S = Q.K^T and
// dP = dO.V^T; K row-major (Lkv_pad x Dp), the B operand of dQ += dS.K. Per query head of their
// groups: Q and dO row-major (Lq_pad x Dp), the A operands of S and dP and the B operands of
// dK += dS^T.Q and dV += P^T.dO; and D_i = dO_i . O_i.
struct Wave {
  int64_t first = 0, count = 0;
  int64_t lq_pad = 0, lkv_pad = 0, dp = 0, d = 0, group = 0;
  std::unique_ptr<double[]> kt, vt, k, q, dout, delta;
  double* kt_tile(int64_t slot, int64_t j0) const { return kt.get() + (slot * lkv_pad + j0) * d; }
  double* vt_tile(int64_t slot, int64_t j0) const { return vt.get() + (slot * lkv_pad + j0) * d; }
  double* k_rows(int64_t slot) const { return k.get() + slot * lkv_pad * dp; }
  // Query head `g` of the group of `slot`.
  double* q_rows(int64_t slot, int64_t g) const {
    return q.get() + (slot * group + g) * lq_pad * dp;
  }
  double* dout_rows(int64_t slot, int64_t g) const {
    return dout.get() + (slot * group + g) * lq_pad * dp;
  }
  double* delta_rows(int64_t slot, int64_t g) const {
    return delta.get() + (slot * group + g) * lq_pad;
  }
};

struct Context {
  const Case& c;
  const HostInputs& in;
  const std::vector<double>& dout; // logical (B,Hq,Lq,D)
  const std::vector<double>& out;  // the forward's O
  const std::vector<double>& lse;  // the forward's log-sum-exp per row
  OracleGradients& g;
  const Wave& w;
  double scale;
  const std::atomic<bool>* cancel;
  bool cancelled() const { return cancel && cancel->load(std::memory_order_relaxed); }
};

// Keys [j_begin, j_end) of kv head `slot` into K^T, V^T and K rows.
void pack_keys(const Context& x, int64_t slot, int64_t j_begin, int64_t j_end) {
  const Wave& w = x.w;
  const int64_t d = w.d;
  const int64_t bk = w.first + slot;
  const float* k = x.in.k.data() + bk * x.c.lkv * d;
  const float* v = x.in.v.data() + bk * x.c.lkv * d;
  double* kr = w.k_rows(slot);
  for (int64_t j = j_begin; j < j_end; ++j) {
    const bool key = j < x.c.lkv;
    double* kt = w.kt_tile(slot, j / k_tile * k_tile) + j % k_tile;
    double* vt = w.vt_tile(slot, j / k_tile * k_tile) + j % k_tile;
    for (int64_t e = 0; e < d; ++e) {
      kt[e * k_tile] = key ? double(k[j * d + e]) : 0.0;
      vt[e * k_tile] = key ? double(v[j * d + e]) : 0.0;
    }
    for (int64_t e = 0; e < w.dp; ++e) kr[j * w.dp + e] = key && e < d ? double(k[j * d + e]) : 0.0;
  }
}

// Rows [i_begin, i_end) of query head `g` of kv head `slot` into Q, dO and D.
void pack_rows(const Context& x, int64_t slot, int64_t g, int64_t i_begin, int64_t i_end) {
  const Wave& w = x.w;
  const int64_t d = w.d;
  const int64_t bh = (w.first + slot) / x.c.hkv * x.c.hq + (w.first + slot) % x.c.hkv * w.group + g;
  const float* q = x.in.q.data() + bh * x.c.lq * d;
  const double* go = x.dout.data() + bh * x.c.lq * d;
  const double* o = x.out.data() + bh * x.c.lq * d;
  double* qr = w.q_rows(slot, g);
  double* dr = w.dout_rows(slot, g);
  double* delta = w.delta_rows(slot, g);
  for (int64_t i = i_begin; i < i_end; ++i) {
    const bool row = i < x.c.lq;
    double dot = 0;
    for (int64_t e = 0; e < w.dp; ++e) {
      const bool inside = row && e < d;
      qr[i * w.dp + e] = inside ? double(q[i * d + e]) : 0.0;
      dr[i * w.dp + e] = inside ? go[i * d + e] : 0.0;
      if (inside) dot += go[i * d + e] * o[i * d + e];
    }
    delta[i] = dot;
  }
}

// C[rows x cols] (+)= A[rows x depth] . B[depth x cols], cols a multiple of 16.
template <typename S, int64_t Rows>
inline __attribute__((always_inline)) void gemm(const double* a, int64_t lda, const double* b,
                                                int64_t ldb, int64_t rows, int64_t cols,
                                                int64_t depth, double* c, int64_t ldc,
                                                bool accumulate) {
  for (int64_t c0 = 0; c0 < cols; c0 += k_cols)
    panel_gemm<S, Rows>(a, lda, b + c0, ldb, rows, depth, c + c0, ldc, accumulate);
}

struct Scratch {
  std::vector<double> p, ds, pt, dst; // tiles (64 x 64): P, dS and their transposes
  std::vector<double> acc_a, acc_b;   // 64 x Dp: dQ, or dK and dV
};

// The tile of query rows [i0, i0 + 64) of query head g against keys [j0, j0 + 64) of kv head
// `slot`: P = exp(score - lse) into w.p and dS = P (dP - D) into w.ds; zeros where the row or key
// is past the edge, dropped, or the row has nothing to attend to.
template <typename S, int64_t Rows>
inline __attribute__((always_inline)) void tile_p_ds(const Context& x, int64_t slot, int64_t g,
                                                     int64_t i0, int64_t j0, Scratch& w) {
  const Case& c = x.c;
  const Wave& wv = x.w;
  const int64_t b = (wv.first + slot) / c.hkv;
  const int64_t h = (wv.first + slot) % c.hkv * wv.group + g;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  double* p = w.p.data();
  double* ds = w.ds.data();
  gemm<S, Rows>(wv.q_rows(slot, g) + i0 * wv.dp, wv.dp, wv.kt_tile(slot, j0), k_tile, k_tile,
                k_tile, c.d, p, k_tile, false);
  gemm<S, Rows>(wv.dout_rows(slot, g) + i0 * wv.dp, wv.dp, wv.vt_tile(slot, j0), k_tile, k_tile,
                k_tile, c.d, ds, k_tile, false);
  const double* delta = wv.delta_rows(slot, g);
  for (int64_t r = 0; r < k_tile; ++r) {
    const int64_t i = i0 + r;
    double* pr = p + r * k_tile;
    double* dr = ds + r * k_tile;
    const double lse = i < c.lq ? x.lse[size_t((b * c.hq + h) * c.lq + i)] : neg_inf;
    // Keys [j0, j0 + seen) are candidates; past them: causal, Lkv or padding.
    const int64_t seen =
        lse == neg_inf ? 0
                       : std::clamp<int64_t>((c.causal ? std::min(c.lkv, i + 1 + c.causal_offset()) : c.lkv) - j0, 0,
                                             k_tile);
    if (seen == 0) {
      std::fill_n(pr, k_tile, 0.0);
      std::fill_n(dr, k_tile, 0.0);
      continue;
    }
    const float* m =
        c.mask == Mask::none ? nullptr : x.in.mask.data() + (b * c.lq + i) * c.lkv + j0;
    for (int64_t j = 0; j < seen; ++j) pr[j] *= x.scale;
    if (c.mask == Mask::additive)
      for (int64_t j = 0; j < seen; ++j) pr[j] += double(m[j]);
    else if (c.mask == Mask::boolean)
      for (int64_t j = 0; j < seen; ++j) pr[j] = m[j] == 0.0f ? neg_inf : pr[j];
    std::fill(pr + seen, pr + k_tile, neg_inf);
    exp_row<S>(pr, k_tile, lse);
    const double di = delta[i];
    for (int64_t j = 0; j < k_tile; ++j) dr[j] = pr[j] * (dr[j] - di);
  }
}

// dQ of rows [i0, i0 + 64) of query head g of kv head `slot`.
template <typename S, int64_t Rows>
inline __attribute__((always_inline)) bool dq_item(const Context& x, int64_t slot, int64_t g,
                                                   int64_t i0, Scratch& w) {
  const Case& c = x.c;
  const Wave& wv = x.w;
  const int64_t dp = wv.dp;
  // Under the causal rule no row of this block sees a key past its last row's diagonal.
  const int64_t keys = c.causal ? std::min(c.lkv, i0 + k_tile + c.causal_offset()) : c.lkv;
  w.acc_a.assign(size_t(k_tile * dp), 0.0);
  for (int64_t j0 = 0; j0 < keys; j0 += k_tile) {
    if (x.cancelled()) return false;
    tile_p_ds<S, Rows>(x, slot, g, i0, j0, w);
    gemm<S, Rows>(w.ds.data(), k_tile, wv.k_rows(slot) + j0 * dp, dp, k_tile, dp, k_tile,
                  w.acc_a.data(), dp, true);
  }
  const int64_t bh = (wv.first + slot) / c.hkv * c.hq + (wv.first + slot) % c.hkv * wv.group + g;
  double* dq = x.g.dq.data() + (bh * c.lq + i0) * c.d;
  for (int64_t r = 0; r < std::min(k_tile, c.lq - i0); ++r)
    for (int64_t e = 0; e < c.d; ++e) dq[r * c.d + e] = w.acc_a[size_t(r * dp + e)] * x.scale;
  return true;
}

void transpose_tile(const double* in, double* out) {
  for (int64_t r = 0; r < k_tile; ++r)
    for (int64_t j = 0; j < k_tile; ++j) out[j * k_tile + r] = in[r * k_tile + j];
}

// dK and dV of keys [j0, j0 + 64) of kv head `slot`, over every query head of its group.
template <typename S, int64_t Rows>
inline __attribute__((always_inline)) bool dkdv_item(const Context& x, int64_t slot, int64_t j0,
                                                     Scratch& w) {
  const Case& c = x.c;
  const Wave& wv = x.w;
  const int64_t dp = wv.dp;
  w.acc_a.assign(size_t(k_tile * dp), 0.0);
  w.acc_b.assign(size_t(k_tile * dp), 0.0);
  // Causal: rows whose diagonal is before j0 see none of these keys; whole tiles of them are
  // skipped (a tile's earlier rows see nothing: tile_p_ds gives them zeros).
  const int64_t first_row =
      c.causal ? std::max<int64_t>(0, j0 - c.causal_offset()) / k_tile * k_tile : 0;
  for (int64_t g = 0; g < wv.group; ++g)
    for (int64_t i0 = first_row; i0 < c.lq; i0 += k_tile) {
      if (x.cancelled()) return false;
      tile_p_ds<S, Rows>(x, slot, g, i0, j0, w);
      transpose_tile(w.p.data(), w.pt.data());
      transpose_tile(w.ds.data(), w.dst.data());
      gemm<S, Rows>(w.pt.data(), k_tile, wv.dout_rows(slot, g) + i0 * dp, dp, k_tile, dp, k_tile,
                    w.acc_b.data(), dp, true);
      gemm<S, Rows>(w.dst.data(), k_tile, wv.q_rows(slot, g) + i0 * dp, dp, k_tile, dp, k_tile,
                    w.acc_a.data(), dp, true);
    }
  const int64_t offset = ((wv.first + slot) * c.lkv + j0) * c.d;
  double* dk = x.g.dk.data() + offset;
  double* dv = x.g.dv.data() + offset;
  for (int64_t r = 0; r < std::min(k_tile, c.lkv - j0); ++r)
    for (int64_t e = 0; e < c.d; ++e) {
      dk[r * c.d + e] = w.acc_a[size_t(r * dp + e)] * x.scale;
      dv[r * c.d + e] = w.acc_b[size_t(r * dp + e)];
    }
  return true;
}

// Work item `it` of a wave: the dK/dV items first (slot-major), then the dQ items, the last
// query blocks first (under the causal rule they see the most keys).
template <typename S, int64_t Rows>
inline __attribute__((always_inline)) bool backward_item(const Context& x, int64_t it,
                                                         Scratch& w) {
  if (w.p.empty()) {
    for (auto* t : {&w.p, &w.ds, &w.pt, &w.dst}) t->resize(size_t(k_tile * k_tile));
  }
  const Wave& wv = x.w;
  const int64_t key_blocks = wv.lkv_pad / k_tile;
  const int64_t row_blocks = wv.lq_pad / k_tile;
  if (it < wv.count * key_blocks)
    return dkdv_item<S, Rows>(x, it / key_blocks, it % key_blocks * k_tile, w);
  it -= wv.count * key_blocks;
  const int64_t heads = wv.count * wv.group;
  const int64_t rb = row_blocks - 1 - it / heads;
  return dq_item<S, Rows>(x, it % heads / wv.group, it % heads % wv.group, rb * k_tile, w);
}

using ItemFn = bool (*)(const Context&, int64_t, Scratch&);

// The register blocks of the forward (oracle.cpp).
#ifdef SDPA_ORACLE_X86_LEVELS
__attribute__((target("arch=x86-64-v4"))) bool item_v4(const Context& x, int64_t it,
                                                       Scratch& w) {
  return backward_item<Simd<64>, 12>(x, it, w);
}
__attribute__((target("arch=x86-64-v3"))) bool item_v3(const Context& x, int64_t it,
                                                       Scratch& w) {
  return backward_item<Simd<32>, 2>(x, it, w);
}
#endif
bool item_generic(const Context& x, int64_t it, Scratch& w) {
  return backward_item<Simd<16>, 1>(x, it, w);
}

ItemFn item_for(std::string_view level) {
#ifdef SDPA_ORACLE_X86_LEVELS
  if (level == "x86-64-v4" && cpu_isa().avx512) return item_v4;
  if (level == "x86-64-v3" && cpu_isa().x86_64_v3) return item_v3;
#endif
  (void)level;
  return item_generic;
}

OracleGradients run_backward(std::string_view level, const Case& c, const HostInputs& in,
                             const std::vector<double>& dout, const std::atomic<bool>* cancel,
                             int threads) {
  const size_t kv_elements = size_t(c.kv_elements());
  OracleGradients g{std::vector<double>(size_t(c.q_elements()), 0.0),
                    std::vector<double>(kv_elements, 0.0), std::vector<double>(kv_elements, 0.0)};
  if (c.q_elements() == 0 || c.lkv <= 0 || c.hkv <= 0) return g;
  // A small case runs on the calling thread, as in the forward.
  const int n_threads = threads > 0 ? threads : c.flops() < 2e7 ? 1 : default_thread_count();
  std::vector<double> lse(size_t(c.b * c.hq * c.lq));
  const std::vector<double> out =
      oracle_detail::blocked_forward(level, c, in, cancel, n_threads, lse.data());
  if (cancel && cancel->load(std::memory_order_relaxed)) return g;

  Wave w;
  w.d = c.d;
  w.group = c.hq / c.hkv;
  w.lq_pad = round_up(c.lq, k_tile);
  w.lkv_pad = round_up(c.lkv, k_tile);
  w.dp = round_up(c.d, k_cols);
  const int64_t heads = c.b * c.hkv;
  const int64_t kv_doubles = w.lkv_pad * (2 * c.d + w.dp);
  const int64_t q_doubles = w.group * w.lq_pad * (2 * w.dp + 1);
  const int64_t wave = std::clamp<int64_t>(
      k_pack_bytes / ((kv_doubles + q_doubles) * int64_t(sizeof(double))), 1, heads);
  w.kt.reset(new double[size_t(wave * w.lkv_pad * c.d)]);
  w.vt.reset(new double[size_t(wave * w.lkv_pad * c.d)]);
  w.k.reset(new double[size_t(wave * w.lkv_pad * w.dp)]);
  w.q.reset(new double[size_t(wave * w.group * w.lq_pad * w.dp)]);
  w.dout.reset(new double[size_t(wave * w.group * w.lq_pad * w.dp)]);
  w.delta.reset(new double[size_t(wave * w.group * w.lq_pad)]);
  const Context x{c, in, dout, out, lse, g, w, 1.0 / std::sqrt(double(c.d)), cancel};
  const ItemFn item = item_for(level);
  std::vector<Scratch> scratch(static_cast<size_t>(n_threads));

  const int64_t key_chunks = (w.lkv_pad + k_pack_rows - 1) / k_pack_rows;
  const int64_t row_chunks = (w.lq_pad + k_pack_rows - 1) / k_pack_rows;
  for (w.first = 0; w.first < heads && !x.cancelled(); w.first += wave) {
    w.count = std::min(wave, heads - w.first);
    const int64_t key_items = w.count * key_chunks;
    parallel_for_two_phase(
        key_items + w.count * w.group * row_chunks,
        [&](int64_t it, int) {
          if (it < key_items) {
            const int64_t j0 = it % key_chunks * k_pack_rows;
            pack_keys(x, it / key_chunks, j0, std::min(j0 + k_pack_rows, w.lkv_pad));
            return;
          }
          it -= key_items;
          const int64_t i0 = it % row_chunks * k_pack_rows;
          const int64_t head = it / row_chunks;
          pack_rows(x, head / w.group, head % w.group, i0, std::min(i0 + k_pack_rows, w.lq_pad));
        },
        w.count * (w.lkv_pad + w.group * w.lq_pad) / k_tile,
        [&](int64_t it, int worker) {
          if (!x.cancelled()) item(x, it, scratch[size_t(worker)]);
        },
        n_threads);
  }
  return g;
}

} // namespace

OracleGradients oracle_attention_backward(const Case& c, const HostInputs& inputs,
                                          const std::vector<double>& dout,
                                          const std::atomic<bool>* cancel) {
  // Decoding: packing would cost more than the products, as in the forward.
  if (c.hkv > 0 && c.lq * (c.hq / c.hkv) <= 4)
    return oracle_attention_backward_reference(c, inputs, dout, cancel);
  return run_backward(oracle_isa_levels().front(), c, inputs, dout, cancel, 0);
}

OracleGradients oracle_attention_backward_at(std::string_view level, const Case& c,
                                             const HostInputs& inputs,
                                             const std::vector<double>& dout,
                                             const std::atomic<bool>* cancel, int threads) {
  return run_backward(level, c, inputs, dout, cancel, threads);
}

} // namespace sdpa_doctor::kernels

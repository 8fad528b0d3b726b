// The float64 oracle, blocked. Same definition as the plain one (oracle_reference.cpp): scores
// Q.K^T * 1/sqrt(D), then the additive mask, -inf where the causal rule or a bool mask drops the
// key, softmax over the row, then P.V; a row with no key left is zeros. Only the order of the
// float64 operations differs (and the exp is ours, within 2 ulp of libm's), so the two agree to
// rounding: the tests hold them to 1e-12 relative.
//
// How it is fast: K and V of a few (batch, kv head)s at a time are converted to double once and
// packed (K transposed into 16-key panels, V into 16-column panels), so both products are one
// register-blocked micro-kernel over double vectors (12 rows x 2 zmm with AVX-512); each work
// item is one (batch, query head, block of 96 query rows), so a single head still spreads over
// every core; keys go by 128 at a time with a running max per row, so the item's buffers stay in
// L2 whatever Lkv; the exp is a vector polynomial instead of a libm call per score.
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

constexpr int64_t k_item_rows = 96;   // query rows per work item (K/V reuse per pass over them)
constexpr int64_t k_key_chunk = 128;  // keys per step: its K and V panels stay in L2
constexpr int64_t k_pack_keys = 1024; // keys per packing work item
// Packed K and V of the (batch, kv head)s in flight at once: bounds the extra memory (one kv head
// is packed whatever its size: 2 * Lkv * D doubles, 32 MiB at L = 16384, D = 128).
constexpr int64_t k_pack_bytes = int64_t{64} << 20;

// K and V of the (batch, kv head)s [first, first + count) as doubles, zeros past Lkv and past D:
// per head, K^T in panels of 16 keys (D x 16 each) and V in panels of 16 columns (Lkv_pad x 16
// each), so that both products read their B operand as one contiguous stream.
struct Packed {
  int64_t first = 0;
  int64_t count = 0;
  int64_t lkv_pad = 0; // Lkv rounded up to k_cols
  int64_t dp = 0;      // D rounded up to k_cols
  std::unique_ptr<double[]> kt;
  std::unique_ptr<double[]> v;
  const double* kt_head(int64_t d, int64_t slot) const { return kt.get() + slot * lkv_pad * d; }
  const double* v_head(int64_t slot) const { return v.get() + slot * lkv_pad * dp; }
};

void pack_keys(const Case& c, const HostInputs& in, Packed& pk, int64_t slot, int64_t j_begin,
               int64_t j_end) {
  const int64_t d = c.d;
  const int64_t bk = pk.first + slot;
  const float* k = in.k.data() + bk * c.lkv * d;
  const float* v = in.v.data() + bk * c.lkv * d;
  double* kt = pk.kt.get() + slot * pk.lkv_pad * d;
  double* vp = pk.v.get() + slot * pk.lkv_pad * pk.dp;
  for (int64_t j = j_begin; j < j_end; ++j) {
    double* panel = kt + (j / k_cols) * d * k_cols + j % k_cols;
    double* vrow = vp + j * k_cols; // element e at vrow[(e / 16) * Lkv_pad * 16 + e % 16]
    for (int64_t e = 0; e < pk.dp; ++e) {
      const bool inside = j < c.lkv && e < d;
      if (e < d) panel[e * k_cols] = inside ? double(k[j * d + e]) : 0.0;
      vrow[(e / k_cols) * pk.lkv_pad * k_cols + e % k_cols] = inside ? double(v[j * d + e]) : 0.0;
    }
  }
}

struct Scratch {
  std::vector<double> q;   // rows x D
  std::vector<double> s;   // rows x k_key_chunk: scores, then exp(score - running max)
  std::vector<double> o;   // rows x Dp: sum of exp(score - running max) * V
  std::vector<double> max; // per row: the running max (-inf: nothing seen yet)
  std::vector<double> sum; // per row: sum of exp(score - running max)
};

// One work item: query head h of batch b over rows [i0, i0 + rows), against the packed kv head
// at `slot`; writes those rows of `out` (logical (B, Hq, Lq, D)). Keys go by in chunks; each
// row keeps its running max, and when a chunk raises it, the row's sum and accumulator are
// multiplied by exp(old - new). Both get the same factor, so its rounding cancels in the final
// division: the result is the two-pass softmax's up to rounding, and every buffer stays in L2
// whatever Lkv. `lse` (may be null): each row's log-sum-exp, for the backward. False when
// `cancel` stopped it (the rows are then left incomplete).
template <typename S, int64_t Rows>
inline __attribute__((always_inline)) bool oracle_item(const Case& c, const HostInputs& in,
                                                       const Packed& pk, int64_t slot, int64_t h,
                                                       int64_t i0, double* out, double* lse,
                                                       Scratch& w,
                                                       const std::atomic<bool>* cancel) {
  const int64_t d = c.d;
  const int64_t dp = pk.dp;
  const int64_t b = (pk.first + slot) / c.hkv;
  const int64_t rows = std::min(k_item_rows, c.lq - i0);
  // Under the causal rule no row of this block sees a key past its last row's diagonal.
  const int64_t offset = c.causal_offset();
  const int64_t keys = c.causal ? std::min(c.lkv, i0 + rows + offset) : c.lkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  constexpr int64_t lds = k_key_chunk;

  const float* q = in.q.data() + ((b * c.hq + h) * c.lq + i0) * d;
  w.q.resize(size_t(rows * d));
  for (int64_t x = 0; x < rows * d; ++x) w.q[size_t(x)] = double(q[x]);
  w.s.resize(size_t(rows * lds));
  w.o.assign(size_t(rows * dp), 0.0);
  w.max.assign(size_t(rows), neg_inf);
  w.sum.assign(size_t(rows), 0.0);

  const double* kt = pk.kt_head(d, slot);
  const double* v = pk.v_head(slot);
  for (int64_t k0 = 0; k0 < keys; k0 += k_key_chunk) {
    if (cancel && cancel->load(std::memory_order_relaxed)) return false;
    const int64_t kc = std::min(k_key_chunk, round_up(keys - k0, k_cols));
    // Causal: rows whose diagonal is before k0 see no key of this chunk; they take no part in it.
    const int64_t r0 = c.causal ? std::clamp<int64_t>(k0 - offset - i0, 0, rows) : 0;
    const int64_t n = rows - r0;
    double* s0 = w.s.data() + r0 * lds;
    for (int64_t t = 0; t < kc; t += k_cols)
      panel_gemm<S, Rows>(w.q.data() + r0 * d, d, kt + (k0 + t) * d, k_cols, n, d, s0 + t, lds,
                          false);

    for (int64_t r = r0; r < rows; ++r) {
      const int64_t i = i0 + r;
      double* s = w.s.data() + r * lds;
      // Keys [k0, k0 + seen) of the chunk are candidates; past them: causal, Lkv or padding.
      const int64_t seen = std::min((c.causal ? std::min(keys, i + 1 + offset) : keys) - k0, kc);
      const float* m =
          c.mask == Mask::none ? nullptr : in.mask.data() + (b * c.lq + i) * c.lkv + k0;
      for (int64_t j = 0; j < seen; ++j) s[j] *= scale;
      if (c.mask == Mask::additive)
        for (int64_t j = 0; j < seen; ++j) s[j] += double(m[j]);
      else if (c.mask == Mask::boolean)
        for (int64_t j = 0; j < seen; ++j) s[j] = m[j] == 0.0f ? neg_inf : s[j];
      std::fill(s + seen, s + kc, neg_inf);
      const double old_max = w.max[size_t(r)];
      const double new_max = std::max(old_max, max_row<S>(s, kc));
      if (new_max == neg_inf) {
        std::fill_n(s, kc, 0.0); // nothing seen yet: this chunk adds nothing
        continue;
      }
      if (new_max != old_max && old_max != neg_inf) {
        const double alpha = std::exp(old_max - new_max);
        w.sum[size_t(r)] *= alpha;
        for (int64_t e = 0; e < dp; ++e) w.o[size_t(r * dp + e)] *= alpha;
      }
      w.max[size_t(r)] = new_max;
      w.sum[size_t(r)] += exp_row<S>(s, kc, new_max);
    }

    for (int64_t c0 = 0; c0 < dp; c0 += k_cols)
      panel_gemm<S, Rows>(s0, lds, v + c0 * pk.lkv_pad + k0 * k_cols, k_cols, n, kc,
                          w.o.data() + r0 * dp + c0, dp, true);
  }

  double* o = out + ((b * c.hq + h) * c.lq + i0) * d;
  for (int64_t r = 0; r < rows; ++r) {
    const double sum = w.sum[size_t(r)];
    double* orow = o + r * d;
    const double* acc = w.o.data() + r * dp;
    // A row with nothing to attend to yields zeros, as PyTorch's safe softmax does.
    if (sum == 0)
      std::fill_n(orow, d, 0.0);
    else
      for (int64_t e = 0; e < d; ++e) orow[e] = acc[e] / sum;
    if (lse)
      lse[(b * c.hq + h) * c.lq + i0 + r] = sum == 0 ? neg_inf : w.max[size_t(r)] + std::log(sum);
  }
  return true;
}

using ItemFn = bool (*)(const Case&, const HostInputs&, const Packed&, int64_t, int64_t, int64_t,
                        double*, double*, Scratch&, const std::atomic<bool>*);

// The register block follows the register file: 12 rows x 2 vectors (24 of 32 zmm) with
// AVX-512; 2 rows x 4 ymm (8 of 16, enough independent sums to cover the FMA latency) with AVX2;
// 1 row x 8 xmm with SSE2.
#ifdef SDPA_ORACLE_X86_LEVELS
__attribute__((target("arch=x86-64-v4"))) bool item_v4(const Case& c, const HostInputs& in,
                                                       const Packed& pk, int64_t slot,
                                                       int64_t h, int64_t i0, double* out,
                                                       double* lse, Scratch& w,
                                                       const std::atomic<bool>* cancel) {
  return oracle_item<Simd<64>, 12>(c, in, pk, slot, h, i0, out, lse, w, cancel);
}
__attribute__((target("arch=x86-64-v3"))) bool item_v3(const Case& c, const HostInputs& in,
                                                       const Packed& pk, int64_t slot,
                                                       int64_t h, int64_t i0, double* out,
                                                       double* lse, Scratch& w,
                                                       const std::atomic<bool>* cancel) {
  return oracle_item<Simd<32>, 2>(c, in, pk, slot, h, i0, out, lse, w, cancel);
}
#endif
bool item_generic(const Case& c, const HostInputs& in, const Packed& pk, int64_t slot,
                  int64_t h, int64_t i0, double* out, double* lse, Scratch& w,
                  const std::atomic<bool>* cancel) {
  return oracle_item<Simd<16>, 1>(c, in, pk, slot, h, i0, out, lse, w, cancel);
}

struct Level {
  const char* name;
  ItemFn fn;
};

// Best first; only those this CPU runs.
std::vector<Level> levels() {
  std::vector<Level> out;
#ifdef SDPA_ORACLE_X86_LEVELS
  if (cpu_isa().avx512) out.push_back({"x86-64-v4", item_v4});
  if (cpu_isa().x86_64_v3) out.push_back({"x86-64-v3", item_v3});
#endif
  out.push_back({"generic", item_generic});
  return out;
}

const std::vector<Level>& known_levels() {
  static const std::vector<Level> all = levels();
  return all;
}

std::vector<double> run_oracle(ItemFn item, const Case& c, const HostInputs& in,
                               const std::atomic<bool>* cancel, int threads, double* lse) {
  std::vector<double> out(static_cast<size_t>(c.q_elements()), 0.0);
  if (c.q_elements() == 0 || c.lkv <= 0 || c.hkv <= 0) return out;
  auto cancelled = [&] { return cancel && cancel->load(std::memory_order_relaxed); };
  // A small case (a few ms on one core) runs on the calling thread: starting and joining
  // threads would cost more than it saves, the more so on busy cores.
  const int n_threads = threads > 0 ? threads : c.flops() < 5e7 ? 1 : default_thread_count();
  const int64_t group = c.hq / c.hkv;
  const int64_t heads = c.b * c.hkv;
  const int64_t row_blocks = (c.lq + k_item_rows - 1) / k_item_rows;

  Packed pk;
  pk.lkv_pad = round_up(c.lkv, k_cols);
  pk.dp = round_up(c.d, k_cols);
  const int64_t head_bytes = pk.lkv_pad * (c.d + pk.dp) * int64_t(sizeof(double));
  const int64_t wave = std::clamp<int64_t>(k_pack_bytes / head_bytes, 1, heads);
  pk.kt.reset(new double[size_t(wave * pk.lkv_pad * c.d)]);
  pk.v.reset(new double[size_t(wave * pk.lkv_pad * pk.dp)]);
  std::vector<Scratch> scratch(static_cast<size_t>(n_threads));

  for (pk.first = 0; pk.first < heads; pk.first += wave) {
    pk.count = std::min(wave, heads - pk.first);
    const int64_t pack_chunks = (pk.lkv_pad + k_pack_keys - 1) / k_pack_keys;
    parallel_for(pk.count * pack_chunks, n_threads, [&](int64_t it, int) {
      if (cancelled()) return;
      const int64_t j0 = (it % pack_chunks) * k_pack_keys;
      pack_keys(c, in, pk, it / pack_chunks, j0, std::min(j0 + k_pack_keys, pk.lkv_pad));
    });
    // Items: (kv head in the wave, query head of its group, row block); last row blocks first,
    // as under the causal rule they carry the most keys and so even out the end.
    const int64_t per_block = pk.count * group;
    parallel_for(per_block * row_blocks, n_threads, [&](int64_t it, int worker) {
      if (cancelled()) return;
      const int64_t rb = row_blocks - 1 - it / per_block;
      const int64_t slot = (it % per_block) / group;
      const int64_t hk = (pk.first + slot) % c.hkv;
      const int64_t h = hk * group + (it % per_block) % group;
      item(c, in, pk, slot, h, rb * k_item_rows, out.data(), lse, scratch[size_t(worker)],
           cancel);
    });
    if (cancelled()) break;
  }
  return out;
}

} // namespace

std::vector<double> oracle_attention(const Case& c, const HostInputs& inputs,
                                     const std::atomic<bool>* cancel) {
  // Decoding (each kv head serves a few query rows): packing K and V would cost several times
  // the products; the plain loop reads them once, in place (a 64-head L = 8192 decode case:
  // 0.12 s against 0.54 s blocked).
  if (c.hkv > 0 && c.lq * (c.hq / c.hkv) <= 4) return oracle_attention_reference(c, inputs, cancel);
  return run_oracle(known_levels().front().fn, c, inputs, cancel, 0, nullptr);
}

void apply_masked_row_semantics(const Case& c, const HostInputs& inputs,
                                MaskedRowSemantics semantics, std::vector<double>& rows) {
  if (semantics == MaskedRowSemantics::zero || c.mask == Mask::none) return;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t i = 0; i < c.lq; ++i) {
      const float* m = inputs.mask.data() + (b * c.lq + i) * c.lkv;
      // Under causal query i sees keys j <= i + causal_offset().
      const int64_t seen = c.causal ? std::min(i + 1 + c.causal_offset(), c.lkv) : c.lkv;
      const bool empty = std::all_of(m, m + seen, [&](float x) {
        return c.mask == Mask::boolean ? x == 0.0f : std::isinf(x) && x < 0;
      });
      if (!empty) continue;
      for (int64_t h = 0; h < c.hq; ++h)
        std::fill_n(rows.begin() + ((b * c.hq + h) * c.lq + i) * c.d, c.d, nan);
    }
}

std::vector<std::string> oracle_isa_levels() {
  std::vector<std::string> out;
  for (const Level& l : known_levels()) out.emplace_back(l.name);
  return out;
}

std::vector<double> oracle_attention_at(std::string_view level, const Case& c,
                                        const HostInputs& inputs,
                                        const std::atomic<bool>* cancel, int threads) {
  return oracle_detail::blocked_forward(level, c, inputs, cancel, threads, nullptr);
}

std::vector<double> oracle_detail::blocked_forward(std::string_view level, const Case& c,
                                                   const HostInputs& inputs,
                                                   const std::atomic<bool>* cancel, int threads,
                                                   double* lse) {
  ItemFn fn = known_levels().back().fn;
  for (const Level& l : known_levels())
    if (level == l.name) fn = l.fn;
  return run_oracle(fn, c, inputs, cancel, threads, lse);
}

} // namespace sdpa_doctor::kernels

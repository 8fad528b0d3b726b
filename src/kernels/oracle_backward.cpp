// The float64 oracle's gradients as first written, row-wise: attention backward over the same
// (dtype-rounded) inputs and semantics as oracle_attention; the truth the blocked backward
// (oracle_backward_blocked.cpp) is tested against.
// Per (batch, kv head), so that the kv head's dk and dv are summed by one thread over every query
// head it serves (GQA) without atomics; a query row at a time within it.
#include "kernels/kernels.hpp"
#include "kernels/oracle_row.hpp"
#include "kernels/parallel_for.hpp"

#include <cmath>
#include <limits>

namespace sdpa_doctor::kernels {

OracleGradients oracle_attention_backward_reference(const Case& c, const HostInputs& in,
                                                    const std::vector<double>& dout,
                                                    const std::atomic<bool>* cancel) {
  const int64_t group = c.hq / c.hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const size_t kv_elements = size_t(c.b * c.hkv * c.lkv * c.d);
  OracleGradients g{std::vector<double>(size_t(c.q_elements()), 0.0),
                    std::vector<double>(kv_elements, 0.0), std::vector<double>(kv_elements, 0.0)};

  parallel_for(c.b * c.hkv, 0, [&](int64_t bk, int) {
    const int64_t b = bk / c.hkv;
    const int64_t hk = bk % c.hkv;
    const float* k = in.k.data() + bk * c.lkv * c.d;
    const float* v = in.v.data() + bk * c.lkv * c.d;
    double* dk = g.dk.data() + bk * c.lkv * c.d;
    double* dv = g.dv.data() + bk * c.lkv * c.d;
    const float* mask = c.mask == Mask::none ? nullptr : in.mask.data() + b * c.lq * c.lkv;
    std::vector<double> p(size_t(c.lkv)), dp(size_t(c.lkv));
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      const float* q = in.q.data() + (b * c.hq + h) * c.lq * c.d;
      const double* dout_h = dout.data() + (b * c.hq + h) * c.lq * c.d;
      double* dq = g.dq.data() + (b * c.hq + h) * c.lq * c.d;
      for (int64_t i = 0; i < c.lq; ++i) {
        if (cancel && cancel->load(std::memory_order_relaxed)) return;
        // The row's probabilities, as the forward computes them.
        const double row_max = oracle_row_scores(c, q + i * c.d, k, mask, i, scale, p.data());
        if (row_max == neg_inf) continue; // a fully masked row: output 0, no gradient through it
        double sum = 0;
        for (int64_t j = 0; j < c.lkv; ++j) {
          p[size_t(j)] = std::exp(p[size_t(j)] - row_max);
          sum += p[size_t(j)];
        }
        const double* go = dout_h + i * c.d;
        // dP = dO.V^T; the softmax's backward needs sum_j P.dP, which is dO.O.
        double p_dot_dp = 0;
        for (int64_t j = 0; j < c.lkv; ++j) {
          p[size_t(j)] /= sum;
          double dot = 0;
          for (int64_t e = 0; e < c.d; ++e) dot += go[e] * double(v[j * c.d + e]);
          dp[size_t(j)] = dot;
          p_dot_dp += p[size_t(j)] * dot;
        }
        for (int64_t j = 0; j < c.lkv; ++j) {
          const double pj = p[size_t(j)];
          if (pj == 0) continue;
          const double ds = pj * (dp[size_t(j)] - p_dot_dp) * scale; // dS, through the scale
          for (int64_t e = 0; e < c.d; ++e) {
            dv[j * c.d + e] += pj * go[e];
            dq[i * c.d + e] += ds * double(k[j * c.d + e]);
            dk[j * c.d + e] += ds * double(q[i * c.d + e]);
          }
        }
      }
    }
  });
  return g;
}

} // namespace sdpa_doctor::kernels

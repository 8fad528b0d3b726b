// The oracle as first written: one query row at a time, a sequential double dot product per score,
// softmax over the row, then P.V. Latency-bound and slow (a few GFLOP/s), but plain enough to read
// against PyTorch's definition; kept as the truth the fast oracle (oracle.cpp) is tested against
// and as its "before" in bench/kernels/oracle_bench.cpp. The tool itself does not call it.
#include "kernels/kernels.hpp"
#include "kernels/oracle_row.hpp"
#include "kernels/parallel_for.hpp"

#include <cmath>
#include <limits>

namespace sdpa_doctor::kernels {

std::vector<double> oracle_attention_reference(const Case& c, const HostInputs& in,
                                               const std::atomic<bool>* cancel) {
  const int64_t group = c.hq / c.hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> out(static_cast<size_t>(c.q_elements()), 0.0);

  parallel_for(c.b * c.hq, 0, [&](int64_t bh, int) {
    const int64_t b = bh / c.hq;
    const int64_t h = bh % c.hq;
    const int64_t hk = h / group;
    const float* q = in.q.data() + (b * c.hq + h) * c.lq * c.d;
    const float* k = in.k.data() + (b * c.hkv + hk) * c.lkv * c.d;
    const float* v = in.v.data() + (b * c.hkv + hk) * c.lkv * c.d;
    const float* mask = c.mask == Mask::none ? nullptr : in.mask.data() + b * c.lq * c.lkv;
    double* o = out.data() + (b * c.hq + h) * c.lq * c.d;
    std::vector<double> s(static_cast<size_t>(c.lkv));
    for (int64_t i = 0; i < c.lq; ++i) {
      if (cancel && cancel->load(std::memory_order_relaxed)) return;
      const double row_max = oracle_row_scores(c, q + i * c.d, k, mask, i, scale, s.data());
      // A row with nothing to attend to yields zeros, as PyTorch's safe softmax does.
      if (row_max == neg_inf) continue;
      double sum = 0;
      for (int64_t j = 0; j < c.lkv; ++j) {
        s[size_t(j)] = std::exp(s[size_t(j)] - row_max);
        sum += s[size_t(j)];
      }
      double* orow = o + i * c.d;
      for (int64_t j = 0; j < c.lkv; ++j) {
        const double p = s[size_t(j)] / sum;
        if (p == 0) continue;
        for (int64_t e = 0; e < c.d; ++e) orow[e] += p * double(v[j * c.d + e]);
      }
    }
  });
  return out;
}

} // namespace sdpa_doctor::kernels

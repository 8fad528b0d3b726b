// ref-math on the CPU: the textbook path, one query row at a time: all scores of the row, the
// max, exp and sum, then the weighted sum of values, in fp32 with sequential accumulation. It
// shares only the masking and final-scale rules with ref-flash, so the two fail independently.
#include "kernels/cpu_math_row.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel_for.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sdpa_doctor::kernels {
namespace {
constexpr int64_t k_rows_per_item = 16;
} // namespace

std::string cpu_math_attention(const AttnParams& p, int threads) {
  if (p.elem != ElemType::f32) return "the CPU kernels take f32 storage";
  if (p.hkv <= 0 || p.hq % p.hkv != 0) return "query heads must be a multiple of key/value heads";
  const int64_t blocks = (p.lq + k_rows_per_item - 1) / k_rows_per_item;
  const int n_threads = threads > 0 ? threads : default_thread_count();
  std::vector<std::vector<float>> scores(size_t(n_threads), std::vector<float>(size_t(p.lkv)));
  parallel_for(p.b * p.hq * blocks, n_threads, [&](int64_t item, int worker) {
    const int64_t bh = item / blocks;
    const int64_t b = bh / p.hq;
    const int64_t h = bh % p.hq;
    const int64_t hk = h / (p.hq / p.hkv);
    const float* q = static_cast<const float*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
    const float* k = static_cast<const float*>(p.k) + b * p.k_stride_b + hk * p.k_stride_h;
    const float* v = static_cast<const float*>(p.v) + b * p.v_stride_b + hk * p.v_stride_h;
    float* o = static_cast<float*>(p.o) + b * p.o_stride_b + h * p.o_stride_h;
    const float* mask = p.mask_kind == MaskKind::none ? nullptr : p.mask + b * p.mask_stride_b;
    std::vector<float>& s = scores[size_t(worker)];
    const int64_t i_end = std::min(p.lq, (item % blocks + 1) * k_rows_per_item);
    for (int64_t i = (item % blocks) * k_rows_per_item; i < i_end; ++i) {
      const float f = math_row_softmax(p, q + i * p.q_stride_l, k, mask, i, s.data());
      float* orow = o + i * p.o_stride_l;
      std::fill_n(orow, p.d, 0.0f);
      for (int64_t j = 0; j < p.lkv; ++j) {
        if (s[size_t(j)] == 0.0f) continue;
        const float* vrow = v + j * p.v_stride_l;
        for (int64_t e = 0; e < p.d; ++e) orow[e] += s[size_t(j)] * vrow[e];
      }
      for (int64_t e = 0; e < p.d; ++e) orow[e] *= f;
    }
  });
  return {};
}

} // namespace sdpa_doctor::kernels

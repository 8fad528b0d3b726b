// kernels/cpu_math_row: one query row of ref-math's softmax, shared by its forward (cpu_math.cpp)
// and its backward (cpu_math_backward.cpp) so that the backward differentiates the very
// probabilities the forward used. Internal to kernels.
#pragma once

#include "kernels/attention_core.hpp"

#include <algorithm>
#include <cmath>

namespace sdpa_doctor::kernels {

// Row i's unnormalised probabilities exp(score - max) into s (Lkv of them, 0 where dropped),
// from fp32 dot products with sequential sums; returns the final scale 1/sum (0: a row with
// nothing to attend to). k: the kv head's keys, mask: this batch's mask rows (or null).
inline float math_row_softmax(const AttnParams& p, const float* qrow, const float* k,
                              const float* mask, int64_t i, float* s) {
  float row_max = core::neg_inf();
  for (int64_t j = 0; j < p.lkv; ++j) {
    const float* krow = k + j * p.k_stride_l;
    float dot = 0.0f;
    for (int64_t e = 0; e < p.d; ++e) dot += qrow[e] * krow[e];
    s[j] = core::masked_score(dot, p.scale, p.causal, p.causal_offset, p.mask_kind,
                              mask ? mask[i * p.mask_stride_q + j] : 1.0f, i, j);
    row_max = std::max(row_max, s[j]);
  }
  core::RowState st{row_max, 0.0f};
  for (int64_t j = 0; j < p.lkv; ++j) {
    s[j] = s[j] == core::neg_inf() ? 0.0f : std::exp(s[j] - row_max);
    st.sum += s[j];
  }
  return core::row_final_scale(st);
}

} // namespace sdpa_doctor::kernels

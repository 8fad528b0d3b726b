// kernels/oracle_row: one query row's scaled scores in float64, with the oracle's semantics
// (causal top-left or bottom-right aligned, bool mask drops, additive mask adds), shared by the plain forward
// oracle and the oracle's backward so both differentiate the same function. Internal to kernels.
#pragma once

#include "core/case.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace sdpa_doctor::kernels {

// Row `i`'s scores into `scores` (Lkv of them, -inf where dropped); returns their maximum, -inf
// for a row with nothing to attend to. `mask`: the (Lq,Lkv) mask of this batch, or null.
inline double oracle_row_scores(const Case& c, const float* q_row, const float* k,
                                const float* mask, int64_t i, double scale, double* scores) {
  double row_max = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < c.lkv; ++j) {
    double score = -std::numeric_limits<double>::infinity();
    const bool causal_drop = c.causal && j > i + c.causal_offset();
    const bool mask_drop = c.mask == Mask::boolean && mask[i * c.lkv + j] == 0.0f;
    if (!causal_drop && !mask_drop) {
      double dot = 0;
      for (int64_t e = 0; e < c.d; ++e) dot += double(q_row[e]) * double(k[j * c.d + e]);
      score = dot * scale;
      if (c.mask == Mask::additive) score += double(mask[i * c.lkv + j]);
    }
    scores[j] = score;
    row_max = std::max(row_max, score);
  }
  return row_max;
}

} // namespace sdpa_doctor::kernels

// Test support: a kernel's output held against the float64 oracle under a tolerance, counted.
#pragma once

#include "cases/tolerance.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace sdpa_doctor::kernels {

struct Errors {
  double max_abs = 0;
  int64_t outside = 0;   // finite values beyond atol + rtol * |oracle|
  int64_t nonfinite = 0; // NaN or Inf
};

inline Errors compare(const std::vector<float>& out, const std::vector<double>& ref,
                      Tolerance tol) {
  Errors e;
  EXPECT_EQ(out.size(), ref.size());
  for (size_t i = 0; i < std::min(out.size(), ref.size()); ++i) {
    if (!std::isfinite(out[i])) {
      ++e.nonfinite;
      continue;
    }
    const double diff = std::abs(double(out[i]) - ref[i]);
    e.max_abs = std::max(e.max_abs, diff);
    if (diff > tol.atol + tol.rtol * std::abs(ref[i])) ++e.outside;
  }
  return e;
}

} // namespace sdpa_doctor::kernels

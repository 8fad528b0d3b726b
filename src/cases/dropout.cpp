#include "cases/cases.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace sdpa_doctor::cases {

uint64_t dropout_seed(const Case& c, int run) {
  // Far from the small seeds users and tests pick, and distinct per case seed.
  return 0x5d0c0000ULL + 2 * c.seed + uint64_t(run);
}

namespace {

// Bit for bit, so that NaN equals NaN and -0 differs from 0.
size_t differing(const float* a, const float* b, size_t n) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) count += std::memcmp(a + i, b + i, sizeof(float)) != 0;
  return count;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : "; ") + part;
  return out;
}

} // namespace

Comparison judge_dropout(const DropoutRuns& runs, const double* probs, size_t n, double p,
                         Tolerance tol) {
  Comparison c;
  const double keep_scale = 1.0 / (1.0 - p);
  double max_abs = 0, err2 = 0, ref2 = 0;
  // The first of each kind, so that a reason's example is one of the elements it counts.
  int64_t outside = 0, first_nonfinite = -1, first_mismatch = -1, counted = 0, dropped = 0;
  bool all_zero = true, probs_all_zero = true;
  for (size_t i = 0; i < n; ++i) {
    const double o = double(runs.first[i]);
    const double r = probs[i];
    all_zero = all_zero && o == 0;
    probs_all_zero = probs_all_zero && r == 0;
    if (!std::isfinite(o)) {
      if (std::isnan(o)) ++c.metrics.nan_count;
      else ++c.metrics.inf_count;
      if (first_nonfinite < 0) first_nonfinite = int64_t(i);
      ++outside;
      continue;
    }
    const bool counts = r >= k_dropout_min_probability;
    counted += counts;
    if (o == 0) { // dropped, or a probability that is 0 anyway
      dropped += counts;
      continue;
    }
    const double kept = r * keep_scale;
    const double e = std::fabs(o - kept);
    max_abs = std::max(max_abs, e);
    err2 += e * e;
    ref2 += kept * kept;
    if (e > tol.atol + tol.rtol * kept) {
      if (first_mismatch < 0) first_mismatch = int64_t(i);
      ++outside;
    }
  }
  c.metrics.max_abs_err = max_abs;
  c.metrics.rel_l2_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  c.metrics.frac_outside_tol = n == 0 ? 0.0 : double(outside) / double(n);

  std::vector<std::string> problems;
  const int64_t nonfinite = c.metrics.nan_count + c.metrics.inf_count;
  if (nonfinite > 0) {
    c.status = Status::nonfinite;
    problems.push_back(fmt::format("{} NaN and {} Inf of {} output elements (first at index {})",
                                   c.metrics.nan_count, c.metrics.inf_count, n, first_nonfinite));
  } else if (outside > 0) {
    problems.push_back(fmt::format(
        "{} of {} elements are neither 0 nor their probability / (1 - p) within atol={:g} + "
        "rtol={:g}*|ref| (first at index {}: got {:.6g}, expected 0 or {:.6g})",
        outside, n, tol.atol, tol.rtol, first_mismatch, double(runs.first[first_mismatch]),
        probs[first_mismatch] * keep_scale));
  }
  if (counted >= k_dropout_min_counted) {
    const double expected = p * double(counted);
    const double sigma = std::sqrt(double(counted) * p * (1.0 - p));
    const double bound = k_dropout_sigmas * sigma + 1.0;
    if (std::fabs(double(dropped) - expected) > bound)
      problems.push_back(fmt::format(
          "{:.2f}% of {} probabilities >= {:g} were dropped, expected {:g}% +/- {:.2f}% ({:g} "
          "binomial sigmas)",
          100.0 * double(dropped) / double(counted), counted, k_dropout_min_probability, 100 * p,
          100.0 * bound / double(counted), k_dropout_sigmas));
  }
  if (const size_t diff = differing(runs.first, runs.same_seed, n); diff > 0)
    problems.push_back(fmt::format("not reproducible: {} of {} elements differ between two runs "
                                   "under the same seed",
                                   diff, n));
  if (n > 0 && differing(runs.first, runs.other_seed, n) == 0 && !all_zero)
    problems.push_back("the seed is ignored: a run under another seed gave the same output");
  if (problems.empty()) return c;
  if (c.status == Status::pass) c.status = Status::mismatch;
  // A kernel that never ran leaves zeros: said as compare_to_oracle says it.
  const bool zeros = n > 0 && all_zero && !probs_all_zero;
  c.reason = fmt::format("{}dropout: {}", zeros ? fmt::format("{}: ", k_all_zero_output) : "",
                         join(problems));
  return c;
}

} // namespace sdpa_doctor::cases

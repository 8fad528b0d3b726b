#include "cases/cases.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <algorithm>
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

Measured measure_dropout(const DropoutRuns& runs, const double* probs, size_t n, double p,
                         Tolerance tol) {
  TensorErrors m;
  DropoutStats d;
  m.n = int64_t(n);
  m.tolerance = tol;
  d.p = p;
  const double keep_scale = 1.0 / (1.0 - p);
  double max_abs = 0, err2 = 0, ref2 = 0;
  bool all_zero = true, probs_all_zero = true;
  for (size_t i = 0; i < n; ++i) {
    const double o = double(runs.first[i]);
    const double r = probs[i];
    all_zero = all_zero && o == 0;
    probs_all_zero = probs_all_zero && r == 0;
    if (!std::isfinite(o)) {
      ++(std::isnan(o) ? m.nan_count : m.inf_count);
      if (m.first_nonfinite < 0) m.first_nonfinite = int64_t(i);
      ++m.outside;
      continue;
    }
    const bool counts = r >= k_dropout_min_probability;
    d.counted += counts;
    if (o == 0) { // dropped, or a probability that is 0 anyway
      d.dropped += counts;
      continue;
    }
    const double kept = r * keep_scale;
    const double e = std::fabs(o - kept);
    max_abs = std::max(max_abs, e);
    err2 += e * e;
    ref2 += kept * kept;
    if (e > tol.atol + tol.rtol * kept) {
      if (m.first_mismatch < 0)
        m.first_mismatch = int64_t(i), m.mismatch_got = o, m.mismatch_expected = kept;
      ++m.outside;
    }
  }
  m.max_abs_err = max_abs;
  m.rel_l2_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  m.all_zero = n > 0 && all_zero;
  m.oracle_all_zero = probs_all_zero;
  d.differ_same_seed = int64_t(differing(runs.first, runs.same_seed, n));
  d.differ_other_seed = int64_t(differing(runs.first, runs.other_seed, n));
  Measured out = output_only(m);
  out.dropout = d;
  return out;
}

Comparison judge_dropout(const TensorErrors& m, const DropoutStats& d) {
  Comparison c;
  c.metrics.max_abs_err = m.max_abs_err;
  c.metrics.rel_l2_err = m.rel_l2_err;
  c.metrics.frac_outside_tol = m.n == 0 ? 0.0 : double(m.outside) / double(m.n);
  c.metrics.nan_count = m.nan_count;
  c.metrics.inf_count = m.inf_count;
  std::vector<std::string> problems;
  if (m.nan_count + m.inf_count > 0) {
    c.status = Status::nonfinite;
    problems.push_back(fmt::format("{} NaN and {} Inf of {} output elements (first at index {})",
                                   m.nan_count, m.inf_count, m.n, m.first_nonfinite));
  } else if (m.outside > 0) {
    problems.push_back(fmt::format(
        "{} of {} elements are neither 0 nor their probability / (1 - p) within atol={:g} + "
        "rtol={:g}*|ref| (first at index {}: got {:.6g}, expected 0 or {:.6g})",
        m.outside, m.n, m.tolerance.atol, m.tolerance.rtol, m.first_mismatch, m.mismatch_got,
        m.mismatch_expected));
  }
  if (d.counted >= k_dropout_min_counted) {
    const double expected = d.p * double(d.counted);
    const double sigma = std::sqrt(double(d.counted) * d.p * (1.0 - d.p));
    const double bound = k_dropout_sigmas * sigma + 1.0;
    if (std::fabs(double(d.dropped) - expected) > bound)
      problems.push_back(fmt::format(
          "{:.2f}% of {} probabilities >= {:g} were dropped, expected {:g}% +/- {:.2f}% ({:g} "
          "binomial sigmas)",
          100.0 * double(d.dropped) / double(d.counted), d.counted, k_dropout_min_probability,
          100 * d.p, 100.0 * bound / double(d.counted), k_dropout_sigmas));
  }
  if (d.differ_same_seed > 0)
    problems.push_back(fmt::format("not reproducible: {} of {} elements differ between two runs "
                                   "under the same seed",
                                   d.differ_same_seed, m.n));
  if (m.n > 0 && d.differ_other_seed == 0 && !m.all_zero)
    problems.push_back("the seed is ignored: a run under another seed gave the same output");
  if (problems.empty()) return c;
  if (c.status == Status::pass) c.status = Status::mismatch;
  // A kernel that never ran leaves zeros: said as judge_tensor says it.
  const bool zeros = m.all_zero && !m.oracle_all_zero;
  c.reason = fmt::format("{}dropout: {}", zeros ? fmt::format("{}: ", k_all_zero_output) : "",
                         join(problems));
  return c;
}

Comparison judge_dropout(const DropoutRuns& runs, const double* probs, size_t n, double p,
                         Tolerance tol) {
  const Measured m = measure_dropout(runs, probs, n, p, tol);
  return judge_dropout(*m.out, *m.dropout);
}

} // namespace sdpa_doctor::cases

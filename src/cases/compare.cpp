#include "cases/cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace sdpa_doctor::cases {

MaskedRows masked_rows_of(const Case& c) {
  return c.masked_rows ? MaskedRows{c.lq, c.d} : MaskedRows{};
}

Comparison compare_to_oracle(const float* out, const double* oracle, size_t n, Tolerance tol,
                             MaskedRows rows) {
  Comparison c;
  double max_abs = 0, err2 = 0, ref2 = 0;
  // The first of each kind, so that a reason's example is one of the elements it counts.
  int64_t outside = 0, first_nonfinite = -1, first_mismatch = -1;
  int64_t expected_nan = 0, not_nan = 0; // oracle NaN: fully masked rows under torch < 2.5
  int64_t nonfinite_in_rows = 0;
  bool out_all_zero = true, oracle_all_zero = true;
  for (size_t i = 0; i < n; ++i) {
    const double o = double(out[i]);
    const double r = oracle[i];
    out_all_zero = out_all_zero && o == 0;
    oracle_all_zero = oracle_all_zero && r == 0;
    if (std::isnan(r)) {
      ++expected_nan;
      if (std::isnan(o)) continue;
      ++not_nan;
      ++outside;
      continue;
    }
    if (!std::isfinite(o)) {
      if (std::isnan(o)) ++c.metrics.nan_count;
      else ++c.metrics.inf_count;
      if (rows.contains(i)) ++nonfinite_in_rows;
      ++outside;
      if (first_nonfinite < 0) first_nonfinite = int64_t(i);
      continue;
    }
    if (!std::isfinite(r)) continue; // an infinite oracle: nothing to judge
    const double e = std::fabs(o - r);
    max_abs = std::max(max_abs, e);
    err2 += e * e;
    ref2 += r * r;
    if (e > tol.atol + tol.rtol * std::fabs(r)) {
      ++outside;
      if (first_mismatch < 0) first_mismatch = int64_t(i);
    }
  }
  c.metrics.max_abs_err = max_abs;
  // An all-zero oracle makes the relative error meaningless; report the absolute norm then.
  c.metrics.rel_l2_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  c.metrics.frac_outside_tol = n == 0 ? 0.0 : double(outside) / double(n);
  const int64_t nonfinite = c.metrics.nan_count + c.metrics.inf_count;
  if (nonfinite > 0) {
    c.status = Status::nonfinite;
    c.reason = fmt::format("{} NaN and {} Inf of {} output elements (first at index {})",
                           c.metrics.nan_count, c.metrics.inf_count, n, first_nonfinite);
    // A backend that returns NaN for padded rows, where torch >= 2.5 returns 0.
    if (nonfinite_in_rows == nonfinite)
      c.reason += ", all in fully masked rows, where torch >= 2.5 returns 0";
  } else if (outside > 0) {
    c.status = Status::mismatch;
    // A kernel that never ran (a failed launch) leaves zeros: say so, known issues match it.
    const bool zeros = n > 0 && out_all_zero && !oracle_all_zero;
    if (not_nan > 0)
      c.reason = fmt::format("{} of {} elements in fully masked rows are finite where torch < 2.5 "
                             "returns NaN",
                             not_nan, expected_nan);
    if (outside > not_nan)
      c.reason += fmt::format(
          "{}{}{} of {} elements outside atol={:g} + rtol={:g}*|ref| (first at index {}: got "
          "{:.6g}, expected {:.6g}); max abs err {:.3g}, rel L2 err {:.3g}",
          c.reason.empty() ? "" : "; ",
          zeros ? fmt::format("{}: ", k_all_zero_output) : std::string(), outside - not_nan, n,
          tol.atol, tol.rtol, first_mismatch, double(out[first_mismatch]), oracle[first_mismatch],
          max_abs, *c.metrics.rel_l2_err);
  }
  return c;
}

namespace {

// pass < mismatch < nonfinite < anything the worker says went wrong otherwise.
int badness(Status s) {
  switch (s) {
  case Status::pass: return 0;
  case Status::mismatch: return 1;
  case Status::nonfinite: return 2;
  default: return 3;
  }
}

template <typename T> void keep_max(std::optional<T>& into, const std::optional<T>& other) {
  if (other && (!into || *other > *into)) into = other;
}

void keep_worst(Metrics& into, const Metrics& other) {
  keep_max(into.max_abs_err, other.max_abs_err);
  keep_max(into.rel_l2_err, other.rel_l2_err);
  keep_max(into.frac_outside_tol, other.frac_outside_tol);
  into.nan_count += other.nan_count;
  into.inf_count += other.inf_count;
}

} // namespace

Tolerance gradient_tolerance(Tolerance tol, const double* oracle, size_t n) {
  double scale = 1;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(oracle[i])) scale = std::max(scale, std::fabs(oracle[i]));
  return {tol.atol * scale * k_gradient_slack, tol.rtol * k_gradient_slack};
}

Comparison compare_gradients(const std::vector<GradientPair>& gradients, Tolerance tol) {
  Comparison all;
  bool first = true;
  for (const GradientPair& g : gradients) {
    const Comparison one =
        compare_to_oracle(g.got, g.oracle, g.n, gradient_tolerance(tol, g.oracle, g.n), g.rows);
    if (first) all.metrics = one.metrics;
    else keep_worst(all.metrics, one.metrics);
    first = false;
    if (badness(one.status) > badness(all.status)) {
      all.status = one.status;
      all.reason = fmt::format("{}: {}", g.name, one.reason);
    }
  }
  return all;
}

Comparison combine_directions(const Comparison& forward, const Comparison& backward) {
  Comparison out = forward;
  keep_worst(out.metrics, backward.metrics);
  if (badness(backward.status) > badness(out.status)) out.status = backward.status;
  if (backward.status == Status::pass) return out;
  out.reason = forward.status == Status::pass
                   ? fmt::format("backward: {}", backward.reason)
                   : fmt::format("forward: {}; backward: {}", forward.reason, backward.reason);
  return out;
}

} // namespace sdpa_doctor::cases

// Measuring an output or a gradient against its oracle (what a C++ worker does) and the one
// judge of what any worker measured (what the doctor does).
#include "cases/cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace sdpa_doctor::cases {

MaskedRows masked_rows_of(const Case& c) {
  return c.masked_rows ? MaskedRows{c.lq, c.d} : MaskedRows{};
}

TensorErrors measure_tensor(const float* out, const double* oracle, size_t n, Tolerance tol,
                            MaskedRows rows, bool gradient) {
  TensorErrors m;
  m.n = int64_t(n);
  m.tolerance = tol;
  double scale = 1, max_abs = 0, err2 = 0, ref2 = 0;
  if (gradient)
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(oracle[i])) scale = std::max(scale, std::fabs(oracle[i]));
  bool out_all_zero = true, oracle_all_zero = true;
  for (size_t i = 0; i < n; ++i) {
    const double o = double(out[i]);
    const double r = oracle[i];
    out_all_zero = out_all_zero && o == 0;
    oracle_all_zero = oracle_all_zero && r == 0;
    if (std::isnan(r)) { // a fully masked row under torch < 2.5: NaN is right there
      ++m.expected_nan;
      if (!std::isnan(o)) ++m.finite_where_nan, ++m.outside;
      continue;
    }
    if (!std::isfinite(o)) {
      ++(std::isnan(o) ? m.nan_count : m.inf_count);
      if (rows.contains(i)) ++m.nonfinite_in_masked_rows;
      ++m.outside;
      if (m.first_nonfinite < 0) m.first_nonfinite = int64_t(i);
      continue;
    }
    if (!std::isfinite(r)) continue; // an infinite oracle: nothing to measure
    const double e = std::fabs(o - r);
    max_abs = std::max(max_abs, e);
    err2 += e * e;
    ref2 += r * r;
    if (e > tol.atol * scale + tol.rtol * std::fabs(r)) {
      ++m.outside;
      if (m.first_mismatch < 0)
        m.first_mismatch = int64_t(i), m.mismatch_got = o, m.mismatch_expected = r;
    }
  }
  m.max_abs_err = max_abs;
  m.rel_l2_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  m.all_zero = n > 0 && out_all_zero;
  m.oracle_all_zero = oracle_all_zero;
  return m;
}

Tolerance gradient_tolerance(Tolerance tol) {
  return {tol.atol * k_gradient_slack, tol.rtol * k_gradient_slack};
}

Measured measure_gradients(const GradientPair& dq, const GradientPair& dk, const GradientPair& dv,
                           Tolerance gradient_tol) {
  Measured m;
  auto one = [&](const GradientPair& g) {
    return measure_tensor(g.got, g.oracle, g.n, gradient_tol, g.rows, /*gradient=*/true);
  };
  m.dq = one(dq);
  m.dk = one(dk);
  m.dv = one(dv);
  return m;
}

namespace {

Metrics metrics_of(const TensorErrors& m) {
  Metrics out;
  out.max_abs_err = m.max_abs_err;
  out.rel_l2_err = m.rel_l2_err;
  out.frac_outside_tol = m.n == 0 ? 0.0 : double(m.outside) / double(m.n);
  out.nan_count = m.nan_count;
  out.inf_count = m.inf_count;
  return out;
}

std::string nonfinite_words(const TensorErrors& m) {
  return fmt::format("{} NaN and {} Inf of {} output elements (first at index {})", m.nan_count,
                     m.inf_count, m.n, m.first_nonfinite);
}

// A kernel that never ran (a failed launch) leaves zeros: the reason says so, known issues match it.
std::string zeros_prefix(const TensorErrors& m) {
  return m.all_zero && !m.oracle_all_zero ? fmt::format("{}: ", k_all_zero_output) : "";
}

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

Comparison judge_tensor(const TensorErrors& m) {
  Comparison c;
  c.metrics = metrics_of(m);
  const int64_t nonfinite = m.nan_count + m.inf_count;
  if (nonfinite > 0) {
    c.status = Status::nonfinite;
    c.reason = nonfinite_words(m);
    // A backend that returns NaN for padded rows, where torch >= 2.5 returns 0.
    if (m.nonfinite_in_masked_rows == nonfinite)
      c.reason += ", all in fully masked rows, where torch >= 2.5 returns 0";
    return c;
  }
  if (m.outside == 0) return c;
  c.status = Status::mismatch;
  if (m.finite_where_nan > 0)
    c.reason = fmt::format("{} of {} elements in fully masked rows are finite where torch < 2.5 "
                           "returns NaN",
                           m.finite_where_nan, m.expected_nan);
  if (m.outside > m.finite_where_nan)
    c.reason += fmt::format(
        "{}{}{} of {} elements outside atol={:g} + rtol={:g}*|ref| (first at index {}: got "
        "{:.6g}, expected {:.6g}); max abs err {:.3g}, rel L2 err {:.3g}",
        c.reason.empty() ? "" : "; ", zeros_prefix(m), m.outside - m.finite_where_nan, m.n,
        m.tolerance.atol, m.tolerance.rtol, m.first_mismatch, m.mismatch_got,
        m.mismatch_expected, m.max_abs_err, m.rel_l2_err);
  return c;
}

Comparison judge_gradients(const TensorErrors& dq, const TensorErrors& dk, const TensorErrors& dv) {
  Comparison all;
  bool first = true;
  for (const auto& [name, m] : {std::pair{"dq", &dq}, std::pair{"dk", &dk}, std::pair{"dv", &dv}}) {
    const Comparison one = judge_tensor(*m);
    if (first) all.metrics = one.metrics;
    else keep_worst(all.metrics, one.metrics);
    first = false;
    if (badness(one.status) > badness(all.status)) {
      all.status = one.status;
      all.reason = fmt::format("{}: {}", name, one.reason);
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

namespace {

// A later call's difference added to a direction's verdict: the worse status, both reasons.
void add_repeat_difference(Comparison& into, const Comparison& later) {
  if (badness(later.status) > badness(into.status)) into.status = later.status;
  into.reason += (into.reason.empty() ? "" : "; ") + later.reason;
}

} // namespace

Verdict judge(const Measured& m) {
  Verdict v;
  const TensorErrors none;
  const TensorErrors& out = m.out ? *m.out : none;
  v.forward = m.dropout ? judge_dropout(out, *m.dropout) : judge_tensor(out);
  if (m.dq && m.dk && m.dv) v.backward = judge_gradients(*m.dq, *m.dk, *m.dv);
  if (m.repeats && m.repeats->differing_call > 0) {
    const bool in_gradient = m.repeats->tensor != "out" && v.backward;
    add_repeat_difference(in_gradient ? *v.backward : v.forward, judge_repeats(*m.repeats));
  }
  v.all = v.backward ? combine_directions(v.forward, *v.backward) : v.forward;
  return v;
}

// The compositions the unit tests and kernels' tests call: measure, then judge.
Comparison compare_to_oracle(const float* out, const double* oracle, size_t n, Tolerance tol,
                             MaskedRows rows) {
  return judge_tensor(measure_tensor(out, oracle, n, tol, rows));
}

Comparison compare_gradients(const std::vector<GradientPair>& g, Tolerance tol) {
  const Measured m = measure_gradients(g.at(0), g.at(1), g.at(2), gradient_tolerance(tol));
  return judge_gradients(*m.dq, *m.dk, *m.dv);
}

} // namespace sdpa_doctor::cases

// Every later call of a case against its first: measured by the C++ workers (RepeatComparer),
// judged by the doctor (judge_repeats) as every other measurement is.
#include "cases/cases.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

namespace sdpa_doctor::cases {

namespace {

// Bit for bit: NaN equals the same NaN, -0 differs from 0. `delta` over the finite pairs.
RepeatStats bitwise_difference(const std::vector<float>& later, const std::vector<float>& first) {
  RepeatStats d;
  if (later.size() == first.size() &&
      (later.empty() || std::memcmp(later.data(), first.data(), later.size() * sizeof(float)) == 0))
    return d; // the common case, at memory speed (an empty vector's data() may be null)

  for (size_t i = 0; i < later.size() && i < first.size(); ++i) {
    const float a = later[i], b = first[i];
    if (std::isnan(a)) ++d.nan_count;
    else if (std::isinf(a)) ++d.inf_count;
    if (std::memcmp(&a, &b, sizeof a) == 0) continue;
    ++d.differing;
    if (std::isfinite(a) && std::isfinite(b))
      d.max_abs_delta = std::max(d.max_abs_delta, std::fabs(double(a) - double(b)));
  }
  if (later.size() != first.size()) d.differing += int64_t(later.size() > first.size()
                                                               ? later.size() - first.size()
                                                               : first.size() - later.size());
  return d;
}

} // namespace

RepeatComparer::RepeatComparer(Tolerance gradient_tolerance, bool bitwise_gradients)
    : m_gradient_tolerance(gradient_tolerance), m_bitwise_gradients(bitwise_gradients) {}

void RepeatComparer::first(std::vector<float> out, std::vector<float> dq, std::vector<float> dk,
                           std::vector<float> dv) {
  m_first = {std::move(out), std::move(dq), std::move(dk), std::move(dv)};
  m_stats = {};
}

void RepeatComparer::later(const std::vector<float>& out, const std::vector<float>& dq,
                           const std::vector<float>& dk, const std::vector<float>& dv) {
  const int call = ++m_stats.calls;
  if (m_stats.differing_call > 0) return; // the first that differs is the one described
  const std::vector<float>* now[4] = {&out, &dq, &dk, &dv};
  static constexpr const char* k_names[4] = {"out", "dq", "dk", "dv"};
  for (int t = 0; t < 4; ++t) {
    const std::vector<float>& first = m_first[size_t(t)];
    if (t > 0 && first.empty()) continue; // a forward case has no gradients
    RepeatStats d;
    if (t == 0 || m_bitwise_gradients) {
      d = bitwise_difference(*now[t], first);
    } else {
      const std::vector<double> reference(first.begin(), first.end());
      const TensorErrors e =
          now[t]->size() == first.size()
              ? measure_tensor(now[t]->data(), reference.data(), first.size(),
                               m_gradient_tolerance, {}, /*gradient=*/true)
              : TensorErrors{};
      d.differing = now[t]->size() == first.size() ? e.outside : int64_t(first.size());
      d.max_abs_delta = e.max_abs_err;
      d.nan_count = e.nan_count;
      d.inf_count = e.inf_count;
    }
    if (d.differing == 0) continue;
    d.calls = call;
    d.differing_call = call;
    d.tensor = k_names[t];
    m_stats = d;
    return;
  }
}

Comparison judge_repeats(const RepeatStats& r) {
  Comparison c;
  if (r.differing_call == 0) return c;
  c.status = r.nan_count + r.inf_count > 0 ? Status::nonfinite : Status::mismatch;
  const bool gradient = r.tensor != "out";
  std::string nonfinite;
  if (r.nan_count > 0) nonfinite += fmt::format(", {} NaN", r.nan_count);
  if (r.inf_count > 0) nonfinite += fmt::format(", {} Inf", r.inf_count);
  c.reason = fmt::format("call {} of {} differs from call 1{}: {} element{}{}, max |delta| {:.3g}{}",
                         r.differing_call, r.calls, gradient ? " in " + r.tensor : "",
                         r.differing, r.differing == 1 ? "" : "s",
                         gradient ? " beyond the gradient tolerance" : "", r.max_abs_delta,
                         nonfinite);
  c.metrics.nan_count = r.nan_count;
  c.metrics.inf_count = r.inf_count;
  return c;
}

} // namespace sdpa_doctor::cases

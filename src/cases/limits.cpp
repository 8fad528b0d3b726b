#include "cases/cases.hpp"
#include "core/io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace sdpa_doctor::cases {

std::chrono::milliseconds default_case_deadline(const Case& c, bool gpu, int runs,
                                                bool worker_computes_oracle) {
  using std::chrono::milliseconds;
  // Start-up and the first call (library loading, AOTriton/CK kernel images, thread pools).
  double ms = gpu ? 30'000 : 15'000;
  const double rate_flops_per_ms = gpu ? 2e8 : 1e6;
  ms += double(std::max(runs, 1)) * c.flops() / rate_flops_per_ms;
  // Input generation, copies and the comparison: a few tens of ns per element on one core.
  ms += 5e-5 * double(2 * c.q_elements() + 2 * c.kv_elements());
  if (worker_computes_oracle) ms += c.flops() / 2e5; // float64, scalar
  ms = std::clamp(ms, 15'000.0, 3'600'000.0);
  return milliseconds(int64_t(ms));
}

int64_t case_memory_bytes(const Case& c, bool math_scores) {
  return c.input_bytes() + (math_scores ? c.math_scores_bytes() : 0);
}

int64_t case_host_bytes(const Case& c) {
  const int64_t floats = 2 * c.q_elements() + 2 * c.kv_elements() +
                         (c.mask == Mask::none ? 0 : c.b * c.lq * c.lkv);
  return floats * 4 + c.q_elements() * 8;
}

std::string memory_guard(const Case& c, int64_t budget_bytes, bool math_scores) {
  const int64_t need = case_memory_bytes(c, math_scores);
  if (need <= budget_bytes) return {};
  if (math_scores)
    return fmt::format("needs {} ({} bytes: inputs and output {} + math scores {}) but only {} "
                       "({} bytes) is available",
                       format_bytes(need), need, format_bytes(c.input_bytes()),
                       format_bytes(c.math_scores_bytes()), format_bytes(budget_bytes),
                       budget_bytes);
  return fmt::format("needs {} ({} bytes of inputs and output) but only {} ({} bytes) is "
                     "available",
                     format_bytes(need), need, format_bytes(budget_bytes), budget_bytes);
}

std::string target_guard(const Case& c, std::string_view target) {
  if (is_gpu_target(target) || c.b * c.hq <= k_max_grid_yz) return {};
  return fmt::format("batch x heads {} is past a GPU launch grid's {} blocks: a GPU-only case",
                     c.b * c.hq, k_max_grid_yz);
}

bool is_valid_target(std::string_view target) {
  if (target == "cpu") return true;
  return is_gpu_target(target);
}

bool is_gpu_target(std::string_view target) {
  if (!target.starts_with("cuda:") || target.size() == 5) return false;
  const std::string_view digits = target.substr(5);
  int index = -1;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  return ec == std::errc{} && ptr == digits.data() + digits.size() && index >= 0;
}

std::vector<Variant> torch_variants(std::string_view target) {
  std::vector<Variant> out;
  for (std::string_view backend : k_torch_backends) out.push_back(Variant{std::string(backend), {}});
  if (is_gpu_target(target)) {
    out.push_back(Variant{"flash", {"ck"}});
    out.push_back(Variant{"flash", {"aotriton"}});
    out.push_back(Variant{"flash", {"aotriton", "experimental"}});
    out.push_back(Variant{"mem_efficient", {"aotriton", "experimental"}});
  }
  return out;
}

std::vector<Variant> reference_variants() {
  std::vector<Variant> out;
  for (std::string_view backend : k_reference_backends) out.push_back(Variant{std::string(backend), {}});
  return out;
}

std::vector<Variant> plan_variants(Probe probe, std::string_view target) {
  switch (probe) {
  case Probe::torch:
  case Probe::python: return torch_variants(target);
  case Probe::reference: return reference_variants();
  case Probe::fault: return {};
  }
  return {};
}

const std::vector<std::string_view>& backend_refusals() {
  // Generated at configure time from data/backend_refusals.json, which the Python worker reads.
  static const std::vector<std::string_view> k_refusals = {
#include "cases/backend_refusals.inc"
  };
  return k_refusals;
}

bool is_backend_refusal(std::string_view message) {
  for (std::string_view r : backend_refusals())
    if (message.find(r) != std::string_view::npos) return true;
  return false;
}

} // namespace sdpa_doctor::cases

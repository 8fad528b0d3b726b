#include "core/model.hpp"

#include <utility>

namespace sdpa_doctor {

std::string_view to_string(Severity severity) {
  switch (severity) {
  case Severity::ok: return "ok";
  case Severity::warning: return "warning";
  case Severity::problem: return "problem";
  }
  return "problem";
}

namespace {

constexpr std::pair<SkipCause, std::string_view> k_skip_cause_names[] = {
    {SkipCause::none, "none"},
    {SkipCause::interrupted, "interrupted"},
    {SkipCause::restart_budget_spent, "restart_budget_spent"},
    {SkipCause::device_unhealthy, "device_unhealthy"},
    {SkipCause::device_wedged, "device_wedged"},
    {SkipCause::run_dir_unwritable, "run_dir_unwritable"},
    {SkipCause::worker_spawn_failed, "worker_spawn_failed"},
    {SkipCause::worker_failed_at_start, "worker_failed_at_start"},
    {SkipCause::worker_left_case, "worker_left_case"},
    {SkipCause::worker_unstartable, "worker_unstartable"},
    {SkipCause::worker_missing, "worker_missing"},
    {SkipCause::python_unusable, "python_unusable"},
    {SkipCause::plugin_unusable, "plugin_unusable"},
    {SkipCause::target_guard, "target_guard"},
    {SkipCause::memory_guard, "memory_guard"},
    {SkipCause::host_memory_guard, "host_memory_guard"},
    {SkipCause::not_measured, "not_measured"},
};

} // namespace

std::string_view to_string(SkipCause cause) {
  for (const auto& [value, name] : k_skip_cause_names)
    if (value == cause) return name;
  return "none";
}

std::optional<SkipCause> skip_cause_from_string(std::string_view text) {
  for (const auto& [value, name] : k_skip_cause_names)
    if (name == text) return value;
  return std::nullopt;
}

bool is_nvidia_gpu(const Device& d) { return !d.sm_target.empty(); }

bool is_amd_gpu(const Device& d) {
  if (is_nvidia_gpu(d)) return false;
  const auto seen = d.sources.find("seen_by");
  const bool torch_only = seen != d.sources.end() && seen->second.count("torch") != 0;
  return !torch_only || !d.gfx_target.empty();
}

} // namespace sdpa_doctor

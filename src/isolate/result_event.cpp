#include "isolate/isolate.hpp"
#include "isolate/protocol.hpp"

namespace sdpa_doctor::isolate {

namespace {

std::optional<double> number_or_null(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string scalar_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "";
  return value.dump();
}

void apply_metrics(const nlohmann::json& m, Metrics& out) {
  out.max_abs_err = number_or_null(m, "max_abs_err");
  out.rel_l2_err = number_or_null(m, "rel_l2_err");
  out.frac_outside_tol = number_or_null(m, "frac_outside_tol");
  out.nan_count = int64_t(number_or_null(m, "nan_count").value_or(0));
  out.inf_count = int64_t(number_or_null(m, "inf_count").value_or(0));
  out.time_ms = number_or_null(m, "time_ms");
  out.time_min_ms = number_or_null(m, "time_min_ms");
  out.timed_runs = int(number_or_null(m, "timed_runs").value_or(0));
}

} // namespace

void apply_result_event(const nlohmann::json& r, CaseResult& out) {
  if (!r.is_object()) return;
  if (auto it = r.find("metrics"); it != r.end() && it->is_object()) apply_metrics(*it, out.metrics);
  if (auto it = r.find("tolerance"); it != r.end() && it->is_object()) {
    out.tolerance.atol = number_or_null(*it, "atol").value_or(out.tolerance.atol);
    out.tolerance.rtol = number_or_null(*it, "rtol").value_or(out.tolerance.rtol);
  }
  if (auto it = r.find("backend_chosen"); it != r.end() && it->is_string())
    out.backend_chosen = it->get<std::string>();
  if (auto it = r.find("warnings"); it != r.end() && it->is_array())
    for (const auto& w : *it)
      if (w.is_string()) out.warnings.push_back(w.get<std::string>());
  if (out.metrics.time_ms && *out.metrics.time_ms > 0)
    out.metrics.tflops = out.kase.flops() / (*out.metrics.time_ms * 1e-3) / 1e12;
}

void apply_canary(const nlohmann::json& r, CaseResult& out) {
  if (!r.is_object()) return;
  auto it = r.find("canary");
  if (it == r.end() || !it->is_string()) return;
  out.canary = detail::excerpt(it->get<std::string>(), 600);
  if (out.canary.rfind("failed", 0) != 0) return;
  std::string text = out.canary.substr(std::string_view("failed").size());
  if (text.rfind(": ", 0) == 0) text.erase(0, 2);
  const std::string why = "poisoned the device: canary failed after it: " + text;
  if (out.status == Status::pass) {
    out.status = Status::error;
    out.reason = why;
  } else {
    out.reason += (out.reason.empty() ? "" : " | ") + why;
  }
}

std::map<std::string, std::string> hello_strings(const nlohmann::json& hello, const char* key) {
  std::map<std::string, std::string> out;
  if (!hello.is_object()) return out;
  auto it = hello.find(key);
  if (it == hello.end() || !it->is_object()) return out;
  for (const auto& [k, v] : it->items())
    if (auto text = scalar_text(v); !text.empty()) out[k] = text;
  return out;
}

} // namespace sdpa_doctor::isolate

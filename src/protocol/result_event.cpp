#include "protocol/protocol.hpp"

#include "core/model_json.hpp"
#include "core/text.hpp"

#include <cmath>
#include <limits>

namespace sdpa_doctor::protocol {

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

// The entries of the object obj[key] as text; empty values and a missing or non-object key give
// nothing.
std::map<std::string, std::string> string_map(const nlohmann::json& obj, const char* key) {
  std::map<std::string, std::string> out;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_object()) return out;
  for (const auto& [k, v] : it->items())
    if (auto text = scalar_text(v); !text.empty()) out[k] = text;
  return out;
}

Metrics read_metrics(const nlohmann::json& m) {
  Metrics out;
  out.max_abs_err = number_or_null(m, "max_abs_err");
  out.rel_l2_err = number_or_null(m, "rel_l2_err");
  out.frac_outside_tol = number_or_null(m, "frac_outside_tol");
  out.nan_count = int64_t(number_or_null(m, "nan_count").value_or(0));
  out.inf_count = int64_t(number_or_null(m, "inf_count").value_or(0));
  out.time_ms = number_or_null(m, "time_ms");
  out.time_min_ms = number_or_null(m, "time_min_ms");
  out.timed_runs = int(number_or_null(m, "timed_runs").value_or(0));
  return out;
}

// The canary rule (protocol.hpp): a failed canary after a case means the case left the device
// poisoned, whatever the case itself reported.
void apply_canary(const std::string& canary, CaseResult& out) {
  out.canary = excerpt(canary, 600);
  if (!canary_failed(out.canary)) return;
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

// A worker status named at obj[key], else nullopt.
std::optional<Status> worker_status(const nlohmann::json& obj, const char* key) {
  auto status = status_from_string(json_text(obj, key));
  if (!status || !is_worker_status(*status)) return std::nullopt;
  return status;
}

} // namespace

PhaseEvent read_phase(const nlohmann::json& p) {
  PhaseEvent out;
  if (!p.is_object()) return out;
  out.case_id = json_text(p, "case");
  if (auto phase = json_text(p, "phase"); !phase.empty()) out.phase = phase;
  if (auto it = p.find("measured"); it != p.end())
    if (auto m = measured_from_json(*it)) out.measured = *m;
  out.forward = Status::error;
  if (auto it = p.find("forward"); it != p.end() && it->is_object()) {
    out.forward = worker_status(*it, "status").value_or(Status::error);
    out.forward_reason = excerpt(json_text(*it, "reason"), 2000);
  }
  return out;
}

Hello read_hello(const nlohmann::json& hello) {
  Hello out;
  if (!hello.is_object()) return out;
  out.worker = json_text(hello, "worker");
  out.device = json_text(hello, "device");
  out.variant = json_text(hello, "variant");
  out.versions = string_map(hello, "versions");
  out.facts = string_map(hello, "facts");
  return out;
}

ResultEvent read_result(const nlohmann::json& r) {
  ResultEvent out;
  if (!r.is_object()) return out;
  out.case_id = json_text(r, "case");
  if (auto status = status_from_string(json_text(r, "status"))) out.status = *status;
  out.reason = json_text(r, "reason");
  out.awaiting_verdict = json_text(r, "status") == k_measured_status;
  if (auto it = r.find("measured"); it != r.end())
    if (auto m = measured_from_json(*it)) out.measured = *m;
  if (auto it = r.find("metrics"); it != r.end() && it->is_object()) out.metrics = read_metrics(*it);
  // A bound that is not a number reads as NaN, which apply_result leaves alone and the writer
  // writes back as null.
  if (auto it = r.find("tolerance"); it != r.end() && it->is_object()) {
    constexpr double k_none = std::numeric_limits<double>::quiet_NaN();
    out.tolerance = Tolerance{number_or_null(*it, "atol").value_or(k_none),
                              number_or_null(*it, "rtol").value_or(k_none)};
  }
  out.backend_chosen = json_text(r, "backend_chosen");
  if (auto it = r.find("warnings"); it != r.end() && it->is_array())
    for (const auto& w : *it)
      if (w.is_string()) out.warnings.push_back(w.get<std::string>());
  out.canary = json_text(r, "canary");
  if (auto it = r.find("directions"); it != r.end() && it->is_object()) {
    out.forward = worker_status(*it, "forward");
    out.backward = worker_status(*it, "backward");
  }
  out.masked_rows = masked_row_semantics_from_string(json_text(r, "masked_rows"));
  return out;
}

void apply_result(const nlohmann::json& r, CaseResult& out) {
  if (!r.is_object()) return;
  const ResultEvent e = read_result(r);
  if (auto it = r.find("metrics"); it != r.end() && it->is_object()) {
    const std::optional<double> tflops = out.metrics.tflops;
    out.metrics = e.metrics;
    out.metrics.tflops = tflops;
  }
  if (e.tolerance) {
    if (std::isfinite(e.tolerance->atol)) out.tolerance.atol = e.tolerance->atol;
    if (std::isfinite(e.tolerance->rtol)) out.tolerance.rtol = e.tolerance->rtol;
  }
  if (auto it = r.find("backend_chosen"); it != r.end() && it->is_string())
    out.backend_chosen = e.backend_chosen;
  out.warnings.insert(out.warnings.end(), e.warnings.begin(), e.warnings.end());
  if (e.forward) out.forward_status = e.forward;
  if (e.backward) out.backward_status = e.backward;
  if (e.masked_rows) out.masked_rows = e.masked_rows;
  if (e.measured && e.measured->repeats) {
    out.calls = e.measured->repeats->calls;
    out.differing_call = e.measured->repeats->differing_call;
  }
  if (out.metrics.time_ms && *out.metrics.time_ms > 0)
    out.metrics.tflops = out.kase.flops() / (*out.metrics.time_ms * 1e-3) / 1e12;
  if (auto it = r.find("canary"); it != r.end() && it->is_string()) apply_canary(e.canary, out);
}

} // namespace sdpa_doctor::protocol

// The doctor's side of judging: a worker's events carry what it measured, and judge() writes the
// verdict into them before anything else reads their status.
#include "cases/cases.hpp"

#include <cmath>
#include <string>

namespace sdpa_doctor::cases {

namespace {

nlohmann::json number(const std::optional<double>& x) {
  return x && std::isfinite(*x) ? nlohmann::json(*x) : nullptr;
}

// The error metrics of a verdict over the event's own (its timing stays).
void write_metrics(nlohmann::json& event, const Metrics& m) {
  nlohmann::json& out = event["metrics"];
  if (!out.is_object()) out = nlohmann::json::object();
  out["max_abs_err"] = number(m.max_abs_err);
  out["rel_l2_err"] = number(m.rel_l2_err);
  out["frac_outside_tol"] = number(m.frac_outside_tol);
  out["nan_count"] = m.nan_count;
  out["inf_count"] = m.inf_count;
}

std::string status_text(Status s) { return std::string(to_string(s)); }

} // namespace

namespace {

void judge_result_event(nlohmann::json& result) {
  const std::string said = result.value("status", std::string{});
  auto measured = measured_from_json(result["measured"]);
  if (!measured) {
    result["status"] = status_text(Status::error);
    result["reason"] = "the worker's measurements are malformed: " + measured.error().message;
    return;
  }
  const Verdict v = judge(*measured);
  if (said == k_measured_status) {
    result["status"] = status_text(v.all.status);
    result["reason"] = v.all.reason;
    write_metrics(result, v.all.metrics);
    if (v.backward)
      result["directions"] = {{"forward", status_text(v.forward.status)},
                              {"backward", status_text(v.backward->status)}};
    return;
  }
  // The forward was measured, then the backward failed: the case keeps the worker's status.
  write_metrics(result, v.forward.metrics);
  result["directions"] = {{"forward", status_text(v.forward.status)}, {"backward", said}};
}

void judge_phase_event(nlohmann::json& phase) {
  auto measured = measured_from_json(phase["measured"]);
  if (!measured) {
    phase["forward"] = {{"status", status_text(Status::error)},
                        {"reason", "the worker's measurements are malformed: " +
                                       measured.error().message}};
    return;
  }
  const Comparison forward = judge(*measured).forward;
  phase["forward"] = {{"status", status_text(forward.status)}, {"reason", forward.reason}};
}

} // namespace

void judge_worker_event(nlohmann::json& event) {
  if (!event.is_object() || !event.contains("measured")) return;
  const std::string name = event.value("event", std::string{});
  if (name == "result") judge_result_event(event);
  else if (name == "phase") judge_phase_event(event);
}

} // namespace sdpa_doctor::cases

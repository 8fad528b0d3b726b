#include "report/common.hpp"
#include "report/inventory.hpp"
#include "report/report.hpp"

#include <nlohmann/json.hpp>

#include <cmath>

namespace sdpa_doctor::report {

using nlohmann::json;
using namespace detail;

namespace {

// A finite double as a number; a non-finite one as null with its key listed in the object's
// "nonfinite_fields"; nothing when absent.
void put_number(json& o, const std::string& key, const std::optional<double>& value) {
  if (!value) return;
  if (std::isfinite(*value)) {
    o[key] = *value;
    return;
  }
  o[key] = nullptr;
  o["nonfinite_fields"].push_back(key);
}

json case_json(const Case& c) {
  return json{{"dtype", std::string(to_string(c.dtype))},
              {"b", c.b},
              {"hq", c.hq},
              {"hkv", c.hkv},
              {"lq", c.lq},
              {"lkv", c.lkv},
              {"d", c.d},
              {"causal", c.causal},
              {"mask", std::string(to_string(c.mask))},
              {"layout", std::string(to_string(c.layout))},
              {"seed", c.seed}};
}

json metrics_json(const Metrics& m) {
  json j = json::object();
  put_number(j, "max_abs_err", m.max_abs_err);
  put_number(j, "rel_l2_err", m.rel_l2_err);
  put_number(j, "frac_outside_tol", m.frac_outside_tol);
  j["nan_count"] = m.nan_count;
  j["inf_count"] = m.inf_count;
  put_number(j, "time_ms", m.time_ms);
  put_number(j, "time_min_ms", m.time_min_ms);
  j["timed_runs"] = m.timed_runs;
  put_number(j, "tflops", m.tflops);
  return j;
}

json result_json(const CaseResult& r) {
  json j{{"case_id", r.case_id},
         {"case", case_json(r.kase)},
         {"device", r.device},
         {"probe", std::string(to_string(r.probe))},
         {"variant", r.variant},
         {"status", std::string(to_string(r.status))},
         {"reason", r.reason},
         {"metrics", metrics_json(r.metrics)},
         {"backend_chosen", r.backend_chosen},
         {"warnings", r.warnings},
         {"signatures", r.signatures},
         {"stderr_tail", r.stderr_tail},
         {"attempt", r.attempt},
         {"wall_ms", r.wall_ms}};
  json tol = json::object();
  put_number(tol, "atol", r.tolerance.atol);
  put_number(tol, "rtol", r.tolerance.rtol);
  j["tolerance"] = tol;
  if (!r.canary.empty()) j["canary"] = r.canary;
  if (r.process_end) {
    const ProcessEnd& e = *r.process_end;
    json pe{{"core_dumped", e.core_dumped}, {"killed_by_doctor", e.killed_by_doctor}};
    pe["exit_code"] = e.exit_code ? json(*e.exit_code) : json(nullptr);
    pe["signal"] = e.signal ? json(*e.signal) : json(nullptr);
    pe["signal_name"] = e.signal_name;
    j["process_end"] = pe;
  } else {
    j["process_end"] = nullptr;
  }
  return j;
}



json shrink_json(const Shrink& s) {
  json conditions = json::array();
  for (const ShrinkCondition& w : s.conditions)
    conditions.push_back(json{{"axis", w.axis},
                              {"op", w.op},
                              {"value", w.value},
                              {"text", w.text},
                              {"settled", w.settled}});
  json tried = json::array();
  for (const auto& [id, status] : s.tried)
    tried.push_back(json{{"case_id", id}, {"status", std::string(to_string(status))}});
  json j{{"device", s.device},
         {"probe", std::string(to_string(s.probe))},
         {"variant", s.variant},
         {"status", std::string(to_string(s.status))},
         {"original_case", s.original_case},
         {"verdict", s.verdict},
         {"rule", s.rule},
         {"conditions", conditions},
         {"cases_tried", s.tried.size()},
         {"tried", tried},
         {"seconds", s.seconds},
         {"budget_exhausted", s.budget_exhausted}};
  if (s.minimal) j["minimal_case"] = json{{"id", s.minimal->id()}, {"case", case_json(*s.minimal)}};
  else j["minimal_case"] = nullptr;
  return j;
}

} // namespace

std::string render_json(const Report& report) {
  json workers = json::array();
  for (const WorkerInfo& w : report.workers) {
    workers.push_back(json{{"device", w.device},
                           {"probe", std::string(to_string(w.probe))},
                           {"variant", w.variant},
                           {"versions", w.versions},
                           {"facts", w.facts},
                           {"restarts", w.restarts},
                           {"available", w.available}});
  }
  json results = json::array();
  json counts = json::object();
  for (Status s : k_all_statuses) counts[std::string(to_string(s))] = 0;
  int failed = 0;
  for (const CaseResult& r : report.results) {
    results.push_back(result_json(r));
    counts[std::string(to_string(r.status))] = counts[std::string(to_string(r.status))].get<int>() + 1;
    if (is_failure_by_default(r.status)) ++failed;
  }
  json findings = json::array();
  for (const Finding& f : report.findings) findings.push_back(finding_to_json(f));
  json recs = json::array();
  for (const Recommendation& r : report.recommendations) {
    recs.push_back(json{{"id", r.id},
                        {"device", r.device},
                        {"summary", r.summary},
                        {"python", r.python},
                        {"cpp", r.cpp},
                        {"environment", r.environment},
                        {"transformers", r.transformers},
                        {"vllm", r.vllm},
                        {"cost", r.cost},
                        {"case_ids", r.case_ids}});
  }
  json issues = json::array();
  for (const KnownIssueMatch& m : report.known_issues) {
    issues.push_back(json{{"issue_id", m.issue_id},
                          {"title", m.title},
                          {"link", m.link},
                          {"advice", m.advice},
                          {"fixed_in", m.fixed_in},
                          {"case_ids", m.case_ids},
                          {"device", m.device},
                          {"variant", m.variant}});
  }
  json timings = json::object();
  put_number(timings, "total_ms", report.timings.total_ms);
  put_number(timings, "enumerate_ms", report.timings.enumerate_ms);
  put_number(timings, "oracle_ms", report.timings.oracle_ms);
  put_number(timings, "probes_ms", report.timings.probes_ms);
  put_number(timings, "report_ms", report.timings.report_ms);

  json doc{{"schema", std::string(k_schema)},
           {"tool", json{{"name", "sdpa-doctor"},
                         {"version", report.tool_version},
                         {"git_revision", report.git_revision}}},
           {"started_at", report.started_at},
           {"host", report.host},
           {"environment", report.environment},
           {"versions", report.versions},
           {"inventory", inventory_to_json(report.inventory)},
           {"targets", report.targets},
           {"suite", report.suite},
           {"workers", workers},
           {"summary", json{{"cases", report.results.size()}, {"failed", failed}, {"by_status", counts}}},
           {"results", results},
           {"findings", findings},
           {"recommendations", recs},
           {"known_issues", issues},
           {"timings", timings},
           {"interrupted", report.interrupted},
           {"exit_code", report.exit_code}};
  if (!report.model.empty()) doc["model"] = report.model; // only for `check --model`
  if (!report.shrinks.empty()) { // v1.1; absent with --no-shrink or when nothing failed
    json shrinks = json::array();
    for (const Shrink& s : report.shrinks) shrinks.push_back(shrink_json(s));
    doc["shrinks"] = shrinks;
  }
  // Invalid UTF-8 in captured stderr must not make the whole report unwritable.
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

} // namespace sdpa_doctor::report

#include "report/common.hpp"
#include "report/inventory.hpp"
#include "report/report.hpp"

#include "core/model_json.hpp"

#include <nlohmann/json.hpp>

#include <cmath>

namespace sdpa_doctor::report {

using nlohmann::json;
using namespace detail;

std::string render_json(const Report& report) {
  json workers = json::array();
  for (const WorkerInfo& w : report.workers) workers.push_back(to_json(w));
  json results = json::array();
  json counts = json::object();
  for (Status s : k_all_statuses) counts[std::string(to_string(s))] = 0;
  int failed = 0;
  for (const CaseResult& r : report.results) {
    results.push_back(to_json(r));
    counts[std::string(to_string(r.status))] = counts[std::string(to_string(r.status))].get<int>() + 1;
    if (is_failure_by_default(r.status)) ++failed;
  }
  json findings = json::array();
  for (const Finding& f : report.findings) findings.push_back(to_json(f));
  json recs = json::array();
  for (const Recommendation& r : report.recommendations) recs.push_back(to_json(r));
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
    if (m.mode != Mode::eager) issues.back()["mode"] = std::string(to_string(m.mode));
  }
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
           {"timings", to_json(report.timings)},
           {"interrupted", report.interrupted},
           {"exit_code", report.exit_code}};
  if (!report.model.empty()) doc["model"] = report.model; // only for `check --model`
  // v1.6; absent unless a test planted faults, which makes the report no measurement
  if (!report.planted_faults.empty()) {
    doc["planted_faults"] = report.planted_faults;
    doc["measures_backends"] = false;
  }
  if (!report.shrinks.empty()) { // v1.1; absent with --no-shrink or when nothing failed
    json shrinks = json::array();
    for (const Shrink& s : report.shrinks) shrinks.push_back(to_json(s));
    doc["shrinks"] = shrinks;
  }
  // Invalid UTF-8 in captured stderr must not make the whole report unwritable.
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

} // namespace sdpa_doctor::report

#include "check/advise.hpp"

#include "core/paths.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace sdpa_doctor::check {

namespace {

std::vector<advice::KnownIssues> load_issue_files(const CheckRequest& r) {
  std::vector<advice::KnownIssues> files;
  if (auto data = data_dir()) {
    auto shipped = advice::load_known_issues((*data / "known_issues.json").string());
    if (!shipped) throw Fatal{shipped.error().message, exit_code::internal};
    files.push_back(std::move(*shipped));
  } else {
    spdlog::warn("the doctor's data directory was not found: shipped known issues not loaded");
  }
  for (const auto& f : r.known_issue_files) {
    auto extra = advice::load_known_issues(f);
    if (!extra) throw Fatal{extra.error().message};
    files.push_back(std::move(*extra));
  }
  return files;
}

} // namespace

AdviceInputs advice_inputs(const CheckRequest& request) {
  AdviceInputs in;
  in.fail_on = request.fail_on;
  in.advice.target = request.advice_target;
  in.issues = advice::merge_known_issues(load_issue_files(request));
  return in;
}

void add_worker_versions(Report& report) {
  for (const WorkerInfo& w : report.workers)
    for (const auto& [k, v] : w.versions) {
      const std::string key = (k == "torch" && w.probe == Probe::torch)    ? "torch_cpp"
                              : (k == "torch" && w.probe == Probe::python) ? "torch_python"
                                                                           : k;
      report.versions.try_emplace(key, v);
    }
}

std::vector<Recommendation> advise_report(Report& report, const AdviceInputs& in,
                                          std::vector<Finding> run_findings) {
  advice::apply_gfx_truth(advice::settle_gfx_truth(report), report); // before advise: its findings read it
  advice::AdviceResult advised = advice::advise(report, in.issues, in.advice);
  // Device findings stay in the inventory; these are the run's own.
  report.findings = std::move(run_findings);
  report.findings.insert(report.findings.end(), advised.findings.begin(), advised.findings.end());
  report.recommendations = std::move(advised.recommendations);
  report.known_issues = std::move(advised.known_issues);
  return std::move(advised.alternatives);
}

bool take_verified_advice(Report& report, run::VerifiedAdvice verified,
                          const std::set<Status>& fail_on) {
  report.recommendations = std::move(verified.recommendations);
  report.findings.insert(report.findings.end(), verified.findings.begin(), verified.findings.end());
  return std::any_of(verified.statuses.begin(), verified.statuses.end(),
                     [&](Status s) { return fail_on.count(s) != 0; });
}

void keep_earlier(Report& report, std::vector<Finding>& findings,
                  const run::JournalContents& before) {
  for (const WorkerInfo& w : before.workers) {
    auto now = std::find_if(report.workers.begin(), report.workers.end(), [&](const WorkerInfo& n) {
      return n.device == w.device && n.probe == w.probe && n.variant == w.variant &&
             n.mode == w.mode;
    });
    if (now == report.workers.end()) report.workers.push_back(w);
    // Listed but never started this time (all its cells measured before): the earlier facts.
    else if (now->versions.empty() && now->facts.empty() && now->available.empty()) *now = w;
  }
  for (const Finding& f : before.findings)
    if (std::none_of(findings.begin(), findings.end(),
                     [&](const Finding& n) { return n.id == f.id && n.device == f.device; }))
      findings.push_back(f);
}

} // namespace sdpa_doctor::check

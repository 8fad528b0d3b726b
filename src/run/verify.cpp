// Verified advice: each recommendation re-run in a fresh python worker under exactly its printed
// flags, through execute_plan like any other cases (crashes included); while a re-run fails, the
// next configuration the advice ranked for that device is tried. A re-run with environment lines
// starts an interpreter of its own (torch latches them at start-up); one without forks from the
// check's start-up server, which never ran an SDPA call, so its fork is as fresh. The snippet is
// written to RUN-DIR/verify/NAME/snippet.py through core's atomic write.
#include "core/io.hpp"
#include "run/launch.hpp"
#include "run/run.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

namespace sdpa_doctor::run {

namespace {

namespace fs = std::filesystem;

// A re-run that failed: what the report keeps, and where its journal and logs are.
struct Rejected {
  std::string id;
  std::string reason;
  std::string dir; // under RUN-DIR/verify/
};

// The cases `rec` was proven on, as the results measured them.
std::vector<Case> proven_cases(const Recommendation& rec, const std::vector<CaseResult>& results) {
  std::map<std::string, const Case*> by_id;
  for (const CaseResult& r : results)
    if (r.device == rec.device) by_id.try_emplace(r.case_id, &r.kase);
  std::vector<Case> out;
  for (const std::string& id : rec.case_ids)
    if (auto it = by_id.find(id); it != by_id.end()) out.push_back(*it->second);
  return out;
}

// One re-run; `statuses` collects what its cases ended in.
Verification verify_one(const Recommendation& rec, const std::vector<Case>& cases,
                        const DeviceInventory& inventory, ExecuteOptions exec,
                        const std::string& name, std::set<Status>& statuses) {
  Verification v;
  v.how = "a fresh python worker";
  if (exec.python.empty()) {
    v.note = exec.python_reason.empty() ? "the python probe is not part of this check"
                                        : exec.python_reason;
    return v;
  }
  if (cases.empty()) {
    v.note = "no measured case to re-run";
    return v;
  }
  const fs::path dir = fs::path(exec.run_dir) / "verify" / name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path snippet = dir / "snippet.py";
  if (ec || !write_file_atomically(snippet.string(), rec.python)) {
    v.note = fmt::format("cannot write {}", snippet.string());
    return v;
  }
  Plan plan;
  plan.targets = {rec.device};
  plan.cases = cases;
  plan.runs = {{rec.device, Probe::python, Variant{"default", {}},
                VerifyRun{rec.id, snippet.string(), environment_lines(rec.environment)},
                Mode::eager, {}}};
  if (rec.workload == k_compiled_workload) { // proven compiled: re-run compiled
    plan.runs.front().mode = Mode::compiled;
    for (const Case& c : cases) plan.runs.front().case_ids.push_back(c.id());
  }
  exec.run_dir = dir.string();
  exec.append_journal = false;
  exec.progress = ProgressMode::none;
  exec.finished.clear();
  exec.journal_header = {{"verify", rec.id}, {"device", rec.device}};
  // Whether the flags work is the question, not how fast: the checked call and one timed run.
  exec.warmup = 1;
  exec.repeat = 1;
  const auto start = std::chrono::steady_clock::now();
  const ExecuteResult done = execute_plan(plan, inventory, exec);
  v.seconds = ms_since(start) / 1000.0;
  if (!done.write_error.empty()) { // a full disk, not the flags: it proves nothing of them
    v.note = "not re-run: " + done.write_error;
    return v;
  }
  v.ran = true;
  v.total = int(done.results.size());
  int failed = 0;
  for (const CaseResult& r : done.results) {
    if (r.status == Status::pass) {
      ++v.passed;
      continue;
    }
    statuses.insert(r.status);
    if (failed++ == 0)
      v.note = fmt::format("{}: {}: {}", r.case_id, to_string(r.status), r.reason);
  }
  if (failed > 0)
    v.note = fmt::format("{} of {} case{} failed under these flags; first {}", failed, v.total,
                         v.total == 1 ? "" : "s", v.note);
  return v;
}

// A configuration ranked first failed its re-run and a later one passed: the check fails (a case
// crashed or failed under those flags), and this says why and what to use instead.
Finding rejected_finding(const std::vector<Rejected>& rejected, const Recommendation& chosen,
                         const std::string& run_dir) {
  Finding f;
  f.id = "recommendation-rejected";
  f.severity = Severity::problem;
  f.device = chosen.device;
  std::vector<std::string> tried;
  for (const Rejected& r : rejected) tried.push_back(r.id + " (" + r.reason + ")");
  f.message = fmt::format("on {} the matrix proved {}, but a fresh process under exactly its "
                          "flags failed: {}; {} passed its re-run instead",
                          chosen.device, rejected.front().id, fmt::join(tried, "; "), chosen.id);
  f.remedy = fmt::format("use {} (below); the failed re-run's journal and logs are in {}",
                         chosen.id, (fs::path(run_dir) / "verify" / rejected.front().dir).string());
  return f;
}

// What one device's recommendation ends as, and whether its re-runs saw failures.
struct DeviceOutcome {
  Recommendation recommendation;
  std::optional<Finding> finding;
  std::set<Status> statuses;
};

DeviceOutcome verify_device(const std::vector<const Recommendation*>& candidates,
                            const std::vector<CaseResult>& results,
                            const DeviceInventory& inventory, const ExecuteOptions& exec,
                            size_t device_index) {
  DeviceOutcome out;
  out.recommendation = *candidates.front();
  std::vector<Rejected> rejected;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (exec.interrupted && exec.interrupted->load()) break;
    Recommendation rec = *candidates[i];
    const std::string name = safe_name(fmt::format("{}-{}-{}", device_index, i, rec.id));
    rec.verification =
        verify_one(rec, proven_cases(rec, results), inventory, exec, name, out.statuses);
    if (i == 0) out.recommendation.verification = rec.verification;
    if (exec.interrupted && exec.interrupted->load()) return out; // it says nothing of the flags
    // Nothing could be re-run (no python probe): the advice stands as measured, unverified.
    if (!rec.verification->ran) return out;
    if (rec.verification->verified()) {
      if (!rejected.empty()) out.finding = rejected_finding(rejected, rec, exec.run_dir);
      for (const Rejected& r : rejected) rec.rejected.push_back({r.id, r.reason});
      out.recommendation = std::move(rec);
      return out;
    }
    rejected.push_back({rec.id, rec.verification->note, name});
  }
  if (rejected.empty()) return out; // interrupted before anything ran
  // None passed: the advice's own choice stays, with its failed re-run and the others tried.
  for (size_t i = 1; i < rejected.size(); ++i)
    out.recommendation.rejected.push_back({rejected[i].id, rejected[i].reason});
  Finding f;
  f.id = "recommendation-failed-verification";
  f.severity = Severity::problem;
  f.device = out.recommendation.device;
  std::vector<std::string> tried;
  for (const Rejected& r : rejected) tried.push_back(r.id + " (" + r.reason + ")");
  f.message = fmt::format("on {} no recommended configuration passed its re-run in a fresh "
                          "process: {}",
                          f.device, fmt::join(tried, "; "));
  f.remedy = fmt::format("the matrix passed under these flags but a fresh process under exactly "
                         "the printed flags did not: a flaky backend, or state the flags do not "
                         "set; the re-runs' logs are in {}",
                         (fs::path(exec.run_dir) / "verify").string());
  out.finding = std::move(f);
  return out;
}

} // namespace

std::vector<std::pair<std::string, std::string>> environment_lines(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (const size_t eq = line.find('='); eq != std::string::npos && eq > 0)
      out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
    start = end + 1;
  }
  return out;
}

VerifiedAdvice verify_recommendations(const std::vector<Recommendation>& recommendations,
                                      const std::vector<Recommendation>& alternatives,
                                      const std::vector<CaseResult>& results,
                                      const DeviceInventory& inventory,
                                      const ExecuteOptions& exec) {
  std::vector<DeviceOutcome> outcomes(recommendations.size());
  // Devices beside each other, as the check's own runs: each is one worker at a time.
  std::vector<std::thread> threads;
  for (size_t i = 0; i < recommendations.size(); ++i) {
    std::vector<const Recommendation*> candidates{&recommendations[i]};
    for (const Recommendation& a : alternatives)
      if (a.device == recommendations[i].device && a.workload == recommendations[i].workload)
        candidates.push_back(&a);
    threads.emplace_back([&, i, candidates] {
      outcomes[i] = verify_device(candidates, results, inventory, exec, i);
    });
  }
  for (auto& t : threads) t.join();
  VerifiedAdvice out;
  for (DeviceOutcome& o : outcomes) {
    out.recommendations.push_back(std::move(o.recommendation));
    if (o.finding) out.findings.push_back(std::move(*o.finding));
    out.statuses.insert(o.statuses.begin(), o.statuses.end());
  }
  return out;
}

} // namespace sdpa_doctor::run

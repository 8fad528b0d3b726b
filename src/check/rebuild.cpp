// check/rebuild: `report JOURNAL`, a check's reports rebuilt from its journal, e.g. after the
// doctor was killed (OOM, SIGKILL, a CI timeout), with its shrinking and verified advice where the
// check got that far.
#include "check/advise.hpp"
#include "check/check.hpp"
#include "check/exit_code.hpp"
#include "check/journal_header.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <optional>
#include <set>

namespace sdpa_doctor::check {

namespace {

constexpr const char* k_not_measured = "not measured: the run ended before this cell";

// The journal's cells, with a `skipped` result for each one it never got to.
std::vector<CaseResult> every_planned_cell(const run::JournalContents& journal,
                                           const cases::TolerancePolicy& tolerances) {
  std::set<std::string> have;
  for (const CaseResult& r : journal.results)
    have.insert(run::cell_key(r));
  std::vector<CaseResult> out = journal.results;
  for (const run::PlannedRun& run : journal.plan.runs)
    for (const Case& c : journal.plan.cases) {
      const std::string variant = run.variant.name();
      if (!run.takes(c) || have.count(run::cell_key(run.target, run.probe, variant, run.mode, c.id())))
        continue;
      CaseResult r;
      r.case_id = c.id();
      r.kase = c;
      r.device = run.target;
      r.probe = run.probe;
      r.variant = variant;
      r.mode = run.mode;
      r.tolerance = tolerances.for_dtype(c.dtype);
      r.status = Status::skipped;
      r.reason = k_not_measured;
      r.cause = SkipCause::not_measured;
      out.push_back(std::move(r));
    }
  run::sort_by_plan(journal.plan, out);
  return out;
}

// Said once when the journal stops before its run did, with the command that finishes it.
std::optional<Finding> incomplete_run_finding(const std::vector<CaseResult>& results,
                                              const std::string& path) {
  const size_t missing = size_t(std::count_if(results.begin(), results.end(), [](const CaseResult& r) {
    return r.status == Status::skipped &&
           (r.cause == SkipCause::not_measured || !run::is_measured(r));
  }));
  if (missing == 0) return std::nullopt;
  std::error_code ec;
  const std::string dir = std::filesystem::is_directory(path, ec)
                              ? path
                              : std::filesystem::path(path).parent_path().string();
  Finding f;
  f.id = "run-incomplete";
  f.severity = Severity::warning;
  f.message = fmt::format("the journal ends before its run did: {} of {} cells not measured",
                          missing, results.size());
  f.remedy = fmt::format("sdpa-doctor check --resume {} (runs only those cells)",
                         dir.empty() ? std::string(".") : dir);
  return f;
}

} // namespace

int rebuild_report(const std::string& path, const Outputs& outputs) {
  auto journal = run::read_journal(path);
  if (!journal) throw Fatal{journal.error().message};
  auto header = read_journal_header(journal->header);
  if (!header) throw Fatal{fmt::format("{}: {}", path, header.error().message)};
  const CheckRequest& request = header->request;
  Report report = std::move(header->started);

  report.results = every_planned_cell(*journal, request.tolerances);
  report.workers = journal->workers;
  add_worker_versions(report);
  report.interrupted = !journal->finished;
  std::vector<Finding> findings = journal->findings;
  if (auto incomplete = incomplete_run_finding(report.results, path)) {
    findings.push_back(std::move(*incomplete));
    report.interrupted = true;
  }
  if (journal->shrinks) report.shrinks = *journal->shrinks;
  const AdviceInputs advice = advice_inputs(request);
  advise_report(report, advice, std::move(findings));
  ExitFacts facts;
  // What the check's re-runs settled on, not the advice before them.
  if (journal->verified && !report.interrupted)
    facts.failed_cells = take_verified_advice(report, *journal->verified, advice.fail_on);
  facts.failed_cells = facts.failed_cells || advice::any_failing(report.results, request.fail_on);
  facts.missing_required_gpu = request.require_gpu && report.inventory.devices.empty();
  facts.interrupt_signal = report.interrupted ? SIGINT : 0;
  // A run whose directory could not be written exited 4; so does its report.
  facts.run_dir_unwritable =
      std::any_of(report.findings.begin(), report.findings.end(),
                  [](const Finding& f) { return f.id == run::k_run_dir_unwritable; });
  report.exit_code = exit_code_for(facts);
  if (journal->lines_ignored > 0)
    fmt::print(stderr, "sdpa-doctor: warning: {} line(s) of the journal were not events (a torn "
                       "last line is what a kill mid-write leaves)\n",
               journal->lines_ignored);
  facts.report_unwritten = !present_and_write(std::move(report), outputs, {});
  return exit_code_for(facts);
}

} // namespace sdpa_doctor::check

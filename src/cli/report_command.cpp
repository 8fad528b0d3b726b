// `sdpa-doctor report JOURNAL`: the reports of a check rebuilt from its journal, e.g. after the
// doctor was killed (OOM, SIGKILL, a CI timeout), with its shrinking and verified advice where the
// check got that far. Every planned cell is in it: those the journal has no result for are
// `skipped` ("not measured"), and an unfinished journal reads as an interrupted run, exit code 130
// as the check's own interrupt, with the remedy to resume it.
#include "cli/check.hpp"
#include "cli/commands.hpp"
#include "core/model_json.hpp"
#include "core/text.hpp"
#include "report/report.hpp"
#include "run/run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <memory>
#include <set>

namespace sdpa_doctor::cli {

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
      if (have.count(run::cell_key(run.target, run.probe, variant, c.id()))) continue;
      CaseResult r;
      r.case_id = c.id();
      r.kase = c;
      r.device = run.target;
      r.probe = run.probe;
      r.variant = variant;
      r.tolerance = tolerances.for_dtype(c.dtype);
      r.status = Status::skipped;
      r.reason = k_not_measured;
      out.push_back(std::move(r));
    }
  run::sort_by_plan(journal.plan, out);
  return out;
}

// Said once when the journal stops before its run did, with the command that finishes it.
std::optional<Finding> incomplete_run_finding(const std::vector<CaseResult>& results,
                                              const std::string& path) {
  const size_t missing = size_t(std::count_if(results.begin(), results.end(), [](const CaseResult& r) {
    return r.status == Status::skipped && (r.reason == k_not_measured || !run::is_measured(r));
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

int run_report(const std::string& path, const GlobalOptions& global) {
  std::error_code ec;
  refuse_output_over(global,
                     std::filesystem::is_directory(path, ec)
                         ? (std::filesystem::path(path) / "journal.jsonl").string()
                         : path,
                     "the journal the report is rebuilt from");
  auto journal = run::read_journal(path);
  if (!journal) throw Fatal{journal.error().message};
  const nlohmann::json& header = journal->header;
  if (!header.is_object() || !header.contains("check_options") || !header.contains("report"))
    throw Fatal{fmt::format("{}: the journal keeps no report header (written by an older doctor)",
                            path)};
  CheckOptions o;
  std::optional<Case> target;
  try {
    o = header.at("check_options").get<CheckOptions>();
    if (header.contains("advice_target")) {
      auto t = case_from_json(header.at("advice_target"));
      if (t) target = *t;
    }
  } catch (const nlohmann::json::exception&) {
    throw Fatal{fmt::format("{}: the journal's check options are unreadable", path)};
  }
  auto started = report::read_measured_report(header.at("report"));
  if (!started) throw Fatal{fmt::format("{}: its report header: {}", path, started.error().message)};
  Report report = std::move(*started);
  auto tolerances = cases::parse_tolerance_overrides(o.tolerance);
  if (!tolerances) throw Fatal{tolerances.error().message};

  report.results = every_planned_cell(*journal, *tolerances);
  report.workers = journal->workers;
  add_worker_versions(report);
  report.interrupted = !journal->finished;
  std::vector<Finding> findings = journal->findings;
  if (auto incomplete = incomplete_run_finding(report.results, path)) {
    findings.push_back(std::move(*incomplete));
    report.interrupted = true;
  }
  if (journal->shrinks) report.shrinks = *journal->shrinks;
  const AdviceInputs advice = advice_inputs(o, target);
  advise_and_decide(report, advice, std::move(findings), 0);
  // What the check's re-runs settled on, not the advice before them.
  if (journal->verified && !report.interrupted)
    take_verified_advice(report, *journal->verified, advice.fail_on);
  // A run whose directory could not be written exited 4; so does its report.
  if (!report.interrupted &&
      std::any_of(report.findings.begin(), report.findings.end(),
                  [](const Finding& f) { return f.id == run::k_run_dir_unwritable; }))
    report.exit_code = exit_code::internal;
  if (journal->lines_ignored > 0)
    fmt::print(stderr, "sdpa-doctor: warning: {} line(s) of the journal were not events (a torn "
                       "last line is what a kill mid-write leaves)\n",
               journal->lines_ignored);
  return present_and_write(std::move(report), global, {});
}

} // namespace

void setup_report(CLI::App& app, const GlobalOptions& global, Action& action) {
  auto path = std::make_shared<std::string>();
  auto* sub = app.add_subcommand(
      "report", "Rebuild a check's reports from its journal (a run that was killed included)");
  sub->add_option("JOURNAL", *path, "The run's journal.jsonl, or the run directory holding it")
      ->required();
  sub->callback([&action, &global, path] {
    action = [&global, path] { return run_report(*path, global); };
  });
}

} // namespace sdpa_doctor::cli

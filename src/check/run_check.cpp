// check/run_check: the pipeline of `check` and `check --resume`.
#include "check/advise.hpp"
#include "check/check.hpp"
#include "check/exit_code.hpp"
#include "check/journal_header.hpp"
#include "check/steps.hpp"
#include "core/io.hpp"
#include "core/text.hpp"
#include "report/report.hpp"
#include "run/shrink.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace sdpa_doctor::check {

namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};

extern "C" void on_interrupt(int sig) {
  g_signal.store(sig);
  g_interrupted.store(true);
}

// Installs SIGINT/SIGTERM/SIGHUP handlers for the run and restores the old ones after: a closed
// terminal or session (SIGHUP) still gets the report of what finished.
class InterruptGuard {
public:
  InterruptGuard() {
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &m_old_int);
    sigaction(SIGTERM, &sa, &m_old_term);
    sigaction(SIGHUP, &sa, &m_old_hup);
  }
  ~InterruptGuard() {
    sigaction(SIGINT, &m_old_int, nullptr);
    sigaction(SIGTERM, &m_old_term, nullptr);
    sigaction(SIGHUP, &m_old_hup, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

private:
  struct sigaction m_old_int {};
  struct sigaction m_old_term {};
  struct sigaction m_old_hup {};
};

// Moves what the workers measured into the report; versions keyed by the probe that saw them.
void take_results(Report& report, run::ExecuteResult& executed) {
  report.results = std::move(executed.results);
  report.workers = std::move(executed.workers);
  report.timings.oracle_ms = executed.oracle_ms;
  report.timings.probes_ms = executed.probes_ms;
  add_worker_versions(report);
}

// Each recommendation re-run in a fresh python worker under exactly its printed flags; one whose
// re-run fails gives way to the next configuration the advice ranked. What they decided goes in
// the journal too, unless an interrupt cut them short. True when a re-run case failed.
bool verify_step(const CheckRequest& r, Report& report,
                 const std::vector<Recommendation>& alternatives, const run::ExecuteOptions& exec,
                 run::ExecuteResult& executed) {
  if (!r.verify || report.interrupted || report.recommendations.empty()) return false;
  const auto start = std::chrono::steady_clock::now();
  run::VerifiedAdvice verified = run::verify_recommendations(
      report.recommendations, alternatives, report.results, report.inventory, exec);
  report.timings.verify_ms = ms_since(start);
  if (g_interrupted.load()) report.interrupted = true;
  else run::journal_verified_advice(executed, verified);
  return take_verified_advice(report, std::move(verified), r.fail_on);
}

// request -> devices -> plan -> execute -> shrink -> advise -> verify -> exit code -> reports.
// `before`: the journal of the run being resumed.
int run_pipeline(const CheckRequest& r, const Outputs& outputs,
                 const run::JournalContents* before) {
  const auto start = std::chrono::steady_clock::now();
  check_outputs_writable(outputs);
  const AdviceInputs advice = advice_inputs(r);
  const std::string planted = planted_faults();

  InterruptGuard interrupt_guard;
  // Found, not yet imported: the enumeration looks for its HIP runtime first.
  const run::PythonChoice python = located_python(r);
  run::ExecuteOptions exec = execute_options(r, outputs, &g_interrupted);
  exec.run_dir = checked_run_dir(r.run_dir);
  const run::RunDirLock lock = locked_run_dir(exec.run_dir, !r.run_dir.empty());
  // One start-up server for the check's pre-flight, its Python workers, its shrinking and the
  // advice's re-runs: it imports torch while the devices are enumerated.
  exec.shared_probe_server = started_probe_server(r, python, exec);
  Report report = started_report(r, python);
  report.planted_faults = planted;
  preflight_step(r, python, exec, report.inventory);
  const run::Plan plan = checked_plan(r, report.inventory);
  const cache::FileInUse plugin_in_use =
      choose_torch_plugin(r, plan, python, outputs.quiet, exec, report.inventory);
  report.targets = plan.targets;
  exec.journal_header = journal_header_to_json({r, report, outputs.redact});
  if (outputs.redact) exec.journal_redactions = report::redactions(report);
  if (before) { // --resume: the cells that ended are kept, the rest run
    exec.append_journal = true;
    for (const CaseResult& c : before->results)
      if (run::is_measured(c)) exec.finished.push_back(c);
    spdlog::info("resuming {}: {} cells measured before", exec.run_dir, exec.finished.size());
  }
  spdlog::info("run directory {}", exec.run_dir);
  run::ExecuteResult executed = run::execute_plan(plan, report.inventory, exec);
  take_results(report, executed);
  if (before) {
    keep_earlier(report, executed.findings, *before);
    add_worker_versions(report); // what only the earlier workers said
  }
  if (r.shrink && !g_interrupted.load())
    report.shrinks = run::shrink_failures(report.results, report.inventory, exec, *r.shrink);
  if (!report.shrinks.empty()) run::journal_shrinks(executed, report.shrinks);

  const auto report_start = std::chrono::steady_clock::now();
  report.interrupted = g_interrupted.load(); // the advice says what an interrupt left unmeasured
  const std::vector<Recommendation> alternatives =
      advise_report(report, advice, std::move(executed.findings));
  const bool verify_failed = verify_step(r, report, alternatives, exec, executed);
  ExitFacts facts;
  facts.failed_cells = verify_failed || advice::any_failing(report.results, r.fail_on);
  facts.missing_required_gpu = r.require_gpu && report.inventory.devices.empty();
  const int sig = g_signal.load();
  facts.interrupt_signal = !report.interrupted ? 0 : sig != 0 ? sig : SIGINT;
  // An interpreter the user named that cannot run the probe is their input, not a backend.
  facts.named_python_unusable = exec.python_unusable && !r.python.empty();
  // A run directory that could not be written (a full disk) is the doctor's failure, not a
  // backend's: its cells are `skipped`, and this is said once, last.
  facts.run_dir_unwritable = !executed.write_error.empty();
  report.exit_code = exit_code_for(facts);
  const bool interrupted = report.interrupted;
  if (facts.named_python_unusable && !interrupted)
    fmt::print(stderr, "sdpa-doctor: error: --python: {}\n", escape_to_one_line(exec.python_reason));
  report.timings.total_ms = ms_since(start);
  report.timings.report_ms = ms_since(report_start) - report.timings.verify_ms;
  facts.report_unwritten = !present_and_write(std::move(report), outputs, executed.journal_path);
  if (facts.run_dir_unwritable && !interrupted)
    fmt::print(stderr, "sdpa-doctor: error: {}; free space there or pick another --run-dir\n",
               escape_to_one_line(executed.write_error));
  return exit_code_for(facts);
}

// Why `path` is not safe to take an interpreter's name from: empty when this user owns it and
// no one else can write it.
std::string writable_by_others(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return fmt::format("{} cannot be read", path);
  if (st.st_uid != ::geteuid()) return fmt::format("{} belongs to uid {}", path, st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fmt::format("{} is writable by others (mode {:04o})", path, st.st_mode & 07777);
  return {};
}

// The interpreter a journal names runs only from a run directory whose journal no one else could
// have edited; the user is told which one runs.
void check_journal_interpreter(const std::string& python, const std::string& run_dir,
                               const std::string& journal) {
  if (python.empty()) return;
  for (const std::string& path : {run_dir, journal})
    if (const std::string why = writable_by_others(path); !why.empty())
      throw Fatal{fmt::format("--resume {}: its journal names the interpreter {}, which runs only "
                              "from a run directory you own that no one else can write: {}",
                              escape_to_one_line(run_dir), escape_to_one_line(python),
                              escape_to_one_line(why))};
  spdlog::warn("resuming {} with the interpreter its journal names: {}", run_dir, python);
}

} // namespace

int run_check(const CheckRequest& request, const Outputs& outputs) {
  return run_pipeline(request, outputs, nullptr);
}

int resume_check(const std::string& run_dir, const Outputs& outputs) {
  auto journal = run::read_journal(run_dir);
  if (!journal) throw Fatal{"--resume: " + journal.error().message};
  auto header = read_journal_header(journal->header);
  if (!header) throw Fatal{fmt::format("--resume {}: {}", run_dir, header.error().message)};
  CheckRequest request = std::move(header->request);
  const bool is_dir = std::filesystem::is_directory(run_dir);
  request.run_dir = is_dir ? run_dir : std::filesystem::path(run_dir).parent_path().string();
  check_journal_interpreter(request.python, request.run_dir.empty() ? "." : request.run_dir,
                            is_dir ? (std::filesystem::path(run_dir) / "journal.jsonl").string()
                                   : run_dir);
  // A run that was redacted stays redacted, in its journal and its reports.
  Outputs resumed = outputs;
  resumed.redact = outputs.redact || header->redact;
  return run_pipeline(request, resumed, &*journal);
}

} // namespace sdpa_doctor::check

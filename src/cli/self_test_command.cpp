#include "check/check.hpp"
#include "cli/commands.hpp"

#include "core/status.hpp"
#include "isolate/isolate.hpp"
#include "run/run.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>

namespace sdpa_doctor::cli {

namespace {

struct SelfTestOptions {
  int deadline_ms = 1500;
  int grace_ms = 500;
  std::string run_dir; // empty: a temporary directory ($TMPDIR, else /tmp), removed afterwards
};

std::string end_text(const isolate::CaseOutcome& out) {
  if (!out.process_end) return "-";
  const ProcessEnd& e = *out.process_end;
  if (e.signal) return e.signal_name;
  if (e.exit_code) return fmt::format("exit {}", *e.exit_code);
  return "-";
}

bool row_ok(const isolate::FaultSpec& spec, const isolate::CaseOutcome& got) {
  if (got.status != spec.expected) return false;
  if (spec.signal != 0 && (!got.process_end || got.process_end->signal != spec.signal)) return false;
  if (spec.exit_code >= 0 &&
      (!got.process_end || got.process_end->exit_code != spec.exit_code))
    return false;
  if (!spec.signature.empty()) {
    bool found = false;
    for (const auto& id : got.signatures) found = found || id == spec.signature;
    if (!found) return false;
  }
  return true;
}

// Strays take a moment to disappear after SIGKILL (the kernel tears them down asynchronously).
std::vector<int> strays(const std::vector<int>& pgids) {
  std::vector<int> left;
  for (int tries = 0; tries < 100; ++tries) {
    left.clear();
    for (int pgid : pgids)
      for (int pid : isolate::processes_in_group(pgid)) left.push_back(pid);
    for (int pid : isolate::children_of(::getpid())) left.push_back(pid);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return left;
}

int run_self_test(const SelfTestOptions& options, bool quiet) {
  using std::chrono::milliseconds;
  const auto started = std::chrono::steady_clock::now();
  const auto& faults = isolate::fault_table();

  std::vector<isolate::PlannedCase> plan;
  for (const auto& f : faults)
    plan.push_back({f.name, nlohmann::json{{"v", 1}, {"id", f.name}, {"fault", f.name}}.dump(),
                    milliseconds(options.deadline_ms)});
  // A last clean case proves that the runner resumes after the last fault too.
  plan.push_back({"ok-after", R"({"v":1,"id":"ok-after","fault":"ok"})",
                  milliseconds(options.deadline_ms)});

  // A run directory kept for the logs is held like a check's: two runs would share its files.
  std::optional<run::RunDirLock> lock;
  if (!options.run_dir.empty()) {
    auto dir = run::make_run_dir(options.run_dir);
    if (!dir) throw Fatal{dir.error().message};
    lock = check::locked_run_dir(*dir, true);
  }

  isolate::WorkerCommand cmd;
  cmd.argv = {"/proc/self/exe", "__fault-worker"};
  isolate::RunnerOptions ro;
  ro.startup_deadline = milliseconds(10'000);
  ro.grace = milliseconds(options.grace_ms);
  ro.kill_wait = milliseconds(5'000);
  ro.max_restarts = static_cast<int>(plan.size());
  ro.run_dir = options.run_dir;
  ro.name = "self-test";
  auto report = isolate::run_worker(cmd, plan, ro);
  // Its cases could not be handed to the worker: the doctor's disk, not a wrong classification.
  if (!report.write_error.empty())
    throw Fatal{report.write_error + "; free space there or pick another --run-dir",
                exit_code::internal};

  int wrong = 0;
  fmt::print("{:<17} {:<11} {:<11} {:<9} {:<20} {:>8}  {}\n", "fault", "expected", "got",
             "end", "signature", "time_ms", "verdict");
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const auto& got = report.outcomes[i];
    const isolate::FaultSpec& spec = i < faults.size() ? faults[i] : faults.front();
    const bool ok = row_ok(spec, got);
    wrong += ok ? 0 : 1;
    std::string sig = got.signatures.empty() ? "-" : got.signatures.front();
    fmt::print("{:<17} {:<11} {:<11} {:<9} {:<20} {:>8.0f}  {}\n", plan[i].id,
               to_string(spec.expected), to_string(got.status), end_text(got), sig,
               got.elapsed_ms, ok ? "OK" : "WRONG");
    if (!ok && !quiet) fmt::print("    reason: {}\n", got.reason);
  }

  const auto left = strays(report.worker_pgids);
  const bool clean = left.empty();
  wrong += clean ? 0 : 1;
  fmt::print("{:<17} {:<11} {:<11} {:<9} {:<20} {:>8}  {}\n", "no-strays", "none",
             clean ? "none" : fmt::format("{} left", left.size()), "-", "-", "-",
             clean ? "OK" : "WRONG");
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  fmt::print("\n{} rows, {} wrong; {} worker processes, {} restarts; {:.1f} s\n", plan.size() + 1,
             wrong, report.worker_pgids.size(), report.restarts, total_s);
  return wrong == 0 ? exit_code::ok : exit_code::failures;
}

} // namespace

void setup_self_test(CLI::App& app, const GlobalOptions& global, Action& action) {
  auto options = std::make_shared<SelfTestOptions>();
  auto* sub = app.add_subcommand(
      "self-test", "Run every injected fault through the crash-isolating runner and check that "
                   "each is classified right (exit 0 when all are)");
  sub->add_option("--deadline-ms", options->deadline_ms, "Case deadline for the hang faults")
      ->check(CLI::Range(100, 600'000))
      ->default_str("1500");
  sub->add_option("--grace-ms", options->grace_ms, "Time between SIGTERM and SIGKILL")
      ->check(CLI::Range(0, 60'000))
      ->default_str("500");
  sub->add_option("--run-dir", options->run_dir,
                  "Keep the cases files and the workers' stderr log in DIR")
      ->type_name("DIR");
  sub->callback([options, &global, &action] {
    action = [options, &global] { return run_self_test(*options, global.quiet); };
  });
}

} // namespace sdpa_doctor::cli

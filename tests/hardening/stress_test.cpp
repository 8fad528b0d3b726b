// Stress of the runner with real processes: many cases with random injected faults, a 200 MiB
// stderr flood, workers killed in the middle of a protocol line, and the doctor itself killed
// mid-run. Sizes are CI-sized by default; SDPA_DOCTOR_STRESS_CASES (default 300),
// SDPA_DOCTOR_STRESS_HALF_LINES (default 50) and SDPA_DOCTOR_STRESS_SEED scale and vary them.
#include "hardening/hardening_support.hpp"
#include "isolate/isolate.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>

extern char** environ;

using namespace sdpa_doctor;
using namespace sdpa_doctor::isolate;
using std::chrono::milliseconds;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

long env_number(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n > 0 ? n : fallback;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

PlannedCase fault_case(const std::string& id, const std::string& fault, milliseconds deadline) {
  return {id, "{\"v\":1,\"id\":\"" + id + "\",\"fault\":\"" + fault + "\"}", deadline};
}

// The fault worker must die by the signal it raises. Under AddressSanitizer a worker would
// otherwise catch SIGSEGV, SIGBUS and SIGFPE itself and exit 1; the asan test preset says so in
// ASAN_OPTIONS, and this says it again so that the test binary run by hand behaves the same.
// Ignored by a build without sanitizers.
WorkerCommand fault_worker_command() {
  WorkerCommand cmd;
  cmd.argv = {sdpa_test::doctor(), "__fault-worker"};
  cmd.env = {{"ASAN_OPTIONS", "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:detect_leaks=0"}};
  return cmd;
}

RunnerOptions stress_options(int max_restarts) {
  RunnerOptions o;
  o.startup_deadline = milliseconds(20'000);
  o.grace = milliseconds(300);
  o.kill_wait = milliseconds(5'000);
  o.max_restarts = max_restarts;
  return o;
}

// Children of this process, given a moment to be reaped.
std::vector<int> children_left() {
  std::vector<int> left;
  for (int tries = 0; tries < 200; ++tries) {
    left = children_of(::getpid());
    if (left.empty()) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return left;
}

std::vector<int> group_members(const std::vector<int>& pgids) {
  std::vector<int> left;
  for (int tries = 0; tries < 200; ++tries) {
    left.clear();
    for (int pgid : pgids)
      for (int pid : processes_in_group(pgid)) left.push_back(pid);
    if (left.empty()) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return left;
}

// Counts every callback: a case must be reported exactly once.
class CountingObserver : public RunObserver {
public:
  void on_outcome(const CaseOutcome& outcome) override { ++m_outcomes[outcome.case_id]; }
  const std::map<std::string, int>& outcomes() const { return m_outcomes; }

private:
  std::map<std::string, int> m_outcomes;
};

// The runner on its own long-lived thread, as the doctor calls it (the workers' parent-death
// signal is tied to the spawning thread).
WorkerRunReport run_on_thread(const WorkerCommand& cmd, const std::vector<PlannedCase>& plan,
                              const RunnerOptions& options, RunObserver* observer) {
  WorkerRunReport report;
  std::thread t([&] { report = run_worker(cmd, plan, options, observer); });
  t.join();
  return report;
}

struct WeightedFault {
  const char* name;
  int weight;
};

// Mostly passes, every crash kind, refusals, errors, broken lines and a few hangs (each hang
// costs its short deadline plus the grace).
constexpr WeightedFault k_mix[] = {
    {"ok", 50},       {"unsupported", 8}, {"error", 6},        {"abort", 5},
    {"segv", 5},      {"bus", 2},         {"ill", 2},          {"fpe", 2},
    {"exit3", 4},     {"broken-line", 3}, {"close-results", 2}, {"ck-assert", 2},
    {"gpu-fault", 2}, {"grandchild", 1},  {"hang", 1},          {"endless-line", 1},
};

TEST(Stress, RandomFaultsEveryCaseOneStatusNoLeaks) {
  const long n = env_number("SDPA_DOCTOR_STRESS_CASES", 300);
  const unsigned seed = unsigned(env_number("SDPA_DOCTOR_STRESS_SEED", 20240611));
  std::mt19937 rng(seed);
  std::vector<int> weights;
  for (const auto& f : k_mix) weights.push_back(f.weight);
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  std::map<std::string, Status> expected_by_fault;
  for (const FaultSpec& f : fault_table()) expected_by_fault[f.name] = f.expected;

  std::vector<PlannedCase> plan;
  std::vector<std::string> faults;
  std::map<std::string, int> mix;
  for (long i = 0; i < n; ++i) {
    const std::string fault = k_mix[pick(rng)].name;
    // A hang costs its deadline; a closed results channel is waited out by the runner itself.
    const bool slow = fault == "hang" || fault == "broken-line";
    plan.push_back(fault_case("c" + std::to_string(i), fault, milliseconds(slow ? 250 : 10'000)));
    faults.push_back(fault);
    ++mix[fault];
  }

  sdpa_test::TempDir dir;
  RunnerOptions options = stress_options(int(n));
  options.run_dir = dir.path();
  options.name = "stress";
  const WorkerCommand cmd = fault_worker_command();

  // One small warm-up run so that lazily opened fds (logging, locale) exist before counting.
  (void)run_on_thread(cmd, {fault_case("warm", "ok", milliseconds(10'000))}, options, nullptr);
  const int fds_before = sdpa_test::count_fds();
  const long hwm_before = sdpa_test::vm_hwm_kib();
  const auto start = Clock::now();
  CountingObserver observer;
  const WorkerRunReport report = run_on_thread(cmd, plan, options, &observer);
  const double seconds = seconds_since(start);
  const int fds_after = sdpa_test::count_fds();
  const long hwm_after = sdpa_test::vm_hwm_kib();

  ASSERT_EQ(report.outcomes.size(), plan.size());
  std::map<Status, int> statuses;
  for (size_t i = 0; i < plan.size(); ++i) {
    const CaseOutcome& o = report.outcomes[i];
    EXPECT_EQ(o.case_id, plan[i].id);
    EXPECT_EQ(o.status, expected_by_fault[faults[i]])
        << o.case_id << " (" << faults[i] << "): " << to_string(o.status) << ": " << o.reason;
    EXPECT_EQ(observer.outcomes().count(o.case_id) ? observer.outcomes().at(o.case_id) : 0, 1)
        << o.case_id;
    ++statuses[o.status];
  }
  EXPECT_EQ(observer.outcomes().size(), plan.size());
  EXPECT_TRUE(children_left().empty()) << "zombies or live children remain";
  EXPECT_TRUE(group_members(report.worker_pgids).empty()) << "worker group members remain";
  EXPECT_EQ(fds_after, fds_before);
  // Memory does not grow with the number of cases: a generous fixed bound. AddressSanitizer
  // keeps freed blocks in its quarantine (256 MiB by default) before reusing them, so there the
  // bound is the quarantine on top.
#if defined(__SANITIZE_ADDRESS__)
  constexpr long k_bound_kib = (64 + 256) * 1024;
#else
  constexpr long k_bound_kib = 64 * 1024;
#endif
  EXPECT_LT(hwm_after - hwm_before, k_bound_kib) << "VmHWM grew by " << (hwm_after - hwm_before)
                                                 << " KiB";
  std::ostringstream figures;
  figures << n << " cases, " << report.worker_pgids.size() << " workers, " << seconds << " s, "
          << "fds " << fds_before << " -> " << fds_after << ", VmHWM " << hwm_before << " -> "
          << hwm_after << " KiB; statuses:";
  for (const auto& [s, count] : statuses) figures << " " << to_string(s) << "=" << count;
  RecordProperty("figures", figures.str());
  std::printf("[ figures  ] %s\n", figures.str().c_str());
}

TEST(Stress, TwoHundredMiBOfStderrDoesNotGrowMemory) {
  sdpa_test::TempDir dir;
  RunnerOptions options = stress_options(2);
  options.run_dir = dir.path();
  options.name = "flood";
  options.log_cap_bytes = std::size_t{32} << 20; // the 200 MiB must be cut on disk too
  const WorkerCommand cmd = fault_worker_command();
  const bool reset = sdpa_hardening::reset_vm_hwm();
  const long hwm_before = sdpa_test::vm_hwm_kib();
  const auto report = run_on_thread(
      cmd, {fault_case("flood", "stderr-flood", milliseconds(60'000)),
            fault_case("after", "ok", milliseconds(10'000))},
      options, nullptr);
  const long grown = sdpa_test::vm_hwm_kib() - hwm_before;
  ASSERT_EQ(report.outcomes.size(), 2u);
  EXPECT_EQ(report.outcomes[0].status, Status::pass) << report.outcomes[0].reason;
  EXPECT_EQ(report.outcomes[1].status, Status::pass) << report.outcomes[1].reason;
  EXPECT_LE(report.outcomes[0].stderr_tail.size(), 64u * 1024);
  // The runner keeps bounded tails (16 MiB at most by contract), never the whole 200 MiB.
  EXPECT_LT(grown, 48 * 1024) << "VmHWM grew by " << grown << " KiB (reset: " << reset << ")";
  // The flood really happened, and the log on disk is capped too.
  ASSERT_FALSE(report.stderr_log_path.empty());
  const auto logged = fs::file_size(report.stderr_log_path);
  EXPECT_GE(logged, options.log_cap_bytes / 2);
  EXPECT_LE(logged, options.log_cap_bytes + (1u << 20));
  std::printf("[ figures  ] 200 MiB stderr: VmHWM +%ld KiB (reset %s)\n", grown,
              reset ? "yes" : "no");
}

TEST(Stress, WorkersKilledMidLine) {
  const long n = env_number("SDPA_DOCTOR_STRESS_HALF_LINES", 50);
  const char* kinds[] = {"half-abort", "half-kill", "half-exit"};
  std::vector<PlannedCase> plan;
  std::vector<Status> expected;
  for (long i = 0; i < n; ++i) {
    const std::string kind = kinds[i % 3];
    plan.push_back(fault_case("h" + std::to_string(i), kind, milliseconds(10'000)));
    expected.push_back(kind == "half-exit" ? Status::error : Status::crash);
    plan.push_back(fault_case("ok" + std::to_string(i), "ok", milliseconds(10'000)));
    expected.push_back(Status::pass);
  }
  WorkerCommand cmd;
  cmd.argv = {SDPA_HALF_LINE_WORKER};
  const int fds_before = sdpa_test::count_fds();
  const auto report = run_on_thread(cmd, plan, stress_options(int(n) + 1), nullptr);
  ASSERT_EQ(report.outcomes.size(), plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const CaseOutcome& o = report.outcomes[i];
    EXPECT_EQ(o.case_id, plan[i].id);
    EXPECT_EQ(o.status, expected[i]) << o.case_id << ": " << o.reason;
    // Half a result line is never taken for a result.
    if (expected[i] != Status::pass) {
      EXPECT_FALSE(o.result.has_value()) << o.case_id;
    }
  }
  EXPECT_EQ(int(report.worker_pgids.size()), int(n) + 1);
  EXPECT_TRUE(children_left().empty());
  EXPECT_EQ(sdpa_test::count_fds(), fds_before);
}

// ---- the doctor killed mid-run ---------------------------------------------------------------

std::vector<nlohmann::json> journal_events(const std::string& path) {
  std::vector<nlohmann::json> events;
  std::istringstream lines(sdpa_test::read_file(path));
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) events.push_back(std::move(j));
  }
  return events;
}

struct KillScenario {
  std::string probe;   // libtorch or python
  std::string python;  // for the python probe
};

void kill_mid_run(const KillScenario& scenario) {
  sdpa_test::TempDir dir;
  const std::string run_dir = dir.file("run");
  const std::vector<std::string> cases = {"dtype=fp32,b=1,h=1,l=8,d=8", "dtype=fp32,b=1,h=2,l=8,d=8",
                                          "dtype=fp32,b=1,h=3,l=8,d=8", "dtype=fp32,b=1,h=4,l=8,d=8"};
  const std::string hang_id = "fp32-b1-h3-q8-k8-d8";
  std::vector<std::string> args = {sdpa_test::doctor(), "check",     "--run-dir", run_dir,
                                   "--probe",           scenario.probe, "--variant", "math",
                                   "--device",          "cpu",      "--case-timeout", "600",
                                   "--json",            dir.file("r.json")};
  if (!scenario.python.empty()) args.insert(args.end(), {"--python", scenario.python});
  for (const auto& c : cases) args.insert(args.end(), {"--case", c});

  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  env_strings.push_back("SDPA_DOCTOR_TEST_FAULT=variant=math,case=" + hang_id + ",action=hang");
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, dir.file("doctor.err").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t doctor = -1;
  ASSERT_EQ(posix_spawn(&doctor, argv[0], &actions, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);

  // Wait until the worker is inside the hanging case: the two before it are finished.
  const std::string journal = run_dir + "/journal.jsonl";
  std::set<std::string> finished;
  bool hanging = false;
  const auto start = Clock::now();
  while (!hanging && seconds_since(start) < 240) {
    finished.clear();
    for (const auto& e : journal_events(journal)) {
      if (e.value("event", "") == "outcome") finished.insert(e.value("case", ""));
      if (e.value("event", "") == "begin" && e.value("case", "") == hang_id) hanging = true;
    }
    int status = 0;
    if (::waitpid(doctor, &status, WNOHANG) == doctor) {
      FAIL() << "the doctor ended before the hang: " << sdpa_test::read_file(dir.file("doctor.err"));
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_TRUE(hanging) << "the hanging case never began: "
                       << sdpa_test::read_file(dir.file("doctor.err"));
  // Let the journal show the worker is really stuck, then kill the doctor as the OOM killer would.
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_EQ(::kill(doctor, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(doctor, &status, 0), doctor);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  // Every case that finished before the kill is in the journal on disk, as a whole line.
  std::set<std::string> journaled;
  const auto events = journal_events(journal);
  for (const auto& e : events)
    if (e.value("event", "") == "outcome") {
      journaled.insert(e.value("case", ""));
      EXPECT_EQ(e.value("status", ""), "pass") << e.dump();
    }
  EXPECT_TRUE(journaled.count("fp32-b1-h1-q8-k8-d8")) << sdpa_test::read_file(journal);
  EXPECT_TRUE(journaled.count("fp32-b1-h2-q8-k8-d8")) << sdpa_test::read_file(journal);
  EXPECT_FALSE(journaled.count(hang_id));
  std::istringstream raw(sdpa_test::read_file(journal));
  for (std::string line; std::getline(raw, line);)
    EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;

  // The workers die with their parent (PR_SET_PDEATHSIG): nothing that names the run remains.
  std::vector<int> left;
  for (int tries = 0; tries < 100; ++tries) {
    left = sdpa_hardening::processes_with_cmdline(run_dir);
    if (left.empty()) break;
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_TRUE(left.empty()) << left.size() << " processes still name the run dir, e.g. pid "
                            << (left.empty() ? 0 : left[0]);
  for (int pid : left) ::kill(pid, SIGKILL);
  // No report was written: the kill left no half file either.
  EXPECT_FALSE(fs::exists(dir.file("r.json")));
}

TEST(DoctorKilled, LibtorchProbeJournalKeepsFinishedCasesAndWorkersDie) {
  if (sdpa_hardening::torch_worker().empty()) GTEST_SKIP() << "no LibTorch worker in this build";
  kill_mid_run({"libtorch", ""});
}

TEST(DoctorKilled, PythonProbeJournalKeepsFinishedCasesAndWorkersDie) {
  const std::string python = sdpa_hardening::python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python with torch configured";
  kill_mid_run({"python", python});
}

} // namespace

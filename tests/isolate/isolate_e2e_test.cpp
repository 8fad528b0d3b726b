// End-to-end tests of isolate with real processes: run_simple, and the runner against the doctor's
// own fault-injection worker (every fault really happens: signals, hangs, floods, broken lines).
#include "isolate/isolate.hpp"

#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

using namespace sdpa_doctor;
using namespace sdpa_doctor::isolate;
using std::chrono::milliseconds;

namespace {

using Clock = std::chrono::steady_clock;

using sdpa_test::count_fds;
using sdpa_test::vm_hwm_kib;

// Processes left behind: members of any worker group, or children of this test process.
std::vector<int> strays(const std::vector<int>& pgids) {
  std::vector<int> left;
  for (int tries = 0; tries < 100; ++tries) {
    left.clear();
    for (int pgid : pgids)
      for (int pid : processes_in_group(pgid)) left.push_back(pid);
    for (int pid : children_of(::getpid())) left.push_back(pid);
    if (left.empty()) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return left;
}

PlannedCase fault_case(const std::string& id, const std::string& fault, milliseconds deadline) {
  return {id, "{\"v\":1,\"id\":\"" + id + "\",\"fault\":\"" + fault + "\"}", deadline};
}

WorkerCommand fault_worker() {
  WorkerCommand cmd;
  cmd.argv = {sdpa_test::doctor(), "__fault-worker"};
  return cmd;
}

RunnerOptions quick_options() {
  RunnerOptions o;
  o.startup_deadline = milliseconds(10'000);
  o.grace = milliseconds(500);
  o.kill_wait = milliseconds(5'000);
  o.max_restarts = 8;
  return o;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// ---- run_simple ----------------------------------------------------------------------------

TEST(RunSimple, CapturesOutputAndExitCode) {
  auto run = run_simple({{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, {}, true},
                        milliseconds(5000));
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_EQ(run->out, "out\n");
  EXPECT_EQ(run->err, "err\n");
  EXPECT_EQ(run->end.exit_code, 3);
  EXPECT_FALSE(run->timed_out);
}

TEST(RunSimple, KillsAtTheDeadline) {
  const auto start = Clock::now();
  auto run = run_simple({{"sleep", "30"}, {}, true}, milliseconds(300));
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_TRUE(run->timed_out);
  EXPECT_EQ(run->end.signal, SIGTERM);
  EXPECT_TRUE(run->end.killed_by_doctor);
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST(RunSimple, MissingProgramIsAnError) {
  auto run = run_simple({{"/nonexistent/program"}, {}, true}, milliseconds(1000));
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("No such file"), std::string::npos);
  auto by_name = run_simple({{"no-such-program-sdpa"}, {}, true}, milliseconds(1000));
  EXPECT_FALSE(by_name);
}

TEST(RunSimple, ChildSeesACleanEnvironmentAndNoLeakedFds) {
  ::setenv("SDPA_ISOLATE_TEST_SECRET", "x", 1);
  ::setenv("HIP_VISIBLE_DEVICES", "7", 1);
  auto run = run_simple({{"/bin/sh", "-c", "env; echo; ls /proc/self/fd"}, {{"MINE", "1"}}, true},
                        milliseconds(5000));
  ::unsetenv("SDPA_ISOLATE_TEST_SECRET");
  ::unsetenv("HIP_VISIBLE_DEVICES");
  ASSERT_TRUE(run);
  EXPECT_EQ(run->out.find("SDPA_ISOLATE_TEST_SECRET"), std::string::npos);
  EXPECT_NE(run->out.find("HIP_VISIBLE_DEVICES=7"), std::string::npos);
  EXPECT_NE(run->out.find("MINE=1"), std::string::npos);
  // ls sees 0, 1, 2 and its own directory fd: nothing of ours crossed exec.
  std::string fds = run->out.substr(run->out.find("\n\n") + 2);
  EXPECT_EQ(sdpa_test::line_count(fds), 4) << fds;
}

TEST(RunSimple, StdinIsDevNullAndTheGroupIsOwn) {
  auto run = run_simple({{"/bin/sh", "-c", "cat; ps -o pgid= -p $$; echo $$"}, {}, true},
                        milliseconds(5000));
  ASSERT_TRUE(run);
  std::istringstream lines(run->out);
  int pgid = 0, pid = -1;
  lines >> pgid >> pid;
  if (pgid != 0) { // ps may be missing; cat returned at once either way
    EXPECT_EQ(pgid, pid);
  }
  EXPECT_EQ(run->end.exit_code, 0);
}

// ---- the runner against every injected fault -----------------------------------------------

class EveryFault : public ::testing::TestWithParam<FaultSpec> {};

TEST_P(EveryFault, IsClassifiedAttributedAndResumed) {
  const FaultSpec& spec = GetParam();
  const milliseconds deadline(1500);
  RunnerOptions options = quick_options();
  std::vector<PlannedCase> plan = {fault_case("before", "ok", deadline),
                                   fault_case("culprit", spec.name, deadline),
                                   fault_case("after1", "ok", deadline),
                                   fault_case("after2", "ok", deadline)};
  const int fds_before = count_fds();
  const auto start = Clock::now();
  WorkerRunReport report = run_worker(fault_worker(), plan, options);
  const double took = seconds_since(start);

  ASSERT_EQ(report.outcomes.size(), plan.size());
  for (std::size_t i = 0; i < plan.size(); ++i) EXPECT_EQ(report.outcomes[i].case_id, plan[i].id);
  EXPECT_EQ(report.outcomes[0].status, Status::pass) << report.outcomes[0].reason;
  const CaseOutcome& culprit = report.outcomes[1];
  EXPECT_EQ(culprit.status, spec.expected) << culprit.reason;
  if (spec.signal != 0) {
    ASSERT_TRUE(culprit.process_end) << culprit.reason;
    EXPECT_EQ(culprit.process_end->signal, spec.signal) << culprit.reason;
    EXPECT_EQ(culprit.process_end->signal_name, signal_name(spec.signal));
  }
  if (spec.exit_code >= 0) {
    ASSERT_TRUE(culprit.process_end);
    EXPECT_EQ(culprit.process_end->exit_code, spec.exit_code);
  }
  if (!spec.signature.empty()) {
    EXPECT_NE(std::find(culprit.signatures.begin(), culprit.signatures.end(), spec.signature),
              culprit.signatures.end())
        << culprit.stderr_tail;
    EXPECT_FALSE(culprit.stderr_tail.empty());
  }
  EXPECT_FALSE(culprit.reason.empty() && spec.expected != Status::pass);
  const bool worker_dies = spec.expected == Status::crash || spec.expected == Status::timeout ||
                           (spec.expected == Status::error && spec.name != "error");
  EXPECT_EQ(report.restarts, worker_dies ? 1 : 0);
  for (std::size_t i = 2; i < plan.size(); ++i) {
    EXPECT_EQ(report.outcomes[i].status, Status::pass) << report.outcomes[i].reason;
    EXPECT_EQ(report.outcomes[i].attempt, worker_dies ? 1 : 0);
  }
  EXPECT_TRUE(report.hello.has_value());
  EXPECT_TRUE(strays(report.worker_pgids).empty());
  EXPECT_EQ(count_fds(), fds_before);
  // A hang costs its deadline plus the grace, not more; everything else is quick.
  const double bound = spec.expected == Status::timeout ? 1.5 + 0.5 + 1.5 : 6.0;
  EXPECT_LT(took, bound);
  EXPECT_LE(culprit.stderr_tail.size(), 8u * 1024u);
}

INSTANTIATE_TEST_SUITE_P(Faults, EveryFault, ::testing::ValuesIn(fault_table()),
                         [](const ::testing::TestParamInfo<FaultSpec>& param_info) {
                           std::string name = param_info.param.name;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

// ---- budgets, health, interrupts ------------------------------------------------------------

TEST(Runner, RestartBudgetSkipsTheRest) {
  RunnerOptions options = quick_options();
  options.max_restarts = 1;
  const milliseconds d(5000);
  std::vector<PlannedCase> plan = {fault_case("a1", "abort", d), fault_case("a2", "segv", d),
                                   fault_case("ok1", "ok", d), fault_case("ok2", "ok", d)};
  auto report = run_worker(fault_worker(), plan, options);
  ASSERT_EQ(report.outcomes.size(), 4u);
  EXPECT_EQ(report.outcomes[0].status, Status::crash);
  EXPECT_EQ(report.outcomes[1].status, Status::crash);
  EXPECT_EQ(report.outcomes[1].attempt, 1);
  EXPECT_EQ(report.outcomes[2].status, Status::skipped);
  EXPECT_EQ(report.outcomes[2].reason, "restart budget spent after a2");
  EXPECT_EQ(report.outcomes[3].reason, "restart budget spent after a2");
  // The cause is data too, so a report groups the skipped cells under a2 without reading words.
  for (size_t i : {2u, 3u}) {
    EXPECT_EQ(report.outcomes[i].cause, SkipCause::restart_budget_spent);
    EXPECT_EQ(report.outcomes[i].culprit, "a2");
  }
  EXPECT_EQ(report.outcomes[1].cause, SkipCause::none); // the worker's crash, not a skip
  EXPECT_EQ(report.restarts, 1);
  EXPECT_TRUE(strays(report.worker_pgids).empty());
}

TEST(Runner, UnhealthyDeviceSkipsTheRest) {
  RunnerOptions options = quick_options();
  options.health_check = Command{{"/bin/false"}, {}, true};
  const milliseconds d(5000);
  std::vector<PlannedCase> plan = {fault_case("ok1", "ok", d), fault_case("boom", "gpu-fault", d),
                                   fault_case("ok2", "ok", d)};
  auto report = run_worker(fault_worker(), plan, options);
  EXPECT_EQ(report.outcomes[0].status, Status::pass);
  EXPECT_EQ(report.outcomes[1].status, Status::crash);
  EXPECT_EQ(report.outcomes[2].status, Status::skipped);
  EXPECT_EQ(report.outcomes[2].reason, "device unhealthy after boom");
  EXPECT_EQ(report.outcomes[2].cause, SkipCause::device_unhealthy);
  EXPECT_EQ(report.outcomes[2].culprit, "boom");
  EXPECT_EQ(report.outcomes[0].cause, SkipCause::none);
  EXPECT_TRUE(report.outcomes[0].culprit.empty());
  EXPECT_TRUE(report.device_unhealthy);
  EXPECT_EQ(report.restarts, 0);
}

TEST(Runner, HealthyDeviceResumes) {
  RunnerOptions options = quick_options();
  options.health_check = Command{{"/bin/true"}, {}, true};
  const milliseconds d(5000);
  std::vector<PlannedCase> plan = {fault_case("boom", "segv", d), fault_case("ok2", "ok", d)};
  auto report = run_worker(fault_worker(), plan, options);
  EXPECT_EQ(report.outcomes[0].status, Status::crash);
  EXPECT_EQ(report.outcomes[1].status, Status::pass);
  EXPECT_FALSE(report.device_unhealthy);
}

TEST(Runner, InterruptStopsWithinMilliseconds) {
  RunnerOptions options = quick_options();
  std::atomic<bool> stop{false};
  options.interrupted = &stop;
  std::vector<PlannedCase> plan = {fault_case("ok1", "ok", milliseconds(30'000)),
                                   fault_case("hang", "hang", milliseconds(30'000)),
                                   fault_case("ok2", "ok", milliseconds(30'000))};
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(400));
    stop = true;
  });
  const auto start = Clock::now();
  auto report = run_worker(fault_worker(), plan, options);
  const double took = seconds_since(start);
  stopper.join();
  EXPECT_EQ(report.outcomes[0].status, Status::pass);
  EXPECT_EQ(report.outcomes[1].status, Status::skipped);
  EXPECT_EQ(report.outcomes[1].reason, "interrupted");
  EXPECT_EQ(report.outcomes[2].reason, "interrupted");
  EXPECT_EQ(report.outcomes[2].cause, SkipCause::interrupted);
  EXPECT_TRUE(report.outcomes[2].culprit.empty());
  EXPECT_LT(took, 1.2);
  EXPECT_TRUE(strays(report.worker_pgids).empty());
}

TEST(Runner, WorkerDeadlineBoundsTheWholeWorker) {
  RunnerOptions options = quick_options();
  options.worker_deadline = milliseconds(800);
  std::vector<PlannedCase> plan = {fault_case("hang", "hang", milliseconds(30'000)),
                                   fault_case("ok", "ok", milliseconds(30'000))};
  const auto start = Clock::now();
  auto report = run_worker(fault_worker(), plan, options);
  EXPECT_EQ(report.outcomes[0].status, Status::timeout);
  EXPECT_NE(report.outcomes[0].reason.find("worker deadline"), std::string::npos);
  EXPECT_EQ(report.outcomes[1].status, Status::pass);
  EXPECT_LT(seconds_since(start), 3.0);
}

TEST(Runner, WorkerThatCannotStartFailsEveryCase) {
  auto run_with = [](std::vector<std::string> argv) {
    WorkerCommand cmd;
    cmd.argv = std::move(argv);
    std::vector<PlannedCase> plan = {fault_case("c1", "ok", milliseconds(1000)),
                                     fault_case("c2", "ok", milliseconds(1000))};
    return run_worker(cmd, plan, quick_options());
  };
  auto missing = run_with({"/nonexistent/worker"});
  ASSERT_EQ(missing.outcomes.size(), 2u);
  for (const auto& o : missing.outcomes) {
    EXPECT_EQ(o.status, Status::error);
    EXPECT_NE(o.reason.find("cannot start worker"), std::string::npos);
    EXPECT_EQ(o.cause, SkipCause::worker_spawn_failed);
  }
  auto dies = run_with({"/bin/false"}); // exits 1 before any begin
  for (const auto& o : dies.outcomes) {
    EXPECT_EQ(o.status, Status::error);
    EXPECT_NE(o.reason.find("before its first case"), std::string::npos) << o.reason;
    EXPECT_EQ(o.cause, SkipCause::worker_failed_at_start);
  }
  EXPECT_EQ(dies.restarts, 0);
}

TEST(Runner, FloodedStderrStaysBoundedInMemoryAndOnDisk) {
  sdpa_test::TempDir dir;
  RunnerOptions options = quick_options();
  options.run_dir = dir.path();
  options.name = "flood";
  const long hwm_before = vm_hwm_kib();
  std::vector<PlannedCase> plan = {fault_case("flood", "stderr-flood", milliseconds(20'000))};
  auto report = run_worker(fault_worker(), plan, options);
  EXPECT_EQ(report.outcomes[0].status, Status::pass) << report.outcomes[0].reason;
  EXPECT_LE(report.outcomes[0].stderr_tail.size(), 8u * 1024u);
  EXPECT_LT(vm_hwm_kib() - hwm_before, 64 * 1024); // KiB: far below the 200 MiB written
  // The log keeps its head and its tail, a few MiB in all, and says how much of the middle went.
  struct stat st {};
  ASSERT_EQ(::stat(report.stderr_log_path.c_str(), &st), 0);
  EXPECT_GE(std::size_t(st.st_size), options.log_cap_bytes);
  EXPECT_LE(std::size_t(st.st_size), options.log_cap_bytes + 4096);
  EXPECT_LE(options.log_cap_bytes, std::size_t{8} << 20);
  const std::string log = sdpa_test::read_file(report.stderr_log_path);
  EXPECT_NE(log.find("attempt 0: pid"), std::string::npos) << "the head is kept";
  EXPECT_NE(log.find(" bytes cut here"), std::string::npos);
  EXPECT_EQ(log.substr(log.size() - 2), "x\n") << "the flood's last bytes are kept";
}

TEST(Runner, ObserverSeesEveryEventInOrder) {
  struct Recorder : RunObserver {
    std::vector<std::string> events;
    void on_hello(const nlohmann::json& h) override { events.push_back("hello:" + h.value("worker", std::string())); }
    void on_begin(const std::string& id) override { events.push_back("begin:" + id); }
    void on_outcome(const CaseOutcome& o) override {
      events.push_back("outcome:" + o.case_id + ":" + std::string(to_string(o.status)));
    }
  } recorder;
  const milliseconds d(5000);
  std::vector<PlannedCase> plan = {fault_case("a", "ok", d), fault_case("b", "abort", d),
                                   fault_case("c", "unsupported", d)};
  run_worker(fault_worker(), plan, quick_options(), &recorder);
  EXPECT_EQ(recorder.events,
            (std::vector<std::string>{"hello:fault", "begin:a", "outcome:a:pass", "begin:b",
                                      "outcome:b:crash", "hello:fault", "begin:c",
                                      "outcome:c:unsupported"}));
}

TEST(SelfTest, PassesThroughTheBinary) {
  const auto start = Clock::now();
  auto run = sdpa_test::run_binary({sdpa_test::doctor(), "self-test"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("no-strays"), std::string::npos);
  EXPECT_EQ(run.out.find("WRONG"), std::string::npos) << run.out;
  EXPECT_LT(seconds_since(start), 30.0);
}

// The self-test's stderr-flood writes 200 MiB: its log in --run-dir keeps a few MiB of it.
TEST(SelfTest, ItsWorkerLogInARunDirIsCapped) {
  sdpa_test::TempDir dir;
  auto run = sdpa_test::run_binary({sdpa_test::doctor(), "self-test", "--run-dir", dir.path()});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  struct stat st {};
  ASSERT_EQ(::stat(dir.file("self-test.stderr.log").c_str(), &st), 0);
  EXPECT_LE(st.st_size, 8L << 20);
  EXPECT_NE(sdpa_test::read_file(dir.file("self-test.stderr.log")).find(" bytes cut here"),
            std::string::npos);
}

TEST(SelfTest, FaultWorkerIsHidden) {
  auto run = sdpa_test::run_binary({sdpa_test::doctor(), "--help"});
  EXPECT_EQ(run.out.find("__fault-worker"), std::string::npos);
  EXPECT_NE(run.out.find("self-test"), std::string::npos);
}

} // namespace

// execute_plan's scheduling with a fake worker runner (ExecuteOptions::runner): no worker process
// is spawned, each run of a worker answers outcomes scripted per target. What is checked is
// execute's part: every planned cell ends in one result taken from its outcome, a crash's
// restarts reach the worker's record, an unhealthy device stops the rest of its target's runs,
// the targets run beside each other and each target one worker at a time. The runner itself
// (restarts, deadlines, the skip after max restarts) is isolate's, tested with real processes.
#include "run/run.hpp"

#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

using namespace sdpa_doctor;
using namespace sdpa_doctor::run;

namespace {

std::vector<Case> two_cases() {
  return {*parse_case_spec("dtype=fp32,h=1,l=8,d=16"), *parse_case_spec("dtype=fp32,h=2,l=8,d=16")};
}

isolate::CaseOutcome outcome(const std::string& id, Status status, const std::string& reason = {}) {
  isolate::CaseOutcome o;
  o.case_id = id;
  o.status = status;
  o.reason = reason;
  return o;
}

// One call of the runner as the fake saw it.
struct Call {
  std::string name; // RunnerOptions::name: "<target>-<probe>-<variant>"
  std::vector<std::string> case_ids;
  int max_restarts = 0;
};

// Answers each run from `script` (default: every case passes) and records the calls.
class FakeRunner : public WorkerRunner {
public:
  using Script = std::function<isolate::WorkerRunReport(const Call&)>;
  explicit FakeRunner(Script script = {}) : m_script(std::move(script)) {}

  isolate::WorkerRunReport run(const isolate::WorkerCommand&,
                               const std::vector<isolate::PlannedCase>& cases,
                               const isolate::RunnerOptions& options,
                               isolate::RunObserver* observer) override {
    Call call{options.name, {}, options.max_restarts};
    for (const isolate::PlannedCase& c : cases) call.case_ids.push_back(c.id);
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_calls.push_back(call);
      const std::string target = call.name.substr(0, call.name.find('-'));
      if (++m_running[target] > 1) m_overlap_within_target = true;
      ++m_running_all;
      m_max_running = std::max(m_max_running, m_running_all);
    }
    if (m_before_answer) m_before_answer(call);
    isolate::WorkerRunReport report = m_script ? m_script(call) : passing(call);
    for (const isolate::CaseOutcome& o : report.outcomes)
      if (observer) observer->on_outcome(o);
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      --m_running[call.name.substr(0, call.name.find('-'))];
      --m_running_all;
    }
    return report;
  }

  static isolate::WorkerRunReport passing(const Call& call) {
    isolate::WorkerRunReport report;
    for (const std::string& id : call.case_ids) report.outcomes.push_back(outcome(id, Status::pass));
    return report;
  }

  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_calls;
  }
  bool overlap_within_target() const { return m_overlap_within_target; }
  int max_running() const { return m_max_running; }
  void before_answer(std::function<void(const Call&)> hook) { m_before_answer = std::move(hook); }

private:
  Script m_script;
  std::function<void(const Call&)> m_before_answer;
  mutable std::mutex m_mutex;
  std::vector<Call> m_calls;
  std::map<std::string, int> m_running;
  int m_running_all = 0;
  int m_max_running = 0;
  bool m_overlap_within_target = false;
};

// A worker directory whose reference worker exists (the fake never starts it).
class WorkerDir {
public:
  WorkerDir() {
    const std::string worker = m_dir.file("sdpa-doctor-ref-worker");
    sdpa_test::write_file(worker, "#!/bin/sh\nexit 99\n");
    ::chmod(worker.c_str(), 0755);
  }
  ExecuteOptions options(WorkerRunner& runner) const {
    ExecuteOptions o;
    o.run_dir = m_dir.file("run");
    o.worker_dir = m_dir.path();
    o.runner = &runner;
    return o;
  }

private:
  sdpa_test::TempDir m_dir;
};

const CaseResult* find(const ExecuteResult& r, const std::string& target,
                       const std::string& variant, const std::string& id) {
  for (const CaseResult& c : r.results)
    if (c.device == target && c.variant == variant && c.case_id == id) return &c;
  return nullptr;
}

} // namespace

TEST(ExecuteSchedule, EveryCellTakesItsOutcomeAndTheRestartsAreRecorded) {
  WorkerDir setup;
  const Plan plan = make_plan({two_cases(), {Probe::reference}, {"ref-math"}, {"cpu"}}, {});
  const std::string crashing = plan.cases[0].id();
  FakeRunner runner([&](const Call& call) {
    isolate::WorkerRunReport report = FakeRunner::passing(call);
    report.outcomes[0].status = Status::crash;
    report.outcomes[0].reason = "signal SIGSEGV";
    report.restarts = 1; // the second case ran in a fresh worker
    report.outcomes[1].attempt = 1;
    return report;
  });
  ExecuteOptions options = setup.options(runner);
  options.max_worker_restarts = 2;
  const ExecuteResult r = execute_plan(plan, {}, options);

  ASSERT_EQ(runner.calls().size(), 1u);
  EXPECT_EQ(runner.calls()[0].max_restarts, 2);
  EXPECT_EQ(runner.calls()[0].case_ids.size(), 2u);
  ASSERT_EQ(r.results.size(), 2u);
  const CaseResult* crashed = find(r, "cpu", "ref-math", crashing);
  ASSERT_NE(crashed, nullptr);
  EXPECT_EQ(crashed->status, Status::crash);
  EXPECT_EQ(crashed->reason, "signal SIGSEGV");
  const CaseResult* after = find(r, "cpu", "ref-math", plan.cases[1].id());
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->status, Status::pass);
  EXPECT_EQ(after->attempt, 1);
  ASSERT_EQ(r.workers.size(), 1u);
  EXPECT_EQ(r.workers[0].restarts, 1);
}

TEST(ExecuteSchedule, CellsTheRunnerSkippedAfterMaxRestartsStaySkippedWithTheirReason) {
  WorkerDir setup;
  const Plan plan = make_plan({two_cases(), {Probe::reference}, {"ref-math"}, {"cpu"}}, {});
  FakeRunner runner([](const Call& call) {
    isolate::WorkerRunReport report;
    report.outcomes.push_back(outcome(call.case_ids[0], Status::timeout, "no result within 60 s"));
    report.outcomes.push_back(
        outcome(call.case_ids[1], Status::skipped, "skipped: the worker was restarted 0 times"));
    report.outcomes.back().cause = SkipCause::restart_budget_spent;
    report.outcomes.back().culprit = call.case_ids[0];
    return report;
  });
  ExecuteOptions options = setup.options(runner);
  options.max_worker_restarts = 0;
  const ExecuteResult r = execute_plan(plan, {}, options);
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(find(r, "cpu", "ref-math", plan.cases[0].id())->status, Status::timeout);
  const CaseResult* skipped = find(r, "cpu", "ref-math", plan.cases[1].id());
  EXPECT_EQ(skipped->status, Status::skipped);
  EXPECT_EQ(skipped->reason, "skipped: the worker was restarted 0 times");
  // The runner names the culprit's case; the scheduler adds the variant it ran.
  EXPECT_EQ(skipped->cause, SkipCause::restart_budget_spent);
  ASSERT_TRUE(skipped->culprit);
  EXPECT_EQ(skipped->culprit->variant, "ref-math");
  EXPECT_EQ(skipped->culprit->case_id, plan.cases[0].id());
}

TEST(ExecuteSchedule, AnUnhealthyDeviceStopsItsTargetButNotTheOthers) {
  WorkerDir setup;
  const Plan plan =
      make_plan({two_cases(), {Probe::reference}, {"ref-math", "ref-flash"}, {"cpu", "cuda:0"}},
                {});
  FakeRunner runner([](const Call& call) {
    isolate::WorkerRunReport report = FakeRunner::passing(call);
    if (call.name.rfind("cuda_0-", 0) == 0 || call.name.rfind("cuda:0-", 0) == 0) {
      report.outcomes[0].status = Status::crash;
      report.device_unhealthy = true;
    }
    return report;
  });
  const ExecuteResult r = execute_plan(plan, {}, setup.options(runner));

  std::map<std::string, int> calls_per_target;
  for (const Call& c : runner.calls()) ++calls_per_target[c.name.substr(0, c.name.find('-'))];
  EXPECT_EQ(calls_per_target["cuda_0"] + calls_per_target["cuda:0"], 1) << "runs after it skipped";
  int cpu_runs = 0;
  for (const PlannedRun& run : plan.runs) cpu_runs += run.target == "cpu";
  EXPECT_EQ(calls_per_target["cpu"], cpu_runs);
  ASSERT_EQ(r.results.size(), plan.cases.size() * plan.runs.size());
  const auto crashed = std::find_if(r.results.begin(), r.results.end(),
                                    [](const CaseResult& c) { return c.status == Status::crash; });
  ASSERT_NE(crashed, r.results.end());
  int skipped_on_gpu = 0;
  for (const CaseResult& c : r.results) {
    if (c.device == "cpu") {
      EXPECT_EQ(c.status, Status::pass) << c.variant << " " << c.case_id;
    }
    if (c.device == "cuda:0" && c.status == Status::skipped) {
      ++skipped_on_gpu;
      EXPECT_NE(c.reason.find("device unhealthy"), std::string::npos) << c.reason;
      EXPECT_EQ(c.cause, SkipCause::device_unhealthy);
      ASSERT_TRUE(c.culprit);
      EXPECT_EQ(c.culprit->variant, crashed->variant);
      EXPECT_EQ(c.culprit->case_id, crashed->case_id);
    }
  }
  int gpu_runs = static_cast<int>(plan.runs.size()) - cpu_runs;
  EXPECT_EQ(skipped_on_gpu, (gpu_runs - 1) * static_cast<int>(plan.cases.size()));
  bool finding = false;
  for (const Finding& f : r.findings) finding = finding || f.device == "cuda:0";
  EXPECT_TRUE(finding);
}

TEST(ExecuteSchedule, TargetsRunBesideEachOtherEachOneWorkerAtATime) {
  WorkerDir setup;
  const Plan plan =
      make_plan({two_cases(), {Probe::reference}, {"ref-math", "ref-flash"}, {"cpu", "cuda:0"}},
                {});
  FakeRunner runner;
  // The first run of each target waits (up to 10 s) until the other target has started one:
  // only targets that run at the same time get past it at once.
  std::mutex mutex;
  std::condition_variable cv;
  std::set<std::string> started;
  runner.before_answer([&](const Call& call) {
    std::unique_lock<std::mutex> lock(mutex);
    started.insert(call.name.substr(0, call.name.find('-')));
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return started.size() >= 2; });
  });
  const auto start = std::chrono::steady_clock::now();
  const ExecuteResult r = execute_plan(plan, {}, setup.options(runner));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  EXPECT_EQ(runner.max_running(), 2);
  EXPECT_FALSE(runner.overlap_within_target());
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(runner.calls().size(), plan.runs.size());
  for (const CaseResult& c : r.results) EXPECT_EQ(c.status, Status::pass);
}

// A case past a GPU launch grid's limit (batch x heads > 65,535) is a GPU's to run: the CPU target
// of the same check skips it with the reason, the GPU target's worker gets it.
TEST(ExecuteSchedule, ACpuTargetSkipsAGpuOnlyCaseThatItsGpuTargetRuns) {
  WorkerDir setup;
  std::vector<Case> cases = two_cases();
  cases.push_back(*parse_case_spec("dtype=fp16,b=1,h=65600,lq=1,lkv=13,d=32"));
  const std::string gpu_only = cases.back().id();
  const Plan plan =
      make_plan({cases, {Probe::reference}, {"ref-math"}, {"cpu", "cuda:0"}}, {});
  FakeRunner runner([](const Call& call) { return FakeRunner::passing(call); });
  const ExecuteResult r = execute_plan(plan, {}, setup.options(runner));

  const CaseResult* on_cpu = find(r, "cpu", "ref-math", gpu_only);
  ASSERT_NE(on_cpu, nullptr);
  EXPECT_EQ(on_cpu->status, Status::skipped);
  EXPECT_NE(on_cpu->reason.find("GPU-only"), std::string::npos) << on_cpu->reason;
  const CaseResult* on_gpu = find(r, "cuda:0", "ref-math", gpu_only);
  ASSERT_NE(on_gpu, nullptr);
  EXPECT_EQ(on_gpu->status, Status::pass) << on_gpu->reason;
  for (const Call& call : runner.calls()) {
    const bool has = std::find(call.case_ids.begin(), call.case_ids.end(), gpu_only) !=
                     call.case_ids.end();
    EXPECT_EQ(has, call.name.rfind("cpu", 0) != 0) << call.name;
  }
}

// What `check --resume` runs again: cells an interrupt skipped, known by their cause, or by the
// word alone in a journal written before results carried one.
TEST(ExecuteSchedule, AResumeRunsAgainWhatAnInterruptSkipped) {
  CaseResult r;
  r.status = Status::skipped;
  r.cause = SkipCause::interrupted;
  EXPECT_FALSE(is_measured(r));
  r.cause = SkipCause::none;
  r.reason = "interrupted";
  EXPECT_FALSE(is_measured(r));
  r.cause = SkipCause::memory_guard;
  EXPECT_TRUE(is_measured(r));
  r.status = Status::pass;
  r.cause = SkipCause::none;
  EXPECT_TRUE(is_measured(r));
}

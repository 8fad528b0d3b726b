// The execution of a plan against the real workers of this build (the reference worker always;
// the LibTorch worker where LibTorch was found), faults injected for real through the workers'
// test switch: every planned cell ends in exactly one result, a crash is blamed on its case and
// the rest run in a fresh worker, the journal holds every outcome.
#include "run/run.hpp"

#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>
#include <fstream>
#include <map>

using namespace sdpa_doctor;
using namespace sdpa_doctor::run;

namespace {

constexpr bool k_has_torch_worker = SDPA_TEST_HAS_TORCH_WORKER;

std::vector<Case> three_cases() {
  return {*parse_case_spec("dtype=fp32,h=1,l=8,d=16"), *parse_case_spec("dtype=fp32,h=2,l=8,d=16"),
          *parse_case_spec("dtype=fp32,h=1,l=12,d=16")};
}

ExecuteOptions options_in(const sdpa_test::TempDir& dir) {
  ExecuteOptions o;
  o.run_dir = dir.path();
  o.worker_dir = SDPA_TEST_WORKER_DIR;
  o.startup_timeout = std::chrono::seconds(60);
  o.repeat = 1;
  return o;
}

const CaseResult* find(const ExecuteResult& r, const std::string& variant, const std::string& id) {
  for (const CaseResult& c : r.results)
    if (c.variant == variant && c.case_id == id) return &c;
  return nullptr;
}

std::vector<nlohmann::json> journal_events(const std::string& path, const char* kind) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto e = nlohmann::json::parse(line);
    if (e["event"] == kind) out.push_back(e);
  }
  return out;
}

// Sets an environment variable for one test, as a user's shell would for the doctor.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const std::string& value) : m_name(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(m_name); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
  const char* m_name;
};

} // namespace

TEST(Execute, EveryCellOfTheReferenceProbePassesAndIsJournaled) {
  sdpa_test::TempDir dir;
  const Plan plan = make_plan({three_cases(), {Probe::reference}, {}, {"cpu"}}, {});
  const ExecuteResult r = execute_plan(plan, {}, options_in(dir));
  ASSERT_EQ(r.results.size(), plan.cases.size() * plan.runs.size());
  for (const CaseResult& c : r.results) {
    EXPECT_EQ(c.status, Status::pass) << c.variant << " " << c.case_id << ": " << c.reason;
    EXPECT_TRUE(c.metrics.max_abs_err.has_value());
  }
  ASSERT_EQ(r.workers.size(), 2u);
  EXPECT_FALSE(r.workers[0].versions.empty()) << "the hello event's versions reach WorkerInfo";
  EXPECT_EQ(journal_events(r.journal_path, "outcome").size(), r.results.size());
  EXPECT_EQ(journal_events(r.journal_path, "end").size(), 1u);
}

TEST(Execute, AnAbortIsBlamedOnItsCaseAndTheRestRunInAFreshWorker) {
  if (!k_has_torch_worker) GTEST_SKIP() << "no LibTorch worker in this build";
  sdpa_test::TempDir dir;
  const auto cases = three_cases();
  ScopedEnv fault("SDPA_DOCTOR_TEST_FAULT",
                  "variant=flash,case=" + cases[1].id() + ",action=abort");
  const Plan plan = make_plan({cases, {Probe::torch}, {"flash", "math"}, {"cpu"}}, {});
  const ExecuteResult r = execute_plan(plan, {}, options_in(dir));
  ASSERT_EQ(r.results.size(), 6u);
  const CaseResult* crashed = find(r, "flash", cases[1].id());
  ASSERT_NE(crashed, nullptr);
  EXPECT_EQ(crashed->status, Status::crash) << crashed->reason;
  ASSERT_TRUE(crashed->process_end.has_value());
  EXPECT_EQ(crashed->process_end->signal_name, "SIGABRT");
  const CaseResult* after = find(r, "flash", cases[2].id());
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->status, Status::pass) << after->reason;
  EXPECT_EQ(after->attempt, 1) << "the case after the crash ran in the second worker";
  for (const Case& c : cases) EXPECT_EQ(find(r, "math", c.id())->status, Status::pass);
  EXPECT_EQ(journal_events(r.journal_path, "outcome").size(), 6u);
}

TEST(Execute, AnInterruptedRunSkipsEveryCellAndSaysWhy) {
  sdpa_test::TempDir dir;
  std::atomic<bool> interrupted{true};
  ExecuteOptions o = options_in(dir);
  o.interrupted = &interrupted;
  const Plan plan = make_plan({three_cases(), {Probe::reference}, {}, {"cpu"}}, {});
  const ExecuteResult r = execute_plan(plan, {}, o);
  ASSERT_EQ(r.results.size(), 6u);
  for (const CaseResult& c : r.results) {
    EXPECT_EQ(c.status, Status::skipped);
    EXPECT_EQ(c.reason, "interrupted");
  }
}

TEST(Execute, AProbeThatCannotStartLeavesEveryCellWithItsReason) {
  sdpa_test::TempDir dir;
  ExecuteOptions o = options_in(dir);
  o.python_reason = "no python3 that can import torch was found (use --python PATH)";
  const Plan plan = make_plan({three_cases(), {Probe::python}, {"math"}, {"cpu"}}, {});
  const ExecuteResult r = execute_plan(plan, {}, o);
  ASSERT_EQ(r.results.size(), 3u);
  // Never run: skipped (no backend refused anything), with the one finding that says why.
  for (const CaseResult& c : r.results) {
    EXPECT_EQ(c.status, Status::skipped);
    EXPECT_EQ(c.cause, SkipCause::python_unusable);
    EXPECT_EQ(c.reason, o.python_reason);
  }
  ASSERT_EQ(r.workers.size(), 1u);
  EXPECT_EQ(r.workers[0].available, o.python_reason);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].id, "python-probe-unusable");
}

TEST(Execute, AMissingWorkerDirectoryIsReportedNotFatal) {
  sdpa_test::TempDir dir;
  ExecuteOptions o = options_in(dir);
  o.worker_dir = dir.path(); // no workers in it
  const Plan plan = make_plan({three_cases(), {Probe::reference}, {"ref-math"}, {"cpu"}}, {});
  const ExecuteResult r = execute_plan(plan, {}, o);
  ASSERT_EQ(r.results.size(), 3u);
  for (const CaseResult& c : r.results) {
    EXPECT_EQ(c.status, Status::skipped);
    EXPECT_EQ(c.cause, SkipCause::worker_missing);
    EXPECT_NE(c.reason.find("sdpa-doctor-ref-worker is missing"), std::string::npos) << c.reason;
  }
}

TEST(Execute, ASecondRunTakesTheBigOraclesFromTheCacheAndAgrees) {
  sdpa_test::TempDir dir, cache;
  // Over the cache's threshold (1 GFLOP of oracle): a small one stays out of the cache.
  const std::vector<Case> cases = {*parse_case_spec("dtype=fp32,b=1,h=4,l=1024,d=64"),
                                   *parse_case_spec("dtype=bf16,b=1,h=8,l=1024,d=64,causal"),
                                   *parse_case_spec("dtype=fp32,h=1,l=8,d=16")};
  const Plan plan = make_plan({cases, {Probe::reference}, {"ref-flash"}, {"cpu"}}, {});
  ExecuteOptions o = options_in(dir);
  o.oracle_cache_dir = cache.path();
  const ExecuteResult first = execute_plan(plan, {}, o);
  EXPECT_EQ(first.oracle_cache_hits, 0u);
  sdpa_test::TempDir dir2;
  o.run_dir = dir2.path();
  const ExecuteResult second = execute_plan(plan, {}, o);
  EXPECT_EQ(second.oracle_cache_hits, 2u);
  ASSERT_EQ(first.results.size(), second.results.size());
  for (size_t i = 0; i < first.results.size(); ++i) {
    EXPECT_EQ(second.results[i].status, Status::pass) << second.results[i].reason;
    EXPECT_EQ(first.results[i].metrics.max_abs_err, second.results[i].metrics.max_abs_err)
        << "the cached oracle is the one computed";
  }
  const auto events = journal_events(second.journal_path, "oracle-cache");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["hits"], 2);
}

TEST(Execute, AWorkerTheLoaderRefusesIsOneFindingAndSkippedCellsNotErrors) {
  sdpa_test::TempDir dir, workers;
  // What ld.so does when a LibTorch the worker was linked against is gone.
  const std::string fake = workers.file("sdpa-doctor-torch-worker");
  sdpa_test::write_file(fake, "#!/bin/sh\necho 'sdpa-doctor-torch-worker: error while loading shared "
                              "libraries: libc10.so: cannot open shared object file' >&2\nexit 127\n");
  ASSERT_EQ(::chmod(fake.c_str(), 0755), 0);
  const Plan plan = make_plan({three_cases(), {Probe::torch}, {"math", "flash"}, {"cpu"}}, {});
  ExecuteOptions o = options_in(dir);
  o.worker_dir = workers.path();
  const ExecuteResult r = execute_plan(plan, {}, o);
  ASSERT_EQ(r.results.size(), 6u);
  for (const CaseResult& c : r.results) {
    EXPECT_EQ(c.status, Status::skipped) << c.reason;
    EXPECT_NE(c.reason.find("libc10.so"), std::string::npos) << c.reason;
  }
  size_t said = 0;
  for (const Finding& f : r.findings) said += f.id == "worker-cannot-start";
  EXPECT_EQ(said, 1u) << "one finding for the probe, not one per variant or cell";
}

// Finding the interpreter also says where its torch keeps its libraries: the folder the
// reference worker is told to search first for a GPU runtime and compiler.
TEST(Preflight, SaysWhereTheTorchKeepsItsLibraries) {
  const std::string python = SDPA_TEST_PYTHON;
  if (python.empty() || ::access(python.c_str(), X_OK) != 0) GTEST_SKIP() << "no python with torch";
  auto choice = locate_python(python, std::chrono::seconds(120));
  ASSERT_TRUE(choice) << choice.error().message;
  if (choice->path.empty()) GTEST_SKIP() << choice->reason;
  const auto said = sdpa_test::run_binary(
      {python, "-c", "import os, torch; print(os.path.dirname(torch.__file__))"});
  if (said.exit_code != 0) GTEST_SKIP() << python << " has no torch: " << said.err;
  ASSERT_FALSE(choice->torch_lib_dirs.empty());
  EXPECT_EQ(choice->torch_lib_dirs.front(), said.out.substr(0, said.out.find('\n')) + "/lib");
}

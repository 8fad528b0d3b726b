// The per-case time budget through the real binary: past `--time-budget` every worker (reference
// kernels, LibTorch, Python) stops warming up and repeating after the second timed run (a case is
// called three times, each later call compared with the first), and with no
// budget it makes every timed run it was asked for. This is what lets `--suite full` finish on a
// CPU, where one fp32 math call at L=8192 takes tens of seconds.
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <map>
#include <string>
#include <vector>

using nlohmann::json;
using namespace sdpa_test;

namespace {

// probe -> timed runs of its one cell, from a check of one small case with `budget`.
std::map<std::string, int> timed_runs(const std::string& budget) {
  TempDir dir;
  std::string probes = "reference";
#ifdef SDPA_TEST_HAVE_TORCH_WORKER
  probes += ",libtorch";
#endif
  // The python probe where the configured Python has torch (not after SDPA_DOCTOR_SKIP_TORCH=1).
  const std::string python = SDPA_TEST_PYTHON;
  if (!python.empty() && run_binary({python, "-c", "import torch"}).exit_code == 0)
    probes += ",python";
  else
    std::cout << "python probe left out: no torch in '" << python << "'\n";
  const auto run = run_binary({doctor(), "check", "-q", "--probe", probes, "--variant",
                               "ref-math,math", "--case", "dtype=fp32,b=1,h=4,l=512,d=64",
                               "--repeat", "5", "--warmup", "2", "--time-budget", budget,
                               "--json", dir.file("r.json"), "--run-dir", dir.file("run")});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::map<std::string, int> out;
  const json report = json::parse(read_file(dir.file("r.json")));
  for (const json& r : report.at("results")) {
    EXPECT_EQ(r.at("status"), "pass") << r.dump();
    out[r.at("probe").get<std::string>()] = r.at("metrics").at("timed_runs").get<int>();
  }
  return out;
}

TEST(TimeBudget, SpentBudgetLeavesTwoTimedRunsInEveryWorker) {
  const auto runs = timed_runs("0.001");
  ASSERT_FALSE(runs.empty());
  for (const auto& [probe, n] : runs) EXPECT_EQ(n, 2) << probe;
}

TEST(TimeBudget, NoBudgetMakesEveryTimedRunAskedFor) {
  const auto runs = timed_runs("0");
  ASSERT_FALSE(runs.empty());
  for (const auto& [probe, n] : runs) EXPECT_EQ(n, 5) << probe;
}

TEST(TimeBudget, NegativeIsAUsageError) {
  const auto run = run_binary({doctor(), "check", "--probe", "reference", "--time-budget", "-1"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
}

} // namespace

// The canary after every case, through the real binary on the CPU with the real LibTorch worker
// and the venv's torch in the Python worker: a case that poisons the device (an injected deferred
// error, SDPA_DOCTOR_TEST_FAULT action=poison) is the one blamed, and the cases after it run in a
// fresh worker and pass.
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

using nlohmann::json;
using sdpa_test::run_binary;

namespace {

#ifdef SDPA_TEST_HAVE_TORCH_WORKER
constexpr bool k_torch_worker = true;
#else
constexpr bool k_torch_worker = false;
#endif
const std::string k_python = SDPA_TEST_PYTHON;

bool python_has_torch() {
  if (k_python.empty() || ::access(k_python.c_str(), X_OK) != 0) return false;
  return run_binary({k_python, "-c", "import torch"}).exit_code == 0;
}

void expect_poisoned_case_blamed(const std::string& probe) {
  const std::vector<std::string> ids = {"fp32-b1-h2-q8-k8-d16", "fp32-b1-h2-q12-k12-d16",
                                        "fp32-b1-h2-q16-k16-d16"};
  const std::string culprit = ids[1];
  sdpa_test::TempDir dir;
  sdpa_test::RunOptions o;
  o.set_env = {{"SDPA_DOCTOR_TEST_FAULT", "variant=math,case=" + culprit + ",action=poison"},
               {"NO_COLOR", "1"}};
  o.timeout_s = 300;
  auto r = run_binary({sdpa_test::doctor(), "check", "--probe", probe, "--variant", "math", "--case",
                       "dtype=fp32,b=1,h=2,l=8,d=16", "--case", "dtype=fp32,b=1,h=2,l=12,d=16",
                       "--case", "dtype=fp32,b=1,h=2,l=16,d=16", "--python", k_python, "--json",
                       dir.file("r.json"), "--run-dir", dir.file("run")},
                      o);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("results").size(), 3u) << report.dump(1);
  for (const json& res : report.at("results")) {
    const std::string id = res.at("case_id");
    if (id == culprit) {
      EXPECT_EQ(res.at("status"), "error") << res;
      EXPECT_NE(res.at("reason").get<std::string>().find("poisoned the device: canary failed after "
                                                         "it"),
                std::string::npos)
          << res;
      EXPECT_EQ(res.at("canary").get<std::string>().rfind("failed", 0), 0u) << res;
      EXPECT_EQ(res.at("attempt"), 0) << res;
    } else {
      EXPECT_EQ(res.at("status"), "pass") << res;
      EXPECT_EQ(res.at("canary"), "ok") << res;
      // The case after the culprit ran in a fresh worker.
      EXPECT_EQ(res.at("attempt"), id == ids[2] ? 1 : 0) << res;
    }
  }
  int poisoned = 0;
  for (const json& f : report.at("findings")) {
    if (f.at("id") != "device-poisoned") continue;
    ++poisoned;
    EXPECT_EQ(f.at("case_ids"), json::array({culprit})) << f;
  }
  EXPECT_EQ(poisoned, 1) << report.at("findings").dump(1);
  EXPECT_EQ(report.at("workers").at(0).at("restarts"), 1);
  EXPECT_NE(r.out.find("device-poisoned"), std::string::npos) << r.out;
}

TEST(Canary, LibtorchWorkerBlamesThePoisoningCaseAndGoesOnInAFreshWorker) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  expect_poisoned_case_blamed("libtorch");
}

TEST(Canary, PythonWorkerBlamesThePoisoningCaseAndGoesOnInAFreshWorker) {
  if (!python_has_torch()) GTEST_SKIP() << "no torch in " << k_python;
  expect_poisoned_case_blamed("python");
}

} // namespace

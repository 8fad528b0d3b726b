// The canary after every case, through the real binary on the CPU with the real LibTorch worker
// and the venv's torch in the Python worker: a case that poisons the device (an injected deferred
// error, SDPA_DOCTOR_TEST_FAULT action=poison) is the one blamed, and the cases after it run in a
// fresh worker and pass. A fused kernel whose launch failed (AOTriton's hipErrorInvalidValue)
// leaves zeros and fails the canary (action=zeros): the doctor blames those cells only, names the
// all-zero output in their reason and matches them to the aotriton-hip-invalid-value known issue
// once, with its remedy; the device-poisoned remedy of those cells is said once too.
#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

#include <unistd.h>

using nlohmann::json;
using sdpa_test::run_binary;

namespace {

using sdpa_test::k_torch_worker;
using sdpa_test::python_has_torch;
const std::string& k_python = sdpa_test::k_test_python;

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

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void expect_zeros_matched_once(const std::string& probe) {
  const std::set<std::string> culprits = {"fp32-b1-h2-q12-k12-d16", "fp32-b1-h2-q16-k16-d16"};
  sdpa_test::TempDir dir;
  sdpa_test::RunOptions o;
  // Two cells of flash (lq > 8), so the cause is seen to be said once, not once per cell.
  o.set_env = {{"SDPA_DOCTOR_TEST_FAULT", "variant=flash,case=*,when=lq>8,action=zeros"},
               {"NO_COLOR", "1"}};
  o.timeout_s = 300;
  auto r = run_binary({sdpa_test::doctor(), "check", "--probe", probe, "--variant", "math,flash",
                       "--case", "dtype=fp32,b=1,h=2,l=8,d=16", "--case",
                       "dtype=fp32,b=1,h=2,l=12,d=16", "--case", "dtype=fp32,b=1,h=2,l=16,d=16",
                       "--no-shrink", "--no-verify", "--python", k_python, "--json",
                       dir.file("r.json"), "--run-dir", dir.file("run")},
                      o);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("results").size(), 6u) << report.at("results").dump(1);
  std::set<std::string> failed;
  for (const json& res : report.at("results")) {
    const std::string id = res.at("case_id");
    if (res.at("variant") == "flash" && culprits.count(id)) {
      failed.insert(id);
      EXPECT_EQ(res.at("status"), "mismatch") << res;
      EXPECT_EQ(res.at("reason").get<std::string>().rfind("all-zero output where the oracle is not: ", 0),
                0u)
          << res;
      EXPECT_NE(res.at("canary").get<std::string>().find("HIP error: invalid argument"),
                std::string::npos)
          << res;
    } else {
      EXPECT_EQ(res.at("status"), "pass") << res;
    }
  }
  EXPECT_EQ(failed, culprits);
  // One match: the issue, where it lives (cpu, flash), every planted cell and nothing else.
  ASSERT_EQ(report.at("known_issues").size(), 1u) << report.at("known_issues").dump(1);
  const json& m = report.at("known_issues").at(0);
  EXPECT_EQ(m.at("issue_id"), "aotriton-hip-invalid-value");
  EXPECT_EQ(m.at("device"), "cpu");
  EXPECT_EQ(m.at("variant"), "flash");
  EXPECT_EQ(m.at("case_ids").get<std::set<std::string>>(), culprits);
  const std::string advice = m.at("advice");
  ASSERT_FALSE(advice.empty());
  // The console says the cause and its remedy once; the advice's first words fit on one line.
  const std::string opening = advice.substr(0, advice.find(':'));
  EXPECT_EQ(count(r.out, "aotriton-hip-invalid-value on cpu flash (2 cases)"), 1u) << r.out;
  EXPECT_EQ(count(r.out, opening), 1u) << opening << "\n" << r.out;
  // The two cells are one cause block (their reasons differ only in numbers, signs included), so
  // the block names the issue once.
  EXPECT_EQ(count(r.out, "known issue: aotriton-hip-invalid-value"), 1u) << r.out;
  // Both cells poisoned the device: one finding names them, and its remedy is said once.
  int poisoned = 0;
  for (const json& f : report.at("findings")) {
    if (f.at("id") != "device-poisoned") continue;
    ++poisoned;
    EXPECT_EQ(f.at("case_ids").get<std::set<std::string>>(), culprits) << f;
  }
  EXPECT_EQ(poisoned, 1) << report.at("findings").dump(1);
  EXPECT_EQ(count(r.out, "device-poisoned: treat flash as broken"), 1u) << r.out;
  // The failing cells' findings name those cells only.
  for (const json& f : report.at("findings")) {
    if (f.at("case_ids").empty()) continue;
    for (const json& id : f.at("case_ids")) EXPECT_TRUE(culprits.count(id)) << f;
  }
}

TEST(Canary, LibtorchZerosAndFailedCanaryAreTheHipInvalidValueIssue) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  expect_zeros_matched_once("libtorch");
}

TEST(Canary, PythonZerosAndFailedCanaryAreTheHipInvalidValueIssue) {
  if (!python_has_torch()) GTEST_SKIP() << "no torch in " << k_python;
  expect_zeros_matched_once("python");
}


} // namespace

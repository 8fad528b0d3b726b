// Backward end to end: the fault switch kills the worker when flash's backward starts
// (`stage=backward`), the real binary runs real torch on the CPU with --train, and the doctor
// blames the backward of those cells and nothing else: each says "in backward", its forward
// passed and is said so per direction, and the advice splits in two, the inference flags keeping
// flash and the training flags leaving it, each verified by its own re-run.
#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"
#include "workers/planted_fault.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

using nlohmann::json;
using sdpa_test::run_binary;

namespace {

const std::string& k_python = sdpa_test::k_test_python;

TEST(BackwardFault, StageBackwardMatchesOnlyBackwardCases) {
  using namespace sdpa_doctor;
  auto f = workers::parse_planted_fault("variant=flash,stage=backward,action=abort");
  ASSERT_TRUE(f) << f.error().message;
  Case c;
  EXPECT_FALSE(f->matches("flash", c.id(), c));
  c.backward = true;
  EXPECT_TRUE(f->matches("flash", c.id(), c));
  auto bwd = workers::parse_planted_fault("when=bwd,action=nan");
  ASSERT_TRUE(bwd);
  EXPECT_TRUE(bwd->matches("math", c.id(), c));
  EXPECT_FALSE(workers::parse_planted_fault("stage=sideways,action=abort"));

  // The probe's side: tests/python/test_faults.py.
}

TEST(BackwardCheck, ACrashOnlyInBackwardIsBlamedThereAndTrainingAdviceLeavesFlash) {
  const std::string probes = sdpa_test::runnable_torch_probes();
  if (probes.empty()) GTEST_SKIP() << "neither torch probe can run here";
  sdpa_test::TempDir dir;
  // The default dispatch picks flash on the CPU: it crashes where flash does.
  sdpa_test::RunOptions o;
  o.set_env = {{"SDPA_DOCTOR_TEST_FAULT",
                "variant=flash,stage=backward,action=abort;variant=default,stage=backward,"
                "action=abort"},
               {"NO_COLOR", "1"}};
  o.timeout_s = 600;
  auto r = run_binary({sdpa_test::doctor(), "check", "--probe", probes, "--python", k_python,
                       "--train", "--no-shrink", "--case", "dtype=fp32,b=1,h=2,l=33,d=32",
                       "--case", "dtype=bf16,b=1,h=2,l=48,d=64,causal", "--json",
                       dir.file("r.json"), "--markdown", dir.file("r.md"), "--run-dir",
                       dir.file("run")},
                      o);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  std::set<std::string> crashed;
  for (const json& res : report.at("results")) {
    const std::string variant = res.at("variant");
    const bool backward = res.at("case").value("backward", false);
    EXPECT_EQ(res.at("case_id").get<std::string>().ends_with("-bwd"), backward) << res;
    const bool planted = backward && (variant == "flash" || variant == "default");
    if (planted) {
      crashed.insert(res.at("case_id").get<std::string>() + " " + variant);
      EXPECT_EQ(res.at("status"), "crash") << res;
      EXPECT_EQ(res.at("reason").get<std::string>().rfind("in backward: ", 0), 0u) << res;
      EXPECT_EQ(res.at("directions"), (json{{"forward", "pass"}, {"backward", "crash"}})) << res;
    } else if (res.at("status") != "unsupported") {
      EXPECT_EQ(res.at("status"), "pass") << res;
      if (backward) {
        EXPECT_EQ(res.at("directions"), (json{{"forward", "pass"}, {"backward", "pass"}})) << res;
      }
    }
  }
  EXPECT_EQ(crashed.size(), 4u); // two backward cases x flash, default
  // The cause said once: one finding names the backward cases whose forward passed.
  int backward_only = 0;
  for (const json& f : report.at("findings")) {
    if (f.at("id") != "fails-only-in-backward") continue;
    ++backward_only;
    EXPECT_EQ(f.at("case_ids").size(), 2u) << f;
  }
  EXPECT_EQ(backward_only, 1);
  // Inference keeps the defaults (flash); training leaves flash; each re-run passed.
  std::map<std::string, json> by_workload;
  for (const json& rec : report.at("recommendations")) by_workload[rec.value("workload", "")] = rec;
  ASSERT_EQ(by_workload.size(), 2u) << report.at("recommendations").dump(1);
  ASSERT_TRUE(by_workload.count("inference") && by_workload.count("training"));
  const json& inference = by_workload["inference"];
  const json& training = by_workload["training"];
  EXPECT_EQ(inference.at("id"), "keep-defaults") << inference;
  EXPECT_NE(training.at("id"), inference.at("id")) << training;
  EXPECT_NE(training.at("python").get<std::string>().find("enable_flash_sdp(False)"),
            std::string::npos)
      << training;
  for (const json* rec : {&inference, &training}) {
    EXPECT_TRUE(rec->at("verified").get<bool>()) << *rec;
    EXPECT_EQ(rec->at("verification").at("passed"), rec->at("verification").at("total")) << *rec;
  }
  for (const json& id : inference.at("case_ids"))
    EXPECT_FALSE(id.get<std::string>().ends_with("-bwd")) << inference;
  EXPECT_EQ(inference.at("case_ids").size(), 2u);
  EXPECT_EQ(training.at("case_ids").size(), 4u);
  EXPECT_TRUE(training.at("vllm").get<std::string>().empty()) << training;
  EXPECT_NE(r.out.find("keep-defaults (for inference)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(training.at("id").get<std::string>() + " (for training)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("in backward: "), std::string::npos) << r.out;
  EXPECT_NE(sdpa_test::read_file(dir.file("r.md")).find("(for training)"), std::string::npos);
}

} // namespace

// The model's JSON form read back: what the journal and the report keep is what was measured.
#include "core/model_json.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace sdpa_doctor;

namespace {

TEST(ModelJson, ACaseResultComesBackAsItWasWritten) {
  CaseResult r;
  r.kase = *parse_case_spec("dtype=bf16,b=2,h=8,hkv=2,l=128,d=64,causal");
  r.case_id = r.kase.id();
  r.device = "cuda:1";
  r.probe = Probe::python;
  r.variant = "flash[aotriton,experimental]";
  r.status = Status::crash;
  r.reason = "SIGABRT";
  r.metrics.max_abs_err = std::numeric_limits<double>::infinity();
  r.metrics.time_ms = 1.5;
  r.metrics.timed_runs = 3;
  r.metrics.nan_count = 7;
  r.tolerance = {0.02, 0.03};
  r.warnings = {"w"};
  r.signatures = {"ck-assert"};
  r.stderr_tail = "Assertion failed";
  r.attempt = 2;
  r.wall_ms = 12.5;
  r.canary = "failed: hipErrorIllegalAddress";
  r.process_end = ProcessEnd{std::nullopt, 6, "SIGABRT", true, false};
  auto back = case_result_from_json(to_json(r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(to_json(*back), to_json(r));
  EXPECT_TRUE(std::isnan(*back->metrics.max_abs_err)); // non-finite stays non-finite
  EXPECT_EQ(back->kase.id(), r.kase.id());
  EXPECT_EQ(back->process_end->signal, 6);
  EXPECT_FALSE(back->process_end->exit_code);
}

TEST(ModelJson, ASkipsCauseAndCulpritComeBack) {
  CaseResult r;
  r.kase = *parse_case_spec("dtype=fp32,b=1,h=2,l=16,d=32");
  r.case_id = r.kase.id();
  r.device = "cpu";
  r.variant = "flash";
  r.reason = "restart budget spent after fp16-b1-h8-q128-k128-d64";
  r.cause = SkipCause::restart_budget_spent;
  r.culprit = Culprit{"flash", "fp16-b1-h8-q128-k128-d64"};
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j.at("cause"), "restart_budget_spent");
  EXPECT_EQ(j.at("culprit"), nlohmann::json({{"variant", "flash"},
                                             {"case", "fp16-b1-h8-q128-k128-d64"}}));
  auto back = case_result_from_json(j);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->cause, SkipCause::restart_budget_spent);
  ASSERT_TRUE(back->culprit);
  EXPECT_EQ(back->culprit->variant, "flash");
  EXPECT_EQ(back->culprit->case_id, "fp16-b1-h8-q128-k128-d64");
  EXPECT_EQ(to_json(*back), j);
}

TEST(ModelJson, AResultWithoutACauseWritesNoneAndReadsAsBefore) {
  CaseResult r;
  r.kase = *parse_case_spec("dtype=fp32,b=1,h=2,l=16,d=32");
  r.device = "cpu";
  r.variant = "math";
  const nlohmann::json j = to_json(r);
  EXPECT_FALSE(j.contains("cause"));
  EXPECT_FALSE(j.contains("culprit"));
  auto back = case_result_from_json(j);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->cause, SkipCause::none);
  EXPECT_FALSE(back->culprit);
  for (const char* bad : {R"({"cause":"bad luck"})", R"({"cause":3})", R"({"culprit":"x"})",
                          R"({"culprit":{"variant":"math"}})"}) {
    nlohmann::json broken = j;
    broken.update(nlohmann::json::parse(bad));
    EXPECT_FALSE(case_result_from_json(broken)) << bad;
  }
}

TEST(ModelJson, EveryCauseNameReadsBackAsItsValue) {
  for (int i = 0; i <= int(SkipCause::not_measured); ++i) {
    const auto cause = SkipCause(i);
    EXPECT_EQ(skip_cause_from_string(to_string(cause)), cause) << to_string(cause);
  }
  EXPECT_FALSE(skip_cause_from_string("restart budget spent"));
}

TEST(ModelJson, WorkersFindingsAndInventoryComeBack) {
  WorkerInfo w{"cpu", Probe::torch, "math", {{"torch", "2.13.0"}}, {{"threads", "2"}}, 1, ""};
  auto wb = worker_info_from_json(to_json(w));
  ASSERT_TRUE(wb);
  EXPECT_EQ(to_json(*wb), to_json(w));
  Finding f{"device-wedged", Severity::problem, "m", "r", {"a", "b"}, "cuda:0"};
  auto fb = finding_from_json(to_json(f));
  ASSERT_TRUE(fb);
  EXPECT_EQ(to_json(*fb), to_json(f));
  DeviceInventory inv;
  Device d;
  d.index = 0;
  d.gfx_target = "gfx1201";
  d.vram_total_bytes = int64_t{16} << 30;
  d.sources["gfx_target"] = {{"hip", "gfx1201"}, {"sysfs", "gfx1201"}};
  d.gfx = GfxTruth{};
  d.gfx->verdict = "native";
  inv.devices.push_back(d);
  inv.runtime["hip_runtime_version"] = "6.4";
  inv.findings.push_back(f);
  auto ib = inventory_from_json(to_json(inv));
  ASSERT_TRUE(ib);
  EXPECT_EQ(to_json(*ib), to_json(inv));
}

TEST(ModelJson, AShrinkComesBackWithItsBoundaryAndSmallestCase) {
  Shrink s;
  s.device = "cuda:0";
  s.probe = Probe::python;
  s.variant = "flash[ck]";
  s.status = Status::crash;
  s.original_case = "fp16-b2-h8-q512-k512-d256";
  s.verdict = "boundary";
  s.rule = "flash[ck] on cuda:0: crash only when head_dim > 128";
  s.conditions = {{"d", ">", 128, "head_dim > 128", false}};
  s.minimal = *parse_case_spec("dtype=fp16,b=1,h=1,l=1,d=160");
  s.tried = {{"fp16-b1-h1-q1-k1-d160", Status::crash}, {"fp16-b1-h1-q1-k1-d128", Status::pass}};
  s.seconds = 2.5;
  s.budget_exhausted = true;
  auto back = shrink_from_json(to_json(s));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(to_json(*back), to_json(s));
  EXPECT_FALSE(back->conditions.at(0).settled);

  Shrink flaky = s;
  flaky.verdict = "flaky";
  flaky.conditions.clear();
  flaky.minimal.reset();
  auto flaky_back = shrink_from_json(to_json(flaky));
  ASSERT_TRUE(flaky_back);
  EXPECT_FALSE(flaky_back->minimal);
  EXPECT_EQ(to_json(*flaky_back), to_json(flaky));
}

TEST(ModelJson, ARecommendationComesBackWithItsVerification) {
  Recommendation r;
  r.id = "disable-mem-efficient";
  r.device = "cuda:0";
  r.summary = "s";
  r.python = "torch.backends.cuda.enable_mem_efficient_sdp(False)\n";
  r.environment = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1";
  r.case_ids = {"a", "b"};
  auto unverified = recommendation_from_json(to_json(r));
  ASSERT_TRUE(unverified);
  EXPECT_FALSE(unverified->verification); // --no-verify stays "not re-run"
  EXPECT_EQ(to_json(*unverified), to_json(r));

  r.verification = Verification{true, 2, 2, 0.25, "a fresh python worker", ""};
  r.rejected = {{"keep-defaults", "2 of 2 cases failed under these flags"}};
  auto back = recommendation_from_json(to_json(r));
  ASSERT_TRUE(back);
  ASSERT_TRUE(back->verification);
  EXPECT_TRUE(back->verification->verified());
  EXPECT_EQ(to_json(*back), to_json(r));
}

TEST(ModelJson, WhatIsNotAResultSaysWhy) {
  EXPECT_FALSE(case_result_from_json(nlohmann::json::array()));
  EXPECT_FALSE(case_result_from_json({{"case_id", "x"}}));
  auto bad_status = to_json(CaseResult{});
  bad_status["status"] = "exploded";
  auto r = case_result_from_json(bad_status);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("exploded"), std::string::npos);
  EXPECT_FALSE(finding_from_json({{"id", "x"}, {"severity", "fatal"}}));
  auto bad_shrink = to_json(Shrink{});
  bad_shrink["device"] = "cpu";
  bad_shrink["variant"] = "math";
  EXPECT_TRUE(shrink_from_json(bad_shrink));
  bad_shrink["tried"] = nlohmann::json::array({{{"case_id", "x"}, {"status", "exploded"}}});
  EXPECT_FALSE(shrink_from_json(bad_shrink));
  EXPECT_FALSE(recommendation_from_json({{"summary", "no id"}}));
}

} // namespace

// v1.7: a result's mode; absent (an older report) reads as eager, an unknown one is refused.
TEST(ModelJson, AResultsModeComesBackAndAbsentIsEager) {
  CaseResult r;
  r.kase = *parse_case_spec("dtype=fp32,b=1,h=2,l=16,d=32");
  r.case_id = r.kase.id();
  r.device = "cpu";
  r.probe = Probe::python;
  r.variant = "flash";
  r.mode = Mode::compiled;
  nlohmann::json j = to_json(r);
  EXPECT_EQ(j.at("mode"), "compiled");
  auto back = case_result_from_json(j);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->mode, Mode::compiled);
  j.erase("mode");
  EXPECT_EQ(case_result_from_json(j)->mode, Mode::eager);
  j["mode"] = "jit";
  EXPECT_FALSE(case_result_from_json(j).has_value());
}

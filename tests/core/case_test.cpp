#include "core/case.hpp"
#include "core/status.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace sdpa_doctor;

TEST(CaseSpec, ParsesTheDocumentedForm) {
  auto c = parse_case_spec("dtype=bf16,b=1,h=32,l=4096,d=128,causal");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->dtype, DType::bf16);
  EXPECT_EQ(c->hq, 32);
  EXPECT_EQ(c->hkv, 32);
  EXPECT_EQ(c->lq, 4096);
  EXPECT_EQ(c->lkv, 4096);
  EXPECT_EQ(c->d, 128);
  EXPECT_TRUE(c->causal);
  EXPECT_EQ(c->id(), "bf16-b1-h32-q4096-k4096-d128-causal");
}

TEST(CaseSpec, IdRoundTrips) {
  Case c;
  c.dtype = DType::f16;
  c.b = 2;
  c.hq = 8;
  c.hkv = 2;
  c.lq = 1;
  c.lkv = 77;
  c.mask = Mask::boolean;
  c.layout = Layout::transposed;
  c.seed = 3;
  auto back = parse_case_id(c.id());
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, c);
  EXPECT_EQ(c.id(), "fp16-b2-h8:2-q1-k77-d64-mask_bool-tr-s3");
}

TEST(CaseSpec, RejectsBadInput) {
  for (const char* bad : {"", "dtype=fp8", "d=0", "b=-1", "l=abc", "hq=8,hkv=3", "bogus=1",
                          "causal=maybe", "d", "l=99999999999", "b=1024,h=1024,l=65536"}) {
    auto c = parse_case_spec(bad);
    EXPECT_FALSE(c) << bad;
    if (!c) {
      EXPECT_EQ(c.error().message.find('\n'), std::string::npos) << bad;
    }
  }
}

TEST(CaseSpec, JsonRoundTrips) {
  auto c = parse_case_spec("dtype=fp32,hq=4,hkv=1,lq=3,lkv=9,d=40,mask=additive,seed=7");
  ASSERT_TRUE(c);
  auto back = case_from_json(to_json(*c));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, *c);
  EXPECT_FALSE(case_from_json(nlohmann::json::parse(R"({"d": [1]})")));
  EXPECT_FALSE(case_from_json(nlohmann::json::parse("[1,2]")));
}

TEST(CaseSpec, FlopsAndBytes) {
  auto c = parse_case_spec("dtype=fp16,b=1,h=8,l=512,d=64");
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->flops(), 4.0 * 8 * 512 * 512 * 64);
  c->causal = true;
  EXPECT_DOUBLE_EQ(c->flops(), 2.0 * 8 * 512 * 512 * 64);
  EXPECT_EQ(c->math_scores_bytes(), 2LL * 8 * 512 * 512 * 4);
}

TEST(Status, NamesRoundTripAndFailuresAreTheContract) {
  for (Status s : k_all_statuses) EXPECT_EQ(status_from_string(to_string(s)), s);
  EXPECT_FALSE(status_from_string("passed"));
  EXPECT_FALSE(is_failure_by_default(Status::pass));
  EXPECT_FALSE(is_failure_by_default(Status::unsupported));
  EXPECT_FALSE(is_failure_by_default(Status::skipped));
  for (Status s : {Status::mismatch, Status::nonfinite, Status::error, Status::crash,
                   Status::timeout})
    EXPECT_TRUE(is_failure_by_default(s));
}

TEST(CaseSpec, ABackwardCaseEndsInBwdAndRoundTripsEveryWay) {
  auto c = parse_case_spec("dtype=bf16,hq=8,hkv=2,l=64,d=64,causal,seed=3,backward");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->backward);
  EXPECT_EQ(c->id(), "bf16-b1-h8:2-q64-k64-d64-causal-s3-bwd");
  auto from_id = parse_case_id(c->id());
  ASSERT_TRUE(from_id) << from_id.error().message;
  EXPECT_EQ(*from_id, *c);
  EXPECT_EQ(to_json(*c).at("backward"), true);
  auto from_json = case_from_json(to_json(*c));
  ASSERT_TRUE(from_json);
  EXPECT_EQ(*from_json, *c);
  // A forward case's id and JSON are what they always were (baselines keep matching).
  const Case forward = c->forward_only();
  EXPECT_EQ(forward.id(), "bf16-b1-h8:2-q64-k64-d64-causal-s3");
  EXPECT_FALSE(to_json(forward).contains("backward"));
  // "-bwd" is the last part only.
  EXPECT_FALSE(parse_case_id("bf16-b1-h8-q64-k64-d64-bwd-causal"));
  // Forward and backward: 3.5 times the forward's work; autograd keeps the scores for it.
  EXPECT_DOUBLE_EQ(c->flops(), 3.5 * forward.flops());
  EXPECT_EQ(c->math_scores_bytes(), 2 * forward.math_scores_bytes());
  EXPECT_GT(c->input_bytes(), forward.input_bytes());
}

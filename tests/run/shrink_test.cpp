// The pure boundary search of run/shrink against fake predicates: no workers, no torch.
#include "run/shrink.hpp"

#include <gtest/gtest.h>

#include <functional>

namespace sdpa_doctor::run {
namespace {

Case failing_case() {
  Case c;
  c.dtype = DType::f32;
  c.b = 2;
  c.hq = c.hkv = 4;
  c.lq = c.lkv = 64;
  c.d = 256;
  c.causal = true;
  return c;
}

// Runs the search to its end with `fails` as the worker; returns the filled Shrink and the count
// of probe cases it asked for.
Shrink search(const std::function<bool(const Case&)>& fails, int* asked = nullptr) {
  ShrinkSearch s(failing_case());
  int n = 0;
  for (int round = 0; round < 100 && !s.done(); ++round) {
    auto batch = s.next();
    if (batch.empty()) break;
    for (const Case& c : batch) {
      ++n;
      s.record(c, fails(c) ? ProbeOutcome::fails : ProbeOutcome::passes);
    }
  }
  Shrink out;
  out.variant = "math";
  out.device = "cpu";
  s.fill(out);
  out.rule = shrink_rule(out);
  if (asked) *asked = n;
  return out;
}

TEST(ShrinkSearch, FindsTheHeadDimBoundary) {
  int asked = 0;
  Shrink s = search([](const Case& c) { return c.d > 128; }, &asked);
  EXPECT_EQ(s.verdict, "boundary");
  ASSERT_EQ(s.conditions.size(), 1u);
  EXPECT_EQ(s.conditions[0].axis, "d");
  EXPECT_EQ(s.conditions[0].op, ">");
  EXPECT_EQ(s.conditions[0].value, 128);
  ASSERT_TRUE(s.minimal.has_value());
  EXPECT_GT(s.minimal->d, 128);
  EXPECT_LE(asked, ShrinkBudget{}.cases);
}

TEST(ShrinkSearch, FindsTheCausalCondition) {
  Shrink s = search([](const Case& c) { return c.causal; });
  EXPECT_EQ(s.verdict, "boundary");
  ASSERT_EQ(s.conditions.size(), 1u);
  EXPECT_EQ(s.conditions[0].axis, "causal");
  ASSERT_TRUE(s.minimal.has_value());
  EXPECT_TRUE(s.minimal->causal);
  EXPECT_LE(s.minimal->d, failing_case().d);
}

TEST(ShrinkSearch, AFailureEverywhereHasNoConditions) {
  Shrink s = search([](const Case&) { return true; });
  EXPECT_EQ(s.verdict, "everywhere");
  EXPECT_TRUE(s.conditions.empty());
  EXPECT_NE(s.rule.find("every case"), std::string::npos) << s.rule;
}

TEST(ShrinkSearch, AFlakyFailureInventsNoBoundary) {
  // The original failure happened once in check; the rerun and every probe pass.
  Shrink s = search([](const Case&) { return false; });
  EXPECT_EQ(s.verdict, "flaky");
  EXPECT_TRUE(s.conditions.empty());
  EXPECT_FALSE(s.minimal.has_value());
}

} // namespace
} // namespace sdpa_doctor::run

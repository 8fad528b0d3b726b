// The pure boundary search of run/shrink against fake predicates: no workers, no torch.
#include "run/shrink.hpp"

#include <gtest/gtest.h>

#include <algorithm>
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
Shrink search(const std::function<bool(const Case&)>& fails, int* asked = nullptr,
              const Case& start = failing_case()) {
  ShrinkSearch s(start);
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

// The direction is a dimension: a failure only in backward past a head dim says both.
TEST(ShrinkSearch, FindsABackwardOnlyFailureAndItsHeadDimBoundary) {
  Case start = failing_case();
  start.causal = false;
  start.backward = true;
  int asked = 0;
  Shrink s = search([](const Case& c) { return c.backward && c.d > 128; }, &asked, start);
  EXPECT_EQ(s.verdict, "boundary");
  ASSERT_EQ(s.conditions.size(), 2u);
  EXPECT_EQ(s.conditions[0].axis, "backward");
  EXPECT_EQ(s.conditions[1].axis, "d");
  EXPECT_EQ(s.rule, "math on cpu: error only in backward when head_dim > 128");
  ASSERT_TRUE(s.minimal.has_value());
  EXPECT_TRUE(s.minimal->backward);
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

// A failure that needs V alone strided and an fp32 mask under bf16 q: the shrink names both, drops
// everything else it can (the other layouts, the mask's shape and storage, large values), and
// its smallest case keeps what the failure needs.
TEST(ShrinkSearch, NamesTheLayoutAndMaskDimensionsAFailureNeeds) {
  Case start = failing_case();
  start.dtype = DType::bf16;
  start.causal = false;
  start.mask = Mask::additive;
  start.mask_dtype = DType::f32;
  start.mask_shape = MaskShape::shared;
  start.mask_layout = Layout::offset;
  start.large = true;
  start.set_layouts(Layout::transposed, Layout::contiguous, Layout::strided);
  Shrink s = search(
      [](const Case& c) {
        return c.qkv_layouts()[2] == Layout::strided && c.mask_value_dtype() != c.dtype;
      },
      nullptr, start);
  EXPECT_EQ(s.verdict, "boundary");
  std::vector<std::string> axes;
  for (const ShrinkCondition& w : s.conditions) axes.push_back(w.axis);
  // fp32 q makes the fp32 mask q's own dtype: so the dtype is a condition too.
  EXPECT_EQ(axes, (std::vector<std::string>{"mask", "mask_dtype", "v_layout", "dtype"}));
  for (const ShrinkCondition& w : s.conditions) {
    if (w.axis == "v_layout") {
      EXPECT_EQ(w.text, "v strided");
    }
    if (w.axis == "mask_dtype") {
      EXPECT_EQ(w.text, "mask dtype fp32 (q bf16)");
    }
  }
  ASSERT_TRUE(s.minimal.has_value());
  EXPECT_EQ(s.minimal->qkv_layouts(),
            (std::array{Layout::contiguous, Layout::contiguous, Layout::strided}));
  EXPECT_EQ(s.minimal->mask_value_dtype(), DType::f32);
  EXPECT_EQ(s.minimal->mask_shape, MaskShape::batch);
  EXPECT_EQ(s.minimal->mask_layout, Layout::contiguous);
  EXPECT_FALSE(s.minimal->large);
  EXPECT_NE(s.rule.find("v strided"), std::string::npos) << s.rule;
}

// A backend that returns NaN for padded rows: the failure goes away without fully masked rows.
TEST(ShrinkSearch, SaysAFailureNeedsFullyMaskedRows) {
  Case start = failing_case();
  start.causal = false;
  start.mask = Mask::boolean;
  start.masked_rows = true;
  Shrink s = search([](const Case& c) { return c.masked_rows; }, nullptr, start);
  EXPECT_EQ(s.verdict, "boundary");
  std::vector<std::string> axes;
  for (const ShrinkCondition& w : s.conditions) axes.push_back(w.axis);
  EXPECT_NE(std::find(axes.begin(), axes.end(), "masked_rows"), axes.end());
  EXPECT_NE(s.rule.find("only when"), std::string::npos) << s.rule;
  EXPECT_NE(s.rule.find("rows are fully masked"), std::string::npos) << s.rule;
  ASSERT_TRUE(s.minimal.has_value());
  EXPECT_TRUE(s.minimal->masked_rows);
  EXPECT_EQ(validate(*s.minimal), "");
}

// A decode or tiny-causal failure: the query length is bounded from above, found by growing it.
Case short_query_case(int64_t lq) {
  Case c = failing_case();
  c.b = 1;
  c.lq = lq;
  c.lkv = 77;
  c.d = 64;
  return c;
}

TEST(ShrinkSearch, FindsAShortQueryBoundaryFromAbove) {
  const auto fails = [](const Case& c) { return c.causal && c.lq <= 16; };
  for (int64_t lq : {1, 2, 8, 16}) {
    int asked = 0;
    Shrink s = search(fails, &asked, short_query_case(lq));
    EXPECT_EQ(s.verdict, "boundary") << lq;
    ASSERT_EQ(s.conditions.size(), 2u) << s.rule;
    EXPECT_EQ(s.conditions[0].axis, "causal");
    EXPECT_EQ(s.conditions[1].axis, "lq");
    EXPECT_EQ(s.conditions[1].op, "<=");
    EXPECT_EQ(s.conditions[1].value, 16) << s.rule;
    EXPECT_TRUE(s.conditions[1].settled);
    EXPECT_NE(s.rule.find("only when causal and query length <= 16"), std::string::npos) << s.rule;
    ASSERT_TRUE(s.minimal.has_value());
    EXPECT_TRUE(fails(*s.minimal)) << s.minimal->id();
    EXPECT_LE(asked, ShrinkBudget{}.cases) << lq;
  }
}

TEST(ShrinkSearch, AShortQueryThatFailsAtAnyLengthGetsNoUpperBound) {
  Shrink s = search([](const Case& c) { return c.causal; }, nullptr, short_query_case(8));
  ASSERT_EQ(s.conditions.size(), 1u) << s.rule;
  EXPECT_EQ(s.conditions[0].axis, "causal");
}

TEST(ShrinkSearch, BoundsAQueryLengthFromBothSides) {
  Shrink s = search([](const Case& c) { return c.lq > 2 && c.lq <= 8; }, nullptr,
                    short_query_case(8));
  ASSERT_EQ(s.conditions.size(), 2u) << s.rule;
  EXPECT_EQ(s.rule, "math on cpu: error only when query length > 2 and query length <= 8");
}

// A failure only where causal is aligned bottom-right (decoding, chunked prefill): the shrink
// says so, and every case it asks for keeps more keys than queries (bottom-right with Lq >= Lkv
// is top-left, or undefined).
TEST(ShrinkSearch, KeepsTheBottomRightAlignmentAndNeverRunsPastItsKeys) {
  const Case start =
      *parse_case_spec("dtype=bf16,b=2,hq=8,hkv=2,lq=16,lkv=80,d=64,causal=bottom_right");
  const auto fails = [](const Case& c) { return c.causal && c.causal_bottom_right; };
  int asked = 0;
  std::vector<std::string> invalid;
  Shrink s = search(
      [&](const Case& c) {
        if (!validate(c).empty() || (c.causal_bottom_right && c.lq >= c.lkv))
          invalid.push_back(c.id());
        return fails(c);
      },
      &asked, start);
  EXPECT_TRUE(invalid.empty()) << invalid.front();
  EXPECT_EQ(s.verdict, "boundary");
  ASSERT_EQ(s.conditions.size(), 2u) << s.rule;
  EXPECT_EQ(s.conditions[0].axis, "causal");
  EXPECT_EQ(s.conditions[1].axis, "bottom_right");
  EXPECT_EQ(s.rule, "math on cpu: error only when causal and aligned bottom-right");
  ASSERT_TRUE(s.minimal.has_value());
  EXPECT_TRUE(s.minimal->causal_bottom_right) << s.minimal->id();
  EXPECT_LT(s.minimal->lq, s.minimal->lkv) << s.minimal->id();
  EXPECT_EQ(s.minimal->lq, 1) << s.minimal->id();
  EXPECT_LE(s.minimal->lkv, 17) << s.minimal->id(); // the keys reduced to just past the queries
  EXPECT_LE(asked, ShrinkBudget{}.cases);
}

// A bottom-right failure that needs many keys: the key length is bisected from just past the
// queries, never below them.
TEST(ShrinkSearch, BisectsTheKeysOfABottomRightCaseAboveItsQueries) {
  Case start = failing_case();
  start.lq = 16;
  start.lkv = 300;
  start.causal_bottom_right = true;
  std::vector<std::string> invalid;
  Shrink s = search(
      [&](const Case& c) {
        if (!validate(c).empty()) invalid.push_back(c.id());
        return c.causal_bottom_right && c.lkv - c.lq > 100;
      },
      nullptr, start);
  EXPECT_TRUE(invalid.empty()) << invalid.front();
  ASSERT_TRUE(s.minimal.has_value());
  EXPECT_TRUE(s.minimal->causal_bottom_right);
  EXPECT_GT(s.minimal->lkv - s.minimal->lq, 100) << s.minimal->id();
  EXPECT_NE(s.rule.find("key length >"), std::string::npos) << s.rule;
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

#include "core/inputs.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

using namespace sdpa_doctor;

TEST(Inputs, HashMatchesTheDocumentedDefinition) {
  // Fixed values: sdpa_probe.py's mirror is checked against the same numbers.
  EXPECT_EQ(hash32(0), 0u);
  EXPECT_EQ(hash32(1), 0x31251ba7u);
  EXPECT_EQ(hash32(0xdeadbeef), 0x5353e2e9u);
  EXPECT_NE(input_key(0, InputTensor::q), input_key(0, InputTensor::k));
  EXPECT_NE(input_key(0, InputTensor::q), input_key(1, InputTensor::q));
}

TEST(Inputs, ValuesAreInRangeNeverAllZeroAndDeterministic) {
  Case c;
  c.lq = c.lkv = 33;
  c.d = 24;
  c.mask = Mask::additive;
  auto a = make_inputs(c);
  auto b = make_inputs(c);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.mask, b.mask);
  ASSERT_EQ(a.q.size(), size_t(c.q_elements()));
  std::set<float> distinct(a.q.begin(), a.q.end());
  EXPECT_GT(distinct.size(), a.q.size() / 2);
  for (float x : a.q) EXPECT_TRUE(x >= -4.0f && x < 4.0f);
  for (float x : a.k) EXPECT_TRUE(x >= -1.0f && x <= 1.0f); // fp16 rounds 1-2^-23 up to 1
  for (float x : a.mask) EXPECT_TRUE(x <= 0.0f && x > -4.01f);
}

TEST(Inputs, RoundingIsNearestEven) {
  // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(round_to_dtype(DType::bf16, 1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(round_to_dtype(DType::bf16, 1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(round_to_dtype(DType::f16, 1.0f + 0x1p-11f), 1.0f);
  EXPECT_EQ(round_to_dtype(DType::f16, 1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);
  EXPECT_EQ(round_to_dtype(DType::f16, 0x1p-20f), 0x1p-20f); // subnormal kept
  EXPECT_TRUE(std::isnan(round_to_dtype(DType::bf16, NAN)));
}

TEST(Inputs, BoolMaskNeverMasksAWholeRow) {
  Case c;
  c.lq = 17;
  c.lkv = 5;
  c.mask = Mask::boolean;
  auto in = make_inputs(c);
  for (int64_t row = 0; row < c.b * c.lq; ++row) EXPECT_EQ(in.mask[size_t(row * c.lkv)], 1.0f);
}

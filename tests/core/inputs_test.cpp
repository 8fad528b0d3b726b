#include "core/inputs.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

using namespace sdpa_doctor;

TEST(Inputs, HashMatchesTheDocumentedDefinition) {
  // Fixed values: sdpa_probe/inputs.py, the mirror, is checked against the same numbers.
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

TEST(Inputs, MatchTheDocumentedDefinitionElementByElement) {
  // make_inputs runs vectorised loops; the definition is unit_value and round_to_dtype (a
  // _Float16 round trip for fp16). Over a million elements per tensor, values below fp16's
  // normal range (unit within 2^-14 of 0) come up dozens of times.
  for (DType dtype : {DType::f16, DType::bf16, DType::f32})
    for (Mask mask : {Mask::additive, Mask::boolean}) {
      Case c;
      c.dtype = dtype;
      c.b = 2;
      c.hq = 4;
      c.hkv = 2;
      c.lq = 300;
      c.lkv = 1031;
      c.d = 40;
      c.mask = mask;
      c.seed = 7;
      const HostInputs in = make_inputs(c);
      auto check = [&](const std::vector<float>& got, InputTensor t, float scale) {
        const uint32_t key = input_key(c.seed, t);
        int64_t bad = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const float want = round_to_dtype(dtype, scale * unit_value(key, i));
          bad += std::memcmp(&want, &got[i], sizeof want) != 0;
        }
        EXPECT_EQ(bad, 0) << to_string(dtype) << " tensor " << int(t);
      };
      check(in.q, InputTensor::q, 4.0f);
      check(in.k, InputTensor::k, 1.0f);
      check(in.v, InputTensor::v, 1.0f);
      const uint32_t key = input_key(c.seed, InputTensor::mask);
      int64_t bad = 0;
      ASSERT_EQ(in.mask.size(), size_t(c.b * c.lq * c.lkv));
      for (size_t i = 0; i < in.mask.size(); ++i) {
        const uint32_t u = hash32(uint32_t(i) + key);
        const float want =
            mask == Mask::boolean
                ? ((i % size_t(c.lkv)) == 0 || (u & 3U) != 0 ? 1.0f : 0.0f)
                : round_to_dtype(dtype, -2.0f * (unit_value(key, i) + 1.0f));
        bad += std::memcmp(&want, &in.mask[i], sizeof want) != 0;
      }
      EXPECT_EQ(bad, 0) << to_string(dtype) << " mask " << to_string(mask);
    }
}

#include "core/inputs.hpp"

#include <gtest/gtest.h>

#include <algorithm>
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

namespace {
Case spec(const char* text) {
  auto c = parse_case_spec(text);
  EXPECT_TRUE(c) << text;
  return c ? *c : Case{};
}
} // namespace

TEST(InputsMask, ValuesAreDefinedOverTheShapeSdpaIsGiven) {
  const Case batch = spec("dtype=fp32,b=2,h=2,lq=5,lkv=7,d=8,mask=additive,seed=3");
  Case heads = batch;
  heads.mask_shape = MaskShape::batch_heads;
  // (B,H,..) repeats the (B,1,..) values over its heads: the same (B,Lq,Lkv) form.
  EXPECT_EQ(make_inputs(heads).mask, make_inputs(batch).mask);
  for (MaskShape shared : {MaskShape::shared, MaskShape::plain}) {
    Case c = batch;
    c.mask_shape = shared;
    const std::vector<float> m = make_inputs(c).mask;
    ASSERT_EQ(m.size(), size_t(2 * 5 * 7));
    // One (Lq,Lkv) for every batch: the first batch's values of the (B,1,..) mask.
    EXPECT_TRUE(std::equal(m.begin(), m.begin() + 35, m.begin() + 35));
    EXPECT_TRUE(std::equal(m.begin(), m.begin() + 35, make_inputs(batch).mask.begin()));
  }
}

TEST(InputsMask, AnAdditiveMaskIsRoundedToItsOwnDtype) {
  const Case own = spec("dtype=bf16,h=1,l=64,d=8,mask=additive,mask_dtype=fp32");
  const Case plain = spec("dtype=bf16,h=1,l=64,d=8,mask=additive");
  const std::vector<float> fine = make_inputs(own).mask, coarse = make_inputs(plain).mask;
  ASSERT_EQ(fine.size(), coarse.size());
  size_t differ = 0;
  for (size_t i = 0; i < fine.size(); ++i) {
    EXPECT_EQ(round_to_dtype(DType::bf16, fine[i]), coarse[i]) << i;
    differ += fine[i] != coarse[i];
  }
  EXPECT_GT(differ, fine.size() / 2); // fp32 keeps what bf16 rounds away
  EXPECT_EQ(make_inputs(own).q, make_inputs(plain).q);
}

TEST(InputsMask, ASlidingWindowIsACausalBandWithNoEmptyRow) {
  const Case c = spec("dtype=fp16,b=2,h=1,lq=12,lkv=6,d=8,window=3");
  const std::vector<float> m = make_inputs(c).mask;
  ASSERT_EQ(m.size(), size_t(2 * 12 * 6));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 12; ++i)
      for (int64_t j = 0; j < 6; ++j) {
        const bool in_band = j <= i && j > i - 3;
        const bool empty_row = i - 3 + 1 > 5; // its band lies past the last key
        const float want = in_band || (empty_row && j == 5) ? 1.0f : 0.0f;
        EXPECT_EQ(m[size_t((b * 12 + i) * 6 + j)], want) << b << " " << i << " " << j;
      }
}

TEST(InputsLarge, QAndKAreSixteenTimesTheirPlainValuesAndScoresReachTenThousand) {
  const Case plain = spec("dtype=fp32,h=2,l=64,d=128");
  Case large = plain;
  large.large = true;
  const HostInputs a = make_inputs(plain), b = make_inputs(large);
  for (size_t i = 0; i < a.q.size(); ++i) ASSERT_EQ(b.q[i], 16 * a.q[i]);
  for (size_t i = 0; i < a.k.size(); ++i) ASSERT_EQ(b.k[i], 16 * a.k[i]);
  EXPECT_EQ(a.v, b.v);
  double top = 0;
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 64; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < 128; ++e) dot += double(b.q[i * 128 + e]) * b.k[j * 128 + e];
      top = std::max(top, std::fabs(dot));
    }
  EXPECT_GT(top, 5e3);
  EXPECT_LT(top, 5e4);
}

TEST(InputsMaskedRows, EveryFourthRowIsFullyMaskedInEveryBatchAndNoOther) {
  for (const char* spec : {"dtype=fp16,b=2,h=2,lq=11,lkv=19,d=8,mask=bool,masked_rows",
                           "dtype=bf16,b=3,h=1,lq=9,lkv=7,d=8,mask=additive,masked_rows",
                           "dtype=fp16,b=2,h=1,lq=6,lkv=5,d=8,mask=additive,mask_dtype=fp32,"
                           "mask_shape=11qk,masked_rows"}) {
    const Case c = *parse_case_spec(spec);
    Case without = c;
    without.masked_rows = false;
    const HostInputs in = make_inputs(c), plain = make_inputs(without);
    ASSERT_EQ(in.mask.size(), size_t(c.b * c.lq * c.lkv)) << spec;
    EXPECT_EQ(in.q, plain.q);
    for (int64_t b = 0; b < c.b; ++b)
      for (int64_t i = 0; i < c.lq; ++i) {
        const size_t row = size_t((b * c.lq + i) * c.lkv);
        bool any_kept = false;
        for (int64_t j = 0; j < c.lkv; ++j) {
          const float m = in.mask[row + size_t(j)];
          any_kept = any_kept || (c.mask == Mask::boolean ? m != 0.0f : !std::isinf(m));
          if (i % 4 != 3) {
            EXPECT_EQ(m, plain.mask[row + size_t(j)]) << spec;
          } else if (c.mask == Mask::additive) {
            EXPECT_TRUE(std::isinf(m) && m < 0) << spec;
          }
        }
        EXPECT_EQ(any_kept, i % 4 != 3) << spec << " row " << i;
      }
  }
}

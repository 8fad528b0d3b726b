// CPU ref-math and ref-flash against the float64 oracle, and the oracle against hand-computed
// values: random shapes over every dtype, mask kind, layout, GQA ratio and causal alignment,
// plus the edge rows (Lq = 1, Lkv = 1, fully masked rows) that tiled kernels get wrong first.
#include "kernels/attention_core.hpp"
#include "kernels/cpu_isa.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel_for.hpp"
#include "oracle_compare.hpp"
#include "cases/cases.hpp"
#include "cases/tolerance.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>

namespace sdpa_doctor::kernels {
namespace {

// Every CPU flash path, automatic first; the forced ones; those that take bf16-exact values only.
constexpr CpuFlashPath k_flash_paths[] = {CpuFlashPath::automatic,  CpuFlashPath::amx_bf16,
                                          CpuFlashPath::avx512_bf16, CpuFlashPath::avx512_f32,
                                          CpuFlashPath::avx2,       CpuFlashPath::portable};
constexpr CpuFlashPath k_forced_paths[] = {CpuFlashPath::amx_bf16, CpuFlashPath::avx512_bf16,
                                           CpuFlashPath::avx512_f32, CpuFlashPath::avx2,
                                           CpuFlashPath::portable};
bool takes_bf16_only(CpuFlashPath path) {
  return path == CpuFlashPath::amx_bf16 || path == CpuFlashPath::avx512_bf16;
}

void expect_close(RefKernel kernel, const Case& c, const HostInputs& in,
                  const std::vector<double>& ref) {
  auto run = run_cpu(kernel, c, in, 0, 1);
  ASSERT_TRUE(run) << run.error().message;
  const Errors e = compare(run->out, ref, cases::default_tolerance(c.dtype));
  EXPECT_EQ(e.nonfinite, 0) << to_string(kernel) << " " << c.id();
  EXPECT_EQ(e.outside, 0) << to_string(kernel) << " " << c.id() << " max abs " << e.max_abs;
}

// ref-math and ref-flash against the oracle for the case of one --case spec.
void expect_kernels_match_the_oracle(const char* spec) {
  auto c = parse_case_spec(spec);
  ASSERT_TRUE(c) << spec;
  SCOPED_TRACE(c->id());
  const HostInputs in = make_inputs(*c);
  const auto ref = oracle_attention(*c, in);
  expect_close(RefKernel::math, *c, in, ref);
  expect_close(RefKernel::flash, *c, in, ref);
}

// ref-math's CPU scope: every case of the default suite, and a full-suite case of 4096 x 4096 x
// 128 left to ref-flash; ref-flash has no such limit.
TEST(CpuScope, RefMathTakesTheQuickSuiteAndLeavesTheLargestToRefFlash) {
  const auto quick = cases::suite_cases("quick");
  ASSERT_TRUE(quick);
  for (const Case& c : *quick) EXPECT_EQ(cpu_scope(RefKernel::math, c), "") << c.id();
  Case big;
  big.b = 1, big.hq = big.hkv = 8, big.lq = big.lkv = 4096, big.d = 128;
  EXPECT_NE(cpu_scope(RefKernel::math, big), "");
  EXPECT_EQ(cpu_scope(RefKernel::flash, big), "");
  big.lq = big.lkv = 2048, big.d = 119; // 4 * 8 * 2048^2 * 119 = 15.97 GFLOP: just in
  EXPECT_EQ(cpu_scope(RefKernel::math, big), "");
  big.d = 120; // 16.1 GFLOP
  EXPECT_NE(cpu_scope(RefKernel::math, big), "");
}

TEST(Oracle, MatchesHandComputedCase) {
  // One head, D = 1, two queries, two keys: softmax by hand.
  Case c;
  c.dtype = DType::f32;
  c.b = c.hq = c.hkv = 1;
  c.lq = c.lkv = 2;
  c.d = 1;
  HostInputs in;
  in.q = {1.0f, -2.0f};
  in.k = {0.5f, 1.0f};
  in.v = {3.0f, -1.0f};
  auto expect_row = [&](double qi) {
    const double s0 = qi * 0.5, s1 = qi * 1.0; // scale 1/sqrt(1)
    const double w0 = std::exp(s0) / (std::exp(s0) + std::exp(s1));
    return w0 * 3.0 + (1 - w0) * -1.0;
  };
  auto out = oracle_attention(c, in);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NEAR(out[0], expect_row(1.0), 1e-15);
  EXPECT_NEAR(out[1], expect_row(-2.0), 1e-15);

  // Causal, top-left: query 0 sees key 0 only.
  c.causal = true;
  out = oracle_attention(c, in);
  EXPECT_DOUBLE_EQ(out[0], 3.0);
  EXPECT_NEAR(out[1], expect_row(-2.0), 1e-15);
}

TEST(Oracle, CausalIsTopLeftWhenLqDiffersFromLkv) {
  // Lq = 3 > Lkv = 2: row 2 sees both keys, row 0 only key 0 (bottom-right would differ).
  Case c;
  c.dtype = DType::f32;
  c.b = c.hq = c.hkv = 1;
  c.lq = 3;
  c.lkv = 2;
  c.d = 1;
  c.causal = true;
  HostInputs in{{0.0f, 0.0f, 0.0f}, {1.0f, 1.0f}, {2.0f, 4.0f}, {}, {}};
  const auto out = oracle_attention(c, in);
  EXPECT_DOUBLE_EQ(out[0], 2.0);
  EXPECT_DOUBLE_EQ(out[1], 3.0);
  EXPECT_DOUBLE_EQ(out[2], 3.0);
}

TEST(Oracle, BottomRightAlignsTheLastQueryWithTheLastKey) {
  // Lq = 2 < Lkv = 3, bottom-right: row 0 sees keys 0 and 1, row 1 all three (top-left: 1 and 2).
  Case c = *parse_case_spec("dtype=fp32,b=1,h=1,lq=2,lkv=3,d=1,causal=bottom_right");
  HostInputs in{{0.0f, 0.0f}, {1.0f, 1.0f, 1.0f}, {2.0f, 4.0f, 9.0f}, {}, {}};
  auto out = oracle_attention(c, in);
  EXPECT_DOUBLE_EQ(out[0], 3.0);
  EXPECT_DOUBLE_EQ(out[1], 5.0);
  c.causal_bottom_right = false;
  out = oracle_attention(c, in);
  EXPECT_DOUBLE_EQ(out[0], 2.0);
  EXPECT_DOUBLE_EQ(out[1], 3.0);
}

TEST(Oracle, ScaleIsInverseSqrtOfHeadDim) {
  Case c;
  c.dtype = DType::f32;
  c.b = c.hq = c.hkv = 1;
  c.lq = 1;
  c.lkv = 2;
  c.d = 4;
  HostInputs in{{1, 1, 1, 1}, {1, 1, 1, 1, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 0}, {}, {}};
  const double w0 = std::exp(2.0) / (std::exp(2.0) + 1.0); // 4 / sqrt(4) = 2
  EXPECT_NEAR(oracle_attention(c, in)[0], w0, 1e-15);
}

// Random cases: a fixed seed, so a failure names a reproducible case id.
std::vector<Case> random_cases(int count) {
  std::mt19937 rng(1234);
  auto pick = [&](std::initializer_list<int64_t> xs) {
    return *(xs.begin() + std::uniform_int_distribution<size_t>(0, xs.size() - 1)(rng));
  };
  std::vector<Case> out;
  for (int n = 0; n < count; ++n) {
    Case c;
    c.dtype = std::array{DType::f16, DType::bf16, DType::f32}[size_t(n % 3)];
    c.b = pick({1, 2});
    c.hkv = pick({1, 2, 3});
    c.hq = c.hkv * pick({1, 2, 4});
    c.lq = pick({1, 2, 17, 64, 65, 130});
    c.lkv = pick({1, 5, 63, 64, 129, 200});
    c.d = pick({1, 8, 40, 64, 72, 128, 160});
    c.causal = n % 2 == 1;
    c.mask = std::array{Mask::none, Mask::boolean, Mask::additive}[size_t((n / 2) % 3)];
    c.layout = n % 5 == 0 ? Layout::transposed : Layout::contiguous;
    c.seed = uint64_t(n);
    out.push_back(c);
  }
  return out;
}

// The blocked oracle against the plain one (oracle_attention_reference), at every ISA level this
// CPU runs: they must agree to float64 rounding, far below any dtype's tolerance.
void expect_same_oracle(const std::vector<double>& got, const std::vector<double>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = std::abs(got[i] - want[i]);
    worst = std::max(worst, diff);
    if (!(diff <= 1e-13 + 1e-12 * std::abs(want[i]))) ++bad;
  }
  EXPECT_EQ(bad, 0) << what << ": largest difference " << worst;
}

void expect_every_level_matches(const Case& c, const HostInputs& in) {
  const auto want = oracle_attention_reference(c, in);
  for (const std::string& level : oracle_isa_levels())
    expect_same_oracle(oracle_attention_at(level, c, in), want, level + " " + c.id());
  expect_same_oracle(oracle_attention(c, in), want, "default " + c.id());
}

TEST(Oracle, BlockedAgreesWithThePlainOracleOnOddShapes) {
  // Past every blocking edge: 96 query rows per item, 128 keys per step, 16-wide panels, the
  // micro-kernel's row blocks; causal with Lq < Lkv and Lq > Lkv; GQA; D not a multiple of 8.
  for (const char* spec :
       {"dtype=fp32,b=1,h=1,lq=1,lkv=1,d=1", "dtype=fp32,b=1,h=1,lq=1,lkv=1,d=3,causal",
       "dtype=fp16,b=2,h=3,lq=1,lkv=300,d=13", "dtype=bf16,b=1,h=2,lq=300,lkv=1,d=64,causal",
       "dtype=fp32,b=1,h=1,lq=97,lkv=129,d=7,causal",
       "dtype=fp32,b=1,h=2,lq=300,lkv=130,d=72,causal",
       "dtype=fp32,b=1,h=2,lq=130,lkv=300,d=100,causal",
       "dtype=fp16,b=2,hq=8,hkv=2,lq=193,lkv=257,d=40",
       "dtype=bf16,b=1,hq=6,hkv=3,lq=100,lkv=100,d=17,causal",
       "dtype=fp32,b=2,h=2,lq=77,lkv=200,d=24,mask=bool",
       "dtype=fp32,b=2,h=2,lq=150,lkv=33,d=24,mask=bool",
       "dtype=fp16,b=2,hq=4,hkv=1,lq=130,lkv=260,d=9,mask=additive",
       "dtype=fp32,b=1,h=2,lq=64,lkv=64,d=520", "dtype=fp32,b=1,h=1,lq=2,lkv=5000,d=8"}) {
    auto c = parse_case_spec(spec);
    ASSERT_TRUE(c) << spec;
    expect_every_level_matches(*c, make_inputs(*c));
  }
  for (const Case& c : random_cases(30)) expect_every_level_matches(c, make_inputs(c));
}

TEST(Oracle, FullyMaskedRowsAreZeroAtEveryLevel) {
  for (Mask mask : {Mask::boolean, Mask::additive}) {
    Case c = *parse_case_spec("dtype=fp32,b=2,hq=4,hkv=2,lq=100,lkv=300,d=20");
    c.mask = mask;
    HostInputs in = make_inputs(c);
    const float drop = mask == Mask::boolean ? 0.0f : -std::numeric_limits<float>::infinity();
    auto row = [&](int64_t b, int64_t i) { return in.mask.data() + (b * c.lq + i) * c.lkv; };
    // Rows 0, 33 and 99 of batch 1 see nothing; row 5 only key 299 (past the first key steps);
    // row 6 keys 140 and 290 only, so its running max starts late and then moves.
    for (int64_t i : {0, 33, 99}) std::fill_n(row(1, i), c.lkv, drop);
    std::fill_n(row(0, 5), c.lkv - 1, drop);
    std::fill_n(row(0, 6), c.lkv, drop);
    row(0, 6)[140] = mask == Mask::boolean ? 1.0f : -3.0f;
    row(0, 6)[290] = mask == Mask::boolean ? 1.0f : 0.0f;
    expect_every_level_matches(c, in);
    for (const std::string& level : oracle_isa_levels()) {
      const auto out = oracle_attention_at(level, c, in);
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t i : {0, 33, 99})
          for (int64_t e = 0; e < c.d; ++e)
            EXPECT_EQ(out[size_t(((1 * c.hq + h) * c.lq + i) * c.d + e)], 0.0) << level;
      // Row 5 of batch 0 is V's key 299 exactly: one key, weight 1.
      for (int64_t e = 0; e < c.d; ++e)
        EXPECT_EQ(out[size_t(5 * c.d + e)], double(in.v[size_t(299 * c.d + e)])) << level;
    }
  }
}

// Bottom-right cases past the oracle's and the kernels' block edges: decode (Lq = 1), a few
// queries against odd key lengths, chunked prefill, with GQA and a transposed layout.
const char* const k_bottom_right_specs[] = {
    "dtype=bf16,b=1,hq=8,hkv=2,lq=1,lkv=129,d=64,causal=bottom_right",
    "dtype=fp16,b=2,hq=4,hkv=1,lq=3,lkv=300,d=40,causal=bottom_right",
    "dtype=bf16,b=1,hq=4,hkv=2,lq=16,lkv=80,d=64,causal=bottom_right",
    "dtype=fp32,b=1,h=2,lq=97,lkv=290,d=72,causal=bottom_right",
    "dtype=fp32,b=1,h=2,lq=200,lkv=201,d=24,causal=bottom_right,layout=transposed",
    "dtype=fp16,b=1,hq=6,hkv=3,lq=130,lkv=333,d=128,causal=bottom_right"};

TEST(Oracle, BlockedAgreesWithThePlainOracleBottomRight) {
  for (const char* spec : k_bottom_right_specs) {
    auto c = parse_case_spec(spec);
    ASSERT_TRUE(c) << spec;
    ASSERT_TRUE(c->causal_bottom_right) << spec;
    expect_every_level_matches(*c, make_inputs(*c));
  }
}

TEST(CpuKernels, BottomRightCasesMatchTheOracle) {
  for (const char* spec : k_bottom_right_specs) {
    expect_kernels_match_the_oracle(spec);
    // The alignment matters: the top-left oracle of the same inputs is another answer.
    auto c = parse_case_spec(spec);
    const HostInputs in = make_inputs(*c);
    Case top_left = *c;
    top_left.causal_bottom_right = false;
    const Errors e = compare(run_cpu(RefKernel::flash, *c, in, 0, 1)->out,
                             oracle_attention(top_left, in), cases::default_tolerance(c->dtype));
    EXPECT_GT(e.outside, 0);
  }
}

TEST(Oracle, PacksKvHeadsInWavesWhenTheyDoNotFitTogether) {
  // One kv head packs to 2 * 16384 * 256 doubles (64 MiB), the most packed at once: two waves.
  const Case c = *parse_case_spec("dtype=bf16,b=1,hq=4,hkv=2,lq=3,lkv=16384,d=256,causal");
  const HostInputs in = make_inputs(c);
  expect_same_oracle(oracle_attention(c, in), oracle_attention_reference(c, in), c.id());
}

TEST(Oracle, ResultsDoNotDependOnThreadCount) {
  const Case c = *parse_case_spec("dtype=fp32,b=1,hq=4,hkv=2,lq=300,lkv=333,d=64,causal");
  const HostInputs in = make_inputs(c);
  for (const std::string& level : oracle_isa_levels())
    EXPECT_EQ(oracle_attention_at(level, c, in, nullptr, 1),
              oracle_attention_at(level, c, in, nullptr, 3))
        << level;
}

TEST(Oracle, StopsSoonOnceCancelled) {
  const Case c = *parse_case_spec("dtype=fp32,b=1,h=1,l=16384,d=128");
  const HostInputs in = make_inputs(c);
  std::atomic<bool> cancel{true};
  // Already set: nothing is computed.
  const auto none = oracle_attention(c, in, &cancel);
  EXPECT_EQ(std::count(none.begin(), none.end(), 0.0), int64_t(none.size()));
  // Set 100 ms in (the whole case takes seconds): it returns within a second, as SIGINT must.
  cancel = false;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancel = true;
  });
  const auto start = std::chrono::steady_clock::now();
  (void)oracle_attention(c, in, &cancel);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stopper.join();
  EXPECT_LT(s, 1.0);
}

TEST(CpuKernels, RandomShapesMatchTheOracle) {
  for (const Case& c : random_cases(60)) {
    SCOPED_TRACE(c.id());
    const HostInputs in = make_inputs(c);
    const auto ref = oracle_attention(c, in);
    expect_close(RefKernel::math, c, in, ref);
    expect_close(RefKernel::flash, c, in, ref);
  }
}

TEST(CpuKernels, EdgeShapesMatchTheOracle) {
  for (const char* spec :
       {"dtype=fp32,b=1,h=1,lq=1,lkv=1,d=1", "dtype=fp16,b=1,h=2,lq=1,lkv=300,d=64,causal",
        "dtype=bf16,b=1,h=2,lq=300,lkv=1,d=64,causal", "dtype=fp32,b=1,h=1,lq=129,lkv=64,d=33,causal",
        "dtype=fp32,b=1,h=1,lq=64,lkv=129,d=31,causal", "dtype=fp16,b=1,hq=8,hkv=1,lq=70,lkv=70,d=256",
        "dtype=fp32,b=1,hq=6,hkv=2,lq=256,lkv=256,d=128,causal,layout=transposed"})
    expect_kernels_match_the_oracle(spec);
}

TEST(CpuKernels, FullyMaskedRowsAreZeroNotNan) {
  for (Mask mask : {Mask::boolean, Mask::additive}) {
    Case c = *parse_case_spec("dtype=fp32,b=2,h=2,lq=70,lkv=150,d=48");
    c.mask = mask;
    HostInputs in = make_inputs(c);
    // Rows 0, 33 and 69 of batch 1 see nothing: a hand-made mask (the generator never does this).
    const float drop = mask == Mask::boolean ? 0.0f : -std::numeric_limits<float>::infinity();
    for (int64_t row : {0, 33, 69})
      for (int64_t j = 0; j < c.lkv; ++j) in.mask[size_t((c.lq + row) * c.lkv + j)] = drop;
    const auto ref = oracle_attention(c, in);
    for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
      auto run = run_cpu(kernel, c, in, 0, 1);
      ASSERT_TRUE(run);
      const Errors e = compare(run->out, ref, cases::default_tolerance(c.dtype));
      EXPECT_EQ(e.nonfinite, 0) << to_string(kernel);
      EXPECT_EQ(e.outside, 0) << to_string(kernel);
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t e2 = 0; e2 < c.d; ++e2) {
          const size_t idx = size_t(((1 * c.hq + h) * c.lq + 33) * c.d + e2);
          EXPECT_EQ(run->out[idx], 0.0f);
          EXPECT_EQ(ref[idx], 0.0);
        }
    }
  }
}

TEST(CpuFlash, LogSumExpMatchesFloat64) {
  // Every path: the bf16 one rounds P only for P.V, its row sums stay fp32.
  for (const char* spec : {"dtype=fp32,b=1,hq=4,hkv=2,lq=100,lkv=77,d=40,causal",
                           "dtype=bf16,b=1,hq=4,hkv=2,lq=100,lkv=77,d=40,causal"})
    for (CpuFlashPath path : k_flash_paths) {
      const Case c = *parse_case_spec(spec);
      if (takes_bf16_only(path) && c.dtype != DType::bf16) continue;
      SCOPED_TRACE(c.id() + " " + std::string(to_string(path)));
      const HostInputs in = make_inputs(c);
      std::vector<float> o(size_t(c.q_elements()));
      std::vector<float> lse(size_t(c.b * c.hq * c.lq));
      AttnParams p = params_for(c);
      p.q = in.q.data();
      p.k = in.k.data();
      p.v = in.v.data();
      p.o = o.data();
      p.lse = lse.data();
      const std::string refused = cpu_flash_attention(p, 2, path);
      if (refused.rfind("this CPU has no", 0) == 0) continue;
      ASSERT_EQ(refused, "");
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t i = 0; i < c.lq; ++i) {
          const float* q = in.q.data() + (h * c.lq + i) * c.d;
          double m = -INFINITY, sum = 0;
          std::vector<double> s;
          for (int64_t j = 0; j <= std::min(i, c.lkv - 1); ++j) {
            const float* k = in.k.data() + ((h / 2) * c.lkv + j) * c.d;
            double dot = 0;
            for (int64_t e = 0; e < c.d; ++e) dot += double(q[e]) * k[e];
            s.push_back(dot / std::sqrt(double(c.d)));
            m = std::max(m, s.back());
          }
          for (double x : s) sum += std::exp(x - m);
          EXPECT_NEAR(lse[size_t(h * c.lq + i)], m + std::log(sum), 1e-5) << h << " " << i;
        }
    }
}

TEST(CpuKernels, BottomRightCausalAgreesBetweenMathAndFlash) {
  const Case c = *parse_case_spec("dtype=fp32,b=1,h=2,lq=50,lkv=180,d=64,causal");
  const HostInputs in = make_inputs(c);
  std::vector<float> o_math(size_t(c.q_elements())), o_flash(o_math.size());
  AttnParams p = params_for(c);
  p.causal_offset = c.lkv - c.lq;
  p.q = in.q.data();
  p.k = in.k.data();
  p.v = in.v.data();
  p.o = o_math.data();
  ASSERT_EQ(cpu_math_attention(p), "");
  p.o = o_flash.data();
  ASSERT_EQ(cpu_flash_attention(p), "");
  double diff = 0;
  for (size_t i = 0; i < o_math.size(); ++i)
    diff = std::max(diff, double(std::abs(o_math[i] - o_flash[i])));
  EXPECT_LT(diff, 1e-5);
  // And it really differs from top-left alignment.
  auto top_left = run_cpu(RefKernel::flash, c, in, 0, 1);
  ASSERT_TRUE(top_left);
  EXPECT_NE(top_left->out, o_flash);
}

TEST(CpuKernels, ResultsDoNotDependOnThreadCount) {
  const Case c = *parse_case_spec("dtype=fp32,b=2,hq=4,hkv=2,lq=200,lkv=300,d=64,causal");
  const HostInputs in = make_inputs(c);
  for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
    auto one = run_cpu(kernel, c, in, 0, 1, 1);
    auto two = run_cpu(kernel, c, in, 0, 1, 2);
    ASSERT_TRUE(one && two);
    EXPECT_EQ(one->out, two->out) << to_string(kernel);
  }
}

TEST(CpuKernels, RefuseNonF32StorageAndBadHeads) {
  AttnParams p = params_for(*parse_case_spec("dtype=fp16,b=1,h=1,l=4,d=4"));
  p.elem = ElemType::f16;
  EXPECT_NE(cpu_flash_attention(p), "");
  EXPECT_NE(cpu_math_attention(p), "");
  p.elem = ElemType::f32;
  p.hq = 3;
  p.hkv = 2;
  EXPECT_NE(cpu_flash_attention(p), "");
}

// ref-flash through one forced CPU path; empty optional when this CPU lacks it.
std::optional<std::vector<float>> run_flash_path(const Case& c, const HostInputs& in,
                                                 CpuFlashPath path, int threads = 2) {
  const std::vector<float> q = to_layout(c, c.layout, in.q, c.hq, c.lq);
  const std::vector<float> k = to_layout(c, c.layout, in.k, c.hkv, c.lkv);
  const std::vector<float> v = to_layout(c, c.layout, in.v, c.hkv, c.lkv);
  std::vector<float> o(size_t(c.q_elements()), -7.0f); // poison: every element must be written
  AttnParams p = params_for(c);
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.o = o.data();
  p.mask = in.mask.empty() ? nullptr : in.mask.data();
  const std::string refused = cpu_flash_attention(p, threads, path);
  if (refused.rfind("this CPU has no", 0) == 0) return std::nullopt;
  EXPECT_EQ(refused, "") << to_string(path);
  return output_from_layout(c, o);
}

// The shapes each path must get right: d not a multiple of 16 (or odd, for the bf16 pairs),
// L = 1, Lq != Lkv under causal, GQA, the transposed layout, both mask kinds, tiles cut short,
// keys over several softmax steps.
std::vector<Case> path_cases(DType dtype, bool with_random = true) {
  std::vector<Case> out;
  for (const char* spec :
       {"b=1,h=1,lq=1,lkv=1,d=1", "b=1,h=2,lq=1,lkv=300,d=3,causal", "b=1,h=2,lq=300,lkv=1,d=64,causal",
        "b=1,h=1,lq=129,lkv=64,d=33,causal", "b=1,h=1,lq=64,lkv=129,d=31,causal",
        "b=1,hq=8,hkv=1,lq=70,lkv=70,d=256", "b=2,hq=6,hkv=2,lq=97,lkv=200,d=40,mask=bool",
        "b=1,hq=4,hkv=4,lq=190,lkv=130,d=17,mask=additive,causal",
        "b=1,hq=6,hkv=2,lq=256,lkv=256,d=128,causal,layout=transposed",
        "b=2,h=3,lq=101,lkv=257,d=72,mask=additive,layout=transposed",
        "b=1,h=2,lq=200,lkv=200,d=130,mask=bool,causal",
        // Past 512 keys: several softmax steps of the AMX path, the last one cut short.
        "b=1,h=1,lq=40,lkv=1100,d=48,mask=additive", "b=1,h=1,lq=530,lkv=530,d=32,causal"}) {
    Case c = *parse_case_spec(spec);
    c.dtype = dtype;
    out.push_back(c);
  }
  if (with_random)
    for (Case c : random_cases(45))
      if (c.dtype == dtype) out.push_back(c);
  return out;
}

TEST(CpuFlash, EveryPathMatchesTheOracle) {
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (const Case& c : path_cases(dtype)) {
      SCOPED_TRACE(c.id());
      const HostInputs in = make_inputs(c);
      const auto ref = oracle_attention(c, in);
      for (CpuFlashPath path : k_flash_paths) {
        if (takes_bf16_only(path) && dtype != DType::bf16) continue;
        const auto out = run_flash_path(c, in, path);
        if (!out) continue;
        const Errors e = compare(*out, ref, cases::default_tolerance(c.dtype));
        EXPECT_EQ(e.nonfinite, 0) << to_string(path);
        EXPECT_EQ(e.outside, 0) << to_string(path) << " max abs " << e.max_abs;
      }
    }
}

TEST(CpuFlash, EveryPathGivesZerosForFullyMaskedRows) {
  for (DType dtype : {DType::bf16, DType::f32})
    for (Mask mask : {Mask::boolean, Mask::additive}) {
      Case c = *parse_case_spec("b=2,h=2,lq=70,lkv=150,d=48");
      c.dtype = dtype;
      c.mask = mask;
      HostInputs in = make_inputs(c);
      const float drop = mask == Mask::boolean ? 0.0f : -std::numeric_limits<float>::infinity();
      for (int64_t row : {0, 33, 69})
        for (int64_t j = 0; j < c.lkv; ++j) in.mask[size_t((c.lq + row) * c.lkv + j)] = drop;
      const auto ref = oracle_attention(c, in);
      for (CpuFlashPath path : k_forced_paths) {
        if (takes_bf16_only(path) && dtype != DType::bf16) continue;
        const auto out = run_flash_path(c, in, path);
        if (!out) continue;
        const Errors e = compare(*out, ref, cases::default_tolerance(c.dtype));
        EXPECT_EQ(e.nonfinite, 0) << to_string(path);
        EXPECT_EQ(e.outside, 0) << to_string(path);
        for (int64_t h = 0; h < c.hq; ++h)
          for (int64_t e2 = 0; e2 < c.d; ++e2)
            EXPECT_EQ((*out)[size_t(((1 * c.hq + h) * c.lq + 33) * c.d + e2)], 0.0f)
                << to_string(path);
      }
    }
}

// masked_rows cases: query rows i % 4 == 3 see no key. The oracle gives them 0 (torch >= 2.5)
// or, under the nan semantics (torch < 2.5), NaN, and leaves every other row as it was; our CPU
// kernels, every flash path included, give exact zeros there and match the oracle elsewhere.
TEST(MaskedRows, OracleFollowsTheSemanticsAndKernelsGiveZeroRows) {
  for (const char* spec : {"dtype=bf16,b=1,h=4,lq=64,lkv=80,d=64,mask=bool,masked_rows",
                           "dtype=fp16,b=2,hq=4,hkv=2,lq=70,lkv=150,d=48,mask=additive,masked_rows",
                           "dtype=fp32,b=2,h=2,lq=33,lkv=20,d=32,mask=additive,mask_dtype=fp32,"
                           "mask_shape=qk,masked_rows",
                           "dtype=fp32,b=1,h=2,lq=40,lkv=40,d=16,causal,mask=bool,masked_rows"}) {
    const Case c = *parse_case_spec(spec);
    SCOPED_TRACE(c.id());
    const HostInputs in = make_inputs(c);
    const std::vector<double> zero = oracle_attention(c, in);
    std::vector<double> nan = zero;
    apply_masked_row_semantics(c, in, MaskedRowSemantics::zero, nan);
    EXPECT_EQ(nan, zero);
    apply_masked_row_semantics(c, in, MaskedRowSemantics::nan, nan);
    for (size_t i = 0; i < zero.size(); ++i) {
      const bool masked = int64_t(i) / c.d % c.lq % 4 == 3;
      ASSERT_EQ(std::isnan(nan[i]), masked) << i;
      if (masked) {
        ASSERT_EQ(zero[i], 0.0) << i;
      } else {
        ASSERT_EQ(nan[i], zero[i]) << i;
      }
    }
    expect_same_oracle(oracle_attention_reference(c, in), zero, "reference");
    for (const std::string& level : oracle_isa_levels())
      expect_same_oracle(oracle_attention_at(level, c, in), zero, level);
    auto zero_rows = [&](const std::vector<float>& out, std::string_view what) {
      for (size_t i = 0; i < out.size(); ++i)
        if (int64_t(i) / c.d % c.lq % 4 == 3) {
          ASSERT_EQ(out[i], 0.0f) << what << " " << i;
        }
    };
    for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
      expect_close(kernel, c, in, zero);
      auto run = run_cpu(kernel, c, in, 0, 1);
      ASSERT_TRUE(run) << run.error().message;
      zero_rows(run->out, to_string(kernel));
    }
    for (CpuFlashPath path : k_forced_paths) {
      if (takes_bf16_only(path) && c.dtype != DType::bf16) continue;
      const auto out = run_flash_path(c, in, path);
      if (!out) continue; // not on this CPU
      const Errors e = compare(*out, zero, cases::default_tolerance(c.dtype));
      EXPECT_EQ(e.nonfinite, 0) << to_string(path);
      EXPECT_EQ(e.outside, 0) << to_string(path);
      zero_rows(*out, to_string(path));
    }
  }
}

// The path `automatic` takes at a level of cpu_isa_level for values of `dtype`.
CpuFlashPath path_at_level(const std::string& level, DType dtype) {
  const bool bf16 = dtype == DType::bf16;
  if (level == "amx") return bf16 ? CpuFlashPath::amx_bf16 : CpuFlashPath::avx512_f32;
  if (level == "avx512bf16") return bf16 ? CpuFlashPath::avx512_bf16 : CpuFlashPath::avx512_f32;
  if (level == "avx512") return CpuFlashPath::avx512_f32;
  if (level == "avx2") return CpuFlashPath::avx2;
  return CpuFlashPath::portable;
}

// CTest runs this once per level with $SDPA_DOCTOR_CPU_ISA set (kernels_isa_<level>,
// tests/kernels/CMakeLists.txt), and once unset with the others: the variable caps cpu_isa(),
// `automatic` then takes that level's path, which matches the oracle, and every path above the
// level refuses. A level this CPU (or its kernel) does not give is skipped with the reason, so
// the test output lists the paths this machine ran and those it left untested.
TEST(CpuIsaForced, AutomaticPathAtTheLevelMatchesTheOracle) {
  const CpuIsa& isa = cpu_isa();
  const std::string level = cpu_isa_level(isa);
  const char* forced = std::getenv("SDPA_DOCTOR_CPU_ISA");
  std::string want = level;
  if (forced && *forced) {
    EXPECT_EQ(isa.forced, forced);
    if (isa.forced_note.empty()) want = forced;
    else std::printf("[ ISA      ] SDPA_DOCTOR_CPU_ISA=%s: %s\n", forced, isa.forced_note.c_str());
  }
  if (level != want)
    GTEST_SKIP() << "SDPA_DOCTOR_CPU_ISA=" << want << ": this CPU gives only " << level
                 << ", so the " << want << " path is untested here";
  std::printf("[ ISA      ] level %s: bf16 on %s, fp16 and fp32 on %s\n", level.c_str(),
              std::string(to_string(path_at_level(level, DType::bf16))).c_str(),
              std::string(to_string(path_at_level(level, DType::f32))).c_str());
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    const CpuFlashPath path = path_at_level(level, dtype);
    for (const Case& c : path_cases(dtype, false)) {
      SCOPED_TRACE(c.id());
      EXPECT_EQ(cpu_flash_path_for(params_for(c)), path);
      const HostInputs in = make_inputs(c);
      const auto ref = oracle_attention(c, in);
      const auto out = run_flash_path(c, in, CpuFlashPath::automatic);
      ASSERT_TRUE(out);
      const Errors e = compare(*out, ref, cases::default_tolerance(c.dtype));
      EXPECT_EQ(e.nonfinite, 0) << to_string(path);
      EXPECT_EQ(e.outside, 0) << to_string(path) << " max abs " << e.max_abs;
    }
  }
  // Above the level: refused, as on a CPU without it.
  AttnParams bf16 = params_for(*parse_case_spec("dtype=bf16,b=1,h=1,l=40,d=8"));
  bf16.b = 0; // no data: a path that wrongly ran would read nothing
  const std::vector<std::string> order = {"portable", "avx2", "avx512", "avx512bf16", "amx"};
  const auto rank = std::find(order.begin(), order.end(), level) - order.begin();
  for (size_t above = size_t(rank) + 1; above < order.size(); ++above) {
    const std::string why = cpu_flash_attention(bf16, 1, path_at_level(order[above], DType::bf16));
    EXPECT_EQ(why.rfind("this CPU has no", 0), 0u) << order[above] << ": " << why;
  }
}

TEST(CpuFlash, EveryPathGivesTheSameResultOnAnyThreadCount) {
  const Case c = *parse_case_spec("dtype=bf16,b=2,hq=4,hkv=2,lq=200,lkv=300,d=64,causal");
  const HostInputs in = make_inputs(c);
  for (CpuFlashPath path : k_forced_paths) {
    const auto one = run_flash_path(c, in, path, 1);
    const auto three = run_flash_path(c, in, path, 3);
    if (!one || !three) continue;
    EXPECT_EQ(*one, *three) << to_string(path);
  }
}

TEST(CpuFlash, PathChoiceFollowsTheValuesAndTheCpu) {
  const AttnParams bf16 = params_for(*parse_case_spec("dtype=bf16,b=1,h=1,l=4,d=4"));
  const AttnParams f32 = params_for(*parse_case_spec("dtype=fp32,b=1,h=1,l=4,d=4"));
  EXPECT_EQ(bf16.values_rounded_to, ElemType::bf16);
  EXPECT_EQ(f32.values_rounded_to, ElemType::f32);
  EXPECT_NE(cpu_flash_path_for(f32), CpuFlashPath::avx512_bf16);
  EXPECT_NE(cpu_flash_path_for(bf16), CpuFlashPath::automatic);
  EXPECT_NE(cpu_flash_path_for(f32), CpuFlashPath::amx_bf16);
  // Rounding fp32 values to bf16 would lose them: those paths refuse, whatever the CPU.
  for (CpuFlashPath path : {CpuFlashPath::avx512_bf16, CpuFlashPath::amx_bf16}) {
    const std::string why = cpu_flash_attention(f32, 1, path);
    EXPECT_NE(why.find("bf16-exact"), std::string::npos) << why;
  }
  std::set<std::string_view> names;
  for (CpuFlashPath path : k_flash_paths) names.insert(to_string(path));
  EXPECT_EQ(names.size(), std::size(k_flash_paths));
}

TEST(CpuFlash, Bf16PathRoundsTheProbabilities) {
  // The same bf16-exact inputs, the raw f32 outputs (before any rounding to bf16): the fp32
  // paths are within fp32 tolerance of the oracle; the bf16 path (P rounded to bf16 for P.V)
  // is not, but is within the bf16 tolerance. So it really ran, and only P was rounded.
  const Case c = *parse_case_spec("dtype=bf16,b=1,h=2,lq=130,lkv=300,d=64");
  const HostInputs in = make_inputs(c);
  const std::vector<double> ref = oracle_attention(c, in);
  auto raw = [&](CpuFlashPath path) -> std::optional<std::vector<float>> {
    std::vector<float> o(size_t(c.q_elements()));
    AttnParams p = params_for(c); // contiguous: o is already logical (B,H,L,D)
    p.q = in.q.data();
    p.k = in.k.data();
    p.v = in.v.data();
    p.o = o.data();
    if (!cpu_flash_attention(p, 2, path).empty()) return std::nullopt;
    return o;
  };
  for (CpuFlashPath path : {CpuFlashPath::avx512_f32, CpuFlashPath::avx2, CpuFlashPath::portable}) {
    const auto f32 = raw(path);
    if (!f32) continue;
    EXPECT_EQ(compare(*f32, ref, cases::default_tolerance(DType::f32)).outside, 0)
        << to_string(path);
  }
  int ran = 0;
  for (CpuFlashPath path : {CpuFlashPath::avx512_bf16, CpuFlashPath::amx_bf16}) {
    const auto bf16 = raw(path);
    if (!bf16) continue;
    ++ran;
    EXPECT_EQ(compare(*bf16, ref, cases::default_tolerance(DType::bf16)).outside, 0)
        << to_string(path);
    EXPECT_GT(compare(*bf16, ref, cases::default_tolerance(DType::f32)).outside, 0)
        << to_string(path);
  }
  if (ran == 0) GTEST_SKIP() << "this CPU has no AVX512_BF16 and no AMX-BF16";
}

TEST(ParallelFor, TwoPhaseRunsEveryItemOnceAndPhaseAFirst) {
  for (int threads : {1, 2, 3}) {
    std::vector<std::atomic<int>> a(37), b(53);
    std::atomic<int> a_done{0};
    std::atomic<bool> b_before_a{false};
    parallel_for_two_phase(
        int64_t(a.size()),
        [&](int64_t i, int) {
          a[size_t(i)].fetch_add(1);
          a_done.fetch_add(1);
        },
        int64_t(b.size()),
        [&](int64_t i, int worker) {
          if (a_done.load() != int(a.size())) b_before_a = true;
          EXPECT_LT(worker, threads);
          b[size_t(i)].fetch_add(1);
        },
        threads);
    EXPECT_FALSE(b_before_a) << threads;
    for (const auto& x : a) EXPECT_EQ(x.load(), 1) << threads;
    for (const auto& x : b) EXPECT_EQ(x.load(), 1) << threads;
  }
}

TEST(AttentionCore, ExpMatchesLibmOnNonPositiveInputs) {
  for (float x = -90.0f; x <= 0.0f; x += 0.01f) {
    const float want = std::exp(x);
    const float got = core::exp_nonpositive(x);
    EXPECT_LE(std::abs(got - want), 4e-7f * want + 1e-37f) << x;
  }
  EXPECT_EQ(core::exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(core::exp_nonpositive(0.0f), 1.0f);
}

TEST(AttentionCore, EmptyRowFinishesAsZero) {
  core::RowState st = core::row_start();
  EXPECT_EQ(core::row_rescale(st, core::neg_inf()), 1.0f);
  EXPECT_EQ(core::row_prob(st, core::neg_inf()), 0.0f);
  EXPECT_EQ(core::row_final_scale(st), 0.0f);
}

TEST(KernelNames, RoundTrip) {
  for (RefKernel k : {RefKernel::math, RefKernel::flash})
    EXPECT_EQ(ref_kernel_from_string(to_string(k)), k);
  EXPECT_FALSE(ref_kernel_from_string("flash"));
}

TEST(Gpu, AnswersWhyItCannotRunWithoutADevice) {
  // This test machine class has no GPU; on one with a GPU the reason is empty and we say so.
  const std::string why = gpu_unavailable_reason(0);
  if (why.empty()) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(why.rfind("no GPU device: ", 0), 0u) << why;
  EXPECT_FALSE(gpu_available(0));
  const Case c = *parse_case_spec("dtype=fp16,b=1,h=1,l=8,d=8");
  auto run = run_gpu(RefKernel::flash, 0, c, make_inputs(c), 0, 1);
  ASSERT_FALSE(run);
  EXPECT_EQ(run.error().message, why);
  const GpuKernels& kernels = gpu_kernels(RefKernel::math, 0);
  EXPECT_TRUE(kernels.refusal);
  EXPECT_EQ(kernels.failure, why);
  EXPECT_NE(gpu_health_check(0).problem, "");
}

TEST(Gpu, MatchesTheOracleWhenADeviceIsPresent) {
  if (!gpu_available(0)) GTEST_SKIP() << gpu_unavailable_reason(0);
  for (const Case& c : random_cases(24)) {
    SCOPED_TRACE(c.id());
    const HostInputs in = make_inputs(c);
    const auto ref = oracle_attention(c, in);
    for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
      auto run = run_gpu(kernel, 0, c, in, 0, 1);
      if (!run && run.error().message.rfind("no ", 0) == 0) continue; // no instance (D > 256)
      ASSERT_TRUE(run) << run.error().message;
      const Errors e = compare(run->out, ref, cases::default_tolerance(c.dtype));
      EXPECT_EQ(e.nonfinite, 0) << to_string(kernel);
      EXPECT_EQ(e.outside, 0) << to_string(kernel) << " max abs " << e.max_abs;
    }
  }
}

// Each tensor in its own layout (offset, strided, transposed, and the output in q's): our
// kernels read every one through its strides and agree with the oracle.
TEST(RefKernels, EachTensorInItsOwnLayoutMatchesTheOracle) {
  for (const char* spec :
       {"dtype=fp32,b=2,hq=4,hkv=2,lq=9,lkv=33,d=24,q_layout=offset,k_layout=strided,"
        "v_layout=transposed",
        "dtype=bf16,b=1,h=2,l=40,d=64,layout=strided,causal",
        "dtype=fp16,b=2,h=2,lq=17,lkv=30,d=32,v_layout=offset,mask=additive,mask_dtype=fp32"}) {
    const Case c = *parse_case_spec(spec);
    const HostInputs in = make_inputs(c);
    const std::vector<double> ref = oracle_attention(c, in);
    for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
      auto run = run_cpu(kernel, c, in, 0, 1, 2);
      ASSERT_TRUE(run) << spec << ": " << run.error().message;
      EXPECT_EQ(compare(run->out, ref, cases::default_tolerance(c.dtype)).outside, 0)
          << spec << " " << to_string(kernel);
    }
  }
}

// Scores near 1e4: the float64 oracle stays finite, our kernels (max-subtracted softmax) pass,
// and a softmax that skips the max subtraction overflows exp() to inf/NaN, which the comparison
// calls nonfinite, not a mismatch.
TEST(LargeValues, AnOverflowedSoftmaxIsNonfiniteWhereTheOracleIsFinite) {
  const Case c = *parse_case_spec("dtype=fp16,b=1,h=2,l=32,d=128,large");
  const HostInputs in = make_inputs(c);
  const std::vector<double> ref = oracle_attention(c, in);
  for (double x : ref) ASSERT_TRUE(std::isfinite(x));
  auto ours = run_cpu(RefKernel::flash, c, in, 0, 1, 2);
  ASSERT_TRUE(ours) << ours.error().message;
  EXPECT_EQ(compare(ours->out, ref, cases::default_tolerance(c.dtype)).outside, 0);
  // exp(score * scale) with no max taken first, in float: exp(1e4 / sqrt(128)) is inf.
  std::vector<float> naive(ref.size());
  const float scale = 1.0f / std::sqrt(128.0f);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 32; ++i) {
      std::vector<float> p(32);
      float sum = 0;
      for (int64_t j = 0; j < 32; ++j) {
        float dot = 0;
        for (int64_t e = 0; e < 128; ++e)
          dot += in.q[size_t((h * 32 + i) * 128 + e)] * in.k[size_t((h * 32 + j) * 128 + e)];
        sum += p[size_t(j)] = std::exp(dot * scale);
      }
      for (int64_t e = 0; e < 128; ++e) {
        float o = 0;
        for (int64_t j = 0; j < 32; ++j)
          o += p[size_t(j)] / sum * in.v[size_t((h * 32 + j) * 128 + e)];
        naive[size_t((h * 32 + i) * 128 + e)] = o;
      }
    }
  const auto verdict = cases::compare_to_oracle(naive.data(), ref.data(), ref.size(),
                                                cases::default_tolerance(c.dtype));
  EXPECT_EQ(verdict.status, Status::nonfinite) << verdict.reason;
  EXPECT_GT(verdict.metrics.nan_count + verdict.metrics.inf_count, 0);
}

} // namespace
} // namespace sdpa_doctor::kernels

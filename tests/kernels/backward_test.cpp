// Backward passes: the blocked float64 oracle against the row-wise one (float64 rounding), and
// ref-math's and ref-flash's CPU backward against the oracle (dtype tolerances), dq, dk and dv
// each on its own, over shapes past every tile edge: odd lengths, causal with Lq != Lkv, GQA,
// bool and additive masks, head dims 16 to 256, both layouts.
#include "kernels/kernels.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

namespace sdpa_doctor::kernels {
namespace {

// A seeded upstream gradient in [-1, 1), rounded to the case dtype as a backend receives it:
// each element its own, so no symmetry hides an error.
std::vector<float> upstream_gradient(const Case& c) {
  std::vector<float> out(size_t(c.q_elements()));
  uint64_t x = 0x9E3779B97F4A7C15ull ^ (c.seed + 1);
  for (float& g : out) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    g = round_to_dtype(c.dtype, float(double(x >> 11) * 0x1p-52 - 1.0));
  }
  return out;
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// max |got - want| / max |want|: the error against the gradient's own scale (gradients of
// different tensors and shapes differ in size by orders of magnitude).
template <typename T>
double relative_error(const std::vector<T>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double d = std::abs(double(got[i]) - want[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

void expect_same_gradients(const OracleGradients& got, const OracleGradients& want,
                           const std::string& what) {
  EXPECT_LE(relative_error(got.dq, want.dq), 1e-12) << what << " dq";
  EXPECT_LE(relative_error(got.dk, want.dk), 1e-12) << what << " dk";
  EXPECT_LE(relative_error(got.dv, want.dv), 1e-12) << what << " dv";
}

Case spec(const std::string& text) {
  auto c = parse_case_spec(text);
  EXPECT_TRUE(c) << text;
  return c ? *c : Case{};
}

// Past every edge of the 64 x 64 tiles and the micro-kernel's row blocks; causal with Lq < Lkv
// and Lq > Lkv; GQA and MQA; both mask kinds (with causal too); D not a multiple of 16.
const char* const k_oracle_shapes[] = {
    "dtype=fp32,b=1,h=1,l=1,d=16",
    "dtype=fp32,b=1,h=2,lq=65,lkv=63,d=40",
    "dtype=fp16,b=2,hq=4,hkv=2,lq=130,lkv=200,d=72,causal,seed=3",
    "dtype=bf16,b=1,hq=6,hkv=1,lq=200,lkv=70,d=64,causal,seed=4",
    "dtype=fp32,b=1,h=2,lq=97,lkv=129,d=24,mask=bool,seed=5",
    "dtype=fp16,b=2,hq=4,hkv=4,lq=64,lkv=128,d=128,mask=additive,causal,seed=6",
    "dtype=bf16,b=1,hq=2,hkv=1,lq=33,lkv=257,d=256,mask=additive,seed=7",
    "dtype=fp32,b=1,h=3,lq=5,lkv=300,d=8,causal,mask=bool,seed=8",
    "dtype=fp16,b=1,hq=2,hkv=1,lq=3,lkv=65,d=1,seed=9",
};

TEST(OracleBackward, BlockedAgreesWithTheRowWiseOneAtEveryLevel) {
  for (const char* text : k_oracle_shapes) {
    const Case c = spec(text);
    SCOPED_TRACE(c.id());
    const HostInputs in = make_inputs(c);
    const std::vector<double> dout = as_double(upstream_gradient(c));
    const OracleGradients want = oracle_attention_backward_reference(c, in, dout);
    for (const std::string& level : oracle_isa_levels())
      expect_same_gradients(oracle_attention_backward_at(level, c, in, dout, nullptr, 3), want,
                            level);
    expect_same_gradients(oracle_attention_backward(c, in, dout), want, "default");
  }
}

TEST(OracleBackward, ResultsDoNotDependOnThreadCount) {
  const Case c = spec("dtype=fp16,b=1,hq=4,hkv=2,lq=150,lkv=190,d=40,causal,mask=additive");
  const HostInputs in = make_inputs(c);
  const std::vector<double> dout = as_double(upstream_gradient(c));
  const std::string level = oracle_isa_levels().front();
  const OracleGradients one = oracle_attention_backward_at(level, c, in, dout, nullptr, 1);
  for (int threads : {2, 5}) {
    const OracleGradients many = oracle_attention_backward_at(level, c, in, dout, nullptr, threads);
    EXPECT_EQ(many.dq, one.dq) << threads;
    EXPECT_EQ(many.dk, one.dk) << threads;
    EXPECT_EQ(many.dv, one.dv) << threads;
  }
}

TEST(OracleBackward, FullyMaskedRowsPassNoGradient) {
  const Case c = spec("dtype=fp32,b=1,h=2,lq=70,lkv=90,d=32,mask=bool");
  HostInputs in = make_inputs(c);
  std::fill_n(in.mask.begin() + 3 * c.lkv, c.lkv, 0.0f); // row 3 sees nothing
  const std::vector<double> dout = as_double(upstream_gradient(c));
  const OracleGradients want = oracle_attention_backward_reference(c, in, dout);
  for (const std::string& level : oracle_isa_levels()) {
    const OracleGradients got = oracle_attention_backward_at(level, c, in, dout);
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t e = 0; e < c.d; ++e)
        EXPECT_EQ(got.dq[size_t((h * c.lq + 3) * c.d + e)], 0.0) << level;
    expect_same_gradients(got, want, level);
  }
}

TEST(OracleBackward, ADifferentUpstreamGradientIsCaught) {
  // The comparison is able to fail: one element of dO changed by 1e-6 moves every gradient
  // beyond the 1e-12 the blocked and row-wise backward are held to.
  const Case c = spec("dtype=fp32,b=1,hq=2,hkv=1,lq=40,lkv=50,d=16");
  const HostInputs in = make_inputs(c);
  std::vector<double> dout = as_double(upstream_gradient(c));
  const OracleGradients want = oracle_attention_backward_reference(c, in, dout);
  dout[size_t(c.d * 7 + 3)] += 1e-6;
  const OracleGradients got = oracle_attention_backward(c, in, dout);
  EXPECT_GT(relative_error(got.dq, want.dq), 1e-12);
  EXPECT_GT(relative_error(got.dk, want.dk), 1e-12);
  EXPECT_GT(relative_error(got.dv, want.dv), 1e-12);
}

TEST(OracleBackward, StopsOnceCancelled) {
  const Case c = spec("dtype=fp32,b=1,h=2,l=300,d=64");
  const HostInputs in = make_inputs(c);
  const std::atomic<bool> cancel{true};
  const OracleGradients got =
      oracle_attention_backward(c, in, as_double(upstream_gradient(c)), &cancel);
  // Nothing past the first check ran: every gradient still zero.
  auto zero = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return x == 0.0; });
  };
  EXPECT_TRUE(zero(got.dq) && zero(got.dk) && zero(got.dv));
  // Not cancelled, the same call gives gradients.
  EXPECT_FALSE(zero(oracle_attention_backward(c, in, as_double(upstream_gradient(c))).dq));
}

// ref-math and ref-flash against the oracle: the largest error of each gradient relative to
// its largest |value|. The gradients are rounded to the dtype at the end (a relative error of
// at most its unit roundoff u: fp32 6e-8, fp16 4.9e-4, bf16 3.9e-3), after fp32 sums over Lkv
// and Lq terms in which dS = P (dP - D) subtracts two O(1) numbers; ref-flash takes D from the
// output rounded to the dtype, as a backend saves it, which adds about u |dO| |O| to D. Measured
// worst over the grid below: fp32 1.6e-6 (ref-math, D = 256), fp16 1.05e-3 and bf16 4.6e-3
// (ref-flash, Lq = 5 against Lkv = 300: D from the rounded output); fp16 and bf16 otherwise near
// their u. The bounds leave 3x or more over that and stay far under what a real bug gives (a
// dropped key, a wrong scale, dk and dv swapped: errors of order 1; see the next test).
double gradient_tolerance(DType dtype) {
  switch (dtype) {
  case DType::f32: return 5e-6;
  case DType::f16: return 4e-3;
  case DType::bf16: return 1.6e-2;
  }
  return 5e-6;
}

struct KernelCheck {
  double dq = 0, dk = 0, dv = 0;
};

KernelCheck check_kernel(RefKernel kernel, const Case& c, const HostInputs& in,
                         const std::vector<float>& dout, const OracleGradients& want,
                         int threads = 0) {
  auto run = run_cpu_backward(kernel, c, in, dout, 0, 1, threads);
  EXPECT_TRUE(run) << run.error().message;
  if (!run) return {INFINITY, INFINITY, INFINITY};
  return {relative_error(run->dq, want.dq), relative_error(run->dk, want.dk),
          relative_error(run->dv, want.dv)};
}

std::vector<Case> kernel_grid() {
  std::vector<Case> out;
  const char* const shapes[] = {
      "b=1,h=2,lq=65,lkv=63,d=16",
      "b=2,hq=4,hkv=2,lq=130,lkv=200,d=72,causal",
      "b=1,hq=6,hkv=1,lq=200,lkv=70,d=64,causal",
      "b=1,h=2,lq=97,lkv=129,d=24,mask=bool",
      "b=1,hq=4,hkv=2,lq=64,lkv=128,d=128,mask=additive,causal",
      "b=1,hq=2,hkv=1,lq=33,lkv=257,d=256,mask=additive",
      "b=1,h=3,lq=5,lkv=300,d=8,causal,mask=bool",
      "b=2,hq=4,hkv=2,lq=77,lkv=77,d=40,layout=transposed,causal",
      "b=1,h=1,lq=1,lkv=1,d=160",
      "b=1,hq=2,hkv=1,lq=3,lkv=65,d=1",
      "b=2,h=2,lq=64,lkv=80,d=64,mask=bool,masked_rows",
      "b=1,hq=4,hkv=2,lq=70,lkv=90,d=32,mask=additive,masked_rows"};
  int seed = 0;
  for (const char* dtype : {"fp32", "fp16", "bf16"})
    for (const char* shape : shapes)
      out.push_back(spec(std::string("dtype=") + dtype + "," + shape + ",seed=" +
                         std::to_string(++seed)));
  return out;
}

TEST(CpuKernelBackward, MathAndFlashMatchTheOracle) {
  for (const Case& c : kernel_grid()) {
    SCOPED_TRACE(c.id());
    const HostInputs in = make_inputs(c);
    const std::vector<float> dout = upstream_gradient(c);
    const OracleGradients want = oracle_attention_backward(c, in, as_double(dout));
    const double tol = gradient_tolerance(c.dtype);
    for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
      const KernelCheck e = check_kernel(kernel, c, in, dout, want);
      EXPECT_LE(e.dq, tol) << to_string(kernel) << " dq";
      EXPECT_LE(e.dk, tol) << to_string(kernel) << " dk";
      EXPECT_LE(e.dv, tol) << to_string(kernel) << " dv";
    }
  }
}

// Bottom-right causal (decode, a few queries, chunked prefill; GQA): the blocked oracle against
// the row-wise one, and ref-math's and ref-flash's backward against the oracle.
TEST(CpuKernelBackward, BottomRightMatchesTheOracle) {
  for (const char* text :
       {"dtype=fp32,b=1,hq=4,hkv=2,lq=1,lkv=129,d=64,causal=bottom_right,seed=2",
        "dtype=bf16,b=1,hq=4,hkv=2,lq=16,lkv=80,d=64,causal=bottom_right,seed=3",
        "dtype=fp16,b=2,hq=2,hkv=1,lq=70,lkv=200,d=40,causal=bottom_right,seed=4",
        "dtype=fp32,b=1,h=2,lq=130,lkv=131,d=32,causal=bottom_right,seed=5"}) {
    const Case c = spec(text);
    SCOPED_TRACE(c.id());
    ASSERT_TRUE(c.causal_bottom_right);
    const HostInputs in = make_inputs(c);
    const std::vector<float> dout = upstream_gradient(c);
    const OracleGradients want = oracle_attention_backward(c, in, as_double(dout));
    expect_same_gradients(want, oracle_attention_backward_reference(c, in, as_double(dout)),
                          "blocked");
    const double tol = gradient_tolerance(c.dtype);
    for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
      const KernelCheck e = check_kernel(kernel, c, in, dout, want);
      EXPECT_LE(e.dq, tol) << to_string(kernel) << " dq";
      EXPECT_LE(e.dk, tol) << to_string(kernel) << " dk";
      EXPECT_LE(e.dv, tol) << to_string(kernel) << " dv";
    }
  }
}

TEST(CpuKernelBackward, AWrongGradientFailsTheCheck) {
  // The same check on wrong answers: the oracle's gradients for another upstream gradient, and
  // dk and dv swapped. Each must land far outside the tolerance.
  const Case c = spec("dtype=bf16,b=1,hq=4,hkv=2,lq=50,lkv=60,d=32,causal");
  const HostInputs in = make_inputs(c);
  const std::vector<float> dout = upstream_gradient(c);
  OracleGradients other = oracle_attention_backward(c, in, as_double(dout));
  std::swap(other.dk, other.dv);
  const double tol = gradient_tolerance(c.dtype);
  for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
    const KernelCheck swapped = check_kernel(kernel, c, in, dout, other);
    EXPECT_GT(swapped.dk, 10 * tol) << to_string(kernel);
    EXPECT_GT(swapped.dv, 10 * tol) << to_string(kernel);
  }
  Case shifted = c;
  shifted.seed = 99;
  const OracleGradients wrong =
      oracle_attention_backward(c, in, as_double(upstream_gradient(shifted)));
  for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
    const KernelCheck e = check_kernel(kernel, c, in, dout, wrong);
    EXPECT_GT(std::min({e.dq, e.dk, e.dv}), 10 * tol) << to_string(kernel);
  }
}

TEST(CpuKernelBackward, ResultsDoNotDependOnThreadCount) {
  const Case c = spec("dtype=fp16,b=1,hq=4,hkv=2,lq=150,lkv=190,d=40,causal,mask=additive");
  const HostInputs in = make_inputs(c);
  const std::vector<float> dout = upstream_gradient(c);
  for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
    auto one = run_cpu_backward(kernel, c, in, dout, 0, 1, 1);
    auto many = run_cpu_backward(kernel, c, in, dout, 0, 1, 3);
    ASSERT_TRUE(one && many);
    EXPECT_EQ(one->dq, many->dq) << to_string(kernel);
    EXPECT_EQ(one->dk, many->dk) << to_string(kernel);
    EXPECT_EQ(one->dv, many->dv) << to_string(kernel);
  }
}

TEST(CpuKernelBackward, FullyMaskedRowsPassNoGradientNotNan) {
  const Case c = spec("dtype=fp16,b=1,h=2,lq=70,lkv=90,d=32,mask=bool");
  HostInputs in = make_inputs(c);
  std::fill_n(in.mask.begin() + 3 * c.lkv, c.lkv, 0.0f);
  const std::vector<float> dout = upstream_gradient(c);
  const OracleGradients want = oracle_attention_backward(c, in, as_double(dout));
  for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
    auto run = run_cpu_backward(kernel, c, in, dout);
    ASSERT_TRUE(run) << run.error().message;
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t e = 0; e < c.d; ++e)
        EXPECT_EQ(run->dq[size_t((h * c.lq + 3) * c.d + e)], 0.0f) << to_string(kernel);
    EXPECT_LE(relative_error(run->dk, want.dk), gradient_tolerance(c.dtype)) << to_string(kernel);
  }
}

// masked_rows: rows i % 4 == 3 see no key. The oracle passes them no gradient (0 in dq) and, under
// the nan semantics, makes their dq NaN and nothing else; both CPU kernels give zero rows (and
// match the oracle: kernel_grid has masked_rows cases).
TEST(MaskedRowsBackward, ZeroGradientRowsAndTheNanSemanticsOnlyInDq) {
  for (const char* text :
       {"dtype=bf16,b=2,h=2,lq=64,lkv=80,d=64,mask=bool,masked_rows",
        "dtype=fp16,b=1,hq=4,hkv=2,lq=70,lkv=90,d=32,mask=additive,masked_rows"}) {
    const Case c = spec(text);
    SCOPED_TRACE(c.id());
    const HostInputs in = make_inputs(c);
    const std::vector<float> dout = upstream_gradient(c);
    const OracleGradients want = oracle_attention_backward(c, in, as_double(dout));
    expect_same_gradients(oracle_attention_backward_reference(c, in, as_double(dout)), want,
                          "reference");
    OracleGradients nan = want;
    apply_masked_row_semantics(c, in, MaskedRowSemantics::nan, nan.dq);
    for (size_t i = 0; i < want.dq.size(); ++i) {
      const bool masked = int64_t(i) / c.d % c.lq % 4 == 3;
      ASSERT_EQ(std::isnan(nan.dq[i]), masked) << i;
      if (masked) {
        ASSERT_EQ(want.dq[i], 0.0) << i;
      }
    }
    EXPECT_EQ(nan.dk, want.dk);
    EXPECT_EQ(nan.dv, want.dv);
    for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
      auto run = run_cpu_backward(kernel, c, in, dout);
      ASSERT_TRUE(run) << run.error().message;
      for (size_t i = 0; i < run->dq.size(); ++i)
        if (int64_t(i) / c.d % c.lq % 4 == 3) {
          ASSERT_EQ(run->dq[i], 0.0f) << to_string(kernel);
        }
    }
  }
}

// Bottom-right causal (an offset the oracle does not take): ref-math's and ref-flash's backward,
// which share no code past the masking rule, agree to fp32 rounding.
TEST(CpuKernelBackward, BottomRightCausalAgreesBetweenMathAndFlash) {
  for (const char* text : {"dtype=fp32,b=1,hq=4,hkv=2,lq=50,lkv=180,d=64,causal",
                           "dtype=fp32,b=1,h=2,lq=130,lkv=70,d=32,causal"}) {
    const Case c = spec(text);
    SCOPED_TRACE(c.id());
    const HostInputs in = make_inputs(c);
    const std::vector<float> dout = upstream_gradient(c);
    AttnParams p = params_for(c);
    p.causal_offset = c.lkv - c.lq;
    std::vector<float> o(size_t(c.q_elements())), lse(size_t(c.b * c.hq * c.lq));
    p.q = in.q.data();
    p.k = in.k.data();
    p.v = in.v.data();
    p.o = o.data();
    p.lse = lse.data();
    ASSERT_EQ(cpu_flash_attention(p, 2), "");
    std::vector<float> dq[2], dk[2], dv[2];
    for (int n = 0; n < 2; ++n) {
      dq[n].resize(size_t(c.q_elements()));
      dk[n].resize(size_t(c.kv_elements()));
      dv[n].resize(size_t(c.kv_elements()));
      const AttnGrads g{dout.data(), dq[n].data(), dk[n].data(), dv[n].data()};
      ASSERT_EQ(n == 0 ? cpu_math_attention_backward(p, g, 2)
                       : cpu_flash_attention_backward(p, g, 2),
                "");
    }
    EXPECT_LE(relative_error(dq[1], as_double(dq[0])), 2e-6);
    EXPECT_LE(relative_error(dk[1], as_double(dk[0])), 2e-6);
    EXPECT_LE(relative_error(dv[1], as_double(dv[0])), 2e-6);
    // The offset matters: top-left gives other gradients.
    p.causal_offset = 0;
    std::vector<float> dq_top(dq[0].size()), dk_top(dk[0].size()), dv_top(dv[0].size());
    ASSERT_EQ(cpu_math_attention_backward(p, {dout.data(), dq_top.data(), dk_top.data(),
                                              dv_top.data()}),
              "");
    EXPECT_GT(relative_error(dq_top, as_double(dq[0])), 1e-2);
  }
}

TEST(CpuKernelBackward, RefusesWhatItCannotRun) {
  const Case c = spec("dtype=fp32,b=1,hq=4,hkv=2,l=16,d=16");
  const HostInputs in = make_inputs(c);
  std::vector<float> o(size_t(c.q_elements())), g(o.size()), dk(size_t(c.kv_elements()));
  AttnParams p = params_for(c);
  p.q = in.q.data();
  p.k = in.k.data();
  p.v = in.v.data();
  const AttnGrads grads{g.data(), o.data(), dk.data(), dk.data()};
  EXPECT_NE(cpu_flash_attention_backward(p, grads), ""); // no forward output and lse
  p.o = o.data();
  EXPECT_NE(cpu_flash_attention_backward(p, grads), ""); // still no lse
  p.hq = 3;
  EXPECT_NE(cpu_math_attention_backward(p, grads), "");
  p.hq = 4;
  p.elem = ElemType::f16;
  EXPECT_NE(cpu_math_attention_backward(p, grads), "");
  auto bad = run_cpu_backward(RefKernel::math, c, in, std::vector<float>(3));
  EXPECT_FALSE(bad);
}

} // namespace
} // namespace sdpa_doctor::kernels

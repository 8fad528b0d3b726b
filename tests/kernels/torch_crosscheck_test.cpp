// The same cases through PyTorch's math SDPA on the CPU (float64, inputs rebuilt in Python from
// the documented generator): checks the oracle, the input generator and our kernels against a
// witness we did not write. Skips when the configured Python has no torch.
#include "kernels/kernels.hpp"
#include "cases/tolerance.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

namespace sdpa_doctor::kernels {
namespace {

std::vector<double> read_f64(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<double> out(bytes.size() / sizeof(double));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(double));
  return out;
}

void write_f64(const std::string& path, const std::vector<double>& values) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(values.data()),
          std::streamsize(values.size() * sizeof(double)));
}

// max |ours - theirs| / max |theirs|: the error relative to the gradient's own scale.
double relative_error(const std::vector<double>& ours, const std::vector<double>& theirs) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < theirs.size(); ++i) {
    diff = std::max(diff, std::abs(ours[i] - theirs[i]));
    scale = std::max(scale, std::abs(theirs[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// The shapes both cross-checks run: GQA, causal with Lq != Lkv, bool and additive masks, causal
// with a mask, odd head dims and lengths, one query; tiny causal queries against longer odd keys
// (top-left: query i sees keys 0..i) and head dims 384 and 512; with `more`, a small bool-masked
// case too.
std::vector<Case> crosscheck_cases(bool more) {
  std::vector<std::string> specs = {
      "dtype=fp32,b=1,h=2,l=37,d=64", "dtype=fp16,b=2,hq=4,hkv=2,lq=33,lkv=70,d=40,causal,seed=3",
      "dtype=bf16,b=1,h=3,lq=1,lkv=129,d=128,mask=bool",
      "dtype=fp32,b=1,hq=8,hkv=1,lq=65,lkv=17,d=72,causal",
      "dtype=fp16,b=1,h=2,lq=80,lkv=80,d=64,causal,mask=additive,seed=7",
      "dtype=bf16,b=2,hq=6,hkv=3,lq=20,lkv=200,d=96,mask=additive,seed=2",
      "dtype=fp32,b=1,h=2,lq=50,lkv=30,d=16,causal,mask=bool,seed=5",
      "dtype=fp16,b=1,h=1,lq=1,lkv=1,d=8",
      "dtype=fp16,b=1,h=2,lq=1,lkv=77,d=64,causal,seed=4",
      "dtype=bf16,b=1,hq=4,hkv=2,lq=2,lkv=13,d=48,causal,seed=6",
      "dtype=fp32,b=1,h=2,lq=16,lkv=45,d=80,causal,seed=8",
      "dtype=fp16,b=1,h=1,lq=8,lkv=23,d=384,causal,seed=9",
      "dtype=fp32,b=1,h=1,lq=5,lkv=21,d=512,seed=10"};
  if (more) specs.push_back("dtype=bf16,b=1,h=2,lq=16,lkv=16,d=8,mask=bool,seed=11");
  std::vector<Case> cases;
  for (const std::string& spec : specs) {
    auto c = parse_case_spec(spec);
    EXPECT_TRUE(c) << spec;
    if (c) cases.push_back(*c);
  }
  return cases;
}

std::string torch_spec(const Case& c) {
  return std::string(to_string(c.dtype)) + "," + std::to_string(c.b) + "," +
         std::to_string(c.hq) + "," + std::to_string(c.hkv) + "," + std::to_string(c.lq) + "," +
         std::to_string(c.lkv) + "," + std::to_string(c.d) + "," + (c.causal ? "1" : "0") + "," +
         std::string(to_string(c.mask)) + "," + std::to_string(c.seed);
}

TEST(TorchCrossCheck, OracleAndKernelsAgreeWithTorchMath) {
  const std::string python = SDPA_DOCTOR_TEST_PYTHON;
  if (python.empty()) GTEST_SKIP() << "no Python configured (SDPA_DOCTOR_PYTHON)";
  const std::vector<Case> cases = crosscheck_cases(false);
  sdpa_test::TempDir dir;
  std::vector<std::string> argv = {python, sdpa_test::source_path("tests/kernels/torch_math_reference.py"),
                                   dir.path()};
  for (const Case& c : cases) argv.push_back(torch_spec(c));
  const sdpa_test::RunResult r = sdpa_test::run_binary(argv, {{}, {}, {}, 300});
  if (r.exit_code == 3) GTEST_SKIP() << "no torch in " << python << ": " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;

  for (size_t n = 0; n < cases.size(); ++n) {
    const Case& c = cases[n];
    SCOPED_TRACE(c.id());
    const std::vector<double> torch_out = read_f64(dir.file(std::to_string(n) + ".f64"));
    ASSERT_EQ(torch_out.size(), size_t(c.q_elements()));
    const HostInputs in = make_inputs(c);
    const std::vector<double> oracle = oracle_attention(c, in);
    double oracle_diff = 0;
    for (size_t i = 0; i < oracle.size(); ++i)
      oracle_diff = std::max(oracle_diff, std::abs(oracle[i] - torch_out[i]));
    EXPECT_LT(oracle_diff, 1e-12) << "oracle vs torch float64 math";
    const Tolerance tol = cases::default_tolerance(c.dtype);
    for (RefKernel kernel : {RefKernel::math, RefKernel::flash}) {
      auto run = run_cpu(kernel, c, in, 0, 1);
      ASSERT_TRUE(run) << run.error().message;
      int64_t outside = 0;
      for (size_t i = 0; i < torch_out.size(); ++i)
        if (!(std::abs(double(run->out[i]) - torch_out[i]) <=
              tol.atol + tol.rtol * std::abs(torch_out[i])))
          ++outside;
      EXPECT_EQ(outside, 0) << to_string(kernel);
    }
  }
}

// The oracle's gradients (blocked and row-wise) against torch's float64 autograd through its math
// SDPA, on the grid of shapes above; and ref-math's and ref-flash's CPU backward against the same
// within their dtype's bound. The upstream gradient is seeded, written here and read there, so
// both differentiate the same function at the same point.
TEST(TorchCrossCheck, OracleGradientsAgreeWithTorchAutogradInFloat64) {
  const std::string python = SDPA_DOCTOR_TEST_PYTHON;
  if (python.empty()) GTEST_SKIP() << "no Python configured (SDPA_DOCTOR_PYTHON)";
  const std::vector<Case> cases = crosscheck_cases(true);
  sdpa_test::TempDir dir;
  std::vector<std::string> argv = {python, sdpa_test::source_path("tests/kernels/torch_math_reference.py"),
                                   "--grad", dir.path()};
  std::vector<std::vector<double>> douts;
  for (size_t n = 0; n < cases.size(); ++n) {
    // A seeded upstream gradient in [-1, 1): each element its own, so no symmetry hides an error;
    // in the case dtype, as a backend receives it (the kernels round it to that).
    std::vector<double> dout(size_t(cases[n].q_elements()));
    uint64_t x = 0x9E3779B97F4A7C15ull * (n + 1);
    for (double& g : dout) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      g = round_to_dtype(cases[n].dtype, float(double(x >> 11) * 0x1p-52 - 1.0));
    }
    write_f64(dir.file(std::to_string(n) + ".dout.f64"), dout);
    douts.push_back(std::move(dout));
    argv.push_back(torch_spec(cases[n]));
  }
  const sdpa_test::RunResult r = sdpa_test::run_binary(argv, {{}, {}, {}, 300});
  if (r.exit_code == 3) GTEST_SKIP() << "no torch in " << python << ": " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;

  for (size_t n = 0; n < cases.size(); ++n) {
    const Case& c = cases[n];
    SCOPED_TRACE(c.id());
    const HostInputs in = make_inputs(c);
    const OracleGradients blocked = oracle_attention_backward(c, in, douts[n]);
    const OracleGradients row_wise = oracle_attention_backward_reference(c, in, douts[n]);
    const std::vector<float> dout_f(douts[n].begin(), douts[n].end());
    auto math = run_cpu_backward(RefKernel::math, c, in, dout_f);
    auto flash = run_cpu_backward(RefKernel::flash, c, in, dout_f);
    ASSERT_TRUE(math && flash);
    const std::string prefix = dir.file(std::to_string(n));
    // The kernels' bound, relative to the gradient's largest |value|: backward_test.cpp says why.
    const double kernel_tol = c.dtype == DType::f32 ? 5e-6 : c.dtype == DType::f16 ? 4e-3 : 1.6e-2;
    auto as_double = [](const std::vector<float>& v) {
      return std::vector<double>(v.begin(), v.end());
    };
    const std::pair<const char*, std::vector<double> OracleGradients::*> grads[] = {
        {"dq", &OracleGradients::dq}, {"dk", &OracleGradients::dk}, {"dv", &OracleGradients::dv}};
    const std::vector<float> KernelGradients::*kernel_grads[] = {
        &KernelGradients::dq, &KernelGradients::dk, &KernelGradients::dv};
    for (size_t t = 0; t < 3; ++t) {
      const char* name = grads[t].first;
      const std::vector<double> theirs = read_f64(prefix + "." + name + ".f64");
      ASSERT_EQ(theirs.size(), (blocked.*grads[t].second).size()) << name;
      EXPECT_LE(relative_error(blocked.*grads[t].second, theirs), 1e-12) << name;
      EXPECT_LE(relative_error(row_wise.*grads[t].second, theirs), 1e-12) << name << " row-wise";
      EXPECT_LE(relative_error(as_double((*math).*kernel_grads[t]), theirs), kernel_tol)
          << name << " ref-math";
      EXPECT_LE(relative_error(as_double((*flash).*kernel_grads[t]), theirs), kernel_tol)
          << name << " ref-flash";
    }
  }
}

} // namespace
} // namespace sdpa_doctor::kernels

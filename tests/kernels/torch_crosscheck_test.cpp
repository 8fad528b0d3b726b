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

std::string torch_spec(const Case& c) {
  return std::string(to_string(c.dtype)) + "," + std::to_string(c.b) + "," +
         std::to_string(c.hq) + "," + std::to_string(c.hkv) + "," + std::to_string(c.lq) + "," +
         std::to_string(c.lkv) + "," + std::to_string(c.d) + "," + (c.causal ? "1" : "0") + "," +
         std::string(to_string(c.mask)) + "," + std::to_string(c.seed);
}

TEST(TorchCrossCheck, OracleAndKernelsAgreeWithTorchMath) {
  const std::string python = SDPA_DOCTOR_TEST_PYTHON;
  if (python.empty()) GTEST_SKIP() << "no Python configured (SDPA_DOCTOR_PYTHON)";
  std::vector<Case> cases;
  for (const char* spec :
       {"dtype=fp32,b=1,h=2,l=37,d=64", "dtype=fp16,b=2,hq=4,hkv=2,lq=33,lkv=70,d=40,causal,seed=3",
        "dtype=bf16,b=1,h=3,lq=1,lkv=129,d=128,mask=bool", "dtype=fp32,b=1,hq=8,hkv=1,lq=65,lkv=17,d=72,causal",
        "dtype=fp16,b=1,h=2,lq=80,lkv=80,d=64,causal,mask=additive,seed=7",
        "dtype=bf16,b=2,hq=6,hkv=3,lq=20,lkv=200,d=96,mask=additive,seed=2",
        "dtype=fp32,b=1,h=2,lq=50,lkv=30,d=16,causal,mask=bool,seed=5",
        "dtype=fp16,b=1,h=1,lq=1,lkv=1,d=8"}) {
    auto c = parse_case_spec(spec);
    ASSERT_TRUE(c) << spec;
    cases.push_back(*c);
  }
  sdpa_test::TempDir dir;
  std::vector<std::string> argv = {python, sdpa_test::source_path("tests/kernels/torch_math_reference.py"),
                                   dir.path()};
  for (const Case& c : cases) argv.push_back(torch_spec(c));
  const sdpa_test::RunResult r = sdpa_test::run_binary(argv);
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

} // namespace
} // namespace sdpa_doctor::kernels

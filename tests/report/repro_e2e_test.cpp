// The repro script runs with a real Python + torch (CPU): its inputs match core's generator bit
// for bit, math on the CPU passes, and a tolerance nobody can meet makes it fail. Skipped when
// the configured Python has no torch.
#include "core/inputs.hpp"
#include "report/report.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>


using namespace sdpa_doctor;

namespace {

const std::string k_python = SDPA_DOCTOR_TEST_PYTHON;

bool have_torch() {
  static const bool ok = [] {
    if (k_python.empty()) return false;
    auto r = sdpa_test::run_binary({k_python, "-c", "import torch"});
    return r.exit_code == 0;
  }();
  return ok;
}

CaseResult cpu_case(const std::string& spec, const std::string& variant = "math") {
  CaseResult r;
  r.kase = parse_case_spec(spec).value();
  r.case_id = r.kase.id();
  r.device = "cpu";
  r.probe = Probe::python;
  r.variant = variant;
  r.status = Status::pass;
  return r;
}

sdpa_test::RunResult run_script(const std::string& script, std::vector<std::string> args = {}) {
  sdpa_test::TempDir dir;
  const std::string path = dir.file("repro.py");
  sdpa_test::write_file(path, script);
  std::vector<std::string> argv = {k_python, path};
  argv.insert(argv.end(), args.begin(), args.end());
  return sdpa_test::run_binary(argv, {{{"PYTHONWARNINGS", "ignore"}}, {}, "", 300});
}

double sum(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x);
  return s;
}

const char* k_specs[] = {
    "dtype=fp32,b=1,h=2,l=16,d=8",
    "dtype=bf16,b=2,hq=4,hkv=2,lq=5,lkv=33,d=16,causal",
    "dtype=fp16,b=1,h=2,l=24,d=8,mask=bool,seed=7",
    "dtype=fp32,b=1,h=2,lq=9,lkv=17,d=32,mask=additive,causal,layout=transposed,seed=12345",
    // Every dimension of a case's tensors: each layout, the mask's dtype, shape and storage.
    "dtype=fp16,b=2,hq=4,hkv=2,lq=9,lkv=33,d=16,mask=additive,mask_dtype=fp32,mask_shape=bhqk,"
    "mask_layout=strided,q_layout=offset,k_layout=strided,v_layout=transposed",
    "dtype=fp32,b=2,h=2,lq=24,lkv=20,d=16,window=5,mask_shape=11qk,mask_layout=offset,large",
    "dtype=fp32,b=2,h=2,lq=6,lkv=10,d=8,mask=bool,mask_shape=qk,layout=strided",
    // Fully masked rows: the same mask, judged by the rule of the torch that runs the script.
    "dtype=bf16,b=2,h=2,lq=9,lkv=13,d=8,mask=bool,masked_rows,seed=3",
    "dtype=fp32,b=1,h=2,l=12,d=8,mask=additive,mask_shape=11qk,masked_rows,backward",
    // Causal aligned bottom-right: decoding under GQA, and a chunk's backward.
    "dtype=bf16,b=1,hq=8,hkv=2,lq=1,lkv=129,d=64,causal=bottom_right",
    "dtype=fp16,b=1,h=2,lq=16,lkv=80,d=16,causal=bottom_right,backward",
};

} // namespace

TEST(Repro, InputsMatchCoreBitForBit) {
  if (!have_torch()) GTEST_SKIP() << "no torch in " << k_python;
  for (const char* spec : k_specs) {
    const CaseResult r = cpu_case(spec);
    const HostInputs in = make_inputs(r.kase);
    auto result = run_script(report::render_repro(r).value(), {"--checksum"});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    std::map<std::string, double> got;
    size_t start = 0;
    while (start < result.out.size()) {
      size_t nl = result.out.find('\n', start);
      if (nl == std::string::npos) nl = result.out.size();
      const std::string line = result.out.substr(start, nl - start);
      const size_t sp = line.find(' ');
      if (sp != std::string::npos) got[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
      start = nl + 1;
    }
    EXPECT_EQ(got["q"], sum(in.q)) << spec;
    EXPECT_EQ(got["k"], sum(in.k)) << spec;
    EXPECT_EQ(got["v"], sum(in.v)) << spec;
    if (r.kase.mask != Mask::none) {
      EXPECT_EQ(got["mask"], sum(in.mask)) << spec;
    } else {
      EXPECT_EQ(got.count("mask"), 0u);
    }
  }
}

TEST(Repro, CarriesEveryDimensionOfTheCase) {
  const std::string script = report::render_repro(cpu_case(k_specs[4])).value();
  for (const char* want : {R"(q_layout="offset")", R"(k_layout="strided")",
                           R"(v_layout="transposed")", R"(mask_dtype="fp32")",
                           R"(mask_shape="bhqk")", R"(mask_layout="strided")", "window=0",
                           "large=False"})
    EXPECT_NE(script.find(want), std::string::npos) << want;
  const std::string window = report::render_repro(cpu_case(k_specs[5])).value();
  for (const char* want : {"window=5", "large=True", R"(mask_shape="11qk")",
                           R"(mask_dtype="fp32")", R"(mask_layout="offset")"})
    EXPECT_NE(window.find(want), std::string::npos) << want;
}

// Under torch < 2.5 (pretended here: the script reads the version from torch.__version__) the
// reference has NaN in fully masked rows, and this torch's zeros there are named as such.
TEST(Repro, AMaskedRowsCaseIsJudgedByTheRuleOfItsTorch) {
  if (!have_torch()) GTEST_SKIP() << "no torch in " << k_python;
  std::string script =
      report::render_repro(cpu_case("dtype=fp32,b=1,h=2,l=12,d=8,mask=bool,masked_rows")).value();
  EXPECT_NE(script.find("masked_rows=True"), std::string::npos);
  const std::string version = "torch.__version__.split";
  const size_t at = script.find(version);
  ASSERT_NE(at, std::string::npos);
  script.replace(at, version.size(), "\"2.4.1\".split");
  auto result = run_script(script);
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("MISMATCH: 48 of 48 values in fully masked rows are finite where "
                            "torch < 2.5 returns NaN"),
            std::string::npos)
      << result.out;
}

// A bottom-right case's script calls SDPA as models do (a causal_lower_right bias) and judges it
// against a reference aligned the same way: called top-left instead, it is a mismatch.
TEST(Repro, ABottomRightCaseCallsCausalLowerRightAndItsReferenceIsAlignedSo) {
  if (!have_torch()) GTEST_SKIP() << "no torch in " << k_python;
  std::string script = report::render_repro(
      cpu_case("dtype=fp32,b=1,hq=4,hkv=2,lq=8,lkv=40,d=16,causal=bottom_right")).value();
  EXPECT_NE(script.find("causal_bottom_right=True"), std::string::npos);
  const std::string call = "causal_lower_right(c[\"lq\"], c[\"lkv\"]), False";
  const size_t at = script.find(call);
  ASSERT_NE(at, std::string::npos) << script;
  auto pass = run_script(script);
  EXPECT_EQ(pass.exit_code, 0) << pass.out << pass.err;
  script.replace(at, call.size(), "None, True");
  auto top_left = run_script(script);
  EXPECT_EQ(top_left.exit_code, 1) << top_left.out << top_left.err;
  EXPECT_NE(top_left.out.find("MISMATCH"), std::string::npos) << top_left.out;
}

TEST(Repro, MathOnTheCpuPasses) {
  if (!have_torch()) GTEST_SKIP() << "no torch in " << k_python;
  for (const char* spec : k_specs) {
    auto result = run_script(report::render_repro(cpu_case(spec)).value());
    EXPECT_EQ(result.exit_code, 0) << spec << "\n" << result.out << result.err;
    EXPECT_NE(result.out.find("PASS"), std::string::npos) << result.out;
  }
}

TEST(Repro, DefaultDispatchOnTheCpuPasses) {
  if (!have_torch()) GTEST_SKIP() << "no torch in " << k_python;
  auto result = run_script(report::render_repro(cpu_case("dtype=fp32,b=1,h=4,l=32,d=16", "default")).value());
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
}

TEST(Repro, ImpossibleToleranceIsAMismatch) {
  if (!have_torch()) GTEST_SKIP() << "no torch in " << k_python;
  CaseResult r = cpu_case("dtype=fp16,b=1,h=2,l=32,d=16");
  r.tolerance = {1e-30, 1e-30};
  auto result = run_script(report::render_repro(r).value());
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("MISMATCH"), std::string::npos) << result.out;
}

// A backward case's script runs the backward for the same upstream gradient and judges each
// gradient; one that no tolerance can hold is named.
TEST(Repro, ABackwardCaseRunsItsBackwardAndJudgesEachGradient) {
  if (!have_torch()) GTEST_SKIP() << "no torch in " << k_python;
  for (const char* variant : {"math", "flash"}) {
    auto pass = run_script(report::render_repro(
        cpu_case("dtype=bf16,b=1,hq=4,hkv=2,l=24,d=16,causal,backward", variant)).value());
    EXPECT_EQ(pass.exit_code, 0) << variant << "\n" << pass.out << pass.err;
    for (const char* name : {"(dq)", "(dk)", "(dv)"})
      EXPECT_NE(pass.out.find(std::string("PASS in backward ") + name), std::string::npos) << pass.out;
  }
  CaseResult r = cpu_case("dtype=fp32,b=1,h=2,l=16,d=8,backward");
  r.tolerance = {1e-30, 1e-30};
  auto fail = run_script(report::render_repro(r).value());
  EXPECT_EQ(fail.exit_code, 1) << fail.out << fail.err;
  EXPECT_NE(fail.out.find("MISMATCH in backward (dq)"), std::string::npos) << fail.out;
}

TEST(Repro, CarriesTheVariantsFlagsAndRefusesToRunWithoutItsGpu) {
  CaseResult r = cpu_case("dtype=fp16,b=1,h=2,l=32,d=16", "flash[ck]");
  r.device = "cuda:0";
  r.status = Status::crash;
  r.process_end = ProcessEnd{std::nullopt, 6, "SIGABRT", true, false};
  const std::string script = report::render_repro(r).value();
  EXPECT_NE(script.find("ENVIRONMENT = {\"TORCH_ROCM_FA_PREFER_CK\": \"1\"}"), std::string::npos);
  EXPECT_NE(script.find("FA_LIBRARY = \"ck\""), std::string::npos);
  EXPECT_NE(script.find("BACKEND = \"flash\""), std::string::npos);
  EXPECT_NE(script.find("verdict=\"crash (signal SIGABRT (core dumped))\""), std::string::npos);
  if (!have_torch()) GTEST_SKIP() << "no torch in " << k_python;
  auto result = run_script(script);
  if (result.out.find("torch sees none") == std::string::npos)
    GTEST_SKIP() << "a GPU is visible here; not running a crashing case on it";
  EXPECT_EQ(result.exit_code, 2) << result.out;
}

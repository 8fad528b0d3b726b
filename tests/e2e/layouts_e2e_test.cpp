// Per-tensor layouts and mask dtypes end to end: the fault switch plants a mismatch only where V
// alone is not contiguous, and NaN only where an additive mask's dtype is not q's; the real binary
// runs real torch on the CPU (the LibTorch and Python probes) and blames exactly those cells, and
// its shrinking names the dimension. Without a fault, every new dimension (layouts, mask dtypes,
// shapes and strides, a sliding window, large values) passes against the oracle in every probe.
// The conditions themselves are checked here in the C++ parser, and in the Python probe's by
// tests/python/test_faults.py.
#include "core/case.hpp"
#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"
#include "workers/planted_fault.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

using nlohmann::json;

namespace {

constexpr const char* k_v_alone = "when=v_layout,when=q_layout=0,when=k_layout=0";

sdpa_doctor::Case parsed(const std::string& spec) {
  auto c = sdpa_doctor::parse_case_spec(spec);
  EXPECT_TRUE(c) << spec << ": " << (c ? "" : c.error().message);
  return c ? *c : sdpa_doctor::Case{};
}

std::string torch_probes() { return sdpa_test::runnable_torch_probes(); }

size_t probe_count(const std::string& probes) {
  return probes.find(',') == std::string::npos ? 1 : 2;
}

using Checked = sdpa_test::CheckedRun;

Checked check(const std::vector<std::string>& specs, const std::string& probes,
              const std::string& variants, const std::string& fault) {
  sdpa_test::TempDir dir;
  return sdpa_test::check_cases(specs, probes, variants, fault, dir);
}

// Every result of the report is `status` where its case id is planted, else pass.
void expect_blamed_only(const Checked& c, const std::set<std::string>& planted,
                        const std::string& status, size_t cases, const std::string& probes) {
  EXPECT_EQ(c.run.exit_code, 1) << c.run.out << c.run.err;
  ASSERT_EQ(c.report.at("results").size(), cases * probe_count(probes))
      << c.report.at("results").dump(1);
  for (const json& res : c.report.at("results"))
    EXPECT_EQ(res.at("status"), planted.count(res.at("case_id")) ? status : "pass") << res;
}

TEST(LayoutsFaultSwitch, SelectsVAloneNonContiguousAndAMaskDtypeOfItsOwn) {
  using sdpa_doctor::workers::parse_planted_fault;
  auto v_alone = parse_planted_fault(std::string("variant=math,") + k_v_alone + ",action=perturb");
  ASSERT_TRUE(v_alone) << v_alone.error().message;
  const std::string base = "dtype=fp32,h=2,l=16,d=16";
  for (const char* layout : {"v_layout=transposed", "v_layout=strided", "v_layout=offset"})
    EXPECT_TRUE(v_alone->matches("math", "x", parsed(base + "," + layout))) << layout;
  for (const char* layout : {"layout=contiguous", "layout=transposed", "layout=strided",
                             "q_layout=transposed", "k_layout=offset",
                             "k_layout=strided,v_layout=strided"})
    EXPECT_FALSE(v_alone->matches("math", "x", parsed(base + "," + layout))) << layout;
  auto own_dtype = parse_planted_fault("when=mask_dtype,action=nan");
  ASSERT_TRUE(own_dtype) << own_dtype.error().message;
  EXPECT_TRUE(own_dtype->matches("math", "x",
                                 parsed("dtype=bf16,l=8,d=8,mask=additive,mask_dtype=fp32")));
  for (const char* same : {"dtype=bf16,l=8,d=8,mask=additive", "dtype=fp32,l=8,d=8,mask=additive",
                           "dtype=fp32,l=8,d=8,mask=additive,mask_dtype=fp32",
                           "dtype=bf16,l=8,d=8,mask=bool", "dtype=bf16,l=8,d=8"})
    EXPECT_FALSE(own_dtype->matches("math", "x", parsed(same))) << same;
  auto shape = parse_planted_fault("when=mask_shape=2,when=window>=4,when=large,action=nan");
  ASSERT_TRUE(shape) << shape.error().message;
  EXPECT_FALSE(parse_planted_fault("when=v_layout=x,action=nan"));
  EXPECT_FALSE(parse_planted_fault("when=w_layout,action=nan"));
}

TEST(LayoutsCheck, AMismatchWhereVAloneIsNonContiguousIsFoundThereAndOnlyThere) {
  const std::string probes = torch_probes();
  if (probes.empty()) GTEST_SKIP() << "neither torch probe can run here";
  const std::string base = "dtype=fp32,b=1,h=2,l=24,d=16";
  const std::vector<std::string> layouts = {
      "layout=contiguous",   "v_layout=transposed", "v_layout=strided",
      "v_layout=offset",     "q_layout=transposed", "k_layout=strided,v_layout=strided",
      "layout=transposed",   "q_layout=offset,k_layout=offset"};
  std::vector<std::string> specs;
  std::set<std::string> planted;
  for (const std::string& l : layouts) {
    specs.push_back(base + "," + l);
    if (l.rfind("v_layout", 0) == 0) planted.insert(parsed(specs.back()).id());
  }
  ASSERT_EQ(planted.size(), 3u);
  const Checked c =
      check(specs, probes, "math", std::string("variant=math,") + k_v_alone + ",action=perturb");
  expect_blamed_only(c, planted, "mismatch", layouts.size(), probes);
  // The JSON says which tensor is which.
  for (const json& res : c.report.at("results"))
    if (res.at("case_id") == parsed(base + ",v_layout=strided").id()) {
      EXPECT_EQ(res.at("case").at("q_layout"), "contiguous") << res;
      EXPECT_EQ(res.at("case").at("v_layout"), "strided") << res;
    }
  ASSERT_EQ(c.report.at("shrinks").size(), probe_count(probes)) << c.report.dump(1);
  for (const json& s : c.report.at("shrinks")) {
    EXPECT_EQ(s.at("verdict"), "boundary") << s;
    ASSERT_EQ(s.at("conditions").size(), 1u) << s;
    EXPECT_EQ(s.at("conditions").at(0).at("axis"), "v_layout") << s;
  }
}

TEST(LayoutsCheck, NaNWhereTheMaskDtypeIsNotQsIsFoundThereAndOnlyThere) {
  const std::string probes = torch_probes();
  if (probes.empty()) GTEST_SKIP() << "neither torch probe can run here";
  // torch takes a float mask with any q, and otherwise a mask in q's dtype.
  const std::vector<std::string> specs = {
      "dtype=fp16,h=2,l=24,d=16,mask=additive",
      "dtype=fp16,h=2,l=24,d=16,mask=additive,mask_dtype=fp32",
      "dtype=bf16,h=2,l=24,d=16,mask=additive,mask_dtype=fp32,mask_shape=11qk",
      "dtype=bf16,h=2,l=24,d=16,mask=additive",
      "dtype=fp32,h=2,l=24,d=16,mask=additive,mask_dtype=fp32",
      "dtype=bf16,h=2,l=24,d=16,mask=bool"};
  std::set<std::string> planted = {parsed(specs[1]).id(), parsed(specs[2]).id()};
  const Checked c = check(specs, probes, "math", "variant=math,when=mask_dtype,action=nan");
  expect_blamed_only(c, planted, "nonfinite", specs.size(), probes);
  ASSERT_EQ(c.report.at("shrinks").size(), probe_count(probes)) << c.report.dump(1);
  for (const json& s : c.report.at("shrinks")) {
    std::set<std::string> axes;
    for (const json& w : s.at("conditions")) axes.insert(w.at("axis"));
    EXPECT_TRUE(axes.count("mask_dtype")) << s;
  }
}

TEST(LayoutsCheck, EveryNewDimensionPassesInEveryProbe) {
  std::string probes = torch_probes();
  probes += probes.empty() ? "reference" : ",reference";
  const std::vector<std::string> specs = {
      "dtype=fp32,b=2,hq=4,hkv=2,lq=9,lkv=33,d=16,q_layout=offset,k_layout=strided,"
      "v_layout=transposed",
      "dtype=fp16,b=2,h=2,l=24,d=16,layout=strided,causal",
      "dtype=bf16,b=2,hq=4,hkv=2,lq=12,lkv=40,d=16,mask=additive,mask_dtype=fp32,"
      "mask_shape=bhqk,mask_layout=strided",
      "dtype=fp16,b=2,h=2,lq=12,lkv=20,d=16,mask=bool,mask_shape=qk,mask_layout=offset",
      "dtype=fp32,b=2,h=2,lq=40,lkv=24,d=16,window=6,mask_shape=11qk",
      "dtype=bf16,b=1,h=2,l=32,d=64,large",
      "dtype=fp16,b=1,h=2,l=32,d=64,large,v_layout=offset"};
  const Checked c = check(specs, probes, "math,ref-math", "");
  EXPECT_EQ(c.run.exit_code, 0) << c.run.out << c.run.err;
  for (const json& res : c.report.at("results")) EXPECT_EQ(res.at("status"), "pass") << res;
  EXPECT_GE(c.report.at("results").size(), specs.size()) << c.report.dump(1);
}

} // namespace

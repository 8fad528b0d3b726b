// Dropout end to end, through the real binary and real torch on the CPU (the LibTorch and Python
// probes): a dropout case passes the statistical check in every dtype where torch's math backend
// runs it (and our kernels, a deterministic witness, decline it); a corruption planted only in
// dropout cases is blamed there only, named by the property it breaks; the `dropout` condition of
// the fault switch (the probe's side: tests/python/test_faults.py); the repro script of a dropout
// case judges it the same way.
#include "core/case.hpp"
#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"
#include "workers/planted_fault.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

using nlohmann::json;
using sdpa_test::run_binary;

namespace {

sdpa_doctor::Case parsed(const std::string& spec) {
  auto c = sdpa_doctor::parse_case_spec(spec);
  EXPECT_TRUE(c) << spec << ": " << (c ? "" : c.error().message);
  return c ? *c : sdpa_doctor::Case{};
}

using Checked = sdpa_test::CheckedRun;

Checked check(const std::vector<std::string>& specs, const std::string& probes,
              const std::string& variants, const std::string& fault,
              const sdpa_test::TempDir& dir) {
  return sdpa_test::check_cases(specs, probes, variants, fault, dir);
}

const std::vector<std::string> k_specs = {
    "dtype=fp32,b=1,h=4,lq=48,lkv=64,d=64,dropout=0.25",
    "dtype=bf16,b=2,h=2,lq=40,lkv=32,d=32,dropout=0.1,causal",
    "dtype=fp16,b=1,hq=4,hkv=2,lq=33,lkv=64,d=64,dropout=0.5,seed=3",
    "dtype=fp32,b=1,h=4,lq=48,lkv=64,d=64"}; // the same shape without dropout

TEST(DropoutFaultSwitch, TheConditionIsDropoutPInHundredths) {
  using sdpa_doctor::workers::parse_planted_fault;
  auto any = parse_planted_fault("when=dropout,action=perturb");
  ASSERT_TRUE(any) << any.error().message;
  auto high = parse_planted_fault("when=dropout>=30,action=perturb");
  ASSERT_TRUE(high) << high.error().message;
  EXPECT_TRUE(any->matches("math", "x", parsed(k_specs[1])));
  EXPECT_FALSE(any->matches("math", "x", parsed(k_specs[3])));
  EXPECT_FALSE(high->matches("math", "x", parsed(k_specs[0])));
  EXPECT_TRUE(high->matches("math", "x", parsed(k_specs[2])));
  // The probe's side: tests/python/test_faults.py.
}

TEST(DropoutCheck, TorchsDropoutPassesTheStatisticalCheckAndOurKernelsDecline) {
  std::string probes = sdpa_test::runnable_torch_probes();
  if (probes.empty()) GTEST_SKIP() << "neither torch probe can run here";
  sdpa_test::TempDir dir;
  const Checked c = check(k_specs, probes + ",reference", "math,default,ref-math", "", dir);
  EXPECT_EQ(c.run.exit_code, 0) << c.run.out << c.run.err;
  size_t torch_dropout_passes = 0;
  for (const json& res : c.report.at("results")) {
    const bool dropout = res.at("case").contains("dropout");
    if (res.at("probe") == "reference") {
      EXPECT_EQ(res.at("status"), dropout ? "unsupported" : "pass") << res;
      continue;
    }
    EXPECT_EQ(res.at("status"), "pass") << res;
    torch_dropout_passes += dropout;
  }
  EXPECT_EQ(torch_dropout_passes, 3 * 2 * (probes.find(',') == std::string::npos ? 1 : 2));
}

TEST(DropoutCheck, ACorruptionOnlyInDropoutCasesIsBlamedThereByTheBrokenProperty) {
  const std::string probes = sdpa_test::runnable_torch_probes();
  if (probes.empty()) GTEST_SKIP() << "neither torch probe can run here";
  sdpa_test::TempDir dir;
  // zeros: every output element 0, so the dropped fraction is 100% (and a kernel that never ran).
  const Checked c = check(k_specs, probes, "math", "variant=math,when=dropout,action=zeros", dir);
  EXPECT_EQ(c.run.exit_code, 1) << c.run.out << c.run.err;
  std::set<std::string> failed;
  for (const json& res : c.report.at("results")) {
    const std::string id = res.at("case_id");
    if (!res.at("case").contains("dropout")) {
      EXPECT_EQ(res.at("status"), "pass") << res;
      continue;
    }
    EXPECT_EQ(res.at("status"), "mismatch") << res;
    EXPECT_NE(res.at("reason").get<std::string>().find("dropout: 100.00% of "), std::string::npos)
        << res;
    failed.insert(id);
  }
  EXPECT_EQ(failed.size(), 3u);
  // The shrinking keeps dropout: without it the case passes.
  ASSERT_FALSE(c.report.at("shrinks").empty()) << c.report.dump(1);
  for (const json& s : c.report.at("shrinks")) {
    std::set<std::string> axes;
    for (const json& w : s.at("conditions")) axes.insert(w.at("axis"));
    EXPECT_TRUE(axes.count("dropout")) << s;
  }
  // The repro script of a failed dropout case runs it again the same way, and passes: the fault
  // lives in the doctor's worker, not in torch.
  const std::string id = parsed(k_specs[0]).id();
  auto r = run_binary({sdpa_test::doctor(), "repro", id, "--report", dir.file("r.json"),
                       "--original", "--variant", "math", "-o", dir.file("repro.py")});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (!sdpa_test::python_has_torch()) return;
  r = run_binary({sdpa_test::k_test_python, dir.file("repro.py")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS in dropout: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reproducible under its seed"), std::string::npos) << r.out;
}

} // namespace

// Tiny causal queries end to end: the fault switch plants a failure in exactly the causal cases
// with Lq <= 16 (`when=causal,when=lq<=16`), the real binary runs real torch on the CPU, and the
// doctor blames those cells and only those, and its shrinking names the boundary: causal and a
// query of at most 16. The condition syntax itself is checked here in the C++ workers'
// parser, and in the Python probe's by tests/python/test_faults.py.
// The same for causal aligned bottom-right (`when=bottom_right`), in both torch probes.
#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"
#include "workers/planted_fault.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>

using nlohmann::json;
using sdpa_test::run_binary;

namespace {

using sdpa_test::k_torch_worker;
using sdpa_test::python_has_torch;
const std::string& k_python = sdpa_test::k_test_python;

sdpa_doctor::Case causal_case(int64_t lq) {
  sdpa_doctor::Case c;
  c.dtype = sdpa_doctor::DType::f32;
  c.b = 1;
  c.hq = c.hkv = 2;
  c.lq = lq;
  c.lkv = 77;
  c.d = 32;
  c.causal = true;
  return c;
}

TEST(ShapesFaultSwitch, BoundsTakeOrEqual) {
  using sdpa_doctor::workers::parse_planted_fault;
  auto f = parse_planted_fault("variant=math,when=causal,when=lq<=16,action=perturb");
  ASSERT_TRUE(f) << f.error().message;
  for (int64_t lq : {1, 2, 8, 16}) EXPECT_TRUE(f->matches("math", "x", causal_case(lq))) << lq;
  EXPECT_FALSE(f->matches("math", "x", causal_case(17)));
  sdpa_doctor::Case not_causal = causal_case(8);
  not_causal.causal = false;
  EXPECT_FALSE(f->matches("math", "x", not_causal));
  auto at_least = parse_planted_fault("when=d>=384,action=nan");
  ASSERT_TRUE(at_least) << at_least.error().message;
  sdpa_doctor::Case c = causal_case(1);
  c.d = 384;
  EXPECT_TRUE(at_least->matches("flash", "x", c));
  c.d = 383;
  EXPECT_FALSE(at_least->matches("flash", "x", c));
  for (const char* bad : {"when=lq<=,action=nan", "when=lq=<16,action=nan", "when=lq<==16,action=nan",
                          "when=dtype<=fp16,action=nan"})
    EXPECT_FALSE(parse_planted_fault(bad)) << bad;
}

// Causal queries of 1, 2, 8 and 16 fail; 17 and 32, and the same short queries without causal,
// pass. Every key length is odd.
TEST(ShapesCheck, ATinyCausalFailureIsFoundWhereItLivesAndOnlyThere) {
  const std::string probes = sdpa_test::runnable_torch_probes();
  if (probes.empty()) GTEST_SKIP() << "neither torch probe can run here";
  std::vector<std::string> argv = {sdpa_test::doctor(), "check", "--probe", probes, "--variant",
                                   "math", "--python", k_python};
  std::set<std::string> planted;
  for (int64_t lq : {1, 2, 8, 16, 17, 32})
    for (bool causal : {true, false}) {
      if (!causal && lq > 16) continue;
      sdpa_doctor::Case c = causal_case(lq);
      c.causal = causal;
      argv.insert(argv.end(), {"--case", "dtype=fp32,b=1,h=2,lq=" + std::to_string(lq) +
                                             ",lkv=77,d=32" + (causal ? ",causal" : "")});
      if (causal && lq <= 16) planted.insert(c.id());
    }
  sdpa_test::TempDir dir;
  argv.insert(argv.end(), {"--json", dir.file("r.json"), "--run-dir", dir.file("run")});
  sdpa_test::RunOptions o;
  o.set_env = {{"SDPA_DOCTOR_TEST_FAULT", "variant=math,when=causal,when=lq<=16,action=perturb"},
               {"NO_COLOR", "1"}};
  o.timeout_s = 600;
  auto r = run_binary(argv, o);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  const size_t n_probes = probes.find(',') == std::string::npos ? 1 : 2;
  ASSERT_EQ(report.at("results").size(), 10 * n_probes) << report.at("results").dump(1);
  for (const json& res : report.at("results")) {
    const std::string id = res.at("case_id");
    EXPECT_EQ(res.at("status"), planted.count(id) ? "mismatch" : "pass") << res;
  }
  ASSERT_EQ(report.at("shrinks").size(), n_probes) << report.dump(1);
  for (const json& s : report.at("shrinks")) {
    EXPECT_EQ(s.at("verdict"), "boundary") << s;
    ASSERT_EQ(s.at("conditions").size(), 2u) << s;
    EXPECT_EQ(s.at("conditions").at(0).at("axis"), "causal") << s;
    const json& lq = s.at("conditions").at(1);
    EXPECT_EQ(lq.at("axis"), "lq") << s;
    EXPECT_EQ(lq.at("op"), "<=") << s;
    EXPECT_EQ(lq.at("value"), 16) << s;
    EXPECT_TRUE(lq.at("settled").get<bool>()) << s;
    EXPECT_NE(s.at("rule").get<std::string>().find("math on cpu: mismatch only when causal and "
                                                   "query length <= 16"),
              std::string::npos)
        << s;
    EXPECT_LE(s.at("tried").size(), 24u) << s;
  }
  EXPECT_NE(r.out.find("only when causal and query length <= 16"), std::string::npos) << r.out;
}

// Causal aligned bottom-right (decoding, chunked prefill): both torch probes run the same cells,
// their own way (the python probe a causal_lower_right bias, the libtorch probe the bool mask it
// stands for); a failure planted in flash there alone (`when=bottom_right`) is found in exactly
// those cells of each probe, and the shrinking says it needs the alignment.
TEST(ShapesCheck, ABottomRightFailureIsFoundInBothProbesWhereItLivesAndOnlyThere) {
  const std::string probes = sdpa_test::runnable_torch_probes();
  if (probes.empty()) GTEST_SKIP() << "neither torch probe can run here";
  std::vector<std::string> specs;
  std::set<std::string> planted;
  for (const char* shape : {"dtype=bf16,b=1,hq=4,hkv=2,lq=1,lkv=77,d=32",
                            "dtype=fp32,b=1,h=2,lq=16,lkv=80,d=32"})
    for (const char* causal : {",causal=bottom_right", ",causal", ""}) {
      specs.push_back(std::string(shape) + causal);
      const auto c = sdpa_doctor::parse_case_spec(specs.back());
      ASSERT_TRUE(c) << specs.back();
      if (c->causal_bottom_right) planted.insert(c->id());
    }
  ASSERT_EQ(planted.size(), 2u);
  sdpa_test::TempDir dir;
  const auto checked = sdpa_test::check_cases(specs, probes, "math,flash",
                                              "variant=flash,when=bottom_right,action=perturb", dir);
  EXPECT_EQ(checked.run.exit_code, 1) << checked.run.out << checked.run.err;
  const size_t n_probes = probes.find(',') == std::string::npos ? 1 : 2;
  const json& results = checked.report.at("results");
  ASSERT_EQ(results.size(), specs.size() * 2 * n_probes) << results.dump(1);
  std::map<std::string, std::set<std::string>> cells; // probe -> variant/case
  for (const json& res : results) {
    const std::string id = res.at("case_id");
    const bool hit = res.at("variant") == "flash" && planted.count(id);
    EXPECT_EQ(res.at("status"), hit ? "mismatch" : "pass") << res;
    cells[res.at("probe")].insert(res.at("variant").get<std::string>() + "/" + id);
  }
  if (n_probes == 2) {
    EXPECT_EQ(cells["python"], cells["libtorch"]);
  }
  ASSERT_EQ(checked.report.at("shrinks").size(), n_probes) << checked.report.at("shrinks").dump(1);
  for (const json& s : checked.report.at("shrinks")) {
    EXPECT_NE(s.at("rule").get<std::string>().find("only when causal and aligned bottom-right"),
              std::string::npos)
        << s;
    const json& least = s.at("minimal_case").at("case");
    EXPECT_EQ(least.at("causal"), "bottom_right") << s;
    EXPECT_LT(least.at("lq").get<int64_t>(), least.at("lkv").get<int64_t>()) << s;
  }
}

} // namespace

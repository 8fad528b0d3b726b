// Fully masked rows end to end: the fault switch plants NaN only in masked_rows cases (in a fully
// masked row, what a backend that returns NaN for padded rows does); the real binary runs real
// torch on the CPU (the LibTorch and Python probes) and blames exactly those cells, says the
// NaN is in the fully masked rows, and its shrinking names them. Without a fault, masked_rows
// cases pass in every probe, forward and backward, and each result says its oracle gave those
// rows 0 (torch >= 2.5, our own kernels); the Python probe under an older torch measures against
// its own NaN oracle. The condition is checked here in the C++ parser (tests/python: the probe's).
#include "cases/cases.hpp"
#include "core/case.hpp"
#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"
#include "workers/planted_fault.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <sstream>

using nlohmann::json;
using sdpa_test::run_binary;

namespace {

const std::string& k_python = sdpa_test::k_test_python;

std::string id_of(const std::string& spec) {
  auto c = sdpa_doctor::parse_case_spec(spec);
  EXPECT_TRUE(c) << spec << ": " << (c ? "" : c.error().message);
  return c ? c->id() : std::string{};
}

json check(const std::vector<std::string>& specs, const std::string& probes,
           const std::string& variants, const std::string& fault, sdpa_test::RunResult& run) {
  sdpa_test::TempDir dir;
  sdpa_test::CheckedRun c = sdpa_test::check_cases(specs, probes, variants, fault, dir);
  run = std::move(c.run);
  return std::move(c.report);
}

TEST(MaskedRowsFaultSwitch, SelectsMaskedRowsCases) {
  using sdpa_doctor::workers::parse_planted_fault;
  auto f = parse_planted_fault("when=mrows,action=nan");
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_TRUE(f->matches("math", "x", *sdpa_doctor::parse_case_spec("l=8,d=8,mask=bool,masked_rows")));
  EXPECT_FALSE(f->matches("math", "x", *sdpa_doctor::parse_case_spec("l=8,d=8,mask=bool")));
  // The probe's side: tests/python/test_faults.py.
}

// The Python probe under a torch older than 2.5 (pretended: torch.__version__ is what it reads)
// ignores the doctor's oracle file for a masked_rows case and measures against its own, NaN in
// the fully masked rows: the doctor's judge calls this torch's zeros there a mismatch that says
// so, and NaN rows a pass.
TEST(MaskedRowsProbe, AnOlderTorchIsMeasuredAgainstItsOwnNanOracle) {
  if (!sdpa_test::python_has_torch()) GTEST_SKIP() << "no torch in " << k_python;
  const std::string script = R"(
import json
import torch
import torch.nn.functional as F
from sdpa_probe.inputs import make_inputs
from sdpa_probe.protocol import normalise_case
from sdpa_probe.worker import measure_output
c = normalise_case({"dtype": "fp32", "b": 1, "h": 2, "lq": 8, "lkv": 8, "d": 4, "mask": "bool",
                    "masked_rows": True})
q, k, v, mask = make_inputs(torch, c)
out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
torch.__version__ = "2.4.1"
line = {"case": c, "oracle": "/nonexistent/oracle.f64", "atol": 1e-5, "rtol": 1e-5}
rows = torch.zeros(8, dtype=torch.bool)
rows[3::4] = True
for o in (out, out.masked_fill(rows.reshape(8, 1), float("nan"))):
    print(json.dumps(measure_output(torch, line, o, q, k, v, mask, None)))
)";
  auto r = sdpa_test::run_probe_snippet(script);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::istringstream lines(r.out);
  std::vector<sdpa_doctor::cases::Comparison> verdicts;
  for (std::string line; std::getline(lines, line);) {
    auto measured = sdpa_doctor::measured_from_json(json{{"out", json::parse(line)}});
    ASSERT_TRUE(measured) << measured.error().message << ": " << line;
    verdicts.push_back(sdpa_doctor::cases::judge(*measured).all);
  }
  ASSERT_EQ(verdicts.size(), 2u) << r.out;
  EXPECT_EQ(verdicts[0].status, sdpa_doctor::Status::mismatch);
  EXPECT_EQ(verdicts[0].reason,
            "16 of 16 elements in fully masked rows are finite where torch < 2.5 returns NaN");
  EXPECT_EQ(verdicts[1].status, sdpa_doctor::Status::pass) << verdicts[1].reason;
}

TEST(MaskedRowsCheck, NaNInFullyMaskedRowsIsFoundThereAndOnlyThere) {
  const std::string probes = sdpa_test::runnable_torch_probes();
  if (probes.empty()) GTEST_SKIP() << "neither torch probe can run here";
  const std::vector<std::string> specs = {
      "dtype=fp32,h=2,lq=24,lkv=20,d=16,mask=bool",
      "dtype=fp32,h=2,lq=24,lkv=20,d=16,mask=bool,masked_rows",
      "dtype=bf16,h=2,l=24,d=16,mask=additive",
      "dtype=bf16,h=2,l=24,d=16,mask=additive,masked_rows",
      "dtype=fp16,h=2,l=24,d=16"};
  const std::set<std::string> planted = {id_of(specs[1]), id_of(specs[3])};
  sdpa_test::RunResult run;
  const json report = check(specs, probes, "math", "variant=math,when=mrows,action=nan", run);
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const size_t probe_count = probes.find(',') == std::string::npos ? 1 : 2;
  ASSERT_EQ(report.at("results").size(), specs.size() * probe_count) << report.dump(1);
  for (const json& res : report.at("results")) {
    const bool hit = planted.count(res.at("case_id")) > 0;
    EXPECT_EQ(res.at("status"), hit ? "nonfinite" : "pass") << res;
    if (!hit) continue;
    EXPECT_NE(res.at("reason").get<std::string>().find("all in fully masked rows"),
              std::string::npos)
        << res;
    EXPECT_EQ(res.at("masked_rows"), "zero") << res;
    EXPECT_EQ(res.at("case").at("masked_rows"), true) << res;
  }
  ASSERT_EQ(report.at("shrinks").size(), probe_count) << report.dump(1);
  for (const json& s : report.at("shrinks")) {
    std::set<std::string> axes;
    for (const json& w : s.at("conditions")) axes.insert(w.at("axis"));
    EXPECT_TRUE(axes.count("masked_rows")) << s;
    EXPECT_NE(s.at("rule").get<std::string>().find("rows are fully masked"), std::string::npos)
        << s;
  }
}

TEST(MaskedRowsCheck, PassInEveryProbeWithZeroSemanticsForwardAndBackward) {
  std::string probes = sdpa_test::runnable_torch_probes();
  probes += probes.empty() ? "reference" : ",reference";
  const std::vector<std::string> specs = {
      "dtype=bf16,h=4,lq=64,lkv=80,d=64,mask=bool,masked_rows",
      "dtype=fp16,b=2,h=2,l=40,d=32,mask=additive,masked_rows",
      "dtype=fp32,b=2,h=2,lq=33,lkv=20,d=16,mask=additive,mask_dtype=fp32,mask_shape=qk,"
      "masked_rows",
      "dtype=bf16,b=1,hq=4,hkv=2,l=48,d=32,mask=bool,mask_shape=bhqk,masked_rows,backward",
      "dtype=fp32,b=1,h=2,l=32,d=16,mask=additive,masked_rows,backward"};
  sdpa_test::RunResult run;
  const json report = check(specs, probes, "math,flash,ref-math,ref-flash", "", run);
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  size_t judged = 0;
  for (const json& res : report.at("results")) {
    if (res.at("status") == "unsupported") continue; // a variant a probe does not have
    EXPECT_EQ(res.at("status"), "pass") << res;
    EXPECT_EQ(res.at("masked_rows"), "zero") << res;
    ++judged;
  }
  EXPECT_GE(judged, 2 * specs.size()) << report.dump(1);
}

} // namespace

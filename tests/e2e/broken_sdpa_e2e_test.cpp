// Failures that live only where users call attention, end to end: torch's SDPA wrapped in the
// Python probe's interpreter (support/wrapped_sdpa.hpp) so that the flash backend breaks in one
// way only, and the default check, with no flag but the interpreter, finds it exactly there: only
// the Python probe's flash cells of those cases fail, the cause is said once, and the advice
// around it is verified by its re-run.
//  - only the compiled call fails (torch.compile traces a wrong graph; eager calls pass);
//  - only causal aligned bottom-right with fewer queries than keys (decoding, chunked prefill)
//    gives wrong values;
//  - one later call of a case returns an output a few ulps away from the first call's (a race);
//  - only scores near 1e4 in fp16 and bf16 give Inf;
//  - only an fp32 additive mask under fp16 queries gives wrong values.
#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"
#include "support/wrapped_sdpa.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <string>

using nlohmann::json;

namespace {

struct Checked {
  sdpa_test::RunResult run;
  json report;
};

// The default check with the Python probe's SDPA broken by `broken`; `dir` keeps the interpreter
// (`python`), the report (`r.json`) and the run directory.
Checked default_check(const std::string& broken, const sdpa_test::TempDir& dir) {
  sdpa_test::RunOptions o;
  o.set_env = {{"NO_COLOR", "1"}};
  o.timeout_s = 600;
  Checked c;
  c.run = sdpa_test::run_binary({sdpa_test::doctor(), "check", "--python",
                                 sdpa_test::python_with_broken_flash(dir, broken), "--json",
                                 dir.file("r.json"), "--run-dir", dir.file("run")},
                                o);
  c.report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  return c;
}

Checked default_check(const std::string& broken) {
  sdpa_test::TempDir dir;
  return default_check(broken, dir);
}

// Every cell passes or is refused but the Python probe's flash cells of `broken_cases` in `mode`,
// which have `status` and a reason containing `words`; the advice is verified. Returns those cells.
std::vector<json> expect_failures_only_at(const Checked& c, const std::set<std::string>& broken_cases,
                                          const std::string& status, const std::string& words,
                                          const std::string& mode = "eager") {
  EXPECT_EQ(c.run.exit_code, 1) << c.run.out << c.run.err;
  std::vector<json> failed;
  std::set<std::string> seen;
  for (const json& res : c.report.at("results")) {
    const std::string id = res.at("case_id");
    if (res.at("probe") == "python" && res.at("variant") == "flash" &&
        res.value("mode", "eager") == mode && broken_cases.count(id)) {
      seen.insert(id);
      failed.push_back(res);
      EXPECT_EQ(res.at("status"), status) << res;
      EXPECT_NE(res.at("reason").get<std::string>().find(words), std::string::npos) << res;
    } else if (res.at("status") != "unsupported") {
      EXPECT_EQ(res.at("status"), "pass") << res;
    }
  }
  EXPECT_EQ(seen, broken_cases) << "each broken case is run by the default check";
  EXPECT_FALSE(c.report.at("recommendations").empty());
  for (const json& rec : c.report.at("recommendations"))
    EXPECT_TRUE(rec.at("verified").get<bool>()) << rec;
  return failed;
}

TEST(CompiledCheck, OnlyTheCompiledCallFailingIsFoundAtThePythonFlashCompiledCells) {
  if (!sdpa_test::python_has_torch()) GTEST_SKIP() << "no torch in " << sdpa_test::k_test_python;
  // Wrong values only in what torch.compile traces, with flash alone enabled: eager calls pass.
  sdpa_test::TempDir dir;
  const Checked c = default_check(R"(
BREAK_COMPILED = True

def broken(torch, q, k, v, kwargs, out):
    return out + 0.05
)",
                                  dir);
  // The compile family of the default check: the Python probe's compiled cells, a handful.
  std::set<std::string> compiled;
  for (const json& res : c.report.at("results"))
    if (res.value("mode", "eager") == "compiled") {
      EXPECT_EQ(res.at("probe"), "python") << res; // the libtorch probe has no compiled cells
      compiled.insert(res.at("case_id").get<std::string>());
    }
  ASSERT_GE(compiled.size(), 3u) << "forward, backward, GQA and a mask are compiled";
  ASSERT_LE(compiled.size(), 8u) << "only the compile family, not every quick case";
  EXPECT_TRUE(std::any_of(compiled.begin(), compiled.end(),
                          [](const std::string& id) { return id.ends_with("-bwd"); }));
  EXPECT_TRUE(std::any_of(compiled.begin(), compiled.end(),
                          [](const std::string& id) { return id.find(":") != std::string::npos; }))
      << "grouped heads";
  EXPECT_TRUE(std::any_of(compiled.begin(), compiled.end(),
                          [](const std::string& id) { return id.find("-mask_add") != std::string::npos; }));
  const auto failed = expect_failures_only_at(c, compiled, "mismatch", "elements outside", "compiled");
  EXPECT_EQ(failed.size(), compiled.size());
  // The cause said once: one finding that only compiled calls fail, naming those cases.
  int found = 0;
  for (const json& f : c.report.at("findings")) {
    if (f.at("id") != "compiled-only-failure") continue;
    ++found;
    EXPECT_EQ(f.at("case_ids").size(), compiled.size()) << f;
    EXPECT_NE(f.at("message").get<std::string>().find("flash · compiled"), std::string::npos) << f;
  }
  EXPECT_EQ(found, 1) << c.report.at("findings").dump(1);
  // Compiled attention has advice of its own, verified by a compiled re-run.
  int compiled_advice = 0;
  for (const json& rec : c.report.at("recommendations"))
    if (rec.value("workload", "") == "compiled") {
      ++compiled_advice;
      EXPECT_TRUE(rec.at("verified").get<bool>()) << rec;
      EXPECT_NE(rec.at("python").get<std::string>().find("torch.compile"), std::string::npos) << rec;
    }
  EXPECT_EQ(compiled_advice, 1) << c.report.at("recommendations").dump(1);
  EXPECT_NE(c.run.out.find("flash · compiled"), std::string::npos) << c.run.out;

  // `repro` of a compiled failure writes the torch.compile call, and its script reproduces the
  // failure where it lives (the broken interpreter) and passes where it does not.
  const std::string id = "fp16-b1-h4-q96-k96-d64-mask_add";
  ASSERT_TRUE(compiled.count(id));
  const auto repro = sdpa_test::run_binary({sdpa_test::doctor(), "repro", id, "--report",
                                            dir.file("r.json"), "--original", "-o",
                                            dir.file("repro.py")});
  ASSERT_EQ(repro.exit_code, 0) << repro.err;
  const std::string script = sdpa_test::read_file(dir.file("repro.py"));
  EXPECT_NE(script.find("COMPILE = \"aot_eager\""), std::string::npos);
  EXPECT_NE(script.find("VARIANT, PROBE = \"flash\", \"python\""), std::string::npos);
  const auto broken_run = sdpa_test::run_binary({dir.file("python"), dir.file("repro.py")});
  EXPECT_NE(broken_run.exit_code, 0) << broken_run.out << broken_run.err;
  EXPECT_NE(broken_run.out.find("MISMATCH"), std::string::npos) << broken_run.out;
  const auto torch_run = sdpa_test::run_binary({sdpa_test::k_test_python, dir.file("repro.py")});
  EXPECT_EQ(torch_run.exit_code, 0) << torch_run.out << torch_run.err;
}

// Flash wrong only for a causal_lower_right bias with Lq < Lkv (ROCm/flash-attention#158: GPT-OSS
// decoding gives degenerate text, no error). The wrapper sees the model's call (the CausalBias);
// the bool mask CausalBias hands SDPA on the CPU is left alone.
constexpr const char* k_broken_bottom_right = R"(
def broken(torch, q, k, v, kwargs, out):
    from torch.nn.attention.bias import CausalBias, CausalVariant
    mask = kwargs.get("attn_mask")
    if not isinstance(mask, CausalBias) or mask.variant != CausalVariant.LOWER_RIGHT:
        return out
    if mask.seq_len_q >= mask.seq_len_kv:
        return out
    return out + 0.05
)";

TEST(BottomRightCheck, WrongValuesOnlyWhereCausalIsAlignedBottomRightAreFoundByTheDefaultCheck) {
  if (!sdpa_test::python_has_torch()) GTEST_SKIP() << "no torch in " << sdpa_test::k_test_python;
  const Checked c = default_check(k_broken_bottom_right);
  const std::set<std::string> broken = {"bf16-b1-h8:2-q1-k129-d64-causal_br",
                                        "fp16-b1-h4-q16-k80-d64-causal_br"};
  const auto failed = expect_failures_only_at(c, broken, "mismatch", "elements outside");
  EXPECT_EQ(failed.size(), 2u);
  // The top-left twins of those shapes pass: the alignment is the cause, and it is said once,
  // by the shrinking of the one failing variant.
  ASSERT_EQ(c.report.at("shrinks").size(), 1u) << c.report.at("shrinks").dump(1);
  const json& shrink = c.report.at("shrinks").at(0);
  EXPECT_EQ(shrink.at("variant"), "flash") << shrink;
  const std::string rule = "flash on cpu: mismatch only when causal and aligned bottom-right";
  EXPECT_EQ(shrink.at("rule"), rule) << shrink;
  const json& minimal = shrink.at("minimal_case").at("case");
  EXPECT_EQ(minimal.at("causal"), "bottom_right") << minimal;
  EXPECT_LT(minimal.at("lq").get<int>(), minimal.at("lkv").get<int>()) << minimal;
  size_t said = 0;
  for (size_t at = c.run.out.find(rule); at != std::string::npos; at = c.run.out.find(rule, at + 1))
    ++said;
  EXPECT_EQ(said, 1u) << c.run.out;

  // `repro` of that failure writes a script that calls causal_lower_right and reproduces it
  // under the same torch, and passes under a torch whose flash is sound.
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("r.json"), c.report.dump());
  const auto written =
      sdpa_test::run_binary({sdpa_test::doctor(), "repro", *broken.begin(), "--report",
                             dir.file("r.json"), "-o", dir.file("repro.py")});
  ASSERT_EQ(written.exit_code, 0) << written.err;
  const std::string script = sdpa_test::read_file(dir.file("repro.py"));
  EXPECT_NE(script.find("causal_lower_right("), std::string::npos);
  EXPECT_NE(script.find("causal_bottom_right=True"), std::string::npos);
  EXPECT_NE(script.find(R"(BACKEND = "flash")"), std::string::npos);
  sdpa_test::RunOptions o;
  o.set_env = {{"PYTHONWARNINGS", "ignore"}};
  o.timeout_s = 300;
  const auto reproduced = sdpa_test::run_binary(
      {sdpa_test::python_with_broken_flash(dir, k_broken_bottom_right), dir.file("repro.py")}, o);
  EXPECT_EQ(reproduced.exit_code, 1) << reproduced.out << reproduced.err;
  EXPECT_NE(reproduced.out.find("MISMATCH"), std::string::npos) << reproduced.out;
  const auto sound =
      sdpa_test::run_binary({sdpa_test::k_test_python, dir.file("repro.py")}, o);
  EXPECT_EQ(sound.exit_code, 0) << sound.out << sound.err;
}

TEST(RepeatedCallsCheck, OneLaterCallAFewUlpsAwayIsFoundWhereItLivesByTheDefaultCheck) {
  if (!sdpa_test::python_has_torch()) GTEST_SKIP() << "no torch in " << sdpa_test::k_test_python;
  const Checked c = default_check(R"(
_calls = [0]

def broken(torch, q, k, v, kwargs, out):
    if q.dtype != torch.float32 or tuple(q.shape) != (1, 2, 77, 128):
        return out
    _calls[0] += 1
    if _calls[0] != 3:  # the third call of the case alone
        return out
    out = out.clone(memory_format=torch.contiguous_format)
    flat = out.view(-1)
    for _ in range(3):  # a few ulps up
        flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf")))
    return out
)");
  const std::string id = "fp32-b1-h2-q77-k77-d128";
  for (const json& res : expect_failures_only_at(c, {id}, "mismatch",
                                                 " differs from call 1: 1 element, ")) {
    EXPECT_EQ(res.at("differing_call"), 3) << res;
    EXPECT_EQ(res.at("reason").get<std::string>().rfind("call 3 of ", 0), 0u) << res;
  }
  int compared = 0;
  for (const json& res : c.report.at("results")) {
    compared += res.contains("calls");
    if (res.at("case_id") != id || res.at("variant") != "flash" || res.at("probe") != "python") {
      EXPECT_FALSE(res.contains("differing_call")) << res;
    }
  }
  EXPECT_GT(compared, 0) << "results carry the calls compared";
  // The cause said once: one finding names exactly that case.
  int found = 0;
  for (const json& f : c.report.at("findings")) {
    if (f.at("id") != "nondeterministic") continue;
    ++found;
    EXPECT_EQ(f.at("case_ids"), json::array({id})) << f;
  }
  EXPECT_EQ(found, 1) << c.report.at("findings").dump(1);
  EXPECT_NE(c.run.out.find("differs from call 1"), std::string::npos) << c.run.out;
}

TEST(LargeScoresCheck, InfOnlyWhereScoresNear1e4IsFoundByTheDefaultCheck) {
  if (!sdpa_test::python_has_torch()) GTEST_SKIP() << "no torch in " << sdpa_test::k_test_python;
  const Checked c = default_check(R"(
def broken(torch, q, k, v, kwargs, out):
    if q.dtype not in (torch.float16, torch.bfloat16):
        return out
    d = q.shape[-1]  # a bound on every score, whatever the heads' grouping
    if float(q.float().abs().max() * k.float().abs().max()) * d ** 0.5 < 1000:
        return out
    out = out.clone()
    out.view(-1)[0] = float("inf")  # the overflow a kernel without rescaling makes
    return out
)");
  const auto failed = expect_failures_only_at(
      c, {"bf16-b1-h2-q32-k32-d64-large", "fp16-b1-h2-q32-k32-d64-large"}, "nonfinite",
      "0 NaN and 1 Inf of 4096 output elements");
  EXPECT_EQ(failed.size(), 2u);
}

TEST(MaskDtypeCheck, WrongValuesOnlyUnderAnFp32MaskWithFp16QueriesAreFoundByTheDefaultCheck) {
  if (!sdpa_test::python_has_torch()) GTEST_SKIP() << "no torch in " << sdpa_test::k_test_python;
  const Checked c = default_check(R"(
def broken(torch, q, k, v, kwargs, out):
    mask = kwargs.get("attn_mask")  # a tensor; a causal_lower_right bias is no additive mask
    if q.dtype != torch.float16 or type(mask) is not torch.Tensor or mask.dtype != torch.float32:
        return out
    return out + 0.05  # a mask read in the wrong precision shifts every output
)");
  const auto failed = expect_failures_only_at(c, {"fp16-b1-h2-q32-k32-d64-mask_add-mask_fp32"},
                                              "mismatch", "4096 of 4096 elements outside");
  EXPECT_EQ(failed.size(), 1u);
}

} // namespace

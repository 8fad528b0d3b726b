// Every call judged, end to end: torch's SDPA wrapped in the Python probe's interpreter so that
// one later call of one case returns an output a few ulps away from the first call's (the quick
// suite's fp32 case of length 77, flash alone enabled, its third call), as a race in a kernel
// does. The default check, with no flag but the interpreter, finds it exactly there: only the
// Python probe's flash cell of that case fails, naming the call that differed; one `nondeterministic` finding says the cause once; the
// advice around it is verified by its re-run; the JSON names the call.
#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <set>
#include <string>

using nlohmann::json;

namespace {

// An interpreter that runs the test's Python with torch's SDPA wrapped (sitecustomize.py).
std::string wrapped_python(const sdpa_test::TempDir& dir) {
  const std::string patch = dir.file("patch");
  ::mkdir(patch.c_str(), 0755);
  sdpa_test::write_file(patch + "/sitecustomize.py", R"(
def _wrap_sdpa():
    try:
        import torch
        import torch.nn.functional as F
    except Exception:
        return
    real = F.scaled_dot_product_attention
    calls = {}

    def sdpa(q, k, v, *args, **kwargs):
        out = real(q, k, v, *args, **kwargs)
        flash_alone = (torch.backends.cuda.flash_sdp_enabled()
                       and not torch.backends.cuda.math_sdp_enabled()
                       and not torch.backends.cuda.mem_efficient_sdp_enabled())
        if not flash_alone or q.dtype != torch.float32 or tuple(q.shape) != (1, 2, 77, 128):
            return out
        calls["n"] = calls.get("n", 0) + 1
        if calls["n"] != 3:
            return out
        out = out.clone(memory_format=torch.contiguous_format)
        flat = out.view(-1)
        for _ in range(3):  # a few ulps up
            flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf")))
        return out

    F.scaled_dot_product_attention = sdpa


_wrap_sdpa()
)");
  const std::string python = dir.file("python");
  sdpa_test::write_file(python, "#!/bin/sh\nPYTHONPATH='" + patch +
                                    "'${PYTHONPATH:+:$PYTHONPATH} exec '" +
                                    sdpa_test::k_test_python + "' \"$@\"\n");
  ::chmod(python.c_str(), 0755);
  return python;
}

TEST(RepeatedCallsCheck, OneLaterCallAFewUlpsAwayIsFoundWhereItLivesByTheDefaultCheck) {
  if (!sdpa_test::python_has_torch()) GTEST_SKIP() << "no torch in " << sdpa_test::k_test_python;
  sdpa_test::TempDir dir;
  sdpa_test::RunOptions o;
  o.set_env = {{"NO_COLOR", "1"}};
  o.timeout_s = 600;
  const auto r = sdpa_test::run_binary({sdpa_test::doctor(), "check", "--python",
                                        wrapped_python(dir), "--json", dir.file("r.json"),
                                        "--run-dir", dir.file("run")},
                                       o);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  std::set<std::string> differing;
  int compared = 0;
  for (const json& res : report.at("results")) {
    const bool planted = res.at("probe") == "python" && res.at("variant") == "flash" &&
                         res.at("case_id") == "fp32-b1-h2-q77-k77-d128";
    compared += res.contains("calls");
    if (planted) {
      differing.insert(res.at("case_id").get<std::string>());
      EXPECT_EQ(res.at("status"), "mismatch") << res;
      EXPECT_EQ(res.at("differing_call"), 3) << res;
      EXPECT_EQ(res.at("reason").get<std::string>().rfind("call 3 of ", 0), 0u) << res;
      EXPECT_NE(res.at("reason").get<std::string>().find(" differs from call 1: 1 element, "),
                std::string::npos)
          << res;
    } else if (res.at("status") != "unsupported" && res.at("status") != "skipped") {
      EXPECT_EQ(res.at("status"), "pass") << res;
      EXPECT_FALSE(res.contains("differing_call")) << res;
    }
  }
  EXPECT_EQ(differing.size(), 1u);
  EXPECT_GT(compared, 0) << "results carry the calls compared";
  // The cause said once: one finding names exactly those cases.
  int found = 0;
  for (const json& f : report.at("findings")) {
    if (f.at("id") != "nondeterministic") continue;
    ++found;
    std::set<std::string> ids;
    for (const json& id : f.at("case_ids")) ids.insert(id.get<std::string>());
    EXPECT_EQ(ids, differing) << f;
  }
  EXPECT_EQ(found, 1) << report.at("findings").dump(1);
  // The advice around it was re-run and held.
  ASSERT_FALSE(report.at("recommendations").empty());
  for (const json& rec : report.at("recommendations"))
    EXPECT_TRUE(rec.at("verified").get<bool>()) << rec;
  EXPECT_NE(r.out.find("differs from call 1"), std::string::npos) << r.out;
}

} // namespace

// The repro script's values (unit): every one a Python literal, whatever the result says; only
// known variants, devices, probes and cases reach a script; the measured tolerance and verdict
// are the script's.
#include "report/report.hpp"

#include "fuzz/python_literal.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

using namespace sdpa_doctor;

namespace {

CaseResult measured(const std::string& variant = "flash[ck]") {
  CaseResult r;
  r.kase = parse_case_id("fp16-b1-h2-q8-k8-d8").value();
  r.case_id = r.kase.id();
  r.device = "cuda:0";
  r.probe = Probe::python;
  r.variant = variant;
  r.status = Status::crash;
  r.process_end = ProcessEnd{std::nullopt, 6, "SIGABRT", true, false};
  return r;
}

const std::vector<std::string> k_hostile = {
    "flash\"; import os; os.system(\"id\"); x=\"", "a\nimport os", "a\rb", "\xe2\x80\xa8 line separator",
    "\\", "\\\"", "'''", "@DEVICE@", "@NOTES@", "\x1b[2J", std::string("nul\0byte", 8), "\xff\xfe",
    "#", "\xf0\x9f\x99\x82"};

} // namespace

TEST(ReproValues, EveryValueIsOnePythonLiteralWhateverTheReportSays) {
  for (const std::string& text : k_hostile) {
    CaseResult r = measured();
    r.reason = text;
    r.signatures = {text};
    r.process_end->signal_name = text;
    auto values = report::repro_values(r);
    ASSERT_TRUE(values) << values.error().message;
    for (const auto& [key, value] : *values)
      EXPECT_TRUE(sdpa_fuzz::PythonLiteral::is_one(value)) << key << " = " << value;
    auto script = report::render_repro(r);
    ASSERT_TRUE(script);
    // The hostile text stands on the one line that holds the report's words, inside a literal.
    std::string_view rest = *script;
    for (size_t nl = rest.find('\n'); nl != std::string_view::npos; nl = rest.find('\n')) {
      const std::string_view line = rest.substr(0, nl);
      const bool hostile = line.find("os.system") != std::string_view::npos ||
                           line.find("DEVICE@") != std::string_view::npos;
      if (hostile) {
        EXPECT_EQ(line.rfind("MEASURED = dict(verdict=", 0), 0u) << line;
      }
      rest.remove_prefix(nl + 1);
    }
    // No value adds a line to the template.
    const auto lines = [](std::string_view s) { return std::count(s.begin(), s.end(), '\n'); };
    EXPECT_EQ(lines(*script), lines(report::repro_template()));
  }
}

TEST(ReproValues, APlaceholderInAValueStaysText) {
  CaseResult r = measured();
  r.reason = "@DEVICE@ @BACKEND@";
  auto script = report::render_repro(r);
  ASSERT_TRUE(script);
  EXPECT_NE(script->find("reason: @DEVICE@ @BACKEND@"), std::string::npos);
  EXPECT_NE(script->find("DEVICE = \"cuda:0\""), std::string::npos);
}

TEST(ReproValues, OnlyKnownVariantsDevicesProbesAndCasesReachAScript) {
  const auto refused = [](CaseResult r, const std::string& field) {
    auto script = report::render_repro(r);
    ASSERT_FALSE(script) << field;
    EXPECT_NE(script.error().message.find(field), std::string::npos) << script.error().message;
    EXPECT_EQ(script.error().message.find('\n'), std::string::npos);
  };
  refused(measured("flash\"; import os; os.system(\"id\"); x=\""), "variant");
  refused(measured("warp[ck]"), "variant");
  refused(measured("flash[ck,rm -rf]"), "variant");
  CaseResult r = measured();
  r.device = "cuda:0\"; import os; x=\"";
  refused(r, "device");
  r.device = "cuda:0\n";
  refused(r, "device");
  r = measured();
  r.probe = Probe::fault;
  refused(r, "probe");
  r = measured();
  r.case_id = "fp16-b1-h2-q8-k8-d8\"; import os";
  refused(r, "case id");
}

TEST(ReproValues, TheMeasuredToleranceAndVerdictAreTheScripts) {
  CaseResult r = measured("math");
  r.status = Status::mismatch;
  r.process_end.reset();
  r.tolerance = {1e-9, 0};
  auto script = report::render_repro(r);
  ASSERT_TRUE(script);
  EXPECT_NE(script->find("ATOL, RTOL = 1.0000000000000001e-09, 0.0"), std::string::npos) << *script;
  EXPECT_NE(script->find("verdict=\"mismatch\""), std::string::npos);
  // No usable tolerance (a hand-written case): the dtype's own.
  r.tolerance = {-1, 0};
  script = report::render_repro(r);
  ASSERT_TRUE(script);
  EXPECT_NE(script->find("ATOL, RTOL = 0.002, 0.002"), std::string::npos);
}

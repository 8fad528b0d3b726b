#include "fixtures.hpp"

#include "report/report.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

using namespace sdpa_doctor;

namespace {

size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Links stay whole so a terminal can open them; they are the only lines allowed to overflow.
size_t widest_line(const std::string& text) {
  size_t widest = 0, start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(start, nl - start);
    if (line.find("https://") == std::string::npos) widest = std::max(widest, display_width(line));
    start = nl + 1;
  }
  return widest;
}

const Report& fixture(const std::string& name) {
  static const auto all = sdpa_fixtures::all_fixtures();
  for (const auto& f : all) {
    if (f.name == name) return f.report;
  }
  throw std::runtime_error("no fixture " + name);
}

} // namespace

TEST(Console, MatrixFitsTheWidthItIsGiven) {
  for (const char* name : {"crash_known_issue", "timeout_mismatch", "all_unsupported", "no_gpu"}) {
    for (int width : {100, 80, 60}) {
      const std::string m = report::render_matrix(fixture(name), {false, true, width});
      EXPECT_LE(widest_line(m), size_t(width)) << name << " at " << width << ":\n" << m;
      if (width == 100) {
        // Code to paste stays verbatim, so only the default width is held for everything.
        const std::string full = report::render_console(fixture(name), {false, true, width});
        EXPECT_LE(widest_line(full), size_t(width)) << name << ":\n" << full;
      }
    }
  }
}

TEST(Console, ReadsWithoutColourAndAsciiOnlyWhenAsked) {
  const Report& r = fixture("crash_known_issue");
  const std::string plain = report::render_console(r, {false, false, 100});
  EXPECT_EQ(plain.find("\x1b["), std::string::npos);
  for (unsigned char c : plain) ASSERT_LT(c, 0x80) << "non-ASCII byte in ASCII rendering";
  EXPECT_NE(plain.find("X CRASH 1"), std::string::npos) << plain;
  const std::string colour = report::render_console(r, {true, true, 100});
  EXPECT_NE(colour.find("\x1b[1;31m✗ CRASH 1\x1b[0m"), std::string::npos);
}

TEST(Console, NamesTheKnownIssueAndTheExitCode) {
  const std::string out = report::render_console(fixture("crash_known_issue"), {false, true, 100});
  EXPECT_NE(out.find("ck-sdpa-unsupported-hw-rdna4"), std::string::npos);
  EXPECT_NE(out.find("https://github.com/pytorch/pytorch/issues/188113"), std::string::npos);
  EXPECT_NE(out.find("signal SIGABRT (core dumped)"), std::string::npos);
  EXPECT_NE(out.find("exit code 1"), std::string::npos);
}

TEST(Json, CarriesSchemaNumbersAndNonFiniteAsNullWithFlag) {
  const auto doc = nlohmann::json::parse(report::render_json(fixture("timeout_mismatch")));
  EXPECT_EQ(doc["schema"], "sdpa-doctor/report/v1.3");
  bool saw_nan = false;
  for (const auto& r : doc["results"]) {
    if (r["status"] == "nonfinite") {
      saw_nan = true;
      EXPECT_TRUE(r["metrics"]["max_abs_err"].is_null());
      EXPECT_EQ(r["metrics"]["nonfinite_fields"],
                nlohmann::json::array({"max_abs_err", "rel_l2_err"}));
      EXPECT_EQ(r["metrics"]["nan_count"], 512);
    }
    if (r["status"] == "pass") {
      EXPECT_TRUE(r["metrics"]["time_ms"].is_number());
    }
  }
  EXPECT_TRUE(saw_nan);
  EXPECT_EQ(doc["exit_code"], 1);
  EXPECT_EQ(doc["summary"]["by_status"]["timeout"], 1);
}

TEST(JUnit, EscapesAndStripsControlCharacters) {
  Report r = fixture("no_gpu");
  r.results[0].status = Status::error;
  r.results[0].reason = "bad <tag> & \"quote\" \x01\x1b[31m";
  r.results[0].stderr_tail = "line1\nline2 ]]> \x07";
  const std::string xml = report::render_junit(r);
  EXPECT_EQ(xml.find('\x01'), std::string::npos);
  EXPECT_EQ(xml.find('\x07'), std::string::npos);
  EXPECT_EQ(xml.find('\x1b'), std::string::npos);
  EXPECT_NE(xml.find("bad &lt;tag&gt; &amp; &quot;quote&quot;"), std::string::npos);
  EXPECT_NE(xml.find("<failure type=\"error\""), std::string::npos);
  EXPECT_NE(xml.find("failures=\"1\""), std::string::npos);
}

TEST(JUnit, UnsupportedIsSkipped) {
  const std::string xml = report::render_junit(fixture("all_unsupported"));
  EXPECT_NE(xml.find("<skipped message=\"unsupported: No available kernel"), std::string::npos);
  EXPECT_NE(xml.find("tests=\"6\" failures=\"0\" errors=\"0\" skipped=\"6\""), std::string::npos);
}

TEST(Markdown, OneReproPerFailingCellInDetails) {
  const std::string md = report::render_markdown(fixture("timeout_mismatch"));
  size_t details = 0, repro = 0;
  for (size_t p = 0; (p = md.find("<details><summary>", p)) != std::string::npos; ++p) ++details;
  for (size_t p = 0; (p = md.find("```python\n#!/usr/bin/env python3", p)) != std::string::npos; ++p)
    ++repro;
  EXPECT_EQ(details, 4u); // the environment, then timeout, nonfinite, mismatch
  EXPECT_EQ(repro, 3u);   // three different cells (status differs)
}

TEST(Environment, AllowListKeepsRocmAndDropsSecrets) {
  const std::map<std::string, std::string> env = {
      {"HIP_VISIBLE_DEVICES", "0"},   {"HSA_OVERRIDE_GFX_VERSION", "11.0.0"},
      {"ROCR_VISIBLE_DEVICES", "0"},  {"ROCM_PATH", "/opt/rocm"},
      {"AMD_SERIALIZE_KERNEL", "3"},  {"CUDA_VISIBLE_DEVICES", "0"},
      {"PYTORCH_ROCM_ARCH", "gfx1201"}, {"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "1"},
      {"HF_HUB_OFFLINE", "1"},        {"OMP_NUM_THREADS", "8"},
      {"HF_TOKEN", "hf_x"},           {"TORCH_API_KEY", "k"},
      {"HIP_SECRET", "s"},            {"AMD_PASSWORD", "p"},
      {"ROCM_Token", "t"},            {"HOME", "/home/alice"},
      {"PATH", "/usr/bin"},           {"AWS_SECRET_ACCESS_KEY", "x"},
      {"LD_LIBRARY_PATH", "/opt"},    {"HF_HOME", "/x"}};
  const auto kept = report::reportable_environment(env);
  std::set<std::string> names;
  for (const auto& [k, v] : kept) names.insert(k);
  EXPECT_EQ(names, (std::set<std::string>{"AMD_SERIALIZE_KERNEL", "CUDA_VISIBLE_DEVICES",
                                          "HF_HUB_OFFLINE", "HIP_VISIBLE_DEVICES",
                                          "HSA_OVERRIDE_GFX_VERSION", "OMP_NUM_THREADS",
                                          "PYTORCH_ROCM_ARCH", "ROCM_PATH", "ROCR_VISIBLE_DEVICES",
                                          "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"}));
}

TEST(Redact, RemovesHostnameAndUserEverywhere) {
  Report r = fixture("crash_known_issue");
  r.results[0].stderr_tail = "/home/alice/venv/lib/torch on ws-lab-07\n";
  r.environment["ROCM_PATH"] = "/home/alice/rocm";
  const Report out = report::redact(r);
  EXPECT_EQ(out.host.count("hostname"), 0u);
  EXPECT_EQ(out.host.count("user"), 0u);
  EXPECT_EQ(out.results[0].stderr_tail, "/home/<user>/venv/lib/torch on <host>\n");
  EXPECT_EQ(out.environment.at("ROCM_PATH"), "/home/<user>/rocm");
  for (const std::string& text : {report::render_json(out), report::render_markdown(out),
                                  report::render_console(out), report::render_junit(out)}) {
    EXPECT_EQ(text.find("alice"), std::string::npos);
    EXPECT_EQ(text.find("ws-lab-07"), std::string::npos);
  }
}

TEST(WriteAtomically, WritesWholeFileAndLeavesNoTemporary) {
  sdpa_test::TempDir dir;
  const std::string path = dir.file("r.json");
  auto w = report::write_atomically(path, "{\"a\":1}\n");
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(sdpa_test::read_file(path), "{\"a\":1}\n");
  ASSERT_TRUE(report::write_atomically(path, "second\n"));
  EXPECT_EQ(sdpa_test::read_file(path), "second\n");
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1u);
}

TEST(WriteAtomically, ReportsAnUnwritableDirectory) {
  auto w = report::write_atomically("/nonexistent-dir-for-sdpa/r.json", "x");
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("/nonexistent-dir-for-sdpa/r.json"), std::string::npos);
  EXPECT_EQ(w.error().message.find('\n'), std::string::npos);
}

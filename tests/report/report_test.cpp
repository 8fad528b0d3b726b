#include "fixtures.hpp"
#include "output_checks.hpp"

#include "report/common.hpp"
#include "report/report.hpp"
#include "support/run_binary.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <sstream>

using namespace sdpa_doctor;

namespace {

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

// By C string: a std::string argument would be a temporary, and GCC 14's -Wdangling-reference
// takes the reference returned (into the static list) for one into it.
const Report& fixture(const char* name) {
  static const auto all = sdpa_fixtures::all_fixtures();
  for (const auto& f : all) {
    if (f.name == name) return f.report;
  }
  throw std::runtime_error(std::string("no fixture ") + name);
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
  EXPECT_EQ(doc["schema"], "sdpa-doctor/report/v1.7");
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

// ---- report text is data: escaped on the console, no markup in Markdown -----------------------

namespace {

using sdpa_test::control_bytes;
using sdpa_test::fences_balanced;
using sdpa_test::html_tags;
using sdpa_test::k_evil;

Report hostile(Report r) {
  r.host["hostname"] = "ws-" + k_evil;
  r.host["kernel"] = k_evil;
  r.suite = k_evil;
  r.environment["HIP_VISIBLE_DEVICES"] = k_evil;
  r.inventory.devices.at(0).name = k_evil;
  for (CaseResult& x : r.results) {
    if (x.status == Status::pass) continue;
    x.reason = "boom " + k_evil;
    x.stderr_tail = "first\n" + k_evil + "\n````\nlast " + k_evil + "\n";
    x.signatures.push_back(k_evil);
  }
  r.findings.push_back({"evil-finding", Severity::warning, k_evil, k_evil, {}, "cuda:0"});
  r.known_issues.at(0).title = k_evil;
  r.known_issues.at(0).link = "https://example.org/a) <b>x</b>";
  r.recommendations.at(0).summary = k_evil;
  return r;
}

} // namespace

TEST(Console, ReportTextReachesTheTerminalEscaped) {
  const Report r = hostile(fixture("crash_known_issue"));
  for (bool unicode : {true, false}) {
    for (int width : {100, 40}) {
      const std::string out = report::render_console(r, {false, unicode, width});
      EXPECT_EQ(control_bytes(out), "") << out;
      EXPECT_NE(out.find("\\x1b[2J"), std::string::npos) << out; // shown, not obeyed
    }
  }
  // With colour, the only escapes are the renderer's own SGR sequences.
  const std::string colour = report::render_console(r, {true, true, 100});
  EXPECT_EQ(colour.find("\x1b[2J"), std::string::npos);
  EXPECT_EQ(colour.find("\x1b]"), std::string::npos);
  EXPECT_EQ(colour.find('\x07'), std::string::npos);
}

TEST(Markdown, ReportTextBecomesNoMarkup) {
  const std::string md = report::render_markdown(hostile(fixture("crash_known_issue")));
  std::string prose;
  ASSERT_TRUE(fences_balanced(md, &prose)) << md;
  // The repro script is another part's (its comments are its own to make safe): the rest of the
  // document carries no control byte.
  EXPECT_EQ(control_bytes(sdpa_test::without_fences(md, "python")), "");
  // Outside code: no tag but the renderer's own, no heading, no link of the data's.
  EXPECT_EQ(html_tags(prose), (std::set<std::string>{"details", "summary"})) << prose;
  EXPECT_NE(prose.find("&lt;img src=x onerror=alert(1)>"), std::string::npos) << prose;
  EXPECT_EQ(prose.find("\n# heading"), std::string::npos) << prose;
  EXPECT_EQ(prose.find("(javascript:"), prose.find("\\](javascript:") + 2) << prose; // escaped
  // A link whose URL could end it early is shown as code, not linked.
  EXPECT_EQ(prose.find("](https://example.org/a)"), std::string::npos) << prose;
}

TEST(Markdown, InlineCodeAndFencesOutrunTheBackticksInside) {
  EXPECT_EQ(report::detail::markdown_code("a``b"), "```a``b```");
  EXPECT_EQ(report::detail::markdown_code("`x"), "`` `x ``");
  EXPECT_EQ(report::detail::markdown_code("a\nb"), "`a\\nb`");
  EXPECT_EQ(report::detail::markdown_fence("x\n````\ny", "text"), "`````text\nx\n````\ny\n`````\n");
  EXPECT_EQ(report::detail::markdown_text("mem_efficient _x_ *y* a|b <t> &"),
            "mem_efficient \\_x\\_ \\*y\\* a|b &lt;t> &amp;");
  EXPECT_EQ(report::detail::markdown_cell("a|b"), "a\\|b");
  EXPECT_EQ(report::detail::markdown_link("id", "https://github.com/x/y/issues/1"),
            "[id](https://github.com/x/y/issues/1)");
  EXPECT_EQ(report::detail::markdown_link("id", "javascript:alert(1)"), "id `javascript:alert(1)`");
}

// ---- each cause once --------------------------------------------------------------------------

namespace {

// The lines of the section that starts with `title` (up to the blank line that ends it).
std::vector<std::string> section(const std::string& text, const std::string& title) {
  std::vector<std::string> lines;
  const size_t at = text.find("\n" + title);
  if (at == std::string::npos) return lines;
  std::istringstream in(text.substr(at + 1));
  for (std::string line; std::getline(in, line) && !line.empty();) lines.push_back(line);
  return lines;
}

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = 0; (p = text.find(what, p)) != std::string::npos; p += what.size()) ++n;
  return n;
}

} // namespace

TEST(Console, SaysEachCauseOnce) {
  const std::string out = report::render_console(fixture("budget_spent"), {false, true, 100});
  const auto failures = section(out, "Failures (7)");
  ASSERT_FALSE(failures.empty()) << out;
  // Two causes: libtorch flash's crashes, python flash's mismatches.
  EXPECT_EQ(occurrences(out, "✗ CRASH  cpu"), 1u) << out;
  EXPECT_EQ(occurrences(out, "≠ MISMATCH  cpu"), 1u) << out;
  EXPECT_NE(out.find("✗ CRASH  cpu · libtorch · flash · 5 cases · signal SIGABRT (core dumped)"),
            std::string::npos)
      << out;
  EXPECT_EQ(occurrences(out, "stopped after 5 failures in a row; 3 cases not run"), 1u) << out;
  EXPECT_EQ(occurrences(out, "avoid flash on cpu (see the recommendation)"), 2u) << out;
  // The findings that restate those blocks are not said again: their remedy is the block's.
  EXPECT_EQ(occurrences(out, "variant-crash"), 1u) << out;
  EXPECT_NE(out.find("→ variant-crash: avoid flash on cpu"), std::string::npos) << out;
  EXPECT_EQ(out.find("cases-skipped"), std::string::npos) << out;
  EXPECT_EQ(out.find("Not run ("), std::string::npos) << out;
}

TEST(Console, OneVariantFailingEveryCaseIsOneBlockOfAtMostEightLines) {
  Report r = sdpa_fixtures::budget_spent();
  std::erase_if(r.results, [](const CaseResult& x) { return x.probe == Probe::python; });
  r.shrinks.clear();
  sdpa_fixtures::advise(r);
  const std::string out = report::render_console(r, {false, true, 100});
  const auto failures = section(out, "Failures (5)");
  ASSERT_FALSE(failures.empty()) << out;
  EXPECT_LE(failures.size(), 8u) << out;
  size_t blocks = 0;
  for (const std::string& line : failures) {
    EXPECT_LE(display_width(line), 100u) << line;
    blocks += line.rfind("  ✗ ", 0) == 0;
  }
  EXPECT_EQ(blocks, 1u) << out;
}

TEST(Console, APoisonedDeviceIsOneBlock) {
  Report r = sdpa_fixtures::no_gpu();
  for (size_t i = 0; i < 3; ++i) {
    CaseResult& x = r.results[i];
    x.status = Status::error;
    x.canary = fmt::format("failed: RuntimeError: deferred error {}", i + 10);
    x.reason = "poisoned the device: canary failed after it: " + x.canary;
  }
  sdpa_fixtures::advise(r);
  // One finding for the worker, naming its three cases.
  const auto poisoned = std::find_if(r.findings.begin(), r.findings.end(),
                                     [](const Finding& f) { return f.id == "device-poisoned"; });
  ASSERT_NE(poisoned, r.findings.end());
  EXPECT_EQ(poisoned->case_ids.size(), 3u);
  EXPECT_EQ(std::count_if(r.findings.begin(), r.findings.end(),
                          [](const Finding& f) { return f.id == "device-poisoned"; }),
            1);
  const std::string out = report::render_console(r, {false, true, 100});
  EXPECT_EQ(occurrences(out, "! ERROR  cpu · libtorch · flash · 3 cases\n"), 1u) << out;
  EXPECT_EQ(occurrences(out, "AMD_SERIALIZE_KERNEL=3"), 1u) << out;
  EXPECT_EQ(occurrences(out, "device-poisoned"), 1u) << out;
  const std::string md = report::render_markdown(r);
  EXPECT_EQ(occurrences(md, "· flash · 3 cases</summary>"), 1u) << md;
  EXPECT_EQ(occurrences(md, "AMD_SERIALIZE_KERNEL=3"), 1u) << md;
}

// One worker's poisoning cases are one finding, which every cause of those cells carries (two
// causes here: the canaries failed for two reasons); another variant's are its own.
TEST(Causes, EachCauseOfAPoisonedWorkerCarriesItsOneFinding) {
  Report r = sdpa_fixtures::no_gpu();
  const std::string whys[] = {"RuntimeError: deferred error", "HIP error: invalid argument",
                              "RuntimeError: deferred error"};
  for (size_t i : {0, 1, 3}) {
    CaseResult& x = r.results[i];
    x.status = Status::error;
    x.canary = "failed: " + whys[i % 3];
    x.reason = "poisoned the device: canary failed after it: " + x.canary;
  }
  sdpa_fixtures::advise(r);
  const auto causes = report::detail::failure_causes(r);
  ASSERT_EQ(causes.size(), 3u);
  ASSERT_NE(causes[0].finding, nullptr);
  EXPECT_EQ(causes[0].finding->id, "device-poisoned");
  EXPECT_EQ(causes[0].finding->case_ids,
            (std::vector<std::string>{r.results[0].case_id, r.results[1].case_id}));
  EXPECT_EQ(causes[1].finding, causes[0].finding); // flash's other reason
  ASSERT_NE(causes[2].finding, nullptr);           // math
  EXPECT_NE(causes[2].finding, causes[0].finding);
  EXPECT_EQ(causes[2].finding->case_ids, std::vector<std::string>{r.results[3].case_id});
}

// A number's sign and notation belong to it: the values a mismatch got and expected differ from
// cell to cell, and cells that differ in nothing else are one cause.
TEST(Causes, ANumberIsMaskedWithItsSignAndExponent) {
  Report r = sdpa_fixtures::no_gpu();
  const char* expected[] = {"0.0187", "-0.0298", "-3.1e-05"};
  for (size_t i = 0; i < 3; ++i) {
    CaseResult& x = r.results[i];
    x.status = Status::mismatch;
    x.reason = fmt::format("all-zero output where the oracle is not: 12 of 4096 elements outside "
                           "atol=1e-05 + rtol=1e-05*|ref| (first at index {}: got 0, expected {})",
                           i * 7, expected[i]);
  }
  // A dash between two numbers is no sign: a range is not a pair of numbers (math's cells).
  r.results[3].status = r.results[4].status = Status::error;
  r.results[3].reason = "rows 8-16 failed";
  r.results[4].reason = "rows 8 16 failed";
  const auto causes = report::detail::failure_causes(r);
  ASSERT_EQ(causes.size(), 3u);
  EXPECT_EQ(causes[0].results.size(), 3u);
  EXPECT_EQ(causes[1].results.size(), 1u);
  EXPECT_EQ(causes[2].results.size(), 1u);
  sdpa_fixtures::advise(r);
  const std::string out = report::render_console(r, {false, true, 100});
  EXPECT_EQ(occurrences(out, "≠ MISMATCH  cpu · libtorch · flash · 3 cases\n"), 1u) << out;
}

TEST(Markdown, SaysEachCauseOnceWithAllItsCases) {
  const Report& r = fixture("budget_spent");
  const std::string md = report::render_markdown(r);
  const std::string failures = md.substr(md.find("## Failures (7)"));
  EXPECT_EQ(occurrences(failures, "<details><summary>"), 2u) << md;
  for (const CaseResult& x : r.results) {
    if (x.status != Status::crash) continue;
    EXPECT_NE(md.find("`" + x.case_id + "`"), std::string::npos) << x.case_id;
  }
  EXPECT_EQ(occurrences(md, "stopped after 5 failures in a row; 3 cases not run"), 1u) << md;
  EXPECT_EQ(occurrences(md, "`variant-crash`"), 1u) << md; // the remedy's, not a finding
  // One repro per cause, and one for each shrunk smallest case.
  EXPECT_EQ(occurrences(md, "```python\n#!/usr/bin/env python3"), 4u);
}

TEST(Shrunk, NamesTheProbeWhenTwoProbesShrinkOneVariant) {
  const std::string out = report::render_console(fixture("budget_spent"), {false, true, 100});
  EXPECT_NE(out.find("flash (libtorch) on cpu: crash for every case tried (1 case, 1.5 s)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("flash (python) on cpu: mismatch only when causal (2 cases, 2.2 s)"),
            std::string::npos)
      << out;
  // One shrink of a variant keeps the plain rule.
  Report one = fixture("budget_spent");
  one.shrinks.pop_back();
  EXPECT_NE(report::render_console(one, {false, true, 100}).find("  flash on cpu: crash for every"),
            std::string::npos);
}

TEST(Summary, SaysWhenTheExitCodeComesFromAFailedReRun) {
  Report r = fixture("no_gpu");
  ASSERT_FALSE(r.recommendations.empty());
  r.recommendations.front().verification = Verification{true, 1, 3, 0.5, "a fresh python worker",
                                                         "fp32-b1-h4:2-q96-k96-d64: crash"};
  r.exit_code = 1;
  const std::string why = "exit code 1 (a re-run under the recommended flags failed)";
  EXPECT_NE(sdpa_test::unwrapped(report::render_console(r, {false, true, 100})).find(why),
            std::string::npos);
  EXPECT_NE(report::render_markdown(r).find(why), std::string::npos);
  r.exit_code = 0; // the re-run failed but was not gated on: nothing to explain
  EXPECT_EQ(report::render_console(r, {false, true, 100}).find("re-run under"), std::string::npos);
}

// Bad input to the readers of files the doctor did not write: reports (diff, merge,
// repro --report), known-issue files and case files, through the real binary. Each row of the
// table must be a clean usage error (exit 2, one line on stderr, no crash text) that names what is
// wrong and never shows the JSON library's "[json.exception..." prefix. Below the table, what must
// still work: a merge that skips one bad report and merges the rest, the same report given twice,
// a case file read from stdin or from a FIFO, and a regex searched in a long text.
#include "hardening/hardening_support.hpp"

#include "advice/advice.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

using nlohmann::json;
using sdpa_hardening::crash_problem;
using sdpa_hardening::k_small_plan;
using sdpa_hardening::row_argv;
using sdpa_hardening::run_row;
using sdpa_hardening::usage_error_problem;
using sdpa_test::run_binary;

namespace {

// A case of the golden report every report fixture is made from.
const std::string k_case_id = "fp32-b1-h8-q64-k64-d32";

json golden_report() {
  const std::string golden = sdpa_test::source_path("tests/report/golden/no_gpu.json");
  return json::parse(sdpa_test::read_file(golden));
}

// The golden report with one edit to its first result.
template <typename Edit> std::string edited_report(Edit edit) {
  json doc = golden_report();
  edit(doc["results"][0]);
  return doc.dump();
}

std::string issues_with_stderr(const std::string& pattern) {
  return json::array({{{"id", "x"}, {"title", "t"}, {"advice", "a"},
                       {"match", {{"stderr", pattern}}}}})
      .dump();
}

// `n` alternatives of literal words: long, flat, and a real regex.
std::string alternation(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += (i ? "|word" : "word") + std::to_string(i);
  return out;
}

// The files the rows point at.
void write_fixtures(const sdpa_test::TempDir& dir) {
  const auto put = [&](const std::string& name, const std::string& text) {
    sdpa_test::write_file(dir.file(name), text);
  };
  put("good.json", golden_report().dump());
  // 401 digits where a time belongs: more than a double holds.
  std::string big = edited_report([](json& r) { r["metrics"]["time_ms"] = "@"; });
  big.replace(big.find("\"@\""), 3, std::string(401, '9'));
  put("bignum.json", big);
  put("case-id-null.json", edited_report([](json& r) { r["case_id"] = nullptr; }));
  put("device-number.json", edited_report([](json& r) { r["device"] = 5; }));
  put("device-unknown.json", edited_report([](json& r) { r["device"] = "gpu7"; }));
  put("case-d-negative.json", edited_report([](json& r) { r["case"]["d"] = -5; }));
  put("time-text.json", edited_report([](json& r) { r["metrics"]["time_ms"] = "fast"; }));
  put("time-negative.json", edited_report([](json& r) { r["metrics"]["time_ms"] = -1.5; }));
  put("probe-unknown.json", edited_report([](json& r) { r["probe"] = "gpu"; }));
  put("no-case.json", edited_report([](json& r) { r.erase("case"); }));
  put("case-id-path.json", edited_report([](json& r) { r["case_id"] = "../../../etc/passwd"; }));
  put("directions-status.json",
      edited_report([](json& r) { r["directions"] = {{"forward", "fine"}}; }));
  put("directions-key.json",
      edited_report([](json& r) { r["directions"] = {{"sideways", "pass"}}; }));
  put("directions-array.json",
      edited_report([](json& r) { r["directions"] = json::array({"pass"}); }));
  json twice = golden_report();
  twice["results"].push_back(twice["results"][0]);
  put("result-twice.json", twice.dump());
  put("result-foreign-device.json", edited_report([](json& r) { r["device"] = "cuda:3"; }));
  sdpa_hardening::make_sparse_file(dir.file("huge-report.json"), 2LL << 30);
  sdpa_hardening::make_sparse_file(dir.file("huge-journal.jsonl"), 5LL << 30);

  put("issues-nested.json",
      issues_with_stderr(std::string(20000, '(') + "a" + std::string(20000, ')')));
  put("issues-nested-17.json",
      issues_with_stderr(std::string(17, '(') + "a" + std::string(17, ')')));
  put("issues-long.json", issues_with_stderr(alternation(400)));

  put("case-u64.jsonl", R"({"dtype":"fp32","b":18446744073709551615,"h":1,"l":8,"d":8})" "\n");
  put("case-bignum.jsonl",
      R"({"dtype":"fp32","b":1,"h":1,"l":8,"d":)" + std::string(401, '9') + "}\n");
}

// Written once, removed when the test binary ends.
const std::string& fixture_dir() {
  static const sdpa_hardening::FixtureDir dir(write_fixtures);
  return dir.path();
}

struct Row {
  const char* name;
  std::vector<std::string> argv; // after the binary; "@" at the start is the fixture directory
  std::string names;             // the error line must contain this
};

void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

std::vector<Row> rows() {
  const std::vector<std::string> ki = {"known-issues", "--no-devices", "--known-issues"};
  const auto known_issues = [&](const std::string& file) {
    std::vector<std::string> argv = ki;
    argv.push_back(file);
    return argv;
  };
  return {
      // a number no double holds
      {"diff_number_401_digits", {"diff", "@/good.json", "@/bignum.json"}, "number overflow"},
      {"diff_baseline_number_401_digits", {"diff", "@/bignum.json", "@/good.json"},
       "number overflow"},
      {"repro_report_number_401_digits", {"repro", k_case_id, "--report", "@/bignum.json"},
       "number overflow"},
      // a field of the wrong type or an impossible value, named
      {"diff_case_id_null", {"diff", "@/good.json", "@/case-id-null.json"}, "'case_id'"},
      {"diff_device_number", {"diff", "@/good.json", "@/device-number.json"}, "'device'"},
      {"diff_device_unknown", {"diff", "@/good.json", "@/device-unknown.json"}, "'device'"},
      {"diff_case_d_negative", {"diff", "@/good.json", "@/case-d-negative.json"},
       "d must be positive"},
      {"diff_time_ms_text", {"diff", "@/good.json", "@/time-text.json"}, "'metrics.time_ms'"},
      {"diff_time_ms_negative", {"diff", "@/good.json", "@/time-negative.json"},
       "'metrics.time_ms'"},
      {"diff_probe_unknown", {"diff", "@/good.json", "@/probe-unknown.json"}, "'probe'"},
      {"diff_no_case", {"diff", "@/good.json", "@/no-case.json"}, "'case'"},
      // a case id is its case's name, never a path
      {"diff_case_id_is_a_path", {"diff", "@/good.json", "@/case-id-path.json"},
       "'case_id' is not the id of its case"},
      {"repro_report_case_id_is_a_path", {"repro", k_case_id, "--report", "@/case-id-path.json"},
       "'case_id' is not the id of its case"},
      {"repro_report_device_number", {"repro", k_case_id, "--report", "@/device-number.json"},
       "'device'"},
      // a verdict per direction is forward and backward, each a status
      {"diff_directions_unknown_status", {"diff", "@/good.json", "@/directions-status.json"},
       "'directions.forward' is not a status: \"fine\""},
      {"diff_directions_unknown_key", {"diff", "@/good.json", "@/directions-key.json"},
       "unknown direction 'sideways'"},
      {"diff_directions_array", {"diff", "@/good.json", "@/directions-array.json"},
       "'directions' must be an object"},
      {"repro_report_directions_unknown_status",
       {"repro", k_case_id, "--report", "@/directions-status.json"},
       "'directions.forward' is not a status"},
      // one result per cell, each on a device the run targeted
      {"diff_result_twice", {"diff", "@/good.json", "@/result-twice.json"},
       "a second result for the cell " + k_case_id + " on cpu"},
      {"diff_baseline_result_twice", {"diff", "@/result-twice.json", "@/good.json"},
       "a second result for the cell"},
      {"diff_result_outside_targets", {"diff", "@/good.json", "@/result-foreign-device.json"},
       "is outside the report's targets"},
      // size
      {"diff_report_2gb_sparse", {"diff", "@/good.json", "@/huge-report.json"},
       "the limit is 1024 MiB"},
      {"repro_report_2gb_sparse", {"repro", k_case_id, "--report", "@/huge-report.json"},
       "the limit is 1024 MiB"},
      {"report_journal_5gb_sparse", {"report", "@/huge-journal.jsonl"}, "the limit is 4096 MiB"},
      // stderr regexes std::regex would recurse on too deeply
      {"known_issues_regex_nested_20000", known_issues("@/issues-nested.json"), "nested"},
      {"check_known_issues_regex_nested_20000",
       {"check", "--known-issues", "@/issues-nested.json"},
       "nested"},
      {"known_issues_regex_nested_17", known_issues("@/issues-nested-17.json"), "nested 17 deep"},
      {"known_issues_regex_too_long", known_issues("@/issues-long.json"), "bytes long"},
      {"known_issues_dev_zero", known_issues("/dev/zero"), "not a regular file"},
      // versions and case files
      {"known_issues_torch_not_a_version", {"known-issues", "--no-devices", "--torch", "banana"},
       "--torch 'banana'"},
      {"check_case_file_b_u64", {"check", "--case-file", "@/case-u64.jsonl"},
       "'b' is out of range"},
      {"cases_case_file_b_u64", {"cases", "--case-file", "@/case-u64.jsonl"},
       "'b' is out of range"},
      {"cases_case_file_number_401_digits", {"cases", "--case-file", "@/case-bignum.jsonl"},
       "number overflow"},
  };
}

class BadReaderInput : public ::testing::TestWithParam<Row> {};

TEST_P(BadReaderInput, IsOneLineUsageErrorNamingTheProblem) {
  const Row& row = GetParam();
  const auto [run, seconds, shown] = run_row(row_argv(row.argv, fixture_dir()));
  EXPECT_EQ(usage_error_problem(run), "") << "exit " << run.exit_code << "\n" << run.err;
  EXPECT_NE(run.err.find(row.names), std::string::npos) << "does not say '" << row.names
                                                        << "':\n" << run.err;
  EXPECT_EQ(run.err.find("json.exception"), std::string::npos) << run.err;
  // Refused before anything is read whole or run.
  EXPECT_LT(seconds, 10.0);
}

INSTANTIATE_TEST_SUITE_P(Table, BadReaderInput, ::testing::ValuesIn(rows()),
                         [](const auto& row_info) { return std::string(row_info.param.name); });

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::string line;
  for (char c : text) {
    if (c != '\n') {
      line += c;
      continue;
    }
    out.push_back(line);
    line.clear();
  }
  if (!line.empty()) out.push_back(line);
  return out;
}

// ---- numbers a report may hold, printed in a few characters ------------------------------------

TEST(ReportNumbers, AHugeTimeIsPrintedShort) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("slow.json"),
                        edited_report([](json& r) { r["metrics"]["time_ms"] = 1e308; }));
  for (const std::string format : {"", "--markdown"}) {
    std::vector<std::string> argv = {sdpa_test::doctor(), "diff", fixture_dir() + "/good.json",
                                     dir.file("slow.json")};
    if (!format.empty()) argv.insert(argv.end(), {format, "-"});
    const auto run = run_binary(argv);
    EXPECT_EQ(crash_problem(run), "") << run.err;
    EXPECT_NE(run.out.find("1e+305 s"), std::string::npos) << format << ":\n" << run.out;
    for (const std::string& line : lines_of(run.out))
      EXPECT_LT(line.size(), 240u) << format << ": " << line.substr(0, 200);
  }
}

// ---- merge: one bad report is skipped, the rest merged --------------------------------------

TEST(MergeReaders, SkipsEachBadReportWithOneLineAndMergesTheRest) {
  const std::string d = fixture_dir();
  const std::vector<std::string> bad = {"bignum.json", "case-id-null.json", "device-number.json",
                                        "case-d-negative.json", "time-text.json"};
  sdpa_test::TempDir out;
  std::vector<std::string> argv = {sdpa_test::doctor(), "merge", "--json", out.file("fleet.json"),
                                   d + "/good.json"};
  for (const std::string& f : bad) argv.push_back(d + "/" + f);
  const auto run = run_binary(argv);
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_EQ(run.exit_code, 2) << run.err; // as for any skipped input
  const auto err = lines_of(run.err);
  ASSERT_EQ(err.size(), bad.size()) << run.err;
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_NE(err[i].find(bad[i] + ": skipped: "), std::string::npos) << err[i];
    EXPECT_EQ(err[i].find("json.exception"), std::string::npos) << err[i];
  }
  const json fleet = json::parse(sdpa_test::read_file(out.file("fleet.json")));
  EXPECT_EQ(fleet["nodes"].size(), 1u) << fleet.dump();
  EXPECT_EQ(fleet["skipped"].size(), bad.size()) << fleet.dump();
}

// One result per cell, each on a device the run targeted: a report holding a second result for a
// cell, or a cell outside its targets, is skipped naming that cell; the good one is merged.
TEST(MergeReaders, SkipsAReportWithADuplicateResultOrACellOutsideItsTargets) {
  const std::string d = fixture_dir();
  sdpa_test::TempDir out;
  const auto run = run_binary({sdpa_test::doctor(), "merge", "--json", out.file("fleet.json"),
                               d + "/good.json", d + "/result-twice.json",
                               d + "/result-foreign-device.json"});
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_EQ(run.exit_code, 2) << run.err;
  const auto err = lines_of(run.err);
  ASSERT_EQ(err.size(), 2u) << run.err;
  EXPECT_NE(err[0].find("result-twice.json: skipped: "), std::string::npos) << err[0];
  EXPECT_NE(err[0].find("a second result for the cell " + k_case_id + " on cpu"),
            std::string::npos)
      << err[0];
  EXPECT_NE(err[1].find("result-foreign-device.json: skipped: "), std::string::npos) << err[1];
  EXPECT_NE(err[1].find("the cell " + k_case_id + " on cuda:3"), std::string::npos) << err[1];
  EXPECT_NE(err[1].find("is outside the report's targets"), std::string::npos) << err[1];
  const json fleet = json::parse(sdpa_test::read_file(out.file("fleet.json")));
  EXPECT_EQ(fleet["nodes"].size(), 1u) << fleet.dump();
  EXPECT_EQ(fleet["skipped"].size(), 2u) << fleet.dump();
}

TEST(MergeReaders, SameReportGivenTwiceIsOneNodeWithAWarning) {
  const std::string good = fixture_dir() + "/good.json";
  sdpa_test::TempDir out;
  ::symlink(good.c_str(), out.file("link.json").c_str());
  const auto run = run_binary({sdpa_test::doctor(), "merge", "--json", out.file("fleet.json"), good,
                               fixture_dir() + "/./good.json", out.file("link.json")});
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err; // a warning, not a skipped input
  const auto err = lines_of(run.err);
  ASSERT_EQ(err.size(), 2u) << run.err;
  for (const std::string& line : err)
    EXPECT_NE(line.find("warning: "), std::string::npos) << line;
  EXPECT_NE(err[1].find("link.json: given more than once"), std::string::npos) << run.err;
  const json fleet = json::parse(sdpa_test::read_file(out.file("fleet.json")));
  EXPECT_EQ(fleet["nodes"].size(), 1u) << fleet.dump();
  EXPECT_TRUE(fleet["skipped"].empty()) << fleet.dump();
}

// ---- case files from a stream ---------------------------------------------------------------

// Runs `argv` with stdin from `input` (a file), through sh only for the redirection.
sdpa_test::RunResult run_with_stdin(const std::string& input, std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/bin/sh", "-c", "f=$1; shift; exec \"$@\" < \"$f\"", "sh", input});
  return run_binary(argv);
}

const std::string k_case_line = R"({"dtype":"fp32","b":1,"h":1,"l":8,"d":8})";
const std::string k_case_line_id = "fp32-b1-h1-q8-k8-d8";

TEST(CaseFileStream, ReadsCasesFromStdin) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("cases.jsonl"), "# from stdin\n" + k_case_line + "\n");
  const auto run =
      run_with_stdin(dir.file("cases.jsonl"), {sdpa_test::doctor(), "cases", "--case-file", "-"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find(k_case_line_id), std::string::npos) << run.out;
}

TEST(CaseFileStream, CheckRunsTheCasesItReadFromStdin) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("cases.jsonl"), k_case_line + "\n");
  const auto run = run_with_stdin(
      dir.file("cases.jsonl"),
      {sdpa_test::doctor(), "check", "--case-file", "-", "--probe", "reference", "--variant",
       "ref-math", "--json", dir.file("r.json"), "--run-dir", dir.file("run")});
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  ASSERT_EQ(report["results"].size(), 1u) << report["results"].dump();
  EXPECT_EQ(report["results"][0]["case_id"], k_case_line_id);
  EXPECT_EQ(report["results"][0]["status"], "pass");
}

TEST(CaseFileStream, BadLineOnStdinIsOneLineErrorNamingTheLine) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("cases.jsonl"), k_case_line + "\n{\"dtype\":\n");
  const auto run =
      run_with_stdin(dir.file("cases.jsonl"), {sdpa_test::doctor(), "cases", "--case-file", "-"});
  EXPECT_EQ(usage_error_problem(run), "") << run.err;
  EXPECT_NE(run.err.find("-:2: not JSON: "), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("json.exception"), std::string::npos) << run.err;
}

TEST(CaseFileStream, StreamOverTheCapIsRefused) {
  // 70 MiB of comment lines through a pipe: no size to check first, so the read stops at the cap.
  const auto run = run_binary(
      {"/bin/sh", "-c", "yes '#' | head -c 73400320 | exec \"$0\" cases --case-file -",
       sdpa_test::doctor()});
  EXPECT_EQ(usage_error_problem(run), "") << run.err;
  EXPECT_NE(run.err.find("larger than 64 MiB"), std::string::npos) << run.err;
}

TEST(CaseFileStream, ReadsCasesFromAFifo) {
  sdpa_test::TempDir dir;
  const std::string fifo = dir.file("cases.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // The writer blocks in open() until the doctor opens the FIFO to read it.
  std::thread writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    const std::string text = k_case_line + "\n";
    (void)!::write(fd, text.data(), text.size());
    ::close(fd);
  });
  sdpa_test::RunOptions options;
  options.timeout_s = 30;
  const auto run = run_binary({sdpa_test::doctor(), "cases", "--case-file", fifo}, options);
  // Had the doctor never opened it, this lets the writer's open() return.
  const int unblock = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  writer.join();
  if (unblock >= 0) ::close(unblock);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find(k_case_line_id), std::string::npos) << run.out;
}

// ---- files of the torch under test and of the plugin cache ---------------------------------
//
// A torch the doctor is pointed at is the user's tree: its torch/version.py, and the marker a
// failed plugin build leaves in the cache, are read only when they are regular files, without
// blocking, and up to a cap. A fake torch package on PYTHONPATH stands in for the torch.

class TorchFiles : public ::testing::Test {
protected:
  void SetUp() override {
    if (sdpa_hardening::torch_worker().empty()) GTEST_SKIP() << "the libtorch worker is not built";
    if (::access(k_python, X_OK) != 0) GTEST_SKIP() << "no " << k_python;
    std::filesystem::create_directories(m_dir.file("site/torch/lib"));
    sdpa_test::write_file(m_dir.file("site/torch/__init__.py"),
                          "__version__ = '0.0.1'\nfrom . import version\n"
                          "class _C:\n    _GLIBCXX_USE_CXX11_ABI = 1\n");
    sdpa_test::write_file(m_dir.file("site/torch/lib/libtorch_cpu.so"), "");
  }
  std::string version_py() const { return m_dir.file("site/torch/version.py"); }
  std::string cache() const { return m_dir.file("cache"); }

  // A libtorch check of that torch; its JSON report's text (empty when none was written).
  std::string check(sdpa_test::RunResult& run) const {
    sdpa_test::RunOptions options;
    options.timeout_s = 60;
    options.set_env = {{"PYTHONPATH", m_dir.file("site")},
                       {"SDPA_DOCTOR_CACHE_DIR", cache()},
                       {"CXX", "/bin/false"}}; // a build that fails at once, leaving its marker
    const std::string json_path = m_dir.file("r.json");
    std::filesystem::remove(json_path);
    run = run_binary({sdpa_test::doctor(), "check", "-q", "--probe", "libtorch", "--python",
                      k_python, "--variant", "math", "--case", "dtype=fp32,b=1,h=1,l=8,d=8",
                      "--no-shrink", "--run-dir", m_dir.file("run"), "--json", json_path},
                     options);
    return sdpa_test::read_file(json_path);
  }

  static constexpr const char* k_python = "/usr/bin/python3";
  sdpa_test::TempDir m_dir;
};

TEST_F(TorchFiles, VersionPyThatIsAFifoOrDevZeroIsNamedNotRead) {
  for (const bool fifo : {true, false}) {
    std::filesystem::remove(version_py());
    if (fifo) ASSERT_EQ(::mkfifo(version_py().c_str(), 0644), 0);
    else std::filesystem::create_symlink("/dev/zero", version_py());
    sdpa_test::RunResult run;
    const std::string report = check(run);
    EXPECT_EQ(crash_problem(run), "") << run.err;
    const std::string said = fifo ? "version.py is not a regular file (a FIFO)"
                                  : "version.py is not a regular file (a character device)";
    EXPECT_NE(report.find(said), std::string::npos) << run.err << "\n" << report.substr(0, 2000);
  }
}

TEST_F(TorchFiles, FailedBuildMarkerThatIsAFifoOrDevZeroIsNamedNotRead) {
  sdpa_test::write_file(version_py(), "__version__ = '0.0.1'\ngit_version = 'fake'\n");
  sdpa_test::RunResult first;
  check(first); // the build fails and leaves its marker
  ASSERT_EQ(crash_problem(first), "") << first.err;
  std::string marker;
  for (const auto& e : std::filesystem::recursive_directory_iterator(cache()))
    if (e.path().extension() == ".failed") marker = e.path().string();
  ASSERT_FALSE(marker.empty()) << "no .failed marker in " << cache() << "\n" << first.err;
  for (const bool fifo : {true, false}) {
    std::filesystem::remove(marker);
    if (fifo) ASSERT_EQ(::mkfifo(marker.c_str(), 0644), 0);
    else std::filesystem::create_symlink("/dev/zero", marker);
    sdpa_test::RunResult run;
    const std::string report = check(run);
    EXPECT_EQ(crash_problem(run), "") << run.err;
    EXPECT_NE(report.find(".failed is not a regular file"), std::string::npos)
        << run.err << "\n" << report.substr(0, 2000);
    EXPECT_EQ(report.find("\\u0000"), std::string::npos) << "NULs reached the report";
  }
}

// What torch_facts.py says of a torch it cannot describe in one line per fact: the reason is what
// in the facts was wrong, said last on stderr (the doctor quotes that), never a NumPy warning
// from importing torch.
TEST_F(TorchFiles, MalformedTorchFactsAreNamedInTheFinding) {
  sdpa_test::write_file(version_py(), "__version__ = '0.0.1'\ngit_version = 'fake'\n");
  sdpa_test::write_file(m_dir.file("site/torch/__init__.py"),
                        "__version__ = '0.0.1'\nfrom . import version\n"
                        "class _C:\n    _GLIBCXX_USE_CXX11_ABI = 2\n"
                        "import warnings\n"
                        "warnings.warn('Failed to initialize NumPy: _ARRAY_API not found')\n");
  sdpa_test::RunResult run;
  const std::string report = check(run);
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_NE(report.find("abi=2 is neither 0 nor 1"), std::string::npos)
      << run.err << "\n" << report.substr(0, 2000);
  EXPECT_EQ(report.find("NumPy"), std::string::npos) << report.substr(0, 2000);
}

struct FactsRow {
  const char* name;
  std::string init;   // torch/__init__.py after its version line
  std::string reason; // what the last line on stderr says
};

TEST(TorchFacts, FactsThatAreNotOneLineEachAreRefusedSayingWhat) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  const std::string abi1 = "class _C:\n    _GLIBCXX_USE_CXX11_ABI = 1\n";
  const std::vector<FactsRow> rows = {
      {"abi_2", "class _C:\n    _GLIBCXX_USE_CXX11_ABI = 2\n", "abi=2 is neither 0 nor 1"},
      {"abi_text", "class _C:\n    _GLIBCXX_USE_CXX11_ABI = 'yes'\n", "abi=yes is not a number"},
      {"abi_missing", "", "abi=None is not a number"},
      {"include_empty", abi1 + "_include_paths = []\n", "include is empty"},
      {"include_with_separator", abi1 + "_include_paths = ['/t/a;b']\n", "include directory"},
      {"version_nul", abi1 + "__version__ = '2.0\\x00evil'\n", "version holds a NUL byte"},
      {"version_crlf", abi1 + "__version__ = '2.0\\r\\nabi=0'\n",
       "version holds a carriage return"},
      {"version_megabytes", abi1 + "__version__ = '9' * 3000000\n",
       "version is 3000000 characters long (at most 4096)"},
  };
  const std::string script = sdpa_test::source_path("src/workers/torch_plugin/torch_facts.py");
  for (const FactsRow& row : rows) {
    sdpa_test::TempDir dir;
    std::filesystem::create_directories(dir.file("torch/utils"));
    sdpa_test::write_file(dir.file("torch/version.py"), "git_version = 'fake'\n");
    sdpa_test::write_file(dir.file("torch/utils/__init__.py"), "");
    sdpa_test::write_file(dir.file("torch/utils/cpp_extension.py"),
                          "import torch\n\ndef include_paths():\n"
                          "    return getattr(torch, '_include_paths', ['/t/include'])\n");
    sdpa_test::write_file(dir.file("torch/__init__.py"),
                          "__version__ = '0.0.1'\nfrom . import version\n" + row.init);
    sdpa_test::RunOptions options;
    options.set_env = {{"PYTHONPATH", dir.path()}};
    const auto run = run_binary({"/usr/bin/python3", script}, options);
    EXPECT_EQ(run.exit_code, 1) << row.name << "\n" << run.out.substr(0, 400) << run.err;
    EXPECT_TRUE(run.out.empty()) << row.name << ": facts printed before the refusal";
    const auto lines = lines_of(run.err);
    ASSERT_FALSE(lines.empty()) << row.name;
    EXPECT_EQ(lines.back().rfind("torch_facts.py: " + row.reason, 0), 0u)
        << row.name << ": " << lines.back().substr(0, 300);
    EXPECT_LT(run.err.size(), 400u) << row.name;
  }
}

// ---- a stderr regex over a long text --------------------------------------------------------

sdpa_doctor::CaseResult failed_case_with(const std::string& stderr_tail) {
  sdpa_doctor::CaseResult r;
  r.status = sdpa_doctor::Status::error;
  r.stderr_tail = stderr_tail;
  return r;
}

const sdpa_doctor::advice::IssueRule& only_rule(const sdpa_doctor::advice::KnownIssues& issues) {
  return issues.issues.at(0).rules.at(0);
}

TEST(KnownIssueRegex, LongTextIsSearchedLineByLineWithoutOverflowingTheStack) {
  // libstdc++'s default executor recursed once per character and alternative: this overflowed
  // the stack on 2000 characters of one line.
  std::string pattern = "^(?:";
  for (int i = 0; i < 200; ++i) pattern += i ? "|a" : "a";
  pattern += ")*$";
  auto issues = sdpa_doctor::advice::parse_known_issues(issues_with_stderr(pattern), "t.json");
  ASSERT_TRUE(issues) << issues.error().message;
  // Searched in the line's first k_max_regex_line bytes, all of them 'a'.
  const std::string long_line(100000, 'a');
  EXPECT_TRUE(sdpa_doctor::advice::rule_matches(only_rule(*issues), failed_case_with(long_line),
                                                {}));
  // A match on a later line of a long tail is still found.
  auto plain = sdpa_doctor::advice::parse_known_issues(
      issues_with_stderr("Memory access fault by GPU node"), "t.json");
  ASSERT_TRUE(plain) << plain.error().message;
  const std::string tail =
      std::string(5000, 'x') + "\n:0:rocdevice.cpp: Memory access fault by GPU node-2\n";
  EXPECT_TRUE(sdpa_doctor::advice::rule_matches(only_rule(*plain), failed_case_with(tail), {}));
  // A pattern matches within one line, never across two.
  auto across = sdpa_doctor::advice::parse_known_issues(issues_with_stderr("first\\ssecond"),
                                                        "t.json");
  ASSERT_TRUE(across) << across.error().message;
  EXPECT_FALSE(sdpa_doctor::advice::rule_matches(only_rule(*across),
                                                 failed_case_with("first\nsecond"), {}));
}

TEST(KnownIssueRegex, PatternAtTheLimitsStillLoads) {
  const std::string nested_16 = std::string(16, '(') + "a" + std::string(16, ')');
  EXPECT_TRUE(sdpa_doctor::advice::parse_known_issues(issues_with_stderr(nested_16), "t.json"));
  const std::string long_1024 = std::string(1024, 'x');
  EXPECT_TRUE(sdpa_doctor::advice::parse_known_issues(issues_with_stderr(long_1024), "t.json"));
  // Escaped and bracketed parentheses are text, not groups.
  std::string literal;
  for (int i = 0; i < 40; ++i) literal += "\\([(]";
  EXPECT_TRUE(sdpa_doctor::advice::parse_known_issues(issues_with_stderr(literal), "t.json"));
}

} // namespace

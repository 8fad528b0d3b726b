// Bad command lines through the real binary: empty values (an unset variable in CI), flags that
// contradict each other, numbers that are not finite, outputs that would overwrite each other or
// an input, and cases torch forbids. Each row must be a clean usage error (exit 2, one line on
// stderr, nothing on stdout), found before anything runs. Below the table: outputs that cannot be
// written (exit 4, one line), and outputs that must leave a journal or a report untouched.
#include "hardening/hardening_support.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

using sdpa_hardening::k_small_plan;
using sdpa_hardening::Row;
using sdpa_hardening::row_argv;
using sdpa_hardening::run_row;
using sdpa_hardening::usage_error_problem;
using sdpa_test::doctor;
using sdpa_test::run_binary;

namespace {

void write_fixtures(const sdpa_test::TempDir& dir) {
  // An existing run directory: a report over its journal would otherwise be written.
  std::filesystem::create_directories(dir.file("run"));
  sdpa_test::write_file(dir.file("causal-mask.jsonl"),
                        R"({"dtype":"fp32","l":8,"d":8,"causal":true,"mask":"bool"})" "\n");
}

const std::string& fixture_dir() {
  static const sdpa_hardening::FixtureDir dir(write_fixtures);
  return dir.path();
}

std::vector<Row> rows() {
  return {
      // An empty value is an unset variable, never "not given".
      {"model_empty", {"check", "--model", ""}},
      {"case_file_empty_path", {"check", "--case-file", ""}},
      {"json_empty", {"check", "--json", ""}},
      {"markdown_empty", {"check", "--markdown", ""}},
      {"junit_empty", {"check", "--junit", ""}},
      {"log_file_empty", {"check", "--log-file", ""}},
      {"device_empty", {"check", "--device", ""}},
      {"variant_empty", {"check", "--variant", ""}},
      {"probe_empty", {"check", "--probe", ""}},
      {"dtype_empty", {"check", "--dtype", ""}},
      {"python_empty", {"check", "--python", ""}},
      {"run_dir_empty", {"check", "--run-dir", ""}},
      {"oracle_cache_empty", {"check", "--oracle-cache", ""}},
      {"tolerance_empty", {"check", "--tolerance", ""}},
      {"time_budget_empty", {"check", "--time-budget", ""}},
      {"target_empty", {"check", "--target", ""}},
      {"fail_on_empty", {"check", "--fail-on", ""}},
      {"resume_empty", {"check", "--resume", ""}, false},
      {"cases_model_empty", {"cases", "--model", ""}, false},
      {"cases_case_file_empty", {"cases", "--case-file", ""}, false},
      {"cases_dtype_empty", {"cases", "--dtype", ""}, false},
      {"devices_json_empty", {"devices", "--no-hip", "--no-rocm-smi", "--json", ""}, false},
      // Flags that contradict each other.
      {"probe_python_and_no_python", {"check", "--probe", "python", "--no-python"}, false},
      {"probe_list_with_python_and_no_python",
       {"check", "--probe", "reference,python", "--no-python", "--variant", "ref-math", "--case",
        "dtype=fp32,b=1,h=1,l=8,d=8"},
       false},
      // Numbers that are not finite, or out of range.
      {"time_budget_nan", {"check", "--time-budget", "nan"}},
      {"time_budget_inf", {"check", "--time-budget", "inf"}},
      {"oracle_cache_size_nan", {"check", "--oracle-cache-size", "nan"}},
      {"diff_time_threshold_nan",
       {"diff", "%/no_gpu.json", "%/no_gpu.json", "--time-threshold", "nan"},
       false},
      {"repro_atol_nan", {"repro", "fp16-b1-h8-q128-k128-d64", "--atol", "nan"}, false},
      {"repro_atol_inf", {"repro", "fp16-b1-h8-q128-k128-d64", "--atol", "inf"}, false},
      {"repro_rtol_nan", {"repro", "fp16-b1-h8-q128-k128-d64", "--rtol", "nan"}, false},
      {"devices_timeout_nan", {"devices", "--no-hip", "--no-rocm-smi", "--timeout", "nan"}, false},
      // Outputs that would overwrite each other, the journal, or run together on stdout.
      {"json_and_markdown_same_file", {"check", "--json", "@/r.out", "--markdown", "@/r.out"}},
      {"json_and_junit_same_file_spelt_apart",
       {"check", "--json", "@/r.out", "--junit", "@/./r.out"}},
      {"json_and_log_file_same_file", {"check", "--json", "@/r.out", "--log-file", "@/r.out"}},
      {"json_is_the_journal", {"check", "--run-dir", "@/run", "--json", "@/run/journal.jsonl"}},
      {"markdown_is_the_journal",
       {"check", "--run-dir", "@/run", "--markdown", "@/run/journal.jsonl"}},
      {"every_report_on_stdout", {"check", "--json", "-", "--markdown", "-", "--junit", "-"}},
      {"json_and_markdown_on_stdout", {"check", "--json", "-", "--markdown", "-"}},
      // torch refuses is_causal together with an explicit mask: not a backend's failure to report.
      {"case_causal_with_additive_mask",
       {"check", "--case", "dtype=fp32,l=8,d=8,causal,mask=additive"}},
      {"case_causal_with_bool_mask", {"check", "--case", "dtype=fp32,l=8,d=8,causal,mask=bool"}},
      {"case_file_causal_with_mask", {"check", "--case-file", "@/causal-mask.jsonl"}},
      {"cases_causal_with_mask", {"cases", "--case", "causal,mask=additive"}, false},
      // An empty value of an on/off key is no value, as `d=` is: it turns nothing on.
      {"case_causal_empty", {"check", "--case", "dtype=fp32,l=8,d=8,causal="}},
      {"case_backward_empty", {"check", "--case", "dtype=fp32,l=8,d=8,backward="}},
      {"case_large_empty", {"check", "--case", "dtype=fp32,l=8,d=8,large="}},
      {"case_masked_rows_empty", {"check", "--case", "dtype=fp32,l=8,d=8,mask=bool,masked_rows="}},
      // Rows 3, 7, ... are the fully masked ones: a shorter query has none to mask.
      {"case_masked_rows_short_query",
       {"check", "--case", "dtype=fp32,lq=3,lkv=8,d=8,mask=bool,masked_rows"}},
      // A bool mask is bool: a mask dtype equal to the case's dtype is no exception.
      {"case_mask_dtype_with_bool_mask",
       {"check", "--case", "dtype=fp32,l=8,d=8,mask=bool,mask_dtype=fp32"}},
      {"case_mask_dtype_without_mask", {"check", "--case", "dtype=fp16,l=8,d=8,mask_dtype=fp16"}},
      // A key given twice is a typo, not "the last one wins".
      {"case_key_twice", {"check", "--case", "dtype=fp32,l=8,d=8,d=16"}},
      {"cases_case_key_twice", {"cases", "--case", "dtype=fp32,l=8,d=8,dtype=fp16"}, false},
      // A window of no keys: leaving it out is how no window is written.
      {"case_window_zero", {"check", "--case", "dtype=fp32,l=8,d=8,window=0"}},
      // A case id is a case's name, never a path.
      {"repro_case_id_is_a_path", {"repro", "../../../etc/passwd"}, false},
      // One planning rule: cases checks --dtype as check does.
      {"cases_dtype_unknown", {"cases", "--dtype", "fp8"}, false},
      {"cases_dtype_no_planned_case",
       {"cases", "--case", "dtype=fp16,l=8,d=8", "--dtype", "bf16"},
       false},
  };
}

class BadCliInput : public ::testing::TestWithParam<Row> {};

TEST_P(BadCliInput, IsOneLineUsageErrorWithExit2) {
  const Row& row = GetParam();
  const auto [run, seconds, shown] = run_row(row_argv(row.argv, fixture_dir(), row.small_plan));
  EXPECT_EQ(usage_error_problem(run), "") << shown << "\nexit " << run.exit_code << "\nstderr:\n"
                                          << run.err.substr(0, 1000);
  EXPECT_LT(seconds, 20.0) << shown;
}

INSTANTIATE_TEST_SUITE_P(Table, BadCliInput, ::testing::ValuesIn(rows()),
                         [](const auto& row_info) { return std::string(row_info.param.name); });

// The messages say what is true, not a guess.
TEST(BadCliMessages, EmptyValueNamesTheOption) {
  const auto run = run_binary({doctor(), "check", "--model", ""});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--model"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("empty"), std::string::npos) << run.err;
}

TEST(BadCliMessages, VariantOfAnotherProbeNamesTheProbesVariants) {
  const auto run = run_binary({doctor(), "check", "--probe", "reference", "--variant", "math",
                               "--case", "dtype=fp32,l=8,d=8"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("math is not a variant of the reference probe (its: ref-math, ref-flash)"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("GPU"), std::string::npos) << run.err;
}

TEST(BadCliMessages, GpuOnlyVariantOnTheCpuSaysSo) {
  const auto run = run_binary({doctor(), "check", "--probe", "libtorch", "--device", "cpu",
                               "--variant", "flash[ck]", "--case", "dtype=fp32,l=8,d=8"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("flash[ck] runs on a GPU only: no cuda:N target among cpu"),
            std::string::npos)
      << run.err;
}

TEST(BadCliMessages, NotFiniteNumberIsNamed) {
  const auto run = run_binary({doctor(), "check", "--time-budget", "nan"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--time-budget: expected a finite number from 0 to 86400, got 'nan'"),
            std::string::npos)
      << run.err;
}

TEST(BadCliMessages, CaseKeyGivenTwiceIsNamed) {
  const auto run = run_binary({doctor(), "cases", "--case", "dtype=fp32,l=8,d=8,d=16"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("'d' is given twice"), std::string::npos) << run.err;
}

TEST(BadCliMessages, EmptyOnOffValueSaysSo) {
  const auto run = run_binary({doctor(), "cases", "--case", "dtype=fp32,l=8,d=8,causal="});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("'causal' needs 0 or 1, got nothing"), std::string::npos) << run.err;
}

// What an on/off key took before still means what it meant.
TEST(BadCliMessages, OnOffValuesStillRead) {
  for (const auto& [spec, causal] : std::vector<std::pair<std::string, bool>>{
           {"causal", true}, {"causal=1", true}, {"causal=top_left", true},
           {"causal=true", true}, {"causal=yes", true},
           {"causal=0", false}, {"causal=false", false}, {"causal=no", false}}) {
    const auto run = run_binary({doctor(), "cases", "--case", "dtype=fp32,l=8,d=8," + spec});
    EXPECT_EQ(run.exit_code, 0) << spec << ": " << run.err;
    EXPECT_EQ(run.out.find("-causal") != std::string::npos, causal) << spec << ": " << run.out;
  }
}

// Decoding and chunked prefill align the diagonal bottom-right: its id says so.
TEST(BadCliMessages, BottomRightCausalRunsWhereQueriesAreFewerThanKeys) {
  const auto run = run_binary(
      {doctor(), "cases", "--case", "dtype=fp32,lq=2,lkv=9,d=8,causal=bottom_right"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("fp32-b1-h8-q2-k9-d8-causal_br"), std::string::npos) << run.out;
}

// At lq = lkv bottom-right is top-left exactly: the one case, with its one id.
TEST(BadCliMessages, BottomRightCausalOfASquareCaseIsTopLeft) {
  const auto run =
      run_binary({doctor(), "cases", "--case", "dtype=fp32,l=8,d=8,causal=bottom_right"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("fp32-b1-h8-q8-k8-d8-causal"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("causal_br"), std::string::npos) << run.out;
}

// More queries than keys leaves the first rows bottom-right without a key: torch leaves them
// undefined, so there is nothing to judge.
TEST(BadCliMessages, BottomRightCausalWithMoreQueriesThanKeysIsRefused) {
  const auto run = run_binary(
      {doctor(), "cases", "--case", "dtype=fp32,lq=9,lkv=8,d=8,causal=bottom_right"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(sdpa_test::line_count(run.err), 1) << run.err;
  EXPECT_NE(run.err.find("causal=bottom_right needs lq <= lkv, got lq=9 lkv=8"),
            std::string::npos)
      << run.err;
}

// ---- outputs that cannot be written: exit 4, one line ------------------------------------------

bool is_char_device(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

class FullDisk : public ::testing::Test {
protected:
  void SetUp() override {
    if (!is_char_device("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  }
};

TEST_F(FullDisk, LogFileThatCannotBeWrittenIsExit4AndOneLine) {
  std::vector<std::string> argv = {doctor(), "check", "--log-file", "/dev/full"};
  argv.insert(argv.end(), k_small_plan.begin(), k_small_plan.end());
  const auto run = run_binary(argv);
  EXPECT_EQ(run.exit_code, 4) << run.err;
  EXPECT_EQ(sdpa_test::line_count(run.err), 1) << run.err;
  EXPECT_NE(run.err.find("sdpa-doctor: error: cannot write the log file '/dev/full'"),
            std::string::npos)
      << run.err;
  // The diagnosis is not lost: the console still has it.
  EXPECT_NE(run.out.find("Summary:"), std::string::npos) << run.out;
}

TEST_F(FullDisk, VersionAndHelpOnAFullStdoutAreExit4AndOneLine) {
  for (const char* args : {"--version", "--help", "version", "check --help"}) {
    const auto run = run_binary(
        {"/bin/sh", "-c", std::string("exec \"$0\" ") + args + " >/dev/full", doctor()});
    EXPECT_EQ(run.exit_code, 4) << args << ": " << run.err;
    EXPECT_EQ(sdpa_test::line_count(run.err), 1) << args << ": " << run.err;
    EXPECT_NE(run.err.find("cannot write to stdout"), std::string::npos) << args << ": " << run.err;
  }
}

// ---- a stdout closed early (`| head -1`): exit 4 once every other output is written -----------

struct ClosedStdoutRun {
  int exit_code = -1;
  int signal = 0;
  std::string err;
};

// Runs the doctor with its stdout a pipe whose reader is already gone, as `| head -1` leaves it
// once head has its line, and SIGPIPE at its default, as a shell starts it.
ClosedStdoutRun run_into_closed_pipe(const std::vector<std::string>& args) {
  sdpa_test::TempDir dir;
  const std::string err_path = dir.file("stderr");
  std::vector<std::string> argv = args;
  argv.insert(argv.begin(), doctor());
  int fds[2];
  if (::pipe(fds) != 0) return {};
  ::close(fds[0]);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(err, 2);
    const int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::signal(SIGPIPE, SIG_DFL);
    ::alarm(120); // kept across exec: a hang ends as SIGALRM, a failed row, not a stuck suite
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ClosedStdoutRun out;
  if (WIFEXITED(status)) out.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
  out.err = sdpa_test::read_file(err_path);
  return out;
}

// Empty when `run` ended as a closed stdout should end: exit 4 and one line saying so.
std::string closed_stdout_problem(const ClosedStdoutRun& run) {
  if (run.signal != 0) return "killed by signal " + std::to_string(run.signal);
  if (run.exit_code != 4) return "exit " + std::to_string(run.exit_code) + ", expected 4: " + run.err;
  if (sdpa_test::line_count(run.err) != 1) return "not one line on stderr: " + run.err;
  if (run.err.find("sdpa-doctor: error: cannot write to stdout: Broken pipe") == std::string::npos)
    return "not the closed stdout's line: " + run.err;
  return {};
}

TEST(ClosedStdout, CasesWritesItsJsonFileThenExits4) {
  sdpa_test::TempDir dir;
  const auto run =
      run_into_closed_pipe({"cases", "--suite", "full", "--train", "--json", dir.file("f.json")});
  EXPECT_EQ(closed_stdout_problem(run), "");
  const auto doc = nlohmann::json::parse(sdpa_test::read_file(dir.file("f.json")), nullptr, false);
  ASSERT_TRUE(doc.is_object()) << "f.json was not written";
  EXPECT_FALSE(doc.at("cases").empty());
}

TEST(ClosedStdout, KnownIssuesExits4InOneLine) {
  EXPECT_EQ(closed_stdout_problem(run_into_closed_pipe({"known-issues", "--no-devices"})), "");
}

TEST(ClosedStdout, CheckWritesItsReportThenExits4) {
  sdpa_test::TempDir dir;
  std::vector<std::string> args = {"check", "-q", "--json", dir.file("r.json"), "--run-dir",
                                   dir.file("run")};
  args.insert(args.end(), k_small_plan.begin(), k_small_plan.end());
  EXPECT_EQ(closed_stdout_problem(run_into_closed_pipe(args)), "");
  const auto report =
      nlohmann::json::parse(sdpa_test::read_file(dir.file("r.json")), nullptr, false);
  ASSERT_TRUE(report.is_object()) << "r.json was not written";
  EXPECT_EQ(report.at("results").size(), 1u);
}

// ---- outputs never overwrite what the command reads -------------------------------------------

TEST(OutputsOverInputs, JournalAndReportsStayUntouched) {
  sdpa_test::TempDir dir;
  const std::string run_dir = dir.file("run");
  const std::string journal = run_dir + "/journal.jsonl";
  std::vector<std::string> argv = {doctor(), "check", "--run-dir", run_dir, "--json",
                                   dir.file("r.json")};
  argv.insert(argv.end(), k_small_plan.begin(), k_small_plan.end());
  const auto first = run_binary(argv);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string journal_bytes = sdpa_test::read_file(journal);
  const std::string report_bytes = sdpa_test::read_file(dir.file("r.json"));
  ASSERT_FALSE(journal_bytes.empty());

  // Each of these would succeed were its output another file: only the overlap refuses them.
  const std::vector<std::vector<std::string>> attempts = {
      {"check", "--resume", run_dir, "--json", journal},
      {"report", run_dir, "--markdown", journal},
      {"report", journal, "--json", journal},
      {"diff", dir.file("r.json"), dir.file("r.json"), "--json", dir.file("r.json")},
      {"merge", dir.file("r.json"), "--markdown", dir.file("r.json")},
  };
  for (std::vector<std::string> a : attempts) {
    a.insert(a.begin(), doctor());
    const auto run = run_binary(a);
    EXPECT_EQ(usage_error_problem(run), "") << a[1] << ": " << run.err;
    EXPECT_EQ(sdpa_test::read_file(journal), journal_bytes) << a[1];
    EXPECT_EQ(sdpa_test::read_file(dir.file("r.json")), report_bytes) << a[1];
  }
  // The same commands with an output of their own pass.
  const auto report = run_binary({doctor(), "report", run_dir, "--json", dir.file("again.json")});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  const auto diff = run_binary({doctor(), "diff", dir.file("r.json"), dir.file("r.json"), "--json",
                                dir.file("diff.json")});
  EXPECT_EQ(diff.exit_code, 0) << diff.err;
}

// One report on stdout is all stdout carries: no console table before it.
TEST(OutputsOverInputs, MarkdownOnStdoutIsAloneThere) {
  std::vector<std::string> argv = {doctor(), "check", "--markdown", "-"};
  argv.insert(argv.end(), k_small_plan.begin(), k_small_plan.end());
  const auto run = run_binary(argv);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out.rfind("# sdpa-doctor report\n", 0), 0u) << run.out.substr(0, 400);
  // The console's last line names the journal; the Markdown has no such line.
  EXPECT_EQ(run.out.find("\njournal: "), std::string::npos) << run.out;
}

} // namespace

// `sdpa-doctor check` end to end on this machine (no GPU): every probe through real child
// processes, the reports it writes checked by independent parsers, and injected faults caught.
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using nlohmann::json;
using sdpa_test::doctor;
using sdpa_test::read_file;
using sdpa_test::run_binary;
using sdpa_test::TempDir;

namespace {

const std::string k_python = SDPA_TEST_PYTHON;

bool python_has(const std::string& module) {
  if (k_python.empty() || ::access(k_python.c_str(), X_OK) != 0) return false;
  auto r = run_binary({k_python, "-c", "import " + module});
  return r.exit_code == 0;
}

sdpa_test::RunOptions with_env(std::map<std::string, std::string> env, int timeout_s = 120) {
  sdpa_test::RunOptions o;
  o.set_env = std::move(env);
  o.timeout_s = timeout_s;
  return o;
}

#ifdef SDPA_TEST_HAVE_TORCH_WORKER
constexpr bool k_torch_worker = true;
#else
constexpr bool k_torch_worker = false;
#endif

// The line a recommendation verified on `cases` cases carries, up to its timing.
std::string fmt_verified(size_t cases) {
  return "verified: " + std::to_string(cases) + "/" + std::to_string(cases) +
         " cases under these flags (a fresh python worker";
}

std::vector<json> results_of(const json& report, const std::string& probe,
                             const std::string& variant) {
  std::vector<json> out;
  for (const auto& r : report.at("results"))
    if (r.at("probe") == probe && r.at("variant") == variant) out.push_back(r);
  return out;
}

// The default `check` (quick suite, every probe) is run once for the whole suite. Its python
// probe needs torch: without it (a set-up with SDPA_DOCTOR_SKIP_TORCH=1) every test skips.
class DefaultCheck : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    if (!python_has("torch")) return;
    s_dir = new TempDir();
    s_run = new sdpa_test::RunResult(run_binary(
        {doctor(), "check", "--json", s_dir->file("r.json"), "--markdown", s_dir->file("r.md"),
         "--junit", s_dir->file("r.xml"), "--run-dir", s_dir->file("run"), "--python", k_python},
        with_env({{"NO_COLOR", "1"}}, 600)));
    s_report = new json(json::parse(read_file(s_dir->file("r.json")), nullptr, false));
  }
  void SetUp() override {
    if (s_run == nullptr) GTEST_SKIP() << "no torch in " << k_python << " for the python probe";
  }
  static void TearDownTestSuite() {
    delete s_report;
    delete s_run;
    delete s_dir;
  }
  static TempDir* s_dir;
  static sdpa_test::RunResult* s_run;
  static json* s_report;
};
TempDir* DefaultCheck::s_dir = nullptr;
sdpa_test::RunResult* DefaultCheck::s_run = nullptr;
json* DefaultCheck::s_report = nullptr;

TEST_F(DefaultCheck, ExitsZeroWithEveryCaseAccountedFor) {
  EXPECT_EQ(s_run->exit_code, 0) << s_run->out << s_run->err;
  ASSERT_FALSE(s_report->is_discarded()) << "r.json is not JSON";
  EXPECT_EQ(s_report->at("schema"), "sdpa-doctor/report/v1.7");
  EXPECT_EQ(s_report->at("exit_code"), 0);
  EXPECT_NE(s_run->out.find("Summary"), std::string::npos) << s_run->out;
  for (const auto& r : s_report->at("results")) {
    const std::string status = r.at("status");
    EXPECT_TRUE(status == "pass" || status == "unsupported")
        << r.at("probe") << " " << r.at("variant") << " " << r.at("case_id") << ": " << status
        << " " << r.value("reason", "");
  }
}

TEST_F(DefaultCheck, TorchBackendsPassThroughBothWorkers) {
  if (!python_has("torch")) GTEST_SKIP() << "no torch in " << k_python;
  std::vector<std::string> probes = {"python"};
  if (k_torch_worker) probes.push_back("libtorch");
  for (const auto& probe : probes) {
    for (const char* variant : {"math", "flash", "default"}) {
      auto rs = results_of(*s_report, probe, variant);
      ASSERT_GE(rs.size(), 24u) << probe << " " << variant;
      // Torch's CPU flash has no dropout: it refuses a dropout case cleanly.
      for (const auto& r : rs)
        EXPECT_EQ(r.at("status"), std::string(variant) == "flash" && r.at("case").contains("dropout")
                                      ? "unsupported"
                                      : "pass")
            << probe << " " << variant << r;
    }
    // mem-efficient and cuDNN have no CPU kernels: refused, with torch's own words.
    for (const char* variant : {"mem_efficient", "cudnn"}) {
      auto rs = results_of(*s_report, probe, variant);
      ASSERT_FALSE(rs.empty());
      for (const auto& r : rs) {
        EXPECT_EQ(r.at("status"), "unsupported") << r;
        EXPECT_FALSE(r.value("reason", "").empty()) << r;
      }
    }
  }
}

TEST_F(DefaultCheck, ReferenceKernelsPassTheQuickSuiteOnTheCpu) {
  for (const char* variant : {"ref-math", "ref-flash"}) {
    auto rs = results_of(*s_report, "reference", variant);
    ASSERT_GE(rs.size(), 24u) << variant;
    for (const auto& r : rs) {
      if (r.at("device") == "cpu") { // our kernels have no dropout: they decline it
        EXPECT_EQ(r.at("status"), r.at("case").contains("dropout") ? "unsupported" : "pass") << r;
      }
    }
  }
}

TEST_F(DefaultCheck, JsonValidatesAgainstTheSchema) {
  if (!python_has("jsonschema")) GTEST_SKIP() << "no jsonschema in " << k_python;
  auto r = run_binary({k_python, "-c",
                       "import json,sys,jsonschema\n"
                       "schema=json.load(open(sys.argv[1])); doc=json.load(open(sys.argv[2]))\n"
                       "jsonschema.validate(doc, schema); print('valid')",
                       sdpa_test::source_path("data/report.schema.json"), s_dir->file("r.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("valid"), std::string::npos);
}

TEST_F(DefaultCheck, JunitParsesWithOneTestcasePerResult) {
  if (!python_has("xml")) GTEST_SKIP();
  auto r = run_binary({k_python, "-c",
                       "import sys, xml.etree.ElementTree as ET\n"
                       "root=ET.parse(sys.argv[1]).getroot()\n"
                       "print(len(root.findall('.//testcase')))",
                       s_dir->file("r.xml")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::stoul(r.out), s_report->at("results").size());
}

TEST_F(DefaultCheck, JournalHoldsEveryOutcome) {
  const std::string journal = read_file(s_dir->file("run/journal.jsonl"));
  size_t outcomes = 0;
  size_t pos = 0;
  while ((pos = journal.find("\"event\":\"outcome\"", pos)) != std::string::npos) {
    ++outcomes;
    ++pos;
  }
  EXPECT_EQ(outcomes, s_report->at("results").size());
}

TEST_F(DefaultCheck, MarkdownReproScriptsReproduceTheirVerdict) {
  if (!python_has("torch")) GTEST_SKIP();
  // The report has no failing cell here, so ask for the repro of a passing one directly.
  const auto& first = s_report->at("results").at(0);
  auto script = run_binary({doctor(), "repro", first.at("case_id").get<std::string>(),
                            "--variant", "math", "--device", "cpu"});
  ASSERT_EQ(script.exit_code, 0) << script.err;
  TempDir dir;
  sdpa_test::write_file(dir.file("repro.py"), script.out);
  auto r = run_binary({k_python, dir.file("repro.py")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
}

// A crash in one variant: exit 1, the crash in the matrix against the right case, and advice
// that avoids that variant.
TEST(CheckFaults, CrashInOneVariantIsAttributedAndAvoided) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  TempDir dir;
  const std::string culprit = "fp16-b1-h2-q16-k16-d32";
  auto r = run_binary(
      {doctor(), "check", "--probe", "libtorch", "--variant", "math,flash", "--case",
       "dtype=fp16,b=1,h=2,l=16,d=32", "--case", "dtype=fp16,b=1,h=2,l=8,d=32", "--case",
       "dtype=fp32,b=1,h=2,l=8,d=32", "--json", dir.file("r.json"), "--run-dir", dir.file("run")},
      with_env({{"SDPA_DOCTOR_TEST_FAULT", "variant=flash,case=" + culprit + ",action=abort"},
                {"NO_COLOR", "1"}}));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("CRASH"), std::string::npos) << r.out;
  auto report = json::parse(read_file(dir.file("r.json")));
  int crashes = 0;
  for (const auto& res : report.at("results")) {
    if (res.at("status") == "crash") {
      ++crashes;
      EXPECT_EQ(res.at("variant"), "flash");
      EXPECT_EQ(res.at("case_id"), culprit);
    } else {
      EXPECT_EQ(res.at("status"), "pass") << res;
    }
  }
  EXPECT_EQ(crashes, 1);
  ASSERT_FALSE(report.at("recommendations").empty());
  const std::string advice = report.at("recommendations").at(0).dump();
  EXPECT_NE(advice.find("enable_flash_sdp(False)"), std::string::npos) << advice;
}

TEST(CheckFaults, CorruptedOutputsAreMismatchAndNonfinite) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  for (const auto& [action, status] :
       std::vector<std::pair<std::string, std::string>>{{"nan", "nonfinite"}, {"perturb", "mismatch"}}) {
    TempDir dir;
    auto r = run_binary({doctor(), "check", "--probe", "libtorch", "--variant", "math", "--case",
                         "dtype=fp32,b=1,h=2,l=8,d=16", "--json", dir.file("r.json"), "-q"},
                        with_env({{"SDPA_DOCTOR_TEST_FAULT", "variant=math,case=*,action=" + action}}));
    EXPECT_EQ(r.exit_code, 1) << action << r.out << r.err;
    auto report = json::parse(read_file(dir.file("r.json")));
    EXPECT_EQ(report.at("results").at(0).at("status"), status) << action;
  }
}

// A planted fault left in the environment is said in the console header and the JSON report,
// which is then marked as no measurement of the backends; a malformed one stops the check.
TEST(CheckFaults, PlantedFaultIsAnnouncedAndRecorded) {
  TempDir dir;
  const std::string fault = "variant=ref-math,case=*,action=nan";
  auto r = run_binary({doctor(), "check", "--probe", "reference", "--variant", "ref-math", "--case",
                       "dtype=fp32,b=1,h=1,l=8,d=8", "--json", dir.file("r.json"), "--run-dir",
                       dir.file("run")},
                      with_env({{"SDPA_DOCTOR_TEST_FAULT", fault}, {"NO_COLOR", "1"}}));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("planted   SDPA_DOCTOR_TEST_FAULT=" + fault), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not a measurement of the backends"), std::string::npos) << r.out;
  auto report = json::parse(read_file(dir.file("r.json")));
  EXPECT_EQ(report.at("planted_faults"), fault);
  EXPECT_EQ(report.at("measures_backends"), false);
  // `report JOURNAL` rebuilds the same header.
  auto rebuilt = run_binary({doctor(), "report", dir.file("run"), "--json", dir.file("b.json")});
  EXPECT_EQ(json::parse(read_file(dir.file("b.json"))).value("planted_faults", ""), fault)
      << rebuilt.err;

  TempDir bad;
  auto refused = run_binary({doctor(), "check", "--probe", "reference", "--variant", "ref-math",
                             "--case", "dtype=fp32,b=1,h=1,l=8,d=8", "--json", bad.file("r.json")},
                            with_env({{"SDPA_DOCTOR_TEST_FAULT", "variant=ref-math,action=explode"}}));
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_EQ(refused.err.rfind("sdpa-doctor: error: SDPA_DOCTOR_TEST_FAULT: unknown action 'explode'", 0),
            0u)
      << refused.err;
  EXPECT_FALSE(std::filesystem::exists(bad.file("r.json")));
}

TEST(CheckFaults, PlantedWrongToleranceMakesMismatch) {
  TempDir dir;
  auto r = run_binary({doctor(), "check", "--probe", "reference", "--variant", "ref-flash",
                       "--case", "dtype=fp16,b=1,h=2,l=33,d=32", "--tolerance", "fp16=0:0",
                       "--json", dir.file("r.json"), "-q"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  auto report = json::parse(read_file(dir.file("r.json")));
  EXPECT_EQ(report.at("results").at(0).at("status"), "mismatch");
}

TEST(CheckGpu, RequireGpuOnAMachineWithoutOneExitsThree) {
  auto r = run_binary({doctor(), "check", "--require-gpu", "--probe", "reference", "--case",
                       "dtype=fp32,b=1,h=1,l=4,d=8", "-q"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
}

// An interpreter whose start-up never returns (as `import torch` does on a wedged GPU) is an
// unusable --python: one finding naming the step that hung, its cells skipped, exit 2, and
// nothing of it blamed on a backend or in the advice.
void expect_hung_python(const std::string& script, const std::string& step) {
  TempDir dir;
  sdpa_test::write_file(dir.file("python"), script);
  ::chmod(dir.file("python").c_str(), 0755);
  const auto start = std::chrono::steady_clock::now();
  auto r = run_binary({doctor(), "check", "--probe", "python", "--variant", "math", "--python",
                       dir.file("python"), "--startup-timeout", "2", "--case",
                       "dtype=fp32,b=1,h=1,l=8,d=8", "--json", dir.file("r.json"), "-q"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string why = step + " did not return in 2 s: a wedged GPU or driver does this";
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("sdpa-doctor: error: --python: " + dir.file("python") + ": " + why),
            std::string::npos)
      << r.err;
  EXPECT_LT(seconds, 20.0);
  auto report = json::parse(read_file(dir.file("r.json")));
  EXPECT_EQ(report.at("results").at(0).at("status"), "skipped") << report.at("results").at(0);
  // The unusable interpreter, and the skipped cells it explains; no backend is named.
  std::vector<std::string> ids;
  for (const auto& f : report.at("findings")) ids.push_back(f.at("id"));
  EXPECT_EQ(ids, (std::vector<std::string>{"python-probe-unusable", "cases-skipped"}));
  EXPECT_NE(report.at("findings").at(0).at("message").get<std::string>().find(why),
            std::string::npos);
  EXPECT_TRUE(report.at("recommendations").empty()) << report.at("recommendations");
}

TEST(CheckHang, InterpreterThatNeverFindsTorchIsUnusable) {
  expect_hung_python("#!/bin/sh\nexec sleep 600\n", "finding torch (importlib.util.find_spec)");
}

TEST(CheckHang, ImportTorchThatNeverReturnsIsUnusable) {
  // find_spec answers; `import torch` sleeps, as on a wedged GPU, wherever it is imported (the
  // start-up server, or the pre-flight itself).
  TempDir hang;
  std::filesystem::create_directories(hang.file("torch"));
  sdpa_test::write_file(hang.file("torch/__init__.py"), "import time\ntime.sleep(600)\n");
  expect_hung_python("#!/bin/sh\nPYTHONPATH=" + hang.path() + " exec " + k_python + " \"$@\"\n",
                     "import torch");
}

// A signal mid-run: the workers are killed, the report is written with what finished and
// `interrupted` on the rest, exit `code`.
void interrupt_mid_run(int sig, int code) {
  TempDir dir;
  const std::string hang_case = "fp32-b1-h1-q8-k8-d8";
  std::vector<std::string> argv = {doctor(), "check", "--probe", "libtorch", "--variant",
                                   "math", "--case", "dtype=fp32,b=1,h=1,l=4,d=8", "--case",
                                   "dtype=fp32,b=1,h=1,l=8,d=8", "--case",
                                   "dtype=fp32,b=1,h=1,l=16,d=8", "--json", dir.file("r.json"),
                                   "--run-dir", dir.file("run"), "-q"};
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("SDPA_DOCTOR_TEST_FAULT", ("variant=math,case=" + hang_case + ",action=hang").c_str(), 1);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    execv(args[0], args.data());
    _exit(127);
  }
  // Wait until the hanging case has begun, then interrupt.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline &&
         read_file(dir.file("run/journal.jsonl")).find("\"case\":\"" + hang_case + "\",\"event\":\"begin\"") ==
             std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid, sig);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), code);
  auto report = json::parse(read_file(dir.file("r.json")));
  EXPECT_TRUE(report.at("interrupted").get<bool>());
  const auto& results = report.at("results");
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results.at(0).at("status"), "pass");
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(results.at(i).at("status"), "skipped");
    EXPECT_EQ(results.at(i).at("reason"), "interrupted");
  }
}

TEST(CheckInterrupt, SigintWritesTheReportAndExits130) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  interrupt_mid_run(SIGINT, 130);
}

// A closed terminal or session: the report as for SIGTERM, exit 128 + SIGHUP.
TEST(CheckInterrupt, SighupWritesTheReportAndExits129) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  interrupt_mid_run(SIGHUP, 129);
}

} // namespace

// Shrinking through the real binary: the fault switch plants a failure with a known boundary.
TEST(CheckShrink, ReportsBothBoundariesAndAMinimalCase) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  TempDir dir;
  auto r = run_binary(
      {doctor(), "check", "--probe", "libtorch", "--variant", "math,flash", "--case",
       "dtype=fp32,b=2,h=4,l=64,d=256,causal", "--json", dir.file("r.json"), "--run-dir",
       dir.file("run")},
      with_env({{"SDPA_DOCTOR_TEST_FAULT",
                 "variant=math,when=d>128,action=abort;variant=flash,when=causal,action=perturb"},
                {"NO_COLOR", "1"}}));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("math on cpu: crash only when head_dim > 128"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("flash on cpu: mismatch only when causal"), std::string::npos) << r.out;
  auto report = json::parse(read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("shrinks").size(), 2u) << report;
  for (const auto& s : report.at("shrinks")) {
    EXPECT_EQ(s.at("verdict"), "boundary") << s;
    ASSERT_EQ(s.at("conditions").size(), 1u) << s;
    EXPECT_FALSE(s.at("minimal_case").is_null()) << s;
    EXPECT_LE(s.at("tried").size(), 24u) << s;
    const auto& cond = s.at("conditions").at(0);
    if (s.at("variant") == "math") {
      EXPECT_EQ(cond.at("axis"), "d");
      EXPECT_EQ(cond.at("value"), 128);
    } else {
      EXPECT_EQ(cond.at("axis"), "causal");
    }
  }
}

TEST(CheckShrink, ReproFromTheReportHandsOutTheSmallestFailingCase) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  TempDir dir;
  const std::string original = "fp32-b2-h4-q64-k64-d256";
  auto r = run_binary({doctor(), "check", "-q", "--probe", "libtorch", "--variant", "math",
                       "--case", "dtype=fp32,b=2,h=4,l=64,d=256", "--json", dir.file("r.json")},
                      with_env({{"SDPA_DOCTOR_TEST_FAULT", "variant=math,when=d>128,action=abort"}}));
  ASSERT_EQ(r.exit_code, 1) << r.err;
  const auto report = json::parse(read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("shrinks").size(), 1u);
  const std::string smallest = report.at("shrinks").at(0).at("minimal_case").at("id");
  ASSERT_NE(smallest, original);
  const auto repro = run_binary({doctor(), "repro", original, "--report", dir.file("r.json")});
  EXPECT_EQ(repro.exit_code, 0) << repro.err;
  EXPECT_NE(repro.err.find("shrank to " + smallest), std::string::npos) << repro.err;
  EXPECT_NE(repro.out.find(smallest), std::string::npos);
  EXPECT_EQ(repro.out.find(original), std::string::npos);
  const auto itself =
      run_binary({doctor(), "repro", original, "--report", dir.file("r.json"), "--original"});
  EXPECT_EQ(itself.exit_code, 0) << itself.err;
  EXPECT_NE(itself.out.find(original), std::string::npos);
}

TEST(CheckShrink, AFailureEverywhereSaysSo) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  TempDir dir;
  auto r = run_binary({doctor(), "check", "--probe", "libtorch", "--variant", "math", "--case",
                       "dtype=fp32,b=2,h=4,l=64,d=64", "--json", dir.file("r.json")},
                      with_env({{"SDPA_DOCTOR_TEST_FAULT", "variant=math,case=*,action=perturb"},
                                {"NO_COLOR", "1"}}));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("for every case"), std::string::npos) << r.out;
  auto report = json::parse(read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("shrinks").size(), 1u);
  EXPECT_EQ(report.at("shrinks").at(0).at("verdict"), "everywhere");
}

TEST(CheckShrink, AFlakyFailureSaysSoAndInventsNoBoundary) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  TempDir dir;
  // The crash happens once in the whole run: the re-run of the failing case passes.
  auto r = run_binary({doctor(), "check", "--probe", "libtorch", "--variant", "math", "--case",
                       "dtype=fp32,b=2,h=4,l=64,d=64", "--json", dir.file("r.json")},
                      with_env({{"SDPA_DOCTOR_TEST_FAULT",
                                 "variant=math,case=*,once=" + dir.file("fired") + ",action=abort"},
                                {"NO_COLOR", "1"}}));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err; // the crash that was measured still counts
  EXPECT_NE(r.out.find("did not happen again when re-run (flaky; no"), std::string::npos)
      << r.out;
  auto report = json::parse(read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("shrinks").size(), 1u);
  const json& s = report.at("shrinks").at(0);
  EXPECT_EQ(s.at("verdict"), "flaky") << s;
  EXPECT_TRUE(s.at("conditions").empty()) << s;
  EXPECT_TRUE(s.at("minimal_case").is_null()) << s;
  EXPECT_EQ(report.at("results").at(0).at("status"), "crash");
}

// The journal keeps what the shrinking found: `report RUN-DIR` gives the check's own shrinks.
TEST(CheckShrink, TheJournalRebuildsTheShrinks) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  TempDir dir;
  auto r = run_binary({doctor(), "check", "-q", "--probe", "libtorch", "--variant", "math",
                       "--case", "dtype=fp32,b=2,h=4,l=64,d=64", "--json", dir.file("r.json"),
                       "--run-dir", dir.file("run")},
                      with_env({{"SDPA_DOCTOR_TEST_FAULT", "variant=math,case=*,action=perturb"}}));
  ASSERT_EQ(r.exit_code, 1) << r.err;
  auto rebuilt = run_binary({doctor(), "report", dir.file("run"), "--json", dir.file("again.json")},
                            with_env({{"NO_COLOR", "1"}}));
  EXPECT_EQ(rebuilt.exit_code, 1) << rebuilt.err;
  const auto report = json::parse(read_file(dir.file("r.json")));
  const auto again = json::parse(read_file(dir.file("again.json")));
  ASSERT_EQ(report.at("shrinks").size(), 1u);
  EXPECT_EQ(again.value("shrinks", json()), report.at("shrinks"));
  EXPECT_NE(rebuilt.out.find("for every case"), std::string::npos) << rebuilt.out;
  // Appended after the run's end, on the same clock as the run's own events.
  double end_ms = -1, shrinks_ms = -1;
  std::istringstream journal(read_file(dir.file("run") + "/journal.jsonl"));
  for (std::string line; std::getline(journal, line);) {
    const json e = json::parse(line, nullptr, false);
    if (!e.is_object()) continue;
    if (e.value("event", "") == "end") end_ms = e.at("t_ms");
    if (e.value("event", "") == "shrinks") shrinks_ms = e.at("t_ms");
  }
  ASSERT_GE(end_ms, 0);
  EXPECT_GE(shrinks_ms, end_ms);
}

TEST(CheckShrink, NothingFailingRunsNoShrink) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  TempDir dir;
  auto r = run_binary({doctor(), "check", "--probe", "libtorch", "--variant", "math", "--case",
                       "dtype=fp32,b=1,h=2,l=8,d=16", "--json", dir.file("r.json"), "-q"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  auto report = json::parse(read_file(dir.file("r.json")));
  EXPECT_FALSE(report.contains("shrinks") && !report.at("shrinks").empty()) << report;
  EXPECT_EQ(report.at("results").size(), 1u);
}

TEST_F(DefaultCheck, TheRecommendationIsVerifiedByAReRunOfEveryCase) {
  if (!python_has("torch")) GTEST_SKIP() << "no torch in " << k_python;
  const auto& recs = s_report->at("recommendations");
  ASSERT_FALSE(recs.empty());
  const json& rec = recs.at(0);
  EXPECT_EQ(rec.at("verified"), true) << rec;
  EXPECT_EQ(rec.at("verification").at("passed"), rec.at("case_ids").size()) << rec;
  EXPECT_EQ(rec.at("verification").at("total"), rec.at("case_ids").size()) << rec;
  const std::string line = fmt_verified(rec.at("case_ids").size());
  EXPECT_NE(s_run->out.find(line), std::string::npos) << s_run->out;
  EXPECT_NE(read_file(s_dir->file("r.md")).find(line), std::string::npos);
}

// The advice re-run (check --verify, on by default) on two small cases through the python probe.
class CheckVerify : public ::testing::Test {
protected:
  void SetUp() override {
    if (!python_has("torch")) GTEST_SKIP() << "no torch in " << k_python;
  }
  sdpa_test::RunResult check(const std::string& fault, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv{doctor(), "check", "--probe", "python", "--python", k_python,
                                  "--case", "dtype=fp32,b=1,h=2,l=16,d=32", "--case",
                                  "dtype=bf16,b=1,h=2,l=8,d=32,causal", "--json",
                                  m_dir.file("r.json"), "--run-dir", m_dir.file("run")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::map<std::string, std::string> env{{"NO_COLOR", "1"}};
    if (!fault.empty()) env["SDPA_DOCTOR_TEST_FAULT"] = fault;
    auto r = run_binary(argv, with_env(env, 300));
    m_report = json::parse(read_file(m_dir.file("r.json")), nullptr, false);
    return r;
  }
  // The facts the re-run of `id` said hello with, from its journal in RUN-DIR/verify/.
  json verify_worker_facts(const std::string& id) {
    for (const auto& entry :
         std::filesystem::directory_iterator(m_dir.file("run") + "/verify")) {
      if (entry.path().filename().string().find(id) == std::string::npos) continue;
      const std::string journal = read_file((entry.path() / "journal.jsonl").string());
      size_t start = 0;
      while (start < journal.size()) {
        const size_t end = journal.find('\n', start);
        const json line = json::parse(journal.substr(start, end - start), nullptr, false);
        if (line.is_object() && line.value("event", "") == "worker")
          return line.at("worker").at("facts");
        if (end == std::string::npos) break;
        start = end + 1;
      }
    }
    return json();
  }
  TempDir m_dir;
  json m_report;
};

TEST_F(CheckVerify, TheSnippetThatWasVerifiedIsByteForByteThePrintedOne) {
  auto r = check("");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json& rec = m_report.at("recommendations").at(0);
  EXPECT_EQ(rec.at("id"), "keep-defaults");
  EXPECT_EQ(rec.at("verified"), true) << rec;
  EXPECT_TRUE(rec.at("rejected").empty()) << rec;
  EXPECT_NE(r.out.find(fmt_verified(2)), std::string::npos) << r.out;
  // The worker hashed the bytes it executed; the same hash of the JSON's `python`.
  const json facts = verify_worker_facts("keep-defaults");
  ASSERT_TRUE(facts.is_object()) << "no worker event in the re-run's journal";
  EXPECT_EQ(facts.at("verify"), "keep-defaults");
  const std::string printed = m_dir.file("printed.py");
  {
    std::ofstream f(printed, std::ios::binary);
    f << rec.at("python").get<std::string>();
  }
  auto sha = run_binary({k_python, "-c",
                         "import hashlib,sys;print(hashlib.sha256(open(sys.argv[1],'rb').read())"
                         ".hexdigest())",
                         printed});
  ASSERT_EQ(sha.exit_code, 0) << sha.err;
  EXPECT_EQ(facts.at("snippet_sha256"), sha.out.substr(0, 64));
}

TEST_F(CheckVerify, AFirstChoiceWhoseReRunFailsGivesWayToTheNextAndSaysWhy) {
  auto r = check("variant=verify:keep-defaults,action=abort");
  // The matrix passed, but a case crashed under the flags first chosen: that fails the check.
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  for (const auto& res : m_report.at("results"))
    EXPECT_NE(res.at("status"), "crash") << "the main run is not what failed: " << res;
  const json& rec = m_report.at("recommendations").at(0);
  EXPECT_EQ(rec.at("id"), "disable-mem-efficient") << rec;
  EXPECT_EQ(rec.at("verified"), true) << rec;
  ASSERT_EQ(rec.at("rejected").size(), 1u) << rec;
  EXPECT_EQ(rec.at("rejected").at(0).at("id"), "keep-defaults");
  const std::string why = rec.at("rejected").at(0).at("reason");
  EXPECT_NE(why.find("2 of 2 cases failed under these flags"), std::string::npos) << why;
  EXPECT_NE(why.find("crash"), std::string::npos) << why;
  EXPECT_NE(r.out.find("instead of keep-defaults, whose re-run failed: 2 of 2 cases failed"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(fmt_verified(2)), std::string::npos) << r.out;
  EXPECT_EQ(verify_worker_facts("disable-mem-efficient").at("verify"), "disable-mem-efficient");
  // The exit code's reason, said once with what to use instead.
  bool finding = false;
  for (const auto& f : m_report.at("findings"))
    if (f.at("id") == "recommendation-rejected") {
      finding = true;
      EXPECT_NE(f.at("remedy").get<std::string>().find("use disable-mem-efficient"),
                std::string::npos)
          << f;
    }
  EXPECT_TRUE(finding) << m_report.at("findings");
}

// The journal keeps what the re-runs decided: `report RUN-DIR` gives the check's own advice, not
// the advice before its re-runs.
TEST_F(CheckVerify, TheJournalRebuildsTheVerifiedAdvice) {
  auto r = check("variant=verify:keep-defaults,action=abort");
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  auto rebuilt = run_binary(
      {doctor(), "report", m_dir.file("run"), "--json", m_dir.file("again.json")},
      with_env({{"NO_COLOR", "1"}}));
  EXPECT_EQ(rebuilt.exit_code, 1) << rebuilt.err; // the re-run's crash fails it, as in the check
  const json again = json::parse(read_file(m_dir.file("again.json")));
  EXPECT_EQ(again.at("recommendations"), m_report.at("recommendations"));
  EXPECT_EQ(again.at("findings"), m_report.at("findings"));
  EXPECT_NE(rebuilt.out.find("instead of keep-defaults, whose re-run failed"), std::string::npos)
      << rebuilt.out;
}

TEST_F(CheckVerify, WhenNoConfigurationPassesItsReRunTheCheckSaysSoAndFails) {
  auto r = check("variant=verify:keep-defaults,action=abort;"
                 "variant=verify:disable-mem-efficient,action=exit3;"
                 "variant=verify:disable-flash,action=perturb");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const json& rec = m_report.at("recommendations").at(0);
  EXPECT_EQ(rec.at("id"), "keep-defaults") << rec;
  EXPECT_EQ(rec.at("verified"), false) << rec;
  ASSERT_EQ(rec.at("rejected").size(), 2u) << rec;
  EXPECT_EQ(rec.at("rejected").at(1).at("id"), "disable-flash");
  EXPECT_NE(rec.at("rejected").at(1).at("reason").get<std::string>().find("mismatch"),
            std::string::npos);
  bool finding = false;
  for (const auto& f : m_report.at("findings"))
    finding = finding || f.at("id") == "recommendation-failed-verification";
  EXPECT_TRUE(finding) << m_report.at("findings");
  EXPECT_NE(r.out.find("NOT verified: 0/2 cases passed under these flags"), std::string::npos)
      << r.out;
}

TEST_F(CheckVerify, NoVerifyRunsNoReRun) {
  auto r = check("variant=verify:keep-defaults,action=abort", {"--no-verify"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const json& rec = m_report.at("recommendations").at(0);
  EXPECT_EQ(rec.at("id"), "keep-defaults");
  EXPECT_FALSE(rec.contains("verified")) << rec;
  EXPECT_FALSE(std::filesystem::exists(m_dir.file("run") + "/verify"));
}

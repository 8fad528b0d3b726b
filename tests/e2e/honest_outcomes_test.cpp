// Issue #15 through the real binary: no silent success (a report that cannot be written fails the
// run, the others still land), a broken setup is never dressed up as "unsupported", every cell is
// counted as a cell, and the oracle runs beside the probes instead of before them.
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <csignal>
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

using nlohmann::json;
using sdpa_test::doctor;
using sdpa_test::read_file;
using sdpa_test::run_binary;
using sdpa_test::TempDir;

namespace {

const std::vector<std::string> k_tiny = {"--probe", "reference", "--variant", "ref-math",
                                         "--case", "dtype=fp32,b=1,h=1,l=8,d=8"};

std::vector<std::string> check_argv(std::vector<std::string> extra) {
  std::vector<std::string> argv = {doctor(), "check"};
  argv.insert(argv.end(), k_tiny.begin(), k_tiny.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// As the JUnit renderer writes seconds.
std::string fmt_seconds(double ms) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", ms / 1000.0);
  return buf;
}

#ifdef SDPA_TEST_HAVE_TORCH_WORKER
constexpr bool k_torch_worker = true;
#else
constexpr bool k_torch_worker = false;
#endif

bool is_char_device(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

// A path that refuses every write, or skip: /dev/full must stay a device after the run.
class FullDevice : public ::testing::Test {
protected:
  void SetUp() override {
    if (!is_char_device("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  }
  void TearDown() override { EXPECT_TRUE(is_char_device("/dev/full")) << "/dev/full was replaced"; }
};

TEST_F(FullDevice, JsonReportThatCannotBeWrittenIsExit4AndOneLine) {
  const auto run = run_binary(check_argv({"--json", "/dev/full"}));
  EXPECT_EQ(run.exit_code, 4) << run.err;
  EXPECT_NE(run.err.find("cannot write '/dev/full': No space left on device"), std::string::npos)
      << run.err;
  // The diagnosis is not lost: the console still shows it.
  EXPECT_NE(run.out.find("Summary:"), std::string::npos) << run.out;
}

TEST_F(FullDevice, OtherReportsAreStillWrittenAfterOneFails) {
  TempDir dir;
  const auto run = run_binary(check_argv({"--markdown", "/dev/full", "--json", dir.file("r.json"),
                                          "--junit", dir.file("r.xml")}));
  EXPECT_EQ(run.exit_code, 4) << run.err;
  EXPECT_EQ(sdpa_test::line_count(run.err), 1) << run.err;
  EXPECT_TRUE(json::parse(read_file(dir.file("r.json")), nullptr, false).is_object());
  EXPECT_NE(read_file(dir.file("r.xml")).find("<testsuites"), std::string::npos);
}

TEST_F(FullDevice, JsonOnAFullStdoutIsExit4) {
  const auto run = run_binary({"/bin/sh", "-c", "exec \"$0\" check --probe reference --variant "
                                                "ref-math --case dtype=fp32,b=1,h=1,l=8,d=8 "
                                                "--json - >/dev/full",
                               doctor()});
  EXPECT_EQ(run.exit_code, 4) << run.err;
  EXPECT_NE(run.err.find("stdout"), std::string::npos) << run.err;
}

TEST_F(FullDevice, ConsoleOnAFullStdoutIsExit4) {
  const auto run = run_binary({"/bin/sh", "-c",
                               "exec \"$0\" devices --no-hip --no-rocm-smi >/dev/full", doctor()});
  EXPECT_EQ(run.exit_code, 4) << run.err;
  EXPECT_NE(run.err.find("cannot write to stdout"), std::string::npos) << run.err;
}

TEST_F(FullDevice, DevicesJsonThatCannotBeWrittenIsExit4) {
  const auto run = run_binary({doctor(), "devices", "--no-hip", "--no-rocm-smi", "--json",
                               "/dev/full"});
  EXPECT_EQ(run.exit_code, 4) << run.err;
  EXPECT_NE(run.err.find("/dev/full"), std::string::npos) << run.err;
}

TEST(Reports, FifoIsWrittenInPlaceNotReplaced) {
  TempDir dir;
  const std::string fifo = dir.file("report.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::string got;
  std::thread reader([&] { got = read_file(fifo); });
  const auto run = run_binary(check_argv({"--json", fifo}));
  reader.join();
  EXPECT_EQ(run.exit_code, 0) << run.err;
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_TRUE(json::parse(got, nullptr, false).is_object()) << got.substr(0, 200);
}

TEST(Summary, CountsCellsNotCases) {
  const auto run = run_binary({doctor(), "check", "--probe", "reference", "--case",
                               "dtype=fp32,b=1,h=1,l=8,d=8", "--case", "dtype=fp32,b=1,h=1,l=16,d=8",
                               "--color", "never"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("Summary: 2 cases × 2 variants = 4 cells"), std::string::npos) << run.out;
}

TEST(Report, WallTimeOfEachCaseReachesJsonAndJunit) {
  TempDir dir;
  const auto run = run_binary(check_argv({"--json", dir.file("r.json"), "--junit",
                                          dir.file("r.xml")}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json report = json::parse(read_file(dir.file("r.json")));
  const json& r = report.at("results").at(0);
  const double wall = r.at("wall_ms").get<double>();
  EXPECT_GT(wall, 0.0);
  EXPECT_GE(wall, r.at("metrics").value("time_ms", 0.0));
  const std::string xml = read_file(dir.file("r.xml"));
  EXPECT_NE(xml.find(fmt_seconds(wall)), std::string::npos) << xml;
}

TEST(Devices, UnknownGpuIsAUsageErrorNamingWhatIsThere) {
  const auto run = run_binary(check_argv({"--device", "cuda:9"}));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--device cuda:9: no such device (devices here: cpu"), std::string::npos)
      << run.err;
  EXPECT_EQ(run.out, "");
}

TEST(Dtype, FilterKeepsOnlyThoseCases) {
  TempDir dir;
  const auto run = run_binary({doctor(), "check", "--probe", "reference", "--variant", "ref-math",
                               "--dtype", "bf16", "--json", dir.file("r.json")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json report = json::parse(read_file(dir.file("r.json")));
  ASSERT_FALSE(report.at("results").empty());
  for (const auto& r : report.at("results")) EXPECT_EQ(r.at("case").at("dtype"), "bf16");
}

// A python without torch and a program that is no python: the user's setup, said once.
void expect_python_unusable(const std::string& python, const std::string& reason_part) {
  TempDir dir;
  const auto run = run_binary({doctor(), "check", "--probe", "python,reference", "--variant",
                               "math,ref-math", "--case", "dtype=fp32,b=1,h=1,l=8,d=8", "--python",
                               python, "--json", dir.file("r.json")});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find(reason_part), std::string::npos) << run.err;
  const json report = json::parse(read_file(dir.file("r.json")));
  int python_cells = 0;
  for (const auto& r : report.at("results")) {
    if (r.at("probe") == "python") {
      ++python_cells;
      EXPECT_EQ(r.at("status"), "skipped") << r.dump();
      EXPECT_NE(r.at("reason").get<std::string>().find(reason_part), std::string::npos);
    } else {
      EXPECT_EQ(r.at("status"), "pass") << r.dump(); // the other probes still ran
    }
  }
  EXPECT_EQ(python_cells, 1);
  int findings = 0;
  for (const auto& f : report.at("findings"))
    if (f.at("id") == "python-probe-unusable") ++findings;
  EXPECT_EQ(findings, 1) << report.at("findings").dump();
}

TEST(Python, WithoutTorchIsSkippedWithTheImportErrorAndExit2) {
  TempDir dir;
  // A real interpreter that cannot import torch: python3 with an empty, isolated path.
  const std::string fake = dir.file("python");
  sdpa_test::write_file(fake, "#!/bin/sh\nexec python3 -I -S \"$@\"\n");
  ::chmod(fake.c_str(), 0755);
  if (run_binary({fake, "-c", "pass"}).exit_code != 0) GTEST_SKIP() << "no python3 on PATH";
  expect_python_unusable(fake, "cannot import torch: No module named 'torch'");
}

TEST(Python, ProgramPrintingJunkIsNotAPythonInterpreter) {
  TempDir dir;
  const std::string fake = dir.file("python");
  sdpa_test::write_file(fake, "#!/bin/sh\necho 'junk {{{'\nexit 0\n");
  ::chmod(fake.c_str(), 0755);
  expect_python_unusable(fake, "not a Python interpreter");
}

// A doctor on a machine with no torch at all: installed alone (no LibTorch worker or plugin
// beside it, no data directory) and no interpreter that imports torch on PATH. Neither torch
// probe ran, so their cells are skipped with one finding each, never "unsupported" (refused).
TEST(Python, NoTorchAnywhereSkipsTheTorchProbesWithTheirFindings) {
  TempDir dir;
  const std::filesystem::path bin = dir.file("bin");
  std::filesystem::create_directories(bin);
  for (const char* exe : {"sdpa-doctor", "sdpa-doctor-ref-worker", "sdpa-doctor-enum-worker"})
    std::filesystem::copy_file(sdpa_test::build_path(exe), bin / exe);
  // python3 on PATH, but one whose torch cannot be found (isolated: no site-packages).
  const std::string python3 = (bin / "python3").string();
  sdpa_test::write_file(python3, "#!/bin/sh\nexec /usr/bin/python3 -I -S \"$@\"\n");
  ::chmod(python3.c_str(), 0755);
  if (run_binary({python3, "-c", "pass"}).exit_code != 0) GTEST_SKIP() << "no /usr/bin/python3";
  sdpa_test::RunOptions alone;
  alone.set_env = {{"PATH", bin.string() + ":/usr/bin:/bin"}};
  alone.unset_env = {"SDPA_DOCTOR_PYTHON", "VIRTUAL_ENV", "SDPA_DOCTOR_DATA_DIR"};
  const auto run = run_binary({(bin / "sdpa-doctor").string(), "check", "--probe",
                               "torch,python,reference", "--variant", "math,ref-math", "--case",
                               "dtype=fp32,b=1,h=1,l=8,d=8", "--no-oracle-cache", "--json",
                               dir.file("r.json")},
                              alone);
  ASSERT_TRUE(run.exit_code == 0 || run.exit_code == 1) << run.err << run.out;
  EXPECT_EQ(run.out.find("UNSUP"), std::string::npos) << run.out;
  const json report = json::parse(read_file(dir.file("r.json")));
  std::map<std::string, int> skipped;
  for (const auto& r : report.at("results")) {
    const std::string probe = r.at("probe");
    if (probe == "reference") {
      EXPECT_EQ(r.at("status"), "pass") << r.dump();
      continue;
    }
    EXPECT_EQ(r.at("status"), "skipped") << r.dump();
    ++skipped[probe];
  }
  EXPECT_EQ(skipped["python"], 1) << report.at("results").dump();
  EXPECT_EQ(skipped["libtorch"], 1) << report.at("results").dump();
  std::vector<std::string> ids;
  for (const auto& f : report.at("findings")) ids.push_back(f.at("id"));
  for (const auto& f : report.at("inventory").at("findings")) ids.push_back(f.at("id"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), "python-probe-unusable"), 1) << json(ids).dump();
  EXPECT_EQ(std::count(ids.begin(), ids.end(), "torch-plugin-unusable"), 1) << json(ids).dump();
}

TEST(Repro, DefaultsToADeviceThatExists) {
  const auto run = run_binary({doctor(), "repro", "fp32-b1-h1-q8-k8-d8"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const bool gpu = std::filesystem::exists("/dev/kfd");
  EXPECT_NE(run.out.find(gpu ? "DEVICE = \"cuda:0\"" : "DEVICE = \"cpu\""), std::string::npos)
      << run.out.substr(0, 400);
  EXPECT_NE(run.out.find("verdict=\"not measured\""), std::string::npos);
}

// A report of a GPU run, as a user attaches it: one case crashed under flash[ck] on cuda:3.
std::string gpu_report(const TempDir& dir) {
  const auto run = run_binary(check_argv({"-q", "--json", dir.file("cpu.json")}));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  json report = json::parse(read_file(dir.file("cpu.json")));
  json crashed = report.at("results").at(0);
  crashed["probe"] = "python";
  crashed["variant"] = "flash[ck]";
  crashed["device"] = "cuda:3";
  crashed["status"] = "crash";
  report["results"].push_back(crashed);
  report["targets"].push_back("cuda:3"); // a cell's device is one of its report's targets
  const std::string path = dir.file("gpu.json");
  sdpa_test::write_file(path, report.dump());
  return path;
}

TEST(Repro, FromAReportTakesTheDeviceAndVariantItMeasured) {
  TempDir dir;
  const std::string report = gpu_report(dir);
  const auto run = run_binary({doctor(), "repro", "fp32-b1-h1-q8-k8-d8", "--report", report});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("DEVICE = \"cuda:3\""), std::string::npos) << run.out.substr(0, 400);
  EXPECT_NE(run.out.find("VARIANT, PROBE = \"flash[ck]\", \"python\""), std::string::npos) << run.out.substr(0, 400);
  // What the command line says still wins.
  const auto cpu = run_binary({doctor(), "repro", "fp32-b1-h1-q8-k8-d8", "--report", report,
                               "--device", "cpu", "--variant", "math"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_NE(cpu.out.find("DEVICE = \"cpu\""), std::string::npos);
  EXPECT_NE(cpu.out.find("VARIANT, PROBE = \"math\""), std::string::npos);
}

TEST(Repro, ACaseTheReportDoesNotHoldIsAUsageError) {
  TempDir dir;
  const std::string report = gpu_report(dir);
  const auto run = run_binary({doctor(), "repro", "fp16-b1-h1-q9-k9-d8", "--report", report});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("has no result for case fp16-b1-h1-q9-k9-d8"), std::string::npos) << run.err;
  const auto missing = run_binary({doctor(), "repro", "fp32-b1-h1-q8-k8-d8", "--report",
                                   dir.file("nope.json")});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
}

TEST(Help, SubcommandsShowOnlyTheirOwnOptions) {
  const auto devices = run_binary({doctor(), "devices", "--help"});
  EXPECT_EQ(devices.out.find("--fail-on"), std::string::npos) << devices.out;
  EXPECT_EQ(devices.out.find("--markdown"), std::string::npos) << devices.out;
  EXPECT_NE(devices.out.find("--json"), std::string::npos) << devices.out;
  const auto repro = run_binary({doctor(), "repro", "--help"});
  EXPECT_EQ(repro.out.find("--junit"), std::string::npos) << repro.out;
  EXPECT_EQ(repro.out.find("--fail-on"), std::string::npos) << repro.out;
  const auto check = run_binary({doctor(), "check", "--help"});
  EXPECT_NE(check.out.find("--junit"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("--fail-on"), std::string::npos) << check.out;
}

TEST(Progress, ALogGetsALineEveryInterval) {
  // stderr is a pipe here: the periodic form, not the terminal line.
  const auto run = run_binary({doctor(), "check", "--probe", "reference", "--case",
                               "dtype=fp32,b=1,h=8,l=512,d=64", "--repeat", "200",
                               "--progress-every", "0.2"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find(" cells"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("\r"), std::string::npos);
}

TEST(Interrupt, OracleOfABigCaseStopsWithinASecond) {
  if (!k_torch_worker) GTEST_SKIP() << "the libtorch worker is not built";
  TempDir dir;
  // One case whose float64 oracle takes minutes on a CPU: SIGINT must not wait for it.
  std::vector<std::string> argv = {doctor(), "check", "-q", "--probe", "libtorch", "--variant",
                                   "math", "--case", "dtype=fp32,b=1,h=8,l=16384,d=128",
                                   "--json", dir.file("r.json"), "--run-dir", dir.file("run")};
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const auto start = std::chrono::steady_clock::now();
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.5);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const json report = json::parse(read_file(dir.file("r.json")));
  EXPECT_EQ(report.at("results").at(0).at("reason"), "interrupted");
  bool said = false;
  for (const auto& f : report.at("findings"))
    if (f.value("remedy", "").find("interrupted: 1 of 1 cells not measured") != std::string::npos)
      said = true;
  EXPECT_TRUE(said) << report.at("findings").dump();
}

} // namespace

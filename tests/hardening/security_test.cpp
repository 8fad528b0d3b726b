// Security properties of the real binary: user strings never reach a shell, and no report, log or
// journal carries a secret from the environment.
#include "hardening/hardening_support.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

using sdpa_test::run_binary;
namespace fs = std::filesystem;

namespace {

// A shell would run `touch <dir>/pwned-N` for each of these; an argv vector passes them on as
// plain bytes.
std::string injection(const std::string& dir, int n) {
  return "x; touch " + dir + "/pwned-" + std::to_string(n) + " #$(touch " + dir + "/pwned-" +
         std::to_string(n) + "b)`touch " + dir + "/pwned-" + std::to_string(n) + "c`";
}

bool any_pwned(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("pwned", 0) == 0) return true;
  return false;
}

TEST(NoShell, MetacharactersInTheInterpreterPathAndRunDirAreBytes) {
  sdpa_test::TempDir dir;
  // The interpreter's own path holds the metacharacters; it records the argv it was given.
  const std::string weird = dir.path() + "/py thon;$(id)`id`&|<>'\"";
  fs::create_directories(weird);
  const std::string python = weird + "/python";
  // It answers the doctor's pre-flight like a Python with torch would, and serves no workers.
  sdpa_hardening::make_executable(python, "#!/bin/sh\n"
                                          "[ \"$2\" = --preflight ] && echo 'sdpa-doctor-preflight "
                                          "torch 0' && exit 0\n"
                                          "[ \"$2\" = --serve ] && exit 1\n"
                                          "printf '%s\\n' \"$0\" \"$@\" > \"$(dirname "
                                          "\"$0\")/argv.txt\"\nexit 3\n");
  const std::string run_dir = dir.path() + "/run " + injection(dir.path(), 1);
  sdpa_test::RunOptions options;
  options.timeout_s = 120;
  const auto run = run_binary({sdpa_test::doctor(), "check", "--probe", "python", "--variant",
                               "math", "--case", "dtype=fp32,b=1,h=1,l=8,d=8", "--python", python,
                               "--run-dir", run_dir, "--max-worker-restarts", "0"},
                              options);
  EXPECT_EQ(sdpa_hardening::crash_problem(run), "") << run.err;
  EXPECT_FALSE(any_pwned(dir.path()));
  // It did start the interpreter, with its exact path and the run dir inside one argument.
  const std::string argv = sdpa_test::read_file(weird + "/argv.txt");
  ASSERT_FALSE(argv.empty()) << "the fake interpreter never ran: " << run.err;
  EXPECT_EQ(argv.rfind(python + "\n", 0), 0u) << argv;
  EXPECT_NE(argv.find(run_dir), std::string::npos) << argv;
}

TEST(NoShell, MetacharactersInCaseAndFlagValuesAreRefusedOrInert) {
  sdpa_test::TempDir dir;
  int n = 10;
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"check", "--case", "dtype=fp32,b=1;" + injection(dir.path(), n++)},
           {"check", "--variant", "math" + injection(dir.path(), n++)},
           {"check", "--device", "cpu" + injection(dir.path(), n++)},
           {"check", "--case-file", injection(dir.path(), n++)},
           {"repro", "fp32-b1-h1-q8-k8-d8" + injection(dir.path(), n++)},
           {"check", "--json", dir.path() + "/" + injection(dir.path(), n++), "--case",
            "dtype=fp32,b=1,h=1,l=8,d=8", "--probe", "reference", "--variant", "ref-math"}}) {
    std::vector<std::string> argv = {sdpa_test::doctor()};
    argv.insert(argv.end(), args.begin(), args.end());
    sdpa_test::RunOptions options;
    options.timeout_s = 120;
    const auto run = run_binary(argv, options);
    EXPECT_EQ(sdpa_hardening::crash_problem(run), "") << args[1] << ": " << run.err;
    EXPECT_FALSE(any_pwned(dir.path())) << args[1];
  }
}

TEST(NoShell, TheDoctorsSourcesStartNoShell) {
  // Backs up the behavioural tests: no call in src/ that hands a string to /bin/sh.
  const fs::path src = sdpa_test::source_path("src");
  for (const auto& e : fs::recursive_directory_iterator(src)) {
    const std::string ext = e.path().extension().string();
    if (ext != ".cpp" && ext != ".hpp" && ext != ".hip") continue;
    const std::string text = sdpa_test::read_file(e.path().string());
    for (const char* call : {"system(", "popen(", "execl(", "execlp(", "execle("})
      for (const char* before : {" ", "::", "(", "!"})
        EXPECT_EQ(text.find(std::string(before) + call), std::string::npos)
            << e.path() << " calls " << call;
    EXPECT_EQ(text.find("\"/bin/sh\""), std::string::npos) << e.path() << " names /bin/sh";
  }
}

// ---- secrets ------------------------------------------------------------------------------

const std::map<std::string, std::string> k_secrets = {
    {"HF_TOKEN", "hf_SDPAsecretHF0123456789abcdef"},
    {"AWS_SECRET_ACCESS_KEY", "wJalrSDPAsecretAWSbPxRfiCYEXAMPLEKEY"},
    {"MY_PASSWORD", "SDPAsecretPassw0rd!"},
    {"TORCH_FAKE_TOKEN", "SDPAsecretTorchToken42"},
    {"PYTORCH_API_KEY", "SDPAsecretPytorchKey77"},
    {"HIP_SECRET", "SDPAsecretHipValue99"},
};

std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file()) out.push_back(it->path().string());
  return out;
}

void expect_no_secret(const std::string& where, const std::string& text) {
  for (const auto& [name, value] : k_secrets)
    EXPECT_EQ(text.find(value), std::string::npos) << name << "'s value is in " << where;
}

TEST(Secrets, NoReportLogOrJournalCarriesThem) {
  sdpa_test::TempDir dir;
  const std::string run_dir = dir.file("run");
  std::vector<std::string> argv = {
      sdpa_test::doctor(), "check", "-v", "--json", dir.file("r.json"), "--markdown",
      dir.file("r.md"), "--junit", dir.file("r.xml"), "--log-file", dir.file("doctor.log"),
      "--run-dir", run_dir, "--case", "dtype=fp32,b=1,h=1,l=8,d=8", "--case",
      "dtype=fp32,b=1,h=2,l=16,d=8", "--variant", "math,ref-math", "--max-worker-restarts", "1"};
  std::string probes = "reference";
  if (!sdpa_hardening::torch_worker().empty()) probes += ",libtorch";
  const std::string python = sdpa_hardening::python_with_torch();
  if (!python.empty()) {
    probes += ",python";
    argv.insert(argv.end(), {"--python", python});
  }
  argv.insert(argv.end(), {"--probe", probes});
  sdpa_test::RunOptions options;
  options.timeout_s = 300;
  options.set_env.insert(k_secrets.begin(), k_secrets.end());
  // A crash puts the worker's stderr tail and environment-dependent text in every report.
  options.set_env["SDPA_DOCTOR_TEST_FAULT"] = "variant=math,case=fp32-b1-h2-q16-k16-d8,action=abort";
  const auto run = run_binary(argv, options);
  EXPECT_EQ(sdpa_hardening::crash_problem(run), "") << run.err;
  ASSERT_TRUE(run.exit_code == 0 || run.exit_code == 1) << run.exit_code << "\n" << run.err;
  expect_no_secret("stdout", run.out);
  expect_no_secret("stderr", run.err);
  int files = 0;
  for (const std::string& path : files_under(dir.path())) {
    expect_no_secret(path, sdpa_test::read_file(path));
    ++files;
  }
  // The reports, the log and the run dir (journal, worker logs, cases files) were all there.
  EXPECT_GE(files, 6);
  for (const char* name : {"r.json", "r.md", "r.xml", "doctor.log", "run/journal.jsonl"})
    EXPECT_TRUE(fs::exists(dir.file(name))) << name;
  // The variables' names may be reported as present; their values never.
  EXPECT_NE(sdpa_test::read_file(dir.file("r.json")).find("\"results\""), std::string::npos);
}

} // namespace

// The Python probe's start-up server (sdpa_probe --serve), started the way the runner starts it
// (isolate::Service), with real workers forked from it: each child has its own variant environment
// and FA library, a crash or a kill of one takes no other down, and without a server the worker
// runs itself. Through the binary: a check forks every Python worker and leaves no server behind.
#include "core/case.hpp"
#include "isolate/isolate.hpp"
#include "cases/cases.hpp"
#include "protocol/protocol.hpp"
#include "cases/tolerance.hpp"
#include "support/run_binary.hpp"
#include "worker_process.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

using namespace sdpa_doctor;
using nlohmann::json;

namespace {

const std::string k_python = SDPA_TEST_PYTHON;
const std::string k_script = SDPA_TEST_PROBE_SCRIPT;
constexpr const char* k_forked = "forked by the start-up server";

bool python_has_torch() { return sdpa_test::imports_torch(k_python); }

class ProbeServer : public ::testing::Test {
protected:
  void SetUp() override {
    if (!python_has_torch()) GTEST_SKIP() << "no Python with torch";
    const Case c = *parse_case_spec("dtype=fp32,b=1,h=1,l=16,d=8");
    const Tolerance t = cases::default_tolerance(c.dtype);
    ASSERT_TRUE(protocol::write_cases_file(
                    m_cases, {protocol::make_case_line(c, t, cases::gradient_tolerance(t), "", 1, 1)})
                    .has_value());
    isolate::Command cmd;
    cmd.argv = {k_python, k_script, "--serve", m_socket};
    auto service = isolate::Service::start(cmd, m_dir.file("server.log"));
    ASSERT_TRUE(service.has_value()) << service.error().message;
    m_server = std::move(*service);
    // It listens before it imports torch: a worker that comes early waits in the backlog.
    for (int i = 0; i < 200 && !std::filesystem::exists(m_socket); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ASSERT_TRUE(std::filesystem::exists(m_socket)) << sdpa_test::read_file(m_dir.file("server.log"));
  }

  sdpa_test::WorkerRun worker(const std::string& variant, std::map<std::string, std::string> env = {},
                              int timeout_s = 120) {
    env.emplace("SDPA_DOCTOR_PROBE_SERVER", m_socket);
    return sdpa_test::run_worker_process({k_python, k_script, "--device", "cpu", "--variant",
                                          variant, "--results-fd", "3", "--cases", m_cases},
                                         env, {"SDPA_DOCTOR_TEST_FAULT"}, timeout_s);
  }

  // The pids whose parent is the server: the workers it forked and that still run.
  std::vector<int> server_children() const {
    std::vector<int> out;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      std::ifstream stat(entry.path() / "stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      const auto close = line.rfind(')');
      if (close == std::string::npos) continue;
      char state = 0;
      int ppid = 0;
      if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 &&
          ppid == m_server->pid() && state != 'Z')
        out.push_back(std::stoi(entry.path().filename().string()));
    }
    return out;
  }

  sdpa_test::TempDir m_dir;
  std::string m_socket = m_dir.file("s.sock");
  std::string m_cases = m_dir.file("cases.jsonl");
  std::unique_ptr<isolate::Service> m_server;
};

json hello_facts(const sdpa_test::WorkerRun& run) {
  for (const json& e : run.events)
    if (e.value("event", "") == "hello") return e.at("facts");
  return json::object();
}

TEST_F(ProbeServer, EachChildHasItsOwnVariantEnvironmentAndFaLibrary) {
  struct Expect {
    const char* variant;
    const char* environment;
    const char* library;
  };
  // Default after AOTriton and Ck again after Default: nothing one child set reaches the next.
  const Expect expected[] = {
      {"flash[ck]", "TORCH_ROCM_FA_PREFER_CK=1", "Ck"},
      {"flash[aotriton,experimental]",
       "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1,TORCH_ROCM_FA_PREFER_CK=0", "AOTriton"},
      {"math", "", "Default"},
      {"flash[ck]", "TORCH_ROCM_FA_PREFER_CK=1", "Ck"}};
  for (const Expect& e : expected) {
    const auto run = worker(e.variant);
    EXPECT_EQ(run.exit_code, 0) << e.variant << ": " << run.err;
    const json facts = hello_facts(run);
    EXPECT_EQ(facts.value("started", ""), k_forked) << e.variant;
    EXPECT_EQ(facts.value("variant_environment", "?"), e.environment) << e.variant;
    EXPECT_NE(facts.value("preferred_rocm_fa_library", "").find(e.library), std::string::npos)
        << e.variant << ": " << facts.dump();
  }
}

TEST_F(ProbeServer, ACrashedChildIsTheWorkersCrashAndTheNextChildRuns) {
  const auto crashed = worker("math", {{"SDPA_DOCTOR_TEST_FAULT", "variant=math,case=*,action=segv"}});
  EXPECT_EQ(crashed.signal, SIGSEGV) << crashed.exit_code << " " << crashed.err;
  const auto next = worker("flash");
  EXPECT_EQ(next.exit_code, 0) << next.err;
  ASSERT_EQ(next.results().size(), 1u);
  EXPECT_EQ(next.results()[0].value("status", ""), "pass");
  EXPECT_EQ(hello_facts(next).value("started", ""), k_forked);
}

TEST_F(ProbeServer, AKilledWorkerTakesItsChildDown) {
  const auto hung = worker("math", {{"SDPA_DOCTOR_TEST_FAULT", "variant=math,case=*,action=hang"}}, 5);
  EXPECT_TRUE(hung.timed_out);
  std::vector<int> left = server_children();
  for (int i = 0; i < 100 && !left.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    left = server_children();
  }
  EXPECT_TRUE(left.empty()) << left.size() << " children of the server still run";
  EXPECT_EQ(worker("math").exit_code, 0); // and it still serves
}

TEST_F(ProbeServer, WithoutAServerTheWorkerRunsItself) {
  const auto run = worker("math", {{"SDPA_DOCTOR_PROBE_SERVER", m_dir.file("none.sock")}});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(hello_facts(run).value("started", ""), "exec");
  ASSERT_EQ(run.results().size(), 1u);
  EXPECT_EQ(run.results()[0].value("status", ""), "pass");
}

TEST(ProbeServerCheck, EveryPythonWorkerIsForkedAndNoServerOutlivesTheRun) {
  if (!python_has_torch()) GTEST_SKIP() << "no Python with torch";
  sdpa_test::TempDir dir;
  const auto run = sdpa_test::run_binary(
      {sdpa_test::doctor(), "check", "-q", "--probe", "python", "--python", k_python, "--variant",
       "math,flash", "--case", "dtype=fp32,b=1,h=1,l=16,d=8", "--json", dir.file("r.json"),
       "--run-dir", dir.file("run")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("workers").size(), 2u);
  for (const json& w : report.at("workers"))
    EXPECT_EQ(w.at("facts").value("started", ""), k_forked) << w.dump();
  int server_pid = 0;
  std::ifstream journal(dir.file("run/journal.jsonl"));
  for (std::string line; std::getline(journal, line);)
    if (const json e = json::parse(line); e.value("event", "") == "probe-server")
      server_pid = e.at("pid").get<int>();
  ASSERT_GT(server_pid, 0);
  EXPECT_NE(::kill(server_pid, 0), 0) << "the server outlived the run";
}

} // namespace

namespace {

TEST(ProbeServerCheck, AThreadPoolThatTorchsImportStartsDoesNotStopTheServer) {
  if (!python_has_torch()) GTEST_SKIP() << "no Python with torch";
  // torch imports numpy where it is installed, and numpy's OpenBLAS starts a thread per core at
  // load unless OPENBLAS_NUM_THREADS=1: this stand-in does the same, so a server that did not
  // set the variable would see a second thread and refuse to fork.
  sdpa_test::TempDir dir;
  std::filesystem::create_directories(dir.file("site/numpy"));
  std::ofstream(dir.file("site/numpy/__init__.py"))
      << "import os, threading, time\n"
         "if os.environ.get('OPENBLAS_NUM_THREADS') != '1':\n"
         "    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
         "def __getattr__(name):  # any other name torch looks up: a stand-in type\n"
         "    globals()[name] = type(name, (), {})\n"
         "    return globals()[name]\n";
  sdpa_test::RunOptions options;
  options.set_env = {{"PYTHONPATH", dir.file("site")}};
  const auto run = sdpa_test::run_binary(
      {sdpa_test::doctor(), "check", "-q", "--probe", "python", "--python", k_python, "--variant",
       "math", "--case", "dtype=fp32,b=1,h=1,l=16,d=8", "--json", dir.file("r.json"), "--run-dir",
       dir.file("run")},
      options);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("workers").size(), 1u);
  EXPECT_EQ(report.at("workers").at(0).at("facts").value("started", ""), k_forked)
      << sdpa_test::read_file(dir.file("run/probe-server.log"));
}

} // namespace

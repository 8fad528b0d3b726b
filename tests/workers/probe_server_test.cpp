// The start-up servers, started the way the runner starts them (isolate::Service), with real
// workers forked from them: the Python probe's (sdpa_probe --serve) and the libtorch workers'
// (sdpa-doctor-torch-worker --serve). A crash of a child is its worker's crash and the next still
// runs, a killed worker takes its child down, and without a server the worker runs itself; each
// Python child has its own variant environment and FA library. Through the binary: a check forks
// every worker of both probes and leaves no server behind.
#include "isolate/isolate.hpp"
#include "support/run_binary.hpp"
#include "worker_process.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <fstream>
#include <map>
#include <ostream>
#include <string>
#include <vector>

using namespace sdpa_doctor;
using nlohmann::json;

namespace {

const std::string k_python = SDPA_TEST_PYTHON;
const std::string k_script = SDPA_TEST_PROBE_SCRIPT;
const std::string k_torch_worker = SDPA_TEST_TORCH_WORKER;
constexpr const char* k_forked = "forked by the start-up server";

bool python_has_torch() { return sdpa_test::imports_torch(k_python); }

// One kind of start-up server: how it is started and how its workers are.
struct Server {
  std::string name;
  std::vector<std::string> program; // the worker's program; `--serve SOCKET` makes it the server
  std::string socket_variable;      // where a worker finds the server
  std::string started_alone;        // the hello's "started" fact of a worker that ran itself
  std::string why_not;              // why this machine cannot run it; empty when it can
};

void PrintTo(const Server& server, std::ostream* os) { *os << server.name; }

Server python_server() {
  return {"python", {k_python, k_script}, "SDPA_DOCTOR_PROBE_SERVER", "exec",
          python_has_torch() ? "" : "no Python with torch"};
}

Server libtorch_server() {
  return {"libtorch", {k_torch_worker}, "SDPA_DOCTOR_TORCH_SERVER", "",
          k_torch_worker.empty() ? "sdpa-doctor-torch-worker is not built (no LibTorch)" : ""};
}

class StartUpServer : public ::testing::TestWithParam<Server> {
protected:
  void SetUp() override {
    if (!GetParam().why_not.empty()) GTEST_SKIP() << GetParam().why_not;
    sdpa_test::write_one_case(m_cases);
    isolate::Command cmd;
    cmd.argv = GetParam().program;
    cmd.argv.insert(cmd.argv.end(), {"--serve", m_socket});
    auto service = isolate::Service::start(cmd, m_dir.file("server.log"));
    ASSERT_TRUE(service.has_value()) << service.error().message;
    m_server = std::move(*service);
    // It listens before it loads torch: a worker that comes early waits in the backlog.
    ASSERT_TRUE(sdpa_test::wait_for_socket(m_socket)) << sdpa_test::read_file(m_dir.file("server.log"));
  }

  sdpa_test::WorkerRun worker(const std::string& variant, std::map<std::string, std::string> env = {},
                              int timeout_s = 120) {
    env.emplace(GetParam().socket_variable, m_socket);
    std::vector<std::string> argv = GetParam().program;
    argv.insert(argv.end(), {"--device", "cpu", "--variant", variant, "--results-fd", "3",
                             "--cases", m_cases});
    return sdpa_test::run_worker_process(argv, env, {"SDPA_DOCTOR_TEST_FAULT"}, timeout_s);
  }

  sdpa_test::TempDir m_dir;
  std::string m_socket = m_dir.file("s.sock");
  std::string m_cases = m_dir.file("cases.jsonl");
  std::unique_ptr<isolate::Service> m_server;
};

using PythonServer = StartUpServer;

TEST_P(PythonServer, EachChildHasItsOwnVariantEnvironmentAndFaLibrary) {
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
    const json facts = run.hello_facts();
    EXPECT_EQ(facts.value("started", ""), k_forked) << e.variant;
    EXPECT_EQ(facts.value("variant_environment", "?"), e.environment) << e.variant;
    EXPECT_NE(facts.value("preferred_rocm_fa_library", "").find(e.library), std::string::npos)
        << e.variant << ": " << facts.dump();
  }
}

TEST_P(StartUpServer, EachVariantRunsInAChildForkedFromTheServer) {
  for (const char* variant : {"math", "flash", "default", "math"}) {
    const auto run = worker(variant);
    EXPECT_EQ(run.exit_code, 0) << variant << ": " << run.err;
    EXPECT_EQ(run.hello_facts().value("started", ""), k_forked) << variant;
    ASSERT_EQ(run.results().size(), 1u) << variant;
    EXPECT_EQ(run.results()[0].value("status", ""), "pass") << variant;
  }
}

TEST_P(StartUpServer, ACrashedChildIsTheWorkersCrashAndTheNextChildRuns) {
  const auto crashed = worker("math", {{"SDPA_DOCTOR_TEST_FAULT", "variant=math,case=*,action=segv"}});
  EXPECT_EQ(crashed.signal, SIGSEGV) << crashed.exit_code << " " << crashed.err;
  const auto exited = worker("math", {{"SDPA_DOCTOR_TEST_FAULT", "variant=math,case=*,action=exit3"}});
  EXPECT_EQ(exited.exit_code, 3) << exited.err;
  const auto next = worker("flash");
  EXPECT_EQ(next.exit_code, 0) << next.err;
  ASSERT_EQ(next.results().size(), 1u);
  EXPECT_EQ(next.results()[0].value("status", ""), "pass");
  EXPECT_EQ(next.hello_facts().value("started", ""), k_forked);
}

TEST_P(StartUpServer, AKilledWorkerTakesItsChildDown) {
  const auto hung = worker("math", {{"SDPA_DOCTOR_TEST_FAULT", "variant=math,case=*,action=hang"}}, 5);
  EXPECT_TRUE(hung.timed_out);
  const std::vector<int> left = sdpa_test::children_left(m_server->pid());
  EXPECT_TRUE(left.empty()) << left.size() << " children of the server still run";
  EXPECT_EQ(worker("math").exit_code, 0); // and it still serves
}

TEST_P(StartUpServer, WithoutAServerTheWorkerRunsItself) {
  const auto run = worker("math", {{GetParam().socket_variable, m_dir.file("none.sock")}});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.hello_facts().value("started", ""), GetParam().started_alone);
  ASSERT_EQ(run.results().size(), 1u);
  EXPECT_EQ(run.results()[0].value("status", ""), "pass");
}

std::string name_of(const ::testing::TestParamInfo<Server>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Probes, StartUpServer, ::testing::Values(python_server(), libtorch_server()),
                         name_of);
INSTANTIATE_TEST_SUITE_P(Probes, PythonServer, ::testing::Values(python_server()), name_of);

// A check through the binary: every worker of `probe` forked, and its server gone afterwards.
void expect_forked_workers_and_no_server_left(const std::string& probe,
                                              std::vector<std::string> extra) {
  sdpa_test::TempDir dir;
  std::vector<std::string> argv = {sdpa_test::doctor(), "check", "-q", "--probe", probe, "--variant",
                                   "math,flash", "--case", "dtype=fp32,b=1,h=1,l=16,d=8", "--json",
                                   dir.file("r.json"), "--run-dir", dir.file("run")};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto run = sdpa_test::run_binary(argv);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("workers").size(), 2u);
  for (const json& w : report.at("workers"))
    EXPECT_EQ(w.at("facts").value("started", ""), k_forked) << w.dump();
  int server_pid = 0;
  std::ifstream journal(dir.file("run/journal.jsonl"));
  for (std::string line; std::getline(journal, line);)
    if (const json e = json::parse(line);
        e.value("event", "") == "probe-server" && e.value("probe", "") == probe)
      server_pid = e.at("pid").get<int>();
  ASSERT_GT(server_pid, 0);
  EXPECT_NE(::kill(server_pid, 0), 0) << "the server outlived the run";
}

TEST(ProbeServerCheck, EveryPythonWorkerIsForkedAndNoServerOutlivesTheRun) {
  if (!python_has_torch()) GTEST_SKIP() << "no Python with torch";
  expect_forked_workers_and_no_server_left("python", {"--python", k_python});
}

TEST(ProbeServerCheck, EveryLibtorchWorkerIsForkedAndNoServerOutlivesTheRun) {
  if (k_torch_worker.empty()) GTEST_SKIP() << "sdpa-doctor-torch-worker is not built (no LibTorch)";
  expect_forked_workers_and_no_server_left("libtorch", {});
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

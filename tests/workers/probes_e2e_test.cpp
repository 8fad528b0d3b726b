// The real workers (LibTorch 2.x CPU, the sdpa_probe package with the configured interpreter) run
// as child processes with their results on a pipe, exactly as the runner starts them.
#include "core/inputs.hpp"
#include "cases/cases.hpp"
#include "protocol/protocol.hpp"
#include "workers/oracle_file.hpp"
#include "support/run_binary.hpp"
#include "worker_process.hpp"

#include <algorithm>
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

using namespace sdpa_doctor;
using namespace sdpa_doctor::cases;
using namespace sdpa_doctor::workers;
using sdpa_doctor::protocol::make_case_line;
using sdpa_doctor::protocol::write_cases_file;
using sdpa_test::WorkerRun;

namespace {

const std::string k_torch_worker = SDPA_TEST_TORCH_WORKER;
const std::string k_python = SDPA_TEST_PYTHON;
const std::string k_script = SDPA_TEST_PROBE_SCRIPT;

bool python_has_torch() { return sdpa_test::imports_torch(k_python); }

enum class Worker { torch, python };

std::string name(Worker w) { return w == Worker::torch ? "libtorch" : "python"; }

// Writes the cases (with oracle files when `oracles`) and returns the cases file path.
std::string write_cases(const sdpa_test::TempDir& dir, const std::vector<Case>& cases,
                        bool oracles, const std::map<std::string, Tolerance>& tolerance = {}) {
  std::vector<std::string> lines;
  for (const Case& c : cases) {
    std::string oracle;
    if (oracles) {
      oracle = dir.file(c.id() + ".f64");
      EXPECT_TRUE(write_oracle_file(oracle, compute_oracle(c)).has_value());
    }
    const auto it = tolerance.find(c.id());
    const Tolerance t = it == tolerance.end() ? default_tolerance(c.dtype) : it->second;
    lines.push_back(make_case_line(c, t, gradient_tolerance(t), oracle, 1, 1));
  }
  const std::string path = dir.file("cases.jsonl");
  EXPECT_TRUE(write_cases_file(path, lines).has_value());
  return path;
}

WorkerRun run(Worker w, const std::string& variant, const std::string& cases,
              const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> argv;
  if (w == Worker::torch) argv = {k_torch_worker};
  else argv = {k_python, k_script};
  for (const char* a : {"--device", "cpu", "--variant"}) argv.emplace_back(a);
  argv.push_back(variant);
  for (const char* a : {"--results-fd", "3", "--cases"}) argv.emplace_back(a);
  argv.push_back(cases);
  return sdpa_test::run_worker_process(argv, env, {"SDPA_DOCTOR_TEST_FAULT"});
}

std::string fmt_g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::vector<Case> quick() { return *suite_cases("quick"); }

std::vector<Case> few() {
  std::vector<Case> out;
  for (const char* spec : {"dtype=fp16,h=2,l=64,d=64", "dtype=bf16,h=2,l=33,d=128,causal",
                           "dtype=fp32,hq=4,hkv=2,lq=1,lkv=40,d=64,mask=bool"})
    out.push_back(*parse_case_spec(spec));
  return out;
}

// hello, begin and result per case, bye; and a `phase` event per backward case.
void expect_protocol_shape(const WorkerRun& r, size_t cases, Worker w, const std::string& variant,
                           size_t backward_cases = 0) {
  ASSERT_TRUE(r.broken.empty()) << r.broken.front();
  ASSERT_EQ(r.events.size(), 2 * cases + 2 + backward_cases) << r.err;
  size_t phases = 0;
  for (const auto& e : r.events) phases += e["event"] == "phase" ? 1 : 0;
  EXPECT_EQ(phases, backward_cases);
  EXPECT_EQ(r.events.front()["event"], "hello");
  EXPECT_EQ(r.events.front()["worker"], name(w));
  EXPECT_EQ(r.events.front()["variant"], variant);
  EXPECT_EQ(r.events.back()["event"], "bye");
  for (const auto& e : r.events) EXPECT_EQ(e["v"], 1);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

class WorkerTest : public ::testing::TestWithParam<Worker> {
protected:
  void SetUp() override {
    if (GetParam() == Worker::torch && k_torch_worker.empty())
      GTEST_SKIP() << "sdpa-doctor-torch-worker is not built (no LibTorch)";
    if (GetParam() == Worker::python && !python_has_torch())
      GTEST_SKIP() << "no python with torch configured (SDPA_DOCTOR_PYTHON)";
  }
  sdpa_test::TempDir m_dir;
};

} // namespace

TEST_P(WorkerTest, QuickSuitePassesOnCpuForMathFlashDefault) {
  const auto cases = quick();
  const std::string file = write_cases(m_dir, cases, /*oracles=*/GetParam() == Worker::torch);
  for (const char* variant : {"math", "flash", "default"}) {
    const auto t0 = std::chrono::steady_clock::now();
    WorkerRun r = run(GetParam(), variant, file);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t backward = size_t(std::count_if(cases.begin(), cases.end(),
                                                 [](const Case& c) { return c.backward; }));
    EXPECT_GT(backward, 0u);
    expect_protocol_shape(r, cases.size(), GetParam(), variant, backward);
    std::map<std::string, double> worst; // per dtype: max abs err / atol
    for (const Case& c : cases) {
      const auto res = r.result(c.id());
      ASSERT_FALSE(res.is_null()) << c.id();
      // Torch's CPU flash has no dropout: it refuses cleanly (default then picks math).
      const bool refused = c.dropout_percent > 0 && std::string(variant) == "flash";
      EXPECT_EQ(res["status"], refused ? "unsupported" : "pass")
          << variant << " " << c.id() << ": " << res["reason"];
      if (res["status"] != "pass") continue;
      EXPECT_EQ(res["tolerance"]["atol"], default_tolerance(c.dtype).atol);
      const double err = res["metrics"]["max_abs_err"].get<double>();
      auto& w = worst[std::string(to_string(c.dtype))];
      w = std::max(w, err);
      if (std::string(variant) != "default") EXPECT_EQ(res["backend_chosen"], variant);
      else EXPECT_TRUE(res["backend_chosen"] == "flash" || res["backend_chosen"] == "math");
    }
    std::string summary;
    for (const auto& [dtype, err] : worst) summary += " " + dtype + "=" + fmt_g(err);
    std::printf("[ measured ] %s %s: %zu cases in %.1f s, max abs err%s\n", name(GetParam()).c_str(),
                variant, cases.size(), s, summary.c_str());
  }
}

TEST_P(WorkerTest, MemEfficientAndCudnnAreUnsupportedWithTorchsReason) {
  const auto cases = few();
  const std::string file = write_cases(m_dir, cases, false);
  for (const char* variant : {"mem_efficient", "cudnn"}) {
    WorkerRun r = run(GetParam(), variant, file);
    expect_protocol_shape(r, cases.size(), GetParam(), variant);
    for (const auto& res : r.results()) {
      EXPECT_EQ(res["status"], "unsupported") << res.dump();
      // torch 2.13's own text; older and newer builds phrase the refusal differently.
      const std::string reason = res["reason"];
      EXPECT_TRUE(reason.find("No viable backend") != std::string::npos ||
                  reason.find("No available kernel") != std::string::npos)
          << reason;
    }
  }
}

TEST_P(WorkerTest, RocmOnlyVariantsAreUnsupportedOnACpuTorch) {
  const auto cases = few();
  WorkerRun r = run(GetParam(), "flash[ck]", write_cases(m_dir, cases, false));
  expect_protocol_shape(r, cases.size(), GetParam(), "flash[ck]");
  for (const auto& res : r.results()) {
    EXPECT_EQ(res["status"], "unsupported");
    EXPECT_NE(res["reason"].get<std::string>().find("not a ROCm build"), std::string::npos);
  }
}

TEST_P(WorkerTest, CorruptedOutputIsCaughtForTheRightCase) {
  const auto cases = few();
  const std::string file = write_cases(m_dir, cases, true);
  const std::string target = cases[1].id();
  for (const auto& [action, status] :
       std::vector<std::pair<std::string, std::string>>{{"nan", "nonfinite"}, {"perturb", "mismatch"}}) {
    WorkerRun r = run(GetParam(), "flash", file,
                      {{"SDPA_DOCTOR_TEST_FAULT", "variant=flash,case=" + target + ",action=" + action}});
    expect_protocol_shape(r, cases.size(), GetParam(), "flash");
    for (const Case& c : cases) {
      const auto res = r.result(c.id());
      EXPECT_EQ(res["status"], c.id() == target ? status : "pass") << action << " " << res.dump();
    }
    if (action == "nan") {
      EXPECT_EQ(r.result(target)["metrics"]["nan_count"], 1);
    }
  }
  // Another variant is untouched.
  WorkerRun other = run(GetParam(), "math", file,
                        {{"SDPA_DOCTOR_TEST_FAULT", "variant=flash,case=*,action=nan"}});
  for (const auto& res : other.results()) EXPECT_EQ(res["status"], "pass") << res.dump();
}

TEST_P(WorkerTest, ZeroToleranceMakesAFp16FlashCaseMismatch) {
  const auto cases = few();
  const std::string file = write_cases(m_dir, cases, false, {{cases[0].id(), Tolerance{0, 0}}});
  WorkerRun r = run(GetParam(), "flash", file);
  expect_protocol_shape(r, cases.size(), GetParam(), "flash");
  const auto res = r.result(cases[0].id());
  EXPECT_EQ(res["status"], "mismatch") << res.dump();
  EXPECT_EQ(res["tolerance"]["atol"], 0.0);
  EXPECT_GT(res["metrics"]["frac_outside_tol"].get<double>(), 0.0);
  EXPECT_EQ(r.result(cases[1].id())["status"], "pass");
}

TEST_P(WorkerTest, ProcessFaultsReallyHappenAtTheMatchingCase) {
  const auto cases = few();
  const std::string file = write_cases(m_dir, cases, false);
  const std::string target = cases[1].id();
  struct Expect {
    std::string action;
    int signal;
    int exit_code;
  };
  for (const Expect& e : {Expect{"abort", SIGABRT, -1}, Expect{"segv", SIGSEGV, -1},
                          Expect{"exit3", 0, 3}}) {
    WorkerRun r = run(GetParam(), "math", file,
                      {{"SDPA_DOCTOR_TEST_FAULT", "variant=*,case=" + target + ",action=" + e.action}});
    EXPECT_EQ(r.signal, e.signal) << e.action << r.err;
    EXPECT_EQ(r.exit_code, e.exit_code) << e.action;
    ASSERT_GE(r.events.size(), 4u) << e.action;
    EXPECT_EQ(r.result(cases[0].id())["status"], "pass");
    EXPECT_EQ(r.events.back()["event"], "begin");
    EXPECT_EQ(r.events.back()["case"], target);
  }
}

std::string worker_param_name(const ::testing::TestParamInfo<Worker>& param) {
  return name(param.param);
}
TEST_P(WorkerTest, SdpaCallsUseTheConfiguredPoolAndTheWorkerEndsCleanly) {
  const auto cases = few();
  const std::string file = write_cases(m_dir, cases, /*oracles=*/false);
  WorkerRun r = run(GetParam(), "math", file, {{"OMP_NUM_THREADS", "2"}});
  // Every event arrives and the exit code is 0, though the python worker skips its teardown.
  expect_protocol_shape(r, cases.size(), GetParam(), "math");
  const auto& facts = r.events.front()["facts"];
  EXPECT_EQ(facts["threads"], "2") << facts.dump();
  EXPECT_EQ(facts["timing_threads"], "2") << facts.dump();
  EXPECT_EQ(facts["check_threads"], "1") << facts.dump(); // a PyPI/LibTorch CPU build: OpenMP
  for (const Case& c : cases) EXPECT_EQ(r.result(c.id())["status"], "pass") << c.id();
}

INSTANTIATE_TEST_SUITE_P(Workers, WorkerTest, ::testing::Values(Worker::torch, Worker::python),
                         worker_param_name);

TEST(PythonWorker, WithoutTorchEveryCaseIsUnsupported) {
  // The system interpreter, isolated from user site-packages, has no torch here.
  std::string python = "/usr/bin/python3";
  if (!std::filesystem::exists(python)) GTEST_SKIP() << "no /usr/bin/python3";
  if (sdpa_test::run_binary({python, "-I", "-c", "import torch"}).exit_code == 0)
    GTEST_SKIP() << python << " has torch";
  sdpa_test::TempDir dir;
  const auto cases = few();
  const std::string file = write_cases(dir, cases, false);
  WorkerRun r = sdpa_test::run_worker_process(
      {python, "-I", k_script, "--device", "cpu", "--variant", "math", "--results-fd", "3",
       "--cases", file},
      {{"PYTHONNOUSERSITE", "1"}}, {"PYTHONPATH"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.events.size(), 2 * cases.size() + 2) << r.err;
  EXPECT_EQ(r.events.front()["facts"]["torch"], "missing");
  for (const auto& res : r.results()) {
    EXPECT_EQ(res["status"], "unsupported");
    EXPECT_EQ(res["reason"], "python: No module named 'torch'");
  }
}

TEST(PythonWorker, RefusalsAreTheCppList) {
  // The Python worker reads the installed data file; it must hold what the C++ side compiled.
  const std::string python = k_python.empty() ? "/usr/bin/python3" : k_python;
  // The data directory: k_script is sdpa_probe/__main__.py there.
  const std::string dir = std::filesystem::path(k_script).parent_path().parent_path().string();
  auto r = sdpa_test::run_binary(
      {python, "-B", "-c",
       "import json,sys; sys.path.insert(0, sys.argv[1]); from sdpa_probe import backends; "
       "print(json.dumps(list(backends.REFUSALS)))",
       dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::vector<std::string> compiled(backend_refusals().begin(), backend_refusals().end());
  EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<std::string>>(), compiled);
}

TEST(PythonWorker, InputsAreBitExactWithCore) {
  if (!python_has_torch()) GTEST_SKIP() << "no python with torch configured";
  sdpa_test::TempDir dir;
  for (const char* spec :
       {"dtype=fp16,b=2,hq=4,hkv=2,lq=5,lkv=77,d=64,mask=bool,seed=3",
        "dtype=bf16,h=3,lq=9,lkv=17,d=32,mask=additive,seed=123456789",
        "dtype=fp32,h=2,l=33,d=128,seed=4294967297", "dtype=fp16,h=1,l=300,d=16,mask=additive",
        // Over the generator's chunk of 2^18 elements, and not a multiple of it.
        "dtype=bf16,b=1,h=3,lq=1,lkv=1500,d=80,seed=9",
        // A mask's own dtype, shapes (values over the shape passed), a window, large values.
        "dtype=bf16,b=2,h=2,lq=7,lkv=19,d=16,mask=additive,mask_dtype=fp32,mask_shape=11qk",
        "dtype=fp16,b=2,hq=4,hkv=2,lq=9,lkv=33,d=16,mask=bool,mask_shape=bhqk,seed=5",
        "dtype=fp32,b=3,h=1,lq=5,lkv=9,d=8,mask=additive,mask_shape=qk,mask_layout=strided",
        "dtype=fp16,b=2,h=1,lq=40,lkv=24,d=8,window=6",
        "dtype=bf16,h=2,l=16,d=32,large,v_layout=offset",
        // Fully masked rows (every fourth query row) in masks of both kinds and every shape.
        "dtype=fp16,b=2,h=2,lq=11,lkv=19,d=16,mask=bool,masked_rows,seed=7",
        "dtype=bf16,b=2,h=2,lq=9,lkv=13,d=8,mask=additive,masked_rows",
        "dtype=fp16,b=2,h=2,lq=9,lkv=13,d=8,mask=additive,mask_dtype=fp32,mask_shape=qk,"
        "masked_rows",
        "dtype=fp32,b=2,hq=4,hkv=2,lq=7,lkv=5,d=8,mask=bool,mask_shape=bhqk,masked_rows,"
        "backward"}) {
    const Case c = *parse_case_spec(spec);
    const std::string out = dir.file("dump.f32");
    auto r = sdpa_test::run_binary(
        {k_python, k_script, "--dump-inputs", to_json(c).dump(), out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string bytes = sdpa_test::read_file(out);
    const HostInputs in = make_inputs(c);
    std::vector<float> expect;
    for (const auto* v : {&in.q, &in.k, &in.v, &in.mask}) expect.insert(expect.end(), v->begin(), v->end());
    ASSERT_EQ(bytes.size(), expect.size() * 4) << spec;
    EXPECT_EQ(std::memcmp(bytes.data(), expect.data(), bytes.size()), 0) << spec;
  }
}

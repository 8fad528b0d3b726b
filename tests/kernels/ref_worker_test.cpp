// The reference worker binary end to end: protocol events on the results fd for the CPU (where it
// opens no GPU library), every case `unsupported` with the reason on a GPU that is not there,
// --health-check, and the AMD path on a fake gfx1201 (fake/fake_hip.cpp, fake/fake_hiprtc.cpp:
// the kernels compiled for its arch, cached, run; a source the compiler refuses is our error).
#include "cases/cases.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <sys/stat.h>

namespace {

const std::string k_cases =
    R"({"v":1,"id":"c1","case":{"dtype":"fp16","b":1,"hq":4,"hkv":2,"lq":33,"lkv":70,"d":40,"causal":true,"mask":"none","layout":"transposed","seed":3},"tolerance":{"atol":2e-3,"rtol":2e-3},"gradient_tolerance":{"atol":0.1,"rtol":0.1},"oracle":null,"warmup":1,"repeat":3})"
    "\n"
    R"({"v":1,"id":"c2","case":{"dtype":"bf16","b":2,"hq":2,"hkv":2,"lq":1,"lkv":17,"d":64,"causal":false,"mask":"bool","layout":"contiguous","seed":0},"tolerance":{"atol":1.6e-2,"rtol":1.6e-2},"gradient_tolerance":{"atol":0.1,"rtol":0.1},"oracle":null,"warmup":0,"repeat":2})"
    "\n"
    // A tolerance no fp16 kernel can meet: the worker must say mismatch, not pass.
    R"({"v":1,"id":"c3","case":{"dtype":"fp16","b":1,"hq":1,"hkv":1,"lq":16,"lkv":16,"d":16,"causal":false,"mask":"additive","layout":"contiguous","seed":1},"tolerance":{"atol":0,"rtol":0},"gradient_tolerance":{"atol":0.1,"rtol":0.1},"oracle":null,"warmup":0,"repeat":1})"
    "\n";

std::vector<nlohmann::json> run_worker(const std::string& device, const std::string& variant,
                                       int* exit_code, const sdpa_test::RunOptions& options = {},
                                       std::string* err = nullptr,
                                       const std::string& cases = k_cases) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("cases.jsonl"), cases);
  // The worker writes to fd 3: a shell opens it on a file for us.
  const std::string cmd = "exec \"$0\" --device " + device + " --variant " + variant +
                          " --results-fd 3 --cases \"$1\" 3>\"$2\"";
  const auto r = sdpa_test::run_binary({"/bin/sh", "-c", cmd,
                                        sdpa_test::build_path("sdpa-doctor-ref-worker"),
                                        dir.file("cases.jsonl"), dir.file("events.jsonl")},
                                       options);
  *exit_code = r.exit_code;
  if (err) *err = r.err;
  std::vector<nlohmann::json> events;
  std::istringstream lines(sdpa_test::read_file(dir.file("events.jsonl")));
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json event = nlohmann::json::parse(line);
    sdpa_doctor::cases::judge_worker_event(event); // as the doctor reads it
    events.push_back(std::move(event));
  }
  return events;
}

TEST(RefWorker, CpuCasesFollowTheProtocol) {
  for (const char* variant : {"ref-math", "ref-flash"}) {
    int rc = -1;
    const auto ev = run_worker("cpu", variant, &rc);
    EXPECT_EQ(rc, 0);
    ASSERT_EQ(ev.size(), 8u) << variant;
    EXPECT_EQ(ev[0]["event"], "hello");
    EXPECT_EQ(ev[0]["worker"], "reference");
    EXPECT_EQ(ev[0]["variant"], variant);
    for (const auto& e : ev) EXPECT_EQ(e["v"], 1);
    EXPECT_EQ(ev[1]["event"], "begin");
    EXPECT_EQ(ev[1]["case"], "c1");
    EXPECT_EQ(ev[2]["event"], "result");
    EXPECT_EQ(ev[2]["status"], "pass") << ev[2].dump();
    EXPECT_EQ(ev[2]["metrics"]["timed_runs"], 3);
    EXPECT_EQ(ev[2]["backend_chosen"], variant);
    EXPECT_EQ(ev[4]["status"], "pass") << ev[4].dump();
    EXPECT_EQ(ev[6]["case"], "c3");
    EXPECT_EQ(ev[6]["status"], "mismatch") << ev[6].dump();
    EXPECT_EQ(ev[7]["event"], "bye");
  }
}

// Past its CPU scope ref-math declines at once, saying why; ref-flash stays the witness there.
TEST(RefWorker, RefMathDeclinesCasesPastItsCpuScope) {
  const std::string big =
      R"({"v":1,"id":"big","case":{"dtype":"fp32","b":1,"hq":8,"hkv":8,"lq":4096,"lkv":4096,"d":128,"causal":false,"mask":"none","layout":"contiguous","seed":0},"tolerance":{"atol":1e-4,"rtol":1e-4},"gradient_tolerance":{"atol":0.1,"rtol":0.1},"oracle":null,"warmup":1,"repeat":3})"
      "\n";
  int rc = -1;
  const auto ev = run_worker("cpu", "ref-math", &rc, {}, nullptr, big);
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[2]["status"], "unsupported") << ev[2].dump();
  const std::string reason = ev[2]["reason"];
  EXPECT_NE(reason.find("up to 16 GFLOP and this one is 68.7 GFLOP"), std::string::npos) << reason;
  EXPECT_NE(reason.find("ref-flash is the CPU witness"), std::string::npos) << reason;
}

TEST(RefWorker, MissingGpuMakesEveryCaseUnsupported) {
  int rc = -1;
  const auto ev = run_worker("cuda:0", "ref-flash", &rc);
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(ev.size(), 8u);
  if (ev[2]["status"] != "unsupported") GTEST_SKIP() << "a GPU is present";
  for (size_t i : {2u, 4u, 6u}) {
    EXPECT_EQ(ev[i]["status"], "unsupported");
    const std::string reason = ev[i]["reason"];
    EXPECT_EQ(reason.rfind("no GPU device: HIP", 0), 0u) << reason;
    EXPECT_NE(reason.find("CUDA: "), std::string::npos) << reason;
  }
}

// The dynamic loader's own account (LD_DEBUG=files) of every library the worker opened.
std::string libraries_opened(const std::string& device) {
  sdpa_test::RunOptions options;
  options.set_env = {{"LD_DEBUG", "files"}};
  std::string err;
  int rc = -1;
  run_worker(device, "ref-flash", &rc, options, &err);
  EXPECT_EQ(rc, 0);
  return err;
}

TEST(RefWorker, OnTheCpuOpensNoGpuLibrary) {
  const std::string cpu = libraries_opened("cpu");
  ASSERT_NE(cpu.find("file=libc.so.6"), std::string::npos) << "LD_DEBUG said nothing";
  for (const char* gpu_library : {"libamdhip64", "libhiprtc", "libcuda.so", "libnvrtc"})
    EXPECT_EQ(cpu.find(gpu_library), std::string::npos) << gpu_library;
  // The same account on a GPU device names the HIP runtime it opened, where the machine has one.
  if (!std::filesystem::exists("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5"))
    GTEST_SKIP() << "no Debian HIP runtime here to show the account would name it";
  EXPECT_NE(libraries_opened("cuda:0").find("libamdhip64.so.5"), std::string::npos);
}

TEST(RefWorker, HealthCheck) {
  const std::string worker = sdpa_test::build_path("sdpa-doctor-ref-worker");
  EXPECT_EQ(sdpa_test::run_binary({worker, "--health-check", "--device", "cpu"}).exit_code, 0);
  const auto gpu = sdpa_test::run_binary({worker, "--health-check", "--device", "cuda:0"});
  if (gpu.exit_code == 0) GTEST_SKIP() << "a healthy GPU is present";
  // No GPU runtime opens at all: no verdict (77); one opens but has no such device: unhealthy.
  const bool no_runtime = gpu.err.rfind("cannot check cuda:0: ", 0) == 0;
  EXPECT_EQ(gpu.exit_code, no_runtime ? 77 : 1) << gpu.err;
  EXPECT_EQ(sdpa_test::line_count(gpu.err), 1) << gpu.err;
  EXPECT_EQ(sdpa_test::run_binary({worker, "--health-check", "--device", "gpu7"}).exit_code, 2);
}

// --- a fake AMD gfx1201 -------------------------------------------------------------------------
sdpa_test::RunOptions fake_amd(const sdpa_test::TempDir& dir) {
  sdpa_test::RunOptions options;
  options.set_env = {{"SDPA_DOCTOR_TORCH_LIB_DIRS", SDPA_TEST_FAKE_AMD},
                     {"SDPA_DOCTOR_KERNEL_CACHE", dir.file("cache")},
                     {"FAKE_HIPRTC_RECORD", dir.file("hiprtc.log")}};
  options.timeout_s = 600;
  return options;
}

// A second HIP runtime in the worker's own process (here preloaded, as a stray LD_PRELOAD or an
// extension linked against /opt/rocm does): the hello names both files, for the advice.
TEST(RefWorker, TwoHipRuntimesInItsOwnProcessAreInItsHello) {
  sdpa_test::TempDir dir;
  const std::string stray = dir.file("opt-rocm/libamdhip64.so.7");
  std::filesystem::create_directories(dir.file("opt-rocm"));
  std::filesystem::copy_file(std::string(SDPA_TEST_FAKE_AMD) + "/libamdhip64.so.7", stray);
  sdpa_test::RunOptions options = fake_amd(dir);
  int rc = -1;
  std::string err;
  const auto one = run_worker("cuda:0", "ref-math", &rc, options, &err);
  ASSERT_FALSE(one.empty()) << err;
  EXPECT_EQ(one[0]["facts"]["hip_runtime_count"], "1") << one[0].dump();

  options.set_env["LD_PRELOAD"] = stray;
  // An ASan build wants its runtime first in the library list; the preload goes before it.
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string before = asan && *asan ? std::string(asan) + ":" : std::string{};
  options.set_env["ASAN_OPTIONS"] = before + "verify_asan_link_order=0";
  const auto two = run_worker("cuda:0", "ref-math", &rc, options, &err);
  ASSERT_FALSE(two.empty()) << err;
  EXPECT_EQ(two[0]["facts"]["hip_runtime_count"], "2") << two[0].dump();
  const std::string files = two[0]["facts"]["hip_runtimes"];
  EXPECT_NE(files.find(stray), std::string::npos) << files;
  EXPECT_NE(files.find("fake-amd/libamdhip64.so.7"), std::string::npos) << files;
}

TEST(RefWorker, FakeAmdGpuRunsOurKernelsCompiledForItsArch) {
  sdpa_test::TempDir dir;
  for (const char* variant : {"ref-math", "ref-flash"}) {
    int rc = -1;
    std::string err;
    const auto ev = run_worker("cuda:0", variant, &rc, fake_amd(dir), &err);
    EXPECT_EQ(rc, 0) << err;
    ASSERT_EQ(ev.size(), 8u) << variant << err;
    const auto& facts = ev[0]["facts"];
    EXPECT_EQ(facts["gpu_arch"], "gfx1201") << ev[0].dump();
    EXPECT_EQ(facts["rtc_target"], "gfx1201 (hsaco)");
    EXPECT_NE(facts["compile_ms"], "cached");
    EXPECT_FALSE(ev[0].contains("unavailable")) << ev[0].dump();
    EXPECT_EQ(ev[2]["status"], "pass") << ev[2].dump();
    EXPECT_EQ(ev[2]["backend_chosen"], variant);
    EXPECT_EQ(ev[2]["metrics"]["timed_runs"], 3);
    EXPECT_EQ(ev[4]["status"], "pass") << ev[4].dump();
    EXPECT_EQ(ev[6]["status"], "mismatch") << ev[6].dump();
  }
  const std::string compiles = sdpa_test::read_file(dir.file("hiprtc.log"));
  EXPECT_EQ(std::count(compiles.begin(), compiles.end(), '\n'), 2) << compiles;
  EXPECT_NE(compiles.find("--offload-arch=gfx1201"), std::string::npos) << compiles;

  // A second worker finds the kernels in the cache: no compile.
  int rc = -1;
  const auto again = run_worker("cuda:0", "ref-flash", &rc, fake_amd(dir));
  ASSERT_EQ(again.size(), 8u);
  EXPECT_EQ(again[0]["facts"]["compile_ms"], "cached");
  EXPECT_EQ(again[2]["status"], "pass");
  EXPECT_EQ(sdpa_test::read_file(dir.file("hiprtc.log")), compiles);
}

TEST(RefWorker, FakeAmdGpuKeepsTheArchsFeatureFlags) {
  sdpa_test::TempDir dir;
  sdpa_test::RunOptions options = fake_amd(dir);
  options.set_env["FAKE_GPU_ARCH"] = "gfx90a:sramecc+:xnack-";
  int rc = -1;
  const auto ev = run_worker("cuda:0", "ref-flash", &rc, options);
  ASSERT_EQ(ev.size(), 8u);
  EXPECT_EQ(ev[0]["facts"]["gpu_arch"], "gfx90a:sramecc+:xnack-");
  EXPECT_EQ(ev[2]["status"], "pass") << ev[2].dump();
}

TEST(RefWorker, KernelThatDoesNotCompileIsOurErrorWithTheLog) {
  sdpa_test::TempDir dir;
  sdpa_test::RunOptions options = fake_amd(dir);
  options.set_env["FAKE_HIPRTC_FAIL"] = "1";
  int rc = -1;
  std::string err;
  const auto ev = run_worker("cuda:0", "ref-flash", &rc, options, &err);
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(ev.size(), 8u);
  EXPECT_FALSE(ev[0].contains("unavailable")) << "a defect of ours is no refusal";
  const std::string reason = "our reference kernel did not compile for gfx1201 (hipRTC 7.1): "
                             "attention_gpu.cu:1:2: error: the fake hipRTC refuses this source";
  for (size_t i : {2u, 4u, 6u}) {
    EXPECT_EQ(ev[i]["status"], "error") << ev[i].dump();
    EXPECT_EQ(ev[i]["reason"], reason);
    ASSERT_EQ(ev[i]["warnings"].size(), 1u) << ev[i].dump();
    const std::string log = ev[i]["warnings"][0];
    EXPECT_EQ(log.rfind("compiler log:\n", 0), 0u) << log;
    EXPECT_NE(log.find("1 error generated when compiling for gfx1201"), std::string::npos) << log;
  }
  EXPECT_NE(err.find(reason), std::string::npos) << err;
  EXPECT_NE(err.find("1 error generated"), std::string::npos) << err;
}

// A kernel-cache entry that is no regular file, or too large to be an image (a directory, a FIFO,
// a /dev/zero link, a 300 MiB file), is compiled over, never read: the cells pass, nothing waits
// on it or blames the device, and a fresh image takes its place where one can.
TEST(RefWorker, KernelCacheEntryThatIsNoImageIsRebuilt) {
  namespace fs = std::filesystem;
  sdpa_test::TempDir dir;
  int rc = -1;
  ASSERT_EQ(run_worker("cuda:0", "ref-math", &rc, fake_amd(dir)).size(), 8u);
  std::string entry;
  for (const auto& e : fs::recursive_directory_iterator(dir.file("cache")))
    if (e.path().extension() == ".hsaco") entry = e.path().string();
  ASSERT_FALSE(entry.empty()) << "no cached image in " << dir.file("cache");
  const auto make = [&](const std::string& kind) {
    fs::remove(entry);
    if (kind == "directory") fs::create_directory(entry);
    if (kind == "fifo") {
      ASSERT_EQ(::mkfifo(entry.c_str(), 0644), 0);
    }
    if (kind == "dev-zero") fs::create_symlink("/dev/zero", entry);
    if (kind == "too-large") {
      sdpa_test::write_file(entry, "");
      fs::resize_file(entry, uintmax_t{300} << 20);
    }
  };
  for (const std::string kind : {"directory", "fifo", "dev-zero", "too-large"}) {
    make(kind);
    const auto compiles_before = sdpa_test::read_file(dir.file("hiprtc.log")).size();
    std::string err;
    const auto start = std::chrono::steady_clock::now();
    const auto ev = run_worker("cuda:0", "ref-math", &rc, fake_amd(dir), &err);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60)
        << kind;
    EXPECT_EQ(rc, 0) << kind << err;
    ASSERT_EQ(ev.size(), 8u) << kind << err;
    EXPECT_NE(ev[0]["facts"]["compile_ms"], "cached") << kind;
    for (size_t i : {2u, 4u}) EXPECT_EQ(ev[i]["status"], "pass") << kind << ev[i].dump();
    EXPECT_GT(sdpa_test::read_file(dir.file("hiprtc.log")).size(), compiles_before) << kind;
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(entry))) << kind << ": not replaced";
    EXPECT_LT(fs::file_size(entry), uintmax_t{300} << 20) << kind;
  }
}

} // namespace

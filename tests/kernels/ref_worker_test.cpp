// The reference worker binary end to end: protocol events on the results fd for the CPU, every
// case `unsupported` with the reason on a HIP device that is not there, and --health-check.
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

namespace {

const std::string k_cases =
    R"({"v":1,"id":"c1","case":{"dtype":"fp16","b":1,"hq":4,"hkv":2,"lq":33,"lkv":70,"d":40,"causal":true,"mask":"none","layout":"transposed","seed":3},"tolerance":{"atol":2e-3,"rtol":2e-3},"oracle":null,"warmup":1,"repeat":3})"
    "\n"
    R"({"v":1,"id":"c2","case":{"dtype":"bf16","b":2,"hq":2,"hkv":2,"lq":1,"lkv":17,"d":64,"causal":false,"mask":"bool","layout":"contiguous","seed":0},"tolerance":{"atol":1.6e-2,"rtol":1.6e-2},"oracle":null,"warmup":0,"repeat":2})"
    "\n"
    // A tolerance no fp16 kernel can meet: the worker must say mismatch, not pass.
    R"({"v":1,"id":"c3","case":{"dtype":"fp16","b":1,"hq":1,"hkv":1,"lq":16,"lkv":16,"d":16,"causal":false,"mask":"additive","layout":"contiguous","seed":1},"tolerance":{"atol":0,"rtol":0},"oracle":null,"warmup":0,"repeat":1})"
    "\n";

std::vector<nlohmann::json> run_worker(const std::string& device, const std::string& variant,
                                       int* exit_code) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("cases.jsonl"), k_cases);
  // The worker writes to fd 3: a shell opens it on a file for us.
  const std::string cmd = "exec \"$0\" --device " + device + " --variant " + variant +
                          " --results-fd 3 --cases \"$1\" 3>\"$2\"";
  const auto r = sdpa_test::run_binary({"/bin/sh", "-c", cmd,
                                        sdpa_test::build_path("sdpa-doctor-ref-worker"),
                                        dir.file("cases.jsonl"), dir.file("events.jsonl")});
  *exit_code = r.exit_code;
  std::vector<nlohmann::json> events;
  std::istringstream lines(sdpa_test::read_file(dir.file("events.jsonl")));
  for (std::string line; std::getline(lines, line);) events.push_back(nlohmann::json::parse(line));
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

TEST(RefWorker, MissingHipDeviceMakesEveryCaseUnsupported) {
  int rc = -1;
  const auto ev = run_worker("cuda:0", "ref-flash", &rc);
  EXPECT_EQ(rc, 0);
  ASSERT_EQ(ev.size(), 8u);
  if (ev[2]["status"] != "unsupported") GTEST_SKIP() << "a HIP device is present";
  for (size_t i : {2u, 4u, 6u}) {
    EXPECT_EQ(ev[i]["status"], "unsupported");
    const std::string reason = ev[i]["reason"];
    EXPECT_TRUE(reason.rfind("no HIP device", 0) == 0 || reason == "HIP runtime not built in")
        << reason;
  }
}

TEST(RefWorker, HealthCheck) {
  const std::string worker = sdpa_test::build_path("sdpa-doctor-ref-worker");
  EXPECT_EQ(sdpa_test::run_binary({worker, "--health-check", "--device", "cpu"}).exit_code, 0);
  const auto gpu = sdpa_test::run_binary({worker, "--health-check", "--device", "cuda:0"});
  if (gpu.exit_code == 0) GTEST_SKIP() << "a healthy HIP device is present";
  // Without HIP the worker cannot tell (77: no verdict); with it, no device here is unhealthy.
  EXPECT_EQ(gpu.exit_code, SDPA_TEST_HIP_BUILT_IN ? 1 : 77) << gpu.err;
  EXPECT_EQ(sdpa_test::line_count(gpu.err), 1) << gpu.err;
  EXPECT_EQ(sdpa_test::run_binary({worker, "--health-check", "--device", "gpu7"}).exit_code, 2);
}

} // namespace

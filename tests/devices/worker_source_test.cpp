// The HIP and ROCm SMI sources through stand-in workers that hang, crash or print garbage: the
// doctor must come back with a finding each time, within the deadline.
#include "devices/sources.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <sys/stat.h>

namespace dev = sdpa_doctor::devices;

namespace {

struct FakeWorker {
  sdpa_test::TempDir dir;
  dev::EnumerateOptions options;
  explicit FakeWorker(const std::string& script) {
    const std::string path = dir.file("fake-enum-worker");
    sdpa_test::write_file(path, "#!/bin/sh\n" + script + "\n");
    ::chmod(path.c_str(), 0755);
    options.worker_path = path;
    options.deadline = std::chrono::milliseconds(500);
    options.environment = {{"PATH", "/usr/bin:/bin"}};
  }
  dev::SourceResult hip() { return dev::make_hip_source()->read(options); }
  dev::SourceResult rsmi() { return dev::make_rocm_smi_source()->read(options); }
};

bool has(const dev::SourceResult& r, const std::string& id) {
  return std::any_of(r.findings.begin(), r.findings.end(),
                     [&](const auto& f) { return f.id == id; });
}

} // namespace

TEST(WorkerSource, HangingRuntimeIsKilledAtTheDeadline) {
  FakeWorker fake("sleep 30");
  const auto start = std::chrono::steady_clock::now();
  const auto r = fake.hip();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(has(r, "hip-timeout"));
  EXPECT_NE(r.status.find("did not answer"), std::string::npos) << r.status;
  EXPECT_TRUE(r.devices.empty());
}

TEST(WorkerSource, CrashingRuntimeIsAFinding) {
  FakeWorker fake("echo 'Memory access fault by GPU node-1' >&2; kill -SEGV $$");
  const auto r = fake.rsmi();
  EXPECT_TRUE(has(r, "rsmi-crashed"));
  EXPECT_NE(r.status.find("SIGSEGV"), std::string::npos) << r.status;
  EXPECT_NE(r.findings.back().message.find("Memory access fault"), std::string::npos);
}

TEST(WorkerSource, GarbageOutputIsAFinding) {
  FakeWorker fake("echo 'not json'; exit 0");
  const auto r = fake.hip();
  EXPECT_TRUE(has(r, "hip-crashed"));
  EXPECT_NE(r.status.find("printed no result"), std::string::npos) << r.status;
}

TEST(WorkerSource, ParsesTheWorkersAnswer) {
  // Library chatter on stdout before the object is tolerated.
  FakeWorker fake(R"(echo 'hip: loading'; echo '{"v":1,"hip":{"built":true,"init":"hipSuccess","runtime_version":60443482,"count":1,"devices":[{"index":0,"name":"AMD Radeon RX 9070 XT","gcnArchName":"gfx1201","totalGlobalMem":17095983104,"multiProcessorCount":32,"warpSize":32,"sharedMemPerBlock":65536,"maxSharedMemoryPerMultiProcessor":65536,"pciDomainID":0,"pciBusID":3,"pciDeviceID":0}]}}')");
  const auto r = fake.hip();
  EXPECT_EQ(r.status, "ok");
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].index, 0);
  EXPECT_EQ(r.devices[0].gfx_target, "gfx1201");
  EXPECT_EQ(r.devices[0].pci_bdf, "0000:03:00.0");
  EXPECT_EQ(r.devices[0].compute_units, 32);
  EXPECT_EQ(r.runtime.at("hip_runtime_version"), "6.4.43482");
}

TEST(WorkerSource, MissingWorkerIsAFinding) {
  dev::EnumerateOptions options;
  options.worker_path = "/nonexistent/sdpa-doctor-enum-worker";
  const auto r = dev::make_hip_source()->read(options);
  EXPECT_TRUE(has(r, "enum-worker-failed") || has(r, "hip-crashed")) << r.status;
  EXPECT_NE(r.status, "ok");
}

TEST(WorkerSource, DisabledSourcesSaySo) {
  dev::EnumerateOptions options;
  options.use_hip = false;
  EXPECT_EQ(dev::make_hip_source()->skip_reason(options), "disabled (--no-hip)");
  options.sysfs_root = "/some/capture";
  EXPECT_NE(dev::make_hip_source()->skip_reason(options).find("capture"), std::string::npos);
  EXPECT_EQ(dev::make_rocm_smi_source()->skip_reason(options), "");
}

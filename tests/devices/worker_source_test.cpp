// The HIP and SMI sources through stand-in workers that hang, crash, print garbage or report a
// library that is missing, broken or of an unknown ABI: the doctor must come back with a finding
// each time, within the deadline.
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
  dev::SourceResult smi() { return dev::make_smi_source()->read(options); }
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
  const auto r = fake.smi();
  EXPECT_TRUE(has(r, "smi-crashed"));
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
  FakeWorker fake(
      R"sh(echo 'hip: loading'; echo '{"v":1,"hip":{"library":{"path":"/venv/torch/lib/libamdhip64.so.6","soname":"libamdhip64.so.6","why":"torch/lib of the torch under test","tried":[]},"init":"hipSuccess","runtime_version":60443482,"props_abi":"hipGetDevicePropertiesR0600, R0600 (HIP 6 and 7)","count":1,"devices":[{"index":0,"name":"AMD Radeon RX 9070 XT","gcnArchName":"gfx1201","totalGlobalMem":17095983104,"multiProcessorCount":32,"warpSize":32,"sharedMemPerBlock":65536,"maxSharedMemoryPerMultiProcessor":65536,"pci_bus_id":"0000:03:00.0"}],"mapped":["/venv/torch/lib/libamdhip64.so.6"]}}')sh");
  const auto r = fake.hip();
  EXPECT_EQ(r.status, "ok");
  EXPECT_TRUE(r.findings.empty()) << r.findings.front().id;
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].index, 0);
  EXPECT_EQ(r.devices[0].gfx_target, "gfx1201");
  EXPECT_EQ(r.devices[0].pci_bdf, "0000:03:00.0");
  EXPECT_EQ(r.devices[0].compute_units, 32);
  EXPECT_EQ(r.runtime.at("hip_runtime_version"), "6.4.43482");
  EXPECT_EQ(r.runtime.at("hip_runtime_library"), "/venv/torch/lib/libamdhip64.so.6");
  EXPECT_EQ(r.runtime.at("hip_runtime_loaded_because"), "torch/lib of the torch under test");
  EXPECT_EQ(r.runtime.at("hip_runtime_props_abi"),
            "hipGetDevicePropertiesR0600, R0600 (HIP 6 and 7)");
}

TEST(WorkerSource, NoHipRuntimeAnywhereIsAFinding) {
  FakeWorker fake(
      R"sh(echo '{"v":1,"hip":{"library":{"error":"no libamdhip64 opened (looked for ...)","found":[]}}}')sh");
  const auto r = fake.hip();
  EXPECT_TRUE(has(r, "hip-runtime-missing"));
  EXPECT_FALSE(has(r, "hip-runtime-unloadable"));
  EXPECT_EQ(r.status, "no HIP runtime could be opened");
  EXPECT_TRUE(r.devices.empty());
}

TEST(WorkerSource, ABrokenHipRuntimeIsAFindingThatNamesTorchsCopy) {
  // Torch's own copy does not load; none other either.
  FakeWorker broken(
      R"sh(echo '{"v":1,"hip":{"library":{"error":"no libamdhip64 opened (...); failed to load: /venv/torch/lib/libamdhip64.so: invalid ELF header","found":["/venv/torch/lib/libamdhip64.so"]}}}')sh");
  broken.options.torch_lib_dirs = {"/venv/torch/lib"};
  const auto r = broken.hip();
  ASSERT_TRUE(has(r, "hip-runtime-unloadable"));
  EXPECT_NE(r.findings.front().message.find("invalid ELF header"), std::string::npos);
  EXPECT_NE(r.findings.front().remedy.find("reinstall torch"), std::string::npos);
  EXPECT_FALSE(has(r, "hip-runtime-missing"));

  // Torch's own copy does not load, the system's does: the devices still come, with the warning.
  FakeWorker fallback(
      R"sh(echo '{"v":1,"hip":{"library":{"path":"/usr/lib/libamdhip64.so.5.2","soname":"libamdhip64.so.5","why":"the system","tried":["/venv/torch/lib/libamdhip64.so: invalid ELF header"]},"runtime_version":50221153,"init":"hipErrorNoDevice","count_status":"hipErrorNoDevice","count":0,"error":"hipErrorNoDevice","mapped":["/usr/lib/libamdhip64.so.5.2"]}}')sh");
  fallback.options.torch_lib_dirs = {"/venv/torch/lib"};
  const auto f = fallback.hip();
  ASSERT_TRUE(has(f, "hip-runtime-unloadable"));
  EXPECT_NE(f.findings.front().message.find("the torch under test's own copy"), std::string::npos)
      << f.findings.front().message;
  EXPECT_EQ(f.runtime.at("hip_runtime_library"), "/usr/lib/libamdhip64.so.5.2");
  EXPECT_EQ(f.status, "hipErrorNoDevice");
}

TEST(WorkerSource, UnknownAbiAndTwoRuntimesAreFindings) {
  FakeWorker fake(
      R"sh(echo '{"v":1,"hip":{"library":{"path":"/opt/rocm-9.0.0/lib/libamdhip64.so.9","soname":"libamdhip64.so","why":"/opt/rocm-9.0.0/lib","tried":[]},"runtime_version":90000000,"props_abi":"unknown","abi_error":"hipDeviceProp_t layout of HIP 9 is not known to this doctor","init":"hipSuccess","count_status":"hipSuccess","count":1,"devices":[{"index":0,"name":"AMD GPU","pci_bus_id":"0000:03:00.0"}],"mapped":["/opt/rocm-9.0.0/lib/libamdhip64.so.9","/usr/lib/libamdhip64.so.5.2"]}}')sh");
  const auto r = fake.hip();
  EXPECT_TRUE(has(r, "hip-abi-unknown"));
  EXPECT_TRUE(has(r, "two-hip-runtimes"));
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].gfx_target, ""); // not guessed: the KFD topology fills it in the merge
  EXPECT_EQ(r.devices[0].pci_bdf, "0000:03:00.0");
}

TEST(WorkerSource, SmiSaysWhichLibraryAnswered) {
  FakeWorker amd(
      R"sh(echo '{"v":1,"smi":{"library":{"name":"amd_smi","path":"/opt/rocm/lib/libamd_smi.so.26.0","soname":"libamd_smi.so.26","why":"/opt/rocm/lib","tried":[]},"version":"26.0.0+abc","init":"AMDSMI_STATUS_SUCCESS","count":1,"devices":[{"index":0,"name":"AMD Instinct MI300X","pci_bdf":"0000:0c:00.0","vram_total_bytes":206141652992,"temperature_c":41.0}]}}')sh");
  const auto a = amd.smi();
  EXPECT_EQ(a.status, "ok");
  EXPECT_EQ(a.runtime.at("amd_smi_library"), "/opt/rocm/lib/libamd_smi.so.26.0");
  EXPECT_EQ(a.runtime.at("amd_smi_version"), "26.0.0+abc");
  ASSERT_EQ(a.devices.size(), 1u);
  EXPECT_EQ(a.devices[0].pci_bdf, "0000:0c:00.0");
  EXPECT_EQ(a.devices[0].temperature_c, 41.0);

  FakeWorker none(
      R"sh(echo '{"v":1,"smi":{"library":{"name":"rocm_smi","error":"no librocm_smi64 opened","found":[]},"amd_smi":{"name":"amd_smi","error":"no libamd_smi opened","found":[]}}}')sh");
  const auto n = none.smi();
  EXPECT_TRUE(has(n, "smi-missing"));
  EXPECT_NE(n.status, "ok");
}

TEST(TorchHipRuntime, TwoRuntimesInTorchOrAnotherThanTheDoctorsAreFindings) {
  sdpa_doctor::DeviceInventory inv;
  inv.runtime["hip_runtime_library"] = "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5.2.21153";
  dev::compare_torch_hip_runtime(inv, {}, "/venv/bin/python"); // a CPU torch: nothing to compare
  EXPECT_TRUE(inv.findings.empty());
  dev::compare_torch_hip_runtime(inv, {"/nonexistent/venv/torch/lib/libamdhip64.so"},
                                 "/venv/bin/python");
  ASSERT_EQ(inv.findings.size(), 1u);
  EXPECT_EQ(inv.findings[0].id, "hip-runtime-differs-from-torch");
  EXPECT_EQ(inv.runtime.at("torch_hip_runtime_library"),
            "/nonexistent/venv/torch/lib/libamdhip64.so");
  dev::compare_torch_hip_runtime(inv, {"/a/libamdhip64.so.6", "/opt/rocm/lib/libamdhip64.so.6"},
                                 "/venv/bin/python");
  ASSERT_EQ(inv.findings.size(), 2u);
  EXPECT_EQ(inv.findings[1].id, "two-hip-runtimes");
  EXPECT_NE(inv.findings[1].message.find("/venv/bin/python"), std::string::npos);
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
  EXPECT_EQ(dev::make_smi_source()->skip_reason(options), "");
  // The NVIDIA sources answer for this machine only: a captured tree is another one.
  EXPECT_NE(dev::make_cuda_source()->skip_reason(options).find("capture"), std::string::npos);
  EXPECT_NE(dev::make_nvml_source()->skip_reason(options).find("capture"), std::string::npos);
  options.sysfs_root = "/";
  EXPECT_EQ(dev::make_cuda_source()->skip_reason(options), "");
  options.use_nvml = false;
  EXPECT_EQ(dev::make_nvml_source()->skip_reason(options), "disabled (--no-nvidia)");
}

// `sdpa-doctor devices` through the real binary: the captured trees, this machine (real HIP and
// ROCm SMI, opened at run time, answering "no device"), broken trees, a device node the user
// cannot open, and NVIDIA GPUs behind stand-in CUDA driver and NVML libraries with a stand-in
// CUDA torch.
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using sdpa_test::doctor;
using sdpa_test::run_binary;

namespace {

std::string fixture(const std::string& name) {
  return sdpa_test::source_path("tests/fixtures/sysfs/" + name);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// This machine has no AMD GPU; a run on one with a GPU says so and skips.
bool machine_has_gpu() { return fs::exists("/dev/kfd"); }

// A HIP runtime on the system's library path (Debian's libamdhip64-5 here), if any.
std::optional<std::string> system_hip_runtime() {
  for (const char* path :
       {"/usr/lib/x86_64-linux-gnu/libamdhip64.so.5", "/usr/lib/x86_64-linux-gnu/libamdhip64.so.6",
        "/opt/rocm/lib/libamdhip64.so"})
    if (fs::exists(path)) return std::string(path);
  return std::nullopt;
}

} // namespace

TEST(DevicesE2E, Rx9070XtFixture) {
  const auto r = run_binary({doctor(), "devices", "--sysfs-root", fixture("rx9070xt")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"gfx1201", "RDNA4", "RX 9070 XT", "64", "0000:03:00.0", "wave32"})
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;
  EXPECT_FALSE(contains(r.out, "No AMD GPU"));
}

TEST(DevicesE2E, EveryFixtureEnumerates) {
  struct Expect {
    const char* name;
    const char* gfx;
    const char* family;
    int gpus;
  };
  for (const Expect& e : {Expect{"rx9060xt", "gfx1200", "RDNA4", 1},
                          Expect{"rx7900xtx", "gfx1100", "RDNA3", 1},
                          Expect{"mi300x", "gfx942", "CDNA3", 4},
                          Expect{"strix-halo-plus-dgpu", "gfx1151", "RDNA3.5", 2},
                          Expect{"rx6700xt-hsa-override", "gfx1031", "RDNA2", 1}}) {
    sdpa_test::RunOptions clean;
    clean.unset_env = {"HSA_OVERRIDE_GFX_VERSION"};
    const auto r = run_binary({doctor(), "devices", "--sysfs-root", fixture(e.name), "--json", "-"},
                              clean);
    ASSERT_EQ(r.exit_code, 0) << e.name << r.err;
    const auto doc = nlohmann::json::parse(r.out);
    const auto& devices = doc["inventory"]["devices"];
    ASSERT_EQ(devices.size(), static_cast<std::size_t>(e.gpus)) << e.name;
    EXPECT_EQ(devices[0]["gfx_target"], e.gfx) << e.name;
    EXPECT_EQ(devices[0]["family"], e.family) << e.name;
    EXPECT_TRUE(contains(r.err, e.gfx)) << "console view goes to stderr with --json -";
  }
}

TEST(DevicesE2E, HsaOverrideFixture) {
  sdpa_test::RunOptions spoofed;
  spoofed.set_env = {{"HSA_OVERRIDE_GFX_VERSION", "10.3.0"}};
  const auto r =
      run_binary({doctor(), "devices", "--sysfs-root", fixture("rx6700xt-hsa-override")}, spoofed);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "HSA_OVERRIDE_GFX_VERSION=10.3.0 spoofs")) << r.out;
  EXPECT_TRUE(contains(r.out, "gfx1031 but runs as gfx1030")) << r.out;
}

TEST(DevicesE2E, NoGpuOnThisMachine) {
  if (machine_has_gpu()) GTEST_SKIP() << "this machine has /dev/kfd";
  const auto r = run_binary({doctor(), "devices"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("No GPU found: ", 0), 0u) << r.out;
  EXPECT_TRUE(contains(r.out, "no /dev/kfd")) << r.out;
  // Where a HIP runtime is installed it is opened and answers; else the doctor says none opened.
  EXPECT_TRUE(
      contains(r.out, system_hip_runtime() ? "hipErrorNoDevice" : "no HIP runtime could be opened"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "[problem] /dev/kfd does not exist")) << r.out;

  const auto required = run_binary({doctor(), "devices", "--require-gpu"});
  EXPECT_EQ(required.exit_code, 3);
  EXPECT_TRUE(contains(required.err, "no GPU found"));
}

TEST(DevicesE2E, NoGpuJsonCarriesEverySourceAnswer) {
  if (machine_has_gpu()) GTEST_SKIP() << "this machine has /dev/kfd";
  sdpa_test::TempDir tmp;
  const auto r = run_binary({doctor(), "devices", "--json", tmp.file("devices.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(sdpa_test::read_file(tmp.file("devices.json")));
  const auto& inv = doc["inventory"];
  EXPECT_EQ(inv["gpu_found"], false);
  EXPECT_TRUE(inv["devices"].empty());
  EXPECT_TRUE(contains(inv["no_gpu_reason"].get<std::string>(), "no /dev/kfd"));
  const std::string hip = inv["sources_status"]["hip"];
  const std::string smi = inv["sources_status"]["smi"];
  // Either opened and answering "no device", or not found, said plainly.
  EXPECT_TRUE(contains(hip, "hipErrorNoDevice") || contains(hip, "no HIP runtime could be opened"))
      << hip;
  EXPECT_TRUE(contains(smi, "_init") || contains(smi, "listed no GPU") ||
              contains(smi, "could be opened"))
      << smi;
  // Which file answered, and why that one.
  if (system_hip_runtime()) {
    const std::string library = inv["runtime"]["hip_runtime_library"];
    EXPECT_TRUE(fs::is_regular_file(library)) << library;
    EXPECT_EQ(fs::path(library).filename().string().rfind("libamdhip64.so", 0), 0u) << library;
    EXPECT_FALSE(inv["runtime"]["hip_runtime_loaded_because"].get<std::string>().empty());
  }
}

// A HIP runtime that loads and crashes when called ($ROCM_PATH/lib here): the finding names the
// file that was being called and where it was found, and the doctor goes on.
TEST(DevicesE2E, ACrashingHipRuntimeIsNamedWithWhereItWasFound) {
  sdpa_test::TempDir tmp;
  sdpa_test::RunOptions options;
  options.set_env = {{"ROCM_PATH", SDPA_TEST_CRASHING_ROCM}};
  const auto r = run_binary({doctor(), "devices", "--json", tmp.file("devices.json")}, options);
  EXPECT_EQ(r.signal, 0) << r.err;
  const auto doc = nlohmann::json::parse(sdpa_test::read_file(tmp.file("devices.json")));
  const std::string library = std::string(SDPA_TEST_CRASHING_ROCM) + "/lib/libamdhip64.so.6";
  bool named = false;
  for (const auto& f : doc["inventory"]["findings"]) {
    if (f["id"] != "hip-crashed") continue;
    named = true;
    const std::string message = f["message"];
    EXPECT_TRUE(contains(message, "SIGSEGV")) << message;
    EXPECT_TRUE(contains(message, "while calling " + library + ", found in $ROCM_PATH/lib")) << message;
    EXPECT_TRUE(contains(f["remedy"].get<std::string>(), library + " crashed when called"))
        << f.dump();
  }
  EXPECT_TRUE(named) << doc["inventory"]["findings"].dump();
}

// The same library hanging (a wedged driver): the worker is killed at the deadline and the
// finding names the file it was in.
TEST(DevicesE2E, AHangingHipRuntimeIsNamedWithWhereItWasFound) {
  sdpa_test::TempDir tmp;
  sdpa_test::RunOptions options;
  options.set_env = {{"ROCM_PATH", SDPA_TEST_CRASHING_ROCM}, {"FAKE_HIP_HANG", "1"}};
  const auto r = run_binary(
      {doctor(), "devices", "--timeout", "2", "--json", tmp.file("devices.json")}, options);
  EXPECT_EQ(r.signal, 0) << r.err;
  const auto doc = nlohmann::json::parse(sdpa_test::read_file(tmp.file("devices.json")));
  const std::string library = std::string(SDPA_TEST_CRASHING_ROCM) + "/lib/libamdhip64.so.6";
  bool named = false;
  for (const auto& f : doc["inventory"]["findings"])
    if (f["id"] == "hip-timeout") {
      named = true;
      EXPECT_TRUE(contains(f["message"].get<std::string>(),
                           "while calling " + library + ", found in $ROCM_PATH/lib"))
          << f.dump();
    }
  EXPECT_TRUE(named) << doc["inventory"]["findings"].dump();
}

TEST(DevicesE2E, EnumWorkerAsksTheRealLibraries) {
  if (machine_has_gpu()) GTEST_SKIP() << "this machine has /dev/kfd";
  const auto r = run_binary({sdpa_test::build_path("sdpa-doctor-enum-worker")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out); // stdout holds the one object, nothing else
  EXPECT_EQ(doc["v"], 1);
  if (doc["hip"]["library"].contains("path")) {
    EXPECT_EQ(doc["hip"]["error"], "hipErrorNoDevice") << r.out;
    EXPECT_EQ(doc["hip"]["count"], 0);
    EXPECT_TRUE(doc["hip"]["runtime_version"].is_number());
    EXPECT_EQ(doc["hip"]["mapped"].size(), 1u) << r.out;
  } else {
    EXPECT_FALSE(system_hip_runtime()) << r.out;
  }
  if (doc["smi"]["library"].contains("path")) {
    EXPECT_TRUE(doc["smi"]["init"] != "RSMI_STATUS_SUCCESS" || doc["smi"]["count"] == 0) << r.out;
    if (doc["smi"]["library"]["name"] == "rocm_smi") {
      EXPECT_TRUE(doc["smi"]["version"].is_string()) << r.out; // from rsmi_version_get
    }
  }
  const auto usage = run_binary({sdpa_test::build_path("sdpa-doctor-enum-worker"), "--bogus"});
  EXPECT_EQ(usage.exit_code, 2);
}

TEST(DevicesE2E, BadSysfsRootIsAUsageError) {
  const auto r = run_binary({doctor(), "devices", "--sysfs-root", "/nonexistent/tree"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "sdpa-doctor: error: --sysfs-root '/nonexistent/tree' is not a directory\n");
  EXPECT_TRUE(r.out.empty());
}

TEST(DevicesE2E, GarbageInSysfsIsAFindingNotACrash) {
  sdpa_test::TempDir tmp;
  const fs::path root = fs::path(tmp.path()) / "tree";
  fs::copy(fixture("rx9070xt"), root, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  const fs::path props = root / "sys/class/kfd/kfd/topology/nodes/1/properties";
  sdpa_test::write_file(props.string(), "cpu_cores_count 0\nsimd_count 1x8\ngfx_target_ver");
  sdpa_test::write_file((root / "sys/bus/pci/devices/0000:03:00.0/mem_info_vram_total").string(),
                        std::string(1 << 20, '9'));
  fs::remove(root / "proc/sys/kernel/osrelease");
  const auto r = run_binary({doctor(), "devices", "--sysfs-root", root.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.signal, 0);
  EXPECT_TRUE(contains(r.out, "[warning]")) << r.out;
  EXPECT_TRUE(contains(r.out, "'simd_count' is not a number")) << r.out;
  EXPECT_TRUE(contains(r.out, "only the start was read")) << r.out;
}

TEST(DevicesE2E, DeviceNodeTheUserCannotOpen) {
  // Root opens anything: the check runs the doctor as 'nobody' when this test runs as root.
  std::vector<std::string> argv;
  if (::geteuid() == 0) {
    if (!fs::exists("/usr/bin/setpriv")) GTEST_SKIP() << "root without setpriv";
    argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
  }
  sdpa_test::TempDir tmp;
  ::chmod(tmp.path().c_str(), 0755);
  const fs::path dev = fs::path(tmp.path()) / "dev";
  fs::create_directories(dev / "dri");
  sdpa_test::write_file((dev / "kfd").string(), "");
  sdpa_test::write_file((dev / "dri/renderD128").string(), "");
  ::chmod(dev.c_str(), 0755);
  ::chmod((dev / "dri").c_str(), 0755);
  ASSERT_EQ(::chmod((dev / "kfd").c_str(), 0), 0);
  ASSERT_EQ(::chmod((dev / "dri/renderD128").c_str(), 0), 0);
  for (const std::string& a : {doctor(), std::string("devices"), std::string("--dev-root"),
                               dev.string(), std::string("--no-hip"), std::string("--no-smi")})
    argv.push_back(a);
  const auto r = run_binary(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[problem] " + (dev / "kfd").string() +
                                  " not readable and writable by this user: Permission denied"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "sudo usermod -aG")) << r.out;
  EXPECT_TRUE(contains(r.out, "renderD128 not readable and writable")) << r.out;
  EXPECT_TRUE(contains(r.out, "cannot be opened by this user")) << r.out; // the no-GPU reason
}

namespace {

// A stand-in CUDA 13.0 torch 2.14.1+cu130 in its own site folder: torch/version.py (read without
// importing), torch/lib, torch.cuda.get_arch_list() answering FAKE_TORCH_ARCHS, and NVRTC where
// PyPI's CUDA wheels put it (nvidia/cu13/lib). The real python3 imports it through PYTHONPATH.
struct FakeCudaTorch {
  sdpa_test::TempDir dir;
  FakeCudaTorch() {
    const fs::path site = dir.file("site");
    fs::create_directories(site / "torch/lib");
    fs::create_directories(site / "nvidia/cu13/lib");
    write(site / "torch/version.py", "from typing import Optional\n__version__ = '2.14.1+cu130'\n"
                                     "cuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n");
    write(site / "torch/__init__.py",
          "import os\nfrom . import version\n__version__ = version.__version__\n"
          "class cuda:\n    @staticmethod\n    def get_arch_list():\n"
          "        return os.environ.get('FAKE_TORCH_ARCHS', 'sm_80,sm_90').split(',')\n");
    fs::copy_file(fs::path(SDPA_TEST_FAKE_NVIDIA_LIBS) / "nvrtc/libnvrtc.so.13",
                  site / "nvidia/cu13/lib/libnvrtc.so.13");
  }
  static void write(const fs::path& path, const std::string& text) {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  std::string site() const { return dir.file("site"); }
  // The doctor with this torch's interpreter and the stand-in driver on the library path.
  sdpa_test::RunOptions options(const std::string& gpus) const {
    sdpa_test::RunOptions o;
    o.set_env = {{"PYTHONPATH", site()},
                 {"LD_LIBRARY_PATH", SDPA_TEST_FAKE_NVIDIA_LIBS},
                 {"FAKE_NVIDIA_GPUS", gpus}};
    o.unset_env = {"HSA_OVERRIDE_GFX_VERSION", "CUDA_VISIBLE_DEVICES", "SDPA_DOCTOR_PYTHON"};
    return o;
  }
};

std::string python3() {
  for (const char* p : {"/usr/bin/python3", "/usr/local/bin/python3"})
    if (fs::exists(p)) return p;
  return "python3";
}

} // namespace

// Three NVIDIA GPUs (Hopper, Ampere, Blackwell) seen through the CUDA driver and NVML, joined by
// PCI address, each with its sm_XX verdict against the torch's arch list: sm_90 native, sm_86
// native through sm_80's binary-compatible kernels, sm_120 missing with what to install.
TEST(DevicesE2E, NvidiaGpusAreListedWithTheirSmVerdict) {
  FakeCudaTorch torch;
  sdpa_test::TempDir tmp;
  const auto r = run_binary({doctor(), "devices", "--python", python3(), "--json",
                             tmp.file("devices.json")},
                            torch.options("sm_90,sm_86,sm_120"));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(r.out.rfind("3 NVIDIA GPUs found\n", 0), 0u) << r.out;
  for (const char* part :
       {"NVIDIA Fake sm_90", "CUDA index     cuda:0", "sm_90 (compute capability 9.0, Hopper)",
        "sm_86 (compute capability 8.6, Ampere)", "sm_120 (compute capability 12.0, Blackwell)",
        "80.0 GiB (1.0 GiB used)", "SMs            132", "0000:41:00.0", "NVIDIA 580.65.06",
        "41 C", "70.5 W", "native: this torch carries sm_90 kernels",
        "native: this torch's sm_80 kernels run on sm_86",
        "missing: this torch has no kernels for sm_120 (built for sm_80,sm_90)",
        "fix: install a torch whose torch.cuda.get_arch_list() includes sm_120",
        "TORCH_CUDA_ARCH_LIST=12.0", "torch_build    CUDA 13.0", "nvrtc_version  13.0"})
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;
  // A CUDA torch is told nothing of the AMD stack.
  for (const char* amd : {"/dev/kfd", "install ROCm", "amd-smi-lib", "render group"})
    EXPECT_FALSE(contains(r.out, amd)) << amd << "\n" << r.out;

  const auto doc = nlohmann::json::parse(sdpa_test::read_file(tmp.file("devices.json")));
  const auto& inv = doc["inventory"];
  ASSERT_EQ(inv["devices"].size(), 3u) << inv.dump();
  const auto& d = inv["devices"][2];
  EXPECT_EQ(d["index"], 2);
  EXPECT_EQ(d["sm_target"], "sm_120");
  EXPECT_EQ(d["family"], "Blackwell");
  EXPECT_EQ(d["pci_bdf"], "0000:43:00.0");
  EXPECT_EQ(d["vram_used_bytes"], int64_t{1} << 30); // NVML's reading joined to the CUDA device
  EXPECT_EQ(d["sources"]["seen_by"]["cuda"], "yes");
  EXPECT_EQ(d["sources"]["seen_by"]["nvml"], "yes");
  EXPECT_FALSE(d["sources"]["seen_by"].contains("hip")) << d.dump();
  EXPECT_EQ(d["gfx"]["verdict"], "missing");
  EXPECT_EQ(inv["devices"][1]["gfx"]["verdict"], "native");
  EXPECT_EQ(inv["runtime"]["nvidia_driver_version"], "580.65.06");
  EXPECT_EQ(inv["runtime"]["torch_build"], "CUDA 13.0");
  EXPECT_EQ(fs::path(inv["runtime"]["nvrtc_library"].get<std::string>()).filename(),
            "libnvrtc.so.13");
  EXPECT_EQ(inv["runtime"]["nvrtc_loaded_because"], "PyPI's NVRTC beside the torch under test");
}

// The same CUDA torch where the driver sees no GPU: one line names the build and what is missing,
// and no AMD advice follows.
TEST(DevicesE2E, ACudaTorchWithoutAGpuHearsOfTheNvidiaDriverOnly) {
  FakeCudaTorch torch;
  const auto r = run_binary({doctor(), "devices", "--python", python3()}, torch.options(""));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(r.out.rfind("No GPU found: torch 2.14.1+cu130 is a CUDA 13.0 build and no NVIDIA GPU "
                        "is visible: cuInit: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is "
                        "detected).\n",
                        0),
            0u)
      << r.out;
  for (const char* amd : {"/dev/kfd", "ROCm", "amd-smi-lib", "render group"})
    EXPECT_FALSE(contains(r.out.substr(r.out.find("\nFindings")), amd)) << amd << "\n" << r.out;
}

// The enum worker's NVIDIA parts on their own: what the driver and NVML said, as JSON.
TEST(DevicesE2E, EnumWorkerAsksTheCudaDriverAndNvml) {
  sdpa_test::RunOptions o;
  o.set_env = {{"LD_LIBRARY_PATH", SDPA_TEST_FAKE_NVIDIA_LIBS}, {"FAKE_NVIDIA_GPUS", "sm_89"}};
  const auto r =
      run_binary({sdpa_test::build_path("sdpa-doctor-enum-worker"), "--cuda", "--nvml"}, o);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  EXPECT_FALSE(doc.contains("hip")) << r.out;
  EXPECT_EQ(doc["cuda"]["init"], "CUDA_SUCCESS") << r.out;
  EXPECT_EQ(doc["cuda"]["driver_version"], 13000);
  EXPECT_EQ(doc["cuda"]["devices"][0]["cc_major"], 8);
  EXPECT_EQ(doc["cuda"]["devices"][0]["cc_minor"], 9);
  EXPECT_EQ(doc["nvml"]["driver_version"], "580.65.06");
  EXPECT_EQ(doc["nvml"]["devices"][0]["pci_bus_id"], "00000000:41:00.0");
  EXPECT_FALSE(doc["nvml"]["devices"][0].contains("vbios")) << "not supported is no error";
  EXPECT_FALSE(doc["nvml"]["devices"][0].contains("errors")) << r.out;
}

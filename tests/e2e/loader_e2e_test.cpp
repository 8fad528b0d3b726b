// The run-time loader end to end, through the real binaries: a venv whose torch/lib holds a copy of
// a real HIP runtime is where the doctor's HIP runtime comes from (the JSON says so); a broken file
// there is a finding and the check goes on; the enumeration worker reports two HIP runtimes mapped
// at once; and a failure of the doctor's own reference kernel matches no torch known issue.
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace fs = std::filesystem;
using nlohmann::json;
using sdpa_test::doctor;
using sdpa_test::run_binary;

namespace {

// Debian's HIP 5.2 runtime: a real libamdhip64 to copy into a torch/lib.
constexpr const char* k_system_hip = "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5";

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

bool has_finding(const json& findings, const std::string& id) {
  for (const json& f : findings)
    if (f.value("id", "") == id) return true;
  return false;
}

// A real venv (python3 -m venv) whose site-packages holds a `torch` package of one empty
// __init__.py and a lib/ folder: what a ROCm wheel's layout looks like to find_spec.
class FakeTorchVenv : public ::testing::Test {
protected:
  void SetUp() override {
    const auto made =
        run_binary({"/usr/bin/python3", "-m", "venv", "--without-pip", m_dir.file("venv")});
    if (made.exit_code != 0) GTEST_SKIP() << "python3 -m venv failed: " << made.err;
    m_python = m_dir.file("venv/bin/python");
    const auto site =
        run_binary({m_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"});
    ASSERT_EQ(site.exit_code, 0) << site.err;
    m_torch_lib = trimmed(site.out) + "/torch/lib";
    fs::create_directories(m_torch_lib);
    sdpa_test::write_file(trimmed(site.out) + "/torch/__init__.py", "");
  }
  json devices_json(const sdpa_test::RunOptions& options = {}) {
    const auto r = run_binary({doctor(), "devices", "--python", m_python, "--json", "-"}, options);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.signal, 0);
    return json::parse(r.out, nullptr, false);
  }
  // A reference-probe check of two small cases with this venv as the diagnosed torch.
  sdpa_test::RunResult check(const std::string& report, const sdpa_test::RunOptions& options = {}) {
    return run_binary({doctor(), "check", "--probe", "reference", "--python", m_python, "--case",
                       "dtype=fp32,b=1,h=2,l=16,d=16", "--no-verify", "--no-shrink", "-q", "--json",
                       report, "--run-dir", m_dir.file("run")},
                      options);
  }
  sdpa_test::TempDir m_dir;
  std::string m_python;
  std::string m_torch_lib;
};

} // namespace

TEST_F(FakeTorchVenv, TheHipRuntimeInTorchLibIsTheOneOpened) {
  if (!fs::exists(k_system_hip)) GTEST_SKIP() << k_system_hip << " is not installed";
  const std::string copy = m_torch_lib + "/libamdhip64.so.5";
  fs::copy_file(fs::canonical(k_system_hip), copy);

  const json doc = devices_json();
  ASSERT_FALSE(doc.is_discarded());
  const json& runtime = doc["inventory"]["runtime"];
  EXPECT_EQ(runtime["hip_runtime_library"], fs::canonical(copy).string()) << runtime.dump();
  EXPECT_EQ(runtime["hip_runtime_loaded_because"], "torch/lib of the torch under test");
  // The version the runtime reports is the one its file is named for (5.2.x on Debian 12, 5.7.x
  // on Debian 13).
  const std::string file = fs::canonical(k_system_hip).filename().string();
  const std::string named = file.substr(file.find(".so.") + 4);
  const std::string major_minor = named.substr(0, named.find('.', named.find('.') + 1));
  EXPECT_EQ(runtime["hip_runtime_version"].get<std::string>().rfind(major_minor + ".", 0), 0u)
      << runtime["hip_runtime_version"] << " is not " << major_minor << ".x";
  EXPECT_EQ(runtime["hip_runtime_props_abi"], "hipGetDeviceProperties, R0000 (HIP 5)");
  // The copy is a real runtime: it answers, here that there is no device.
  EXPECT_NE(doc["inventory"]["sources_status"]["hip"].get<std::string>().find("hipErrorNoDevice"),
            std::string::npos);
  EXPECT_FALSE(has_finding(doc["inventory"]["findings"], "hip-runtime-unloadable"));

  // The check's report says the same, and the probes run.
  const auto r = check(m_dir.file("r.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = json::parse(sdpa_test::read_file(m_dir.file("r.json")));
  EXPECT_EQ(report["inventory"]["runtime"]["hip_runtime_library"], fs::canonical(copy).string());
  EXPECT_EQ(report["inventory"]["runtime"]["hip_runtime_loaded_because"],
            "torch/lib of the torch under test");
}

TEST_F(FakeTorchVenv, AGarbageHipRuntimeInTorchLibIsAFindingAndTheCheckGoesOn) {
  sdpa_test::write_file(m_torch_lib + "/libamdhip64.so.5", "this is not a shared library\n");

  const json doc = devices_json();
  ASSERT_FALSE(doc.is_discarded());
  const json& findings = doc["inventory"]["findings"];
  ASSERT_TRUE(has_finding(findings, "hip-runtime-unloadable")) << findings.dump();
  for (const json& f : findings)
    if (f["id"] == "hip-runtime-unloadable") {
      EXPECT_NE(f["message"].get<std::string>().find(m_torch_lib + "/libamdhip64.so.5"),
                std::string::npos)
          << f.dump();
      EXPECT_NE(f["remedy"].get<std::string>().find("reinstall torch"), std::string::npos);
    }
  // Another HIP runtime may still answer (the system's), never the broken file.
  const std::string opened = doc["inventory"]["runtime"].value("hip_runtime_library", "");
  EXPECT_EQ(opened.find(m_torch_lib), std::string::npos) << opened;

  const auto r = check(m_dir.file("r.json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.signal, 0);
  const json report = json::parse(sdpa_test::read_file(m_dir.file("r.json")));
  EXPECT_TRUE(has_finding(report["inventory"]["findings"], "hip-runtime-unloadable"));
  ASSERT_FALSE(report["results"].empty());
  for (const json& result : report["results"])
    EXPECT_EQ(result["status"], "pass") << result.dump();
}

// A HIP runtime in the torch's own torch/lib that crashes when called: the finding names that
// file and that it was found there, not "reinstall ROCm" about no file.
TEST_F(FakeTorchVenv, ACrashingHipRuntimeInTorchLibIsNamed) {
  const std::string library = m_torch_lib + "/libamdhip64.so.6";
  fs::copy_file(std::string(SDPA_TEST_CRASHING_ROCM) + "/lib/libamdhip64.so.6", library);
  const json doc = devices_json();
  ASSERT_FALSE(doc.is_discarded());
  bool named = false;
  for (const json& f : doc["inventory"]["findings"]) {
    if (f["id"] != "hip-crashed") continue;
    named = true;
    EXPECT_NE(f["message"].get<std::string>().find("while calling " + library +
                                                   ", found in torch/lib of the torch under test"),
              std::string::npos)
        << f.dump();
  }
  EXPECT_TRUE(named) << doc["inventory"]["findings"].dump();
}

TEST_F(FakeTorchVenv, TheEnumerationWorkerSeesTwoHipRuntimesMappedAtOnce) {
  if (!fs::exists(k_system_hip)) GTEST_SKIP() << k_system_hip << " is not installed";
  fs::copy_file(fs::canonical(k_system_hip), m_torch_lib + "/libamdhip64.so.5");
  // The system's runtime preloaded, torch's copy opened: the pytorch/pytorch#141014 situation.
  sdpa_test::RunOptions preload;
  preload.set_env = {{"LD_PRELOAD", k_system_hip}};
  // An ASan build wants its runtime first in the library list; the preload goes before it.
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string before = asan && *asan ? std::string(asan) + ":" : std::string{};
  preload.set_env["ASAN_OPTIONS"] = before + "verify_asan_link_order=0";
  const auto r = run_binary(
      {sdpa_test::build_path("sdpa-doctor-enum-worker"), "--hip", "--torch-lib", m_torch_lib},
      preload);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["hip"]["library"]["path"],
            fs::canonical(m_torch_lib + "/libamdhip64.so.5").string());
  EXPECT_EQ(doc["hip"]["mapped"].size(), 2u) << doc.dump();

  // Without the preload the same worker maps one.
  const auto alone = run_binary(
      {sdpa_test::build_path("sdpa-doctor-enum-worker"), "--hip", "--torch-lib", m_torch_lib});
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_EQ(json::parse(alone.out)["hip"]["mapped"].size(), 1u) << alone.out;
}

// A GPU machine as far as the libraries go: stand-in HIP 6 and AMD SMI libraries (tests/devices/
// fake) with one RX 9070 XT in torch/lib. What this covers is the worker's use of them (R0600's
// gcnArchName, AMD SMI's handles, BDF, MB and version string) and the inventory built from that.
TEST_F(FakeTorchVenv, AGpuThroughStandInHipAndAmdSmiJoinsTheInventory) {
  for (const char* name : {"libamdhip64.so.6", "libamd_smi.so.26"})
    fs::copy_file(fs::path(SDPA_TEST_FAKE_GPU_LIBS) / name, fs::path(m_torch_lib) / name);
  const auto r = run_binary(
      {sdpa_test::build_path("sdpa-doctor-enum-worker"), "--torch-lib", m_torch_lib});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json worker = json::parse(r.out);
  const json& hip = worker["hip"];
  EXPECT_EQ(hip["props_abi"], "hipGetDevicePropertiesR0600, R0600 (HIP 6 and 7)");
  ASSERT_EQ(hip["devices"].size(), 1u) << hip.dump();
  EXPECT_EQ(hip["devices"][0]["gcnArchName"], "gfx1201");
  EXPECT_EQ(hip["devices"][0]["pci_bus_id"], "0000:03:00.0");
  const json& smi = worker["smi"];
  EXPECT_EQ(smi["library"]["name"], "amd_smi");
  EXPECT_EQ(smi["version"], "26.0.0+fake");
  ASSERT_EQ(smi["devices"].size(), 1u) << smi.dump();
  EXPECT_EQ(smi["devices"][0]["pci_bdf"], "0000:03:00.0");
  EXPECT_EQ(smi["devices"][0]["vram_total_bytes"], int64_t{16304} << 20);

  const json doc = devices_json();
  ASSERT_FALSE(doc.is_discarded());
  const json& inv = doc["inventory"];
  ASSERT_EQ(inv["devices"].size(), 1u) << inv.dump();
  const json& gpu = inv["devices"][0];
  EXPECT_EQ(gpu["index"], 0);
  EXPECT_EQ(gpu["gfx_target"], "gfx1201");
  EXPECT_EQ(gpu["family"], "RDNA4");
  EXPECT_EQ(gpu["pci_bdf"], "0000:03:00.0");
  EXPECT_EQ(gpu["temperature_c"], 41.0);
  EXPECT_EQ(inv["runtime"]["amd_smi_library"],
            fs::canonical(m_torch_lib + "/libamd_smi.so.26").string());
  EXPECT_EQ(inv["runtime"]["amd_smi_loaded_because"], "torch/lib of the torch under test");
  EXPECT_EQ(inv["runtime"]["hip_runtime_version"], "6.4.43482");
}

TEST(ReferenceFault, AFailureOfOurOwnKernelMatchesNoTorchKnownIssue) {
  sdpa_test::TempDir dir;
  // A torch issue as broad as one can be (any crash), and the same without the probe filter.
  sdpa_test::write_file(dir.file("torch-issue.json"), R"([{"id":"any-torch-crash","title":"t",
    "advice":"a","match":{"probes":["libtorch","python"],"statuses":["crash"]}}])");
  sdpa_test::write_file(dir.file("unfiltered.json"), R"([{"id":"any-crash","title":"t",
    "advice":"a","match":{"statuses":["crash"]}}])");
  sdpa_test::RunOptions fault;
  fault.set_env = {{"SDPA_DOCTOR_TEST_FAULT", "variant=ref-math,case=*,action=abort"}};
  const auto run = [&](const std::string& issues, const std::string& name) {
    const auto r = run_binary({doctor(), "check", "--probe", "reference", "--variant", "ref-math",
                               "--case", "dtype=fp32,b=1,h=2,l=16,d=16", "--no-verify",
                               "--no-shrink", "-q", "--known-issues", issues, "--json",
                               dir.file(name), "--run-dir", dir.file(name + ".run")},
                              fault);
    EXPECT_EQ(r.exit_code, 1) << r.err; // a crash is a failure
    return json::parse(sdpa_test::read_file(dir.file(name)));
  };
  const json report = run(dir.file("torch-issue.json"), "r.json");
  ASSERT_FALSE(report["results"].empty());
  for (const json& result : report["results"])
    EXPECT_EQ(result["status"], "crash") << result.dump();
  // Neither the shipped issues nor the broad torch one claim our kernel's crash.
  EXPECT_TRUE(report["known_issues"].empty()) << report["known_issues"].dump();

  // The same crash does match a rule without the filter: the assertion above can fail.
  const json unfiltered = run(dir.file("unfiltered.json"), "u.json");
  ASSERT_EQ(unfiltered["known_issues"].size(), 1u) << unfiltered["known_issues"].dump();
  EXPECT_EQ(unfiltered["known_issues"][0]["issue_id"], "any-crash");
}

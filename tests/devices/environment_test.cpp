// Device nodes, containers and environment variables, read through the real source.
#include "devices/sources.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

namespace dev = sdpa_doctor::devices;
namespace fs = std::filesystem;
using sdpa_doctor::Severity;

namespace {

struct Env {
  sdpa_test::TempDir root;
  dev::EnumerateOptions options;
  Env() {
    options.sysfs_root = root.path();
    options.dev_root = root.path() + "/dev";
    options.use_hip = options.use_smi = false;
    options.environment.clear();
    fs::create_directories(options.dev_root + "/dri");
  }
  dev::SourceResult read() { return dev::make_environment_source()->read(options); }
};

const sdpa_doctor::Finding* find(const dev::SourceResult& r, const std::string& id) {
  auto it = std::find_if(r.findings.begin(), r.findings.end(),
                         [&](const auto& f) { return f.id == id; });
  return it == r.findings.end() ? nullptr : &*it;
}

} // namespace

TEST(EnvironmentSource, MissingKfdIsAProblemWithARemedy) {
  Env env;
  const auto r = env.read();
  const auto* f = find(r, "kfd-missing");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->severity, Severity::problem);
  EXPECT_FALSE(f->remedy.empty());
  EXPECT_EQ(r.facts.at("dev_kfd"), "missing");
}

TEST(EnvironmentSource, OpenableNodesAreOk) {
  Env env;
  sdpa_test::write_file(env.options.dev_root + "/kfd", "");
  sdpa_test::write_file(env.options.dev_root + "/dri/renderD128", "");
  const auto r = env.read();
  ASSERT_TRUE(find(r, "kfd-accessible"));
  EXPECT_EQ(find(r, "kfd-accessible")->severity, Severity::ok);
  ASSERT_TRUE(find(r, "render-nodes-accessible"));
  EXPECT_NE(find(r, "render-nodes-accessible")->message.find("renderD128"), std::string::npos);
  EXPECT_EQ(r.facts.at("dev_kfd"), "ok");
}

TEST(EnvironmentSource, KfdWithoutRenderNodes) {
  Env env;
  sdpa_test::write_file(env.options.dev_root + "/kfd", "");
  EXPECT_TRUE(find(env.read(), "render-nodes-missing"));
}

TEST(EnvironmentSource, NoDevRootSkipsTheNodeChecks) {
  Env env;
  env.options.dev_root.clear();
  const auto r = env.read();
  EXPECT_FALSE(find(r, "kfd-missing"));
  EXPECT_EQ(r.facts.at("dev_kfd"), "not checked");
}

TEST(EnvironmentSource, NoContainerMarkers) {
  Env env;
  EXPECT_EQ(env.read().facts.at("container"), "none");
  EXPECT_FALSE(find(env.read(), "in-container"));
}

TEST(EnvironmentSource, DetectsDockerPodmanAndCgroups) {
  {
    Env env;
    sdpa_test::write_file(env.root.file(".dockerenv"), "");
    const auto r = env.read();
    EXPECT_EQ(r.facts.at("container"), "docker");
    EXPECT_NE(find(r, "kfd-missing")->remedy.find("--device=/dev/kfd"), std::string::npos);
  }
  {
    Env env;
    fs::create_directories(env.root.file("run"));
    sdpa_test::write_file(env.root.file("run/.containerenv"), "");
    EXPECT_EQ(env.read().facts.at("container"), "podman");
  }
  {
    Env env;
    fs::create_directories(env.root.file("proc/1"));
    sdpa_test::write_file(env.root.file("proc/1/cgroup"), "0::/kubepods/besteffort/pod1234\n");
    EXPECT_EQ(env.read().facts.at("container"), "kubepods");
  }
}

TEST(EnvironmentSource, HsaOverride) {
  Env env;
  env.options.environment["HSA_OVERRIDE_GFX_VERSION"] = "11.0.0";
  auto r = env.read();
  ASSERT_TRUE(find(r, "hsa-override-gfx-version"));
  EXPECT_EQ(find(r, "hsa-override-gfx-version")->severity, Severity::warning);
  EXPECT_NE(find(r, "hsa-override-gfx-version")->message.find("gfx1100"), std::string::npos);
  EXPECT_EQ(r.facts.at("hsa_override_target"), "gfx1100");
  env.options.environment["HSA_OVERRIDE_GFX_VERSION"] = "eleven";
  r = env.read();
  ASSERT_TRUE(find(r, "hsa-override-gfx-version-malformed"));
  EXPECT_EQ(find(r, "hsa-override-gfx-version-malformed")->severity, Severity::problem);
}

TEST(EnvironmentSource, VisibleDevices) {
  Env env;
  env.options.environment["HIP_VISIBLE_DEVICES"] = "1";
  env.options.environment["CUDA_VISIBLE_DEVICES"] = "0";
  env.options.environment["ROCR_VISIBLE_DEVICES"] = "";
  const auto r = env.read();
  EXPECT_TRUE(find(r, "visible-devices-conflict"));
  const auto hidden = std::count_if(r.findings.begin(), r.findings.end(), [](const auto& f) {
    return f.id == "visible-devices" && f.severity == Severity::problem;
  });
  EXPECT_EQ(hidden, 1); // only the empty ROCR_VISIBLE_DEVICES hides everything
}

TEST(EnvironmentSource, SdpaVariables) {
  Env env;
  for (const char* name : {"PYTORCH_ROCM_ARCH", "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL",
                           "TORCH_ROCM_FA_PREFER_CK", "AMD_SERIALIZE_KERNEL",
                           "HIP_LAUNCH_BLOCKING", "AMD_LOG_LEVEL"})
    env.options.environment[name] = "1";
  env.options.environment["UNRELATED"] = "1";
  const auto r = env.read();
  ASSERT_TRUE(find(r, "env-torch-rocm-fa-prefer-ck"));
  EXPECT_EQ(find(r, "env-torch-rocm-fa-prefer-ck")->severity, Severity::warning);
  EXPECT_FALSE(find(r, "env-torch-rocm-fa-prefer-ck")->remedy.empty());
  EXPECT_EQ(find(r, "env-pytorch-rocm-arch")->severity, Severity::ok);
  EXPECT_TRUE(find(r, "env-torch-rocm-aotriton-enable-experimental"));
  EXPECT_TRUE(find(r, "env-amd-serialize-kernel"));
  EXPECT_TRUE(find(r, "env-hip-launch-blocking"));
  EXPECT_TRUE(find(r, "env-amd-log-level"));
  EXPECT_EQ(r.facts.count("UNRELATED"), 0u);
}

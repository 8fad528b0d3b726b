// The join of the sources: by PCI address, HIP order first, disagreements recorded.
#include "devices/sources.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace dev = sdpa_doctor::devices;
using sdpa_doctor::Device;
using sdpa_doctor::DeviceInventory;

namespace {

dev::NamedResult source(const std::string& name, std::vector<Device> devices,
                        std::string status = "ok") {
  dev::NamedResult r;
  r.source = name;
  r.result.devices = std::move(devices);
  r.result.status = std::move(status);
  return r;
}

Device hip_device(int index, const std::string& bdf, const std::string& arch) {
  Device d;
  d.index = index;
  d.pci_bdf = bdf;
  d.gfx_arch_name = arch;
  d.gfx_target = dev::base_gfx_target(arch);
  d.name = "AMD Radeon Graphics";
  d.compute_units = 64;
  d.wave_size = 32;
  d.vram_total_bytes = 17163091968;
  return d;
}

Device sysfs_device(const std::string& node, const std::string& bdf, const std::string& gfx) {
  Device d;
  d.kfd_node = node;
  d.pci_bdf = bdf;
  d.gfx_target = gfx;
  d.compute_units = 64;
  d.render_node = "/dev/dri/renderD128";
  return d;
}

dev::EnumerateOptions no_env() {
  dev::EnumerateOptions options;
  options.environment.clear();
  return options;
}

bool has(const DeviceInventory& inv, const std::string& id) {
  return std::any_of(inv.findings.begin(), inv.findings.end(),
                     [&](const auto& f) { return f.id == id; });
}

} // namespace

TEST(Merge, JoinsByPciAddressAndKeepsHipOrder) {
  Device rsmi;
  rsmi.pci_bdf = "0000:03:00.0";
  rsmi.name = "Navi 48 [Radeon RX 9070/9070 XT]";
  rsmi.temperature_c = 41.0;
  rsmi.driver_version = "6.12.12";
  const DeviceInventory inv =
      dev::merge_sources({source("hip", {hip_device(1, "0000:03:00.0", "gfx1201"),
                                         hip_device(0, "0000:c5:00.0", "gfx1151")}),
                          source("smi", {rsmi}),
                          source("sysfs", {sysfs_device("1", "0000:c5:00.0", "gfx1151"),
                                           sysfs_device("2", "0000:03:00.0", "gfx1201")})},
                         no_env());
  ASSERT_EQ(inv.devices.size(), 2u);
  EXPECT_EQ(inv.devices[0].index, 0);
  EXPECT_EQ(inv.devices[0].gfx_target, "gfx1151");
  EXPECT_TRUE(inv.devices[0].integrated); // from the arch table
  const Device& card = inv.devices[1];
  EXPECT_EQ(card.index, 1);
  EXPECT_EQ(card.kfd_node, "2");
  EXPECT_EQ(card.temperature_c, 41.0);
  EXPECT_EQ(card.driver_version, "6.12.12");
  EXPECT_EQ(card.family, "RDNA4");
  // HIP's name wins; ROCm SMI's differing one is kept beside it.
  EXPECT_EQ(card.name, "AMD Radeon Graphics");
  EXPECT_EQ(card.sources.at("name").at("smi"), "Navi 48 [Radeon RX 9070/9070 XT]");
  EXPECT_EQ(card.sources.at("seen_by").at("hip"), "yes");
  EXPECT_EQ(card.sources.at("seen_by").at("smi"), "yes");
  // The APU is not listed by ROCm SMI, which answered: recorded and reported.
  EXPECT_EQ(inv.devices[0].sources.at("seen_by").at("smi"), "no");
  EXPECT_TRUE(has(inv, "not-seen-by-smi"));
  EXPECT_EQ(card.sources.count("gfx_target"), 0u); // both agree: nothing to say
}

TEST(Merge, RecordsDisagreementsAsSourceNotes) {
  Device sysfs = sysfs_device("1", "0000:03:00.0", "gfx1201");
  sysfs.compute_units = 60;
  sysfs.vram_total_bytes = 17163091968 / 2;
  const DeviceInventory inv = dev::merge_sources(
      {source("hip", {hip_device(0, "0000:03:00.0", "gfx1201")}), source("sysfs", {sysfs})},
      no_env());
  ASSERT_EQ(inv.devices.size(), 1u);
  const Device& d = inv.devices[0];
  EXPECT_EQ(d.compute_units, 64);
  EXPECT_EQ(d.sources.at("compute_units").at("hip"), "64");
  EXPECT_EQ(d.sources.at("compute_units").at("sysfs"), "60");
  EXPECT_EQ(d.sources.at("vram_total_bytes").count("sysfs"), 1u);
}

TEST(Merge, GfxMismatchWithoutOverrideIsAProblem) {
  const DeviceInventory inv = dev::merge_sources(
      {source("hip", {hip_device(0, "0000:03:00.0", "gfx1100")}),
       source("sysfs", {sysfs_device("1", "0000:03:00.0", "gfx1201")})},
      no_env());
  ASSERT_EQ(inv.devices.size(), 1u);
  EXPECT_EQ(inv.devices[0].gfx_target, "gfx1201");
  EXPECT_EQ(inv.devices[0].sources.at("gfx_target").at("hip"), "gfx1100");
  EXPECT_TRUE(has(inv, "gfx-target-mismatch"));
}

TEST(Merge, GfxMismatchExplainedByOverride) {
  dev::NamedResult env = source("environment", {});
  env.result.facts["hsa_override_gfx_version"] = "10.3.0";
  env.result.facts["hsa_override_target"] = "gfx1030";
  auto options = no_env();
  options.environment["HSA_OVERRIDE_GFX_VERSION"] = "10.3.0";
  const DeviceInventory inv = dev::merge_sources(
      {source("hip", {hip_device(0, "0000:03:00.0", "gfx1030")}),
       source("sysfs", {sysfs_device("1", "0000:03:00.0", "gfx1031")}), env},
      options);
  ASSERT_EQ(inv.devices.size(), 1u);
  EXPECT_FALSE(has(inv, "gfx-target-mismatch"));
  EXPECT_TRUE(has(inv, "hsa-override-device"));
  EXPECT_EQ(inv.devices[0].sources.at("gfx_target").at("effective"), "gfx1030");
}

TEST(Merge, HipSeesNothingWhileKernelListsAGpu) {
  dev::NamedResult hip = source("hip", {}, "hipErrorNoDevice");
  hip.result.facts["hip_error"] = "hipErrorNoDevice";
  const DeviceInventory inv = dev::merge_sources(
      {hip, source("sysfs", {sysfs_device("1", "0000:03:00.0", "gfx1201")})}, no_env());
  ASSERT_EQ(inv.devices.size(), 1u);
  EXPECT_TRUE(has(inv, "hip-sees-no-gpu"));
  EXPECT_EQ(inv.devices[0].sources.at("seen_by").at("hip"), "hipErrorNoDevice");
}

TEST(Merge, HiddenByVisibleDevicesIsNoProblem) {
  auto options = no_env();
  options.environment["ROCR_VISIBLE_DEVICES"] = "0";
  const DeviceInventory inv = dev::merge_sources(
      {source("hip", {hip_device(0, "0000:03:00.0", "gfx1201")}),
       source("sysfs", {sysfs_device("1", "0000:03:00.0", "gfx1201"),
                        sysfs_device("2", "0000:04:00.0", "gfx1201")})},
      options);
  ASSERT_EQ(inv.devices.size(), 2u);
  EXPECT_FALSE(has(inv, "not-seen-by-hip"));
  EXPECT_EQ(inv.devices[1].sources.at("seen_by").at("hip"), "hidden by ROCR_VISIBLE_DEVICES=0");
}

TEST(Merge, UnseenByHipIsAProblem) {
  const DeviceInventory inv = dev::merge_sources(
      {source("hip", {hip_device(0, "0000:03:00.0", "gfx1201")}),
       source("sysfs", {sysfs_device("1", "0000:03:00.0", "gfx1201"),
                        sysfs_device("2", "0000:04:00.0", "gfx1201")})},
      no_env());
  EXPECT_TRUE(has(inv, "not-seen-by-hip"));
}

TEST(Merge, UnknownTargetStaysUnknown) {
  const DeviceInventory inv =
      dev::merge_sources({source("sysfs", {sysfs_device("1", "0000:03:00.0", "gfx1299")})},
                         no_env());
  ASSERT_EQ(inv.devices.size(), 1u);
  EXPECT_EQ(inv.devices[0].gfx_target, "gfx1299");
  EXPECT_EQ(inv.devices[0].family, "unknown");
  EXPECT_TRUE(inv.devices[0].marketing_names.empty());
  EXPECT_FALSE(inv.devices[0].wave_size);
  EXPECT_TRUE(has(inv, "unknown-gfx-target"));
}

TEST(Merge, NoGpuReasonNamesEverySource) {
  dev::NamedResult hip = source("hip", {}, "hipErrorNoDevice");
  dev::NamedResult rsmi = source("smi", {}, "rsmi_init: RSMI_STATUS_INIT_ERROR");
  dev::NamedResult sysfs = source("sysfs", {}, "no KFD topology");
  sysfs.result.facts["amdgpu_module"] = "missing";
  sysfs.result.facts["kfd_topology"] = "missing";
  dev::NamedResult env = source("environment", {});
  env.result.facts["dev_kfd"] = "missing";
  const DeviceInventory inv = dev::merge_sources({hip, rsmi, sysfs, env}, no_env());
  EXPECT_TRUE(inv.devices.empty());
  for (const char* part : {"no /dev/kfd", "amdgpu kernel driver is not loaded",
                           "HIP says hipErrorNoDevice", "RSMI_STATUS_INIT_ERROR"})
    EXPECT_NE(inv.no_gpu_reason.find(part), std::string::npos) << part << " in "
                                                               << inv.no_gpu_reason;
  EXPECT_EQ(inv.sources_status.at("hip"), "hipErrorNoDevice");
}

TEST(TorchGpus, ADeviceOnlyTorchSeesJoinsTheInventoryWithAFinding) {
  DeviceInventory inv;
  inv.no_gpu_reason = "No AMD GPU found: /dev/kfd does not exist";
  Device h200;
  h200.index = 0;
  h200.name = "NVIDIA H200";
  h200.vram_total_bytes = int64_t{150} << 30;
  h200.pci_bdf = "0000:19:00.0";
  dev::add_torch_gpus(inv, {h200}, "/usr/bin/python3");
  ASSERT_EQ(inv.devices.size(), 1u);
  const Device& d = inv.devices[0];
  EXPECT_EQ(d.index, 0);
  EXPECT_EQ(d.name, "NVIDIA H200");
  EXPECT_TRUE(d.gfx_target.empty());
  EXPECT_EQ(d.sources.at("seen_by").at("torch"), "/usr/bin/python3");
  ASSERT_EQ(inv.findings.size(), 1u);
  EXPECT_EQ(inv.findings[0].id, "gpu-seen-by-torch-only");
  EXPECT_EQ(inv.findings[0].severity, sdpa_doctor::Severity::ok);
  EXPECT_EQ(inv.findings[0].device, "cuda:0");
  // Still true: no AMD GPU was found.
  EXPECT_FALSE(inv.no_gpu_reason.empty());
}

TEST(TorchGpus, AnAmdGpuTheSourcesMissedIsAWarningAndNoLongerNoGpu) {
  DeviceInventory inv;
  inv.no_gpu_reason = "No AMD GPU found: the HIP runtime is not installed";
  Device g;
  g.index = 0;
  g.name = "AMD Radeon RX 9070 XT";
  g.gfx_arch_name = "gfx1201:sramecc-:xnack-";
  dev::add_torch_gpus(inv, {g}, "python3");
  ASSERT_EQ(inv.devices.size(), 1u);
  EXPECT_EQ(inv.devices[0].gfx_target, "gfx1201");
  EXPECT_EQ(inv.devices[0].family, "RDNA4");
  EXPECT_EQ(inv.findings.at(0).severity, sdpa_doctor::Severity::warning);
  EXPECT_TRUE(inv.no_gpu_reason.empty());
}

TEST(TorchGpus, ADeviceTheSourcesSawKeepsTheirFacts) {
  DeviceInventory inv;
  inv.devices.push_back(hip_device(0, "0000:03:00.0", "gfx1201"));
  Device g;
  g.index = 0;
  g.name = "something else";
  dev::add_torch_gpus(inv, {g}, "python3");
  ASSERT_EQ(inv.devices.size(), 1u);
  EXPECT_EQ(inv.devices[0].name, "AMD Radeon Graphics");
  EXPECT_TRUE(inv.findings.empty());
}

// The console block and JSON of an inventory.
#include "report/inventory.hpp"

#include <gtest/gtest.h>

using sdpa_doctor::Device;
using sdpa_doctor::DeviceInventory;
using sdpa_doctor::Severity;

namespace {

DeviceInventory one_gpu() {
  DeviceInventory inv;
  Device d;
  d.index = 0;
  d.name = "AMD Radeon RX 9070 XT";
  d.gfx_target = "gfx1201";
  d.gfx_arch_name = "gfx1201:sramecc-:xnack-";
  d.family = "RDNA4";
  d.marketing_names = {"Radeon RX 9070", "Radeon RX 9070 XT"};
  d.matrix_instructions = "WMMA";
  d.wave_size = 32;
  d.compute_units = 64;
  d.vram_total_bytes = 17163091968;
  d.pci_bdf = "0000:03:00.0";
  d.driver_version = "6.12.12";
  d.temperature_c = 43.0;
  d.sources["name"] = {{"hip", "AMD Radeon RX 9070 XT"}, {"rocm_smi", "Navi 48"}};
  d.sources["pci_id"] = {{"sysfs", "1002:7550"}};
  inv.devices.push_back(d);
  inv.runtime["hip_runtime_version"] = "6.4.43482";
  inv.sources_status["hip"] = "ok";
  inv.findings.push_back({"kfd-not-accessible", Severity::problem, "/dev/kfd not readable",
                          "sudo usermod -aG render $USER", {}, {}});
  inv.findings.push_back({"kfd-accessible", Severity::ok, "fine", "", {}, {}});
  return inv;
}

} // namespace

TEST(InventoryConsole, OneBlockPerDeviceThenFindings) {
  const std::string text = sdpa_doctor::report::render_inventory_console(one_gpu());
  for (const char* part : {"1 AMD GPU found", "GPU 0  AMD Radeon RX 9070 XT", "cuda:0",
                           "gfx1201 (gfx1201:sramecc-:xnack-)", "RDNA4, wave32, WMMA",
                           "16.0 GiB", "64", "0000:03:00.0", "6.12.12", "43 C",
                           "[problem] /dev/kfd not readable", "fix:  sudo usermod -aG render",
                           "[ok] fine", "rocm_smi=Navi 48"})
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  // A fact only one source gave is left to the JSON.
  EXPECT_EQ(text.find("1002:7550"), std::string::npos);
  // Problems come before ok notes.
  EXPECT_LT(text.find("[problem]"), text.find("[ok]"));

  sdpa_doctor::report::InventoryConsoleOptions quiet;
  quiet.show_ok = false;
  EXPECT_EQ(sdpa_doctor::report::render_inventory_console(one_gpu(), quiet).find("[ok]"),
            std::string::npos);
}

TEST(InventoryConsole, NoGpuIsOnePlainLine) {
  DeviceInventory inv;
  inv.no_gpu_reason = "no /dev/kfd; HIP says hipErrorNoDevice";
  const std::string text = sdpa_doctor::report::render_inventory_console(inv);
  EXPECT_EQ(text.rfind("No GPU found: no /dev/kfd; HIP says hipErrorNoDevice.\n", 0), 0u)
      << text;
}

TEST(InventoryJson, NumbersStayNumbersAndUnknownIsNull) {
  const auto doc = nlohmann::json::parse(sdpa_doctor::report::render_inventory_json(one_gpu()));
  EXPECT_EQ(doc["schema"], "sdpa-doctor/devices/v1");
  const auto& inv = doc["inventory"];
  EXPECT_EQ(inv["gpu_found"], true);
  EXPECT_TRUE(inv["no_gpu_reason"].is_null());
  const auto& d = inv["devices"][0];
  EXPECT_EQ(d["vram_total_bytes"], 17163091968);
  EXPECT_EQ(d["wave_size"], 32);
  EXPECT_EQ(d["gfx_target"], "gfx1201");
  EXPECT_TRUE(d["power_w"].is_null());
  EXPECT_TRUE(d["vram_used_bytes"].is_null());
  EXPECT_EQ(d["sources"]["pci_id"]["sysfs"], "1002:7550");
  EXPECT_EQ(inv["findings"][0]["severity"], "problem");
  EXPECT_EQ(inv["findings"][0]["remedy"], "sudo usermod -aG render $USER");
  EXPECT_EQ(inv["runtime"]["hip_runtime_version"], "6.4.43482");
}

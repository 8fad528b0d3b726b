// The sysfs source against the captured trees in tests/fixtures/sysfs, and against copies of
// them broken in the ways real files break (truncated, non-numeric, missing, huge, loops).
#include "devices/devices.hpp"
#include "devices/sources.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace dev = sdpa_doctor::devices;
namespace fs = std::filesystem;
using sdpa_doctor::DeviceInventory;
using sdpa_doctor::Severity;

namespace {

std::string fixture(const std::string& name) {
  return sdpa_test::source_path("tests/fixtures/sysfs/" + name);
}

dev::EnumerateOptions offline(const std::string& root) {
  dev::EnumerateOptions options;
  options.sysfs_root = root;
  options.dev_root.clear();
  options.use_hip = false;
  options.use_smi = false;
  options.environment.clear();
  return options;
}

bool has_finding(const DeviceInventory& inv, const std::string& id, const std::string& text = "") {
  return std::any_of(inv.findings.begin(), inv.findings.end(), [&](const auto& f) {
    return f.id == id && f.message.find(text) != std::string::npos;
  });
}

std::string all_findings(const DeviceInventory& inv) {
  std::string out;
  for (const auto& f : inv.findings) out += f.id + ": " + f.message + "\n";
  return out;
}

// A writable copy of a fixture, symlinks kept as symlinks.
std::string copy_fixture(const sdpa_test::TempDir& tmp, const std::string& name) {
  const fs::path to = fs::path(tmp.path()) / name;
  fs::copy(fixture(name), to, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  return to.string();
}

const char* k_gpu_props = "sys/class/kfd/kfd/topology/nodes/1/properties";

} // namespace

TEST(ReadCapped, CapsAndReportsErrors) {
  sdpa_test::TempDir tmp;
  sdpa_test::write_file(tmp.file("big"), std::string(100 * 1024, 'x'));
  auto big = dev::read_capped(tmp.file("big"));
  ASSERT_TRUE(big);
  EXPECT_TRUE(big->truncated);
  EXPECT_EQ(big->text.size(), dev::k_max_file_bytes);

  sdpa_test::write_file(tmp.file("small"), "42\n");
  auto small = dev::read_capped(tmp.file("small"));
  ASSERT_TRUE(small);
  EXPECT_FALSE(small->truncated);
  EXPECT_EQ(small->text, "42\n");

  EXPECT_FALSE(dev::read_capped(tmp.file("missing")));
  EXPECT_NE(dev::read_capped(tmp.path()).error().message.find("is a directory"), std::string::npos);
  fs::create_symlink("loop", tmp.file("loop"));
  EXPECT_FALSE(dev::read_capped(tmp.file("loop")));
  // A FIFO would block a plain read forever.
  ASSERT_EQ(::mkfifo(tmp.file("fifo").c_str(), 0600), 0);
  EXPECT_NE(dev::read_capped(tmp.file("fifo")).error().message.find("not a regular file"),
            std::string::npos);
}

TEST(KfdProperties, ParsesKeyValueLines) {
  auto props = dev::parse_kfd_properties("simd_count 128\ngfx_target_version 120001\n"
                                         "unique_id 18446744073709551615\nbroken\n"
                                         "simd_count 4\nname_like abc\n");
  EXPECT_EQ(props.integer("simd_count"), 128);
  EXPECT_EQ(props.integer("gfx_target_version"), 120001);
  EXPECT_EQ(props.integer("unique_id"), std::nullopt); // u64 beyond int64: not a quantity
  std::string problem;
  EXPECT_EQ(props.integer("name_like", &problem), std::nullopt);
  EXPECT_NE(problem.find("not a number"), std::string::npos);
  EXPECT_EQ(props.integer("absent", &problem), std::nullopt);
  EXPECT_NE(problem.find("missing"), std::string::npos);
  ASSERT_EQ(props.problems.size(), 2u); // "broken" has no value; simd_count repeated
}

TEST(SysfsIntegers, DecimalAndHex) {
  EXPECT_EQ(dev::parse_sysfs_integer("0x1002\n"), 0x1002);
  EXPECT_EQ(dev::parse_sysfs_integer("17163091968\n"), 17163091968);
  EXPECT_EQ(dev::parse_sysfs_integer(""), std::nullopt);
  EXPECT_EQ(dev::parse_sysfs_integer("0x"), std::nullopt);
  EXPECT_EQ(dev::parse_sysfs_integer("12 GB"), std::nullopt);
  EXPECT_EQ(dev::parse_sysfs_integer("-1"), std::nullopt);
}

TEST(SysfsFixtures, Rx9070Xt) {
  const DeviceInventory inv = dev::enumerate_devices(offline(fixture("rx9070xt")));
  ASSERT_EQ(inv.devices.size(), 1u) << all_findings(inv);
  const auto& d = inv.devices[0];
  EXPECT_EQ(d.gfx_target, "gfx1201");
  EXPECT_EQ(d.family, "RDNA4");
  EXPECT_EQ(d.name, "AMD Radeon RX 9070 XT");
  EXPECT_EQ(d.matrix_instructions, "WMMA");
  EXPECT_EQ(d.compute_units, 64);
  EXPECT_EQ(d.simd_count, 128);
  EXPECT_EQ(d.wave_size, 32);
  EXPECT_EQ(d.vram_total_bytes, 17163091968);
  EXPECT_EQ(d.lds_per_cu_bytes, 64 * 1024);
  EXPECT_EQ(d.pci_bdf, "0000:03:00.0");
  EXPECT_EQ(d.render_node, "/dev/dri/renderD128");
  EXPECT_EQ(d.kfd_node, "1");
  EXPECT_EQ(d.index, -1);
  EXPECT_FALSE(d.integrated);
  EXPECT_EQ(d.driver_version, "amdgpu in kernel 6.14.0-24-generic");
  EXPECT_TRUE(inv.no_gpu_reason.empty());
  EXPECT_EQ(inv.sources_status.at("sysfs"), "ok");
  EXPECT_EQ(inv.sources_status.at("hip").rfind("skipped", 0), 0u);
  // A clean tree gives no sysfs complaints.
  EXPECT_FALSE(has_finding(inv, "sysfs-malformed")) << all_findings(inv);
  EXPECT_FALSE(has_finding(inv, "sysfs-unreadable")) << all_findings(inv);
}

TEST(SysfsFixtures, Rx9060XtAndRx7900Xtx) {
  const DeviceInventory a = dev::enumerate_devices(offline(fixture("rx9060xt")));
  ASSERT_EQ(a.devices.size(), 1u);
  EXPECT_EQ(a.devices[0].gfx_target, "gfx1200");
  EXPECT_EQ(a.devices[0].family, "RDNA4");
  EXPECT_EQ(a.devices[0].compute_units, 32);
  EXPECT_EQ(a.devices[0].name, "AMD Radeon RX 9060 XT");
  EXPECT_EQ(a.devices[0].driver_version, "amdgpu 6.12.12"); // DKMS driver has a version file
  EXPECT_EQ(a.runtime.at("amdgpu_version"), "6.12.12");

  const DeviceInventory b = dev::enumerate_devices(offline(fixture("rx7900xtx")));
  ASSERT_EQ(b.devices.size(), 1u);
  EXPECT_EQ(b.devices[0].gfx_target, "gfx1100");
  EXPECT_EQ(b.devices[0].family, "RDNA3");
  EXPECT_EQ(b.devices[0].compute_units, 96);
  EXPECT_EQ(b.devices[0].vram_total_bytes, 25753026560);
  EXPECT_EQ(b.devices[0].name, "AMD Radeon RX 7900 XTX");
}

TEST(SysfsFixtures, Mi300xNodeWithFourGpus) {
  const DeviceInventory inv = dev::enumerate_devices(offline(fixture("mi300x")));
  ASSERT_EQ(inv.devices.size(), 4u) << all_findings(inv);
  std::vector<std::string> bdfs;
  for (const auto& d : inv.devices) {
    EXPECT_EQ(d.gfx_target, "gfx942");
    EXPECT_EQ(d.family, "CDNA3");
    EXPECT_EQ(d.matrix_instructions, "MFMA");
    EXPECT_EQ(d.wave_size, 64);
    EXPECT_EQ(d.compute_units, 304);
    EXPECT_EQ(d.name, "AMD Instinct MI300X");
    EXPECT_EQ(d.vram_total_bytes, 206141652992);
    EXPECT_EQ(d.driver_version, "amdgpu 6.10.5");
    bdfs.push_back(d.pci_bdf);
  }
  EXPECT_EQ(bdfs, (std::vector<std::string>{"0000:05:00.0", "0000:25:00.0", "0000:45:00.0",
                                            "0000:65:00.0"}));
  // Two CPU nodes (0 and 1) come first; GPUs are KFD nodes 2..5.
  EXPECT_EQ(inv.devices[0].kfd_node, "2");
  EXPECT_EQ(inv.devices[3].render_node, "/dev/dri/renderD152");
}

TEST(SysfsFixtures, StrixHaloBesideADiscreteCard) {
  const DeviceInventory inv = dev::enumerate_devices(offline(fixture("strix-halo-plus-dgpu")));
  ASSERT_EQ(inv.devices.size(), 2u);
  const auto& apu = inv.devices[0];
  const auto& dgpu = inv.devices[1];
  EXPECT_EQ(apu.gfx_target, "gfx1151");
  EXPECT_EQ(apu.family, "RDNA3.5");
  EXPECT_TRUE(apu.integrated);
  EXPECT_EQ(apu.compute_units, 40);
  EXPECT_EQ(apu.pci_bdf, "0000:c5:00.0");
  EXPECT_NE(apu.name.find("Strix Halo"), std::string::npos) << apu.name;
  EXPECT_EQ(dgpu.gfx_target, "gfx1201");
  EXPECT_FALSE(dgpu.integrated);
  EXPECT_EQ(dgpu.name, "AMD Radeon AI PRO R9700");
  EXPECT_EQ(dgpu.render_node, "/dev/dri/renderD129");
}

TEST(SysfsFixtures, HsaOverrideSpoofsTheArch) {
  auto options = offline(fixture("rx6700xt-hsa-override"));
  options.environment["HSA_OVERRIDE_GFX_VERSION"] = "10.3.0";
  const DeviceInventory inv = dev::enumerate_devices(options);
  ASSERT_EQ(inv.devices.size(), 1u);
  const auto& d = inv.devices[0];
  EXPECT_EQ(d.gfx_target, "gfx1031"); // the hardware
  EXPECT_EQ(d.family, "RDNA2");
  EXPECT_EQ(d.sources.at("gfx_target").at("effective"), "gfx1030");
  EXPECT_TRUE(has_finding(inv, "hsa-override-gfx-version", "gfx1030"));
  EXPECT_TRUE(has_finding(inv, "hsa-override-device", "gfx1031"));

  // Without the variable the same tree is a plain gfx1031.
  const DeviceInventory plain = dev::enumerate_devices(offline(fixture("rx6700xt-hsa-override")));
  EXPECT_FALSE(has_finding(plain, "hsa-override-device"));
  EXPECT_EQ(plain.devices[0].sources.count("gfx_target"), 0u);
}

TEST(SysfsGarbage, TruncatedPropertiesGiveAFinding) {
  sdpa_test::TempDir tmp;
  const std::string root = copy_fixture(tmp, "rx9070xt");
  const std::string full = sdpa_test::read_file(root + "/" + k_gpu_props);
  sdpa_test::write_file(root + "/" + k_gpu_props, full.substr(0, full.find("simd_count") + 13));
  const DeviceInventory inv = dev::enumerate_devices(offline(root));
  // The KFD node lost its PCI address with the tail of the file, so the render node the card
  // also has is listed on its own: two entries, neither one invented.
  ASSERT_EQ(inv.devices.size(), 2u) << all_findings(inv);
  EXPECT_EQ(inv.devices[0].kfd_node, "1");
  EXPECT_EQ(inv.devices[0].simd_count, 12);
  EXPECT_EQ(inv.devices[0].gfx_target, "");
  EXPECT_EQ(inv.devices[0].family, "unknown");
  EXPECT_EQ(inv.devices[1].pci_bdf, "0000:03:00.0");
  EXPECT_TRUE(has_finding(inv, "sysfs-malformed", "gfx_target_version")) << all_findings(inv);
  EXPECT_TRUE(has_finding(inv, "unknown-gfx-target")) << all_findings(inv);
}

TEST(SysfsGarbage, NonNumericValuesGiveAFinding) {
  sdpa_test::TempDir tmp;
  const std::string root = copy_fixture(tmp, "rx9070xt");
  std::string text = sdpa_test::read_file(root + "/" + k_gpu_props);
  text.replace(text.find("gfx_target_version 120001"), 25, "gfx_target_version banana");
  text.replace(text.find("location_id 768"), 15, "location_id 0x300");
  sdpa_test::write_file(root + "/" + k_gpu_props, text);
  sdpa_test::write_file(root + "/sys/bus/pci/devices/0000:03:00.0/mem_info_vram_total", "lots\n");
  const DeviceInventory inv = dev::enumerate_devices(offline(root));
  ASSERT_EQ(inv.devices.size(), 1u);
  EXPECT_EQ(inv.devices[0].gfx_target, "");
  EXPECT_TRUE(has_finding(inv, "sysfs-malformed", "'gfx_target_version' is not a number"))
      << all_findings(inv);
  EXPECT_TRUE(has_finding(inv, "sysfs-malformed", "'location_id' is not a number"));
  EXPECT_TRUE(has_finding(inv, "sysfs-malformed", "mem_info_vram_total: not a number"))
      << all_findings(inv);
}

TEST(SysfsGarbage, OutOfRangeValuesGiveAFinding) {
  sdpa_test::TempDir tmp;
  const std::string root = copy_fixture(tmp, "rx9070xt");
  std::string text = sdpa_test::read_file(root + "/" + k_gpu_props);
  text.replace(text.find("gfx_target_version 120001"), 25, "gfx_target_version 121601");
  text.replace(text.find("location_id 768"), 15, "location_id 99999999");
  sdpa_test::write_file(root + "/" + k_gpu_props, text);
  const DeviceInventory inv = dev::enumerate_devices(offline(root));
  ASSERT_EQ(inv.devices.size(), 1u);
  EXPECT_TRUE(has_finding(inv, "sysfs-malformed", "121601 is not a gfx target"));
  EXPECT_TRUE(has_finding(inv, "sysfs-malformed", "99999999 is not a PCI address"));
  // The render minor still names the PCI function.
  EXPECT_EQ(inv.devices[0].pci_bdf, "0000:03:00.0");
  EXPECT_EQ(inv.devices[0].sources.at("pci_bdf").at("sysfs"), "from /dev/dri/renderD128");
}

TEST(SysfsGarbage, MissingUnreadableHugeAndLoopingFiles) {
  sdpa_test::TempDir tmp;
  const std::string root = copy_fixture(tmp, "mi300x");
  const std::string nodes = root + "/sys/class/kfd/kfd/topology/nodes/";
  fs::remove(nodes + "2/properties");                                        // missing
  fs::remove(nodes + "3/properties");
  fs::create_symlink("properties", nodes + "3/properties");                  // loop
  fs::remove(nodes + "4/properties");
  fs::create_directory(nodes + "4/properties");                              // not a file
  std::string huge = sdpa_test::read_file(fixture("mi300x") + "/sys/class/kfd/kfd/topology/nodes/5/properties");
  huge += std::string(200 * 1024, '\0');                                     // binary tail
  sdpa_test::write_file(nodes + "5/properties", huge);
  fs::create_directory(nodes + "999999");                                    // empty node dir
  const DeviceInventory inv = dev::enumerate_devices(offline(root));
  EXPECT_TRUE(has_finding(inv, "sysfs-unreadable", "nodes/2/properties")) << all_findings(inv);
  EXPECT_TRUE(has_finding(inv, "sysfs-unreadable", "nodes/3/properties"));
  EXPECT_TRUE(has_finding(inv, "sysfs-unreadable", "nodes/4/properties"));
  EXPECT_TRUE(has_finding(inv, "sysfs-unreadable", "nodes/999999/properties"));
  EXPECT_TRUE(has_finding(inv, "sysfs-malformed", "only the start was read")) << all_findings(inv);
  // Node 5 still parses from its first 64 KiB; the render nodes of 2..4 are kept as "not in KFD".
  ASSERT_EQ(inv.devices.size(), 4u) << all_findings(inv);
  EXPECT_EQ(inv.devices[0].gfx_target, "gfx942");
  EXPECT_TRUE(has_finding(inv, "gpu-not-in-kfd"));
}

TEST(SysfsGarbage, TopologyDirectoryIsALoop) {
  sdpa_test::TempDir tmp;
  const std::string root = copy_fixture(tmp, "rx9070xt");
  const std::string nodes = root + "/sys/class/kfd/kfd/topology/nodes";
  fs::remove_all(nodes);
  fs::create_symlink("nodes", nodes);
  const DeviceInventory inv = dev::enumerate_devices(offline(root));
  EXPECT_TRUE(has_finding(inv, "sysfs-unreadable", "topology/nodes")) << all_findings(inv);
  // The render node still shows the card, flagged as unusable by ROCm.
  ASSERT_EQ(inv.devices.size(), 1u);
  EXPECT_EQ(inv.devices[0].pci_bdf, "0000:03:00.0");
}

TEST(SysfsEmpty, NoGpuSaysWhy) {
  sdpa_test::TempDir tmp;
  fs::create_directories(fs::path(tmp.path()) / "dev");
  auto options = offline(tmp.path());
  options.dev_root = tmp.path() + "/dev";
  const DeviceInventory inv = dev::enumerate_devices(options);
  EXPECT_TRUE(inv.devices.empty());
  EXPECT_NE(inv.no_gpu_reason.find("no " + tmp.path() + "/dev/kfd"), std::string::npos)
      << inv.no_gpu_reason;
  EXPECT_NE(inv.no_gpu_reason.find("amdgpu kernel driver is not loaded"), std::string::npos);
  // No torch and no trace of an AMD stack: nobody to tell to fix /dev/kfd.
  EXPECT_FALSE(has_finding(inv, "kfd-missing")) << all_findings(inv);
  // A ROCm torch needs it: said, and the one line names the build.
  options.torch_build = dev::TorchBuild{"2.9.0+rocm6.4", "", "6.4.43482"};
  const DeviceInventory rocm = dev::enumerate_devices(options);
  EXPECT_TRUE(has_finding(rocm, "kfd-missing")) << all_findings(rocm);
  EXPECT_EQ(rocm.no_gpu_reason.rfind("torch 2.9.0+rocm6.4 is a ROCm 6.4 build and no AMD GPU is "
                                     "visible: no " + tmp.path() + "/dev/kfd",
                                     0),
            0u)
      << rocm.no_gpu_reason;
  // A CUDA torch never hears of it.
  options.torch_build = dev::TorchBuild{"2.14.1+cu130", "13.0", ""};
  const DeviceInventory cuda = dev::enumerate_devices(options);
  EXPECT_FALSE(has_finding(cuda, "kfd-missing")) << all_findings(cuda);
  EXPECT_EQ(cuda.no_gpu_reason.rfind("torch 2.14.1+cu130 is a CUDA 13.0 build and no NVIDIA GPU "
                                     "is visible: not asked: the sysfs tree is a capture",
                                     0),
            0u)
      << cuda.no_gpu_reason;
}

TEST(SysfsEmpty, KfdWithOnlyACpuNode) {
  sdpa_test::TempDir tmp;
  const std::string root = copy_fixture(tmp, "rx9070xt");
  fs::remove_all(root + "/sys/class/kfd/kfd/topology/nodes/1");
  fs::remove_all(root + "/sys/class/drm");
  const DeviceInventory inv = dev::enumerate_devices(offline(root));
  EXPECT_TRUE(inv.devices.empty());
  EXPECT_NE(inv.no_gpu_reason.find("lists no GPU node"), std::string::npos) << inv.no_gpu_reason;
}

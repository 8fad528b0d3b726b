#include "devices/devices.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace dev = sdpa_doctor::devices;

TEST(GfxTargetFromVersion, DecodesKfdVersions) {
  EXPECT_EQ(dev::gfx_target_from_version(120001), "gfx1201");
  EXPECT_EQ(dev::gfx_target_from_version(120000), "gfx1200");
  EXPECT_EQ(dev::gfx_target_from_version(110000), "gfx1100");
  EXPECT_EQ(dev::gfx_target_from_version(110501), "gfx1151");
  EXPECT_EQ(dev::gfx_target_from_version(90402), "gfx942");
  EXPECT_EQ(dev::gfx_target_from_version(90010), "gfx90a");
  EXPECT_EQ(dev::gfx_target_from_version(90012), "gfx90c");
  EXPECT_EQ(dev::gfx_target_from_version(90500), "gfx950");
  EXPECT_EQ(dev::gfx_target_from_version(100301), "gfx1031");
}

TEST(GfxTargetFromVersion, RejectsWhatIsNoTarget) {
  EXPECT_EQ(dev::gfx_target_from_version(0), std::nullopt);       // CPU node
  EXPECT_EQ(dev::gfx_target_from_version(-120001), std::nullopt);
  EXPECT_EQ(dev::gfx_target_from_version(91600), std::nullopt);   // minor 16: no hex digit
  EXPECT_EQ(dev::gfx_target_from_version(90016), std::nullopt);
  EXPECT_EQ(dev::gfx_target_from_version(5000000), std::nullopt);
  EXPECT_EQ(dev::gfx_target_from_version(401), std::nullopt);     // major 0
}

TEST(GfxTargetFromOverride, ParsesHsaOverrideSyntax) {
  EXPECT_EQ(dev::gfx_target_from_override("11.0.0"), "gfx1100");
  EXPECT_EQ(dev::gfx_target_from_override("10.3.0"), "gfx1030");
  EXPECT_EQ(dev::gfx_target_from_override("9.0.10"), "gfx90a");
  EXPECT_EQ(dev::gfx_target_from_override("12.0.1"), "gfx1201");
  for (const char* bad : {"", "11", "11.0", "11.0.0.1", "a.b.c", "11.0.x", "11..0", "11.0.16",
                          " 11.0.0", "9.-954296362.0", "-1.0.0", "11.0.-1"})
    EXPECT_EQ(dev::gfx_target_from_override(bad), std::nullopt) << bad;
}

TEST(BaseGfxTarget, StripsFeatureSuffixes) {
  EXPECT_EQ(dev::base_gfx_target("gfx90a:sramecc+:xnack-"), "gfx90a");
  EXPECT_EQ(dev::base_gfx_target("gfx1201"), "gfx1201");
  EXPECT_EQ(dev::base_gfx_target("GFX1100"), "gfx1100");
  EXPECT_EQ(dev::base_gfx_target("sm_90"), "");
  EXPECT_EQ(dev::base_gfx_target("gfx"), "");
  EXPECT_EQ(dev::base_gfx_target("gfx12zz"), "");
}

TEST(GfxArchTable, KnowsTheTargetsUsersHave) {
  struct Expect {
    const char* target;
    const char* family;
    int wave;
    const char* matrix;
    const char* product;
  };
  for (const Expect& e : {
           Expect{"gfx1201", "RDNA4", 32, "WMMA", "Radeon RX 9070 XT"},
           Expect{"gfx1201", "RDNA4", 32, "WMMA", "Radeon AI PRO R9700"},
           Expect{"gfx1200", "RDNA4", 32, "WMMA", "Radeon RX 9060 XT"},
           Expect{"gfx1100", "RDNA3", 32, "WMMA", "Radeon RX 7900 XTX"},
           Expect{"gfx1100", "RDNA3", 32, "WMMA", "Radeon PRO W7900"},
           Expect{"gfx1101", "RDNA3", 32, "WMMA", "Radeon RX 7800 XT"},
           Expect{"gfx1102", "RDNA3", 32, "WMMA", "Radeon RX 7600"},
           Expect{"gfx1151", "RDNA3.5", 32, "WMMA", "Strix Halo"},
           Expect{"gfx1150", "RDNA3.5", 32, "WMMA", "Strix Point"},
           Expect{"gfx942", "CDNA3", 64, "MFMA", "Instinct MI300X"},
           Expect{"gfx942:sramecc+:xnack-", "CDNA3", 64, "MFMA", "Instinct MI325X"},
           Expect{"gfx950", "CDNA4", 64, "MFMA", "Instinct MI355X"},
           Expect{"gfx90a", "CDNA2", 64, "MFMA", "Instinct MI250X"},
           Expect{"gfx908", "CDNA1", 64, "MFMA", "Instinct MI100"},
           Expect{"gfx906", "GCN5", 64, "none", "Radeon VII"},
           Expect{"gfx1030", "RDNA2", 32, "none", "Radeon RX 6900 XT"},
           Expect{"gfx1010", "RDNA1", 32, "none", "Radeon RX 5700 XT"},
       }) {
    auto arch = dev::find_gfx_arch(e.target);
    ASSERT_TRUE(arch) << e.target;
    EXPECT_EQ(arch->family, e.family) << e.target;
    EXPECT_EQ(arch->wave_size, e.wave) << e.target;
    EXPECT_EQ(arch->matrix, e.matrix) << e.target;
    const auto names = dev::marketing_names(*arch);
    EXPECT_TRUE(std::any_of(names.begin(), names.end(), [&](const std::string& n) {
      return n.find(e.product) != std::string::npos;
    })) << e.target << " lacks " << e.product;
  }
  EXPECT_TRUE(dev::find_gfx_arch("gfx1151")->integrated);
  EXPECT_FALSE(dev::find_gfx_arch("gfx1201")->integrated);
}

TEST(GfxArchTable, UnknownTargetsAreNotGuessed) {
  EXPECT_EQ(dev::find_gfx_arch("gfx1299"), std::nullopt);
  EXPECT_EQ(dev::find_gfx_arch("gfx805"), std::nullopt);
  EXPECT_EQ(dev::find_gfx_arch(""), std::nullopt);
  EXPECT_EQ(dev::find_gfx_arch("RDNA4"), std::nullopt);
}

TEST(GfxArchTable, EntriesAreWellFormedAndUnique) {
  const auto& table = dev::gfx_arch_table();
  ASSERT_GE(table.size(), 25u);
  for (std::size_t i = 0; i < table.size(); ++i) {
    const auto& a = table[i];
    EXPECT_EQ(dev::base_gfx_target(a.target), a.target);
    EXPECT_TRUE(a.wave_size == 32 || a.wave_size == 64) << a.target;
    EXPECT_TRUE(a.matrix == "WMMA" || a.matrix == "MFMA" || a.matrix == "none") << a.target;
    EXPECT_FALSE(dev::marketing_names(a).empty()) << a.target;
    // RDNA is wave32, GCN/CDNA wave64: the one fact the kernels must never assume wrong.
    EXPECT_EQ(a.wave_size, a.family.substr(0, 4) == "RDNA" ? 32 : 64) << a.target;
    for (std::size_t j = i + 1; j < table.size(); ++j) EXPECT_NE(a.target, table[j].target);
  }
}

TEST(Pci, NormalisesAddresses) {
  EXPECT_EQ(dev::normalize_pci_bdf("0000:03:00.0"), "0000:03:00.0");
  EXPECT_EQ(dev::normalize_pci_bdf("0:3:0.0"), "0000:03:00.0");
  EXPECT_EQ(dev::normalize_pci_bdf("03:00.0"), "0000:03:00.0");
  EXPECT_EQ(dev::normalize_pci_bdf("0000:C5:00.0"), "0000:c5:00.0");
  EXPECT_EQ(dev::normalize_pci_bdf("0001:25:1f.7"), "0001:25:1f.7");
  for (const char* bad : {"", "zz", "0000:03:00", "0000:03:00.8", "0000:03:20.0", "0000:103:00.0",
                          "10000:03:00.0", "0000:03:00.x"})
    EXPECT_EQ(dev::normalize_pci_bdf(bad), "") << bad;
}

TEST(Pci, DecodesKfdAndRsmiEncodings) {
  EXPECT_EQ(dev::pci_bdf_from_location(0, 768), "0000:03:00.0");
  EXPECT_EQ(dev::pci_bdf_from_location(0, (0xc5 << 8) | (1 << 3) | 2), "0000:c5:01.2");
  EXPECT_EQ(dev::pci_bdf_from_rsmi((uint64_t{1} << 32) | (0x25 << 8)), "0001:25:00.0");
  EXPECT_EQ(dev::pci_bdf_from_rsmi((0x65 << 8) | (2 << 3) | 1), "0000:65:02.1");
}

TEST(Pci, NamesOnlyUnambiguousProducts) {
  EXPECT_EQ(dev::pci_product_name(0x1002, 0x7550, 0xc0), "AMD Radeon RX 9070 XT");
  EXPECT_EQ(dev::pci_product_name(0x1002, 0x7550, 0xc3), "AMD Radeon RX 9070");
  EXPECT_EQ(dev::pci_product_name(0x1002, 0x7550, 0x99), "");
  EXPECT_EQ(dev::pci_product_name(0x1002, 0x7550, std::nullopt), "");
  EXPECT_EQ(dev::pci_product_name(0x1002, 0x74a1, 0x00), "AMD Instinct MI300X");
  EXPECT_EQ(dev::pci_product_name(0x10de, 0x7550, 0xc0), "");
}

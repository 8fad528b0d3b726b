// Which hipDeviceProp_t layout each HIP major fills, and reading gcnArchName from it only when the
// buffer proves the layout: a wrong guess is a reason, never a made-up arch.
#include "devices/hip_abi.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace hip_abi = sdpa_doctor::devices::hip_abi;

namespace {

std::vector<unsigned char> props(const hip_abi::PropsLayout& layout, const char* name,
                                 const char* arch) {
  std::vector<unsigned char> buffer(hip_abi::k_props_buffer_bytes, 0);
  std::memcpy(buffer.data(), name, std::strlen(name));
  std::memcpy(buffer.data() + layout.gcn_arch_name_offset, arch, std::strlen(arch));
  return buffer;
}

} // namespace

TEST(HipAbi, EachKnownMajorHasItsLayoutAndEntryPoint) {
  EXPECT_EQ(hip_abi::major_of(50221153), 5);
  EXPECT_EQ(hip_abi::major_of(60443482), 6);
  EXPECT_EQ(hip_abi::major_of(70051831), 7);
  const auto hip5 = hip_abi::props_layout(5);
  ASSERT_TRUE(hip5);
  EXPECT_STREQ(hip5->function, "hipGetDeviceProperties");
  EXPECT_EQ(hip5->gcn_arch_name_offset, 396u);
  for (int major : {6, 7}) {
    const auto layout = hip_abi::props_layout(major);
    ASSERT_TRUE(layout) << major;
    EXPECT_STREQ(layout->function, "hipGetDevicePropertiesR0600");
    EXPECT_EQ(layout->gcn_arch_name_offset, 1160u);
    EXPECT_LE(layout->size, hip_abi::k_props_buffer_bytes);
  }
  EXPECT_FALSE(hip_abi::props_layout(4));
  EXPECT_FALSE(hip_abi::props_layout(8)); // a later major is an unknown ABI, not a guess
}

TEST(HipAbi, ArchNameIsReadWhereTheLayoutKeepsIt) {
  const auto layout = *hip_abi::props_layout(6);
  const auto buffer = props(layout, "AMD Radeon RX 9070 XT", "gfx1201");
  const auto arch =
      hip_abi::read_arch_name(buffer.data(), buffer.size(), layout, "AMD Radeon RX 9070 XT");
  EXPECT_EQ(arch.value, "gfx1201");
  EXPECT_EQ(arch.problem, "");
}

TEST(HipAbi, AnotherLayoutThanPromisedIsAProblemNotAnArch) {
  // A HIP 5 runtime's struct read as if it were R0600: the arch is not where R0600 keeps it.
  const auto hip5 = *hip_abi::props_layout(5);
  const auto r0600 = *hip_abi::props_layout(6);
  const auto buffer = props(hip5, "AMD Instinct MI210", "gfx90a:sramecc+:xnack-");
  const auto wrong =
      hip_abi::read_arch_name(buffer.data(), buffer.size(), r0600, "AMD Instinct MI210");
  EXPECT_EQ(wrong.value, "");
  EXPECT_NE(wrong.problem.find("no gfx name"), std::string::npos) << wrong.problem;
  const auto right =
      hip_abi::read_arch_name(buffer.data(), buffer.size(), hip5, "AMD Instinct MI210");
  EXPECT_EQ(right.value, "gfx90a:sramecc+:xnack-");

  // The name field disagrees with hipDeviceGetName: the struct was not filled as expected.
  const auto other = hip_abi::read_arch_name(buffer.data(), buffer.size(), hip5, "AMD Radeon VII");
  EXPECT_EQ(other.value, "");
  EXPECT_NE(other.problem.find("hipDeviceGetName"), std::string::npos) << other.problem;

  // No terminator inside the field: not read past it.
  std::vector<unsigned char> unterminated(hip_abi::k_props_buffer_bytes, 'g');
  EXPECT_NE(hip_abi::read_arch_name(unterminated.data(), unterminated.size(), hip5, "").problem,
            "");
  // A buffer too small for the layout.
  EXPECT_NE(hip_abi::read_arch_name(buffer.data(), 400, hip5, "").problem, "");
}

#include "core/variant.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

using namespace sdpa_doctor;

TEST(Variant, ParsesNamesAndEnvironment) {
  auto v = parse_variant("flash[aotriton,experimental]");
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_EQ(v->backend, "flash");
  EXPECT_EQ(v->name(), "flash[aotriton,experimental]");
  auto env = v->environment();
  EXPECT_NE(std::find(env.begin(), env.end(),
                      std::pair<std::string, std::string>{"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "1"}),
            env.end());
  auto ck = parse_variant("flash[ck]");
  ASSERT_TRUE(ck);
  EXPECT_EQ(ck->environment().at(0).first, "TORCH_ROCM_FA_PREFER_CK");
  EXPECT_EQ(parse_variant("math")->name(), "math");
}

TEST(Variant, RejectsBadNames) {
  for (const char* bad : {"", "[ck]", "flash[", "flash[]", "flash[turbo]", "flash[ck,aotriton]"})
    EXPECT_FALSE(parse_variant(bad)) << bad;
}

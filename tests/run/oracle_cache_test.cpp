// The oracle cache's key and bound, on real files.
#include "run/oracle_cache.hpp"
#include "run/run.hpp"

#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

using namespace sdpa_doctor;
using namespace sdpa_doctor::run;
namespace fs = std::filesystem;

namespace {

Case spec(const char* text) { return *parse_case_spec(text); }

TEST(OracleCache, KeyNamesTheCaseAndChangesWithSeedAndInputs) {
  const Case a = spec("dtype=fp32,h=1,l=8,d=16");
  const Case seeded = spec("dtype=fp32,h=1,l=8,d=16,seed=7");
  const std::string key = oracle_cache_key(a, make_inputs(a));
  EXPECT_EQ(key.rfind(a.id() + "-", 0), 0u) << key;
  EXPECT_EQ(key, oracle_cache_key(a, make_inputs(a)));
  EXPECT_NE(key, oracle_cache_key(seeded, make_inputs(seeded)));
  HostInputs changed = make_inputs(a);
  changed.v[0] += 1.0f; // an input generator that changed must never find the old oracle
  EXPECT_NE(key, oracle_cache_key(a, changed));
}

TEST(OracleCache, FetchNeedsTheExactSizeAndPlacesACopyOrLink) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("one"), std::string(64, 'x'));
  const OracleCache cache(dir.file("cache"), 1 << 20);
  cache.store("k", dir.file("one"));
  EXPECT_FALSE(cache.fetch("k", 63, dir.file("a")));
  EXPECT_FALSE(cache.fetch("other", 64, dir.file("a")));
  ASSERT_TRUE(cache.fetch("k", 64, dir.file("b")));
  EXPECT_EQ(sdpa_test::read_file(dir.file("b")), std::string(64, 'x'));
}

TEST(OracleCache, PastItsBoundTheLeastRecentlyUsedGoFirst) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("f"), std::string(100, 'x'));
  const OracleCache cache(dir.file("cache"), 250); // room for two files of 100 bytes
  const auto later = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
  cache.store("a", dir.file("f"));
  later();
  cache.store("b", dir.file("f"));
  later();
  ASSERT_TRUE(cache.fetch("a", 100, dir.file("used"))); // a is now the most recently used
  later();
  cache.store("c", dir.file("f"));
  EXPECT_TRUE(fs::exists(dir.file("cache/a.f64")));
  EXPECT_FALSE(fs::exists(dir.file("cache/b.f64")));
  EXPECT_TRUE(fs::exists(dir.file("cache/c.f64")));
}

TEST(OracleCache, DefaultDirectoryFollowsXdgThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = xdg ? xdg : "";
  ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(default_oracle_cache_dir(), "/x/cache/sdpa-doctor/oracle");
  ::unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME"); home && *home == '/') {
    EXPECT_EQ(default_oracle_cache_dir(), std::string(home) + "/.cache/sdpa-doctor/oracle");
  }
  if (xdg) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
}

} // namespace

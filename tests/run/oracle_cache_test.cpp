// The oracle cache's key and bound, on real files.
#include "run/oracle_cache.hpp"
#include "run/run.hpp"

#include "support/lock_holder.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <atomic>
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

// A masked_rows case's key also holds the semantics of the oracle the doctor computes (zero);
// the keys of every other case stay what they were before there was one, so caches keep hitting.
TEST(OracleCache, KeysOfCasesWithoutMaskedRowsStayAsTheyWere) {
  const Case plain = spec("dtype=fp32,h=1,l=8,d=16,mask=bool");
  EXPECT_EQ(oracle_cache_key(plain, make_inputs(plain)),
            "fp32-b1-h1-q8-k8-d16-mask_bool-df1b4a39f3899147");
  Case rows = plain;
  rows.masked_rows = true;
  const std::string key = oracle_cache_key(rows, make_inputs(rows));
  EXPECT_EQ(key.rfind(rows.id() + "-", 0), 0u) << key;
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

// Another run that holds the cache's lock past the deadline: this one says who, stores nothing
// and from then on goes without the cache (its own oracles), never waiting again per file.
TEST(OracleCache, ALockHeldPastTheDeadlineTurnsTheCacheOffForTheRun) {
  sdpa_test::TempDir dir;
  fs::create_directories(dir.file("cache"));
  sdpa_test::write_file(dir.file("one"), std::string(64, 'x'));
  const sdpa_test::LockHolder other_run(dir.file("cache/.lock"), "other-run");
  ASSERT_TRUE(other_run.holding());
  std::atomic<bool> given_up{false};
  OracleCacheLocking locking;
  locking.wait.deadline = std::chrono::milliseconds(300);
  std::vector<std::string> said;
  locking.wait.on_wait = [&said](const std::string& line) { said.push_back(line); };
  locking.given_up = &given_up;
  const OracleCache cache(dir.file("cache"), 1 << 20, fs::file_time_type::clock::now(), locking);
  ASSERT_TRUE(cache.enabled());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(cache.store("k", dir.file("one")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(given_up.load());
  EXPECT_FALSE(cache.enabled());
  EXPECT_FALSE(fs::exists(dir.file("cache/k.f64")));
  ASSERT_FALSE(said.empty());
  EXPECT_NE(said[0].find("pid " + std::to_string(other_run.pid()) + " (other-run)"),
            std::string::npos)
      << said[0];
  const OracleCache next_case(dir.file("cache"), 1 << 20, fs::file_time_type::clock::now(), locking);
  EXPECT_FALSE(next_case.enabled());
}

void later() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

// A file of its own for each store: the cache hard-links, and links share one modification time.
std::string fresh_file(const sdpa_test::TempDir& dir) {
  static int n = 0;
  const std::string path = dir.file("f" + std::to_string(n++));
  sdpa_test::write_file(path, std::string(100, 'x'));
  return path;
}

TEST(OracleCache, PastItsBoundTheLeastRecentlyUsedOfEarlierRunsGoFirst) {
  sdpa_test::TempDir dir;
  {
    const OracleCache first_run(dir.file("cache"), 250); // room for two files of 100 bytes
    EXPECT_TRUE(first_run.store("a", fresh_file(dir)));
    later();
    EXPECT_TRUE(first_run.store("b", fresh_file(dir)));
    later();
    ASSERT_TRUE(first_run.fetch("a", 100, dir.file("used"))); // a is now the most recently used
  }
  later();
  const OracleCache next_run(dir.file("cache"), 250);
  EXPECT_TRUE(next_run.store("c", fresh_file(dir)));
  EXPECT_TRUE(fs::exists(dir.file("cache/a.f64")));
  EXPECT_FALSE(fs::exists(dir.file("cache/b.f64")));
  EXPECT_TRUE(fs::exists(dir.file("cache/c.f64")));
}

TEST(OracleCache, AFullCacheKeepsWhatThisRunUsesInsteadOfThrashing) {
  // Three cases walked in the same order twice, with room for two: plain LRU evicts on every
  // store, the next run misses every time. Here the second run finds the two the first one kept.
  sdpa_test::TempDir dir;
  const auto walk = [&] {
    const OracleCache cache(dir.file("cache"), 250);
    int hits = 0;
    for (const char* key : {"a", "b", "c"}) {
      if (cache.fetch(key, 100, dir.file("out"))) ++hits;
      else cache.store(key, fresh_file(dir));
      later();
    }
    return hits;
  };
  EXPECT_EQ(walk(), 0);
  EXPECT_FALSE(fs::exists(dir.file("cache/c.f64"))); // no room: not kept, nothing evicted
  later();
  EXPECT_EQ(walk(), 2);
  EXPECT_EQ(walk(), 2);
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

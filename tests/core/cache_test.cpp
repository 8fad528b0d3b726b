// The one cache policy: where the cache folder is, how a folder is locked, what
// evict_least_recently_used() evicts.
#include "core/cache.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <sys/file.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace sdpa_doctor;

namespace {

// Sets the environment variables for one test and puts the old values back.
class CacheEnv : public ::testing::Test {
protected:
  void SetUp() override {
    for (const char* name : k_names)
      if (const char* v = std::getenv(name)) m_saved.emplace_back(name, v);
    for (const char* name : k_names) ::unsetenv(name);
  }
  void TearDown() override {
    for (const char* name : k_names) ::unsetenv(name);
    for (const auto& [name, value] : m_saved) ::setenv(name.c_str(), value.c_str(), 1);
  }

private:
  static constexpr const char* k_names[] = {"SDPA_DOCTOR_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::pair<std::string, std::string>> m_saved;
};

void write_bytes(const fs::path& file, size_t bytes, std::chrono::seconds age) {
  sdpa_test::write_file(file.string(), std::string(bytes, 'x'));
  fs::last_write_time(file, fs::file_time_type::clock::now() - age);
}

} // namespace

TEST_F(CacheEnv, TheRootIsNamedThenXdgThenHome) {
  EXPECT_EQ(cache::root(), "");
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(cache::root(), "/home/someone/.cache/sdpa-doctor");
  EXPECT_EQ(cache::folder("oracle"), "/home/someone/.cache/sdpa-doctor/oracle");
  ::setenv("XDG_CACHE_HOME", "relative/not/used", 1);
  EXPECT_EQ(cache::root(), "/home/someone/.cache/sdpa-doctor");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(cache::folder("kernels"), "/xdg/sdpa-doctor/kernels");
  ::setenv("SDPA_DOCTOR_CACHE_DIR", "/scratch/doctor", 1);
  EXPECT_EQ(cache::folder("kernels"), "/scratch/doctor/kernels");
  ::setenv("SDPA_DOCTOR_CACHE_DIR", "off", 1);
  EXPECT_EQ(cache::root(), "");
  EXPECT_EQ(cache::folder("oracle"), "");
}

TEST(CacheTrim, EvictsWhatEarlierRunsUsedLeastRecentlyAndNeverThisRunsFiles) {
  sdpa_test::TempDir dir;
  const fs::path d = dir.path();
  write_bytes(d / "oldest.f64", 100, std::chrono::seconds(300));
  write_bytes(d / "older.f64", 100, std::chrono::seconds(200));
  write_bytes(d / "other-kind.bin", 1000, std::chrono::seconds(400)); // not this suffix
  const auto run_started = fs::file_time_type::clock::now() - std::chrono::seconds(100);
  write_bytes(d / "this-run.f64", 100, std::chrono::seconds(0));

  EXPECT_TRUE(cache::evict_least_recently_used(dir.path(), ".f64", 250, run_started));
  EXPECT_FALSE(fs::exists(d / "oldest.f64"));
  EXPECT_TRUE(fs::exists(d / "older.f64"));
  EXPECT_TRUE(fs::exists(d / "this-run.f64"));
  EXPECT_TRUE(fs::exists(d / "other-kind.bin"));

  // Using a file makes it this run's: it stays, and the bound cannot be met.
  cache::mark_used(d / "older.f64");
  EXPECT_FALSE(cache::evict_least_recently_used(dir.path(), ".f64", 150, run_started));
  EXPECT_TRUE(fs::exists(d / "older.f64"));
  EXPECT_TRUE(fs::exists(d / "this-run.f64"));
  // A folder that does not exist is within any bound.
  EXPECT_TRUE(cache::evict_least_recently_used(dir.file("missing"), ".f64", 0, run_started));
}

TEST(CacheLock, HoldsTheFolderAgainstAnotherOpenUntilReleased) {
  sdpa_test::TempDir dir;
  const std::string folder = dir.file("kernels");
  const auto try_lock = [&] {
    const int fd = ::open((fs::path(folder) / ".lock").c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return false;
    const bool got = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    ::close(fd);
    return got;
  };
  {
    const cache::FolderLock lock(folder);
    ASSERT_TRUE(lock.held());
    EXPECT_FALSE(try_lock()); // a second open file description, as another process has
  }
  EXPECT_TRUE(try_lock());
}

TEST(CacheLock, AFolderThatCannotBeMadeIsNotLockedAndNothingFails) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("a-file"), "x");
  const cache::FolderLock lock(dir.file("a-file/kernels"));
  EXPECT_FALSE(lock.held());
}

// The one cache policy: where the cache folder is, how a folder is locked, what
// evict_least_recently_used() evicts.
#include "core/cache.hpp"
#include "support/lock_holder.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <thread>

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

// ---- a lock another live process holds ------------------------------------------------------

TEST(CacheLock, AWaitSaysWhoHoldsTheLockAndGivesUpAtTheDeadline) {
  sdpa_test::TempDir dir;
  const sdpa_test::LockHolder holder(dir.file(".lock"), "lock-holder");
  ASSERT_TRUE(holder.holding());
  cache::LockWait wait;
  wait.deadline = std::chrono::milliseconds(400);
  std::vector<std::string> said;
  wait.on_wait = [&said](const std::string& line) { said.push_back(line); };
  const auto start = std::chrono::steady_clock::now();
  const cache::FolderLock lock(dir.path(), wait);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(lock.state(), cache::FolderLock::State::timed_out);
  EXPECT_GE(waited, std::chrono::milliseconds(400));
  EXPECT_LT(waited, std::chrono::seconds(5));
  ASSERT_EQ(said.size(), 1u); // at once, then every 15 s
  EXPECT_NE(said[0].find("waiting for pid " + std::to_string(holder.pid()) + " (lock-holder)"),
            std::string::npos)
      << said[0];
  EXPECT_NE(said[0].find("going on without the cache after 0 s"), std::string::npos) << said[0];
}

TEST(CacheLock, AWaitSaysWhoHoldsTheLockAgainAtEachInterval) {
  sdpa_test::TempDir dir;
  const sdpa_test::LockHolder holder(dir.file(".lock"), "lock-holder");
  ASSERT_TRUE(holder.holding());
  cache::LockWait wait;
  wait.deadline = std::chrono::milliseconds(1'000);
  wait.every = std::chrono::milliseconds(300); // 15 s in a check
  int said = 0;
  wait.on_wait = [&said](const std::string&) { ++said; };
  const cache::FolderLock lock(dir.path(), wait);
  EXPECT_EQ(lock.state(), cache::FolderLock::State::timed_out);
  EXPECT_GE(said, 3);
  EXPECT_LE(said, 5);
}

TEST(CacheLock, AnInterruptEndsAWaitWithoutDeadlineAtOnce) {
  sdpa_test::TempDir dir;
  const sdpa_test::LockHolder holder(dir.file(".lock"), "lock-holder");
  ASSERT_TRUE(holder.holding());
  std::atomic<bool> interrupted{false};
  cache::LockWait wait;
  wait.interrupted = &interrupted;
  std::thread signal_soon([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    interrupted.store(true);
  });
  const cache::FolderLock lock(dir.path(), wait);
  signal_soon.join();
  EXPECT_EQ(lock.state(), cache::FolderLock::State::interrupted);
  EXPECT_FALSE(lock.held());
}

TEST(CacheLock, AnSdpaDoctorHolderIsNamedByWhatItDoesUntilItLetsGo) {
  sdpa_test::TempDir dir;
  const fs::path lock_file = dir.file(".lock");
  {
    cache::LockWait wait;
    wait.doing = "building the LibTorch plugin for torch 2.13.0";
    const cache::FolderLock lock(dir.path(), wait);
    ASSERT_TRUE(lock.held());
    EXPECT_EQ(cache::lock_holder(lock_file),
              "sdpa-doctor pid " + std::to_string(::getpid()) +
                  " building the LibTorch plugin for torch 2.13.0");
  }
  EXPECT_EQ(sdpa_test::read_file(lock_file.string()), ""); // no stale word for the next waiter
  EXPECT_EQ(cache::lock_holder(lock_file), "another process");
}

TEST(CacheLock, AStaleWordOfAHolderThatIsGoneNamesTheRealHolder) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file(".lock"), "sdpa-doctor pid 999999999 building something\n");
  const sdpa_test::LockHolder holder(dir.file(".lock"), "other-tool");
  ASSERT_TRUE(holder.holding());
  EXPECT_EQ(cache::lock_holder(dir.file(".lock")),
            "pid " + std::to_string(holder.pid()) + " (other-tool)");
}

TEST(CacheLock, ALockFileThatIsAFifoIsNotWaitedOn) {
  sdpa_test::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file(".lock").c_str(), 0644), 0);
  const cache::FolderLock lock(dir.path());
  EXPECT_EQ(lock.state(), cache::FolderLock::State::unavailable);
}

// ---- eviction leaves what a live check uses --------------------------------------------------

TEST(CacheTrim, LeavesAFileAnotherLiveProcessUses) {
  sdpa_test::TempDir dir;
  const fs::path d = dir.path();
  write_bytes(d / "in-use.so", 100, std::chrono::seconds(300));
  write_bytes(d / "in-use.so.sum", 10, std::chrono::seconds(300));
  write_bytes(d / "unused.so", 100, std::chrono::seconds(200));
  write_bytes(d / "unused.so.sum", 10, std::chrono::seconds(200));
  const auto now = fs::file_time_type::clock::now();
  {
    const sdpa_test::LockHolder check((d / "in-use.so").string(), "check", /*shared=*/true);
    ASSERT_TRUE(check.holding());
    EXPECT_FALSE(cache::evict_least_recently_used(dir.path(), ".so", 0, now));
    EXPECT_TRUE(fs::exists(d / "in-use.so"));
    EXPECT_TRUE(fs::exists(d / "in-use.so.sum"));
    EXPECT_FALSE(fs::exists(d / "unused.so"));
    EXPECT_FALSE(fs::exists(d / "unused.so.sum")); // its recorded hash goes with it
  }
  EXPECT_TRUE(cache::evict_least_recently_used(dir.path(), ".so", 0, now));
  EXPECT_FALSE(fs::exists(d / "in-use.so"));
}

TEST(CacheTrim, AFileInUseInThisProcessIsAlsoKept) {
  sdpa_test::TempDir dir;
  const fs::path d = dir.path();
  write_bytes(d / "plugin.so", 100, std::chrono::seconds(300));
  cache::FileInUse in_use(d / "plugin.so");
  ASSERT_TRUE(in_use.held());
  const cache::FileInUse moved = std::move(in_use); // held by whoever keeps it
  EXPECT_FALSE(in_use.held());
  EXPECT_FALSE(cache::evict_least_recently_used(dir.path(), ".so", 0,
                                                fs::file_time_type::clock::now()));
  EXPECT_TRUE(fs::exists(d / "plugin.so"));
}

TEST(CacheHash, ContentHashSeesEveryByteAndTheLength) {
  std::string bytes(1000, 'a');
  const uint64_t base = cache::content_hash(bytes);
  EXPECT_EQ(base, cache::content_hash(bytes));
  for (size_t at : {size_t{0}, size_t{7}, size_t{8}, size_t{999}}) {
    std::string changed = bytes;
    changed[at] = 'b';
    EXPECT_NE(cache::content_hash(changed), base) << at;
  }
  EXPECT_NE(cache::content_hash(bytes.substr(0, 999)), base);
  EXPECT_NE(cache::content_hash(""), cache::content_hash(std::string(1, '\0')));
}

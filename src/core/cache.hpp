// core/cache: the one policy for what sdpa-doctor keeps across runs (float64 oracles, compiled GPU
// kernels, workers built against a torch). One root under the user's cache directory, a folder per
// kind, a lock per folder, and a size bound kept by evicting what earlier runs used least
// recently. A cache never fails a run: a folder that cannot be made or written is simply not used.
// A check that waits for a folder's lock says who holds it (lock_holder) at once and every 15 s,
// stops waiting on an interrupt, and past --cache-lock-timeout goes on without that cache.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace sdpa_doctor::cache {

// $SDPA_DOCTOR_CACHE_DIR, else $XDG_CACHE_HOME/sdpa-doctor, else ~/.cache/sdpa-doctor; empty when
// none of them is an absolute path, or when $SDPA_DOCTOR_CACHE_DIR is "off".
std::string root();

// `kind`'s folder under root() ("oracle", "kernels", "workers"); empty when there is no root.
std::string folder(std::string_view kind);

// How a FolderLock waits while another process holds it.
struct LockWait {
  // What this process does while it holds the lock, written into the lock file for whoever waits
  // ("building the LibTorch plugin for torch 2.13.0"); empty: nothing is written.
  std::string doing;
  std::chrono::milliseconds deadline{0}; // 0: as long as it takes
  const std::atomic<bool>* interrupted = nullptr; // once set, the wait ends at once
  // Told who holds the lock ("waiting for sdpa-doctor pid 12 building ..."): at once, then every
  // `every` while the wait goes on. None: silent.
  std::function<void(const std::string&)> on_wait;
  std::chrono::milliseconds every{15'000};
};

// An exclusive flock on `dir`/.lock, held while the object lives: writers of one folder take turns
// across processes (two checks at once, or a check and a build). A folder that cannot be locked
// (read-only, full) gives an unheld lock: the caller goes on without it.
class FolderLock {
public:
  enum class State { held, unavailable, timed_out, interrupted };
  explicit FolderLock(const std::string& dir, const LockWait& wait = {});
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  bool held() const { return m_state == State::held; }
  State state() const { return m_state; }

private:
  State wait_for_lock(const std::filesystem::path& lock_file, const LockWait& wait);
  int m_fd = -1;
  State m_state = State::unavailable;
  bool m_wrote_doing = false;
};

// Who holds the flock on `lock_file`: what an sdpa-doctor holder wrote there ("sdpa-doctor pid 12
// building ..."), else "pid 12 (flock)" from /proc/locks, else "another process".
std::string lock_holder(const std::filesystem::path& lock_file);

// A shared flock on a file of the cache, held while the object lives: the file is in use by this
// process, and evict_least_recently_used() leaves it alone. Unheld when the file cannot be opened.
class FileInUse {
public:
  FileInUse() = default;
  explicit FileInUse(const std::filesystem::path& file);
  bool held() const { return m_fd != nullptr; }

private:
  struct Close {
    void operator()(const int* fd) const;
  };
  std::unique_ptr<const int, Close> m_fd; // closing the file releases its flock
};

// A cache entry's key: FNV-1a over its parts, each closed by a separator, so that ("ab", "c") and
// ("a", "bc") differ.
struct KeyHash {
  uint64_t value = 1469598103934665603ULL;
  void add(std::string_view part) {
    for (unsigned char c : part) value = (value ^ c) * 1099511628211ULL;
    value = (value ^ 0xffu) * 1099511628211ULL;
  }
};

// A file's content hash: FNV-1a over its 8-byte words, then its last bytes; fast enough to check
// a cached plugin of a few MB before every use.
uint64_t content_hash(std::string_view bytes);

// A file of the cache was used now: it is the last that evict_least_recently_used() evicts.
void mark_used(const std::filesystem::path& file);

// Keeps the files of `dir` whose names end in `suffix` at most `max_bytes` in all: removes the
// least recently used of those last used before `keep_since` (this run's files stay) and not in
// use (FileInUse) by any process, oldest first, each with its `.sum` file if it has one. True
// when the folder is then within the bound.
bool evict_least_recently_used(const std::string& dir, std::string_view suffix,
                               int64_t max_bytes, std::filesystem::file_time_type keep_since);

} // namespace sdpa_doctor::cache

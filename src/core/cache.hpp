// core/cache: the one policy for what sdpa-doctor keeps across runs (float64 oracles, compiled GPU
// kernels, workers built against a torch). One root under the user's cache directory, a folder per
// kind, a lock per folder, and a size bound kept by evicting what earlier runs used least
// recently. A cache never fails a run: a folder that cannot be made or written is simply not used.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace sdpa_doctor::cache {

// $SDPA_DOCTOR_CACHE_DIR, else $XDG_CACHE_HOME/sdpa-doctor, else ~/.cache/sdpa-doctor; empty when
// none of them is an absolute path, or when $SDPA_DOCTOR_CACHE_DIR is "off".
std::string root();

// `kind`'s folder under root() ("oracle", "kernels", "workers"); empty when there is no root.
std::string folder(std::string_view kind);

// An exclusive flock on `dir`/.lock, held while the object lives: writers of one folder take turns
// across processes (two checks at once, or a check and a build). A folder that cannot be locked
// (read-only, full) gives an unheld lock: the caller goes on without it.
class FolderLock {
public:
  explicit FolderLock(const std::string& dir);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  bool held() const { return m_fd >= 0; }

private:
  int m_fd = -1;
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

// A file of the cache was used now: it is the last that evict_least_recently_used() evicts.
void mark_used(const std::filesystem::path& file);

// Keeps the files of `dir` whose names end in `suffix` at most `max_bytes` in all: removes the
// least recently used of those last used before `keep_since` (this run's files stay), oldest
// first. True when the folder is then within the bound.
bool evict_least_recently_used(const std::string& dir, std::string_view suffix,
                               int64_t max_bytes, std::filesystem::file_time_type keep_since);

} // namespace sdpa_doctor::cache

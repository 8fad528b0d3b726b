#include "core/cache.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;

namespace sdpa_doctor::cache {

namespace {

bool absolute(const char* path) { return path && *path == '/'; }

bool ends_with(const std::string& text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

} // namespace

std::string root() {
  if (const char* dir = std::getenv("SDPA_DOCTOR_CACHE_DIR"); dir && *dir)
    return std::string_view(dir) == "off" || !absolute(dir) ? std::string{} : std::string(dir);
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); absolute(xdg))
    return (fs::path(xdg) / "sdpa-doctor").string();
  if (const char* home = std::getenv("HOME"); absolute(home))
    return (fs::path(home) / ".cache" / "sdpa-doctor").string();
  return {};
}

std::string folder(std::string_view kind) {
  const std::string base = root();
  return base.empty() ? std::string{} : (fs::path(base) / kind).string();
}

FolderLock::FolderLock(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return;
  m_fd = ::open((fs::path(dir) / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (m_fd < 0) return;
  int rc;
  do rc = ::flock(m_fd, LOCK_EX);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    ::close(m_fd);
    m_fd = -1;
  }
}

FolderLock::~FolderLock() {
  if (m_fd >= 0) ::close(m_fd); // closing releases the flock
}

void mark_used(const fs::path& file) {
  std::error_code ec;
  fs::last_write_time(file, fs::file_time_type::clock::now(), ec);
}

bool evict_least_recently_used(const std::string& dir, std::string_view suffix,
                               int64_t max_bytes, fs::file_time_type keep_since) {
  struct Entry {
    fs::file_time_type used;
    int64_t bytes;
    fs::path path;
  };
  std::vector<Entry> evictable;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!ends_with(e.path().filename().string(), suffix)) continue;
    std::error_code ignored;
    if (!e.is_regular_file(ignored)) continue;
    const auto bytes = int64_t(e.file_size(ignored));
    const auto used = e.last_write_time(ignored);
    if (ignored) continue;
    total += bytes;
    if (used < keep_since) evictable.push_back({used, bytes, e.path()});
  }
  std::sort(evictable.begin(), evictable.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& e : evictable) {
    if (total <= max_bytes) break;
    std::error_code ignored;
    if (fs::remove(e.path, ignored)) total -= e.bytes;
  }
  return total <= max_bytes;
}

} // namespace sdpa_doctor::cache

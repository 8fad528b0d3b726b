#include "core/cache.hpp"

#include "core/io.hpp"
#include "core/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <thread>
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

namespace {

// The pid /proc/locks names as holding a flock on `file`; 0 when none is found.
int flock_holder_pid(const fs::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return 0;
  std::ifstream locks("/proc/locks");
  int same_inode = 0; // a holder of the inode on another device number (overlay file systems)
  for (std::string line; std::getline(locks, line);) {
    std::istringstream words(line);
    std::string index, kind, mode, access, dev_ino;
    int pid = 0;
    if (!(words >> index >> kind >> mode >> access >> pid >> dev_ino) || kind != "FLOCK") continue;
    unsigned major_no = 0, minor_no = 0;
    unsigned long long inode = 0;
    if (std::sscanf(dev_ino.c_str(), "%x:%x:%llu", &major_no, &minor_no, &inode) != 3 ||
        inode != st.st_ino)
      continue;
    if (major_no == major(st.st_dev) && minor_no == minor(st.st_dev)) return pid;
    same_inode = pid;
  }
  return same_inode;
}

std::string process_name(int pid) {
  std::ifstream comm(fmt::format("/proc/{}/comm", pid));
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "?" : escape_to_one_line(name);
}

bool alive(int pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

std::string waiting_line(const fs::path& lock_file, std::chrono::milliseconds waited,
                         std::chrono::milliseconds deadline) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(waited).count();
  std::string line = fmt::format("waiting for {} (it holds {}; {} s so far", lock_holder(lock_file),
                                 escape_to_one_line(lock_file.string()), seconds);
  if (deadline.count() > 0)
    line += fmt::format(", going on without the cache after {} s",
                        std::chrono::duration_cast<std::chrono::seconds>(deadline).count());
  return line + ")";
}

// Says in the lock file who holds it and why, for those who wait.
bool write_doing(int fd, const std::string& doing) {
  const std::string text = fmt::format("sdpa-doctor pid {} {}\n", ::getpid(), doing);
  return ::ftruncate(fd, 0) == 0 &&
         ::pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size());
}

} // namespace

std::string lock_holder(const fs::path& lock_file) {
  const int pid = flock_holder_pid(lock_file);
  const auto text = read_regular_file(lock_file.string(), "the lock file", 4096);
  const std::string said = text ? text->substr(0, text->find('\n')) : std::string();
  int said_pid = 0;
  // What an sdpa-doctor holder wrote, if that process still holds it (the text may be stale).
  if (std::sscanf(said.c_str(), "sdpa-doctor pid %d", &said_pid) == 1 && said_pid > 0 &&
      (pid > 0 ? said_pid == pid : alive(said_pid)))
    return escape_to_one_line(said);
  if (pid > 0) return fmt::format("pid {} ({})", pid, process_name(pid));
  return "another process";
}

FolderLock::FolderLock(const std::string& dir, const LockWait& wait) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return;
  const fs::path lock_file = fs::path(dir) / ".lock";
  // Non-blocking: a FIFO in its place must not hang the open.
  m_fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
  struct stat st {};
  if (m_fd >= 0 && (::fstat(m_fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    ::close(m_fd);
    m_fd = -1;
  }
  if (m_fd < 0) return;
  m_state = wait_for_lock(lock_file, wait);
  if (m_state != State::held) {
    ::close(m_fd);
    m_fd = -1;
    return;
  }
  if (!wait.doing.empty()) m_wrote_doing = write_doing(m_fd, wait.doing);
}

FolderLock::State FolderLock::wait_for_lock(const fs::path& lock_file, const LockWait& wait) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto next_word = start;
  // Polled, not a blocking flock: an interrupt or the deadline must end the wait.
  while (::flock(m_fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return State::unavailable;
    if (wait.interrupted && wait.interrupted->load()) return State::interrupted;
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start);
    if (wait.deadline.count() > 0 && waited >= wait.deadline) return State::timed_out;
    if (wait.on_wait && clock::now() >= next_word) {
      wait.on_wait(waiting_line(lock_file, waited, wait.deadline));
      next_word = clock::now() + wait.every;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return State::held;
}

FolderLock::~FolderLock() {
  if (m_fd < 0) return;
  if (m_wrote_doing) (void)::ftruncate(m_fd, 0); // no stale word for the next waiter
  ::close(m_fd); // closing releases the flock
}

FileInUse::FileInUse(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return;
  if (::flock(fd, LOCK_SH | LOCK_NB) == 0) m_fd.reset(new int(fd));
  else ::close(fd);
}

void FileInUse::Close::operator()(const int* fd) const {
  ::close(*fd);
  delete fd;
}

uint64_t content_hash(std::string_view bytes) {
  KeyHash hash;
  const size_t words = bytes.size() / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i * 8, 8);
    hash.value = (hash.value ^ word) * 1099511628211ULL;
  }
  hash.add(bytes.substr(words * 8));
  return hash.value;
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
    // A file another process holds a FileInUse on stays: it is being used now.
    const int fd = ::open(e.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    std::error_code ignored;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && fs::remove(e.path, ignored)) {
      total -= e.bytes;
      fs::remove(e.path.string() + ".sum", ignored);
    }
    ::close(fd);
  }
  return total <= max_bytes;
}

} // namespace sdpa_doctor::cache

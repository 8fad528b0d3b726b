#include "core/io.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace sdpa_doctor {

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {
      errno = EIO; // a device that takes nothing would otherwise spin here
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool write_own_file(int fd, std::string_view data, const std::string& path) {
  if (const char* glob = std::getenv("SDPA_DOCTOR_TEST_WRITE_FAULT"); glob && *glob) {
    const std::string name = std::filesystem::path(path).filename().string();
    if (::fnmatch(glob, name.c_str(), 0) == 0) {
      errno = ENOSPC;
      return false;
    }
  }
  return write_all(fd, data);
}

namespace {

// "/mnt/my\040disk" in /proc/self/mountinfo is "/mnt/my disk" (octal escapes).
std::string unescape_mount_path(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool octal = text[i] == '\\' && i + 3 < text.size() &&
                       std::all_of(text.begin() + long(i) + 1, text.begin() + long(i) + 4,
                                   [](char c) { return c >= '0' && c <= '7'; });
    if (octal) {
      out += char(std::stoi(text.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The file system that holds `dir`: "tmpfs at /mnt/x", from the longest mount point above it.
std::string mount_of(const std::filesystem::path& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::string best_point, best_type;
  for (std::string line; std::getline(in, line);) {
    // id parent major:minor root MOUNT-POINT options... - TYPE source super-options
    std::istringstream fields(line);
    std::string id, parent, device, root, point, field;
    fields >> id >> parent >> device >> root >> point;
    while (fields >> field && field != "-") {
    }
    std::string type;
    fields >> type;
    point = unescape_mount_path(point);
    const std::string d = dir.string();
    const bool above = d == point || point == "/" ||
                       (d.rfind(point, 0) == 0 && d.size() > point.size() &&
                        d[point.size()] == '/');
    if (above && point.size() >= best_point.size()) {
      best_point = point;
      best_type = type;
    }
  }
  if (best_point.empty()) return {};
  return fmt::format("{} at {}", best_type, best_point);
}

} // namespace

std::string describe_write_failure(const std::string& path, int error_number) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (fs::path canonical = fs::weakly_canonical(dir, ec); !ec) dir = canonical;
  std::string where = mount_of(dir);
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) == 0) {
    const auto unit = int64_t(st.f_frsize ? st.f_frsize : st.f_bsize);
    where += fmt::format("{}{} free of {}", where.empty() ? "" : ", ",
                         format_bytes(int64_t(st.f_bavail) * unit),
                         format_bytes(int64_t(st.f_blocks) * unit));
  }
  return fmt::format("{}: {}{}", path, std::strerror(error_number),
                     where.empty() ? std::string{} : " (" + where + ")");
}

Expected<int64_t> write_file_atomically(const std::string& path, std::string_view data,
                                        bool durable) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return make_error(describe_write_failure(path, errno));
  // mkstemp creates 0600; what the doctor writes is an ordinary file for whoever reads the
  // results (reading the umask would mean changing it, which races with other threads).
  ::fchmod(fd, 0644);
  bool ok = write_own_file(fd, data, path);
  int saved = errno;
  if (ok && durable && ::fsync(fd) != 0) {
    ok = false;
    saved = errno;
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    saved = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return make_error(describe_write_failure(path, saved));
  }
  if (durable) {
    // The rename is durable only once the directory entry is on disk too.
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
  return int64_t(data.size());
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

// Reads `fd` to its end into `text`, refusing more than `max_bytes`: a stream has no size to
// check first, and a file may grow while it is read; neither may take more memory than that.
Expected<std::string> read_to_end(int fd, std::string_view what, int64_t max_bytes,
                                  int64_t size_hint) {
  std::string text;
  if (size_hint > 0) text.reserve(static_cast<std::size_t>(size_hint));
  char chunk[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(fmt::format("cannot read {}: {}", what, std::strerror(errno)));
    if (n == 0) break;
    if (static_cast<int64_t>(text.size()) + n > max_bytes)
      return make_error(fmt::format("{} is larger than {} MiB, the limit", what, max_bytes >> 20));
    text.append(chunk, static_cast<std::size_t>(n));
  }
  return text;
}

} // namespace

Expected<std::string> read_text_file(const std::string& path, std::string_view what,
                                     int64_t max_bytes) {
  const bool from_stdin = path == "-";
  const int fd = from_stdin ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return make_error(fmt::format("cannot read {}: {}", what, std::strerror(errno)));
  const auto fail = [&](std::string message) {
    if (!from_stdin) ::close(fd);
    return make_error(std::move(message));
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return fail(fmt::format("cannot read {}: {}", what, std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) return fail(fmt::format("{} is a directory", what));
  if (S_ISREG(st.st_mode) && st.st_size > max_bytes)
    return fail(fmt::format("{} is {} bytes; the limit is {} MiB", what, st.st_size,
                            max_bytes >> 20));
  auto text = read_to_end(fd, what, max_bytes, S_ISREG(st.st_mode) ? st.st_size : 0);
  if (!from_stdin) ::close(fd);
  return text;
}

Expected<int> open_regular_file(const std::string& path, std::string_view what,
                                int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return make_error(fmt::format("cannot read {}: {}", what, std::strerror(errno)));
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0)
    problem = fmt::format("cannot read {}: {}", what, std::strerror(errno));
  else if (S_ISDIR(st.st_mode))
    problem = fmt::format("{} is a directory", what);
  else if (!S_ISREG(st.st_mode))
    problem = fmt::format("{} is not a regular file ({})", what,
                          S_ISFIFO(st.st_mode)   ? "a FIFO"
                          : S_ISCHR(st.st_mode)  ? "a character device"
                          : S_ISBLK(st.st_mode)  ? "a block device"
                          : S_ISSOCK(st.st_mode) ? "a socket"
                                                 : "not a file");
  else if (st.st_size > max_bytes)
    problem = fmt::format("{} is {} bytes; the limit is {} MiB", what, st.st_size,
                          max_bytes >> 20);
  if (!problem.empty()) {
    ::close(fd);
    return make_error(std::move(problem));
  }
  return fd;
}

Expected<std::string> read_regular_file(const std::string& path, std::string_view what,
                                        int64_t max_bytes) {
  const auto fd = open_regular_file(path, what, max_bytes);
  if (!fd) return fd.error();
  struct stat st {};
  const int64_t size = ::fstat(*fd, &st) == 0 ? st.st_size : 0;
  auto text = read_to_end(*fd, what, max_bytes, size);
  ::close(*fd);
  return text;
}

std::string format_bytes(int64_t bytes) {
  static constexpr const char* k_units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return std::fabs(v) < 10 ? fmt::format("{:.1f} {}", v, k_units[u])
                           : fmt::format("{:.0f} {}", v, k_units[u]);
}

namespace {
int g_stdout_error = 0;
} // namespace

void print_to_stdout(std::string_view text) {
  if (text.empty() || g_stdout_error != 0) return; // nothing more reaches a closed stdout
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size())
    g_stdout_error = errno != 0 ? errno : EIO;
}

int stdout_error() { return g_stdout_error; }

} // namespace sdpa_doctor

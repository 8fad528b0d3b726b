#include "core/io.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/stat.h>
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
  const int64_t limit_mib = max_bytes >> 20;
  if (S_ISREG(st.st_mode) && st.st_size > max_bytes)
    return fail(fmt::format("{} is {} bytes; the limit is {} MiB", what, st.st_size, limit_mib));
  std::string text;
  if (S_ISREG(st.st_mode)) text.reserve(static_cast<std::size_t>(st.st_size));
  char chunk[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(fmt::format("cannot read {}: {}", what, std::strerror(errno)));
    if (n == 0) break;
    // A stream has no size to check first: it may hold more than the limit, never more memory.
    if (static_cast<int64_t>(text.size()) + n > max_bytes)
      return fail(fmt::format("{} is larger than {} MiB, the limit", what, limit_mib));
    text.append(chunk, static_cast<std::size_t>(n));
  }
  if (!from_stdin) ::close(fd);
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

} // namespace sdpa_doctor

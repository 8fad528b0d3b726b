#include "core/io.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <ctime>
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

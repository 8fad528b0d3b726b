#include "workers/oracle_file.hpp"
#include "core/io.hpp"
#include "kernels/kernels.hpp"

#include <fmt/format.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sdpa_doctor::workers {

std::vector<double> compute_oracle(const Case& c, const std::atomic<bool>* cancel) {
  return compute_oracle(c, make_inputs(c, cancel), cancel);
}

std::vector<double> compute_oracle(const Case& c, const HostInputs& inputs,
                                   const std::atomic<bool>* cancel) {
  if (cancel && cancel->load()) return {};
  return kernels::oracle_attention(c, inputs, cancel);
}

static_assert(std::endian::native == std::endian::little,
              "oracle files are little-endian float64; add byte swapping for this host");

Expected<int64_t> write_oracle_file(const std::string& path, const std::vector<double>& values) {
  auto written = write_file_atomically(
      path, std::string_view(reinterpret_cast<const char*>(values.data()),
                             values.size() * sizeof(double)));
  if (!written) return make_error("cannot write the oracle file " + written.error().message);
  return written;
}

Expected<std::vector<double>> read_oracle_file(const std::string& path, size_t expected_count) {
  // The oracle cache is a folder the user may name: a FIFO or a device there is refused unread.
  const auto opened = open_regular_file(path, fmt::format("oracle '{}'", path),
                                        static_cast<int64_t>(expected_count * sizeof(double)));
  if (!opened) return opened.error();
  const int fd = *opened;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || uint64_t(st.st_size) != expected_count * sizeof(double)) {
    ::close(fd);
    return make_error(fmt::format("oracle '{}' has {} bytes, expected {} ({} float64 values)",
                                  path, int64_t(st.st_size), expected_count * sizeof(double),
                                  expected_count));
  }
  std::vector<double> values(expected_count);
  char* dst = reinterpret_cast<char*>(values.data());
  size_t left = expected_count * sizeof(double);
  while (left > 0) {
    const ssize_t n = ::read(fd, dst, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return make_error(fmt::format("short read from oracle '{}'", path));
    }
    dst += n;
    left -= size_t(n);
  }
  ::close(fd);
  return values;
}

} // namespace sdpa_doctor::workers

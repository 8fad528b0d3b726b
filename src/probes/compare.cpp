#include "kernels/kernels.hpp"
#include "core/io.hpp"
#include "probes/probes.hpp"

#include <fmt/format.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace sdpa_doctor::probes {

Comparison compare_to_oracle(const float* out, const double* oracle, size_t n, Tolerance tol) {
  Comparison c;
  double max_abs = 0, err2 = 0, ref2 = 0;
  int64_t outside = 0, first_outside = -1;
  for (size_t i = 0; i < n; ++i) {
    const double o = double(out[i]);
    const double r = oracle[i];
    if (!std::isfinite(o)) {
      if (std::isnan(o)) ++c.metrics.nan_count;
      else ++c.metrics.inf_count;
      ++outside;
      if (first_outside < 0) first_outside = int64_t(i);
      continue;
    }
    if (!std::isfinite(r)) continue; // the oracle is finite by construction; nothing to judge
    const double e = std::fabs(o - r);
    max_abs = std::max(max_abs, e);
    err2 += e * e;
    ref2 += r * r;
    if (e > tol.atol + tol.rtol * std::fabs(r)) {
      ++outside;
      if (first_outside < 0) first_outside = int64_t(i);
    }
  }
  c.metrics.max_abs_err = max_abs;
  // An all-zero oracle makes the relative error meaningless; report the absolute norm then.
  c.metrics.rel_l2_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  c.metrics.frac_outside_tol = n == 0 ? 0.0 : double(outside) / double(n);
  const int64_t nonfinite = c.metrics.nan_count + c.metrics.inf_count;
  if (nonfinite > 0) {
    c.status = Status::nonfinite;
    c.reason = fmt::format("{} NaN and {} Inf of {} output elements (first at index {})",
                           c.metrics.nan_count, c.metrics.inf_count, n, first_outside);
  } else if (outside > 0) {
    c.status = Status::mismatch;
    c.reason = fmt::format("{} of {} elements outside atol={:g} + rtol={:g}*|ref| (first at "
                           "index {}: got {:.6g}, expected {:.6g}); max abs err {:.3g}, rel L2 "
                           "err {:.3g}",
                           outside, n, tol.atol, tol.rtol, first_outside,
                           double(out[first_outside]), oracle[first_outside], max_abs,
                           *c.metrics.rel_l2_err);
  }
  return c;
}

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
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(fmt::format("cannot open oracle '{}': {}", path, std::strerror(errno)));
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

} // namespace sdpa_doctor::probes

#include "devices/sources.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sdpa_doctor::devices {

namespace {

std::string_view trim_whitespace(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

} // namespace

Expected<FileText> read_capped(const std::filesystem::path& path, std::size_t cap) {
  // O_NONBLOCK: a FIFO planted in a captured tree must not hang the doctor.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return make_error(fmt::format("{}: {}", path.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool is_dir = S_ISDIR(st.st_mode);
    ::close(fd);
    return make_error(fmt::format("{}: {}", path.string(),
                                  is_dir ? "is a directory" : "not a regular file"));
  }
  FileText out;
  out.text.resize(cap + 1);
  std::size_t used = 0;
  while (used < out.text.size()) {
    const ssize_t n = ::read(fd, out.text.data() + used, out.text.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      return make_error(fmt::format("{}: {}", path.string(), std::strerror(saved)));
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.truncated = used > cap;
  out.text.resize(out.truncated ? cap : used);
  return out;
}

std::optional<int64_t> parse_sysfs_integer(std::string_view text) {
  text = trim_whitespace(text);
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc{} || ptr != text.data() + text.size()) return std::nullopt;
  // Some KFD values are u64 ids (unique_id); those above int64 are not quantities we use.
  if (value > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(value);
}

std::string first_line(std::string_view text) {
  return std::string(trim_whitespace(text.substr(0, text.find('\n'))));
}

KfdProperties parse_kfd_properties(std::string_view text) {
  KfdProperties props;
  int line_number = 0;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = trim_whitespace(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    ++line_number;
    if (line.empty()) continue;
    const auto space = line.find_first_of(" \t");
    if (space == std::string_view::npos) {
      props.problems.push_back(fmt::format("line {}: '{}' has no value", line_number,
                                           line.substr(0, 60)));
      continue;
    }
    std::string key(line.substr(0, space));
    std::string value(trim_whitespace(line.substr(space)));
    if (props.raw.count(key)) {
      props.problems.push_back(fmt::format("line {}: '{}' repeated", line_number, key));
      continue;
    }
    props.raw.emplace(std::move(key), std::move(value));
  }
  return props;
}

std::optional<int64_t> KfdProperties::integer(const std::string& key, std::string* problem) const {
  const auto it = raw.find(key);
  if (it == raw.end()) {
    if (problem) *problem = fmt::format("'{}' missing", key);
    return std::nullopt;
  }
  // Topology values are plain decimal; hex here means the file is not what KFD writes.
  auto value = it->second.find_first_not_of("0123456789") == std::string::npos
                   ? parse_sysfs_integer(it->second)
                   : std::nullopt;
  if (!value && problem)
    *problem = fmt::format("'{}' is not a number: '{}'", key, it->second.substr(0, 40));
  return value;
}

} // namespace sdpa_doctor::devices

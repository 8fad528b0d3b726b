#include "run/oracle_cache.hpp"
#include "run/run.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace sdpa_doctor::run {

namespace fs = std::filesystem;

namespace {

// Bumped whenever the oracle's arithmetic or file layout changes: old files then never match.
constexpr std::string_view k_oracle_format = "sdpa-doctor oracle f64 v2"; // v2: blocked oracle

struct Fnv1a {
  uint64_t h = 1469598103934665603ULL;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  }
  void add(std::string_view s) { add(s.data(), s.size()); }
  // Word by word: every byte still counts, at an eighth of the multiplies (inputs are 100s of MiB).
  void add(const std::vector<float>& v) {
    const size_t words = v.size() / 2;
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < words; ++i) {
      uint64_t w;
      std::memcpy(&w, p + i * 8, 8);
      h = (h ^ w) * 1099511628211ULL;
    }
    add(p + words * 8, v.size() * sizeof(float) - words * 8);
  }
};

// `from` at `to`: a hard link where both are on one file system, else a copy; via a temporary
// name and a rename, so a reader never sees half a file.
bool place(const fs::path& from, const fs::path& to) {
  const fs::path tmp = to.string() + fmt::format(".tmp-{}", ::getpid());
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_hard_link(from, tmp, ec);
  if (ec) {
    ec.clear();
    fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);
  }
  if (!ec) fs::rename(tmp, to, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

} // namespace

std::string oracle_cache_key(const Case& c, const HostInputs& inputs) {
  Fnv1a hash;
  hash.add(k_oracle_format);
  hash.add(to_json(c).dump());
  hash.add(inputs.q);
  hash.add(inputs.k);
  hash.add(inputs.v);
  hash.add(inputs.mask);
  return fmt::format("{}-{:016x}", c.id(), hash.h);
}

std::string default_oracle_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/')
    return (fs::path(xdg) / "sdpa-doctor" / "oracle").string();
  if (const char* home = std::getenv("HOME"); home && *home == '/')
    return (fs::path(home) / ".cache" / "sdpa-doctor" / "oracle").string();
  return {};
}

OracleCache::OracleCache(std::string dir, int64_t max_bytes, fs::file_time_type run_started)
    : m_dir(std::move(dir)), m_max_bytes(max_bytes), m_run_started(run_started) {}

bool OracleCache::fetch(const std::string& key, int64_t bytes, const std::string& dest) const {
  if (!enabled()) return false;
  const fs::path file = fs::path(m_dir) / (key + ".f64");
  std::error_code ec;
  if (int64_t(fs::file_size(file, ec)) != bytes || ec) return false;
  if (!place(file, dest)) return false;
  fs::last_write_time(file, fs::file_time_type::clock::now(), ec); // most recently used
  return true;
}

bool OracleCache::store(const std::string& key, const std::string& file) const {
  if (!enabled()) return false;
  std::error_code ec;
  fs::create_directories(m_dir, ec);
  const fs::path added = fs::path(m_dir) / (key + ".f64");
  if (ec || !place(file, added)) return false; // a cache, never an error
  fs::last_write_time(added, fs::file_time_type::clock::now(), ec); // a link keeps the source's time
  if (make_room(added)) return true;
  fs::remove(added, ec);
  return false;
}

bool OracleCache::make_room(const fs::path& added) const {
  struct Entry {
    fs::file_time_type used;
    int64_t bytes;
    fs::path path;
  };
  std::vector<Entry> older_runs;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(m_dir, ec)) {
    if (e.path().extension() != ".f64") continue;
    std::error_code ignored;
    const auto bytes = int64_t(e.file_size(ignored));
    const auto used = e.last_write_time(ignored);
    if (ignored) continue;
    total += bytes;
    if (used < m_run_started && e.path() != added) older_runs.push_back({used, bytes, e.path()});
  }
  std::sort(older_runs.begin(), older_runs.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& e : older_runs) {
    if (total <= m_max_bytes) break;
    std::error_code ignored;
    if (fs::remove(e.path, ignored)) total -= e.bytes;
  }
  return total <= m_max_bytes;
}

} // namespace sdpa_doctor::run

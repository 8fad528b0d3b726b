#include "run/oracle_cache.hpp"
#include "run/run.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace sdpa_doctor::run {

namespace fs = std::filesystem;

namespace {

// Bumped whenever the oracle's arithmetic or file layout changes: old files then never match.
constexpr std::string_view k_oracle_format = "sdpa-doctor oracle f64 v1";

struct Fnv1a {
  uint64_t h = 1469598103934665603ULL;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  }
  void add(std::string_view s) { add(s.data(), s.size()); }
  void add(const std::vector<float>& v) { add(v.data(), v.size() * sizeof(float)); }
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

OracleCache::OracleCache(std::string dir, int64_t max_bytes)
    : m_dir(std::move(dir)), m_max_bytes(max_bytes) {}

bool OracleCache::fetch(const std::string& key, int64_t bytes, const std::string& dest) const {
  if (!enabled()) return false;
  const fs::path file = fs::path(m_dir) / (key + ".f64");
  std::error_code ec;
  if (int64_t(fs::file_size(file, ec)) != bytes || ec) return false;
  if (!place(file, dest)) return false;
  fs::last_write_time(file, fs::file_time_type::clock::now(), ec); // most recently used
  return true;
}

void OracleCache::store(const std::string& key, const std::string& file) const {
  if (!enabled()) return;
  std::error_code ec;
  fs::create_directories(m_dir, ec);
  if (ec || !place(file, fs::path(m_dir) / (key + ".f64"))) return; // a cache, never an error
  evict();
}

void OracleCache::evict() const {
  struct Entry {
    fs::file_time_type used;
    int64_t bytes;
    fs::path path;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(m_dir, ec)) {
    if (e.path().extension() != ".f64") continue;
    std::error_code ignored;
    const auto bytes = int64_t(e.file_size(ignored));
    const auto used = e.last_write_time(ignored);
    if (ignored) continue;
    entries.push_back({used, bytes, e.path()});
    total += bytes;
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& e : entries) {
    if (total <= m_max_bytes) break;
    std::error_code ignored;
    if (fs::remove(e.path, ignored)) total -= e.bytes;
  }
}

} // namespace sdpa_doctor::run

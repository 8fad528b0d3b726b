#include "run/oracle_cache.hpp"
#include "core/cache.hpp"
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
  // The doctor's oracles give fully masked rows 0 (workers under other semantics compute their
  // own): the key says so, and keys of cases without such rows stay as they were.
  if (c.masked_rows) hash.add(fmt::format("masked_rows={}", to_string(MaskedRowSemantics::zero)));
  hash.add(inputs.q);
  hash.add(inputs.k);
  hash.add(inputs.v);
  hash.add(inputs.mask);
  return fmt::format("{}-{:016x}", c.id(), hash.h);
}

std::string default_oracle_cache_dir() { return cache::folder("oracle"); }

OracleCache::OracleCache(std::string dir, int64_t max_bytes, fs::file_time_type run_started,
                         OracleCacheLocking locking)
    : m_dir(std::move(dir)), m_max_bytes(max_bytes), m_run_started(run_started),
      m_locking(std::move(locking)) {}

bool OracleCache::fetch(const std::string& key, int64_t bytes, const std::string& dest) const {
  if (!enabled()) return false;
  const fs::path file = fs::path(m_dir) / (key + ".f64");
  std::error_code ec;
  if (int64_t(fs::file_size(file, ec)) != bytes || ec) return false;
  if (!place(file, dest)) return false;
  cache::mark_used(file);
  return true;
}

bool OracleCache::store(const std::string& key, const std::string& file) const {
  if (!enabled()) return false;
  std::error_code ec;
  fs::create_directories(m_dir, ec);
  const fs::path added = fs::path(m_dir) / (key + ".f64");
  const cache::FolderLock lock(m_dir, m_locking.wait); // one run at a time makes room
  using State = cache::FolderLock::State;
  if (lock.state() == State::timed_out || lock.state() == State::interrupted) {
    // Another run kept it past the deadline (or an interrupt came): this run goes on without.
    if (m_locking.given_up) m_locking.given_up->store(true);
    return false;
  }
  if (ec || !place(file, added)) return false; // a cache, never an error
  cache::mark_used(added); // a link keeps the source's time
  if (cache::evict_least_recently_used(m_dir, ".f64", m_max_bytes, m_run_started)) return true;
  fs::remove(added, ec);
  return false;
}

} // namespace sdpa_doctor::run
